"""What a quiet producer's round makes and computes (issue 27, branch pround).

At 1,000 records/s a producer's network side runs two rounds a batch (the
linger timer's, the answer's); at ~180k instructions a round, allocations
and generic calls each round were a good part of it. These tests pin the
round's shortcuts to their references: the accumulator's ``ready`` (shared
containers when nothing is unknown or waiting, no generator) against the
walk it replaced, the metadata refresh's due time against Java's max()
formula, the Produce answer's topic id against ``uuid.UUID(bytes=...)``,
the threading driver's interest update (no walk of the sockets on a round
with no output) against what the selector must hold, and, over a simulated
low rate, that a round with nothing awaited or unknown makes none of the
per-round containers. No network, counts and identities: nothing depends on
the machine's load.
"""
import random
import socket
import types
import uuid

from kio._threaded.network import SocketLoop
from kproto._wire import Reader
from kproto.cluster import ClusterMetadata
from kproto.driver import TIMER_RESOLUTION_MS
from kproto.producer import ProducerCore

try:
    from test_producer_core import FakeKafka, make
except ImportError:  # pragma: no cover
    from tests.test_producer_core import FakeKafka, make


# -- RecordAccumulator.ready ----------------------------------------------------------------
def _ready_reference(acc, queues, cluster, now, muted):
    """``RecordAccumulator._ready_over`` as it was written before this branch
    (sets and a dict made every call, the next delay a generator's min): the
    reference the round's version must agree with."""
    nodes, unknown, waits = set(), set(), {}
    retry_delay = None
    anyway = acc.waiting_for_memory or acc.flushing > 0
    for tp, dq in queues:
        if not dq:
            continue
        leader = cluster.leader(tp[0], tp[1])
        if leader is None:
            unknown.add(tp[0])
            continue
        if tp in muted:
            continue
        batch = dq[0]
        if batch.in_flight:
            continue
        if batch.attempts > 0 and now < batch.retry_after_ms:
            wait = batch.retry_after_ms - now
            if retry_delay is None or wait < retry_delay:
                retry_delay = wait
            continue
        if leader in nodes:
            continue
        wait = batch.created_ms + acc.linger_ms - now
        if anyway or wait < TIMER_RESOLUTION_MS or batch.full or len(dq) > 1:
            nodes.add(leader)
        else:
            known = waits.get(leader)
            if known is None or wait < known:
                waits[leader] = wait
    next_delay = min((w for node, w in waits.items() if node not in nodes), default=None)
    if retry_delay is not None and (next_delay is None or retry_delay < next_delay):
        next_delay = retry_delay
    return nodes, next_delay, unknown


class _Leaders:
    def __init__(self, leaders):
        self.leaders = leaders

    def leader(self, topic, partition):
        return self.leaders.get((topic, partition))


def _random_queues(rng, now):
    queues, leaders = [], {}
    for p in range(rng.randint(0, 12)):
        tp = (rng.choice("abc"), p)
        leaders[tp] = rng.choice([None, 1, 2, 3])
        dq = [types.SimpleNamespace(in_flight=rng.random() < 0.2, attempts=rng.choice([0, 0, 1]),
                                    retry_after_ms=now + rng.uniform(-5, 50), created_ms=now - rng.uniform(0, 9),
                                    full=rng.random() < 0.2)
              for _ in range(rng.choice([0, 1, 1, 2]))]
        queues.append((tp, dq))
    return queues, leaders


def test_ready_agrees_with_the_walk_it_replaced_over_random_queues():
    rng = random.Random(27)
    core, _, _ = make(FakeKafka(), linger_ms=5)
    acc = core.accumulator
    for case in range(3000):
        now = 1000.0 + case
        queues, leaders = _random_queues(rng, now)
        muted = {tp for tp, _ in queues if rng.random() < 0.15}
        acc.flushing = 1 if rng.random() < 0.1 else 0
        got = acc._ready_over(queues, _Leaders(leaders), now, muted)
        want = _ready_reference(acc, queues, _Leaders(leaders), now, muted)
        assert (set(got[0]), got[1], set(got[2])) == want, (case, queues, leaders, muted)
    acc.flushing = 0


def test_a_quiet_rounds_ready_makes_no_unknown_topics_set():
    core, _, sim = make(FakeKafka(), linger_ms=5)
    sim.send(b"warm")
    sim.run_until(lambda: not core.pending)
    acc = core.accumulator
    first = acc.ready(core.cluster, sim.now, ())[2]
    sim.send(b"open a batch")
    second = acc.ready(core.cluster, sim.now, ())[2]
    assert not first and first is second, "every leader known: the one shared empty set, not a new one a round"


# -- the sender's round at a simulated low rate ---------------------------------------------
def test_rounds_at_a_low_rate_share_their_empty_containers_and_still_send_every_batch():
    core, kafka, sim = make(FakeKafka(), linger_ms=5)
    sim.send(b"warm")
    sim.run_until(lambda: not core.pending)
    acc, sender = core.accumulator, core.sender
    awaited, batches_before = set(), core.metrics()["batches_sent"]
    for i in range(40):                  # one record every 10 ms: a batch each, alone
        sim.send(b"v%d" % i, partition=0)
        sim.run_until(lambda: not core.pending)
        awaited.add(id(acc.awaited_nodes))
    assert core.metrics()["batches_sent"] - batches_before == 40
    assert core.metrics()["records_sent"] == 41
    assert len(awaited) == 1 and not acc.awaited_nodes, \
        "no leader awaited: every round leaves the one shared empty frozenset"
    assert not sender.in_flight


# -- ClusterMetadata.time_to_next_update --------------------------------------------------------
def _time_to_next_update_reference(c, now):
    """Java's max(time to expiry, time the refresh backoff allows), with max()."""
    due = now if c.need_update or c.last_refresh_ms is None else c.last_refresh_ms + c.metadata_max_age_ms
    if c.last_attempt_ms is not None and not c._urgent:
        due = max(due, c.last_attempt_ms + c._backoff())
    return max(0, due - now)


def test_time_to_next_update_is_javas_formula_in_every_state():
    c = ClusterMetadata(bootstrap=[("127.0.0.1", 9)])
    rng = random.Random(14)
    for case in range(2000):
        now = rng.choice([0, 50.5, 1000, 300_000, 10**9])
        c.need_update = rng.random() < 0.3
        c.last_refresh_ms = rng.choice([None, now - 400_000, now - 10, now])
        c.last_attempt_ms = rng.choice([None, now - 1, now - 99, now - 1000, now + 5])
        c._urgent = rng.random() < 0.2
        c._failed_attempts = rng.choice([0, 0, 1, 3])
        got = c.time_to_next_update(now)
        want = _time_to_next_update_reference(c, now)
        assert got == want and type(got) is type(want), (case, got, want)


# -- the Produce answer's topic id ----------------------------------------------------------------
def test_a_uuid_read_is_the_uuid_of_its_bytes():
    rng = random.Random(5)
    samples = [bytes(16), b"\xff" * 16, bytes(range(16)), uuid.uuid4().bytes] + \
        [bytes(rng.randrange(256) for _ in range(16)) for _ in range(200)]
    for raw in samples:
        got, want = Reader(raw + b"tail").read_uuid(), uuid.UUID(bytes=raw)
        assert type(got) is uuid.UUID
        assert got == want and hash(got) == hash(want) and str(got) == str(want) and got.bytes == raw
        assert got.is_safe == want.is_safe and {want: "t"}.get(got) == "t"
    u = Reader(bytes(16)).read_uuid()
    try:
        u.int = 1
    except TypeError:
        pass
    else:  # pragma: no cover
        raise AssertionError("a read UUID must stay immutable as UUID's own")


# -- the threading driver's interest update -------------------------------------------------------
class _RecordingPoller:
    """The loop's poller (``select.epoll``, whose methods cannot be
    replaced), recording every modify and what each fd is registered for."""

    def __init__(self, real):
        self.real, self.modified, self.masks = real, [], {}

    def register(self, fd, mask):
        self.masks[fd] = mask
        self.real.register(fd, mask)

    def modify(self, fd, mask):
        self.modified.append(mask)
        self.masks[fd] = mask
        self.real.modify(fd, mask)

    def unregister(self, fd):
        self.masks.pop(fd, None)
        self.real.unregister(fd)

    def poll(self, timeout=-1):
        return self.real.poll(timeout)

    def close(self):
        self.real.close()


def test_a_round_with_no_output_leaves_the_selector_alone_and_output_still_registers_a_write():
    from kio._threaded.network import _READ, _WRITE
    loop = SocketLoop(ProducerCore(bootstrap_servers=["127.0.0.1:9"]))
    a, b = socket.socketpair()
    output = []
    loop.core = types.SimpleNamespace(nodes_with_output=lambda: list(output))
    poller = loop._poller = _RecordingPoller(loop._poller)
    modified = poller.modified
    try:
        # as _open leaves a socket: registered for the connect's write
        loop.socks[1] = a
        loop._register(1, a, _WRITE)
        loop._interest[1] = _WRITE
        loop._all_read = False
        assert loop.update_interest() and modified == [_READ]
        for _ in range(3):                                   # quiet rounds
            assert not loop.update_interest()
        assert modified == [_READ], "a round with no output modified the selector"
        output.append(1)                                     # a request queued
        assert loop.update_interest()
        assert poller.masks[a.fileno()] == _READ | _WRITE
        assert not loop.update_interest()
        output.clear()                                       # written
        assert loop.update_interest()
        assert poller.masks[a.fileno()] == _READ
        assert not loop.update_interest()
        assert modified == [_READ, _READ | _WRITE, _READ]
    finally:
        loop.close_socket(1)
        b.close()
        loop.close()
