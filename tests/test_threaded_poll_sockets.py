"""The threading consumer's poll() waits on the sockets itself
(kio._threaded.driver.PolledThreadDriver): while the application keeps
polling, an answer is read, decoded and handed over on the polling thread,
and the network thread stands by - it runs the core's timers while the
application is between two polls, and takes the sockets back when the
application has not waited for a while (heartbeats and commits go on while it
is busy). These tests fail if the per-answer hand-off between the threads
comes back, or if a busy application loses its group membership, its
commits, its rebalances, wakeup() or the one-thread check.
"""
import threading
import time
import uuid

import pytest

from kio import Consumer, ConsumerThreadError, Producer, TopicPartition as TP, WakeupError
from test_threaded_poll_rounds import _count_wakes

GROUP = dict(session_timeout_ms=6000, heartbeat_interval_ms=500)


def _count_by_thread(obj, name):
    """{thread ident: calls of ``obj.name``} from now on."""
    counts = {}
    real = getattr(obj, name)

    def counting(*args):
        me = threading.get_ident()
        counts[me] = counts.get(me, 0) + 1
        return real(*args)
    setattr(obj, name, counting)
    return counts


def _count_selects(consumer):
    """{thread ident: select calls} of the consumer's SocketLoop from now on."""
    return _count_by_thread(consumer._net, "select")


def _count_core_rounds(consumer):
    """{thread ident: rounds of the core (ConsumerCore.poll)} from now on."""
    return _count_by_thread(consumer._core, "poll")


def _produce(bootstrap, topic, n, start=0, partitions=1):
    with Producer(bootstrap_servers=bootstrap, linger_ms=2) as p:
        for i in range(start, start + n):
            p.send(topic, b"v%d" % i, partition=i % partitions)
        assert p.flush(30) == 0


def test_answers_are_read_on_the_polling_thread_with_no_hand_off(bootstrap, make_topic):
    """One record at a time, each polled as it arrives: every answer is read
    by poll()'s own select; the network thread neither selects nor is woken
    for any of them (the old driver: one select wake-up, one Condition
    notify and a socketpair write per answer)."""
    topic = make_topic(1)
    tp = TP(topic, 0)
    records = 40
    with Producer(bootstrap_servers=bootstrap, linger_ms=0) as p, \
            Consumer(bootstrap_servers=bootstrap, enable_auto_commit=False) as c:
        c.assign([tp])
        c.seek(tp, 0)
        p.send(topic, b"first", partition=0).result(30)
        got = []
        end = time.monotonic() + 30
        while not got and time.monotonic() < end:
            got = c.poll(0.5)                          # connected, fetching, the sockets handed over
        assert [r.value for r in got] == [b"first"]
        assert c.poll(0.3) == []                       # waits: the hand-over of the sockets is done
        assert not c._net_selects
        selects, wakes = _count_selects(c), _count_wakes(c)
        rounds = _count_core_rounds(c)
        handovers, takebacks = c._handovers, c._takebacks
        me = threading.get_ident()
        for i in range(records):
            p.send(topic, b"r%d" % i, partition=0).result(30)
            got = []
            deadline = time.monotonic() + 30
            while not got and time.monotonic() < deadline:
                got = c.poll(5.0)
            assert [r.value for r in got] == [b"r%d" % i]
            with c._lock:
                assert c._core.client.in_flight(), f"no Fetch in flight after poll() returned record {i}"
        net_selects = sum(n for t, n in selects.items() if t != me)
        assert selects.get(me, 0) >= records, selects       # each answer read by poll()'s own select
        # One round of the core per answer (poll()'s, which sends the next
        # Fetch), a few more for the empty Fetch answers of a slow producer;
        # none on the network thread.
        assert records <= rounds.get(me, 0) <= 2 * records, rounds
        assert sum(n for t, n in rounds.items() if t != me) == 0, rounds
        # The producer's .result() between two polls takes a few ms, far
        # below the hand-back time: the network thread never took the
        # sockets back, never selected, and was never woken.
        assert c._takebacks == takebacks and c._handovers == handovers, (c._takebacks, c._handovers)
        assert net_selects == 0, selects
        assert wakes[0] == 0, f"{wakes[0]} wake-ups of the selector for {records} records"


def test_a_busy_application_keeps_its_membership_and_gets_the_sockets_back(bootstrap, make_topic):
    """The application does not poll for longer than session.timeout.ms / 3
    four times (12 s in all, twice session.timeout.ms; less than
    max.poll.interval.ms each time): the network thread takes the sockets
    back and heartbeats, the member stays in the group (no revocation, the
    same generation), and each poll() afterwards gets the sockets again with
    one hand-over."""
    topic = make_topic(2)
    _produce(bootstrap, topic, 10, partitions=2)
    events = []
    with Consumer(bootstrap_servers=bootstrap, group_id="g-" + uuid.uuid4().hex[:8], auto_offset_reset="earliest",
                  enable_auto_commit=False, max_poll_interval_ms=60000, **GROUP) as c:
        c.subscribe([topic], on_assign=lambda ps: events.append(("assign", len(ps))),
                    on_revoke=lambda ps: events.append(("revoke", len(ps))),
                    on_lost=lambda ps: events.append(("lost", len(ps))))
        got = []
        end = time.monotonic() + 30
        while len(got) < 10 and time.monotonic() < end:
            got += c.poll(0.5)
        assert len(got) == 10 and events == [("assign", 2)]
        generation = c._core.membership.generation_id
        for k in range(4):
            takebacks, handovers = c._takebacks, c._handovers
            time.sleep(3.0)                         # busy: 1.5 × session.timeout.ms / 3
            assert c._takebacks == takebacks + 1, "the network thread did not take the sockets back"
            assert c._net_selects
            _produce(bootstrap, topic, 2, start=10 + 2 * k, partitions=2)
            more = []
            end = time.monotonic() + 10
            while len(more) < 2 and time.monotonic() < end:
                more += c.poll(0.5)
            assert sorted(r.value for r in more) == sorted([b"v%d" % (10 + 2 * k), b"v%d" % (11 + 2 * k)])
            assert c.poll(0.3) == []                # waits: on the sockets again
            assert c._handovers == handovers + 1 and not c._net_selects
        assert events == [("assign", 2)], events       # never revoked or lost: the heartbeats went on
        assert c._core.membership.generation_id == generation


def test_commits_and_a_rebalance_while_poll_waits_in_select(bootstrap, make_topic):
    """A consumer blocked in poll() (waiting on the sockets itself): its
    auto-commits go out, an asynchronous commit's callback runs inside the
    poll, and a second member joining makes that poll run the revocation and
    assignment listeners - all without the network thread."""
    topic = make_topic(2)
    group = "g-" + uuid.uuid4().hex[:8]
    _produce(bootstrap, topic, 10, partitions=2)
    events, commits = [], []
    with Consumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                  auto_commit_interval_ms=200, **GROUP) as a:
        a.subscribe([topic], on_assign=lambda ps: events.append(("assign", sorted(p.partition for p in ps))),
                    on_revoke=lambda ps: events.append(("revoke", sorted(p.partition for p in ps))))
        got = []
        end = time.monotonic() + 30
        while len(got) < 10 and time.monotonic() < end:
            got += a.poll(0.5)
        assert len(got) == 10
        a.commit(asynchronous=True, callback=lambda offsets, error: commits.append((offsets, error)))
        assert a.poll(1.5) == []                  # the callback runs in here; auto-commits go out
        assert len(commits) == 1 and commits[0][1] is None
        assert {tp.partition: o.offset for tp, o in commits[0][0].items()} == {0: 5, 1: 5}
        with Consumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False) as reader:
            committed = reader.committed([TP(topic, 0), TP(topic, 1)], timeout=10)
        assert {tp.partition: o.offset for tp, o in committed.items()} == {0: 5, 1: 5}

        joined = threading.Event()

        def second_member():
            with Consumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                          **GROUP) as b:
                b.subscribe([topic])
                end = time.monotonic() + 30
                while not b.assignment() and time.monotonic() < end:
                    b.poll(0.2)
                joined.set()
                while not stop.is_set():
                    b.poll(0.2)
        stop = threading.Event()
        t = threading.Thread(target=second_member)
        t.start()
        try:
            end = time.monotonic() + 30
            while not joined.is_set() and time.monotonic() < end:
                assert a.poll(5.0) == []          # the rebalance happens inside these polls
            assert joined.is_set()
            assert events[0] == ("assign", [0, 1]) and ("revoke", [0, 1]) in events
            assert len(a.assignment()) == 1
        finally:
            stop.set()
            t.join()
        assert a.poll(0.2) == [] and not a._net_selects     # poll() waits on the sockets


def test_wakeup_and_another_thread_while_poll_waits_in_select(bootstrap, make_topic):
    """While one thread waits in poll() on the sockets: wakeup() from another
    thread makes it raise WakeupError at once; close() and poll() from a
    second thread raise ConsumerThreadError (as Java's
    ConcurrentModificationException) and leave the consumer working."""
    topic = make_topic(1)
    tp = TP(topic, 0)
    c = Consumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    outcome = {}
    in_poll = threading.Event()

    def owner():
        c.assign([tp])
        c.seek(tp, 0)
        c.poll(1.0)                                 # the sockets handed over
        in_poll.set()
        start = time.monotonic()
        try:
            c.poll(20.0)
        except WakeupError:
            outcome["woken_after"] = time.monotonic() - start
        start = time.monotonic()
        got = []
        while not got and time.monotonic() < start + 20:
            got = c.poll(1.0)
        outcome["after"] = [r.value for r in got]
        c.close()
        outcome["closed"] = True

    t = threading.Thread(target=owner)
    t.start()
    try:
        assert in_poll.wait(30)
        time.sleep(0.3)
        with c._lock:
            assert c._app_selects or c._waiters, "poll() is not waiting"
        with pytest.raises(ConsumerThreadError, match="thread"):
            c.close()
        with pytest.raises(ConsumerThreadError, match="thread"):
            c.poll(0.1)
        time.sleep(0.2)
        c.wakeup()
        time.sleep(0.5)
        _produce(bootstrap, topic, 1)
    finally:
        t.join(60)
    assert outcome.get("woken_after", 99) < 1.0, outcome
    assert outcome["after"] == [b"v0"] and outcome["closed"]


def test_an_idle_member_blocked_in_poll_wakes_the_standing_by_thread_once_per_heartbeat(bootstrap, make_topic):
    """A group member on an empty topic blocked in one poll() for 8 s
    (over session.timeout.ms, four times session.timeout.ms / 3): poll()'s
    own selects run the heartbeats and the member keeps its generation,
    while the standing-by network thread sleeps towards the core's next
    timer - about one wake-up per heartbeat (16), however many selects
    poll() starts (~60: each held Fetch's end and each heartbeat's) - where
    the old stand-by looked at its timer every 100 ms (~80). It never takes
    the sockets over and never selects."""
    topic = make_topic(1)
    events = []
    with Consumer(bootstrap_servers=bootstrap, group_id="g-" + uuid.uuid4().hex[:8], auto_offset_reset="earliest",
                  enable_auto_commit=False, **GROUP) as c:
        c.subscribe([topic], on_assign=lambda ps: events.append(("assign", len(ps))),
                    on_revoke=lambda ps: events.append(("revoke", len(ps))),
                    on_lost=lambda ps: events.append(("lost", len(ps))))
        end = time.monotonic() + 30
        while not events and time.monotonic() < end:
            assert c.poll(0.5) == []
        assert c.poll(1.0) == []                  # the group settled; poll() has the sockets
        assert events == [("assign", 1)] and not c._net_selects
        generation = c._core.membership.generation_id
        takebacks, handovers = c._takebacks, c._handovers
        wakes = _count_by_thread(c._standby, "wait")
        selects = _count_selects(c)
        start = time.monotonic()
        assert c.poll(8.0) == []
        took = time.monotonic() - start
        me = threading.get_ident()
        network_wakes = wakes.get(c._thread.ident, 0)
        assert took >= 7.9
        assert set(selects) == {me}, "the network thread selected on the sockets while poll() had them"
        assert selects[me] > took * 1000 / GROUP["heartbeat_interval_ms"], selects   # (what it no longer follows)
        assert c._takebacks == takebacks and c._handovers == handovers
        assert network_wakes <= took * 1000 / GROUP["heartbeat_interval_ms"] + 4, (network_wakes, selects[me])
        assert events == [("assign", 1)], events       # never revoked or lost: the heartbeats went on
        assert c._core.membership.generation_id == generation
