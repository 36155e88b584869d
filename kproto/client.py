"""The network client: one :class:`~kproto.connection.Connection` per node, sans-IO.

Java's ``NetworkClient`` + ``DefaultMetadataUpdater`` without the Selector.
It decides which connections should exist (``ready`` starts one, with the
connection's own reconnect backoff), keeps metadata fresh through
:class:`~kproto.cluster.ClusterMetadata`, and routes responses to per-request
callbacks. Producer, consumer and admin cores all sit on top of it.

Driver contract (the driver owns sockets; node ids are ints, bootstrap
servers have negative ids)::

    for action in client.poll(now):      # Connect(node, host, port) | Close(node)
        ...                              # open / close that node's socket
    for node in client.nodes_with_output():
        data = client.output(node)       # bytes-like, not consumed
        n = sock.send(data); client.sent(node, n, now)
    client.connected(node, now)          # socket connected
    client.received(node, data, now)     # bytes read
    client.disconnected(node, now, exc)  # socket failed / EOF / connect failed
    client.next_deadline(now)            # call poll again at the latest then

Every input returns nothing; effects come out of the next ``poll``
(callbacks of requests run inside the input call that completed them).
"""
from __future__ import annotations

import logging
import random
from typing import Callable, NamedTuple, Optional, Sequence

from kproto.cluster import ClusterMetadata
from kproto.connection import Connection, ConnectionClosed, ConnectionReady, ConnectionState, RequestCompleted
from kproto.error_codes import error_for_code
from kproto.errors import AllBrokersDownError, AuthenticationError
from kproto.sasl import authenticator_for
from kproto.messages import api as api_by_name
from kproto.topic_ids import BY_TOPIC_ID, name_topics, with_topic_ids
from kproto.telemetry import API_LATENCY_METRICS, ClientTelemetry, MetricPoint, TelemetryState, metric_name

__all__ = ["NetworkClient", "Connect", "Close"]

log = logging.getLogger("kproto.client")

#: Metadata's top-level error (KIP-1102): the client must start again from bootstrap.servers.
REBOOTSTRAP_REQUIRED = 129


class Connect(NamedTuple):
    node: int
    host: str
    port: int


class Close(NamedTuple):
    node: int
    reason: str


_READY, _DISCONNECTED, _CONNECTING = ConnectionState.READY, ConnectionState.DISCONNECTED, ConnectionState.CONNECTING
#: nodes_with_output() when no connection has bytes to write, poll_requests()
#: when there is nothing to do (shared, never filled)
_NO_NODES = ()


class NetworkClient:
    def __init__(self, cluster: ClusterMetadata, *, client_id="kio", request_timeout_ms=30000,
                 max_in_flight=5, reconnect_backoff_ms=50, reconnect_backoff_max_ms=1000,
                 connections_max_idle_ms=540000, connection_setup_timeout_ms=10000, rng=None,
                 on_metadata: Optional[Callable] = None, authenticator_factory: Optional[Callable] = None):
        self.cluster = cluster
        # SASL: one authenticator per connection (kproto.sasl.authenticator_for)
        self.authenticator_factory = authenticator_factory
        # The last authentication failure, until a connection authenticates:
        # cores fail what waits on the broker with it instead of retrying until
        # their timeouts (wrong credentials do not fix themselves).
        self.auth_error = None
        # What the application hears of through error_cb (the drivers take
        # them with take_errors): every broker down, authentication failures,
        # fatal errors. Bounded: a driver without error_cb still drains it.
        self._errors: list = []
        self._all_down = False              # AllBrokersDownError told, no connection ready since
        self._warned_at: dict = {}          # node -> when its last connect failure was logged
        self.client_id = client_id
        self.conn_config = dict(client_id=client_id, request_timeout_ms=request_timeout_ms,
                                max_in_flight=max_in_flight, reconnect_backoff_ms=reconnect_backoff_ms,
                                reconnect_backoff_max_ms=reconnect_backoff_max_ms,
                                connections_max_idle_ms=connections_max_idle_ms,
                                connection_setup_timeout_ms=connection_setup_timeout_ms,
                                rng=rng or random.Random())
        self.request_timeout_ms = request_timeout_ms
        self.connections: dict[int, Connection] = {}
        # The class _conn makes a connection of: a test's Python subclass
        # (compiled, Connection is an extension type, and this module refers
        # to it directly, not through a module attribute a test could patch).
        self.connection_class = Connection
        self._actions: list = []
        self._metadata_in_flight = None
        self.on_metadata = on_metadata        # called after every metadata update
        self.on_ready = None                  # called (node) when a connection becomes READY
        self.closing = False
        self._reconnect_bootstrap = False     # a rebootstrap asked to reopen bootstrap connections
        # KIP-1242: the last broker this client connected to takes ApiVersions
        # v5, so new connections may name the cluster and node they expect.
        self._brokers_check_cluster = False
        self.progress = 0                   # bumped whenever connection events were handled
        self._polled_progress = 0           # ``progress`` at the end of the last poll
        # No connection has a deadline before this (request and setup timeouts,
        # idle closing, re-authentication, a throttle's end); None: unknown.
        # poll and next_deadline walk the connections only once it has come:
        # a quiet producer's rounds (a timer's, a send()'s wake-up) walked
        # them twice each for nothing (issue 27). Set by next_deadline's walk
        # (_walk_deadlines) when every connection is READY (or DISCONNECTED:
        # no deadline), lowered by every request queued (send), and dropped
        # (None) by whatever else can bring a deadline earlier: a connect, a
        # connection event other than a completed request, a throttle, close.
        self._conn_due: Optional[float] = None
        # Nodes a core asked for (ready / least_loaded_node) and could not have
        # because they back off: next_deadline wakes the driver when they can
        # be used again, so no core needs a polling timer to notice.
        self._wanted: set = set()
        # KIP-714 client telemetry (enable_telemetry), and what this client
        # measures for it: connections made and closed, requests, responses,
        # and per node the request latencies (sum, count, max).
        self.telemetry: Optional[ClientTelemetry] = None
        self._telemetry_waits = False       # its request waits for a connection
        self.stats = {"connection_creation": 0, "connection_close": 0, "requests": 0, "responses": 0}
        # Latency windows since the last push (Java's avg/max are windowed too):
        self.node_latency: dict = {}        # node -> [total ms, count, max ms]
        self.api_latency: dict = {}         # API name -> [total ms, count, max ms]

    # -- connections ------------------------------------------------------------------
    def _conn(self, node) -> Optional[Connection]:
        c = self.connections.get(node)
        addr = self.cluster.node_address(node)
        if c is not None and addr is not None and (c.host, c.port) != tuple(addr) \
                and c.state is _DISCONNECTED:
            # The node moved (a rebootstrap found another cluster that reuses
            # the id, or a broker came back on a new address): connect to where
            # the metadata says it is now, as Java's connection states do.
            del self.connections[node]
            c = None
        if c is None:
            if addr is None:
                return None
            auth = self.authenticator_factory() if self.authenticator_factory is not None else None
            c = self.connections[node] = self.connection_class(node, addr[0], addr[1], authenticator=auth,
                                                                  **self.conn_config)
        return c

    def is_ready(self, node, now=None) -> bool:
        c = self.connections.get(node)
        return c is not None and c.can_send(now)

    def is_unavailable(self, node, now) -> bool:
        """The last connection attempt to ``node`` failed and its reconnect
        backoff has not run out (Java ``NetworkClient.isUnavailable``)."""
        c = self.connections.get(node)
        if c is None or c.state is not _DISCONNECTED or not c.connect_failed:
            return False
        return now < c.next_connect_time

    def connection_trouble(self) -> Optional[str]:
        """Why connections are failing, for error messages: the last failure
        of a connection that never got ready (None when every node answers)."""
        for c in self.connections.values():
            if c.connect_failed and c.last_close_reason:
                return f"{c.host}:{c.port}: {c.last_close_reason}"
        return None

    def ready(self, node, now) -> bool:
        """True if a request can go to ``node`` now; otherwise start connecting
        when the reconnect backoff allows (Java ``NetworkClient.ready``)."""
        if self.closing:
            return False
        c = self.connections.get(node)
        if c is None or c.state is _DISCONNECTED:
            # (a connection that exists and is not DISCONNECTED is what
            # _conn would give: it looks the node's address up only to
            # replace a disconnected one whose node moved)
            c = self._conn(node)
            if c is None:
                return False
        if c.can_send(now):
            return True
        if c.can_connect(now):
            c.start_connect(now)
            self._conn_due = None               # its setup timeout: walk again
            self._actions.append(Connect(node, c.host, c.port))
        else:
            self._wanted.add(node)
        return False

    def connection_delay(self, node, now) -> float:
        """ms until ``node`` may be used or connected (0 if now; request timeout if busy)."""
        c = self.connections.get(node)
        if c is None:
            return 0
        d = c.connection_delay(now)
        if d is not None:
            return d
        if c.is_throttled(now):
            return c.throttled_until - now
        return 0 if c.can_send() else self.request_timeout_ms

    def ready_at(self, node, now) -> Optional[float]:
        """When ``node`` can take a request or a new connection attempt at the
        earliest (Java's ``pollDelayMs``): the end of its reconnect backoff or
        of a broker-asked throttle; ``now`` if at once; None while the
        connection is being set up or is busy - then an I/O event, not a
        timer, is what changes it."""
        c = self.connections.get(node)
        if c is None:
            return now
        t = c.next_connect_time
        if t is not None:                        # DISCONNECTED: the reconnect backoff
            return max(now, t)
        if c.is_ready and c.is_throttled(now):
            return c.throttled_until
        return now if c.can_send(now) else None

    def is_connecting(self, node) -> bool:
        c = self.connections.get(node)
        return c is not None and c.is_connected and not c.is_ready

    def in_flight(self, node=None) -> int:
        if node is not None:
            c = self.connections.get(node)
            return c.in_flight_count if c is not None else 0
        return sum(c.in_flight_count for c in self.connections.values())

    def least_loaded_node(self, now, candidates=None) -> Optional[int]:
        """The ready node with the fewest requests in flight; else a node we
        could connect to (Java ``leastLoadedNode``)."""
        if candidates is None:
            candidates = self.cluster.candidate_nodes()
        best, best_load, connectable = None, None, None
        for node in candidates:
            c = self.connections.get(node)
            if c is not None and c.can_send(now):
                load = c.in_flight_count
                if best is None or load < best_load:
                    best, best_load = node, load
            elif connectable is None and (c is None or c.can_connect(now) or c.is_connected):
                connectable = node
        if best is None and connectable is None:
            # Every candidate backs off: wake up when the first one may be tried.
            self._wanted.update(candidates)
        return best if best is not None else connectable

    # -- requests ----------------------------------------------------------------------
    def send(self, node, api, body, now, *, expect_response=True, callback=None, version=None,
             timeout_ms=None, decoder=None):
        """Queue a request on a ready node; ``callback(request)`` runs when it
        completes or fails (``request.result`` / ``request.error``);
        ``decoder``: a reader of the answer of the caller's own (see
        ``Connection.send``)."""
        c = self.connections[node]
        if api in BY_TOPIC_ID:
            version, body, callback = self._by_topic_id(c, api, body, version, callback)
        if self.telemetry is not None:
            self.stats["requests"] += 1
            if expect_response:
                callback = self._timed(node, api, callback)
        req = c.send(api, body, now, version=version, expect_response=expect_response,
                     timeout_ms=timeout_ms, callback=callback, decoder=decoder)
        due = self._conn_due
        if due is not None and req.deadline < due:
            self._conn_due = req.deadline       # its timeout is the earliest deadline now
        return req

    def _by_topic_id(self, c, api, body, version, callback):
        """OffsetCommit/OffsetFetch v10, TxnOffsetCommit v6 (topics by id
        only; a plain request stops below them, CLIENT_VERSION_CAPS): sent
        where the broker takes them and the metadata knows every topic's id
        (kproto.topic_ids), the answer's topics named again from the request."""
        if c.versions is None:
            return version, body, callback
        negotiated = c.versions.get(api)
        rng = c.versions.broker_range(api)
        if rng is None or negotiated is None or (version is not None and version != negotiated):
            return version, body, callback
        top = min(rng[1], api_by_name(api).max_version)
        if top < BY_TOPIC_ID[api]:
            return version, body, callback
        build = body if callable(body) else None      # a body that depends on the version
        v2, filled, names = with_topic_ids(api, top, build(top) if build else body, self.cluster.topic_ids)
        if names is None:
            return version, body, callback              # an unknown id: by name, as negotiated

        def named(req, callback=callback):
            if req.error is None and req.result is not None:
                name_topics(api, req.result, names)
            if callback is not None:
                callback(req)
        return v2, filled, named

    def _timed(self, node, api, callback):
        """``callback`` that first records the request's latency (telemetry)."""
        def done(req):
            if req.error is None and req.completed_at is not None and req.sent_at is not None:
                self.stats["responses"] += 1
                ms = req.completed_at - req.sent_at
                # get first: setdefault built two lists per answer to throw away
                for windows, key in ((self.node_latency, node), (self.api_latency, api)):
                    lat = windows.get(key)
                    if lat is None:
                        lat = windows[key] = [0.0, 0, 0.0]
                    lat[0] += ms
                    lat[1] += 1
                    if ms > lat[2]:
                        lat[2] = ms
            if callback is not None:
                callback(req)
        return done

    # -- KIP-714 client telemetry -----------------------------------------------------------------
    def enable_telemetry(self, client_type: str, *, retry_backoff_ms: int = 100, rng=None) -> ClientTelemetry:
        """Push client metrics when a broker subscribes to them (``client_type``
        is Java's metric group prefix: producer, consumer, admin-client)."""
        self.telemetry = ClientTelemetry(client_type, self.client_id, base_metrics=self.telemetry_metrics,
                                         retry_backoff_ms=retry_backoff_ms, rng=rng)
        self.telemetry.on_pushed = self._new_latency_window
        return self.telemetry

    def _new_latency_window(self) -> None:
        self.node_latency.clear()
        self.api_latency.clear()

    def telemetry_metrics(self, now) -> list:
        """What the network client measures, with Java's names (selector and node metrics)."""
        t = self.telemetry.client_type
        g, s = f"{t}-metrics", self.stats
        points = [
            MetricPoint(metric_name(g, "connection-creation-total"), s["connection_creation"], True),
            MetricPoint(metric_name(g, "connection-close-total"), s["connection_close"], True),
            MetricPoint(metric_name(g, "connection-count"),
                        sum(1 for c in self.connections.values() if c.is_ready)),
            MetricPoint(metric_name(g, "request-total"), s["requests"], True),
            MetricPoint(metric_name(g, "response-total"), s["responses"], True),
        ]
        ng = f"{t}-node-metrics"
        for node, (total, count, top) in sorted(self.node_latency.items()):
            attrs = (("node_id", str(node)),)
            points.append(MetricPoint(metric_name(ng, "request-latency-avg"), total / count, False, attrs))
            points.append(MetricPoint(metric_name(ng, "request-latency-max"), float(top), False, attrs))
        for api, (group, prefix) in API_LATENCY_METRICS.get(t, {}).items():
            lat = self.api_latency.get(api)
            if lat is not None:
                points.append(MetricPoint(metric_name(group, prefix + "-avg"), lat[0] / lat[1]))
                points.append(MetricPoint(metric_name(group, prefix + "-max"), float(lat[2])))
        return points

    def telemetry_closed(self, now) -> bool:
        """Start telemetry's terminating push (once) and tell whether it is
        over; True at once without telemetry. Closing cores wait for this
        before :meth:`close`, which would drop the push."""
        tel = self.telemetry
        if tel is None:
            return True
        if not tel.done and tel.state not in (TelemetryState.TERMINATING_PUSH_NEEDED,
                                                    TelemetryState.TERMINATING_PUSH_IN_PROGRESS):
            tel.terminate(now)
        return tel.done

    def api_version(self, node, api) -> Optional[int]:
        c = self.connections.get(node)
        if c is None or c.versions is None:
            return None
        return c.versions.get(api)

    # -- metadata ------------------------------------------------------------------------
    def _maybe_update_metadata(self, now):
        if self._reconnect_bootstrap:
            self._close_bootstrap_connections(now)
        if not self._metadata_due(now):
            return
        cluster = self.cluster
        if cluster.rebootstrap_due(now):
            self._rebootstrap(now, f"no metadata for {cluster.rebootstrap_trigger_ms} ms "
                                   "(metadata.recovery.rebootstrap.trigger.ms)")
            self._close_bootstrap_connections(now)
        node = self.least_loaded_node(now)
        if node is None and cluster.may_rebootstrap():
            # KIP-899: every known broker is unreachable (each backs off after
            # a failed connect); the cluster may have moved: ask the bootstrap
            # servers again instead of waiting for these.
            self._rebootstrap(now, "no known broker is reachable")
            self._close_bootstrap_connections(now)
            node = self.least_loaded_node(now)
        if node is None:
            return
        if not self.ready(node, now):
            return
        body = cluster.request_body(now)
        # Metadata, or DescribeCluster for an admin bootstrapped from the
        # controllers (kproto.controller_metadata): the cache says which.
        self._metadata_in_flight = self.send(node, cluster.metadata_api, body, now,
                                             callback=lambda req: self._on_metadata(req))

    def _on_metadata(self, req):
        self._metadata_in_flight = None
        now = req.completed_at
        if req.error is not None:
            self.cluster.failed_update(now)
            return
        code = req.result.get("error_code", 0)
        if code:                                 # Metadata v13+: the whole answer failed
            if code == REBOOTSTRAP_REQUIRED and self.cluster.recovery_strategy == "rebootstrap":
                self.cluster.failed_update(now)
                self._rebootstrap(now, "the broker answered REBOOTSTRAP_REQUIRED")
            else:
                err = error_for_code(code, req.result.get("error_message"), self.cluster.metadata_api)
                self.cluster.failed_update(now, err)
                self.report_error(err)
            return
        self.cluster.update(req.result, now)
        if self.on_metadata is not None:
            self.on_metadata(now)

    def _expected_broker(self, node, c) -> Optional[tuple]:
        """KIP-1242 (Java 4.4's NetworkClient): (cluster id, broker id) that a
        connection to ``node`` names in ApiVersions v5, so that a broker of
        another cluster behind the same address refuses it. None - nothing
        named - for bootstrap connections and nodes the metadata does not
        list at this address, before any metadata, and until a broker said
        it takes ApiVersions v5 (one that does not, Tansu, may read the v5
        fields as v4's and drop the connection instead of answering
        UNSUPPORTED_VERSION). A coordinator's connection (id 2**31-1-broker,
        as Java's) names its broker."""
        brokers = self.cluster.brokers
        if self.cluster.cluster_id is None or not self._brokers_check_cluster or node < 0:
            return None
        for broker_id in (node, 2**31 - 1 - node):
            if brokers.get(broker_id) is not None and tuple(brokers[broker_id]) == (c.host, c.port):
                return self.cluster.cluster_id, broker_id
        return None

    def _refused_as_stale(self, ev, now) -> None:
        """KIP-1242: the broker answered ApiVersions v5 with REBOOTSTRAP_REQUIRED:
        the cluster id or node id this client sent is not its own (another
        cluster, or another node, now answers at that address). The metadata
        is wrong, not the broker: start again from bootstrap.servers, as for
        a Metadata answer with that error (``metadata.recovery.strategy=none``:
        the application hears of it and the client keeps what it knows)."""
        if self.cluster.recovery_strategy == "rebootstrap":
            self._rebootstrap(now, f"node {ev.node_id} does not belong to cluster "
                                   f"{self.cluster.cluster_id} (ApiVersions answered REBOOTSTRAP_REQUIRED)")
        else:
            self.report_error(ev.error)

    def _rebootstrap(self, now, why) -> None:
        log.info("Rebootstrapping with %s: %s", self.cluster.bootstrap_addresses(), why)
        self.cluster.rebootstrap(now)
        self._wanted.clear()
        self._reconnect_bootstrap = True

    def _close_bootstrap_connections(self, now) -> None:
        """After a rebootstrap (from poll, never inside a connection's own
        callback): a connection still open to a bootstrap address leads where
        it led before, and the bootstrap name may lead elsewhere now (a new
        cluster behind it): close it so the next contact connects again."""
        self._reconnect_bootstrap = False
        for node, c in list(self.connections.items()):
            if node < 0 and c.is_connected:
                self._handle(c.close("rebootstrap", now), now)

    # -- driver inputs ----------------------------------------------------------------------
    def connected(self, node, now):
        c = self.connections.get(node)
        if c is not None and c.state is _CONNECTING:
            c.expected_broker = self._expected_broker(node, c)
            self._conn_due = None               # the handshake's requests: walk again
            self._handle(c.connection_made(now), now)

    def received(self, node, data, now):
        c = self.connections.get(node)
        if c is not None:
            self._handle(c.receive_data(data, now), now)
            t = c.throttled_until
            if t is not None and t > now:
                self._conn_due = None           # a throttle (KIP-219): its end needs a round

    def disconnected(self, node, now, exc=None):
        c = self.connections.get(node)
        if c is not None and c.is_connected:
            if c.state is _CONNECTING and node < 0:
                self.cluster.failed_update(now)     # rotate to the next bootstrap server
            self._handle(c.connection_lost(now, exc), now, from_driver=True)

    def nodes_with_output(self):
        """The nodes whose connection has bytes to write (a shared empty
        tuple when none: asked twice a round by the drivers)."""
        out = None
        for n, c in self.connections.items():
            if c._out_pending:          # (Connection.pending_output, without the property's call)
                if out is None:
                    out = [n]
                else:
                    out.append(n)
        return _NO_NODES if out is None else out

    def output(self, node):
        c = self.connections.get(node)
        return c.data_to_send() if c is not None else b""

    def sent(self, node, n, now):
        c = self.connections.get(node)
        if c is not None:
            events = c.bytes_sent(n, now)
            if events:                  # (mostly none: a request that expects an answer)
                self._handle(events, now)

    def _handle(self, events, now=None, from_driver=False):
        if events:
            # Drivers compare this counter to wake waiting application threads
            # only when a request completed or a connection changed state,
            # not on every partial read.
            self.progress += 1
        for ev in events:
            # A completed request only takes a deadline away; anything else
            # (a connection closed or ready, a request failed) walks again.
            if type(ev) is not RequestCompleted:
                self._conn_due = None
            if isinstance(ev, ConnectionClosed):
                self.stats["connection_close"] += 1
                if getattr(ev.error, "code", None) == REBOOTSTRAP_REQUIRED:
                    self._refused_as_stale(ev, now)
                elif isinstance(ev.error, AuthenticationError):
                    if self.auth_error is None:
                        self.report_error(ev.error)
                    self.auth_error = ev.error
                elif not self.closing:
                    self._connect_failed(ev.node_id)
                if ev.node_id == getattr(self._metadata_in_flight, "node_id", None):
                    self._metadata_in_flight = None
                self.cluster.request_update()
                if not from_driver:
                    self._actions.append(Close(ev.node_id, ev.reason))
            elif isinstance(ev, ConnectionReady):
                self.stats["connection_creation"] += 1
                self._brokers_check_cluster = (ev.versions.get("ApiVersions") or 0) >= 5
                self.auth_error = None
                self._all_down = False
                if self.on_ready is not None:
                    self.on_ready(ev.node_id)

    # -- what the application must hear of ------------------------------------------------------
    def report_error(self, exc) -> None:
        """Queue ``exc`` for the application's error_cb (see :meth:`take_errors`)."""
        if len(self._errors) < 100:
            self._errors.append(exc)

    def has_errors(self) -> bool:
        """Whether errors wait for :meth:`take_errors` (a driver that ran a
        round on another thread hands them to the one that calls error_cb)."""
        return bool(self._errors)

    def take_errors(self) -> list:
        """The errors reported since the last call, oldest first (drivers hand
        them to the ``error_cb`` setting)."""
        errors, self._errors = self._errors, []
        return errors

    def _connect_failed(self, node) -> None:
        """A connection that never got ready failed: a WARNING (Java's text, at
        most one per node per reconnect.backoff.max.ms) and, once every known
        broker failed so, AllBrokersDownError (librdkafka's _ALL_BROKERS_DOWN)."""
        c = self.connections.get(node)
        if c is None or not c.connect_failed:
            return
        now = c.last_connect_attempt
        last = self._warned_at.get(node)
        if last is None or now - last >= self.conn_config["reconnect_backoff_max_ms"]:
            self._warned_at[node] = now
            log.warning("Connection to node %s (%s/%s:%s) could not be established. Node may not be "
                        "available. [%s]", node, c.host, c.host, c.port, c.last_close_reason)
        if self._all_down:
            return
        nodes = self.cluster.candidate_nodes()
        for n in nodes:
            other = self.connections.get(n)
            if other is None or not other.connect_failed or other.state is not _DISCONNECTED:
                return
        self._all_down = True
        self.report_error(AllBrokersDownError(
            f"{len(nodes)}/{len(nodes)} brokers are down: {self.connection_trouble()}"))

    # -- the loop ----------------------------------------------------------------------------
    def poll(self, now) -> list:
        """Timeouts, idle connections, metadata refresh; returns driver actions."""
        due = self._conn_due
        if due is None or now >= due:
            for node, c in list(self.connections.items()):
                if c.is_connected:
                    self._handle(c.check_timeouts(now), now)
                    if c.is_idle(now):
                        self._handle(c.close("idle", now), now)
        # (the refresh time read here, not in a call: most rounds nothing is due)
        due = self.cluster.update_due_ms
        if self._reconnect_bootstrap or due is None or due <= now:
            self._maybe_update_metadata(now)
        tel = self.telemetry
        if tel is not None and not self.closing:
            at = tel.send_at
            if at is not None and at <= now:
                sent_before = self.stats["requests"]
                tel.poll(self, now)
                # Due but not sent: it waits for a connection, whose readiness
                # (progress) or backoff (_wanted) wakes the driver - not a timer.
                at = tel.send_at
                self._telemetry_waits = at is not None and at <= now and self.stats["requests"] == sent_before
            else:
                self._telemetry_waits = False
        actions, self._actions = self._actions, []
        self._polled_progress = self.progress
        return actions

    def _metadata_due(self, now) -> bool:
        """Whether a Metadata request should go now and may (none in flight,
        not closing). (:meth:`poll` and :meth:`poll_requests` read the
        cache's ``update_due_ms`` before calling in: most rounds nothing is due.)"""
        if self._metadata_in_flight is not None or self.closing:
            return False
        cluster = self.cluster
        due = cluster.update_due_ms
        if due is None:
            due = cluster.next_update_at()
        return due <= now

    def poll_requests(self, now) -> Sequence:
        """A second :meth:`poll` at the same ``now``, after the caller queued
        requests (a producer's sender): only what those can have made due -
        the metadata update they asked for and their Connect actions. The
        timeouts, idle connections and telemetry that :meth:`poll` checked at
        this ``now`` cannot have changed; checking them again cost every
        round of a quiet producer a second walk of its connections. The
        metadata's refresh time is read again: an update asked since
        (``need_update``) or a rebootstrap makes it due."""
        due = self.cluster.update_due_ms
        if self._reconnect_bootstrap or due is None or due <= now:
            self._maybe_update_metadata(now)
        self._polled_progress = self.progress
        actions = self._actions
        if not actions:
            return _NO_NODES            # (a shared empty: no new list a round)
        self._actions = []
        return actions

    def next_deadline(self, now) -> Optional[float]:
        if self.progress != self._polled_progress:
            # Events since the last poll (a write that failed after it, say):
            # their effects - retries, reconnects, a metadata refresh - come
            # out of the next poll, so that is due now. The deadlines below
            # were computed without them and could sleep past the work.
            return now
        best = self._conn_due
        if best is None or now >= best:
            best = self._walk_deadlines(now)
        closing = self.closing
        cluster = self.cluster
        if self._metadata_in_flight is None and not closing and (cluster.topics or cluster.need_update):
            due = cluster.update_due_ms
            if due is None:
                due = cluster.next_update_at()
            # Due now but not sent: no node could take it. Then the node it
            # waits for is in _wanted (or connecting), and returning ``now``
            # here would only make the drivers spin through the reconnect
            # backoff (Java's metadata updater waits for the connection too).
            if due > now and (best is None or due < best):
                best = due
        tel = self.telemetry
        if tel is not None and not closing and not self._telemetry_waits:
            d = tel.send_at
            if d is not None:
                if d < now:
                    d = now             # (ClientTelemetry.next_deadline: max(now, due))
                if best is None or d < best:
                    best = d
        if self._wanted:
            for node in list(self._wanted):
                t = self.ready_at(node, now) if not closing else None
                if t is None or t <= now:
                    # Usable now, connecting, or gone: whoever still needs it asks
                    # again at the next poll (I/O events run one); no timer needed.
                    self._wanted.discard(node)
                elif best is None or t < best:
                    best = t
        return best

    def _walk_deadlines(self, now) -> Optional[float]:
        """The earliest deadline of any connection (see ``_conn_due``, set here)."""
        best = None
        keep = True
        for c in self.connections.values():
            state = c.state
            if (state is not _READY and state is not _DISCONNECTED) or c.reauthenticating:
                keep = False                    # setting up: its internal requests bypass send()
            for d in (c.next_deadline(now), c.idle_deadline):
                if d is not None and (best is None or d < best):
                    best = d
        self._conn_due = best if keep else None
        return best

    def close(self, now):
        """Close every connection (fails what is in flight); returns Close actions."""
        self.closing = True
        self._conn_due = None
        if self.telemetry is not None and not self.telemetry.done:
            self.telemetry.state = TelemetryState.TERMINATED     # too late for a push
        for node, c in self.connections.items():
            self._handle(c.close("client closed", now, permanent=True), now)
        # An OIDC login refreshes its token in a thread of its own: stop it.
        stop = getattr(self.authenticator_factory, "close", None)
        if stop is not None:
            stop()
        actions, self._actions = self._actions, []
        return actions


class DriverIO:
    """The byte-moving half of the driver contract, shared by every core
    (producer, consumer, admin): the driver reports socket events and takes
    output through these, and they go straight to the core's NetworkClient
    (``self.client``). A core that calls :meth:`_bind_io` once its client
    exists has them as the client's own bound methods instead."""

    def _bind_io(self) -> None:
        """Make each method of this contract the network client's own
        bound method, as instance attributes: a driver's call then goes
        straight to the client, not through a method here that calls it
        (a quiet producer's drivers make about eight a batch). The client
        must not be replaced afterwards."""
        client = self.client
        for name in ("connected", "received", "disconnected", "nodes_with_output", "output", "sent"):
            setattr(self, name, getattr(client, name))

    def connected(self, node, now):
        self.client.connected(node, now)

    def received(self, node, data, now):
        self.client.received(node, data, now)

    def disconnected(self, node, now, exc=None):
        self.client.disconnected(node, now, exc)

    def nodes_with_output(self):
        return self.client.nodes_with_output()

    def output(self, node):
        return self.client.output(node)

    def sent(self, node, n, now):
        self.client.sent(node, n, now)


def host_port(s) -> tuple:
    """"host:port" (IPv6 in brackets allowed) -> (host, port)."""
    from kproto.errors import ConfigError
    host, sep, port = str(s).strip().rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f"bootstrap server {s!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def network_for(cfg, *, rng, max_in_flight, allow_auto_topic_creation, cluster_class=ClusterMetadata,
                telemetry_type: Optional[str] = None, bootstrap=None, client_class=None, **cluster_kwargs):
    """The metadata cache and NetworkClient every core builds from the common
    settings (kproto.config.COMMON): (cluster, client). ``telemetry_type``
    (Java's metric group prefix) turns on KIP-714 telemetry when the
    ``enable.metrics.push`` setting is true. ``bootstrap``: the addresses to
    start from instead of ``bootstrap.servers`` (the admin's bootstrap.controllers).
    ``client_class``: a NetworkClient subclass to make instead (tests: compiled,
    NetworkClient is an extension type whose instances take no attribute of a
    test's own, and this module names it directly, not through a module
    attribute a test could patch)."""
    cluster = cluster_class(
        [host_port(s) for s in (bootstrap or cfg.bootstrap_servers)],
        metadata_max_age_ms=cfg.metadata_max_age_ms, retry_backoff_ms=cfg.retry_backoff_ms,
        retry_backoff_max_ms=cfg.retry_backoff_max_ms, allow_auto_topic_creation=allow_auto_topic_creation,
        metadata_recovery_strategy=cfg.metadata_recovery_strategy,
        rebootstrap_trigger_ms=cfg.metadata_recovery_rebootstrap_trigger_ms, **cluster_kwargs)
    client = (client_class or NetworkClient)(
        cluster, client_id=cfg.client_id, request_timeout_ms=cfg.request_timeout_ms,
        max_in_flight=max_in_flight, reconnect_backoff_ms=cfg.reconnect_backoff_ms,
        reconnect_backoff_max_ms=cfg.reconnect_backoff_max_ms,
        connections_max_idle_ms=cfg.connections_max_idle_ms,
        connection_setup_timeout_ms=cfg.socket_connection_setup_timeout_ms, rng=rng,
        authenticator_factory=authenticator_for(cfg))
    if getattr(cfg, "enable_metrics_push", False) and telemetry_type is not None:
        client.enable_telemetry(telemetry_type, retry_backoff_ms=cfg.retry_backoff_ms, rng=rng)
    return cluster, client
