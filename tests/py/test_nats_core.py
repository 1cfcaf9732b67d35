"""Core NATS behaviour of the embedded server, seen through nats-py.

The server is launched as `$LIFTBRIDGE_BIN nats-server -a 127.0.0.1 -p <port>
-m <port>` (nats-server compatibility mode). Setting NATS_SERVER_BIN to a
reference `nats-server` binary runs the same tests against it instead.
"""

import asyncio
import signal
import subprocess

import nats
import pytest
from nats.errors import NoRespondersError

from natsproc import free_port, http_json, server_cmd, stop, wait_serving

pytestmark = pytest.mark.asyncio


class Server:
    def __init__(self):
        self.port = free_port()
        self.http_port = free_port()
        cmd = server_cmd() + ["-a", "127.0.0.1", "-p", str(self.port), "-m", str(self.http_port)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_serving(self.proc, cmd, self.http_port, 10)

    @property
    def url(self):
        return f"nats://127.0.0.1:{self.port}"

    def get(self, path):
        return http_json(self.http_port, path)

    def stop(self):
        stop(self.proc)


@pytest.fixture
def server():
    s = Server()
    yield s
    s.stop()


async def test_nats_pubsub_wildcards(server):
    nc = await nats.connect(server.url)
    got = []
    sub = await nc.subscribe("orders.*.created")
    full = await nc.subscribe("orders.>")
    await nc.flush()
    await nc.publish("orders.eu.created", b"one")
    await nc.publish("orders.eu.deleted", b"two")
    await nc.flush()
    m = await sub.next_msg(timeout=2)
    assert m.data == b"one"
    for want in (b"one", b"two"):
        got.append((await full.next_msg(timeout=2)).data)
    assert got == [b"one", b"two"]
    with pytest.raises(nats.errors.TimeoutError):
        await sub.next_msg(timeout=0.2)
    await nc.close()


async def test_nats_request_reply_and_no_responders(server):
    nc = await nats.connect(server.url)

    async def handler(msg):
        await msg.respond(b"re:" + msg.data)

    await nc.subscribe("svc", cb=handler)
    await nc.flush()
    for i in range(20):
        resp = await nc.request("svc", str(i).encode(), timeout=2)
        assert resp.data == b"re:" + str(i).encode()
    with pytest.raises(NoRespondersError):
        await nc.request("nobody", b"x", timeout=2)
    await nc.close()


async def test_nats_headers(server):
    nc = await nats.connect(server.url)
    sub = await nc.subscribe("h")
    await nc.flush()
    await nc.publish("h", b"body", headers={"X-Trace": "abc"})
    m = await sub.next_msg(timeout=2)
    assert m.data == b"body"
    assert m.headers["X-Trace"] == "abc"
    await nc.close()


async def test_nats_queue_group_each_message_once(server):
    subs = []
    conns = []
    for _ in range(3):
        c = await nats.connect(server.url)
        conns.append(c)
        subs.append(await c.subscribe("work", queue="workers"))
        await c.flush()
    pub = await nats.connect(server.url)
    n = 150
    for i in range(n):
        await pub.publish("work", str(i).encode())
    await pub.flush()
    await asyncio.sleep(0.3)
    seen = []
    per = []
    for s in subs:
        count = 0
        while True:
            try:
                m = await s.next_msg(timeout=0.2)
            except nats.errors.TimeoutError:
                break
            seen.append(m.data)
            count += 1
        per.append(count)
    assert sorted(seen) == sorted(str(i).encode() for i in range(n))
    assert all(c > 0 for c in per), per
    for c in conns + [pub]:
        await c.close()


async def test_nats_monitoring_counts_payload_bytes(server):
    nc = await nats.connect(server.url, name="counter")
    for _ in range(100):
        await nc.publish("one.byte", b"x")
    await nc.flush()
    await asyncio.sleep(0.1)
    varz = server.get("/varz")
    assert varz["in_msgs"] == 100
    assert varz["in_bytes"] == 100
    assert varz["server_id"].startswith("N") and len(varz["server_id"]) == 56
    connz = server.get("/connz")
    conn = [c for c in connz["connections"] if c.get("name") == "counter"][0]
    assert conn["in_msgs"] == 100
    assert conn["in_bytes"] == 100
    assert conn["lang"] == "python3"
    await nc.close()


async def test_nats_max_payload_from_info(server):
    nc = await nats.connect(server.url)
    assert nc.max_payload == 1048576
    assert nc._server_info["headers"] is True
    await nc.close()


async def test_nats_lame_duck_callback(server):
    seen = asyncio.Event()

    async def ldm():
        seen.set()

    nc = await nats.connect(server.url, lame_duck_mode_cb=ldm, allow_reconnect=False)
    await nc.flush()
    server.proc.send_signal(signal.SIGUSR2)
    await asyncio.wait_for(seen.wait(), 5)
    await nc.close()
