"""NATS accounts seen through nats-py, with one config file run by our
binary (`liftbridge nats-server -c`) and by Go nats-server 2.15.1
(`.venv/bin/nats-server`): the same test body must pass against both.

Checks: isolation between accounts, a stream import with a prefix, a
service import with a request/reply round trip (`_R_` reply mapping),
`no_auth_user` binding anonymous clients to an account's user, per-user
permissions inside an account, and `/connz?auth=1` / `/accountz`.
"""

import asyncio
import os
import subprocess
import tempfile
import time

import nats
import pytest

from natsproc import assert_isolated, free_port, http_json, ours_or_go, stop, wait_serving

pytestmark = pytest.mark.asyncio


CONF = """
listen: 127.0.0.1:{port}
http: 127.0.0.1:{http}
accounts {{
  A {{
    users: [ {{user: a, password: apw}} ]
    exports: [ {{stream: "pub.>"}}, {{service: "req.>"}} ]
  }}
  B {{
    users: [ {{user: b, password: bpw}} ]
    imports: [
      {{stream: {{account: A, subject: "pub.>"}}, prefix: "froma"}}
      {{service: {{account: A, subject: "req.echo"}}, to: "local.echo"}}
    ]
  }}
  C {{
    users: [ {{user: c, password: cpw, permissions: {{publish: "ok.>", subscribe: "ok.>"}}}} ]
  }}
}}
no_auth_user: b
"""


class Server:
    def __init__(self, which):
        cmd = ours_or_go(which)
        self.port, self.http = free_port(), free_port()
        self.dir = tempfile.TemporaryDirectory()
        conf = os.path.join(self.dir.name, "accounts.conf")
        with open(conf, "w") as f:
            f.write(CONF.format(port=self.port, http=self.http))
        self.proc = subprocess.Popen(
            cmd + ["-c", conf], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_serving(self.proc, cmd, self.http, 20)

    def url(self, user=None, pw=None):
        auth = f"{user}:{pw}@" if user else ""
        return f"nats://{auth}127.0.0.1:{self.port}"

    def get(self, path):
        return http_json(self.http, path)

    def stop(self):
        stop(self.proc, 10)
        self.dir.cleanup()


async def request_served(nc, subject, data):
    """A request through a service import. nats-server may answer "no
    responders" for a moment after the exporter's responder subscribed
    (the import's interest is wired asynchronously there), so that answer
    is retried for up to 5 s; any other failure fails the test."""
    deadline = time.monotonic() + 5
    while True:
        try:
            return await nc.request(subject, data, timeout=5)
        except nats.errors.NoRespondersError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


@pytest.fixture(params=["ours", "go"])
def srv(request):
    s = Server(request.param)
    yield s
    s.stop()


async def test_accounts_isolate_import_and_export(srv):
    a = await nats.connect(srv.url("a", "apw"))
    b = await nats.connect(srv.url("b", "bpw"))
    anon = await nats.connect(srv.url())
    errors = []

    async def on_err(e):
        errors.append(str(e))

    c = await nats.connect(srv.url("c", "cpw"), error_cb=on_err, allow_reconnect=False)
    try:
        await assert_isolated(a, b)

        # Stream import with a prefix; the anonymous client is in B.
        s1 = await b.subscribe("froma.pub.>")
        s2 = await anon.subscribe("froma.pub.>")
        await b.flush()
        await anon.flush()
        await a.publish("pub.x", b"streamed")
        await a.flush()
        m1, m2 = await s1.next_msg(5), await s2.next_msg(5)
        assert (m1.subject, m1.data) == ("froma.pub.x", b"streamed")
        assert m2.subject == "froma.pub.x"

        # Service import: request in B, responder in A sees an _R_ reply.
        seen = []

        async def echo(m):
            seen.append(m.reply)
            await a.publish(m.reply, b"echo:" + m.data)

        await a.subscribe("req.echo", cb=echo)
        await a.flush()
        r = await request_served(b, "local.echo", b"ping")
        assert r.data == b"echo:ping"
        assert seen and seen[0].startswith("_R_."), seen
        # Anonymous clients use the import too (they are b).
        r = await request_served(anon, "local.echo", b"anon")
        assert r.data == b"echo:anon"

        # Permissions inside an account.
        await c.publish("nope", b"x")
        await c.flush()
        deadline = time.time() + 5
        while not errors and time.time() < deadline:
            await asyncio.sleep(0.05)
        # nats-py reports the server's -ERR text lower-cased.
        assert any('permissions violation for publish to "nope"' in e.lower() for e in errors), errors

        # Monitoring.
        conns = srv.get("/connz?auth=1")["connections"]
        by_user = {}
        for conn in conns:
            by_user.setdefault(conn.get("authorized_user"), []).append(conn.get("account"))
        assert by_user["a"] == ["A"]
        assert by_user["b"] == ["B", "B"]
        assert by_user["c"] == ["C"]
        names = srv.get("/accountz")["accounts"]
        assert {"A", "B", "C", "$G", "$SYS"} <= set(names)
        detail = srv.get("/accountz?acc=B")["account_detail"]
        assert detail["account_name"] == "B"
        imports = sorted(
            (i["type"], i["subject"]) for i in detail["imports"] if i["account"] != "$SYS"
        )
        assert imports == [("service", "req.echo"), ("stream", "pub.>")]
    finally:
        for conn in (a, b, anon, c):
            if not conn.is_closed:
                await conn.close()
