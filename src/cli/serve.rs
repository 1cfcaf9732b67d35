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
//! its settings) and `logging.level` applies at once; other keys take effect
//! at the next start.

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
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(cfg.logging.level.as_str()));
    let (filter, level_handle) = tracing_subscriber::reload::Layer::new(filter);
    // A subscriber may already be installed (embedding programs, tests).
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(tracing_subscriber::fmt::layer().with_target(false))
        .try_init();
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
        println!(
            "liftbridge {} serving gRPC on {}, NATS on {}",
            env!("CARGO_PKG_VERSION"),
            node.grpc_addr(),
            node.nats_addr()
        );
        crate::systemd::ready(&format!(
            "serving gRPC on {}, NATS on {}",
            node.grpc_addr(),
            node.nats_addr()
        ));
        let watchdog = crate::systemd::spawn_watchdog(|| true);
        wait_for_signal(signals, &args.flags, &level_handle).await?;
        crate::systemd::stopping();
        tracing::info!("shutting down");
        if let Some(w) = watchdog {
            w.abort();
        }
        node.shutdown().await;
        Ok(())
    })
}

/// Changes the log filter of the running server.
type LevelHandle =
    tracing_subscriber::reload::Handle<tracing_subscriber::EnvFilter, tracing_subscriber::Registry>;

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
                match load(flags) {
                    Ok(cfg) => {
                        let filter = tracing_subscriber::EnvFilter::new(cfg.logging.level.as_str());
                        match level.reload(filter) {
                            Ok(()) => tracing::info!(level = cfg.logging.level.as_str(), "configuration reloaded"),
                            Err(e) => tracing::warn!(error = %e, "log level not changed"),
                        }
                    }
                    Err(e) => tracing::error!(error = %format!("{e:#}"), "configuration not reloaded"),
                }
                crate::systemd::reloaded();
            }
        }
    }
}
