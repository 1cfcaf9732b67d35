//! `liftbridge cert init`: the built binary writes a usable dev CA, server
//! and client certificates with private key files mode 0600.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

#[test]
fn compat_cert_init_writes_usable_certs() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("certs");
    let out = Command::new(env!("CARGO_BIN_EXE_liftbridge"))
        .args(["cert", "init", "--dir"])
        .arg(&out_dir)
        .args(["--host", "edge.example", "--host", "192.168.7.9"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    for f in [
        "ca.pem",
        "ca-key.pem",
        "server.pem",
        "server-key.pem",
        "client.pem",
        "client-key.pem",
    ] {
        let p = out_dir.join(f);
        assert!(stdout.contains(&p.display().to_string()), "{stdout}");
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        if f.ends_with("-key.pem") {
            assert_eq!(mode, 0o600, "{f}");
        } else {
            assert_eq!(mode & 0o077, 0o044, "{f}");
        }
    }
    // The server certificate verifies for every requested name, plus the
    // defaults, against the generated CA; a client certificate is accepted
    // by an mTLS server config.
    let ca = out_dir.join("ca.pem");
    let client = liftbridge::tls::client_config(&ca, None).unwrap();
    let server = liftbridge::tls::server_config(&liftbridge::config::TlsFiles {
        cert: out_dir.join("server.pem"),
        key: out_dir.join("server-key.pem"),
        ca: Some(ca.clone()),
        verify: true,
        params: Default::default(),
        handshake_first: None,
    })
    .unwrap();
    let with_cert = liftbridge::tls::client_config(
        &ca,
        Some((&out_dir.join("client.pem"), &out_dir.join("client-key.pem"))),
    )
    .unwrap();
    for name in ["edge.example", "192.168.7.9", "localhost", "127.0.0.1"] {
        assert!(handshake(server.clone(), with_cert.clone(), name), "{name}");
    }
    assert!(!handshake(server.clone(), with_cert, "other.example"));
    assert!(!handshake(server, client, "localhost"));
}

/// In-memory TLS handshake (no sockets needed to check certificate names).
fn handshake(
    server: std::sync::Arc<rustls::ServerConfig>,
    client: std::sync::Arc<rustls::ClientConfig>,
    name: &str,
) -> bool {
    let name = rustls::pki_types::ServerName::try_from(name.to_string()).unwrap();
    let mut c = rustls::ClientConnection::new(client, name).unwrap();
    let mut s = rustls::ServerConnection::new(server).unwrap();
    for _ in 0..10 {
        let mut buf = Vec::new();
        if c.wants_write() {
            c.write_tls(&mut buf).unwrap();
            let mut rd = &buf[..];
            if s.read_tls(&mut rd).is_err() || s.process_new_packets().is_err() {
                return false;
            }
        }
        let mut buf = Vec::new();
        if s.wants_write() {
            s.write_tls(&mut buf).unwrap();
            let mut rd = &buf[..];
            if c.read_tls(&mut rd).is_err() || c.process_new_packets().is_err() {
                return false;
            }
        }
        if !c.is_handshaking() && !s.is_handshaking() {
            return true;
        }
    }
    false
}

#[test]
fn compat_cert_requires_subcommand() {
    let out = Command::new(env!("CARGO_BIN_EXE_liftbridge"))
        .args(["cert"])
        .output()
        .unwrap();
    assert!(!out.status.success());
}
