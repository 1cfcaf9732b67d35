//! `liftbridge stream`: create, list, describe, pause, make readonly or
//! delete streams through the gRPC API of a running server.

use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use tonic::transport::Channel;

use crate::api::proto::{self, api_client::ApiClient};

/// Default address of the gRPC API.
pub const DEFAULT_ADDR: &str = "127.0.0.1:9292";

/// Arguments of `liftbridge stream`.
#[derive(Debug, Clone, Args)]
pub struct StreamArgs {
    /// gRPC address of a liftbridge server.
    #[arg(long, default_value = DEFAULT_ADDR, global = true)]
    pub addr: String,
    /// What to do.
    #[command(subcommand)]
    pub action: StreamAction,
}

/// Stream actions.
#[derive(Debug, Clone, Subcommand)]
pub enum StreamAction {
    /// Create a stream attached to a NATS subject.
    Create {
        /// Stream name.
        name: String,
        /// NATS subject (wildcards allowed); defaults to the name.
        #[arg(long)]
        subject: Option<String>,
        /// Number of partitions.
        #[arg(long, default_value_t = 1)]
        partitions: i32,
        /// Load-balance group (NATS queue group).
        #[arg(long, default_value = "")]
        group: String,
        /// Replication factor (-1 = all servers).
        #[arg(long, default_value_t = 1)]
        replication_factor: i32,
        /// Retention by age, e.g. `24h`.
        #[arg(long, value_parser = humantime::parse_duration)]
        retention_max_age: Option<Duration>,
        /// Retention by size in bytes.
        #[arg(long)]
        retention_max_bytes: Option<i64>,
        /// Retention by number of messages.
        #[arg(long)]
        retention_max_messages: Option<i64>,
        /// Keep only the latest message per key.
        #[arg(long)]
        compact: bool,
        /// Pause partitions idle for this long, e.g. `10m`.
        #[arg(long, value_parser = humantime::parse_duration)]
        auto_pause: Option<Duration>,
        /// Enable optimistic concurrency control.
        #[arg(long)]
        occ: bool,
    },
    /// List streams.
    List,
    /// Show a stream's partitions.
    Describe {
        /// Stream name.
        name: String,
    },
    /// Pause partitions (all unless --partition is given).
    Pause {
        /// Stream name.
        name: String,
        /// Partitions to pause (repeatable).
        #[arg(long = "partition")]
        partitions: Vec<i32>,
        /// Resume every partition when one is resumed by a publish.
        #[arg(long)]
        resume_all: bool,
    },
    /// Make partitions readonly (or writable again with --off).
    Readonly {
        /// Stream name.
        name: String,
        /// Partitions (repeatable; default all).
        #[arg(long = "partition")]
        partitions: Vec<i32>,
        /// Clear the readonly flag instead of setting it.
        #[arg(long)]
        off: bool,
    },
    /// Delete a stream and its data.
    Delete {
        /// Stream name.
        name: String,
    },
}

/// Builds a current-thread runtime for a client command.
pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// Connects to the gRPC API at `addr` (`host:port` or a URL).
pub async fn connect(addr: &str) -> anyhow::Result<ApiClient<Channel>> {
    let url = if addr.contains("://") {
        addr.to_string()
    } else {
        format!("http://{addr}")
    };
    let ch = Channel::from_shared(url.clone())
        .with_context(|| format!("bad address {addr}"))?
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .with_context(|| format!("connecting to {addr}"))?;
    Ok(ApiClient::new(ch).max_decoding_message_size(16 * 1024 * 1024))
}

fn ts(ns: i64) -> String {
    if ns == 0 {
        return "-".into();
    }
    chrono::DateTime::from_timestamp(ns / 1_000_000_000, (ns % 1_000_000_000) as u32)
        .map(|t| t.to_rfc3339())
        .unwrap_or_else(|| ns.to_string())
}

/// Runs the subcommand.
pub fn run(args: StreamArgs) -> anyhow::Result<()> {
    runtime()?.block_on(run_async(args))
}

async fn run_async(args: StreamArgs) -> anyhow::Result<()> {
    let mut c = connect(&args.addr).await?;
    match args.action {
        StreamAction::Create {
            name,
            subject,
            partitions,
            group,
            replication_factor,
            retention_max_age,
            retention_max_bytes,
            retention_max_messages,
            compact,
            auto_pause,
            occ,
        } => {
            let req = proto::CreateStreamRequest {
                subject: subject.unwrap_or_else(|| name.clone()),
                name: name.clone(),
                group,
                replication_factor,
                partitions,
                retention_max_age: retention_max_age.map(|d| proto::NullableInt64 {
                    value: d.as_millis() as i64,
                }),
                retention_max_bytes: retention_max_bytes
                    .map(|value| proto::NullableInt64 { value }),
                retention_max_messages: retention_max_messages
                    .map(|value| proto::NullableInt64 { value }),
                compact_enabled: compact.then_some(proto::NullableBool { value: true }),
                auto_pause_time: auto_pause.map(|d| proto::NullableInt64 {
                    value: d.as_millis() as i64,
                }),
                optimistic_concurrency_control: occ.then_some(proto::NullableBool { value: true }),
                ..Default::default()
            };
            c.create_stream(req).await.map_err(status)?;
            println!("created stream {name}");
        }
        StreamAction::List => {
            let md = c
                .fetch_metadata(proto::FetchMetadataRequest::default())
                .await
                .map_err(status)?
                .into_inner();
            println!("{:<24} {:<32} {:>10}", "NAME", "SUBJECT", "PARTITIONS");
            for s in md.stream_metadata {
                println!(
                    "{:<24} {:<32} {:>10}",
                    s.name,
                    s.subject,
                    s.partitions.len()
                );
            }
        }
        StreamAction::Describe { name } => {
            let md = c
                .fetch_metadata(proto::FetchMetadataRequest {
                    streams: vec![name.clone()],
                    groups: vec![],
                })
                .await
                .map_err(status)?
                .into_inner();
            let Some(s) = md.stream_metadata.into_iter().next() else {
                anyhow::bail!("no metadata returned for {name}");
            };
            if s.error == proto::stream_metadata::Error::UnknownStream as i32 {
                anyhow::bail!("unknown stream {name}");
            }
            println!(
                "stream {}  subject {}  created {}",
                s.name,
                s.subject,
                ts(s.creation_timestamp)
            );
            let mut parts: Vec<_> = s.partitions.into_values().collect();
            parts.sort_by_key(|p| p.id);
            println!(
                "{:>4} {:<24} {:>12} {:>12} {:>7} {:>9} {:<32}",
                "ID", "LEADER", "HW", "NEWEST", "PAUSED", "READONLY", "LAST MESSAGE"
            );
            for p in parts {
                let last = p
                    .messages_received_timestamps
                    .map(|t| t.latest_timestamp)
                    .unwrap_or(0);
                println!(
                    "{:>4} {:<24} {:>12} {:>12} {:>7} {:>9} {:<32}",
                    p.id,
                    p.leader,
                    p.high_watermark,
                    p.newest_offset,
                    p.paused,
                    p.readonly,
                    ts(last)
                );
            }
        }
        StreamAction::Pause {
            name,
            partitions,
            resume_all,
        } => {
            c.pause_stream(proto::PauseStreamRequest {
                name: name.clone(),
                partitions,
                resume_all,
            })
            .await
            .map_err(status)?;
            println!("paused {name}");
        }
        StreamAction::Readonly {
            name,
            partitions,
            off,
        } => {
            c.set_stream_readonly(proto::SetStreamReadonlyRequest {
                name: name.clone(),
                partitions,
                readonly: !off,
            })
            .await
            .map_err(status)?;
            println!("{name} is {}", if off { "writable" } else { "readonly" });
        }
        StreamAction::Delete { name } => {
            c.delete_stream(proto::DeleteStreamRequest { name: name.clone() })
                .await
                .map_err(status)?;
            println!("deleted {name}");
        }
    }
    Ok(())
}

/// Renders a gRPC status as a readable error.
pub(crate) fn status(s: tonic::Status) -> anyhow::Error {
    anyhow::anyhow!("{:?}: {}", s.code(), s.message())
}
