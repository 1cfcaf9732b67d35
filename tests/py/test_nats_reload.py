"""Configuration reload seen through nats-py.

The server is `$LIFTBRIDGE_BIN nats-server -a 127.0.0.1 -c <file>` (or the
reference `$NATS_SERVER_BIN`, to check the test itself against nats-server).
A SIGHUP with a changed user list must not disturb a nats-py client whose
user is unchanged, while a removed user's connection is closed. Accounts
come and go on reload too: a removed account's clients are closed, an added
account's imports work, and the others' clients stay connected.
"""

import asyncio
import signal
import subprocess
import time

import nats
import pytest

from natsproc import free_port, http_json, ours_or_go, server_cmd, stop, wait_serving

pytestmark = pytest.mark.asyncio


def _conf(port, users):
    entries = ", ".join(f"{{user: {u}, password: {p}}}" for u, p in users)
    return f"port: {port}\nauthorization {{ users = [ {entries} ] }}\n"


def wait_logged(log, proc, text, count, timeout):
    """Waits until `log` holds `text` at least `count` times; fails if the
    server exits or `timeout` seconds pass first."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if log.exists() and log.read_text().count(text) >= count:
            return
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        time.sleep(0.02)
    raise AssertionError(f"{text!r} not logged:\n{log.read_text()}")


class ConfServer:
    def __init__(self, tmp_path, users):
        self.port = free_port()
        self.conf = tmp_path / "server.conf"
        self.log = tmp_path / "server.log"
        self.conf.write_text(_conf(self.port, users))
        cmd = server_cmd() + ["-a", "127.0.0.1", "-c", str(self.conf), "-l", str(self.log)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._wait_log("Server is ready", 1)

    def _wait_log(self, text, count):
        wait_logged(self.log, self.proc, text, count, 20)

    def reload(self, users):
        done = self.log.read_text().count("Reloaded server configuration")
        self.conf.write_text(_conf(self.port, users))
        self.proc.send_signal(signal.SIGHUP)
        self._wait_log("Reloaded server configuration", done + 1)

    @property
    def url(self):
        return f"nats://127.0.0.1:{self.port}"

    def stop(self):
        stop(self.proc)


async def test_reload_keeps_unaffected_client_and_drops_removed_user(tmp_path):
    srv = ConfServer(tmp_path, [("alice", "a"), ("bob", "b")])
    try:
        alice_drops = []
        bob_drops = []

        async def alice_dc():
            alice_drops.append(time.time())

        async def bob_dc():
            bob_drops.append(time.time())

        alice = await nats.connect(
            srv.url, user="alice", password="a", disconnected_cb=alice_dc
        )
        bob = await nats.connect(
            srv.url,
            user="bob",
            password="b",
            disconnected_cb=bob_dc,
            allow_reconnect=False,
        )
        got = asyncio.Queue()

        async def on_msg(msg):
            await got.put(msg.data)

        await alice.subscribe("news", cb=on_msg)
        await alice.flush()

        srv.reload([("alice", "a"), ("carl", "c")])

        # Bob's user is gone: his connection is closed.
        deadline = time.time() + 10
        while not bob.is_closed and time.time() < deadline:
            await asyncio.sleep(0.05)
        assert bob.is_closed
        assert bob_drops

        # Carl (added) publishes; Alice, never disconnected, receives.
        carl = await nats.connect(srv.url, user="carl", password="c", allow_reconnect=False)
        await carl.publish("news", b"after reload")
        await carl.flush()
        assert await asyncio.wait_for(got.get(), 10) == b"after reload"
        assert alice.is_connected
        assert alice_drops == []
        await carl.close()
        await alice.close()
    finally:
        srv.stop()


ACCOUNTS = """
listen: 127.0.0.1:{port}
http: 127.0.0.1:{http}
accounts {{
{accounts}
}}
"""

A = """  A {
    users: [ {user: a, password: apw} ]
    exports: [ {stream: "pub.>"}, {service: "req.>"} ]
  }"""
B = """  B {
    users: [ {user: b, password: bpw} ]
  }"""
C = """  C {
    users: [ {user: c, password: cpw} ]
    imports: [
      {stream: {account: A, subject: "pub.>"}, prefix: "froma"}
      {service: {account: A, subject: "req.echo"}, to: "echo"}
    ]
  }"""


async def serve_echo(nc):
    """Answers requests on `req.echo` with `echo:` and the request."""

    async def echo(msg):
        await msg.respond(b"echo:" + msg.data)

    await nc.subscribe("req.echo", cb=echo)
    await nc.flush()


async def test_reload_adds_and_removes_accounts(tmp_path, which):
    """Accounts change on reload: B (with its user) goes, C comes with
    imports of A's stream and service. A's client is never disconnected
    and keeps its subscription; B's client is closed; C's users log in and
    get A's messages and answers; `/accountz` lists C and no longer B. A
    reload whose import names an account that does not exist is refused and
    changes nothing."""
    cmd = ours_or_go(which)
    port, http = free_port(), free_port()
    conf = tmp_path / "accounts.conf"
    log = tmp_path / "server.log"

    def write(*accounts):
        conf.write_text(ACCOUNTS.format(port=port, http=http, accounts="\n".join(accounts)))

    write(A, B)
    proc = subprocess.Popen(
        cmd + ["-c", str(conf), "-l", str(log)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_serving(proc, cmd, http, 20)
        url = f"nats://127.0.0.1:{port}"
        a_drops = []

        async def a_dc():
            a_drops.append(time.time())

        a = await nats.connect(url, user="a", password="apw", disconnected_cb=a_dc)
        b = await nats.connect(url, user="b", password="bpw", allow_reconnect=False)
        own = await a.subscribe("own")
        await serve_echo(a)

        def reloaded():
            return log.read_text().count("Reloaded server configuration")

        def reload(*accounts):
            done = reloaded()
            write(*accounts)
            proc.send_signal(signal.SIGHUP)
            wait_logged(log, proc, "Reloaded server configuration", done + 1, 10)

        reload(A, C)
        deadline = time.time() + 10
        while not b.is_closed and time.time() < deadline:
            await asyncio.sleep(0.05)
        assert b.is_closed, "B's user is gone with its account"

        c = await nats.connect(url, user="c", password="cpw", allow_reconnect=False)
        sub = await c.subscribe("froma.pub.x")
        await c.flush()
        # A new account's stream import: A's message reaches C under the
        # prefix (nats-server wires the import's interest asynchronously,
        # so publish until it arrives).
        got = None
        deadline = time.monotonic() + 5
        while got is None and time.monotonic() < deadline:
            await a.publish("pub.x", b"hello")
            await a.flush()
            try:
                got = await sub.next_msg(0.2)
            except nats.errors.TimeoutError:
                pass
        assert got is not None and got.data == b"hello"
        # Its service import is served by A's responder. nats-server 2.15.1
        # answers "no responders" here until it restarts (a service import
        # of an account that a reload added is not wired, even for
        # responders that subscribe after the reload), so this part holds
        # for ours only; with the same accounts at start-up Go answers too
        # (test_service_import_of_a_start_up_account below).
        if which == "ours":
            assert (await c.request("echo", b"ping", timeout=2)).data == b"echo:ping"

        # A was never disconnected and its own subscription still works.
        await a.publish("own", b"mine")
        await a.flush()
        assert (await own.next_msg(5)).data == b"mine"
        assert a.is_connected and a_drops == []

        names = http_json(http, "/accountz")["accounts"]
        assert "C" in names and "A" in names and "B" not in names, names

        # B is gone: its user cannot log in.
        with pytest.raises(Exception):
            await nats.connect(
                url, user="b", password="bpw", allow_reconnect=False, max_reconnect_attempts=0
            )

        # An import from an account that does not exist: refused (the
        # failure is logged), nothing changes.
        bad_import = f"{A}\n{C}\n  D {{\n    users: [ {{user: d, password: dpw}} ]\n    imports: [ {{stream: {{account: Z, subject: \"x\"}}}} ]\n  }}"
        done = reloaded()
        write(bad_import)
        proc.send_signal(signal.SIGHUP)
        wait_logged(log, proc, "Failed to reload server configuration", 1, 10)
        assert reloaded() == done, "an invalid configuration is not applied"
        assert proc.poll() is None, "the server keeps running"
        assert "C" in http_json(http, "/accountz")["accounts"]
        assert c.is_connected and a.is_connected
        await c.close()
        await a.close()
    finally:
        stop(proc)


async def test_service_import_of_a_start_up_account(tmp_path, which):
    """The same accounts as the reload test, present from start-up: C's
    service import is answered by A's responder on both servers, so the
    reload test's service check compares like with like."""
    cmd = ours_or_go(which)
    port, http = free_port(), free_port()
    conf = tmp_path / "accounts.conf"
    conf.write_text(ACCOUNTS.format(port=port, http=http, accounts=A + "\n" + C))
    proc = subprocess.Popen(
        cmd + ["-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_serving(proc, cmd, http, 20)
        url = f"nats://127.0.0.1:{port}"
        a = await nats.connect(url, user="a", password="apw")
        await serve_echo(a)
        c = await nats.connect(url, user="c", password="cpw")
        assert (await c.request("echo", b"ping", timeout=2)).data == b"echo:ping"
        await c.close()
        await a.close()
    finally:
        stop(proc)
