//! End-to-end NATS throughput and request/reply latency, our server against
//! Debian's `nats-server` (when on PATH), with the same raw-protocol load
//! generator (blocking sockets on OS threads, so the generator adds as
//! little overhead as possible).
//!
//! Run: `cargo bench --bench nats_throughput` (env `NATS_BENCH_MSGS` to
//! change the message count). Prints msgs/s per workload and the ratio.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const SIZE: usize = 128;

fn connect(addr: SocketAddr, extra: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_nodelay(true).ok();
    let mut r = BufReader::new(s.try_clone().expect("clone"));
    let mut line = String::new();
    r.read_line(&mut line).expect("INFO");
    s.write_all(
        format!(
            "CONNECT {{\"verbose\":false,\"pedantic\":false,\"protocol\":1}}\r\n{extra}PING\r\n"
        )
        .as_bytes(),
    )
    .expect("connect");
    line.clear();
    r.read_line(&mut line).expect("PONG");
    assert_eq!(line, "PONG\r\n", "unexpected {line:?}");
    s
}

fn pub_chunk(subject: &str, n: usize) -> Vec<u8> {
    let payload = vec![b'x'; SIZE];
    let mut v = Vec::new();
    for _ in 0..n {
        v.extend_from_slice(format!("PUB {subject} {SIZE}\r\n").as_bytes());
        v.extend_from_slice(&payload);
        v.extend_from_slice(b"\r\n");
    }
    v
}

/// Reads until `bytes` have arrived.
fn drain(mut s: TcpStream, bytes: usize) {
    let mut buf = vec![0u8; 256 * 1024];
    let mut got = 0;
    while got < bytes {
        let n = s.read(&mut buf).expect("read");
        assert!(n > 0, "closed after {got} of {bytes}");
        got += n;
    }
}

/// `pubs` publishers each send `msgs`; `subs` subscribers (queue group if
/// `queue`) receive. Returns delivered msgs/s.
fn pubsub(addr: SocketAddr, pubs: usize, subs: usize, queue: bool, msgs: usize) -> f64 {
    let sid_line = |i: usize| {
        if queue {
            format!("SUB bench q {i}\r\n")
        } else {
            format!("SUB bench {i}\r\n")
        }
    };
    // Frame size of one delivered MSG with a one-digit sid.
    let frame = format!("MSG bench 1 {SIZE}\r\n").len() + SIZE + 2;
    let total_delivered = if queue {
        pubs * msgs
    } else {
        pubs * msgs * subs
    };
    let sub_socks: Vec<TcpStream> = (0..subs).map(|i| connect(addr, &sid_line(i + 1))).collect();
    let start = Arc::new(Barrier::new(pubs + subs + 1));
    let mut handles = Vec::new();
    let per_sub: Vec<Option<usize>> = (0..subs)
        .map(|_| {
            if queue {
                None
            } else {
                Some(pubs * msgs * frame)
            }
        })
        .collect();
    let queue_counter = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for (s, want) in sub_socks.into_iter().zip(per_sub) {
        let b = start.clone();
        let qc = queue_counter.clone();
        handles.push(std::thread::spawn(move || {
            b.wait();
            match want {
                Some(bytes) => drain(s, bytes),
                None => {
                    let mut s = s;
                    let mut buf = vec![0u8; 256 * 1024];
                    let target = total_delivered * frame;
                    loop {
                        if qc.load(std::sync::atomic::Ordering::Relaxed) >= target {
                            break;
                        }
                        s.set_read_timeout(Some(Duration::from_millis(50))).ok();
                        match s.read(&mut buf) {
                            Ok(0) => break,
                            Ok(n) => {
                                qc.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
                            }
                            Err(_) => continue,
                        }
                    }
                }
            }
        }));
    }
    let chunk = Arc::new(pub_chunk("bench", 1000));
    for _ in 0..pubs {
        let mut s = connect(addr, "");
        let b = start.clone();
        let chunk = chunk.clone();
        handles.push(std::thread::spawn(move || {
            b.wait();
            for _ in 0..msgs / 1000 {
                s.write_all(&chunk).expect("publish");
            }
            // Closing after the last write is fine: the server reads
            // everything buffered before it sees the end of the stream.
        }));
    }
    start.wait();
    let t = Instant::now();
    for h in handles {
        h.join().expect("thread");
    }
    total_delivered as f64 / t.elapsed().as_secs_f64()
}

/// Request/reply round trips through a responder; returns (req/s, p50 µs, p99 µs).
fn request_reply(addr: SocketAddr, n: usize) -> (f64, f64, f64) {
    let responder = connect(addr, "SUB svc 1\r\n");
    let mut resp_w = responder.try_clone().expect("clone");
    std::thread::spawn(move || {
        let mut r = BufReader::new(responder);
        let mut line = String::new();
        let mut payload = vec![0u8; SIZE + 2];
        loop {
            line.clear();
            if r.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            // MSG svc 1 <reply> 128
            let parts: Vec<&str> = line.split_whitespace().collect();
            if parts.first() != Some(&"MSG") || parts.len() != 5 {
                continue;
            }
            if r.read_exact(&mut payload).is_err() {
                return;
            }
            let out = format!("PUB {} {SIZE}\r\n", parts[3]);
            let mut v = out.into_bytes();
            v.extend_from_slice(&payload);
            if resp_w.write_all(&v).is_err() {
                return;
            }
        }
    });
    let req = connect(addr, "SUB inbox.bench 1\r\n");
    let mut w = req.try_clone().expect("clone");
    let mut r = BufReader::new(req);
    let mut frame = format!("PUB svc inbox.bench {SIZE}\r\n").into_bytes();
    frame.extend_from_slice(&[b'r'; SIZE]);
    frame.extend_from_slice(b"\r\n");
    let mut lat = Vec::with_capacity(n);
    let mut line = String::new();
    let mut payload = vec![0u8; SIZE + 2];
    let t = Instant::now();
    for _ in 0..n {
        let t0 = Instant::now();
        w.write_all(&frame).expect("request");
        loop {
            line.clear();
            r.read_line(&mut line).expect("reply");
            if line.starts_with("MSG") {
                break;
            }
            if line.starts_with("PING") {
                w.write_all(b"PONG\r\n").ok();
            }
        }
        r.read_exact(&mut payload).expect("payload");
        lat.push(t0.elapsed().as_secs_f64() * 1e6);
    }
    let rate = n as f64 / t.elapsed().as_secs_f64();
    lat.sort_by(|a, b| a.total_cmp(b));
    (rate, lat[n / 2], lat[n * 99 / 100])
}

fn run_all(name: &str, addr: SocketAddr, msgs: usize, rr: usize) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    let mut rec = |k: &str, v: f64| {
        println!("{name:>12} {k:<28} {v:>14.0}");
        out.push((k.to_string(), v));
    };
    rec("1->1 128B msgs/s", pubsub(addr, 1, 1, false, msgs));
    rec(
        "1->4 fan-out deliveries/s",
        pubsub(addr, 1, 4, false, msgs / 4),
    );
    rec("4->1 fan-in msgs/s", pubsub(addr, 4, 1, false, msgs / 4));
    rec("1->queue(4) msgs/s", pubsub(addr, 1, 4, true, msgs));
    let (rate, p50, p99) = request_reply(addr, rr);
    rec("req/reply req/s", rate);
    rec("req/reply p50 us", p50);
    rec("req/reply p99 us", p99);
    out
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

fn start_nats_server() -> Option<(Child, SocketAddr)> {
    let port = free_port();
    let child = Command::new("nats-server")
        .args(["-a", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().ok()?;
    for _ in 0..100 {
        if TcpStream::connect(addr).is_ok() {
            return Some((child, addr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

fn main() {
    // `cargo bench` passes `--bench`. Without it (`cargo test
    // --all-targets`) this is a quick smoke run of our server only.
    let full = std::env::args().any(|a| a == "--bench");
    let msgs: usize = std::env::var("NATS_BENCH_MSGS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if full { 1_000_000 } else { 8_000 });
    let rr = if full { 5000 } else { 200 };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let opts = liftbridge::config::nats::NatsOptions {
        host: "127.0.0.1".into(),
        port: 0,
        ..Default::default()
    };
    let srv = rt
        .block_on(liftbridge::nats::NatsServer::start(opts))
        .expect("server");
    let ours = run_all("liftbridge", srv.client_addr(), msgs, rr);
    if !full {
        rt.block_on(srv.shutdown());
        return;
    }
    if let Some((mut child, addr)) = start_nats_server() {
        let theirs = run_all("nats-server", addr, msgs, rr);
        let _ = child.kill();
        let _ = child.wait();
        println!("\n{:<28} {:>10}", "workload", "ours/theirs");
        for ((k, a), (_, b)) in ours.iter().zip(theirs.iter()) {
            println!("{k:<28} {:>10.2}", a / b);
        }
    } else {
        println!("nats-server not on PATH: no comparison");
    }
    rt.block_on(srv.shutdown());
}
