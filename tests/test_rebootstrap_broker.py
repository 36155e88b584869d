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
