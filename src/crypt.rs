//! Encryption at rest of message values, in Liftbridge's format.
//!
//! The master key is the raw bytes of `LIFTBRIDGE_ENCRYPTION_KEY` (16 or 32
//! bytes, as Liftbridge's AES key wrap accepts). Values are sealed with
//! AES-256-GCM under a random data key; the data key is wrapped with the
//! master key by AES key wrap with padding (RFC 5649, as Tink's KWP that
//! Liftbridge uses) and stored in front of every value:
//!
//! `[wrapped key length: 1 byte][wrapped key][nonce: 12 bytes][ciphertext + tag]`
//!
//! so each stored value is self-contained: replicas copy it as it is, and
//! a value can be read with the master key alone. A [`Sealer`] holds one
//! data key (a partition leader uses a fresh one per append batch).
//!
//! Invariants: nothing here panics on stored input (a malformed value is an
//! error); the master key never leaves this module in the clear.

use aes::cipher::{generic_array::GenericArray, BlockDecrypt, BlockEncrypt, KeyInit};
use aes_gcm::aead::{Aead, AeadCore, OsRng};
use aes_gcm::Aes256Gcm;
use rand::RngCore;

/// The environment variable holding the master key.
pub const MASTER_KEY_VAR: &str = "LIFTBRIDGE_ENCRYPTION_KEY";

const NONCE: usize = 12;
/// RFC 5649 alternative initial value (high half).
const AIV: [u8; 4] = [0xa6, 0x59, 0x59, 0xa6];

/// Why a value could not be sealed or opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CryptError {
    /// The master key has the wrong length.
    #[error("{MASTER_KEY_VAR} must be 16 or 32 bytes long, not {0}")]
    KeyLength(usize),
    /// A stored value is not in the sealed format.
    #[error("encrypted value is malformed")]
    Malformed,
    /// The wrapped data key does not unwrap with this master key.
    #[error("data key does not unwrap with the master key (wrong {MASTER_KEY_VAR}?)")]
    Unwrap,
    /// AES-GCM refused (wrong key or tampered data).
    #[error("value does not decrypt (tampered data or wrong key)")]
    Decrypt,
    /// AES-GCM could not seal.
    #[error("value could not be encrypted")]
    Encrypt,
}

/// The key schedule of the master key (boxed: schedules differ in size).
enum Kek {
    A128(Box<aes::Aes128>),
    A256(Box<aes::Aes256>),
}

impl Kek {
    fn encrypt(&self, block: &mut [u8; 16]) {
        let b = GenericArray::from_mut_slice(block);
        match self {
            Kek::A128(c) => c.encrypt_block(b),
            Kek::A256(c) => c.encrypt_block(b),
        }
    }
    fn decrypt(&self, block: &mut [u8; 16]) {
        let b = GenericArray::from_mut_slice(block);
        match self {
            Kek::A128(c) => c.decrypt_block(b),
            Kek::A256(c) => c.decrypt_block(b),
        }
    }
}

/// The master key (key-encryption key).
pub struct MasterKey {
    kek: Kek,
}

impl std::fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MasterKey(..)")
    }
}

impl MasterKey {
    /// A master key from its raw bytes (16 or 32).
    pub fn new(key: &[u8]) -> Result<MasterKey, CryptError> {
        let kek = match key.len() {
            16 => Kek::A128(Box::new(aes::Aes128::new(GenericArray::from_slice(key)))),
            32 => Kek::A256(Box::new(aes::Aes256::new(GenericArray::from_slice(key)))),
            n => return Err(CryptError::KeyLength(n)),
        };
        Ok(MasterKey { kek })
    }

    /// The master key from `LIFTBRIDGE_ENCRYPTION_KEY`; `None` when unset.
    pub fn from_env() -> Option<Result<MasterKey, CryptError>> {
        let v = std::env::var_os(MASTER_KEY_VAR)?;
        Some(MasterKey::new(std::os::unix::ffi::OsStrExt::as_bytes(
            v.as_os_str(),
        )))
    }

    /// RFC 5649 wrap of a key of at least 16 bytes (as Tink requires).
    fn wrap(&self, key: &[u8]) -> Vec<u8> {
        let mli = key.len() as u32;
        let padded = key.len().div_ceil(8) * 8;
        let mut r: Vec<[u8; 8]> = vec![[0; 8]; padded / 8];
        for (i, chunk) in key.chunks(8).enumerate() {
            r[i][..chunk.len()].copy_from_slice(chunk);
        }
        let mut a = [0u8; 8];
        a[..4].copy_from_slice(&AIV);
        a[4..].copy_from_slice(&mli.to_be_bytes());
        let n = r.len() as u64;
        for j in 0..6u64 {
            for (i, ri) in r.iter_mut().enumerate() {
                let mut b = [0u8; 16];
                b[..8].copy_from_slice(&a);
                b[8..].copy_from_slice(ri);
                self.kek.encrypt(&mut b);
                let t = n * j + i as u64 + 1;
                a.copy_from_slice(&b[..8]);
                for (x, y) in a.iter_mut().zip(t.to_be_bytes()) {
                    *x ^= y;
                }
                ri.copy_from_slice(&b[8..]);
            }
        }
        let mut out = Vec::with_capacity(8 + padded);
        out.extend_from_slice(&a);
        for ri in &r {
            out.extend_from_slice(ri);
        }
        out
    }

    /// RFC 5649 unwrap (two or more 64-bit blocks of key data).
    fn unwrap(&self, wrapped: &[u8]) -> Result<Vec<u8>, CryptError> {
        if wrapped.len() < 24 || wrapped.len() % 8 != 0 {
            return Err(CryptError::Unwrap);
        }
        let mut a = [0u8; 8];
        a.copy_from_slice(&wrapped[..8]);
        let mut r: Vec<[u8; 8]> = wrapped[8..]
            .chunks_exact(8)
            .map(|c| {
                let mut b = [0u8; 8];
                b.copy_from_slice(c);
                b
            })
            .collect();
        let n = r.len() as u64;
        for j in (0..6u64).rev() {
            for i in (0..r.len()).rev() {
                let t = n * j + i as u64 + 1;
                let mut b = [0u8; 16];
                b[..8].copy_from_slice(&a);
                for (x, y) in b[..8].iter_mut().zip(t.to_be_bytes()) {
                    *x ^= y;
                }
                b[8..].copy_from_slice(&r[i]);
                self.kek.decrypt(&mut b);
                a.copy_from_slice(&b[..8]);
                r[i].copy_from_slice(&b[8..]);
            }
        }
        if a[..4] != AIV {
            return Err(CryptError::Unwrap);
        }
        let mli = u32::from_be_bytes([a[4], a[5], a[6], a[7]]) as usize;
        let len = r.len() * 8;
        if mli > len || mli + 8 <= len {
            return Err(CryptError::Unwrap);
        }
        let flat: Vec<u8> = r.concat();
        if flat[mli..].iter().any(|&b| b != 0) {
            return Err(CryptError::Unwrap);
        }
        Ok(flat[..mli].to_vec())
    }

    /// A sealer with a fresh random data key.
    pub fn sealer(&self) -> Sealer {
        let mut dek = [0u8; 32];
        OsRng.fill_bytes(&mut dek);
        Sealer {
            wrapped: self.wrap(&dek),
            cipher: Aes256Gcm::new(GenericArray::from_slice(&dek)),
        }
    }

    /// The plaintext of a value sealed by a [`Sealer`] of this key.
    pub fn open(&self, sealed: &[u8]) -> Result<Vec<u8>, CryptError> {
        let (&klen, rest) = sealed.split_first().ok_or(CryptError::Malformed)?;
        let klen = usize::from(klen);
        if rest.len() < klen + NONCE {
            return Err(CryptError::Malformed);
        }
        let (wrapped, rest) = rest.split_at(klen);
        let dek = self.unwrap(wrapped)?;
        if dek.len() != 32 {
            return Err(CryptError::Malformed);
        }
        let cipher = Aes256Gcm::new(GenericArray::from_slice(&dek));
        let (nonce, ct) = rest.split_at(NONCE);
        cipher
            .decrypt(GenericArray::from_slice(nonce), ct)
            .map_err(|_| CryptError::Decrypt)
    }
}

/// Seals values under one data key.
pub struct Sealer {
    wrapped: Vec<u8>,
    cipher: Aes256Gcm,
}

impl Sealer {
    /// The stored form of `value`.
    pub fn seal(&self, value: &[u8]) -> Result<Vec<u8>, CryptError> {
        let nonce = Aes256Gcm::generate_nonce(&mut OsRng);
        let ct = self
            .cipher
            .encrypt(&nonce, value)
            .map_err(|_| CryptError::Encrypt)?;
        let klen = u8::try_from(self.wrapped.len()).map_err(|_| CryptError::Encrypt)?;
        let mut out = Vec::with_capacity(1 + self.wrapped.len() + NONCE + ct.len());
        out.push(klen);
        out.extend_from_slice(&self.wrapped);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&ct);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Wrap and unwrap agree for key sizes with and without padding; a
    /// changed bit is refused.
    #[test]
    fn wrap_round_trip_and_tamper() {
        for klen in [16usize, 32] {
            let mk = MasterKey::new(&vec![7u8; klen]).unwrap();
            for n in [16usize, 20, 32, 40] {
                let key: Vec<u8> = (0..n as u8).collect();
                let w = mk.wrap(&key);
                assert_eq!(w.len(), 8 + n.div_ceil(8) * 8);
                assert_eq!(mk.unwrap(&w).unwrap(), key);
                let mut bad = w.clone();
                bad[9] ^= 1;
                assert_eq!(mk.unwrap(&bad), Err(CryptError::Unwrap));
            }
        }
        assert!(matches!(
            MasterKey::new(b"short"),
            Err(CryptError::KeyLength(5))
        ));
    }

    /// Known answers from an independent RFC 5649 implementation (Python
    /// `cryptography`'s `aes_key_wrap_with_padding`).
    #[test]
    fn rfc5649_known_answers() {
        let key: Vec<u8> = (0..32u8).collect();
        let kek128: Vec<u8> = (0..16u8).collect();
        assert_eq!(
            MasterKey::new(&kek128).unwrap().wrap(&key),
            hex("65ca72da7b7783040f19eecd2c9f6d5161bf6cdf8f20633b87b04918d2fbf91338c7bd0b70ae6284")
        );
        assert_eq!(
            MasterKey::new(&[b'k'; 32]).unwrap().wrap(&key),
            hex("befa7121bf7cde3838ae69f77c26e0ff5bad41176ebe2622ed8f0c2c89fe714ef8737a14d4e8c0dc")
        );
    }

    #[test]
    fn seal_and_open() {
        let mk = MasterKey::new(&[1u8; 32]).unwrap();
        let s = mk.sealer();
        let v = s.seal(b"hello world").unwrap();
        assert_eq!(v[0] as usize, 40, "a 32-byte key wraps to 40 bytes");
        assert!(!v.windows(5).any(|w| w == b"hello"));
        assert_eq!(mk.open(&v).unwrap(), b"hello world");
        // Two seals differ (fresh nonce).
        assert_ne!(s.seal(b"x").unwrap(), s.seal(b"x").unwrap());
        // Another master key cannot open it.
        let other = MasterKey::new(&[2u8; 32]).unwrap();
        assert_eq!(other.open(&v), Err(CryptError::Unwrap));
        // Tampering is detected; truncations never panic.
        let mut bad = v.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert_eq!(mk.open(&bad), Err(CryptError::Decrypt));
        for n in 0..v.len() {
            assert!(mk.open(&v[..n]).is_err());
        }
        assert_eq!(mk.open(&s.seal(b"").unwrap()).unwrap(), b"");
    }
}
