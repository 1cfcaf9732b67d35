//! Configuration reload (SIGHUP, `--signal reload=PID`) of the built
//! binary, in `nats-server` mode and in the liftbridge (serve) mode, with
//! async-nats clients and raw sockets (for exact `-ERR` lines): users
//! added and removed, permissions narrowed, limits, TLS certificates,
//! refused configurations — and clients the change does not concern stay
//! connected throughout.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{free_port, http_json, wait_until};

const WAIT: Duration = Duration::from_secs(20);

/// A random client port unless the file names one (a `-p` flag would
/// override the file's port on reload too, as in nats-server).
fn with_port(conf: &str) -> String {
    if conf.starts_with("port:") {
        conf.to_string()
    } else {
        format!("port: -1\n{conf}")
    }
}

/// `liftbridge nats-server -a 127.0.0.1 -c <conf>`, killed on drop.
struct Server {
    child: Child,
    log: PathBuf,
    conf: PathBuf,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn start(conf_text: &str) -> Server {
        Self::start_with(
            env!("CARGO_BIN_EXE_liftbridge").into(),
            &["nats-server"],
            conf_text,
        )
    }

    /// `bin PRE… -a 127.0.0.1 -c <conf> -l <log>`: ours, or a Go
    /// nats-server (no `PRE`).
    fn start_with(bin: PathBuf, pre: &[&str], conf_text: &str) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("server.conf");
        std::fs::write(&conf, with_port(conf_text)).unwrap();
        let log = dir.path().join("server.log");
        let mut child = Command::new(bin)
            .args(pre)
            .args(["-a", "127.0.0.1", "-c"])
            .arg(&conf)
            .arg("-l")
            .arg(&log)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let end = Instant::now() + WAIT;
        let port = loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let port = text
                .lines()
                .find_map(|l| l.split("client connections on 127.0.0.1:").nth(1))
                .and_then(|p| p.trim().parse::<u16>().ok());
            if let (Some(p), true) = (port, text.contains("Server is ready")) {
                break p;
            }
            if let Ok(Some(st)) = child.try_wait() {
                panic!("server exited ({st}); log:\n{text}");
            }
            assert!(Instant::now() < end, "server not ready; log:\n{text}");
            std::thread::sleep(Duration::from_millis(20));
        };
        Server {
            child,
            log,
            conf,
            port,
            _dir: dir,
        }
    }

    fn dir(&self) -> &Path {
        self._dir.path()
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Writes a new configuration and sends SIGHUP; returns the log lines
    /// the reload added once it finished (successfully or not).
    async fn reload(&self, conf_text: &str) -> String {
        std::fs::write(&self.conf, with_port(conf_text)).unwrap();
        let send = || {
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(self.child.id() as i32, libc::SIGHUP) };
        };
        self.wait_reload(send).await
    }

    /// Runs `trigger` and waits for the next reload outcome in the log.
    async fn wait_reload(&self, trigger: impl FnOnce()) -> String {
        let before = self.log_text().len();
        let outcomes = |t: &str| {
            t.matches("Reloaded server configuration").count()
                + t.matches("Failed to reload server configuration").count()
        };
        let n = outcomes(&self.log_text());
        trigger();
        let end = Instant::now() + WAIT;
        loop {
            let text = self.log_text();
            if outcomes(&text) > n {
                return text[before..].to_string();
            }
            assert!(Instant::now() < end, "no reload outcome; log:\n{text}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A raw protocol connection (exact `-ERR` lines).
struct Raw<S> {
    s: S,
    buf: Vec<u8>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Raw<S> {
    async fn send(&mut self, data: &str) {
        self.s.write_all(data.as_bytes()).await.unwrap();
    }

    /// Reads until the buffered text contains `want`; returns everything
    /// read so far (and clears it).
    async fn until(&mut self, want: &str) -> String {
        let end = tokio::time::Instant::now() + WAIT;
        loop {
            let text = String::from_utf8_lossy(&self.buf).into_owned();
            if text.contains(want) {
                self.buf.clear();
                return text;
            }
            let mut chunk = [0u8; 4096];
            let n = tokio::time::timeout_at(end, self.s.read(&mut chunk))
                .await
                .unwrap_or_else(|_| panic!("{want:?} not received; got {text:?}"))
                .unwrap();
            assert!(n > 0, "closed before {want:?}; got {text:?}");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Reads until the server closes the connection; returns what came.
    async fn until_closed(&mut self) -> String {
        let end = tokio::time::Instant::now() + WAIT;
        loop {
            let mut chunk = [0u8; 4096];
            let r = tokio::time::timeout_at(end, self.s.read(&mut chunk))
                .await
                .unwrap_or_else(|_| {
                    panic!("not closed; got {:?}", String::from_utf8_lossy(&self.buf))
                });
            match r {
                Ok(0) | Err(_) => return String::from_utf8_lossy(&self.buf).into_owned(),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// Round trip: everything the server sent before our PONG.
    async fn sync(&mut self) -> String {
        self.send("PING\r\n").await;
        self.until("PONG\r\n").await
    }
}

/// Connects, reads INFO and sends CONNECT with `creds` (a JSON fragment,
/// e.g. `"user":"a","pass":"a"`), verbose off; checks the server answers.
async fn raw(port: u16, creds: &str) -> Raw<TcpStream> {
    let s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let mut r = Raw { s, buf: Vec::new() };
    r.until("\r\n").await;
    let sep = if creds.is_empty() { "" } else { "," };
    r.send(&format!(
        "CONNECT {{\"verbose\":false,\"pedantic\":false{sep}{creds}}}\r\n"
    ))
    .await;
    let got = r.sync().await;
    assert!(!got.contains("-ERR"), "{got}");
    r
}

/// `opts` with a callback that counts the client's disconnections.
fn counting(opts: async_nats::ConnectOptions) -> (async_nats::ConnectOptions, Arc<AtomicUsize>) {
    let drops = Arc::new(AtomicUsize::new(0));
    let d = drops.clone();
    let opts = opts.event_callback(move |e| {
        let d = d.clone();
        async move {
            if matches!(e, async_nats::Event::Disconnected) {
                d.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    (opts, drops)
}

/// An async-nats client that counts its disconnections.
async fn client(url: &str, user: &str, pass: &str) -> (async_nats::Client, Arc<AtomicUsize>) {
    let (opts, drops) = counting(async_nats::ConnectOptions::with_user_and_password(
        user.into(),
        pass.into(),
    ));
    let c = opts.connect(url).await.unwrap();
    c.flush().await.unwrap();
    (c, drops)
}

/// An anonymous async-nats client that counts its disconnections.
async fn anonymous(url: &str) -> (async_nats::Client, Arc<AtomicUsize>) {
    let (opts, drops) = counting(async_nats::ConnectOptions::new());
    (opts.connect(url).await.unwrap(), drops)
}

/// Whether `user` can connect now (a fresh connection, no retries).
async fn can_connect(url: &str, user: &str, pass: &str) -> bool {
    let r = async_nats::ConnectOptions::with_user_and_password(user.into(), pass.into())
        .connection_timeout(Duration::from_secs(5))
        .connect(url)
        .await;
    match r {
        Ok(c) => c.flush().await.is_ok(),
        Err(_) => false,
    }
}

/// `sub` receives what `publisher` sends on `subject`.
async fn delivers(
    publisher: &async_nats::Client,
    sub: &mut async_nats::Subscriber,
    subject: &str,
    payload: &str,
) {
    publisher
        .publish(subject.to_string(), payload.to_string().into())
        .await
        .unwrap();
    publisher.flush().await.unwrap();
    let m = tokio::time::timeout(WAIT, sub.next())
        .await
        .expect("message in time")
        .expect("subscription open");
    assert_eq!(&m.payload[..], payload.as_bytes());
}

fn users_conf(users: &[(&str, &str)]) -> String {
    let list: Vec<String> = users
        .iter()
        .map(|(u, p)| format!("{{user: {u}, password: {p}}}"))
        .collect();
    format!("authorization {{ users = [ {} ] }}\n", list.join(", "))
}

/// A user added can connect after the reload; a user removed is
/// disconnected (without an error, as nats-server treats a vanished user);
/// a user whose password changed gets `-ERR 'Authorization Violation'`;
/// an unaffected client stays connected and keeps receiving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_reload_users_added_removed_and_changed() {
    let srv = Server::start(&users_conf(&[("alice", "a"), ("bob", "b"), ("carl", "c")]));
    let url = srv.url();
    let (alice, alice_drops) = client(&url, "alice", "a").await;
    let mut inbox = alice.subscribe("keep.>").await.unwrap();
    alice.flush().await.unwrap();
    let mut bob = raw(srv.port, r#""user":"bob","pass":"b""#).await;
    let mut carl = raw(srv.port, r#""user":"carl","pass":"c""#).await;
    assert!(
        !can_connect(&url, "dave", "d").await,
        "dave is not a user yet"
    );

    let lines = srv
        .reload(&users_conf(&[
            ("alice", "a"),
            ("carl", "c2"),
            ("dave", "d"),
        ]))
        .await;
    assert!(
        lines.contains("[INF] Reloaded: authorization users"),
        "{lines}"
    );
    assert!(
        lines.contains("[INF] Reloaded server configuration"),
        "{lines}"
    );

    // Removed: closed, no error (nats-server's behaviour).
    let got = bob.until_closed().await;
    assert!(!got.contains("-ERR"), "{got:?}");
    // Password changed: the credentials no longer pass.
    let got = carl.until_closed().await;
    assert!(got.contains("-ERR 'Authorization Violation'"), "{got:?}");
    assert!(
        lines.contains("authentication error - User \"carl\""),
        "{lines}"
    );

    assert!(can_connect(&url, "dave", "d").await, "dave added");
    assert!(!can_connect(&url, "bob", "b").await, "bob removed");
    assert!(can_connect(&url, "carl", "c2").await, "carl's new password");
    let (dave, _) = client(&url, "dave", "d").await;
    delivers(&dave, &mut inbox, "keep.1", "after reload").await;
    assert_eq!(alice_drops.load(Ordering::SeqCst), 0, "alice never dropped");
}

/// Narrowed permissions apply to the connected client: a publish to a
/// now-denied subject gets nats-server's `-ERR`, an existing subscription
/// no longer allowed is removed with its `-ERR`, the connection stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_reload_narrows_permissions_of_connected_clients() {
    let wide = "authorization { users = [ {user: a, password: a}, {user: w, password: w} ] }\n";
    let srv = Server::start(wide);
    let (watcher, watcher_drops) = client(&srv.url(), "w", "w").await;
    let mut seen = watcher.subscribe(">").await.unwrap();
    watcher.flush().await.unwrap();
    let mut a = raw(srv.port, r#""user":"a","pass":"a""#).await;
    a.send("SUB secret.> 1\r\nSUB public.> 2\r\nPUB secret.x 2\r\nhi\r\n")
        .await;
    let got = a.sync().await;
    assert!(got.contains("MSG secret.x 1 2"), "{got:?}");

    let narrow = "authorization { users = [ \
        {user: a, password: a, permissions: {publish: \"public.>\", subscribe: \"public.>\"}}, \
        {user: w, password: w} ] }\n";
    let lines = srv.reload(narrow).await;
    assert!(
        lines.contains("Removed sub \"secret.>\" (sid \"1\") for User \"a\" - not authorized"),
        "{lines}"
    );
    let got = a.until("\r\n").await;
    assert!(
        got.contains("-ERR 'Permissions Violation for Subscription to \"secret.>\" (sid \"1\")'"),
        "{got:?}"
    );
    a.send("PUB secret.y 2\r\nno\r\n").await;
    let got = a.sync().await;
    assert!(
        got.contains("-ERR 'Permissions Violation for Publish to \"secret.y\"'"),
        "{got:?}"
    );
    // Allowed subjects still work both ways on the same connection.
    a.send("PUB public.y 2\r\nok\r\n").await;
    let got = a.sync().await;
    assert!(got.contains("MSG public.y 2 2"), "{got:?}");
    assert!(!got.contains("-ERR"), "{got:?}");
    // Nothing on secret.y reached anyone; the watcher saw the allowed ones.
    let first = tokio::time::timeout(WAIT, seen.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.subject.as_str(), "secret.x");
    let next = tokio::time::timeout(WAIT, seen.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(next.subject.as_str(), "public.y");
    // A new SUB to the removed subject is refused too.
    a.send("SUB secret.> 3\r\n").await;
    let got = a.sync().await;
    assert!(
        got.contains("-ERR 'Permissions Violation for Subscription to \"secret.>\"'"),
        "{got:?}"
    );
    assert_eq!(watcher_drops.load(Ordering::SeqCst), 0);
}

/// Limits: a new `max_payload` is in the INFO of new connections and
/// applies to connected clients; `max_connections` lowered below the
/// count closes the newest connections only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_reload_limits() {
    let srv = Server::start("max_payload: 1000\n");
    let old = async_nats::connect(srv.url()).await.unwrap();
    old.flush().await.unwrap();
    assert_eq!(old.server_info().max_payload, 1000);
    let mut r1 = raw(srv.port, "").await;
    let mut r2 = raw(srv.port, "").await;

    let lines = srv
        .reload("max_payload: 2000\nping_interval: \"30s\"\nmax_connections: 2\n")
        .await;
    assert!(
        lines.contains("[INF] Reloaded: max_payload = 2000"),
        "{lines}"
    );
    assert!(
        lines.contains("[INF] Reloaded: ping_interval = 30s"),
        "{lines}"
    );
    assert!(
        lines.contains("[INF] Reloaded: max_connections = 2"),
        "{lines}"
    );
    assert!(
        lines.contains("Closed 1 connections to fall within max_connections"),
        "{lines}"
    );
    // The newest (r2) went; the two older ones stay.
    let got = r2.until_closed().await;
    assert!(
        got.contains("-ERR 'maximum connections exceeded'"),
        "{got:?}"
    );
    // The connected raw client may now send 1500 bytes.
    let body = "x".repeat(1500);
    r1.send(&format!("SUB big 1\r\nPUB big 1500\r\n{body}\r\n"))
        .await;
    let got = r1.sync().await;
    assert!(got.contains("MSG big 1 1500"), "{got:?}");
    old.flush()
        .await
        .expect("the first client is still connected");
    drop(r1);

    let lines = srv.reload("max_payload: 2000\n").await;
    assert!(lines.contains("Reloaded server configuration"), "{lines}");
    let new = async_nats::connect(srv.url()).await.unwrap();
    new.flush().await.unwrap();
    assert_eq!(new.server_info().max_payload, 2000);
    // /varz-free check of the raw INFO as well.
    let mut s = TcpStream::connect(("127.0.0.1", srv.port)).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = s.read(&mut buf).await.unwrap();
    let info = String::from_utf8_lossy(&buf[..n]);
    assert!(info.contains("\"max_payload\":2000"), "{info}");
}

/// Refused configurations change nothing: a syntax error, a changed
/// listen port, an unknown key; the old users keep working and connected
/// clients are untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_reload_refuses_bad_configs_and_keeps_the_old_one() {
    let good = users_conf(&[("alice", "a")]);
    let srv = Server::start(&good);
    let url = srv.url();
    let (alice, drops) = client(&url, "alice", "a").await;
    let mut inbox = alice.subscribe("in").await.unwrap();
    alice.flush().await.unwrap();

    let bob = users_conf(&[("bob", "b")]);
    let cases: Vec<(String, String)> = vec![
        (
            "authorization { users = [ {user: bob, password: b} ] \n".into(),
            "[ERR] Failed to reload server configuration: ".into(),
        ),
        (
            format!("port: {}\n{bob}", srv.port + 1),
            format!(
                "[ERR] Failed to reload server configuration: config reload not supported for Port: old={}, new={}",
                srv.port,
                srv.port + 1
            ),
        ),
        (
            format!("bogus_key: 1\n{bob}"),
            "[ERR] Failed to reload server configuration: ".into(),
        ),
        (
            format!("server_name: other\n{bob}"),
            "config reload not supported for ServerName: old=, new=other".into(),
        ),
        (
            format!("no_auth_user: bob\n{bob}"),
            "config reload not supported for NoAuthUser: old=, new=bob".into(),
        ),
    ];
    for (conf, want) in &cases {
        let lines = srv.reload(conf).await;
        assert!(
            lines.contains(want.as_str()),
            "want {want:?} for {conf:?}; got:\n{lines}"
        );
        assert!(!lines.contains("Reloaded server configuration"), "{lines}");
        assert!(!lines.contains("Reloaded: "), "nothing applied: {lines}");
        assert!(can_connect(&url, "alice", "a").await, "old user works");
        assert!(!can_connect(&url, "bob", "b").await, "new user not applied");
    }
    assert!(srv.log_text().contains("unknown field \"bogus_key\""));
    let (other, _) = client(&url, "alice", "a").await;
    delivers(&other, &mut inbox, "in", "still here").await;
    assert_eq!(drops.load(Ordering::SeqCst), 0);
}

/// `liftbridge nats-server --signal reload=PID` triggers the reload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_reload_by_signal_command() {
    let srv = Server::start(&users_conf(&[("alice", "a")]));
    std::fs::write(
        &srv.conf,
        with_port(&users_conf(&[("alice", "a"), ("bob", "b")])),
    )
    .unwrap();
    let pid = srv.child.id();
    let lines = srv
        .wait_reload(|| {
            let st = Command::new(env!("CARGO_BIN_EXE_liftbridge"))
                .args(["nats-server", "--signal", &format!("reload={pid}")])
                .status()
                .unwrap();
            assert!(st.success());
        })
        .await;
    assert!(
        lines.contains("[INF] Reloaded server configuration"),
        "{lines}"
    );
    assert!(can_connect(&srv.url(), "bob", "b").await);
}

/// A CA and server certificates for `localhost` and 127.0.0.1 signed by it, written as
/// `<name>.pem` / `<name>-key.pem`; returns each certificate's DER.
fn write_certs(dir: &Path, names: &[&str]) -> Vec<Vec<u8>> {
    use rcgen::{BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "reload test CA");
    ca.distinguished_name = dn;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    std::fs::write(dir.join("ca.pem"), ca_cert.pem()).unwrap();
    names
        .iter()
        .map(|n| {
            let key = KeyPair::generate().unwrap();
            let mut p =
                CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
                    .unwrap();
            let mut dn = DistinguishedName::new();
            dn.push(DnType::CommonName, *n);
            p.distinguished_name = dn;
            let c = p.signed_by(&key, &ca_cert, &ca_key).unwrap();
            std::fs::write(dir.join(format!("{n}.pem")), c.pem()).unwrap();
            std::fs::write(dir.join(format!("{n}-key.pem")), key.serialize_pem()).unwrap();
            c.der().to_vec()
        })
        .collect()
}

/// Connects over TLS as a NATS client does (INFO in clear, then the
/// handshake) and returns the certificate the server presented.
async fn presented_cert(port: u16, ca: &Path) -> Vec<u8> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let mut b = [0u8; 1];
    loop {
        s.read_exact(&mut b).await.unwrap();
        if b[0] == b'\n' {
            break;
        }
    }
    let cfg = liftbridge::tls::client_config(ca, None).unwrap();
    let connector = tokio_rustls::TlsConnector::from(cfg);
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let tls = connector.connect(name, s).await.unwrap();
    tls.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

/// The certificate a listener that starts with the TLS handshake
/// presents (WebSocket, routes).
async fn presented_cert_tls_first(port: u16, ca: &Path) -> Vec<u8> {
    let s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let cfg = liftbridge::tls::client_config(ca, None).unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let tls = tokio_rustls::TlsConnector::from(cfg)
        .connect(name, s)
        .await
        .unwrap();
    tls.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

fn fingerprint(der: &[u8]) -> String {
    // FNV-1a over the DER: enough to tell two certificates apart in a
    // failure message without a hashing dependency.
    let h = der.iter().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100000001b3)
    });
    format!("{h:016x}")
}

/// The certificate files are read again on reload: a new connection sees
/// the new certificate; a connection made before keeps working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_reload_tls_certificate_replaced() {
    let pki = tempfile::tempdir().unwrap();
    let ders = write_certs(pki.path(), &["one", "two"]);
    let conf = |n: &str| {
        format!(
            "tls {{ cert_file: \"{}\", key_file: \"{}\" }}\n",
            pki.path().join(format!("{n}.pem")).display(),
            pki.path().join(format!("{n}-key.pem")).display()
        )
    };
    let srv = Server::start(&conf("one"));
    let ca = pki.path().join("ca.pem");
    assert_eq!(
        fingerprint(&presented_cert(srv.port, &ca).await),
        fingerprint(&ders[0])
    );
    let old = async_nats::ConnectOptions::new()
        .add_root_certificates(ca.clone())
        .require_tls(true)
        .connect(format!("tls://localhost:{}", srv.port))
        .await
        .unwrap();
    let mut sub = old.subscribe("t").await.unwrap();
    old.flush().await.unwrap();

    // Replace the files in place (same paths), as certificate renewal does.
    std::fs::copy(pki.path().join("two.pem"), pki.path().join("one.pem")).unwrap();
    std::fs::copy(
        pki.path().join("two-key.pem"),
        pki.path().join("one-key.pem"),
    )
    .unwrap();
    let lines = srv.reload(&conf("one")).await;
    assert!(lines.contains("[INF] Reloaded: tls = enabled"), "{lines}");
    assert_eq!(
        fingerprint(&presented_cert(srv.port, &ca).await),
        fingerprint(&ders[1]),
        "new handshakes use the new certificate"
    );
    delivers(&old, &mut sub, "t", "same session").await;

    // A key file that does not parse is refused; the certificate stays.
    std::fs::write(pki.path().join("bad-key.pem"), "not a key").unwrap();
    let bad = format!(
        "tls {{ cert_file: \"{}\", key_file: \"{}\" }}\n",
        pki.path().join("two.pem").display(),
        pki.path().join("bad-key.pem").display()
    );
    let lines = srv.reload(&bad).await;
    assert!(
        lines.contains("[ERR] Failed to reload server configuration"),
        "{lines}"
    );
    assert_eq!(
        fingerprint(&presented_cert(srv.port, &ca).await),
        fingerprint(&ders[1])
    );
    let _ = srv.dir();
}

/// SIGHUP to a liftbridge node; returns its log once `want` appeared one
/// more time.
async fn hup(node: &super::support::procs::LiftbridgeNode, want: &str) -> String {
    let pid = node.proc.pid().expect("running") as i32;
    let before = node.proc.log_text().matches(want).count();
    // SAFETY: kill(2) with our own child's pid.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
    let end = Instant::now() + WAIT;
    loop {
        let text = node.proc.log_text();
        if text.matches(want).count() > before {
            return text;
        }
        assert!(Instant::now() < end, "{want:?} not logged:\n{text}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The liftbridge mode: SIGHUP applies `nats.embedded.config`'s users to
/// the embedded server; an unaffected client stays connected; a refused
/// change is logged and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_reload_in_serve_mode() {
    let dir = tempfile::tempdir().unwrap();
    let nats_conf = dir.path().join("nats.conf");
    std::fs::write(&nats_conf, users_conf(&[("alice", "a"), ("bob", "b")])).unwrap();
    let yaml = format!("  embedded.config: {}\n", nats_conf.display());
    let node = super::support::procs::LiftbridgeNode::start("reload", &[], &yaml).await;
    let url = node.url();
    let (alice, drops) = client(&url, "alice", "a").await;
    let mut inbox = alice.subscribe("in").await.unwrap();
    alice.flush().await.unwrap();
    let mut bob = raw(node.client_port, r#""user":"bob","pass":"b""#).await;
    assert!(!can_connect(&url, "carl", "c").await);

    std::fs::write(&nats_conf, users_conf(&[("alice", "a"), ("carl", "c")])).unwrap();
    hup(&node, "Reloaded server configuration").await;
    let got = bob.until_closed().await;
    assert!(!got.contains("-ERR"), "{got:?}");
    assert!(can_connect(&url, "carl", "c").await);

    // A setting that cannot change at run time: refused, nothing applied
    // (dave stays out).
    std::fs::write(
        &nats_conf,
        format!(
            "max_pending: 100000000\n{}",
            users_conf(&[("alice", "a"), ("dave", "d")])
        ),
    )
    .unwrap();
    let text = hup(&node, "Failed to reload server configuration").await;
    assert!(
        text.contains("config reload not supported for MaxPending"),
        "{text}"
    );
    assert!(!can_connect(&url, "dave", "d").await);
    let (carl, _) = client(&url, "carl", "c").await;
    delivers(&carl, &mut inbox, "in", "serve mode").await;
    assert_eq!(drops.load(Ordering::SeqCst), 0);
}

/// The WebSocket listener's certificate files are read again on reload
/// (the TLS handshake comes first there, before any NATS byte).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_reload_websocket_certificate_replaced() {
    let pki = tempfile::tempdir().unwrap();
    let ders = write_certs(pki.path(), &["one", "two"]);
    let conf = |n: &str| {
        format!(
            "websocket {{ host: 127.0.0.1, port: -1, tls {{ cert_file: \"{}\", key_file: \"{}\" }} }}\n",
            pki.path().join(format!("{n}.pem")).display(),
            pki.path().join(format!("{n}-key.pem")).display()
        )
    };
    let srv = Server::start(&conf("one"));
    let text = srv.log_text();
    let ws_port: u16 = text
        .lines()
        .find_map(|l| l.split("websocket clients on wss://127.0.0.1:").nth(1))
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("no websocket line:\n{text}"));
    let ca = pki.path().join("ca.pem");
    let presented = || presented_cert_tls_first(ws_port, &ca);
    assert_eq!(fingerprint(&presented().await), fingerprint(&ders[0]));
    let lines = srv.reload(&conf("two")).await;
    assert!(
        lines.contains("[INF] Reloaded server configuration"),
        "{lines}"
    );
    assert_eq!(fingerprint(&presented().await), fingerprint(&ders[1]));
    // Turning WebSocket TLS off would change the listener: refused.
    let lines = srv
        .reload("websocket { host: 127.0.0.1, port: -1, no_tls: true }\n")
        .await;
    assert!(
        lines.contains("config reload not supported for Websocket"),
        "{lines}"
    );
    assert_eq!(fingerprint(&presented().await), fingerprint(&ders[1]));
}

/// In process (the node's own publishers): a reloaded `max_payload` bounds
/// the log layer's publishes too; a refused reload returns its error and
/// leaves the limit as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_reload_in_process_limits() {
    use liftbridge::nats::reload::ReloadError;
    let opts = liftbridge::config::nats::NatsOptions {
        max_payload: 1000,
        ..super::nats_support::test_opts()
    };
    let srv = super::nats_support::start(opts.clone()).await;
    let local = srv.local_client("reload-test");
    let big = bytes::Bytes::from(vec![b'x'; 1500]);
    assert!(local.publish("a", None, None, big.clone()).is_err());

    let refused = liftbridge::config::nats::NatsOptions {
        max_payload: 2000,
        host: "127.0.0.2".into(),
        ..opts.clone()
    };
    let e = srv.reload(refused).await.unwrap_err();
    assert!(
        matches!(e, ReloadError::NotSupported { field: "Host", .. }),
        "{e}"
    );
    assert!(local.publish("a", None, None, big.clone()).is_err());

    let lines = srv
        .reload(liftbridge::config::nats::NatsOptions {
            max_payload: 2000,
            ..opts
        })
        .await
        .unwrap();
    assert!(
        lines.iter().any(|l| l == "Reloaded: max_payload = 2000"),
        "{lines:?}"
    );
    local
        .publish("a", None, None, big)
        .expect("within the new limit");
    srv.shutdown().await;
}

/// Nkey users: the connected ones are checked again with the signature of
/// their own INFO nonce; a removed nkey is disconnected, the other stays
/// and keeps receiving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_reload_nkey_users() {
    let keep = nkeys::KeyPair::new_user();
    let gone = nkeys::KeyPair::new_user();
    let conf = |keys: &[&nkeys::KeyPair]| {
        let list: Vec<String> = keys
            .iter()
            .map(|k| format!("{{nkey: {}}}", k.public_key()))
            .collect();
        format!("authorization {{ users = [ {} ] }}\n", list.join(", "))
    };
    let srv = Server::start(&conf(&[&keep, &gone]));
    let connect =
        |k: &nkeys::KeyPair| counting(async_nats::ConnectOptions::with_nkey(k.seed().unwrap()));
    let (o, keep_drops) = connect(&keep);
    let kept = o.connect(srv.url()).await.unwrap();
    let mut inbox = kept.subscribe("n").await.unwrap();
    kept.flush().await.unwrap();
    let (o, gone_drops) = connect(&gone);
    let removed = o
        .retry_on_initial_connect()
        .max_reconnects(1)
        .connect(srv.url())
        .await
        .unwrap();
    removed.flush().await.unwrap();

    let lines = srv.reload(&conf(&[&keep])).await;
    assert!(
        lines.contains("[INF] Reloaded: authorization nkey users"),
        "{lines}"
    );
    let end = Instant::now() + WAIT;
    while gone_drops.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < end, "removed nkey still connected");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    delivers(&kept, &mut inbox, "n", "nkey survives").await;
    assert_eq!(keep_drops.load(Ordering::SeqCst), 0);
}

/// `GET path` on the monitoring port, as JSON.
async fn monitor(port: u16, path: &str) -> serde_json::Value {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    // HTTP/1.0: a body without chunked framing from nats-server too.
    let req = format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    let text = String::from_utf8_lossy(&buf).into_owned();
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    serde_json::from_str(body).unwrap_or_default()
}

/// A leaf (Debian's Go nats-server) that authenticated with one of the
/// hub's client users is disconnected when a reload removes that user; a
/// client of the hub stays connected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_reload_leaf_on_removed_user_is_closed() {
    let (leaf_port, http_port) = (free_port(), free_port());
    let hub_conf = |users: &[(&str, &str)]| {
        format!(
            "http: 127.0.0.1:{http_port}\nleafnodes {{ listen: 127.0.0.1:{leaf_port} }}\n{}",
            users_conf(users)
        )
    };
    let hub = Server::start(&hub_conf(&[("alice", "a"), ("edge", "e")]));
    let leaf_dir = tempfile::tempdir().unwrap();
    let leaf_conf = leaf_dir.path().join("leaf.conf");
    std::fs::write(
        &leaf_conf,
        format!(
            "port: -1\nleafnodes {{ reconnect: 30, remotes [ {{ url: \"nats-leaf://edge:e@127.0.0.1:{leaf_port}\" }} ] }}\n"
        ),
    )
    .unwrap();
    struct Kill(Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _leaf = Kill(
        Command::new(super::support::procs::go_nats_server_2_9())
            .arg("-c")
            .arg(&leaf_conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let leafs = || async { monitor(http_port, "/leafz").await["leafnodes"].as_u64() };
    let end = Instant::now() + WAIT;
    while leafs().await != Some(1) {
        assert!(
            Instant::now() < end,
            "leaf not attached:\n{}",
            hub.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (alice, drops) = client(&hub.url(), "alice", "a").await;

    let lines = hub.reload(&hub_conf(&[("alice", "a")])).await;
    assert!(
        lines.contains("leafnode authentication error - User \"edge\""),
        "{lines}"
    );
    let end = Instant::now() + WAIT;
    while leafs().await != Some(0) {
        assert!(
            Instant::now() < end,
            "leaf still attached:\n{}",
            hub.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    alice.flush().await.unwrap();
    assert_eq!(drops.load(Ordering::SeqCst), 0);
}

/// `(routes, remotes)` in `/varz` of the server whose monitor port is
/// `http`.
async fn route_counts(http: u16) -> (u64, u64) {
    let v = monitor(http, "/varz").await;
    (
        v["routes"].as_u64().unwrap_or(0),
        v["remotes"].as_u64().unwrap_or(0),
    )
}

async fn wait_remotes(http: u16, want: u64) {
    let end = Instant::now() + WAIT;
    while route_counts(http).await.1 != want {
        assert!(
            Instant::now() < end,
            "remotes of :{http} never {want}: {:?} {:?}",
            route_counts(http).await,
            monitor(http, "/routez").await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether a message published on `from` reaches a subscriber on `to`
/// within a second (interest crosses the route first).
async fn crosses(from: &async_nats::Client, to: &async_nats::Client, subject: &str) -> bool {
    let mut sub = to.subscribe(subject.to_string()).await.unwrap();
    to.flush().await.unwrap();
    let end = Instant::now() + Duration::from_secs(1);
    while Instant::now() < end {
        from.publish(subject.to_string(), "x".into()).await.unwrap();
        from.flush().await.unwrap();
        if let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(100), sub.next()).await {
            return true;
        }
    }
    false
}

/// A reload adds a configured route (dialled at once) and removes it
/// again (its connection closed and not re-dialled, with nats-server's
/// `Removed route` notice), towards our own server and, with a pool,
/// towards Go nats-server 2.15.1; our clients stay connected throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_reload_adds_and_removes_routes() {
    for go in [false, true] {
        let (seed_cluster, seed_http, http) = (free_port(), free_port(), free_port());
        let seed_conf = format!(
            "http: 127.0.0.1:{seed_http}\ncluster {{ name: c1, listen: 127.0.0.1:{seed_cluster} }}\n"
        );
        let seed = if go {
            Server::start_with(
                super::support::procs::go_nats_server_2_15(),
                &[],
                &seed_conf,
            )
        } else {
            Server::start(&seed_conf)
        };
        let seed_port = seed.port;
        let conf = |routes: bool| {
            let r = if routes {
                format!("routes: [ \"nats-route://127.0.0.1:{seed_cluster}\" ]")
            } else {
                String::new()
            };
            // Pooled towards Go: nats-server re-dials a peer without
            // pools whose last route closed (its upgrade path), which a
            // pooled peer is not.
            let pool = if go { "pool_size: 3" } else { "" };
            format!(
                "http: 127.0.0.1:{http}\ncluster {{ name: c1, listen: 127.0.0.1:-1\n{pool}\n{r} }}\n"
            )
        };
        let ours = Server::start(&conf(false));
        let seed_client = async_nats::connect(format!("nats://127.0.0.1:{seed_port}"))
            .await
            .unwrap();
        let (client, reconnects) = anonymous(&ours.url()).await;
        assert_eq!(route_counts(http).await, (0, 0));
        assert!(!crosses(&client, &seed_client, "before").await);

        let log = ours.reload(&conf(true)).await;
        assert!(log.contains("Reloaded: cluster routes"), "{log}");
        assert!(!log.contains("Failed"), "{log}");
        wait_remotes(http, 1).await;
        wait_remotes(seed_http, 1).await;
        assert!(crosses(&client, &seed_client, "added.a").await, "go={go}");
        assert!(crosses(&seed_client, &client, "added.b").await, "go={go}");
        let varz = monitor(http, "/varz").await;
        assert_eq!(
            varz["cluster"]["urls"],
            serde_json::json!([format!("127.0.0.1:{seed_cluster}")])
        );

        let log = ours.reload(&conf(false)).await;
        assert!(
            log.contains(&format!(
                "Removed route nats-route://127.0.0.1:{seed_cluster}"
            )),
            "{log}"
        );
        wait_remotes(http, 0).await;
        wait_remotes(seed_http, 0).await;
        // Past several reconnect backoffs: the removed route stays gone.
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(route_counts(http).await, (0, 0), "go={go}");
        assert!(!crosses(&client, &seed_client, "removed").await);
        assert_eq!(
            monitor(http, "/varz").await["cluster"]["urls"],
            serde_json::json!([])
        );
        // Our own client was never disconnected.
        assert_eq!(reconnects.load(Ordering::SeqCst), 0);
        assert!(matches!(
            client.connection_state(),
            async_nats::connection::State::Connected
        ));
    }
}

/// A reload that changes `cluster { compression }` re-forms the route,
/// which then agrees on the new mode (ours on both ends).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_reload_changes_route_compression() {
    let (a_cluster, a_http, b_http) = (free_port(), free_port(), free_port());
    let a = Server::start(&format!(
        "http: 127.0.0.1:{a_http}\ncluster {{ name: c1, listen: 127.0.0.1:{a_cluster}, compression: s2_fast }}\n"
    ));
    let b_conf = |mode: &str| {
        format!(
            "http: 127.0.0.1:{b_http}\ncluster {{ name: c1, listen: 127.0.0.1:-1, routes: [ \"nats-route://127.0.0.1:{a_cluster}\" ], compression: {mode} }}\n"
        )
    };
    let b = Server::start(&b_conf("off"));
    let modes = |http: u16| async move {
        let v = http_json(http, "/routez").await.unwrap_or_default();
        v["routes"]
            .as_array()
            .map(|r| {
                r.iter()
                    .map(|x| x["compression"].as_str().unwrap_or("").to_string())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    wait_until(WAIT, "a plain route", || async {
        modes(a_http).await == ["not supported"] && modes(b_http).await == ["not supported"]
    })
    .await;
    let log = b.reload(&b_conf("s2_best")).await;
    assert!(log.contains("Reloaded: cluster"), "{log}");
    assert!(!log.contains("Failed"), "{log}");
    wait_until(WAIT, "the route re-formed, compressed", || async {
        modes(a_http).await == ["s2_fast"] && modes(b_http).await == ["s2_best"]
    })
    .await;
    drop(a);
}

/// A new cluster name applies as nats-server applies it: routes already
/// up stay and carry messages, INFOs carry the new name (a joining server
/// must match it), and our solicited leaf connection reconnects so its
/// hub sees the new name. A cluster `authorization { timeout }` change is
/// still refused and touches nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_reload_renames_the_cluster() {
    let (a_cluster, a_http, hub_leaf, hub_http) =
        (free_port(), free_port(), free_port(), free_port());
    let _hub = Server::start(&format!(
        "http: 127.0.0.1:{hub_http}\nleafnodes {{ listen: 127.0.0.1:{hub_leaf} }}\n"
    ));
    let a_conf = |extra: &str| {
        format!(
            "http: 127.0.0.1:{a_http}\ncluster {{ listen: 127.0.0.1:{a_cluster} {extra} }}\nleafnodes {{ remotes [ {{ url: \"nats-leaf://127.0.0.1:{hub_leaf}\" }} ] }}\n"
        )
    };
    let joiner = |name: &str| {
        Server::start(&format!(
            "cluster {{ name: {name}, listen: 127.0.0.1:-1, routes: [ \"nats-route://127.0.0.1:{a_cluster}\" ] }}\n"
        ))
    };
    let a = Server::start(&a_conf("\nname: c1\n"));
    let b = joiner("c1");
    wait_remotes(a_http, 1).await;
    let leaf_ids = || async { link_modes(hub_http, true).await };
    wait_until(WAIT, "the leaf on the hub", || async {
        leaf_ids().await.len() == 1
    })
    .await;
    let before = leaf_ids().await;
    let (ca, cb) = (
        async_nats::connect(a.url()).await.unwrap(),
        async_nats::connect(b.url()).await.unwrap(),
    );
    assert!(crosses(&ca, &cb, "rn.before").await);

    let log = a.reload(&a_conf("\nname: c2\n")).await;
    assert!(!log.contains("Failed"), "{log}");
    assert!(log.contains("Cluster name updated to c2"), "{log}");
    assert_eq!(monitor(a_http, "/varz").await["cluster"]["name"], "c2");
    // The route stays; the leaf reconnects.
    assert_eq!(route_counts(a_http).await.1, 1);
    assert!(crosses(&ca, &cb, "rn.after").await);
    assert!(crosses(&cb, &ca, "rn.back").await);
    wait_until(WAIT, "the leaf back with a new connection", || async {
        let now = leaf_ids().await;
        now.len() == 1 && now != before
    })
    .await;
    // Joining servers must match the new name.
    let stale = joiner("c1");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(route_counts(a_http).await.1, 1);
    drop(stale);
    let _fresh = joiner("c2");
    wait_remotes(a_http, 2).await;

    let log = a
        .reload(&a_conf("\nname: c2\nauthorization { timeout: 9 }\n"))
        .await;
    assert!(
        log.contains("Failed to reload server configuration")
            && log.contains("config reload not supported for Cluster"),
        "{log}"
    );
    assert_eq!(route_counts(a_http).await.1, 2);
}

/// Route users reload as nats-server's: after `cluster { authorization }`
/// changes, a route a peer dialled with the old user is closed with
/// `-ERR 'Authorization Violation'` and refused until the peer presents
/// the new one (a Go nats-server 2.15.1 peer, reloaded with the new user
/// in its route URL); a route this server dialled stays; our clients stay
/// connected. Every server without pools.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_reload_changes_route_users() {
    route_users_rotate("pool_size: -1", 2).await;
}

/// The same with pools of three on every server (the Go peer's default).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_reload_changes_route_users_pooled() {
    route_users_rotate("pool_size: 3", 6).await;
}

/// `pool` is the cluster block's pool line for all three servers, `conns`
/// how many route connections A has once its two peers' pools are full.
async fn route_users_rotate(pool: &str, conns: u64) {
    let (a_cluster, a_http, c_cluster, c_http, b_http) = (
        free_port(),
        free_port(),
        free_port(),
        free_port(),
        free_port(),
    );
    let c = Server::start(&format!(
        "http: 127.0.0.1:{c_http}\ncluster {{ name: c1, listen: 127.0.0.1:{c_cluster}, {pool} }}\n"
    ));
    let a_conf = |user: &str| {
        format!(
            "http: 127.0.0.1:{a_http}\ncluster {{ name: c1, listen: 127.0.0.1:{a_cluster}, {pool}\nauthorization {{ user: {user}, password: secret-{user} }}\nroutes: [ \"nats-route://127.0.0.1:{c_cluster}\" ] }}\n"
        )
    };
    let a = Server::start(&a_conf("r1"));
    let b_conf = |user: &str| {
        format!(
            "http: 127.0.0.1:{b_http}\ncluster {{ name: c1, listen: 127.0.0.1:-1, {pool}\nauthorization {{ user: {user}, password: secret-{user} }}\nroutes: [ \"nats-route://{user}:secret-{user}@127.0.0.1:{a_cluster}\" ] }}\n"
        )
    };
    let b = Server::start_with(
        super::support::procs::go_nats_server_2_15(),
        &[],
        &b_conf("r1"),
    );
    // A reaches B (which dialled it) and C (which it dialled).
    wait_remotes(a_http, 2).await;
    wait_until(WAIT, "A's route connections", || async {
        route_counts(a_http).await.0 >= conns
    })
    .await;
    let (client, disconnects) = anonymous(&a.url()).await;
    let (b_client, c_client) = (
        async_nats::connect(b.url()).await.unwrap(),
        async_nats::connect(c.url()).await.unwrap(),
    );
    assert!(crosses(&client, &b_client, "ru.b.before").await);
    assert!(crosses(&client, &c_client, "ru.c.before").await);

    let log = a.reload(&a_conf("r2")).await;
    assert!(!log.contains("Failed"), "{log}");
    assert!(
        log.contains("Reloaded: cluster authorization") && !log.contains("(0 accepted"),
        "{log}"
    );
    // B's routes are closed and its re-dials with the old user refused;
    // the route A dialled to C stays.
    wait_remotes(a_http, 1).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(route_counts(a_http).await.1, 1);
    let routez = monitor(a_http, "/routez").await;
    assert_eq!(
        routez["routes"][0]["remote_id"],
        monitor(c_http, "/varz").await["server_id"],
        "{routez}"
    );
    assert!(crosses(&client, &c_client, "ru.c.after").await);
    let b_log = std::fs::read_to_string(b.dir().join("server.log")).unwrap();
    assert!(b_log.contains("Authorization Violation"), "{b_log}");

    // B presents the new user: the route forms again.
    let log = b.reload(&b_conf("r2")).await;
    assert!(log.contains("Reloaded server configuration"), "{log}");
    wait_remotes(a_http, 2).await;
    assert!(crosses(&client, &b_client, "ru.b.after").await);
    assert!(crosses(&b_client, &client, "ru.b.back").await);
    assert_eq!(disconnects.load(Ordering::SeqCst), 0);
}

/// `(rid, compression)` of every route (or, with `leafs`, every leaf
/// connection: `(id, compression)`) in the monitoring page of `http`.
async fn link_modes(http: u16, leafs: bool) -> Vec<(u64, String)> {
    let (page, list, id) = if leafs {
        ("/leafz", "leafs", "id")
    } else {
        ("/routez", "routes", "rid")
    };
    let v = http_json(http, page).await.unwrap_or_default();
    let mut out: Vec<(u64, String)> = v[list]
        .as_array()
        .map(|l| {
            l.iter()
                .map(|x| {
                    (
                        x[id].as_u64().unwrap_or(0),
                        x["compression"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// Waits until `http` has exactly `links` links (a route pool forms one
/// connection at a time) and every one has compression `mode`; returns
/// their ids.
async fn wait_modes(http: u16, leafs: bool, links: usize, mode: &str) -> Vec<u64> {
    let what = format!("{links} links of :{http} in {mode}");
    wait_until(WAIT, &what, || async {
        let m = link_modes(http, leafs).await;
        m.len() == links && m.iter().all(|(_, c)| c == mode)
    })
    .await;
    link_modes(http, leafs)
        .await
        .into_iter()
        .map(|(id, _)| id)
        .collect()
}

/// Route connections between two servers of `pool_size: 3`.
const ROUTE_POOL: usize = 3;

/// A reload that changes only the level of route compression switches it
/// on the live connections (the same route ids go on, traffic keeps
/// crossing both ways), as nats-server does; one that turns compression
/// off closes them, and the routes re-form plain. Against Go nats-server
/// 2.15.1, pools of three on both sides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_reload_switches_route_compression_level_in_place() {
    let (seed_cluster, seed_http, http) = (free_port(), free_port(), free_port());
    let seed = Server::start_with(
        super::support::procs::go_nats_server_2_15(),
        &[],
        &format!(
            "http: 127.0.0.1:{seed_http}\ncluster {{ name: c1, listen: 127.0.0.1:{seed_cluster}, pool_size: 3, compression: s2_fast }}\n"
        ),
    );
    let conf = |mode: &str| {
        format!(
            "http: 127.0.0.1:{http}\ncluster {{ name: c1, listen: 127.0.0.1:-1, pool_size: 3, routes: [ \"nats-route://127.0.0.1:{seed_cluster}\" ], compression: {mode} }}\n"
        )
    };
    let ours = Server::start(&conf("s2_fast"));
    let before = wait_modes(http, false, ROUTE_POOL, "s2_fast").await;
    wait_modes(seed_http, false, ROUTE_POOL, "s2_fast").await;
    let (a, b) = (
        async_nats::connect(seed.url()).await.unwrap(),
        async_nats::connect(ours.url()).await.unwrap(),
    );
    assert!(crosses(&a, &b, "rc.before.in").await);
    assert!(crosses(&b, &a, "rc.before.out").await);

    let log = ours.reload(&conf("s2_best")).await;
    assert!(!log.contains("Failed"), "{log}");
    assert!(
        log.contains(&format!(
            "Route compression s2_best in force: {} route connections switched level, 0 closed",
            before.len()
        )),
        "{log}"
    );
    assert_eq!(wait_modes(http, false, ROUTE_POOL, "s2_best").await, before);
    assert!(crosses(&a, &b, "rc.best.in").await);
    assert!(crosses(&b, &a, "rc.best.out").await);
    // The Go side decoded every level change without re-forming.
    assert_eq!(link_modes(seed_http, false).await.len(), before.len());
    assert!(link_modes(seed_http, false)
        .await
        .iter()
        .all(|(_, m)| m == "s2_fast"));

    let log = ours.reload(&conf("off")).await;
    assert!(!log.contains("Failed"), "{log}");
    assert!(log.contains("0 route connections switched level"), "{log}");
    let after = wait_modes(http, false, ROUTE_POOL, "not supported").await;
    assert!(after.iter().all(|id| !before.contains(id)), "{after:?}");
    wait_modes(seed_http, false, ROUTE_POOL, "not supported").await;
    assert!(crosses(&a, &b, "rc.off.in").await);
    assert!(crosses(&b, &a, "rc.off.out").await);
}

/// Leaf `compression` reloads as nats-server's: our hub's level changes
/// in place under a Go 2.15.1 leaf (same connection, traffic both ways);
/// our leaf's remote level changes in place under a Go 2.15.1 hub; a
/// remote turned `off` re-forms its link plain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_reload_changes_leaf_compression() {
    use crate::support::procs::{go_nats_server_2_15, ConfNode, Impl};
    let go = Impl::Go(go_nats_server_2_15());

    // Our hub, a Go leaf.
    let (leaf_port, hub_http) = (free_port(), free_port());
    let hub_conf = |mode: &str| {
        format!(
            "http: 127.0.0.1:{hub_http}\nleafnodes {{ listen: 127.0.0.1:{leaf_port}, compression: {mode} }}\n"
        )
    };
    let hub = Server::start(&hub_conf("s2_fast"));
    let leaf = ConfNode::start(
        &go,
        "go-leaf",
        false,
        Some(&format!(
            "remotes [ {{ url: \"nats-leaf://127.0.0.1:{leaf_port}\", compression: s2_fast }} ]"
        )),
    )
    .await;
    let before = wait_modes(hub_http, true, 1, "s2_fast").await;
    let (h, l) = (
        async_nats::connect(hub.url()).await.unwrap(),
        async_nats::connect(leaf.url()).await.unwrap(),
    );
    assert!(crosses(&h, &l, "lc.hub.before.down").await);
    let log = hub.reload(&hub_conf("s2_better")).await;
    assert!(!log.contains("Failed"), "{log}");
    assert!(
        log.contains("Reloaded: LeafNode Compression value is: s2_better"),
        "{log}"
    );
    assert!(
        log.contains("1 connections switched level, 0 closed"),
        "{log}"
    );
    assert_eq!(wait_modes(hub_http, true, 1, "s2_better").await, before);
    assert!(crosses(&h, &l, "lc.hub.after.down").await);
    assert!(crosses(&l, &h, "lc.hub.after.up").await);
    drop((leaf, hub));

    // A Go hub, our leaf.
    let go_hub = ConfNode::start(&go, "go-hub", true, Some("compression: accept")).await;
    let http = free_port();
    let leaf_conf = |mode: &str| {
        format!(
            "http: 127.0.0.1:{http}\nleafnodes {{ remotes [ {{ url: \"{}\", compression: {mode} }} ] }}\n",
            go_hub.leaf_url()
        )
    };
    let ours = Server::start(&leaf_conf("s2_fast"));
    let before = wait_modes(http, true, 1, "s2_fast").await;
    let (h, l) = (
        async_nats::connect(go_hub.url()).await.unwrap(),
        async_nats::connect(ours.url()).await.unwrap(),
    );
    let log = ours.reload(&leaf_conf("s2_best")).await;
    assert!(!log.contains("Failed"), "{log}");
    assert!(
        log.contains(&format!(
            "Reloaded: LeafNode Remote urls=[{:?}], account=\"$G\" Compression value is: s2_best",
            go_hub.leaf_url()
        )),
        "{log}"
    );
    assert_eq!(wait_modes(http, true, 1, "s2_best").await, before);
    assert!(crosses(&l, &h, "lc.leaf.best.up").await);
    assert!(crosses(&h, &l, "lc.leaf.best.down").await);
    let log = ours.reload(&leaf_conf("off")).await;
    assert!(
        log.contains("0 connections switched level, 1 closed"),
        "{log}"
    );
    let after = wait_modes(http, true, 1, "not supported").await;
    assert_ne!(after, before);
    assert!(crosses(&l, &h, "lc.leaf.off.up").await);
    assert!(crosses(&h, &l, "lc.leaf.off.down").await);
}

/// The number of leaf connections `/leafz` of `http` lists.
async fn leaf_count(http: u16) -> usize {
    http_json(http, "/leafz").await.unwrap_or_default()["leafs"]
        .as_array()
        .map_or(0, Vec::len)
}

/// Waits until `/leafz` of `http` lists `n` leaf connections.
async fn wait_leafs(http: u16, n: usize, what: &str) {
    wait_until(WAIT, what, || async { leaf_count(http).await == n }).await;
}

/// Leaf remotes reload as nats-server 2.15 does: a remote added to the
/// configuration is solicited at once, a removed one's connection closes
/// and is not re-dialled, `disabled: true` closes it and `false` brings
/// it back, all without disturbing the edge's own clients. Two Go
/// nats-server 2.15.1 hubs; an added remote whose creds file is missing
/// refuses the reload, naming the file, and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_reload_adds_removes_and_disables_leaf_remotes() {
    use crate::support::procs::{go_nats_server_2_15, ConfNode, Impl};
    let go = Impl::Go(go_nats_server_2_15());
    let (one, two) = (
        ConfNode::start(&go, "go-hub-1", true, None).await,
        ConfNode::start(&go, "go-hub-2", true, None).await,
    );
    let http = free_port();
    let conf = |remotes: &[(&ConfNode, &str)]| {
        let list: Vec<String> = remotes
            .iter()
            .map(|(h, extra)| format!("{{ url: \"{}\" {extra} }}", h.leaf_url()))
            .collect();
        format!(
            "http: 127.0.0.1:{http}\nleafnodes {{ remotes [ {} ] }}\n",
            list.join(", ")
        )
    };
    let edge = Server::start(&conf(&[(&one, "")]));
    wait_leafs(one.http_port, 1, "the leaf on hub 1").await;
    let (local, disconnects) = anonymous(&edge.url()).await;
    let (c1, c2) = (
        async_nats::connect(one.url()).await.unwrap(),
        async_nats::connect(two.url()).await.unwrap(),
    );
    assert!(crosses(&local, &c1, "lr.one.up").await);
    assert!(!crosses(&local, &c2, "lr.two.none").await);

    // Hub 2 added: solicited at once, hub 1 kept (same connection).
    let kept = http_json(one.http_port, "/leafz").await.unwrap()["leafs"][0]["id"].clone();
    let log = edge.reload(&conf(&[(&one, ""), (&two, "")])).await;
    assert!(!log.contains("Failed"), "{log}");
    let name2 = format!("urls=[{:?}], account=\"$G\"", two.leaf_url());
    assert!(
        log.contains(&format!("Reloaded: LeafNode Remote {name2} added")),
        "{log}"
    );
    wait_leafs(two.http_port, 1, "the leaf on hub 2").await;
    assert!(crosses(&local, &c2, "lr.two.up").await);
    assert!(crosses(&c2, &local, "lr.two.down").await);
    assert_eq!(
        http_json(one.http_port, "/leafz").await.unwrap()["leafs"][0]["id"],
        kept
    );

    // Hub 1 removed: its connection closes and stays closed.
    let log = edge.reload(&conf(&[(&two, "")])).await;
    let name1 = format!("urls=[{:?}], account=\"$G\"", one.leaf_url());
    assert!(
        log.contains(&format!("Reloaded: LeafNode Remote {name1} removed")),
        "{log}"
    );
    wait_leafs(one.http_port, 0, "the leaf gone from hub 1").await;
    // Past several reconnect delays (1 s plus jitter).
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(leaf_count(one.http_port).await, 0);
    assert!(!crosses(&local, &c1, "lr.one.removed").await);
    assert!(crosses(&local, &c2, "lr.two.still").await);

    // Hub 2 disabled, then enabled again.
    let log = edge.reload(&conf(&[(&two, ", disabled: true")])).await;
    assert!(
        log.contains(&format!(
            "Reloaded: LeafNode Remote {name2} Disabled value is: true"
        )),
        "{log}"
    );
    wait_leafs(two.http_port, 0, "the leaf gone from hub 2").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(leaf_count(two.http_port).await, 0);
    let log = edge.reload(&conf(&[(&two, ", disabled: false")])).await;
    assert!(
        log.contains(&format!(
            "Reloaded: LeafNode Remote {name2} Disabled value is: false"
        )),
        "{log}"
    );
    wait_leafs(two.http_port, 1, "the leaf back on hub 2").await;
    assert!(crosses(&local, &c2, "lr.two.back").await);

    // A remote whose creds file is missing is refused; nothing changes.
    let missing = "/nonexistent/leaf.creds";
    let log = edge
        .reload(&conf(&[
            (&two, ""),
            (&one, &format!(", credentials: \"{missing}\"")),
        ]))
        .await;
    assert!(
        log.contains("Failed to reload server configuration"),
        "{log}"
    );
    assert!(log.contains(missing), "{log}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(leaf_count(one.http_port).await, 0);
    assert_eq!(leaf_count(two.http_port).await, 1);
    // The edge's own client never lost its connection.
    assert_eq!(disconnects.load(Ordering::SeqCst), 0);
}

/// Route and leaf listener certificates are read again on reload, as
/// nats-server does: new route and leaf handshakes see the renewed
/// certificate, the route already up keeps its session, a node that joins
/// afterwards forms its TLS route; an unusable key refuses the reload;
/// turning cluster TLS off is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_reload_route_and_leaf_certificates_replaced() {
    let pki = tempfile::tempdir().unwrap();
    let ders = write_certs(pki.path(), &["one", "two"]);
    let ca = pki.path().join("ca.pem");
    let (a_cluster, a_http, leaf_port) = (free_port(), free_port(), free_port());
    let tls = |n: &str, key: &str| {
        format!(
            "tls {{ cert_file: \"{}\", key_file: \"{}\", ca_file: \"{}\" }}",
            pki.path().join(format!("{n}.pem")).display(),
            pki.path().join(format!("{key}-key.pem")).display(),
            ca.display()
        )
    };
    let a_conf = |cluster_tls: &str, leaf_tls: &str| {
        format!(
            "http: 127.0.0.1:{a_http}\ncluster {{ name: c1, listen: 127.0.0.1:{a_cluster}\n{cluster_tls}\n}}\nleafnodes {{ listen: 127.0.0.1:{leaf_port}\n{leaf_tls}\n}}\n"
        )
    };
    let joiner = || {
        Server::start(&format!(
            "cluster {{ name: c1, listen: 127.0.0.1:-1, routes: [ \"nats-route://127.0.0.1:{a_cluster}\" ]\n{}\n}}\n",
            tls("two", "two")
        ))
    };
    let a = Server::start(&a_conf(&tls("one", "one"), &tls("one", "one")));
    let b = joiner();
    let routes = || async { link_modes(a_http, false).await.len() };
    wait_until(WAIT, "the TLS route", || async { routes().await == 1 }).await;
    assert_eq!(
        fingerprint(&presented_cert_tls_first(a_cluster, &ca).await),
        fingerprint(&ders[0])
    );
    assert_eq!(
        fingerprint(&presented_cert(leaf_port, &ca).await),
        fingerprint(&ders[0])
    );
    let (ca_client, cb_client) = (
        async_nats::connect(a.url()).await.unwrap(),
        async_nats::connect(b.url()).await.unwrap(),
    );
    assert!(crosses(&ca_client, &cb_client, "rt.before").await);

    // Renewal in place: same paths, new certificate and key.
    std::fs::copy(pki.path().join("two.pem"), pki.path().join("one.pem")).unwrap();
    std::fs::copy(
        pki.path().join("two-key.pem"),
        pki.path().join("one-key.pem"),
    )
    .unwrap();
    let lines = a
        .reload(&a_conf(&tls("one", "one"), &tls("one", "one")))
        .await;
    assert!(lines.contains("Reloaded server configuration"), "{lines}");
    assert_eq!(
        fingerprint(&presented_cert_tls_first(a_cluster, &ca).await),
        fingerprint(&ders[1]),
        "new route handshakes use the new certificate"
    );
    assert_eq!(
        fingerprint(&presented_cert(leaf_port, &ca).await),
        fingerprint(&ders[1]),
        "new leaf handshakes use the new certificate"
    );
    assert!(crosses(&ca_client, &cb_client, "rt.after").await);
    let c = joiner();
    wait_until(WAIT, "a second TLS route", || async { routes().await == 2 }).await;
    let cc_client = async_nats::connect(c.url()).await.unwrap();
    assert!(crosses(&ca_client, &cc_client, "rt.joined").await);

    // A key that does not parse: refused, the certificate stays.
    std::fs::write(pki.path().join("bad-key.pem"), "not a key").unwrap();
    let lines = a
        .reload(&a_conf(&tls("two", "bad"), &tls("one", "one")))
        .await;
    assert!(
        lines.contains("Failed to reload server configuration"),
        "{lines}"
    );
    assert_eq!(
        fingerprint(&presented_cert_tls_first(a_cluster, &ca).await),
        fingerprint(&ders[1])
    );
    // TLS off on routes: refused.
    let lines = a.reload(&a_conf("", &tls("one", "one"))).await;
    assert!(
        lines.contains("config reload not supported for Cluster"),
        "{lines}"
    );
    assert_eq!(routes().await, 2);
}

/// The first line (`INFO {...}`) a listener sends, as JSON.
async fn first_info(port: u16) -> serde_json::Value {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while tokio::time::timeout(WAIT, s.read_exact(&mut b))
        .await
        .is_ok_and(|r| r.is_ok())
        && b[0] != b'\n'
    {
        line.push(b[0]);
    }
    let text = String::from_utf8_lossy(&line).into_owned();
    serde_json::from_str(text.trim().trim_start_matches("INFO ")).unwrap_or_else(|e| {
        panic!("not an INFO line ({e}): {text:?}");
    })
}

/// `cluster { no_advertise, advertise }` reload as nats-server's: new
/// client INFOs stop (or start) carrying the cluster's client URLs, and
/// new route INFOs carry the new advertised route address; a malformed
/// `advertise` is refused with nats-server's text. The route stays up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_reload_changes_cluster_advertising() {
    let (a_cluster, a_http) = (free_port(), free_port());
    let a_conf = |extra: &str| {
        format!(
            "http: 127.0.0.1:{a_http}\ncluster {{ name: c1, listen: 127.0.0.1:{a_cluster}\n{extra}\n}}\n"
        )
    };
    let a = Server::start(&a_conf(""));
    let b = Server::start(&format!(
        "cluster {{ name: c1, listen: 127.0.0.1:-1, routes: [ \"nats-route://127.0.0.1:{a_cluster}\" ] }}\n"
    ));
    let b_url = format!("127.0.0.1:{}", b.port);
    let urls = || async {
        first_info(a.port).await["connect_urls"]
            .as_array()
            .map(|l| {
                l.iter()
                    .filter_map(|u| u.as_str().map(str::to_string))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    wait_until(WAIT, "B's client URL in A's INFO", || async {
        urls().await.contains(&b_url)
    })
    .await;
    assert!(first_info(a_cluster).await["ip"].is_null());

    let lines = a.reload(&a_conf("no_advertise: true")).await;
    assert!(lines.contains("Reloaded: cluster"), "{lines}");
    assert_eq!(urls().await, Vec::<String>::new());
    assert!(first_info(a_cluster).await["connect_urls"]
        .as_array()
        .is_none_or(Vec::is_empty));

    let lines = a.reload(&a_conf("advertise: \"10.9.8.7:4248\"")).await;
    assert!(lines.contains("Reloaded: cluster"), "{lines}");
    assert_eq!(
        first_info(a_cluster).await["ip"],
        "nats-route://10.9.8.7:4248/"
    );
    assert!(urls().await.contains(&b_url));

    let lines = a.reload(&a_conf("advertise: \"10.9.8.7:port\"")).await;
    assert!(
        lines.contains("invalid Cluster.Advertise value of 10.9.8.7:port"),
        "{lines}"
    );
    assert_eq!(
        first_info(a_cluster).await["ip"],
        "nats-route://10.9.8.7:4248/"
    );
    assert_eq!(link_modes(a_http, false).await.len(), 1, "the route stays");
}

/// A publish on `m.x` from `c` reaches `sub` on `want`.
async fn mapped_to(c: &async_nats::Client, sub: &mut async_nats::Subscriber, want: &str) {
    c.publish("m.x", "x".into()).await.unwrap();
    c.flush().await.unwrap();
    let m = tokio::time::timeout(WAIT, sub.next())
        .await
        .expect("message in time")
        .expect("subscription open");
    assert_eq!(m.subject.as_str(), want);
}

/// Subject mappings change on reload: a publish on the source goes to the
/// new destination on the same connection; a Go 2.15.1 leaf connected
/// before the reload learns the new source and what it publishes there is
/// mapped; a bad mapping is refused and the old one stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_reload_changes_mappings() {
    use crate::support::procs::{go_nats_server_2_15, ConfNode, Impl};
    let leaf_port = free_port();
    let conf =
        |m: &str| format!("leafnodes {{ listen: 127.0.0.1:{leaf_port} }}\nmappings {{ {m} }}\n");
    let s = Server::start(&conf("\"m.*\": \"first.$1\""));
    let (c, drops) = anonymous(&s.url()).await;
    let mut sub = c.subscribe(">").await.unwrap();
    c.flush().await.unwrap();
    mapped_to(&c, &mut sub, "first.x").await;
    let leaf = ConfNode::start(
        &Impl::Go(go_nats_server_2_15()),
        "map-reload-leaf",
        false,
        Some(&format!(
            "remotes [ {{ url: \"nats-leaf://127.0.0.1:{leaf_port}\" }} ]"
        )),
    )
    .await;
    leaf.wait_leaf_interest("m.*").await;
    let lines = s
        .reload(&conf(
            "\"m.*\": \"second.{{wildcard(1)}}\", \"edge.*\": \"from.edge.$1\"",
        ))
        .await;
    assert!(lines.contains("Reloaded: mappings"), "{lines}");
    mapped_to(&c, &mut sub, "second.x").await;
    leaf.wait_leaf_interest("edge.*").await;
    let l = async_nats::connect(leaf.url()).await.unwrap();
    l.publish("edge.y", "y".into()).await.unwrap();
    l.flush().await.unwrap();
    let m = tokio::time::timeout(WAIT, sub.next())
        .await
        .expect("message in time")
        .expect("subscription open");
    assert_eq!(m.subject.as_str(), "from.edge.y");
    let lines = s.reload(&conf("\"m.*\": \"bad.*\"")).await;
    assert!(
        lines.contains("Failed to reload server configuration")
            && lines.contains("invalid mapping destination"),
        "{lines}"
    );
    mapped_to(&c, &mut sub, "second.x").await;
    assert_eq!(drops.load(Ordering::SeqCst), 0);
}

/// The `websocket` block's own authorization reloads: a new token admits
/// new WebSocket clients and the old one no longer does; TCP clients (no
/// authorization) are untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_reload_changes_websocket_authorization() {
    let ws_port = free_port();
    let conf = |tok: &str| {
        format!(
            "websocket {{ listen: 127.0.0.1:{ws_port}, no_tls: true, authorization {{ token: {tok} }} }}\n"
        )
    };
    let s = Server::start(&conf("first"));
    let ws = format!("ws://127.0.0.1:{ws_port}");
    let with_token = |t: &'static str| {
        let ws = ws.clone();
        async move {
            async_nats::ConnectOptions::with_token(t.into())
                .connect(ws)
                .await
                .is_ok()
        }
    };
    let (tcp, drops) = anonymous(&s.url()).await;
    assert!(with_token("first").await);
    let lines = s.reload(&conf("second")).await;
    assert!(
        lines.contains("Reloaded: websocket authorization"),
        "{lines}"
    );
    assert!(with_token("second").await);
    assert!(!with_token("first").await);
    tcp.flush().await.unwrap();
    assert_eq!(drops.load(Ordering::SeqCst), 0);
}
