"""The executor side of kio.spark's sink (kio.spark.sink) without Spark:
a task never waits for acknowledgements longer than the producer's own
delivery bound."""
import pyarrow as pa
import pytest

from kio.spark import sink
from kproto.producer.config import parse_producer_config


class _StuckProducer:
    """Takes records, never gets them acknowledged (what a stuck producer does)."""

    def __init__(self, config):
        self.config = parse_producer_config(dict(config))
        self._closed = False
        self.flush_waits = []

    def send_many(self, topic, values, **kw):
        return object()

    def flush(self, timeout=None):
        self.flush_waits.append(timeout)
        return 3                                  # records still pending after the wait


@pytest.fixture
def stuck(monkeypatch):
    conf = {"bootstrap.servers": "127.0.0.1:9", "delivery.timeout.ms": 4000, "request.timeout.ms": 2000}
    p = _StuckProducer(conf)
    monkeypatch.setitem(sink._producers, sink._config_key(conf), p)
    return conf, p


def test_a_stuck_producer_fails_the_task_after_delivery_timeout_instead_of_hanging(stuck):
    conf, p = stuck
    rb = pa.RecordBatch.from_pydict({"value": [b"a", b"b", b"c"]})
    with pytest.raises(sink.SparkWriteError, match=r"3 records still undelivered after flush \(34.0 s\)"):
        sink.send_batches([rb], "t", conf)
    assert p.flush_waits == [4.0 + 30.0]           # delivery.timeout.ms + a margin, not forever
    with pytest.raises(sink.SparkWriteError, match=r"after flush \(2.5 s\)"):
        sink.send_batches([rb], "t", conf, flush_timeout=2.5)
    assert p.flush_waits[-1] == 2.5
