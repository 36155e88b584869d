"""The Python of a quiet producer's round: the threading driver's loop, its
SocketLoop and ProducerCore's driver calls (issue 27, branch pdrv).

At 1,000 records/s the network thread runs two rounds a batch, most with
nothing completed, nothing reported and no waiting application thread.
These tests pin what such a round no longer does - make a list for the
completions or the error callbacks, read a ``Config`` setting (a Python
``__getattr__``), compare the application's marks with nobody waiting -
and that the wait on the sockets, now ``select.epoll.poll`` itself (or
``selectors`` behind the same face), reports what ``selectors`` reported.
No network beyond a local socketpair; counts and identities only.
"""
import collections
import socket

import pytest

from kio._shared.common import error_callbacks
from kio._threaded import network
from kio._threaded.network import SocketLoop, _READ, _SelectorPoller, _WRITE
from kproto import config as kconfig
from kproto.producer import ProducerCore

from call_counter import PatchableNetworkClient, patchable_network_clients

try:
    from test_producer_core import FakeKafka, make
except ImportError:  # pragma: no cover
    from tests.test_producer_core import FakeKafka, make


@pytest.fixture
def settings_read(monkeypatch):
    """Counts the ``Config`` settings read (by name) while ``counting[0]`` is true."""
    seen = collections.Counter()
    counting = [False]
    config_getattr = kconfig.Config.__getattr__

    def setting(cfg, name):
        if counting[0]:
            seen[name] += 1
        return config_getattr(cfg, name)

    monkeypatch.setattr(kconfig.Config, "__getattr__", setting)
    return seen, counting


def test_quiet_rounds_hand_over_shared_empties_and_read_no_setting(settings_read):
    seen, counting = settings_read
    core, kafka, sim = make(FakeKafka(), linger_ms=5)
    sim.send(b"warm")
    sim.run_until(lambda: not core.pending)
    empties, no_errors, rounds = set(), set(), 0
    handles = []
    counting[0] = True
    for i in range(40):                     # one record every 10 ms: a batch each, alone
        handles.append(core.send("t", b"v%d" % i, partition=0, now=sim.now))
        for _ in range(10):                 # the driver's round, once a millisecond
            sim.now += 1
            sim.step()
            core.next_deadline(sim.now)
            results = core.events()         # (Sim.step collected any completion already)
            assert not results
            empties.add(id(results))
            errors = error_callbacks(core)
            assert errors == []
            no_errors.add(id(errors))
            rounds += 1
    counting[0] = False
    assert [h.metadata.offset for h in handles] == list(range(1, 41))
    assert kafka.values()[-40:] == [b"v%d" % i for i in range(40)]
    assert len(empties) == 1, "a round with nothing completed made a new container"
    assert len(no_errors) == 1, "a round with nothing reported made a new list"
    assert not seen, f"Config settings read in the steady state's rounds: {dict(seen)}"
    assert rounds == 400


def test_events_hands_completions_over_once_then_the_shared_empty():
    core, kafka, sim = make(FakeKafka(), linger_ms=0)
    sim.collect_events = False              # completions stay in the core, as between two rounds
    sim.send(b"a", partition=0)
    sim.run_until(lambda: bool(core.sender.results))
    first = core.events()
    assert [r.partition for r in first] == [0] and core.sender.results == [] and core.sender.results_records == 0
    assert core.events() is core.events() and not core.events()
    core.sender.results.append(first[0])    # the sender's list is its own again: appending to it
    assert core.events() == first and not core.events()       # leaves the shared empty alone


def test_error_callbacks_takes_nothing_when_nothing_was_reported(monkeypatch):
    patchable_network_clients(monkeypatch)
    core = ProducerCore(bootstrap_servers=["127.0.0.1:9"], error_cb=lambda e: None)
    assert type(core.client) is PatchableNetworkClient
    taken = []
    real_take = core.client.take_errors
    core.client.take_errors = lambda: taken.append(1) or real_take()
    assert error_callbacks(core) == [] and not taken
    err = RuntimeError("reported")
    core.client._errors.append(err)
    assert error_callbacks(core) == [(core.config.error_cb, err)] and taken == [1]
    assert error_callbacks(core) == [] and taken == [1]


# -- the wait on the sockets ----------------------------------------------------------------------
@pytest.fixture(params=["epoll", "selectors"])
def loop(request, monkeypatch):
    """A SocketLoop over epoll itself, or over the selectors adapter (other platforms)."""
    if request.param == "selectors":
        monkeypatch.setattr(network, "_new_poller", _SelectorPoller)
    lp = SocketLoop(ProducerCore(bootstrap_servers=["127.0.0.1:9"]))
    yield lp
    lp.close()


def _connected_pair(loop, node=1):
    """A socket registered as node ``node`` once its connect is done (reads only), and its peer."""
    a, b = socket.socketpair()
    a.setblocking(False)
    loop.socks[node] = a
    loop._register(node, a, _READ)
    loop._interest[node] = _READ
    return a, b


def test_select_gives_fd_and_mask_pairs_and_handle_routes_them(loop):
    a, b = _connected_pair(loop)
    calls = []
    loop._io = lambda node, sock, mask, now: calls.append((node, sock, mask))
    try:
        assert loop.select(0) == []
        loop.wake()
        b.send(b"x")
        events = loop.select(1.0)
        assert sorted(fd for fd, _ in events) == sorted([loop.wake_fd, a.fileno()])
        assert all(mask == _READ for _, mask in events)
        loop.handle(events, 0)
        assert loop.woken and not loop.wake_pending
        assert calls == [(1, a, _READ)], "the wake-up pipe went to _io, or the socket did not"
        a.recv(10)
        loop._poller.modify(a.fileno(), _READ | _WRITE)
        assert loop.select(1.0) == [(a.fileno(), _WRITE)]
        b.close()                            # a hang-up: reads (EOF) and writes, as selectors says
        calls.clear()
        loop.handle(loop.select(1.0), 0)
        assert calls == [(1, a, _READ | _WRITE)]
    finally:
        loop.close_socket(1)
        b.close()
    assert loop._fd_node == {} and loop.select(0) == []


def test_an_epoll_error_or_hangup_mask_reads_and_writes():
    """epoll's own bits beyond in/out (EPOLLERR 0x8, EPOLLHUP 0x10) make
    both a read and a write, as ``selectors.EpollSelector`` maps them."""
    lp = SocketLoop(ProducerCore(bootstrap_servers=["127.0.0.1:9"]))
    a, b = _connected_pair(lp)
    calls = []
    lp._io = lambda node, sock, mask, now: calls.append(mask)
    try:
        for mask, want in ((0x001, _READ), (0x004, _WRITE), (0x005, _READ | _WRITE),
                           (0x008, _READ | _WRITE), (0x010, _READ | _WRITE), (0x011, _READ | _WRITE)):
            calls.clear()
            lp.handle([(a.fileno(), mask)], 0)
            assert calls == [want], hex(mask)
        calls.clear()
        lp.handle([(a.fileno() + 1000, _READ)], 0)       # an fd no longer registered: ignored
        assert calls == []
    finally:
        lp.close_socket(1)
        b.close()
        lp.close()


# -- the producer's hook after each round ---------------------------------------------------------
def test_after_round_compares_nothing_without_a_waiter_and_still_wakes_one():
    from kio import Producer
    p = Producer(bootstrap_servers="127.0.0.1:9")
    try:
        with p._lock:                        # the network thread waits: its rounds cannot interleave
            moved, notified = [], []
            p._network_moved = lambda timer: moved.append(timer) or False
            real_notify = p._notify
            p._notify = lambda: (notified.append(1), real_notify())
            assert p._after_round(True) is None
            assert moved == [] and notified == []
            p._waiters += 1                  # an application thread waits (flush, a blocked send)
            try:
                p._metadata_version = p._core.cluster.version
                assert p._after_round(True) is None and moved == [True] and notified == []
                p._network_moved = lambda timer: moved.append(timer) or True
                assert p._after_round(True) is None and notified == [1]
            finally:
                p._waiters -= 1
    finally:
        del p._network_moved, p._notify
        p.close(0)


# -- the deadline after a wake-up that asked for no round ---------------------------------------
def test_the_deadline_after_appends_is_the_full_deadline_without_asking_the_network_client(monkeypatch):
    import random
    rng = random.Random(27)
    patchable_network_clients(monkeypatch)
    core, kafka, sim = make(FakeKafka(partitions={"t": 4}), linger_ms=5)
    assert type(core.client) is PatchableNetworkClient
    sim.send(b"warm")
    sim.run_until(lambda: not core.pending)
    asked = []
    real = core.client.next_deadline
    checked = 0
    for _ in range(300):
        sim.now += rng.choice((0, 0.3, 1, 2, 7))
        sim.step()                                     # the round (answers, batches due)
        planned = core.next_deadline(sim.now)          # what the network thread sleeps towards
        for _ in range(rng.randrange(4)):              # send()s between two rounds, no I/O
            sim.now += rng.choice((0, 0.2, 1))
            core.send("t", b"x" * rng.choice((10, 20000)), partition=rng.randrange(4), now=sim.now)
            core.client.next_deadline = lambda now: asked.append(now) or real(now)
            moved = core.next_deadline_after_appends(planned)
            del core.client.next_deadline
            assert not asked, "asked the network client for its timers again"
            assert moved == core.next_deadline(sim.now), (planned, moved)
            planned = moved
            checked += 1
    assert checked > 300
    sim.run_until(lambda: not core.pending)
    assert sum(len(kafka.values("t", p)) for p in range(4)) == checked + 1     # every record sent, and "warm"
