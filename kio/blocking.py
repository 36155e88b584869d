"""A minimal blocking driver: plain sockets around kproto's Connection.

It exists for tools, tests and the demo that want one request at a time (or a
small pipeline) without a background thread. All protocol work - framing,
correlation, the ApiVersions handshake, version negotiation, request timeouts -
happens in :class:`kproto.connection.Connection`; this module only moves bytes
between a socket and it, and waits.
"""
from __future__ import annotations

import select
import socket

from kproto.connection import Connection, ConnectionClosed
from kproto.errors import ConnectionClosedError, KafkaError
from kio._shared.common import now_ms  # the cores' one clock


def parse_bootstrap(servers) -> list[tuple[str, int]]:
    """'h1:9092,h2:9093' or a list of 'host:port' -> [(host, port), ...]."""
    if isinstance(servers, str):
        servers = [s for s in servers.split(",") if s.strip()]
    out = []
    for s in servers:
        host, sep, port = s.strip().rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"bootstrap server {s!r} is not HOST:PORT")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError("no bootstrap server given")
    return out


class BlockingConnection:
    """One broker connection over a blocking socket."""

    def __init__(self, host: str, port: int, node_id: int = -1, *, client_id: str = "kio",
                 request_timeout_ms: int = 30000, connect_timeout: float = 10.0, **conn_config):
        self.host, self.port = host, port
        self.connect_timeout = connect_timeout
        self.conn = Connection(node_id, host, port, client_id=client_id,
                               request_timeout_ms=request_timeout_ms, **conn_config)
        self.sock: socket.socket | None = None

    def connect(self) -> "BlockingConnection":
        self.conn.start_connect(now_ms())
        try:
            self.sock = socket.create_connection((self.host, self.port), self.connect_timeout)
        except OSError as exc:
            self.conn.connection_lost(now_ms(), exc)
            raise ConnectionClosedError(
                f"cannot connect to {self.host}:{self.port}: {exc}") from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.setblocking(False)
        self.conn.connection_made(now_ms())
        self._run_until(lambda: self.conn.is_ready)
        return self

    @property
    def versions(self):
        return self.conn.versions

    def send(self, api, body, version=None, expect_response=True):
        """Queue a request; returns its handle (pipelining: call wait() later)."""
        # KIP-368: a re-authentication that came due while nobody drove the
        # socket runs first; the broker takes nothing else until it ends.
        for ev in self.conn.check_timeouts(now_ms()):
            if isinstance(ev, ConnectionClosed):
                self._close_socket()
                raise ev.error or ConnectionClosedError(f"connection to {self.host}:{self.port} closed")
        if self.conn.reauthenticating:
            self._run_until(lambda: not self.conn.reauthenticating)
        return self.conn.send(api, body, now_ms(), version=version, expect_response=expect_response)

    def wait(self, *requests):
        """Drive I/O until every request is done; return their results in order."""
        self._run_until(lambda: all(r.done for r in requests))
        for r in requests:
            if r.error is not None:
                raise r.error
        return [r.result for r in requests]

    def request(self, api, body, version=None, expect_response=True):
        """Send one request and return the decoded response body."""
        return self.wait(self.send(api, body, version, expect_response))[0]

    def _run_until(self, done) -> None:
        conn = self.conn
        while not done():
            if self.sock is None:
                raise ConnectionClosedError(
                    f"connection to {self.host}:{self.port} closed: {conn.last_close_reason}")
            now = now_ms()
            events = conn.check_timeouts(now)
            if not events:
                pending = conn.data_to_send()
                deadline = conn.next_deadline(now)
                timeout = None if deadline is None else max(0.0, (deadline - now) / 1000.0)
                wlist = [self.sock] if pending else []
                readable, writable, _ = select.select([self.sock], wlist, [], timeout)
                if writable:
                    try:
                        n = self.sock.send(pending)
                    except (BlockingIOError, InterruptedError):
                        n = 0
                    except OSError as exc:
                        events = conn.connection_lost(now_ms(), exc)
                        n = 0
                    if n:
                        events = conn.bytes_sent(n, now_ms())
                if readable and not events:
                    try:
                        chunk = self.sock.recv(1 << 20)
                    except (BlockingIOError, InterruptedError):
                        chunk = None
                    except OSError as exc:
                        chunk, events = None, conn.connection_lost(now_ms(), exc)
                    if chunk == b"":
                        events = conn.connection_lost(now_ms(), None)
                    elif chunk:
                        events = conn.receive_data(chunk, now_ms())
            for ev in events:
                if isinstance(ev, ConnectionClosed):
                    self._close_socket()
                    if ev.error is not None and not done():
                        raise ev.error
            if self.sock is None and not done():
                raise ConnectionClosedError(
                    f"connection to {self.host}:{self.port} closed: {conn.last_close_reason}")

    def _close_socket(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            finally:
                self.sock = None

    def close(self) -> None:
        self.conn.close("closed by client", now_ms())
        self._close_socket()

    def __enter__(self):
        return self.connect() if self.sock is None else self

    def __exit__(self, *exc):
        self.close()


class BlockingClient:
    """Bootstrap + one BlockingConnection per broker, routed by metadata."""

    def __init__(self, bootstrap_servers, **config):
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.config = config
        self.nodes: dict[int, tuple[str, int]] = {}
        self.connections: dict[int, BlockingConnection] = {}
        self._any: BlockingConnection | None = None

    def any_connection(self) -> BlockingConnection:
        if self._any is None or self._any.sock is None:
            last: Exception | None = None
            for host, port in self.bootstrap:
                try:
                    self._any = BlockingConnection(host, port, **self.config).connect()
                    break
                except (OSError, KafkaError) as exc:
                    last = exc
            else:
                raise ConnectionClosedError(
                    f"no bootstrap server reachable ({self.bootstrap}): {last}")
        return self._any

    def node(self, node_id: int) -> BlockingConnection:
        c = self.connections.get(node_id)
        if c is None or c.sock is None:
            if node_id not in self.nodes:
                self.metadata([])
            host, port = self.nodes[node_id]
            c = self.connections[node_id] = BlockingConnection(
                host, port, node_id, **self.config).connect()
        return c

    def request(self, api, body, node_id=None, version=None, expect_response=True):
        conn = self.any_connection() if node_id is None else self.node(node_id)
        return conn.request(api, body, version, expect_response)

    def metadata(self, topics=None, allow_auto_topic_creation=False):
        """Metadata for topics (None: all topics); records the brokers' addresses."""
        body = {"topics": None if topics is None else [{"name": t} for t in topics],
                "allow_auto_topic_creation": allow_auto_topic_creation}
        md = self.request("Metadata", body)
        for b in md["brokers"]:
            self.nodes[b["node_id"]] = (b["host"], b["port"])
        return md

    def leaders(self, topic: str) -> dict[int, int]:
        """partition -> leader node id for one topic."""
        md = self.metadata([topic])
        for t in md["topics"]:
            if t["name"] == topic:
                return {p["partition_index"]: p["leader_id"] for p in t["partitions"]}
        return {}

    def close(self) -> None:
        for c in list(self.connections.values()) + ([self._any] if self._any else []):
            c.close()
        self.connections.clear()
        self._any = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
