//! External NATS mode: which configurations select it, which keys it
//! refuses, and the options of the connection to the external system.
//!
//! Liftbridge's main deployment makes the subjects of an existing NATS
//! system durable. Here that mode is chosen by `nats.embedded: false`, or
//! by a `nats.servers` list without `nats.embedded: true` (and without
//! `nats.embedded.config`, which implies embedded). In that mode the node
//! opens no NATS listener of its own, so every key that configures one
//! (`nats.listen`, `nats.cluster.*`, `nats.websocket.*`,
//! `nats.leafnodes.*`, `nats.embedded.config`) is refused naming the key;
//! the client keys `nats.servers`, `nats.user`, `nats.password` and
//! `nats.tls.{cert,key,ca}` take effect. In embedded mode the client keys
//! have no effect and are logged as such (see `audit`).
//!
//! This module only reads the configuration; the connection itself is
//! `nats::external`.

use std::path::PathBuf;

use super::liftbridge::LiftbridgeConfig;

/// Keys that only the client connection to an external system uses.
pub const CLIENT_KEYS: &[&str] = &[
    "nats.servers",
    "nats.user",
    "nats.password",
    "nats.tls.cert",
    "nats.tls.key",
    "nats.tls.ca",
];

/// Key prefixes (or whole keys) that configure the embedded server's
/// listeners: meaningless, hence refused, with an external system.
const LISTENER_KEYS: &[&str] = &[
    "nats.listen",
    "nats.embedded.config",
    "nats.cluster.",
    "nats.websocket.",
    "nats.leafnodes.",
];

/// Why the external NATS settings cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExternalConfigError {
    /// An entry of `nats.servers` is not a NATS URL.
    #[error("nats.servers: {url:?} is not a NATS server URL (nats://host:port): {reason}")]
    BadUrl {
        /// The entry.
        url: String,
        /// Why it does not parse.
        reason: String,
    },
    /// External mode without any server to connect to.
    #[error("nats.servers is empty: external NATS mode needs at least one nats://host:port")]
    NoServers,
    /// A client certificate without its key or the other way round.
    #[error("nats.tls.cert and nats.tls.key must be given together")]
    TlsPair,
    /// A password without a user.
    #[error("nats.password needs nats.user")]
    PasswordWithoutUser,
    /// A key that configures the embedded server's listeners was set.
    #[error(
        "config key {key} cannot be used with external NATS (nats.embedded: false or nats.servers): \
         the node then runs no NATS listener, cluster, websocket or leaf node of its own"
    )]
    ListenerKey {
        /// The key.
        key: &'static str,
    },
}

/// The connection to the external NATS system.
#[derive(Clone, PartialEq, Eq)]
pub struct ExternalNatsOptions {
    /// Server URLs, tried in turn (`nats.servers`).
    pub servers: Vec<String>,
    /// `nats.user`.
    pub user: Option<String>,
    /// `nats.password`.
    pub password: Option<String>,
    /// `nats.tls.cert` and `nats.tls.key`: the client certificate.
    pub client_cert: Option<(PathBuf, PathBuf)>,
    /// `nats.tls.ca`: roots that verify the server.
    pub ca: Option<PathBuf>,
}

impl std::fmt::Debug for ExternalNatsOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The password is never printed.
        f.debug_struct("ExternalNatsOptions")
            .field("servers", &self.servers)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("client_cert", &self.client_cert)
            .field("ca", &self.ca)
            .finish()
    }
}

impl ExternalNatsOptions {
    /// Whether TLS is asked for (any `nats.tls.*` key): then the connection
    /// is TLS even if the server does not require it, as Liftbridge's client
    /// does once it has a TLS configuration.
    pub fn tls(&self) -> bool {
        self.client_cert.is_some() || self.ca.is_some()
    }

    /// The servers as one label for logs and health (`nats://a:4222,…`).
    pub fn label(&self) -> String {
        self.servers.join(",")
    }
}

/// Whether `c` selects external NATS mode (see the module doc).
pub fn is_external(c: &LiftbridgeConfig) -> bool {
    let set = |k: &str| c.explicit_keys.contains(k);
    if c.nats.embedded_config.is_some() {
        return false;
    }
    if set("nats.embedded") {
        return !c.nats.embedded;
    }
    set("nats.servers") && !c.nats.servers.is_empty()
}

/// The external connection's options when `c` selects external mode,
/// `None` in embedded mode; an error names the key that cannot work.
pub fn from_liftbridge(
    c: &LiftbridgeConfig,
) -> Result<Option<ExternalNatsOptions>, ExternalConfigError> {
    if !is_external(c) {
        return Ok(None);
    }
    if let Some(key) = c.explicit_keys.iter().copied().find(|k| {
        LISTENER_KEYS
            .iter()
            .any(|p| k == p || (p.ends_with('.') && k.starts_with(p)))
    }) {
        return Err(ExternalConfigError::ListenerKey { key });
    }
    let n = &c.nats;
    if n.servers.is_empty() {
        return Err(ExternalConfigError::NoServers);
    }
    for url in &n.servers {
        url.parse::<async_nats::ServerAddr>()
            .map_err(|e| ExternalConfigError::BadUrl {
                url: url.clone(),
                reason: e.to_string(),
            })?;
    }
    let client_cert = match (&n.tls_cert, &n.tls_key) {
        (Some(c), Some(k)) => Some((c.clone(), k.clone())),
        (None, None) => None,
        _ => return Err(ExternalConfigError::TlsPair),
    };
    if n.password.is_some() && n.user.is_none() {
        return Err(ExternalConfigError::PasswordWithoutUser);
    }
    Ok(Some(ExternalNatsOptions {
        servers: n.servers.clone(),
        user: n.user.clone(),
        password: n.password.clone(),
        client_cert,
        ca: n.tls_ca.clone(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(keys: &[&'static str]) -> LiftbridgeConfig {
        let mut c = LiftbridgeConfig::default();
        c.explicit_keys.extend(keys.iter().copied());
        c
    }

    #[test]
    fn mode_selection() {
        assert!(!is_external(&cfg(&[])), "embedded by default");
        let mut c = cfg(&["nats.servers"]);
        c.nats.servers = vec!["nats://10.0.0.1:4222".into()];
        assert!(is_external(&c), "a server list selects external mode");
        c.explicit_keys.insert("nats.embedded");
        assert!(
            !is_external(&c),
            "nats.embedded: true keeps the embedded server"
        );
        c.nats.embedded = false;
        assert!(is_external(&c));
        c.nats.embedded_config = Some("/etc/nats.conf".into());
        assert!(!is_external(&c), "an embedded config implies embedded");
        let mut off = cfg(&["nats.embedded"]);
        off.nats.embedded = false;
        let o = from_liftbridge(&off).unwrap().unwrap();
        assert_eq!(o.servers, ["nats://127.0.0.1:4222"], "Liftbridge's default");
    }

    #[test]
    fn listener_keys_are_refused_in_external_mode() {
        for key in [
            "nats.listen",
            "nats.cluster.listen",
            "nats.websocket.listen",
            "nats.leafnodes.remotes",
        ] {
            let mut c = cfg(&["nats.embedded", key]);
            c.nats.embedded = false;
            let e = from_liftbridge(&c).unwrap_err();
            assert_eq!(e, ExternalConfigError::ListenerKey { key });
            assert!(e.to_string().contains(key), "{e}");
        }
        // Not refused in embedded mode.
        assert_eq!(from_liftbridge(&cfg(&["nats.listen"])), Ok(None));
    }

    #[test]
    fn bad_values_name_the_key() {
        let mut c = cfg(&["nats.servers"]);
        c.nats.servers = vec!["nats://host:notaport".into()];
        let e = from_liftbridge(&c).unwrap_err();
        assert!(matches!(e, ExternalConfigError::BadUrl { .. }), "{e}");
        assert!(e.to_string().contains("nats.servers"), "{e}");
        c.nats.servers = vec!["nats://h:4222".into()];
        c.nats.tls_cert = Some("c.pem".into());
        assert_eq!(from_liftbridge(&c), Err(ExternalConfigError::TlsPair));
        c.nats.tls_key = Some("k.pem".into());
        c.nats.password = Some("p".into());
        assert_eq!(
            from_liftbridge(&c),
            Err(ExternalConfigError::PasswordWithoutUser)
        );
        c.nats.user = Some("u".into());
        let o = from_liftbridge(&c).unwrap().unwrap();
        assert!(o.tls());
        assert!(!format!("{o:?}").contains("\"p\""), "password redacted");
    }
}
