//! Logging in nats-server's format, for the `nats-server` compatibility mode.
//!
//! Lines look exactly like nats-server's (client test harnesses parse them):
//! `[<pid>] 2026/11/29 16:22:34.013341 [INF] message`, with the levels
//! `[FTL]`, `[ERR]`, `[WRN]`, `[INF]`, `[DBG]`, `[TRC]`. Output goes to
//! stderr, or appended to a file (`-l`), which can be reopened on SIGUSR1
//! for log rotation.
//!
//! The writing happens on one dedicated thread fed by a channel, so logging
//! never blocks a tokio worker on file I/O, and lines are never interleaved.
//! Each line is written (unbuffered) as soon as it arrives: harnesses poll
//! the file for the "client connections on" line. [`NatsLogger::layer`]
//! bridges `tracing` events from the rest of the crate into this format.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

/// Errors of setting up logging.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("cannot open log file {path}: {source}")]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start the log writer thread: {0}")]
    Thread(std::io::Error),
    #[error("a global logger is already installed")]
    AlreadyInstalled,
}

/// Severity, in nats-server's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Fatal,
    Error,
    Warn,
    Info,
    Debug,
    Trace,
}

impl Level {
    /// The bracketed tag nats-server prints.
    pub fn tag(self) -> &'static str {
        match self {
            Level::Fatal => "[FTL]",
            Level::Error => "[ERR]",
            Level::Warn => "[WRN]",
            Level::Info => "[INF]",
            Level::Debug => "[DBG]",
            Level::Trace => "[TRC]",
        }
    }
}

/// Where lines go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogTarget {
    Stderr,
    /// Appended to this file (created if missing).
    File(PathBuf),
}

enum Cmd {
    Line(String),
    Reopen,
    Flush(mpsc::SyncSender<()>),
}

/// Formats one line (with its trailing newline).
pub fn format_line<Tz: chrono::TimeZone>(
    pid: u32,
    time: &chrono::DateTime<Tz>,
    level: Level,
    msg: &str,
) -> String
where
    Tz::Offset: std::fmt::Display,
{
    format!(
        "[{pid}] {} {} {msg}\n",
        time.format("%Y/%m/%d %H:%M:%S%.6f"),
        level.tag()
    )
}

/// A nats-server style logger. Cheap to share (`Arc`).
pub struct NatsLogger {
    tx: mpsc::Sender<Cmd>,
    pid: u32,
    /// Atomics so a config reload (SIGHUP) can switch levels live.
    debug: AtomicBool,
    trace: AtomicBool,
}

fn open(target: &LogTarget) -> Result<Box<dyn std::io::Write + Send>, LogError> {
    match target {
        LogTarget::Stderr => Ok(Box::new(std::io::stderr())),
        LogTarget::File(path) => {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|source| LogError::Open {
                    path: path.clone(),
                    source,
                })?;
            Ok(Box::new(f))
        }
    }
}

impl NatsLogger {
    /// Opens the target and starts the writer thread. `debug`/`trace`
    /// enable `[DBG]`/`[TRC]` lines.
    pub fn start(target: LogTarget, debug: bool, trace: bool) -> Result<Arc<NatsLogger>, LogError> {
        let mut out = open(&target)?;
        let (tx, rx) = mpsc::channel::<Cmd>();
        std::thread::Builder::new()
            .name("log-writer".into())
            .spawn(move || {
                for cmd in rx {
                    match cmd {
                        Cmd::Line(l) => {
                            // A failing log sink must not take the server
                            // down; the line is dropped.
                            let _ = out.write_all(l.as_bytes());
                            let _ = out.flush();
                        }
                        Cmd::Reopen => {
                            if let Ok(o) = open(&target) {
                                out = o;
                            }
                        }
                        Cmd::Flush(done) => {
                            let _ = out.flush();
                            let _ = done.send(());
                        }
                    }
                }
            })
            .map_err(LogError::Thread)?;
        Ok(Arc::new(NatsLogger {
            tx,
            pid: std::process::id(),
            debug: AtomicBool::new(debug),
            trace: AtomicBool::new(trace),
        }))
    }

    /// Whether lines of `level` are written.
    pub fn enabled(&self, level: Level) -> bool {
        match level {
            Level::Debug => self.debug.load(Ordering::Relaxed),
            Level::Trace => self.trace.load(Ordering::Relaxed),
            _ => true,
        }
    }

    /// Switches `[DBG]`/`[TRC]` output on or off (config reload).
    pub fn set_levels(&self, debug: bool, trace: bool) {
        self.debug.store(debug, Ordering::Relaxed);
        self.trace.store(trace, Ordering::Relaxed);
    }

    /// Logs one message (if its level is enabled).
    pub fn log(&self, level: Level, msg: &str) {
        if self.enabled(level) {
            let line = format_line(self.pid, &chrono::Local::now(), level, msg);
            let _ = self.tx.send(Cmd::Line(line));
        }
    }

    /// Logs an `[INF]` line.
    pub fn info(&self, msg: &str) {
        self.log(Level::Info, msg)
    }

    /// Logs a `[WRN]` line.
    pub fn warn(&self, msg: &str) {
        self.log(Level::Warn, msg)
    }

    /// Logs an `[ERR]` line.
    pub fn error(&self, msg: &str) {
        self.log(Level::Error, msg)
    }

    /// Logs a `[FTL]` line and waits until it is written.
    pub fn fatal(&self, msg: &str) {
        self.log(Level::Fatal, msg);
        self.flush();
    }

    /// Reopens the log file (log rotation, SIGUSR1).
    pub fn reopen(&self) {
        let _ = self.tx.send(Cmd::Reopen);
    }

    /// Waits until every line sent so far is written.
    pub fn flush(&self) {
        let (done_tx, done_rx) = mpsc::sync_channel(1);
        if self.tx.send(Cmd::Flush(done_tx)).is_ok() {
            let _ = done_rx.recv_timeout(std::time::Duration::from_secs(5));
        }
    }

    /// A `tracing` layer writing the crate's events through this logger.
    /// Events of other crates are written only at WARN and above.
    pub fn layer(self: &Arc<Self>) -> NatsLayer {
        NatsLayer {
            logger: self.clone(),
            info_as_debug: false,
        }
    }

    /// Installs [`NatsLogger::layer`] as the global `tracing` subscriber.
    /// With `info_as_debug`, INFO events are written as `[DBG]`: the
    /// `nats-server` mode prints nats-server's own INFO lines itself, and
    /// the engine's extra INFO events would make its default log differ.
    pub fn install_global(self: &Arc<Self>, info_as_debug: bool) -> Result<(), LogError> {
        use tracing_subscriber::layer::SubscriberExt;
        let mut layer = self.layer();
        layer.info_as_debug = info_as_debug;
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::set_global_default(subscriber).map_err(|_| LogError::AlreadyInstalled)
    }
}

/// `tracing` layer of a [`NatsLogger`].
pub struct NatsLayer {
    logger: Arc<NatsLogger>,
    info_as_debug: bool,
}

/// Collects an event's message and fields as `message k=v k2=v2`.
#[derive(Default)]
struct LineVisitor {
    message: String,
    fields: String,
}

impl Visit for LineVisitor {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            let _ = write!(self.fields, " {}={}", field.name(), value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.fields, " {}={:?}", field.name(), value);
        }
    }
}

fn map_level(l: &tracing::Level) -> Level {
    match *l {
        tracing::Level::ERROR => Level::Error,
        tracing::Level::WARN => Level::Warn,
        tracing::Level::INFO => Level::Info,
        tracing::Level::DEBUG => Level::Debug,
        tracing::Level::TRACE => Level::Trace,
    }
}

impl<S: Subscriber> Layer<S> for NatsLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let meta = event.metadata();
        let mut level = map_level(meta.level());
        if self.info_as_debug && level == Level::Info {
            level = Level::Debug;
        }
        let ours = meta.target().starts_with("liftbridge");
        if !ours && level > Level::Warn {
            return;
        }
        if !self.logger.enabled(level) {
            return;
        }
        let mut v = LineVisitor::default();
        event.record(&mut v);
        v.message.push_str(&v.fields);
        self.logger.log(level, &v.message);
    }
}

/// Writes `pid` into `path` (nats-server's `-P`), replacing it.
pub fn write_pid_file(path: &Path, pid: u32) -> std::io::Result<()> {
    std::fs::write(path, pid.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn line_format_matches_nats_server() {
        let t = chrono::Utc
            .with_ymd_and_hms(2026, 11, 29, 16, 22, 34)
            .unwrap()
            + chrono::Duration::microseconds(13341);
        assert_eq!(
            format_line(4242, &t, Level::Info, "Server is ready"),
            "[4242] 2026/11/29 16:22:34.013341 [INF] Server is ready\n"
        );
        assert_eq!(Level::Warn.tag(), "[WRN]");
        assert_eq!(Level::Fatal.tag(), "[FTL]");
        assert_eq!(Level::Trace.tag(), "[TRC]");
    }

    #[test]
    fn file_logging_levels_and_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nats.log");
        let log = NatsLogger::start(LogTarget::File(path.clone()), true, false).unwrap();
        log.info("Starting nats-server");
        log.log(Level::Debug, "debug line");
        log.log(Level::Trace, "trace line");
        log.warn("careful");
        log.flush();
        let text = std::fs::read_to_string(&path).unwrap();
        let re_ok = text
            .lines()
            .all(|l| l.starts_with(&format!("[{}] ", std::process::id())) && l.len() > 30);
        assert!(re_ok, "{text}");
        assert!(text.contains("[INF] Starting nats-server\n"));
        assert!(text.contains("[DBG] debug line\n"));
        assert!(!text.contains("trace line"));
        assert!(text.contains("[WRN] careful\n"));
        log.set_levels(false, true);
        log.log(Level::Debug, "debug after reload");
        log.log(Level::Trace, "trace after reload");
        log.flush();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains("debug after reload"));
        assert!(text.contains("[TRC] trace after reload\n"));
        // Rotation: move the file away, reopen, new lines go to a new file.
        let rotated = dir.path().join("nats.log.1");
        std::fs::rename(&path, &rotated).unwrap();
        log.reopen();
        log.info("after rotation");
        log.flush();
        assert!(std::fs::read_to_string(&path)
            .unwrap()
            .contains("after rotation"));
        assert!(!std::fs::read_to_string(&rotated)
            .unwrap()
            .contains("after rotation"));
    }

    #[test]
    fn tracing_events_are_bridged() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.log");
        let log = NatsLogger::start(LogTarget::File(path.clone()), false, false).unwrap();
        use tracing_subscriber::layer::SubscriberExt;
        let subscriber = tracing_subscriber::registry().with(log.layer());
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(port = 4222, "listening");
            tracing::debug!("hidden");
            tracing::warn!(target: "other_crate", "foreign warning");
            tracing::info!(target: "other_crate", "foreign info");
        });
        log.flush();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("[INF] listening port=4222\n"), "{text}");
        assert!(!text.contains("hidden"));
        assert!(text.contains("[WRN] foreign warning"));
        assert!(!text.contains("foreign info"));

        // INFO demoted to DEBUG: hidden without -D, shown as [DBG] with it.
        log.set_levels(true, false);
        let mut layer = log.layer();
        layer.info_as_debug = true;
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!("engine detail");
            tracing::warn!("engine warning");
        });
        log.flush();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("[DBG] engine detail\n"), "{text}");
        assert!(text.contains("[WRN] engine warning\n"), "{text}");
    }
}
