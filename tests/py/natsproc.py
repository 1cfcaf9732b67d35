"""NATS server processes for the nats-py tests (test_nats_core,
test_nats_reload, test_nats_accounts): free ports, the server command
(our binary in nats-server mode, or the reference `$NATS_SERVER_BIN`),
the monitoring port's JSON, waiting until a server serves, and stopping it;
a nats-py barrier (`sync`) and the account isolation check the account and
JWT tests share.
"""

import json
import os
import socket
import subprocess
import time
import urllib.request


_PORT_LOW, _PORT_SPAN = 10_000, 22_000
_port_next = [(os.getpid() * 7919 + time.time_ns()) % _PORT_SPAN]


def free_port():
    """A free port on 127.0.0.1 below the kernel's ephemeral range
    (32768-60999), so no outgoing connection takes it as its source port
    between this pick and the server's bind; never the same port twice in
    one run."""
    for _ in range(_PORT_SPAN):
        port = _PORT_LOW + _port_next[0] % _PORT_SPAN
        _port_next[0] += 1
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free loopback port")


def server_cmd():
    """`$NATS_SERVER_BIN` when set (to check a test against nats-server),
    else `$LIFTBRIDGE_BIN nats-server` (default target/debug/liftbridge)."""
    ref = os.environ.get("NATS_SERVER_BIN")
    if ref:
        return [ref]
    return [os.environ.get("LIFTBRIDGE_BIN", "target/debug/liftbridge"), "nats-server"]


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def ours_or_go(which):
    """The command of `which` server for tests run against both: "go" is
    nats-server 2.15.1 from `.venv` (CI installs it from requirements.txt, so
    missing is a failure), anything else our binary in nats-server mode."""
    if which == "go":
        go = os.path.join(ROOT, ".venv", "bin", "nats-server")
        assert os.path.exists(go), f"{go} missing: run scripts/test.sh"
        return [go]
    ours = os.environ.get("LIFTBRIDGE_BIN") or os.path.join(ROOT, "target", "debug", "liftbridge")
    return [ours, "nats-server"]


def http_json(port, path):
    """GET `path` on the monitoring port 127.0.0.1:`port`, as JSON."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
        return json.loads(r.read())


def wait_serving(proc, cmd, http_port, timeout):
    """Waits until `/varz` answers on `http_port`; the process exiting or
    the timeout passing raises."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            http_json(http_port, "/varz")
            return
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"{cmd} exited with {proc.returncode}")
            time.sleep(0.05)
    raise RuntimeError(f"{cmd} did not come up")


def stop(proc, timeout=5):
    """SIGTERM, then SIGKILL after `timeout` seconds."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def sync(nc):
    """Returns once the server has processed everything nats-py client `nc`
    sent before, and `nc` has handled the server's answers to it (`-ERR`s
    reach the error callback). One `flush()` is not enough: nats-py 2.16
    writes its PING straight to the socket, ahead of commands still in its
    pending buffer; by the first PONG its flusher task (woken by that flush)
    has written them, so the second PING follows them."""
    await nc.flush()
    await nc.flush()


async def assert_isolated(a, b, subject="iso.x"):
    """Clients `a` and `b` (nats-py, in two accounts) both subscribe to
    `subject`; A publishes, then B. A's message is processed (`sync`)
    before B's, so a leak between the accounts would reach B's subscriber
    first: each must see its own message first."""
    sa = await a.subscribe(subject)
    sb = await b.subscribe(subject)
    await sync(a)
    await sync(b)
    await a.publish(subject, b"fromA")
    await sync(a)
    await b.publish(subject, b"fromB")
    await sync(b)
    assert (await sb.next_msg(5)).data == b"fromB"
    assert (await sa.next_msg(5)).data == b"fromA"
