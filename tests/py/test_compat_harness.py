"""nats-server compatibility as seen by Python client test harnesses.

Two launch styles, both against our binary (LIFTBRIDGE_BIN) through a
`nats-server` symlink first on PATH:

* nats.py's legacy NATSD harness: `nats-server -p P -m M -a 127.0.0.1
  [--user U --pass P] [--auth T]`, readiness by polling GET /varz on M;
* the newer `nats-server` Python package: `nats-server --addr H --port -1`
  via asyncio.create_subprocess_exec, readiness from the stderr log lines
  `Listening for client connections on (.+):(\\d+)` and `Server is ready`,
  stopped with SIGTERM, lame duck with SIGUSR2.

Then nats-py talks to it and the monitoring counters are checked the way
nats.py's own tests check them.
"""

import asyncio
import json
import os
import re
import signal
import subprocess
import time
import urllib.request

import nats
import pytest
from natsproc import free_port

BIN = os.environ.get("LIFTBRIDGE_BIN") or os.path.join(
    os.path.dirname(__file__), "..", "..", "target", "debug", "liftbridge"
)

LISTEN_RE = re.compile(r"Listening for client connections on (.+):(\d+)")
READY_RE = re.compile(r"Server is ready")


def _reference():
    """Debian's nats-server (the reference behaviour), when installed."""
    for d in ("/usr/sbin", "/usr/bin"):
        p = os.path.join(d, "nats-server")
        if os.path.isfile(p) and not os.path.islink(p):
            return p
    return None


# Every test runs against our binary and, when it is installed (scripts/test.sh
# installs it), against the reference server too: the same assertions must
# hold for both, which keeps the tests honest about nats-server behaviour.
IMPLS = [("liftbridge", BIN)] + ([("reference", _reference())] if _reference() else [])


@pytest.fixture(params=IMPLS, ids=[name for name, _ in IMPLS])
def path_env(request, tmp_path):
    """A PATH whose first entry holds a `nats-server` symlink to the binary under test."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    os.symlink(os.path.abspath(request.param[1]), bindir / "nats-server")
    env = dict(os.environ)
    env["PATH"] = f"{bindir}:{env.get('PATH', '')}"
    return env




class NATSD:
    """The legacy harness: fixed ports chosen up front, /varz polling."""

    def __init__(self, env, user=None, password=None, token=None):
        self.port = free_port()
        self.http_port = free_port()
        args = ["nats-server", "-p", str(self.port), "-m", str(self.http_port), "-a", "127.0.0.1"]
        if user:
            args += ["--user", user]
        if password:
            args += ["--pass", password]
        if token:
            args += ["--auth", token]
        self.proc = subprocess.Popen(
            args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        for _ in range(100):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/varz", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("server not ready on /varz")

    def monitor(self, path):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}{path}", timeout=5) as r:
            assert r.headers["Content-Type"].startswith("application/json")
            return json.loads(r.read())

    def stop(self):
        # The legacy harness kills the server.
        self.proc.kill()
        self.proc.wait()


@pytest.mark.asyncio
async def test_compat_legacy_harness_pubsub_and_varz_counters(path_env):
    srv = NATSD(path_env)
    try:
        nc = await nats.connect(f"nats://127.0.0.1:{srv.port}")
        got = []
        done = asyncio.Event()

        async def cb(msg):
            got.append(msg.data)
            if len(got) == 100:
                done.set()

        await nc.subscribe("help", cb=cb)
        await nc.flush()
        for _ in range(100):
            await nc.publish("help", b"A")
        await nc.flush()
        await asyncio.wait_for(done.wait(), 5)
        assert got == [b"A"] * 100

        varz = srv.monitor("/varz")
        assert varz["in_msgs"] == 100
        assert varz["in_bytes"] == 100
        assert varz["out_msgs"] == 100
        assert varz["out_bytes"] == 100
        connz = srv.monitor("/connz")
        conn = connz["connections"][0]
        assert conn["in_msgs"] == 100
        assert conn["in_bytes"] == 100
        assert conn["out_msgs"] == 100
        assert conn["subscriptions"] == 1
        assert conn["lang"] == "python3"
        assert nc.connected_server_version.major == 2
        await nc.close()
    finally:
        srv.stop()


@pytest.mark.asyncio
async def test_compat_legacy_harness_user_pass(path_env):
    srv = NATSD(path_env, user="foo", password="bar")
    try:
        nc = await nats.connect(f"nats://foo:bar@127.0.0.1:{srv.port}")
        assert nc.is_connected
        await nc.close()
        with pytest.raises(Exception) as e:
            await nats.connect(
                f"nats://foo:wrong@127.0.0.1:{srv.port}",
                allow_reconnect=False,
                connect_timeout=2,
            )
        assert "authorization" in str(e.value).lower() or isinstance(
            e.value, nats.errors.NoServersError
        )
    finally:
        srv.stop()


@pytest.mark.asyncio
async def test_compat_legacy_harness_token(path_env):
    srv = NATSD(path_env, token="secret")
    try:
        nc = await nats.connect(f"nats://127.0.0.1:{srv.port}", token="secret")
        sub = await nc.subscribe("t")
        await nc.publish("t", b"ok")
        msg = await sub.next_msg(timeout=5)
        assert msg.data == b"ok"
        await nc.close()
        errors = []

        async def err_cb(e):
            errors.append(e)

        with pytest.raises(Exception):
            await nats.connect(
                f"nats://127.0.0.1:{srv.port}",
                token="nope",
                allow_reconnect=False,
                connect_timeout=2,
                error_cb=err_cb,
            )
        assert any("authorization" in str(e).lower() for e in errors), errors
    finally:
        srv.stop()


async def start_new_style(env, *extra):
    """As the `nats-server` Python package does: exec from PATH, parse stderr."""
    proc = await asyncio.create_subprocess_exec(
        "nats-server",
        "--addr",
        "127.0.0.1",
        "--port",
        "-1",
        *extra,
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    host = port = None
    fatal = []
    lines = []
    async def read():
        nonlocal host, port
        while True:
            raw = await proc.stderr.readline()
            if not raw:
                raise RuntimeError(f"server exited: {lines} {fatal}")
            line = raw.decode()
            lines.append(line)
            if "[FTL]" in line:
                fatal.append(line)
            m = LISTEN_RE.search(line)
            if m:
                host, port = m.group(1), int(m.group(2))
            if READY_RE.search(line):
                return

    await asyncio.wait_for(read(), 20)
    assert not fatal
    # Every line is in nats-server's format.
    for line in lines:
        assert re.match(r"^\[\d+\] \d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{6} \[(INF|WRN|DBG|TRC|ERR)\] ", line), line
    return proc, host, port


@pytest.mark.asyncio
async def test_compat_new_harness_stderr_readiness_and_sigterm(path_env):
    proc, host, port = await start_new_style(path_env, "--jetstream", "--server_name", "py1")
    try:
        assert host == "127.0.0.1"
        assert port > 0
        nc = await nats.connect(f"nats://{host}:{port}")
        assert nc._server_info["server_name"] == "py1"
        async def responder(m):
            await m.respond(b"pong")

        resp_sub = await nc.subscribe("svc", cb=responder)
        await nc.flush()
        reply = await nc.request("svc", b"ping", timeout=5)
        assert reply.data == b"pong"
        await resp_sub.unsubscribe()
        await nc.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = await asyncio.wait_for(proc.wait(), 5)
    # nats-server 2.9.10 exits with status 1 after SIGTERM.
    assert rc == 1


@pytest.mark.asyncio
async def test_compat_new_harness_lame_duck_sigusr2(path_env):
    proc, host, port = await start_new_style(path_env)
    try:
        ldm = asyncio.Event()

        async def on_ldm():
            ldm.set()

        nc = await nats.connect(
            f"nats://{host}:{port}", lame_duck_mode_cb=on_ldm, allow_reconnect=False
        )
        proc.send_signal(signal.SIGUSR2)
        await asyncio.wait_for(ldm.wait(), 5)
        await nc.close()
    finally:
        proc.kill()
        await proc.wait()


def user_nkey():
    """A fresh user nkey pair: (seed string, public key string)."""
    import nkeys

    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    return seed.decode(), nkeys.from_seed(seed).public_key.decode()


@pytest.mark.asyncio
async def test_compat_config_nkeys_and_permissions(path_env, tmp_path):
    """As nats.py's ClientNkeysAuthTest: a config file with nkey users; the
    client signs the INFO nonce with its seed. Plus per-user permissions."""
    seed, pub = user_nkey()
    other_seed, _ = user_nkey()
    seed_file = tmp_path / "user.nk"
    seed_file.write_text(seed)
    conf = tmp_path / "nkeys.conf"
    conf.write_text(
        "authorization {\n"
        "  users = [\n"
        f"    {{ nkey: {pub}, permissions: {{ publish: \"ok.>\", subscribe: {{ allow: \"ok.>\", deny: \"ok.secret\" }} }} }}\n"
        "  ]\n"
        "}\n"
    )
    proc, host, port = await start_new_style(path_env, "--config", str(conf))
    try:
        errors = []

        async def err_cb(e):
            errors.append(str(e))

        nc = await nats.connect(f"nats://{host}:{port}", nkeys_seed=str(seed_file), error_cb=err_cb)
        sub = await nc.subscribe("ok.>")
        await nc.publish("ok.a", b"1")
        msg = await sub.next_msg(timeout=5)
        assert msg.subject == "ok.a"
        # Publishing outside the allow list is refused by the server.
        await nc.publish("nope", b"x")
        await nc.subscribe("ok.secret")
        await nc.flush()
        for _ in range(50):
            if len(errors) >= 2:
                break
            await asyncio.sleep(0.05)
        text = " ".join(errors).lower()
        assert 'permissions violation for publish to "nope"' in text, errors
        assert 'permissions violation for subscription to "ok.secret"' in text, errors
        await nc.close()

        with pytest.raises(Exception):
            await nats.connect(
                f"nats://{host}:{port}",
                nkeys_seed_str=other_seed,
                allow_reconnect=False,
                connect_timeout=2,
            )
    finally:
        proc.kill()
        await proc.wait()
