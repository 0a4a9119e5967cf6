//! The bounded queue between a source and its stage: blocking with timeouts on both ends,
//! so neither side waits longer than it can afford (the source must get back to `poll` to serve
//! the consumer group; the matcher must notice a failed delivery).

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

struct State<T> {
    items: VecDeque<T>,
    sender_gone: bool,
    receiver_gone: bool,
}

struct Shared<T> {
    state: Mutex<State<T>>,
    not_full: Condvar,
    not_empty: Condvar,
    capacity: usize,
}

impl<T> Shared<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The sending half; dropping it closes the queue once it is drained.
pub struct Sender<T>(Arc<Shared<T>>);

/// The receiving half; dropping it makes every send fail.
pub struct Receiver<T>(Arc<Shared<T>>);

/// Why a send did not happen; the item comes back.
#[derive(Debug, PartialEq, Eq)]
pub enum SendError<T> {
    /// The queue stayed full until the timeout.
    Full(T),
    /// The receiver is gone.
    Closed(T),
}

/// Why a receive returned nothing.
#[derive(Debug, PartialEq, Eq)]
pub enum RecvError {
    /// No item arrived before the timeout.
    Timeout,
    /// The sender is gone and every item was received.
    Closed,
}

/// A queue of at most `capacity` items (at least 1).
pub fn bounded<T>(capacity: usize) -> (Sender<T>, Receiver<T>) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            items: VecDeque::new(),
            sender_gone: false,
            receiver_gone: false,
        }),
        not_full: Condvar::new(),
        not_empty: Condvar::new(),
        capacity: capacity.max(1),
    });
    (Sender(Arc::clone(&shared)), Receiver(shared))
}

impl<T> Sender<T> {
    /// Sends, waiting up to `timeout` for room.
    pub fn send_timeout(&self, item: T, timeout: Duration) -> Result<(), SendError<T>> {
        let deadline = Instant::now() + timeout;
        let mut s = self.0.lock();
        loop {
            if s.receiver_gone {
                return Err(SendError::Closed(item));
            }
            if s.items.len() < self.0.capacity {
                s.items.push_back(item);
                drop(s);
                self.0.not_empty.notify_one();
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(SendError::Full(item));
            }
            s = self
                .0
                .not_full
                .wait_timeout(s, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        self.0.lock().sender_gone = true;
        self.0.not_empty.notify_all();
    }
}

impl<T> Receiver<T> {
    /// Receives, waiting up to `timeout` for an item.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<T, RecvError> {
        let deadline = Instant::now() + timeout;
        let mut s = self.0.lock();
        loop {
            if let Some(item) = s.items.pop_front() {
                drop(s);
                self.0.not_full.notify_one();
                return Ok(item);
            }
            if s.sender_gone {
                return Err(RecvError::Closed);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(RecvError::Timeout);
            }
            s = self
                .0
                .not_empty
                .wait_timeout(s, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        self.0.lock().receiver_gone = true;
        self.0.not_full.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_in_order_and_closes() {
        let (tx, rx) = bounded(2);
        tx.send_timeout(1, Duration::ZERO).expect("room");
        tx.send_timeout(2, Duration::ZERO).expect("room");
        assert_eq!(tx.send_timeout(3, Duration::ZERO), Err(SendError::Full(3)));
        assert_eq!(rx.recv_timeout(Duration::ZERO), Ok(1));
        tx.send_timeout(3, Duration::ZERO).expect("room again");
        drop(tx);
        assert_eq!(rx.recv_timeout(Duration::ZERO), Ok(2));
        assert_eq!(rx.recv_timeout(Duration::ZERO), Ok(3));
        assert_eq!(rx.recv_timeout(Duration::ZERO), Err(RecvError::Closed));
    }

    #[test]
    fn a_blocked_sender_wakes_when_room_is_made() {
        let (tx, rx) = bounded(1);
        tx.send_timeout(0, Duration::ZERO).expect("room");
        let t = std::thread::spawn(move || {
            tx.send_timeout(1, Duration::from_secs(30)).expect("woken");
        });
        assert_eq!(rx.recv_timeout(Duration::from_secs(30)), Ok(0));
        assert_eq!(rx.recv_timeout(Duration::from_secs(30)), Ok(1));
        t.join().expect("sender");
    }

    #[test]
    fn sends_fail_once_the_receiver_is_gone() {
        let (tx, rx) = bounded(1);
        drop(rx);
        assert_eq!(
            tx.send_timeout(7, Duration::ZERO),
            Err(SendError::Closed(7))
        );
    }
}
