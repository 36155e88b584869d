"""KIP-227: a fetch session evicted from Kafka's own session cache, with
real consumers (a Kafka broker of this module's own, with a small cache).

Why Kafka kept no session at all with ``max.incremental.fetch.session.cache.slots=1``
(bench/RESULTS.md, branch fsess): Kafka 4.4 splits the cache into 8 shards
(``KafkaBroker.NumFetchSessionCacheShards``) of ``slots / 8`` sessions each
(integer division: 1 slot makes shards of 0), and gives each new session's
shard round-robin. With 8 slots each shard holds one session. A new session
may evict one of its shard (``FetchSessionCacheShard.tryEvict``) when that
one is stale (unused for 120 s, ``MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS``),
or, for a consumer's (unprivileged) session, when that one was created more
than 120 s ago and holds fewer partitions (``EvictableKey``: privileged, size,
id); a follower's (privileged) session evicts any consumer's.

So: 8 consumers of one partition each fill the 8 shards; after 120 s a
consumer of 12 partitions asks for a session and evicts one of them. The
evicted consumer's next incremental Fetch gets FETCH_SESSION_ID_NOT_FOUND
(70); it goes on with full requests (it cannot evict anyone in turn: the
others are as small, the new one too young), reading every record once,
in order."""
import os
import signal
import sys
import time

import pytest

from kio.testing import new_topic

try:
    import early_runs
    from test_fetch_session_broker import consumer_on, expected, produce, sessions
except ImportError:  # pragma: no cover
    from tests import early_runs
    from tests.test_fetch_session_broker import consumer_on, expected, produce, sessions

SHARDS = 8                 # Kafka 4.4: KafkaBroker.NumFetchSessionCacheShards
EVICTABLE_AFTER_S = 120    # MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS
WIDE = 12                  # partitions of the consumer that evicts
SCRIPT = "tests/test_fetch_session_eviction_broker.py"


def small_cache_kafka(log_path=None):
    """A Kafka broker (not started) whose fetch session cache has one slot per shard."""
    from kio.testing.kafka_broker import KafkaBroker
    return KafkaBroker(log_path=log_path, heap="320m",
                       config={"max.incremental.fetch.session.cache.slots": SHARDS})


def poll_all(consumers, got, seconds):
    """Poll every consumer in turn for ``seconds`` (their sessions stay in
    use), adding what they read to ``got`` ({partition: [value]})."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for c in consumers:
            for r in c.poll(0.02):
                got.setdefault(r.partition, []).append(r.value)


def poll_until(consumers, got, condition, timeout):
    end = time.monotonic() + timeout
    while not condition() and time.monotonic() < end:
        poll_all(consumers, got, 0.2)
    return condition()


@pytest.mark.broker        # its own Kafka (small_cache_kafka), not the matrix's `broker` fixture
@pytest.mark.early_run(SCRIPT)
def test_a_session_evicted_by_the_brokers_cache_is_replaced_by_full_requests(request):
    """The scenario (``evict_one_session``) waits 120 s on Kafka's fixed
    eviction age, so it runs as this file's ``__main__`` in a child started
    after the run's first test (tests/early_runs.py): its waiting overlaps the
    rest of the suite, and this test fails with its output if any of its
    checks failed."""
    if "kafka" not in [k.strip() for k in os.environ.get("KIO_TEST_BROKERS", "kafka").split(",")]:
        pytest.skip("the session cache is Apache Kafka's (KIO_TEST_BROKERS leaves it out)")
    code, output = early_runs.wait(request.node.nodeid, SCRIPT, timeout=600)
    print(output[-3000:])
    assert code == 0, output
    assert "[eviction] evicted: partition" in output, output


def evict_one_session(bootstrap):
    """8 one-partition consumers fill the 8 shards; once their sessions are
    120 s old a 12-partition consumer evicts exactly one, which reads on with
    full requests; every record is read once, in order."""
    topic = new_topic(bootstrap, SHARDS + WIDE, prefix="evict")
    every = range(SHARDS + WIDE)
    got: dict = {}
    produce(bootstrap, topic, every, 0, 10)
    small = [consumer_on(bootstrap, topic, [p]) for p in range(SHARDS)]
    wide = None
    try:
        # each small consumer's first, full Fetch opens a session in the next shard
        assert poll_until(small, got, lambda: all(
            s.state == "open" for c in small for s in sessions(c).values()) and all(sessions(c) for c in small), 60)
        assert poll_until(small, got, lambda: all(len(got.get(p, ())) >= 10 for p in range(SHARDS)), 60)
        opened_at = time.monotonic()
        # the sessions must be older than 120 s to be evictable by a larger one
        poll_all(small, got, EVICTABLE_AFTER_S + 5 - (time.monotonic() - opened_at))
        assert all(sum(s.errors.get(70, 0) for s in sessions(c).values()) == 0 for c in small)

        wide = consumer_on(bootstrap, topic, range(SHARDS, SHARDS + WIDE))
        everyone = small + [wide]

        def evicted():
            return [c for c in small if any(s.errors.get(70) for s in sessions(c).values())]

        assert poll_until(everyone, got, lambda: evicted() and all(
            s.state == "open" for s in sessions(wide).values()) and sessions(wide), 60), \
            [sessions(c) for c in everyone]
        (victim,) = evicted()
        # the evicted consumer reads on with full requests; the others keep their sessions
        produce(bootstrap, topic, every, 10, 10)
        assert poll_until(everyone, got, lambda: all(len(got.get(p, ())) >= 20 for p in every), 60)
        poll_all(everyone, got, 1.0)                 # nothing more comes: none read twice
        assert got == expected(every, 0, 20)
        victim_sessions = list(sessions(victim).values())
        assert sum(s.full_sent for s in victim_sessions) >= 2
        others = [c for c in small if c is not victim]
        assert all(s.state == "open" and not s.errors for c in others for s in sessions(c).values())
        print(f"\n[eviction] evicted: partition {small.index(victim)} {victim_sessions}; "
              f"the evicting consumer: {list(sessions(wide).values())}", flush=True)
    finally:
        for c in small + ([wide] if wide is not None else []):
            c.close()


def main() -> int:
    """Runs the scenario on a small-cache Kafka of its own; exit status 0 when
    every check held (what the test above asserts), 1 with the traceback and
    the broker log's tail otherwise."""
    import tempfile
    import traceback

    # SIGTERM (the suite ending before the test waited) still runs the
    # finally blocks below: the consumers close and the broker stops.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    log_path = os.path.join(tempfile.mkdtemp(prefix="fsess-evict-"), "kafka.log")
    broker = small_cache_kafka(log_path)
    try:
        broker.start()
        evict_one_session(broker.bootstrap_servers)
        return 0
    except Exception:  # noqa: BLE001 - reported to the waiting test with the broker's log
        traceback.print_exc()
        print(f"kafka broker log (tail):\n{broker.log_tail()}", flush=True)
        return 1
    finally:
        broker.stop()


if __name__ == "__main__":
    sys.exit(main())
