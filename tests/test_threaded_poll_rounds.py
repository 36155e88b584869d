"""The threading consumer runs the round poll() calls for on the polling
thread, once per poll() (kio._threaded.driver.PolledThreadDriver): once poll()
has drained a partition, its next Fetch is in flight before poll() returns,
and the network thread is not woken for it.

Before, every poll() woke the network thread twice (a socketpair write, a
select wake-up, the lock and the GIL changing hands): at 1,000 records/s most
of the consumer's CPU. A first version of this (branch ``lat``, reverted) ran
a whole core round per kick - two per poll(), each planning a Fetch over every
assigned partition - and made poll_batch() over 1,000 partitions five times
dearer. These tests fail if either comes back: the rounds per poll() and the
walks over the partitions are counted (the bounds are generous: the old code
did twice as many rounds as polls, and walked on each).
"""
import threading
import time

from kio import Consumer, Producer, TopicPartition as TP


def _count_wakes(consumer):
    """Count the calls of the consumer's SocketLoop.wake from now on."""
    net = consumer._net
    calls = [0]
    real = net.wake

    def counting_wake():
        calls[0] += 1
        real()
    net.wake = counting_wake
    return calls


def _count_plans_on(consumer, thread_id):
    """Count the fetch plans (walks over every assigned partition) made on this thread."""
    positions = consumer._core.positions
    calls = [0]
    real = positions.fetchable_states

    def counted():
        if threading.get_ident() == thread_id:
            calls[0] += 1
        return real()
    positions.fetchable_states = counted
    return calls


def test_a_record_reaches_poll_without_a_timer_and_without_waking_the_network_thread(bootstrap, broker_kind,
                                                                                      make_topic):
    """Kafka holds each Fetch for up to 10 s (fetch.max.wait.ms) and answers
    it when a record arrives: a record comes back within 5 s only if the
    Fetch for it was already in flight - sent by the poll() that drained
    the previous record, not by a later timer round of the network thread.
    (Tansu answers a held Fetch only when its wait ends, records or not:
    there the wait is 1 s and the Fetch in flight is what is checked.)"""
    topic = make_topic(1)
    tp = TP(topic, 0)
    records = 25
    wait_ms = 10_000 if broker_kind == "kafka" else 1_000
    with Producer(bootstrap_servers=bootstrap, linger_ms=0) as p, \
            Consumer(bootstrap_servers=bootstrap, enable_auto_commit=False, fetch_max_wait_ms=wait_ms) as c:
        c.assign([tp])
        c.seek(tp, 0)
        p.send(topic, b"first", partition=0).result(30)
        got = []
        end = time.monotonic() + 30
        while not got and time.monotonic() < end:
            got = c.poll(0.5)                    # connected, positioned, fetching
        assert [r.value for r in got] == [b"first"]

        wakes = _count_wakes(c)
        rounds_before = c._rounds_here
        polls = 0
        slowest = 0.0
        for i in range(records):
            p.send(topic, b"r%d" % i, partition=0).result(30)
            start = time.monotonic()
            got = []
            while not got and time.monotonic() < start + 30:
                got = c.poll(20.0)
                polls += 1
            slowest = max(slowest, time.monotonic() - start)
            assert [r.value for r in got] == [b"r%d" % i]
            with c._lock:
                # The Fetch for what comes next left on this thread, before
                # poll() returned (the broker holds it until records arrive).
                assert c._core.client.in_flight(), f"no Fetch in flight after poll() returned record {i}"
        assert slowest < 5.0, f"a record took {slowest:.1f} s to reach poll(): it waited for a timer"
        assert c._rounds_here - rounds_before <= polls          # one round per poll(), on this thread
        assert c._rounds_here - rounds_before >= records        # (and it did run them)
        # The old driver woke the network thread twice per poll(); now only a
        # round that leaves it work does (a connection, a partial write).
        assert wakes[0] <= polls // 5, f"{wakes[0]} network-thread wake-ups for {polls} polls"


def test_polls_over_many_partitions_run_one_round_each_and_plan_rarely(bootstrap, make_topic):
    partitions, per_partition, batch = 200, 10, 20
    topic = make_topic(partitions)
    with Producer(bootstrap_servers=bootstrap, linger_ms=5) as p:
        for i in range(partitions * per_partition):
            p.send(topic, b"v%d" % i, partition=i % partitions)
        assert p.flush(60) == 0
    tps = [TP(topic, i) for i in range(partitions)]
    with Consumer(bootstrap_servers=bootstrap, enable_auto_commit=False, max_poll_records=batch) as c:
        c.assign(tps)
        c.seek_to_beginning(tps)
        got = c.poll(10.0)                       # connected, positioned, the first answer in
        assert got
        plans = _count_plans_on(c, threading.get_ident())
        rounds_before = c._rounds_here
        polls, total = 0, len(got)
        end = time.monotonic() + 60
        while total < partitions * per_partition and time.monotonic() < end:
            total += len(c.poll(1.0))
            polls += 1
        assert total == partitions * per_partition
        assert polls >= 50
        assert c._rounds_here - rounds_before <= polls, (c._rounds_here - rounds_before, polls)
        # A plan walks all 200 partitions: only a poll after an answer makes
        # one (while its node has a Fetch in flight a drain sends nothing).
        assert plans[0] <= polls // 2, f"{plans[0]} fetch plans on the polling thread in {polls} polls"
