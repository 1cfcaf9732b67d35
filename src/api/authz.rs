//! Authorization of gRPC calls (`tls.client.authz.*`), as Liftbridge does
//! it: a Casbin enforcer over a model file and a CSV policy file.
//!
//! The request is `(subject, object, action)`: the subject is the common
//! name of the client's verified mTLS certificate, the object is the stream
//! name (`*` for FetchMetadata, the NATS subject for PublishToSubject), the
//! action is the RPC name (PublishAsync is checked as `Publish`, per
//! message). Consumer-group RPCs, which Liftbridge leaves unchecked, are
//! checked here too, so that enabling authorization leaves no call open:
//! JoinConsumerGroup against each stream it names, the other group calls
//! against the group id (see README).
//!
//! Invariants: a call is let through only when the enforcer allows it; a
//! client without a certificate common name is refused (UNAUTHENTICATED);
//! a denial is PERMISSION_DENIED (Liftbridge returns UNKNOWN by accident).
//! [`Authorizer::reload`] (SIGHUP, as Liftbridge) builds a new enforcer from
//! both files and swaps it in only if that succeeds: a broken file keeps the
//! policy in force, never an empty or half-read one. This module does no
//! network I/O and never blocks a call on file I/O (files are read only at
//! start and on reload).

use std::path::PathBuf;
use std::sync::Arc;

use casbin::{CoreApi, DefaultModel, Enforcer, FileAdapter};
use parking_lot::RwLock;
use rustls::pki_types::CertificateDer;
use tonic::Status;

/// Why the enforcer could not be built from the files.
#[derive(Debug, thiserror::Error)]
pub enum AuthzError {
    /// A file is missing or unreadable.
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Casbin refused the model or the policy.
    #[error("authorization model {model} / policy {policy}: {source}")]
    Casbin {
        model: PathBuf,
        policy: PathBuf,
        source: casbin::Error,
    },
}

/// The model and policy files (`tls.client.authz.model`, `.policy`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthzFiles {
    /// Casbin model (`.conf`).
    pub model: PathBuf,
    /// Casbin policy (CSV).
    pub policy: PathBuf,
}

/// The enforcer in force. Cheap to share (`Arc`).
pub struct Authorizer {
    files: AuthzFiles,
    enforcer: RwLock<Arc<Enforcer>>,
}

impl std::fmt::Debug for Authorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authorizer")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

async fn build(files: &AuthzFiles) -> Result<Enforcer, AuthzError> {
    // Casbin's file readers report a missing file less clearly than this.
    for p in [&files.model, &files.policy] {
        tokio::fs::metadata(p)
            .await
            .map_err(|source| AuthzError::Read {
                path: p.clone(),
                source,
            })?;
    }
    let casbin_err = |source| AuthzError::Casbin {
        model: files.model.clone(),
        policy: files.policy.clone(),
        source,
    };
    let model = DefaultModel::from_file(&files.model)
        .await
        .map_err(casbin_err)?;
    let adapter = FileAdapter::new(files.policy.clone());
    Enforcer::new(model, adapter).await.map_err(casbin_err)
}

impl Authorizer {
    /// Reads both files; an error names the file.
    pub async fn load(files: AuthzFiles) -> Result<Authorizer, AuthzError> {
        let e = build(&files).await?;
        Ok(Authorizer {
            files,
            enforcer: RwLock::new(Arc::new(e)),
        })
    }

    /// Re-reads both files and puts the new policy in force; on error the
    /// previous policy stays in force.
    pub async fn reload(&self) -> Result<(), AuthzError> {
        let e = build(&self.files).await?;
        *self.enforcer.write() = Arc::new(e);
        Ok(())
    }

    /// Whether `subject` may perform `action` on `object`.
    #[allow(clippy::result_large_err)]
    pub fn allowed(&self, subject: &str, object: &str, action: &str) -> Result<bool, Status> {
        let e = self.enforcer.read().clone();
        e.enforce((subject, object, action)).map_err(|err| {
            tracing::error!(error = %err, "authorization policy could not be evaluated");
            Status::internal(format!("failed to enforce authorization policy: {err}"))
        })
    }

    /// Checks a call of `action` on `object` by the client whose verified
    /// certificate chain (leaf first, DER) is `certs`.
    #[allow(clippy::result_large_err)]
    pub fn check(
        &self,
        certs: Option<&[CertificateDer<'static>]>,
        object: &str,
        action: &str,
    ) -> Result<(), Status> {
        let cn = certs
            .and_then(|c| c.first())
            .and_then(|leaf| common_name(leaf.as_ref()));
        let Some(cn) = cn else {
            return Err(Status::unauthenticated(
                "api: Failed to retrieve client ID (no client certificate common name)",
            ));
        };
        if self.allowed(&cn, object, action)? {
            Ok(())
        } else {
            tracing::debug!(client = %cn, object, action, "call not authorized");
            Err(Status::permission_denied(format!(
                "The client is not authorized to call {action} on resource {object}"
            )))
        }
    }

    /// The files this authorizer reads.
    pub fn files(&self) -> &AuthzFiles {
        &self.files
    }
}

/// A DER element: tag, content, and the rest of the input after it.
fn der_next(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;
/// 2.5.4.3, id-at-commonName.
const CN_OID: &[u8] = &[0x55, 0x04, 0x03];

/// The subject common name of an X.509 certificate (DER), as Go's
/// `Subject.CommonName` (the last CN attribute); `None` if there is none or
/// the certificate cannot be parsed.
pub fn common_name(cert: &[u8]) -> Option<String> {
    let (tag, cert, _) = der_next(cert)?;
    if tag != SEQUENCE {
        return None;
    }
    let (tag, tbs, _) = der_next(cert)?;
    if tag != SEQUENCE {
        return None;
    }
    // tbsCertificate: [0] version (optional), serial, signature algorithm,
    // issuer, validity, subject.
    let mut rest = tbs;
    let (tag, _, r) = der_next(rest)?;
    rest = if tag == 0xa0 { der_next(r)?.2 } else { r };
    for _ in 0..3 {
        rest = der_next(rest)?.2;
    }
    let (tag, mut rdns, _) = der_next(rest)?;
    if tag != SEQUENCE {
        return None;
    }
    let mut cn = None;
    while !rdns.is_empty() {
        let (tag, mut set, r) = der_next(rdns)?;
        rdns = r;
        if tag != SET {
            return None;
        }
        while !set.is_empty() {
            let (tag, atv, r) = der_next(set)?;
            set = r;
            if tag != SEQUENCE {
                return None;
            }
            let (tag, oid, value) = der_next(atv)?;
            if tag == OID && oid == CN_OID {
                let (vtag, v, _) = der_next(value)?;
                cn = Some(match vtag {
                    // BMPString: UTF-16BE.
                    0x1e => {
                        let units: Vec<u16> = v
                            .chunks_exact(2)
                            .map(|c| u16::from_be_bytes([c[0], c[1]]))
                            .collect();
                        String::from_utf16(&units).ok()?
                    }
                    _ => String::from_utf8(v.to_vec()).ok()?,
                });
            }
        }
    }
    cn
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert_with_cn(cn: &str) -> Vec<u8> {
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        let mut dn = rcgen::DistinguishedName::new();
        dn.push(rcgen::DnType::OrganizationName, "org");
        dn.push(rcgen::DnType::CommonName, cn);
        p.distinguished_name = dn;
        let key = rcgen::KeyPair::generate().unwrap();
        p.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn common_name_of_generated_certificates() {
        assert_eq!(
            common_name(&cert_with_cn("client1")).as_deref(),
            Some("client1")
        );
        let long = "x".repeat(300);
        assert_eq!(common_name(&cert_with_cn(&long)), Some(long));
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name = rcgen::DistinguishedName::new();
        let key = rcgen::KeyPair::generate().unwrap();
        let none = p.self_signed(&key).unwrap().der().to_vec();
        assert_eq!(common_name(&none), None);
    }

    #[test]
    fn garbage_is_not_a_certificate() {
        for bad in [&b""[..], b"\x30", b"\x30\x84\xff\xff\xff\xff", b"\x04\x00"] {
            assert_eq!(common_name(bad), None);
        }
        // Every truncation of a real certificate is refused without panic.
        let der = cert_with_cn("c");
        for n in 0..der.len() {
            let _ = common_name(&der[..n]);
        }
    }

    #[tokio::test]
    async fn enforce_and_reload() {
        let dir = tempfile::tempdir().unwrap();
        let files = AuthzFiles {
            model: dir.path().join("model.conf"),
            policy: dir.path().join("policy.csv"),
        };
        std::fs::write(
            &files.model,
            "[request_definition]\nr = sub, obj, act\n\n[policy_definition]\np = sub, obj, act\n\n\
             [policy_effect]\ne = some(where (p.eft == allow))\n\n[matchers]\n\
             m = r.sub == p.sub && r.obj == p.obj && r.act == p.act\n",
        )
        .unwrap();
        std::fs::write(&files.policy, "p, alice, foo, CreateStream\n").unwrap();
        let a = Authorizer::load(files.clone()).await.unwrap();
        assert!(a.allowed("alice", "foo", "CreateStream").unwrap());
        assert!(!a.allowed("alice", "bar", "CreateStream").unwrap());
        assert!(!a.allowed("bob", "foo", "CreateStream").unwrap());
        std::fs::write(&files.policy, "p, bob, foo, CreateStream\n").unwrap();
        a.reload().await.unwrap();
        assert!(a.allowed("bob", "foo", "CreateStream").unwrap());
        assert!(!a.allowed("alice", "foo", "CreateStream").unwrap());
        // A missing file keeps the policy in force.
        std::fs::remove_file(&files.policy).unwrap();
        assert!(a.reload().await.is_err());
        assert!(a.allowed("bob", "foo", "CreateStream").unwrap());
    }
}
