"""The asyncio and trio consumers' timed wait in poll(): no timer per poll.

A ``poll(timeout)`` that finds no records waits on the engine's ``changed``
event alone and leaves its end to the engine's main task, which sleeps
anyway (``Engine.wait_until``): the main task's alarm is moved earlier only
when the poll's end comes before it. Before, each waiting poll made an
asyncio timer (``call_later`` and its cancel) or a trio cancel scope - at a
low rate one per Fetch answer (issue 27).

What must hold with it: no timer or cancel scope made per answer in the
steady state; a poll with no records returns by its timeout, whatever the
main task slept towards; a poll cancelled while it waits, ``wakeup()`` and
``close()`` from another task end the wait and leave the consumer usable
(or closed). The scripted broker on a loopback socket, no real broker.
"""
import asyncio
import time

import pytest
import trio

try:
    from test_async_consumer_poll_fast import FRAMEWORKS, Framework, LongPollKafka, _poll_until
except ImportError:  # pragma: no cover
    from tests.test_async_consumer_poll_fast import FRAMEWORKS, Framework, LongPollKafka, _poll_until

from kio import TopicPartition as TP
from kio import WakeupError
from kio.consumer import ConsumerClosedError

ANSWERS = 20
# How late a poll may return: a tick of the event loop on a loaded machine.
LATE = 0.15


class Timers:
    """Timers the event loop was asked for: asyncio's ``call_at`` (which
    ``call_later`` calls), trio's cancel scopes entered."""

    def __init__(self, monkeypatch, framework):
        self.made = 0
        if framework == "asyncio":
            cls, name = asyncio.base_events.BaseEventLoop, "call_at"
        else:
            cls, name = trio.CancelScope, "__enter__"
        real = getattr(cls, name)

        def counted(*args, **kw):
            self.made += 1
            return real(*args, **kw)
        monkeypatch.setattr(cls, name, counted)


def _consumer(fw, kafka):
    return fw.mod.Consumer(bootstrap_servers=kafka.server.bootstrap, fetch_max_wait_ms=2000)


async def _assigned(c):
    c.assign([TP("t", 0)])
    c.seek(TP("t", 0), 0)


def _run(fw, scenario, *args, records=1):
    kafka = LongPollKafka(partitions={"t": 1})
    if records:
        kafka.produce("t", 0, records)
    with kafka.server:
        return fw.run(scenario, fw, kafka, *args)


async def quiet_answers(fw, kafka, timers):
    """ANSWERS records, one per Fetch answer, each awaited by poll(5.0)
    before the next is produced: the timers made and the main task's wake-ups."""
    async with _consumer(fw, kafka) as c:
        await _assigned(c)
        got = []
        await _poll_until(c, got, lambda: len(got) == 1)
        engine = c._engine
        before = (timers.made, engine.main_wakeups, engine.alarm_wakeups, kafka.count("Fetch"))
        for i in range(1, ANSWERS + 1):
            kafka.produce("t", 0, 1)
            got.extend(await c.poll(5.0))
            assert len(got) == i + 1
        after = (timers.made, engine.main_wakeups, engine.alarm_wakeups, kafka.count("Fetch"))
        assert engine.wait_ends == []
    return dict(zip(("timers", "main_wakeups", "alarm_wakeups", "fetches"), (b - a for a, b in zip(before, after))))


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_quiet_consumer_makes_no_timer_per_answer(framework, monkeypatch):
    fw = Framework(framework)
    got = _run(fw, quiet_answers, Timers(monkeypatch, framework))
    assert abs(got["fetches"] - ANSWERS) <= 1, got      # one answer per record (counted as the Fetch came)
    # Every poll waited for its record (the broker held the Fetch until it
    # was produced): before, each wait made a timer or a cancel scope.
    assert got["timers"] == 0, got
    assert got["main_wakeups"] == 0 and got["alarm_wakeups"] == 0, got


async def empty_polls(fw, kafka, timeouts):
    """poll(t) for each t with no record to find: (t, seconds it took, what it gave)."""
    out = []
    async with _consumer(fw, kafka) as c:
        await _assigned(c)
        await c.poll(0.05)
        for timeout in timeouts:
            start = time.monotonic()
            records = await c.poll(timeout)
            out.append((timeout, time.monotonic() - start, records))
            if timeout == 0.1:
                await fw.sleep(0.3)    # the main task woke at this poll's end meanwhile: sleeps towards none
        assert c._engine.alarm_wakeups <= len(timeouts) + 2
    return out


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_poll_with_no_records_returns_by_its_timeout(framework):
    # A longer, then shorter ends (the alarm moved earlier), an end after the
    # alarm (it wakes at the earlier end and sleeps again), the same again
    # after a pause in which no poll waited.
    timeouts = [0.4, 0.1, 0.25, 0.3, 0.05, 0.2]
    out = _run(Framework(framework), empty_polls, timeouts, records=0)
    assert [t for t, _, _ in out] == timeouts
    for timeout, took, records in out:
        assert records == []
        assert timeout <= took < timeout + LATE, out


async def interrupted_waits(fw, kafka):
    """A poll(5.0) cancelled while it waits, then one ended by wakeup() from
    another task, then records still come and an empty poll is on time;
    then one ended by close() from another task."""
    log = []
    async with _consumer(fw, kafka) as c:
        await _assigned(c)
        got = []
        await _poll_until(c, got, lambda: len(got) == 1)
        engine = c._engine

        start = time.monotonic()
        log.append(("cancelled", await fw.cancelled_after(0.05, c.poll, 5.0)))
        log.append(("cancel took < 1 s", time.monotonic() - start < 1.0, engine.wait_ends))

        async def wake_soon():
            await fw.sleep(0.05)
            c.wakeup()

        async def close_soon():
            await fw.sleep(0.05)
            await c.close()

        async def poll_raising(other):
            start = time.monotonic()
            async with _nursery(fw) as spawn:
                spawn(other)
                try:
                    await c.poll(5.0)
                    return ("returned",)
                except (WakeupError, ConsumerClosedError) as e:
                    return (type(e).__name__, time.monotonic() - start < 1.0, engine.wait_ends)

        log.append(await poll_raising(wake_soon))
        kafka.produce("t", 0, 1)
        await _poll_until(c, got, lambda: len(got) == 2)
        log.append(("records", [r[2] for r in got]))
        start = time.monotonic()
        log.append(("empty", await c.poll(0.2), 0.2 <= time.monotonic() - start < 0.2 + LATE))
        log.append(await poll_raising(close_soon))
    return log


class _nursery:
    """Run a second task beside the body (asyncio: a task; trio: a nursery)."""

    def __init__(self, fw):
        self.fw = fw

    async def __aenter__(self):
        if self.fw.name == "asyncio":
            self.tasks = []
            return lambda fn: self.tasks.append(asyncio.ensure_future(fn()))
        self.cm = trio.open_nursery()
        nursery = await self.cm.__aenter__()
        return lambda fn: nursery.start_soon(fn)

    async def __aexit__(self, *exc):
        if self.fw.name == "asyncio":
            await asyncio.gather(*self.tasks)
        else:
            await self.cm.__aexit__(*exc)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_cancel_wakeup_and_close_end_a_waiting_poll(framework):
    log = _run(Framework(framework), interrupted_waits)
    assert log == [
        ("cancelled", True),
        ("cancel took < 1 s", True, []),
        ("WakeupError", True, []),
        ("records", [0, 1]),
        ("empty", [], True),
        ("ConsumerClosedError", True, []),
    ]
