"""The producer's retries when a leader stops answering, on the three-node
cluster (the ``kafka_cluster`` fixture): a batch refused after the producer
learnt a newer leader goes to it without waiting the retry back-off (Java's
``hasLeaderChangedForTheOngoingRetry``), and idempotence still writes every
record once, in order.

The leader is frozen (SIGSTOP) under load: its connections stay open and
the Produce requests in flight get no answer. The controller fences it after
broker.session.timeout.ms (3 s here) and names new leaders with a newer
epoch; the producer learns them from Metadata (metadata.max.age.ms 500) while
its requests to the frozen node are still in flight; request.timeout.ms
(10 s) then fails them. With retry.backoff.ms = retry.backoff.max.ms = 2,000
the retry went 2.0-2.1 s after that failure before this change (no jitter when
the two are equal); now it goes
at once, to the new leader. Then the node is killed and started again."""
import os
import signal
import threading
import uuid

try:
    from cluster_load import ProduceLoad, report, restart_and_check
except ImportError:  # pragma: no cover
    from tests.cluster_load import ProduceLoad, report, restart_and_check

PARTITIONS = 6
BACKOFF_MS = 2000


class RetryClock:
    """Instruments a producer's core (its cache and sender, on the network
    thread): when the cache first names a leader other than the victim for
    each partition the victim led, when each batch failed, and when it was
    sent again - the retry gap. Works the same on a core from before this
    change (nothing it wraps is new)."""

    def __init__(self, core, topic):
        self.topic = topic
        self.victim = None
        self.victim_partitions = set()
        self.learnt = {}              # partition -> core time (ms) the cache named a new leader
        self.sent_to = {}             # id(batch) -> the node its last attempt went to
        self.failed = {}              # id(batch) -> (core time, node) of its last failure
        self.gaps = []                # (partition, failed at, node refused, retried at, node retried to)
        self._lock = threading.Lock()
        cluster, sender = core.cluster, core.sender
        update, send, complete = cluster.update, sender._send_produce, sender._complete

        def watched_update(body, now):
            update(body, now)
            self._leaders_seen(cluster, now)

        def watched_complete(b, err, base_offset, log_append_time, now, *rest, **kw):
            if err is not None and b.topic == topic:
                with self._lock:
                    self.failed[id(b)] = (now, self.sent_to.get(id(b)))
            return complete(b, err, base_offset, log_append_time, now, *rest, **kw)

        def watched_send(node, batches, now):
            with self._lock:
                for b in batches:
                    failure = self.failed.pop(id(b), None) if b.attempts > 0 else None
                    if failure is not None:
                        self.gaps.append((b.partition, failure[0], failure[1], now, node))
                    if b.topic == topic:
                        self.sent_to[id(b)] = node
            return send(node, batches, now)

        cluster.update = watched_update
        sender._complete = watched_complete
        sender._send_produce = watched_send

    def _leaders_seen(self, cluster, now):
        with self._lock:
            if self.victim is None:
                return
            for p in self.victim_partitions:
                leader = cluster.leader(self.topic, p)
                if leader is not None and leader != self.victim:
                    self.learnt.setdefault(p, now)

    def arm(self, victim, partitions):
        with self._lock:
            self.victim, self.victim_partitions = victim, set(partitions)

    def gaps_after_the_new_leader(self):
        """(partition, retry gap in ms, node retried to) of the batches sent
        to the victim that failed once the new leader was known. (Batches
        sent to the new leader meanwhile are refused OUT_OF_ORDER_SEQUENCE
        while lower sequences are still in flight to the frozen node: their
        leader did not move since, so they wait the back-off, as in Java.)"""
        with self._lock:
            return [(p, retried - failed, node) for p, failed, refused_by, retried, node in self.gaps
                    if refused_by == self.victim and p in self.learnt and failed >= self.learnt[p]]


def test_a_retry_after_the_leader_moved_goes_to_the_new_leader_without_the_backoff(kafka_cluster):
    cluster = kafka_cluster
    topic = cluster.create_topic(f"retry-{uuid.uuid4().hex[:8]}", PARTITIONS)
    load = ProduceLoad(cluster.bootstrap_servers, topic, PARTITIONS, acks="all", enable_idempotence=True,
                       retry_backoff_ms=BACKOFF_MS, retry_backoff_max_ms=BACKOFF_MS,
                       request_timeout_ms=10000, metadata_max_age_ms=500)
    core = load.producer._core
    clock = RetryClock(core, topic)
    load.start()
    victim = None
    try:
        load.wait_acked(500)
        leaders = {p: cluster.leader(topic, p) for p in range(PARTITIONS)}
        victim = leaders[0]
        clock.arm(victim, [p for p, n in leaders.items() if n == victim])
        os.kill(cluster.node(victim).process.pid, signal.SIGSTOP)
        load.wait_acked(1500, timeout=120)        # writes go on with the new leaders
    finally:
        load.stop()
        if victim is not None:
            cluster.kill(victim)                  # SIGKILL works on a stopped process
    metrics = core.metrics()
    total = restart_and_check(cluster, victim, load, topic, PARTITIONS,
                              "idempotent producer, retries to new leaders")

    gaps = clock.gaps_after_the_new_leader()
    report("idempotent producer, leader SIGSTOP, retry.backoff.ms 2000", load.stall.longest,
           records=total, stopped=victim, retry_gaps_ms=sorted(round(g) for _, g, _ in gaps),
           retries_to_new_leader=metrics.get("retries_to_new_leader"),
           backoffs_cut=metrics.get("backoffs_cut_by_new_leader"))
    assert set(clock.learnt) == clock.victim_partitions, (clock.learnt, clock.victim_partitions)
    assert gaps, (clock.gaps, clock.learnt)      # requests in flight to the frozen node failed after that
    assert all(node != victim for _, _, node in gaps), gaps
    # sent without the back-off (2,000 ms, no jitter here): the next round, or
    # as soon as the idempotent partition's batches in flight to the new
    # leader allow (a few to a few hundred ms on this loaded machine)
    assert max(gap for _, gap, _ in gaps) < 1000, gaps
    assert metrics["retries_to_new_leader"] >= len(gaps), metrics
