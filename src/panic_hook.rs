//! A panic hook that redacts: Rust's default hook prints the panic message as it is, and a
//! message that quotes a log line could carry a credential to stderr. `main` installs this one.
//!
//! Panics inside the pipeline and the scanner are caught and isolated there
//! ([`crate::isolation`]: the record is retried, then dead-lettered or skipped); this hook only
//! decides what reaches stderr, with the same redacted text.

use std::panic::PanicHookInfo;

use crate::redact::Redactor;

/// Replaces the process's panic hook with one that prints the redacted message, the thread and
/// the location (no backtrace unless `RUST_BACKTRACE` asks for one, as by default).
pub fn install() {
    // Compiled before any panic can happen, so the hook itself never builds it.
    let redactor = Redactor::builtin();
    std::panic::set_hook(Box::new(move |info| {
        let thread = std::thread::current();
        let line = describe(&redactor, info, thread.name().unwrap_or("<unnamed>"));
        eprintln!("{line}");
        if std::env::var_os("RUST_BACKTRACE").is_some_and(|v| v != "0") {
            eprintln!("{}", std::backtrace::Backtrace::force_capture());
        }
    }));
}

/// The line printed for a panic: the message with its secrets redacted.
pub fn describe(redactor: &Redactor, info: &PanicHookInfo<'_>, thread: &str) -> String {
    let message = crate::isolation::message(info.payload(), redactor);
    let location = info
        .location()
        .map(|l| format!(" at {}:{}", l.file(), l.line()))
        .unwrap_or_default();
    format!("faultline: thread '{thread}' panicked{location}: {message}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn a_panic_message_quoting_a_secret_is_redacted() {
        let secret = "hf_abcdefghijklmnopqrstuvwxyzABCDEFGH";
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&seen);
        let redactor = Redactor::builtin();
        // The hook is process-wide and other tests may panic meanwhile (panic isolation tests):
        // it is put back at once, and only this test's thread's lines are looked at.
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let thread = std::thread::current();
            let line = describe(&redactor, info, thread.name().unwrap_or("?"));
            sink.lock().unwrap_or_else(|p| p.into_inner()).push(line);
        }));
        let result = std::thread::Builder::new()
            .name("panic-hook-test".into())
            .spawn(move || {
                panic!("cannot parse line: HF_TOKEN={secret} while loading");
            })
            .map(|t| t.join());
        std::panic::set_hook(previous);
        assert!(matches!(result, Ok(Err(_))), "the thread panicked");
        let lines: Vec<String> = seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|l| l.contains("'panic-hook-test'"))
            .cloned()
            .collect();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(!lines[0].contains(secret), "{}", lines[0]);
        assert!(lines[0].contains("REDACTED"), "{}", lines[0]);
        assert!(lines[0].contains("cannot parse line"), "{}", lines[0]);
        assert!(lines[0].contains("panic_hook.rs"), "location: {}", lines[0]);
    }
}
