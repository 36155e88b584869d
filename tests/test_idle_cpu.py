"""No spinning, no polling timers (issue 15, points 1 and 2).

1. While no broker answers, a client waits for the reconnect backoff
   (reconnect.backoff.ms doubling with +-20% jitter up to
   reconnect.backoff.max.ms) and its driver sleeps until the core's next
   deadline: a Producer.send() or Consumer.poll() on a dead address costs a
   small fraction of one core, not all of it. The cores are checked first
   (their deadlines, under simulated time), then the drivers (process CPU
   time against wall time).
2. A driver waits exactly until the core's next deadline or a wake-up: an
   idle client does not wake on a timer.
"""
import asyncio
import random
import resource
import socket
import time

import pytest

try:
    from scripted_broker import ScriptedBroker, ScriptedServer
    from test_consumer_core import TP
    from test_consumer_core import make as make_consumer_sim
    from test_producer_core import FakeKafka
    from test_producer_core import make as make_producer_sim
except ImportError:  # pragma: no cover
    from tests.scripted_broker import ScriptedBroker, ScriptedServer
    from tests.test_consumer_core import TP
    from tests.test_consumer_core import make as make_consumer_sim
    from tests.test_producer_core import FakeKafka
    from tests.test_producer_core import make as make_producer_sim

from kio.consumer import Consumer
from kio.producer import KafkaTimeoutError, Producer
from kproto.admin import AdminCore
from kproto.client import Connect
from kproto.consumer.core import ConsumerCore
from kproto.consumer.positions import NoOffsetForPartitionError
from kproto.producer import MetadataPending, ProducerCore

# == the cores, in simulated time ================================================================

def run_against_a_dead_broker(core, ms, start=None):
    """Play a driver whose every connect is refused at once, for ``ms`` of
    simulated time, jumping to the core's next deadline between polls.
    Returns (polls, connect times)."""
    now, polls, connects = 0, 0, []
    if start is not None:
        start(now)
    while now <= ms:
        polls += 1
        assert polls < 1000, f"the core asks to be polled again and again at t={now} ms (a spin)"
        for a in core.poll(now):
            if isinstance(a, Connect):
                connects.append(now)
                core.disconnected(a.node, now, ConnectionRefusedError(111, "refused"))
        d = core.next_deadline(now)
        assert d is not None, "no deadline while the client waits for a broker: it would stall"
        now = max(d, now + 0.001)
    return polls, connects


def producer_core(**cfg):
    return ProducerCore({"bootstrap.servers": "dead:1", **cfg}, rng=random.Random(3))


def start_send(core):
    def start(now):
        with pytest.raises(MetadataPending):
            core.send("t", b"v", now=now)
    return start


@pytest.mark.parametrize("make_core, start", [
    (lambda: producer_core(), lambda core: start_send(core)),
    (lambda: producer_core(enable_idempotence=True), lambda core: start_send(core)),
    (lambda: ConsumerCore({"bootstrap.servers": "dead:1", "group.id": "g"}, rng=random.Random(3)),
     lambda core: lambda now: core.subscribe(["t"], now)),
    (lambda: ConsumerCore({"bootstrap.servers": "dead:1"}, rng=random.Random(3)),
     lambda core: lambda now: core.assign([TP("t", 0)], now)),
    (lambda: AdminCore({"bootstrap.servers": "dead:1"}, rng=random.Random(3)),
     lambda core: lambda now: core.list_topics(now=now)),
], ids=["producer", "idempotent-producer", "consumer-group", "consumer-assign", "admin"])
def test_cores_wait_for_the_reconnect_backoff_while_no_broker_answers(make_core, start):
    core = make_core()
    polls, connects = run_against_a_dead_broker(core, 5000, start(core))
    # reconnect.backoff.ms=50 doubling (+-20% jitter) up to reconnect.backoff.max.ms=1000:
    # 0, ~50, ~150, ~350, ~750, ~1550, ~2550, ~3550, ~4550 - not one connect per poll
    gaps = [b - a for a, b in zip(connects, connects[1:])]
    assert 7 <= len(connects) <= 11, connects
    for k, gap in enumerate(gaps):
        assert 0.8 * min(50 * 2 ** k, 1000) <= gap <= 1.2 * min(50 * 2 ** k, 1000) + 1, (k, gaps)
    assert polls <= 4 * len(connects) + 10, (polls, connects)


def test_an_idempotent_producer_backs_off_when_init_producer_id_is_retriable():
    kafka = FakeKafka()
    b = kafka.brokers[1]
    times = []
    loading = {"error_code": 14, "producer_id": -1, "producer_epoch": -1}   # COORDINATOR_LOAD_IN_PROGRESS
    b.script("InitProducerId", *[lambda req: times.append(sim.now) or loading] * 6)
    core, kafka, sim = make_producer_sim(kafka, enable_idempotence=True, linger_ms=0)
    h = sim.send(b"v")
    sim.run_until(lambda: h.done)
    assert h.error is None
    # retry.backoff.ms=100 doubling up to retry.backoff.max.ms=1000, not a request
    # loop as fast as the broker answers (a broker starting up answers 14 for a while)
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert len(times) == 6 and all(g >= 80 for g in gaps), gaps
    assert gaps[-1] > gaps[0]


def test_a_connection_lost_after_poll_makes_the_next_poll_due():
    """A driver reports what happened between a poll and its next_deadline call
    (a write that fails with ECONNRESET, as under the fault tests' cuts): the
    effects - the batch's retry, the reconnect - come out of the next poll,
    so the deadline is now, not the stale one computed before (here the
    delivery timeout: the producer slept through its retries)."""
    core, kafka, sim = make_producer_sim(linger_ms=0, enable_idempotence=False,
                                         delivery_timeout_ms=120000)
    kafka.hold = True                                # the Produce is written, never answered
    h = sim.send(b"v")
    sim.step()
    assert core.sender.in_flight
    kafka.hold = False
    now = sim.now
    core.poll(now)
    before = core.next_deadline(now)
    core.disconnected(1, now, ConnectionResetError(104, "reset by peer"))   # after the poll
    assert core.next_deadline(now) == now, (before, core.next_deadline(now))
    core.poll(now)
    assert core.next_deadline(now) <= now + 150      # the retry backoff, not delivery.timeout.ms
    sim.run_until(lambda: h.done, max_ms=5000)
    assert h.error is None and kafka.values() == [b"v"]


def test_a_partition_without_offset_waits_for_a_seek_not_for_a_timer():
    kafka, core, sim = make_consumer_sim(group_id="g", auto_offset_reset="none", enable_auto_commit=False)
    core.assign([TP("t", 0)], 0)
    with pytest.raises(NoOffsetForPartitionError):
        sim.run(lambda: core.drain() and False, max_ms=5000)
    d = core.next_deadline(sim.now)
    assert d is None or d > sim.now + 1000, "the core asks for a poll at once: the driver would spin"


# == the drivers, in real time ==================================================================

def cpu_seconds():
    """CPU time of the whole process, every thread included."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class Measure:
    def __enter__(self):
        self.cpu, self.wall = cpu_seconds(), time.monotonic()
        return self

    def __exit__(self, *exc):
        self.cpu = cpu_seconds() - self.cpu
        self.wall = time.monotonic() - self.wall

    @property
    def ratio(self):
        return self.cpu / self.wall


def dead_address():
    """A loopback port nobody listens on (connects refused at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


LIMIT = 0.10        # CPU seconds per wall second while waiting on a dead address


def test_producer_send_to_a_dead_address_does_not_spin():
    p = Producer(bootstrap_servers=dead_address(), max_block_ms=3000)
    try:
        with Measure() as m, pytest.raises(KafkaTimeoutError):
            p.send("t", b"v")
    finally:
        p.close(0)
    assert m.wall >= 2.9 and m.ratio < LIMIT, f"{m.cpu:.2f} s CPU in {m.wall:.2f} s"


def test_consumer_poll_on_a_dead_address_does_not_spin():
    with Consumer(bootstrap_servers=dead_address(), group_id="g", default_api_timeout_ms=1000) as c:
        c.subscribe(["t"])
        with Measure() as m:
            assert c.poll(3.0) == []
    assert m.wall >= 2.9 and m.ratio < LIMIT, f"{m.cpu:.2f} s CPU in {m.wall:.2f} s"


async def _async_dead(mod, nursery=None):
    kw = {} if nursery is None else {"nursery": nursery}
    bootstrap = dead_address()
    p = mod.Producer(bootstrap_servers=bootstrap, max_block_ms=2000, **kw)
    with Measure() as mp:
        with pytest.raises(KafkaTimeoutError):
            await p.send("t", b"v")
    await p.close(0)
    c = mod.Consumer(bootstrap_servers=bootstrap, group_id="g", default_api_timeout_ms=1000, **kw)
    c.subscribe(["t"])
    with Measure() as mc:
        assert await c.poll(2.0) == []
    await c.close()
    return mp, mc


@pytest.mark.parametrize("framework", ["asyncio", "trio"])
def test_async_send_and_poll_on_a_dead_address_do_not_spin(framework):
    if framework == "asyncio":
        import kio.aio
        mp, mc = asyncio.run(_async_dead(kio.aio))
    else:
        trio = pytest.importorskip("trio")
        import kio.trio

        async def main():
            async with trio.open_nursery() as nursery:
                return await _async_dead(kio.trio, nursery)
        mp, mc = trio.run(main)
    for what, m in (("send", mp), ("poll", mc)):
        assert m.wall >= 1.9 and m.ratio < LIMIT, f"{what}: {m.cpu:.2f} s CPU in {m.wall:.2f} s"


# == idle clients: no timer wake-ups (point 2) ====================================================

def idle_broker():
    """A scripted one-node cluster that answers Metadata (no topics)."""
    broker = ScriptedBroker(node_id=0)
    server = ScriptedServer(broker)
    broker.on("Metadata", lambda req: {
        "brokers": [{"node_id": 0, "host": "127.0.0.1", "port": server.port, "rack": None}],
        "cluster_id": "scripted", "controller_id": 0, "topics": []})
    broker.on("InitProducerId", lambda req: {"error_code": 0, "producer_id": 7, "producer_epoch": 0})
    return broker, server


def count_calls(obj, name):
    calls = []
    orig = getattr(obj, name)

    def counted(*a, **kw):
        calls.append(time.monotonic())
        return orig(*a, **kw)
    setattr(obj, name, counted)
    return calls


def in_the_middle(calls, start, end):
    """The calls made while nothing happened: not at the start of the idle
    period (the last answers being handled) nor at its end (the wait that
    ends it)."""
    return [t - start for t in calls if start + 0.2 < t < end - 0.2]


def settle(broker, n_metadata=1):
    end = time.monotonic() + 10
    while len(broker.requests_of("Metadata")) < n_metadata:
        assert time.monotonic() < end, "no Metadata request"
        time.sleep(0.01)
    time.sleep(0.2)                      # the answer is read and handled


def test_idle_threading_clients_do_not_wake_on_a_timer():
    broker, server = idle_broker()
    with server:
        p = Producer(bootstrap_servers=server.bootstrap)
        c = Consumer(bootstrap_servers=server.bootstrap, group_id="g")
        try:
            settle(broker, 2)
            p_wakes = count_calls(p._net, "select")
            c_wakes = count_calls(c._net, "select")
            app_waits = count_calls(c._changed, "wait")
            start = time.monotonic()
            assert c.poll(2.0) == []             # nothing assigned: the application waits too
            end = time.monotonic()
        finally:
            p.close()
            c.close()
    # A 0.2 s timer woke the network threads ~8 times in 2 s, a 0.5 s one poll() 3 times.
    for what, calls in (("producer", p_wakes), ("consumer", c_wakes), ("poll()", app_waits)):
        assert in_the_middle(calls, start, end) == [], (what, calls)


@pytest.mark.parametrize("framework", ["asyncio", "trio"])
def test_idle_async_clients_do_not_wake_on_a_timer(framework):
    broker, server = idle_broker()

    async def run(mod, sleep, **kw):
        p = mod.Producer(bootstrap_servers=server.bootstrap, **kw)
        c = mod.Consumer(bootstrap_servers=server.bootstrap, group_id="g", **kw)
        await p.flush()                          # starts the network tasks
        c.assign([])
        end = time.monotonic() + 10
        while len(broker.requests_of("Metadata")) < 2 and time.monotonic() < end:
            await sleep(0.01)
        await sleep(0.3)
        p_wakes = count_calls(p._io, "wait")
        c_wakes = count_calls(c._io, "wait")
        start = time.monotonic()
        assert await c.poll(2.0) == []
        end = time.monotonic()
        await p.close()
        await c.close()
        return [in_the_middle(calls, start, end) for calls in (p_wakes, c_wakes)]

    with server:
        if framework == "asyncio":
            import kio.aio
            p_wakes, c_wakes = asyncio.run(run(kio.aio, asyncio.sleep))
        else:
            trio = pytest.importorskip("trio")
            import kio.trio

            async def main():
                async with trio.open_nursery() as nursery:
                    return await run(kio.trio, trio.sleep, nursery=nursery)
            p_wakes, c_wakes = trio.run(main)
    # A 0.2 s timer woke the network tasks ~8 times in 2 s, a 0.5 s one poll() 3 times.
    assert p_wakes == [] and c_wakes == []
