//! `liftbridge pub`: publish messages to a stream through the gRPC API,
//! from arguments or from stdin (one message per line).

use std::collections::HashMap;
use std::time::Duration;

use clap::{Args, ValueEnum};

use super::stream::{connect, runtime, status, DEFAULT_ADDR};
use crate::api::proto;

/// Ack policy names on the command line.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum AckPolicyArg {
    /// Ack once the leader has written the message.
    Leader,
    /// Ack once every in-sync replica has it.
    All,
    /// No ack (fire and forget).
    None,
}

impl From<AckPolicyArg> for proto::AckPolicy {
    fn from(a: AckPolicyArg) -> Self {
        match a {
            AckPolicyArg::Leader => proto::AckPolicy::Leader,
            AckPolicyArg::All => proto::AckPolicy::All,
            AckPolicyArg::None => proto::AckPolicy::None,
        }
    }
}

/// Arguments of `liftbridge pub`.
#[derive(Debug, Clone, Args)]
pub struct PubArgs {
    /// gRPC address of a liftbridge server.
    #[arg(long, default_value = DEFAULT_ADDR)]
    pub addr: String,
    /// Stream name.
    pub stream: String,
    /// Messages; when none are given, stdin is read line by line.
    pub messages: Vec<String>,
    /// Partition.
    #[arg(short, long, default_value_t = 0)]
    pub partition: i32,
    /// Message key.
    #[arg(short, long)]
    pub key: Option<String>,
    /// Header `name=value` (repeatable).
    #[arg(short = 'H', long = "header")]
    pub headers: Vec<String>,
    /// Ack policy.
    #[arg(long, value_enum, default_value = "leader")]
    pub ack_policy: AckPolicyArg,
    /// How long to wait for each ack.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "5s")]
    pub timeout: Duration,
}

/// Runs the subcommand.
pub fn run(args: PubArgs) -> anyhow::Result<()> {
    runtime()?.block_on(run_async(args))
}

async fn run_async(args: PubArgs) -> anyhow::Result<()> {
    let mut headers = HashMap::new();
    for h in &args.headers {
        let Some((k, v)) = h.split_once('=') else {
            anyhow::bail!("header {h:?} is not name=value");
        };
        headers.insert(k.to_string(), bytes::Bytes::copy_from_slice(v.as_bytes()));
    }
    let mut c = connect(&args.addr).await?;
    let policy: proto::AckPolicy = args.ack_policy.into();
    let mut send = async |value: Vec<u8>| -> anyhow::Result<()> {
        let mut req = tonic::Request::new(proto::PublishRequest {
            key: args.key.clone().map(bytes::Bytes::from).unwrap_or_default(),
            value: value.into(),
            stream: args.stream.clone(),
            partition: args.partition,
            headers: headers.clone(),
            ack_policy: policy as i32,
            expected_offset: -1,
            ..Default::default()
        });
        req.set_timeout(args.timeout);
        let resp = c.publish(req).await.map_err(status)?.into_inner();
        match resp.ack {
            Some(a) => println!("offset {}", a.offset),
            None => println!("published"),
        }
        Ok(())
    };
    if args.messages.is_empty() {
        use tokio::io::AsyncBufReadExt;
        let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
        while let Some(line) = lines.next_line().await? {
            send(line.into_bytes()).await?;
        }
    } else {
        for m in &args.messages {
            send(m.clone().into_bytes()).await?;
        }
    }
    Ok(())
}
