"""The threading consumer sends what poll() calls for from the polling thread
(kio._threaded.driver.ThreadDriver._round_here): once poll() has drained a
partition, its next Fetch is in flight before poll() returns, and the network
thread is not woken for it. Before, every poll() woke the network thread
(a socketpair write, a select wake-up, the lock and the GIL changing hands
twice), and the next Fetch left only once that thread had been scheduled:
on a busy machine the records produced meanwhile waited for it (issue 27's
latency tail), and the wake-ups were most of the consumer's CPU at low rates.

Deterministic: the counts do not depend on timing - the wake-up bound is
generous, the old code woke the network thread at least once per poll()."""
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


def test_poll_sends_the_next_fetch_itself_without_waking_the_network_thread(bootstrap, make_topic):
    topic = make_topic(1)
    tp = TP(topic, 0)
    records = 25
    with Producer(bootstrap_servers=bootstrap, linger_ms=0) as p, \
            Consumer(bootstrap_servers=bootstrap, enable_auto_commit=False) as c:
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
        for i in range(records):
            p.send(topic, b"r%d" % i, partition=0).result(30)
            got = []
            end = time.monotonic() + 30
            while not got and time.monotonic() < end:
                got = c.poll(5.0)
                polls += 1
            assert [r.value for r in got] == [b"r%d" % i]
            with c._lock:
                # The Fetch for what comes next left on this thread, before
                # poll() returned (the broker holds it until records arrive).
                assert c._core.client.in_flight(), f"no Fetch in flight after poll() returned record {i}"
        assert polls >= records
        assert c._rounds_here - rounds_before >= 2 * polls     # poll()'s start and end, on this thread
        # The old driver woke the network thread twice per poll(); now only a
        # round that leaves it work does (a connection, a partial write).
        assert wakes[0] <= polls // 5, f"{wakes[0]} network-thread wake-ups for {polls} polls"


def test_a_commit_with_a_short_timeout_still_wakes_the_network_thread_for_its_deadline(bootstrap, make_topic):
    """A round on the polling thread that gives the core a deadline earlier
    than the network thread's next wake-up wakes it (else the timeout would
    fire only at that later wake-up)."""
    topic = make_topic(1)
    tp = TP(topic, 0)
    with Consumer(bootstrap_servers=bootstrap, group_id="g-" + topic, enable_auto_commit=False) as c:
        c.assign([tp])
        c.seek(tp, 0)
        c.poll(0.5)
        with c._lock:
            planned = c._planned
        assert planned is not None and planned <= time.monotonic() * 1000 + c.config.request_timeout_ms + 1000
        wakes = _count_wakes(c)
        c._round_here()
        assert wakes[0] == 0                    # nothing new: the network thread sleeps on
        with c._lock:
            c._planned = time.monotonic() * 1000 + 3_600_000     # as if it slept for an hour
        c.commit({tp: 0}, timeout=5)            # its deadline is earlier: wakes it, and completes
        assert wakes[0] >= 1
