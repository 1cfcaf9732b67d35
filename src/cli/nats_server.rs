//! The `nats-server` compatibility mode: Go-style flags, NATS config files,
//! nats-server's log format, pid and ports files, signals.
//!
//! Invoked as `nats-server` (a symlink to the binary) or as
//! `liftbridge nats-server ARGS…`, the binary behaves as client test
//! harnesses expect nats-server to (see `spec/nats.md` §2): it accepts the
//! same flags (single or double dash, `-flag=value`, multi-letter
//! single-dash flags such as `-js`, `-DV`, and `-p -1` for a random port),
//! logs `Listening for client connections on H:P` with the real port and
//! `Server is ready`, writes the pid file and the ports file once
//! listening, and handles SIGUSR2 (lame duck), SIGTERM/SIGINT (shutdown),
//! SIGHUP (reload) and SIGUSR1 (reopen the log file). `--signal` sends
//! those signals to a running server.
//!
//! Flags override the config file. `--cluster`, `--routes` and
//! `--cluster_name` configure routes (`crate::nats::route`). Features we do
//! not provide (JetStream) are accepted with a warning so harnesses that pass them still
//! get a working core server. This module only parses and orchestrates: the
//! server is `crate::nats::server::NatsServer`, monitoring is `crate::http`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::config::nats::{
    parse_cluster_listen, ClusterAuth, ClusterOptions, NatsOptions, TlsFiles, User,
};
use crate::config::nats_conf::{self, NatsConf};

/// Version reported by `-v` (the one the server sends in INFO).
pub const VERSION: &str = crate::nats::server::SERVER_VERSION;

const USAGE: &str = "\
Usage: nats-server [options]

Server Options:
    -a, --addr, --net <host>         Bind to host address (default: 0.0.0.0)
    -p, --port <port>                Use port for clients (default: 4222, -1 = random)
    -n, --name, --server_name <name> Server name (default: server id)
    -P, --pid <file>                 File to store PID
    -m, --http_port <port>           Use port for http monitoring (-1 = random)
    -c, --config <file>              Configuration file
    -t                               Test configuration and exit
    -sl, --signal <signal>[=<pid>]   Send signal to nats-server process (ldm, stop, quit, term, reopen, reload)
        --ports_file_dir <dir>       Creates a ports file in the specified directory (<executable_name>_<pid>.ports)

Logging Options:
    -l, --log <file>                 File to redirect log output
    -D, --debug                      Enable debugging output
    -V, --trace                      Trace the raw protocol
    -DV                              Debug and trace

JetStream Options (accepted, not provided):
    -js, --jetstream                 Enable JetStream functionality
    -sd, --store_dir <dir>           Set the storage directory

Authorization Options:
        --user <user>                User required for connections
        --pass <password>            Password required for connections
        --auth <token>               Authorization token required for connections

TLS Options:
        --tls                        Enable TLS, do not verify clients (default: false)
        --tlscert <file>             Server certificate file
        --tlskey <file>              Private key for server certificate
        --tlsverify                  Enable TLS, verify client certificates
        --tlscacert <file>           Client certificate CA for verification

Cluster Options (accepted, not provided):
        --routes <rurl-1, rurl-2>    Routes to solicit and connect
        --cluster <cluster-url>      Cluster URL for solicited routes
        --cluster_name <string>      Cluster Name

Common Options:
    -h, --help                       Show this message
    -v, --version                    Show version
";

/// Errors of the command line.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FlagError {
    #[error("flag provided but not defined: -{0}")]
    Unknown(String),
    #[error("flag needs an argument: -{0}")]
    MissingValue(String),
    #[error("invalid value {value:?} for flag -{flag}: {msg}")]
    BadValue {
        flag: String,
        value: String,
        msg: String,
    },
    #[error("unexpected argument {0:?}")]
    Positional(String),
}

/// Parsed flags; `None`/`false` = not given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Flags {
    pub config: Option<PathBuf>,
    pub host: Option<String>,
    pub port: Option<i64>,
    pub name: Option<String>,
    pub http_port: Option<i64>,
    pub log_file: Option<PathBuf>,
    pub pid_file: Option<PathBuf>,
    pub ports_file_dir: Option<PathBuf>,
    pub user: Option<String>,
    pub pass: Option<String>,
    pub auth: Option<String>,
    pub tls: bool,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub tls_verify: bool,
    pub tls_ca: Option<PathBuf>,
    pub debug: Option<bool>,
    pub trace: Option<bool>,
    pub jetstream: bool,
    pub store_dir: Option<PathBuf>,
    pub cluster: Option<String>,
    pub routes: Option<String>,
    pub cluster_name: Option<String>,
    pub cluster_advertise: Option<String>,
    pub no_advertise: bool,
    pub connect_retries: Option<String>,
    pub signal: Option<String>,
    pub version: bool,
    pub test_config: bool,
    pub help: bool,
    /// Accepted flags without effect here, for warnings.
    pub ignored: Vec<String>,
}

/// Whether a flag takes a value (`false` = boolean flag).
fn flag_kind(name: &str) -> Option<bool> {
    Some(match name {
        "a" | "addr" | "net" | "p" | "port" | "n" | "name" | "server_name" | "m" | "http_port"
        | "c" | "config" | "l" | "log" | "P" | "pid" | "ports_file_dir" | "user" | "pass"
        | "auth" | "tlscert" | "tlskey" | "tlscacert" | "sd" | "store_dir" | "cluster"
        | "cluster_listen" | "routes" | "cluster_name" | "sl" | "signal" | "ms" | "https_port"
        | "client_advertise" | "cluster_advertise" | "connect_retries" | "r" | "remote_syslog"
        | "profile" | "max_traced_msg_len" | "http_base_path" | "user_config" => true,
        "tls" | "tlsverify" | "D" | "debug" | "V" | "trace" | "DV" | "VV" | "DVV" | "js"
        | "jetstream" | "v" | "version" | "t" | "h" | "help" | "help_tls" | "T" | "logtime"
        | "s" | "syslog" | "no_advertise" | "log_utc" => false,
        _ => return None,
    })
}

/// Go's `strconv.ParseBool`.
fn parse_bool(flag: &str, v: &str) -> Result<bool, FlagError> {
    match v {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(FlagError::BadValue {
            flag: flag.to_string(),
            value: v.to_string(),
            msg: "parse error".into(),
        }),
    }
}

fn parse_int(flag: &str, v: &str) -> Result<i64, FlagError> {
    v.trim().parse().map_err(|_| FlagError::BadValue {
        flag: flag.to_string(),
        value: v.to_string(),
        msg: "parse error".into(),
    })
}

/// Parses nats-server's flags with Go `flag` package semantics.
pub fn parse_flags(args: &[String]) -> Result<Flags, FlagError> {
    let mut f = Flags::default();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if arg == "--" {
            if let Some(rest) = args.get(i) {
                return Err(FlagError::Positional(rest.clone()));
            }
            break;
        }
        let Some(stripped) = arg
            .strip_prefix("--")
            .or_else(|| arg.strip_prefix('-'))
            .filter(|s| !s.is_empty() && !s.starts_with('-'))
        else {
            return Err(FlagError::Positional(arg.clone()));
        };
        let (name, inline) = match stripped.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (stripped, None),
        };
        let takes_value = flag_kind(name).ok_or_else(|| FlagError::Unknown(name.to_string()))?;
        let value = if takes_value {
            match inline {
                Some(v) => v,
                None => {
                    // Go takes the next argument as the value even when it
                    // starts with '-' (`-p -1`).
                    let v = args
                        .get(i)
                        .cloned()
                        .ok_or_else(|| FlagError::MissingValue(name.to_string()))?;
                    i += 1;
                    v
                }
            }
        } else {
            match &inline {
                Some(v) => parse_bool(name, v)?.to_string(),
                None => "true".to_string(),
            }
        };
        let on = value == "true";
        match name {
            "a" | "addr" | "net" => f.host = Some(value),
            "p" | "port" => f.port = Some(parse_int(name, &value)?),
            "n" | "name" | "server_name" => f.name = Some(value),
            "m" | "http_port" => f.http_port = Some(parse_int(name, &value)?),
            "c" | "config" => f.config = Some(PathBuf::from(value)),
            "l" | "log" => f.log_file = Some(PathBuf::from(value)),
            "P" | "pid" => f.pid_file = Some(PathBuf::from(value)),
            "ports_file_dir" => f.ports_file_dir = Some(PathBuf::from(value)),
            "user" => f.user = Some(value),
            "pass" => f.pass = Some(value),
            "auth" => f.auth = Some(value),
            "tls" => f.tls = on,
            "tlscert" => f.tls_cert = Some(PathBuf::from(value)),
            "tlskey" => f.tls_key = Some(PathBuf::from(value)),
            "tlsverify" => f.tls_verify = on,
            "tlscacert" => f.tls_ca = Some(PathBuf::from(value)),
            "D" | "debug" => f.debug = Some(on),
            "V" | "trace" | "VV" => f.trace = Some(on),
            "DV" | "DVV" => {
                f.debug = Some(on);
                f.trace = Some(on);
            }
            "js" | "jetstream" => f.jetstream = on,
            "sd" | "store_dir" => f.store_dir = Some(PathBuf::from(value)),
            "cluster" | "cluster_listen" => f.cluster = Some(value),
            "routes" => f.routes = Some(value),
            "cluster_name" => f.cluster_name = Some(value),
            "cluster_advertise" => f.cluster_advertise = Some(value),
            "no_advertise" => f.no_advertise = on,
            "connect_retries" => f.connect_retries = Some(value),
            "sl" | "signal" => f.signal = Some(value),
            "v" | "version" => f.version = on,
            "t" => f.test_config = on,
            "h" | "help" | "help_tls" => f.help = on,
            other => f.ignored.push(format!("-{other}")),
        }
    }
    Ok(f)
}

/// Errors of assembling the configuration.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error(transparent)]
    Conf(#[from] nats_conf::ConfError),
    #[error("{0}")]
    Invalid(String),
}

/// Loads the config file (if any) and applies the flags over it.
pub fn build_config(flags: &Flags) -> Result<NatsConf, SetupError> {
    let mut c = match &flags.config {
        Some(path) => nats_conf::load_file(path)?,
        None => NatsConf::default(),
    };
    let o = &mut c.options;
    let port = |name: &str, p: i64| -> Result<u16, SetupError> {
        if p == -1 {
            Ok(0)
        } else {
            u16::try_from(p).map_err(|_| SetupError::Invalid(format!("invalid {name} {p}")))
        }
    };
    if let Some(h) = &flags.host {
        o.host = h.clone();
        c.host_explicit = true;
        // The monitor follows the client host unless the file pinned it.
        if let (Some(http), false) = (&mut o.http, c.http_host_explicit) {
            http.0 = h.clone();
        }
    }
    if let Some(p) = flags.port {
        o.port = port("port", p)?;
    }
    if let Some(p) = flags.http_port {
        let host = match &o.http {
            Some((h, _)) => h.clone(),
            None => o.host.clone(),
        };
        o.http = Some((host, port("http port", p)?));
    }
    if let Some(n) = &flags.name {
        o.server_name = Some(n.clone());
    }
    if let Some(u) = &flags.user {
        o.auth.users.retain(|x| &x.username != u);
        o.auth.users.push(User {
            username: u.clone(),
            password: flags.pass.clone().unwrap_or_default(),
            permissions: None,
            account: None,
        });
    } else if flags.pass.is_some() {
        return Err(SetupError::Invalid("--pass given without --user".into()));
    }
    if let Some(t) = &flags.auth {
        o.auth.token = Some(t.clone());
    }
    if flags.tls || flags.tls_verify || flags.tls_cert.is_some() || flags.tls_key.is_some() {
        let base = o.tls.clone().unwrap_or_default();
        let files = TlsFiles {
            cert: flags.tls_cert.clone().unwrap_or(base.cert),
            key: flags.tls_key.clone().unwrap_or(base.key),
            ca: flags.tls_ca.clone().or(base.ca),
            verify: flags.tls_verify || base.verify,
            params: base.params,
            handshake_first: base.handshake_first,
        };
        if files.cert.as_os_str().is_empty() || files.key.as_os_str().is_empty() {
            return Err(SetupError::Invalid(
                "TLS Server certificate must be present and valid (--tlscert and --tlskey)".into(),
            ));
        }
        o.tls = Some(files);
    } else if let (Some(ca), Some(tls)) = (&flags.tls_ca, &mut o.tls) {
        tls.ca = Some(ca.clone());
    }
    if let Some(d) = flags.debug {
        o.debug = d;
    }
    if let Some(t) = flags.trace {
        o.trace = t;
    }
    if let Some(l) = &flags.log_file {
        c.log_file = Some(l.clone());
    }
    if let Some(p) = &flags.pid_file {
        c.pid_file = Some(p.clone());
    }
    if let Some(d) = &flags.ports_file_dir {
        c.ports_file_dir = Some(d.clone());
    }
    if flags.jetstream || flags.store_dir.is_some() {
        c.warnings
            .push("JetStream is not provided by this server; -js/--store_dir ignored".into());
    }
    apply_cluster_flags(flags, o)?;
    for f in &flags.ignored {
        c.warnings.push(format!("flag {f} accepted and ignored"));
    }
    // Validate auth now so `-t` and start-up report it before binding.
    crate::nats::auth::Authenticator::new(&c.options.auth)
        .map_err(|e| SetupError::Invalid(e.to_string()))?;
    Ok(c)
}

/// `--cluster`, `--routes`, `--cluster_name`, `--cluster_advertise`,
/// `--no_advertise`, `--connect_retries` over the file's `cluster {}`.
fn apply_cluster_flags(flags: &Flags, o: &mut NatsOptions) -> Result<(), SetupError> {
    let any = flags.cluster.is_some()
        || flags.routes.is_some()
        || flags.cluster_name.is_some()
        || flags.cluster_advertise.is_some()
        || flags.no_advertise
        || flags.connect_retries.is_some();
    if !any {
        return Ok(());
    }
    let c = o.cluster.get_or_insert_with(ClusterOptions::default);
    if let Some(url) = &flags.cluster {
        let (host, port) = parse_cluster_listen(url)
            .ok_or_else(|| SetupError::Invalid(format!("invalid --cluster URL {url:?}")))?;
        c.host = host;
        c.port = port;
        // `nats://user:pass@host:port` sets the route credentials.
        if let Some((userinfo, _)) = url
            .split_once("://")
            .map_or(url.as_str(), |(_, r)| r)
            .rsplit_once('@')
        {
            let (user, pass) = userinfo.split_once(':').unwrap_or((userinfo, ""));
            c.auth = Some(ClusterAuth {
                user: user.to_string(),
                password: pass.to_string(),
            });
        }
    }
    if let Some(routes) = &flags.routes {
        c.routes.clear();
        for r in routes.split(',').map(str::trim).filter(|r| !r.is_empty()) {
            if parse_cluster_listen(r).is_none() {
                return Err(SetupError::Invalid(format!("invalid route URL {r:?}")));
            }
            c.routes.push(r.to_string());
        }
    }
    if let Some(n) = &flags.cluster_name {
        if n.is_empty() || n.contains(char::is_whitespace) {
            return Err(SetupError::Invalid(format!(
                "invalid --cluster_name {n:?}: cannot be empty or contain spaces"
            )));
        }
        c.name = Some(n.clone());
    }
    if let Some(a) = &flags.cluster_advertise {
        c.advertise = Some(a.clone());
    }
    if flags.no_advertise {
        c.no_advertise = true;
    }
    if let Some(r) = &flags.connect_retries {
        c.connect_retries = r
            .parse()
            .map_err(|_| SetupError::Invalid(format!("invalid --connect_retries {r:?}")))?;
    }
    Ok(())
}

/// The signal a `--signal` command sends.
pub fn signal_for(cmd: &str) -> Option<libc::c_int> {
    Some(match cmd {
        "ldm" => libc::SIGUSR2,
        "stop" => libc::SIGKILL,
        "quit" => libc::SIGINT,
        "term" => libc::SIGTERM,
        "reopen" => libc::SIGUSR1,
        "reload" => libc::SIGHUP,
        _ => return None,
    })
}

/// Resolves `--signal CMD[=PID|PIDFILE]` to (signal, pid). Without a
/// target, the single running process named `nats-server` is used.
pub fn resolve_signal(spec: &str) -> Result<(libc::c_int, i32), String> {
    let (cmd, target) = match spec.split_once('=') {
        Some((c, t)) => (c, Some(t)),
        None => (spec, None),
    };
    let sig = signal_for(cmd).ok_or_else(|| format!("unknown signal {cmd:?}"))?;
    let pid = match target {
        Some(t) if !t.is_empty() => match t.trim().parse::<i32>() {
            Ok(p) => p,
            Err(_) => {
                let text = std::fs::read_to_string(t)
                    .map_err(|e| format!("cannot read pid file {t}: {e}"))?;
                text.trim()
                    .parse::<i32>()
                    .map_err(|_| format!("invalid pid {:?} in {t}", text.trim()))?
            }
        },
        _ => {
            let me = std::process::id() as i32;
            let found: Vec<i32> = find_processes("nats-server")
                .into_iter()
                .filter(|p| *p != me)
                .collect();
            match found.as_slice() {
                [p] => *p,
                [] => return Err("no nats-server processes running".into()),
                _ => {
                    return Err(format!(
                    "multiple nats-server processes running: {found:?}; use --signal {cmd}=<pid>"
                ))
                }
            }
        }
    };
    if pid <= 0 {
        return Err(format!("invalid pid {pid}"));
    }
    Ok((sig, pid))
}

fn find_processes(name: &str) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()))
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .map(|c| c.trim() == name)
                .unwrap_or(false)
        })
        .collect()
}

fn send_signal(spec: &str) -> ExitCode {
    match resolve_signal(spec) {
        Ok((sig, pid)) => {
            // SAFETY: kill(2) takes plain integers and has no memory effects.
            let rc = unsafe { libc::kill(pid, sig) };
            if rc == 0 {
                ExitCode::SUCCESS
            } else {
                eprintln!(
                    "nats-server: signal {spec}: {}",
                    std::io::Error::last_os_error()
                );
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("nats-server: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Path of the ports file: `<dir>/<exe-name>_<pid>.ports`.
pub fn ports_file_path(dir: &Path, exe_name: &str, pid: u32) -> PathBuf {
    dir.join(format!("{exe_name}_{pid}.ports"))
}

/// Content of the ports file: `{"nats":[urls],"monitoring":[urls]}` with
/// each list of `host:port` strings turned into URLs.
pub fn ports_file_json(client: &[String], monitoring: &[String]) -> String {
    // Built by hand to keep nats-server's key order (`nats` first).
    let urls = |scheme: &str, list: &[String]| {
        list.iter()
            .map(|a| serde_json::Value::from(format!("{scheme}://{a}")).to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut s = format!("{{\"nats\":[{}]", urls("nats", client));
    if !monitoring.is_empty() {
        s.push_str(&format!(",\"monitoring\":[{}]", urls("http", monitoring)));
    }
    s.push('}');
    s
}

/// The `host:port` strings a listener is reachable at, as nats-server
/// advertises them: for an unspecified host (`0.0.0.0`, `::`) every address
/// of every interface, grouped by interface; otherwise the host itself.
pub fn advertised(host: &str, port: u16) -> Vec<String> {
    let fmt = |ip: &std::net::IpAddr| match ip {
        std::net::IpAddr::V6(v6) => format!("[{v6}]:{port}"),
        std::net::IpAddr::V4(v4) => format!("{v4}:{port}"),
    };
    let unspecified = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_unspecified());
    if unspecified {
        let addrs = interface_addrs();
        if !addrs.is_empty() {
            return addrs.iter().map(fmt).collect();
        }
    }
    if host.contains(':') && !host.starts_with('[') {
        vec![format!("[{host}]:{port}")]
    } else {
        vec![format!("{host}:{port}")]
    }
}

/// Addresses of the machine's network interfaces, grouped by interface in
/// the order the system lists the interfaces.
fn interface_addrs() -> Vec<std::net::IpAddr> {
    use std::ffi::CStr;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    let mut ifap: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs allocates a list into `ifap`, freed below with
    // freeifaddrs; on failure nothing is allocated.
    if unsafe { libc::getifaddrs(&mut ifap) } != 0 {
        return Vec::new();
    }
    let mut names: Vec<String> = Vec::new();
    let mut found: Vec<(usize, IpAddr)> = Vec::new();
    let mut cur = ifap;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, which
        // stays valid until freeifaddrs.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: a non-null ifa_name is a NUL-terminated C string.
        let name = unsafe { CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        let idx = match names.iter().position(|n| *n == name) {
            Some(i) => i,
            None => {
                names.push(name);
                names.len() - 1
            }
        };
        if ifa.ifa_addr.is_null() {
            continue;
        }
        // SAFETY: a non-null ifa_addr points to a sockaddr whose family
        // tells its real type, checked before each cast.
        let ip = unsafe {
            match i32::from((*ifa.ifa_addr).sa_family) {
                libc::AF_INET => {
                    let sin = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                    IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)))
                }
                libc::AF_INET6 => {
                    let sin6 = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                    IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr))
                }
                _ => continue,
            }
        };
        found.push((idx, ip));
    }
    // SAFETY: `ifap` came from a successful getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(ifap) };
    found.sort_by_key(|(i, _)| *i);
    found.into_iter().map(|(_, ip)| ip).collect()
}

/// Runs nats-server compatibility mode with the arguments after the program name.
pub fn run(args: Vec<OsString>) -> ExitCode {
    let args: Vec<String> = args
        .into_iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let flags = match parse_flags(&args) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("{e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if flags.help {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    if flags.version {
        println!("nats-server: v{VERSION}");
        return ExitCode::SUCCESS;
    }
    // Memory freed after a load goes back to the system.
    crate::memory::start_trimmer();
    if let Some(spec) = &flags.signal {
        return send_signal(spec);
    }
    let conf = match build_config(&flags) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("nats-server: {e}");
            return ExitCode::FAILURE;
        }
    };
    if flags.test_config {
        // As nats-server: TLS files are loaded too, and the verdict goes
        // to stderr.
        if let Some(files) = &conf.options.tls {
            if let Err(e) = crate::tls::server_config(files) {
                eprintln!("nats-server: {e}");
                return ExitCode::FAILURE;
            }
        }
        for w in &conf.warnings {
            eprintln!("nats-server: warning: {w}");
        }
        match &flags.config {
            Some(p) => eprintln!("nats-server: configuration file {} is valid", p.display()),
            None => eprintln!("nats-server: configuration is valid"),
        }
        return ExitCode::SUCCESS;
    }
    runner::run_server(conf, flags)
}

mod runner;

#[cfg(test)]
mod tests {

    #[test]
    fn cluster_flags_build_the_cluster_options() {
        let f = parse(&[
            "--cluster",
            "nats://ru:rp@127.0.0.1:6333",
            "--routes",
            "nats://127.0.0.1:6222, nats://127.0.0.1:6223",
            "--cluster_name",
            "c9",
            "--connect_retries",
            "4",
            "--no_advertise",
        ])
        .unwrap();
        let c = build_config(&f).unwrap().options.cluster.unwrap();
        assert_eq!((c.host.as_str(), c.port), ("127.0.0.1", 6333));
        assert_eq!(c.routes.len(), 2);
        assert_eq!(c.name.as_deref(), Some("c9"));
        assert_eq!(c.connect_retries, 4);
        assert!(c.no_advertise);
        let auth = c.auth.unwrap();
        assert_eq!((auth.user.as_str(), auth.password.as_str()), ("ru", "rp"));
        for bad in [
            &["--cluster", "nonsense"][..],
            &["--routes", "x"],
            &["--cluster_name", "a b"],
            &["--cluster", "nats://h:1", "--connect_retries", "many"],
        ] {
            let f = parse(bad).unwrap();
            assert!(build_config(&f).is_err(), "{bad:?} accepted");
        }
    }

    use super::*;

    fn parse(a: &[&str]) -> Result<Flags, FlagError> {
        parse_flags(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn go_style_flags() {
        let f = parse(&[
            "-p",
            "-1",
            "-m",
            "8222",
            "-a",
            "127.0.0.1",
            "--user",
            "u",
            "--pass=p",
            "-DV",
            "-js",
            "-sd=/tmp/x",
            "--ports_file_dir",
            "/tmp",
            "-l",
            "/tmp/l.log",
            "-P",
            "/tmp/p.pid",
        ])
        .unwrap();
        assert_eq!(f.port, Some(-1));
        assert_eq!(f.http_port, Some(8222));
        assert_eq!(f.host.as_deref(), Some("127.0.0.1"));
        assert_eq!(f.user.as_deref(), Some("u"));
        assert_eq!(f.pass.as_deref(), Some("p"));
        assert_eq!((f.debug, f.trace), (Some(true), Some(true)));
        assert!(f.jetstream);
        assert_eq!(f.store_dir, Some(PathBuf::from("/tmp/x")));
        assert_eq!(f.ports_file_dir, Some(PathBuf::from("/tmp")));
        assert_eq!(f.log_file, Some(PathBuf::from("/tmp/l.log")));
        assert_eq!(f.pid_file, Some(PathBuf::from("/tmp/p.pid")));

        // Double and single dash are the same; `=` works for every flag.
        let a = parse(&["--port=4333", "--addr", "h", "--name", "n1", "--jetstream"]).unwrap();
        let b = parse(&["-port", "4333", "-addr=h", "-n=n1", "--js"]).unwrap();
        assert_eq!(a.port, b.port);
        assert_eq!(a.host, b.host);
        assert_eq!(a.name, b.name);
        assert_eq!(a.jetstream, b.jetstream);

        let f = parse(&[
            "--tls",
            "--tlscert",
            "c.pem",
            "--tlskey",
            "k.pem",
            "--tlsverify",
            "--tlscacert",
            "ca.pem",
        ])
        .unwrap();
        assert!(f.tls && f.tls_verify);
        assert_eq!(f.tls_ca, Some(PathBuf::from("ca.pem")));
        let f = parse(&["-D=false", "-V"]).unwrap();
        assert_eq!((f.debug, f.trace), (Some(false), Some(true)));
        let f = parse(&["--signal", "ldm=123"]).unwrap();
        assert_eq!(f.signal.as_deref(), Some("ldm=123"));
        let f = parse(&["-sl=reload"]).unwrap();
        assert_eq!(f.signal.as_deref(), Some("reload"));
        assert!(parse(&["-v"]).unwrap().version);
        assert!(parse(&["--version"]).unwrap().version);
        assert!(parse(&["-t", "-c", "x.conf"]).unwrap().test_config);
        assert!(parse(&["-h"]).unwrap().help);
        let f = parse(&[
            "--cluster",
            "nats://127.0.0.1:6222",
            "--routes",
            "a,b",
            "--cluster_name",
            "c",
            "-T",
        ])
        .unwrap();
        assert!(f.cluster.is_some() && f.routes.is_some() && f.cluster_name.is_some());
        assert_eq!(f.ignored, vec!["-T"]);
    }

    #[test]
    fn flag_errors() {
        assert_eq!(parse(&["-x"]), Err(FlagError::Unknown("x".into())));
        assert_eq!(parse(&["-p"]), Err(FlagError::MissingValue("p".into())));
        assert!(matches!(
            parse(&["-p", "abc"]),
            Err(FlagError::BadValue { .. })
        ));
        assert!(matches!(
            parse(&["-D=maybe"]),
            Err(FlagError::BadValue { .. })
        ));
        assert_eq!(
            parse(&["stray"]),
            Err(FlagError::Positional("stray".into()))
        );
        assert_eq!(parse(&["---p"]), Err(FlagError::Positional("---p".into())));
        assert!(parse(&[]).is_ok());
    }

    #[test]
    fn flags_override_config_file() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("s.conf");
        std::fs::write(
            &cfg,
            "port: 4555\nhttp_port: 8333\nmax_payload: 128KB\nauthorization { token: abc }\ndebug: true\n",
        )
        .unwrap();
        let f = parse(&[
            "-c",
            cfg.to_str().unwrap(),
            "-p",
            "-1",
            "-a",
            "127.0.0.1",
            "-D=false",
        ])
        .unwrap();
        let c = build_config(&f).unwrap();
        assert_eq!(c.options.port, 0);
        assert_eq!(c.options.host, "127.0.0.1");
        // The monitor host follows -a since the file gave only a port.
        assert_eq!(c.options.http, Some(("127.0.0.1".into(), 8333)));
        assert_eq!(c.options.max_payload, 131072);
        assert_eq!(c.options.auth.token.as_deref(), Some("abc"));
        assert!(!c.options.debug);

        let f = parse(&[
            "-m",
            "-1",
            "-a",
            "127.0.0.1",
            "--user",
            "u",
            "--pass",
            "p",
            "-js",
            "-sd",
            "/x",
        ])
        .unwrap();
        let c = build_config(&f).unwrap();
        assert_eq!(c.options.http, Some(("127.0.0.1".into(), 0)));
        assert_eq!(c.options.auth.users[0].username, "u");
        assert_eq!(c.options.auth.users[0].password, "p");
        assert!(c.warnings.iter().any(|w| w.contains("JetStream")));

        let f = parse(&["--tls"]).unwrap();
        assert!(build_config(&f).is_err());
        let f = parse(&["--pass", "x"]).unwrap();
        assert!(build_config(&f).is_err());
        let f = parse(&["-c", "/definitely/not/here.conf"]).unwrap();
        assert!(build_config(&f).is_err());
    }

    #[test]
    fn signals_and_pid_targets() {
        assert_eq!(signal_for("ldm"), Some(libc::SIGUSR2));
        assert_eq!(signal_for("stop"), Some(libc::SIGKILL));
        assert_eq!(signal_for("quit"), Some(libc::SIGINT));
        assert_eq!(signal_for("term"), Some(libc::SIGTERM));
        assert_eq!(signal_for("reopen"), Some(libc::SIGUSR1));
        assert_eq!(signal_for("reload"), Some(libc::SIGHUP));
        assert_eq!(signal_for("boom"), None);
        assert_eq!(resolve_signal("ldm=42"), Ok((libc::SIGUSR2, 42)));
        let dir = tempfile::tempdir().unwrap();
        let pidf = dir.path().join("x.pid");
        std::fs::write(&pidf, "777\n").unwrap();
        assert_eq!(
            resolve_signal(&format!("term={}", pidf.display())),
            Ok((libc::SIGTERM, 777))
        );
        assert!(resolve_signal("term=/no/such/pidfile").is_err());
        assert!(resolve_signal("nope=1").is_err());
        assert!(resolve_signal("ldm=0").is_err());
    }

    #[test]
    fn ports_file_format() {
        assert_eq!(
            ports_file_json(
                &["127.0.0.1:42567".to_string()],
                &["127.0.0.1:18222".to_string()]
            ),
            r#"{"nats":["nats://127.0.0.1:42567"],"monitoring":["http://127.0.0.1:18222"]}"#
        );
        assert_eq!(
            ports_file_path(Path::new("/tmp"), "nats-server", 12),
            PathBuf::from("/tmp/nats-server_12.ports")
        );
        assert_eq!(advertised("127.0.0.1", 4222), vec!["127.0.0.1:4222"]);
        assert_eq!(advertised("::1", 4222), vec!["[::1]:4222"]);
        assert_eq!(advertised("localhost", 1), vec!["localhost:1"]);
        // Unspecified: every interface address, loopback included.
        let all = advertised("0.0.0.0", 4222);
        assert!(all.contains(&"127.0.0.1:4222".to_string()), "{all:?}");
    }
}
