"""Operator (JWT) mode seen through nats-py, with one config run by our
binary (`liftbridge nats-server -c`) and by Go nats-server 2.15.1
(`.venv/bin/nats-server`): the same test body must pass against both.

Keys come from the `nkeys` package, JWTs are encoded here (header
`{"typ":"JWT","alg":"ed25519-nkey"}`, base64url without padding, ed25519
signature by the issuer over `header.payload`), creds files as `nsc`
writes them. Checks: a creds user connects and pub/subs; accounts are
isolated; a creds file whose seed does not match its JWT and an expired
user are refused with "Authorization Violation".
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

from natsproc import assert_isolated, free_port, ours_or_go, stop

pytestmark = pytest.mark.asyncio



def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


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


def account_jwt(op, acc):
    return encode(claims(op, pub(acc), {"type": "account", "limits": UNLIMITED}), op)


def user_jwt(acc, user, **extra):
    part = {"type": "user", "pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1}
    return encode(claims(acc, pub(user), part, **extra), acc)


def creds(path, jwt, seed_kp):
    with open(path, "w") as f:
        f.write(f"-----BEGIN NATS USER JWT-----\n{jwt}\n------END NATS USER JWT------\n\n"
                f"-----BEGIN USER NKEY SEED-----\n{seed_kp.seed.decode()}\n"
                "------END USER NKEY SEED------\n")
    return path


class Server:
    def __init__(self, which):
        cmd = ours_or_go(which)
        self.dir = tempfile.TemporaryDirectory()
        self.op = new_key(nkeys.PREFIX_BYTE_OPERATOR)
        self.a = new_key(nkeys.PREFIX_BYTE_ACCOUNT)
        self.b = new_key(nkeys.PREFIX_BYTE_ACCOUNT)
        op_jwt = encode(claims(self.op, pub(self.op), {"type": "operator"}), self.op)
        self.port = free_port()
        conf = os.path.join(self.dir.name, "jwt.conf")
        with open(conf, "w") as f:
            f.write(f"listen: 127.0.0.1:{self.port}\noperator: {op_jwt}\nresolver: MEMORY\n"
                    f"resolver_preload: {{\n {pub(self.a)}: {account_jwt(self.op, self.a)}\n"
                    f" {pub(self.b)}: {account_jwt(self.op, self.b)}\n}}\n")
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

    def stop(self):
        stop(self.proc, timeout=10)
        self.dir.cleanup()


@pytest.fixture(params=["ours", "go"])
def srv(request):
    s = Server(request.param)
    yield s
    s.stop()


async def refused(srv, path):
    errors = []

    async def on_err(e):
        errors.append(str(e))

    with pytest.raises(Exception):
        await nats.connect(srv.url(), user_credentials=path, error_cb=on_err,
                           allow_reconnect=False, connect_timeout=5)
    return errors


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
