"""The stenographer: plain NATS publishes recorded and replayed."""

import asyncio

import nats
import pytest
from gufo.liftbridge.client import LiftbridgeClient
from gufo.liftbridge.types import StartPosition

from test_gufo_harness import subscribe_n

N = 100_000


async def replay(client, n, **kw):
    return await subscribe_n(client, n, 120, **kw)


@pytest.mark.asyncio
async def test_steno_records_100k_plain_nats_messages(server):
    async with LiftbridgeClient([server.grpc]) as client:
        await client.create_stream("steno", subject="sensors.*", wait_for_stream=True)
        nc = await nats.connect(server.nats)
        for i in range(N):
            await nc.publish(f"sensors.s{i % 3}", str(i).encode())
        await nc.flush()
        await nc.close()

        msgs = await replay(client, N, stream="steno", partition=0, start_position=StartPosition.EARLIEST)
        assert [m.offset for m in msgs] == list(range(N))
        for i, m in enumerate(msgs):
            assert m.value == str(i).encode()
            assert m.headers["subject"] == f"sensors.s{i % 3}".encode()
        # Timestamps never go backwards, so a timestamp replay starts in the middle.
        mid = msgs[N // 2]
        assert all(a.timestamp <= b.timestamp for a, b in zip(msgs, msgs[1:]))
        tail = await replay(
            client,
            10,
            stream="steno",
            partition=0,
            start_position=StartPosition.TIMESTAMP,
            # gufo passes seconds as a float (about 0.25 µs of precision at
            # today's epoch): step back 1 µs so rounding cannot skip mid's batch.
            start_timestamp=mid.timestamp / 1e9 - 1e-6,
        )
        first = tail[0].offset
        assert 0 < first <= mid.offset
        assert msgs[first].timestamp >= mid.timestamp - 2_000
        assert msgs[first - 1].timestamp < mid.timestamp - 500
        assert [m.offset for m in tail] == list(range(first, first + 10))
