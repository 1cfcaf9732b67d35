//! `liftbridge serve`: the default mode — one node until SIGTERM/SIGINT.
//!
//! Accepts Liftbridge's own flags (`-c`, `-d`, `--embedded-nats`,
//! `--raft-bootstrap-seed`, `-p`, …) through the shared `LiftbridgeFlags`,
//! loads the configuration (file, `LIFTBRIDGE_*` env, flags), starts the
//! node and shuts it down gracefully on a signal, so every acknowledged
//! message is durable and the logs are closed cleanly.

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
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(cfg.logging.level.as_str()));
    // A subscriber may already be installed (embedding programs, tests).
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .try_init();
    // Mapped before the runtime starts so configuration errors come first.
    let node_cfg = NodeConfig::from_liftbridge(&cfg)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async move {
        let node = Node::start(node_cfg).await?;
        println!(
            "liftbridge {} serving gRPC on {}, NATS on {}",
            env!("CARGO_PKG_VERSION"),
            node.grpc_addr(),
            node.nats_addr()
        );
        wait_for_signal().await?;
        tracing::info!("shutting down");
        node.shutdown().await;
        Ok(())
    })
}

async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}
