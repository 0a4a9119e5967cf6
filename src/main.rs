//! The `faultline` binary: parse the command line and run it.

use std::process::ExitCode;

fn main() -> ExitCode {
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
