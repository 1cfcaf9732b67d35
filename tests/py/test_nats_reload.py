"""Configuration reload seen through nats-py.

The server is `$LIFTBRIDGE_BIN nats-server -a 127.0.0.1 -c <file>` (or the
reference `$NATS_SERVER_BIN`, to check the test itself against nats-server).
A SIGHUP with a changed user list must not disturb a nats-py client whose
user is unchanged, while a removed user's connection is closed.
"""

import asyncio
import signal
import subprocess
import time

import nats
import pytest

from natsproc import free_port, server_cmd, stop

pytestmark = pytest.mark.asyncio


def _conf(port, users):
    entries = ", ".join(f"{{user: {u}, password: {p}}}" for u, p in users)
    return f"port: {port}\nauthorization {{ users = [ {entries} ] }}\n"


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
        deadline = time.time() + 20
        while time.time() < deadline:
            if self.log.exists() and self.log.read_text().count(text) >= count:
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}")
            time.sleep(0.02)
        raise AssertionError(f"{text!r} not logged:\n{self.log.read_text()}")

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
