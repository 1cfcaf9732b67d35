//! Command line entry point.
//!
//! Two grammars share the binary:
//! - the `liftbridge` command line (clap), whose default action is `serve`;
//! - the `nats-server` compatibility mode, chosen when the program is invoked
//!   as `nats-server` (a symlink) or as `liftbridge nats-server ARGS…`. Its
//!   Go-style flags (`-js`, `-sd`, `-p -1`) do not fit clap, so it has its own
//!   parser in `nats_server`.

use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub mod bench;
pub mod cert;
pub mod check;
pub mod nats_server;
pub mod publish;
pub mod serve;
pub mod status;
pub mod stream;
pub mod subscribe;

/// A durable, replayable log for NATS in one binary.
#[derive(Debug, Parser)]
#[command(name = "liftbridge", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Server options (used when no subcommand is given, or with `serve`).
    #[command(flatten)]
    pub serve: serve::ServeArgs,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the server (the default when no subcommand is given).
    Serve(serve::ServeArgs),
    /// Run as nats-server would, accepting its flags and config file syntax.
    #[command(name = "nats-server", disable_help_flag = true)]
    NatsServer {
        /// nats-server style arguments, e.g. `-p -1 -js -sd DIR`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
    /// Generate development TLS certificates (a CA, a server and a client cert).
    Cert(cert::CertArgs),
    /// Run load benchmarks, side by side with nats-server when it is on PATH.
    Bench(bench::BenchArgs),
    /// Create, list, describe, pause, make readonly or delete streams.
    Stream(stream::StreamArgs),
    /// Publish messages to a stream.
    #[command(name = "pub")]
    Pub(publish::PubArgs),
    /// Read messages from a stream.
    #[command(name = "sub")]
    Sub(subscribe::SubArgs),
    /// Show the state of a server.
    Status(status::StatusArgs),
    /// Verify a stopped node's data directory offline: every record's
    /// checksum and structure, each partition's last good offset, the
    /// metadata file. Exit status 0 when all is well.
    Check(check::CheckArgs),
    /// Truncate damaged partitions of a stopped node's data directory to
    /// their last good record (the damaged file is kept).
    Repair(check::RepairArgs),
}

/// Runs the command line given the full argv (program name first).
pub fn main(argv: Vec<OsString>) -> ExitCode {
    let invoked_as = argv
        .first()
        .and_then(|a| Path::new(a).file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if invoked_as == "nats-server" {
        return nats_server::run(argv.into_iter().skip(1).collect());
    }
    let cli = Cli::parse_from(argv);
    let result = match cli.command {
        None => serve::run(cli.serve),
        Some(Command::Serve(args)) => serve::run(args),
        Some(Command::NatsServer { args }) => return nats_server::run(args),
        Some(Command::Cert(args)) => cert::run(args),
        Some(Command::Bench(args)) => bench::run(args),
        Some(Command::Stream(args)) => stream::run(args),
        Some(Command::Pub(args)) => publish::run(args),
        Some(Command::Sub(args)) => subscribe::run(args),
        Some(Command::Status(args)) => status::run(args),
        Some(Command::Check(args)) => return check::run_check(args),
        Some(Command::Repair(args)) => return check::run_repair(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("liftbridge: {}", error_text(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes joined by `: `, skipping a cause whose text the
/// message already carries (our error types often show their source in
/// their own text; printing it again would repeat it once per level).
fn error_text(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let part = cause.to_string();
        if text.contains(&part) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::error_text;

    #[derive(Debug, thiserror::Error)]
    enum Outer {
        #[error("outer: {0}")]
        Wraps(#[from] std::io::Error),
    }

    #[test]
    fn error_text_joins_causes_once() {
        let plain = anyhow::Error::new(std::io::Error::other("disk")).context("reading x");
        assert_eq!(error_text(&plain), "reading x: disk");
        let wrapped = anyhow::Error::new(Outer::from(std::io::Error::other("disk")));
        assert_eq!(error_text(&wrapped), "outer: disk");
        let both = wrapped.context("starting");
        assert_eq!(error_text(&both), "starting: outer: disk");
    }
}
