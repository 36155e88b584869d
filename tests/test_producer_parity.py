"""The same producer scenarios under the three drivers - threading (kio),
asyncio (kio.aio), trio (kio.trio) - must tell the same story (issue 16
point 3), as tests/test_driver_parity.py does for the consumer.

Each scenario writes a transcript (results, delivery callbacks, the type and
the text - with the run's own names replaced - of every error raised); the
test runs it under every driver against a real broker and asserts the
transcripts are equal, then checks what the threading one says. A producer
method that drifts between drivers (a lost ``on_delivery``, a metadata
timeout without its error text, an ignored timeout, another exception type)
fails here.
"""
import re
import uuid

import pyarrow as pa
import pytest

import kio
import kio.aio
import kio.trio

try:
    from parity import all_the_same, attempt, call, module, nowhere, opened, resolved, text
    from fault_proxy import proxied_broker
except ImportError:  # tests/ as a package
    from tests.parity import all_the_same, attempt, call, module, nowhere, opened, resolved, text
    from tests.fault_proxy import proxied_broker

FAST = {"linger_ms": 5}


def producer_class(kind):
    return module(kind).Producer


def consumer_class(kind):
    return module(kind).Consumer


# == sending, callbacks, flush, partitions_for ===========================================================

async def send_scenario(kind, bootstrap, make_topic):
    topic = make_topic(2)
    out, calls, bulk_calls = [], [], []
    p = producer_class(kind)(bootstrap_servers=bootstrap, **FAST)
    async with opened(p):
        out.append(("partitions_for", await call(p.partitions_for(topic))))
        out.append(("partitions_for with timeout", await call(p.partitions_for(topic, timeout=5))))
        handles = [await call(p.send(topic, b"v%d" % i, partition=0)) for i in range(3)]
        handles.append(await call(p.send(topic, "text", key="k", partition=1, headers=[("h", b"1")],
                                         timestamp_ms=1234,
                                         on_delivery=lambda err, md: calls.append((err, md.partition, md.offset)))))
        mds = [await resolved(h) for h in handles]
        out.append(("metadata", [(md.topic == topic, md.partition, md.offset) for md in mds],
                    "timestamp", mds[3].timestamp))
        out.append(("on_delivery", calls))
        bulk = await call(p.send_many(topic, [b"a", b"b", "c"], keys=[b"k1", None, b"k1"], partition=1,
                                      on_delivery=lambda err, res: bulk_calls.append((err, res.count, res.ranges))))
        res = await resolved(bulk)
        out.append(("send_many", res.topic == topic, res.count, res.ranges))
        empty = await call(p.send_many(topic, [], on_delivery=lambda err, res: bulk_calls.append((err, res.count))))
        out.append(("send_many nothing", tuple(await resolved(empty))[1:]))
        unflushed = [await call(p.send(topic, b"late%d" % i, partition=0)) for i in range(5)]
        out.append(("flush", await call(p.flush())))
        out.append(("flushed", [h.done() if callable(h.done) else h.done for h in unflushed]))
        out.append(("send_many on_delivery", sorted(bulk_calls, key=len)))
        out.append(("serializer error", await attempt(p.send, topic, 12345, names=(topic,))))
        out.append(("partition out of range", await attempt(p.send, topic, b"x", partition=7, names=(topic,))))
        out.append(("send_many keys of another length", await attempt(p.send_many, topic, [b"a"], keys=[b"1", b"2"])))
        # one size check on every path (max.request.size, 1 MiB by default), before anything is queued
        big = b"x" * (1 << 21)
        out.append(("send too large", await attempt(p.send, topic, big, partition=0)))
        out.append(("send_many too large", await attempt(p.send_many, topic, [b"a", big, b"c"])))
        out.append(("send_many keyed too large",
                    await attempt(p.send_many, topic, [b"a", b"b", big], keys=[b"1", b"2", b"3"])))
        out.append(("send_many headers too large",
                    await attempt(p.send_many, topic, [b"a", b"x" * ((1 << 20) - 60)],
                                  headers=[None, [("h", b"y" * 100)]])))
        out.append(("send_many arrow too large", await attempt(p.send_many, topic, pa.array([big, b"b"]))))
        m = p.metrics()
        out.append(("metrics", m["records_sent"], m["records_queued"], m["records_failed"]))
    return out


def test_send_send_many_flush_the_same_under_every_driver(bootstrap, make_topic):
    out = dict((row[0], row[1:]) for row in all_the_same(send_scenario, bootstrap, make_topic))
    assert out["partitions_for"] == (2,) and out["partitions_for with timeout"] == (2,)
    assert out["metadata"] == ([(True, 0, 0), (True, 0, 1), (True, 0, 2), (True, 1, 0)], "timestamp", 1234)
    assert out["on_delivery"] == ([(None, 1, 0)],)
    assert out["send_many"] == (True, 3, [(1, 1, 3)])
    assert out["send_many nothing"] == ((0, []),)
    assert out["flush"] == (0,) and out["flushed"] == ([True] * 5,)
    # on_delivery of send_many (the async drivers had none): once per call, an empty one at once;
    # flush returns after the callbacks of what it waited for ran (as Java's)
    assert out["send_many on_delivery"] == ([(None, 0), (None, 3, [(1, 1, 3)])],)
    assert out["serializer error"][0][:2] == ("raised", "SerializationError")
    assert out["partition out of range"] == ((
        "raised", "InvalidPartitionError",
        "partition 7 of topic '<name0>' is not in the range [0, 1] (the topic has 2 partitions)"),)
    assert out["send_many keys of another length"] == (("raised", "ValueError", "2 keys for 1 values"),)
    too_large = "the record is {} bytes when serialized, larger than max.request.size (1048576)"
    assert out["send too large"] == (("raised", "RecordTooLargeError", too_large.format(2097240)),)
    for name, row, size in (("send_many too large", 1, 2097240), ("send_many keyed too large", 2, 2097241),
                            ("send_many headers too large", 1, 1048707), ("send_many arrow too large", 0, 2097240)):
        assert out[name] == (("raised", "RecordTooLargeError", f"send_many() row {row}: "
                              f"{too_large.format(size)}; nothing of this call was sent"),), name
    assert out["metrics"] == (12, 12, 0)          # nothing of the refused calls was queued


# == waiting that ends in the core's timeout ===============================================================

async def metadata_timeout_scenario(kind, bootstrap):
    """A topic that never appears: send, send_many and partitions_for give
    up with the same KafkaTimeoutError and text under every driver."""
    topic = f"never-{uuid.uuid4().hex[:8]}"
    out = []
    p = producer_class(kind)(bootstrap_servers=bootstrap, allow_auto_create_topics=False, max_block_ms=600)
    async with opened(p):
        out.append(("send", await attempt(p.send, topic, b"v", names=(topic,))))
        out.append(("send_many", await attempt(p.send_many, topic, [b"v"], names=(topic,))))
        out.append(("partitions_for", await attempt(p.partitions_for, topic, timeout=0.3, names=(topic,))))
        out.append(("partitions_for default", await attempt(p.partitions_for, topic, names=(topic,))))
        out.append(("flush", await call(p.flush(5))))
    return out


def test_a_topic_that_never_appears_times_out_the_same_under_every_driver(bootstrap, broker_kind):
    out = dict(all_the_same(metadata_timeout_scenario, bootstrap))
    last = " (last error: UNKNOWN_TOPIC_OR_PARTITION (code 3)" if broker_kind == "kafka" else ""
    for name, ms in [("send", 600), ("send_many", 600), ("partitions_for", 300), ("partitions_for default", 600)]:
        kind, exc, msg = out[name]
        assert (kind, exc) == ("raised", "KafkaTimeoutError"), (name, out[name])
        assert msg.startswith(f"topic '<name0>' not present in metadata after {ms} ms{last}"), (name, msg)
    assert out["flush"] == 0


async def unreachable_scenario(kind, bootstrap):
    out = []
    p = producer_class(kind)(bootstrap_servers=bootstrap, max_block_ms=300, reconnect_backoff_ms=50,
                             reconnect_backoff_max_ms=100)
    async with opened(p):
        out.append(("send", await attempt(p.send, "t", b"v")))
        out.append(("partitions_for", await attempt(p.partitions_for, "t", timeout=0.2)))
        out.append(("close", await attempt(p.close, 1)))
    return out


def test_no_broker_at_all_says_so_the_same_under_every_driver():
    address = nowhere()
    out = dict(all_the_same(unreachable_scenario, address))
    for name, ms in [("send", 300), ("partitions_for", 200)]:
        assert out[name][:2] == ("raised", "KafkaTimeoutError")
        assert out[name][2].startswith(f"topic 't' not present in metadata after {ms} ms (no broker answered: "), out
    assert out["close"] == ("ok", None)


@pytest.fixture(scope="module")
def stalling_broker():
    """An Apache Kafka broker of its own behind a fault proxy that can stall it."""
    with proxied_broker("kafka") as (bootstrap, proxy):
        yield bootstrap, proxy


async def buffer_scenario(kind, bootstrap, proxy):
    """The broker stops answering: buffer.memory fills and send gives up
    after max.block.ms; close fails what is left."""
    topic = f"stall-{uuid.uuid4().hex[:8]}"
    out = []
    proxy.stall = False
    p = producer_class(kind)(bootstrap_servers=bootstrap, buffer_memory=4096, batch_size=1024,
                             max_request_size=1024, max_block_ms=400, linger_ms=0)
    async with opened(p):
        out.append(("partitions_for", await call(p.partitions_for(topic, timeout=30))))
        await resolved(await call(p.send(topic, b"first")))
        proxy.stall = True
        try:
            handles, blocked = [], None
            for _ in range(200):
                try:
                    handles.append(await call(p.send(topic, b"y" * 200)))
                except Exception as e:  # noqa: BLE001
                    blocked = text(e, topic)
                    break
            out.append(("blocked", blocked, 4 <= len(handles) < 200))
            out.append(("send_many", await attempt(p.send_many, topic, [b"z" * 200] * 20, names=(topic,))))
            out.append(("close", await attempt(p.close, 0.2)))
        finally:
            proxy.stall = False
        failures = set()
        for h in handles:
            try:
                await resolved(h, 5)
                failures.add(None)
            except Exception as e:  # noqa: BLE001
                failures.add(type(e).__name__)
        out.append(("records after close", sorted(failures, key=str)))
    return out


def test_buffer_exhaustion_times_out_the_same_under_every_driver(stalling_broker):
    bootstrap, proxy = stalling_broker
    out = dict((row[0], row[1:]) for row in all_the_same(buffer_scenario, bootstrap, proxy))
    memory = ("KafkaTimeoutError",
              "failed to allocate memory within the configured max blocking time 400 ms (buffer.memory=4096)")
    assert out["partitions_for"] == (1,)
    assert out["blocked"] == (memory, True)
    assert out["send_many"] == (("raised",) + memory,)
    assert out["close"] == (("ok", None),)
    # no record is dropped silently: every one unacknowledged when close gave up failed with the close
    assert out["records after close"] == (["ProducerClosedError"],)


# == after close ================================================================================================

async def closed_scenario(kind, bootstrap, make_topic):
    topic = make_topic(1)
    out = []
    p = producer_class(kind)(bootstrap_servers=bootstrap, **FAST)
    async with opened(p):
        await resolved(await call(p.send(topic, b"v")))
        out.append(("close", await attempt(p.close)))
        out.append(("close again", await attempt(p.close)))
        for name, args in [("send", (topic, b"v")), ("send_many", (topic, [b"v"])), ("partitions_for", (topic,)),
                           ("begin_transaction", ()), ("init_transactions", ()), ("commit_transaction", ()),
                           ("abort_transaction", ()), ("send_offsets_to_transaction", ({(topic, 0): 1}, "g"))]:
            out.append((name, await attempt(getattr(p, name), *args)))
        out.append(("flush", await attempt(p.flush, 1)))
        out.append(("metrics", sorted(p.metrics())[:3]))
    out.append(("close after the context", await attempt(p.close)))
    return out


def test_calls_after_close_the_same_under_every_driver(bootstrap, make_topic):
    out = all_the_same(closed_scenario, bootstrap, make_topic)
    closed = ("raised", "ProducerClosedError", "the producer is closed; it takes no more records")
    assert out[:2] == [("close", ("ok", None)), ("close again", ("ok", None))]
    assert [row[1] for row in out[2:10]] == [closed] * 8, out
    assert out[10] == ("flush", ("ok", 0))
    assert out[-1] == ("close after the context", ("ok", None))


# == transactions =================================================================================================

async def transaction_scenario(kind, bootstrap, make_topic):
    topic = make_topic(1)
    out = []
    p = producer_class(kind)(bootstrap_servers=bootstrap, transactional_id=f"tx-{uuid.uuid4().hex[:8]}", **FAST)
    async with opened(p):
        out.append(("send before init", await attempt(p.send, topic, b"x", names=(topic,))))
        out.append(("init", await attempt(p.init_transactions, 30)))
        p.begin_transaction()
        committed = [await call(p.send(topic, b"c%d" % i)) for i in range(2)]
        out.append(("commit", await attempt(p.commit_transaction)))
        out.append(("committed records", [(await resolved(h)).offset for h in committed]))
        p.begin_transaction()
        await call(p.send(topic, b"aborted"))
        # Flushed first, so the record is in the log when the abort comes (an
        # abort drops records not yet sent, as Java's does): the abort marker
        # then follows it, and read_committed must skip both.
        out.append(("flush in the transaction", await attempt(p.flush)))
        out.append(("abort", await attempt(p.abort_transaction)))
        out.append(("abort twice", await attempt(p.abort_transaction)))
    c = consumer_class(kind)(bootstrap_servers=bootstrap, group_id=f"g-{uuid.uuid4().hex[:8]}",
                             auto_offset_reset="earliest", isolation_level="read_committed")
    async with opened(c):
        c.assign([(topic, 0)])
        seen = []
        for _ in range(60):
            seen += [r.value for r in await call(c.poll(0.5))]
            if len(seen) >= 2 and await call(c.position((topic, 0))) >= 5:
                break
        out.append(("read_committed", seen, "position", await call(c.position((topic, 0)))))
    return out


# Kafka only: Tansu does not hide aborted transactions from read_committed consumers
@pytest.mark.parametrize("broker", ["kafka"], indirect=True)
def test_a_transaction_commits_and_aborts_the_same_under_every_driver(bootstrap, make_topic):
    out = dict((row[0], row[1:]) for row in all_the_same(transaction_scenario, bootstrap, make_topic))
    assert out["send before init"][0][:2] == ("raised", "TransactionStateError")
    assert out["init"] == (("ok", None),) and out["commit"] == (("ok", None),)
    assert out["committed records"] == ([0, 1],)
    assert out["abort"] == (("ok", None),)
    # c0, c1, the commit marker, the aborted record and the abort marker: 5
    assert out["flush in the transaction"] == (("ok", 0),)
    assert out["read_committed"] == ([b"c0", b"c1"], "position", 5)


# == the threading producer's own rule: callbacks run on its network thread ==================================

def test_a_delivery_callback_may_send_but_never_waits(bootstrap, make_topic):
    """on_delivery runs on the network thread (outside its lock): a send to
    a known topic works from there; what would have to wait - flush, close,
    a send to a topic without metadata - raises at once instead of
    deadlocking the thread that would end the wait."""
    topic = make_topic(1)
    seen = []

    def on_delivery(err, md):
        seen.append(("resend", type(p.send(topic, b"again")).__name__))
        for name, call_ in [("flush", lambda: p.flush(1)), ("close", lambda: p.close(1)),
                            ("send unknown", lambda: p.send(f"nowhere-{uuid.uuid4().hex[:6]}", b"v")),
                            ("partitions_for unknown", lambda: p.partitions_for("nowhere-x"))]:
            try:
                call_()
                seen.append((name, "ok"))
            except Exception as e:  # noqa: BLE001
                seen.append((name, type(e).__name__, str(e)))

    with kio.Producer(bootstrap_servers=bootstrap, linger_ms=0) as p:
        p.send(topic, b"first", on_delivery=on_delivery).result(30)
        assert p.flush(30) == 0
    assert seen[0] == ("resend", "DeliveryFuture")
    assert seen[1] == ("flush", "KafkaError", "flush from a delivery callback would deadlock: callbacks run on "
                                              "the producer's network thread")
    assert seen[2][:2] == ("close", "KafkaError") and "would deadlock" in seen[2][2]
    assert seen[3] == ("send unknown", "KafkaTimeoutError",
                       "send() from a delivery callback cannot wait for metadata")
    assert seen[4] == ("partitions_for unknown", "KafkaTimeoutError",
                       "partitions_for() from a delivery callback cannot wait for metadata")


# == the network side fails ===================================================================================

async def failure_scenario(kind, bootstrap, make_topic):
    """The network thread or task dies (a bug simulated in the core's poll):
    the queued record fails, later calls say why, close still works."""
    topic = make_topic(1)
    out = []
    p = producer_class(kind)(bootstrap_servers=bootstrap, linger_ms=60000)
    async with opened(p):
        out.append(("partitions_for", await call(p.partitions_for(topic))))
        queued = await call(p.send(topic, b"queued"))

        def boom(now):
            raise RuntimeError("boom")
        p._core.poll = boom
        out.append(("flush", await call(p.flush(10))))
        out.append(("queued record", await attempt(resolved, queued, 10)))
        out.append(("send", await attempt(p.send, topic, b"v")))
        out.append(("partitions_for after", await attempt(p.partitions_for, topic)))
        out.append(("close", await attempt(p.close, 1)))
    return out


def test_a_failed_network_side_fails_records_and_calls_the_same_under_every_driver(bootstrap, make_topic):
    out = dict(all_the_same(failure_scenario, bootstrap, make_topic))
    assert out["partitions_for"] == 1 and out["flush"] == 0
    for name in ("queued record", "send", "partitions_for after"):
        assert out[name][:2] == ("raised", "ProducerClosedError"), (name, out[name])
        assert "the producer's network side failed: RuntimeError('boom')" in out[name][2]
    assert out["close"] == ("ok", None)
