//! A launcher offering the functions async-nats's integration tests import
//! from their `nats_server` helper crate (which is not published), written
//! from the documented launch behaviour (`spec/nats.md` §2.3): run
//! `nats-server` from PATH with `--store_dir D -p -1 -l LOG -P PID [-c CFG]`,
//! find the port in the log (`client connections on H:P`), read `port` and
//! `tls_required` from the INFO line, and enter lame duck mode with
//! `nats-server --signal ldm=<pid>`. With our binary first on PATH as
//! `nats-server`, the async-nats suite runs against it unchanged.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A running server, killed (and its files removed) on drop.
pub struct Server {
    child: Child,
    dir: PathBuf,
    pid_file: PathBuf,
    port: u16,
    tls: bool,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Server {
    /// `nats://localhost:P` or `tls://localhost:P`.
    pub fn client_url(&self) -> String {
        let scheme = if self.tls { "tls" } else { "nats" };
        format!("{scheme}://localhost:{}", self.port)
    }

    /// The client port.
    pub fn client_port(&self) -> u16 {
        self.port
    }
}

/// A server with no config file.
pub fn run_basic_server() -> Server {
    run_server_with_port("", None)
}

/// A server with config file `cfg` (relative to the test's working directory).
pub fn run_server(cfg: &str) -> Server {
    run_server_with_port(cfg, None)
}

/// A server with config `cfg` (may be empty) on `port` (random if `None`).
pub fn run_server_with_port(cfg: &str, port: Option<&str>) -> Server {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "nats-server-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let log = dir.join("nats-server.log");
    let pid_file = dir.join("nats-server.pid");
    let mut cmd = Command::new("nats-server");
    cmd.arg("--store_dir")
        .arg(dir.join("store"))
        .args(["-p", port.unwrap_or("-1")])
        .arg("-l")
        .arg(&log)
        .arg("-P")
        .arg(&pid_file);
    if !cfg.is_empty() {
        cmd.arg("-c").arg(cfg);
    }
    let child = cmd.spawn().expect("nats-server on PATH");
    let deadline = Instant::now() + Duration::from_secs(10);
    let addr = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let found = text.lines().find_map(|l| {
            let (_, rest) = l.split_once(" client connections on ")?;
            rest.split_whitespace().next().map(str::to_string)
        });
        if let Some(a) = found {
            break a.replace("0.0.0.0", "localhost");
        }
        assert!(Instant::now() < deadline, "no listening line in log:\n{text}");
        std::thread::sleep(Duration::from_millis(10));
    };
    let stream = TcpStream::connect(&addr).expect("connect for INFO");
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).expect("INFO line");
    let info: serde_json::Value =
        serde_json::from_str(line.trim_start_matches("INFO").trim()).expect("INFO json");
    Server {
        child,
        dir,
        pid_file,
        port: info["port"].as_u64().expect("port in INFO") as u16,
        tls: info["tls_required"].as_bool().unwrap_or(false),
    }
}

/// `nats-server --signal ldm=<pid>`.
pub fn set_lame_duck_mode(s: &Server) {
    let pid = std::fs::read_to_string(&s.pid_file).expect("pid file");
    let st = Command::new("nats-server")
        .arg("--signal")
        .arg(format!("ldm={}", pid.trim()))
        .status()
        .expect("nats-server --signal");
    assert!(st.success());
}
