"""kio.spark against Spark's own Kafka connector (spark-sql-kafka-0-10, what a
PySpark user would run instead), on the real Apache Kafka broker: for the
same topics and options, ``format("kio-kafka")`` and ``format("kafka")``
give identical DataFrames (schema and every row), streams write the same
rows, and what one side writes the other reads back identically.

The connector comes from Maven Central through kio.spark.connector
(pyspark's own version when served, else the newest served release)."""
import json
import time

import pytest

from kio import Producer

pytestmark = pytest.mark.parametrize("broker", ["kafka"], indirect=True)


def load(spark, fmt, bootstrap, **options):
    reader = spark.read.format(fmt).option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def by_position(rows):
    return sorted(rows, key=lambda r: (r.topic, r.partition, r.offset))


def assert_same(spark, bootstrap, **options):
    """Both sources over the same options: same schema, same rows; the rows."""
    theirs = load(spark, "kafka", bootstrap, **options)
    ours = load(spark, "kio-kafka", bootstrap, **options)
    assert ours.schema == theirs.schema
    assert ours.columns == theirs.columns
    want = by_position(theirs.collect())
    got = by_position(ours.collect())
    assert len(got) == len(want)
    assert got == want
    return want


HEADER_SETS = [[], [("a", b"1")], [("a", None), ("b\u00e9", b"")], [("dup", b"x"), ("dup", b"y"), ("z", b"\0" * 40)]]


@pytest.fixture(scope="module")
def topics(broker):
    """Two topics the read tests share: ``main`` (3 partitions: keys, null
    keys and values, headers of every kind, explicit timestamps) and
    ``appended`` (1 partition, LogAppendTime)."""
    import uuid

    from kio.blocking import BlockingClient
    from conftest import wait_for_leaders
    bootstrap = broker.bootstrap_servers
    names = {"main": f"cmp-main-{uuid.uuid4().hex[:8]}", "appended": f"cmp-app-{uuid.uuid4().hex[:8]}"}
    with BlockingClient(bootstrap) as client:
        client.request("CreateTopics", {"topics": [
            {"name": names["main"], "num_partitions": 3, "replication_factor": 1, "assignments": [], "configs": []},
            {"name": names["appended"], "num_partitions": 1, "replication_factor": 1, "assignments": [],
             "configs": [{"name": "message.timestamp.type", "value": "LogAppendTime"}]}],
            "timeout_ms": 10000})
        wait_for_leaders(client, names["main"], 3)
        wait_for_leaders(client, names["appended"], 1)
    # explicit timestamps, but recent ones: records older than the topic's
    # retention (7 days) would be deleted by the broker's retention check
    base_ms = int(time.time() * 1000) - 60_000
    with Producer(bootstrap_servers=bootstrap, linger_ms=5) as p:
        futs = []
        for i in range(3000):
            key = None if i % 7 == 0 else b"k%d" % i
            value = None if i % 11 == 0 else b"v%d" % i
            futs.append(p.send(names["main"], value, key=key, partition=None if key else i % 3,
                               headers=HEADER_SETS[i % 4], timestamp_ms=base_ms + i))
        for i in range(200):
            futs.append(p.send(names["appended"], b"a%d" % i, key=b"%d" % i, headers=HEADER_SETS[i % 4]))
        assert p.flush(30) == 0 and all(f.exception() is None for f in futs)
    return names


@pytest.mark.parametrize("case", ["subscribe", "subscribe-headers", "pattern-headers", "assign", "json-offsets",
                                  "two-topics-headers"])
def test_batch_reads_are_identical(spark, bootstrap, topics, case):
    main, app = topics["main"], topics["appended"]
    options = {
        "subscribe": {"subscribe": main},
        "subscribe-headers": {"subscribe": main, "includeHeaders": "true"},
        "pattern-headers": {"subscribePattern": main[:-4] + "....", "includeHeaders": "true"},
        "assign": {"assign": json.dumps({main: [0, 2]}), "startingOffsets": "earliest", "endingOffsets": "latest"},
        "json-offsets": {"subscribe": main, "includeHeaders": "true",
                         "startingOffsets": json.dumps({main: {"0": 5, "1": -2, "2": 100}}),
                         "endingOffsets": json.dumps({main: {"0": 300, "1": -1, "2": 101}})},
        "two-topics-headers": {"subscribe": f"{main},{app}", "includeHeaders": "true"},
    }[case]
    rows = assert_same(spark, bootstrap, **options)
    assert len(rows) >= 300
    if case == "two-topics-headers":
        assert {r.timestampType for r in rows if r.topic == app} == {1}
        assert {r.timestampType for r in rows if r.topic == main} == {0}
        assert len(rows) == 3200
    if "headers" in case:
        # a record without headers has null headers (not an empty array) on both sides
        assert any(r.headers is None for r in rows) and any(r.headers and len(r.headers) == 3 for r in rows)
    if case == "json-offsets":
        parts = {p: sorted(r.offset for r in rows if r.partition == p) for p in range(3)}
        assert parts[0][0] == 5 and parts[0][-1] == 299 and parts[2] == [100]


@pytest.mark.parametrize("options,message", [
    ({"startingOffsets": "latest"}, "latest"),
    ({"endingOffsets": "earliest"}, "earliest"),
    ({"startingOffsets": "{TOPIC: {\"0\": -1, \"1\": -2, \"2\": -2}}"}, "latest"),
    ({"endingOffsets": "{TOPIC: {\"0\": -2, \"1\": -1, \"2\": -1}}"}, "earliest"),
    ({"startingOffsets": "{TOPIC: {\"0\": 0}}"}, "every partition"),
    ({"kafka.auto.offset.reset": "earliest"}, "auto.offset.reset"),
    ({"kafka.enable.auto.commit": "true"}, "enable.auto.commit"),
    ({"kafka.value.deserializer": "x"}, "value.deserializer"),
    ({"includeHeaders": "maybe"}, "includeHeaders"),
])
def test_both_refuse_the_same_batch_options(spark, bootstrap, topics, options, message):
    main = topics["main"]
    options = {k: v.replace("TOPIC", json.dumps(main)) for k, v in options.items()}
    for fmt in ("kafka", "kio-kafka"):
        with pytest.raises(Exception) as e:
            load(spark, fmt, bootstrap, subscribe=main, **options).collect()
        if fmt == "kio-kafka":
            assert message in str(e.value)


def test_transactions_committed_and_aborted_read_committed_and_uncommitted(spark, bootstrap, make_topic):
    topic = make_topic(2)
    expected = {"read_committed": [], "read_uncommitted": []}
    with Producer(bootstrap_servers=bootstrap, transactional_id="cmp-" + topic, linger_ms=5) as p:
        p.init_transactions(30)
        n = 0
        for commit, count in ((True, 50), (False, 30), (True, 20), (False, 5), (True, 7)):
            p.begin_transaction()
            for _ in range(count):
                p.send(topic, b"t%d" % n, key=b"%d" % n, headers=[("txn", b"c" if commit else b"a")])
                expected["read_uncommitted"].append(b"t%d" % n)
                if commit:
                    expected["read_committed"].append(b"t%d" % n)
                n += 1
            if commit:
                p.commit_transaction(30)
            else:
                assert p.flush(30) == 0    # in the log first: abort drops what is only buffered
                p.abort_transaction(30)
    for level, values in expected.items():
        rows = assert_same(spark, bootstrap, subscribe=topic, includeHeaders="true",
                           **{"kafka.isolation.level": level})
        assert sorted(r.value for r in rows) == sorted(values)
    # a transaction still open: read_committed stops at its first record (the LSO)
    with Producer(bootstrap_servers=bootstrap, transactional_id="cmp-open-" + topic) as p:
        p.init_transactions(30)
        p.begin_transaction()
        p.send(topic, b"open", partition=0).result(30)
        rows = assert_same(spark, bootstrap, subscribe=topic, **{"kafka.isolation.level": "read_committed"})
        assert b"open" not in {r.value for r in rows} and len(rows) == len(expected["read_committed"])
        p.abort_transaction(30)


def test_streams_with_available_now_write_the_same_parquet(spark, bootstrap, topics, tmp_path):
    main, app = topics["main"], topics["appended"]
    results = {}
    for fmt in ("kafka", "kio-kafka"):
        stream = (spark.readStream.format(fmt).option("kafka.bootstrap.servers", bootstrap)
                  .option("subscribe", f"{main},{app}").option("startingOffsets", "earliest")
                  .option("includeHeaders", "true").option("maxOffsetsPerTrigger", "1000").load())
        out, checkpoint = str(tmp_path / fmt / "out"), str(tmp_path / fmt / "checkpoint")
        q = (stream.writeStream.format("parquet").option("path", out).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
        assert q.awaitTermination(180), f"the {fmt} availableNow query did not finish"
        assert q.exception() is None
        batches = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
        assert sum(batches) == 3200 and max(batches) <= 1000 + 4, (fmt, batches)
        results[fmt] = (spark.read.parquet(out).schema, by_position(spark.read.parquet(out).collect()))
    assert results["kio-kafka"][0] == results["kafka"][0]
    assert results["kio-kafka"][1] == results["kafka"][1]
    assert len(results["kafka"][1]) == 3200


def _input_rows(spark, topic=None, n=500):
    cols = ["if(id % 5 = 0, null, cast(concat('k', cast(id as string)) as binary)) as key",
            "cast(concat('v', cast(id as string)) as binary) as value",
            "if(id % 3 = 0, null, array(named_struct('key', 'seq', 'value', cast(cast(id as string) as binary)),"
            " named_struct('key', 'nul', 'value', cast(null as binary)))) as headers",
            "cast(id % 2 as int) as partition"]
    return spark.range(n).selectExpr(*cols)


def _as_written(rows):
    """(key, value, headers as tuples or None, partition) of rows, sorted."""
    def hs(h):
        return None if h is None else tuple((x.key, x.value) for x in h)
    return sorted(((r.key, r.value, hs(r.headers), r.partition) for r in rows), key=lambda t: t[1])


@pytest.mark.parametrize("writer", ["spark", "kio.spark.write", "kio-kafka"])
def test_what_one_side_writes_the_other_reads_back_identically(spark, bootstrap, make_topic, writer):
    topic = make_topic(2)
    df = _input_rows(spark)
    if writer == "spark":
        df.write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", topic).save()
    elif writer == "kio.spark.write":
        import kio.spark
        assert kio.spark.write(df, topic=topic, bootstrap_servers=bootstrap).rows == 500
    else:
        (df.write.format("kio-kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
         .mode("append").save())
    rows = assert_same(spark, bootstrap, subscribe=topic, includeHeaders="true")
    # null headers are written as none, and read back as null by both
    assert _as_written(rows) == _as_written(df.collect())
    assert sum(r.headers is None for r in rows) == sum(1 for i in range(500) if i % 3 == 0)


def test_topic_option_and_topic_column_precedence_is_sparks(spark, bootstrap, make_topic):
    a, b, c = make_topic(1), make_topic(1), make_topic(1)
    df = spark.range(20).selectExpr(f"if(id % 2 = 0, '{a}', '{b}') as topic", "cast(cast(id as string) as binary) as value")
    # Spark's sink with both a topic column and the topic option
    df.write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", c).save()
    theirs = {t: load(spark, "kafka", bootstrap, subscribe=t).count() for t in (a, b, c)}
    a2, b2, c2 = make_topic(1), make_topic(1), make_topic(1)
    df2 = spark.range(20).selectExpr(f"if(id % 2 = 0, '{a2}', '{b2}') as topic",
                                     "cast(cast(id as string) as binary) as value")
    (df2.write.format("kio-kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", c2)
     .mode("append").save())
    ours = {t: load(spark, "kafka", bootstrap, subscribe=t2).count() for t, t2 in ((a, a2), (b, b2), (c, c2))}
    assert ours == theirs
    # kio.spark.write follows the same rule
    import kio.spark
    a3, b3, c3 = make_topic(1), make_topic(1), make_topic(1)
    df3 = spark.range(20).selectExpr(f"if(id % 2 = 0, '{a3}', '{b3}') as topic",
                                     "cast(cast(id as string) as binary) as value")
    kio.spark.write(df3, topic=c3, bootstrap_servers=bootstrap)
    assert {t: load(spark, "kafka", bootstrap, subscribe=t3).count()
            for t, t3 in ((a, a3), (b, b3), (c, c3))} == theirs


#: Long enough that the 3 s and 2 s hold-back checks below end well inside it
#: (each starts within ~1 s of the micro-batch before); each source waits it once.
MAX_TRIGGER_DELAY_S = 10


def test_min_offsets_per_trigger_and_max_trigger_delay_hold_batches_back_alike(spark, bootstrap, make_topic):
    """minOffsetsPerTrigger holds a micro-batch back until that many records
    are there, or maxTriggerDelay passed since the last micro-batch: the
    same batches from both sources."""
    batches = {}
    for fmt in ("kafka", "kio-kafka"):
        topic = make_topic(1)
        name = "min_" + fmt.replace("-", "_")
        stream = (spark.readStream.format(fmt).option("kafka.bootstrap.servers", bootstrap)
                  .option("subscribe", topic).option("startingOffsets", "earliest")
                  .option("minOffsetsPerTrigger", "50").option("maxTriggerDelay", f"{MAX_TRIGGER_DELAY_S}s").load())
        q = (stream.selectExpr("value").writeStream.format("memory").queryName(name)
             .trigger(processingTime="500 milliseconds").start())

        def rows():
            return spark.table(name).count()

        def wait_for(n, timeout):
            end = time.monotonic() + timeout
            while rows() < n and time.monotonic() < end:
                time.sleep(0.2)
            return rows()

        def produce(first, count):
            with Producer(bootstrap_servers=bootstrap, linger_ms=5) as p:
                p.send_many(topic, [b"m%d" % i for i in range(first, first + count)]).result(30)
        try:
            end = time.monotonic() + 60
            while not q.recentProgress and time.monotonic() < end:   # the first (empty) trigger ran
                time.sleep(0.2)
            produce(0, 30)
            time.sleep(3)
            assert rows() == 0, f"{fmt}: 30 records < minOffsetsPerTrigger 50 were not held back"
            produce(30, 30)
            assert wait_for(60, 15) == 60, fmt
            produce(60, 10)                  # too few: they wait for maxTriggerDelay
            time.sleep(2)
            assert rows() == 60, f"{fmt}: 10 records went before maxTriggerDelay"
            assert wait_for(70, 40) == 70, f"{fmt}: maxTriggerDelay did not release the records"
            assert q.exception() is None
            batches[fmt] = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
        finally:
            q.stop()
    assert batches["kio-kafka"] == batches["kafka"] == [60, 10]
