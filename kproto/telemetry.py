"""KIP-714 client telemetry, sans-IO: ask one broker which client metrics it
wants (GetTelemetrySubscriptions) and push them every push interval
(PushTelemetry), as an OTLP ``MetricsData`` (kproto.otlp).

The states are Java's ``ClientTelemetryState``: SUBSCRIPTION_NEEDED ->
SUBSCRIPTION_IN_PROGRESS -> PUSH_NEEDED -> PUSH_IN_PROGRESS -> PUSH_NEEDED ...
and on close TERMINATING_PUSH_NEEDED -> TERMINATING_PUSH_IN_PROGRESS ->
TERMINATED. DISABLED is where a broker without the APIs (or an error that
retrying cannot fix) leaves it: telemetry then stays off, quietly.

:class:`~kproto.client.NetworkClient` runs it from its ``poll`` (so every
client type has it) when ``enable.metrics.push`` is true; the cores add
what they measure through :attr:`ClientTelemetry.extra_metrics`.
"""
from __future__ import annotations

import enum
import logging
import time
import uuid
from typing import Callable, Optional

from kproto import compression, otlp
from kproto.errors import IllegalStateError
from kproto.otlp import MetricPoint

__all__ = ["ClientTelemetry", "TelemetryState", "DEFAULT_PUSH_INTERVAL_MS", "ZERO_UUID", "API_LATENCY_METRICS",
           "metric_name", "client_instance_id", "check_instance_id_timeout", "register_metric",
           "unregister_metric"]

log = logging.getLogger("kproto.telemetry")

#: Java's ClientTelemetryReporter.DEFAULT_PUSH_INTERVAL_MS: the wait after an
#: error that names no interval
DEFAULT_PUSH_INTERVAL_MS = 5 * 60 * 1000
ZERO_UUID = uuid.UUID(int=0)
#: Java's metric domain: group "producer-metrics" and name "record-send-total"
#: become org.apache.kafka.producer.record.send.total
DOMAIN = "org.apache.kafka"

# error codes (kproto.error_codes) the state machine tells apart, Java's
# ClientTelemetryUtils.maybeFetchErrorIntervalMs
_INVALID_REQUEST, _INVALID_RECORD, _UNSUPPORTED_VERSION = 42, 87, 35
_UNKNOWN_SUBSCRIPTION_ID, _UNSUPPORTED_COMPRESSION_TYPE = 117, 76
_TELEMETRY_TOO_LARGE, _THROTTLING_QUOTA_EXCEEDED = 118, 89
_NEVER = None

#: Java's latency metrics that are the latency of one API's requests:
#: {client type: {API: (metric group, name without -avg/-max)}}. The network
#: client times every request; these name the windows of those APIs.
#: (Keyword arguments: the API names are not quoted, so tools/gen_api_docs.py
#: does not take this table for code that sends them.)
API_LATENCY_METRICS = {
    "producer": dict(Produce=("producer-metrics", "request-latency")),
    "consumer": dict(Fetch=("consumer-fetch-manager-metrics", "fetch-latency"),
                     ShareFetch=("consumer-share-fetch-manager-metrics", "fetch-latency"),
                     OffsetCommit=("consumer-coordinator-metrics", "commit-latency")),
}


class TelemetryState(enum.Enum):
    SUBSCRIPTION_NEEDED = "subscription needed"
    SUBSCRIPTION_IN_PROGRESS = "subscription in progress"
    PUSH_NEEDED = "push needed"
    PUSH_IN_PROGRESS = "push in progress"
    TERMINATING_PUSH_NEEDED = "terminating push needed"
    TERMINATING_PUSH_IN_PROGRESS = "terminating push in progress"
    TERMINATED = "terminated"
    DISABLED = "disabled"


_S = TelemetryState
# The states with a request to send, looked up once: NetworkClient.poll and
# next_deadline ask every round, and each ``_S.X`` goes through Python 3.11's
# EnumMeta.__getattr__ (~7x a module global's lookup; branch cround).
_SENDING = (_S.SUBSCRIPTION_NEEDED, _S.PUSH_NEEDED, _S.TERMINATING_PUSH_NEEDED)


def error_interval_ms(error_code: int, interval_ms: Optional[int]) -> Optional[int]:
    """How long to wait before asking for the subscription again after a
    telemetry error (Java's maybeFetchErrorIntervalMs); None: never (telemetry off)."""
    if error_code in (_UNKNOWN_SUBSCRIPTION_ID, _UNSUPPORTED_COMPRESSION_TYPE):
        return 0
    if error_code in (_TELEMETRY_TOO_LARGE, _THROTTLING_QUOTA_EXCEEDED):
        return interval_ms if interval_ms is not None and interval_ms > 0 else DEFAULT_PUSH_INTERVAL_MS
    return _NEVER        # INVALID_REQUEST, INVALID_RECORD, UNSUPPORTED_VERSION and the unknown


def metric_name(group: str, name: str) -> str:
    """Java's telemetry name of a metric: ``metric_name("producer-node-metrics",
    "request-latency-avg")`` is org.apache.kafka.producer.node.request.latency.avg."""
    if group.endswith("-metrics"):
        group = group[:-len("-metrics")]
    return f"{DOMAIN}.{group.replace('-', '.')}.{name.replace('-', '.')}"


def client_instance_id(telemetry: Optional["ClientTelemetry"]) -> Optional[uuid.UUID]:
    """KIP-714's ``clientInstanceId``, the part that does not wait: the id the
    broker assigned in GetTelemetrySubscriptions, or None while it is not
    known yet (the caller waits and asks again). Raises
    :class:`~kproto.errors.IllegalStateError` when it never will be:
    ``enable.metrics.push`` is off (``telemetry`` None, Java's message), or
    telemetry went off before an id came - a broker without the telemetry
    APIs (Tansu; Kafka without a client-telemetry plugin) or an error no
    retry fixes. Java waits out the timeout and returns null then; failing at
    once tells the caller why."""
    if telemetry is None:
        raise IllegalStateError("telemetry is not enabled: set enable.metrics.push to true "
                                "for a client instance id (KIP-714)")
    if telemetry.client_instance_id != ZERO_UUID:
        return telemetry.client_instance_id
    if telemetry.state is _S.DISABLED:
        why = (f"the broker answered error {telemetry.last_error}" if telemetry.last_error is not None
               else "the broker has no GetTelemetrySubscriptions API (no client-telemetry plugin)")
        raise IllegalStateError(f"client telemetry is off, so no client instance id was assigned: {why}")
    if telemetry.state is _S.TERMINATED:
        raise IllegalStateError("the client closed before the broker assigned a client instance id")
    return None


def check_instance_id_timeout(timeout: Optional[float]) -> None:
    """``client_instance_id(timeout)``'s argument: seconds, not negative (None: the client's default)."""
    if timeout is not None and not timeout >= 0:
        raise ValueError(f"client_instance_id: the timeout cannot be negative (got {timeout!r} seconds)")


def _app_metric_key(group, name, tags) -> tuple:
    """(telemetry name, attributes) of an application metric, its arguments checked."""
    for what, v in (("group", group), ("name", name)):
        if not isinstance(v, str) or not v:
            raise TypeError(f"an application metric's {what} must be a non-empty str, not {v!r}")
    tags = dict(tags or {})
    bad = [k for k, v in tags.items() if not isinstance(k, str) or not isinstance(v, str)]
    if bad:
        raise TypeError(f"an application metric's tags must map str to str (not at {bad!r})")
    return metric_name(group, name), tuple(sorted(tags.items()))


def register_metric(telemetry: Optional["ClientTelemetry"], group: str, name: str,
                    value: Callable[[], float], *, tags=None, cumulative: bool = False) -> None:
    """KIP-1076's ``registerMetricForSubscription``: push the application's
    metric ``value()`` too when the subscription selects its name (Java's:
    ``metric_name(group, name)``, ``tags`` its attributes; ``cumulative``: a
    monotonic total, else a gauge). Registering the same group, name and
    tags again replaces it. Nothing happens with ``telemetry`` None
    (enable.metrics.push off), as in Java."""
    key = _app_metric_key(group, name, tags)
    if not callable(value):
        raise TypeError(f"an application metric's value must be a callable returning a number, not {value!r}")
    if telemetry is not None:
        telemetry.app_metrics = {**telemetry.app_metrics, key: (value, bool(cumulative))}


def unregister_metric(telemetry: Optional["ClientTelemetry"], group: str, name: str, *, tags=None) -> None:
    """KIP-1076's ``unregisterMetricFromSubscription``: stop pushing the metric
    :func:`register_metric` added (unknown ones are ignored, as in Java)."""
    key = _app_metric_key(group, name, tags)
    if telemetry is not None and key in telemetry.app_metrics:
        telemetry.app_metrics = {k: v for k, v in telemetry.app_metrics.items() if k != key}


def preferred_compression(accepted) -> int:
    """The first of the broker's accepted compression types that kproto can
    use here (its codec package installed); none (0) if there is none."""
    for cid in accepted or ():
        if cid in compression.CODEC_NAMES and compression.is_available(cid):
            return cid
    return compression.NONE


class ClientTelemetry:
    """The telemetry of one client. ``client_type`` is Java's metric group
    prefix ("producer", "consumer", "admin-client"), ``base_metrics(now)``
    the NetworkClient's own metrics (a list of MetricPoint); ``wall_ns`` the
    clock of the OTLP timestamps (``now`` is the drivers' monotonic ms)."""

    def __init__(self, client_type: str, client_id: str, *, base_metrics: Callable[[float], list],
                 retry_backoff_ms: int = 100, rng=None, wall_ns: Callable[[], int] = time.time_ns):
        self.client_type = client_type
        self.client_id = client_id
        self.base_metrics = base_metrics
        #: what the core measures beyond the network client: ``f(now) -> [MetricPoint]``
        self.extra_metrics: Optional[Callable[[float], list]] = None
        #: the application's metrics (KIP-1076): {(name, attributes): (value(), cumulative)};
        #: replaced, never changed in place, so any thread may register without a lock
        self.app_metrics: dict = {}
        #: called after each payload is built: the avg/max windows start again
        self.on_pushed: Optional[Callable[[], None]] = None
        self.retry_backoff_ms = retry_backoff_ms
        self.rng = rng
        self.wall_ns = wall_ns
        #: When a request is to go (absolute ms; None: none to send in this
        #: state): ``_due`` while the state is one of _SENDING. Kept by the
        #: ``state`` and ``_due`` setters: the network client reads it every
        #: round instead of calling :meth:`next_deadline`.
        self.send_at: Optional[float] = None
        self._due_ms = 0.0
        self.state = _S.SUBSCRIPTION_NEEDED
        self.client_instance_id = ZERO_UUID
        self.subscription_id = 0
        self.push_interval_ms: Optional[int] = None
        self.requested: list = []
        self.compression_type = compression.NONE
        self.delta = False
        self.max_bytes = 0
        self._started_ns = wall_ns()
        self._last_push_ns = self._started_ns
        self._last_sums: dict = {}             # for delta temporality: (name, attributes) -> value
        self.pushes = 0                        # pushes acknowledged (tests, kio metrics)
        self.last_error: Optional[int] = None

    # -- the driver loop (through NetworkClient.poll / next_deadline) ------------------------------
    @property
    def state(self) -> TelemetryState:
        """Where the KIP-714 exchange stands (a write updates ``send_at``)."""
        return self._state

    @state.setter
    def state(self, value: TelemetryState) -> None:
        self._state = value
        self.send_at = self._due_ms if value in _SENDING else None

    @property
    def _due(self) -> float:
        """When the next request may go (a write updates ``send_at``)."""
        return self._due_ms

    @_due.setter
    def _due(self, value: float) -> None:
        self._due_ms = value
        if self._state in _SENDING:
            self.send_at = value

    @property
    def done(self) -> bool:
        """Nothing more to send: terminated, or off."""
        return self.state in (_S.TERMINATED, _S.DISABLED)

    def next_deadline(self, now) -> Optional[float]:
        if self.state in _SENDING:
            return max(now, self._due)
        return None

    def poll(self, client, now) -> None:
        """Send what is due: the subscription request or a push."""
        st = self.state
        if st not in _SENDING:
            return
        if now < self._due:
            return
        node = client.least_loaded_node(now)
        if node is None or not client.ready(node, now):
            return      # the connection's readiness wakes the driver (NetworkClient progress)
        api = "GetTelemetrySubscriptions" if st is _S.SUBSCRIPTION_NEEDED else "PushTelemetry"
        if client.api_version(node, api) is None:
            log.debug("node %s has no %s: client telemetry off", node, api)
            self.state = _S.DISABLED
            return
        if st is _S.SUBSCRIPTION_NEEDED:
            self.state = _S.SUBSCRIPTION_IN_PROGRESS
            client.send(node, api, {"client_instance_id": self.client_instance_id}, now,
                        callback=self._on_subscription)
        else:
            terminating = st is _S.TERMINATING_PUSH_NEEDED
            self.state = _S.TERMINATING_PUSH_IN_PROGRESS if terminating else _S.PUSH_IN_PROGRESS
            client.send(node, api, self.push_body(now, terminating), now, callback=self._on_push)

    def terminate(self, now) -> None:
        """The client closes: one last push (terminating) if a subscription is
        active, else straight to TERMINATED. The client waits for :attr:`done`."""
        if self.state in (_S.PUSH_NEEDED, _S.PUSH_IN_PROGRESS) and self.requested:
            # A push in flight is answered first; its callback sees the flag.
            if self.state is _S.PUSH_NEEDED:
                self.state = _S.TERMINATING_PUSH_NEEDED
                self._due = now
            else:
                self._terminate_after_push = True
        elif not self.done:
            self.state = _S.TERMINATED

    _terminate_after_push = False

    # -- requests and responses ------------------------------------------------------------------
    def _wait(self, now, delay_ms: Optional[int]) -> None:
        """SUBSCRIPTION_NEEDED after ``delay_ms``; None: telemetry off."""
        if delay_ms is None:
            self.state = _S.DISABLED
            return
        self.state = _S.SUBSCRIPTION_NEEDED
        self._due = now + delay_ms

    def _failed(self, req) -> None:
        now = req.completed_at
        if self.state is _S.TERMINATING_PUSH_IN_PROGRESS:
            self.state = _S.TERMINATED
            return
        log.debug("client telemetry request failed: %s", req.error)
        self._wait(now, self.retry_backoff_ms)

    def _on_subscription(self, req) -> None:
        if req.error is not None:
            return self._failed(req)
        now, r = req.completed_at, req.result
        if self.state is not _S.SUBSCRIPTION_IN_PROGRESS:
            return          # terminated meanwhile
        code = r.get("error_code", 0)
        if code:
            self.last_error = code
            return self._wait(now, error_interval_ms(code, self.push_interval_ms))
        if r.get("client_instance_id") not in (None, ZERO_UUID):
            self.client_instance_id = r["client_instance_id"]
        self.subscription_id = r.get("subscription_id", 0)
        interval = r.get("push_interval_ms") or DEFAULT_PUSH_INTERVAL_MS
        self.push_interval_ms = interval
        self.requested = list(r.get("requested_metrics") or [])
        self.compression_type = preferred_compression(r.get("accepted_compression_types"))
        self.delta = bool(r.get("delta_temporality"))
        self.max_bytes = r.get("telemetry_max_bytes") or 0
        self._last_sums.clear()
        if not self.requested:
            # No subscription matches this client: ask again after the interval.
            return self._wait(now, interval)
        self.state = _S.PUSH_NEEDED
        # The first push of a fresh subscription is staggered over half to
        # one and a half intervals (Java), so clients started together spread out.
        jitter = self.rng.random() if self.rng is not None else 0.5
        self._due = now + interval * (0.5 + jitter)

    def _on_push(self, req) -> None:
        terminating = self.state is _S.TERMINATING_PUSH_IN_PROGRESS
        if req.error is not None:
            return self._failed(req)
        now, code = req.completed_at, req.result.get("error_code", 0)
        if terminating:
            self.state = _S.TERMINATED
            if not code:
                self.pushes += 1
            return
        if code:
            self.last_error = code
            self._wait(now, error_interval_ms(code, self.push_interval_ms))
        else:
            self.pushes += 1
            self.state = _S.PUSH_NEEDED
            self._due = now + self.push_interval_ms
        if self._terminate_after_push:
            self._terminate_after_push = False
            self.terminate(now)

    # -- the payload -----------------------------------------------------------------------------
    def wanted(self, name: str) -> bool:
        """Whether the subscription asks for metric ``name`` (prefix match;
        an empty string, or Kafka 4.4's "*", asks for every metric)."""
        return any(p == "*" or name.startswith(p) for p in self.requested)

    def collect(self, now) -> list:
        """The subscribed metrics, with delta sums when the broker asks for them."""
        points = list(self.base_metrics(now))
        if self.extra_metrics is not None:
            points.extend(self.extra_metrics(now))
        points.extend(self._app_points())
        out = []
        for p in points:
            if not self.wanted(p.name):
                continue
            if p.sum:
                if self.delta:
                    key = (p.name, p.attributes)
                    last = self._last_sums.get(key, 0)
                    self._last_sums[key] = p.value
                    p = p._replace(value=p.value - last, start_ns=self._last_push_ns)
                else:
                    p = p._replace(start_ns=self._started_ns)
            out.append(p)
        return out

    def _app_points(self) -> list:
        """The registered application metrics' values; one whose ``value()``
        fails or is not a number is left out of this push (logged), not the push."""
        out = []
        for (name, attributes), (value, cumulative) in self.app_metrics.items():
            try:
                v = value()
            except Exception:  # noqa: BLE001 - the application's code: never fail the push for it
                log.warning("application metric %s: value() failed; not pushed", name, exc_info=True)
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                log.warning("application metric %s: value() returned %r, not a number; not pushed", name, v)
                continue
            out.append(MetricPoint(name, v, cumulative, attributes))
        return out

    def payload(self, now) -> bytes:
        """The OTLP bytes of one push, uncompressed."""
        t = self.wall_ns()
        data = otlp.encode_metrics_data(
            self.collect(now), time_ns=t, resource=(("client_id", self.client_id),),
            temporality=otlp.DELTA if self.delta else otlp.CUMULATIVE)
        self._last_push_ns = t
        if self.on_pushed is not None:
            self.on_pushed()
        return data

    def push_body(self, now, terminating: bool) -> dict:
        data = self.payload(now)
        cid = self.compression_type
        if cid != compression.NONE:
            data = compression.compress(cid, data)
        return {"client_instance_id": self.client_instance_id, "subscription_id": self.subscription_id,
                "terminating": terminating, "compression_type": cid, "metrics": data}
