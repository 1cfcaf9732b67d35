//! NATS JWTs and creds files for the operator-mode tests, made with the
//! server's own encoder: an operator, accounts it signs, users an account
//! (or one of its signing keys) signs.

use std::path::Path;

use liftbridge::nats::jwt::{self, AccountNats, Claims, OperatorNats, UserNats};

/// The operator's self-signed JWT naming `system_account`.
pub fn operator_jwt(op: &nkeys::KeyPair, system_account: &str) -> String {
    jwt::encode(
        &Claims {
            iss: op.public_key(),
            sub: op.public_key(),
            name: "op".into(),
            nats: OperatorNats {
                kind: "operator".into(),
                version: 2,
                system_account: system_account.to_string(),
                ..Default::default()
            },
            ..Default::default()
        },
        op,
    )
    .unwrap()
}

/// The JWT of account `account` (its public key) signed by `op`, with `f`
/// applied to its claims.
pub fn account_jwt(
    op: &nkeys::KeyPair,
    account: &str,
    name: &str,
    f: impl FnOnce(&mut AccountNats),
) -> String {
    let mut nats = AccountNats {
        kind: "account".into(),
        version: 2,
        ..Default::default()
    };
    f(&mut nats);
    jwt::encode(
        &Claims {
            iss: op.public_key(),
            sub: account.to_string(),
            name: name.into(),
            nats,
            ..Default::default()
        },
        op,
    )
    .unwrap()
}

/// A user JWT for `user`, signed by `signer`, without limits; `iat` one
/// minute ago so that a revocation "now" covers it; `f` changes the
/// claims before signing.
pub fn user_jwt(
    signer: &nkeys::KeyPair,
    user: &nkeys::KeyPair,
    f: impl FnOnce(&mut Claims<UserNats>),
) -> String {
    let mut c = Claims {
        iss: signer.public_key(),
        sub: user.public_key(),
        name: "u".into(),
        iat: jwt::unix_now() - 60,
        nats: UserNats {
            kind: "user".into(),
            version: 2,
            ..Default::default()
        },
        ..Default::default()
    };
    c.nats.limits.subs = -1;
    c.nats.limits.data = -1;
    c.nats.limits.payload = -1;
    f(&mut c);
    jwt::encode(&c, signer).unwrap()
}

/// Writes a creds file of `token` and the seed of `seed_of` to `path`.
pub fn write_creds(path: &Path, token: &str, seed_of: &nkeys::KeyPair) {
    std::fs::write(path, jwt::format_creds(token, &seed_of.seed().unwrap())).unwrap();
}
