//! Failure isolation, one way for every driver: run a piece of work with its panic caught,
//! turn the panic into a message with its secrets redacted (a panic message may quote a log
//! line), and retry with fresh state a bounded number of times.
//!
//! `scan` retries a chunk once with a fresh worker and then skips it; the pipeline's match
//! stage retries a batch, then its records one by one, and dead-letters a record that panics
//! alone; the panic hook prints the same redacted text. No input should make faultline panic
//! (the fuzz targets hold decoding, scanning and multiline assembly to that): this is the
//! safety net behind them.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::redact::Redactor;

/// The text of a panic payload, as written by `panic!`.
pub fn payload_text(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic without a text message")
}

/// A panic's message with its secrets redacted.
pub fn message(payload: &(dyn Any + Send), redactor: &Redactor) -> String {
    redactor.redact_str(payload_text(payload)).into_owned()
}

/// Runs `work`, catching a panic: `Err` holds its redacted message.
pub fn catch<T>(redactor: &Redactor, work: impl FnOnce() -> T) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(work)).map_err(|payload| message(payload.as_ref(), redactor))
}

/// What [`retry`] ended with.
#[derive(Debug)]
pub struct Retried<T> {
    /// The result of the first attempt that did not panic; `None` when every one did.
    pub value: Option<T>,
    /// The redacted message of each attempt that panicked, in order.
    pub panics: Vec<String>,
}

/// Runs `attempt` on `state` up to `tries` times while it panics; before each retry, `reset`
/// rebuilds the state the panic may have left mid-update (a worker's scratch and buffers). An
/// error of `attempt` or `reset` ends it at once: errors are not panics and are not retried.
pub fn retry<S, T, E>(
    tries: usize,
    redactor: &Redactor,
    state: &mut S,
    mut attempt: impl FnMut(&mut S) -> Result<T, E>,
    mut reset: impl FnMut(&mut S) -> Result<(), E>,
) -> Result<Retried<T>, E> {
    let mut panics = Vec::new();
    while panics.len() < tries {
        match catch(redactor, || attempt(state)) {
            Ok(Ok(value)) => {
                return Ok(Retried {
                    value: Some(value),
                    panics,
                })
            }
            Ok(Err(e)) => return Err(e),
            Err(message) => {
                panics.push(message);
                reset(state)?;
            }
        }
    }
    Ok(Retried {
        value: None,
        panics,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_a_redacted_message() {
        let r = Redactor::builtin();
        let secret = "hf_abcdefghijklmnopqrstuvwxyzABCDEFGH";
        let e = catch(&r, || panic!("bad line HF_TOKEN={secret}")).expect_err("panicked");
        assert!(!e.contains(secret) && e.contains("bad line"), "{e}");
        assert_eq!(catch(&r, || 7), Ok(7));
    }

    #[test]
    fn retries_after_a_reset_and_gives_up_after_the_last_try() {
        let r = Redactor::builtin();
        // (calls, resets)
        let mut state = (0u32, 0u32);
        let out: Retried<u32> = retry(
            2,
            &r,
            &mut state,
            |s| {
                s.0 += 1;
                if s.0 == 1 {
                    panic!("first");
                }
                Ok::<_, ()>(s.0)
            },
            |s| {
                s.1 += 1;
                Ok(())
            },
        )
        .expect("no error");
        assert_eq!((out.value, out.panics.len(), state.1), (Some(2), 1, 1));
        let out: Retried<()> = retry(
            2,
            &r,
            &mut (),
            |_| -> Result<(), ()> { panic!("always") },
            |_| Ok(()),
        )
        .expect("no error");
        assert_eq!((out.value, out.panics.len()), (None, 2));
        let err = retry(3, &r, &mut (), |_| Err::<(), _>("stop"), |_| Ok(()));
        assert_eq!(err.map(|_| ()), Err("stop"));
    }
}
