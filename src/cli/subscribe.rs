//! `liftbridge sub`: read a stream partition through the gRPC API and print
//! one line per message: offset, time, key, value.

use std::time::Duration;

use clap::Args;
use futures::StreamExt;

use super::stream::{connect, runtime, status, DEFAULT_ADDR};
use crate::api::proto;

/// Arguments of `liftbridge sub`.
#[derive(Debug, Clone, Args)]
pub struct SubArgs {
    /// gRPC address of a liftbridge server.
    #[arg(long, default_value = DEFAULT_ADDR)]
    pub addr: String,
    /// Stream name.
    pub stream: String,
    /// Partition.
    #[arg(short, long, default_value_t = 0)]
    pub partition: i32,
    /// Start at the oldest message.
    #[arg(long, group = "start")]
    pub earliest: bool,
    /// Start at the newest message.
    #[arg(long, group = "start")]
    pub latest: bool,
    /// Start at this offset.
    #[arg(long, group = "start")]
    pub offset: Option<i64>,
    /// Start at messages received in the last DURATION (e.g. `10m`).
    #[arg(long, group = "start", value_parser = humantime::parse_duration)]
    pub since: Option<Duration>,
    /// Start at this time (RFC 3339).
    #[arg(long, group = "start")]
    pub time: Option<String>,
    /// Stop after this offset.
    #[arg(long, group = "stop")]
    pub stop_offset: Option<i64>,
    /// Stop at the newest message present when subscribing.
    #[arg(long, group = "stop")]
    pub stop_latest: bool,
    /// Stop at this time (RFC 3339).
    #[arg(long, group = "stop")]
    pub stop_time: Option<String>,
    /// Exit after this many messages.
    #[arg(short = 'n', long)]
    pub count: Option<u64>,
    /// Resume the partition if it is paused.
    #[arg(long)]
    pub resume: bool,
}

fn parse_time(s: &str) -> anyhow::Result<i64> {
    let t = chrono::DateTime::parse_from_rfc3339(s)
        .map_err(|e| anyhow::anyhow!("bad time {s:?}: {e}"))?;
    t.timestamp_nanos_opt()
        .ok_or_else(|| anyhow::anyhow!("time {s:?} out of range"))
}

/// Builds the request from the flags.
pub fn request(args: &SubArgs) -> anyhow::Result<proto::SubscribeRequest> {
    use proto::{StartPosition as S, StopPosition as P};
    let mut r = proto::SubscribeRequest {
        stream: args.stream.clone(),
        partition: args.partition,
        resume: args.resume,
        ..Default::default()
    };
    if args.earliest {
        r.start_position = S::Earliest as i32;
    } else if args.latest {
        r.start_position = S::Latest as i32;
    } else if let Some(o) = args.offset {
        r.start_position = S::Offset as i32;
        r.start_offset = o;
    } else if let Some(d) = args.since {
        r.start_position = S::Timestamp as i32;
        r.start_timestamp =
            chrono::Utc::now().timestamp_nanos_opt().unwrap_or(0) - d.as_nanos() as i64;
    } else if let Some(t) = &args.time {
        r.start_position = S::Timestamp as i32;
        r.start_timestamp = parse_time(t)?;
    }
    if let Some(o) = args.stop_offset {
        r.stop_position = P::StopOffset as i32;
        r.stop_offset = o;
    } else if args.stop_latest {
        r.stop_position = P::StopLatest as i32;
    } else if let Some(t) = &args.stop_time {
        r.stop_position = P::StopTimestamp as i32;
        r.stop_timestamp = parse_time(t)?;
    }
    Ok(r)
}

/// Runs the subcommand.
pub fn run(args: SubArgs) -> anyhow::Result<()> {
    runtime()?.block_on(run_async(args))
}

async fn run_async(args: SubArgs) -> anyhow::Result<()> {
    let req = request(&args)?;
    let mut c = connect(&args.addr).await?;
    let mut stream = c.subscribe(req).await.map_err(status)?.into_inner();
    // The first message only confirms the subscription.
    match stream.next().await {
        Some(Ok(_)) => {}
        Some(Err(s)) => return Err(status(s)),
        None => return Ok(()),
    }
    let mut n = 0u64;
    while let Some(item) = stream.next().await {
        let m = match item {
            Ok(m) => m,
            // The normal end of a bounded subscription.
            Err(s) if s.code() == tonic::Code::ResourceExhausted => {
                eprintln!("{}", s.message());
                break;
            }
            Err(s) => return Err(status(s)),
        };
        let t = chrono::DateTime::from_timestamp(
            m.timestamp / 1_000_000_000,
            (m.timestamp % 1_000_000_000) as u32,
        )
        .map(|t| t.to_rfc3339())
        .unwrap_or_default();
        println!(
            "{}\t{}\t{}\t{}",
            m.offset,
            t,
            String::from_utf8_lossy(&m.key),
            String::from_utf8_lossy(&m.value)
        );
        n += 1;
        if args.count.is_some_and(|c| n >= c) {
            break;
        }
    }
    Ok(())
}
