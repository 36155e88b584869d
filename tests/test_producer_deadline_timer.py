"""A batch opened by send() sets the network thread's deadline timer instead
of waking it (issue 27, branch qprod3).

At 1,000 records/s half the batches open while no Produce is in flight:
send() wrote a byte on the wake-up socketpair, and the network thread woke
only to work its deadline out again and sleep on (a second select, ~30 µs of
CPU on a cold cache). Now send() sets a timerfd the network thread's epoll
waits on (``SocketLoop.wake_by``): one syscall, no wake-up; the thread wakes
when the batch is due (``kproto.driver.precise_timer_at``: a timer tick
before its linger ends, the window the core counts as due) and its
round sends it - two selects a batch, the timer's and the answer's.

No broker: the timer alone, the socket loop alone, the core in fake time,
and the threading producer against a scripted broker on a real socket.
"""
import select
import time

import pytest

from kio import Producer
from kio._threaded.network import SocketLoop
from kio._threaded.timerfd import new_deadline_timer
from kproto.driver import TIMER_RESOLUTION_MS, precise_timer_at
from kproto.producer import ProducerCore

try:
    from scripted_broker import ScriptedServer
    from test_async_deadline_after_appends import one_partition_broker
    from test_producer_core import FakeKafka, make
except ImportError:  # pragma: no cover
    from tests.scripted_broker import ScriptedServer  # noqa: F401
    from tests.test_async_deadline_after_appends import one_partition_broker
    from tests.test_producer_core import FakeKafka, make

from call_counter import Calls


def _now_ms():
    return time.monotonic() * 1000.0


def test_the_timer_fires_at_its_time_not_before_and_a_new_time_replaces_the_old():
    timer = new_deadline_timer()
    assert timer is not None, "Linux has timerfd"
    ep = select.epoll()
    try:
        ep.register(timer.fd, select.EPOLLIN)
        at = _now_ms() + 30.0
        timer.set(at)
        assert ep.poll(0) == []                      # not yet
        assert ep.poll(2.0) == [(timer.fd, select.EPOLLIN)]
        assert _now_ms() >= at                       # never before its time
        assert ep.poll(0) == [(timer.fd, select.EPOLLIN)]    # level-triggered until taken
        timer.take()
        assert ep.poll(0) == []
        timer.take()                                 # nothing to take: no error
        timer.set(_now_ms() + 5000.0)                # a later time, then an earlier one: the last counts
        early = _now_ms() + 20.0
        timer.set(early)
        assert ep.poll(2.0) == [(timer.fd, select.EPOLLIN)]
        assert early <= _now_ms() < early + 1000.0
        timer.take()
        timer.set(_now_ms() - 50.0)                  # a time already past fires at once
        assert ep.poll(1.0) == [(timer.fd, select.EPOLLIN)]
    finally:
        ep.close()
        timer.close()


def test_wake_by_only_lowers_the_timer_and_the_loop_takes_its_expiry():
    loop = SocketLoop(ProducerCore(bootstrap_servers=["127.0.0.1:9"]), deadline_timer=True)
    try:
        assert loop.timer_fd >= 0 and loop.timer_due is None
        now = _now_ms()
        assert loop.wake_by(now + 60.0)
        assert loop.wake_by(now + 5000.0)            # later: the timer stays where it was
        assert loop.timer_due == now + 60.0
        assert loop.select(0) == []                  # setting it woke nothing
        assert loop.wake_by(now + 20.0)              # earlier: moved
        assert loop.timer_due == now + 20.0
        events = loop.select(2.0)
        fired = _now_ms()
        assert events == [(loop.timer_fd, select.EPOLLIN)]
        # a tick before the deadline: inside the window the core counts as due
        assert precise_timer_at(now + 20.0) <= fired
        loop.handle(events, fired)
        assert loop.timer_due is None                # fired and taken
        assert not loop.round_wanted and not loop.woken    # not the wake-up pipe's
        assert loop.select(0) == []
        assert loop.wake_by(_now_ms() + 5000.0)      # after it fired, a later time is set again
        assert loop.timer_due is not None
    finally:
        loop.close()
    plain = SocketLoop(ProducerCore(bootstrap_servers=["127.0.0.1:9"]))
    try:
        assert plain.timer_fd == -1
        assert not plain.wake_by(_now_ms() + 5.0)    # no timer: the caller wakes the loop itself
        assert plain.timer_due is None
    finally:
        plain.close()


@pytest.mark.parametrize("linger_ms", [5, 20])
def test_a_round_when_the_precise_timer_fires_sends_the_batch_never_after_linger(linger_ms):
    # Fake time: a record opens a batch; the round at precise_timer_at(the
    # core's deadline) finds it due and sends it, just under a tick before
    # its linger ends (as early as a whole-millisecond wait's round may come).
    core, kafka, sim = make(FakeKafka(), linger_ms=linger_ms)
    sim.send(b"warm")
    sim.run_until(lambda: not core.pending)
    core.accumulator.wakeup = False                  # taken, as a driver's send() takes it
    for i in range(50):
        sim.now += 37.25                             # nothing in flight: each record opens a batch
        opened = sim.now
        sim.send(b"v%d" % i, partition=0)
        assert core.accumulator.wakeup
        core.accumulator.wakeup = False
        due = core.next_deadline(sim.now)
        assert due == opened + linger_ms
        requests = len(kafka.produce_requests)
        sim.now = precise_timer_at(due)
        sim.step()
        assert len(kafka.produce_requests) == requests + 1, "the timer's round did not send the batch"
        age = sim.now - opened
        assert linger_ms - TIMER_RESOLUTION_MS < age <= linger_ms
    assert core.metrics()["records_sent"] == 51


RECORDS = 15
PAUSE_S = 0.03          # well above linger.ms and the round trip: each record opens a batch


def _paced(producer_kwargs):
    """Through the threading producer on a scripted broker: RECORDS records
    PAUSE_S apart, each opening a batch while nothing is in flight. Returns
    the counts over the paced span and each batch's age when it left."""
    broker, server = one_partition_broker()
    with server:
        p = Producer(bootstrap_servers=server.bootstrap, **producer_kwargs)
        try:
            p.send("t", b"first", partition=0).result(10)
            net, core = p._net, p._core
            ages = []
            with p._lock:
                drain = core.accumulator.drain

                def noting_drain(cluster, nodes, now, can_drain=None):
                    out = drain(cluster, nodes, now, can_drain)
                    ages.extend(now - b.created_ms for bs in out.values() for b in bs)
                    return out
                core.accumulator.drain = noting_drain
                drains = Calls(net, "_drain_wakeups")
                selects = Calls(net, "select")
                rounds = Calls(core, "poll")
                kicks = Calls(p, "_kick_deadline")
                sets = Calls(net._timer, "set") if net._timer is not None else None
            futures = []
            for i in range(RECORDS):
                futures.append(p.send("t", b"v%d" % i, partition=0))
                # its answer before the next record: on a loaded machine a
                # late round would otherwise put two records in one batch
                futures[-1].result(10)
                time.sleep(PAUSE_S)
            offsets = [f.result(10).offset for f in futures]
            with p._lock:
                got = {"wakeups": drains.n, "selects": selects.n, "rounds": rounds.n, "kicks": kicks.n,
                       "timer_sets": sets and sets.n, "ages": list(ages), "offsets": offsets}
        finally:
            p.close()
    return got


def test_a_batch_opened_while_nothing_is_in_flight_sets_the_timer_and_wakes_nothing():
    got = _paced({"linger_ms": 5})
    assert got["offsets"] == list(range(1, RECORDS + 1))
    assert got["kicks"] == RECORDS                   # every record opened a batch
    assert got["timer_sets"] == RECORDS              # each set the deadline timer ...
    assert got["wakeups"] == 0                       # ... and none woke the network thread
    # a batch costs the network thread two selects and two rounds: its
    # timer's and its answer's (was three selects: the wake-up's first)
    assert got["selects"] <= 2 * RECORDS + 1, got
    assert got["rounds"] <= 2 * RECORDS + 1, got
    assert len(got["ages"]) == RECORDS
    # left in the round of its timer: never early (a round before the timer
    # would have found it not due); how late is the machine's scheduling
    assert min(got["ages"]) > 5 - TIMER_RESOLUTION_MS, got["ages"]


def test_a_full_batch_is_sent_at_once_through_the_timer():
    # batch.size 1,000, linger.ms 60 s: the second 600-byte record does not
    # fit, the first batch is full and due now; the timer, set for a time
    # already past, fires at once - no wake-up, no linger for it.
    broker, server = one_partition_broker()
    with server:
        with Producer(bootstrap_servers=server.bootstrap, linger_ms=60000, batch_size=1000) as p:
            p.send("t", b"first", partition=0)
            p.flush(10)
            wakeups = Calls(p._net, "_drain_wakeups")
            t0 = time.monotonic()
            first = p.send("t", b"x" * 600, partition=0)
            p.send("t", b"y" * 600, partition=0)
            assert first.result(10).offset == 1
            assert time.monotonic() - t0 < 5.0      # not the 60 s linger
            assert wakeups.n == 0
