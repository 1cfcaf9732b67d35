//! `liftbridge status`: health, brokers and streams of a running server,
//! and with `--http` the metadata cluster as that server sees it (its role,
//! the controller, every member with its addresses) from `/api/v1/info`.

use clap::Args;

use super::stream::{connect, runtime, status, DEFAULT_ADDR};
use crate::api::proto;

/// Arguments of `liftbridge status`.
#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    /// gRPC address of a liftbridge server.
    #[arg(long, default_value = DEFAULT_ADDR)]
    pub addr: String,
    /// HTTP address (`host:port`) of the same server: adds the cluster view.
    #[arg(long)]
    pub http: Option<String>,
    /// Token for an HTTP port with `http.auth.token` set.
    #[arg(long, env = "LIFTBRIDGE_HTTP_TOKEN")]
    pub token: Option<String>,
}

/// GETs `path` from a plain-HTTP admin port and parses the JSON body.
async fn get_json(
    addr: &str,
    path: &str,
    token: Option<&str>,
) -> anyhow::Result<serde_json::Value> {
    use anyhow::Context;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to {addr}"))?;
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n")
            .as_bytes(),
    )
    .await?;
    let mut buf = Vec::new();
    // Bounded: the info document is a few KiB.
    s.take(4 << 20).read_to_end(&mut buf).await?;
    let text = String::from_utf8_lossy(&buf);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .context("malformed HTTP response")?;
    let status = head.split(' ').nth(1).unwrap_or("");
    if status != "200" {
        anyhow::bail!("GET {path} on {addr}: HTTP {status}: {body}");
    }
    serde_json::from_str(body).context("the response is not JSON")
}

fn print_cluster(info: &serde_json::Value) {
    let c = &info["cluster"];
    let s = |v: &serde_json::Value| v.as_str().unwrap_or("-").to_string();
    println!(
        "cluster: this node {} is {}; controller {}",
        s(&info["server_id"]),
        s(&c["role"]),
        s(&c["controller"])
    );
    for n in c["nodes"].as_array().into_iter().flatten() {
        println!(
            "  {}  {}  grpc {}:{}  nats {}  http {}",
            s(&n["server_id"]),
            if n["voter"].as_bool() == Some(true) {
                "voter  "
            } else {
                "learner"
            },
            s(&n["host"]),
            n["port"],
            s(&n["nats_addr"]),
            s(&n["http_addr"]),
        );
    }
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
        if let Some(http) = &args.http {
            let info = get_json(http, "/api/v1/info", args.token.as_deref()).await?;
            print_cluster(&info);
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
