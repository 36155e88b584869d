"""KIP-714 client telemetry without a network: the state machine of
kproto.telemetry driven through a NetworkClient-like fake of the three calls
it makes, and the hand-written OTLP payload decoded by the reference
protobuf classes (opentelemetry-proto)."""
import random
import uuid

from opentelemetry.proto.metrics.v1 import metrics_pb2

from kproto import compression
from kproto.otlp import MetricPoint, encode_metrics_data
from kproto.telemetry import (DEFAULT_PUSH_INTERVAL_MS, ZERO_UUID, ClientTelemetry, TelemetryState as S,
                              error_interval_ms, metric_name)


class _Req:
    def __init__(self, api, body, callback):
        self.api, self.body, self.callback = api, body, callback

    def answer(self, now, result=None, error=None):
        self.completed_at, self.result, self.error = now, result, error
        self.callback(self)


class FakeClient:
    """The NetworkClient calls telemetry makes: one node, ready, and the APIs it has."""

    def __init__(self, apis=("GetTelemetrySubscriptions", "PushTelemetry")):
        self.apis = set(apis)
        self.sent = []

    def least_loaded_node(self, now):
        return 1

    def ready(self, node, now):
        return True

    def api_version(self, node, api):
        return 0 if api in self.apis else None

    def send(self, node, api, body, now, callback=None):
        self.sent.append(_Req(api, body, callback))


INSTANCE = uuid.UUID("12345678-1234-5678-1234-567812345678")


def _subscription(**over):
    r = {"error_code": 0, "client_instance_id": INSTANCE, "subscription_id": 7,
         "accepted_compression_types": [compression.ZSTD, compression.GZIP], "push_interval_ms": 1000,
         "telemetry_max_bytes": 1 << 20, "delta_temporality": False, "requested_metrics": [""]}
    r.update(over)
    return r


def _telemetry(points=None):
    base = (lambda now: list(points)) if points is not None else (
        lambda now: [MetricPoint(metric_name("producer-metrics", "request-total"), 3, True),
                     MetricPoint(metric_name("producer-metrics", "connection-count"), 1)])
    return ClientTelemetry("producer", "me", base_metrics=base, rng=random.Random(1), wall_ns=lambda: 10**18)


def _subscribed(tel, client, now=0, **over):
    tel.poll(client, now)
    req = client.sent[-1]
    assert req.api == "GetTelemetrySubscriptions" and req.body == {"client_instance_id": ZERO_UUID}
    req.answer(now, _subscription(**over))


def _decode(body):
    data = compression.decompress(body["compression_type"], body["metrics"])
    m = metrics_pb2.MetricsData()
    m.ParseFromString(data)
    return m


def test_subscription_then_pushes_every_interval_and_a_terminating_push():
    tel, client = _telemetry(), FakeClient()
    _subscribed(tel, client)
    assert tel.state is S.PUSH_NEEDED and tel.client_instance_id == INSTANCE
    first = tel.next_deadline(0)
    assert 500 <= first <= 1500           # the first push is staggered over 0.5-1.5 intervals
    tel.poll(client, first - 1)
    assert len(client.sent) == 1          # not due yet
    tel.poll(client, first)
    push = client.sent[-1]
    assert push.api == "PushTelemetry" and tel.state is S.PUSH_IN_PROGRESS
    expected_codec = compression.ZSTD if compression.is_available("zstd") else compression.GZIP
    assert push.body["compression_type"] == expected_codec
    assert (push.body["client_instance_id"], push.body["subscription_id"], push.body["terminating"]) == \
        (INSTANCE, 7, False)
    names = {m.name for m in _decode(push.body).resource_metrics[0].scope_metrics[0].metrics}
    assert names == {"org.apache.kafka.producer.request.total", "org.apache.kafka.producer.connection.count"}
    push.answer(first + 5, {"error_code": 0})
    assert tel.state is S.PUSH_NEEDED and tel.next_deadline(first + 5) == first + 1005 and tel.pushes == 1
    tel.terminate(first + 10)
    assert tel.state is S.TERMINATING_PUSH_NEEDED and tel.next_deadline(first + 10) == first + 10
    tel.poll(client, first + 10)
    last = client.sent[-1]
    assert last.body["terminating"] is True and tel.state is S.TERMINATING_PUSH_IN_PROGRESS and not tel.done
    last.answer(first + 12, {"error_code": 0})
    assert tel.state is S.TERMINATED and tel.done and tel.pushes == 2


def test_no_requested_metrics_means_no_push_and_a_new_subscription_after_the_interval():
    tel, client = _telemetry(), FakeClient()
    _subscribed(tel, client, requested_metrics=[], push_interval_ms=30000)
    assert tel.state is S.SUBSCRIPTION_NEEDED and tel.next_deadline(0) == 30000
    tel.terminate(1)
    assert tel.state is S.TERMINATED and [r.api for r in client.sent] == ["GetTelemetrySubscriptions"]


def test_only_the_subscribed_prefixes_are_pushed():
    tel, client = _telemetry(), FakeClient()
    _subscribed(tel, client, requested_metrics=["org.apache.kafka.producer.request"])
    assert [p.name for p in tel.collect(0)] == ["org.apache.kafka.producer.request.total"]


def test_a_broker_without_the_apis_turns_telemetry_off_quietly():
    tel, client = _telemetry(), FakeClient(apis=())
    tel.poll(client, 0)
    assert tel.state is S.DISABLED and tel.done and client.sent == [] and tel.next_deadline(0) is None


def test_unknown_subscription_refetches_at_once_and_keeps_the_instance_id():
    tel, client = _telemetry(), FakeClient()
    _subscribed(tel, client)
    t = tel.next_deadline(0)
    tel.poll(client, t)
    client.sent[-1].answer(t + 1, {"error_code": 117})       # UNKNOWN_SUBSCRIPTION_ID
    assert tel.state is S.SUBSCRIPTION_NEEDED and tel.next_deadline(t + 1) == t + 1
    tel.poll(client, t + 1)
    assert client.sent[-1].body == {"client_instance_id": INSTANCE}


def test_error_intervals_follow_java():
    assert error_interval_ms(76, 1000) == 0            # UNSUPPORTED_COMPRESSION_TYPE: refetch now
    assert error_interval_ms(118, 1000) == 1000        # TELEMETRY_TOO_LARGE: wait an interval
    assert error_interval_ms(89, None) == DEFAULT_PUSH_INTERVAL_MS   # THROTTLING_QUOTA_EXCEEDED
    assert error_interval_ms(42, 1000) is None         # INVALID_REQUEST: off
    tel, client = _telemetry(), FakeClient()
    _subscribed(tel, client)
    t = tel.next_deadline(0)
    tel.poll(client, t)
    client.sent[-1].answer(t, {"error_code": 35})      # UNSUPPORTED_VERSION: telemetry off
    assert tel.state is S.DISABLED


def test_a_failed_request_retries_after_the_backoff():
    tel, client = _telemetry(), FakeClient()
    tel.poll(client, 0)
    client.sent[-1].answer(3, error=ConnectionError("gone"))
    assert tel.state is S.SUBSCRIPTION_NEEDED and tel.next_deadline(3) == 103


def test_delta_temporality_pushes_differences():
    total = [5]
    tel = ClientTelemetry("consumer", "me", base_metrics=lambda now: [
        MetricPoint("org.apache.kafka.consumer.request.total", total[0], True)], wall_ns=lambda: 7)
    client = FakeClient()
    _subscribed(tel, client, delta_temporality=True)
    assert tel.collect(0)[0].value == 5
    total[0] = 12
    assert tel.collect(1)[0].value == 7


def test_otlp_encoding_decodes_with_the_reference_classes():
    points = [MetricPoint("a.total", 42, True, (("node_id", "1"),), start_ns=5),
              MetricPoint("b.avg", 2.5, False, (("k", 3), ("f", 1.5), ("b", True))),
              MetricPoint("c.neg", -4)]
    data = encode_metrics_data(points, time_ns=123456789, resource=(("client_id", "kio-x"),),
                               scope_version="1.0")
    m = metrics_pb2.MetricsData()
    m.ParseFromString(data)
    rm = m.resource_metrics[0]
    assert [(a.key, a.value.string_value) for a in rm.resource.attributes] == [("client_id", "kio-x")]
    sm = rm.scope_metrics[0]
    assert (sm.scope.name, sm.scope.version) == ("kio", "1.0")
    a, b, c = sm.metrics
    assert a.name == "a.total" and a.WhichOneof("data") == "sum"
    assert a.sum.is_monotonic and a.sum.aggregation_temporality == 2
    dp = a.sum.data_points[0]
    assert (dp.as_int, dp.start_time_unix_nano, dp.time_unix_nano) == (42, 5, 123456789)
    assert [(x.key, x.value.string_value) for x in dp.attributes] == [("node_id", "1")]
    assert b.WhichOneof("data") == "gauge" and b.gauge.data_points[0].as_double == 2.5
    attrs = b.gauge.data_points[0].attributes
    assert (attrs[0].value.int_value, attrs[1].value.double_value, attrs[2].value.bool_value) == (3, 1.5, True)
    assert c.gauge.data_points[0].as_int == -4


def test_network_client_measures_connections_requests_and_latency():
    from kproto.client import network_for
    from kproto.producer.config import parse_producer_config
    cfg = parse_producer_config({"bootstrap.servers": "127.0.0.1:1"})
    _, client = network_for(cfg, rng=random.Random(0), max_in_flight=5, allow_auto_topic_creation=False,
                            telemetry_type="producer")
    assert client.telemetry is not None and client.telemetry.client_type == "producer"
    client.node_latency[1] = [30.0, 3, 20.0]
    client.stats["requests"] = 4
    pts = {(p.name, p.attributes): p for p in client.telemetry_metrics(0)}
    assert pts[("org.apache.kafka.producer.request.total", ())].value == 4
    assert pts[("org.apache.kafka.producer.node.request.latency.avg", (("node_id", "1"),))].value == 10.0
    assert pts[("org.apache.kafka.producer.node.request.latency.max", (("node_id", "1"),))].value == 20.0
    assert ("org.apache.kafka.producer.request.latency.avg", ()) not in pts   # no Produce answered yet
    client.api_latency["Produce"] = [8.0, 2, 5.0]
    names = {p.name: p.value for p in client.telemetry_metrics(0)}
    assert (names["org.apache.kafka.producer.request.latency.avg"],
            names["org.apache.kafka.producer.request.latency.max"]) == (4.0, 5.0)
    client.telemetry.requested = [""]
    client.telemetry.payload(0)                 # a push starts new avg/max windows
    assert client.node_latency == {} and client.api_latency == {}
    off = parse_producer_config({"bootstrap.servers": "127.0.0.1:1", "enable.metrics.push": False})
    _, quiet = network_for(off, rng=random.Random(0), max_in_flight=5, allow_auto_topic_creation=False,
                           telemetry_type="producer")
    assert quiet.telemetry is None


def test_a_star_subscribes_every_metric():
    tel, client = _telemetry(), FakeClient()
    _subscribed(tel, client, requested_metrics=["*"])
    assert len(tel.collect(0)) == 2


def _admin_subscribed(now=0):
    """An AdminCore (no network) whose telemetry holds an active subscription."""
    from kproto.admin import AdminCore
    core = AdminCore(bootstrap_servers="127.0.0.1:1")
    tel = core.client.telemetry
    fake = FakeClient()
    _subscribed(tel, fake, now)
    assert tel.state is S.PUSH_NEEDED and tel.requested
    return core, tel


def test_admin_terminate_telemetry_waits_for_the_terminating_push_within_its_bound():
    from kproto.admin import AdminCore
    idle = AdminCore(bootstrap_servers="127.0.0.1:1")          # no subscription yet: nothing to push
    h = idle.terminate_telemetry(now=0)
    assert h.done and h.result() is True and idle.client.telemetry.state is S.TERMINATED

    core, tel = _admin_subscribed()
    h = core.terminate_telemetry(timeout_ms=5000, now=10)
    assert not h.done and tel.state is S.TERMINATING_PUSH_NEEDED
    assert core.next_deadline(10) <= 10                          # the push is due now
    core.poll(20)                                                  # no broker answers here
    assert not h.done and core.next_deadline(20) <= h.deadline == 10 + 5000
    core.poll(5010)
    assert h.done and h.result() is False                          # the bound ran out: close goes on
    # request.timeout.ms bounds it too (Java: one push's wait), and close() ends a pending one
    core2, _ = _admin_subscribed()
    h2 = core2.terminate_telemetry(timeout_ms=10 ** 9, now=0)
    assert h2.deadline == core2.config.request_timeout_ms
    core2.close(1)
    assert h2.done and h2.result() is False


def test_admin_terminate_telemetry_done_once_the_push_is_answered():
    core, tel = _admin_subscribed()
    fake = FakeClient()
    tel.terminate(0)
    tel.poll(fake, 0)
    push = fake.sent[-1]
    assert push.api == "PushTelemetry" and push.body["terminating"] is True
    h = core.terminate_telemetry(now=1)
    assert not h.done
    push.answer(2, {"error_code": 0})
    core.poll(3)
    assert h.done and h.result() is True and tel.state is S.TERMINATED


def test_client_instance_id_none_while_waiting_then_the_assigned_id():
    from kproto.telemetry import client_instance_id

    tel, client = _telemetry(), FakeClient()
    assert client_instance_id(tel) is None                   # no request yet: wait
    tel.poll(client, 0)
    assert client_instance_id(tel) is None                   # in flight: wait
    client.sent[-1].answer(0, _subscription(requested_metrics=[]))
    assert client_instance_id(tel) == INSTANCE               # even with nothing to push


def test_client_instance_id_illegal_state_when_telemetry_is_off():
    import pytest

    from kproto.errors import IllegalStateError
    from kproto.telemetry import check_instance_id_timeout, client_instance_id

    with pytest.raises(IllegalStateError, match="enable.metrics.push"):
        client_instance_id(None)
    tel = _telemetry()
    tel.poll(FakeClient(apis=()), 0)                         # a broker without the APIs
    with pytest.raises(IllegalStateError, match="no GetTelemetrySubscriptions API"):
        client_instance_id(tel)
    tel, client = _telemetry(), FakeClient()
    tel.poll(client, 0)
    client.sent[-1].answer(0, _subscription(error_code=42))   # INVALID_REQUEST: off for good
    with pytest.raises(IllegalStateError, match="error 42"):
        client_instance_id(tel)
    with pytest.raises(ValueError, match="negative"):
        check_instance_id_timeout(-0.5)
    check_instance_id_timeout(0)
    check_instance_id_timeout(None)


def test_application_metrics_join_the_push_and_bad_values_are_left_out():
    from kproto.telemetry import register_metric, unregister_metric

    tel, client = _telemetry(points=[]), FakeClient()
    register_metric(tel, "app-metrics", "good", lambda: 7, tags={"a": "b"}, cumulative=True)
    register_metric(tel, "app-metrics", "broken", lambda: 1 / 0)
    register_metric(tel, "app-metrics", "text", lambda: "seven")
    _subscribed(tel, client)
    points = tel.collect(0)
    assert [(p.name, p.value, p.sum, p.attributes) for p in points] == [
        ("org.apache.kafka.app.good", 7, True, (("a", "b"),))]
    unregister_metric(tel, "app-metrics", "good", tags={"a": "b"})
    assert [p.name for p in tel.collect(0)] == []
    narrow = _telemetry(points=[])
    register_metric(narrow, "app-metrics", "good", lambda: 1)
    _subscribed(narrow, FakeClient(), requested_metrics=["org.apache.kafka.producer."])
    assert narrow.collect(0) == []          # the subscription does not select it
