//! Running the server in `nats-server` mode: logging set-up, start-up log
//! lines in nats-server's order and wording, pid and ports files, the
//! monitoring listener and the signal loop (SIGHUP re-reads the `-c` file
//! and hands it to `nats::reload`, logging nats-server's lines).
//!
//! Order matters to harnesses: the monitoring port is bound first (so a
//! random `-m -1` port is known to `/varz`), then the client listener; the
//! "Listening for client connections on H:P" line carries the real port and
//! is followed by "Server is ready"; the ports file is written only after
//! both listeners are up and is removed on exit.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use tokio::signal::unix::{signal, SignalKind};

use super::{advertised, ports_file_json, ports_file_path, Flags, VERSION};
use crate::config::nats_conf::NatsConf;
use crate::http::{self, HttpServer, HttpState};
use crate::logging::{write_pid_file, Level, LogTarget, NatsLogger};
use crate::nats::server::NatsServer;

/// Starts logging and the runtime, then serves until a signal stops it.
pub(super) fn run_server(conf: NatsConf, flags: Flags) -> ExitCode {
    let target = match &conf.log_file {
        Some(p) => LogTarget::File(p.clone()),
        None => LogTarget::Stderr,
    };
    let log = match NatsLogger::start(target, conf.options.debug, conf.options.trace) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("nats-server: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Another subscriber may exist when embedded in tests; ours is optional.
    let _ = log.install_global(true);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("nats-server")
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            log.fatal(&format!("cannot start the runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    let code = runtime.block_on(serve(conf, flags, log.clone()));
    log.flush();
    // Connection tasks may still be parked; do not wait for them.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    code
}

fn exe_name() -> String {
    std::env::args_os()
        .next()
        .and_then(|a| {
            std::path::Path::new(&a)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "nats-server".to_string())
}

/// Formats `host:port` as nats-server prints it (IPv6 in brackets).
fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

async fn resolve(host: &str, port: u16) -> Result<SocketAddr, String> {
    let target = host_port(host, port);
    let mut addrs = tokio::net::lookup_host(target.as_str())
        .await
        .map_err(|e| format!("cannot resolve {target}: {e}"))?;
    addrs
        .next()
        .ok_or_else(|| format!("cannot resolve {target}"))
}

async fn serve(mut conf: NatsConf, flags: Flags, log: Arc<NatsLogger>) -> ExitCode {
    let pid = std::process::id();
    log.info("Starting nats-server");
    log.info(&format!("  Version:  {VERSION}"));
    log.info("  Git:      [not set]");
    if let Some(p) = &flags.config {
        log.info(&format!("  Using configuration file: {}", p.display()));
    }
    for w in &conf.warnings {
        log.warn(w);
    }
    if let Some(p) = &conf.pid_file {
        if let Err(e) = write_pid_file(p, pid) {
            log.fatal(&format!("Could not write pidfile: {e}"));
            return ExitCode::FAILURE;
        }
    }

    // Monitoring first, so a random port is resolved before the server
    // reports it in /varz.
    let mut http_listener = None;
    if let Some((host, port)) = conf.options.http.clone() {
        let addr = match resolve(&host, port).await {
            Ok(a) => a,
            Err(e) => {
                log.fatal(&e);
                return ExitCode::FAILURE;
            }
        };
        match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => {
                let real = l.local_addr().map(|a| a.port()).unwrap_or(port);
                conf.options.http = Some((host, real));
                http_listener = Some(l);
            }
            Err(e) => {
                log.fatal(&format!(
                    "Error listening on monitor port: {}: {e}",
                    host_port(&host, port)
                ));
                return ExitCode::FAILURE;
            }
        }
    }

    let server = match NatsServer::start(conf.options.clone()).await {
        Ok(s) => s,
        Err(e) => {
            log.fatal(&format!("Error starting server: {e}"));
            return ExitCode::FAILURE;
        }
    };
    log.info(&format!("  Name:     {}", server.server_name()));
    log.info(&format!("  ID:       {}", server.server_id()));

    let mut monitor: Option<(HttpServer, Vec<String>)> = None;
    if let (Some(listener), Some((host, port))) = (http_listener, conf.options.http.clone()) {
        log.info(&format!(
            "Starting http monitor on {}",
            host_port(&host, port)
        ));
        let router = http::monitoring_routes(Arc::new(server.clone()));
        match http::serve_listener(listener, HttpState::new(router)) {
            Ok(h) => monitor = Some((h, advertised(&host, port))),
            Err(e) => {
                log.fatal(&format!("Error starting monitor: {e}"));
                return ExitCode::FAILURE;
            }
        }
    }

    if let (Some(w), Some(addr)) = (&conf.options.websocket, server.websocket_addr()) {
        let scheme = if w.tls.is_some() { "wss" } else { "ws" };
        log.info(&format!(
            "Listening for websocket clients on {scheme}://{}",
            host_port(&w.host, addr.port())
        ));
    }
    let client = host_port(&conf.options.host, server.client_addr().port());
    log.info(&format!("Listening for client connections on {client}"));
    if let (Some(c), Some(addr)) = (&conf.options.cluster, server.cluster_addr()) {
        // nats-server's lines, in its order after the client listener.
        if let Some(name) = &c.name {
            log.info(&format!("Cluster name is {name}"));
        }
        log.info(&format!(
            "Listening for route connections on {}",
            host_port(&c.host, addr.port())
        ));
    }
    if let Some(t) = &conf.options.tls {
        log.info("TLS required for client connections");
        if t.verify {
            log.info("Client certificates are required (mTLS)");
        }
    }
    log.info("Server is ready");

    let ports_file: Option<PathBuf> = conf.ports_file_dir.as_ref().map(|dir| {
        let path = ports_file_path(dir, &exe_name(), pid);
        let nats = advertised(&conf.options.host, server.client_addr().port());
        let json = ports_file_json(&nats, monitor.as_ref().map_or(&[][..], |(_, m)| m));
        if let Err(e) = std::fs::write(&path, json) {
            log.error(&format!("Error writing ports file {}: {e}", path.display()));
        }
        path
    });

    let mut files = ReloadableFiles {
        log_file: conf.log_file.clone(),
        pid_file: conf.pid_file.clone(),
        ports_file_dir: conf.ports_file_dir.clone(),
    };
    let code = signal_loop(&server, &log, &flags, &mut files).await;

    if let Some((h, _)) = monitor {
        h.shutdown().await;
    }
    if let Some(p) = ports_file {
        let _ = std::fs::remove_file(p);
    }
    log.info("Server Exiting..");
    code
}

async fn signal_loop(
    server: &NatsServer,
    log: &NatsLogger,
    flags: &Flags,
    files: &mut ReloadableFiles,
) -> ExitCode {
    let streams = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
        signal(SignalKind::user_defined1()),
        signal(SignalKind::user_defined2()),
    );
    let (Ok(mut term), Ok(mut int), Ok(mut hup), Ok(mut usr1), Ok(mut usr2)) = streams else {
        log.fatal("cannot install signal handlers");
        server.shutdown().await;
        return ExitCode::FAILURE;
    };
    // `$SYS.REQ.SERVER.<id>.RELOAD` reloads as SIGHUP does.
    let mut asked = server.reload_requests();
    // nats-server exits 1 after SIGTERM and 0 after SIGINT; harnesses
    // and scripts may look at the status, so ours matches.
    let code = loop {
        tokio::select! {
            _ = term.recv() => {
                log.log(Level::Debug, "Trapped \"terminated\" signal");
                break ExitCode::FAILURE;
            }
            _ = int.recv() => {
                log.log(Level::Debug, "Trapped \"interrupt\" signal");
                break ExitCode::SUCCESS;
            }
            _ = hup.recv() => {
                log.info("Trapped \"hangup\" signal");
                match reload(server, log, flags, files).await {
                    Ok(lines) => {
                        for l in lines {
                            log.info(&l);
                        }
                        log.info("Reloaded server configuration");
                    }
                    Err(e) => log.error(&format!("Failed to reload server configuration: {e}")),
                }
            }
            Some(done) = async {
                match asked.as_mut() {
                    Some(rx) => rx.recv().await,
                    None => std::future::pending().await,
                }
            } => {
                log.info("Reloading server configuration (system account request)");
                let outcome = match reload(server, log, flags, files).await {
                    Ok(lines) => {
                        for l in lines {
                            log.info(&l);
                        }
                        log.info("Reloaded server configuration");
                        Ok(())
                    }
                    Err(e) => {
                        log.error(&format!("Failed to reload server configuration: {e}"));
                        Err(e.to_string())
                    }
                };
                let _ = done.send(outcome);
            }
            _ = usr1.recv() => {
                log.reopen();
                log.info("Reopened log file");
            }
            _ = usr2.recv() => {
                log.log(Level::Debug, "Trapped \"user defined signal 2\" signal");
                log.info("Entering lame duck mode, stop accepting new clients");
                server.enter_lame_duck();
                // As nats-server: with nobody to hand over, there is no
                // grace period to wait; shut down now.
                if server.num_connections() == 0 {
                    break ExitCode::SUCCESS;
                }
            }
            _ = server.wait_stopped() => {
                // Lame duck mode finished (or the server stopped itself).
                return ExitCode::SUCCESS;
            }
        }
    };
    log.info("Initiating Shutdown...");
    server.shutdown().await;
    code
}

/// Settings of the configuration file kept outside the server options.
struct ReloadableFiles {
    log_file: Option<PathBuf>,
    pid_file: Option<PathBuf>,
    ports_file_dir: Option<PathBuf>,
}

/// Why a reload was refused (nothing changed).
#[derive(Debug, thiserror::Error)]
enum ReloadFailure {
    #[error("can only reload config when a file is provided using -c or --config")]
    NoConfigFile,
    #[error(transparent)]
    Setup(#[from] super::SetupError),
    /// A key the loader does not know (start-up only warns about it).
    #[error("{0}")]
    UnknownField(String),
    #[error(transparent)]
    Reload(#[from] crate::nats::reload::ReloadError),
}

fn path_text(p: &Option<PathBuf>) -> String {
    p.as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

/// SIGHUP: re-reads the configuration file (flags still apply over it)
/// and applies it to the running server, as nats-server does (see
/// `nats::reload`). Any error leaves everything as it was. Returns the
/// lines to log for what changed.
async fn reload(
    server: &NatsServer,
    log: &NatsLogger,
    flags: &Flags,
    files: &mut ReloadableFiles,
) -> Result<Vec<String>, ReloadFailure> {
    if flags.config.is_none() {
        return Err(ReloadFailure::NoConfigFile);
    }
    let mut conf = super::build_config(flags)?;
    // Unknown keys are only warned about at start-up; a reload would apply
    // a file whose intent we cannot know, so it is refused (nats-server
    // refuses unknown fields too).
    if let Some(w) = conf
        .warnings
        .iter()
        .find(|w| w.contains(": unknown field "))
    {
        return Err(ReloadFailure::UnknownField(
            w.trim_end_matches(" ignored").to_string(),
        ));
    }
    let refuse = |field, old: &Option<PathBuf>, new: &Option<PathBuf>| {
        crate::nats::reload::ReloadError::NotSupported {
            field,
            old: path_text(old),
            new: path_text(new),
        }
    };
    if conf.log_file != files.log_file {
        return Err(refuse("LogFile", &files.log_file, &conf.log_file).into());
    }
    if conf.ports_file_dir != files.ports_file_dir {
        return Err(refuse("PortsFileDir", &files.ports_file_dir, &conf.ports_file_dir).into());
    }
    // The monitoring port was bound at start-up; a random one in the file
    // means the same listener.
    if let (Some(run), Some(new)) = (&server.options().http, &mut conf.options.http) {
        if new.1 == 0 {
            new.1 = run.1;
        }
    }
    let (debug, trace) = (conf.options.debug, conf.options.trace);
    let mut lines = server.reload(conf.options).await?;
    log.set_levels(debug, trace);
    if conf.pid_file != files.pid_file {
        if let Some(p) = &conf.pid_file {
            if let Err(e) = write_pid_file(p, std::process::id()) {
                log.error(&format!("Failed to write pidfile: {e}"));
            }
            lines.push(format!("Reloaded: pid_file = {}", p.display()));
        }
        files.pid_file = conf.pid_file;
    }
    Ok(lines)
}
