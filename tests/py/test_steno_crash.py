"""kill -9 while publishing with ack policy ALL (sync = always): after a
restart every acknowledged message is readable, in order, exactly once."""

import asyncio

import grpc
import pytest
from gufo.liftbridge import api_pb2, api_pb2_grpc

from test_gufo_harness import Server


async def subscribe_all(stub, n_min):
    req = api_pb2.SubscribeRequest(stream="crash", partition=0, startPosition=api_pb2.EARLIEST,
                                   stopPosition=api_pb2.STOP_LATEST)
    out = []
    # wait_for_ready: grpc shares subchannels per process, and the one to
    # this address may still be backing off from the killed server.
    call = stub.Subscribe(req, wait_for_ready=True, timeout=60)
    first = True
    try:
        async for m in call:
            if first:
                first = False
                continue
            out.append(m)
    except grpc.aio.AioRpcError as e:
        assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, e
    return out


@pytest.mark.asyncio
async def test_steno_crash_keeps_every_acked_message(tmp_path):
    srv = Server(str(tmp_path)).start()
    acked = []
    errors = []
    try:
        async with grpc.aio.insecure_channel(srv.grpc) as ch:
            stub = api_pb2_grpc.APIStub(ch)
            await stub.CreateStream(api_pb2.CreateStreamRequest(name="crash", subject="crash"))

            async def publisher():
                i = 0
                while True:
                    r = await stub.Publish(
                        api_pb2.PublishRequest(stream="crash", value=f"m{i}".encode(),
                                               ackPolicy=api_pb2.ALL, expectedOffset=-1),
                        timeout=5,
                    )
                    acked.append((r.ack.offset, f"m{i}".encode()))
                    i += 1

            async def bulk():
                # A PublishAsync session runs alongside: group commits see
                # several writers when the process dies.
                async def reqs():
                    for j in range(1_000_000):
                        yield api_pb2.PublishRequest(stream="crash", value=f"b{j}".encode(),
                                                     ackPolicy=api_pb2.ALL, correlationId=f"b{j}",
                                                     expectedOffset=-1)
                async for r in stub.PublishAsync(reqs()):
                    if not r.HasField("asyncError"):
                        acked.append((r.ack.offset, r.correlationId.encode()))

            tasks = [asyncio.create_task(publisher()), asyncio.create_task(bulk())]
            await asyncio.sleep(1.5)
            srv.kill9()
            for t in tasks:
                try:
                    await asyncio.wait_for(t, 10)
                except Exception as e:  # the server is gone: calls fail
                    errors.append(repr(e)[:300])
    finally:
        srv.kill9()
    assert len(acked) > 100, f"only {len(acked)} acks before the crash; errors {errors}; log:\n{srv.log_text()}"

    srv.start()
    try:
        async with grpc.aio.insecure_channel(srv.grpc, options=[("grpc.use_local_subchannel_pool", 1)]) as ch:
            stub = api_pb2_grpc.APIStub(ch)
            try:
                msgs = await subscribe_all(stub, len(acked))
            except Exception as e:
                raise AssertionError(f"{e!r}; server exit status {srv.proc.poll()}; log:\n{srv.log_text()}")
    finally:
        srv.stop()
    offsets = [m.offset for m in msgs]
    assert offsets == list(range(len(msgs))), "contiguous offsets, each once"
    by_offset = {m.offset: m.value for m in msgs}
    values = [m.value for m in msgs]
    assert len(set(values)) == len(values), "no message stored twice"
    for off, val in acked:
        assert by_offset.get(off) == val, f"acked message at {off} lost or changed"
