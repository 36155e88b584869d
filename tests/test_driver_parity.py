"""The same consumer scenarios under the three drivers - threading (kio),
asyncio (kio.aio), trio (kio.trio) - must tell the same story (issue 16
point 3: "each client written once ... so drift is caught").

Each scenario writes a transcript of what it observed (records, positions,
commits, the *type* of every error raised); the test runs it under every
driver and asserts the transcripts are equal, and that the threading one
says what it should. A method whose behaviour differs between drivers
(a missing check, another exception type, a lost timeout) fails here.
"""
import uuid

import pytest

import kio
import kio.errors
from kio import Producer, TopicPartition as TP

try:
    from parity import all_the_same, call, module, nowhere, opened, outcome
except ImportError:  # tests/ as a package
    from tests.parity import all_the_same, call, module, nowhere, opened, outcome

GROUP = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 500}


def consumer_class(kind):
    return module(kind).Consumer


async def poll_until(c, n, seconds=30.0):
    got = []
    for _ in range(int(seconds / 0.5)):
        got += await call(c.poll(0.5))
        if len(got) >= n:
            break
    return got


def records(recs):
    return sorted((r.partition, r.offset, r.value) for r in recs)


@pytest.fixture
def topic_with_records(bootstrap, make_topic):
    topic = make_topic(2)
    with Producer(bootstrap_servers=bootstrap) as p:
        for i in range(20):       # one record per batch: Tansu's ListOffsets LATEST is the last batch's base + 1
            p.send(topic, b"v%d" % i, partition=i % 2)
            p.flush(30)
    return topic


async def assign_scenario(kind, bootstrap, topic):
    out = []
    tp0, tp1 = TP(topic, 0), TP(topic, 1)
    c = consumer_class(kind)(bootstrap_servers=bootstrap, group_id=f"g-{uuid.uuid4().hex[:8]}",
                             auto_offset_reset="earliest", enable_auto_commit=False)
    async with opened(c):
        c.assign([tp0, tp1])
        out.append(("assignment", sorted(c.assignment()), "subscription", sorted(c.subscription())))
        out.append(("records", records(await poll_until(c, 20))))
        out.append(("positions", await call(c.position(tp0)), await call(c.position(tp1, timeout=10))))
        out.append(("lag", c.lag(tp0), c.lag(tp1)))
        out.append(("committed before", await call(c.committed([tp0, tp1], timeout=10))))
        done = await call(c.commit())
        out.append(("commit", {tp: om.offset for tp, om in done.items()}))
        seen = await call(c.committed([tp0, tp1]))
        out.append(("committed", {tp: om.offset for tp, om in seen.items()}))
        out.append(("commit explicit", {tp: om.offset for tp, om in (await call(c.commit({tp0: 4}))).items()}))
        calls = []
        out.append(("commit async", await call(c.commit({tp1: 6}, asynchronous=True,
                                                         callback=lambda offs, err: calls.append(err)))))
        for _ in range(60):
            if calls:
                break
            await call(c.poll(0.1))
        out.append(("async commit callback", calls, await call(c.committed([tp0, tp1]))))

        c.seek(tp0, 3)
        out.append(("position after seek", await call(c.position(tp0))))
        c.pause([tp1])
        out.append(("paused", sorted(c.paused())))
        out.append(("after seek, tp1 paused", records(await poll_until(c, 7))))
        c.resume([tp1])
        c.seek_to_beginning([tp1])
        out.append(("paused after resume", sorted(c.paused())))
        out.append(("tp1 from the beginning", records(await poll_until(c, 10))))
        out.append(("empty poll", await call(c.poll(0.2))))
        c.seek_to_beginning()
        batches = []
        for _ in range(60):
            batches += await call(c.poll_batch(0.5))
            if sum(len(b) for b in batches) >= 20:
                break
        out.append(("poll_batch", sorted((b.partition, o, v) for b in batches for o, v in zip(b.offsets, b.values))))
        out.append(("poll_batch headers without arrow", await outcome(c.poll_batch, 0.1, headers=True)))
        c.seek_to_end([tp0])
        out.append(("position at end", await call(c.position(tp0))))
        out.append(("beginning", await call(c.beginning_offsets([tp0, tp1]))))
        out.append(("end", await call(c.end_offsets([tp0, tp1], timeout=10))))
        times = await call(c.offsets_for_times({tp0: 0}))
        out.append(("offsets_for_times", {tp: v.offset for tp, v in times.items()}))
        out.append(("unsubscribe", await call(c.unsubscribe()), sorted(c.assignment())))
    return out


def test_assign_poll_commit_seek_pause_the_same_under_every_driver(bootstrap, topic_with_records):
    topic = topic_with_records
    out = dict((row[0], row[1:]) for row in all_the_same(assign_scenario, bootstrap, topic))
    tp0, tp1 = TP(topic, 0), TP(topic, 1)
    assert out["records"] == (sorted((i % 2, i // 2, b"v%d" % i) for i in range(20)),)
    assert out["positions"] == (10, 10)
    assert out["committed before"] == ({tp0: None, tp1: None},)
    assert out["commit"] == ({tp0: 10, tp1: 10},) == out["committed"]
    assert out["async commit callback"][0] == [None]
    assert {tp: om.offset for tp, om in out["async commit callback"][1].items()} == {tp0: 4, tp1: 6}
    assert out["position after seek"] == (3,)
    assert out["paused"] == ([tp1],) and out["paused after resume"] == ([],)
    assert out["after seek, tp1 paused"] == ([(0, o, b"v%d" % (2 * o)) for o in range(3, 10)],)
    assert out["tp1 from the beginning"] == ([(1, o, b"v%d" % (2 * o + 1)) for o in range(10)],)
    assert out["empty poll"] == ([],)
    assert len(out["poll_batch"][0]) == 20
    assert out["poll_batch headers without arrow"] == (("raised", "ValueError"),)
    assert out["position at end"] == (10,)
    assert out["beginning"] == ({tp0: 0, tp1: 0},) and out["end"] == ({tp0: 10, tp1: 10},)
    assert out["offsets_for_times"] == ({tp0: 0},)
    assert out["unsubscribe"] == (None, [])


async def group_scenario(kind, bootstrap, topic):
    out = []
    assigned, revoked = [], []
    c = consumer_class(kind)(bootstrap_servers=bootstrap, group_id=f"g-{uuid.uuid4().hex[:8]}",
                             auto_offset_reset="earliest", enable_auto_commit=True,
                             auto_commit_interval_ms=60000, **GROUP)
    async with opened(c):
        c.subscribe([topic], on_assign=lambda ps: assigned.append(sorted(ps)),
                    on_revoke=lambda ps: revoked.append(sorted(ps)))
        out.append(("subscription", sorted(c.subscription())))
        out.append(("records", records(await poll_until(c, 20))))
        out.append(("assignment", sorted(c.assignment()), "listener", assigned))
        await call(c.close())
        out.append(("revoked on close", revoked))
    return out


def test_subscribe_listeners_and_close_the_same_under_every_driver(bootstrap, topic_with_records):
    topic = topic_with_records
    both = [TP(topic, 0), TP(topic, 1)]
    out = all_the_same(group_scenario, bootstrap, topic)
    assert out == [("subscription", [topic]),
                   ("records", sorted((i % 2, i // 2, b"v%d" % i) for i in range(20))),
                   ("assignment", both, "listener", [both]),
                   ("revoked on close", [both])]


async def closed_scenario(kind, bootstrap, topic):
    tp0 = TP(topic, 0)
    c = consumer_class(kind)(bootstrap_servers=bootstrap, group_id=f"g-{uuid.uuid4().hex[:8]}",
                             auto_offset_reset="earliest")
    out = []
    async with opened(c):
        c.assign([tp0])
        await poll_until(c, 10)
        out.append(("close", await outcome(c.close)))
        out.append(("close again", await outcome(c.close)))
        for name, args in [("poll", (0.1,)), ("poll_batch", (0.1,)), ("commit", ()), ("committed", ([tp0],)),
                           ("position", (tp0,)), ("beginning_offsets", ([tp0],)), ("end_offsets", ([tp0],)),
                           ("offsets_for_times", ({tp0: 0},)), ("assign", ([tp0],)), ("subscribe", ([topic],)),
                           ("unsubscribe", ()), ("seek", (tp0, 0)), ("seek_to_beginning", ()),
                           ("seek_to_end", ()), ("pause", ([tp0],)), ("resume", ([tp0],))]:
            out.append((name, await outcome(getattr(c, name), *args)))
    out.append(("close after the context", await outcome(c.close)))
    return out


def test_close_twice_and_calls_after_close_the_same_under_every_driver(bootstrap, topic_with_records):
    out = all_the_same(closed_scenario, bootstrap, topic_with_records)
    assert out[:2] == [("close", ("ok", None)), ("close again", ("ok", None))]
    # every call after close raises ConsumerClosedError - the async committed() used to send the request
    assert out[2:-1] and all(result == ("raised", "ConsumerClosedError") for _, result in out[2:-1]), out
    assert out[-1] == ("close after the context", ("ok", None))


async def timeout_scenario(kind, bootstrap):
    """No broker at all: every wait ends with the same error type, in about its timeout."""
    tp = TP("nowhere", 0)
    c = consumer_class(kind)(bootstrap_servers=bootstrap, group_id="g", reconnect_backoff_ms=50,
                             reconnect_backoff_max_ms=100)
    out = []
    async with opened(c):
        c.assign([tp])
        out.append(("poll", await outcome(c.poll, 0.3)))
        out.append(("position", await outcome(c.position, tp, timeout=0.5)))
        out.append(("committed", await outcome(c.committed, [tp], timeout=0.5)))
        out.append(("commit", await outcome(c.commit, {tp: 1}, timeout=0.5)))
        out.append(("beginning_offsets", await outcome(c.beginning_offsets, [tp], timeout=0.5)))
        out.append(("end_offsets", await outcome(c.end_offsets, [tp], timeout=0.5)))
        out.append(("offsets_for_times", await outcome(c.offsets_for_times, {tp: 0}, timeout=0.5)))
        await call(c.close(0.5))
    return out


def test_timeouts_raise_the_same_errors_under_every_driver():
    out = all_the_same(timeout_scenario, nowhere())
    assert out[0] == ("poll", ("ok", []))
    for name, result in out[1:]:
        assert result[0] == "raised", (name, result)
        assert issubclass(getattr(kio.errors, result[1]), kio.errors.KafkaTimeoutError), (name, result)


def test_the_threading_consumer_refuses_a_coroutine_listener(bootstrap, topic_with_records):
    """A coroutine function as listener of the threading Consumer cannot be
    awaited: poll says so (TypeError) instead of dropping the coroutine."""
    async def on_assign(partitions):
        pass

    with kio.Consumer(bootstrap_servers=bootstrap, group_id=f"g-{uuid.uuid4().hex[:8]}",
                      auto_offset_reset="earliest", **GROUP) as c:
        c.subscribe([topic_with_records], on_assign=on_assign)
        with pytest.raises(TypeError, match="cannot await"):
            for _ in range(60):
                c.poll(0.5)
