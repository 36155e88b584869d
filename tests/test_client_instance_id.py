"""KIP-714's client_instance_id(timeout), the clients' metrics() and KIP-1076's
register_metric_for_subscription (issue 24).

Against Kafka 4.4 with the TelemetrySink reporter (tests/test_telemetry_broker.py's
``sink_broker``): every client of every driver gets a uuid.UUID, the one the
broker's plugin names for that client in its pushes. Against the suite's
brokers (Kafka without a plugin, Tansu): what each does. Without a
listening broker: the timeout; with enable.metrics.push off: IllegalStateError."""
import asyncio
import base64
import socket
import time
import uuid

import pytest
import trio
from opentelemetry.proto.metrics.v1 import metrics_pb2

import kio
import kio.aio
import kio.trio
from kio.errors import IllegalStateError, KafkaTimeoutError
from kproto.telemetry import TelemetryState

from test_telemetry_broker import _pushes, _wait, sink_broker  # noqa: F401 - the module's broker fixture


def _sink_instance_id(folder, client_id):
    """The client instance id the broker's plugin received with ``client_id``'s
    pushes (Kafka writes a Uuid as URL-safe base64 of its 16 bytes)."""
    f = folder / f"{client_id}.instance-id"
    if not f.exists():
        return None
    return uuid.UUID(bytes=base64.urlsafe_b64decode(f.read_text() + "=="))


def _free_port():
    """A local port nothing listens on: connections to it are refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_threading_clients_get_the_id_the_broker_plugin_sees(sink_broker):  # noqa: F811
    b, folder = sink_broker
    topic = f"instid-{uuid.uuid4().hex[:8]}"
    producer = kio.Producer(bootstrap_servers=b.bootstrap_servers, client_id="kio-instid-producer")
    consumer = kio.Consumer(bootstrap_servers=b.bootstrap_servers, client_id="kio-instid-consumer",
                            group_id=f"g-{topic}")
    admin = kio.Admin(bootstrap_servers=b.bootstrap_servers, client_id="kio-instid-admin")
    try:
        ids = {"kio-instid-producer": producer.client_instance_id(20),
               "kio-instid-consumer": consumer.client_instance_id(20),
               "kio-instid-admin": admin.client_instance_id(20)}
        assert all(isinstance(i, uuid.UUID) and i.int != 0 for i in ids.values())
        assert len(set(ids.values())) == 3            # one per client
        # Asked again: the same id, at once.
        assert producer.client_instance_id(0) == ids["kio-instid-producer"]
        # The pushes (every second) carry it: the plugin names the same id.
        end = time.monotonic() + 20
        while time.monotonic() < end and not all(_sink_instance_id(folder, c) for c in ids):
            consumer.poll(0.2)
            admin.list_topics()        # the threading Admin pushes while an operation runs
        for client_id, got in ids.items():
            assert _sink_instance_id(folder, client_id) == got, client_id
        # metrics(): the network client's counters in each, and each core's own
        cm, am = consumer.metrics(), admin.metrics()
        assert cm["telemetry_pushes"] >= 1 and cm["assigned_partitions"] == 0 and cm["records_buffered"] is False
        assert am["telemetry_pushes"] >= 1 and am["response_total"] > am["telemetry_pushes"]
        assert am["calls_pending"] == 0 and am["connection_count"] >= 1
    finally:
        producer.close(10)
        consumer.close()
        admin.close()


def test_share_consumers_get_the_id_the_broker_plugin_sees(sink_broker):  # noqa: F811
    b, folder = sink_broker
    topic = f"instid-share-{uuid.uuid4().hex[:8]}"
    with kio.ShareConsumer(bootstrap_servers=b.bootstrap_servers, group_id=f"g-{topic}",
                           client_id="kio-instid-share") as c:
        got = c.client_instance_id(20)
        c.subscribe([topic])
        end = time.monotonic() + 20
        while time.monotonic() < end and _sink_instance_id(folder, "kio-instid-share") is None:
            c.poll(0.2)
    assert isinstance(got, uuid.UUID) and _sink_instance_id(folder, "kio-instid-share") == got

    async def run():
        async with kio.aio.ShareConsumer(bootstrap_servers=b.bootstrap_servers, group_id=f"g-{topic}",
                                         client_id="kio-instid-aio-share") as c:
            return await c.client_instance_id(20), c.metrics()

    got, metrics = asyncio.run(run())
    assert isinstance(got, uuid.UUID) and got != _sink_instance_id(folder, "kio-instid-share")
    assert metrics["response_total"] >= 1


def test_async_clients_get_the_id_the_broker_plugin_sees(sink_broker):  # noqa: F811
    b, folder = sink_broker

    async def run(module, sleep, prefix):
        async with module.Producer(bootstrap_servers=b.bootstrap_servers, client_id=f"{prefix}-p") as p, \
                module.Consumer(bootstrap_servers=b.bootstrap_servers, client_id=f"{prefix}-c",
                                group_id=f"g-{prefix}") as c, \
                module.Admin(bootstrap_servers=b.bootstrap_servers, client_id=f"{prefix}-a") as a:
            ids = {f"{prefix}-p": await p.client_instance_id(20), f"{prefix}-c": await c.client_instance_id(20),
                   f"{prefix}-a": await a.client_instance_id(20)}
            end = time.monotonic() + 20
            while time.monotonic() < end and not all(_sink_instance_id(folder, k) for k in ids):
                await sleep(0.2)
            assert isinstance(c.metrics()["connection_count"], int)
            assert a.metrics()["response_total"] > 0
        return ids

    for ids in (asyncio.run(run(kio.aio, asyncio.sleep, "kio-instid-aio")),
                trio.run(run, kio.trio, trio.sleep, "kio-instid-trio")):
        assert len(set(ids.values())) == 3
        for client_id, got in ids.items():
            assert isinstance(got, uuid.UUID)
            assert _sink_instance_id(folder, client_id) == got, client_id


def test_enable_metrics_push_false_is_an_illegal_state(sink_broker):  # noqa: F811
    b, _ = sink_broker
    with kio.Producer(bootstrap_servers=b.bootstrap_servers, enable_metrics_push=False) as p:
        with pytest.raises(IllegalStateError, match="enable.metrics.push"):
            p.client_instance_id(5)
    with kio.Admin(bootstrap_servers=b.bootstrap_servers, enable_metrics_push=False) as a:
        with pytest.raises(IllegalStateError, match="enable.metrics.push"):
            a.client_instance_id(5)

    async def run():
        async with kio.aio.Consumer(bootstrap_servers=b.bootstrap_servers, enable_metrics_push=False) as c:
            with pytest.raises(IllegalStateError, match="enable.metrics.push"):
                await c.client_instance_id(5)

    asyncio.run(run())


def test_no_answer_within_the_timeout_is_a_timeout():
    """Nothing listens at the bootstrap address: no GetTelemetrySubscriptions
    answer can come, so the wait ends with KafkaTimeoutError after the timeout."""
    servers = f"127.0.0.1:{_free_port()}"
    with kio.Producer(bootstrap_servers=servers) as p:
        started = time.monotonic()
        with pytest.raises(KafkaTimeoutError, match="client_instance_id timed out"):
            p.client_instance_id(0.5)
        assert 0.4 < time.monotonic() - started < 5
        with pytest.raises(ValueError, match="negative"):
            p.client_instance_id(-1)
        p.close(0)
    with kio.Admin(bootstrap_servers=servers) as a:
        with pytest.raises(KafkaTimeoutError, match="client_instance_id timed out"):
            a.client_instance_id(0.5)


def test_suite_brokers(broker):
    """The suite's brokers: Kafka 4.4 without a client-telemetry plugin does
    not advertise the telemetry APIs, so there is no id to wait for
    (IllegalStateError, at once); Tansu answers GetTelemetrySubscriptions
    with an id (and no metrics to push), so the id comes."""
    with kio.Producer(bootstrap_servers=broker.bootstrap_servers) as p:
        if broker.kind == "kafka":
            tel = p._core.client.telemetry
            # The first connection's ApiVersions tells telemetry it has no API.
            assert _wait(lambda: tel.state is TelemetryState.DISABLED, 20)
            started = time.monotonic()
            with pytest.raises(IllegalStateError, match="no GetTelemetrySubscriptions API"):
                p.client_instance_id(10)
            assert time.monotonic() - started < 1
        else:
            got = p.client_instance_id(20)
            assert isinstance(got, uuid.UUID) and got.int != 0
            assert p.client_instance_id(0) == got
        m = p.metrics()
        assert m["connection_creation_total"] >= 1 and m["response_total"] >= 1


# -- KIP-1076: the application's metrics pushed with the client's -------------------------------

APP_METRIC = "org.apache.kafka.kio.app.jobs.done"


def _app_points(folder, client_id):
    """[(value, attributes, is a sum)] of APP_METRIC in each push of ``client_id``, in push order."""
    files = sorted(folder.glob(f"*-{client_id}-*.bin"), key=lambda f: int(f.name.split("-", 1)[0]))
    out = []
    for f in files:
        d = metrics_pb2.MetricsData()
        d.ParseFromString(f.read_bytes())
        found = None
        for m in (m for rm in d.resource_metrics for sm in rm.scope_metrics for m in sm.metrics):
            if m.name == APP_METRIC:
                kind = m.WhichOneof("data")
                dp = getattr(m, kind).data_points[0]
                found = (dp.as_int if dp.WhichOneof("value") == "as_int" else dp.as_double,
                         {a.key: a.value.string_value for a in dp.attributes}, kind == "sum")
        out.append(found)
    return out


def test_registered_application_metric_is_pushed_until_unregistered(sink_broker):  # noqa: F811
    b, folder = sink_broker
    done = [41]
    with kio.Producer(bootstrap_servers=b.bootstrap_servers, client_id="kio-app-metric") as p:
        p.register_metric_for_subscription("kio-app-metrics", "jobs-done", lambda: done[0],
                                           tags={"stage": "load"}, cumulative=True)
        done[0] = 42                        # read at each push, not at registration
        assert _wait(lambda: any(_app_points(folder, "kio-app-metric")), 20)
        value, attributes, is_sum = next(x for x in _app_points(folder, "kio-app-metric") if x)
        assert (value, attributes, is_sum) == (42, {"stage": "load"}, True)
        p.unregister_metric_from_subscription("kio-app-metrics", "jobs-done", tags={"stage": "load"})
        seen = len(_app_points(folder, "kio-app-metric"))
        # a push that began after unregistering has it no more
        assert _wait(lambda: len(_app_points(folder, "kio-app-metric")) >= seen + 2, 20)
        assert _app_points(folder, "kio-app-metric")[-1] is None


def test_async_admin_pushes_a_registered_gauge(sink_broker):  # noqa: F811
    b, folder = sink_broker

    async def run():
        async with kio.aio.Admin(bootstrap_servers=b.bootstrap_servers, client_id="kio-app-metric-admin") as a:
            a.register_metric_for_subscription("kio-app-metrics", "jobs-done", lambda: 2.5)
            end = time.monotonic() + 20
            while not any(_app_points(folder, "kio-app-metric-admin")) and time.monotonic() < end:
                await asyncio.sleep(0.2)

    asyncio.run(run())
    assert next(x for x in _app_points(folder, "kio-app-metric-admin") if x) == (2.5, {}, False)


def test_register_metric_bad_input_and_telemetry_off():
    servers = f"127.0.0.1:{_free_port()}"
    with kio.Consumer(bootstrap_servers=servers, enable_metrics_push=False) as c:
        with pytest.raises(TypeError, match="callable"):
            c.register_metric_for_subscription("app-metrics", "x", 3)
        with pytest.raises(TypeError, match="non-empty str"):
            c.register_metric_for_subscription("", "x", lambda: 1)
        with pytest.raises(TypeError, match="tags must map str to str"):
            c.register_metric_for_subscription("app-metrics", "x", lambda: 1, tags={"k": 1})
        c.register_metric_for_subscription("app-metrics", "x", lambda: 1)   # telemetry off: nothing, no error
        c.unregister_metric_from_subscription("app-metrics", "never-registered")
        assert c._core.client.telemetry is None
