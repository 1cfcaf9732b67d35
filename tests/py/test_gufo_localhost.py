"""gufo-liftbridge against a node with neither `listen` nor `host`
configured: the node advertises `localhost` (as Liftbridge does) and
listens on all interfaces of both address families. gufo resolves broker
hosts from the metadata itself (IPv4 addresses only) and sends publishes
and subscriptions to the partition leader found that way, so every call
below goes through the advertised `localhost`.
"""

import pytest
from gufo.liftbridge.client import LiftbridgeClient
from gufo.liftbridge.types import StartPosition

from test_gufo_harness import Server, subscribe_n


@pytest.fixture
def default_listen_server(tmp_path):
    s = Server(str(tmp_path), listen=False).start()
    yield s
    s.stop()


@pytest.mark.asyncio
async def test_gufo_follows_the_advertised_localhost(default_listen_server):
    srv = default_listen_server
    async with LiftbridgeClient([f"localhost:{srv.grpc_port}"]) as client:
        meta = await client.get_metadata()
        assert [(b.host, b.port) for b in meta.brokers] == [("localhost", srv.grpc_port)]
        await client.create_stream("lh", subject="lh.subj", partitions=1, wait_for_stream=True)
        await client.publish(b"m0", stream="lh", partition=0)
        reqs = [client.get_publish_request(f"m{i}".encode(), stream="lh", partition=0) for i in (1, 2)]
        acks = [a async for a in client.publish_bulk(reqs)]
        assert len(acks) == 2
        msgs = await subscribe_n(client, 3, 10, stream="lh", partition=0, start_position=StartPosition.EARLIEST)
        assert [m.value for m in msgs] == [b"m0", b"m1", b"m2"]
        assert [m.offset for m in msgs] == [0, 1, 2]
