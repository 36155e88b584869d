"""KIP-714 client telemetry against Apache Kafka 4.4: a broker whose metrics
reporter (tests/telemetry_sink/TelemetrySink.java, compiled here with the
machine's javac against the broker's jars) writes every pushed payload to a
folder; kio's producer and consumer push what the client-metrics subscription
asks for, a terminating push on close, and nothing with enable.metrics.push
off. Then the suite's brokers without a subscription: no pushes, no errors."""
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from opentelemetry.proto.metrics.v1 import metrics_pb2

import kio
from kio.admin import ConfigResource
from kio.kafka_broker import KafkaBroker, kafka_classpath, java_binary
from kproto.telemetry import TelemetryState

from conftest import broker_kinds

SINK_SOURCE = Path(__file__).parent / "telemetry_sink" / "TelemetrySink.java"


@pytest.fixture(scope="module")
def sink_broker(tmp_path_factory):
    """Kafka with the TelemetrySink reporter and a client-metrics subscription
    of every metric each second: (broker, folder of the payloads)."""
    if "kafka" not in broker_kinds():
        pytest.skip("the telemetry sink is a plugin of Apache Kafka (KIO_TEST_BROKERS leaves it out)")
    root = tmp_path_factory.mktemp("telemetry")
    classes, payloads = root / "classes", root / "payloads"
    classes.mkdir()
    payloads.mkdir()
    javac = shutil.which("javac") or str(Path(java_binary()).with_name("javac"))
    subprocess.run([javac, "-nowarn", "-d", str(classes), "-cp", kafka_classpath(), str(SINK_SOURCE)],
                   check=True, capture_output=True)
    b = KafkaBroker(log_path=str(root / "kafka.log"), heap="384m", extra_classpath=[str(classes)],
                    config={"metric.reporters": "TelemetrySink", "telemetry.sink.dir": str(payloads)}).start()
    try:
        with kio.Admin(bootstrap_servers=b.bootstrap_servers, default_api_timeout_ms=20000) as admin:
            admin.incremental_alter_configs({ConfigResource.client_metrics("all-of-kio"): {
                "metrics": "*", "interval.ms": "1000"}})
        yield b, payloads
    finally:
        b.stop()


def _pushes(folder, client_id):
    """{terminating: [MetricsData]} of what ``client_id`` pushed so far."""
    out = {True: [], False: []}
    for f in sorted(folder.glob(f"*-{client_id}-*.bin")):
        m = metrics_pb2.MetricsData()
        m.ParseFromString(f.read_bytes())
        out[f.stem.endswith("-true")].append(m)
    return out


def _names(datas):
    return {m.name for d in datas for rm in d.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}


def _wait(cond, timeout=30.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.2)
    return cond()


def test_producer_and_consumer_push_the_subscribed_metrics_and_a_terminating_push(sink_broker):
    b, folder = sink_broker
    topic = f"telemetry-{uuid.uuid4().hex[:8]}"
    producer = kio.Producer(bootstrap_servers=b.bootstrap_servers, client_id="kio-tel-producer")
    consumer = kio.Consumer(bootstrap_servers=b.bootstrap_servers, client_id="kio-tel-consumer",
                            group_id=f"g-{topic}", auto_offset_reset="earliest")
    try:
        for i in range(10):
            producer.send(topic, value=b"v%d" % i)
        producer.flush(30)
        consumer.subscribe([topic])
        got = 0
        end = time.monotonic() + 30
        while got < 10 and time.monotonic() < end:
            got += len(consumer.poll(0.5))
        assert got == 10
        # pushes every second (the first after 0.5-1.5 s): keep polling meanwhile
        while time.monotonic() < end and not (_pushes(folder, "kio-tel-consumer")[False]
                                              and _pushes(folder, "kio-tel-producer")[False]):
            consumer.poll(0.2)
        assert producer._core.client.telemetry.state in (TelemetryState.PUSH_NEEDED, TelemetryState.PUSH_IN_PROGRESS)
    finally:
        producer.close(10)
        consumer.close()
    own = {"producer": ["record.send.total", "record.error.total", "buffer.available.bytes",
                        "request.latency.avg", "request.latency.max"],
           "consumer": ["fetch.manager.fetch.latency.avg", "fetch.manager.fetch.latency.max",
                        "coordinator.assigned.partitions"]}
    for client_id, kind in (("kio-tel-producer", "producer"), ("kio-tel-consumer", "consumer")):
        assert _wait(lambda: _pushes(folder, client_id)[True]), f"no terminating push of {client_id}"
        pushes = _pushes(folder, client_id)
        assert len(pushes[True]) == 1
        names = _names(pushes[False] + pushes[True])
        for name in ["connection.creation.total", "connection.count", "request.total", "response.total",
                     "node.request.latency.avg", "node.request.latency.max", *own[kind]]:
            assert f"org.apache.kafka.{kind}.{name}" in names, (client_id, sorted(names))
        resource = pushes[True][0].resource_metrics[0].resource.attributes
        assert ("client_id", client_id) in [(a.key, a.value.string_value) for a in resource]
    assert producer._core.client.telemetry.state is TelemetryState.TERMINATED


def test_enable_metrics_push_false_sends_no_subscription_request(sink_broker):
    b, folder = sink_broker
    producer = kio.Producer(bootstrap_servers=b.bootstrap_servers, client_id="kio-tel-off", enable_metrics_push=False)
    try:
        producer.send(f"telemetry-off-{uuid.uuid4().hex[:8]}", value=b"x")
        producer.flush(30)
        client = producer._core.client
        assert client.telemetry is None
        time.sleep(2.5)         # two intervals of the subscription
    finally:
        producer.close(10)
    assert _pushes(folder, "kio-tel-off") == {True: [], False: []}


def test_no_subscription_no_pushes_no_errors(broker):
    """The suite's brokers have no client-metrics subscription (and Tansu no
    telemetry APIs): nothing is pushed, nothing fails, close is not delayed."""
    errors = []
    producer = kio.Producer(bootstrap_servers=broker.bootstrap_servers, client_id="kio-tel-none",
                            error_cb=errors.append)
    try:
        producer.send(f"telemetry-none-{uuid.uuid4().hex[:8]}", value=b"x").result(30)
        tel = producer._core.client.telemetry
        assert _wait(lambda: tel.state in (TelemetryState.SUBSCRIPTION_NEEDED, TelemetryState.DISABLED)
                     and tel.next_deadline(0) != 0, 10)
        assert tel.pushes == 0 and tel.requested == [] and tel.last_error is None
        started = time.monotonic()
    finally:
        producer.close(10)
    assert time.monotonic() - started < 5
    assert errors == []
    assert tel.state in (TelemetryState.TERMINATED, TelemetryState.DISABLED)


def test_asyncio_producer_and_admin_push_too(sink_broker):
    """The same shared code in the asyncio driver (terminating push on close)
    and in the admin client (pushes as admin.client)."""
    import asyncio

    import kio.aio

    b, folder = sink_broker

    async def run():
        async with kio.aio.Producer(bootstrap_servers=b.bootstrap_servers, client_id="kio-tel-aio") as p:
            h = await p.send(f"telemetry-aio-{uuid.uuid4().hex[:8]}", b"x")
            await h
            end = time.monotonic() + 20
            while not _pushes(folder, "kio-tel-aio")[False] and time.monotonic() < end:
                await asyncio.sleep(0.2)

    asyncio.run(run())
    assert _wait(lambda: _pushes(folder, "kio-tel-aio")[True], 10)
    assert "org.apache.kafka.producer.record.send.total" in _names(_pushes(folder, "kio-tel-aio")[True])
    # The threading Admin drives its sockets only while an operation runs
    # (no network thread): it pushes when a push is due during one.
    with kio.Admin(bootstrap_servers=b.bootstrap_servers, client_id="kio-tel-admin") as admin:
        assert _wait(lambda: admin.list_topics() is not None and _pushes(folder, "kio-tel-admin")[False], 20)
    names = _names(_pushes(folder, "kio-tel-admin")[False])
    assert {"org.apache.kafka.admin.client.request.total",
            "org.apache.kafka.admin.client.connection.creation.total"} <= names


def test_share_consumer_pushes_and_ends_with_a_terminating_push(sink_broker):
    from kio import ShareConsumer

    b, folder = sink_broker
    topic = f"telemetry-share-{uuid.uuid4().hex[:8]}"
    with kio.Producer(bootstrap_servers=b.bootstrap_servers) as p:
        p.send(topic, b"x").result(30)
    with ShareConsumer(bootstrap_servers=b.bootstrap_servers, group_id=f"g-{topic}",
                       client_id="kio-tel-share") as c:
        c.subscribe([topic])
        end = time.monotonic() + 20
        while not _pushes(folder, "kio-tel-share")[False] and time.monotonic() < end:
            c.poll(0.3)
    assert _wait(lambda: _pushes(folder, "kio-tel-share")[True], 10)
    names = _names(_pushes(folder, "kio-tel-share")[False])
    assert {"org.apache.kafka.consumer.request.total", "org.apache.kafka.consumer.connection.count"} <= names


def test_every_admin_ends_with_a_terminating_push(sink_broker):
    """KIP-714 on the admin's close, as the producer's: once the subscription
    is active, close() sends one last push with terminating=true (the
    threading Admin, kio.aio.Admin and kio.trio.Admin run
    AdminCore.terminate_telemetry)."""
    import asyncio

    import trio

    import kio.aio
    import kio.trio

    b, folder = sink_broker

    def subscribed(admin):
        return admin._core.client.telemetry.state in (TelemetryState.PUSH_NEEDED, TelemetryState.PUSH_IN_PROGRESS)

    admin = kio.Admin(bootstrap_servers=b.bootstrap_servers, client_id="kio-tel-admin-close")
    try:
        # The threading Admin drives its sockets only while an operation runs.
        assert _wait(lambda: admin.list_topics() is not None and subscribed(admin), 20)
    finally:
        admin.close()
    assert admin._core.client.telemetry.state is TelemetryState.TERMINATED

    async def run(module, sleep, client_id):
        async with module.Admin(bootstrap_servers=b.bootstrap_servers, client_id=client_id) as a:
            await a.list_topics()
            end = time.monotonic() + 20
            while not subscribed(a) and time.monotonic() < end:
                await sleep(0.1)
            assert subscribed(a)
        return a._core.client.telemetry.state

    assert asyncio.run(run(kio.aio, asyncio.sleep, "kio-tel-aio-admin-close")) is TelemetryState.TERMINATED
    assert trio.run(run, kio.trio, trio.sleep, "kio-tel-trio-admin-close") is TelemetryState.TERMINATED
    for client_id in ("kio-tel-admin-close", "kio-tel-aio-admin-close", "kio-tel-trio-admin-close"):
        assert _wait(lambda: _pushes(folder, client_id)[True], 10), f"no terminating push of {client_id}"
        (last,) = _pushes(folder, client_id)[True]
        assert "org.apache.kafka.admin.client.request.total" in _names([last])
