//! Contract: `cluster { compression }` as nats-server 2.10+ speaks it. When
//! a route connects, both ends agree on S2 compression (ours and Go 2.15,
//! in either role, each side at its own level); messages cross intact and
//! in order; `/routez` names the mode on both sides; and the bytes on the
//! wire (counted by a TCP proxy between the two) shrink. With compression
//! off on one side the route stays plain.

use std::net::SocketAddr;
use std::time::Duration;

use futures::StreamExt;

use crate::cluster_routes::wait_interest;
use crate::support::procs::{go_nats_server_2_15, go_nats_server_2_9, ConfNode, Impl};
use crate::support::proxy::{Dir, Proxy};
use crate::support::{free_port, http_json};

const WAIT: Duration = Duration::from_secs(20);
/// Messages sent each way, and their size.
pub(crate) const MSGS: usize = 200;
const SIZE: usize = 10 * 1024;

/// Starts a server of cluster `cz` listening for routes on `cport`,
/// dialling `seed` (a route port) if given, with `compression` (a value,
/// or `None` for no such line).
async fn node(
    imp: &Impl,
    name: &str,
    cport: u16,
    seed: Option<u16>,
    compression: Option<&str>,
) -> ConfNode {
    let routes = seed.map_or(String::new(), |p| {
        format!("routes: [\"nats-route://127.0.0.1:{p}\"]\n")
    });
    let comp = compression.map_or(String::new(), |c| format!("compression: {c}\n"));
    let top = format!("cluster {{\nname: cz\nlisten: 127.0.0.1:{cport}\n{routes}{comp}}}\n");
    ConfNode::start_with(imp, name, false, None, &top).await
}

/// The `compression` of the server's only route once it has one.
async fn route_mode(http: u16) -> String {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let v = http_json(http, "/routez").await.unwrap_or_default();
        if let Some(r) = v["routes"].as_array().filter(|r| r.len() == 1) {
            return r[0]["compression"].as_str().unwrap_or("").to_string();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no route on :{http}: {v}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A compressible message body (NATS-ish text, as links carry).
pub(crate) fn body(tag: &str, i: usize) -> bytes::Bytes {
    let line = format!("{tag} message {i} over a compressed link; ");
    line.repeat(SIZE / line.len() + 1)[..SIZE]
        .to_string()
        .into()
}

/// Sends [`MSGS`] messages from `from` on `subject`; `to` gets each intact
/// and in order.
pub(crate) async fn one_way(
    from: &async_nats::Client,
    to: &mut async_nats::Subscriber,
    subject: &str,
    tag: &str,
) {
    for i in 0..MSGS {
        from.publish(subject.to_string(), body(tag, i))
            .await
            .unwrap();
    }
    from.flush().await.unwrap();
    for i in 0..MSGS {
        let m = tokio::time::timeout(WAIT, to.next())
            .await
            .unwrap_or_else(|_| panic!("{tag}: message {i} did not arrive"))
            .unwrap();
        assert_eq!(m.payload, body(tag, i), "{tag}: message {i}");
    }
}

struct Case {
    seed: Impl,
    seed_mode: Option<&'static str>,
    dialer: Impl,
    dialer_mode: Option<&'static str>,
    /// `/routez` compression of the seed and the dialer (`None`: not
    /// checked).
    want: (Option<&'static str>, Option<&'static str>),
    /// Whether the bytes towards the seed and towards the dialer shrink.
    shrinks: (bool, bool),
}

async fn run(c: Case, label: &str) {
    let cport = free_port();
    let seed = node(&c.seed, &format!("{label}-seed"), cport, None, c.seed_mode).await;
    let upstream: SocketAddr = format!("127.0.0.1:{cport}").parse().unwrap();
    let proxy = Proxy::start(upstream).await;
    let dialer = node(
        &c.dialer,
        &format!("{label}-dialer"),
        free_port(),
        Some(proxy.port),
        c.dialer_mode,
    )
    .await;
    let modes = (
        route_mode(seed.http_port).await,
        route_mode(dialer.http_port).await,
    );
    if let Some(w) = c.want.0 {
        assert_eq!(modes.0, w, "{label}: seed's route compression");
    }
    if let Some(w) = c.want.1 {
        assert_eq!(modes.1, w, "{label}: dialer's route compression");
    }
    let cs = async_nats::connect(seed.url()).await.unwrap();
    let cd = async_nats::connect(dialer.url()).await.unwrap();
    let mut on_seed = cs.subscribe("cz.up").await.unwrap();
    let mut on_dialer = cd.subscribe("cz.down").await.unwrap();
    cs.flush().await.unwrap();
    cd.flush().await.unwrap();
    wait_interest(seed.http_port, "cz.down", 1).await;
    wait_interest(dialer.http_port, "cz.up", 1).await;
    let (up0, down0) = (proxy.bytes(Dir::ToUpstream), proxy.bytes(Dir::ToClient));
    one_way(&cd, &mut on_seed, "cz.up", &format!("{label} up")).await;
    one_way(&cs, &mut on_dialer, "cz.down", &format!("{label} down")).await;
    let up = proxy.bytes(Dir::ToUpstream) - up0;
    let down = proxy.bytes(Dir::ToClient) - down0;
    assert_wire(
        label,
        [
            ("towards the seed", up, c.shrinks.0),
            ("towards the dialer", down, c.shrinks.1),
        ],
    );
}

/// Checks the bytes each direction of a link carried for [`MSGS`] messages
/// of [`SIZE`] bytes: (what, bytes, whether compression shrank them).
pub(crate) fn assert_wire(label: &str, dirs: [(&str, u64, bool); 2]) {
    let payload = (MSGS * SIZE) as u64;
    for (what, bytes, shrinks) in dirs {
        // Each direction carries its messages plus the other's PONGs and
        // interest: a little over the payload when plain.
        if shrinks {
            assert!(
                bytes < payload / 4,
                "{label}: {bytes} bytes {what} for {payload} bytes of messages"
            );
        } else {
            assert!(
                bytes > payload / 2,
                "{label}: {bytes} bytes {what} for {payload} bytes of messages"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_compression_ours_dials_go_2_15() {
    run(
        Case {
            seed: Impl::Go(go_nats_server_2_15()),
            seed_mode: Some("s2_fast"),
            dialer: Impl::Liftbridge,
            dialer_mode: Some("s2_fast"),
            want: (Some("s2_fast"), Some("s2_fast")),
            shrinks: (true, true),
        },
        "ours-dials-go",
    )
    .await;
}

/// Go's default mode (`accept`) takes the level our side asks for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_compression_go_2_15_accepts_ours() {
    run(
        Case {
            seed: Impl::Liftbridge,
            seed_mode: Some("s2_best"),
            dialer: Impl::Go(go_nats_server_2_15()),
            dialer_mode: None,
            want: (Some("s2_best"), Some("s2_best")),
            shrinks: (true, true),
        },
        "go-accepts",
    )
    .await;
}

/// Our `accept` against Go's `s2_auto`: we compress at `s2_fast`; Go's
/// auto level below its first round-trip threshold is "uncompressed" (S2
/// frames holding the bytes as they are), so only our direction shrinks.
/// The thresholds are set far above any loopback round trip, so a loaded
/// machine does not move Go to a compressing level.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_compression_levels_differ_per_side() {
    run(
        Case {
            seed: Impl::Liftbridge,
            seed_mode: Some("accept"),
            dialer: Impl::Go(go_nats_server_2_15()),
            dialer_mode: Some(r#"{ mode: s2_auto, rtt_thresholds: ["10s", "20s", "30s"] }"#),
            want: (Some("s2_fast"), None),
            shrinks: (false, true),
        },
        "levels-differ",
    )
    .await;
}

/// Ours on both ends, with the object form and different levels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_compression_between_ours() {
    run(
        Case {
            seed: Impl::Liftbridge,
            seed_mode: Some("s2_fast"),
            dialer: Impl::Liftbridge,
            dialer_mode: Some("{ mode: s2_better }"),
            want: (Some("s2_fast"), Some("s2_better")),
            shrinks: (true, true),
        },
        "ours-both",
    )
    .await;
}

/// One side without compression: the route stays plain, both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_compression_off_on_one_side_stays_plain() {
    run(
        Case {
            seed: Impl::Go(go_nats_server_2_15()),
            seed_mode: Some("s2_fast"),
            dialer: Impl::Liftbridge,
            dialer_mode: None,
            want: (Some("not supported"), Some("not supported")),
            shrinks: (false, false),
        },
        "off",
    )
    .await;
}

/// A peer without compression (nats-server 2.9 has none): plain, both
/// ways, whichever side dials.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_compression_with_go_2_9_stays_plain() {
    for (seed, dialer, label) in [
        (
            Impl::Go(go_nats_server_2_9()),
            Impl::Liftbridge,
            "go29-seed",
        ),
        (
            Impl::Liftbridge,
            Impl::Go(go_nats_server_2_9()),
            "go29-dialer",
        ),
    ] {
        let ours_first = matches!(seed, Impl::Liftbridge);
        run(
            Case {
                seed_mode: ours_first.then_some("s2_fast"),
                dialer_mode: (!ours_first).then_some("s2_fast"),
                seed,
                dialer,
                want: if ours_first {
                    (Some("not supported"), None)
                } else {
                    (None, Some("not supported"))
                },
                shrinks: (false, false),
            },
            label,
        )
        .await;
    }
}

/// A peer that agrees on compression and then sends bytes that are no S2
/// stream: its connection is closed, and the server serves everyone else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_compression_garbage_closes_only_that_route() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let cport = free_port();
    let ours = node(&Impl::Liftbridge, "garbage", cport, None, Some("s2_fast")).await;
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", cport))
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(WAIT, s.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    let info = String::from_utf8_lossy(&buf[..n]).to_string();
    assert!(
        info.starts_with("INFO ") && info.contains("\"compression\":\"s2_fast\""),
        "{info}"
    );
    s.write_all(
        b"CONNECT {\"name\":\"RAWPEER\",\"cluster\":\"cz\",\"headers\":true}\r\n\
          INFO {\"server_id\":\"RAWPEER\",\"server_name\":\"raw\",\"cluster\":\"cz\",\"compression\":\"s2_fast\"}\r\n",
    )
    .await
    .unwrap();
    // Its next INFO comes compressed: an S2 stream identifier first.
    let n = tokio::time::timeout(WAIT, s.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert!(
        buf[..n].starts_with(b"\xff\x06\x00\x00S2sTwO"),
        "{:?}",
        &buf[..n.min(16)]
    );
    s.write_all(b"\xff\x06\x00\x00S2sTwO\x07\x03\x00\x00abc")
        .await
        .unwrap();
    let closed = tokio::time::timeout(WAIT, async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "the garbage route was not closed");
    // Everyone else is served: a client round trip.
    let c = async_nats::connect(ours.url()).await.unwrap();
    let mut sub = c.subscribe("still.up").await.unwrap();
    c.publish("still.up", "x".into()).await.unwrap();
    let m = tokio::time::timeout(WAIT, sub.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.payload, bytes::Bytes::from("x"));
}

/// Pools (nats-server 2.10+'s default of three connections per peer) with
/// compression: every connection of the pool agrees on it, ours and Go
/// 2.15 in both roles.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_compression_on_every_pool_connection() {
    let go = Impl::Go(go_nats_server_2_15());
    for (seed, dialer, label) in [
        (&go, &Impl::Liftbridge, "pool-ours-dials"),
        (&Impl::Liftbridge, &go, "pool-go-dials"),
        (&Impl::Liftbridge, &Impl::Liftbridge, "pool-ours"),
    ] {
        let cport = free_port();
        let conf = |c: u16, seed: Option<u16>| {
            let routes = seed.map_or(String::new(), |p| {
                format!("routes: [\"nats-route://127.0.0.1:{p}\"]\n")
            });
            format!(
                "cluster {{\nname: cz\nlisten: 127.0.0.1:{c}\n{routes}pool_size: 3\ncompression: s2_fast\n}}\n"
            )
        };
        let a = ConfNode::start_with(seed, &format!("{label}-a"), false, None, &conf(cport, None))
            .await;
        let b = ConfNode::start_with(
            dialer,
            &format!("{label}-b"),
            false,
            None,
            &conf(free_port(), Some(cport)),
        )
        .await;
        for n in [&a, &b] {
            let deadline = tokio::time::Instant::now() + WAIT;
            loop {
                let v = http_json(n.http_port, "/routez").await.unwrap_or_default();
                let modes: Vec<String> = v["routes"]
                    .as_array()
                    .map(|r| {
                        r.iter()
                            .map(|x| x["compression"].as_str().unwrap_or("").to_string())
                            .collect()
                    })
                    .unwrap_or_default();
                if modes.len() >= 3 {
                    assert!(modes.iter().all(|m| m == "s2_fast"), "{label}: {modes:?}");
                    break;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{label}: pool not up: {v}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        // Messages in several accounts' pool slots cross intact.
        let ca = async_nats::connect(a.url()).await.unwrap();
        let cb = async_nats::connect(b.url()).await.unwrap();
        let mut sub = cb.subscribe("pool.>").await.unwrap();
        cb.flush().await.unwrap();
        wait_interest(a.http_port, "pool.>", 1).await;
        for i in 0..MSGS {
            ca.publish(format!("pool.{i}"), body(label, i))
                .await
                .unwrap();
        }
        ca.flush().await.unwrap();
        for i in 0..MSGS {
            let m = tokio::time::timeout(WAIT, sub.next())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(m.payload, body(label, i), "{label}: message {i}");
        }
    }
}

/// `s2_auto` follows the round trip each PONG measures, as nats-server's
/// does: on loopback our seed frames its bytes uncompressed; once the link
/// (a proxy delay) takes tens of milliseconds, its next PONG picks a
/// compressing level.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_compression_auto_follows_the_round_trip() {
    let cport = free_port();
    let top = |cport: u16, routes: &str, mode: &str| {
        format!(
            "ping_interval: \"300ms\"\ncluster {{\nname: cz\nlisten: 127.0.0.1:{cport}\n{routes}compression: {mode}\n}}\n"
        )
    };
    let seed = ConfNode::start_with(
        &Impl::Liftbridge,
        "auto-seed",
        false,
        None,
        &top(cport, "", "s2_auto"),
    )
    .await;
    let proxy = Proxy::start(format!("127.0.0.1:{cport}").parse().unwrap()).await;
    let routes = format!("routes: [\"nats-route://127.0.0.1:{}\"]\n", proxy.port);
    let dialer = ConfNode::start_with(
        &Impl::Liftbridge,
        "auto-dialer",
        false,
        None,
        &top(free_port(), &routes, "accept"),
    )
    .await;
    assert_eq!(route_mode(seed.http_port).await, "s2_auto");
    let cs = async_nats::connect(seed.url()).await.unwrap();
    let cd = async_nats::connect(dialer.url()).await.unwrap();
    let mut down = cd.subscribe("auto.down").await.unwrap();
    cd.flush().await.unwrap();
    wait_interest(seed.http_port, "auto.down", 1).await;
    // Fast link: the seed's frames hold the bytes as they are.
    let d0 = proxy.bytes(Dir::ToClient);
    one_way(&cs, &mut down, "auto.down", "auto fast link").await;
    let plain = proxy.bytes(Dir::ToClient) - d0;
    // A slow link: once a PONG has measured it, the seed compresses.
    proxy.set_delay(Dir::ToUpstream, Duration::from_millis(30));
    proxy.set_delay(Dir::ToClient, Duration::from_millis(30));
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let v = http_json(seed.http_port, "/routez")
            .await
            .unwrap_or_default();
        let rtt = v["routes"][0]["rtt"].as_str().unwrap_or("").to_string();
        let ms = rtt
            .strip_suffix("ms")
            .and_then(|n| n.parse::<f64>().ok())
            .unwrap_or(0.0);
        if ms >= 50.0 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "rtt {rtt:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let d1 = proxy.bytes(Dir::ToClient);
    one_way(&cs, &mut down, "auto.down", "auto slow link").await;
    let slow = proxy.bytes(Dir::ToClient) - d1;
    assert_wire(
        "auto",
        [
            ("on the fast link", plain, false),
            ("on the slow link", slow, true),
        ],
    );
}
