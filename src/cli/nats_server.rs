//! The `nats-server` compatibility mode: Go-style flags, NATS config files,
//! nats-server's log format, pid and ports files.

use std::ffi::OsString;
use std::process::ExitCode;

/// Runs nats-server compatibility mode with the arguments after the program name.
pub fn run(args: Vec<OsString>) -> ExitCode {
    eprintln!(
        "nats-server mode is not available yet ({} arguments)",
        args.len()
    );
    ExitCode::FAILURE
}
