"""Operator (JWT) mode seen through nats-py, with one config run by our
binary (`liftbridge nats-server -c`) and by Go nats-server 2.15.1
(`.venv/bin/nats-server`): the same test body must pass against both.

Keys come from the `nkeys` package, JWTs are encoded here (header
`{"typ":"JWT","alg":"ed25519-nkey"}`, base64url without padding, ed25519
signature by the issuer over `header.payload`), creds files as `nsc`
writes them; account JWTs are preloaded into a MEMORY resolver. Checks:

- a creds user connects and pub/subs; accounts are isolated; a creds file
  whose seed does not match its JWT and an expired user are refused with
  "Authorization Violation";
- revocations: a user revoked at or after its `iat` (by key or by `*`) is
  refused, the same key re-issued later and another user connect;
- signing keys: a user issued by an account signing key with
  `issuer_account` joins that account; one issued by an unknown key, or
  without `issuer_account`, is refused; a scoped key's user gets the key's
  template, and one that sets permissions or limits of its own is refused;
- a JWT altered after signing, or signed by a key other than its `iss`,
  is refused;
- bearer tokens connect without a matching seed, unless the account sets
  `disallow_bearer`;
- JWT permissions: the exact "Permissions Violation for Publish/
  Subscription to" errors (on the wire; nats-py lower-cases them for its
  error callback) while the connection stays up; `resp` lets a responder
  answer once;
- limits: account `conn`, user and account `subs` and `payload` errors
  as nats-server words them, seen over a raw socket (exact text; whether
  the connection stays up). The payload limit is not in the INFO sent
  before CONNECT, so nats-py cannot refuse an oversized payload itself.

Left out: Go 2.12+ follows the first PONG with an INFO (`connect_info`,
`remote_account`, the user's `max_payload`) that we do not send.
"""

import asyncio
import base64
import json
import os
import socket
import subprocess
import tempfile
import time

import nats
import nkeys
import pytest

from natsproc import assert_isolated, free_port, ours_or_go, stop, sync

pytestmark = pytest.mark.asyncio


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def new_key(prefix):
    return nkeys.from_seed(nkeys.encode_seed(os.urandom(32), prefix))


def pub(kp):
    return kp.public_key.decode()


def encode(claims, signer):
    header = b64(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    payload = b64(json.dumps(claims).encode())
    signed = f"{header}.{payload}"
    return f"{signed}.{b64(signer.sign(signed.encode()))}"


def claims(iss, sub, nats_part, **extra):
    c = {"jti": b64(os.urandom(12)), "iat": int(time.time()) - 60, "iss": pub(iss),
         "sub": sub, "name": "t", "nats": dict(nats_part, version=2)}
    c.update(extra)
    return c


UNLIMITED = {"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
             "wildcards": True, "conn": -1, "leaf": -1}

# The one operator of every server here (each test starts its own server).
OP = new_key(nkeys.PREFIX_BYTE_OPERATOR)


def account_jwt(acc, limits=None, **nats_extra):
    """`acc`'s account JWT signed by OP: unlimited but for `limits`, with
    extra `nats` fields (`revocations`, `signing_keys`)."""
    part = {"type": "account", "limits": dict(UNLIMITED, **(limits or {})), **nats_extra}
    return encode(claims(OP, pub(acc), part), OP)


def user_jwt(acc, user, signer=None, nats_extra=None, **extra):
    """`user`'s JWT issued by `acc` (or by `signer`, e.g. a signing key);
    `nats_extra` overrides fields of its `nats` part, `extra` top-level
    claims (`exp`, `iat`)."""
    signer = signer or acc
    part = {"type": "user", "pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1,
            **(nats_extra or {})}
    return encode(claims(signer, pub(user), part, **extra), signer)


def creds(path, jwt, seed_kp):
    with open(path, "w") as f:
        f.write(f"-----BEGIN NATS USER JWT-----\n{jwt}\n------END NATS USER JWT------\n\n"
                f"-----BEGIN USER NKEY SEED-----\n{seed_kp.seed.decode()}\n"
                "------END USER NKEY SEED------\n")
    return path


class Server:
    """One server in operator mode with OP trusted and accounts `a` and `b`
    (unlimited) preloaded, plus `extra` ({account key: account JWT})."""

    def __init__(self, which, extra=None):
        cmd = ours_or_go(which)
        self.dir = tempfile.TemporaryDirectory()
        self.op = OP
        self.a = new_key(nkeys.PREFIX_BYTE_ACCOUNT)
        self.b = new_key(nkeys.PREFIX_BYTE_ACCOUNT)
        accounts = {pub(self.a): account_jwt(self.a), pub(self.b): account_jwt(self.b),
                    **(extra or {})}
        op_jwt = encode(claims(OP, pub(OP), {"type": "operator"}), OP)
        self.port = free_port()
        conf = os.path.join(self.dir.name, "jwt.conf")
        preload = "".join(f" {k}: {v}\n" for k, v in accounts.items())
        with open(conf, "w") as f:
            f.write(f"listen: 127.0.0.1:{self.port}\noperator: {op_jwt}\nresolver: MEMORY\n"
                    f"resolver_preload: {{\n{preload}}}\n")
        self.proc = subprocess.Popen(
            cmd + ["-c", conf], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{cmd} exited with {self.proc.returncode}")
                time.sleep(0.05)
        raise RuntimeError(f"{cmd} did not come up")

    def url(self):
        return f"nats://127.0.0.1:{self.port}"

    def creds(self, name, jwt, seed_kp):
        return creds(os.path.join(self.dir.name, name + ".creds"), jwt, seed_kp)

    async def connect(self, name, jwt, seed_kp, **opts):
        return await nats.connect(self.url(), user_credentials=self.creds(name, jwt, seed_kp),
                                  allow_reconnect=False, **opts)

    def stop(self):
        stop(self.proc, timeout=10)
        self.dir.cleanup()


@pytest.fixture
def srv(which):
    s = Server(which)
    yield s
    s.stop()


@pytest.fixture
def start(which):
    """`start(extra)` starts a Server with the `extra` accounts preloaded;
    all are stopped after the test."""
    servers = []

    def make(extra):
        servers.append(Server(which, extra))
        return servers[-1]

    yield make
    for s in servers:
        s.stop()


async def refused(srv, path):
    errors = []

    async def on_err(e):
        errors.append(str(e))

    with pytest.raises(Exception):
        await nats.connect(srv.url(), user_credentials=path, error_cb=on_err,
                           allow_reconnect=False, connect_timeout=5)
    return errors


async def assert_auth_violation(srv, name, jwt, seed_kp):
    errors = await refused(srv, srv.creds(name, jwt, seed_kp))
    assert any("authorization violation" in e.lower() for e in errors), errors


async def assert_roundtrip(sender, receiver, subject):
    """`receiver` subscribes to `subject`, `sender` publishes there; the
    message must arrive."""
    sub = await receiver.subscribe(subject)
    await sync(receiver)
    await sender.publish(subject, b"hi")
    assert (await sub.next_msg(5)).data == b"hi"
    await sub.unsubscribe()


async def raw_session(srv, jwt, user, lines, timeout=5):
    """Connects over a plain socket as `user` (CONNECT with `jwt` and the
    INFO nonce signed by the user's seed), sends `lines` and a PING, and
    returns (INFO, the lines the server sent up to the PONG or the close).
    Server PINGs and INFOs are left out: Go 2.12+ follows the first PONG
    with an INFO that has `connect_info`."""
    reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
    try:
        info = json.loads((await reader.readline()).decode().split(" ", 1)[1])
        connect = {"jwt": jwt, "sig": b64(user.sign(info["nonce"].encode())),
                   "verbose": False, "pedantic": False, "protocol": 1}
        writer.write(f"CONNECT {json.dumps(connect)}\r\n".encode()
                     + "".join(f"{line}\r\n" for line in lines).encode() + b"PING\r\n")
        await writer.drain()
        out = []
        deadline = time.time() + timeout
        while out[-1:] != ["PONG"]:
            line = await asyncio.wait_for(reader.readline(), deadline - time.time())
            if not line:
                break
            line = line.decode().rstrip("\r\n")
            if line != "PING" and not line.startswith("INFO "):
                out.append(line)
        return info, out
    finally:
        writer.close()


async def test_creds_users_isolated_and_refusals(srv):
    ua = new_key(nkeys.PREFIX_BYTE_USER)
    ub = new_key(nkeys.PREFIX_BYTE_USER)
    a = await nats.connect(srv.url(), user_credentials=srv.creds("a", user_jwt(srv.a, ua), ua))
    b = await nats.connect(srv.url(), user_credentials=srv.creds("b", user_jwt(srv.b, ub), ub))
    try:
        await assert_isolated(a, b)
    finally:
        await a.close()
        await b.close()

    wrong = new_key(nkeys.PREFIX_BYTE_USER)
    errors = await refused(srv, srv.creds("wrong", user_jwt(srv.a, ua), wrong))
    assert any("authorization violation" in e.lower() for e in errors), errors
    expired = user_jwt(srv.a, ua, exp=int(time.time()) - 5)
    errors = await refused(srv, srv.creds("expired", expired, ua))
    assert any("authorization violation" in e.lower() for e in errors), errors
    await asyncio.sleep(0)


async def test_revoked_users_refused(start):
    acc = new_key(nkeys.PREFIX_BYTE_ACCOUNT)
    everyone = new_key(nkeys.PREFIX_BYTE_ACCOUNT)
    revoked, other = new_key(nkeys.PREFIX_BYTE_USER), new_key(nkeys.PREFIX_BYTE_USER)
    t = int(time.time()) - 60
    srv = start({
        pub(acc): account_jwt(acc, revocations={pub(revoked): t}),
        pub(everyone): account_jwt(everyone, revocations={"*": t}),
    })
    # Revoked at exactly its issue time (the check is revocation >= iat).
    await assert_auth_violation(srv, "revoked", user_jwt(acc, revoked, iat=t), revoked)
    await assert_auth_violation(srv, "older", user_jwt(acc, revoked, iat=t - 30), revoked)
    await assert_auth_violation(srv, "star", user_jwt(everyone, other, iat=t), other)
    # A JWT issued after the revocation, and users not revoked, connect.
    reissued = await srv.connect("reissued", user_jwt(acc, revoked, iat=t + 1), revoked)
    fine = await srv.connect("fine", user_jwt(acc, other, iat=t), other)
    later = await srv.connect("later", user_jwt(everyone, revoked, iat=t + 1), revoked)
    try:
        await assert_roundtrip(reissued, fine, "rev.x")
        assert later.is_connected
    finally:
        for nc in (reissued, fine, later):
            await nc.close()


async def test_signing_keys(start):
    acc, ask = new_key(nkeys.PREFIX_BYTE_ACCOUNT), new_key(nkeys.PREFIX_BYTE_ACCOUNT)
    scoped, unknown = new_key(nkeys.PREFIX_BYTE_ACCOUNT), new_key(nkeys.PREFIX_BYTE_ACCOUNT)
    scope = {"kind": "user_scope", "key": pub(scoped), "role": "r",
             "template": {"pub": {"allow": ["scoped.>"]}, "sub": {}, "subs": -1, "data": -1,
                          "payload": -1}}
    srv = start({pub(acc): account_jwt(acc, signing_keys=[pub(ask), scope])})
    u1, u2, u3 = (new_key(nkeys.PREFIX_BYTE_USER) for _ in range(3))
    ia = {"issuer_account": pub(acc)}
    by_acc = await srv.connect("by_acc", user_jwt(acc, u1), u1)
    by_sk = await srv.connect("by_sk", user_jwt(acc, u2, signer=ask, nats_extra=ia), u2)
    errors = []

    async def on_err(e):
        errors.append(str(e))

    # A scoped key's user carries no permissions or limits of its own
    # (`nsc` writes none) and gets the template's: only scoped.>.
    scoped_user = encode(claims(scoped, pub(u3), dict(ia, type="user")), scoped)
    by_scope = await srv.connect("by_scope", scoped_user, u3, error_cb=on_err)
    try:
        # Same account both ways: the signing-key user reaches the
        # account-issued one and back.
        await assert_roundtrip(by_sk, by_acc, "sk.x")
        await assert_roundtrip(by_acc, by_sk, "sk.y")
        await assert_roundtrip(by_scope, by_acc, "scoped.x")
        await by_scope.publish("other", b"x")
        await sync(by_scope)
        assert errors == ['nats: permissions violation for publish to "other"'], errors
    finally:
        for nc in (by_acc, by_sk, by_scope):
            await nc.close()
    await assert_auth_violation(
        srv, "unknown", user_jwt(acc, u2, signer=unknown, nats_extra=ia), u2)
    # Without issuer_account the signing key is taken for the account.
    await assert_auth_violation(srv, "no_ia", user_jwt(acc, u2, signer=ask), u2)
    # A scoped key's user with permissions or limits of its own is refused.
    for i, own in enumerate([{"pub": {"allow": [">"]}}, {"subs": -1}]):
        jwt = encode(claims(scoped, pub(u3), dict(ia, type="user", **own)), scoped)
        await assert_auth_violation(srv, f"scoped_own{i}", jwt, u3)


async def test_bad_signature_refused(srv):
    u = new_key(nkeys.PREFIX_BYTE_USER)
    header, payload, sig = user_jwt(srv.a, u).split(".")
    altered = json.loads(unb64(payload))
    altered["name"] = "mallory"
    tampered = f"{header}.{b64(json.dumps(altered).encode())}.{sig}"
    await assert_auth_violation(srv, "tampered", tampered, u)
    # Claims naming account a as issuer, signed by another key.
    forged = encode(claims(srv.a, pub(u), {"type": "user", "pub": {}, "sub": {}}),
                    new_key(nkeys.PREFIX_BYTE_ACCOUNT))
    await assert_auth_violation(srv, "forged", forged, u)
    nc = await srv.connect("good", user_jwt(srv.a, u), u)
    await nc.close()


async def test_bearer_token(start):
    acc = new_key(nkeys.PREFIX_BYTE_ACCOUNT)
    srv = start({pub(acc): account_jwt(acc, limits={"disallow_bearer": True})})
    u, other = new_key(nkeys.PREFIX_BYTE_USER), new_key(nkeys.PREFIX_BYTE_USER)
    bearer = {"bearer_token": True}
    # A bearer JWT needs no proof of its key: any seed signs the nonce.
    nc = await srv.connect("bearer", user_jwt(srv.a, u, nats_extra=bearer), other)
    await nc.close()
    await assert_auth_violation(srv, "not_bearer", user_jwt(srv.a, u), other)
    await assert_auth_violation(srv, "disallowed", user_jwt(acc, u, nats_extra=bearer), u)


async def test_jwt_permissions(srv):
    u, r = new_key(nkeys.PREFIX_BYTE_USER), new_key(nkeys.PREFIX_BYTE_USER)
    perms = {"pub": {"allow": ["ok.>"]}, "sub": {"deny": ["secret.>"]}}
    jwt = user_jwt(srv.a, u, nats_extra=perms)
    # The exact text on the wire (nats-py lower-cases what it reports).
    _, out = await raw_session(srv, jwt, u, ["PUB x 2", "no", "SUB secret.x 1", "SUB ok.x 2"])
    assert out == ["-ERR 'Permissions Violation for Publish to \"x\"'",
                   "-ERR 'Permissions Violation for Subscription to \"secret.x\"'",
                   "PONG"], out
    errors = []

    async def on_err(e):
        errors.append(str(e))

    nc = await srv.connect("perm", jwt, u, error_cb=on_err)
    try:
        await assert_roundtrip(nc, nc, "ok.x")
        await nc.publish("x", b"no")
        await nc.subscribe("secret.x")
        await sync(nc)
        assert errors == ['nats: permissions violation for publish to "x"',
                          'nats: permissions violation for subscription to "secret.x"'], errors
        # Still connected, allowed traffic still flows.
        await assert_roundtrip(nc, nc, "ok.y")
    finally:
        await nc.close()

    # A responder that may publish only to `nothing`, but may answer each
    # request it receives once (`resp`); its second answer is refused.
    errors.clear()
    resp = {"pub": {"allow": ["nothing"]}, "resp": {"max": 1, "ttl": 0}}
    responder = await srv.connect("resp", user_jwt(srv.a, r, nats_extra=resp), r,
                                  error_cb=on_err)
    requester = await srv.connect("req", user_jwt(srv.a, u), u)
    try:
        svc = await responder.subscribe("svc")
        await sync(responder)
        inbox = requester.new_inbox()
        replies = await requester.subscribe(inbox)
        await requester.publish("svc", b"q", reply=inbox)
        req = await svc.next_msg(5)
        await responder.publish(req.reply, b"one")
        await responder.publish(req.reply, b"two")
        await sync(responder)
        assert (await replies.next_msg(5)).data == b"one"
        assert errors == [f'nats: permissions violation for publish to "{inbox.lower()}"'], errors
        with pytest.raises(nats.errors.TimeoutError):
            await replies.next_msg(0.1)
    finally:
        await responder.close()
        await requester.close()


async def test_account_connection_limit(start):
    acc = new_key(nkeys.PREFIX_BYTE_ACCOUNT)
    srv = start({pub(acc): account_jwt(acc, limits={"conn": 1})})
    u = new_key(nkeys.PREFIX_BYTE_USER)
    first = await srv.connect("first", user_jwt(acc, u), u)
    try:
        _, out = await raw_session(srv, user_jwt(acc, u), u, [])
        assert out == ["-ERR 'maximum account active connections exceeded'"], out
        errors = await refused(srv, srv.creds("second", user_jwt(acc, u), u))
        assert errors and all("maximum account active connections exceeded" in e
                              for e in errors), errors
        assert first.is_connected
    finally:
        await first.close()


@pytest.mark.parametrize("level", ["user", "account"])
async def test_subs_and_payload_limits(start, level):
    acc = new_key(nkeys.PREFIX_BYTE_ACCOUNT)
    limits = {"subs": 1, "payload": 16}
    srv = start({pub(acc): account_jwt(acc, limits=limits if level == "account" else None)})
    u = new_key(nkeys.PREFIX_BYTE_USER)
    jwt = user_jwt(acc, u, nats_extra=limits if level == "user" else None)

    _, out = await raw_session(srv, jwt, u, ["SUB a 1", "SUB b 2"])
    # Refused, but the connection stays up.
    assert out == ["-ERR 'maximum subscriptions exceeded'", "PONG"], out
    info, out = await raw_session(srv, jwt, u, ["PUB a 16", "x" * 16, "PUB a 32", "x" * 32])
    # Refused and closed (no PONG).
    assert out == ["-ERR 'Maximum Payload Violation'"], out
    # The limit is not in the INFO before CONNECT.
    assert info["max_payload"] == 1024 * 1024, info
