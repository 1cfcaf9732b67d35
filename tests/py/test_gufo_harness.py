"""Starts the built liftbridge binary for interop tests.

The server runs exactly as gufo-liftbridge's own harness runs it
(`-c <config> -d <dir> --embedded-nats --raft-bootstrap-seed`), on free
loopback ports so tests can run in parallel.
"""

import asyncio
import os
import re
import socket
import subprocess
import time

from natsproc import free_port


def wait_port(port: int, proc: subprocess.Popen, timeout: float = 20.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"liftbridge exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"port {port} not open after {timeout}s")


class Server:
    """A liftbridge process with its gRPC and NATS ports."""

    def __init__(
        self, tmpdir: str, extra_config: str = "", seed: bool = True, cursors: bool = True, listen: bool = True
    ) -> None:
        # `seed`: bootstrap a one-node metadata group (gufo's own harness
        # does); cluster members name their peers in `extra_config` instead.
        # `cursors`: gufo's cursors stream settings (one partition).
        # `listen`: the gRPC listener on 127.0.0.1; without it only `port`
        # is configured (all interfaces, advertised as `localhost`).
        self.seed = seed
        self.listen = listen
        self.tmpdir = tmpdir
        self.data = os.path.join(tmpdir, "data")
        self.grpc_port = free_port()
        self.nats_port = free_port()
        self.config = os.path.join(tmpdir, ".liftbridge.yml")
        with open(self.config, "w") as f:
            f.write(
                (f"listen: 127.0.0.1:{self.grpc_port}\n" if listen else f"port: {self.grpc_port}\n")
                + f"nats.listen: 127.0.0.1:{self.nats_port}\n"
                "http.listen: 127.0.0.1:0\n"
                + ("cursors:\n    stream.auto.pause.time: 0\n    stream.partitions: 1\n" if cursors else "")
                + extra_config
            )
        self.proc = None
        self._starts = 0

    def start(self) -> "Server":
        return self.launch().wait_ready()

    def launch(self) -> "Server":
        """Starts the process without waiting (cluster members wait for
        each other before they serve)."""
        binary = os.environ.get("LIFTBRIDGE_BIN", "target/debug/liftbridge")
        self._starts += 1
        self.log = open(os.path.join(self.tmpdir, "server.log"), "ab")
        args = [binary, "-c", self.config, "-d", self.data, "--embedded-nats"]
        if self.seed:
            args.append("--raft-bootstrap-seed")
        self.proc = subprocess.Popen(
            args,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        return self

    def wait_ready(self) -> "Server":
        # Ready once the server says so (after the gRPC server runs); a bare
        # TCP connect could be fooled by a self-connect on ephemeral ports.
        deadline = time.time() + 30
        while self._ready_lines() < self._starts:
            if self.proc.poll() is not None:
                raise RuntimeError(f"liftbridge exited with {self.proc.returncode}:\n{self.log_text()}")
            if time.time() > deadline:
                raise RuntimeError(f"liftbridge not ready after 30s:\n{self.log_text()}")
            time.sleep(0.05)
        return self

    def _ready_lines(self) -> int:
        host = "127.0.0.1" if self.listen else r"\S+"
        return len(re.findall(rf"serving gRPC on {host}:{self.grpc_port},", self.log_text(full=True)))

    @property
    def grpc(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def nats(self) -> str:
        return f"nats://127.0.0.1:{self.nats_port}"

    def log_text(self, full: bool = False) -> str:
        try:
            with open(os.path.join(self.tmpdir, "server.log"), "rb") as f:
                text = f.read().decode(errors="replace")
                return text if full else text[-4000:]
        except OSError:
            return ""

    def kill9(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


async def subscribe_n(client, n, timeout, **kw):
    """The first `n` messages of a gufo-liftbridge subscription, or a timeout."""
    out = []

    async def run():
        async for msg in client.subscribe(**kw):
            out.append(msg)
            if len(out) == n:
                return

    await asyncio.wait_for(run(), timeout)
    return out
