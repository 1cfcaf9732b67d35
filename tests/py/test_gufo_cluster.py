"""gufo-liftbridge 0.2.0 against a 3-node liftbridge cluster.

Three real nodes started as the single-node suite starts one (the
`Server` of test_gufo_harness), meshed by NATS routes and bootstrapping
one metadata group from the list of their ids. gufo sees the three brokers,
publishes (AckPolicy ALL) and subscribes through the partition leader,
stores and fetches a cursor through the leader of `__cursors`, and a
subscription and the cursor survive the kill of the stream's leader
(gufo follows metadata from the node it is seeded with; see the test for
why the killed node is restarted).
"""

import asyncio
import os
import time

import pytest
from gufo.liftbridge.client import LiftbridgeClient
from gufo.liftbridge.types import AckPolicy, StartPosition

from test_gufo_harness import Server, free_port

IDS = ["gc-a", "gc-b", "gc-c"]


def start_cluster(tmp_path):
    cluster_ports = [free_port() for _ in IDS]
    namespace = f"gc{os.getpid()}{int(time.time() * 1000) % 100000}"
    nodes = []
    for i, node_id in enumerate(IDS):
        routes = ", ".join(f"nats-route://127.0.0.1:{p}" for j, p in enumerate(cluster_ports) if j != i)
        extra = (
            f"clustering.server.id: {node_id}\n"
            f"clustering.namespace: {namespace}\n"
            f"clustering.raft.bootstrap.peers: [{', '.join(IDS)}]\n"
            "clustering.replica.max.lag.time: 2s\n"
            "clustering.replica.max.leader.timeout: 1500ms\n"
            "clustering.replica.max.idle.wait: 500ms\n"
            "clustering.replica.fetch.timeout: 500ms\n"
            f"nats.cluster.name: {namespace}\n"
            f"nats.cluster.listen: 127.0.0.1:{cluster_ports[i]}\n"
            f"nats.cluster.routes: [{routes}]\n"
        )
        d = tmp_path / node_id
        d.mkdir()
        # With the cursors stream (one partition, on every node), which the
        # members create once the brokers have registered.
        nodes.append(Server(str(d), extra_config=extra, seed=False, cursors=True))
    try:
        for n in nodes:
            n.launch()
        for n in nodes:
            n.wait_ready()
    except Exception:
        stop_cluster(nodes)
        raise
    return nodes


def stop_cluster(nodes):
    for n in nodes:
        n.stop()


async def poll(what, check, timeout=60.0):
    """Calls async `check` until it returns a true value; returns it."""
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            last = await check()
            if last:
                return last
        except Exception as e:  # a node not ready yet, no leader yet
            last = e
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}: {last!r}")


async def partition(client, stream):
    meta = await client.get_metadata()
    for s in meta.metadata:
        if s.name == stream:
            return s.partitions.get(0)
    return None


async def publish_all(client, stream, values):
    """Publishes `values` with AckPolicy ALL; returns their ack offsets."""
    reqs = [client.get_publish_request(v, stream=stream, partition=0, ack_policy=AckPolicy.ALL) for v in values]
    offsets = []
    async for r in client.publish_bulk(reqs):
        assert not r.HasField("asyncError"), r
        offsets.append(r.ack.offset)
    return offsets


@pytest.mark.asyncio
async def test_gufo_cluster_metadata_publish_subscribe_failover(tmp_path):
    nodes = start_cluster(tmp_path)
    by_id = dict(zip(IDS, nodes))
    try:
        async with LiftbridgeClient([n.grpc for n in nodes]) as client:

            async def three_brokers():
                meta = await client.get_metadata()
                return meta if len(meta.brokers) == 3 else None

            meta = await poll("3 brokers in metadata", three_brokers)
            assert sorted(b.id for b in meta.brokers) == IDS
            for b in meta.brokers:
                assert (b.host, b.port) == ("127.0.0.1", by_id[b.id].grpc_port)

            await client.create_stream("gc", subject="gc.subj", replication_factor=3, minisr=2, wait_for_stream=True)

            async def full_isr():
                p = await partition(client, "gc")
                return p if p and p.leader and sorted(p.isr) == IDS else None

            p = await poll("a leader and a full ISR", full_isr)
        leader_id = p.leader
        leader = by_id[leader_id]
        survivor = next(n for i, n in by_id.items() if i != leader_id)

        # Publish through the leader (the client's only seed), subscribe
        # through a client seeded with another node: gufo opens the
        # subscription on the leader it finds in the metadata.
        async with LiftbridgeClient([leader.grpc]) as pub:
            offsets = await asyncio.wait_for(publish_all(pub, "gc", [f"before-{i}".encode() for i in range(10)]), 30)
        assert offsets == list(range(10))

        # A cursor (gufo stores offset + 1), through the cursors leader.
        async with LiftbridgeClient([survivor.grpc]) as cur:
            await asyncio.wait_for(cur.wait_for_cursors(), 30)
            await asyncio.wait_for(cur.set_cursor("gc", 0, "reader", 9), 30)
            assert await asyncio.wait_for(cur.get_cursor("gc", 0, "reader"), 30) == 10

        got = []
        async with LiftbridgeClient([survivor.grpc]) as sub_client:

            async def consume():
                async for m in sub_client.subscribe("gc", partition=0, start_position=StartPosition.EARLIEST):
                    got.append(m)

            task = asyncio.create_task(consume())
            try:
                await poll("the first 10 messages", lambda: asyncio.sleep(0, len(got) >= 10), 30)
                assert [m.value for m in got] == [f"before-{i}".encode() for i in range(10)]

                leader.kill9()

                async def new_leader():
                    p = await partition(sub_client, "gc")
                    return p.leader if p and p.leader and p.leader != leader_id else None

                await poll("a new leader", new_leader)

                # Publish through a surviving node until 10 messages are
                # acknowledged (a publish that fails is retried with a new
                # value, so the subscription may also see the failed ones).
                acked = []
                async with LiftbridgeClient([survivor.grpc]) as pub2:
                    deadline = time.time() + 60
                    k = 0
                    while len(acked) < 10:
                        assert time.time() < deadline, f"only {len(acked)} acks after the leader died"
                        v = f"after-{k}".encode()
                        k += 1
                        try:
                            await asyncio.wait_for(publish_all(pub2, "gc", [v]), 5)
                            acked.append(v)
                        except Exception:
                            await asyncio.sleep(0.5)

                # gufo 0.2.0 re-reads metadata about a second after the
                # stream broke, usually before the election is over, and then
                # retries the dead leader's address until something answers
                # there. The killed node comes back (as a follower), refuses
                # the subscription (FAILED_PRECONDITION), gufo re-reads the
                # metadata and moves to the new leader, resuming after the
                # last offset it saw: every acknowledged message arrives, in
                # order, with no gap and no repeat.
                leader.start()
                def seen_all():
                    values = [m.value for m in got]
                    return all(v in values for v in acked)

                await poll("the resumed subscription", lambda: asyncio.sleep(0, seen_all()), 90)

                # The cursor is still there, wherever `__cursors` is led now.
                # (a new `__cursors` leader may answer INTERNAL until it has
                # caught up; gufo does not retry that).
                async with LiftbridgeClient([survivor.grpc]) as cur:
                    cursor = await poll("the cursor", lambda: asyncio.wait_for(cur.get_cursor("gc", 0, "reader"), 10))
                    assert cursor == 10
                assert [m.offset for m in got] == list(range(len(got)))
                values = [m.value for m in got]
                assert values[:10] == [f"before-{i}".encode() for i in range(10)]
                assert [v for v in values if v in acked] == acked
            finally:
                task.cancel()
                try:
                    await task
                except (asyncio.CancelledError, Exception):
                    pass
    finally:
        stop_cluster(nodes)
