"""Starts the built liftbridge binary for interop tests.

The server runs exactly as gufo-liftbridge's own harness runs it
(`-c <config> -d <dir> --embedded-nats --raft-bootstrap-seed`), on free
loopback ports so tests can run in parallel.
"""

import os
import socket
import subprocess
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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

    def __init__(self, tmpdir: str, extra_config: str = "") -> None:
        self.tmpdir = tmpdir
        self.data = os.path.join(tmpdir, "data")
        self.grpc_port = free_port()
        self.nats_port = free_port()
        self.config = os.path.join(tmpdir, ".liftbridge.yml")
        with open(self.config, "w") as f:
            f.write(
                f"listen: 127.0.0.1:{self.grpc_port}\n"
                f"nats.listen: 127.0.0.1:{self.nats_port}\n"
                "http.listen: 127.0.0.1:0\n"
                "cursors:\n"
                "    stream.auto.pause.time: 0\n"
                "    stream.partitions: 1\n" + extra_config
            )
        self.proc = None

    def start(self) -> "Server":
        binary = os.environ.get("LIFTBRIDGE_BIN", "target/debug/liftbridge")
        self.log = open(os.path.join(self.tmpdir, "server.log"), "ab")
        self.proc = subprocess.Popen(
            [binary, "-c", self.config, "-d", self.data, "--embedded-nats", "--raft-bootstrap-seed"],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        wait_port(self.grpc_port, self.proc)
        wait_port(self.nats_port, self.proc)
        return self

    @property
    def grpc(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def nats(self) -> str:
        return f"nats://127.0.0.1:{self.nats_port}"

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
