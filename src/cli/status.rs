//! `liftbridge status`: health, brokers and streams of a running server.

use clap::Args;

use super::stream::{connect, runtime, status, DEFAULT_ADDR};
use crate::api::proto;

/// Arguments of `liftbridge status`.
#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    /// gRPC address of a liftbridge server.
    #[arg(long, default_value = DEFAULT_ADDR)]
    pub addr: String,
}

/// Runs the subcommand.
pub fn run(args: StatusArgs) -> anyhow::Result<()> {
    runtime()?.block_on(async {
        let mut c = connect(&args.addr).await?;
        let md = c
            .fetch_metadata(proto::FetchMetadataRequest::default())
            .await
            .map_err(status)?
            .into_inner();
        println!("server {} is up", args.addr);
        println!("brokers:");
        for b in &md.brokers {
            println!(
                "  {}  {}:{}  partitions {}  leading {}",
                b.id, b.host, b.port, b.partition_count, b.leader_count
            );
        }
        println!("streams: {}", md.stream_metadata.len());
        for s in &md.stream_metadata {
            let paused = s.partitions.values().filter(|p| p.paused).count();
            let msgs: i64 = s.partitions.values().map(|p| p.newest_offset + 1).sum();
            println!(
                "  {}  subject {}  partitions {} (paused {})  messages ≈{}",
                s.name,
                s.subject,
                s.partitions.len(),
                paused,
                msgs
            );
        }
        Ok(())
    })
}
