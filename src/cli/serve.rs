//! `liftbridge serve`: the default mode — one node until SIGTERM/SIGINT.
//!
//! Accepts Liftbridge's own flags (`-c`, `-d`, `--embedded-nats`,
//! `--raft-bootstrap-seed`, `-p`, …) through the shared `LiftbridgeFlags`,
//! loads the configuration (file, `LIFTBRIDGE_*` env, flags), starts the
//! node and shuts it down gracefully on a signal, so every acknowledged
//! message is durable and the logs are closed cleanly.
//!
//! Under systemd (`Type=notify`) it reports READY once every listener is up,
//! pings the watchdog, and reports STOPPING on the way out. SIGHUP re-reads
//! the configuration: an invalid file is refused (the running server keeps
//! its settings); the embedded NATS server applies what nats-server would
//! (users, permissions, TLS certificates, limits; see `nats::reload`) or
//! refuses the whole file; `logging.level` applies at once; the
//! authorization policy (`tls.client.authz.*`) is re-read, as Liftbridge
//! does; other keys take effect at the next start.

use anyhow::Context;
use clap::Args;

use crate::config::liftbridge::{load, LiftbridgeFlags};
use crate::node::{Node, NodeConfig};

/// Options of the server mode.
#[derive(Debug, Clone, Default, Args)]
pub struct ServeArgs {
    /// Liftbridge flags.
    #[command(flatten)]
    pub flags: LiftbridgeFlags,
}

/// Runs the server until it is told to stop.
pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let cfg = load(&args.flags).context("loading the configuration")?;
    // Memory freed after a load goes back to the system.
    crate::memory::start_trimmer();
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(log_filter(&cfg.logging)));
    let (filter, level_handle) = tracing_subscriber::reload::Layer::new(filter);
    // Log lines go to stderr (stdout carries the banner); colour only on a
    // terminal, so journald and log files get no escape codes.
    use std::io::IsTerminal;
    let ansi = std::io::stderr().is_terminal();
    // A subscriber may already be installed (embedding programs, tests).
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .with_target(false)
                .with_ansi(ansi)
                .with_writer(std::io::stderr),
        )
        .try_init();
    // Keys this server cannot honour stop the start; keys without effect
    // here are logged, never silently ignored.
    for notice in crate::config::audit::audit(&cfg)? {
        tracing::info!("{notice}");
    }
    // Mapped before the runtime starts so configuration errors come first.
    let node_cfg = NodeConfig::from_liftbridge(&cfg)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async move {
        // Handlers first: a supervisor may send SIGTERM as soon as READY
        // arrives, and a signal without a handler kills the process
        // before the logs are closed.
        let signals = Signals::install()?;
        let node = Node::start(node_cfg).await?;
        let listeners = banner_listeners(&node);
        println!("liftbridge {} {listeners}", env!("CARGO_PKG_VERSION"));
        crate::systemd::ready(&listeners);
        let watchdog = crate::systemd::spawn_watchdog(|| true);
        wait_for_signal(signals, &args.flags, &level_handle, &node).await?;
        crate::systemd::stopping();
        tracing::info!("shutting down");
        if let Some(w) = watchdog {
            w.abort();
        }
        node.shutdown().await;
        Ok(())
    })
}

/// The listeners in one line: `serving gRPC on A, NATS on B, HTTP on C`
/// (`external NATS <servers>` instead of `NATS on B` in external mode).
fn banner_listeners(node: &crate::node::NodeHandle) -> String {
    let nats = match node.external_nats() {
        Some(servers) => format!("external NATS {servers}"),
        None => format!("NATS on {}", node.nats_addr()),
    };
    let mut line = format!("serving gRPC on {}, {nats}", node.grpc_addr());
    if let Some(http) = node.http_addr() {
        line.push_str(&format!(", HTTP on {http}"));
    }
    line
}

/// The `tracing` filter for the `logging.*` keys: this crate at
/// `logging.level`; dependencies at warn (openraft's INFO lines dump whole
/// Raft states) unless `logging.raft` asks for Raft internals; the embedded
/// NATS server's own lines at warn unless `logging.nats` is set, as
/// Liftbridge logs its embedded NATS server only when asked.
pub fn log_filter(logging: &crate::config::liftbridge::LoggingConfig) -> String {
    let level = logging.level.as_str();
    let mut directives = vec![format!("warn,liftbridge={level}")];
    if logging.raft {
        directives.push(format!("openraft={level}"));
    }
    if !logging.nats {
        directives.push("liftbridge::nats=warn".to_string());
    }
    directives.join(",")
}

/// Changes the log filter of the running server.
type LevelHandle =
    tracing_subscriber::reload::Handle<tracing_subscriber::EnvFilter, tracing_subscriber::Registry>;

/// SIGHUP: re-reads the configuration; the embedded NATS server takes its
/// new options (users, permissions, TLS certificates, limits — as
/// nats-server reloads them) and the log level applies. A file that does
/// not load, or a NATS change that cannot apply at run time, changes
/// nothing and is logged.
async fn reload(flags: &LiftbridgeFlags, level: &LevelHandle, node: &crate::node::NodeHandle) {
    let cfg = match load(flags) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "configuration not reloaded");
            return;
        }
    };
    let nats = match NodeConfig::from_liftbridge(&cfg) {
        Ok(n) => n.nats,
        Err(e) => {
            tracing::error!(error = %e, "configuration not reloaded");
            return;
        }
    };
    match node.reload_nats(nats).await {
        Ok(lines) => {
            for l in lines {
                tracing::info!("{l}");
            }
        }
        Err(e) => {
            tracing::error!(
                "Failed to reload server configuration: {e}; configuration not reloaded"
            );
            return;
        }
    }
    let filter = tracing_subscriber::EnvFilter::new(log_filter(&cfg.logging));
    match level.reload(filter) {
        Ok(()) => tracing::info!(level = cfg.logging.level.as_str(), "configuration reloaded"),
        Err(e) => tracing::warn!(error = %e, "log level not changed"),
    }
    tracing::info!("Reloaded server configuration");
}

/// The signals the server handles, installed before start-up completes.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> anyhow::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            term: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
            int: signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
            hup: signal(SignalKind::hangup()).context("installing the SIGHUP handler")?,
        })
    }
}

/// Waits for SIGTERM or SIGINT; SIGHUP reloads what can change at run time.
async fn wait_for_signal(
    signals: Signals,
    flags: &LiftbridgeFlags,
    level: &LevelHandle,
    node: &crate::node::NodeHandle,
) -> anyhow::Result<()> {
    let Signals {
        mut term,
        mut int,
        mut hup,
    } = signals;
    loop {
        tokio::select! {
            _ = term.recv() => return Ok(()),
            _ = int.recv() => return Ok(()),
            _ = hup.recv() => {
                crate::systemd::reloading();
                reload(flags, level, node).await;
                // As Liftbridge: SIGHUP re-reads the authorization policy.
                match node.reload_authz().await {
                    Ok(true) => tracing::info!("reloaded authorization permissions"),
                    Ok(false) => {}
                    Err(e) => tracing::error!(error = %e, "authorization permissions not reloaded; the previous policy stays in force"),
                }
                crate::systemd::reloaded();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::liftbridge::{LogLevel, LoggingConfig};

    fn logging(level: LogLevel, raft: bool, nats: bool) -> LoggingConfig {
        LoggingConfig {
            level,
            recovery: false,
            raft,
            nats,
        }
    }

    #[test]
    fn dependencies_stay_at_warn_unless_asked() {
        let f = log_filter(&logging(LogLevel::Info, false, false));
        assert_eq!(f, "warn,liftbridge=info,liftbridge::nats=warn");
        let f = log_filter(&logging(LogLevel::Debug, true, true));
        assert_eq!(f, "warn,liftbridge=debug,openraft=debug");
        // Every produced filter parses.
        for raft in [false, true] {
            for nats in [false, true] {
                let f = log_filter(&logging(LogLevel::Trace, raft, nats));
                tracing_subscriber::EnvFilter::try_new(&f).expect("valid filter");
            }
        }
    }
}
