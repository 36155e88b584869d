"""The same share consumer scenarios under the three drivers - threading
(kio.ShareConsumer), asyncio and trio (kio.aio / kio.trio.ShareConsumer) -
must tell the same story (issue 16 point 3): one body per method
(:mod:`kio._shared.share_ops`), and this test catches a driver that drifts anyway
(another exception type, a lost timeout, a call that works after close).

Apache Kafka only: Tansu has no share groups. Each driver gets its own share
group (starting at the earliest offset) on the same topic, so each sees
every record; the transcripts must be equal, and the threading one must say
what it should.
"""
import logging
import time
import uuid

import pytest

import kio
from kio import AcknowledgeType, Admin, Producer, TopicPartition as TP
from kio.admin import ConfigResource

try:
    from parity import DRIVERS, all_the_same, call, module, nowhere, opened, outcome, run
except ImportError:  # tests/ as a package
    from tests.parity import DRIVERS, all_the_same, call, module, nowhere, opened, outcome, run

#: the tests that need a broker: Apache Kafka (the others run without one)
kafka_only = pytest.mark.parametrize("broker", ["kafka"], indirect=True)


def share_groups(bootstrap):
    """{driver: a new share group that starts at the earliest offset}."""
    groups = {kind: f"sg-{kind}-{uuid.uuid4().hex[:8]}" for kind in DRIVERS}
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.incremental_alter_configs({ConfigResource.group(g): {"share.auto.offset.reset": "earliest"}
                                         for g in groups.values()})
    return groups


@pytest.fixture
def topic_with_ten(bootstrap, make_topic):
    topic = make_topic(1)
    with Producer(bootstrap_servers=bootstrap, linger_ms=5) as p:
        for i in range(10):
            p.send(topic, b"%d" % i)
        p.flush()
    return topic


async def poll_until(c, done, seconds=30.0):
    """Poll (0.3 s at a time) until ``done(records so far)``; the records."""
    got = []
    end = time.monotonic() + seconds
    while not done(got) and time.monotonic() < end:
        got += await call(c.poll(0.3))
    return got


def deliveries(records):
    return sorted((r.offset, r.delivery_count, r.value) for r in records)


async def explicit_scenario(kind, bootstrap, topic, groups):
    out = []
    heard = []                               # (offsets, error type) the acknowledgement callback heard

    def on_ack(offsets, err):
        heard.append((offsets, type(err).__name__))

    async def on_ack_coroutine(offsets, err):    # the async drivers await a coroutine function
        on_ack(offsets, err)

    tp = TP(topic, 0)
    c = module(kind).ShareConsumer(bootstrap_servers=bootstrap, group_id=groups[kind],
                                   share_acknowledgement_mode="explicit")
    async with opened(c):
        out.append(("lock timeout before a fetch", c.acquisition_lock_timeout_ms))
        out.append(("poll before subscribe", await outcome(c.poll, 0.1)))
        c.set_acknowledgement_commit_callback(on_ack if kind == "thread" else on_ack_coroutine)
        c.subscribe([topic])
        out.append(("subscription", sorted(c.subscription())))
        first = await poll_until(c, lambda got: len(got) >= 10)
        out.append(("first deliveries", deliveries(first)))
        out.append(("assignment", sorted(c.assignment())))
        out.append(("poll with records unacknowledged", await outcome(c.poll, 0.1)))
        for r in first:
            c.acknowledge(r, {2: AcknowledgeType.REJECT, 5: AcknowledgeType.RELEASE}.get(r.offset,
                                                                                          AcknowledgeType.ACCEPT))
        out.append(("acknowledge twice", await outcome(c.acknowledge, first[0])))
        out.append(("acknowledge type 7", await outcome(c.acknowledge, first[1], 7)))
        out.append(("commit_sync", await call(c.commit_sync())))
        again = await poll_until(c, lambda got: got)             # the released record, and only it
        out.append(("released comes back", deliveries(again)))
        for r in again:
            c.acknowledge(r, AcknowledgeType.ACCEPT)
        out.append(("commit_async", await outcome(c.commit_async)))
        end = time.monotonic() + 20
        rest = []
        while sum(5 in offs.get(tp, ()) for offs, _ in heard) < 2 and time.monotonic() < end:
            rest += await call(c.poll(0.2))                      # the callback runs inside poll
        out.append(("polls after commit_async", deliveries(rest)))
        out.append(("lock timeout", c.acquisition_lock_timeout_ms))
        out.append(("empty poll", await call(c.poll(0.5))))
        out.append(("close", await outcome(c.close)))
        out.append(("close again", await outcome(c.close)))
        for name, args in [("poll", (0.1,)), ("commit_sync", ()), ("commit_async", ()), ("subscribe", ([topic],)),
                           ("unsubscribe", ()), ("acknowledge", (first[0],))]:
            out.append((name + " after close", await outcome(getattr(c, name), *args)))
    out.append(("close after the context", await outcome(c.close)))
    out.append(("callback heard", sorted({o for offs, _ in heard for os_ in offs.values() for o in os_}),
                sorted({e for _, e in heard}), sorted({t for offs, _ in heard for t in offs})))
    return out


@kafka_only
def test_explicit_acknowledgements_commits_callbacks_and_close_the_same_under_every_driver(
        bootstrap, topic_with_ten):
    topic = topic_with_ten
    groups = share_groups(bootstrap)
    out = dict((row[0], row[1:]) for row in all_the_same(explicit_scenario, bootstrap, topic, groups))
    tp = TP(topic, 0)
    assert out["lock timeout before a fetch"] == (None,)
    assert out["poll before subscribe"] == (("raised", "ShareStateError"),)
    assert out["subscription"] == ([topic],)
    assert out["first deliveries"] == ([(i, 1, b"%d" % i) for i in range(10)],)
    assert out["assignment"] == ([tp],)
    assert out["poll with records unacknowledged"] == (("raised", "ShareStateError"),)
    assert out["acknowledge twice"] == (("raised", "ShareStateError"),)
    assert out["acknowledge type 7"] == (("raised", "ValueError"),)
    assert out["commit_sync"] == ({tp: None},)
    assert out["released comes back"] == ([(5, 2, b"5")],)          # the rejected one (2) never again
    assert out["commit_async"] == (("ok", None),)
    assert out["polls after commit_async"] == ([],)
    assert out["lock timeout"] == (30000,)                           # the broker's default
    assert out["empty poll"] == ([],)
    assert out["close"] == out["close again"] == out["close after the context"] == (("ok", None),)
    for name in ("poll", "commit_sync", "commit_async", "subscribe", "unsubscribe", "acknowledge"):
        assert out[name + " after close"] == (("raised", "ConsumerClosedError"),), name
    # the callback (a coroutine function under asyncio and trio) heard of every offset, no error
    assert out["callback heard"] == (list(range(10)), ["NoneType"], [tp])
    # every record settled in each group: accepted, or (offset 2) archived
    with Admin(bootstrap_servers=bootstrap) as admin:
        for group in groups.values():
            assert {t: o.lag for t, o in admin.list_share_group_offsets(group).items()} == {tp: 0}


async def implicit_scenario(kind, bootstrap, topic, groups):
    out = []
    tp = TP(topic, 0)
    mod = module(kind)
    c = mod.ShareConsumer(bootstrap_servers=bootstrap, group_id=groups[kind], max_poll_records=4,
                          share_acquire_mode="record_limit")
    async with opened(c):
        c.subscribe(topic)
        got, sizes = [], []
        end = time.monotonic() + 30
        while len(got) < 10 and time.monotonic() < end:
            records = await call(c.poll(0.3))
            got += records
            sizes.append(len(records))
        out.append(("records", deliveries(got), "at most 4 a poll", max(sizes) <= 4))
        out.append(("acknowledge in implicit mode", await outcome(c.acknowledge, got[-1])))
        out.append(("commit_sync accepts the last poll", await call(c.commit_sync(timeout=10))))
        out.append(("nothing left", await call(c.poll(0.5))))
        out.append(("unsubscribe", await outcome(c.unsubscribe)))
        out.append(("assignment after unsubscribe", sorted(c.assignment()), sorted(c.subscription())))
        out.append(("poll unsubscribed", await outcome(c.poll, 0.1)))
        c.subscribe([topic])
        out.append(("subscribed again", sorted(c.subscription()), await call(c.poll(0.5))))
        out.append(("subscribe to nothing", await outcome(c.subscribe, [])))
    async with opened(mod.Admin(bootstrap_servers=bootstrap)) as admin:
        lag = await call(admin.list_share_group_offsets(groups[kind]))
        out.append(("lag", {t: o.lag for t, o in lag.items()}))
    return out


@kafka_only
def test_implicit_mode_unsubscribe_and_admin_lag_the_same_under_every_driver(bootstrap, topic_with_ten):
    topic = topic_with_ten
    out = all_the_same(implicit_scenario, bootstrap, topic, share_groups(bootstrap))
    tp = TP(topic, 0)
    assert out == [("records", [(i, 1, b"%d" % i) for i in range(10)], "at most 4 a poll", True),
                   ("acknowledge in implicit mode", ("raised", "ShareStateError")),
                   ("commit_sync accepts the last poll", {tp: None}),
                   ("nothing left", []),
                   ("unsubscribe", ("ok", None)),
                   ("assignment after unsubscribe", [], []),
                   ("poll unsubscribed", ("raised", "ShareStateError")),
                   ("subscribed again", [topic], []),
                   ("subscribe to nothing", ("raised", "KafkaError")),
                   ("lag", {tp: 0})]


async def no_broker_scenario(kind, bootstrap):
    """No broker answers: the waits end in their timeouts, with the same outcome."""
    out = []
    c = module(kind).ShareConsumer(bootstrap_servers=bootstrap, group_id="sg", reconnect_backoff_ms=50,
                                   reconnect_backoff_max_ms=100)
    async with opened(c):
        c.subscribe(["nowhere"])
        start = time.monotonic()
        out.append(("poll", await outcome(c.poll, 0.3), time.monotonic() - start < 2))
        start = time.monotonic()
        out.append(("commit_sync", await outcome(c.commit_sync, 0.5), time.monotonic() - start < 2))
        out.append(("commit_async", await outcome(c.commit_async)))
        start = time.monotonic()
        out.append(("close", await outcome(c.close, 0.5), time.monotonic() - start < 3))
    return out


def test_timeouts_without_a_broker_the_same_under_every_driver():
    out = all_the_same(no_broker_scenario, nowhere())
    assert out == [("poll", ("ok", []), True), ("commit_sync", ("ok", {}), True),
                   ("commit_async", ("ok", None)), ("close", ("ok", None), True)]


async def failed_network_scenario(kind, bootstrap):
    """The network thread or task fails (its core raises): every call that
    needs it raises ConsumerClosedError, under every driver; close() works."""
    out = []
    c = module(kind).ShareConsumer(bootstrap_servers=bootstrap, group_id="sg")
    async with opened(c):
        c.subscribe(["t"])

        def broken_poll(now):
            raise RuntimeError("the core broke")
        c._core.poll = broken_poll              # the next round of the network side fails (poll wakes it)
        start = time.monotonic()
        out.append(("poll", await outcome(c.poll, 5.0), time.monotonic() - start < 4))
        for name, args in [("poll", (0.1,)), ("commit_sync", ()), ("commit_async", ()), ("subscribe", (["t"],)),
                           ("unsubscribe", ())]:
            out.append((name + " again", await outcome(getattr(c, name), *args)))
        out.append(("subscription", sorted(c.subscription())))
        out.append(("close", await outcome(c.close)))
        out.append(("poll after close", await outcome(c.poll, 0.1)))
    return out


def test_a_failed_network_side_raises_the_same_error_under_every_driver(caplog):
    caplog.set_level(logging.CRITICAL, logger="kio")          # the failure is logged; expected here
    caplog.set_level(logging.CRITICAL, logger="kio.async")
    out = all_the_same(failed_network_scenario, nowhere())
    assert out[0] == ("poll", ("raised", "ConsumerClosedError"), True)
    for row in out[1:6]:
        assert row[1] == ("raised", "ConsumerClosedError"), row
    assert out[6:] == [("subscription", ["t"]), ("close", ("ok", None)),
                       ("poll after close", ("raised", "ConsumerClosedError"))]


@kafka_only
def test_the_threading_share_consumer_refuses_a_coroutine_callback(bootstrap, topic_with_ten, caplog):
    """kio.ShareConsumer cannot await a coroutine: a coroutine function as the
    callback is refused at once (TypeError), and a coroutine a plain function
    returned is not dropped unawaited but reported (logged TypeError, as a
    failing callback is); a callback that is not callable is refused."""
    groups = share_groups(bootstrap)

    async def on_ack(offsets, err):
        pass

    with kio.ShareConsumer(bootstrap_servers=bootstrap, group_id=groups["thread"]) as c:
        with pytest.raises(TypeError, match="coroutine function.*kio.aio or kio.trio"):
            c.set_acknowledgement_commit_callback(on_ack)
        with pytest.raises(TypeError, match="must be callable"):
            c.set_acknowledgement_commit_callback("print")
        c.set_acknowledgement_commit_callback(lambda offsets, err: on_ack(offsets, err))
        c.subscribe([topic_with_ten])
        end = time.monotonic() + 30
        got = []
        while len(got) < 10 and time.monotonic() < end:
            got += c.poll(0.3)
        with caplog.at_level(logging.ERROR, logger="kio.share_consumer"):
            assert c.commit_sync() == {TP(topic_with_ten, 0): None}
    assert any("cannot await" in str(r.exc_info and r.exc_info[1]) for r in caplog.records), \
        [r.getMessage() for r in caplog.records]


@kafka_only
def test_async_share_consumers_run_a_plain_callback_too(bootstrap, topic_with_ten):
    groups = share_groups(bootstrap)

    async def scenario(kind):
        heard = []
        c = module(kind).ShareConsumer(bootstrap_servers=bootstrap, group_id=groups[kind])
        async with opened(c):
            c.set_acknowledgement_commit_callback(lambda offsets, err: heard.append((offsets, err)))
            c.subscribe([topic_with_ten])
            await poll_until(c, lambda got: len(got) >= 10)
            await c.commit_sync()
        return heard

    for kind in ("asyncio", "trio"):
        heard = run(kind, scenario)
        assert sorted(o for offs, _ in heard for os_ in offs.values() for o in os_) == list(range(10)), kind
        assert all(err is None for _, err in heard), kind


def test_the_threading_share_consumer_is_woken_and_used_from_one_thread():
    """What only the threading driver has: wakeup() from another thread ends a
    blocked poll with WakeupError; a call from a second thread raises
    ConsumerThreadError (the share consumer is not thread-safe, as Java's)."""
    import threading

    from kio.errors import ConsumerThreadError, WakeupError

    with kio.ShareConsumer(bootstrap_servers=nowhere(), group_id="sg") as c:
        c.subscribe(["t"])
        timer = threading.Timer(0.3, c.wakeup)
        timer.start()
        start = time.monotonic()
        with pytest.raises(WakeupError):
            c.poll(10.0)
        assert time.monotonic() - start < 5
        assert c.poll(0.1) == []                      # woken once only
        errors = []
        other = threading.Thread(target=lambda: errors.append(pytest.raises(ConsumerThreadError, c.poll, 0.1)))
        other.start()
        other.join(10)
        assert errors and "kio.ShareConsumer is not safe for multi-threaded access" in str(errors[0].value)
        assert "one share consumer per thread" in str(errors[0].value)
