"""KIP-899 / KIP-1102 against real brokers: a client whose known brokers are
all gone, while its bootstrap list leads to a live cluster, recovers there
(``metadata.recovery.strategy=rebootstrap``, the default).

``bootstrap.servers`` names two addresses: cluster A's broker and a port
where nothing listens yet. The client bootstraps from A and from then on
knows only A's broker. A is stopped and cluster B started on the second
address: only going back to the bootstrap list finds it."""
import time
import uuid

import pytest

from conftest import broker_kinds
from kio import Admin, Producer
from kio.testing.broker import LocalBroker, free_port


def _broker(kind, port, log_path):
    if kind == "kafka":
        from kio.testing.kafka_broker import KafkaBroker
        return KafkaBroker(port=port, heap="256m", log_path=log_path)
    return LocalBroker(port=port, log_path=log_path)


@pytest.mark.broker
@pytest.mark.parametrize("kind", broker_kinds())
def test_client_rebootstraps_to_the_live_cluster(kind, tmp_path):
    topic = f"rb-{uuid.uuid4().hex[:8]}"
    a = _broker(kind, free_port(), str(tmp_path / "a.log")).start()
    b = _broker(kind, free_port(), str(tmp_path / "b.log"))
    bootstrap = f"{a.bootstrap_servers},{b.bootstrap_servers}"
    try:
        with Producer(bootstrap_servers=bootstrap, linger_ms=0, reconnect_backoff_max_ms=500) as p, \
                Admin(bootstrap_servers=bootstrap, default_api_timeout_ms=60000) as admin:
            assert p.send(topic, b"on A").result(60).offset == 0
            assert topic in admin.list_topics()
            a.stop()
            b.start()
            t0 = time.monotonic()
            # Only B can take it; the producer knew A's broker alone.
            md = p.send(topic, b"on B").result(90)
            recovered = time.monotonic() - t0
            assert md.offset == 0                        # a new log: B's own topic
            assert topic in admin.list_topics()
            assert p._core.cluster.rebootstraps >= 1 and admin._core.cluster.rebootstraps >= 1
            print(f"\n[rebootstrap] {kind}: the producer recovered {recovered:.1f} s after cluster B started")
    finally:
        a.stop()
        b.stop()


@pytest.mark.broker
@pytest.mark.parametrize("kind", broker_kinds())
def test_a_broker_of_another_cluster_at_a_known_address_sends_the_client_back_to_bootstrap(kind, tmp_path,
                                                                                         caplog):
    """KIP-1242: brokers A and B, clusters of their own, the same node id, both
    advertised at one proxy address. The client learns cluster A and node 1
    there; the proxy then leads to B. The client's next connection to that node
    names cluster A in ApiVersions v5: Kafka 4.4 refuses it with
    REBOOTSTRAP_REQUIRED and the client starts over from bootstrap, to learn
    B. (Without the check the client would talk to B as if it were A's broker.)"""
    from fault_proxy import FaultProxy
    topic = f"kip1242-{uuid.uuid4().hex[:8]}"
    port_a, port_b = free_port(), free_port()
    proxy = FaultProxy(upstream=("127.0.0.1", port_a)).start()
    a = b = None
    try:
        if kind == "kafka":
            from kio.testing.kafka_broker import KafkaBroker
            a, b = (KafkaBroker(port=port, advertised_port=proxy.port, heap="256m",
                                log_path=str(tmp_path / f"{name}.log"))
                    for name, port in (("a", port_a), ("b", port_b)))
        else:
            a, b = (LocalBroker(port=port, advertised_port=proxy.port, log_path=str(tmp_path / f"{name}.log"),
                                cluster_id=f"kio-{name}") for name, port in (("a", port_a), ("b", port_b)))
        a.start()
        b.start()
        bootstrap = f"127.0.0.1:{proxy.port}"
        # reconnect.backoff.ms=0: after the cut the client reconnects to node 1
        # at once instead of finding its only broker backing off and
        # rebootstrapping for that reason (KIP-899) before asking it.
        with Producer(bootstrap_servers=bootstrap, linger_ms=0, reconnect_backoff_ms=0,
                      reconnect_backoff_max_ms=500) as p:
            assert p.send(topic, b"on A").result(60).offset == 0
            cluster = p._core.cluster
            node = 1 if kind == "kafka" else 111                    # Tansu's node id
            assert cluster.cluster_id == a.cluster_id and set(cluster.brokers) == {node}
            proxy.retarget(("127.0.0.1", port_b))
            with caplog.at_level("INFO", logger="kproto.client"):
                proxy.cut_all()
                assert p.send(topic, b"on B").result(60).offset == 0      # B's own log
            assert cluster.cluster_id == b.cluster_id
            refused = [r.getMessage() for r in caplog.records if "REBOOTSTRAP_REQUIRED" in r.getMessage()]
            if kind == "kafka":
                assert cluster.rebootstraps == 1 and refused, caplog.text
            else:
                # Tansu takes ApiVersions up to v4 (and drops a connection
                # whose v5 request names a cluster): the client names none
                # to it, and follows B's Metadata answer without a rebootstrap.
                assert p._core.client.connections[node].versions.get("ApiVersions") < 5
                assert cluster.rebootstraps == 0 and not refused, caplog.text
    finally:
        for broker in (a, b):
            if broker is not None:
                broker.stop()
        proxy.stop()
