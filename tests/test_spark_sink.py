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


def test_a_row_over_max_request_size_fails_its_call_with_the_row_before_anything_is_sent(bootstrap, make_topic):
    """send_many makes send()'s size check on every row: the sink's bulk
    path refuses a row larger than max.request.size with the client's
    RecordTooLargeError naming the row of the Arrow batch (not the broker's
    MESSAGE_TOO_LARGE later), and sends nothing of that call."""
    from kio import Consumer, TopicPartition
    topic = make_topic(2)
    conf = {"bootstrap.servers": bootstrap, "max.request.size": 2000, "linger.ms": 0}
    # rows 0, 2, 3 go to partition 1, row 1 to partition 0: the big row is row 3 of the batch
    rb = pa.RecordBatch.from_pydict({"value": [b"a", b"b", b"c", b"x" * 5000], "partition": [1, 0, 1, 1]})
    try:
        with pytest.raises(sink.SparkWriteError, match=r"RecordTooLargeError: row 3 of the Arrow batch: "
                                                       r"send_many\(\) row 2: the record is \d+ bytes when "
                                                       r"serialized, larger than max\.request\.size \(2000\)"):
            sink.send_batches([rb], topic, conf)
        report = sink.send_batches([rb], topic, conf, errors="report")
    finally:
        sink._close_all()
    failed = [r for r in report if r[6] is not None]
    assert [(t, part, n) for t, part, n, *_ in failed] == [(topic, 1, 3)]
    assert "row 3 of the Arrow batch" in failed[0][6]
    with Consumer(bootstrap_servers=bootstrap) as c:
        ends = c.end_offsets([TopicPartition(topic, 0), TopicPartition(topic, 1)])
    # partition 1's group comes first and fails: errors="raise" stops there; errors="report" goes on and
    # sends partition 0's row; partition 1's call sent nothing either time
    assert ends == {TopicPartition(topic, 0): 1, TopicPartition(topic, 1): 0}
