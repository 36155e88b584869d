"""Connection state machine against the scripted broker: no sockets, no clock."""
import math
import random
import struct

import pytest

from kproto import error_codes, messages
from kproto.connection import (
    Connection,
    ConnectionClosed,
    ConnectionReady,
    ConnectionState,
    ReconnectBackoff,
    RequestCompleted,
    RequestFailed,
    SaslAuthenticator,
    SaslMechanism,
)
from kproto.errors import (
    AuthenticationError,
    ConnectionClosedError,
    DecodeError,
    FrameError,
    NotReadyError,
    ProtocolError,
    RequestTimedOutError,
    UnsupportedVersionError,
)

try:
    from scripted_broker import NO_RESPONSE, Reply, ScriptedBroker, handshake, pump
except ImportError:  # tests/ as a package
    from tests.scripted_broker import NO_RESPONSE, Reply, ScriptedBroker, handshake, pump

APIV_MAX = messages.api("ApiVersions").max_version
METADATA_OK = {"brokers": [{"node_id": 1, "host": "h1", "port": 9092}], "topics": []}


def ready(broker=None, **kw):
    broker = broker or ScriptedBroker()
    kw.setdefault("rng", random.Random(7))
    conn = Connection(1, "h1", 9092, client_id="test", **kw)
    events = handshake(conn, broker, now=0)
    assert conn.state is ConnectionState.READY, events
    return conn, broker


def of(events, cls):
    return [e for e in events if isinstance(e, cls)]


# --- handshake -------------------------------------------------------------------

def test_a_raw_connection_names_no_cluster_in_apiversions():
    # KIP-1242: only the cores' network client knows which cluster it means.
    conn, broker = ready()
    req = broker.requests_of("ApiVersions")[0]
    assert req.version == 5 and (req.body["cluster_id"], req.body["node_id"]) == (None, -1)


def test_apiversions_v5_names_the_expected_cluster_and_node():
    broker = ScriptedBroker()
    conn = Connection(3, "h1", 9092, client_id="app")
    conn.expected_broker = ("c-1", 3)
    handshake(conn, broker)
    req = broker.requests_of("ApiVersions")[0]
    assert (req.body["cluster_id"], req.body["node_id"]) == ("c-1", 3)


def test_apiversions_refused_as_stale_closes_with_rebootstrap_required():
    broker = ScriptedBroker()
    broker.on("ApiVersions", lambda req: broker._api_versions_body(129))
    conn = Connection(3, "h1", 9092, client_id="app")
    conn.expected_broker = ("c-1", 3)
    events = handshake(conn, broker)
    closed = of(events, ConnectionClosed)
    assert conn.state is ConnectionState.DISCONNECTED
    assert isinstance(closed[0].error, error_codes.RebootstrapRequiredError)


def test_handshake_sends_newest_apiversions_with_software_name():
    broker = ScriptedBroker()
    conn = Connection(1, "h1", 9092, client_id="app")
    assert conn.state is ConnectionState.DISCONNECTED and conn.can_connect(0)
    conn.start_connect(0)
    assert conn.state is ConnectionState.CONNECTING and not conn.can_connect(0)
    assert conn.connection_made(1) == []
    assert conn.state is ConnectionState.HANDSHAKE
    with pytest.raises(NotReadyError, match="not ready"):
        conn.send("Metadata", {}, 1)
    events = pump(conn, broker, 2)
    (req,) = broker.requests
    assert req.api.name == "ApiVersions" and req.version == APIV_MAX and req.client_id == "app"
    if APIV_MAX >= 3:
        assert req.body["client_software_name"] == "kproto" and req.body["client_software_version"]
    assert events == [ConnectionReady(1, conn.versions)]
    assert conn.state is ConnectionState.READY and conn.can_send()
    assert conn.versions.pick("Metadata") == messages.api("Metadata").max_version


def test_unsupported_apiversions_version_falls_back():
    broker = ScriptedBroker(api_versions={"ApiVersions": (0, 2), "Metadata": (0, 9)})
    conn, _ = ready(broker)
    assert [(r.api.name, r.version) for r in broker.requests] == [("ApiVersions", APIV_MAX), ("ApiVersions", 2)]
    assert conn.versions.pick("ApiVersions") == 2
    assert conn.versions.pick("Metadata") == 9


def test_apiversions_fallback_without_a_lower_version_fails_clearly():
    broker = ScriptedBroker()
    bad = Reply({"error_code": 35, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 0}]}, version=0)
    broker.script("ApiVersions", bad, bad)
    conn = Connection(1, "h1", 9092)
    events = handshake(conn, broker)
    assert [r.version for r in broker.requests] == [APIV_MAX, 0]
    (closed,) = of(events, ConnectionClosed)
    assert isinstance(closed.error, UnsupportedVersionError) and "ApiVersions v0" in str(closed.error)
    assert conn.state is ConnectionState.DISCONNECTED and conn.last_error is closed.error


def test_apiversions_other_error_closes():
    broker = ScriptedBroker().script("ApiVersions", {"error_code": 31})
    conn = Connection(1)
    events = handshake(conn, broker)
    (closed,) = of(events, ConnectionClosed)
    assert isinstance(closed.error, error_codes.ClusterAuthorizationFailedError)
    assert conn.state is ConnectionState.DISCONNECTED


def test_negotiated_versions_and_unsupported_api():
    broker = ScriptedBroker(api_versions={"ApiVersions": (0, APIV_MAX), "Metadata": (1, 5)}, only_listed=True)
    conn, _ = ready(broker)
    req = conn.send("Metadata", {"topics": None}, 1)
    assert req.version == 5
    with pytest.raises(UnsupportedVersionError, match="Produce"):
        conn.send("Produce", {"acks": 1}, 1)
    with pytest.raises(UnsupportedVersionError, match="Metadata v7"):
        conn.send("Metadata", {}, 1, version=7)
    assert conn.send(messages.api("Metadata"), {}, 1, version=3).version == 3


# --- requests and responses ----------------------------------------------------------

def test_responses_match_requests_in_order():
    conn, broker = ready()
    broker.on("Metadata", lambda r: METADATA_OK)
    reqs = [conn.send("Metadata", {"topics": None}, 10 + i) for i in range(3)]
    ids = [r.correlation_id for r in reqs]
    assert ids == [ids[0], ids[0] + 1, ids[0] + 2]
    assert conn.in_flight_count == 3
    events = pump(conn, broker, 20)
    assert [type(e) for e in events] == [RequestCompleted] * 3
    assert [e.request for e in events] == reqs
    for r, e in zip(reqs, events):
        assert r.done and r.error is None and r.result is e.body
        assert e.body["brokers"][0]["host"] == "h1"
        assert r.sent_at in (10, 11, 12) and r.completed_at == 20 and r.api.name == "Metadata"
    assert conn.in_flight_count == 0


def test_request_and_response_bytes_one_at_a_time():
    conn, broker = ready()
    broker.on("Metadata", lambda r: METADATA_OK)
    req = conn.send("Metadata", {}, 1)
    reply = broker.receive(bytes(conn.data_to_send()))
    conn.bytes_sent(len(conn.data_to_send()), 1)
    events = []
    for i in range(len(reply)):
        events += conn.receive_data(reply[i:i + 1], 2)
    assert events == [RequestCompleted(req, req.result)]


def test_large_response_zero_copy_frame_decodes():
    conn, broker = ready()
    topics = [{"name": f"topic-{i:05d}", "partitions": [{"partition_index": 0, "leader_id": 1,
                                                       "replica_nodes": [1], "isr_nodes": [1]}]}
              for i in range(3000)]
    broker.on("Metadata", lambda r: dict(METADATA_OK, topics=topics))
    req = conn.send("Metadata", {}, 1)
    reply = broker.receive(bytes(conn.data_to_send()))
    conn.bytes_sent(conn.pending_output, 1)
    assert len(reply) > 64 * 1024
    (event,) = conn.receive_data(reply, 2)       # one bytes chunk: the frame is a memoryview slice
    assert event.request is req and len(event.body["topics"]) == 3000
    assert event.body["topics"][-1]["name"] == "topic-02999"


def test_correlation_ids_wrap_at_int32():
    broker = ScriptedBroker()
    conn = Connection(1, initial_correlation_id=2**31 - 2)
    handshake(conn, broker)   # ApiVersions used 2**31 - 2
    broker.on("Metadata", lambda r: METADATA_OK)
    a = conn.send("Metadata", {}, 1)
    b = conn.send("Metadata", {}, 1)
    assert (a.correlation_id, b.correlation_id) == (2**31 - 1, 0)
    assert len(of(pump(conn, broker, 2), RequestCompleted)) == 2


def test_correlation_mismatch_closes_and_fails_all():
    conn, broker = ready()
    broker.script("Metadata", Reply(METADATA_OK, correlation_id=4242))
    first = conn.send("Metadata", {}, 1)
    broker.script("Metadata", METADATA_OK)
    second = conn.send("Metadata", {}, 1)
    events = pump(conn, broker, 2)
    failed = of(events, RequestFailed)
    assert [e.request for e in failed] == [first, second]
    assert isinstance(first.error, ProtocolError)
    msg = str(first.error)
    assert f"expected {first.correlation_id}" in msg and "4242" in msg and "Metadata" in msg
    assert isinstance(second.error, ConnectionClosedError) and "4242" in str(second.error)
    assert isinstance(events[-1], ConnectionClosed) and events[-1].error is first.error
    assert conn.state is ConnectionState.DISCONNECTED and conn.in_flight_count == 0
    assert conn.data_to_send() == b""


def test_response_with_nothing_in_flight_is_a_protocol_error():
    conn, broker = ready()
    events = conn.receive_data(messages.encode_response("Metadata", 12, 77, METADATA_OK), 5)
    (closed,) = events
    assert isinstance(closed.error, ProtocolError) and "77" in str(closed.error)


def test_garbage_response_body_is_a_decode_error_that_closes():
    conn, broker = ready()
    # The first Metadata gets its correlation id followed by garbage; the second no answer.
    broker.script("Metadata", lambda r: Reply(raw=struct.pack(">i", r.correlation_id) + b"\xff\xfe\x01"),
                  NO_RESPONSE)
    garbled = conn.send("Metadata", {}, 1)
    bystander = conn.send("Metadata", {}, 1)
    events = pump(conn, broker, 2)
    assert isinstance(garbled.error, DecodeError)
    assert "Metadata v13 response" in str(garbled.error) and str(garbled.correlation_id) in str(garbled.error)
    assert isinstance(bystander.error, ConnectionClosedError) and "decode" in str(bystander.error)
    assert [e.request for e in of(events, RequestFailed)] == [garbled, bystander]
    assert isinstance(events[-1], ConnectionClosed) and events[-1].error is garbled.error
    assert conn.state is ConnectionState.DISCONNECTED


def test_non_kafka_bytes_close_with_frame_error():
    conn, broker = ready()
    req = conn.send("Metadata", {}, 1)
    broker.script("Metadata", Reply(frame_raw=b"HTTP/1.1 400 Bad Request\r\n\r\n"))
    events = pump(conn, broker, 2)
    assert isinstance(events[-1], ConnectionClosed) and isinstance(events[-1].error, FrameError)
    assert "HTTP" in events[-1].reason
    assert isinstance(req.error, ConnectionClosedError)
    assert conn.state is ConnectionState.DISCONNECTED


def test_data_after_close_is_ignored():
    conn, broker = ready()
    conn.close("test", now=1)
    assert conn.receive_data(b"\x00\x00\x00\x01x", 2) == []
    assert conn.bytes_sent(10, 2) == []


# --- writes, acks=0 ---------------------------------------------------------------------

def test_partial_writes():
    conn, broker = ready()
    broker.on("Metadata", lambda r: METADATA_OK)
    a = conn.send("Metadata", {"topics": None}, 1)
    b = conn.send("Metadata", {"topics": None}, 1)
    data = bytes(conn.data_to_send())
    assert conn.pending_output == len(data)
    assert conn.bytes_sent(3, 2) == []
    tail = conn.data_to_send()
    assert bytes(tail) == data[3:]
    conn.bytes_sent(len(tail) - 1, 2)
    assert bytes(conn.data_to_send()) == data[-1:]
    assert not a.written or not b.written
    conn.bytes_sent(1, 3)
    assert a.written and b.written and b.written_at == 3 and conn.data_to_send() == b""
    with pytest.raises(ValueError):
        conn.bytes_sent(1, 3)
    events = conn.receive_data(broker.receive(data), 4)
    assert [e.request for e in events] == [a, b]


def test_acks0_completes_when_written():
    conn, broker = ready()
    produce = {"acks": 0, "timeout_ms": 1000, "topic_data": []}
    req = conn.send("Produce", produce, 5, expect_response=False)
    assert conn.in_flight_count == 1 and not req.done
    data = conn.data_to_send()
    assert conn.bytes_sent(len(data) - 1, 6) == []
    assert not req.done
    events = conn.bytes_sent(1, 7)
    assert events == [RequestCompleted(req, None)]
    assert req.done and req.result is None and req.error is None and req.written_at == 7
    assert conn.in_flight_count == 0
    assert broker.receive(bytes(data)) == b""          # the broker does not answer acks=0
    assert broker.requests_of("Produce")[0].body["acks"] == 0


def test_response_proves_earlier_acks0_request_written():
    conn, broker = ready()
    broker.on("Metadata", lambda r: METADATA_OK)
    p = conn.send("Produce", {"acks": 0, "topic_data": []}, 1, expect_response=False)
    m = conn.send("Metadata", {}, 1)
    reply = broker.receive(bytes(conn.data_to_send()))   # the driver has not reported the write yet
    events = conn.receive_data(reply, 2)
    assert events == [RequestCompleted(p, None), RequestCompleted(m, m.result)]
    assert conn.in_flight_count == 0


def test_in_flight_limit():
    conn, broker = ready(max_in_flight=2)
    broker.on("Metadata", lambda r: Reply(METADATA_OK, hold=True))
    conn.send("Metadata", {}, 1)
    assert conn.can_send()
    conn.send("Metadata", {}, 1)
    assert not conn.can_send()
    with pytest.raises(NotReadyError, match="max_in_flight=2"):
        conn.send("Metadata", {}, 1)
    pump(conn, broker, 2)
    assert not conn.can_send()
    held = broker.release()
    first_len = struct.unpack(">i", held[:4])[0] + 4
    events = conn.receive_data(held[:first_len], 3)
    assert len(events) == 1 and conn.can_send()


@pytest.mark.parametrize("version, throttled", [(9, True), (5, False)])
def test_quota_throttle_time_holds_back_new_requests(version, throttled):
    """KIP-219: from Produce v6 on the broker answers at once and the client
    waits throttle_time_ms before its next request to that node; older
    versions were already held back by the broker."""
    conn, broker = ready()
    broker.on("Produce", lambda r: {"responses": [], "throttle_time_ms": 300})
    conn.send("Produce", {"acks": 1, "timeout_ms": 1000, "topic_data": []}, 10, version=version)
    pump(conn, broker, 20)
    assert conn.last_throttle_time_ms == 300
    assert conn.can_send() is True                     # without a time: readiness only
    assert conn.can_send(20) is not throttled and conn.can_send(319) is not throttled
    assert conn.can_send(320)
    assert conn.next_deadline(20) == (320 if throttled else None)


def test_throttled_node_is_not_ready_in_the_network_client():
    from kproto.client import NetworkClient
    from kproto.cluster import ClusterMetadata
    client = NetworkClient(ClusterMetadata([("h1", 9092)]))
    conn, broker = ready()
    client.connections[-1] = conn
    conn.throttled_until = 500
    assert not client.ready(-1, 100) and client.connection_delay(-1, 100) == 400
    assert client.least_loaded_node(100) == -1 and not client.is_ready(-1, 100)
    assert client.ready(-1, 500) and client.connection_delay(-1, 500) == 0


def test_callbacks_run_on_completion_and_failure():
    conn, broker = ready()
    seen = []
    broker.on("Metadata", lambda r: METADATA_OK)
    ok = conn.send("Metadata", {}, 1, callback=seen.append)
    pump(conn, broker, 2)
    broker.on("Metadata", lambda r: NO_RESPONSE)
    bad = conn.send("Metadata", {}, 3, callback=seen.append)
    pump(conn, broker, 3)
    conn.connection_lost(4, OSError("reset"))
    assert seen == [ok, bad] and ok.succeeded and not bad.succeeded


def test_callback_exception_is_raised_after_state_is_consistent():
    conn, broker = ready()
    broker.on("Metadata", lambda r: METADATA_OK)

    def boom(req):
        raise RuntimeError("user bug")

    a = conn.send("Metadata", {}, 1, callback=boom)
    b = conn.send("Metadata", {}, 1)
    reply = broker.receive(bytes(conn.data_to_send()))
    conn.bytes_sent(len(conn.data_to_send()), 1)
    with pytest.raises(RuntimeError, match="user bug"):
        conn.receive_data(reply, 2)
    assert a.done and b.done and conn.in_flight_count == 0 and conn.is_ready


# --- timeouts ----------------------------------------------------------------------

def test_request_timeout_closes_and_fails_all():
    conn, broker = ready(request_timeout_ms=1000)
    broker.on("Metadata", lambda r: NO_RESPONSE)
    a = conn.send("Metadata", {}, 100)
    b = conn.send("Metadata", {}, 300, timeout_ms=5000)
    c = conn.send("Produce", {"acks": 0, "topic_data": []}, 400, expect_response=False)
    pump(conn, broker, 400)     # c is written and completes
    d = conn.send("Produce", {"acks": 0, "topic_data": []}, 500, expect_response=False)  # never written
    assert c.done and a.deadline == 1100 and b.deadline == 5300
    assert conn.next_deadline(500) == 1100
    assert conn.check_timeouts(1099) == []
    events = conn.check_timeouts(1100)
    failed = of(events, RequestFailed)
    assert [e.request for e in failed] == [a, b, d]
    for r in (a, b, d):
        assert isinstance(r.error, RequestTimedOutError)
    assert "Metadata" in str(a.error) and "1000 ms" in str(a.error)
    assert isinstance(events[-1], ConnectionClosed) and isinstance(events[-1].error, RequestTimedOutError)
    assert conn.state is ConnectionState.DISCONNECTED and conn.next_deadline(1100) is None


def test_handshake_timeout():
    broker = ScriptedBroker().script("ApiVersions", NO_RESPONSE)
    conn = Connection(1, request_timeout_ms=500)
    handshake(conn, broker, now=0)
    assert conn.state is ConnectionState.HANDSHAKE and conn.next_deadline(0) == 500
    events = conn.check_timeouts(500)
    assert isinstance(events[-1], ConnectionClosed) and conn.state is ConnectionState.DISCONNECTED


def test_connection_setup_timeout():
    conn = Connection(1, connection_setup_timeout_ms=300)
    conn.start_connect(10)
    assert conn.next_deadline(10) == 310 and conn.check_timeouts(309) == []
    (closed,) = conn.check_timeouts(310)
    assert "timed out" in closed.reason and conn.state is ConnectionState.DISCONNECTED


# --- disconnects and reconnect backoff -------------------------------------------------

def test_connection_lost_fails_all_with_node_and_reason():
    conn, broker = ready()
    broker.on("Metadata", lambda r: NO_RESPONSE)
    reqs = [conn.send("Metadata", {}, 1) for _ in range(3)]
    pump(conn, broker, 1)
    unsent = conn.send("Metadata", {}, 2)
    events = conn.connection_lost(5, ConnectionResetError("peer reset"))
    assert [e.request for e in of(events, RequestFailed)] == reqs + [unsent]
    for r in reqs + [unsent]:
        assert isinstance(r.error, ConnectionClosedError) and r.error.retriable
        assert "node 1 (h1:9092)" in str(r.error) and "peer reset" in str(r.error)
    assert events[-1] == ConnectionClosed(1, events[-1].reason, events[-1].error)
    assert conn.state is ConnectionState.DISCONNECTED and conn.data_to_send() == b""
    with pytest.raises(NotReadyError):
        conn.send("Metadata", {}, 6)
    assert conn.connection_lost(6) == []     # idempotent


def test_reconnect_backoff_grows_with_deterministic_jitter():
    class FixedRng:
        def __init__(self, values):
            self.values = list(values)

        def random(self):
            return self.values.pop(0)

    # factor = 0.8 + 0.4 * r ; r = 0.5 -> exactly 1.0
    conn = Connection(1, reconnect_backoff_ms=50, reconnect_backoff_max_ms=1000, rng=FixedRng([0.5] * 10))
    now = 0
    waits = []
    for _ in range(7):
        assert conn.can_connect(now)
        conn.start_connect(now)
        conn.connection_lost(now, OSError("refused"))
        waits.append(conn.next_connect_time - now)
        assert not conn.can_connect(now + waits[-1] - 1) and conn.can_connect(now + waits[-1])
        assert conn.connection_delay(now) == waits[-1]
        now += waits[-1]
    assert waits == [50, 100, 200, 400, 800, 1000, 1000]


def test_reconnect_backoff_jitter_bounds_and_reset_on_ready():
    b = ReconnectBackoff(100, 10000, rng=random.Random(1))
    for attempt in range(12):
        term = 100 * 2 ** min(attempt, math.log2(10000 / 100))   # Java: exponent capped at log2(max/initial)
        v = b.backoff(attempt)
        assert int(0.8 * term) <= v <= min(int(1.2 * term), 10000)
    # Same seed, same sequence.
    s1 = [ReconnectBackoff(50, 1000, rng=random.Random(3)).backoff(i) for i in range(5)]
    s2 = [ReconnectBackoff(50, 1000, rng=random.Random(3)).backoff(i) for i in range(5)]
    assert s1 == s2
    assert ReconnectBackoff(50, 50).backoff(9) == 50          # no exponential room: constant

    broker = ScriptedBroker()
    conn = Connection(1, rng=random.Random(5))
    conn.start_connect(0)
    conn.connection_lost(0)
    conn.start_connect(1000)
    conn.connection_lost(1000)
    assert conn.failed_attempts == 2
    handshake(conn, broker, now=5000)
    assert conn.failed_attempts == 0
    conn.connection_lost(6000)
    assert 40 <= conn.next_connect_time - 6000 <= 60      # back to reconnect_backoff_ms +- 20%


def test_reconnect_negotiates_again():
    conn, _ = ready(ScriptedBroker(api_versions={"ApiVersions": (0, 2), "Metadata": (0, 4)}))
    assert conn.versions.pick("Metadata") == 4
    conn.connection_lost(1)
    upgraded = ScriptedBroker()
    handshake(conn, upgraded, now=10_000)
    assert [r.version for r in upgraded.requests] == [APIV_MAX]
    assert conn.versions.pick("Metadata") == messages.api("Metadata").max_version


def test_close_permanent_never_reconnects():
    conn, _ = ready()
    conn.send("Metadata", {}, 1)
    events = conn.close("shutdown", now=2, permanent=True)
    assert isinstance(events[0].request.error, ConnectionClosedError) and "shutdown" in str(events[0].request.error)
    assert conn.state is ConnectionState.CLOSED and not conn.can_connect(10**9)
    with pytest.raises(NotReadyError):
        conn.start_connect(10**9)


def test_reconnect_starts_a_fresh_session():
    conn, broker = ready()
    conn.send("Metadata", {}, 1)
    conn.connection_lost(2)
    broker2 = ScriptedBroker()
    handshake(conn, broker2, now=10_000)
    assert conn.is_ready and conn.in_flight_count == 0
    broker2.on("Metadata", lambda r: METADATA_OK)
    req = conn.send("Metadata", {}, 10_001)
    assert of(pump(conn, broker2, 10_002), RequestCompleted)[0].request is req


# --- idle ---------------------------------------------------------------------------

def test_is_idle():
    conn, broker = ready(connections_max_idle_ms=1000)
    assert not conn.is_idle(999) and conn.is_idle(1000)
    broker.on("Metadata", lambda r: Reply(METADATA_OK, hold=True))
    conn.send("Metadata", {}, 1500)
    pump(conn, broker, 1500)
    assert not conn.is_idle(5000)          # a request is in flight
    conn.receive_data(broker.release(), 1600)
    assert not conn.is_idle(2599) and conn.is_idle(2600) and conn.idle_deadline == 2600


# --- SASL hook ----------------------------------------------------------------------

class FakeMechanism(SaslMechanism):
    """Two round trips: send 'hello', expect challenge 'c1', send 'r1', done on 'ok'."""

    name = "FAKE"

    def __init__(self):
        self.complete = False
        self.seen = []

    def initial_response(self):
        return b"hello"

    def evaluate_challenge(self, challenge):
        self.seen.append(challenge)
        if challenge == b"c1":
            return b"r1"
        if challenge == b"ok":
            self.complete = True
            return None
        raise AuthenticationError(f"bad challenge {challenge!r}")


def test_sasl_authenticator_round_trips():
    broker = ScriptedBroker(sasl_mechanisms=["PLAIN", "FAKE"])
    broker.script("SaslAuthenticate", {"auth_bytes": b"c1"},
                  {"auth_bytes": b"ok", "session_lifetime_ms": 3600_000})
    mech = FakeMechanism()
    auth = SaslAuthenticator(mech)
    conn = Connection(1, authenticator=auth)
    events = handshake(conn, broker)
    assert of(events, ConnectionReady) and conn.is_ready
    sent = [(r.api.name, r.body.get("mechanism") or r.body.get("auth_bytes")) for r in broker.requests]
    assert sent == [("ApiVersions", None), ("SaslHandshake", "FAKE"),
                    ("SaslAuthenticate", b"hello"), ("SaslAuthenticate", b"r1")]
    assert mech.seen == [b"c1", b"ok"] and auth.session_lifetime_ms == 3600_000


def test_sasl_states_and_failures():
    broker = ScriptedBroker(sasl_mechanisms=["PLAIN"])
    conn = Connection(1, authenticator=SaslAuthenticator(FakeMechanism()))
    events = handshake(conn, broker)
    (closed,) = of(events, ConnectionClosed)
    assert isinstance(closed.error, error_codes.UnsupportedSaslMechanismError)
    assert "PLAIN" in str(closed.error)

    broker = ScriptedBroker(sasl_mechanisms=["FAKE"])
    broker.script("SaslAuthenticate", {"error_code": 58, "error_message": "bad password"})
    conn = Connection(1, authenticator=SaslAuthenticator(FakeMechanism()))
    conn.start_connect(0)
    conn.connection_made(0)
    data = bytes(conn.data_to_send())
    conn.bytes_sent(len(data), 0)
    assert conn.receive_data(broker.receive(data), 0) == []
    assert conn.state is ConnectionState.AUTHENTICATING and not conn.can_send()
    events = pump(conn, broker, 1)
    (closed,) = of(events, ConnectionClosed)
    assert isinstance(closed.error, error_codes.SaslAuthenticationFailedError)
    assert isinstance(closed.error, AuthenticationError) and "bad password" in str(closed.error)
    assert conn.state is ConnectionState.DISCONNECTED


def test_sasl_mechanism_error_closes():
    broker = ScriptedBroker(sasl_mechanisms=["FAKE"])
    broker.script("SaslAuthenticate", {"auth_bytes": b"nonsense"})
    conn = Connection(1, authenticator=SaslAuthenticator(FakeMechanism()))
    events = handshake(conn, broker)
    assert "bad challenge" in str(of(events, ConnectionClosed)[0].error)


# --- the transition table ---------------------------------------------------------

def _in_state(state):
    conn = Connection(1, "h1", 9092, client_id="t")
    conn.state = state   # set directly: each row of the table is walked from a fresh machine
    return conn


@pytest.mark.parametrize("src", list(ConnectionState))
@pytest.mark.parametrize("dst", list(ConnectionState))
def test_every_transition_is_allowed_or_refused_by_the_table(src, dst):
    from kproto.connection import TRANSITIONS
    conn = _in_state(src)
    if dst in TRANSITIONS[src]:
        conn._move(dst)
        assert conn.state is dst
    else:
        with pytest.raises(NotReadyError, match=f"{src.name} -> {dst.name}"):
            conn._move(dst)
        assert conn.state is src


def test_the_table_keeps_closed_final_and_every_state_reachable():
    from kproto.connection import TRANSITIONS
    assert TRANSITIONS[ConnectionState.CLOSED] == frozenset()
    reached, todo = {ConnectionState.DISCONNECTED}, [ConnectionState.DISCONNECTED]
    while todo:
        for nxt in TRANSITIONS[todo.pop()] - reached:
            reached.add(nxt)
            todo.append(nxt)
    assert reached == set(ConnectionState)


def test_entry_points_called_out_of_order_are_refused():
    conn = Connection(1, "h1", 9092, client_id="t")
    with pytest.raises(NotReadyError):
        conn.send("Metadata", {}, 0)            # not READY
    conn.start_connect(0)
    with pytest.raises(NotReadyError):
        conn.start_connect(0)                   # already CONNECTING
    conn, _ = ready()
    with pytest.raises(NotReadyError):
        conn.connection_made(0)                 # READY -> HANDSHAKE is no transition
    conn.close(now=0, permanent=True)
    assert conn.state is ConnectionState.CLOSED
    with pytest.raises(NotReadyError):
        conn.start_connect(1)                   # closed for good
