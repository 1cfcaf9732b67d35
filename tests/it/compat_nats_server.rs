//! `nats-server` compatibility mode, driven the way client test harnesses
//! drive nats-server: the built binary is started with Go-style flags (as
//! `liftbridge nats-server …` or through a `nats-server` symlink on PATH),
//! the port is read from the log like the async-nats harness does, and real
//! clients (async-nats, raw HTTP) check pub/sub, monitoring, pid and ports
//! files, signals, config files, auth and TLS.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A server process, killed on drop.
struct Proc {
    child: Child,
    log: PathBuf,
    /// `host:port` from "client connections on".
    client: String,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn url(&self) -> String {
        format!("nats://{}", self.client)
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for the process to exit; `None` on timeout.
    fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let end = Instant::now() + timeout;
        while Instant::now() < end {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid; plain integers.
        unsafe {
            libc::kill(self.pid() as i32, sig);
        }
    }
}

/// What the async-nats harness does: regex `.+\sclient connections on\s+(\S+)`.
fn client_addr_from_log(text: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let idx = l.find(" client connections on ")?;
        let rest = l[idx + " client connections on ".len()..].trim();
        let addr = rest.split_whitespace().next()?;
        Some(addr.replace("0.0.0.0", "localhost"))
    })
}

fn wait_for_log(log: &Path, timeout: Duration, child: &mut Child) -> String {
    let end = Instant::now() + timeout;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(a) = client_addr_from_log(&text) {
            if text.contains("Server is ready") {
                return a;
            }
        }
        if let Ok(Some(st)) = child.try_wait() {
            panic!("server exited early ({st}); log:\n{text}");
        }
        assert!(Instant::now() < end, "no listening line; log:\n{text}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts `liftbridge nats-server ARGS -l <dir>/server.log`.
fn start(dir: &Path, args: &[&str]) -> Proc {
    let log = dir.join("server.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_liftbridge"))
        .arg("nats-server")
        .args(args)
        .arg("-l")
        .arg(&log)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let client = wait_for_log(&log, Duration::from_secs(20), &mut child);
    Proc { child, log, client }
}

/// GET over a raw socket: (status, body).
async fn http_get(addr: &str, path: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{head}"
    );
    (
        head.split(' ').nth(1).unwrap().parse().unwrap(),
        body.to_string(),
    )
}

async fn json(addr: &str, path: &str) -> serde_json::Value {
    let (st, body) = http_get(addr, path).await;
    assert_eq!(st, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap()
}

/// The ports file of a running server. nats-server writes it after it logs
/// that it listens, so this waits up to 10 s for a complete file.
fn ports_file(dir: &Path, exe: &str, pid: u32) -> serde_json::Value {
    let p = dir.join(format!("{exe}_{pid}.ports"));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let read = std::fs::read_to_string(&p)
            .map_err(|e| e.to_string())
            .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()));
        match read {
            Ok(v) => return v,
            Err(e) if Instant::now() >= deadline => panic!("{}: {e}", p.display()),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

#[tokio::test]
async fn compat_nats_server_flags_files_monitoring_pubsub() {
    let dir = tempfile::tempdir().unwrap();
    let pid_path = dir.path().join("server.pid");
    let mut p = start(
        dir.path(),
        &[
            "-a",
            "127.0.0.1",
            "-p",
            "-1",
            "-m",
            "-1",
            "-P",
            pid_path.to_str().unwrap(),
            "--ports_file_dir",
            dir.path().to_str().unwrap(),
            "-js",
            "-sd",
            dir.path().join("js").to_str().unwrap(),
        ],
    );
    assert!(p.client.starts_with("127.0.0.1:"), "{}", p.client);
    assert_ne!(p.client, "127.0.0.1:0");
    let log = p.log_text();
    let pid = p.pid();
    for want in [
        format!("[{pid}] "),
        "[INF] Starting nats-server".to_string(),
        "[INF]   Version:  2.11.0".to_string(),
        "[INF] Starting http monitor on 127.0.0.1:".to_string(),
        format!("[INF] Listening for client connections on {}", p.client),
        "[INF] Server is ready".to_string(),
        "[WRN] JetStream is not provided".to_string(),
    ] {
        assert!(log.contains(&want), "missing {want:?} in\n{log}");
    }
    // Only nats-server's own lines at the default level.
    assert_eq!(
        log.matches("client connections").count(),
        1,
        "one listening line:\n{log}"
    );
    // Date and time as nats-server prints them.
    let first = log.lines().next().unwrap();
    let ts = &first[first.find("] ").unwrap() + 2..][..26];
    assert!(
        chrono::NaiveDateTime::parse_from_str(ts, "%Y/%m/%d %H:%M:%S%.6f").is_ok(),
        "{ts}"
    );

    assert_eq!(
        std::fs::read_to_string(&pid_path).unwrap().trim(),
        pid.to_string()
    );
    let ports = ports_file(dir.path(), "liftbridge", pid);
    assert_eq!(ports["nats"][0], format!("nats://{}", p.client));
    let mon = ports["monitoring"][0]
        .as_str()
        .unwrap()
        .strip_prefix("http://")
        .unwrap()
        .to_string();
    assert!(log.contains(&format!("Starting http monitor on {mon}")));
    assert!(!mon.ends_with(":0"));

    let client = async_nats::connect(p.url()).await.unwrap();
    let info = client.server_info();
    assert_eq!(info.version, "2.11.0");
    assert!(info.headers);
    let mut sub = client.subscribe("compat.>").await.unwrap();
    client.flush().await.unwrap();
    for i in 0..10 {
        client
            .publish(format!("compat.{i}"), "hello".into())
            .await
            .unwrap();
    }
    client.flush().await.unwrap();
    for i in 0..10 {
        let m = tokio::time::timeout(Duration::from_secs(5), sub.next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(m.subject.as_str(), format!("compat.{i}"));
        assert_eq!(&m.payload[..], b"hello");
    }

    let varz = json(&mon, "/varz").await;
    assert_eq!(varz["in_msgs"], 10, "{varz}");
    assert_eq!(varz["in_bytes"], 50, "{varz}");
    assert_eq!(varz["version"], "2.11.0");
    assert_eq!(
        varz["http_port"].as_u64().unwrap().to_string(),
        mon.rsplit(':').next().unwrap()
    );
    let connz = json(&mon, "/connz?subs=1").await;
    assert_eq!(connz["num_connections"], 1, "{connz}");
    let c = &connz["connections"][0];
    assert_eq!(c["in_msgs"], 10);
    assert_eq!(c["lang"], "rust");
    assert!(c["subscriptions_list"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s == "compat.>"));
    let (st, _) = http_get(&mon, "/connz?limit=notanumber").await;
    assert_eq!(st, 400);
    let (st, _) = http_get(&mon, "/nosuchpage").await;
    assert_eq!(st, 404);
    assert_eq!(json(&mon, "/healthz").await["status"], "ok");
    assert!(
        json(&mon, "/subsz").await["num_subscriptions"]
            .as_u64()
            .unwrap()
            >= 1
    );

    // SIGINT: graceful exit with status 0, ports file removed.
    drop(client);
    p.signal(libc::SIGINT);
    let st = p
        .wait_exit(Duration::from_secs(10))
        .expect("exits on SIGINT");
    assert!(st.success(), "{st}");
    assert!(!dir.path().join(format!("liftbridge_{pid}.ports")).exists());
    assert!(p.log_text().contains("Server Exiting"));
}

/// A temp dir holding a `nats-server` symlink to `target`, and a PATH with
/// it first (Debian's real nats-server may be installed too).
fn symlink_path(dir: &Path, target: &Path) -> String {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(target, bin.join("nats-server")).unwrap();
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// Debian's nats-server, the reference behaviour, when installed.
fn reference_nats_server() -> Option<PathBuf> {
    ["/usr/sbin/nats-server", "/usr/bin/nats-server"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

#[tokio::test]
async fn compat_nats_server_symlink_lame_duck_via_signal_flag() {
    symlink_lame_duck(Path::new(env!("CARGO_BIN_EXE_liftbridge")), "2.11.0").await;
}

/// The same scenario against the reference server, so the expectations
/// above are nats-server's own (scripts/test.sh installs it).
#[tokio::test]
async fn compat_reference_symlink_lame_duck_via_signal_flag() {
    match reference_nats_server() {
        Some(bin) => symlink_lame_duck(&bin, "2.9.10").await,
        None => eprintln!("reference nats-server not installed: reference run not done"),
    }
}

async fn symlink_lame_duck(target: &Path, version: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = symlink_path(dir.path(), target);
    let conf = dir.path().join("ldm.conf");
    // 30 s is nats-server's minimum lame duck duration; with one client it
    // is closed right after the grace period.
    std::fs::write(
        &conf,
        "lame_duck_grace_period: \"300ms\"\nlame_duck_duration: \"30s\"\n",
    )
    .unwrap();
    let log = dir.path().join("nats-server-1.log");
    let pid_file = dir.path().join("nats-server-1.pid");
    // Exactly the async-nats harness's command line.
    let mut child = Command::new("nats-server")
        .env("PATH", &path)
        .args(["--store_dir"])
        .arg(dir.path().join("store-dir-1"))
        .args(["-p", "-1", "-l"])
        .arg(&log)
        .arg("-P")
        .arg(&pid_file)
        .arg("-c")
        .arg(&conf)
        .arg("--ports_file_dir")
        .arg(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let client_addr = wait_for_log(&log, Duration::from_secs(20), &mut child);
    let mut p = Proc {
        child,
        log,
        client: client_addr,
    };
    // The ports file is named after the executable as invoked.
    let ports = ports_file(dir.path(), "nats-server", p.pid());
    // No -a: every interface address is advertised, loopback included.
    let port = p.client.rsplit(':').next().unwrap().to_string();
    let urls: Vec<&str> = ports["nats"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|u| u.as_str())
        .collect();
    assert!(
        urls.contains(&format!("nats://127.0.0.1:{port}").as_str()),
        "{urls:?}"
    );
    assert!(urls.iter().all(|u| u.ends_with(&format!(":{port}"))));
    assert!(ports.get("monitoring").is_none());

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let client = async_nats::ConnectOptions::new()
        .event_callback(move |e| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(e.to_string());
            }
        })
        .connect(p.url())
        .await
        .unwrap();
    client.flush().await.unwrap();

    // `nats-server --signal ldm=<pid from the -P file>`, from PATH.
    let pid_text = std::fs::read_to_string(&pid_file).unwrap();
    let out = Command::new("nats-server")
        .env("PATH", &path)
        .arg("--signal")
        .arg(format!("ldm={}", pid_text.trim()))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let got = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(e) = rx.recv().await {
            if e.contains("lame duck") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(got, Ok(true), "client saw lame duck mode");
    let st = p
        .wait_exit(Duration::from_secs(15))
        .expect("exits after lame duck");
    assert!(st.success(), "{st}");
    let text = p.log_text();
    assert!(text.contains("Entering lame duck mode"), "{text}");
    drop(client);

    // `-v` and `-t` through the symlink too.
    let out = Command::new("nats-server")
        .env("PATH", &path)
        .arg("-v")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("nats-server: v{version}")
    );
    let out = Command::new("nats-server")
        .env("PATH", &path)
        .args(["-t", "-c"])
        .arg(&conf)
        .output()
        .unwrap();
    assert!(out.status.success());
    let bad = dir.path().join("bad.conf");
    std::fs::write(&bad, "port: 1\nmax_payload: \"big\"\n").unwrap();
    let out = Command::new("nats-server")
        .env("PATH", &path)
        .args(["-t", "-c"])
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad.conf"));
}

fn write_conf(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

async fn connect_err(opts: async_nats::ConnectOptions, url: &str) -> String {
    match tokio::time::timeout(Duration::from_secs(10), opts.connect(url)).await {
        Ok(Ok(_)) => panic!("connect unexpectedly succeeded"),
        Ok(Err(e)) => e.to_string(),
        Err(_) => panic!("connect timed out"),
    }
}

#[tokio::test]
async fn compat_config_max_payload_and_token() {
    let dir = tempfile::tempdir().unwrap();
    let conf = write_conf(dir.path(), "max_payload.conf", "max_payload = 128KB\n");
    let p = start(dir.path(), &["-a", "127.0.0.1", "-p", "-1", "-c", &conf]);
    let client = async_nats::connect(p.url()).await.unwrap();
    assert_eq!(client.server_info().max_payload, 128 * 1024);
    let too_big = vec![0u8; 129 * 1024];
    assert!(client.publish("x", too_big.into()).await.is_err());
    drop(p);

    let dir = tempfile::tempdir().unwrap();
    let conf = write_conf(
        dir.path(),
        "token.conf",
        "authorization { token: \"s3cr3t\", timeout: \"2s\" }\n",
    );
    let p = start(dir.path(), &["-a", "127.0.0.1", "-p", "-1", "-c", &conf]);
    let ok = async_nats::ConnectOptions::with_token("s3cr3t".into())
        .connect(p.url())
        .await
        .unwrap();
    assert!(ok.server_info().auth_required);
    ok.flush().await.unwrap();
    let e = connect_err(async_nats::ConnectOptions::new(), &p.url()).await;
    assert!(e.to_lowercase().contains("authorization"), "{e}");
    let e = connect_err(
        async_nats::ConnectOptions::with_token("wrong".into()),
        &p.url(),
    )
    .await;
    assert!(e.to_lowercase().contains("authorization"), "{e}");
}

#[tokio::test]
async fn compat_config_users_bcrypt_nkeys_permissions() {
    let dir = tempfile::tempdir().unwrap();
    let hash = bcrypt::hash("hashed-pw", 4).unwrap();
    let nkey = nkeys::KeyPair::new_user();
    let conf = write_conf(
        dir.path(),
        "users.conf",
        &format!(
            r#"
# several users: plain, bcrypt, nkey, restricted
authorization {{
  users = [
    {{ user: derek, password: s3cr3t }}
    {{ user: hashed, password: "{hash}" }}
    {{ nkey: {pk} }}
    {{ user: limited, password: pw, permissions: {{
        publish: {{ allow: ["allowed.>"], deny: "allowed.secret" }}
        subscribe: ["allowed.>"]
    }} }}
  ]
}}
"#,
            pk = nkey.public_key()
        ),
    );
    let p = start(dir.path(), &["-a", "127.0.0.1", "-p", "-1", "-c", &conf]);
    let url = p.url();

    let c = async_nats::ConnectOptions::with_user_and_password("derek".into(), "s3cr3t".into())
        .connect(&url)
        .await
        .unwrap();
    c.flush().await.unwrap();
    let c2 =
        async_nats::ConnectOptions::with_user_and_password("hashed".into(), "hashed-pw".into())
            .connect(&url)
            .await
            .unwrap();
    c2.flush().await.unwrap();
    let e = connect_err(
        async_nats::ConnectOptions::with_user_and_password("hashed".into(), hash.clone()),
        &url,
    )
    .await;
    assert!(e.to_lowercase().contains("authorization"), "{e}");
    let e = connect_err(
        async_nats::ConnectOptions::with_user_and_password("derek".into(), "nope".into()),
        &url,
    )
    .await;
    assert!(e.to_lowercase().contains("authorization"), "{e}");

    let nk = async_nats::ConnectOptions::with_nkey(nkey.seed().unwrap())
        .connect(&url)
        .await
        .unwrap();
    nk.flush().await.unwrap();
    let stranger = nkeys::KeyPair::new_user();
    let e = connect_err(
        async_nats::ConnectOptions::with_nkey(stranger.seed().unwrap()),
        &url,
    )
    .await;
    assert!(e.to_lowercase().contains("authorization"), "{e}");

    // Permissions: violations arrive as server errors; denied traffic does
    // not flow, allowed traffic does.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let limited = async_nats::ConnectOptions::with_user_and_password("limited".into(), "pw".into())
        .event_callback(move |e| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(e.to_string());
            }
        })
        .connect(&url)
        .await
        .unwrap();
    // async-nats's flush() only drains the socket buffer, so each
    // subscription is proven live with a probe through the server first.
    let mut watch = c.subscribe(">").await.unwrap();
    c.publish("probe.watch", "p".into()).await.unwrap();
    let m = tokio::time::timeout(Duration::from_secs(5), watch.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.subject.as_str(), "probe.watch");
    let mut own = limited.subscribe("allowed.>").await.unwrap();
    limited.publish("allowed.probe", "p".into()).await.unwrap();
    let m = tokio::time::timeout(Duration::from_secs(5), own.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.subject.as_str(), "allowed.probe");
    limited.publish("denied.x", "no".into()).await.unwrap();
    limited
        .publish("allowed.secret", "no".into())
        .await
        .unwrap();
    limited.publish("allowed.ok", "yes".into()).await.unwrap();
    limited.flush().await.unwrap();
    // The watcher sees the probe, then only the allowed message.
    let mut seen = Vec::new();
    while seen.last().map(String::as_str) != Some("allowed.ok") {
        let m = tokio::time::timeout(Duration::from_secs(5), watch.next())
            .await
            .expect("allowed.ok reaches the watcher")
            .unwrap();
        seen.push(m.subject.to_string());
    }
    assert_eq!(seen, vec!["allowed.probe", "allowed.ok"]);
    let m = tokio::time::timeout(Duration::from_secs(5), own.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.subject.as_str(), "allowed.ok");
    let mut errors = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        while let Some(e) = rx.recv().await {
            errors.push(e.to_lowercase());
            if errors.len() >= 2 {
                break;
            }
        }
    })
    .await;
    assert!(
        errors
            .iter()
            .any(|e| e.contains("permissions violation for publish to \"denied.x\"")),
        "{errors:?}"
    );
    let _bad_sub = limited.subscribe("other.>").await.unwrap();
    limited.flush().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(3), async {
        while let Some(e) = rx.recv().await {
            if e.to_lowercase().contains("subscription to \"other.>\"") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(got, Ok(true));
}

#[tokio::test]
async fn compat_tls_and_mtls_with_cert_init() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    let out = Command::new(env!("CARGO_BIN_EXE_liftbridge"))
        .args(["cert", "init", "--dir"])
        .arg(&certs)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let f = |n: &str| certs.join(n);

    // TLS from a config file (as async-nats's tls.conf).
    let conf = write_conf(
        dir.path(),
        "tls.conf",
        &format!(
            "listen: 127.0.0.1:-1\ntls {{\n  cert_file: \"{}\"\n  key_file: \"{}\"\n  timeout: 2\n}}\n",
            f("server.pem").display(),
            f("server-key.pem").display()
        ),
    );
    let p = start(dir.path(), &["-c", &conf]);
    assert!(p.log_text().contains("TLS required for client connections"));
    let c = async_nats::ConnectOptions::new()
        .add_root_certificates(f("ca.pem"))
        .require_tls(true)
        .connect(format!("tls://{}", p.client))
        .await
        .unwrap();
    assert!(c.server_info().tls_required);
    let mut sub = c.subscribe("tls.x").await.unwrap();
    c.publish("tls.x", "secure".into()).await.unwrap();
    let m = tokio::time::timeout(Duration::from_secs(5), sub.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&m.payload[..], b"secure");
    // A client that does not trust our CA fails.
    let other = tempfile::tempdir().unwrap();
    liftbridge::tls::generate_dev_certs(other.path(), &[]).unwrap();
    let e = connect_err(
        async_nats::ConnectOptions::new()
            .add_root_certificates(other.path().join("ca.pem"))
            .require_tls(true),
        &format!("tls://{}", p.client),
    )
    .await;
    assert!(!e.is_empty());
    drop(p);

    // mTLS from flags (as nats.py's harness passes them).
    let dir2 = tempfile::tempdir().unwrap();
    let p = start(
        dir2.path(),
        &[
            "-a",
            "127.0.0.1",
            "-p",
            "-1",
            "--tls",
            "--tlscert",
            f("server.pem").to_str().unwrap(),
            "--tlskey",
            f("server-key.pem").to_str().unwrap(),
            "--tlsverify",
            "--tlscacert",
            f("ca.pem").to_str().unwrap(),
        ],
    );
    let c = async_nats::ConnectOptions::new()
        .add_root_certificates(f("ca.pem"))
        .add_client_certificate(f("client.pem"), f("client-key.pem"))
        .require_tls(true)
        .connect(format!("tls://{}", p.client))
        .await
        .unwrap();
    c.flush().await.unwrap();
    assert!(c.server_info().tls_required);
    let e = connect_err(
        async_nats::ConnectOptions::new()
            .add_root_certificates(f("ca.pem"))
            .require_tls(true),
        &format!("tls://{}", p.client),
    )
    .await;
    assert!(!e.is_empty());
}

fn wait_log_contains(path: &Path, want: &str) -> String {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.contains(want) {
            return text;
        }
        assert!(Instant::now() < end, "{want:?} not in log:\n{text}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn compat_nats_server_reload_reopen_and_sigterm_status() {
    let dir = tempfile::tempdir().unwrap();
    let conf = write_conf(dir.path(), "r.conf", "debug: false\n");
    let mut p = start(dir.path(), &["-a", "127.0.0.1", "-p", "-1", "-c", &conf]);
    assert!(!p.log_text().contains("[DBG]"));

    // SIGHUP with a changed file: reloaded, debug switched on live.
    std::fs::write(&conf, "debug: true\n").unwrap();
    p.signal(libc::SIGHUP);
    wait_log_contains(&p.log, "[INF] Reloaded server configuration");
    // SIGHUP with a broken file: an error, the server keeps running.
    std::fs::write(&conf, "debug: {\n").unwrap();
    p.signal(libc::SIGHUP);
    wait_log_contains(&p.log, "[ERR] Failed to reload server configuration");

    // SIGUSR1: the log file is reopened (rotation).
    let rotated = dir.path().join("server.log.1");
    std::fs::rename(&p.log, &rotated).unwrap();
    p.signal(libc::SIGUSR1);
    wait_log_contains(&p.log, "Reopened log file");
    assert!(std::net::TcpStream::connect(&p.client).is_ok());

    // SIGTERM: nats-server exits with status 1, after a [DBG] trap line
    // (debug is now on).
    p.signal(libc::SIGTERM);
    let st = p
        .wait_exit(Duration::from_secs(10))
        .expect("exits on SIGTERM");
    assert_eq!(st.code(), Some(1));
    let text = wait_log_contains(&p.log, "Server Exiting..");
    assert!(
        text.contains("[DBG] Trapped \"terminated\" signal"),
        "{text}"
    );
}

#[test]
fn compat_nats_server_lame_duck_without_clients_exits_at_once() {
    let dir = tempfile::tempdir().unwrap();
    // Default grace period (10 s): nats-server skips it when nobody is
    // connected, so must we.
    let mut p = start(dir.path(), &["-a", "127.0.0.1", "-p", "-1"]);
    let t0 = Instant::now();
    p.signal(libc::SIGUSR2);
    let st = p.wait_exit(Duration::from_secs(5)).expect("exits promptly");
    assert!(st.success(), "{st}");
    assert!(t0.elapsed() < Duration::from_secs(5));
    let text = wait_log_contains(&p.log, "Server Exiting..");
    let ldm = text.find("Entering lame duck mode").unwrap();
    let shut = text.find("Initiating Shutdown...").unwrap();
    assert!(ldm < shut, "{text}");
}
