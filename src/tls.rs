//! TLS configuration (rustls) for the listeners, and dev certificate generation.
//!
//! One crypto provider everywhere: ring (no aws-lc, no cmake), narrowed per
//! `tls {}` block by [`TlsParams`] (minimum version, TLS 1.2 suites and
//! key-exchange groups, as nats-server's `min_version`, `cipher_suites` and
//! `curve_preferences`). Configs are
//! built once at start-up from PEM files and shared (`Arc`) by every
//! connection; this module does file I/O only while building them, so call it
//! before the runtime serves traffic or from a blocking context.
//!
//! [`generate_dev_certs`] writes a development CA plus a server and a client
//! certificate signed by it (ECDSA P-256, rcgen). Private keys are written
//! with mode 0600 from the start (never world-readable, not even briefly).

use std::fs;
use std::io::{BufReader, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;

use crate::config::nats::TlsFiles;

/// Errors of loading TLS material or generating certificates.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no certificate found in {0}")]
    NoCertificate(PathBuf),
    #[error("no private key found in {0}")]
    NoPrivateKey(PathBuf),
    #[error("no usable CA certificate in {0}")]
    BadCa(PathBuf),
    #[error("client certificate verification requires a CA file")]
    VerifyWithoutCa,
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("client verifier: {0}")]
    Verifier(String),
    #[error("certificate generation: {0}")]
    Generate(#[from] rcgen::Error),
}

/// Protocol and algorithm choices of a `tls {}` block (nats-server's
/// `min_version`, `cipher_suites` and `curve_preferences`); the defaults
/// are rustls's safe ones (TLS 1.2 and 1.3, every ring suite and group).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsParams {
    /// `min_version: "1.3"`: TLS 1.2 is refused.
    pub tls13_only: bool,
    /// TLS 1.2 suites by IANA name, in preference order; empty = all.
    /// TLS 1.3 suites are always all offered, as nats-server (Go) does.
    pub cipher_suites: Vec<String>,
    /// Key-exchange groups by rustls name, in preference order; empty = all.
    pub kx_groups: Vec<String>,
}

/// The IANA name of a suite.
fn suite_name(s: &rustls::SupportedCipherSuite) -> &'static str {
    s.suite().as_str().unwrap_or("")
}

/// A `min_version` value: whether it asks for TLS 1.3 only.
pub fn parse_min_version(v: &str) -> Result<bool, String> {
    match v.trim() {
        "1.2" => Ok(false),
        "1.3" => Ok(true),
        other => Err(format!(
            "unsupported TLS version {other:?} (1.2 and 1.3 are)"
        )),
    }
}

/// A `cipher_suites` entry as the IANA name of a TLS 1.2 suite we have
/// (`None` for a TLS 1.3 suite, which is always offered). Go's short names
/// of the ChaCha20 suites (without `_SHA256`) are accepted.
pub fn parse_cipher_suite(name: &str) -> Result<Option<String>, String> {
    let all = rustls::crypto::ring::default_provider().cipher_suites;
    for s in &all {
        let n = suite_name(s);
        let tls13_alias = n.strip_prefix("TLS13_").map(|r| format!("TLS_{r}"));
        if n == name || format!("{name}_SHA256") == n || tls13_alias.as_deref() == Some(name) {
            return Ok(match s {
                rustls::SupportedCipherSuite::Tls12(_) => Some(n.to_string()),
                rustls::SupportedCipherSuite::Tls13(_) => None,
            });
        }
    }
    let names: Vec<&str> = all
        .iter()
        .filter(|s| matches!(s, rustls::SupportedCipherSuite::Tls12(_)))
        .map(suite_name)
        .collect();
    Err(format!(
        "cipher suite {name:?} is not supported (supported: {})",
        names.join(", ")
    ))
}

/// A `curve_preferences` entry (Go's names, or the group's own) as the
/// rustls name of a key-exchange group we have.
pub fn parse_curve(name: &str) -> Result<String, String> {
    let group = match name {
        "X25519" | "x25519" => "X25519",
        "CurveP256" | "P256" | "P-256" | "secp256r1" => "secp256r1",
        "CurveP384" | "P384" | "P-384" | "secp384r1" => "secp384r1",
        other => {
            return Err(format!(
                "curve {other:?} is not supported (X25519, CurveP256 and CurveP384 are)"
            ))
        }
    };
    Ok(group.to_string())
}

/// The ring provider narrowed to `p`'s suites and groups.
fn provider_for(p: &TlsParams) -> Arc<rustls::crypto::CryptoProvider> {
    let mut prov = rustls::crypto::ring::default_provider();
    if !p.cipher_suites.is_empty() {
        let tls12: Vec<rustls::SupportedCipherSuite> = p
            .cipher_suites
            .iter()
            .filter_map(|n| {
                prov.cipher_suites
                    .iter()
                    .find(|s| suite_name(s) == n)
                    .copied()
            })
            .collect();
        prov.cipher_suites
            .retain(|s| matches!(s, rustls::SupportedCipherSuite::Tls13(_)));
        prov.cipher_suites.extend(tls12);
    }
    if !p.kx_groups.is_empty() {
        let all = std::mem::take(&mut prov.kx_groups);
        prov.kx_groups = p
            .kx_groups
            .iter()
            .filter_map(|n| {
                all.iter()
                    .find(|g| g.name().as_str() == Some(n.as_str()))
                    .copied()
            })
            .collect();
    }
    Arc::new(prov)
}

/// The protocol versions `p` allows.
fn versions(p: &TlsParams) -> &'static [&'static rustls::SupportedProtocolVersion] {
    static TLS13_ONLY: [&rustls::SupportedProtocolVersion; 1] = [&rustls::version::TLS13];
    if p.tls13_only {
        &TLS13_ONLY
    } else {
        rustls::DEFAULT_VERSIONS
    }
}

/// Reads every certificate of a PEM file.
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let f = fs::File::open(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let certs = rustls_pemfile::certs(&mut BufReader::new(f))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::Read {
            path: path.to_path_buf(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate(path.to_path_buf()));
    }
    Ok(certs)
}

/// Reads the first private key (PKCS#8, PKCS#1 or SEC1) of a PEM file.
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let f = fs::File::open(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    rustls_pemfile::private_key(&mut BufReader::new(f))
        .map_err(|source| TlsError::Read {
            path: path.to_path_buf(),
            source,
        })?
        .ok_or_else(|| TlsError::NoPrivateKey(path.to_path_buf()))
}

fn load_roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(load_certs(path)?);
    if added == 0 {
        return Err(TlsError::BadCa(path.to_path_buf()));
    }
    Ok(roots)
}

/// Server config from PEM cert + key. With `ca` and `verify`, clients must
/// present a certificate signed by that CA (mTLS); `ca` without `verify`
/// does not request client certificates (as nats-server).
pub fn server_config(files: &TlsFiles) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let certs = load_certs(&files.cert)?;
    let key = load_key(&files.key)?;
    let provider = provider_for(&files.params);
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions(&files.params))?;
    let builder = if files.verify {
        let ca = files.ca.as_ref().ok_or(TlsError::VerifyWithoutCa)?;
        let roots = load_roots(ca)?;
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| TlsError::Verifier(e.to_string()))?;
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    let cfg = builder.with_single_cert(certs, key)?;
    Ok(Arc::new(cfg))
}

/// Client config trusting the CA in `ca`, optionally presenting a client
/// certificate (for mTLS). Used by tests and by our own clients.
pub fn client_config(
    ca: &Path,
    client_cert_and_key: Option<(&Path, &Path)>,
) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    client_config_with(ca, client_cert_and_key, &TlsParams::default())
}

/// As [`client_config`], limited to `params` (a route's or a leaf
/// remote's `tls {}` block).
pub fn client_config_with(
    ca: &Path,
    client_cert_and_key: Option<(&Path, &Path)>,
    params: &TlsParams,
) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let roots = load_roots(ca)?;
    let builder = rustls::ClientConfig::builder_with_provider(provider_for(params))
        .with_protocol_versions(versions(params))?
        .with_root_certificates(roots);
    let cfg = match client_cert_and_key {
        Some((cert, key)) => builder.with_client_auth_cert(load_certs(cert)?, load_key(key)?)?,
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(cfg))
}

/// Paths written by [`generate_dev_certs`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevCertPaths {
    pub ca_cert: PathBuf,
    pub ca_key: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

/// Writes a dev CA (`ca.pem`, `ca-key.pem`), a server certificate for
/// `hosts` plus `localhost` and `127.0.0.1` (`server.pem`,
/// `server-key.pem`) and a client certificate (`client.pem`,
/// `client-key.pem`) into `dir` (created if missing). Hosts that parse as IP
/// addresses become IP SANs, others DNS SANs. Key files get mode 0600.
pub fn generate_dev_certs(dir: &Path, hosts: &[String]) -> Result<DevCertPaths, TlsError> {
    use rcgen::{
        BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose,
        IsCa, KeyPair, KeyUsagePurpose,
    };
    fs::create_dir_all(dir).map_err(|source| TlsError::Write {
        path: dir.to_path_buf(),
        source,
    })?;
    let validity = |p: &mut CertificateParams| {
        p.not_before = rcgen::date_time_ymd(2024, 1, 1);
        // The last date UTCTime can express; dev certs should not expire
        // under a long-running test machine.
        p.not_after = rcgen::date_time_ymd(2049, 12, 31);
    };
    let dn = |cn: &str| {
        let mut d = DistinguishedName::new();
        d.push(DnType::OrganizationName, "liftbridge dev");
        d.push(DnType::CommonName, cn);
        d
    };

    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::default();
    ca_params.distinguished_name = dn("liftbridge dev CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    validity(&mut ca_params);
    let ca_cert = ca_params.self_signed(&ca_key)?;

    let mut sans: Vec<String> = Vec::new();
    for h in hosts
        .iter()
        .map(String::as_str)
        .chain(["localhost", "127.0.0.1", "::1"])
    {
        let h = h.trim();
        // Accept `[::1]` as users write it in URLs.
        let h = h.trim_start_matches('[').trim_end_matches(']');
        if !h.is_empty() && !sans.iter().any(|s| s == h) {
            sans.push(h.to_string());
        }
    }
    let server_key = KeyPair::generate()?;
    let mut server_params = CertificateParams::new(sans.clone())?;
    let cn = sans
        .iter()
        .find(|s| s.parse::<IpAddr>().is_err())
        .cloned()
        .unwrap_or_else(|| "localhost".to_string());
    server_params.distinguished_name = dn(&cn);
    server_params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    // Client auth too: on NATS routes a node presents this certificate
    // when it dials a peer (mutual TLS between nodes, as nats-server).
    server_params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    validity(&mut server_params);
    let server_cert = server_params.signed_by(&server_key, &ca_cert, &ca_key)?;

    let client_key = KeyPair::generate()?;
    let mut client_params = CertificateParams::new(Vec::<String>::new())?;
    client_params.distinguished_name = dn("liftbridge dev client");
    client_params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    client_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    validity(&mut client_params);
    let client_cert = client_params.signed_by(&client_key, &ca_cert, &ca_key)?;

    let paths = DevCertPaths {
        ca_cert: dir.join("ca.pem"),
        ca_key: dir.join("ca-key.pem"),
        server_cert: dir.join("server.pem"),
        server_key: dir.join("server-key.pem"),
        client_cert: dir.join("client.pem"),
        client_key: dir.join("client-key.pem"),
    };
    write_file(&paths.ca_cert, ca_cert.pem().as_bytes(), 0o644)?;
    write_file(&paths.ca_key, ca_key.serialize_pem().as_bytes(), 0o600)?;
    write_file(&paths.server_cert, server_cert.pem().as_bytes(), 0o644)?;
    write_file(
        &paths.server_key,
        server_key.serialize_pem().as_bytes(),
        0o600,
    )?;
    write_file(&paths.client_cert, client_cert.pem().as_bytes(), 0o644)?;
    write_file(
        &paths.client_key,
        client_key.serialize_pem().as_bytes(),
        0o600,
    )?;
    Ok(paths)
}

/// Writes `data` to `path` (replacing it) with `mode` set at creation.
fn write_file(path: &Path, data: &[u8], mode: u32) -> Result<(), TlsError> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let err = |source| TlsError::Write {
        path: path.to_path_buf(),
        source,
    };
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .map_err(err)?;
    // An existing file keeps its old mode on open; force it.
    f.set_permissions(fs::Permissions::from_mode(mode))
        .map_err(err)?;
    f.write_all(data).map_err(err)?;
    f.sync_all().map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn dev_certs_files_and_modes() {
        let dir = tempfile::tempdir().unwrap();
        let p =
            generate_dev_certs(dir.path(), &["example.test".into(), "10.1.2.3".into()]).unwrap();
        for key in [&p.ca_key, &p.server_key, &p.client_key] {
            let mode = fs::metadata(key).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", key.display());
        }
        for cert in [&p.ca_cert, &p.server_cert, &p.client_cert] {
            assert_eq!(load_certs(cert).unwrap().len(), 1);
        }
        // Regenerating over existing files works.
        generate_dev_certs(dir.path(), &[]).unwrap();
    }

    #[test]
    fn missing_files_and_verify_without_ca() {
        let dir = tempfile::tempdir().unwrap();
        let files = TlsFiles {
            cert: dir.path().join("nope.pem"),
            key: dir.path().join("nope-key.pem"),
            ca: None,
            verify: false,
            params: TlsParams::default(),
            handshake_first: None,
        };
        assert!(matches!(server_config(&files), Err(TlsError::Read { .. })));
        let p = generate_dev_certs(dir.path(), &[]).unwrap();
        let files = TlsFiles {
            cert: p.server_cert.clone(),
            key: p.server_key.clone(),
            ca: None,
            verify: true,
            params: TlsParams::default(),
            handshake_first: None,
        };
        assert!(matches!(
            server_config(&files),
            Err(TlsError::VerifyWithoutCa)
        ));
        // A key file given as the certificate.
        let files = TlsFiles {
            cert: p.server_key.clone(),
            key: p.server_key.clone(),
            ca: None,
            verify: false,
            params: TlsParams::default(),
            handshake_first: None,
        };
        assert!(matches!(
            server_config(&files),
            Err(TlsError::NoCertificate(_))
        ));
    }

    /// Runs one TLS handshake over a real socket and echoes a byte;
    /// returns the negotiated version and suite (the client's view).
    async fn handshake(
        server: Arc<rustls::ServerConfig>,
        client: Arc<rustls::ClientConfig>,
        name: &str,
    ) -> Result<(rustls::ProtocolVersion, rustls::CipherSuite), String> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(server);
        let srv = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.map_err(|e| e.to_string())?;
            let mut tls = acceptor.accept(tcp).await.map_err(|e| e.to_string())?;
            let mut b = [0u8; 1];
            tls.read_exact(&mut b).await.map_err(|e| e.to_string())?;
            tls.write_all(&b).await.map_err(|e| e.to_string())?;
            tls.flush().await.map_err(|e| e.to_string())?;
            Ok::<(), String>(())
        });
        let connector = tokio_rustls::TlsConnector::from(client);
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let server_name = rustls::pki_types::ServerName::try_from(name.to_string()).unwrap();
        let result = async {
            let mut tls = connector
                .connect(server_name, tcp)
                .await
                .map_err(|e| e.to_string())?;
            tls.write_all(b"x").await.map_err(|e| e.to_string())?;
            let mut b = [0u8; 1];
            tls.read_exact(&mut b).await.map_err(|e| e.to_string())?;
            let c = tls.get_ref().1;
            Ok::<_, String>((
                c.protocol_version().ok_or("no version")?,
                c.negotiated_cipher_suite().ok_or("no suite")?.suite(),
            ))
        }
        .await;
        let srv = srv.await.unwrap();
        srv.and(result)
    }

    const ECDSA_AES128: &str = "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256";
    const ECDSA_AES256: &str = "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384";

    /// A client that speaks TLS 1.2 only, with these suites and groups.
    fn client12(ca: &Path, params: &TlsParams) -> Arc<rustls::ClientConfig> {
        Arc::new(
            rustls::ClientConfig::builder_with_provider(provider_for(params))
                .with_protocol_versions(&[&rustls::version::TLS12])
                .unwrap()
                .with_root_certificates(load_roots(ca).unwrap())
                .with_no_client_auth(),
        )
    }

    #[test]
    fn tls_params_parse_nats_server_names() {
        assert_eq!(parse_min_version("1.2"), Ok(false));
        assert_eq!(parse_min_version("1.3"), Ok(true));
        assert!(parse_min_version("1.1").unwrap_err().contains("1.1"));
        assert_eq!(
            parse_cipher_suite(ECDSA_AES128),
            Ok(Some(ECDSA_AES128.into()))
        );
        // Go's short name of a ChaCha20 suite.
        assert_eq!(
            parse_cipher_suite("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305"),
            Ok(Some("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256".into()))
        );
        // TLS 1.3 suites are always on.
        assert_eq!(parse_cipher_suite("TLS_AES_128_GCM_SHA256"), Ok(None));
        let e = parse_cipher_suite("TLS_RSA_WITH_AES_128_CBC_SHA").unwrap_err();
        assert!(
            e.contains("TLS_RSA_WITH_AES_128_CBC_SHA") && e.contains(ECDSA_AES128),
            "{e}"
        );
        assert_eq!(parse_curve("CurveP384"), Ok("secp384r1".into()));
        assert_eq!(parse_curve("X25519"), Ok("X25519".into()));
        assert!(parse_curve("CurveP521").unwrap_err().contains("CurveP521"));
    }

    #[tokio::test]
    async fn tls_params_limit_versions_suites_and_groups() {
        let dir = tempfile::tempdir().unwrap();
        let p = generate_dev_certs(dir.path(), &[]).unwrap();
        let server = |params: TlsParams| {
            server_config(&TlsFiles {
                cert: p.server_cert.clone(),
                key: p.server_key.clone(),
                ca: None,
                verify: false,
                params,
                handshake_first: None,
            })
            .unwrap()
        };
        let any = client_config(&p.ca_cert, None).unwrap();
        let v12 = client12(&p.ca_cert, &TlsParams::default());
        // min_version 1.3: a TLS 1.2 client is refused.
        let only13 = server(TlsParams {
            tls13_only: true,
            ..Default::default()
        });
        assert!(handshake(only13.clone(), v12.clone(), "localhost")
            .await
            .is_err());
        let (v, _) = handshake(only13, any.clone(), "localhost").await.unwrap();
        assert_eq!(v, rustls::ProtocolVersion::TLSv1_3);
        // Without it, TLS 1.2 is accepted.
        let (v, _) = handshake(server(TlsParams::default()), v12, "localhost")
            .await
            .unwrap();
        assert_eq!(v, rustls::ProtocolVersion::TLSv1_2);
        // cipher_suites: only the listed TLS 1.2 suite is agreed.
        let aes128 = server(TlsParams {
            cipher_suites: vec![ECDSA_AES128.into()],
            ..Default::default()
        });
        let offers = |suites: &[&str]| {
            client12(
                &p.ca_cert,
                &TlsParams {
                    cipher_suites: suites.iter().map(|s| s.to_string()).collect(),
                    ..Default::default()
                },
            )
        };
        assert!(
            handshake(aes128.clone(), offers(&[ECDSA_AES256]), "localhost")
                .await
                .is_err()
        );
        let (_, suite) = handshake(aes128, offers(&[ECDSA_AES256, ECDSA_AES128]), "localhost")
            .await
            .unwrap();
        assert_eq!(suite.as_str(), Some(ECDSA_AES128));
        // curve_preferences: a client without a common group is refused.
        let p384 = server(TlsParams {
            kx_groups: vec!["secp384r1".into()],
            ..Default::default()
        });
        let x25519 = client_config_with(
            &p.ca_cert,
            None,
            &TlsParams {
                kx_groups: vec!["X25519".into()],
                ..Default::default()
            },
        )
        .unwrap();
        assert!(handshake(p384.clone(), x25519, "localhost").await.is_err());
        handshake(p384, any, "localhost").await.unwrap();
    }

    #[tokio::test]
    async fn tls_and_mtls_handshakes() {
        let dir = tempfile::tempdir().unwrap();
        let p = generate_dev_certs(dir.path(), &["nats.example".into()]).unwrap();
        let plain = server_config(&TlsFiles {
            cert: p.server_cert.clone(),
            key: p.server_key.clone(),
            ca: Some(p.ca_cert.clone()),
            verify: false,
            params: TlsParams::default(),
            handshake_first: None,
        })
        .unwrap();
        let anon = client_config(&p.ca_cert, None).unwrap();
        for name in ["localhost", "127.0.0.1", "nats.example"] {
            handshake(plain.clone(), anon.clone(), name).await.unwrap();
        }
        // Wrong host name fails verification.
        assert!(handshake(plain.clone(), anon.clone(), "other.example")
            .await
            .is_err());

        let mtls = server_config(&TlsFiles {
            cert: p.server_cert.clone(),
            key: p.server_key.clone(),
            ca: Some(p.ca_cert.clone()),
            verify: true,
            params: TlsParams::default(),
            handshake_first: None,
        })
        .unwrap();
        let with_cert = client_config(&p.ca_cert, Some((&p.client_cert, &p.client_key))).unwrap();
        handshake(mtls.clone(), with_cert, "localhost")
            .await
            .unwrap();
        assert!(handshake(mtls.clone(), anon.clone(), "localhost")
            .await
            .is_err());

        // A client cert from another CA is refused.
        let other_dir = tempfile::tempdir().unwrap();
        let o = generate_dev_certs(other_dir.path(), &[]).unwrap();
        let foreign = client_config(&p.ca_cert, Some((&o.client_cert, &o.client_key))).unwrap();
        assert!(handshake(mtls, foreign, "localhost").await.is_err());
    }
}
