//! Liftbridge's command line and config file, as a user writes them.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use liftbridge::config::liftbridge::{load_with_env, ConfigError, LiftbridgeFlags};

#[derive(Debug, Parser)]
struct Cmd {
    #[command(flatten)]
    flags: LiftbridgeFlags,
}

fn parse(args: &[&str]) -> LiftbridgeFlags {
    Cmd::try_parse_from(std::iter::once("liftbridge").chain(args.iter().copied()))
        .expect("flags parse")
        .flags
}

#[test]
fn config_liftbridge_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("liftbridge.yaml");
    std::fs::write(
        &file,
        "listen: 127.0.0.1:9292\ncursors:\n  stream.auto.pause.time: 0\n  stream.partitions: 1\n\
         streams:\n  retention.max:\n    age: 24h\n",
    )
    .unwrap();
    let data = dir.path().join("data");
    let flags = parse(&[
        "-c",
        file.to_str().unwrap(),
        "-d",
        data.to_str().unwrap(),
        "--embedded-nats",
        "--raft-bootstrap-seed",
        "-p",
        "19292",
    ]);
    let c = load_with_env(&flags, |_| None).unwrap();
    assert_eq!(c.listen, "127.0.0.1:19292");
    assert_eq!(c.port, 19292);
    assert_eq!(c.data_dir, data);
    assert!(c.nats.embedded);
    assert!(c.clustering.raft_bootstrap_seed && c.raft_bootstrap());
    assert_eq!(c.cursors.stream_partitions, 1);
    assert_eq!(c.cursors.stream_auto_pause_time, Duration::ZERO);
    assert_eq!(c.streams.retention_max_age, Duration::from_secs(86_400));
}

#[test]
fn config_liftbridge_flag_aliases() {
    let f = parse(&[
        "--nc",
        "/etc/nats.conf",
        "--id",
        "node-1",
        "--ns",
        "prod",
        "-n",
        "nats://a:4222,nats://b:4222",
        "--raft-bootstrap-peers",
        "node-1,node-2",
        "-l",
        "debug",
        "--tls-cert",
        "c.pem",
        "--tls-key",
        "k.pem",
        "--nats-port",
        "0",
        "--http-port",
        "0",
    ]);
    let c = load_with_env(&f, |_| None).unwrap();
    assert_eq!(
        c.nats.embedded_config,
        Some(PathBuf::from("/etc/nats.conf"))
    );
    assert!(c.nats.embedded);
    assert_eq!(c.clustering.server_id, "node-1");
    assert_eq!(c.clustering.namespace, "prod");
    assert_eq!(c.nats.servers, ["nats://a:4222", "nats://b:4222"]);
    assert_eq!(c.clustering.raft_bootstrap_peers, ["node-1", "node-2"]);
    assert!(
        !c.raft_bootstrap(),
        "peers without the seed flag do not bootstrap alone"
    );
    assert_eq!(c.logging.level.as_str(), "debug");
    assert_eq!(c.tls.cert, Some(PathBuf::from("c.pem")));
    assert_eq!(c.tls.key, Some(PathBuf::from("k.pem")));
    assert_eq!(c.nats.listen, "0.0.0.0:0");
    assert_eq!(c.http.listen, "0.0.0.0:0");

    let off = parse(&["--embedded-nats=false"]);
    assert!(!load_with_env(&off, |_| None).unwrap().nats.embedded);
    let bad = parse(&["--id", "a b"]);
    assert!(matches!(
        load_with_env(&bad, |_| None),
        Err(ConfigError::BadValue { .. })
    ));
}

#[test]
fn config_liftbridge_unknown_key_names_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.yaml");
    std::fs::write(&file, "clustering:\n  raft:\n    bootstrap.sead: true\n").unwrap();
    let f = parse(&["-c", file.to_str().unwrap()]);
    let msg = load_with_env(&f, |_| None).unwrap_err().to_string();
    assert!(msg.contains("clustering.raft.bootstrap.sead"), "{msg}");
    assert!(msg.contains("bad.yaml"), "{msg}");
}

/// `--nats-port` and `--http-port` override the listener and monitoring
/// port of an embedded NATS config file, whether or not the file sets them;
/// without the flags the file's settings stand.
#[test]
fn config_liftbridge_flags_override_embedded_nats_file() {
    use liftbridge::node::NodeConfig;
    let dir = tempfile::tempdir().unwrap();
    let no_port = dir.path().join("no-port.conf");
    std::fs::write(&no_port, "max_payload: 65536\n").unwrap();
    let with_port = dir.path().join("with-port.conf");
    std::fs::write(&with_port, "port: 5333\nhttp: 127.0.0.1:5334\n").unwrap();

    for file in [&no_port, &with_port] {
        let flags = parse(&[
            "--embedded-nats-config",
            file.to_str().unwrap(),
            "--nats-port",
            "14999",
            "--http-port",
            "18999",
        ]);
        let c = load_with_env(&flags, |_| None).expect("loads");
        let n = NodeConfig::from_liftbridge(&c).expect("maps");
        assert_eq!(n.nats.port, 14999, "{}", file.display());
        if file == &no_port {
            // The rest of the file still applies.
            assert_eq!(n.nats.max_payload, 65536);
        }
        assert_eq!(
            n.http.as_ref().map(|h| h.1),
            Some(18999),
            "{}",
            file.display()
        );
    }
    let flags = parse(&["--embedded-nats-config", with_port.to_str().unwrap()]);
    let c = load_with_env(&flags, |_| None).expect("loads");
    let n = NodeConfig::from_liftbridge(&c).expect("maps");
    assert_eq!(n.nats.port, 5333);
    assert_eq!(n.http, Some(("127.0.0.1".to_string(), 5334)));
}

/// A key this server cannot honour stops the start with an error naming it;
/// a key without effect here is logged with the reason, and the node runs.
#[test]
fn config_liftbridge_unsupported_keys_refused_and_inapplicable_keys_logged() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let bin = env!("CARGO_BIN_EXE_liftbridge");
    let dir = tempfile::tempdir().unwrap();
    // Authorization, encryption at rest and the activity stream work now;
    // authorization without TLS and encryption without the master key stop
    // the start naming what is missing.
    for (yaml, needs) in [
        (
            "tls:\n  client.authz.enabled: true\n",
            "tls.client.authz.enabled needs tls.cert and tls.key",
        ),
        (
            "streams.encryption: true\n",
            "streams.encryption needs the master key in LIFTBRIDGE_ENCRYPTION_KEY",
        ),
    ] {
        let file = dir.path().join("incomplete.yaml");
        std::fs::write(&file, yaml).unwrap();
        let out = Command::new(bin)
            .args(["-c", file.to_str().unwrap(), "-d"])
            .arg(dir.path().join("data-incomplete"))
            .args(["-p", "0", "--nats-port", "0", "--http-port", "0"])
            .env_remove("LIFTBRIDGE_ENCRYPTION_KEY")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{yaml}: started anyway");
        assert!(err.contains(needs), "{yaml}: {err}");
    }
    {
        // External NATS mode runs no NATS listener of its own.
        let (yaml, key) = (
            "nats.embedded: false\nnats.cluster.listen: 127.0.0.1:0\n",
            "nats.cluster.listen",
        );
        let file = dir.path().join("refused.yaml");
        std::fs::write(&file, yaml).unwrap();
        let out = Command::new(bin)
            .args(["-c", file.to_str().unwrap(), "-d"])
            .arg(dir.path().join("data-refused"))
            .args(["-p", "0", "--nats-port", "0", "--http-port", "0"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{yaml}: started anyway");
        assert!(
            err.contains(key) && err.contains("cannot be used with external NATS"),
            "{yaml}: {err}"
        );
    }

    let file = dir.path().join("notice.yaml");
    std::fs::write(&file, "streams:\n  segment.max.bytes: 1048576\n").unwrap();
    let mut child = Command::new(bin)
        .args(["-c", file.to_str().unwrap(), "-d"])
        .arg(dir.path().join("data-notice"))
        .args(["-p", "0", "--nats-port", "0", "--http-port", "0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut found = false;
    for line in BufReader::new(stderr).lines() {
        let line = line.unwrap();
        if line.contains("streams.segment.max.bytes has no effect") {
            found = true;
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(found, "notice logged");
}
