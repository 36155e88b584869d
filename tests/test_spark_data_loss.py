"""The kio-kafka source never loses rows silently (issue 25): records that
are gone from Kafka (DeleteRecords, retention) fail a batch or streaming
read by default, as Spark's own Kafka connector does, and with
failOnDataLoss=false the read goes on from what is left, with a WARNING.
Partitions named by ``assign`` that do not exist are left out, as Spark's
connector does, instead of timing out.

Apache Kafka only: the log start offsets these cases move are Kafka's
(DeleteRecords and retention)."""
import json
import time

import pytest

from kio import Admin, Consumer, Producer, TopicPartition as TP
from kio.admin import NewTopic
from kio.spark.offsets import DataLossError, OffsetRange, consumer_config, normalize
from kio.spark.source import read_range

pytestmark = pytest.mark.parametrize("broker", ["kafka"], indirect=True)


def produce(bootstrap, topic, partition, first, count, timestamp_ms=None):
    with Producer(bootstrap_servers=bootstrap, linger_ms=5) as p:
        for i in range(first, first + count):
            p.send(topic, b"r%d" % i, partition=partition, timestamp_ms=timestamp_ms)
        assert p.flush(30) == 0


def delete_before(bootstrap, topic, partition, offset):
    with Admin(bootstrap_servers=bootstrap) as a:
        a.delete_records({TP(topic, partition): offset})
    with Consumer(bootstrap_servers=bootstrap) as c:
        assert c.beginning_offsets([TP(topic, partition)])[TP(topic, partition)] == offset


def batch(spark, bootstrap, topic, starting, **options):
    reader = (spark.read.format("kio-kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", json.dumps(starting)))
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def test_batch_read_below_the_log_start_fails_by_default_and_reads_what_is_left_otherwise(
        spark, bootstrap, make_topic):
    """The held-out case: DeleteRecords moved partition 0's log start to 30,
    a batch read asks for offset 10. Before, kio returned 0 rows and no error."""
    topic = make_topic(2)
    produce(bootstrap, topic, 0, 0, 100)
    produce(bootstrap, topic, 1, 0, 40)
    delete_before(bootstrap, topic, 0, 30)
    starting = {topic: {"0": 10, "1": -2}}
    with pytest.raises(Exception, match=rf"{topic}-0: offset 10 is no longer in Kafka \(the partition's log "
                                        r"starts at 30\): some data may have been lost"):
        batch(spark, bootstrap, topic, starting).collect()
    rows = batch(spark, bootstrap, topic, starting, failOnDataLoss="false").collect()
    assert sorted(r.offset for r in rows if r.partition == 0) == list(range(30, 100))
    assert sorted(r.offset for r in rows if r.partition == 1) == list(range(40))
    assert all(r.value == b"r%d" % r.offset for r in rows)
    # from earliest nothing is lost: the read starts at the log start
    assert batch(spark, bootstrap, topic, {topic: {"0": -2, "1": -2}}).count() == 110


@pytest.fixture(scope="module")
def retention_broker(tmp_path_factory):
    """A broker of its own that applies retention within a second or two
    (Kafka checks every 5 min, first 30 s after start): the suite's shared
    broker keeps the defaults, as tests there write records with old
    timestamps that a fast retention check would delete."""
    from kio.testing.kafka_broker import KafkaBroker
    b = KafkaBroker(log_path=str(tmp_path_factory.mktemp("retention") / "kafka.log"), heap="512m",
                    config={"log.retention.check.interval.ms": 1000, "log.initial.task.delay.ms": 1000}).start()
    try:
        yield b
    finally:
        b.stop()


def test_batch_read_after_retention_deleted_a_segment(spark, broker, retention_broker):
    """Retention (not DeleteRecords) moves the log start: the same rule."""
    import uuid
    bootstrap = retention_broker.bootstrap_servers
    topic = "retention-" + uuid.uuid4().hex[:8]
    with Admin(bootstrap_servers=bootstrap) as a:
        a.create_topics([NewTopic(topic, 1, 1, configs={"segment.ms": "1000", "retention.ms": "600000"})])
    # The first 50 records are an hour old: their segment is past retention.ms
    # and rolls at the next append; the next 50 are new and stay.
    produce(bootstrap, topic, 0, 0, 50, timestamp_ms=int(time.time() * 1000) - 3_600_000)
    produce(bootstrap, topic, 0, 50, 50)
    tp = TP(topic, 0)
    with Consumer(bootstrap_servers=bootstrap) as c:
        end = time.monotonic() + 60
        while c.beginning_offsets([tp])[tp] == 0 and time.monotonic() < end:
            time.sleep(0.5)
        log_start = c.beginning_offsets([tp])[tp]
    assert log_start == 50, "retention did not delete the first segment in 60 s"
    with pytest.raises(Exception, match=rf"{topic}-0: offset 0 is no longer in Kafka"):
        batch(spark, bootstrap, topic, {topic: {"0": 0}}).collect()
    rows = batch(spark, bootstrap, topic, {topic: {"0": 0}}, failOnDataLoss="false").collect()
    assert sorted(r.offset for r in rows) == list(range(log_start, 100))


def test_records_deleted_after_planning_are_data_loss_in_the_read_task(bootstrap, make_topic, caplog):
    """The range was planned while its records were there; by the time the
    task reads them they are gone. The task's consumer runs with
    auto.offset.reset=none, so it sees OFFSET_OUT_OF_RANGE instead of
    jumping to the end (kio's default) and reading nothing."""
    topic = make_topic(1)
    produce(bootstrap, topic, 0, 0, 100)
    r = OffsetRange(topic, 0, 10, 100)                # planned, then:
    delete_before(bootstrap, topic, 0, 60)
    config = consumer_config(normalize({"kafka.bootstrap.servers": bootstrap, "subscribe": topic}))
    with pytest.raises(DataLossError, match=rf"{topic}-0: offset 10 is no longer in Kafka \(the partition's "
                                            r"log starts at 60\)"):
        list(read_range(config, r, 30.0))
    with caplog.at_level("WARNING", logger="kio.spark"):
        got = [o for rb in read_range(config, r, 30.0, fail_on_data_loss=False)
               for o in rb.column("offset").to_pylist()]
    assert got == list(range(60, 100))
    assert f"{topic}-0: offsets [10, 60) are no longer in Kafka (the log starts at 60); skipping 50" in caplog.text


def test_stream_from_a_checkpoint_whose_next_records_were_deleted(spark, bootstrap, make_topic, tmp_path):
    topic = make_topic(1)
    produce(bootstrap, topic, 0, 0, 100)
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")

    def run(**options):
        reader = (spark.readStream.format("kio-kafka").option("kafka.bootstrap.servers", bootstrap)
                  .option("subscribe", topic).option("startingOffsets", "earliest"))
        for k, v in options.items():
            reader = reader.option(k, v)
        q = (reader.load().selectExpr("value", "offset").writeStream.format("parquet")
             .option("path", out).option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        return q

    q = run()
    assert q.awaitTermination(120) and q.exception() is None
    produce(bootstrap, topic, 0, 100, 100)
    delete_before(bootstrap, topic, 0, 150)            # the stream's next offset, 100, is gone
    q = run()
    with pytest.raises(Exception, match=rf"{topic}-0: offset 100 is no longer in Kafka"):
        q.awaitTermination(120)
    q = run(failOnDataLoss="false")
    assert q.awaitTermination(120) and q.exception() is None
    got = spark.read.parquet(out).collect()
    assert sorted(r.offset for r in got) == list(range(100)) + list(range(150, 200))


def test_assign_of_a_partition_that_does_not_exist_reads_the_others_at_once(spark, bootstrap, make_topic):
    """Before: OffsetsTimeoutError after 60 s. Spark's connector reads the
    partitions that exist; so does kio-kafka."""
    topic = make_topic(5)
    for p in range(5):
        produce(bootstrap, topic, p, 0, 3)
    began = time.monotonic()
    rows = (spark.read.format("kio-kafka").option("kafka.bootstrap.servers", bootstrap)
            .option("assign", json.dumps({topic: [0, 4, 7]})).load().collect())
    assert sorted((r.partition, r.offset) for r in rows) == [(p, o) for p in (0, 4) for o in range(3)]
    assert time.monotonic() - began < 30
