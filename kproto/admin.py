"""``AdminCore``: the Kafka admin client as a sans-IO state machine.

Same driver contract as :class:`kproto.producer.ProducerCore`, so one selector
loop can run producer, consumer and admin cores alike::

    core = AdminCore({"bootstrap.servers": "h:9092"})
    h = core.create_topics([NewTopic("t", 3, 1)], now=now)   # an AdminHandle
    for action in core.poll(now):            # Connect(node, host, port) | Close(node, reason)
        ...
    # bytes: core.nodes_with_output(), core.output(node), core.sent(node, n, now)
    core.connected(node, now); core.received(node, data, now); core.disconnected(node, now, exc)
    core.next_deadline(now)                  # absolute ms, or None
    for handle in core.events(): ...         # AdminHandles completed since the last call
    h.done; h.result()                       # value, or raises the (first) error
    h.items["t"].error                       # per-item outcome (like Java's KafkaFuture per topic)

How it works (Java ``KafkaAdminClient``'s ``Call`` model): every operation is
split into calls, each aimed at a node - the least loaded node, the controller
(topic creation/deletion, partitions), a group's coordinator (found with
FindCoordinator first) or partition leaders (found with a Metadata call
first). A call that fails retriably - NOT_CONTROLLER, LEADER_NOT_AVAILABLE,
NOT_LEADER_OR_FOLLOWER, NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
COORDINATOR_LOAD_IN_PROGRESS, a lost connection, a request timeout - is
re-routed when the error says the target moved and sent again after an
exponential backoff (retry.backoff.ms .. retry.backoff.max.ms) until the
operation's deadline (default.api.timeout.ms, or ``timeout_ms`` of the call);
then its items fail with :class:`AdminTimeoutError` naming the operation and the
last error. Non-retriable errors fail their item with the typed
:class:`~kproto.errors.BrokerError`; an API the broker lacks fails with
:class:`~kproto.errors.UnsupportedVersionError` naming it.

Deviation from Java: a topic the Metadata step reports as unknown fails its
items at once (UNKNOWN_TOPIC_OR_PARTITION) instead of being retried until the
timeout, for list_offsets, delete_records and the lag helper as for
describe_topics - except a topic this core created itself within the last
default.api.timeout.ms. CreateTopics succeeds once the controller has the
topic; the broker a Metadata request goes to learns of it a moment later
(and Tansu's metadata lags its CreateTopics answer too), so "create, then
describe" would otherwise fail now and then. Such a topic's
UNKNOWN_TOPIC_OR_PARTITION is retried like LEADER_NOT_AVAILABLE, within the
call's deadline. We retry on the next call rather than make create_topics
wait for the metadata: a create that returns is then exactly Java's, and the
wait is paid only by a program that uses the topic at once.
"""
from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any, Dict, FrozenSet, Iterable, NamedTuple, Optional

from kproto import error_codes
from kproto.client import DriverIO, network_for
from kproto.cluster import TopicPartition, validate_topic_name
from kproto.config import (
    BOOL, COMMON, INT, LIST, Config, ConfigDef, Setting, check_security, in_range,
)
from kproto.consumer import OffsetAndMetadata
from kproto.share.admin import ShareGroupAdmin
from kproto.admin_acls import AclAdmin, AclOperation, authorized_operations
from kproto.admin_cluster import ClusterAdmin
from kproto.admin_quorum import QuorumAdmin
from kproto.controller_metadata import CONTROLLER_ENDPOINT, ControllerMetadata
from kproto.admin_configs import ConfigAdmin
from kproto.admin_scram import ScramAdmin
from kproto.admin_tokens import TokenAdmin
from kproto.admin_groups import GroupAdmin
from kproto.admin_streams import StreamsGroupAdmin
from kproto.admin_transactions import TransactionAdmin
from kproto.admin_telemetry import TelemetryAdmin
from kproto.requests import find_coordinator_body
from kproto.errors import (
    ConfigError, ConnectionClosedError, KafkaError, KafkaTimeoutError, NotReadyError, RequestTimedOutError,
    UnsupportedVersionError,
)

if TYPE_CHECKING:   # the consumer protocol's codecs load with the first group described (issue 27)
    from kproto.consumer.assignors import Assignment, MemberSubscription

__all__ = [
    "AdminCore", "AdminHandle", "AdminResult", "AdminTimeoutError", "ADMIN_CONFIG",
    "parse_admin_config", "NewTopic", "NewPartitions", "ConfigResource", "ConfigEntry",
    "TopicListing", "TopicDescription", "PartitionInfo", "Node", "ClusterDescription",
    "ConsumerGroupListing", "MemberDescription", "ConsumerGroupDescription",
    "ListOffsetsResultInfo", "DeletedRecords", "ConsumerLag", "OffsetSpec", "TopicPartition",
    "OffsetAndMetadata",
]

def _require_one_bootstrap(values, explicit):
    """bootstrap.servers or bootstrap.controllers, not both (Java's AdminClientConfig)."""
    if values.get("bootstrap.controllers"):
        if values.get("bootstrap.servers"):
            raise ConfigError("set bootstrap.servers (brokers) or bootstrap.controllers (KRaft controllers), "
                              "not both")
        return
    if not values.get("bootstrap.servers"):
        raise ConfigError("bootstrap.servers is required (e.g. '127.0.0.1:9092'), or bootstrap.controllers "
                          "to talk to the KRaft controllers")


ADMIN_CONFIG = ConfigDef(COMMON + [
    Setting("default.api.timeout.ms", INT, 60000, in_range(1),
            "how long an admin operation may take, retries included"),
    Setting("metadata.max.idle.ms", INT, 300000, in_range(5000), "accepted for symmetry; unused"),
    Setting("allow.auto.create.topics", BOOL, False, doc="admin Metadata requests never create topics"),
    Setting("bootstrap.controllers", LIST, None,
            doc="host:port list of KRaft controllers to talk to instead of brokers (KIP-919); "
                "excludes bootstrap.servers"),
], checks=[_require_one_bootstrap, check_security])


def parse_admin_config(conf=None, **kwargs) -> Config:
    return ADMIN_CONFIG.parse(conf, **kwargs)


class AdminTimeoutError(KafkaTimeoutError):
    """An admin operation did not finish within its deadline (default.api.timeout.ms)."""

    retriable = True


# --- inputs and results ----------------------------------------------------------------

class NewTopic(NamedTuple):
    name: str
    num_partitions: int = -1              # -1: the broker's default
    replication_factor: int = -1          # -1: the broker's default
    configs: dict = {}
    replica_assignments: dict = {}        # {partition: [broker ids]} (then counts must be -1)


class NewPartitions(NamedTuple):
    total_count: int
    assignments: Optional[list] = None    # [[broker ids] per new partition]


class ConfigResource(NamedTuple):
    type: int                             # ConfigResource.TOPIC (2), BROKER (4), GROUP (32)...
    name: str                             # a BROKER's "": the cluster-wide default

    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32

    @classmethod
    def broker_logger(cls, node_id: int) -> "ConfigResource":
        """The log levels of broker ``node_id`` (its loggers' names as settings)."""
        return cls(8, str(node_id))

    @classmethod
    def client_metrics(cls, name: str) -> "ConfigResource":
        """A KIP-714 client metrics subscription (``metrics``, ``interval.ms``, ``match``)."""
        return cls(16, name)

    @classmethod
    def group(cls, group_id: str) -> "ConfigResource":
        """The settings of group ``group_id`` (KIP-848/932 group configs, e.g.
        a share group's share.auto.offset.reset)."""
        return cls(32, group_id)

    @classmethod
    def topic(cls, name: str) -> "ConfigResource":
        """The settings of topic ``name``."""
        return cls(2, name)

    @classmethod
    def broker(cls, node_id: int) -> "ConfigResource":
        """The settings of broker ``node_id``."""
        return cls(4, str(node_id))


class ConfigEntry(NamedTuple):
    name: str
    value: Optional[str]
    source: int = -1                      # Kafka's ConfigSource (1 topic, 4 static broker, 5 default ...)
    is_default: bool = False
    read_only: bool = False
    is_sensitive: bool = False
    synonyms: tuple = ()                  # ((name, value, source), ...)


class TopicListing(NamedTuple):
    name: str
    topic_id: Any
    internal: bool


class PartitionInfo(NamedTuple):
    partition: int
    leader: Optional[int]                 # None: no leader
    replicas: tuple
    isr: tuple
    offline: tuple = ()
    leader_epoch: int = -1


class TopicDescription(NamedTuple):
    name: str
    topic_id: Any
    internal: bool
    partitions: tuple                     # PartitionInfo, by partition
    #: What the caller may do with the topic; None unless asked (``include_authorized_operations``).
    authorized_operations: Optional[FrozenSet[AclOperation]] = None


class Node(NamedTuple):
    id: int
    host: str
    port: int
    rack: Optional[str] = None


class ClusterDescription(NamedTuple):
    cluster_id: Optional[str]
    controller: Optional[Node]
    nodes: tuple
    #: What the caller may do with the cluster; None unless asked (``include_authorized_operations``).
    authorized_operations: Optional[FrozenSet[AclOperation]] = None


class ConsumerGroupListing(NamedTuple):
    group_id: str
    is_simple: bool                       # no protocol type (offsets only, no members)
    state: Optional[str] = None           # ListGroups v4+
    protocol_type: str = ""
    coordinator: int = -1                 # the broker that listed it


class MemberDescription(NamedTuple):
    member_id: str
    group_instance_id: Optional[str]
    client_id: str
    host: str
    assignment: Assignment
    subscription: Optional[MemberSubscription]


class ConsumerGroupDescription(NamedTuple):
    group_id: str
    is_simple: bool
    state: str
    protocol_type: str
    assignor: str                         # the protocol (assignor) name chosen
    members: tuple
    coordinator: Optional[Node]
    #: What the caller may do with the group; None unless asked (``include_authorized_operations``).
    authorized_operations: Optional[FrozenSet[AclOperation]] = None


class ListOffsetsResultInfo(NamedTuple):
    offset: int
    timestamp: int
    leader_epoch: int


class DeletedRecords(NamedTuple):
    low_watermark: int


class ConsumerLag(NamedTuple):
    committed: int
    end_offset: int
    lag: int


class OffsetSpec:
    """What list_offsets asks for: EARLIEST, LATEST, MAX_TIMESTAMP or a timestamp (ms)."""
    EARLIEST = -2
    LATEST = -1
    MAX_TIMESTAMP = -3

    @staticmethod
    def for_timestamp(ts_ms: int) -> int:
        if ts_ms < 0:
            raise ValueError("a timestamp must be >= 0")
        return int(ts_ms)


def _spec(v) -> int:
    if isinstance(v, str):
        try:
            return {"earliest": -2, "latest": -1, "max_timestamp": -3}[v.lower()]
        except KeyError:
            raise ValueError(f"offset spec {v!r}: expected 'earliest', 'latest', 'max_timestamp' "
                             f"or a timestamp in ms") from None
    if isinstance(v, bool) or not isinstance(v, int) or v < -3:
        raise ValueError(f"offset spec {v!r}: expected OffsetSpec.EARLIEST/LATEST/MAX_TIMESTAMP "
                         f"or a timestamp in ms")
    return v


# --- handles -----------------------------------------------------------------------------

class AdminResult:
    """The outcome of one item (a topic, a group, a partition): ``done``,
    ``value``, ``error``; ``result()`` returns the value or raises the error."""
    __slots__ = ("key", "done", "value", "error")

    key: Any
    done: bool
    value: Any
    error: Optional[BaseException]

    def __init__(self, key: Any) -> None:
        self.key = key
        self.done = False
        self.value = None
        self.error = None

    def result(self) -> Any:
        """The value, or raise the error (KafkaError while not done)."""
        if not self.done:
            raise KafkaError(f"the result for {self.key!r} is not ready yet")
        if self.error is not None:
            raise self.error
        return self.value

    def __repr__(self):
        state = "pending" if not self.done else (f"error={self.error!r}" if self.error else f"value={self.value!r}")
        return f"<AdminResult {self.key!r} {state}>"


class AdminHandle:
    """The outcome of one admin operation.

    ``items``: {key: AdminResult} (topic name, group id, TopicPartition, ...);
    operations with one answer (list_topics, describe_cluster, ...) have one
    item and ``single`` set. ``done`` once every item is. ``result()``:
    the single value, or {key: value} - raising the first item error (Java's
    ``all()``); ``errors()``: {key: exception} of failed items. Drivers may
    subclass it and override ``_resolved`` (called once, when done)."""

    def __init__(self, operation: str, keys: Iterable[Any], deadline: float, single: bool = False) -> None:
        self.operation = operation
        self.items: Dict[Any, AdminResult] = {k: AdminResult(k) for k in keys}
        self.single = single
        self.deadline = deadline
        self.done = False
        self._pending = len(self.items)
        self._listeners: list = []

    @property
    def error(self) -> Optional[BaseException]:
        """The first failed item's error, or None."""
        for r in self.items.values():
            if r.error is not None:
                return r.error
        return None

    def errors(self) -> Dict[Any, BaseException]:
        """{key: exception} of the items that failed."""
        return {k: r.error for k, r in self.items.items() if r.error is not None}

    def values(self) -> Dict[Any, Any]:
        """{key: value} of the items that succeeded."""
        return {k: r.value for k, r in self.items.items() if r.done and r.error is None}

    def result(self) -> Any:
        """The single value, or {key: value}; raises the first item's error
        (Java's ``all().get()``), or KafkaError while not done."""
        if not self.done:
            raise KafkaError(f"{self.operation} is not done yet")
        err = self.error
        if err is not None:
            raise err
        if self.single:
            return next(iter(self.items.values())).value
        return {k: r.value for k, r in self.items.items()}

    def _resolved(self):
        pass

    def __repr__(self):
        return f"<AdminHandle {self.operation} {'done' if self.done else 'pending'} {len(self.items)} items>"


# --- calls ---------------------------------------------------------------------------------

ANY, CONTROLLER, NODE = "any", "controller", "node"
#: Codes meaning "the controller moved": re-route to a fresh controller.
_NOT_CONTROLLER = 41
#: Codes meaning "ask FindCoordinator again".
_COORDINATOR_MOVED = frozenset({15, 16})
_COORDINATOR_LOADING = 14
#: DescribeGroups v6+ for a group that is not a classic one (or does not exist).
GROUP_ID_NOT_FOUND = 69
#: Partition-level codes meaning "the leader moved / is not known yet": look it up again.
_LEADER_MOVED = frozenset({5, 6, 9, 13})


class _Call:
    """One request of an operation. ``keys`` are the operation items it resolves."""

    def __init__(self, op, api, keys, target=ANY, node=None, *, tries=0, not_before=0, drops=None):
        self.op = op
        self.api = api
        self.keys = list(keys)
        self.target = target
        self.node = node
        self.tries = tries
        # {(api, node): times that node closed the connection on our whole
        # request}, shared along the chain of calls of one operation step.
        self.drops = {} if drops is None else drops
        self.next_try_at = not_before
        self.last_error = None
        self.request = None
        self.what = api

    # overridden per operation
    def build(self, core, node) -> dict:
        raise NotImplementedError

    def handle(self, core, body, now) -> None:
        raise NotImplementedError

    def describe(self):
        where = {ANY: "any broker", CONTROLLER: "the controller"}.get(self.target, f"node {self.node}")
        return f"{self.what} to {where}"


class AdminCore(DriverIO, ShareGroupAdmin, StreamsGroupAdmin, GroupAdmin, TransactionAdmin, AclAdmin, ConfigAdmin,
                ScramAdmin, TokenAdmin, ClusterAdmin, QuorumAdmin, TelemetryAdmin):
    def __init__(self, config=None, *, rng=None, **kwargs):
        cfg = config if isinstance(config, Config) else parse_admin_config(config, **kwargs)
        self.config = cfg
        self.rng = rng or random.Random()
        #: KIP-919: the admin talks to the KRaft controllers (bootstrap.controllers), not brokers.
        self.using_bootstrap_controllers = bool(cfg.bootstrap_controllers)
        self.cluster, self.client = network_for(
            cfg, rng=self.rng, max_in_flight=5, allow_auto_topic_creation=False, telemetry_type="admin-client",
            **({"bootstrap": cfg.bootstrap_controllers, "cluster_class": ControllerMetadata}
               if self.using_bootstrap_controllers else {}))
        self._calls: list[_Call] = []          # waiting to be sent (maybe backing off)
        self._in_flight: set = set()
        self._completed: list = []
        self.closed = False
        self.retries = 0                        # total retried calls (metrics, tests)
        self._created: Dict[str, float] = {}    # topic -> when this core created it (see the module doc)
        self._telemetry_closing: Optional[AdminHandle] = None    # terminate_telemetry's, until done
        self._instance_id_waits = []

    # -- the driver interface --------------------------------------------------------------
    def poll(self, now) -> list:
        actions = self.client.poll(now)
        if not self.client.closing:
            self._run_calls(now)
            actions.extend(self.client.poll(now))
        if self._telemetry_closing is not None:
            self._check_telemetry_closing(now)
        self._check_instance_id_waits(now)
        return actions

    def next_deadline(self, now) -> Optional[float]:
        best = self.client.next_deadline(now)
        for c in self._calls:
            # A call waiting for its node (reconnect backoff) needs no timer
            # of ours: the client's deadline covers the nodes we asked for.
            wake = c.next_try_at if c.next_try_at > now else None     # backing off
            for d in (c.op.deadline, wake):
                if d is not None and (best is None or d < best):
                    best = d
        closing = self._telemetry_closing
        for d in (closing.deadline if closing is not None else None, self._instance_id_deadline()):
            if d is not None and (best is None or d < best):
                best = d
        return best

    def events(self) -> list:
        """AdminHandles completed since the last call."""
        out, self._completed = self._completed, []
        return out

    @property
    def pending(self) -> bool:
        return bool(self._calls or self._in_flight)

    def terminate_telemetry(self, *, timeout_ms=None, now) -> AdminHandle:
        """KIP-714 on close, as the producer and consumer do it: the terminating
        PushTelemetry (when a metrics subscription is active; else nothing to
        send), before :meth:`close` drops the connections. One item
        "telemetry": True once telemetry is over, False when ``timeout_ms``
        (at most request.timeout.ms, the bound of one push, as Java's close
        timeout bounds it) ran out first - closing goes on either way, so
        this never fails. The drivers run it, like any operation, in their
        close."""
        wait = self.config.request_timeout_ms
        if timeout_ms is not None:
            wait = max(0, min(wait, timeout_ms))
        op = self._op("terminate_telemetry", ["telemetry"], now, wait, single=True)
        self._telemetry_closing = op
        self._check_telemetry_closing(now)
        return op

    def _check_telemetry_closing(self, now) -> None:
        """Complete terminate_telemetry's operation: telemetry over, or its deadline passed."""
        op = self._telemetry_closing
        over = self.client.telemetry_closed(now)      # starts the terminating push (once)
        if over or now >= op.deadline:
            self._telemetry_closing = None
            self._complete(op, "telemetry", value=over)

    def close(self, now):
        """Fail every unfinished operation and close every connection; returns Close actions."""
        self.closed = True
        if self._telemetry_closing is not None:       # not waited for: closing anyway
            op, self._telemetry_closing = self._telemetry_closing, None
            self._complete(op, "telemetry", value=False)
        actions = self.client.close(now)     # in-flight calls fail through _on_done
        for c in self._calls + list(self._in_flight):
            self._fail_call(c, _closed_error())
        self._calls = []
        self._in_flight.clear()
        return actions

    # -- the engine ------------------------------------------------------------------------
    def _op(self, name, keys, now, timeout_ms, single=False) -> AdminHandle:
        if self.closed:
            raise _closed_error()
        t = self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms
        op = AdminHandle(name, keys, now + t, single)
        op.timeout_ms = t
        if not op.items:
            op.done = True
            self._completed.append(op)
        return op

    def _submit(self, call: _Call):
        self._calls.append(call)

    def _backoff(self, tries) -> float:
        b = self.config.retry_backoff_ms * 2 ** max(0, tries - 1)
        return min(b, self.config.retry_backoff_max_ms)

    def _wrong_endpoint(self) -> Optional[KafkaError]:
        """The error to fail every call with when ``bootstrap.controllers``
        leads to brokers, which refuse the controllers' DescribeCluster with
        MISMATCHED_ENDPOINT_TYPE (Java's Admin fails its calls then too)."""
        err = self.cluster.refusal
        if isinstance(err, (error_codes.MismatchedEndpointTypeError, error_codes.UnsupportedEndpointTypeError)):
            return error_codes.error_for_code(
                err.code, f"{err.message}; bootstrap.controllers must name KRaft controllers (their controller "
                          f"listeners), not brokers", "bootstrap.controllers")
        return None

    @property
    def _broker_or_active_controller(self) -> str:
        """Where Java's Admin sends the cluster and quorum descriptions and the
        voter calls (LeastLoadedBrokerOrActiveKController): any broker, or,
        bootstrapped from the controllers, the active controller."""
        return CONTROLLER if self.using_bootstrap_controllers else ANY

    def _node_for(self, call, now) -> Optional[int]:
        if call.target == ANY:
            return self.client.least_loaded_node(now)
        if call.target == CONTROLLER:
            ctl = self.cluster.controller_id
            if ctl is None or ctl < 0 or ctl not in self.cluster.brokers:
                self.cluster.request_update()
                return None
            return ctl
        return call.node

    def _run_calls(self, now):
        auth_error = self.client.auth_error or self._wrong_endpoint()
        for call in list(self._calls):
            # Wrong credentials, or bootstrap.controllers naming brokers: fail
            # now, not at the deadline.
            if auth_error is not None:
                self._calls.remove(call)
                self._fail_call(call, auth_error)
                continue
            if call.op.done or all(call.op.items[k].done for k in call.keys):
                self._calls.remove(call)
                continue
            if now >= call.op.deadline:
                self._calls.remove(call)
                self._timeout(call, now)
                continue
            if now < call.next_try_at:
                continue
            node = self._node_for(call, now)
            if node is None:
                continue
            if call.target == NODE and self.client.is_unavailable(node, now):
                # The node could not be reached (a dead leader): re-route as
                # after a lost connection - a leader call looks its leaders up
                # again - instead of waiting for that node until the deadline
                # (Java: unassignUnsentCalls(connectionFailed)).
                self._calls.remove(call)
                self._retry(call, ConnectionClosedError(
                    f"{call.api} to node {node}: {self.client.connection_trouble() or 'unreachable'}"),
                    now, moved=True)
                continue
            if not self.client.ready(node, now):
                continue
            try:
                body = call.build(self, node)
                timeout = max(1, min(self.config.request_timeout_ms, call.op.deadline - now))
                req = self.client.send(node, call.api, body, now, timeout_ms=timeout,
                                       callback=lambda r, c=call: self._on_done(c, r))
            except NotReadyError:
                continue
            except UnsupportedVersionError as e:
                self._calls.remove(call)
                self._fail_call(call, UnsupportedVersionError(f"{call.op.operation}: {e}"))
                continue
            except KafkaError as e:          # an encode error: the caller's input
                self._calls.remove(call)
                self._fail_call(call, e)
                continue
            call.node = node
            call.request = req
            self._calls.remove(call)
            self._in_flight.add(call)

    def _on_done(self, call, req):
        self._in_flight.discard(call)
        now = req.completed_at
        if self.closed:
            self._fail_call(call, _closed_error())
            return
        if req.error is not None:
            err = req.error
            if isinstance(err, ConnectionClosedError) and req.written:
                err = self._dropped(call, err)
                if err is None:
                    return
            if isinstance(err, (ConnectionClosedError, RequestTimedOutError)) or getattr(err, "retriable", False):
                self._retry(call, err, now, moved=True)
            else:
                self._fail_call(call, err)
            return
        try:
            call.handle(self, req.result, now)
        except KafkaError as e:
            self._fail_call(call, e)
        except (KeyError, TypeError, ValueError) as e:   # a malformed answer
            self._fail_call(call, KafkaError(f"{call.op.operation}: unexpected {call.api} answer: {e!r}"))

    def _dropped(self, call, err):
        """The broker had all of ``call``'s request and closed the connection
        instead of answering. Once may be bad luck (a restart, an idle
        connection closed as we wrote): returns the error to retry with,
        naming the request. The same broker doing it again cannot serve
        this request (e.g. an API it advertises but does not implement):
        fail the call's items now, naming the request and its items, rather
        than retrying until default.api.timeout.ms and then blaming
        whatever step ran last; returns None."""
        key = (call.api, call.node)
        call.drops[key] = n = call.drops.get(key, 0) + 1
        if n < 2:
            return ConnectionClosedError(f"{call.api} to node {call.node}: {err}")
        items = ", ".join(_key_text(k) for k in call.keys)
        failure = KafkaError(
            f"{call.op.operation}: {call.api} for {items} failed: node {call.node} closed the "
            f"connection instead of answering, {n} times in a row ({err}); the broker cannot "
            f"serve this request (its log may say why)")
        failure.__cause__ = err
        self._fail_call(call, failure)
        return None

    def _retry(self, call, err, now, moved=False, keys=None):
        """Send ``call`` (or a copy for ``keys``) again after the backoff.
        ``moved``: its target node is stale (re-route)."""
        self.retries += 1
        if keys is not None and set(keys) != set(call.keys):
            call = _copy_call(call, keys)
        call.tries += 1
        call.last_error = err
        call.request = None
        call.next_try_at = now + self._backoff(call.tries)
        if moved:
            if call.target == CONTROLLER:
                self.cluster.controller_id = None
                self.cluster.request_update()
            on_moved = getattr(call, "on_moved", None)
            if on_moved is not None:
                on_moved(call, now)
                return
        self._submit(call)

    def _timeout(self, call, now):
        if call.last_error is not None:
            last = f"; last error: {call.last_error}"
        else:
            trouble = self.client.connection_trouble()
            last = f"; no broker answered ({trouble})" if trouble else ""
        err = AdminTimeoutError(
            f"{call.op.operation} timed out after {call.op.timeout_ms} ms (default.api.timeout.ms "
            f"or timeout_ms): {call.describe()} did not succeed ({call.tries} retries){last}")
        self._fail_call(call, err)

    def _fail_call(self, call, err):
        for k in call.keys:
            self._complete(call.op, k, error=err)

    def _complete(self, op, key, value=None, error=None):
        item = op.items[key]
        if item.done:
            return
        item.done = True
        item.value = value
        item.error = error
        op._pending -= 1
        if op._pending == 0 and not op.done:
            op.done = True
            self._completed.append(op)
            for fn in op._listeners:
                fn(op)
            op._resolved()

    def _propagating(self, topic, code, now) -> bool:
        """Whether a Metadata answer's ``code`` for ``topic`` means "not known
        here yet" rather than a final answer: LEADER_NOT_AVAILABLE, or
        UNKNOWN_TOPIC_OR_PARTITION for a topic this core created recently."""
        if code == 5:
            return True
        created = self._created.get(topic)
        return code == 3 and created is not None and now - created < self.config.default_api_timeout_ms

    def _remember_created(self, topic, now):
        """Note ``topic`` as created by this core now, forgetting the creations
        that no longer count (so a long-lived admin keeps only recent ones)."""
        window = self.config.default_api_timeout_ms
        self._created = {t: at for t, at in self._created.items() if now - at < window}
        self._created[topic] = now

    def _seen_metadata(self, body, now):
        """Let the shared cache learn brokers and the controller from any Metadata answer."""
        self.cluster.update({**body, "topics": []}, now)

    def _ask_every_broker(self, op, key, left, ask):
        """Metadata to any broker (for item ``key`` of ``op``), then the call
        ``ask(node)`` to every broker it lists; ``left`` gets each such node
        (its handler pops the node once answered). No broker listed: retried."""
        core = self

        class Brokers(_Call):
            def build(call, core_, node):
                return {"topics": [], "allow_auto_topic_creation": False}

            def handle(call, core_, body, now):
                core._seen_metadata(body, now)
                nodes = sorted(b["node_id"] for b in body.get("brokers") or [])
                if not nodes:
                    core._retry(call, KafkaError("Metadata listed no brokers"), now)
                    return
                for n in nodes:
                    left[n] = True
                    core._submit(ask(n))

        self._submit(Brokers(op, "Metadata", [key]))

    # -- topics ----------------------------------------------------------------------------
    def create_topics(self, topics, *, validate_only=False, timeout_ms=None, now) -> AdminHandle:
        """Create topics (NewTopic or names) on the controller; one item per topic name."""
        topics = [t if isinstance(t, NewTopic) else NewTopic(t) for t in topics]
        _no_dups([t.name for t in topics], "create_topics")
        # Names Kafka does not allow fail at once, as in Java (their items
        # only; the others are created): not every broker refuses them.
        invalid = {}
        for t in topics:
            try:
                validate_topic_name(t.name)
            except error_codes.InvalidTopicError as e:
                invalid[t.name] = e
        op = self._op("create_topics", [t.name for t in topics], now, timeout_ms)
        for name, err in invalid.items():
            self._complete(op, name, error=err)
        valid = [t.name for t in topics if t.name not in invalid]
        by_name = {t.name: t for t in topics}
        wait = self.config.request_timeout_ms if timeout_ms is None else timeout_ms

        def build(node, call=None):
            ks = call.keys
            return {"topics": [{
                "name": n, "num_partitions": by_name[n].num_partitions,
                "replication_factor": by_name[n].replication_factor,
                "assignments": [{"partition_index": p, "broker_ids": list(b)}
                                for p, b in sorted(by_name[n].replica_assignments.items())],
                "configs": [{"name": k, "value": None if v is None else str(v)}
                            for k, v in by_name[n].configs.items()]} for n in ks],
                "timeout_ms": wait, "validate_only": validate_only}

        def handle(call, body, now):
            again = []
            for t in body.get("topics") or []:
                n = t["name"]
                if n not in call.keys:
                    continue
                code = t["error_code"]
                if code == _NOT_CONTROLLER:
                    again.append(n)
                elif code:
                    self._complete(op, n, error=error_codes.error_for_code(
                        code, t.get("error_message"), f"create topic {n!r}"))
                else:
                    if not validate_only:
                        self._remember_created(n, now)
                    self._complete(op, n, value=_topic_id(t.get("topic_id")))
            self._unanswered(call, op, "CreateTopics", again)
            if again:
                self._retry(call, error_codes.error_for_code(_NOT_CONTROLLER, None, "CreateTopics"),
                            now, moved=True, keys=again)

        if valid:
            self._submit(_SelfCall(op, "CreateTopics", valid, build, handle, target=CONTROLLER))
        return op

    def delete_topics(self, topics, *, timeout_ms=None, now) -> AdminHandle:
        """Delete topics by name on the controller; one item per topic."""
        topics = list(topics)
        _no_dups(topics, "delete_topics")
        op = self._op("delete_topics", topics, now, timeout_ms)
        wait = self.config.request_timeout_ms if timeout_ms is None else timeout_ms

        def build(node, call=None):
            return {"topics": [{"name": n} for n in call.keys], "topic_names": list(call.keys),
                    "timeout_ms": wait}

        def handle(call, body, now):
            again = []
            for t in body.get("responses") or []:
                n = t.get("name")
                if n not in call.keys:
                    continue
                code = t["error_code"]
                if code == _NOT_CONTROLLER:
                    again.append(n)
                elif code:
                    self._complete(op, n, error=error_codes.error_for_code(
                        code, t.get("error_message"), f"delete topic {n!r}"))
                else:
                    self._created.pop(n, None)      # unknown from now on is final
                    self._complete(op, n, value=None)
            self._unanswered(call, op, "DeleteTopics", again)
            if again:
                self._retry(call, error_codes.error_for_code(_NOT_CONTROLLER, None, "DeleteTopics"),
                            now, moved=True, keys=again)

        self._submit(_SelfCall(op, "DeleteTopics", op.items, build, handle, target=CONTROLLER))
        return op

    def create_partitions(self, new_partitions: dict, *, validate_only=False, timeout_ms=None,
                          now) -> AdminHandle:
        """Grow topics to ``NewPartitions(total_count)`` (or an int); one item per topic."""
        spec = {t: (p if isinstance(p, NewPartitions) else NewPartitions(int(p)))
                for t, p in new_partitions.items()}
        op = self._op("create_partitions", list(spec), now, timeout_ms)
        wait = self.config.request_timeout_ms if timeout_ms is None else timeout_ms

        def build(node, call=None):
            return {"topics": [{"name": n, "count": spec[n].total_count,
                                "assignments": None if spec[n].assignments is None else
                                [{"broker_ids": list(b)} for b in spec[n].assignments]}
                               for n in call.keys],
                    "timeout_ms": wait, "validate_only": validate_only}

        def handle(call, body, now):
            again = []
            for t in body.get("results") or []:
                n = t["name"]
                if n not in call.keys:
                    continue
                code = t["error_code"]
                if code == _NOT_CONTROLLER:
                    again.append(n)
                elif code:
                    self._complete(op, n, error=error_codes.error_for_code(
                        code, t.get("error_message"), f"create partitions of {n!r}"))
                else:
                    self._complete(op, n, value=None)
            self._unanswered(call, op, "CreatePartitions", again)
            if again:
                self._retry(call, error_codes.error_for_code(_NOT_CONTROLLER, None, "CreatePartitions"),
                            now, moved=True, keys=again)

        self._submit(_SelfCall(op, "CreatePartitions", op.items, build, handle, target=CONTROLLER))
        return op

    def _unanswered(self, call, op, api, again=()):
        """Items the broker did not mention fail (a broker bug), so nothing waits forever."""
        for k in call.keys:
            if not op.items[k].done and k not in again:
                self._complete(op, k, error=KafkaError(
                    f"{op.operation}: the {api} answer did not mention {k!r}"))

    def list_topics(self, *, list_internal=False, timeout_ms=None, now) -> AdminHandle:
        """All topics: {name: TopicListing} (internal ones only with ``list_internal``)."""
        op = self._op("list_topics", ["topics"], now, timeout_ms, single=True)

        def build(node, call=None):
            return {"topics": None, "allow_auto_topic_creation": False,
                    "include_topic_authorized_operations": False}

        def handle(call, body, now):
            self._seen_metadata(body, now)
            out = {}
            for t in body.get("topics") or []:
                if t.get("error_code", 0) or (t.get("is_internal") and not list_internal):
                    continue
                out[t["name"]] = TopicListing(t["name"], _topic_id(t.get("topic_id")), bool(t.get("is_internal")))
            self._complete(op, "topics", value=dict(sorted(out.items())))

        self._submit(_SelfCall(op, "Metadata", op.items, build, handle))
        return op

    # -- cluster and configs ------------------------------------------------------------------
    def describe_cluster(self, *, include_authorized_operations=False, timeout_ms=None, now) -> AdminHandle:
        """ClusterDescription (DescribeCluster when the broker has it, else Metadata).
        ``include_authorized_operations``: its ``authorized_operations`` are
        what the caller may do with the cluster (else None); a broker with
        neither DescribeCluster nor Metadata v8-v10 fails it with
        UnsupportedVersionError."""
        op = self._op("describe_cluster", ["cluster"], now, timeout_ms, single=True)
        include = bool(include_authorized_operations)

        class Call(_Call):
            def build(call, core, node):
                if self.using_bootstrap_controllers:      # the controllers describe themselves
                    return {"include_cluster_authorized_operations": include, "endpoint_type": CONTROLLER_ENDPOINT}
                if self.client.api_version(node, "DescribeCluster") is not None:
                    call.api = "DescribeCluster"
                    return {"include_cluster_authorized_operations": include}
                call.api = "Metadata"
                if not include:
                    return {"topics": [], "allow_auto_topic_creation": False}
                # Only Metadata v8-v10 carry the cluster's operations (v11 moved them to DescribeCluster).
                version = self.client.api_version(node, "Metadata") or 0
                if not 8 <= version <= 10:
                    raise UnsupportedVersionError(
                        f"describe_cluster(include_authorized_operations=True) needs DescribeCluster or "
                        f"Metadata v8-v10; node {node} offers neither (Metadata v{version})")
                return {"topics": [], "allow_auto_topic_creation": False,
                        "include_cluster_authorized_operations": True}

            def handle(call, core, body, now):
                if call.api == "DescribeCluster":
                    code = body.get("error_code", 0)
                    if code:
                        err = error_codes.error_for_code(code, body.get("error_message"), "DescribeCluster")
                        if err.retriable:
                            self._retry(call, err, now)
                        else:
                            self._complete(op, "cluster", error=err)
                        return
                    nodes = tuple(Node(b["broker_id"], b["host"], b["port"], b.get("rack"))
                                  for b in body.get("brokers") or [])
                else:
                    self._seen_metadata(body, now)
                    nodes = tuple(Node(b["node_id"], b["host"], b["port"], b.get("rack"))
                                  for b in body.get("brokers") or [])
                ctl = next((n for n in nodes if n.id == body.get("controller_id")), None)
                self._complete(op, "cluster", value=ClusterDescription(
                    body.get("cluster_id"), ctl, tuple(sorted(nodes)),
                    authorized_operations(body.get("cluster_authorized_operations")) if include else None))

        self._submit(Call(op, "DescribeCluster", op.items, target=self._broker_or_active_controller))
        return op

    def describe_configs(self, resources, *, include_synonyms=False, timeout_ms=None, now) -> AdminHandle:
        """{ConfigResource: {name: ConfigEntry}}; broker resources go to that broker,
        topic resources to any broker."""
        resources = [r if isinstance(r, ConfigResource) else ConfigResource(*r) for r in resources]
        _no_dups(resources, "describe_configs")
        op = self._op("describe_configs", resources, now, timeout_ms)

        def build(node, call=None):
            return {"resources": [{"resource_type": r.type, "resource_name": r.name,
                                   "configuration_keys": None} for r in call.keys],
                    "include_synonyms": include_synonyms, "include_documentation": False}

        def handle(call, body, now):
            for res in body.get("results") or []:
                key = ConfigResource(res["resource_type"], res["resource_name"])
                if key not in call.keys:
                    continue
                code = res["error_code"]
                if code:
                    self._complete(op, key, error=error_codes.error_for_code(
                        code, res.get("error_message"), f"describe configs of {key}"))
                    continue
                entries = {}
                for c in res.get("configs") or []:
                    src = c.get("config_source", -1)
                    entries[c["name"]] = ConfigEntry(
                        c["name"], c.get("value"), src,
                        bool(c.get("is_default")) or src == 5, bool(c.get("read_only")),
                        bool(c.get("is_sensitive")),
                        tuple((s["name"], s.get("value"), s.get("source", -1)) for s in c.get("synonyms") or ()))
                self._complete(op, key, value=entries)
            for k in call.keys:
                if not op.items[k].done:
                    self._complete(op, k, error=KafkaError(f"describe_configs: the broker did not answer for {k}"))

        self._per_resource(op, "DescribeConfigs", resources, build, handle)
        return op

    # -- groups -----------------------------------------------------------------------------
    def _group_call(self, op, group, api, build, handle, key_type=0, keys=None):
        """FindCoordinator for ``group`` (any broker), then ``api`` to the coordinator;
        NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE / connection loss look it up again.
        ``key_type`` 1: ``group`` is a transactional id (its transaction coordinator);
        ``keys``: the items the calls resolve, when they are not ``[group]``."""
        core = self
        what = "transactional id" if key_type == 1 else "group"

        class Lookup(_Call):
            def build(call, core_, node):
                return find_coordinator_body(group, key_type)

            def handle(call, core_, body, now):
                coords = body.get("coordinators") or []
                entry = next((c for c in coords if c.get("key") == group), coords[0]) if coords else body
                code = entry.get("error_code", 0)
                if code == 0 and (entry.get("node_id", -1) < 0 or not entry.get("host")):
                    code = 15
                if code:
                    err = error_codes.error_for_code(code, entry.get("error_message"),
                                                     f"FindCoordinator for {what} {group!r}")
                    if err.retriable:
                        core._retry(call, err, now)
                    else:
                        core._fail_call(call, err)
                    return
                node = entry["node_id"]
                if node not in core.cluster.brokers:
                    core.cluster.add_node(node, entry["host"], entry["port"])
                main = _SelfCall(op, api, call.keys, build, handle, target=NODE, node=node,
                                 tries=call.tries, not_before=now, drops=call.drops)
                main.group = group
                main.coordinator = Node(node, entry["host"], entry["port"])

                def moved(c, now2):
                    again = Lookup(op, "FindCoordinator", c.keys, tries=c.tries,
                                   not_before=c.next_try_at, drops=c.drops)
                    again.last_error = c.last_error
                    core._submit(again)
                main.on_moved = moved
                core._submit(main)

        lk = Lookup(op, "FindCoordinator", [group] if keys is None else keys)
        self._submit(lk)

    def _group_error(self, call, code, message, context, now) -> bool:
        """Handle a group-level error code; True when the call is finished with it."""
        if code == 0:
            return False
        err = error_codes.error_for_code(code, message, context)
        if code in _COORDINATOR_MOVED:
            self._retry(call, err, now, moved=True)
        elif code == _COORDINATOR_LOADING:
            self._retry(call, err, now)
        else:
            self._fail_call(call, err)
        return True

    def list_consumer_groups(self, *, states=None, timeout_ms=None, now) -> AdminHandle:
        """ListGroups on every broker; result: [ConsumerGroupListing] (consumer and
        simple groups) with their states (``states``: only groups in these
        states, e.g. ["Stable", "Empty"]). ``errors()`` has the brokers that
        failed (item "groups" fails with the first such error).

        A broker that answers ListGroups below v4 (no state) or with the state
        "Unknown" (Tansu does) is asked with one DescribeGroups for the real
        states of the groups it listed - it coordinates them. Should that
        fail, the listing keeps the state it had."""
        op = self._op("list_consumer_groups", ["groups"], now, timeout_ms, single=True)
        found: dict = {}
        left = {}
        wanted = None if not states else {s.lower() for s in states}
        core = self

        def finish_node(node):
            left.pop(node, None)
            if not left:
                listing = [g for g in found.values()
                           if wanted is None or (g.state or "").lower() in wanted]
                self._complete(op, "groups", value=sorted(listing))

        def describe_states(node, groups, now):
            inner = AdminHandle("list_consumer_groups", groups, op.deadline)
            inner.timeout_ms = op.timeout_ms

            def build(n, call=None):
                return {"groups": list(call.keys), "include_authorized_operations": False}

            def handle(call, body, now):
                for d in body.get("groups") or []:
                    g = d.get("group_id")
                    if g not in call.keys or inner.items[g].done:
                        continue
                    code = d.get("error_code", 0)
                    if code:
                        core._complete(inner, g, error=error_codes.error_for_code(
                            code, None, f"describe group {g!r}"))
                    else:
                        core._complete(inner, g, value=d.get("group_state") or None)
                core._unanswered(call, inner, "DescribeGroups")

            def described(h):
                _unlist(core, h)                     # an inner step, not an operation
                for g, state in h.values().items():
                    if state and state != "Unknown":
                        found[g] = found[g]._replace(state=state)
                finish_node(node)

            inner._listeners.append(described)
            self._submit(_SelfCall(inner, "DescribeGroups", groups, build, handle,
                                   target=NODE, node=node, not_before=now))

        class ListCall(_Call):
            def build(call, core, n):
                return {"states_filter": list(states or []), "types_filter": []}

            def handle(call, core, body, now):
                code = body.get("error_code", 0)
                if code:
                    err = error_codes.error_for_code(code, None, f"ListGroups on node {call.node}")
                    if err.retriable:
                        self._retry(call, err, now)
                    else:
                        self._fail_call(call, err)
                    return
                unknown = []
                for g in body.get("groups") or []:
                    pt = g.get("protocol_type") or ""
                    if pt in ("consumer", ""):
                        state = g.get("group_state") or None
                        found[g["group_id"]] = ConsumerGroupListing(
                            g["group_id"], pt == "", state, pt, call.node)
                        if state is None or state == "Unknown":
                            unknown.append(g["group_id"])
                if unknown:
                    describe_states(call.node, unknown, now)
                else:
                    finish_node(call.node)

        self._ask_every_broker(op, "groups", left,
                               lambda n: ListCall(op, "ListGroups", ["groups"], target=NODE, node=n))
        return op

    def describe_consumer_groups(self, group_ids, *, include_authorized_operations=False, timeout_ms=None,
                                 now) -> AdminHandle:
        """{group: ConsumerGroupDescription}; members' assignments decoded with the
        consumer protocol (subscriptions too when the broker returns them).
        ``include_authorized_operations``: each description's
        ``authorized_operations`` are what the caller may do with the group
        (else None)."""
        include = bool(include_authorized_operations)
        groups = list(group_ids)
        _no_dups(groups, "describe_consumer_groups")
        op = self._op("describe_consumer_groups", groups, now, timeout_ms)
        for g in groups:
            def build(node, call=None, g=g):
                return {"groups": [g], "include_authorized_operations": include}

            def handle(call, body, now, g=g):
                d = next((x for x in body.get("groups") or [] if x.get("group_id") == g), None)
                if d is None:
                    self._fail_call(call, KafkaError(f"DescribeGroups did not describe group {g!r}"))
                    return
                if d["error_code"] == GROUP_ID_NOT_FOUND and self._describe_consumer_protocol_group(
                        op, g, call, include, now):
                    return
                if self._group_error(call, d["error_code"], None, f"describe group {g!r}", now):
                    return
                pt = d.get("protocol_type") or ""
                self._complete(op, g, value=ConsumerGroupDescription(
                    g, pt == "", d.get("group_state") or "", pt,
                    d.get("protocol_data") or "", classic_members(d), getattr(call, "coordinator", None),
                    _asked_operations(d, include)))

            self._group_call(op, g, "DescribeGroups", build, handle)
        return op

    def _describe_consumer_protocol_group(self, op, g, call, include, now) -> bool:
        """DescribeGroups answers GROUP_ID_NOT_FOUND for a group of the KIP-848
        consumer protocol too ("not a classic group"): ask ConsumerGroupDescribe
        (as Java's Admin does) when this coordinator serves it. True when that
        call was made; its answer completes ``g`` (GROUP_ID_NOT_FOUND again:
        the group really does not exist)."""
        if call.node is None or self.client.api_version(call.node, "ConsumerGroupDescribe") is None:
            return False

        def build(node, call=None):
            return {"group_ids": [g], "include_authorized_operations": include}

        def handle(call2, body, now2):
            d = next((x for x in body.get("groups") or [] if x.get("group_id") == g), None)
            if d is None:
                self._fail_call(call2, KafkaError(f"ConsumerGroupDescribe did not describe group {g!r}"))
                return
            if self._group_error(call2, d["error_code"], d.get("error_message"),
                                 f"describe group {g!r}", now2):
                return
            from kproto.consumer.assignors import Assignment, MemberSubscription

            members = []
            for m in d.get("members") or []:
                owned = tuple(sorted(TopicPartition(t["topic_name"], p)
                                     for t in (m.get("assignment") or {}).get("topic_partitions") or ()
                                     for p in t["partitions"]))
                subscription = MemberSubscription(tuple(m.get("subscribed_topic_names") or ()),
                                                  rack_id=m.get("rack_id"),
                                                  group_instance_id=m.get("instance_id"))
                members.append(MemberDescription(m["member_id"], m.get("instance_id"),
                                                 m.get("client_id") or "", m.get("client_host") or "",
                                                 Assignment(owned), subscription))
            self._complete(op, g, value=ConsumerGroupDescription(
                g, False, d.get("group_state") or "", "consumer", d.get("assignor_name") or "",
                tuple(members), getattr(call2, "coordinator", None), _asked_operations(d, include)))

        self._group_call(op, g, "ConsumerGroupDescribe", build, handle)
        return True

    def delete_consumer_groups(self, group_ids, *, timeout_ms=None, now) -> AdminHandle:
        """DeleteGroups at each group's coordinator; one item per group."""
        return self._delete_groups("delete_consumer_groups", group_ids, timeout_ms, now)

    def _delete_groups(self, operation, group_ids, timeout_ms, now) -> AdminHandle:
        """DeleteGroups at each group's coordinator, as ``operation`` (Java's
        Admin deletes consumer, share and streams groups alike)."""
        groups = list(group_ids)
        _no_dups(groups, operation)
        op = self._op(operation, groups, now, timeout_ms)
        for g in groups:
            def build(node, call=None, g=g):
                return {"groups_names": [g]}

            def handle(call, body, now, g=g):
                r = next((x for x in body.get("results") or [] if x.get("group_id") == g), None)
                if r is None:
                    self._fail_call(call, KafkaError(f"DeleteGroups did not answer for group {g!r}"))
                    return
                if self._group_error(call, r["error_code"], None, f"delete group {g!r}", now):
                    return
                self._complete(op, g, value=None)

            self._group_call(op, g, "DeleteGroups", build, handle)
        return op

    # -- partition leaders: list_offsets, delete_records ---------------------------------------
    def _to_leaders(self, op, keys, api, build, parse, now, tries=0, not_before=0):
        """Metadata for the topics of ``keys`` (TopicPartitions), then one ``api``
        call per leader. ``parse(call, body)`` yields (tp, code, value)."""
        core = self

        class Leaders(_Call):
            def describe(call):
                # A timeout names the operation's request, not only "Metadata".
                return f"Metadata (finding the leaders for {api}) to any broker"

            def build(call, core_, node):
                return {"topics": [{"name": t} for t in sorted({tp.topic for tp in call.keys})],
                        "allow_auto_topic_creation": False}

            def handle(call, core_, body, now):
                core._seen_metadata(body, now)
                topics = {t.get("name"): t for t in body.get("topics") or []}
                by_leader, wait = {}, []
                for tp in call.keys:
                    t = topics.get(tp.topic)
                    code = 3 if t is None else t.get("error_code", 0)
                    if core._propagating(tp.topic, code, now):
                        wait.append(tp)
                        continue
                    if code:
                        core._complete(op, tp, error=error_codes.error_for_code(
                            code, None, f"{op.operation}: metadata for topic {tp.topic!r}"))
                        continue
                    p = next((p for p in t.get("partitions") or [] if p["partition_index"] == tp.partition), None)
                    if p is None:
                        core._complete(op, tp, error=error_codes.error_for_code(
                            3, f"topic {tp.topic!r} has no partition {tp.partition}", op.operation))
                        continue
                    leader = p["leader_id"]
                    if leader < 0 or leader not in core.cluster.brokers:
                        wait.append(tp)
                        continue
                    by_leader.setdefault(leader, []).append(tp)
                for leader, tps in sorted(by_leader.items()):
                    c = _SelfCall(op, api, tps, build, on_answer, target=NODE, node=leader,
                                  tries=call.tries, not_before=now, drops=call.drops)
                    c.on_moved = relookup
                    core._submit(c)
                if wait:
                    core._retry(call, error_codes.error_for_code(5, None, op.operation), now, keys=wait)

        def on_answer(call, body, now):
            again = []
            last = None
            for tp, code, value in parse(body):
                if tp not in call.keys or op.items[tp].done:
                    continue
                if code in _LEADER_MOVED or code == 3:
                    again.append(tp)
                    last = error_codes.error_for_code(code, None, f"{op.operation} for {tp.topic}-{tp.partition}")
                elif code:
                    core._complete(op, tp, error=error_codes.error_for_code(
                        code, None, f"{op.operation} for {tp.topic}-{tp.partition}"))
                else:
                    core._complete(op, tp, value=value)
            for tp in call.keys:
                if not op.items[tp].done and tp not in again:
                    core._complete(op, tp, error=KafkaError(
                        f"{op.operation}: the leader did not answer for {tp.topic}-{tp.partition}"))
            if again:
                core._retry(call, last, now, moved=True, keys=again)

        def relookup(c, now2):
            again = Leaders(op, "Metadata", c.keys, tries=c.tries, not_before=c.next_try_at,
                            drops=c.drops)
            again.last_error = c.last_error
            core._submit(again)

        self._submit(Leaders(op, "Metadata", keys, tries=tries, not_before=not_before))

    def list_offsets(self, specs: dict, *, isolation_level=0, timeout_ms=None, now) -> AdminHandle:
        """{TopicPartition: ListOffsetsResultInfo} for {TopicPartition: spec}, spec
        one of OffsetSpec.EARLIEST/LATEST/MAX_TIMESTAMP, 'earliest'/'latest', or
        a timestamp in ms (the first offset with a timestamp >= it; offset -1
        when there is none). ``isolation_level`` 1 = read_committed."""
        specs = {TopicPartition(*tp): _spec(s) for tp, s in specs.items()}
        op = self._op("list_offsets", list(specs), now, timeout_ms)
        if specs:
            self._list_offsets_into(op, specs, isolation_level, now)
        return op

    def delete_records(self, before: dict, *, timeout_ms=None, now) -> AdminHandle:
        """Delete records before {TopicPartition: offset} (-1: the high watermark);
        {TopicPartition: DeletedRecords(low_watermark)}."""
        before = {TopicPartition(*tp): int(o) for tp, o in before.items()}
        op = self._op("delete_records", list(before), now, timeout_ms)
        wait = self.config.request_timeout_ms if timeout_ms is None else timeout_ms

        def build(node, call=None):
            by = {}
            for tp in call.keys:
                by.setdefault(tp.topic, []).append({"partition_index": tp.partition, "offset": before[tp]})
            return {"topics": [{"name": t, "partitions": ps} for t, ps in sorted(by.items())],
                    "timeout_ms": wait}

        def parse(body):
            for t in body.get("topics") or []:
                for p in t.get("partitions") or []:
                    yield (TopicPartition(t["name"], p["partition_index"]), p["error_code"],
                           DeletedRecords(p.get("low_watermark", -1)))

        if before:
            self._to_leaders(op, list(before), "DeleteRecords", build, parse, now)
        return op

    def consumer_group_lag(self, group_id, *, timeout_ms=None, now) -> AdminHandle:
        """{TopicPartition: ConsumerLag(committed, end_offset, lag)} for every
        partition ``group_id`` committed: OffsetFetch, then ListOffsets latest at
        the leaders (read_uncommitted: the high watermark)."""
        op = self._op("consumer_group_lag", [group_id], now, timeout_ms, single=True)
        offsets = self.list_consumer_group_offsets(group_id, timeout_ms=timeout_ms, now=now)
        offsets.operation = "consumer_group_lag"       # errors and timeouts name the operation

        def got_offsets(h):
            _unlist(self, h)
            if h.error is not None:
                self._complete(op, group_id, error=h.error)
                return
            committed = h.result()
            if not committed:
                self._complete(op, group_id, value={})
                return
            ends = AdminHandle("consumer_group_lag", list(committed), op.deadline)
            ends.timeout_ms = op.timeout_ms
            specs = {tp: OffsetSpec.LATEST for tp in committed}

            def got_ends(e):
                _unlist(self, e)
                if e.error is not None:
                    self._complete(op, group_id, error=e.error)
                    return
                res = {}
                for tp, om in committed.items():
                    end = e.items[tp].value.offset
                    res[tp] = ConsumerLag(om.offset, end, max(0, end - om.offset))
                self._complete(op, group_id, value=res)

            ends._listeners.append(got_ends)
            self._list_offsets_into(ends, specs, 0, 0)

        offsets._listeners.append(got_offsets)
        return op

    def _list_offsets_into(self, op, specs, isolation_level, now):
        def build(node, call=None):
            by = {}
            for tp in call.keys:
                by.setdefault(tp.topic, []).append(
                    {"partition_index": tp.partition, "current_leader_epoch": -1,
                     "timestamp": specs[tp]})
            return {"replica_id": -1, "isolation_level": isolation_level,
                    "topics": [{"name": t, "partitions": ps} for t, ps in sorted(by.items())],
                    "timeout_ms": self.config.request_timeout_ms}

        def parse(body):
            for t in body.get("topics") or []:
                for p in t.get("partitions") or []:
                    off = p.get("offset", -1)
                    if off == -1 and p.get("old_style_offsets"):
                        off = p["old_style_offsets"][0]
                    yield (TopicPartition(t["name"], p["partition_index"]), p["error_code"],
                           ListOffsetsResultInfo(off, p.get("timestamp", -1), p.get("leader_epoch", -1)))

        self._to_leaders(op, list(specs), "ListOffsets", build, parse, now)


class _SelfCall(_Call):
    """A call built by ``build(node, call=)`` and answered by ``handle(call, body, now)``."""

    def __init__(self, op, api, keys, build, handle, **kw):
        super().__init__(op, api, keys, **kw)
        self._build = build
        self._handle = handle

    def build(self, core, node):
        return self._build(node, call=self)

    def handle(self, core, body, now):
        self._handle(self, body, now)


def _copy_call(call, keys):
    import copy
    c = copy.copy(call)
    c.keys = list(keys)
    return c


def _key_text(key):
    """An item as errors show it: t-0 for a TopicPartition."""
    if isinstance(key, TopicPartition):
        return f"{key.topic}-{key.partition}"
    return str(key)


def _closed_error():
    return KafkaError("the admin client was closed before the operation finished")


def classic_members(group: dict) -> tuple:
    """The members of a DescribeGroups answer's group as MemberDescriptions;
    in a "consumer" protocol group their assignments and subscriptions are
    decoded with the consumer protocol (one that does not decode is left
    empty: a member's bytes are its client's business)."""
    from kproto.consumer.assignors import Assignment, decode_assignment, decode_subscription

    consumer = (group.get("protocol_type") or "") == "consumer"
    members = []
    for m in group.get("members") or []:
        assignment, subscription = Assignment(()), None
        if consumer:
            try:
                assignment = decode_assignment(m.get("member_assignment"))
            except KafkaError:
                pass
            md = m.get("member_metadata")
            if md:
                try:
                    subscription = decode_subscription(md, m.get("group_instance_id"))
                except KafkaError:
                    subscription = None
        members.append(MemberDescription(m["member_id"], m.get("group_instance_id"), m.get("client_id") or "",
                                         m.get("client_host") or "", assignment, subscription))
    return tuple(members)


def _asked_operations(entry: dict, asked: bool) -> Optional[FrozenSet[AclOperation]]:
    """A described group's or topic's ``authorized_operations`` when they were
    asked for (a broker may fill the field regardless: Java ignores it then too)."""
    if not asked:
        return None
    return authorized_operations(entry.get("authorized_operations", entry.get("topic_authorized_operations")))


def _topic_id(u):
    """None for the zero UUID (a broker that does not report topic ids)."""
    return None if u is None or getattr(u, "int", 1) == 0 else u


def _unlist(core, h):
    if h in core._completed:
        core._completed.remove(h)


def _no_dups(keys, what):
    seen = set()
    for k in keys:
        if k in seen:
            raise ValueError(f"{what}: {k!r} is given twice")
        seen.add(k)
