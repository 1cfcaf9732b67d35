//! Parser for nats-server configuration files, and their mapping onto
//! [`NatsOptions`].
//!
//! Pure code apart from reading the file itself and its `include`s. Two
//! stages:
//! 1. [`parse_str`] / [`parse_file`] turn the text into a tree of [`Node`]s
//!    (maps, arrays, strings, integers, floats, booleans), each with its file
//!    and line, resolving `include` (relative to the including file) and
//!    `$VAR` references (keys defined earlier in the same or an enclosing
//!    block, else the environment).
//! 2. [`load_file`] / [`from_str`] map the tree onto [`NatsOptions`] plus the
//!    process-level settings (`log_file`, `pid_file`, …) in [`NatsConf`].
//!
//! Syntax, as nats-server reads it: `key: value`, `key = value` and
//! `key value`; blocks `{}`; arrays `[]`; entries separated by newlines, `,`
//! or `;`; `#` and `//` comments; double-quoted strings with escapes,
//! single-quoted raw strings and unquoted strings (ending at whitespace,
//! `,`, `;`, `]`, `}`); integers with size suffixes (`K`/`M`/`G`/`T` are
//! powers of 1000, `KB`/`KiB`/`Ki`, `MB`/`MiB`, … powers of 1024 — nats
//! semantics); booleans `true/false/yes/no/on/off`. Keys are
//! case-insensitive in the mapping; the last occurrence wins.
//!
//! `cluster { … }` configures routes, `leafnodes { … }` leaf nodes and
//! `accounts { … }` accounts (users, exports, imports); inside them, fields
//! we do not provide are refused with an error naming them, and accounts
//! are checked across blocks as nats-server does (duplicate users, imports
//! of unknown accounts or unexported subjects). `operator`/`trusted`,
//! `system_account`, `resolver` and `resolver_preload` turn on operator
//! (JWT) mode, checked as a whole (operators need a resolver; no users,
//! accounts or `no_auth_user` in the file then). Unknown keys and unsupported
//! subsystems (`jetstream`, `gateway`, …) are accepted and
//! reported as warnings, as nats-server
//! does for unknown fields; malformed values are errors naming the file, the
//! line and the key. Nothing here panics on input.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::config::nats::{
    AuthConfig, ClusterAuth, ClusterOptions, LeafRemote, LeafRemoteAuth, LeafUser, LeafnodeOptions,
    MapDest, MappingConfig, NatsOptions, NkeyUser, OperatorConfig, PermissionRules, Permissions,
    ResolverConfig, ResponsePermission, S2Compression, TlsFiles, User, WebsocketOptions, WsAuth,
};

/// Errors of reading, parsing or interpreting a config file.
#[derive(Debug, thiserror::Error)]
pub enum ConfError {
    /// The file (or an included file) cannot be read.
    #[error("cannot read config file {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Syntax error.
    #[error("{file}:{line}: {msg}")]
    Syntax {
        file: String,
        line: usize,
        msg: String,
    },
    /// A value has the wrong type or an impossible value.
    #[error("{file}:{line}: invalid value for {key:?}: {msg}")]
    Invalid {
        file: String,
        line: usize,
        key: String,
        msg: String,
    },
}

/// A parsed value with where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub value: Value,
    /// File the value was read from (the top file or an include).
    pub file: Arc<str>,
    /// 1-based line of the value's first character.
    pub line: usize,
    /// The text of an unquoted value as written (lets duration keys read
    /// `1m` as one minute although `m` is also a size suffix).
    pub raw: Option<String>,
}

/// A config value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    Array(Vec<Node>),
    /// Entries in file order (keys as written).
    Map(Vec<(String, Node)>),
}

impl Value {
    fn kind(&self) -> &'static str {
        match self {
            Value::Str(_) => "a string",
            Value::Int(_) => "an integer",
            Value::Float(_) => "a number",
            Value::Bool(_) => "a boolean",
            Value::Array(_) => "an array",
            Value::Map(_) => "a block",
        }
    }
}

/// Deepest `include` nesting accepted (guards against include cycles).
const MAX_INCLUDE_DEPTH: usize = 10;

struct Parser<'s> {
    chars: Vec<char>,
    pos: usize,
    line: usize,
    file: Arc<str>,
    base_dir: PathBuf,
    /// Maps being built, outermost first; `$VAR` looks here before the
    /// environment.
    scopes: &'s mut Vec<Vec<(String, Node)>>,
    depth: usize,
}

/// Parses config text. `origin` names the file for messages and is the base
/// for relative `include`s (its parent directory).
pub fn parse_str(text: &str, origin: &Path) -> Result<Vec<(String, Node)>, ConfError> {
    let mut scopes = vec![Vec::new()];
    let base_dir = origin
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let mut p = Parser {
        chars: text.chars().collect(),
        pos: 0,
        line: 1,
        file: Arc::from(origin.display().to_string()),
        base_dir,
        scopes: &mut scopes,
        depth: 0,
    };
    p.map_body(false)?;
    Ok(scopes.pop().unwrap_or_default())
}

/// Reads and parses a config file.
pub fn parse_file(path: &Path) -> Result<Vec<(String, Node)>, ConfError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse_str(&text, path)
}

fn is_inline_ws(c: char) -> bool {
    c == ' ' || c == '\t' || c == '\r'
}

fn ends_bare(c: char) -> bool {
    c.is_whitespace() || matches!(c, ',' | ';' | ']' | '}')
}

impl Parser<'_> {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn peek_at(&self, off: usize) -> Option<char> {
        self.chars.get(self.pos + off).copied()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += 1;
        if c == '\n' {
            self.line += 1;
        }
        Some(c)
    }

    fn err<T>(&self, msg: impl Into<String>) -> Result<T, ConfError> {
        Err(ConfError::Syntax {
            file: self.file.to_string(),
            line: self.line,
            msg: msg.into(),
        })
    }

    fn at_comment(&self) -> bool {
        self.peek() == Some('#') || (self.peek() == Some('/') && self.peek_at(1) == Some('/'))
    }

    fn skip_comment(&mut self) {
        while let Some(c) = self.peek() {
            if c == '\n' {
                break;
            }
            self.bump();
        }
    }

    fn skip_inline_ws(&mut self) {
        while self.peek().is_some_and(is_inline_ws) {
            self.bump();
        }
    }

    /// Skips whitespace, newlines, comments and the given separators.
    fn skip_filler(&mut self, seps: &[char]) {
        loop {
            match self.peek() {
                Some(c) if c.is_whitespace() || seps.contains(&c) => {
                    self.bump();
                }
                Some(_) if self.at_comment() => self.skip_comment(),
                _ => return,
            }
        }
    }

    /// Parses `key value` entries into the top scope until EOF (top level)
    /// or a closing `}` (block).
    fn map_body(&mut self, in_block: bool) -> Result<(), ConfError> {
        loop {
            self.skip_filler(&[',', ';']);
            match self.peek() {
                None if in_block => return self.err("unexpected end of file: missing '}'"),
                None => return Ok(()),
                Some('}') if in_block => {
                    self.bump();
                    return Ok(());
                }
                Some('}') => return self.err("unexpected '}'"),
                Some(_) => {}
            }
            let key_line = self.line;
            let key = self.key()?;
            self.skip_inline_ws();
            if key.eq_ignore_ascii_case("include")
                && !matches!(self.peek(), Some(':') | Some('=') | Some('{') | Some('['))
            {
                self.include(key_line)?;
            } else {
                // As in nats-server, the separator or the value may start
                // on a later line than the key (`websocket` with its `{` on
                // the next line); after a separator it may not.
                while self.peek().is_some_and(char::is_whitespace) {
                    self.bump();
                }
                if matches!(self.peek(), Some(':') | Some('=')) {
                    self.bump();
                    self.skip_inline_ws();
                }
                if matches!(self.peek(), None | Some('\n') | Some('}')) || self.at_comment() {
                    self.line = key_line;
                    return self.err(format!("missing value for key {key:?}"));
                }
                let node = self.value()?;
                if let Some(top) = self.scopes.last_mut() {
                    top.push((key, node));
                }
            }
            self.end_of_entry(in_block)?;
        }
    }

    /// After a value: only whitespace, a comment, a separator, a newline or
    /// the end of the block may follow.
    fn end_of_entry(&mut self, in_block: bool) -> Result<(), ConfError> {
        self.skip_inline_ws();
        match self.peek() {
            None | Some('\n') | Some(',') | Some(';') => Ok(()),
            Some('}') if in_block => Ok(()),
            Some(_) if self.at_comment() => Ok(()),
            Some(c) => self.err(format!("unexpected {c:?} after value")),
        }
    }

    fn key(&mut self) -> Result<String, ConfError> {
        match self.peek() {
            Some('"') | Some('\'') => self.quoted(),
            _ => {
                let start = self.pos;
                while let Some(c) = self.peek() {
                    if c.is_whitespace() || matches!(c, ':' | '=' | '{' | '[' | '}' | ',' | ';') {
                        break;
                    }
                    self.bump();
                }
                if self.pos == start {
                    let c = self.peek().unwrap_or(' ');
                    return self.err(format!("expected a key, found {c:?}"));
                }
                Ok(self.chars[start..self.pos].iter().collect())
            }
        }
    }

    fn include(&mut self, line: usize) -> Result<(), ConfError> {
        let name = match self.peek() {
            Some('"') | Some('\'') => self.quoted()?,
            _ => self.bare(),
        };
        if name.is_empty() {
            return self.err("include needs a file name");
        }
        if self.depth >= MAX_INCLUDE_DEPTH {
            return self.err("includes nested too deeply (cycle?)");
        }
        let path = self.base_dir.join(&name);
        let text = std::fs::read_to_string(&path).map_err(|source| ConfError::Io {
            path: path.clone(),
            source,
        })?;
        let base_dir = path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| self.base_dir.clone());
        let mut sub = Parser {
            chars: text.chars().collect(),
            pos: 0,
            line: 1,
            file: Arc::from(path.display().to_string()),
            base_dir,
            scopes: self.scopes,
            depth: self.depth + 1,
        };
        sub.map_body(false).map_err(|e| match e {
            ConfError::Syntax { file, line: l, msg } => ConfError::Syntax {
                file,
                line: l,
                msg: format!("{msg} (included from {}:{line})", self.file),
            },
            other => other,
        })
    }

    fn node(&self, value: Value, line: usize, raw: Option<String>) -> Node {
        Node {
            value,
            file: self.file.clone(),
            line,
            raw,
        }
    }

    fn value(&mut self) -> Result<Node, ConfError> {
        let line = self.line;
        match self.peek() {
            Some('{') => {
                self.bump();
                self.scopes.push(Vec::new());
                let r = self.map_body(true);
                let entries = self.scopes.pop().unwrap_or_default();
                r?;
                Ok(self.node(Value::Map(entries), line, None))
            }
            Some('[') => {
                self.bump();
                let mut items = Vec::new();
                loop {
                    self.skip_filler(&[',']);
                    match self.peek() {
                        None => return self.err("unexpected end of file: missing ']'"),
                        Some(']') => {
                            self.bump();
                            break;
                        }
                        Some(_) => {
                            items.push(self.value()?);
                            self.skip_inline_ws();
                            match self.peek() {
                                Some(',') | Some(']') | Some('\n') | None => {}
                                Some(_) if self.at_comment() => {}
                                Some(c) => {
                                    return self.err(format!("unexpected {c:?} in array"));
                                }
                            }
                        }
                    }
                }
                Ok(self.node(Value::Array(items), line, None))
            }
            Some('"') | Some('\'') => {
                let s = self.quoted()?;
                Ok(self.node(Value::Str(s), line, None))
            }
            Some('$') => {
                self.bump();
                let name = self.bare();
                if name.is_empty() {
                    return self.err("'$' without a variable name");
                }
                self.variable(&name, line)
            }
            Some(_) => {
                let raw = self.bare();
                if raw.is_empty() {
                    let c = self.peek().unwrap_or(' ');
                    return self.err(format!("expected a value, found {c:?}"));
                }
                let v = classify(&raw).map_err(|msg| ConfError::Syntax {
                    file: self.file.to_string(),
                    line,
                    msg,
                })?;
                Ok(self.node(v, line, Some(raw)))
            }
            None => self.err("unexpected end of file: missing value"),
        }
    }

    fn variable(&mut self, name: &str, line: usize) -> Result<Node, ConfError> {
        for scope in self.scopes.iter().rev() {
            if let Some((_, n)) = scope.iter().rev().find(|(k, _)| k == name) {
                let mut n = n.clone();
                n.line = line;
                n.file = self.file.clone();
                return Ok(n);
            }
        }
        match std::env::var(name) {
            Ok(text) => {
                let v = classify(&text).unwrap_or(Value::Str(text.clone()));
                Ok(self.node(v, line, Some(text)))
            }
            Err(_) => self.err(format!(
                "variable reference for '{name}' can not be found (not defined in the file nor in the environment)"
            )),
        }
    }

    fn bare(&mut self) -> String {
        let start = self.pos;
        while let Some(c) = self.peek() {
            if ends_bare(c) {
                break;
            }
            self.bump();
        }
        self.chars[start..self.pos].iter().collect()
    }

    fn quoted(&mut self) -> Result<String, ConfError> {
        let q = self.bump().unwrap_or('"');
        let line = self.line;
        let mut out = String::new();
        loop {
            match self.bump() {
                None => {
                    return Err(ConfError::Syntax {
                        file: self.file.to_string(),
                        line,
                        msg: "unterminated string".into(),
                    })
                }
                Some(c) if c == q => return Ok(out),
                Some('\\') if q == '"' => match self.bump() {
                    Some('n') => out.push('\n'),
                    Some('t') => out.push('\t'),
                    Some('r') => out.push('\r'),
                    Some('"') => out.push('"'),
                    Some('\\') => out.push('\\'),
                    Some('/') => out.push('/'),
                    Some('u') => {
                        let hex: String = (0..4).filter_map(|_| self.bump()).collect();
                        match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                            Some(c) => out.push(c),
                            None => return self.err(format!("bad unicode escape \\u{hex}")),
                        }
                    }
                    Some(c) => return self.err(format!("invalid escape \\{c}")),
                    None => return self.err("unterminated string"),
                },
                Some(c) => out.push(c),
            }
        }
    }
}

/// Types an unquoted token: boolean, integer (with size suffix), float or
/// string.
fn classify(raw: &str) -> Result<Value, String> {
    match raw.to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" => return Ok(Value::Bool(true)),
        "false" | "no" | "off" => return Ok(Value::Bool(false)),
        _ => {}
    }
    let first = raw.chars().next().unwrap_or(' ');
    if !(first.is_ascii_digit() || (first == '-' && raw.len() > 1)) {
        return Ok(Value::Str(raw.to_string()));
    }
    let digits_end = raw
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || (i == 0 && c == '-')))
        .map(|(i, _)| i)
        .unwrap_or(raw.len());
    let (num, suffix) = raw.split_at(digits_end);
    if suffix.is_empty() {
        return num
            .parse::<i64>()
            .map(Value::Int)
            .map_err(|_| format!("integer out of range: {raw}"));
    }
    if let Some(mult) = size_multiplier(suffix) {
        let n: i64 = num
            .parse()
            .map_err(|_| format!("integer out of range: {raw}"))?;
        return n
            .checked_mul(mult)
            .map(Value::Int)
            .ok_or_else(|| format!("size out of range: {raw}"));
    }
    if let Ok(f) = raw.parse::<f64>() {
        if f.is_finite() && suffix.starts_with('.') {
            return Ok(Value::Float(f));
        }
    }
    // Durations (`2s`), addresses (`127.0.0.1:4222`), versions: strings.
    Ok(Value::Str(raw.to_string()))
}

/// nats-server's number suffixes: single letters are powers of 1000, `xB`,
/// `xi` and `xiB` powers of 1024.
/// The multiplier of a NATS size suffix (`K` = 1000, `KB`/`KiB` = 1024, …).
pub(crate) fn size_multiplier(suffix: &str) -> Option<i64> {
    const K: i64 = 1000;
    const KI: i64 = 1024;
    Some(match suffix.to_ascii_lowercase().as_str() {
        "k" => K,
        "kb" | "ki" | "kib" => KI,
        "m" => K * K,
        "mb" | "mi" | "mib" => KI * KI,
        "g" => K * K * K,
        "gb" | "gi" | "gib" => KI * KI * KI,
        "t" => K * K * K * K,
        "tb" | "ti" | "tib" => KI * KI * KI * KI,
        "p" => K * K * K * K * K,
        "pb" | "pi" | "pib" => KI * KI * KI * KI * KI,
        _ => return None,
    })
}

/// Parses Go duration syntax (`1m30s`, `1.5h`, `300ms`; see
/// [`super::duration`]). Only `0` may go without a unit: in a NATS config
/// a bare number is a count of seconds, read by the caller, not here.
pub fn parse_go_duration(s: &str) -> Option<Duration> {
    super::duration::parse_go_duration(s, super::duration::BareNumber::Refused).ok()
}

/// What a config file sets: the NATS options plus process-level settings
/// that belong to the `nats-server` command rather than to the server.
#[derive(Debug, Clone, Default)]
pub struct NatsConf {
    pub options: NatsOptions,
    pub log_file: Option<PathBuf>,
    pub pid_file: Option<PathBuf>,
    pub ports_file_dir: Option<PathBuf>,
    /// `tls { timeout }` (handshake timeout).
    pub tls_timeout: Option<Duration>,
    /// Whether the monitoring host was given (`http: host:port`); if not,
    /// it follows the client host, as in nats-server.
    pub http_host_explicit: bool,
    /// Whether the client host was set by the file.
    pub host_explicit: bool,
    /// Unknown or ignored keys, for the log.
    pub warnings: Vec<String>,
}

/// Reads a config file and maps it over the defaults.
pub fn load_file(path: &Path) -> Result<NatsConf, ConfError> {
    let entries = parse_file(path)?;
    let mut conf = NatsConf::default();
    apply(&entries, &mut conf)?;
    Ok(conf)
}

/// Maps config text over the defaults (`origin` as in [`parse_str`]).
pub fn from_str(text: &str, origin: &Path) -> Result<NatsConf, ConfError> {
    let entries = parse_str(text, origin)?;
    let mut conf = NatsConf::default();
    apply(&entries, &mut conf)?;
    Ok(conf)
}

fn invalid<T>(key: &str, n: &Node, msg: impl Into<String>) -> Result<T, ConfError> {
    Err(ConfError::Invalid {
        file: n.file.to_string(),
        line: n.line,
        key: key.to_string(),
        msg: msg.into(),
    })
}

fn want_str<'n>(key: &str, n: &'n Node) -> Result<&'n str, ConfError> {
    match &n.value {
        Value::Str(s) => Ok(s),
        _ => match &n.raw {
            // `password: 1234` or `user: 007` are strings to the user.
            Some(r) if !matches!(n.value, Value::Map(_) | Value::Array(_)) => Ok(r),
            _ => invalid(
                key,
                n,
                format!("expected a string, found {}", n.value.kind()),
            ),
        },
    }
}

fn want_int(key: &str, n: &Node) -> Result<i64, ConfError> {
    match &n.value {
        Value::Int(i) => Ok(*i),
        _ => invalid(
            key,
            n,
            format!("expected a number, found {}", n.value.kind()),
        ),
    }
}

fn want_usize(key: &str, n: &Node) -> Result<usize, ConfError> {
    let i = want_int(key, n)?;
    usize::try_from(i).or_else(|_| invalid(key, n, format!("must not be negative: {i}")))
}

fn want_bool(key: &str, n: &Node) -> Result<bool, ConfError> {
    match &n.value {
        Value::Bool(b) => Ok(*b),
        _ => invalid(
            key,
            n,
            format!("expected a boolean, found {}", n.value.kind()),
        ),
    }
}

/// A duration: a Go duration string (`"2s"`, `1m`), or a number of seconds.
fn want_duration(key: &str, n: &Node) -> Result<Duration, ConfError> {
    if let Some(raw) = &n.raw {
        if let Some(d) = parse_go_duration(raw) {
            if raw.chars().any(|c| c.is_ascii_alphabetic()) {
                return Ok(d);
            }
        }
    }
    match &n.value {
        Value::Int(i) if *i >= 0 => Ok(Duration::from_secs(*i as u64)),
        Value::Float(f) if *f >= 0.0 && f.is_finite() && *f < 1e12 => {
            Ok(Duration::from_secs_f64(*f))
        }
        Value::Str(s) => match parse_go_duration(s) {
            Some(d) => Ok(d),
            None => invalid(
                key,
                n,
                format!("not a duration: {s:?} (use e.g. \"2s\", \"1m\")"),
            ),
        },
        v => invalid(key, n, format!("expected a duration, found {}", v.kind())),
    }
}

fn want_map<'n>(key: &str, n: &'n Node) -> Result<&'n [(String, Node)], ConfError> {
    match &n.value {
        Value::Map(m) => Ok(m),
        v => invalid(
            key,
            n,
            format!("expected a block {{…}}, found {}", v.kind()),
        ),
    }
}

fn want_port(key: &str, n: &Node) -> Result<u16, ConfError> {
    let p = want_int(key, n)?;
    port_value(p).map_or_else(|| invalid(key, n, format!("not a port: {p}")), Ok)
}

/// `-1` (random) maps to 0, as nats-server's `RANDOM_PORT`.
fn port_value(p: i64) -> Option<u16> {
    if p == -1 {
        Some(0)
    } else {
        u16::try_from(p).ok()
    }
}

/// Splits `host:port`, `[v6]:port`, `:port` or `port`.
fn host_port(key: &str, n: &Node) -> Result<(Option<String>, Option<u16>), ConfError> {
    if let Value::Int(p) = n.value {
        return port_value(p)
            .map(|p| (None, Some(p)))
            .map_or_else(|| invalid(key, n, format!("not a port: {p}")), Ok);
    }
    let s = want_str(key, n)?;
    let s = s
        .strip_prefix("nats://")
        .or_else(|| s.strip_prefix("http://"))
        .unwrap_or(s);
    match s.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(':') || h.starts_with('[') => {
            let port: i64 = p
                .parse()
                .or_else(|_| invalid(key, n, format!("bad port in {s:?}")))?;
            let port = port_value(port)
                .map_or_else(|| invalid(key, n, format!("bad port in {s:?}")), Ok)?;
            let h = h.trim_start_matches('[').trim_end_matches(']');
            Ok(((!h.is_empty()).then(|| h.to_string()), Some(port)))
        }
        _ => Ok((Some(s.to_string()), None)),
    }
}

fn apply(entries: &[(String, Node)], c: &mut NatsConf) -> Result<(), ConfError> {
    let mut http_port: Option<u16> = None;
    let mut http_host: Option<String> = None;
    let mut op = OperatorKeys::default();
    for (key, n) in entries {
        let k = key.to_ascii_lowercase();
        let o = &mut c.options;
        match k.as_str() {
            "listen" => {
                let (h, p) = host_port(key, n)?;
                if let Some(h) = h {
                    o.host = h;
                    c.host_explicit = true;
                }
                if let Some(p) = p {
                    o.port = p;
                }
            }
            "host" | "net" | "addr" => {
                o.host = want_str(key, n)?.to_string();
                c.host_explicit = true;
            }
            "port" => o.port = want_port(key, n)?,
            "http" | "monitor" => {
                let (h, p) = host_port(key, n)?;
                if h.is_some() {
                    http_host = h;
                }
                if p.is_none() {
                    return invalid(key, n, "expected host:port or a port");
                }
                http_port = p;
            }
            "http_port" | "monitor_port" => http_port = Some(want_port(key, n)?),
            "http_host" => http_host = Some(want_str(key, n)?.to_string()),
            "server_name" => o.server_name = Some(want_str(key, n)?.to_string()),
            "max_payload" => o.max_payload = want_usize(key, n)?,
            "max_pending" => o.max_pending = want_usize(key, n)?,
            "max_control_line" => o.max_control_line = want_usize(key, n)?,
            "max_connections" | "max_conn" => o.max_connections = want_usize(key, n)?,
            "max_subscriptions" | "max_subs" => o.max_subscriptions = want_usize(key, n)?,
            "ping_interval" => o.ping_interval = want_duration(key, n)?,
            "ping_max" | "max_pings_out" => {
                o.ping_max =
                    u32::try_from(want_int(key, n)?).or_else(|_| invalid(key, n, "out of range"))?
            }
            "write_deadline" => o.write_deadline = want_duration(key, n)?,
            "lame_duck_duration" => o.lame_duck_duration = want_duration(key, n)?,
            "lame_duck_grace_period" => o.lame_duck_grace_period = want_duration(key, n)?,
            "authorization" => apply_authorization(key, n, &mut o.auth, &mut o.auth_timeout)?,
            "no_auth_user" => o.auth.no_auth_user = Some(want_str(key, n)?.to_string()),
            "tls" => {
                let (files, timeout) =
                    tls_block_with(key, n, &mut c.warnings, true, TlsFirst::Client)?;
                o.tls = Some(files);
                c.tls_timeout = timeout;
            }
            "debug" => o.debug = want_bool(key, n)?,
            "trace" => o.trace = want_bool(key, n)?,
            "logfile" | "log_file" => c.log_file = Some(PathBuf::from(want_str(key, n)?)),
            "pid_file" | "pidfile" => c.pid_file = Some(PathBuf::from(want_str(key, n)?)),
            "ports_file_dir" => c.ports_file_dir = Some(PathBuf::from(want_str(key, n)?)),
            "logtime"
            | "logtime_utc"
            | "syslog"
            | "remote_syslog"
            | "log_size_limit"
            | "log_max_num"
            | "trace_verbose"
            | "connect_error_reports"
            | "reconnect_error_reports"
            | "disable_sublist_cache"
            | "no_sublist_cache" => {
                c.warnings.push(format!(
                    "{}:{}: {key:?} accepted and ignored",
                    n.file, n.line
                ));
            }
            "jetstream" => c.warnings.push(format!(
                "{}:{}: JetStream is not provided by this server; \"jetstream\" ignored",
                n.file, n.line
            )),
            // Operator (JWT) mode; checked as a whole after the loop.
            "operator" | "operators" | "root" | "roots" | "trusted_operators" => {
                operator_jwts(key, n, &mut op.operators)?;
                op.first.get_or_insert((key.clone(), n.clone()));
            }
            "trusted" | "trusted_keys" => {
                let items = match &n.value {
                    Value::Array(items) => items.iter().collect::<Vec<_>>(),
                    _ => vec![n],
                };
                for item in items {
                    op.trusted.push(want_str(key, item)?.to_string());
                }
                op.first.get_or_insert((key.clone(), n.clone()));
            }
            "resolver" | "account_resolver" | "accounts_resolver" => {
                op.resolver = Some((key.clone(), n.clone()));
            }
            "resolver_preload" => {
                let m = match &n.value {
                    Value::Map(m) => m,
                    _ => {
                        return invalid(
                            key,
                            n,
                            "preload should be a map of account_public_key:account_jwt",
                        )
                    }
                };
                for (k, v) in m {
                    op.preload.push((k.clone(), want_str(k, v)?.to_string()));
                }
                op.preload_node = Some((key.clone(), n.clone()));
            }
            "resolver_tls" | "resolver_pinned_accounts" => {
                return invalid(key, n, format!("{key:?} is not supported"));
            }
            "system_account" | "system" => {
                op.system_account = Some((key.clone(), n.clone()));
            }
            "accounts" => accounts_block(key, n, &mut o.auth, &mut c.warnings)?,
            "mappings" | "maps" => o.auth.mappings.extend(mappings_block(key, n)?),
            "cluster" => o.cluster = Some(cluster_block(key, n, &mut c.warnings)?),
            "websocket" | "ws" => o.websocket = websocket_block(key, n, &mut c.warnings)?,
            "leafnodes" | "leaf" => o.leafnodes = Some(leafnodes_block(key, n, &mut c.warnings)?),
            "gateway" | "mqtt" => c.warnings.push(format!(
                "{}:{}: {key:?} is not supported; ignored",
                n.file, n.line
            )),
            _ => c.warnings.push(format!(
                "{}:{}: unknown field {key:?} ignored",
                n.file, n.line
            )),
        }
    }
    let single_user = entries
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("authorization"))
        .any(|(_, n)| {
            matches!(&n.value, Value::Map(m) if m.iter().any(|(k, _)| {
                k.eq_ignore_ascii_case("user") || k.eq_ignore_ascii_case("username")
            }))
        });
    check_accounts(entries, &c.options.auth, single_user)?;
    check_websocket_auth(entries, &c.options, single_user)?;
    if let Some(w) = &c.options.websocket {
        if !w.cookies.jwt.is_empty() && op.operators.is_empty() && op.trusted.is_empty() {
            let msg = format!(
                "trusted operators or trusted keys configuration is required for JWT authentication via cookie {:?}",
                w.cookies.jwt
            );
            if let Some((k, n)) = entries
                .iter()
                .rev()
                .find(|(k, _)| k.eq_ignore_ascii_case("websocket") || k.eq_ignore_ascii_case("ws"))
            {
                return invalid(k, n, msg);
            }
        }
    }
    operator_mode(op, c)?;
    if http_port.is_some() || http_host.is_some() {
        c.http_host_explicit = http_host.is_some();
        let host = http_host.unwrap_or_else(|| c.options.host.clone());
        c.options.http = Some((host, http_port.unwrap_or(0)));
    }
    Ok(())
}

/// The `websocket` block's authorization against the server's, as
/// nats-server checks it: a user or token there cannot stand beside a
/// users array or nkeys, and its `no_auth_user` must be a user.
fn check_websocket_auth(
    entries: &[(String, Node)],
    o: &NatsOptions,
    single_user: bool,
) -> Result<(), ConfError> {
    let Some(a) = o.websocket.as_ref().and_then(|w| w.auth.as_ref()) else {
        return Ok(());
    };
    let Some((k, n)) = entries
        .iter()
        .rev()
        .find(|(k, _)| k.eq_ignore_ascii_case("websocket") || k.eq_ignore_ascii_case("ws"))
    else {
        return Ok(());
    };
    let listed = !o.auth.nkeys.is_empty() || (!o.auth.users.is_empty() && !single_user);
    if listed && a.username.is_some() {
        return invalid(
            k,
            n,
            "websocket authentication username not compatible with presence of users/nkeys",
        );
    }
    if listed && a.token.is_some() {
        return invalid(
            k,
            n,
            "websocket authentication token not compatible with presence of users/nkeys",
        );
    }
    if let Some(u) = &a.no_auth_user {
        let known = o.auth.users.iter().any(|x| &x.username == u)
            || o.auth.nkeys.iter().any(|x| &x.nkey == u);
        if !known {
            return invalid(
                k,
                n,
                format!("no_auth_user: \"{u}\" not present as user or nkey in authorization block or account configuration"),
            );
        }
    }
    Ok(())
}

/// The operator-mode keys of a file, gathered before they are checked
/// together.
#[derive(Default)]
struct OperatorKeys {
    /// The first `operator`/`trusted` entry (for messages).
    first: Option<(String, Node)>,
    operators: Vec<String>,
    trusted: Vec<String>,
    system_account: Option<(String, Node)>,
    resolver: Option<(String, Node)>,
    preload: Vec<(String, String)>,
    preload_node: Option<(String, Node)>,
}

/// `operator: <JWT or file>` or a list of them. A file holds the JWT,
/// bare or framed as `nsc` writes it; a relative path is taken from the
/// directory of the config file.
fn operator_jwts(key: &str, n: &Node, out: &mut Vec<String>) -> Result<(), ConfError> {
    let items = match &n.value {
        Value::Array(items) => items.iter().collect::<Vec<_>>(),
        _ => vec![n],
    };
    for item in items {
        let v = want_str(key, item)?.trim();
        let token = if v.starts_with("eyJ") {
            v.to_string()
        } else {
            let mut path = PathBuf::from(v);
            if path.is_relative() {
                if let Some(dir) = Path::new(&*item.file).parent() {
                    let rel = dir.join(&path);
                    if rel.exists() {
                        path = rel;
                    }
                }
            }
            let text = std::fs::read_to_string(&path).or_else(|e| {
                invalid(
                    key,
                    item,
                    format!("cannot read operator JWT file {path:?}: {e}"),
                )
            })?;
            crate::nats::jwt::framed_tokens(&text)
                .into_iter()
                .next()
                .unwrap_or_default()
        };
        if let Err(e) = crate::nats::jwt::decode_operator(&token) {
            return invalid(key, item, format!("invalid operator JWT: {e}"));
        }
        out.push(token);
    }
    Ok(())
}

/// Checks the operator-mode keys as a whole and builds
/// [`OperatorConfig`]: operators need a resolver, a resolver needs
/// operators, and users come only from JWTs then.
fn operator_mode(op: OperatorKeys, c: &mut NatsConf) -> Result<(), ConfError> {
    let Some((first_key, first)) = op.first.clone() else {
        if let Some((k, n)) = op.resolver.as_ref().or(op.preload_node.as_ref()) {
            return invalid(
                k,
                n,
                "a resolver needs trusted operators (operator: <JWT or file>)",
            );
        }
        if let Some((k, n)) = &op.system_account {
            // Without operators the system account is a configured account
            // (`$SYS` when none is named).
            let name = want_str(k, n)?;
            let declared = name == crate::nats::account::SYSTEM_ACCOUNT
                || c.options.auth.accounts.iter().any(|a| a.name == name);
            if !declared {
                return invalid(k, n, format!("system account {name:?} not found"));
            }
            c.options.auth.system_account = Some(name.to_string());
        }
        return Ok(());
    };
    let auth = &c.options.auth;
    if !auth.users.is_empty() || !auth.nkeys.is_empty() || auth.token.is_some() {
        return invalid(
            &first_key,
            &first,
            "operator mode does not allow users, nkeys or a token in the config file (users come with JWTs)",
        );
    }
    if !auth.accounts.is_empty() {
        return invalid(
            &first_key,
            &first,
            "operator mode does not allow an accounts block (accounts come with JWTs)",
        );
    }
    if auth.no_auth_user.is_some() {
        return invalid(
            &first_key,
            &first,
            "no_auth_user not compatible with Trusted Operator",
        );
    }
    let system_account = match &op.system_account {
        Some((k, n)) => Some(want_str(k, n)?.to_string()),
        None => None,
    };
    let Some((rk, rn)) = &op.resolver else {
        return invalid(
            &first_key,
            &first,
            "operators require an account resolver to be configured (resolver: MEMORY or resolver { type: full, dir: … })",
        );
    };
    let resolver = resolver_config(rk, rn, op.preload)?;
    c.options.auth.operator = Some(OperatorConfig {
        operators: op.operators,
        trusted_keys: op.trusted,
        system_account,
        resolver,
    });
    Ok(())
}

/// `resolver: MEMORY` or `resolver { type: full|cache, dir, … }`.
fn resolver_config(
    key: &str,
    n: &Node,
    preload: Vec<(String, String)>,
) -> Result<ResolverConfig, ConfError> {
    const PARSE: &str = "error parsing account resolver, should be MEM or  URL(\"url\") or a map containing dir and type state=[FULL|CACHE])";
    let m = match &n.value {
        Value::Str(s) if s.eq_ignore_ascii_case("MEMORY") || s.eq_ignore_ascii_case("MEM") => {
            return Ok(ResolverConfig::Memory { preload });
        }
        Value::Str(s) if s.to_ascii_uppercase().starts_with("URL(") => {
            return invalid(
                key,
                n,
                "the URL account resolver is not supported; use MEMORY or a full/cache directory",
            );
        }
        Value::Map(m) => m,
        _ => return invalid(key, n, PARSE),
    };
    let mut full = None;
    let mut dir = None;
    let mut allow_delete = false;
    let mut hard_delete = false;
    let mut limit = None;
    let mut interval = None;
    let mut timeout = None;
    let mut ttl = None;
    for (k, v) in m {
        match k.to_ascii_lowercase().as_str() {
            "type" => {
                full = Some(match want_str(k, v)?.to_ascii_lowercase().as_str() {
                    "full" => true,
                    "cache" => false,
                    _ => return invalid(k, v, PARSE),
                })
            }
            "dir" => {
                let d = want_str(k, v)?;
                if d.is_empty() {
                    return invalid(k, v, "dir has no value and needs to point to a directory");
                }
                dir = Some(PathBuf::from(d));
            }
            "allow_delete" => allow_delete = want_bool(k, v)?,
            "hard_delete" => hard_delete = want_bool(k, v)?,
            "limit" => limit = Some(want_usize(k, v)?),
            "interval" => interval = Some(want_duration(k, v)?),
            "ttl" => ttl = Some((k.clone(), v.clone(), want_duration(k, v)?)),
            "timeout" => {
                let d = want_duration(k, v)?;
                if d.is_zero() {
                    return invalid(k, v, "Fetch timeout 0s is too smal");
                }
                timeout = Some(d);
            }
            other => return invalid(k, v, format!("resolver field {other:?} is not supported")),
        }
    }
    let Some(full) = full else {
        return invalid(key, n, PARSE);
    };
    let Some(dir) = dir else {
        return invalid(key, n, "dir has no value and needs to point to a directory");
    };
    if full {
        if let Some((k, v, d)) = &ttl {
            if !d.is_zero() {
                return invalid(k, v, "FULL does not accept ttl");
            }
        }
    } else {
        if allow_delete {
            return invalid(key, n, "CACHE does not accept allow_delete");
        }
        if interval.is_some() {
            return invalid(key, n, "CACHE does not accept sync");
        }
    }
    Ok(ResolverConfig::Dir {
        full,
        dir,
        allow_delete,
        hard_delete,
        limit: limit.filter(|&l| l > 0),
        ttl: ttl.map(|(_, _, d)| d).filter(|d| !d.is_zero()),
        // Zero or less is nats-server's default.
        interval: interval.filter(|d: &Duration| !d.is_zero()),
        timeout,
        preload,
    })
}

/// `cluster { name, listen | host/port, routes, authorization, tls,
/// advertise, no_advertise, connect_retries, pool_size, accounts }`.
/// Compression, which we do not provide, is refused unless it asks for
/// none.
fn cluster_block(
    key: &str,
    n: &Node,
    warnings: &mut Vec<String>,
) -> Result<ClusterOptions, ConfError> {
    let mut c = ClusterOptions::default();
    for (k, v) in want_map(key, n)? {
        match k.to_ascii_lowercase().as_str() {
            "name" => {
                let name = want_str(k, v)?;
                if name.is_empty() || name.contains(char::is_whitespace) {
                    return invalid(k, v, "cluster name cannot be empty or contain spaces");
                }
                c.name = Some(name.to_string());
            }
            "listen" => {
                let (h, p) = host_port(k, v)?;
                if let Some(h) = h {
                    c.host = h;
                }
                match p {
                    Some(p) => c.port = p,
                    None => return invalid(k, v, "expected host:port or a port"),
                }
            }
            "host" | "net" => c.host = want_str(k, v)?.to_string(),
            "port" => c.port = want_port(k, v)?,
            "routes" => {
                let items = match &v.value {
                    Value::Array(items) => items,
                    other => {
                        return invalid(
                            k,
                            v,
                            format!("expected an array of URLs, found {}", other.kind()),
                        )
                    }
                };
                for item in items {
                    let url = want_str(k, item)?;
                    if crate::config::nats::parse_cluster_listen(url).is_none() {
                        return invalid(k, item, format!("not a route URL: {url:?}"));
                    }
                    c.routes.push(url.to_string());
                }
            }
            "authorization" => {
                let mut user = None;
                let mut pass = None;
                for (ak, av) in want_map(k, v)? {
                    match ak.to_ascii_lowercase().as_str() {
                        "user" | "username" => user = Some(want_str(ak, av)?.to_string()),
                        "password" | "pass" => pass = Some(want_str(ak, av)?.to_string()),
                        "timeout" => c.auth_timeout = want_duration(ak, av)?,
                        other => {
                            return invalid(
                                k,
                                av,
                                format!("unsupported cluster authorization field {other:?}"),
                            )
                        }
                    }
                }
                match (user, pass) {
                    (Some(user), pass) => {
                        c.auth = Some(ClusterAuth {
                            user,
                            password: pass.unwrap_or_default(),
                        })
                    }
                    (None, Some(_)) => return invalid(k, v, "password without user"),
                    (None, None) => {}
                }
            }
            "tls" => {
                let (files, _timeout) = tls_block(k, v, warnings, true)?;
                c.tls = Some(files);
            }
            "advertise" | "cluster_advertise" => c.advertise = Some(want_str(k, v)?.to_string()),
            "no_advertise" => c.no_advertise = want_bool(k, v)?,
            "connect_retries" => {
                c.connect_retries = u32::try_from(want_int(k, v)?)
                    .or_else(|_| invalid(k, v, "must be a non-negative number"))?
            }
            // -1 (and 0, our default) = one unpooled route per peer.
            "pool_size" => {
                let p = want_int(k, v)?;
                let max = super::nats::MAX_ROUTE_POOL_SIZE as i64;
                if !(-1..=max).contains(&p) {
                    return invalid(k, v, format!("must be -1 (no pooling) or 0 to {max}"));
                }
                c.pool_size = usize::try_from(p).unwrap_or(0);
            }
            "accounts" => {
                for a in subjects(k, v)? {
                    if c.pinned_accounts.contains(&a) {
                        return invalid(
                            k,
                            v,
                            format!("found duplicate account name {a:?} in pinned accounts list"),
                        );
                    }
                    c.pinned_accounts.push(a);
                }
            }
            "compression" => c.compression = route_compression(k, v)?,
            other => return invalid(key, v, format!("unsupported cluster field {other:?}")),
        }
    }
    if !c.pinned_accounts.is_empty() && c.pool_size == 0 {
        return invalid(
            key,
            n,
            "accounts (pinned account routes) need a route pool: set pool_size to 1 or more",
        );
    }
    Ok(c)
}

/// `websocket { listen | host/port, advertise, no_tls, tls, compression,
/// same_origin, allowed_origins, handshake_timeout, authorization,
/// no_auth_user, jwt_cookie, user_cookie, pass_cookie, token_cookie,
/// headers, ping_interval }`. Without a port the block enables nothing (as
/// in nats-server: there is no default port); port `-1` picks a free one.
/// Other keys are refused by name.
fn websocket_block(
    key: &str,
    n: &Node,
    warnings: &mut Vec<String>,
) -> Result<Option<WebsocketOptions>, ConfError> {
    let mut w = WebsocketOptions::default();
    let mut port: Option<i64> = None;
    let mut no_tls = false;
    for (k, v) in want_map(key, n)? {
        match k.to_ascii_lowercase().as_str() {
            "listen" => {
                let (h, _) = host_port(k, v)?;
                if let Some(h) = h {
                    w.host = h;
                }
                let text = match &v.value {
                    Value::Int(p) => p.to_string(),
                    _ => want_str(k, v)?
                        .rsplit_once(':')
                        .map_or("", |(_, p)| p)
                        .to_string(),
                };
                match text.parse::<i64>() {
                    Ok(p) if port_value(p).is_some() => port = Some(p),
                    _ => return invalid(k, v, "expected host:port or a port"),
                }
            }
            "host" | "net" => w.host = want_str(k, v)?.to_string(),
            "port" => {
                let p = want_int(k, v)?;
                if port_value(p).is_none() {
                    return invalid(k, v, format!("not a port: {p}"));
                }
                port = Some(p);
            }
            "advertise" => w.advertise = Some(want_str(k, v)?.to_string()),
            "no_tls" => no_tls = want_bool(k, v)?,
            "tls" => {
                let (files, timeout) = tls_block(k, v, warnings, true)?;
                if timeout.is_some() {
                    warnings.push(format!(
                        "{}:{}: websocket tls \"timeout\" ignored (the handshake_timeout bounds the TLS handshake too)",
                        v.file, v.line
                    ));
                }
                w.tls = Some(files);
            }
            "compression" | "compress" => w.compression = want_bool(k, v)?,
            "same_origin" => w.same_origin = want_bool(k, v)?,
            "allowed_origins" | "allowed_origin" | "allow_origins" | "allow_origin" | "origins"
            | "origin" => {
                let items: Vec<&Node> = match &v.value {
                    Value::Array(items) => items.iter().collect(),
                    _ => vec![v],
                };
                for item in items {
                    let text = want_str(k, item)?;
                    match crate::config::nats::parse_ws_origin(text) {
                        Ok(o) => w.allowed_origins.push(o),
                        Err(why) => {
                            return invalid(
                                k,
                                item,
                                format!("unable to parse allowed origin {text:?}: {why}"),
                            )
                        }
                    }
                }
            }
            "handshake_timeout" => {
                let d = want_duration(k, v)?;
                if !d.is_zero() {
                    w.handshake_timeout = d;
                }
            }
            "authorization" | "authentication" => {
                let a = w.auth.get_or_insert_with(WsAuth::default);
                for (ak, av) in want_map(k, v)? {
                    match ak.to_ascii_lowercase().as_str() {
                        "user" | "username" => a.username = Some(want_str(ak, av)?.to_string()),
                        "password" | "pass" => a.password = want_str(ak, av)?.to_string(),
                        "token" => a.token = Some(want_str(ak, av)?.to_string()),
                        "timeout" => a.timeout = Some(want_duration(ak, av)?),
                        other => {
                            return invalid(
                                k,
                                av,
                                format!("unknown websocket authorization field {other:?} (user, password, token and timeout are)"),
                            )
                        }
                    }
                }
                if a.username.is_some() && a.token.is_some() {
                    return invalid(k, v, "cannot have a user and a token");
                }
            }
            "no_auth_user" => {
                w.auth.get_or_insert_with(WsAuth::default).no_auth_user =
                    Some(want_str(k, v)?.to_string());
            }
            "jwt_cookie" => w.cookies.jwt = want_str(k, v)?.to_string(),
            "user_cookie" => w.cookies.user = want_str(k, v)?.to_string(),
            "pass_cookie" => w.cookies.pass = want_str(k, v)?.to_string(),
            "token_cookie" => w.cookies.token = want_str(k, v)?.to_string(),
            "headers" => {
                for (hk, hv) in want_map(k, v)? {
                    let lower = hk.to_ascii_lowercase();
                    if matches!(
                        lower.as_str(),
                        "host" | "content-length" | "connection" | "upgrade" | "nats-no-masking"
                    ) {
                        return invalid(
                            k,
                            hv,
                            format!("websocket: invalid header {hk:?} not allowed"),
                        );
                    }
                    if lower.starts_with("sec-websocket-") {
                        return invalid(
                            k,
                            hv,
                            format!("websocket: invalid header {hk:?}, \"Sec-WebSocket-\" prefix not allowed"),
                        );
                    }
                    let value = match &hv.value {
                        Value::Str(t) => t.clone(),
                        _ => {
                            return invalid(
                                k,
                                hv,
                                format!("error parsing header key {hk}: not a string"),
                            )
                        }
                    };
                    let bad =
                        |t: &str| !t.bytes().all(|b| b == b'\t' || (b' '..=b'~').contains(&b));
                    if hk.is_empty()
                        || hk.bytes().any(|b| !b.is_ascii_graphic() || b == b':')
                        || bad(&value)
                    {
                        return invalid(
                            k,
                            hv,
                            format!("websocket: header {hk:?} is not a valid HTTP header"),
                        );
                    }
                    w.headers.push((hk.to_string(), value));
                }
                w.headers.sort();
            }
            "ping_interval" => {
                let d = want_duration(k, v)?;
                w.ping_interval = (!d.is_zero()).then_some(d);
            }
            other => return invalid(key, v, format!("unsupported websocket field {other:?}")),
        }
    }
    let port = match port {
        None | Some(0) => {
            warnings.push(format!(
                "{}:{}: websocket has no port: WebSocket clients are not served",
                n.file, n.line
            ));
            return Ok(None);
        }
        Some(p) => port_value(p).unwrap_or(0),
    };
    w.port = port;
    if w.tls.is_none() && !no_tls {
        return invalid(
            key,
            n,
            "websocket requires TLS configuration (or no_tls: true)",
        );
    }
    if no_tls && w.tls.is_some() {
        // Either answer (plain text, or TLS despite no_tls) would surprise
        // someone: refuse the contradiction instead of picking one.
        return invalid(key, n, "websocket has both no_tls: true and a tls block");
    }
    Ok(Some(w))
}

/// `cluster { compression }` as nats-server reads it: a boolean, a mode
/// name, or `{ mode, rtt_thresholds }` (thresholds only with `s2_auto`).
fn route_compression(k: &str, v: &Node) -> Result<S2Compression, ConfError> {
    let mode = |name: &str| -> Result<S2Compression, ConfError> {
        S2Compression::from_name(name).map_or_else(
            || invalid(k, v, format!("unsupported compression mode {name:?}")),
            Ok,
        )
    };
    match &v.value {
        Value::Bool(b) => Ok(if *b {
            S2Compression::Fast
        } else {
            S2Compression::Off
        }),
        Value::Str(s) => mode(s),
        Value::Map(_) => {
            let mut m = S2Compression::Auto(S2Compression::default_thresholds());
            let mut thresholds = None;
            for (kk, vv) in want_map(k, v)? {
                match kk.to_ascii_lowercase().as_str() {
                    "mode" => m = mode(want_str(kk, vv)?)?,
                    "rtt_thresholds" | "thresholds" | "rtts" | "rtt" => {
                        let Value::Array(items) = &vv.value else {
                            return invalid(kk, vv, "expected a list of durations");
                        };
                        let mut t = Vec::new();
                        for item in items {
                            t.push(want_duration(kk, item)?);
                        }
                        while t.last().is_some_and(|d| d.is_zero()) {
                            t.pop();
                        }
                        let set: Vec<_> = t.iter().filter(|d| !d.is_zero()).collect();
                        if t.is_empty() || t.len() > 4 || set.windows(2).any(|w| w[0] >= w[1]) {
                            return invalid(
                                kk,
                                vv,
                                "rtt_thresholds: 1 to 4 ascending durations (0 skips a level)",
                            );
                        }
                        thresholds = Some(t);
                    }
                    other => {
                        return invalid(kk, vv, format!("unknown compression field {other:?}"))
                    }
                }
            }
            match (m, thresholds) {
                (S2Compression::Auto(_), Some(t)) => Ok(S2Compression::Auto(t)),
                (_, Some(_)) => invalid(k, v, "rtt_thresholds apply to mode s2_auto only"),
                (m, None) => Ok(m),
            }
        }
        _ => invalid(
            k,
            v,
            "expected a boolean, a mode or { mode, rtt_thresholds }",
        ),
    }
}

/// A leaf node `compression`: as [`route_compression`], but "on" (`true`,
/// `on`, `enabled`) means `s2_auto`, as nats-server reads it for leaves.
fn leaf_compression(k: &str, v: &Node) -> Result<S2Compression, ConfError> {
    let on = match &v.value {
        Value::Bool(b) => *b,
        Value::Str(s) => matches!(s.to_ascii_lowercase().as_str(), "on" | "enabled" | "true"),
        _ => false,
    };
    if on {
        return Ok(S2Compression::Auto(S2Compression::default_thresholds()));
    }
    route_compression(k, v)
}

/// A `{ user, password, account }` entry of a leafnodes `users` list.
fn leaf_user(key: &str, n: &Node) -> Result<LeafUser, ConfError> {
    let mut u = LeafUser::default();
    let mut named = false;
    for (k, v) in want_map(key, n)? {
        match k.to_ascii_lowercase().as_str() {
            "user" | "username" => {
                u.user = want_str(k, v)?.to_string();
                named = true;
            }
            "password" | "pass" => u.password = want_str(k, v)?.to_string(),
            "account" => u.account = Some(want_str(k, v)?.to_string()),
            other => {
                return invalid(
                    key,
                    v,
                    format!("unsupported leafnodes user field {other:?}"),
                )
            }
        }
    }
    if !named {
        return invalid(key, n, "needs user");
    }
    Ok(u)
}

/// `leafnodes { listen | host/port, advertise, no_advertise,
/// authorization { user, password, account, users, timeout }, tls,
/// reconnect, remotes [ { url | urls, tls, account, credentials, nkey,
/// deny_imports, deny_exports } ] }`. Keys for features we do not provide
/// (compression, hub role reversal, a leaf nkey on the listener) are
/// refused with an
/// error naming them.
fn leafnodes_block(
    key: &str,
    n: &Node,
    warnings: &mut Vec<String>,
) -> Result<LeafnodeOptions, ConfError> {
    let mut l = LeafnodeOptions::default();
    for (k, v) in want_map(key, n)? {
        match k.to_ascii_lowercase().as_str() {
            "listen" => {
                let (h, p) = host_port(k, v)?;
                if let Some(h) = h {
                    l.host = h;
                }
                match p {
                    Some(p) => l.port = Some(p),
                    None => return invalid(k, v, "expected host:port or a port"),
                }
            }
            "host" | "net" => l.host = want_str(k, v)?.to_string(),
            "port" => {
                // Port 0 means no listener, as in nats-server; -1 a random one.
                let p = want_int(k, v)?;
                l.port = match p {
                    0 => None,
                    -1 => Some(0),
                    p => Some(
                        port_value(p)
                            .map_or_else(|| invalid(k, v, format!("not a port: {p}")), Ok)?,
                    ),
                };
            }
            "advertise" => l.advertise = Some(want_str(k, v)?.to_string()),
            "no_advertise" => l.no_advertise = want_bool(k, v)?,
            "reconnect" | "reconnect_interval" => l.reconnect = want_duration(k, v)?,
            "tls" => l.tls = Some(tls_block_with(k, v, warnings, true, TlsFirst::Leaf)?.0),
            "compression" => l.compression = leaf_compression(k, v)?,
            "authorization" => {
                let mut single: Option<LeafUser> = None;
                let mut account = None;
                for (ak, av) in want_map(k, v)? {
                    match ak.to_ascii_lowercase().as_str() {
                        "user" | "username" => {
                            single.get_or_insert_with(LeafUser::default).user =
                                want_str(ak, av)?.to_string()
                        }
                        "password" | "pass" => {
                            single.get_or_insert_with(LeafUser::default).password =
                                want_str(ak, av)?.to_string()
                        }
                        // The single user's account, or (without a user)
                        // the account of leaves that need no credentials.
                        "account" => account = Some(want_str(ak, av)?.to_string()),
                        "timeout" => l.auth_timeout = want_duration(ak, av)?,
                        "users" => {
                            let Value::Array(items) = &av.value else {
                                return invalid(ak, av, "expected an array of users");
                            };
                            for item in items {
                                l.users.push(leaf_user(ak, item)?);
                            }
                        }
                        other => {
                            return invalid(
                                k,
                                av,
                                format!("unsupported leafnodes authorization field {other:?}"),
                            )
                        }
                    }
                }
                if let Some(mut u) = single {
                    if !l.users.is_empty() {
                        return invalid(k, v, "can not have a single user/pass and a users array");
                    }
                    if u.user.is_empty() {
                        return invalid(k, v, "password without user");
                    }
                    u.account = account.take();
                    l.users.push(u);
                }
                l.account = account;
                let mut seen = std::collections::HashSet::new();
                for u in &l.users {
                    if !seen.insert(u.user.clone()) {
                        return invalid(
                            k,
                            v,
                            format!(
                                "duplicate user {:?} detected in leafnode authorization",
                                u.user
                            ),
                        );
                    }
                }
            }
            "remotes" => {
                let Value::Array(items) = &v.value else {
                    return invalid(k, v, "expected an array of remotes");
                };
                for item in items {
                    l.remotes.push(leaf_remote(k, item, warnings)?);
                }
            }
            other => return invalid(key, v, format!("unsupported leafnodes field {other:?}")),
        }
    }
    Ok(l)
}

/// One entry of `leafnodes { remotes [ … ] }`.
fn leaf_remote(key: &str, n: &Node, warnings: &mut Vec<String>) -> Result<LeafRemote, ConfError> {
    let mut r = LeafRemote::default();
    for (k, v) in want_map(key, n)? {
        match k.to_ascii_lowercase().as_str() {
            "url" | "urls" => {
                let items: Vec<&Node> = match &v.value {
                    Value::Array(items) => items.iter().collect(),
                    _ => vec![v],
                };
                for item in items {
                    let url = want_str(k, item)?;
                    let Some(parsed) = crate::config::nats::parse_leaf_url(url) else {
                        return invalid(
                            k,
                            item,
                            format!(
                                "not a leafnode URL (nats-leaf://, nats://, tls://, ws://, wss://): {url:?}"
                            ),
                        );
                    };
                    let first_ws = r
                        .urls
                        .first()
                        .and_then(|u| crate::config::nats::parse_leaf_url(u))
                        .map(|u| u.ws);
                    if first_ws.is_some_and(|ws| ws != parsed.ws) {
                        return invalid(
                            k,
                            item,
                            "remote leaf node configuration cannot have a mix of websocket and non-websocket urls",
                        );
                    }
                    r.urls.push(url.to_string());
                }
            }
            "tls" => r.tls = Some(tls_block_with(k, v, warnings, false, TlsFirst::Leaf)?.0),
            "account" | "local" => r.account = Some(want_str(k, v)?.to_string()),
            "credentials" | "creds" => {
                if matches!(r.auth, LeafRemoteAuth::Seed(_)) {
                    return invalid(
                        k,
                        v,
                        "Remote leafnode can not have both creds and nkey defined",
                    );
                }
                r.auth = LeafRemoteAuth::Credentials(PathBuf::from(want_str(k, v)?));
            }
            "nkey" | "seed" => {
                let seed = want_str(k, v)?;
                if !seed.starts_with("SU") || nkeys::KeyPair::from_seed(seed).is_err() {
                    return invalid(
                        k,
                        v,
                        // Only the start of a would-be secret goes into the message.
                        format!(
                            "Remote leafnode nkey is not a valid seed: \"{}…\"",
                            seed.chars().take(4).collect::<String>()
                        ),
                    );
                }
                if matches!(r.auth, LeafRemoteAuth::Credentials(_)) {
                    return invalid(
                        k,
                        v,
                        "Remote leafnode can not have both creds and nkey defined",
                    );
                }
                r.auth = LeafRemoteAuth::Seed(seed.to_string());
            }
            "deny_imports" | "deny_import" => r.deny_imports = deny_subjects(k, v)?,
            "deny_exports" | "deny_export" => r.deny_exports = deny_subjects(k, v)?,
            "hub" if !want_bool(k, v)? => {}
            "hub" => return invalid(k, v, "hub: true (role reversal) is not supported"),
            "no_randomize" | "dont_randomize" => r.no_randomize = want_bool(k, v)?,
            "ignore_discovered_servers" => r.ignore_discovered_servers = want_bool(k, v)?,
            "compression" => r.compression = leaf_compression(k, v)?,
            "ws_compress" | "ws_compression" | "websocket_compress" | "websocket_compression" => {
                r.ws_compression = want_bool(k, v)?
            }
            "ws_no_masking" | "websocket_no_masking" => r.ws_no_masking = want_bool(k, v)?,
            "first_info_timeout" => r.first_info_timeout = Some(want_duration(k, v)?),
            "dial_timeout" => r.dial_timeout = Some(want_duration(k, v)?),
            "proxy" => r.proxy = Some(leaf_proxy(k, v)?),
            "disabled" => r.disabled = want_bool(k, v)?,
            other => {
                return invalid(
                    key,
                    v,
                    format!("unsupported leafnodes remote field {other:?}"),
                )
            }
        }
    }
    if r.urls.is_empty() {
        return invalid(key, n, "a leafnode remote needs url or urls");
    }
    let urls: Vec<_> = r
        .urls
        .iter()
        .filter_map(|u| crate::config::nats::parse_leaf_url(u))
        .collect();
    let websocket = urls.iter().any(|u| u.ws);
    for (set, name) in [
        (r.ws_compression, "ws_compression"),
        (r.ws_no_masking, "ws_no_masking"),
    ] {
        if set && !websocket {
            // nats-server ignores it; a key that cannot act is refused.
            return invalid(
                name,
                n,
                "only applies to WebSocket URLs (ws:// or wss://), and this remote has none",
            );
        }
    }
    if r.proxy.is_some() {
        if !websocket {
            // nats-server only warns; a proxy that is never used is refused
            // here rather than ignored.
            return invalid(
                "proxy",
                n,
                "proxy settings only apply to WebSocket connections (ws:// or wss://), but all configured URLs use TCP connections (nats://)",
            );
        }
        if urls.iter().any(|u| u.ws && u.tls) && r.tls.is_none() {
            return invalid(
                "proxy",
                n,
                "proxy is configured but a remote URL requires TLS and no TLS configuration is provided. When using proxy with TLS endpoints, ensure TLS is properly configured for the leafnode remote",
            );
        }
    }
    Ok(r)
}

/// A remote's `proxy { url, username, password, timeout }`, checked as
/// nats-server checks it.
fn leaf_proxy(key: &str, n: &Node) -> Result<crate::config::nats::LeafProxy, ConfError> {
    let mut p = crate::config::nats::LeafProxy::default();
    for (k, v) in want_map(key, n)? {
        match k.to_ascii_lowercase().as_str() {
            "url" => p.url = want_str(k, v)?.to_string(),
            "username" => p.username = want_str(k, v)?.to_string(),
            "password" => p.password = want_str(k, v)?.to_string(),
            "timeout" => p.timeout = Some(want_duration(k, v)?),
            other => return invalid(key, v, format!("unknown proxy field {other:?}")),
        }
    }
    let Some((scheme, rest)) = p.url.split_once("://") else {
        return invalid(key, n, format!("invalid proxy URL {:?}", p.url));
    };
    if !matches!(scheme.to_ascii_lowercase().as_str(), "http" | "https") {
        return invalid(
            key,
            n,
            format!("proxy URL scheme must be http or https, got: {scheme}"),
        );
    }
    let host = rest.split('/').next().unwrap_or("");
    let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
    if host.is_empty() {
        return invalid(key, n, "proxy URL must specify a host");
    }
    let has_port = match host.rsplit_once(':') {
        Some((h, port)) if !h.is_empty() && (!h.contains(':') || h.ends_with(']')) => {
            if port.parse::<u16>().is_err() {
                return invalid(key, n, format!("invalid proxy URL {:?}", p.url));
            }
            true
        }
        _ => false,
    };
    p.hostport = if has_port {
        host.to_string()
    } else {
        let port = if scheme.eq_ignore_ascii_case("https") {
            443
        } else {
            80
        };
        format!("{host}:{port}")
    };
    if p.username.is_empty() != p.password.is_empty() {
        return invalid(
            key,
            n,
            "proxy username and password must both be specified or both be empty",
        );
    }
    Ok(p)
}

/// A remote's `deny_imports`/`deny_exports`: a subject or a list of
/// subjects (wildcards allowed), each checked.
fn deny_subjects(key: &str, n: &Node) -> Result<Vec<String>, ConfError> {
    let list = subjects(key, n)?;
    if let Some(bad) = list
        .iter()
        .find(|s| !crate::nats::subject::is_valid_subject(s))
    {
        return invalid(key, n, format!("invalid subject {bad:?}"));
    }
    Ok(list)
}

/// `handshake_first` as nats-server reads it: a boolean (`true`: always,
/// no fallback), `auto` (fall back to INFO first after 50 ms of silence)
/// or a fallback duration.
fn handshake_first(k: &str, v: &Node) -> Result<Option<Duration>, ConfError> {
    match &v.value {
        Value::Bool(b) => Ok(b.then_some(Duration::ZERO)),
        Value::Str(s) => match s.to_ascii_lowercase().as_str() {
            "true" | "on" => Ok(Some(Duration::ZERO)),
            "false" | "off" => Ok(None),
            "auto" | "auto_fallback" => Ok(Some(Duration::from_millis(50))),
            _ => match want_duration(k, v) {
                Ok(d) => Ok(Some(d)),
                Err(_) => invalid(k, v, format!("field {k:?}'s value {s:?} is invalid")),
            },
        },
        _ => invalid(k, v, format!("field {k:?} should be a boolean or a string")),
    }
}

/// A `tls {}` block; `need_cert`: a listener needs `cert_file` and
/// `key_file` (a client-side block may have only `ca_file`).
fn tls_block(
    key: &str,
    n: &Node,
    warnings: &mut Vec<String>,
    need_cert: bool,
) -> Result<(TlsFiles, Option<Duration>), ConfError> {
    tls_block_with(key, n, warnings, need_cert, TlsFirst::No)
}

/// Where a `tls {}` block accepts `handshake_first`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TlsFirst {
    /// The client listener: a boolean, `auto` or a fallback delay.
    Client,
    /// Leaf node listener and remotes: a boolean (both ends must agree).
    Leaf,
    /// Elsewhere it is reported as not supported.
    No,
}

/// [`tls_block`], accepting `handshake_first` where `first` says.
fn tls_block_with(
    key: &str,
    n: &Node,
    warnings: &mut Vec<String>,
    need_cert: bool,
    first: TlsFirst,
) -> Result<(TlsFiles, Option<Duration>), ConfError> {
    let mut files = TlsFiles::default();
    let mut timeout = None;
    let (mut have_cert, mut have_key) = (false, false);
    for (k, v) in want_map(key, n)? {
        match k.to_ascii_lowercase().as_str() {
            "cert_file" => {
                files.cert = PathBuf::from(want_str(k, v)?);
                have_cert = true;
            }
            "key_file" => {
                files.key = PathBuf::from(want_str(k, v)?);
                have_key = true;
            }
            "ca_file" => files.ca = Some(PathBuf::from(want_str(k, v)?)),
            "verify" | "verify_and_map" => files.verify = want_bool(k, v)?,
            "timeout" => timeout = Some(want_duration(k, v)?),
            "min_version" => {
                files.params.tls13_only = crate::tls::parse_min_version(want_str(k, v)?)
                    .or_else(|why| invalid(k, v, why))?;
            }
            "cipher_suites" => {
                let names = subjects(k, v)?;
                for name in &names {
                    if let Some(s) =
                        crate::tls::parse_cipher_suite(name).or_else(|why| invalid(k, v, why))?
                    {
                        files.params.cipher_suites.push(s);
                    }
                }
                if !names.is_empty() && files.params.cipher_suites.is_empty() {
                    // Only TLS 1.3 suites listed: TLS 1.2 has none left. (An
                    // empty list keeps the defaults, as in nats-server.)
                    files.params.tls13_only = true;
                }
            }
            "curve_preferences" => {
                for name in subjects(k, v)? {
                    let g = crate::tls::parse_curve(&name).or_else(|why| invalid(k, v, why))?;
                    files.params.kx_groups.push(g);
                }
            }
            // Behaviour we do not provide: say so, since clients configured
            // for it will fail in ways that are otherwise hard to trace.
            "handshake_first" | "first" | "immediate" if first == TlsFirst::Client => {
                files.handshake_first = handshake_first(k, v)?;
            }
            "handshake_first" | "first" | "immediate" if first == TlsFirst::Leaf => {
                files.handshake_first = match handshake_first(k, v)? {
                    None => None,
                    Some(d) if d.is_zero() => Some(d),
                    Some(_) => {
                        return invalid(
                            k,
                            v,
                            "a leafnode handshake_first is true or false (no fallback delay)",
                        )
                    }
                };
            }
            "insecure"
            | "handshake_first"
            | "first"
            | "immediate"
            | "verify_cert_and_check_known_urls" => warnings.push(format!(
                "{}:{}: tls {k:?} is not supported; ignored",
                v.file, v.line
            )),
            other => return invalid(key, v, format!("unknown tls field {other:?}")),
        }
    }
    if (need_cert || have_cert || have_key) && (!have_cert || !have_key) {
        return invalid(key, n, "tls needs cert_file and key_file");
    }
    Ok((files, timeout))
}

fn apply_authorization(
    key: &str,
    n: &Node,
    auth: &mut AuthConfig,
    timeout: &mut Duration,
) -> Result<(), ConfError> {
    let mut user: Option<String> = None;
    let mut pass: Option<String> = None;
    let mut default_perms: Option<Permissions> = None;
    let mut users_node: Option<&Node> = None;
    for (k, v) in want_map(key, n)? {
        match k.to_ascii_lowercase().as_str() {
            "user" | "username" => user = Some(want_str(k, v)?.to_string()),
            "password" | "pass" => pass = Some(want_str(k, v)?.to_string()),
            "token" => auth.token = Some(want_str(k, v)?.to_string()),
            "timeout" => *timeout = want_duration(k, v)?,
            "permissions" | "default_permissions" => default_perms = Some(permissions(k, v)?),
            "users" => users_node = Some(v),
            other => return invalid(key, v, format!("unknown authorization field {other:?}")),
        }
    }
    if let Some(u) = user {
        if auth.token.is_some() {
            return invalid(key, n, "cannot have a user and a token");
        }
        auth.users.push(User {
            username: u,
            password: pass.unwrap_or_default(),
            permissions: default_perms.clone(),
            account: None,
        });
    } else if pass.is_some() {
        return invalid(key, n, "password without user");
    }
    if let Some(list) = users_node {
        let items = match &list.value {
            Value::Array(items) => items,
            v => {
                return invalid(
                    "users",
                    list,
                    format!("expected an array, found {}", v.kind()),
                )
            }
        };
        if auth.token.is_some() {
            return invalid(key, n, "cannot have a token and a users array");
        }
        for item in items {
            add_user(auth, user_entry(item, default_perms.as_ref(), None)?);
        }
    }
    auth.default_permissions = default_perms;
    Ok(())
}

/// A user of a `users` array.
enum UserEntry {
    Password(User),
    Nkey(NkeyUser),
}

/// One `{user, password | nkey, permissions}` entry of a `users` array;
/// users without their own permissions get `default_perms`.
fn user_entry(
    item: &Node,
    default_perms: Option<&Permissions>,
    account: Option<&str>,
) -> Result<(UserEntry, Vec<String>), ConfError> {
    let mut name: Option<String> = None;
    let mut password: Option<String> = None;
    let mut nkey: Option<String> = None;
    let mut perms: Option<Permissions> = None;
    let mut types: Vec<String> = Vec::new();
    for (k, v) in want_map("users", item)? {
        match k.to_ascii_lowercase().as_str() {
            "user" | "username" => name = Some(want_str(k, v)?.to_string()),
            "password" | "pass" => password = Some(want_str(k, v)?.to_string()),
            "nkey" => nkey = Some(want_str(k, v)?.to_string()),
            "permissions" => perms = Some(permissions(k, v)?),
            "allowed_connection_types" => {
                for t in subjects(k, v)? {
                    let t = t.to_ascii_uppercase();
                    if !crate::config::nats::CONNECTION_TYPES.contains(&t.as_str()) {
                        return invalid(k, v, format!("unknown connection type {t:?}"));
                    }
                    types.push(t);
                }
            }
            // A user's account comes from the `accounts` block it is
            // declared in; naming another one here would be ignored.
            "account" => {
                return invalid(
                    k,
                    v,
                    "declare the user inside accounts { NAME { users [...] } } instead",
                )
            }
            other => return invalid("users", v, format!("unknown user field {other:?}")),
        }
    }
    let perms = perms.or_else(|| default_perms.cloned());
    let account = account.map(str::to_string);
    let entry = match (name, nkey) {
        (_, Some(nkey)) => UserEntry::Nkey(NkeyUser {
            nkey,
            permissions: perms,
            account,
        }),
        (Some(username), None) => UserEntry::Password(User {
            username,
            password: password.unwrap_or_default(),
            permissions: perms,
            account,
        }),
        (None, None) => return invalid("users", item, "a user needs user or nkey"),
    };
    Ok((entry, types))
}

/// Adds a parsed user (and its `allowed_connection_types`) to `auth`.
fn add_user(auth: &mut AuthConfig, (entry, types): (UserEntry, Vec<String>)) {
    let id = match entry {
        UserEntry::Password(u) => {
            let id = u.username.clone();
            auth.users.push(u);
            id
        }
        UserEntry::Nkey(u) => {
            let id = u.nkey.clone();
            auth.nkeys.push(u);
            id
        }
    };
    if !types.is_empty() {
        auth.connection_types.insert(id, types);
    }
}

/// `accounts { NAME { users, exports, imports, default_permissions } }`
/// (or a bare list of names): users go to `auth.users`/`auth.nkeys`
/// tagged with their account, the rest to `auth.accounts`. Keys for
/// account features we do not provide (subject mappings, limits, JWT
/// nkeys, message tracing) are refused by name: each changes what
/// clients of the account may do or see.
fn accounts_block(
    key: &str,
    n: &Node,
    auth: &mut AuthConfig,
    warnings: &mut Vec<String>,
) -> Result<(), ConfError> {
    let entries: Vec<(String, Option<&Node>, &Node)> = match &n.value {
        Value::Array(items) => items
            .iter()
            .map(|i| Ok((want_str(key, i)?.to_string(), None, i)))
            .collect::<Result<_, ConfError>>()?,
        Value::Map(m) => m.iter().map(|(k, v)| (k.clone(), Some(v), v)).collect(),
        v => {
            return invalid(
                key,
                n,
                format!("expected a block or a list of names, found {}", v.kind()),
            )
        }
    };
    for (name, body, at) in entries {
        if name == crate::nats::account::GLOBAL_ACCOUNT {
            return invalid(key, at, format!("{name:?} is a Reserved Account"));
        }
        if auth.accounts.iter().any(|a| a.name == name) {
            return invalid(key, at, format!("Duplicate Account Entry: {name}"));
        }
        let mut acc = crate::config::nats::AccountConfig {
            name: name.clone(),
            ..Default::default()
        };
        let Some(body) = body else {
            auth.accounts.push(acc);
            continue;
        };
        let fields = match &body.value {
            Value::Map(m) => m,
            _ => return invalid(key, body, "Expected map entries for accounts"),
        };
        let mut default_perms: Option<Permissions> = None;
        let mut users: Vec<&Node> = Vec::new();
        for (k, v) in fields {
            match k.to_ascii_lowercase().as_str() {
                "users" => match &v.value {
                    Value::Array(items) => users.extend(items.iter()),
                    other => {
                        return invalid(k, v, format!("expected an array, found {}", other.kind()))
                    }
                },
                "default_permissions" => default_perms = Some(permissions(k, v)?),
                "exports" => {
                    for item in want_array(k, v)? {
                        acc.exports.push(export_entry(item)?);
                    }
                }
                "imports" => {
                    for item in want_array(k, v)? {
                        acc.imports.push(import_entry(item)?);
                    }
                }
                "mappings" | "maps" => acc.mappings.extend(mappings_block(k, v)?),
                "limits" => acc.limits = account_limits(k, v)?,
                "jetstream" => warnings.push(format!(
                    "{}:{}: JetStream is not provided by this server; account {name:?} \"jetstream\" ignored",
                    v.file, v.line
                )),
                other => {
                    return invalid(
                        k,
                        v,
                        format!("account field {other:?} is not supported (users, exports, imports, mappings, limits and default_permissions are)"),
                    )
                }
            }
        }
        for u in users {
            add_user(auth, user_entry(u, default_perms.as_ref(), Some(&name))?);
        }
        auth.accounts.push(acc);
    }
    Ok(())
}

/// `mappings { src: dest | {destination, weight, cluster} | [ … ] }`, as
/// nats-server reads it (the destinations are checked when the accounts
/// are built).
fn mappings_block(key: &str, n: &Node) -> Result<Vec<MappingConfig>, ConfError> {
    let mut out = Vec::new();
    for (src, v) in want_map(key, n)? {
        if !crate::nats::subject::is_valid_subject(src) {
            return invalid(key, v, format!("Subject {src:?} is not a valid subject"));
        }
        let dests = match &v.value {
            Value::Str(s) => vec![MapDest {
                subject: s.clone(),
                weight: 100,
                cluster: None,
            }],
            Value::Array(items) => items
                .iter()
                .map(|i| map_dest(src, i))
                .collect::<Result<_, _>>()?,
            Value::Map(_) => vec![map_dest(src, v)?],
            other => {
                return invalid(
                    src,
                    v,
                    format!("Unknown type {} for mapping destination", other.kind()),
                )
            }
        };
        out.push(MappingConfig {
            src: src.clone(),
            dests,
        });
    }
    Ok(out)
}

/// An account's `limits {}` (nats-server's keys; a negative value is
/// unlimited).
fn account_limits(
    key: &str,
    n: &Node,
) -> Result<crate::config::nats::AccountLimitsConfig, ConfError> {
    let mut l = crate::config::nats::AccountLimitsConfig::default();
    for (k, v) in want_map(key, n)? {
        let value = usize::try_from(want_int(k, v)?).ok();
        match k.to_ascii_lowercase().as_str() {
            "max_connections" | "max_conn" => l.max_connections = value,
            "max_subscriptions" | "max_subs" => l.max_subscriptions = value,
            "max_payload" | "max_pay" => l.max_payload = value,
            "max_leafnodes" | "max_leafs" => l.max_leafnodes = value,
            _ => return invalid(k, v, format!("Unknown field {k:?} parsing account limits")),
        }
    }
    Ok(l)
}

/// One weighted destination `{ destination, weight, cluster }`.
fn map_dest(src: &str, n: &Node) -> Result<MapDest, ConfError> {
    let mut d = MapDest::default();
    let mut weighted = false;
    for (k, v) in want_map(src, n)? {
        match k.to_ascii_lowercase().as_str() {
            "dest" | "destination" => d.subject = want_str(k, v)?.to_string(),
            "weight" => {
                let w = match &v.value {
                    Value::Int(i) => Some(*i),
                    Value::Str(s) => s.trim_end_matches('%').parse::<i64>().ok(),
                    _ => None,
                };
                match w {
                    Some(w @ 0..=100) => d.weight = w as u8,
                    Some(w) => {
                        return invalid(k, v, format!("Invalid weight {w} for mapping destination"))
                    }
                    None => return invalid(k, v, "Invalid weight for mapping destination"),
                }
                weighted = true;
            }
            "cluster" => d.cluster = Some(want_str(k, v)?.to_string()),
            other => {
                return invalid(
                    k,
                    v,
                    format!("Unknown field {other:?} for mapping destination"),
                )
            }
        }
    }
    if !weighted {
        return invalid(
            src,
            n,
            format!("Missing weight for mapping destination {:?}", d.subject),
        );
    }
    Ok(d)
}

fn want_array<'n>(key: &str, n: &'n Node) -> Result<&'n [Node], ConfError> {
    match &n.value {
        Value::Array(items) => Ok(items),
        v => invalid(key, n, format!("expected an array, found {}", v.kind())),
    }
}

/// One entry of `exports`.
fn export_entry(item: &Node) -> Result<crate::config::nats::ExportConfig, ConfError> {
    use crate::config::nats::{ExportConfig, ExportKind, ResponseType};
    let mut kind_subject: Option<(ExportKind, String)> = None;
    let mut accounts = Vec::new();
    let mut response: Option<(ResponseType, &Node)> = None;
    let mut threshold: Option<(Duration, &Node)> = None;
    for (k, v) in want_map("exports", item)? {
        match k.to_ascii_lowercase().as_str() {
            "stream" => kind_subject = Some((ExportKind::Stream, want_str(k, v)?.to_string())),
            "service" => kind_subject = Some((ExportKind::Service, want_str(k, v)?.to_string())),
            "accounts" => {
                for a in want_array(k, v)? {
                    accounts.push(want_str(k, a)?.to_string());
                }
            }
            "response" | "response_type" => {
                let t = want_str(k, v)?;
                let rt = match t.to_ascii_lowercase().as_str() {
                    "single" | "singleton" => ResponseType::Singleton,
                    "stream" => ResponseType::Stream,
                    "chunk" | "chunked" => ResponseType::Chunked,
                    _ => return invalid(k, v, format!("Unknown response type: {t:?}")),
                };
                response = Some((rt, v));
            }
            "threshold" | "response_threshold" | "response_max_time" | "response_time" => {
                threshold = Some((want_duration(k, v)?, v));
            }
            other => {
                return invalid(
                    k,
                    v,
                    format!("export field {other:?} is not supported (stream, service, accounts, response_type and response_threshold are)"),
                )
            }
        }
    }
    let Some((kind, subject)) = kind_subject else {
        return invalid("exports", item, "an export needs stream or service");
    };
    if kind == ExportKind::Stream {
        if let Some((_, at)) = response.or(threshold.map(|(_, n)| (ResponseType::Singleton, n))) {
            return invalid("exports", at, "Detected response directive on non-service");
        }
    }
    Ok(ExportConfig {
        kind,
        subject,
        accounts,
        response_type: response.map(|r| r.0).unwrap_or_default(),
        response_threshold: threshold
            .map(|t| t.0)
            .unwrap_or(crate::config::nats::DEFAULT_RESPONSE_THRESHOLD),
    })
}

/// One entry of `imports`.
fn import_entry(item: &Node) -> Result<crate::config::nats::ImportConfig, ConfError> {
    use crate::config::nats::{ExportKind, ImportConfig};
    let mut src: Option<(ExportKind, String, String)> = None;
    let mut prefix: Option<String> = None;
    let mut to: Option<String> = None;
    for (k, v) in want_map("imports", item)? {
        match k.to_ascii_lowercase().as_str() {
            kind @ ("stream" | "service") => {
                let mut account = None;
                let mut subject = None;
                for (ik, iv) in want_map(k, v)? {
                    match ik.to_ascii_lowercase().as_str() {
                        "account" => account = Some(want_str(ik, iv)?.to_string()),
                        "subject" => subject = Some(want_str(ik, iv)?.to_string()),
                        other => return invalid(k, iv, format!("unknown import field {other:?}")),
                    }
                }
                let (Some(account), Some(subject)) = (account, subject) else {
                    return invalid(k, v, "Expect an account name and a subject");
                };
                let kind = if kind == "stream" {
                    ExportKind::Stream
                } else {
                    ExportKind::Service
                };
                src = Some((kind, account, subject));
            }
            "prefix" => prefix = Some(want_str(k, v)?.to_string()),
            "to" | "local_subject" => to = Some(want_str(k, v)?.to_string()),
            // Latency-tracking headers: we do not track latency.
            "share" => {
                if want_bool(k, v)? {
                    return invalid(
                        k,
                        v,
                        "service import sharing (latency tracking) is not supported",
                    );
                }
            }
            other => {
                return invalid(
                    k,
                    v,
                    format!(
                    "import field {other:?} is not supported (stream, service, prefix and to are)"
                ),
                )
            }
        }
    }
    let Some((kind, account, subject)) = src else {
        return invalid("imports", item, "an import needs stream or service");
    };
    if kind == ExportKind::Stream && prefix.is_some() && to.is_some() {
        return invalid(
            "imports",
            item,
            "Stream import can not have a 'prefix' and a 'to' property",
        );
    }
    if kind == ExportKind::Service && prefix.is_some() {
        return invalid("prefix", item, "a service import has no prefix (use to)");
    }
    Ok(ImportConfig {
        kind,
        account,
        subject,
        prefix,
        to,
    })
}

/// Checks across blocks once the whole file is read (their order in the
/// file is free): users unique across `authorization` and every account,
/// no single user or token next to account users, `no_auth_user` known,
/// and the accounts' imports and exports wired (nats-server's texts).
fn check_accounts(
    entries: &[(String, Node)],
    auth: &AuthConfig,
    single_user: bool,
) -> Result<(), ConfError> {
    let Some((akey, anode)) = entries
        .iter()
        .rev()
        .find(|(k, _)| k.eq_ignore_ascii_case("accounts"))
    else {
        return Ok(());
    };
    let account_users = auth.users.iter().any(|u| u.account.is_some())
        || auth.nkeys.iter().any(|u| u.account.is_some());
    if account_users && single_user {
        return invalid(akey, anode, "Can not have a single user/pass and accounts");
    }
    if account_users && auth.token.is_some() {
        return invalid(akey, anode, "Can not have a token and accounts");
    }
    let mut seen = std::collections::HashSet::new();
    for k in &auth.nkeys {
        if !seen.insert(k.nkey.as_str()) {
            return invalid(akey, anode, format!("Duplicate nkey {:?} detected", k.nkey));
        }
    }
    for u in &auth.users {
        if !seen.insert(u.username.as_str()) {
            return invalid(
                akey,
                anode,
                format!("Duplicate user {:?} detected", u.username),
            );
        }
    }
    crate::nats::account::check(&auth.accounts).or_else(|e| invalid(akey, anode, e.to_string()))
}

/// `permissions { publish: X, subscribe: Y }` where X/Y is a subject, a
/// list (= allow) or `{ allow: …, deny: … }`.
fn permissions(key: &str, n: &Node) -> Result<Permissions, ConfError> {
    let mut p = Permissions::default();
    for (k, v) in want_map(key, n)? {
        match k.to_ascii_lowercase().as_str() {
            "publish" | "pub" | "import" => p.publish = rules(k, v)?,
            "subscribe" | "sub" | "export" => p.subscribe = rules(k, v)?,
            "allow_responses" | "publish_allow_responses" => p.responses = responses(k, v)?,
            other => return invalid(key, v, format!("unknown permissions field {other:?}")),
        }
    }
    Ok(p)
}

/// `allow_responses: true|false` or `{ max: N, expires: "1m" }` (0 = the
/// default, negative = no limit), as nats-server reads it.
fn responses(key: &str, n: &Node) -> Result<Option<ResponsePermission>, ConfError> {
    if let Value::Bool(b) = n.value {
        return Ok(b.then(ResponsePermission::default));
    }
    let Value::Map(m) = &n.value else {
        return invalid(
            key,
            n,
            "error parsing response permissions, expected a boolean or a map".to_string(),
        );
    };
    let mut max = 0i64;
    let mut expires = 0i64;
    for (k, v) in m {
        match k.to_ascii_lowercase().as_str() {
            "max" | "max_msgs" | "max_messages" | "max_responses" => match &v.value {
                Value::Int(i) => max = *i,
                _ => return invalid(k, v, "expected an integer".to_string()),
            },
            "expires" | "expiration" | "ttl" => {
                let Value::Str(s) = &v.value else {
                    return invalid(k, v, "error parsing expires, not a duration string");
                };
                expires = match s.strip_prefix('-') {
                    Some(_) => -1,
                    None => match parse_go_duration(s) {
                        Some(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
                        None => {
                            return invalid(k, v, format!("error parsing expires: {s:?}"));
                        }
                    },
                };
            }
            other => return invalid(k, v, format!("Unknown field {other:?} parsing permissions")),
        }
    }
    Ok(Some(ResponsePermission::from_limits(max, expires)))
}

fn subjects(key: &str, n: &Node) -> Result<Vec<String>, ConfError> {
    match &n.value {
        Value::Array(items) => items
            .iter()
            .map(|i| want_str(key, i).map(str::to_string))
            .collect(),
        _ => Ok(vec![want_str(key, n)?.to_string()]),
    }
}

fn rules(key: &str, n: &Node) -> Result<PermissionRules, ConfError> {
    match &n.value {
        Value::Map(m) => {
            let mut r = PermissionRules::default();
            for (k, v) in m {
                match k.to_ascii_lowercase().as_str() {
                    "allow" => r.allow = subjects(k, v)?,
                    "deny" => r.deny = subjects(k, v)?,
                    other => {
                        return invalid(key, v, format!("expected allow or deny, found {other:?}"))
                    }
                }
            }
            Ok(r)
        }
        _ => Ok(PermissionRules {
            allow: subjects(key, n)?,
            deny: Vec::new(),
        }),
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn cluster_block_maps_every_field() {
        let text = r#"
            cluster {
              name: "c1"
              listen: "127.0.0.1:6333"
              routes: ["nats-route://a:6222", "nats://u:p@b:6222"]
              authorization { user: ruser, password: "s3cret", timeout: 3 }
              advertise: "10.0.0.1:6333"
              no_advertise: true
              connect_retries: 5
              pool_size: -1
              compression: off
            }
        "#;
        let c = from_str(text, Path::new("c.conf")).unwrap();
        let cl = c.options.cluster.expect("cluster set");
        assert_eq!(cl.name.as_deref(), Some("c1"));
        assert_eq!((cl.host.as_str(), cl.port), ("127.0.0.1", 6333));
        assert_eq!(cl.routes.len(), 2);
        let auth = cl.auth.expect("auth");
        assert_eq!(
            (auth.user.as_str(), auth.password.as_str()),
            ("ruser", "s3cret")
        );
        assert_eq!(cl.auth_timeout, Duration::from_secs(3));
        assert_eq!(cl.advertise.as_deref(), Some("10.0.0.1:6333"));
        assert!(cl.no_advertise);
        assert_eq!(cl.connect_retries, 5);
        assert_eq!(cl.pool_size, 0);
        let c = from_str("cluster { pool_size: 3 }", Path::new("c.conf")).unwrap();
        assert_eq!(c.options.cluster.unwrap().pool_size, 3);
        let c = from_str(
            "cluster { pool_size: 3, accounts: [A, B] }",
            Path::new("c.conf"),
        )
        .unwrap();
        assert_eq!(c.options.cluster.unwrap().pinned_accounts, ["A", "B"]);
        // host/port spelled apart.
        let c = from_str("cluster { host: 0.0.0.0, port: -1 }", Path::new("c.conf")).unwrap();
        let cl = c.options.cluster.unwrap();
        assert_eq!((cl.host.as_str(), cl.port), ("0.0.0.0", 0));
    }

    #[test]
    fn route_compression_modes() {
        let ms = Duration::from_millis;
        let mode = |v: &str| {
            from_str(
                &format!("cluster {{ compression: {v} }}"),
                Path::new("c.conf"),
            )
            .unwrap()
            .options
            .cluster
            .unwrap()
            .compression
        };
        assert_eq!(mode("off"), S2Compression::Off);
        assert_eq!(mode("false"), S2Compression::Off);
        assert_eq!(mode("accept"), S2Compression::Accept);
        assert_eq!(mode("true"), S2Compression::Fast);
        assert_eq!(mode("on"), S2Compression::Fast);
        assert_eq!(mode("s2_better"), S2Compression::Better);
        assert_eq!(mode("best"), S2Compression::Best);
        assert_eq!(
            mode("s2_auto"),
            S2Compression::Auto(vec![ms(10), ms(50), ms(100)])
        );
        assert_eq!(
            mode("{ mode: s2_auto, rtt_thresholds: [\"5ms\", \"20ms\", 0] }"),
            S2Compression::Auto(vec![ms(5), ms(20)])
        );
        assert_eq!(mode("{ mode: s2_best }"), S2Compression::Best);
    }

    #[test]
    fn cluster_features_we_lack_are_refused_by_name() {
        for (text, needle) in [
            ("cluster { pool_size: 33 }", "pool_size"),
            ("cluster { accounts: [A] }", "pool_size"),
            (
                "cluster { pool_size: 2, accounts: [A, A] }",
                "duplicate account",
            ),
            ("cluster { pool_size: -2 }", "pool_size"),
            ("cluster { compression: zstd }", "compression mode"),
            (
                "cluster { compression: { mode: s2_fast, rtt_thresholds: [10ms] } }",
                "s2_auto",
            ),
            (
                "cluster { compression: { mode: s2_auto, rtt_thresholds: [50ms, 10ms] } }",
                "ascending",
            ),
            ("cluster { compression: { level: 3 } }", "level"),
            ("cluster { pinned_accounts: [A] }", "pinned_accounts"),
            ("cluster { routes: [\"not a url\"] }", "routes"),
            ("cluster { name: \"has space\" }", "name"),
            ("cluster { authorization { token: x } }", "token"),
        ] {
            let e = from_str(text, Path::new("c.conf")).unwrap_err().to_string();
            assert!(e.contains(needle), "{text}: {e}");
        }
    }

    use super::*;

    fn conf(text: &str) -> NatsConf {
        from_str(text, Path::new("test.conf")).unwrap()
    }

    fn get<'a>(m: &'a [(String, Node)], k: &str) -> &'a Value {
        &m.iter().rev().find(|(key, _)| key == k).unwrap().1.value
    }

    #[test]
    fn separators_comments_and_types() {
        let m = parse_str(
            "# comment\na: 1\nb = \"two\" // trailing\nc three\nd: 'raw\\n'\n e: true; f: off, g: -5\nh: 1.5\ni: \"esc\\t\\u0041\"\n",
            Path::new("x.conf"),
        )
        .unwrap();
        assert_eq!(get(&m, "a"), &Value::Int(1));
        assert_eq!(get(&m, "b"), &Value::Str("two".into()));
        assert_eq!(get(&m, "c"), &Value::Str("three".into()));
        assert_eq!(get(&m, "d"), &Value::Str("raw\\n".into()));
        assert_eq!(get(&m, "e"), &Value::Bool(true));
        assert_eq!(get(&m, "f"), &Value::Bool(false));
        assert_eq!(get(&m, "g"), &Value::Int(-5));
        assert_eq!(get(&m, "h"), &Value::Float(1.5));
        assert_eq!(get(&m, "i"), &Value::Str("esc\tA".into()));
    }

    #[test]
    fn sizes_follow_nats() {
        let m = parse_str(
            "a: 128KB\nb: 2K\nc: 64MiB\nd: 10GiB\ne: 1M\nf: 3mb\ng: 1G\nh: 2Ki",
            Path::new("x"),
        )
        .unwrap();
        assert_eq!(get(&m, "a"), &Value::Int(128 * 1024));
        assert_eq!(get(&m, "b"), &Value::Int(2000));
        assert_eq!(get(&m, "c"), &Value::Int(64 * 1024 * 1024));
        assert_eq!(get(&m, "d"), &Value::Int(10 * 1024 * 1024 * 1024));
        assert_eq!(get(&m, "e"), &Value::Int(1_000_000));
        assert_eq!(get(&m, "f"), &Value::Int(3 * 1024 * 1024));
        assert_eq!(get(&m, "g"), &Value::Int(1_000_000_000));
        assert_eq!(get(&m, "h"), &Value::Int(2048));
    }

    #[test]
    fn blocks_arrays_nested() {
        let m = parse_str(
            "outer {\n  inner: { x: 1, y: [1, 2,\n 3] }\n  list = [\n {a: 1}\n {a: 2}\n ]\n}\n",
            Path::new("x"),
        )
        .unwrap();
        let Value::Map(outer) = get(&m, "outer") else {
            panic!("outer is a map")
        };
        let Value::Map(inner) = get(outer, "inner") else {
            panic!("inner is a map")
        };
        let Value::Array(y) = get(inner, "y") else {
            panic!("y is an array")
        };
        assert_eq!(y.len(), 3);
        let Value::Array(list) = get(outer, "list") else {
            panic!("list is an array")
        };
        assert_eq!(list.len(), 2);
    }

    #[test]
    fn async_nats_test_configs() {
        let c = conf("jetstream { strict: true, max_mem_store: 64MiB, max_file_store: 10GiB }");
        assert!(c.warnings.iter().any(|w| w.contains("JetStream")));

        let c = conf("max_payload = 128KB");
        assert_eq!(c.options.max_payload, 131072);

        let c = conf("authorization { token: \"s3cr3t\", timeout: \"2s\" }");
        assert_eq!(c.options.auth.token.as_deref(), Some("s3cr3t"));
        assert_eq!(c.options.auth_timeout, Duration::from_secs(2));

        let c = conf("authorization { user: derek, password: s3cr3t }");
        assert_eq!(c.options.auth.users.len(), 1);
        assert_eq!(c.options.auth.users[0].username, "derek");
        assert_eq!(c.options.auth.users[0].password, "s3cr3t");

        let c = conf(
            "authorization: {\n  users: [\n    { nkey: UAXX }\n    { nkey: \"UBYY\" }\n  ]\n}\n",
        );
        assert_eq!(c.options.auth.nkeys.len(), 2);
        assert_eq!(c.options.auth.nkeys[1].nkey, "UBYY");

        let c = conf(
            "listen: localhost:4222\n\ntls {\n  cert_file: \"./tests/configs/certs/server-cert.pem\"\n  key_file: \"./tests/configs/certs/server-key.pem\"\n  ca_file: ./ca.pem\n  verify: true\n  timeout: 2\n}\n",
        );
        assert_eq!(c.options.host, "localhost");
        assert_eq!(c.options.port, 4222);
        let tls = c.options.tls.unwrap();
        assert_eq!(
            tls.cert,
            PathBuf::from("./tests/configs/certs/server-cert.pem")
        );
        assert_eq!(tls.ca, Some(PathBuf::from("./ca.pem")));
        assert!(tls.verify);
        assert_eq!(c.tls_timeout, Some(Duration::from_secs(2)));
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        let c = conf(
            "authorization { users: [ {user: w, password: p, allowed_connection_types: [websocket]}, {user: s, password: p, allowed_connection_types: \"STANDARD\"}, {user: x, password: p} ] }\n",
        );
        let t = &c.options.auth.connection_types;
        assert_eq!(t["w"], ["WEBSOCKET"]);
        assert_eq!(t["s"], ["STANDARD"]);
        assert!(!t.contains_key("x"));
        let e = from_str(
            "authorization { users: [ {user: w, password: p, allowed_connection_types: [PIGEON]} ] }\n",
            Path::new("t.conf"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("allowed_connection_types") && e.contains("PIGEON"),
            "{e}"
        );
        // handshake_first as nats-server reads it, on the client listener.
        for (v, want) in [
            ("true", Some(Duration::ZERO)),
            ("false", None),
            ("\"auto\"", Some(Duration::from_millis(50))),
            ("\"300ms\"", Some(Duration::from_millis(300))),
        ] {
            let c = conf(&format!(
                "tls {{ cert_file: a, key_file: b, handshake_first: {v} }}\n"
            ));
            assert_eq!(c.options.tls.unwrap().handshake_first, want, "{v}");
            assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        }
        let e = from_str(
            "tls { cert_file: a, key_file: b, handshake_first: \"soon\" }\n",
            Path::new("t.conf"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("handshake_first") && e.contains("soon"), "{e}");
        // Elsewhere it is not provided, and said so.
        let c = conf(
            "cluster { port: 6222, tls { cert_file: a, key_file: b, handshake_first: true } }\n",
        );
        assert!(
            c.warnings.iter().any(|w| w.contains("handshake_first")),
            "{:?}",
            c.warnings
        );
        // The choices nats-server takes, in its names.
        let c = conf(
            "tls { cert_file: a, key_file: b, min_version: \"1.3\", curve_preferences: [CurveP384, X25519] }\ncluster { tls { cert_file: a, key_file: b, ca_file: c, cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305] } }\n",
        );
        let p = c.options.tls.unwrap().params;
        assert!(p.tls13_only);
        assert_eq!(p.kx_groups, ["secp384r1", "X25519"]);
        let p = c.options.cluster.unwrap().tls.unwrap().params;
        assert!(!p.tls13_only);
        assert_eq!(
            p.cipher_suites,
            [
                "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
                "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256"
            ]
        );
        let only13 =
            conf("tls { cert_file: a, key_file: b, cipher_suites: [TLS_AES_128_GCM_SHA256] }\n");
        assert!(only13.options.tls.unwrap().params.tls13_only);
        let empty = conf("tls { cert_file: a, key_file: b, cipher_suites: [] }\n");
        assert_eq!(empty.options.tls.unwrap().params, Default::default());
        for (text, want) in [
            ("min_version: \"1.0\"", "min_version"),
            (
                "cipher_suites: [TLS_RSA_WITH_RC4_128_SHA]",
                "TLS_RSA_WITH_RC4_128_SHA",
            ),
            ("curve_preferences: [CurveP521]", "CurveP521"),
        ] {
            let text = format!("tls {{ cert_file: a, key_file: b, {text} }}\n");
            let e = from_str(&text, Path::new("t.conf"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{text}: {e}");
        }
    }

    #[test]
    fn options_mapping() {
        let c = conf(
            "host: 127.0.0.1\nport: -1\nhttp: 8222\nserver_name: n1\nmax_pending: 1MB\nmax_control_line: 2KB\nmax_connections: 10\nping_interval: 1m\nping_max: 3\nwrite_deadline: \"3s\"\nlame_duck_duration: \"30s\"\nlame_duck_grace_period: 1s\ndebug: true\ntrace: false\nlogfile: /tmp/l.log\npid_file: '/tmp/x.pid'\nports_file_dir: /tmp\nmystery: 1\n",
        );
        let o = &c.options;
        assert_eq!(o.host, "127.0.0.1");
        assert_eq!(o.port, 0);
        assert_eq!(o.http, Some(("127.0.0.1".into(), 8222)));
        assert!(!c.http_host_explicit);
        assert_eq!(o.server_name.as_deref(), Some("n1"));
        assert_eq!(o.max_pending, 1 << 20);
        assert_eq!(o.max_control_line, 2048);
        assert_eq!(o.max_connections, 10);
        assert_eq!(o.ping_interval, Duration::from_secs(60));
        assert_eq!(o.ping_max, 3);
        assert_eq!(o.write_deadline, Duration::from_secs(3));
        assert_eq!(o.lame_duck_duration, Duration::from_secs(30));
        assert_eq!(o.lame_duck_grace_period, Duration::from_secs(1));
        assert!(o.debug && !o.trace);
        assert_eq!(c.log_file, Some(PathBuf::from("/tmp/l.log")));
        assert_eq!(c.pid_file, Some(PathBuf::from("/tmp/x.pid")));
        assert_eq!(c.ports_file_dir, Some(PathBuf::from("/tmp")));
        assert!(c.warnings.iter().any(|w| w.contains("mystery")));

        let c = conf("http: 0.0.0.0:-1\nmonitor_port: 9000\nping_interval: 30\n");
        assert_eq!(c.options.http, Some(("0.0.0.0".into(), 9000)));
        assert!(c.http_host_explicit);
        assert_eq!(c.options.ping_interval, Duration::from_secs(30));
        let c = conf("max_pings_out: 5\nlisten: \":4333\"\n");
        assert_eq!(c.options.ping_max, 5);
        assert_eq!(c.options.port, 4333);
        assert_eq!(c.options.host, "0.0.0.0");
    }

    #[test]
    fn allow_responses_as_nats_server_reads_it() {
        let perms = |text: &str| {
            let c = conf(&format!(
                "authorization {{ users = [ {{ user: u, password: p, permissions: {{ {text} }} }} ] }}"
            ));
            c.options.auth.users[0].permissions.clone().unwrap()
        };
        let p = perms("allow_responses: true");
        assert_eq!(p.responses, Some(ResponsePermission::default()));
        assert_eq!(p.responses.unwrap().expires, Some(Duration::from_secs(120)));
        assert_eq!(perms("allow_responses: false").responses, None);
        let p = perms("publish: x, allow_responses: { max: 5, expires: \"1m\" }");
        assert_eq!(
            p.responses,
            Some(ResponsePermission {
                max_msgs: Some(5),
                expires: Some(Duration::from_secs(60))
            })
        );
        let p = perms("allow_responses: { max: -1, ttl: \"-1s\" }");
        assert_eq!(
            p.responses,
            Some(ResponsePermission {
                max_msgs: None,
                expires: None
            })
        );
        let p = perms("allow_responses: { max: 0 }");
        assert_eq!(p.responses, Some(ResponsePermission::default()));
        for (bad, want) in [
            ("allow_responses: 3", "expected a boolean or a map"),
            ("allow_responses: { expires: 5 }", "not a duration string"),
            (
                "allow_responses: { expires: \"soon\" }",
                "error parsing expires",
            ),
            ("allow_responses: { often: 1 }", "Unknown field \"often\""),
        ] {
            let text = format!(
                "authorization {{ users = [ {{ user: u, password: p, permissions: {{ {bad} }} }} ] }}"
            );
            let e = from_str(&text, Path::new("r.conf"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{bad}: {e}");
        }
    }

    #[test]
    fn authorization_users_and_permissions() {
        let c = conf(
            r#"
authorization {
  permissions { publish: "public.>" }
  users = [
    { user: alice, password: "$2a$11$abcdefghijklmnopqrstuuMgEfbc2b5M2u4rRy3IS4hj5GgtjH8jK"
      permissions: { publish: { allow: ["a.>", "b"], deny: "a.secret" }, subscribe: ["x.*", "y"] } }
    { user: bob, password: pw }
    { nkey: UABC, permissions { subscribe { deny: [ "z.>" ] } } }
  ]
}
no_auth_user: bob
"#,
        );
        let a = &c.options.auth;
        assert_eq!(a.users.len(), 2);
        let alice = &a.users[0];
        assert!(alice.password.starts_with("$2a$11$"));
        let p = alice.permissions.as_ref().unwrap();
        assert_eq!(p.publish.allow, vec!["a.>", "b"]);
        assert_eq!(p.publish.deny, vec!["a.secret"]);
        assert_eq!(p.subscribe.allow, vec!["x.*", "y"]);
        // bob inherits the default permissions.
        let bob = &a.users[1].permissions.as_ref().unwrap();
        assert_eq!(bob.publish.allow, vec!["public.>"]);
        assert_eq!(a.nkeys[0].nkey, "UABC");
        assert_eq!(
            a.nkeys[0].permissions.as_ref().unwrap().subscribe.deny,
            vec!["z.>"]
        );
        assert_eq!(a.no_auth_user.as_deref(), Some("bob"));
        // The mapped config builds a working authenticator.
        let auth = crate::nats::auth::Authenticator::new(&AuthConfig {
            nkeys: Vec::new(),
            ..a.clone()
        })
        .unwrap();
        assert!(auth.required());
    }

    #[test]
    fn variables_from_file_and_env() {
        // A name no other test reads, so setting it cannot race.
        std::env::set_var("LIFTBRIDGE_CONF_TEST_PORT", "4999");
        let c = conf(
            "TOKEN: \"abc\"\nauthorization { token: $TOKEN }\nport: $LIFTBRIDGE_CONF_TEST_PORT\n",
        );
        assert_eq!(c.options.auth.token.as_deref(), Some("abc"));
        assert_eq!(c.options.port, 4999);
        // Block scoping: a variable defined in an enclosing block.
        let m = parse_str("a: 1\nb { c: $a }", Path::new("x")).unwrap();
        let Value::Map(b) = get(&m, "b") else {
            panic!("b is a map")
        };
        assert_eq!(get(b, "c"), &Value::Int(1));
        let e = from_str("port: $NOPE_NOT_DEFINED_ANYWHERE_42", Path::new("v.conf")).unwrap_err();
        assert!(e.to_string().contains("v.conf:1"), "{e}");
        assert!(
            e.to_string().contains("NOPE_NOT_DEFINED_ANYWHERE_42"),
            "{e}"
        );
    }

    #[test]
    fn includes_relative_to_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(
            dir.path().join("sub/auth.conf"),
            "authorization { user: u, password: p }\ninclude 'more.conf'\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("sub/more.conf"), "max_payload: 2KB\n").unwrap();
        std::fs::write(
            dir.path().join("main.conf"),
            "port: 4000\ninclude ./sub/auth.conf\n",
        )
        .unwrap();
        let c = load_file(&dir.path().join("main.conf")).unwrap();
        assert_eq!(c.options.port, 4000);
        assert_eq!(c.options.auth.users[0].username, "u");
        assert_eq!(c.options.max_payload, 2048);

        std::fs::write(dir.path().join("loop.conf"), "include loop.conf\n").unwrap();
        assert!(load_file(&dir.path().join("loop.conf")).is_err());
        std::fs::write(dir.path().join("missing.conf"), "include nothere.conf\n").unwrap();
        assert!(matches!(
            load_file(&dir.path().join("missing.conf")),
            Err(ConfError::Io { .. })
        ));
    }

    /// nats-server's lexer skips newlines between a key and its separator
    /// or value (nats.py's own `ws.conf` puts `websocket` and its `{` on
    /// separate lines); after a `:` or `=` a newline is still an error.
    #[test]
    fn a_value_may_start_on_the_line_after_its_key() {
        let c = conf("port\n4229\nwebsocket\n{\n  port: 8080\n  no_tls: true\n}\nauthorization\n\n  { timeout: 2 }\n");
        assert_eq!(c.options.port, 4229);
        let ws = c.options.websocket.expect("websocket block");
        assert_eq!(ws.port, 8080);
        for (text, line) in [("port:\n4229\n", "t.conf:1"), ("a {\n  b\n}\n", "t.conf:2")] {
            let e = from_str(text, Path::new("t.conf")).unwrap_err().to_string();
            assert!(
                e.contains("missing value") && e.contains(line),
                "{text:?}: {e}"
            );
        }
    }

    #[test]
    fn errors_carry_line_numbers() {
        let cases = [
            ("port: 1\nmax_payload: \"big\"\n", "t.conf:2"),
            ("a {\n b: 1\n", "missing '}'"),
            ("a: [1, 2\n", "missing ']'"),
            ("a: \"open\n", "unterminated"),
            ("port: 1\n\nport: 70000\n", "t.conf:3"),
            ("x: 1 2\n", "t.conf:1"),
            ("tls { cert_file: a }\n", "key_file"),
            ("ping_interval: \"soon\"\n", "duration"),
            ("}\n", "unexpected '}'"),
            ("key:\n", "missing value"),
            ("a: 99999999999999999999\n", "out of range"),
        ];
        for (text, want) in cases {
            let e = from_str(text, Path::new("t.conf")).unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn accounts_block_maps_users_exports_and_imports() {
        use crate::config::nats::{ExportKind, ResponseType};
        let c = conf(
            "accounts {\n  A {\n    users: [ {user: a, password: x}, {nkey: UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4} ]\n    default_permissions: { publish: \"a.>\" }\n    exports: [ {stream: \"s.>\", accounts: [B]}, {service: \"q.*\", response_type: Chunked, response_threshold: \"5s\"} ]\n  }\n  B {\n    users: [ {user: b, password: y, permissions: { publish: \"b.>\" }} ]\n    imports: [ {stream: {account: A, subject: \"s.x\"}, prefix: p}, {service: {account: A, subject: \"q.1\"}, to: \"local\"} ]\n  }\n}\nauthorization { users: [ {user: g, password: z} ] }\nno_auth_user: b\n",
        );
        let a = &c.options.auth;
        let acct = |u: &str| {
            a.users
                .iter()
                .find(|x| x.username == u)
                .and_then(|x| x.account.clone())
        };
        assert_eq!(acct("a").as_deref(), Some("A"));
        assert_eq!(acct("b").as_deref(), Some("B"));
        assert_eq!(acct("g"), None, "authorization users stay in $G");
        assert_eq!(a.nkeys[0].account.as_deref(), Some("A"));
        // The account's default permissions apply to users without their own.
        let perms = |u: &str| {
            a.users
                .iter()
                .find(|x| x.username == u)
                .and_then(|x| x.permissions.clone())
                .map(|p| p.publish.allow)
        };
        assert_eq!(perms("a"), Some(vec!["a.>".to_string()]));
        assert_eq!(perms("b"), Some(vec!["b.>".to_string()]));
        assert_eq!(a.accounts.len(), 2);
        let ex = &a.accounts[0].exports;
        assert_eq!(
            (ex[0].kind, ex[0].accounts.clone()),
            (ExportKind::Stream, vec!["B".to_string()])
        );
        assert_eq!(ex[1].response_type, ResponseType::Chunked);
        assert_eq!(ex[1].response_threshold, Duration::from_secs(5));
        let im = &a.accounts[1].imports;
        assert_eq!(im[0].prefix.as_deref(), Some("p"));
        assert_eq!(
            (im[1].kind, im[1].to.as_deref()),
            (ExportKind::Service, Some("local"))
        );
        // A bare list of names declares accounts without users.
        let c = conf("accounts: [X, Y]\n");
        assert_eq!(c.options.auth.accounts.len(), 2);
    }

    #[test]
    fn account_features_we_do_not_provide_are_refused_by_name() {
        for (text, want) in [
            ("accounts { A { limits: { max_conns: 1 } } }", "Unknown field \"max_conns\" parsing account limits"),
            ("accounts { A { limits: { max_conn: many } } }", "max_conn"),
            ("accounts { A { exports: [ {stream: x, response_type: stream} ] } }", "Detected response directive on non-service"),
            ("accounts { A { exports: [ {service: x, response_type: lots} ] } }", "Unknown response type: \"lots\""),
            ("accounts { A { imports: [ {stream: {account: B}} ] } }", "Expect an account name and a subject"),
            ("accounts { A { exports: [ {stream: \">\"} ] }\n B { imports: [ {stream: {account: A, subject: x}, prefix: p, to: y} ] } }", "Stream import can not have a 'prefix' and a 'to' property"),
            ("authorization { user: u, password: p }\naccounts { A { users: [ {user: a, password: b} ] } }", "Can not have a single user/pass and accounts"),
            ("authorization { token: t }\naccounts { A { users: [ {user: a, password: b} ] } }", "Can not have a token and accounts"),
            ("accounts { A { users: [ {user: a, password: b, account: B} ] } }", "accounts { NAME"),
        ] {
            let e = from_str(text, Path::new("t.conf")).unwrap_err().to_string();
            assert!(e.contains(want), "{text}: {e}");
        }
    }

    #[test]
    fn auth_defining_blocks_we_cannot_honour_are_errors() {
        for (text, want) in [
            ("operator: eyJhbGciOi.x.y\n", "invalid operator JWT"),
            ("resolver: MEMORY\n", "needs trusted operators"),
            ("resolver_tls: {}\n", "not supported"),
        ] {
            let e = from_str(text, Path::new("t.conf")).unwrap_err().to_string();
            assert!(e.contains(want), "{text}: {e}");
        }
        let c = conf("accounts { A { jetstream: enabled } }\nmqtt { port: 1883 }\n");
        assert_eq!(c.warnings.len(), 2, "{:?}", c.warnings);
    }

    #[test]
    fn websocket_block_maps_every_field() {
        let c = conf(
            "websocket {\n  listen: \"127.0.0.1:-1\"\n  no_tls: true\n  compression: true\n  same_origin: true\n  allowed_origins: [\"https://app.example.com\", \"http://Other:8080/x\"]\n  handshake_timeout: \"3s\"\n  advertise: \"ws.example.com:443\"\n}\n",
        );
        let w = c.options.websocket.expect("websocket set");
        assert_eq!((w.host.as_str(), w.port), ("127.0.0.1", 0));
        assert!(w.tls.is_none() && w.compression && w.same_origin);
        assert_eq!(w.handshake_timeout, Duration::from_secs(3));
        assert_eq!(w.advertise.as_deref(), Some("ws.example.com:443"));
        let o: Vec<_> = w
            .allowed_origins
            .iter()
            .map(|o| (o.scheme.as_str(), o.host.as_str(), o.port))
            .collect();
        assert_eq!(
            o,
            [("https", "app.example.com", 443), ("http", "other", 8080)]
        );
        let w = conf("ws { port: 8080, tls { cert_file: a, key_file: b }, compress: false }\n")
            .options
            .websocket
            .unwrap();
        assert_eq!(w.port, 8080);
        assert_eq!(w.tls.unwrap().cert, PathBuf::from("a"));
        let w = conf(
            "websocket { port: 1, no_tls: true, user_cookie: u, pass_cookie: p, token_cookie: t,\n headers { X-B: \"2\", X-A: \"one two\" }, ping_interval: \"30s\" }\n",
        )
        .options
        .websocket
        .unwrap();
        assert_eq!(
            (
                w.cookies.user.as_str(),
                w.cookies.pass.as_str(),
                w.cookies.token.as_str()
            ),
            ("u", "p", "t")
        );
        assert!(w.cookies.jwt.is_empty());
        assert_eq!(
            w.headers,
            [("X-A".into(), "one two".into()), ("X-B".into(), "2".into())]
        );
        assert_eq!(w.ping_interval, Some(Duration::from_secs(30)));
        // No port: nothing is served (nats-server has no default port).
        let c = conf("websocket { no_tls: true }\n");
        assert!(c.options.websocket.is_none() && c.warnings.len() == 1);
    }

    #[test]
    fn websocket_refusals_name_the_key() {
        for (text, want) in [
            ("websocket { port: 1 }", "requires TLS"),
            ("websocket { port: 1, no_tls: true, tls { cert_file: a, key_file: b } }", "both"),
            ("websocket { port: 1, no_tls: true, authorization { users: [] } }", "unknown websocket authorization field \"users\""),
            ("websocket { port: 1, no_tls: true, no_auth_user: u }", "no_auth_user: \"u\" not present"),
            ("authorization { users: [ {user: a, password: b}, {user: c, password: d} ] }\nwebsocket { port: 1, no_tls: true, authorization { token: t } }", "websocket authentication token not compatible with presence of users/nkeys"),
            ("websocket { port: 1, no_tls: true, authorization { user: u, token: t } }", "cannot have a user and a token"),
            ("websocket { port: 1, no_tls: true, jwt_cookie: j }", "trusted operators or trusted keys configuration is required for JWT authentication via cookie \"j\""),
            ("websocket { port: 1, no_tls: true, headers { Upgrade: x } }", "websocket: invalid header \"Upgrade\" not allowed"),
            ("websocket { port: 1, no_tls: true, headers { Sec-WebSocket-Protocol: x } }", "\"Sec-WebSocket-\" prefix not allowed"),
            ("websocket { port: 1, no_tls: true, headers { X-A: 1 } }", "error parsing header key X-A"),
            ("websocket { port: 1, no_tls: true, ping_interval: often }", "ping_interval"),
            ("websocket { port: 1, no_tls: true, bogus: 1 }", "bogus"),
            ("websocket { port: 99999, no_tls: true }", "not a port"),
            (
                "websocket { port: 1, no_tls: true, allowed_origins: [\"app.example.com\"] }",
                "unable to parse allowed origin \"app.example.com\": allowed origins must be absolute URLs with http or https scheme",
            ),
            (
                "websocket { port: 1, no_tls: true, allowed_origins: \"ftp://x\" }",
                "http or https",
            ),
            (
                "websocket { port: 1, no_tls: true, allowed_origins: \"http://\" }",
                "host is required",
            ),
        ] {
            let e = from_str(text, Path::new("t.conf")).unwrap_err().to_string();
            assert!(e.contains(want), "{text}: {e}");
        }
    }

    #[test]
    fn leafnodes_block_maps_every_field() {
        let c = conf(
            r#"
            leafnodes {
              listen: "127.0.0.1:7422"
              advertise: "hub.example.com:7422"
              no_advertise: false
              reconnect: "250ms"
              authorization { user: leaf, password: s3cret, timeout: 3 }
              remotes [
                { url: "nats-leaf://u:p@hub1:7422" }
                { urls: ["nats://a:1", "tls://b"], account: "$G", hub: false,
                  tls { ca_file: "/ca.pem" } }
              ]
            }
            "#,
        );
        let l = c.options.leafnodes.expect("leafnodes set");
        assert_eq!((l.host.as_str(), l.port), ("127.0.0.1", Some(7422)));
        assert_eq!(l.advertise.as_deref(), Some("hub.example.com:7422"));
        assert_eq!(l.reconnect, Duration::from_millis(250));
        assert_eq!(l.auth_timeout, Duration::from_secs(3));
        assert_eq!(l.users.len(), 1);
        assert_eq!(
            (l.users[0].user.as_str(), l.users[0].password.as_str()),
            ("leaf", "s3cret")
        );
        assert_eq!(l.remotes.len(), 2);
        assert_eq!(
            l.remotes[0].urls,
            vec!["nats-leaf://u:p@hub1:7422".to_string()]
        );
        assert_eq!(l.remotes[1].urls.len(), 2);
        let tls = l.remotes[1].tls.as_ref().expect("remote tls");
        assert_eq!(tls.ca.as_deref(), Some(Path::new("/ca.pem")));
        let users = conf("leafnodes { port: -1, authorization { users [ {user: a, password: b}, {user: c, password: d} ] } }");
        let l = users.options.leafnodes.unwrap();
        assert_eq!(l.port, Some(0));
        assert_eq!(l.users.len(), 2);
        let none = conf("leafnodes { port: 0, remotes [ { url: \"nats://h:1\" } ] }");
        assert_eq!(none.options.leafnodes.unwrap().port, None);
    }

    #[test]
    fn leafnode_remote_deny_lists() {
        let c = conf(
            "leafnodes { remotes [ { url: \"nats://h:1\", deny_imports: [\"a.>\", b],
               deny_exports: \"c.*\" } ] }",
        );
        let l = c.options.leafnodes.unwrap();
        assert_eq!(l.remotes[0].deny_imports, vec!["a.>", "b"]);
        assert_eq!(l.remotes[0].deny_exports, vec!["c.*"]);
    }

    #[test]
    fn leafnode_remote_disabled() {
        let c = conf(
            "leafnodes { remotes [ { url: \"nats://h:1\", disabled: true }, { url: \"nats://h:2\" } ] }",
        );
        let l = c.options.leafnodes.unwrap();
        assert!(l.remotes[0].disabled);
        assert!(!l.remotes[1].disabled);
    }

    #[test]
    fn system_account_without_operators() {
        let c = conf("accounts { S { } }\nsystem_account: S\n");
        assert_eq!(c.options.auth.system_account.as_deref(), Some("S"));
        let e = from_str("system_account: NOPE\n", Path::new("c.conf"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("system account \"NOPE\" not found"), "{e}");
    }

    #[test]
    fn account_limits() {
        let c = conf("accounts { A { limits { max_conn: 2, max_subscriptions: -1, max_pay: 64, max_leafs: 0 } } }");
        let l = c.options.auth.accounts[0].limits;
        assert_eq!(l.max_connections, Some(2));
        assert_eq!(l.max_subscriptions, None);
        assert_eq!(l.max_payload, Some(64));
        assert_eq!(l.max_leafnodes, Some(0));
    }

    #[test]
    fn leafnode_remote_url_order_and_discovery() {
        let c = conf(
            "leafnodes { remotes [ { urls: [\"nats://h:1\", \"nats://h:2\"], no_randomize: true,
               ignore_discovered_servers: true }, { url: \"nats://h:3\", dont_randomize: false } ] }",
        );
        let l = c.options.leafnodes.unwrap();
        assert!(l.remotes[0].no_randomize && l.remotes[0].ignore_discovered_servers);
        assert!(!l.remotes[1].no_randomize && !l.remotes[1].ignore_discovered_servers);
        let e = from_str(
            "leafnodes { remotes [ { url: \"nats://h:1\", no_randomize: 3 } ] }",
            Path::new("c.conf"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("no_randomize"), "{e}");
    }

    #[test]
    fn leafnode_remote_timeouts_and_proxy() {
        let c = conf(
            "leafnodes { remotes [ { url: \"ws://h:1\", first_info_timeout: 3s, dial_timeout: \"250ms\",
               proxy { url: \"http://proxy.example:3128\", username: u, password: p, timeout: 2s } },
               { url: \"ws://h:2\", proxy { url: \"https://proxy.example\" } } ] }",
        );
        let l = c.options.leafnodes.unwrap();
        let r = &l.remotes[0];
        assert_eq!(r.first_info_timeout, Some(Duration::from_secs(3)));
        assert_eq!(r.dial_timeout, Some(Duration::from_millis(250)));
        let p = r.proxy.as_ref().unwrap();
        assert_eq!(
            (
                p.hostport.as_str(),
                p.username.as_str(),
                p.password.as_str(),
                p.timeout
            ),
            ("proxy.example:3128", "u", "p", Some(Duration::from_secs(2)))
        );
        assert_eq!(
            l.remotes[1].proxy.as_ref().unwrap().hostport,
            "proxy.example:443"
        );
        for (text, want) in [
            (
                "{ url: \"nats://h:1\", proxy { url: \"http://p:1\" } }",
                "only apply to WebSocket",
            ),
            (
                "{ url: \"wss://h:1\", proxy { url: \"http://p:1\" } }",
                "requires TLS",
            ),
            (
                "{ url: \"ws://h:1\", proxy { url: \"socks5://p:1\" } }",
                "must be http or https, got: socks5",
            ),
            (
                "{ url: \"ws://h:1\", proxy { url: \"http://\" } }",
                "must specify a host",
            ),
            (
                "{ url: \"ws://h:1\", proxy { url: \"http://p:1\", username: u } }",
                "both be specified",
            ),
            (
                "{ url: \"ws://h:1\", proxy { url: \"http://p:1\", type: x } }",
                "unknown proxy field",
            ),
            ("{ url: \"ws://h:1\", dial_timeout: soon }", "dial_timeout"),
            (
                "{ url: \"nats://h:1\", ws_compression: true }",
                "\"ws_compression\": only applies to WebSocket URLs",
            ),
            (
                "{ url: \"nats://h:1\", websocket_no_masking: true }",
                "\"ws_no_masking\": only applies to WebSocket URLs",
            ),
        ] {
            let e = from_str(
                &format!("leafnodes {{ remotes [ {text} ] }}"),
                Path::new("c.conf"),
            )
            .unwrap_err()
            .to_string();
            assert!(e.contains(want), "{text}: {e}");
        }
    }

    #[test]
    fn leafnode_websocket_remotes() {
        let c = conf(
            "leafnodes { remotes [ { urls: [\"ws://h:1\", \"wss://h:2/edge\"], ws_compression: true,
               websocket_no_masking: true }, { url: \"ws://h:3\" } ] }",
        );
        let l = c.options.leafnodes.unwrap();
        assert!(l.remotes[0].ws_compression && l.remotes[0].ws_no_masking);
        assert!(!l.remotes[1].ws_compression && !l.remotes[1].ws_no_masking);
        assert_eq!(l.remotes[0].urls, ["ws://h:1", "wss://h:2/edge"]);
    }

    #[test]
    fn leafnode_accounts_and_credentials() {
        use crate::config::nats::LeafRemoteAuth;
        let seed = nkeys::KeyPair::new_user().seed().unwrap();
        let c = conf(&format!(
            "leafnodes {{ port: 1, authorization {{ user: a, password: b, account: A }}
               remotes [ {{ url: \"nats://h:1\", account: B, credentials: \"/x.creds\" }},
                         {{ url: \"nats://h:2\", local: C, nkey: {seed} }},
                         {{ url: \"nats://h:3\" }} ] }}"
        ));
        let l = c.options.leafnodes.unwrap();
        assert_eq!(l.users[0].account.as_deref(), Some("A"));
        assert_eq!(l.account, None, "the single user's account is the user's");
        assert_eq!(l.remotes[0].account.as_deref(), Some("B"));
        assert_eq!(
            l.remotes[0].auth,
            LeafRemoteAuth::Credentials("/x.creds".into())
        );
        assert_eq!(l.remotes[1].account.as_deref(), Some("C"));
        assert_eq!(l.remotes[1].auth, LeafRemoteAuth::Seed(seed.clone()));
        assert!(
            !format!("{:?}", l.remotes[1].auth).contains(&seed),
            "the seed stays out of Debug output"
        );
        assert_eq!(l.remotes[2].account, None);
        assert_eq!(l.remotes[2].auth, LeafRemoteAuth::None);
        let users = conf(
            "leafnodes { port: 1, authorization { users [ {user: a, password: b, account: A}, {user: c, password: d} ] } }",
        );
        let l = users.options.leafnodes.unwrap();
        assert_eq!(l.users[0].account.as_deref(), Some("A"));
        assert_eq!(l.users[1].account, None);
        let default = conf("leafnodes { port: 1, authorization { account: D } }");
        let l = default.options.leafnodes.unwrap();
        assert!(l.users.is_empty());
        assert_eq!(l.account.as_deref(), Some("D"));
        let both = format!(
            "leafnodes {{ remotes [ {{ url: \"nats://h:1\", credentials: \"/x.creds\", nkey: {seed} }} ] }}"
        );
        let e = from_str(&both, Path::new("l.conf"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("can not have both creds and nkey"), "{e}");
        let account_seed = nkeys::KeyPair::new_account().seed().unwrap();
        let e = from_str(
            &format!("leafnodes {{ remotes [ {{ url: \"nats://h:1\", seed: {account_seed} }} ] }}"),
            Path::new("l.conf"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("not a valid seed") && e.contains("seed"), "{e}");
        assert!(!e.contains(&account_seed), "the seed is not echoed: {e}");
    }

    #[test]
    fn leafnode_features_we_lack_are_refused_by_name() {
        for (text, want) in [
            (
                "leafnodes { remotes [ { url: \"nats://h:1\", nkey: SUNOTASEED } ] }",
                "not a valid seed",
            ),
            (
                "leafnodes { remotes [ { url: \"nats://h:1\", hub: true } ] }",
                "hub",
            ),
            (
                "leafnodes { remotes [ { url: \"nats://h:1\", deny_imports: [\"a..b\"] } ] }",
                "deny_imports",
            ),
            ("leafnodes { remotes [ { url: \"http://h:1\" } ] }", "url"),
            (
                "leafnodes { remotes [ { urls: [\"ws://h:1\", \"nats://h:2\"] } ] }",
                "mix of websocket",
            ),
            (
                "leafnodes { remotes [ { url: \"ws://h:1\", ws_no_masking: maybe } ] }",
                "ws_no_masking",
            ),
            (
                "leafnodes { remotes [ { tls { ca_file: x } } ] }",
                "remotes",
            ),
            ("leafnodes { port: 1, compression: lz4 }", "compression"),
            (
                "leafnodes { remotes [ { url: \"nats://h:1\", compression: { mode: zstd } } ] }",
                "compression",
            ),
            (
                "leafnodes { port: 1, min_version: \"2.8.0\" }",
                "min_version",
            ),
            (
                "leafnodes { port: 1, authorization { nkey: UABC } }",
                "nkey",
            ),
            (
                "leafnodes { port: 1, authorization { users [ {user: b, permissions: {}} ] } }",
                "permissions",
            ),
            (
                "leafnodes { port: 1, authorization { user: a, users [ {user: b} ] } }",
                "users array",
            ),
            (
                "leafnodes { port: 1, authorization { users [ {user: b}, {user: b} ] } }",
                "duplicate user",
            ),
        ] {
            let e = from_str(text, Path::new("l.conf")).unwrap_err().to_string();
            assert!(e.contains(want), "{text}: {e}");
        }
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("2s"), Some(Duration::from_secs(2)));
        assert_eq!(parse_go_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_go_duration("300ms"), Some(Duration::from_millis(300)));
        assert_eq!(parse_go_duration("1.5h"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("0"), Some(Duration::ZERO));
        assert_eq!(parse_go_duration("2"), None);
        assert_eq!(parse_go_duration("s"), None);
        assert_eq!(parse_go_duration("-1s"), None);
        assert_eq!(parse_go_duration("3d"), None);
    }

    #[test]
    fn urls_and_addresses_stay_strings() {
        let m = parse_str(
            "a: nats://host:4222\nb: 10.0.0.1:4222\nc: 2.9.10\nd: 1.5.x",
            Path::new("x"),
        )
        .unwrap();
        assert_eq!(get(&m, "a"), &Value::Str("nats://host:4222".into()));
        assert_eq!(get(&m, "b"), &Value::Str("10.0.0.1:4222".into()));
        assert_eq!(get(&m, "c"), &Value::Str("2.9.10".into()));
        assert_eq!(get(&m, "d"), &Value::Str("1.5.x".into()));
    }

    proptest::proptest! {
        /// Arbitrary input never panics the parser.
        #[test]
        fn parser_never_panics(s in ".{0,200}") {
            let _ = from_str(&s, Path::new("p.conf"));
        }

        /// Structured fragments (more likely to reach deep states) never panic.
        #[test]
        fn parser_never_panics_structured(parts in proptest::collection::vec(
            proptest::sample::select(vec!["a", ":", "=", " ", "\n", "{", "}", "[", "]", ",", ";", "\"x\"", "'y'", "$a", "#c", "//", "1", "2KB", "-1", "true", "include", "\\"]),
            0..40,
        )) {
            let s: String = parts.concat();
            let _ = from_str(&s, Path::new("p.conf"));
        }

        /// A tree of blocks, arrays and scalars written in any of the
        /// syntaxes (`k: v`, `k = v`, `k v`; `,` `;` or newline between
        /// entries) parses back to the same tree.
        #[test]
        fn written_trees_parse_back(tree in tree_entries(), style in 0usize..3, sep in 0usize..3) {
            let text = render_entries(&tree, style, sep);
            let parsed = parse_str(&text, Path::new("t.conf"))
                .map_err(|e| proptest::test_runner::TestCaseError::fail(format!("{text}: {e}")))?;
            let got: Vec<(String, Plain)> =
                parsed.iter().map(|(k, n)| (k.clone(), plain(&n.value))).collect();
            proptest::prop_assert_eq!(got, tree, "{}", text);
        }
    }

    /// A parsed value without positions, for comparing trees.
    #[derive(Debug, Clone, PartialEq)]
    enum Plain {
        Str(String),
        Int(i64),
        Bool(bool),
        Array(Vec<Plain>),
        Map(Vec<(String, Plain)>),
    }

    fn plain(v: &Value) -> Plain {
        match v {
            Value::Str(s) => Plain::Str(s.clone()),
            Value::Int(i) => Plain::Int(*i),
            Value::Float(f) => Plain::Str(format!("float {f}")),
            Value::Bool(b) => Plain::Bool(*b),
            Value::Array(a) => Plain::Array(a.iter().map(|n| plain(&n.value)).collect()),
            Value::Map(m) => Plain::Map(
                m.iter()
                    .map(|(k, n)| (k.clone(), plain(&n.value)))
                    .collect(),
            ),
        }
    }

    fn tree_entries() -> impl proptest::strategy::Strategy<Value = Vec<(String, Plain)>> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            (0i64..1_000_000).prop_map(Plain::Int),
            any::<bool>().prop_map(Plain::Bool),
            "[a-zA-Z0-9 _.-]{0,10}".prop_map(Plain::Str),
        ];
        let value = leaf.prop_recursive(2, 12, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Plain::Array),
                keyed(inner).prop_map(Plain::Map),
            ]
        });
        keyed(value)
    }

    /// Entries with distinct keys (`k_…`, never a keyword).
    fn keyed(
        v: impl proptest::strategy::Strategy<Value = Plain>,
    ) -> impl proptest::strategy::Strategy<Value = Vec<(String, Plain)>> {
        use proptest::prelude::*;
        proptest::collection::vec(("k_[a-z0-9_]{0,6}", v), 0..4).prop_map(|mut e| {
            let mut seen = std::collections::HashSet::new();
            e.retain(|(k, _)| seen.insert(k.clone()));
            e
        })
    }

    fn render_value(v: &Plain, style: usize, sep: usize) -> String {
        match v {
            Plain::Str(s) => format!("\"{s}\""),
            Plain::Int(i) => i.to_string(),
            Plain::Bool(b) => b.to_string(),
            Plain::Array(a) => format!(
                "[{}]",
                a.iter()
                    .map(|x| render_value(x, style, sep))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Plain::Map(m) => format!("{{\n{}\n}}", render_entries(m, style, sep)),
        }
    }

    fn render_entries(e: &[(String, Plain)], style: usize, sep: usize) -> String {
        let kv = [": ", " = ", " "][style];
        let between = [",\n", ";\n", "\n"][sep];
        e.iter()
            .map(|(k, v)| format!("{k}{kv}{}", render_value(v, style, sep)))
            .collect::<Vec<_>>()
            .join(between)
    }
}
