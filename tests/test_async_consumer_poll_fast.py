"""The asyncio and trio consumers' poll() fast path against its twin, the
steps; and what one Fetch answer costs the async engine in wake-ups.

``AsyncConsumer.poll()`` and ``poll_batch()`` run the shared poll's looks
and waits in a plain async loop (``PolledClient._poll_now``) instead of
driving a generator of steps through the runner; the kicks of a look run
as one round of the core in the polling task (``Engine.round_here``). The
fast path must keep every semantic of the steps: the same records, the same
listener and callback calls (plain and coroutine functions) in the same
order, the core's errors, a poll cancelled while it waits, ``poll(0)``, the
closed checks. Each scenario runs once per path, per framework, against a
scripted broker on a loopback socket (the core tests' ``FakeKafka``), and
the two logs must be equal.

The wake-ups: at a low rate each answer carries a record or two, so what
the engine does per answer is the consumer's cost (issue 27). An answer is
read where the socket is found readable (asyncio: the loop's reader
callback; trio: the reader task), which feeds it to the core and wakes the
waiting poll; the poll takes the records and runs the core's one round of
the answer, which sends the next Fetch: the engine's main task and the
writer task sleep through it.
"""
import asyncio
import threading
import time

import pytest
import trio

try:
    from test_consumer_core import FakeKafka
    from test_consumer_poll_fast import REBALANCE_IN_PROGRESS, Counts, LoopbackKafka, assert_same_group_logs
except ImportError:  # pragma: no cover
    from tests.test_consumer_core import FakeKafka
    from tests.test_consumer_poll_fast import REBALANCE_IN_PROGRESS, Counts, LoopbackKafka, assert_same_group_logs

import kio.aio
import kio.trio
from kio import TopicPartition as TP
from kio._shared.consumer_ops import ConsumerOps
from kio.consumer import ConsumerClosedError
from kproto.consumer.positions import NoOffsetForPartitionError


class Framework:
    """What a scenario needs of asyncio or trio: run, sleep, cancel a wait."""

    def __init__(self, name):
        self.name = name
        self.mod = kio.aio if name == "asyncio" else kio.trio

    def run(self, fn, *args):
        if self.name == "asyncio":
            return asyncio.run(fn(*args))
        return trio.run(fn, *args)

    async def sleep(self, seconds):
        await (asyncio.sleep(seconds) if self.name == "asyncio" else trio.sleep(seconds))

    async def cancelled_after(self, seconds, fn, *args):
        """Run ``fn(*args)``, cancelled after ``seconds``: whether it was."""
        if self.name == "asyncio":
            try:
                await asyncio.wait_for(fn(*args), seconds)
            except asyncio.TimeoutError:
                return True
            return False
        with trio.move_on_after(seconds) as scope:
            await fn(*args)
        return scope.cancelled_caught


FRAMEWORKS = ["asyncio", "trio"]


async def _poll_until(consumer, log, done, timeout=15.0, **kw):
    """poll() until ``done()``, logging each record as (partition, offset, value)."""
    end = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < end, f"not reached within {timeout} s; log so far: {log}"
        for r in await consumer.poll(0.2, **kw):
            log.append(("record", r.partition, r.offset, r.value))


async def group_scenario(fw, kafka, fast, monkeypatch):
    """A group member through records, an asynchronous commit's callback (a
    coroutine function), a rebalance (a coroutine on_assign, a plain
    on_revoke), more records one per answer, a poll cancelled while it
    waits, poll(0), poll_batch() and close(): the log of everything the
    application saw, in order, and what the polls ran through."""
    log = []

    async def assigned(tps):
        await fw.sleep(0)
        log.append(("assigned", sorted(tps)))

    async def committed(offsets, err):
        await fw.sleep(0)
        log.append(("committed", sorted((tp.partition, om.offset) for tp, om in offsets.items()), err))

    c = fw.mod.Consumer(bootstrap_servers=kafka.server.bootstrap, group_id="g", enable_auto_commit=False,
                        auto_offset_reset="earliest", heartbeat_interval_ms=100, fetch_max_wait_ms=20)
    async with c:
        counts = Counts(monkeypatch, c)
        c.subscribe(["t"], on_assign=assigned, on_revoke=lambda tps: log.append(("revoked", sorted(tps))))
        await _poll_until(c, log, lambda: sum(e[0] == "record" for e in log) == 10)
        await c.commit(asynchronous=True, callback=committed)
        await _poll_until(c, log, lambda: log[-1][0] == "committed")
        kafka.errors["Heartbeat"] = [REBALANCE_IN_PROGRESS]
        await _poll_until(c, log, lambda: log[-1][0] == "assigned")
        # The steady state of a quiet consumer: one record per answer.
        polls_before = counts.poll_called
        steps_before, steppers_before = counts.poll_steps, counts.steppers
        for i in range(10):
            kafka.produce("t", 0, 1, prefix=b"late-")
            await _poll_until(c, log, lambda: log[-1][:3] == ("record", 0, 5 + i))
        steady = (counts.poll_called - polls_before, counts.poll_steps - steps_before,
                  counts.steppers - steppers_before)
        # A poll cancelled while it waits leaves the consumer as it was.
        log.append(("cancelled", await fw.cancelled_after(0.05, c.poll, 5.0)))
        log.append(("poll(0)", await c.poll(0)))
        kafka.produce("t", 1, 2, prefix=b"batch-")
        end = time.monotonic() + 15
        while log[-1][0] != "batch":
            assert time.monotonic() < end
            for b in await c.poll_batch(0.2):
                log.append(("batch", b.partition, b.offsets, b.values))
        await c.close()
        log.append(("closed",))
        with pytest.raises(ConsumerClosedError):
            await c.poll(0)
        with pytest.raises(ConsumerClosedError):
            await c.poll_batch(0)
    return log, steady


def _run_scenario(fw, scenario, fast, monkeypatch, **kafka_args):
    monkeypatch.setattr(ConsumerOps, "poll_fast", fast)
    kafka = LoopbackKafka(**kafka_args)
    for p in range(kafka_args["partitions"]["t"]):
        kafka.produce("t", p, 5, prefix=b"p%d-" % p)
    with kafka.server:
        return fw.run(scenario, fw, kafka, fast, monkeypatch)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_the_fast_path_and_the_steps_give_the_same_records_and_calls_in_the_same_order(framework, monkeypatch):
    fw = Framework(framework)
    fast, fast_steady = _run_scenario(fw, group_scenario, True, monkeypatch, partitions={"t": 2})
    monkeypatch.undo()
    steps, steps_steady = _run_scenario(fw, group_scenario, False, monkeypatch, partitions={"t": 2})
    assert_same_group_logs(fast, fast_steady, steps, steps_steady, ("cancelled", True))


async def errors_scenario(fw, kafka, fast, monkeypatch):
    """The core's errors raised by poll(): no committed offset under
    auto.offset.reset=none, then the position given by seek()."""
    out = []
    async with fw.mod.Consumer(bootstrap_servers=kafka.server.bootstrap, group_id="g2", auto_offset_reset="none",
                               fetch_max_wait_ms=20) as c:
        c.assign([TP("t", 0)])
        end = time.monotonic() + 15
        while True:
            assert time.monotonic() < end, "poll() never raised NoOffsetForPartitionError"
            try:
                assert await c.poll(0.2) == []
            except NoOffsetForPartitionError as e:
                out.append(("raised", type(e).__name__, sorted(e.partitions)))
                break
        c.seek(TP("t", 0), 1)
        got = []
        await _poll_until(c, got, lambda: len(got) == 4)
        out.append(("after seek", got))
    return out


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_the_core_errors_reach_poll_the_same_on_both_paths(framework, monkeypatch):
    fw = Framework(framework)
    fast = _run_scenario(fw, errors_scenario, True, monkeypatch, partitions={"t": 1})
    monkeypatch.undo()
    assert fast == _run_scenario(fw, errors_scenario, False, monkeypatch, partitions={"t": 1})
    assert fast == [("raised", "NoOffsetForPartitionError", [TP("t", 0)]),
                    ("after seek", [("record", 0, i, b"p0-%d" % i) for i in range(1, 5)])]


# == wake-ups per answer ==========================================================================

class LongPollKafka(LoopbackKafka):
    """Holds a Fetch that would be empty until a record comes (at most 2 s),
    as a broker's fetch.max.wait.ms does: every answer then carries the
    record the test produced, and nothing else wakes the consumer."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.arrived = threading.Condition()

    def produce(self, topic, partition, n, prefix=b"v"):
        with self.arrived:
            super().produce(topic, partition, n, prefix)
            self.arrived.notify_all()

    def _Fetch(self, req):
        end = time.monotonic() + 2.0
        with self.arrived:
            while True:
                answer = FakeKafka._Fetch(self, req)
                left = end - time.monotonic()
                if left <= 0 or any(p["records"] for t in answer["responses"] for p in t["partitions"]):
                    return answer
                self.arrived.wait(left)


class Passes:
    """The event loop's passes (asyncio: ``_run_once``, one select each;
    trio: one I/O wait each) and the task steps it ran (trio)."""

    def __init__(self):
        self.passes = self.steps = 0

    # trio's Instrument hooks
    def before_io_wait(self, timeout):
        self.passes += 1

    def before_task_step(self, task):
        self.steps += 1


ANSWERS = 20


async def quiet_consumer(fw, kafka, passes):
    """A record at a time, each awaited by poll() before the next is produced:
    the engine's and the event loop's counts over ANSWERS answers."""
    async with fw.mod.Consumer(bootstrap_servers=kafka.server.bootstrap, fetch_max_wait_ms=2000) as c:
        c.assign([TP("t", 0)])
        c.seek(TP("t", 0), 0)
        got = []
        await _poll_until(c, got, lambda: len(got) == 1)
        engine = c._engine
        before = (engine.rounds, engine.rounds_here, engine.main_wakeups, engine.writer_wakeups,
                  passes.passes, passes.steps, kafka.count("Fetch"))
        for i in range(1, ANSWERS + 1):
            kafka.produce("t", 0, 1)
            await _poll_until(c, got, lambda: len(got) == i + 1, timeout=5.0)
        after = (engine.rounds, engine.rounds_here, engine.main_wakeups, engine.writer_wakeups,
                 passes.passes, passes.steps, kafka.count("Fetch"))
    assert [r[2] for r in got] == list(range(ANSWERS + 1))
    return dict(zip(("rounds", "rounds_here", "main_wakeups", "writer_wakeups", "passes", "task_steps", "fetches"),
                    (b - a for a, b in zip(before, after))))


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_one_fetch_answer_costs_the_engine_one_wake_up(framework, monkeypatch):
    fw = Framework(framework)
    passes = Passes()
    kafka = LongPollKafka(partitions={"t": 1})
    kafka.produce("t", 0, 1)
    with kafka.server:
        if framework == "asyncio":
            real_run_once = asyncio.base_events.BaseEventLoop._run_once

            def run_once(loop):
                passes.passes += 1
                return real_run_once(loop)
            monkeypatch.setattr(asyncio.base_events.BaseEventLoop, "_run_once", run_once)
            got = asyncio.run(quiet_consumer(fw, kafka, passes))
        else:
            got = trio.run(quiet_consumer, fw, kafka, passes, instruments=[passes])
    # one answer per record (the next Fetch may reach the broker before or
    # after a count is taken, at either end: the first count may already hold
    # the Fetch the first record answers, the last not yet the one after it)
    assert abs(got["fetches"] - ANSWERS) <= 1, got
    # One round of the core per answer, run by the poll that took its record
    # (the round that sends the next Fetch; the reader only fed the answer
    # to the core and woke the poll); the main task and the writer slept.
    assert got["rounds"] == got["rounds_here"] == ANSWERS
    assert got["main_wakeups"] == 0 and got["writer_wakeups"] == 0
    # The event loop: a pass that reads the answer and wakes the polling task,
    # a pass that runs it (it takes the record, sends the next Fetch and
    # waits again); before, six (the main task twice, the writer, the
    # polling task twice).
    assert got["passes"] <= 2 * ANSWERS + 2, got
    if framework == "trio":
        # the reader task's step and the polling task's
        assert got["task_steps"] <= 2 * ANSWERS + 2, got
