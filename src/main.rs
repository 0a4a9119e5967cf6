//! The `faultline` binary: parse the command line and run it.

use std::process::ExitCode;

fn main() -> ExitCode {
    cap_malloc_arenas();
    faultline::panic_hook::install();
    let cli = <faultline::cli::Cli as clap::Parser>::parse();
    match faultline::cli::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("faultline: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Caps glibc's malloc at two arenas, before any thread starts, unless `MALLOC_ARENA_MAX` says
/// otherwise. With the default (8 per core), memory freed after a catch-up (full prefetch and
/// batch queues on librdkafka's and tokio's threads) stayed in the threads' arenas: in the
/// 2-minute soak the RSS of a member rose from 133 to 193 MiB over two SIGKILLs of its peer
/// (max/min 1.45); with two arenas 114 to 135 MiB (1.19), at the same throughput
/// (docs/limits.md).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn cap_malloc_arenas() {
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets an allocator parameter; called before any other thread.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
        }
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn cap_malloc_arenas() {}
