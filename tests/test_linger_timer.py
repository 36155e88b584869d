"""The linger timer against a driver whose timer counts whole milliseconds (issue 27).

epoll_wait takes milliseconds, and Python's selectors and the asyncio and trio
loops round a wait *up* to the next one: a batch whose linger.ms ended 4.3 ms
after the network thread's round slept 5 ms and left up to a millisecond
late, on every batch (0.2-0.6 ms measured, kio's p50 above confluent-kafka's).
The drivers now round their wait *down* (``kproto.driver.wait_ms``) and the
producer counts a batch whose linger ends within ``TIMER_RESOLUTION_MS`` as
due, so the timer's round - up to a millisecond early, never late - sends it.

The driver here is simulated (fake clock, scripted broker) with such a timer:
it sleeps ``ceil(wait_ms(deadline, now))`` whole milliseconds, runs a round
``KICK_MS`` after a send() that asks for one (a thread's wake-up is not
instant: the timer is then set less than linger.ms before the batch is due),
and, with ``rtt_ms``, gets each Produce answer that long after its request.
Rounds and batch ages are counted in fake time: nothing depends on the load.
"""
import math
import random

import pytest

from kio._shared.common import sleep_time
from kproto.driver import TIMER_RESOLUTION_MS, wait_ms

try:
    from test_producer_core import FakeKafka, make
except ImportError:  # pragma: no cover
    from tests.test_producer_core import FakeKafka, make

KICK_MS = 0.15       # from a send() that wakes the driver to its round


def test_the_wait_ends_at_or_before_the_deadline_in_whole_milliseconds():
    rng = random.Random(27)
    for _ in range(2000):
        now = rng.uniform(0, 1e6)
        left = rng.choice((rng.uniform(0, 3), rng.uniform(0, 500)))
        w = wait_ms(now + left, now)
        if left >= TIMER_RESOLUTION_MS:
            assert w == math.floor(w)                       # the timer can wait exactly this
            assert now + w <= now + left                    # never after the deadline
            assert now + left - (now + w) < TIMER_RESOLUTION_MS   # and less than a tick before it
        else:
            # under one tick: the rest as it is (a whole tick once the timer
            # rounds it up), not 0, which would spin until the deadline
            assert w == pytest.approx(left)
    assert wait_ms(None, 5.0) is None                      # no timer: only I/O wakes the driver
    assert wait_ms(4.0, 5.0) == 0.0                         # past: at once
    assert sleep_time(1009.6, 1000.0) == pytest.approx(0.009)    # the drivers' seconds
    assert sleep_time(None, 1000.0) is None


def _timer_ms(deadline, now):
    """What epoll does with the driver's wait: whole milliseconds, rounded up."""
    w = wait_ms(deadline, now)
    return None if w is None else math.ceil(w - 1e-9)


def _paced(records, every_ms, linger_ms=5, rtt_ms=None):
    """Send ``records`` one every ``every_ms`` to one partition through the
    simulated driver. Returns (the age of each batch when drained, the rounds
    the driver's timer ran, the rounds run for an answer)."""
    core, kafka, sim = make(FakeKafka(), linger_ms=linger_ms)
    sim.send(b"warm")
    sim.run_until(lambda: not core.pending)
    acc, broker = core.accumulator, kafka.brokers[1]
    ages = []
    drain = acc.drain

    def noting_drain(cluster, nodes, now, can_drain=None):
        out = drain(cluster, nodes, now, can_drain)
        ages.extend(now - b.created_ms for bs in out.values() for b in bs)
        return out
    acc.drain = noting_drain
    kafka.hold_replies = rtt_ms is not None
    seen_requests = len(kafka.produce_requests)
    answers = []                      # fake times the held answers arrive at, in order
    timer_rounds = answer_rounds = 0
    sent = 0
    t0 = sim.now + 0.3
    kick_at = None

    def round_at(t):
        nonlocal seen_requests
        sim.now = t
        sim.step()
        while len(kafka.produce_requests) > seen_requests:
            seen_requests += 1
            if rtt_ms is not None:       # else answered within the round (sim.step)
                answers.append(sim.now + rtt_ms)
        d = core.next_deadline(sim.now)
        return None if d is None else sim.now + _timer_ms(d, sim.now)

    wake_at = round_at(sim.now)
    while sent < records or core.pending:
        events = [t for t in (t0 + sent * every_ms if sent < records else None, kick_at, wake_at,
                              answers[0] if answers else None) if t is not None]
        t = min(events)
        assert t < 60000, "the records were never all acknowledged"
        if sent < records and t == t0 + sent * every_ms:
            sim.now = t
            sim.send(b"v%d" % sent, partition=0)
            sent += 1
            if acc.wakeup:
                acc.wakeup = False
                kick_at = t + KICK_MS if kick_at is None else kick_at
        elif t == kick_at:
            kick_at = None
            wake_at = round_at(t)
        elif answers and t == answers[0]:
            answers.pop(0)
            sim.now = t
            core.received(1, broker.held.pop(0), t)
            answer_rounds += 1
            wake_at = round_at(t)
        else:
            timer_rounds += 1
            wake_at = round_at(t)
    assert core.metrics()["records_sent"] == records + 1
    return ages, timer_rounds, answer_rounds


def test_a_batch_leaves_in_the_round_of_its_linger_timer_never_after_linger():
    # A record every 20 ms: each opens its own batch and sets a timer 4.85 ms
    # long. The timer sleeps 4 ms (rounded down) and that round sends it:
    # one timer round a batch. Rounded up (5 ms) every batch left 0.15 ms
    # after linger.ms; rounded down without the producer's tolerance, the
    # round found the batch 0.85 ms short and a second timer round sent it late.
    ages, timer_rounds, _ = _paced(records=100, every_ms=20)
    assert len(ages) == 100
    assert max(ages) <= 5.0, max(ages)                                  # never after linger.ms
    assert min(ages) > 5.0 - TIMER_RESOLUTION_MS, min(ages)             # within its last tick
    assert timer_rounds <= len(ages) + 2, (timer_rounds, len(ages))


@pytest.mark.parametrize("rtt_ms", [2, 8])
def test_the_round_promised_while_an_answer_is_awaited_sends_on_time(rtt_ms):
    # 1 record/ms: batches open while the previous Produce is in flight, on
    # the round promised by sent + linger.ms (kproto.producer.sender's
    # _answer_round). That round comes up to a tick early now; it must still
    # send (or time) every batch opened before it, and no batch may wait
    # past linger.ms for a later one.
    ages, timer_rounds, answer_rounds = _paced(records=1000, every_ms=1.0, rtt_ms=rtt_ms)
    assert len(ages) > 100
    assert max(ages) <= 5.0, max(ages)
    assert timer_rounds + answer_rounds <= 2.2 * len(ages), (timer_rounds, answer_rounds, len(ages))
