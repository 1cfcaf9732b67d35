"""gufo-liftbridge 0.2.0 against the real liftbridge binary."""

import asyncio
import time

import pytest
from gufo.liftbridge.client import LiftbridgeClient
from gufo.liftbridge.types import StartPosition

from test_gufo_harness import subscribe_n


async def collect(client, n, **kw):
    return await subscribe_n(client, n, 10, **kw)


@pytest.mark.asyncio
async def test_gufo_stream_publish_subscribe_cursor_delete(server):
    async with LiftbridgeClient([server.grpc]) as client:
        await client.create_stream("gufo", subject="gufo.subj", partitions=2, wait_for_stream=True)

        # Single publishes (gufo sets no deadline: the server fire-and-forgets).
        for i in range(3):
            await client.publish(f"msg-{i}".encode(), stream="gufo", partition=0, key=b"k", headers={"h": b"v"})

        # Bulk publish through PublishAsync, acks come back.
        reqs = [client.get_publish_request(f"bulk-{i}".encode(), stream="gufo", partition=0) for i in range(20)]
        acks = [a async for a in client.publish_bulk(reqs)]
        assert len(acks) == 20

        msgs = await collect(client, 23, stream="gufo", partition=0, start_position=StartPosition.EARLIEST)
        assert [m.offset for m in msgs] == list(range(23))
        assert msgs[0].value == b"msg-0"
        assert msgs[0].key == b"k"
        assert msgs[0].headers["h"] == b"v"
        assert msgs[0].headers["subject"] == b"gufo.subj"
        assert msgs[3].value == b"bulk-0"

        # From an offset.
        msgs = await collect(client, 2, stream="gufo", partition=0, start_position=StartPosition.OFFSET, start_offset=21)
        assert [m.value for m in msgs] == [b"bulk-18", b"bulk-19"]

        # From a timestamp in the middle (gufo takes seconds as float).
        all_msgs = await collect(client, 23, stream="gufo", partition=0, start_position=StartPosition.EARLIEST)
        mid = all_msgs[10]
        msgs = await collect(
            client,
            1,
            stream="gufo",
            partition=0,
            start_position=StartPosition.TIMESTAMP,
            start_timestamp=mid.timestamp / 1e9 - 1e-6,
        )
        assert msgs[0].offset <= mid.offset

        # Partition metadata.
        pm = await client.get_partition_metadata("gufo", 0)
        assert pm.newest_offset == 22
        assert pm.high_watermark == 22

        meta = await client.get_metadata()
        assert any(s.name == "gufo" for s in meta.metadata)
        assert meta.brokers[0].host == "127.0.0.1"

        # Cursors (gufo stores offset + 1).
        assert await client.get_cursor("gufo", 0, "reader") == -1
        await client.set_cursor("gufo", 0, "reader", 41)
        assert await client.get_cursor("gufo", 0, "reader") == 42

        await client.delete_stream("gufo")
        meta = await client.get_metadata()
        assert not any(s.name == "gufo" for s in meta.metadata)
