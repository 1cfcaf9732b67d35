//! Processes under test: a [`Proc`] is one child process with fixed
//! arguments, its own temp dir and log file; it is killed (SIGKILL) on
//! drop, also when the test panics.
//!
//! [`NatsNode`] is a NATS server with a client port, a cluster (route)
//! port and a monitoring port, either our binary in `nats-server` mode or a
//! Go `nats-server` (they take the same flags). [`LiftbridgeNode`] is a full
//! liftbridge node configured through a liftbridge.yaml.
//!
//! Restart keeps the ports and the temp dir (a `kill -9` then `restart`
//! is a crash and a reboot of the same node).
//!
//! [`ConfNode`] is a NATS server (ours or Go) started from a config file,
//! for leaf-node tests.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{free_port, http_json, wait_until};

/// How long a process may take to start listening on a loaded machine.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The Go nats-server 2.15.1 that CI installs into `.venv` (from
/// tests/py/requirements.txt). Tests that need it fail (not skip) when it
/// is missing.
pub fn go_nats_server_2_15() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/nats-server");
    assert!(
        p.exists(),
        "{} is missing: run scripts/test.sh (it builds .venv from tests/py/requirements.txt)",
        p.display()
    );
    p
}

/// Runs the built `liftbridge` with `args` in `dir` to its end and returns
/// its standard output and error; fails the test, showing both, if it
/// exits with an error.
pub fn run_liftbridge<I, S>(dir: &Path, args: I) -> (String, String)
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let args: Vec<std::ffi::OsString> = args
        .into_iter()
        .map(|a| a.as_ref().to_os_string())
        .collect();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_liftbridge"))
        .args(&args)
        .current_dir(dir)
        .output()
        .expect("run liftbridge");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "liftbridge {args:?} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    (stdout, stderr)
}

/// Debian's Go nats-server 2.9.10 (`apt-get install nats-server`).
pub fn go_nats_server_2_9() -> PathBuf {
    let p = PathBuf::from("/usr/sbin/nats-server");
    assert!(
        p.exists(),
        "{} is missing: apt-get install nats-server",
        p.display()
    );
    p
}

/// One child process.
pub struct Proc {
    program: PathBuf,
    args: Vec<String>,
    /// Environment variables added for the child.
    env: Vec<(String, String)>,
    child: Option<Child>,
    /// The process's own directory (data, config, log).
    pub dir: tempfile::TempDir,
    /// stdout and stderr of every run, appended.
    pub log: PathBuf,
}

impl Proc {
    /// Starts `program args…` with its output appended to `<dir>/out.log`.
    pub fn spawn(program: &Path, args: Vec<String>, dir: tempfile::TempDir) -> Proc {
        Proc::spawn_with_env(program, args, Vec::new(), dir)
    }

    /// [`Proc::spawn`] with `env` added to the child's environment.
    pub fn spawn_with_env(
        program: &Path,
        args: Vec<String>,
        env: Vec<(String, String)>,
        dir: tempfile::TempDir,
    ) -> Proc {
        let log = dir.path().join("out.log");
        let mut p = Proc {
            program: program.to_path_buf(),
            args,
            env,
            child: None,
            dir,
            log,
        };
        p.start();
        p
    }

    fn start(&mut self) {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("open log");
        let err = out.try_clone().expect("clone log handle");
        let child = Command::new(&self.program)
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", self.program.display()));
        self.child = Some(child);
    }

    /// `kill -9` and reap.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM (a clean shutdown), then `kill -9` when the process has not
    /// exited within `grace`; reaps it either way.
    pub async fn stop(&mut self, grace: Duration) {
        let Some(c) = self.child.as_mut() else { return };
        if let Ok(pid) = libc::pid_t::try_from(c.id()) {
            // SAFETY: kill(2) on our own child's pid; it has not been reaped
            // (we hold the Child), so the pid cannot have been reused.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
        let end = tokio::time::Instant::now() + grace;
        while tokio::time::Instant::now() < end {
            if matches!(c.try_wait(), Ok(Some(_)) | Err(_)) {
                self.child = None;
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        self.kill9();
    }

    /// Starts again with the same arguments (after [`Proc::kill9`]).
    pub fn restart(&mut self) {
        self.kill9();
        self.start();
    }

    /// The process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Everything the process has logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the process has exited (it must within `within`, e.g. a
    /// server refusing its config) and returns everything it logged.
    pub async fn exit_log(&mut self, within: Duration, what: &str) -> String {
        wait_until(within, what, || {
            let running = self.is_running();
            async move { !running }
        })
        .await;
        self.log_text()
    }

    /// Waits until 127.0.0.1:`port` accepts connections; an exit of the
    /// process or the deadline passing is an error carrying the log.
    pub async fn try_wait_port(&mut self, port: u16) -> Result<(), String> {
        let end = tokio::time::Instant::now() + START_TIMEOUT;
        loop {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return Ok(());
            }
            if !self.is_running() {
                return Err(format!(
                    "{} exited; log:\n{}",
                    self.program.display(),
                    self.log_text()
                ));
            }
            if tokio::time::Instant::now() >= end {
                return Err(format!(
                    "port {port} not listening; log:\n{}",
                    self.log_text()
                ));
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

impl Drop for Proc {
    /// Kills the child; when a test is failing, the end of the child's log
    /// goes to stderr first, so a failure in CI shows what the process saw.
    fn drop(&mut self) {
        self.kill9();
        if std::thread::panicking() {
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = &lines[lines.len().saturating_sub(LOG_TAIL_LINES)..];
            eprintln!(
                "---- last {} lines of {} ({}) ----\n{}",
                tail.len(),
                self.log.display(),
                self.program.display(),
                tail.join("\n")
            );
        }
    }
}

/// Lines of a child's log printed when a test fails.
const LOG_TAIL_LINES: usize = 80;

/// Writes `yaml` as `liftbridge.yaml` in `dir` and starts the built
/// `liftbridge -c` on it (not waiting for it to listen).
pub fn spawn_liftbridge(yaml: &str, dir: tempfile::TempDir) -> Proc {
    let cfg = dir.path().join("liftbridge.yaml");
    std::fs::write(&cfg, yaml).expect("write liftbridge.yaml");
    Proc::spawn(
        Path::new(env!("CARGO_BIN_EXE_liftbridge")),
        vec!["-c".into(), cfg.display().to_string()],
        dir,
    )
}

/// Number of distinct peers (`remote_id`) in a `/routez` body.
pub fn distinct_remotes(routez: &serde_json::Value) -> usize {
    let ids: std::collections::HashSet<&str> = routez["routes"]
        .as_array()
        .map(|l| l.iter().filter_map(|r| r["remote_id"].as_str()).collect())
        .unwrap_or_default();
    ids.len()
}

/// Which NATS server implementation a [`NatsNode`] runs.
#[derive(Debug, Clone)]
pub enum Impl {
    /// `liftbridge nats-server …`.
    Liftbridge,
    /// A Go nats-server binary.
    Go(PathBuf),
}

/// A NATS server with routes.
pub struct NatsNode {
    pub proc: Proc,
    pub client_port: u16,
    pub cluster_port: u16,
    pub http_port: u16,
}

impl NatsNode {
    /// Starts a server in cluster `cluster` whose routes are the given
    /// cluster ports (seeds), on fresh ports; waits until it listens.
    pub async fn start(imp: &Impl, cluster: &str, routes: &[u16]) -> NatsNode {
        Self::start_with(imp, cluster, routes, &[]).await
    }

    /// As [`NatsNode::start`] with extra flags.
    pub async fn start_with(imp: &Impl, cluster: &str, routes: &[u16], extra: &[&str]) -> NatsNode {
        // A port picked by `free_port` can be taken by someone else before
        // the server binds it: start again on fresh ports then.
        let mut last = String::new();
        for _ in 0..3 {
            match Self::try_start(imp, cluster, routes, extra).await {
                Ok(n) => return n,
                Err(e) => last = e,
            }
        }
        panic!("server did not start three times; last: {last}");
    }

    async fn try_start(
        imp: &Impl,
        cluster: &str,
        routes: &[u16],
        extra: &[&str],
    ) -> Result<NatsNode, String> {
        let (client_port, cluster_port, http_port) = (free_port(), free_port(), free_port());
        let mut args: Vec<String> = Vec::new();
        let program = match imp {
            Impl::Liftbridge => {
                args.push("nats-server".into());
                PathBuf::from(env!("CARGO_BIN_EXE_liftbridge"))
            }
            Impl::Go(p) => p.clone(),
        };
        args.extend(
            [
                "-a",
                "127.0.0.1",
                "-p",
                &client_port.to_string(),
                "-m",
                &http_port.to_string(),
                "--cluster",
                &format!("nats://127.0.0.1:{cluster_port}"),
                "--cluster_name",
                cluster,
            ]
            .iter()
            .map(|s| s.to_string()),
        );
        if !routes.is_empty() {
            let list: Vec<String> = routes
                .iter()
                .map(|p| format!("nats://127.0.0.1:{p}"))
                .collect();
            args.push("--routes".into());
            args.push(list.join(","));
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        let dir = tempfile::tempdir().expect("temp dir");
        let proc = Proc::spawn(&program, args, dir);
        let mut n = NatsNode {
            proc,
            client_port,
            cluster_port,
            http_port,
        };
        n.try_ready().await?;
        Ok(n)
    }

    async fn try_ready(&mut self) -> Result<(), String> {
        for p in [self.client_port, self.cluster_port, self.http_port] {
            self.proc.try_wait_port(p).await?;
        }
        Ok(())
    }

    /// Waits until the client, cluster and monitoring ports listen.
    pub async fn wait_ready(&mut self) {
        if let Err(e) = self.try_ready().await {
            panic!("{e}");
        }
    }

    /// `nats://127.0.0.1:<client port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.client_port)
    }

    /// `/routez`.
    pub async fn routez(&self) -> serde_json::Value {
        http_json(self.http_port, "/routez")
            .await
            .unwrap_or(serde_json::Value::Null)
    }

    /// Waits until the server is routed to `n` other servers (distinct
    /// `remote_id`s: Go 2.10+ servers pool several connections per peer
    /// among themselves).
    pub async fn wait_routes(&self, n: usize) {
        let what = format!("routes to {n} servers on :{}", self.client_port);
        wait_until(START_TIMEOUT, &what, || async {
            distinct_remotes(&self.routez().await) == n
        })
        .await;
    }

    /// `kill -9`, then start again on the same ports and wait for them.
    pub async fn crash_and_restart(&mut self) {
        self.proc.kill9();
        self.proc.restart();
        self.wait_ready().await;
    }
}

/// Starts three servers of `imp` meshed from one seed (the first), and
/// waits for the full mesh (two routes each).
pub async fn mesh3(imp: &Impl, cluster: &str) -> Vec<NatsNode> {
    let a = NatsNode::start(imp, cluster, &[]).await;
    let b = NatsNode::start(imp, cluster, &[a.cluster_port]).await;
    let c = NatsNode::start(imp, cluster, &[a.cluster_port]).await;
    let nodes = vec![a, b, c];
    for n in &nodes {
        n.wait_routes(2).await;
    }
    nodes
}

/// A full liftbridge node (gRPC, embedded NATS with routes, HTTP),
/// configured by a liftbridge.yaml in its temp dir.
pub struct LiftbridgeNode {
    pub proc: Proc,
    pub grpc_port: u16,
    pub client_port: u16,
    pub cluster_port: u16,
    pub http_port: u16,
}

impl LiftbridgeNode {
    /// Starts a node whose NATS routes go to `routes` (cluster ports), in
    /// NATS cluster `cluster`, with Raft bootstrapped as a one-node group
    /// (`clustering.raft.bootstrap.seed: true`). `extra_yaml` is appended
    /// to the generated file.
    pub async fn start(cluster: &str, routes: &[u16], extra_yaml: &str) -> LiftbridgeNode {
        // Fresh ports when one was taken before the node bound it.
        let mut last = String::new();
        for _ in 0..3 {
            match Self::try_start(cluster, routes, extra_yaml).await {
                Ok(n) => return n,
                Err(e) => last = e,
            }
        }
        panic!("node did not start three times; last: {last}");
    }

    async fn try_start(
        cluster: &str,
        routes: &[u16],
        extra_yaml: &str,
    ) -> Result<LiftbridgeNode, String> {
        let (grpc_port, client_port, cluster_port, http_port) =
            (free_port(), free_port(), free_port(), free_port());
        let dir = tempfile::tempdir().expect("temp dir");
        let routes_yaml: String = routes
            .iter()
            .map(|p| format!("      - nats-route://127.0.0.1:{p}\n"))
            .collect();
        let yaml = format!(
            "listen: 127.0.0.1:{grpc_port}\n\
             data.dir: {data}\n\
             clustering.raft.bootstrap.seed: true\n\
             http.listen: 127.0.0.1:{http_port}\n\
             nats:\n  listen: 127.0.0.1:{client_port}\n  cluster:\n    name: {cluster}\n    listen: 127.0.0.1:{cluster_port}\n{routes_key}{routes_yaml}{extra_yaml}",
            data = dir.path().join("data").display(),
            routes_key = if routes.is_empty() { "" } else { "    routes:\n" },
        );
        let proc = spawn_liftbridge(&yaml, dir);
        let mut n = LiftbridgeNode {
            proc,
            grpc_port,
            client_port,
            cluster_port,
            http_port,
        };
        n.try_ready().await?;
        Ok(n)
    }

    async fn try_ready(&mut self) -> Result<(), String> {
        for p in [
            self.client_port,
            self.cluster_port,
            self.http_port,
            self.grpc_port,
        ] {
            self.proc.try_wait_port(p).await?;
        }
        Ok(())
    }

    /// Waits until gRPC, NATS, cluster and HTTP ports listen.
    pub async fn wait_ready(&mut self) {
        if let Err(e) = self.try_ready().await {
            panic!("{e}");
        }
    }

    /// `kill -9`, then start again with the same config, data and ports.
    pub async fn crash_and_restart(&mut self) {
        self.proc.kill9();
        self.proc.restart();
        self.wait_ready().await;
    }

    /// `nats://127.0.0.1:<client port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.client_port)
    }

    /// Waits until the node's NATS server reports `n` routes.
    pub async fn wait_routes(&self, n: u64) {
        let what = format!("{n} routes on node :{}", self.client_port);
        wait_until(START_TIMEOUT, &what, || async {
            http_json(self.http_port, "/routez")
                .await
                .unwrap_or_default()["num_routes"]
                .as_u64()
                == Some(n)
        })
        .await;
    }
}

/// A NATS server run from a config file (our binary in `nats-server`
/// mode, or a Go nats-server): a client port, a monitoring port and, when
/// asked, a leaf-node listener; `leaf_body` goes inside `leafnodes {}`
/// (e.g. a `remotes [...]` list). Used by the leaf-node tests, where the
/// two implementations must read the same file.
pub struct ConfNode {
    pub proc: Proc,
    pub client_port: u16,
    pub http_port: u16,
    /// The leaf listener port, when the node is a hub.
    pub leaf_port: Option<u16>,
}

impl ConfNode {
    /// Starts `imp` named `name`; `hub`: listen for leaves; `leaf_body`:
    /// more of the `leafnodes {}` block (`None`: no block at all unless
    /// `hub`). Waits until it listens.
    pub async fn start(imp: &Impl, name: &str, hub: bool, leaf_body: Option<&str>) -> ConfNode {
        Self::start_with(imp, name, hub, leaf_body, "").await
    }

    /// As [`ConfNode::start`], with `top` added at the top level of the
    /// file (e.g. a `cluster {}` block).
    pub async fn start_with(
        imp: &Impl,
        name: &str,
        hub: bool,
        leaf_body: Option<&str>,
        top: &str,
    ) -> ConfNode {
        let mut last = String::new();
        for _ in 0..3 {
            match Self::try_start(imp, name, hub, leaf_body, top).await {
                Ok(n) => return n,
                Err(e) => last = e,
            }
        }
        panic!("server did not start three times; last: {last}");
    }

    async fn try_start(
        imp: &Impl,
        name: &str,
        hub: bool,
        leaf_body: Option<&str>,
        top: &str,
    ) -> Result<ConfNode, String> {
        let (client_port, http_port) = (free_port(), free_port());
        let leaf_port = hub.then(free_port);
        let mut conf = format!(
            "server_name: {name}\nlisten: 127.0.0.1:{client_port}\nhttp: 127.0.0.1:{http_port}\n{top}\n"
        );
        if hub || leaf_body.is_some() {
            conf.push_str("leafnodes {\n");
            if let Some(p) = leaf_port {
                conf.push_str(&format!("  listen: 127.0.0.1:{p}\n"));
            }
            conf.push_str(leaf_body.unwrap_or(""));
            conf.push_str("\n}\n");
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("server.conf");
        std::fs::write(&path, conf).expect("write server.conf");
        let (program, mut args) = match imp {
            Impl::Liftbridge => (
                PathBuf::from(env!("CARGO_BIN_EXE_liftbridge")),
                vec!["nats-server".to_string()],
            ),
            Impl::Go(p) => (p.clone(), Vec::new()),
        };
        args.extend(["-c".to_string(), path.display().to_string()]);
        let proc = Proc::spawn(&program, args, dir);
        let mut n = ConfNode {
            proc,
            client_port,
            http_port,
            leaf_port,
        };
        n.try_ready().await?;
        Ok(n)
    }

    async fn try_ready(&mut self) -> Result<(), String> {
        let ports = [Some(self.client_port), Some(self.http_port), self.leaf_port];
        for p in ports.into_iter().flatten() {
            self.proc.try_wait_port(p).await?;
        }
        Ok(())
    }

    /// `nats://127.0.0.1:<client port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.client_port)
    }

    /// A client of user `user` whose password is its name.
    pub async fn connect_as(&self, user: &str) -> async_nats::Client {
        async_nats::ConnectOptions::with_user_and_password(user.into(), user.into())
            .connect(self.url())
            .await
            .unwrap_or_else(|e| panic!("connect {} as {user}: {e}", self.url()))
    }

    /// `nats-leaf://127.0.0.1:<leaf port>` (panics when not a hub).
    pub fn leaf_url(&self) -> String {
        format!(
            "nats-leaf://127.0.0.1:{}",
            self.leaf_port.expect("a hub with a leaf listener")
        )
    }

    /// `/leafz?subs=1`.
    pub async fn leafz(&self) -> serde_json::Value {
        http_json(self.http_port, "/leafz?subs=1")
            .await
            .unwrap_or(serde_json::Value::Null)
    }

    /// Waits until `/leafz` reports `n` leaf connections.
    pub async fn wait_leafs(&self, n: u64) {
        let what = format!("{n} leaf connections on :{}", self.client_port);
        wait_until(START_TIMEOUT, &what, || async {
            self.leafz().await["leafnodes"].as_u64() == Some(n)
        })
        .await;
    }

    /// Waits until a leaf connection of this server carries the peer's
    /// interest in `subject` (its subscriptions have propagated).
    pub async fn wait_leaf_interest(&self, subject: &str) {
        let what = format!("leaf interest in {subject} on :{}", self.client_port);
        wait_until(START_TIMEOUT, &what, || async {
            self.leafz().await["leafs"].as_array().is_some_and(|l| {
                l.iter().any(|leaf| {
                    leaf["subscriptions_list"]
                        .as_array()
                        .is_some_and(|s| s.iter().any(|x| x.as_str() == Some(subject)))
                })
            })
        })
        .await;
    }

    /// `kill -9`, then start again with the same file and ports.
    pub async fn crash_and_restart(&mut self) {
        self.proc.kill9();
        self.proc.restart();
        if let Err(e) = self.try_ready().await {
            panic!("{e}");
        }
    }
}
