//! Raw-socket tests of the NATS server: exact bytes for good and bad input,
//! compared with what nats-server 2.9.10 sends (spec/nats.md appendix).

use std::time::Duration;

use liftbridge::config::nats::{AuthConfig, User};

use super::nats_support::{s, start, test_opts, Raw};

const SHORT: Duration = Duration::from_millis(300);

/// A second client on the same server still gets its messages.
async fn other_client_works(srv: &liftbridge::nats::NatsServer) {
    let mut c = Raw::connected(srv).await;
    c.send(b"SUB ok.check 7\r\nPUB ok.check 2\r\nhi\r\n").await;
    let out = c.sync().await;
    assert_eq!(s(&out), "MSG ok.check 7 2\r\nhi\r\n");
}

#[tokio::test]
async fn nats_raw_info_line() {
    let srv = start(test_opts()).await;
    let r = Raw::connect(&srv).await;
    assert!(r.info.starts_with("INFO {"), "{}", r.info);
    assert!(
        r.info.ends_with("} \r\n"),
        "space before CRLF: {:?}",
        r.info
    );
    let v: serde_json::Value = serde_json::from_str(&r.info[5..r.info.len() - 3]).unwrap();
    let id = v["server_id"].as_str().unwrap();
    assert_eq!(id.len(), 56);
    assert!(id.starts_with('N'));
    assert_eq!(v["server_name"], id);
    assert_eq!(v["proto"], 1);
    assert_eq!(v["headers"], true);
    assert_eq!(v["max_payload"], 1024 * 1024);
    assert_eq!(v["port"], srv.client_addr().port());
    assert_eq!(v["client_ip"], "127.0.0.1");
    assert!(v["client_id"].as_u64().unwrap() > 0);
    assert!(v.get("auth_required").is_none());
    assert!(v.get("tls_required").is_none());
    assert!(v.get("nonce").is_none());
    let ver = v["version"].as_str().unwrap();
    assert_eq!(
        ver.split('.').filter(|p| p.parse::<u32>().is_ok()).count(),
        3
    );
}

#[tokio::test]
async fn nats_raw_verbose_pedantic_exchange() {
    let srv = start(test_opts()).await;
    let mut r = Raw::connect(&srv).await;
    r.send(b"CONNECT {\"verbose\":true,\"pedantic\":true,\"headers\":true,\"no_responders\":true,\"protocol\":1}\r\nPING\r\n")
        .await;
    assert_eq!(s(&r.read_until(b"PONG\r\n").await), "+OK\r\nPONG\r\n");
    r.send(b"SUB _INBOX.x 1\r\nPUB foo _INBOX.x 2\r\nhi\r\n")
        .await;
    assert_eq!(
        s(&r.read_until(b"\r\n\r\n\r\n").await),
        "+OK\r\n+OK\r\nHMSG _INBOX.x 1 16 16\r\nNATS/1.0 503\r\n\r\n\r\n"
    );
    r.send(b"PUB foo.* 0\r\n\r\nSUB foo.. 2\r\nUNSUB 9\r\n")
        .await;
    assert_eq!(
        s(&r.sync().await),
        "-ERR 'Invalid Publish Subject'\r\n+OK\r\n-ERR 'Invalid Subject'\r\n+OK\r\n"
    );
    r.send(b"HPUB _INBOX.x 22 27\r\nNATS/1.0\r\nBar: Baz\r\n\r\nhello\r\n")
        .await;
    assert_eq!(
        s(&r.sync().await),
        "+OK\r\nHMSG _INBOX.x 1 22 27\r\nNATS/1.0\r\nBar: Baz\r\n\r\nhello\r\n"
    );
    r.send(b"FOO\r\n").await;
    let (out, closed) = r.read_for(SHORT).await;
    assert_eq!(s(&out), "-ERR 'Unknown Protocol Operation'\r\n");
    assert!(closed);
    other_client_works(&srv).await;
}

#[tokio::test]
async fn nats_raw_case_insensitive_ops_and_lf_only() {
    let srv = start(test_opts()).await;
    let mut r = Raw::connected(&srv).await;
    r.send(b"sub foo 1\r\npub foo 2\nhi\r\nPINGX\r\n").await;
    assert_eq!(
        s(&r.read_until(b"PONG\r\n").await),
        "MSG foo 1 2\r\nhi\r\nPONG\r\n"
    );
}

/// Each bad input gets nats-server's exact reaction and the server keeps
/// serving others.
#[tokio::test]
async fn nats_raw_bad_input_reactions() {
    let srv = start(test_opts()).await;
    let long_sub = format!("SUB {} 1\r\n", "a".repeat(5000));
    let cases: Vec<(Vec<u8>, &str, bool)> = vec![
        (
            b"GARBAGE\r\n".to_vec(),
            "-ERR 'Unknown Protocol Operation'\r\n",
            true,
        ),
        (
            b"UNSUB\r\n".to_vec(),
            "-ERR 'Unknown Protocol Operation'\r\n",
            true,
        ),
        (
            long_sub.into_bytes(),
            "-ERR 'maximum control line exceeded'\r\n",
            true,
        ),
        (
            format!("PUB {}", "a".repeat(5000)).into_bytes(),
            "-ERR 'maximum control line exceeded'\r\n",
            true,
        ),
        (
            b"PUB foo 3\r\nhello\r\n".to_vec(),
            "-ERR 'Unknown Protocol Operation'\r\n",
            true,
        ),
        (
            b"PUB foo 2000000\r\n".to_vec(),
            "-ERR 'Maximum Payload Violation'\r\n",
            true,
        ),
        (
            b"HPUB foo 12 2000000\r\n".to_vec(),
            "-ERR 'Maximum Payload Violation'\r\n",
            true,
        ),
        (b"PUB foo\r\n".to_vec(), "", true),
        (b"PUB foo -1\r\n".to_vec(), "", true),
        (b"SUB foo\r\n".to_vec(), "", true),
        (b"UNSUB 1 2 3\r\n".to_vec(), "", true),
        (b"HPUB foo 2 1\r\n".to_vec(), "", true),
        (b"-ERR 'x'\r\n".to_vec(), "", true),
        (
            b"SUB foo..bar 1\r\nPING\r\n".to_vec(),
            "-ERR 'Invalid Subject'\r\nPONG\r\n",
            false,
        ),
        (
            b"SUB foo.>.bar 1\r\nPING\r\n".to_vec(),
            "-ERR 'Invalid Subject'\r\nPONG\r\n",
            false,
        ),
        (b"UNSUB 77\r\nPING\r\n".to_vec(), "PONG\r\n", false),
    ];
    for (input, want, want_closed) in cases {
        let mut r = Raw::connected(&srv).await;
        r.send(&input).await;
        let (out, closed) = r.read_for(SHORT).await;
        assert_eq!(
            s(&out),
            want,
            "input {:?}",
            s(&input[..input.len().min(40)])
        );
        assert_eq!(
            closed,
            want_closed,
            "input {:?}",
            s(&input[..input.len().min(40)])
        );
    }
    other_client_works(&srv).await;
}

#[tokio::test]
async fn nats_raw_hpub_without_headers_closes_silently() {
    let srv = start(test_opts()).await;
    let mut r = Raw::connect(&srv).await;
    r.send(
        b"CONNECT {\"verbose\":false,\"protocol\":1}\r\nHPUB foo 12 14\r\nNATS/1.0\r\n\r\nhi\r\n",
    )
    .await;
    let (out, closed) = r.read_for(SHORT).await;
    assert_eq!(s(&out), "");
    assert!(closed);
    other_client_works(&srv).await;
}

#[tokio::test]
async fn nats_raw_connect_validation() {
    let srv = start(test_opts()).await;
    for (connect, want) in [
        ("{\"protocol\":5}", "-ERR 'invalid client protocol'\r\n"),
        (
            "{\"no_responders\":true,\"protocol\":1}",
            "-ERR 'no responders requires headers support'\r\n",
        ),
        (
            "{\"verbose\":false,\"account\":\"A\"}",
            "-ERR 'Authorization Violation'\r\n",
        ),
        ("{bad json", ""),
    ] {
        let mut r = Raw::connect(&srv).await;
        r.send(format!("CONNECT {connect}\r\n").as_bytes()).await;
        let (out, closed) = r.read_for(SHORT).await;
        assert_eq!(s(&out), want, "{connect}");
        assert!(closed, "{connect}");
    }
    // No CONNECT at all and no auth: the defaults (verbose) apply.
    let mut r = Raw::connect(&srv).await;
    r.send(b"PUB foo 2\r\nhi\r\n").await;
    let (out, closed) = r.read_for(SHORT).await;
    assert_eq!(s(&out), "+OK\r\n");
    assert!(!closed);
    other_client_works(&srv).await;
}

fn user_auth() -> AuthConfig {
    AuthConfig {
        users: vec![User {
            account: None,
            username: "u".into(),
            password: "p".into(),
            permissions: None,
        }],
        ..AuthConfig::default()
    }
}

#[tokio::test]
async fn nats_raw_auth_timeout_and_violation() {
    let mut opts = test_opts();
    opts.auth = user_auth();
    opts.auth_timeout = Duration::from_millis(200);
    let srv = start(opts).await;
    // Never sends CONNECT.
    let mut r = Raw::connect(&srv).await;
    assert!(r.info.contains("\"auth_required\":true"), "{}", r.info);
    let (out, closed) = r.read_for(Duration::from_secs(1)).await;
    assert_eq!(s(&out), "-ERR 'Authentication Timeout'\r\n");
    assert!(closed);
    // A first op other than CONNECT.
    let mut r = Raw::connect(&srv).await;
    r.send(b"PING\r\n").await;
    let (out, closed) = r.read_for(SHORT).await;
    assert_eq!(s(&out), "-ERR 'Authorization Violation'\r\n");
    assert!(closed);
    // Wrong password.
    let mut r = Raw::connect(&srv).await;
    r.send(b"CONNECT {\"verbose\":false,\"user\":\"u\",\"pass\":\"x\"}\r\n")
        .await;
    let (out, closed) = r.read_for(SHORT).await;
    assert_eq!(s(&out), "-ERR 'Authorization Violation'\r\n");
    assert!(closed);
    // Right password keeps working past the auth timeout.
    let mut r = Raw::connect(&srv).await;
    r.send(b"CONNECT {\"verbose\":false,\"user\":\"u\",\"pass\":\"p\"}\r\nSUB a 1\r\n")
        .await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    r.send(b"PUB a 1\r\nx\r\n").await;
    assert_eq!(s(&r.sync().await), "MSG a 1 1\r\nx\r\n");
}

#[tokio::test]
async fn nats_raw_limits() {
    let mut opts = test_opts();
    opts.max_connections = 2;
    opts.max_subscriptions = 2;
    let srv = start(opts).await;
    let mut a = Raw::connected(&srv).await;
    a.send(b"SUB a 1\r\nSUB b 2\r\nSUB c 3\r\n").await;
    assert_eq!(
        s(&a.sync().await),
        "-ERR 'maximum subscriptions exceeded'\r\n"
    );
    let _b = Raw::connected(&srv).await;
    let mut c = Raw::connect(&srv).await;
    let (out, closed) = c.read_for(SHORT).await;
    let after_info = format!("{}{}", c.info, s(&out));
    assert!(after_info.starts_with("INFO {"));
    assert!(
        after_info.ends_with("} \r\n-ERR 'maximum connections exceeded'\r\n"),
        "{after_info}"
    );
    assert!(closed);
    // The first client is unaffected.
    a.send(b"PUB a 1\r\nx\r\n").await;
    assert_eq!(s(&a.sync().await), "MSG a 1 1\r\nx\r\n");
}

#[tokio::test]
async fn nats_raw_server_pings_and_stale_connection() {
    let mut opts = test_opts();
    opts.ping_interval = Duration::from_millis(150);
    opts.ping_max = 2;
    let srv = start(opts).await;
    let mut r = Raw::connected(&srv).await;
    let (out, closed) = r.read_for(Duration::from_secs(1)).await;
    assert_eq!(s(&out), "PING\r\nPING\r\n-ERR 'Stale Connection'\r\n");
    assert!(closed);
    // The ping timer starts at CONNECT: nothing before it, PINGs after.
    let mut r = Raw::connect(&srv).await;
    let (out, closed) = r.read_for(Duration::from_millis(400)).await;
    assert_eq!(s(&out), "");
    assert!(!closed);
    r.send(b"CONNECT {\"verbose\":false}\r\n").await;
    assert!(r.read_until(b"PING\r\n").await.ends_with(b"PING\r\n"));
    // A client that answers stays connected.
    let mut r = Raw::connected(&srv).await;
    for _ in 0..4 {
        let got = r.read_until(b"PING\r\n").await;
        assert!(got.ends_with(b"PING\r\n"));
        r.send(b"PONG\r\n").await;
    }
    let cz = srv.connz_json("").unwrap();
    assert!(
        cz["connections"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["rtt"].is_string()),
        "rtt measured from PING/PONG: {cz}"
    );
    r.send(b"SUB z 1\r\nPUB z 1\r\nq\r\n").await;
    let out = r.read_until(b"q\r\n").await;
    assert!(s(&out).ends_with("MSG z 1 1\r\nq\r\n"), "{}", s(&out));
}

#[tokio::test]
async fn nats_raw_unsub_max_and_duplicate_sid() {
    let srv = start(test_opts()).await;
    let mut r = Raw::connected(&srv).await;
    r.send(b"SUB m 1\r\nSUB m 1\r\nUNSUB 1 2\r\n").await;
    for i in 0..4 {
        r.send(format!("PUB m 1\r\n{i}\r\n").as_bytes()).await;
    }
    assert_eq!(s(&r.sync().await), "MSG m 1 1\r\n0\r\nMSG m 1 1\r\n1\r\n");
    // max <= delivered unsubscribes at once.
    r.send(b"SUB n 2\r\nPUB n 1\r\na\r\nUNSUB 2 1\r\nPUB n 1\r\nb\r\n")
        .await;
    assert_eq!(s(&r.sync().await), "MSG n 2 1\r\na\r\n");
}

#[tokio::test]
async fn nats_raw_headers_stripped_for_plain_subscriber() {
    let srv = start(test_opts()).await;
    let mut plain = Raw::connect(&srv).await;
    plain
        .send(b"CONNECT {\"verbose\":false,\"protocol\":1}\r\nSUB h 1\r\n")
        .await;
    plain.sync().await;
    let mut p = Raw::connected(&srv).await;
    p.send(b"HPUB h 22 27\r\nNATS/1.0\r\nBar: Baz\r\n\r\nhello\r\n")
        .await;
    p.sync().await;
    assert_eq!(
        s(&plain.read_until(b"hello\r\n").await),
        "MSG h 1 5\r\nhello\r\n"
    );
}
