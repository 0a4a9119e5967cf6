//! Test-only fault injection for the match stage ([`FaultInjection`]): proves the failure
//! isolation end to end.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::PipelineError;

/// Where an injected panic strikes.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultPoint {
    /// After the batch was decoded and counted, before it is scanned: nothing has gone out.
    Scan,
    /// After the record's first event was handed to the producer.
    AfterSend,
    /// Where [`FaultPoint::Scan`] strikes, but the process aborts (`std::process::abort`, as a
    /// crash in native code would): no panic handler catches it, only the crash notes.
    Abort,
    /// Where [`FaultPoint::Scan`] strikes, but the stage returns an error (as a lost output
    /// would make it): the stage stops, and the pipeline with it.
    Fail,
}

/// Test-only fault injection: the matcher panics (or, at [`FaultPoint::Abort`], aborts the
/// process) on records whose payload holds `marker`, to prove the failure isolation end to end.
/// Only [`start_with_faults`] takes it; `faultline run` calls [`start`], and no file, flag or
/// environment variable can set it, so it cannot trigger in production. The tests that abort
/// run the pipeline in a child process of the test binary itself (`tests/it/kafka/poison.rs`),
/// not in the `faultline` binary.
#[doc(hidden)]
#[derive(Debug, Clone)]
pub struct FaultInjection {
    pub marker: Vec<u8>,
    pub point: FaultPoint,
    /// Panics left; `None`: every time.
    pub times: Option<Arc<AtomicUsize>>,
}

impl FaultInjection {
    pub(super) fn strike(
        &self,
        point: FaultPoint,
        payload: Option<&[u8]>,
    ) -> Result<(), PipelineError> {
        if point != self.point
            || payload.is_none_or(|p| memchr::memmem::find(p, &self.marker).is_none())
        {
            return Ok(());
        }
        let now = match &self.times {
            None => true,
            Some(left) => left
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok(),
        };
        if now && point == FaultPoint::Abort {
            std::process::abort();
        }
        if now && point == FaultPoint::Fail {
            return Err(PipelineError::StageEnded(
                "injected fault: the record holds the test marker".into(),
            ));
        }
        if now {
            panic!("injected fault: the record holds the test marker");
        }
        Ok(())
    }
}
