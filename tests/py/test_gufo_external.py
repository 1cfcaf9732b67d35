"""gufo-liftbridge 0.2.0 against a liftbridge node in external NATS mode.

The node runs with `nats.servers: [a Go nats-server]` (Debian's 2.9.10) and
no NATS port of its own; nats-py publishes plain messages on the external
server and gufo reads them back, and gufo's acked bulk publish is acked.
"""

import asyncio
import os
import subprocess
import time

import nats
import pytest
from gufo.liftbridge.client import LiftbridgeClient
from gufo.liftbridge.types import StartPosition

from test_gufo_harness import free_port, subscribe_n, wait_port

GO_NATS = "/usr/sbin/nats-server"


@pytest.fixture
def external(tmp_path):
    assert os.path.exists(GO_NATS), f"{GO_NATS} is missing: apt-get install nats-server"
    nats_port = free_port()
    go = subprocess.Popen(
        [GO_NATS, "-a", "127.0.0.1", "-p", str(nats_port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_port(nats_port, go)
    url = f"nats://127.0.0.1:{nats_port}"
    grpc_port = free_port()
    config = tmp_path / "liftbridge.yml"
    config.write_text(
        f"listen: 127.0.0.1:{grpc_port}\n"
        "http.listen: 127.0.0.1:0\n"
        f"nats.servers: [{url}]\n"
    )
    log_path = tmp_path / "server.log"
    log = open(log_path, "ab")
    binary = os.environ.get("LIFTBRIDGE_BIN", "target/debug/liftbridge")
    lb = subprocess.Popen(
        [binary, "-c", str(config), "-d", str(tmp_path / "data"), "--raft-bootstrap-seed"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.time() + 30
    ready = f"serving gRPC on 127.0.0.1:{grpc_port}"
    while ready not in log_path.read_text(errors="replace"):
        assert lb.poll() is None, log_path.read_text(errors="replace")
        assert time.time() < deadline, log_path.read_text(errors="replace")
        time.sleep(0.05)
    try:
        yield url, f"127.0.0.1:{grpc_port}"
    finally:
        for p in (lb, go):
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        log.close()


@pytest.mark.asyncio
async def test_gufo_reads_what_the_external_nats_system_carries(external):
    url, grpc = external
    async with LiftbridgeClient([grpc]) as client:
        await client.create_stream("ext", subject="ext.subj", wait_for_stream=True)
        nc = await nats.connect(url)
        # The node's subscription reaches the external server shortly after
        # the partition starts: probe until one is recorded.
        deadline = time.time() + 20
        while (await client.get_partition_metadata("ext", 0)).newest_offset < 0:
            assert time.time() < deadline, "nothing recorded from the external server"
            await nc.publish("ext.subj", b"probe")
            await nc.flush()
            await asyncio.sleep(0.2)
        for i in range(100):
            await nc.publish("ext.subj", f"v{i}".encode())
        await nc.flush()
        await nc.close()

        reqs = [client.get_publish_request(f"bulk-{i}".encode(), stream="ext", partition=0) for i in range(5)]
        acks = [a async for a in client.publish_bulk(reqs)]
        assert len(acks) == 5

        deadline = time.time() + 20
        while True:
            newest = (await client.get_partition_metadata("ext", 0)).newest_offset
            probes = newest + 1 - 105
            if probes >= 1:
                break
            assert time.time() < deadline, f"newest offset {newest}"
            await asyncio.sleep(0.1)
        msgs = await subscribe_n(client, newest + 1, 20, stream="ext", partition=0, start_position=StartPosition.EARLIEST)
        values = [m.value for m in msgs]
        assert [v for v in values if v.startswith(b"v")] == [f"v{i}".encode() for i in range(100)]
        assert [v for v in values if v.startswith(b"bulk-")] == [f"bulk-{i}".encode() for i in range(5)]
        assert msgs[-1].headers["subject"] == b"ext.subj"
