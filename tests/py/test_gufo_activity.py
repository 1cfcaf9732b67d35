"""The activity stream read with gufo-liftbridge 0.2.0.

gufo has no ActivityStreamEvent type, so the events are decoded here from
the protobuf wire format with Liftbridge's field numbers (id = 1, op = 2,
createStreamOp = 3 and deleteStreamOp = 4, each with stream = 1).
"""

import asyncio

import pytest
from gufo.liftbridge.client import LiftbridgeClient
from gufo.liftbridge.types import StartPosition

from test_gufo_harness import Server, subscribe_n

CREATE_STREAM = 0
DELETE_STREAM = 1


def varint(buf: bytes, i: int):
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7


def fields(buf: bytes):
    """(field number, value) pairs: ints for varints, bytes otherwise."""
    i, out = 0, []
    while i < len(buf):
        key, i = varint(buf, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, i = varint(buf, i)
        elif wire == 2:
            n, i = varint(buf, i)
            v, i = buf[i : i + n], i + n
        else:
            raise ValueError(f"unexpected wire type {wire}")
        out.append((num, v))
    return out


def event(value: bytes):
    """(id, op, stream named by a create/delete op or None)."""
    f = dict(fields(value))
    stream = None
    for op_field in (3, 4):
        if op_field in f:
            stream = dict(fields(f[op_field])).get(1, b"").decode()
    return f.get(1, 0), f.get(2, 0), stream


@pytest.mark.asyncio
async def test_gufo_reads_the_activity_stream(tmp_path):
    server = Server(str(tmp_path), "activity.stream.enabled: true\n").start()
    try:
        async with LiftbridgeClient([server.grpc]) as client:
            await client.create_stream("s1")
            await client.delete_stream("s1")
            # __activity is created by the metadata leader just after start.
            for _ in range(100):
                meta = await client.get_metadata()
                if any(s.name == "__activity" for s in meta.metadata):
                    break
                await asyncio.sleep(0.1)
            # Events: __activity's own creation (or __cursors', in the order
            # committed), then s1 created and deleted.
            msgs = []
            for n in range(3, 6):
                msgs = await subscribe_n(
                    client,
                    n,
                    20,
                    stream="__activity",
                    partition=0,
                    start_position=StartPosition.EARLIEST,
                )
                if event(msgs[-1].value)[1:] == (DELETE_STREAM, "s1"):
                    break
            events = [event(m.value) for m in msgs]
            ids = [e[0] for e in events]
            assert ids == sorted(set(ids)), events
            ours = [e[1:] for e in events if e[2] == "s1"]
            assert ours == [(CREATE_STREAM, "s1"), (DELETE_STREAM, "s1")], events
    finally:
        server.stop()
