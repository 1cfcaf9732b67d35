"""NATS over WebSocket seen through nats-py (its `ws://` transport, on
aiohttp), with one config run by our binary (`liftbridge nats-server -c`)
and by Go nats-server 2.15.1 (`.venv/bin/nats-server`): the same test body
must pass against both.

The config is `websocket { listen, no_tls: true }` beside the TCP
listener, with `max_payload: 1MB`. Checks: a WebSocket client and a TCP
client share one subject space (pub/sub both ways, every message in
order, headers kept); request/reply with the requester on either
transport, and no-responders; a 200 KiB payload (one frame with a
64-bit length from nats-py) arrives intact both ways and the stream
stays in step after it; with the
server's `authorization` (user and password) a WebSocket client with the
right password is served while a wrong or missing one is refused with
"Authorization Violation".

Subscriptions are awaited on the server's `/connz` (see `subscribed`).
nats-py does not offer permessage-deflate, so compression is left to the
Node test in tests/ws. The `websocket { authorization {} }` block (Go lets
it replace the server's users for WebSocket clients) is not used: our
server refuses it at start-up.
"""

import asyncio
import functools
import os
import subprocess
import tempfile
import time

import nats
import pytest

from natsproc import free_port, http_json, ours_or_go, stop, wait_serving

pytestmark = [
    pytest.mark.asyncio,
    # nats-py 2.16 passes aiohttp a float `timeout`, which aiohttp 3.14 deprecates.
    pytest.mark.filterwarnings("ignore:parameter 'timeout':DeprecationWarning"),
]

WAIT = 10
USER, PASSWORD = "wsuser", "wspass"


class Server:
    """`which` server with a TCP and a WebSocket listener (and, when
    `auth`, a single user and password for both)."""

    def __init__(self, which, auth=False):
        self.cmd = ours_or_go(which)
        self.dir = tempfile.TemporaryDirectory()
        self.port, self.ws_port, self.http_port = free_port(), free_port(), free_port()
        conf = os.path.join(self.dir.name, "ws.conf")
        text = (
            f"listen: 127.0.0.1:{self.port}\nhttp: 127.0.0.1:{self.http_port}\n"
            f"max_payload: 1MB\n"
            f'websocket {{\n  listen: "127.0.0.1:{self.ws_port}"\n  no_tls: true\n}}\n'
        )
        if auth:
            text += f"authorization {{ user: {USER}, password: {PASSWORD} }}\n"
        with open(conf, "w") as f:
            f.write(text)
        self.log = open(os.path.join(self.dir.name, "server.log"), "wb")
        self.proc = subprocess.Popen(
            self.cmd + ["-c", conf], stdout=self.log, stderr=subprocess.STDOUT
        )
        wait_serving(self.proc, self.cmd, self.http_port, 20)

    @property
    def tcp(self):
        return f"nats://127.0.0.1:{self.port}"

    @property
    def ws(self):
        return f"ws://127.0.0.1:{self.ws_port}"

    def stop(self):
        stop(self.proc)
        self.log.close()
        self.dir.cleanup()


@pytest.fixture
def srv(which):
    s = Server(which)
    yield s
    s.stop()


@pytest.fixture
def auth_srv(which):
    s = Server(which, auth=True)
    yield s
    s.stop()


async def subscribed(srv, client, subject):
    """Waits until the server lists `subject` among `client`'s
    subscriptions (`/connz?cid=…&subs=1`). nats-py's `flush()` is no
    barrier for a subscription: it writes its PING straight to the
    transport while the SUB may still wait in the client's pending buffer,
    so the PONG can come back before the server has seen the SUB."""
    deadline = time.time() + WAIT
    while time.time() < deadline:
        conns = http_json(srv.http_port, f"/connz?cid={client.client_id}&subs=1")
        if any(subject in (c.get("subscriptions_list") or []) for c in conns["connections"]):
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"server never listed the subscription to {subject}")


async def clients(srv, **kw):
    ws = await nats.connect(srv.ws, **kw)
    tcp = await nats.connect(srv.tcp, **kw)
    return ws, tcp


async def one_way(srv, pub, sub_client, subject, n=50):
    """`pub` sends `n` messages with a header to `sub_client`'s
    subscription: every one arrives, in order, header kept."""
    sub = await sub_client.subscribe(subject)
    await subscribed(srv, sub_client, subject)
    for i in range(n):
        await pub.publish(subject, f"m{i}".encode(), headers={"N": str(i)})
    await pub.flush()
    for i in range(n):
        m = await sub.next_msg(WAIT)
        assert m.data == f"m{i}".encode(), f"{subject} #{i}"
        assert m.headers == {"N": str(i)}
    await sub.unsubscribe()


async def test_pub_sub_between_ws_and_tcp(srv):
    ws, tcp = await clients(srv)
    try:
        await one_way(srv, ws, tcp, "ws.to.tcp")
        await one_way(srv, tcp, ws, "tcp.to.ws")
        # A client on the WebSocket receives its own messages too (echo).
        await one_way(srv, ws, ws, "ws.self")
    finally:
        await ws.close()
        await tcp.close()


async def test_request_reply_across_transports(srv):
    ws, tcp = await clients(srv)
    try:

        async def answer(prefix, msg):
            await msg.respond(prefix + msg.data)

        await tcp.subscribe("svc.tcp", cb=functools.partial(answer, b"tcp:"))
        await ws.subscribe("svc.ws", cb=functools.partial(answer, b"ws:"))
        await subscribed(srv, tcp, "svc.tcp")
        await subscribed(srv, ws, "svc.ws")
        for i in range(5):
            r = await ws.request("svc.tcp", f"q{i}".encode(), timeout=WAIT)
            assert r.data == f"tcp:q{i}".encode()
            r = await tcp.request("svc.ws", f"q{i}".encode(), timeout=WAIT)
            assert r.data == f"ws:q{i}".encode()
        # No responder: the WebSocket requester is told at once.
        with pytest.raises(nats.errors.NoRespondersError):
            await ws.request("svc.nobody", b"?", timeout=WAIT)
    finally:
        await ws.close()
        await tcp.close()


async def test_payload_larger_than_a_frame(srv):
    ws, tcp = await clients(srv)
    try:
        assert ws.max_payload >= 1024 * 1024
        big = os.urandom(200 * 1024)
        for pub, sub_client, subject in ((ws, tcp, "big.up"), (tcp, ws, "big.down")):
            sub = await sub_client.subscribe(subject)
            await subscribed(srv, sub_client, subject)
            await pub.publish(subject, big)
            await pub.publish(subject, b"after")
            await pub.flush()
            assert (await sub.next_msg(WAIT)).data == big
            # The stream stays in step after the large message.
            assert (await sub.next_msg(WAIT)).data == b"after"
    finally:
        await ws.close()
        await tcp.close()


async def refused(url, **kw):
    """Connecting to `url` fails; returns the errors reported."""
    errors = []

    async def on_err(e):
        errors.append(str(e))

    nc = nats.NATS()
    try:
        with pytest.raises(Exception):
            await nc.connect(
                url, error_cb=on_err, allow_reconnect=False, connect_timeout=5, **kw
            )
    finally:
        # Also releases the WebSocket transport's HTTP session.
        await nc.close()
    return errors


async def test_ws_user_password(auth_srv):
    ws, tcp = await clients(auth_srv, user=USER, password=PASSWORD)
    try:
        await one_way(auth_srv, ws, tcp, "auth.up", n=5)
        await one_way(auth_srv, tcp, ws, "auth.down", n=5)
    finally:
        await ws.close()
        await tcp.close()
    for kw in ({"user": USER, "password": "wrong"}, {}):
        errors = await refused(auth_srv.ws, **kw)
        assert any("Authorization Violation" in e for e in errors), (kw, errors)
    # The refusals touched no one else: a new client is still served.
    ok = await nats.connect(auth_srv.ws, user=USER, password=PASSWORD)
    try:
        assert ok.is_connected
        await asyncio.wait_for(ok.flush(), WAIT)
    finally:
        await ok.close()
