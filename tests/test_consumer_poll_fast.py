"""poll()'s fast path (``ConsumerOps.poll_fast``) against its twin, the steps.

The threading consumer's ``poll()`` and ``poll_batch()`` run the shared poll's
looks and waits in a plain loop (``PolledThreadDriver._poll_now``) instead of
driving a generator of steps through the runner: at a low rate each poll()
paid for two generators, a Stepper and the runner's bookkeeping. The fast
path must keep every semantic of the steps: the same records and the same
listener and callback calls in the same order, the core's errors,
``wakeup()``, ``poll(0)``, the closed checks. Each scenario runs once per
path, against a scripted broker on a loopback socket (the core tests'
``FakeKafka``: every answer known), and the two logs must be equal; the
count of what the fast path avoids is taken in the same runs.
"""
import threading
import time

import pytest

try:
    from scripted_broker import ScriptedServer
    from test_consumer_core import FakeKafka
except ImportError:  # pragma: no cover
    from tests.scripted_broker import ScriptedServer
    from tests.test_consumer_core import FakeKafka

from kio import Consumer, TopicPartition as TP
from kio._shared import client_ops
from kio._shared.consumer_ops import ConsumerOps
from kio._threaded import driver as threaded_driver
from kio.consumer import ConsumerClosedError, WakeupError
from kproto.consumer.positions import NoOffsetForPartitionError

REBALANCE_IN_PROGRESS = 27


class LoopbackKafka(FakeKafka):
    """FakeKafka served on a loopback socket: its Metadata and FindCoordinator
    answers name the server. An empty Fetch is held 20 ms (a broker's
    fetch.max.wait.ms), or the consumer would send the next at once."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.server = ScriptedServer(self.broker)

    def _node(self):
        return {"node_id": 1, "host": "127.0.0.1", "port": self.server.port}

    def _Metadata(self, req):
        answer = super()._Metadata(req)
        answer["brokers"] = [{**self._node(), "rack": None}]
        return answer

    def _FindCoordinator(self, req):
        node = self._node()
        return {"error_code": 0, **node, "coordinators": [{"key": req.body["key"], **node, "error_code": 0}]}

    def _Fetch(self, req):
        answer = super()._Fetch(req)
        if not any(p["records"] for t in answer["responses"] for p in t["partitions"]):
            time.sleep(0.02)
        return answer


class Counts:
    """What a poll runs through: steps generators started, Steppers made,
    the core told of a poll (poll_called, the max.poll.interval.ms timer)."""

    def __init__(self, monkeypatch, consumer):
        self.poll_steps = self.steppers = self.poll_called = 0
        real_steps, real_init = client_ops.ClientOps._poll_steps, threaded_driver.Stepper.__init__
        core = consumer._core
        real_called = core.poll_called

        def poll_steps(this, *args):
            self.poll_steps += 1
            return real_steps(this, *args)

        def stepper_init(this, steps):
            if threading.current_thread() is threading.main_thread():
                self.steppers += 1
            real_init(this, steps)

        def poll_called(now):
            self.poll_called += 1
            return real_called(now)
        monkeypatch.setattr(client_ops.ClientOps, "_poll_steps", poll_steps)
        monkeypatch.setattr(threaded_driver.Stepper, "__init__", stepper_init)
        core.poll_called = poll_called


def _poll_until(consumer, log, done, timeout=15.0, **kw):
    """poll() until ``done()``, logging each record as (partition, offset, value)."""
    end = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < end, f"not reached within {timeout} s; log so far: {log}"
        for r in consumer.poll(0.2, **kw):
            log.append(("record", r.partition, r.offset, r.value))


def group_scenario(fast, monkeypatch):
    """A group member through records, an asynchronous commit's callback, a
    rebalance (revoke, assign), more records one at a time, wakeup(),
    poll(0), poll_batch() and close(): the log of everything the application
    saw, in order, and what the polls ran through."""
    monkeypatch.setattr(ConsumerOps, "poll_fast", fast)
    kafka = LoopbackKafka(partitions={"t": 2})
    for p in (0, 1):
        kafka.produce("t", p, 5, prefix=b"p%d-" % p)
    log = []
    with kafka.server:
        c = Consumer(bootstrap_servers=kafka.server.bootstrap, group_id="g", enable_auto_commit=False,
                     auto_offset_reset="earliest",
                     heartbeat_interval_ms=100, fetch_max_wait_ms=20)
        counts = Counts(monkeypatch, c)
        c.subscribe(["t"], on_assign=lambda tps: log.append(("assigned", sorted(tps))),
                    on_revoke=lambda tps: log.append(("revoked", sorted(tps))))
        _poll_until(c, log, lambda: sum(e[0] == "record" for e in log) == 10)
        c.commit(asynchronous=True, callback=lambda offsets, err: log.append(("committed", sorted(
            (tp.partition, om.offset) for tp, om in offsets.items()), err)))
        _poll_until(c, log, lambda: log[-1][0] == "committed")
        kafka.errors["Heartbeat"] = [REBALANCE_IN_PROGRESS]
        _poll_until(c, log, lambda: log[-1][0] == "assigned")
        # The steady state of a quiet consumer: one record per answer.
        polls_before = counts.poll_called
        steps_before, steppers_before = counts.poll_steps, counts.steppers
        for i in range(10):
            kafka.produce("t", 0, 1, prefix=b"late-")
            _poll_until(c, log, lambda: log[-1][:3] == ("record", 0, 5 + i))
        polls = counts.poll_called - polls_before
        steady = (polls, counts.poll_steps - steps_before, counts.steppers - steppers_before)
        c.wakeup()
        with pytest.raises(WakeupError):
            c.poll(5.0)
        log.append(("woken",))
        log.append(("poll(0)", c.poll(0)))
        kafka.produce("t", 1, 2, prefix=b"batch-")
        end = time.monotonic() + 15
        while log[-1][0] != "batch":
            assert time.monotonic() < end
            for b in c.poll_batch(0.2):
                log.append(("batch", b.partition, b.offsets, b.values))
        c.close()
        log.append(("closed",))
        with pytest.raises(ConsumerClosedError):
            c.poll(0)
        with pytest.raises(ConsumerClosedError):
            c.poll_batch(0)
    return log, steady


def assert_same_group_logs(fast, fast_steady, steps, steps_steady, interrupted):
    """What group_scenario's runs on the two paths must show (this driver's
    and the async drivers', tests/test_async_consumer_poll_fast.py):
    ``interrupted`` is the log entry of the poll that was interrupted
    (woken by wakeup(), or cancelled)."""
    assert fast == steps
    # What the application saw (not an empty comparison):
    kinds = [e[0] for e in fast]
    assert kinds[:1] == ["assigned"] and kinds.count("record") == 20 and "committed" in kinds
    both = [TP("t", 0), TP("t", 1)]
    rebalance = kinds.index("revoked")
    assert fast[rebalance:rebalance + 2] == [("revoked", both), ("assigned", both)]
    assert kinds[-5:] == [interrupted[0], "poll(0)", "batch", "revoked", "closed"]     # (close() revokes)
    assert fast[-5] == interrupted and fast[-4] == ("poll(0)", [])
    assert fast[-3][1:] == (1, [5, 6], [b"batch-5", b"batch-6"])
    assert fast[kinds.index("committed")][1:] == ([(0, 5), (1, 5)], None)
    # The core hears of every poll on either path (max.poll.interval.ms, auto-commits) ...
    polls, fast_gens, fast_steppers = fast_steady
    assert polls >= 10 and steps_steady[0] >= 10
    # ... but in the steady state the fast path starts no generator of steps
    # and makes no Stepper; the steps make one of each per poll().
    assert (fast_gens, fast_steppers) == (0, 0)
    assert steps_steady[1] == steps_steady[0] and steps_steady[2] == steps_steady[0]


def test_the_fast_path_and_the_steps_give_the_same_records_and_calls_in_the_same_order(monkeypatch):
    fast, fast_steady = group_scenario(True, monkeypatch)
    monkeypatch.undo()
    steps, steps_steady = group_scenario(False, monkeypatch)
    assert_same_group_logs(fast, fast_steady, steps, steps_steady, ("woken",))


def errors_scenario(fast, monkeypatch):
    """The core's errors raised by poll(): no committed offset under
    auto.offset.reset=none, then the position given by seek()."""
    monkeypatch.setattr(ConsumerOps, "poll_fast", fast)
    kafka = LoopbackKafka(partitions={"t": 1})
    kafka.produce("t", 0, 3)
    out = []
    with kafka.server:
        with Consumer(bootstrap_servers=kafka.server.bootstrap, group_id="g2", auto_offset_reset="none",
                      fetch_max_wait_ms=20) as c:
            c.assign([TP("t", 0)])
            end = time.monotonic() + 15
            while True:
                assert time.monotonic() < end, "poll() never raised NoOffsetForPartitionError"
                try:
                    assert c.poll(0.2) == []
                except NoOffsetForPartitionError as e:
                    out.append(("raised", type(e).__name__, sorted(e.partitions)))
                    break
            c.seek(TP("t", 0), 1)
            got = []
            _poll_until(c, got, lambda: len(got) == 2)
            out.append(("after seek", got))
    return out


def test_the_core_errors_reach_poll_the_same_on_both_paths(monkeypatch):
    fast = errors_scenario(True, monkeypatch)
    monkeypatch.undo()
    assert fast == errors_scenario(False, monkeypatch)
    assert fast == [("raised", "NoOffsetForPartitionError", [TP("t", 0)]),
                    ("after seek", [("record", 0, 1, b"v1"), ("record", 0, 2, b"v2")])]
