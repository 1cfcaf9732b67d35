"""Leaf nodes seen through nats-py, between our binary
(`liftbridge nats-server -c`) and Go nats-server (2.15.1 from `.venv`,
Debian's 2.9.10 from apt) in both roles: our server as the edge leaf of a
Go hub, and Go leaves attached to our hub.

Across the link, with one nats-py client on each side: a subscriber on
the hub gets what the edge publishes and the reverse (every message, in
order), and request/reply works with the responder on either side. When
the hub stops, the edge keeps serving its own clients (the edge's nats-py
client never sees a disconnect); when a new hub starts on the same leaf
port, the edge reconnects by itself, re-sends the interest its clients
already had, and traffic crosses both ways again. The link state is read
from `/leafz` on the monitoring port, never guessed with sleeps.
"""

import asyncio
import os
import subprocess
import time

import nats
import pytest

from natsproc import free_port, http_json, ours_or_go, stop, wait_serving

pytestmark = pytest.mark.asyncio

WAIT = 15


def debian_nats_server():
    """Debian's nats-server 2.9.10 (scripts/test.sh installs it with apt,
    so missing is a failure)."""
    for p in ("/usr/sbin/nats-server", "/usr/bin/nats-server"):
        if os.path.exists(p):
            return [p]
    raise AssertionError("Debian's nats-server missing: apt-get install nats-server")


def server(which):
    """The command of "ours", "go" (2.15.1) or "go29" (Debian's 2.9.10)."""
    return debian_nats_server() if which == "go29" else ours_or_go(which)


class Node:
    """One server started from a config file in `tmp`: a client port, a
    monitoring port, and either a leaf listener (`leaf_port`, a hub) or a
    remote toward `hub_leaf_port` (an edge)."""

    def __init__(self, which, tmp, name, leaf_port=None, hub_leaf_port=None):
        self.which = which
        self.cmd = server(which)
        self.port, self.http_port = free_port(), free_port()
        self.leaf_port = leaf_port
        self.log = tmp / f"{name}.log"
        self.conf = tmp / f"{name}.conf"
        leaf = ""
        if leaf_port is not None:
            leaf += f"  listen: 127.0.0.1:{leaf_port}\n"
        if hub_leaf_port is not None:
            leaf += f'  remotes [ {{ url: "nats-leaf://127.0.0.1:{hub_leaf_port}" }} ]\n'
            # A quick reconnect keeps the test short; 2.9 reads only whole
            # seconds here and keeps its 1 s default.
            if which != "go29":
                leaf += '  reconnect: "250ms"\n'
        self.conf.write_text(
            f"server_name: {name}\nlisten: 127.0.0.1:{self.port}\n"
            f"http: 127.0.0.1:{self.http_port}\nleafnodes {{\n{leaf}}}\n"
        )
        self.proc = None
        self.start()

    def start(self):
        out = open(self.log, "ab")
        self.proc = subprocess.Popen(
            self.cmd + ["-c", str(self.conf)], stdout=out, stderr=subprocess.STDOUT
        )
        out.close()
        wait_serving(self.proc, self.cmd, self.http_port, 20)

    def stop(self):
        stop(self.proc)

    @property
    def url(self):
        return f"nats://127.0.0.1:{self.port}"

    def leafz(self):
        try:
            return http_json(self.http_port, "/leafz?subs=1")
        except OSError:
            return {}

    def has_interest(self, subject):
        """Whether a leaf connection of this server carries the peer's
        interest in `subject`."""
        return any(
            subject in (leaf.get("subscriptions_list") or [])
            for leaf in self.leafz().get("leafs") or []
        )


async def wait_for(what, cond, timeout=WAIT):
    """Polls `cond()` until it is true; fails naming `what` after
    `timeout` seconds."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def leafs(node, n):
    await wait_for(
        f"{n} leaf connection(s) on {node.which} :{node.port}",
        lambda: node.leafz().get("leafnodes") == n,
    )


async def interest(node, subject):
    """Waits until `node` has its peer's interest in `subject` across the
    link. This is also the barrier for a new subscription: nats-py's
    `flush()` is none, as its PING can overtake a SUB still waiting in the
    client's pending buffer."""
    await wait_for(
        f"interest in {subject} across the link of {node.which} :{node.port}",
        lambda: node.has_interest(subject),
    )


@pytest.fixture
def nodes(tmp_path):
    started = []

    def make(*args, **kw):
        n = Node(*args, **kw)
        started.append(n)
        return n

    yield make
    for n in started:
        n.stop()


async def pair(nodes, tmp_path, hub_which, edge_which):
    hub = nodes(hub_which, tmp_path, "hub", leaf_port=free_port())
    edge = nodes(edge_which, tmp_path, "edge", hub_leaf_port=hub.leaf_port)
    await leafs(hub, 1)
    await leafs(edge, 1)
    return hub, edge


async def crosses(pub, sub_client, sub_side_peer, subject, n=20):
    """`sub_client` subscribes to `subject`; once the publisher's server
    (`sub_side_peer`) has the interest, `pub` publishes `n` messages: all
    arrive, in order."""
    sub = await sub_client.subscribe(subject)
    await interest(sub_side_peer, subject)
    for i in range(n):
        await pub.publish(subject, f"m{i}".encode())
    await pub.flush()
    for i in range(n):
        assert (await sub.next_msg(WAIT)).data == f"m{i}".encode(), f"{subject} #{i}"
    await sub.unsubscribe()


async def serve(client, subject, peer, prefix):
    """A responder on `client` answering `prefix` + the request, once the
    other side's server `peer` has its interest."""

    async def answer(msg):
        await msg.respond(prefix + msg.data)

    await client.subscribe(subject, cb=answer)
    await interest(peer, subject)


async def exercise(hub, edge):
    ch = await nats.connect(hub.url)
    ce = await nats.connect(edge.url)
    try:
        # Sub on the hub, pub on the edge; then the reverse.
        await crosses(ce, ch, edge, "up.x")
        await crosses(ch, ce, hub, "down.x")
        # Request/reply with the responder on either side.
        await serve(ch, "svc.hub", edge, b"hub:")
        await serve(ce, "svc.edge", hub, b"edge:")
        for i in range(5):
            r = await ce.request("svc.hub", f"q{i}".encode(), timeout=WAIT)
            assert r.data == f"hub:q{i}".encode()
            r = await ch.request("svc.edge", f"q{i}".encode(), timeout=WAIT)
            assert r.data == f"edge:q{i}".encode()
    finally:
        await ch.close()
        await ce.close()


@pytest.mark.parametrize("hub_which", ["go", "go29"])
async def test_ours_as_edge_leaf_of_go_hub(nodes, tmp_path, hub_which):
    hub, edge = await pair(nodes, tmp_path, hub_which, "ours")
    await exercise(hub, edge)


@pytest.mark.parametrize("edge_which", ["go", "go29"])
async def test_go_edge_leaf_of_our_hub(nodes, tmp_path, edge_which):
    hub, edge = await pair(nodes, tmp_path, "ours", edge_which)
    await exercise(hub, edge)


@pytest.mark.parametrize(
    "hub_which,edge_which",
    [("go", "ours"), ("go29", "ours"), ("ours", "go"), ("ours", "go29")],
)
async def test_link_drops_and_returns(nodes, tmp_path, hub_which, edge_which):
    hub, edge = await pair(nodes, tmp_path, hub_which, edge_which)
    drops = []

    async def on_disconnect():
        drops.append(time.time())

    ce = await nats.connect(edge.url, disconnected_cb=on_disconnect)
    try:
        # A local-only subject, and interest the edge had before the drop
        # (subscribed last: once the hub sees it, the edge has both).
        local = await ce.subscribe("local.only")
        down = await ce.subscribe("down.again")
        await interest(hub, "down.again")

        hub.stop()
        await leafs(edge, 0)
        # The edge alone still serves its own clients.
        await ce.publish("local.only", b"alone")
        await ce.flush()
        assert (await local.next_msg(WAIT)).data == b"alone"

        # A new hub on the same leaf port: the edge reconnects and
        # re-sends its interest without its client doing anything.
        hub.start()
        await leafs(hub, 1)
        await leafs(edge, 1)
        await interest(hub, "down.again")
        ch = await nats.connect(hub.url)
        try:
            await ch.publish("down.again", b"back")
            await ch.flush()
            assert (await down.next_msg(WAIT)).data == b"back"
            await crosses(ce, ch, edge, "up.again")
        finally:
            await ch.close()
        assert ce.is_connected
        assert drops == []
    finally:
        await ce.close()
