"""The producer's retry back-off and a new leader, as Java's (no network).

Java (``RecordAccumulator.ready``/``drain``: ``ProducerBatch.maybeUpdateLeaderEpoch``,
``hasLeaderChangedForTheOngoingRetry``, ``shouldBackoff``) retries a refused
batch without waiting retry.backoff.ms when the partition's leader epoch rose
since the batch's last attempt - whether the newer leader came from the
answer's KIP-951 hint or from a Metadata refresh, before the answer or while
the batch waits. With the same epoch the retry waits the exponential
back-off (retry.backoff.ms doubling, capped at retry.backoff.max.ms). On
NOT_LEADER_OR_FOLLOWER Java asks for a Metadata refresh and keeps the leader
it knows (``Sender.completeBatch``: ``metadata.requestUpdate(false)``)."""
try:
    from test_producer_core import FakeKafka, make
except ImportError:  # pragma: no cover
    from tests.test_producer_core import FakeKafka, make

TP = ("t", 0)


class MovingLeaderKafka(FakeKafka):
    """Two brokers; Metadata carries each partition's leader epoch, which
    ``move`` raises with the leader (KRaft: every new leader has a new
    epoch). A Produce to a node that is not the leader is refused with
    NOT_LEADER_OR_FOLLOWER and no hint (FakeKafka), as a broker that does not
    know the new leader yet, or answers an older Produce version, does."""

    def __init__(self, **kw):
        super().__init__(nodes=(1, 2), **kw)
        self.epochs = {}
        self.produce_times = []
        self.metadata_times = []
        self.now = lambda: 0

    def move(self, tp, node, epoch_step=1):
        self.leaders[tp] = node
        self.epochs[tp] = self.epochs.get(tp, 0) + epoch_step

    def _metadata(self, req):
        self.metadata_times.append(self.now())
        body = super()._metadata(req)
        for t in body["topics"]:
            for p in t["partitions"]:
                p["leader_epoch"] = self.epochs.get((t["name"], p["partition_index"]), 0)
        return body

    def _produce(self, node, req):
        self.produce_times.append(self.now())
        return super()._produce(node, req)


def _producer(retry_backoff_ms, retry_backoff_max_ms):
    kafka = MovingLeaderKafka()
    core, kafka, sim = make(kafka, enable_idempotence=False, acks=1, linger_ms=0,
                            retry_backoff_ms=retry_backoff_ms, retry_backoff_max_ms=retry_backoff_max_ms)
    kafka.now = lambda: sim.now
    h = sim.send(b"first")                      # metadata known, the partition written once
    sim.run_until(lambda: h.done)
    assert h.error is None
    sim.advance(5000)                           # the next refresh is not held back by its back-off
    return core, kafka, sim


def test_a_retry_after_a_metadata_refresh_with_a_newer_epoch_does_not_wait_the_backoff():
    core, kafka, sim = _producer(2000, 2000)
    kafka.move(TP, 2)                           # node 1 refuses, without a hint
    start = len(kafka.produce_times)
    h = sim.send(b"v")
    sim.run_until(lambda: h.done)
    assert h.error is None and kafka.values() == [b"first", b"v"]
    refused, retried = kafka.produce_times[start:]
    # the refusal asked for Metadata, whose answer named node 2 at epoch 1
    # while the batch waited: it went at once, not after ~2,000 ms
    assert retried - refused < 100, kafka.produce_times
    assert [n for n, _ in kafka.produce_requests[start:]] == [1, 2]
    assert any(refused <= t <= retried for t in kafka.metadata_times)
    m = core.metrics()
    assert m["retries"] == 1 and m["backoffs_cut_by_new_leader"] == 1 and m["retries_to_new_leader"] == 0
    assert core.cluster.leader_hints_applied == 0


def test_a_retry_with_the_same_epoch_waits_the_backoff():
    core, kafka, sim = _producer(2000, 2000)
    kafka.inject(*TP, 6)                        # NOT_LEADER_OR_FOLLOWER once; the leader stays
    start = len(kafka.produce_times)
    h = sim.send(b"v")
    sim.run_until(lambda: h.done)
    assert h.error is None and kafka.values() == [b"first", b"v"]
    refused, retried = kafka.produce_times[start:]
    assert 2000 * 0.8 - 1 <= retried - refused <= 2000 + 1, kafka.produce_times
    assert any(refused <= t < retried for t in kafka.metadata_times)    # refreshed, nothing newer
    assert core.metrics()["backoffs_cut_by_new_leader"] == 0


def test_the_exponential_backoff_is_capped_at_retry_backoff_max_ms_when_the_leader_stays():
    core, kafka, sim = _producer(100, 300)
    kafka.inject(*TP, 6, 6, 6, 6, 6)
    start = len(kafka.produce_times)
    h = sim.send(b"v")
    sim.run_until(lambda: h.done)
    assert h.error is None
    times = kafka.produce_times[start:]
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert len(gaps) == 5
    # 100 and 200 ms (+-20%), then 100 * 2**log2(3) = 300 (+-20%) capped at 300
    for gap, (lo, hi) in zip(gaps, [(80, 120), (160, 240), (240, 300), (240, 300), (240, 300)]):
        assert lo - 1 <= gap <= hi + 1, gaps


def test_a_leader_that_moved_while_the_batch_was_in_flight_is_retried_at_once():
    from types import SimpleNamespace
    core, kafka, sim = _producer(2000, 2000)
    kafka.move(TP, 2)                           # node 1 will refuse; its answer is held
    kafka.hold_replies = True
    start = len(kafka.produce_times)
    h = sim.send(b"v")
    sim.run_until(lambda: len(kafka.produce_times) > start)
    # a Metadata answer naming node 2 at epoch 1 comes while the Produce is in flight
    core.cluster.update(kafka._metadata(SimpleNamespace(body={"topics": [{"name": "t"}]})), sim.now)
    assert core.cluster.leader(*TP) == 2
    kafka.hold_replies = False
    sim.advance(10)
    answered = sim.now
    sim.release(1)                              # the refusal
    sim.run_until(lambda: h.done)
    assert h.error is None and kafka.values() == [b"first", b"v"]
    assert [n for n, _ in kafka.produce_requests[start:]] == [1, 2]
    assert kafka.produce_times[-1] - answered < 100, kafka.produce_times
    m = core.metrics()
    assert m["retries_to_new_leader"] == 1 and m["backoffs_cut_by_new_leader"] == 0


def test_not_leader_keeps_the_known_leader_and_asks_for_a_refresh():
    core, kafka, sim = _producer(2000, 2000)
    kafka.inject(*TP, 6)
    version = core.cluster.version
    h = sim.send(b"v")
    sim.run_until(lambda: core.metrics()["retries"] == 1)
    # Java: metadata.requestUpdate(false) - the cached leader stays (the
    # partitioner keeps the partition, the drain keeps its node lists)
    assert core.cluster.leader(*TP) == 1
    assert core.cluster.available_partitions("t") == (0,)
    sim.run_until(lambda: core.cluster.version > version)
    sim.run_until(lambda: h.done)
    assert h.error is None


def test_a_hint_with_a_newer_epoch_retries_at_once_and_still_refreshes_metadata():
    core, kafka, sim = _producer(2000, 2000)
    start_meta = len(kafka.metadata_times)
    # node 1 answers NOT_LEADER naming node 2 at epoch 1 (KIP-951)
    real_append = kafka._append

    def hinted(node, tp, data):
        if node == 1 and tp == TP:
            kafka.move(TP, 2)
            return {"index": 0, "error_code": 6, "base_offset": -1, "log_append_time_ms": -1,
                    "log_start_offset": 0, "current_leader": {"leader_id": 2, "leader_epoch": 1}}
        return real_append(node, tp, data)

    kafka._append = hinted
    start = len(kafka.produce_times)
    h = sim.send(b"v")
    sim.run_until(lambda: h.done)
    assert h.error is None and kafka.values() == [b"first", b"v"]
    refused, retried = kafka.produce_times[start:]
    assert retried - refused < 100
    m = core.metrics()
    assert m["retries_to_new_leader"] == 1 and core.cluster.leader_hints_applied == 1
    sim.advance(300)
    assert len(kafka.metadata_times) > start_meta        # Java refreshes even after a hint
