"""Load client of scripts/load-subscribers.sh.

Two modes, both reading the server's RSS from /proc/<pid>/status:

  subscribers: fills a stream with ~20 MB (raw NATS publishes on its subject),
      opens IDLE Subscribe streams that never read plus one normal reader on
      its own connection, prints RSS and how the normal reader fared, then
      cancels the idle streams and prints RSS once it settles.
  connections: opens COUNT raw NATS client connections (CONNECT + PING/PONG),
      prints RSS with them open, closes them all and prints RSS after.

Clients are real: the Python gRPC stubs of gufo-liftbridge (grpcio) and raw
NATS protocol over TCP sockets.
"""

import argparse
import asyncio
import sys
import time

import grpc
from gufo.liftbridge import api_pb2, api_pb2_grpc


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


async def settle(pid: int, seconds: float) -> float:
    """The lowest RSS seen over `seconds` (memory goes back over time)."""
    low = rss_mib(pid)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        await asyncio.sleep(0.5)
        low = min(low, rss_mib(pid))
    return low


async def nats_publish(host: str, port: int, subject: str, n: int, size: int) -> None:
    r, w = await asyncio.open_connection(host, port)
    await r.readline()  # INFO
    w.write(b'CONNECT {"verbose":false,"pedantic":false}\r\n')
    payload = b"y" * size
    frame = b"PUB %s %d\r\n%s\r\n" % (subject.encode(), size, payload)
    for i in range(n):
        w.write(frame)
        if i % 1000 == 999:
            await w.drain()
    w.write(b"PING\r\n")
    await w.drain()
    while True:
        line = await r.readline()
        if not line or line.startswith(b"PONG"):
            break
    w.close()


def channel(target: str, i: int, idle: bool = True) -> grpc.aio.Channel:
    # A distinct argument per channel keeps grpc from sharing one
    # connection between channels. Without BDP probing, grpc's transport
    # reads ahead only its fixed lookahead on a stream the application
    # does not read (with it, the window keeps growing and an "idle"
    # stream keeps pulling data into the client).
    options = [
        ("grpc.use_local_subchannel_pool", 1),
        ("liftbridge.load.channel", i),
        ("grpc.max_receive_message_length", 16 << 20),
    ]
    if idle:
        options += [("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 64 << 10)]
    return grpc.aio.insecure_channel(target, options=options)


async def subscribers(a) -> None:
    ch = channel(a.grpc, -1)
    stub = api_pb2_grpc.APIStub(ch)
    await stub.CreateStream(api_pb2.CreateStreamRequest(subject=a.stream, name=a.stream, partitions=1))
    await asyncio.sleep(1)
    host, port = a.nats.rsplit(":", 1)
    await nats_publish(host, int(port), a.stream, a.messages, a.size)
    deadline = time.monotonic() + 120
    while True:
        md = await stub.FetchPartitionMetadata(api_pb2.FetchPartitionMetadataRequest(stream=a.stream, partition=0))
        if md.metadata.highWatermark >= a.messages - 1:
            break
        if time.monotonic() > deadline:
            sys.exit(f"only {md.metadata.highWatermark + 1} of {a.messages} stored")
        await asyncio.sleep(0.2)
    total = a.messages
    req = api_pb2.SubscribeRequest(stream=a.stream, partition=0, startPosition=api_pb2.StartPosition.EARLIEST)

    async def read_all(tag: str) -> tuple:
        # A process of its own: the idle streams' client work must not
        # share an event loop with the reader being measured.
        proc = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "read", "--pid", str(a.pid), "--grpc", a.grpc,
            "--nats", a.nats, "--stream", a.stream, "--messages", str(a.messages),
            "--deadline", str(a.deadline), stdout=asyncio.subprocess.PIPE)
        out, _ = await proc.communicate()
        got, took = out.split()
        return int(got), float(took)

    got, took = await read_all("alone")
    print(f"normal reader alone: {got}/{total} messages in {took:.2f} s")
    base = rss_mib(a.pid)
    print(f"RSS before idle subscribers: {base:.1f} MiB")

    calls, chans = [], []
    for i in range(0, a.idle, a.per_conn):
        c = channel(a.grpc, i)
        chans.append(c)
        s = api_pb2_grpc.APIStub(c)
        batch = [s.Subscribe(req) for _ in range(min(a.per_conn, a.idle - i))]
        await asyncio.gather(*(asyncio.wait_for(x.read(), 60) for x in batch))
        calls.extend(batch)
    await asyncio.sleep(2)
    got, took = await read_all("with")
    peak = max(rss_mib(a.pid), 0)
    for _ in range(6):
        await asyncio.sleep(0.5)
        peak = max(peak, rss_mib(a.pid))
    print(f"normal reader with {a.idle} idle subscribers: {got}/{total} messages in {took:.2f} s")
    print(f"RSS with {a.idle} idle subscribers: {peak:.1f} MiB "
          f"({(peak - base) * 1024 / a.idle:.0f} KiB per idle subscriber)")
    for x in calls:
        x.cancel()
    for c in chans:
        await c.close()
    await ch.close()
    after = await settle(a.pid, a.settle)
    print(f"RSS {a.settle:.0f} s after cancel: {after:.1f} MiB")
    if got < total:
        sys.exit("the normal reader did not get every message")


async def read(a) -> None:
    """Reads the whole stream from the earliest offset; prints the count and
    the seconds it took."""
    c = channel(a.grpc, -2, idle=False)
    s = api_pb2_grpc.APIStub(c)
    call = s.Subscribe(api_pb2.SubscribeRequest(
        stream=a.stream, partition=0, startPosition=api_pb2.StartPosition.EARLIEST))
    t0 = time.monotonic()
    got = -1  # the handshake comes first
    try:
        while got < a.messages:
            left = a.deadline - (time.monotonic() - t0)
            if left <= 0:
                break
            await asyncio.wait_for(call.read(), timeout=left)
            got += 1
    except asyncio.TimeoutError:
        pass
    took = time.monotonic() - t0
    call.cancel()
    await c.close()
    print(max(got, 0), f"{took:.3f}")


async def connections(a) -> None:
    host, port = a.nats.rsplit(":", 1)
    sem = asyncio.Semaphore(200)
    conns = []

    async def one():
        async with sem:
            r, w = await asyncio.open_connection(host, int(port))
            await r.readline()
            w.write(b'CONNECT {"verbose":false}\r\nPING\r\n')
            await w.drain()
            while True:
                line = await r.readline()
                if not line or line.startswith(b"PONG"):
                    break
            conns.append(w)

    idle = rss_mib(a.pid)
    await asyncio.gather(*(one() for _ in range(a.count)))
    held = rss_mib(a.pid)
    for w in conns:
        w.close()
    after = await settle(a.pid, a.settle)
    print(f"{a.label}: RSS idle {idle:.1f} MiB, {len(conns)} connections open {held:.1f} MiB, "
          f"{a.settle:.0f} s after they close {after:.1f} MiB")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["subscribers", "connections", "read"])
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--grpc", default="")
    p.add_argument("--nats", required=True, help="host:port")
    p.add_argument("--stream", default="load")
    p.add_argument("--messages", type=int, default=20000)
    p.add_argument("--size", type=int, default=1000)
    p.add_argument("--idle", type=int, default=1000)
    p.add_argument("--per-conn", type=int, default=50)
    p.add_argument("--deadline", type=float, default=60)
    p.add_argument("--count", type=int, default=10000)
    p.add_argument("--settle", type=float, default=10)
    p.add_argument("--label", default="server")
    a = p.parse_args()
    run = {"subscribers": subscribers, "connections": connections, "read": read}[a.mode]
    asyncio.run(run(a))


if __name__ == "__main__":
    main()
