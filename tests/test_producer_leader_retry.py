"""When a NOT_LEADER_OR_FOLLOWER answer retries at once and when it waits,
without a network (issue 27: a topic created a moment before).

Java retries without the back-off only when the leader changed for the
ongoing retry (KIP-951: a newer epoch, another node); a broker still taking
the leadership of a new partition answers NOT_LEADER_OR_FOLLOWER naming
itself, and that retry waits retry.backoff.ms, growing. A partition whose
metadata names no leader (LEADER_NOT_AVAILABLE, leader -1) is not sent to
until a Metadata answer names one."""
import pytest

try:
    from test_producer_core import FakeKafka, make
except ImportError:  # pragma: no cover
    from tests.test_producer_core import FakeKafka, make

NOT_LEADER, LEADER_NOT_AVAILABLE = 6, 5


class TakingLeadershipKafka(FakeKafka):
    """The partitions' leader refuses the first ``refusals`` Produce answers
    with NOT_LEADER_OR_FOLLOWER and a KIP-951 hint naming ``hint_leader`` at
    ``hint_epoch`` (by default itself, at the epoch its Metadata gives: what
    Kafka answers while it creates a new partition's log). Metadata carries
    ``metadata_epoch`` (None: no leader_epoch field, as before Metadata v7)."""

    def __init__(self, refusals, metadata_epoch=0, hint_leader=None, hint_epoch=None, **kw):
        super().__init__(**kw)
        self.refusals = refusals
        self.metadata_epoch = metadata_epoch
        self.hint_leader = hint_leader
        self.hint_epoch = metadata_epoch if hint_epoch is None else hint_epoch
        self.produce_times = []
        self.metadata_times = []
        self.now = lambda: 0

    def _metadata(self, req):
        self.metadata_times.append(self.now())
        body = super()._metadata(req)
        if self.metadata_epoch is not None:
            for t in body["topics"]:
                for p in t["partitions"]:
                    p["leader_epoch"] = self.metadata_epoch
        return body

    def _produce(self, node, req):
        self.produce_times.append(self.now())
        body = super()._produce(node, req)
        if isinstance(body, dict):
            body["node_endpoints"] = [{"node_id": n, "host": f"b{n}", "port": 9092, "rack": None}
                                      for n in self.brokers]
        return body

    def _append(self, node, tp, data):
        if self.refusals > 0 and self.leader(*tp) == node:
            self.refusals -= 1
            leader = node if self.hint_leader is None else self.hint_leader
            if self.hint_leader is not None:
                self.leaders[tp] = leader                   # the leadership moved there
            return {"index": tp[1], "error_code": NOT_LEADER, "base_offset": -1, "log_append_time_ms": -1,
                    "log_start_offset": 0,
                    "current_leader": {"leader_id": leader, "leader_epoch": self.hint_epoch}}
        return super()._append(node, tp, data)


def _run(kafka, **cfg):
    core, kafka, sim = make(kafka, enable_idempotence=False, acks=1, linger_ms=0,
                            retry_backoff_ms=100, retry_backoff_max_ms=1000, **cfg)
    kafka.now = lambda: sim.now
    h = sim.send(b"v")
    sim.run_until(lambda: h.done)
    assert h.error is None and kafka.values() == [b"v"]
    return core, [b - a for a, b in zip(kafka.produce_times, kafka.produce_times[1:])]


@pytest.mark.parametrize("metadata_epoch", [0, 5, None], ids=["epoch-0", "epoch-5", "no-epoch-in-metadata"])
def test_a_hint_naming_the_refusing_leader_waits_the_growing_retry_backoff(metadata_epoch):
    kafka = TakingLeadershipKafka(refusals=3, metadata_epoch=metadata_epoch,
                                  hint_epoch=0 if metadata_epoch is None else None)
    core, gaps = _run(kafka)
    assert len(gaps) == 3
    # retry.backoff.ms 100, 200, 400 (+-20% jitter): the hint told nothing new
    for gap, base in zip(gaps, [100, 200, 400]):
        assert base * 0.8 - 1 <= gap <= base * 1.2 + 1, gaps
    assert core.cluster.leader_hints_applied == 0
    assert core.metrics()["retries"] == 3


def test_metadata_requests_while_the_leader_refuses_are_one_per_retry_at_most():
    kafka = TakingLeadershipKafka(refusals=3)
    core, gaps = _run(kafka)
    first_produce = kafka.produce_times[0]
    after = [t for t in kafka.metadata_times if t > first_produce]
    # each refusal asks for one refresh (coalesced, after the metadata
    # back-off), not one per round
    assert 1 <= len(after) <= 3, (kafka.metadata_times, kafka.produce_times)
    assert all(b - a >= 100 * 0.8 for a, b in zip(kafka.metadata_times, kafka.metadata_times[1:]))


@pytest.mark.parametrize("hint_leader,hint_epoch", [(2, 1), (1, 1)], ids=["another-node", "newer-epoch-same-node"])
def test_a_hint_naming_a_changed_leader_is_retried_at_once(hint_leader, hint_epoch):
    kafka = TakingLeadershipKafka(refusals=1, metadata_epoch=0, hint_leader=hint_leader, hint_epoch=hint_epoch,
                                  nodes=(1, 2))
    core, gaps = _run(kafka)
    assert len(gaps) == 1 and gaps[0] < 100 * 0.8 - 1, gaps       # no back-off (KIP-951)
    assert core.cluster.leader_hints_applied == 1
    assert core.cluster.leader("t", 0) == hint_leader
    assert [n for n, _ in kafka.produce_requests] == [1, hint_leader]


def test_a_hint_naming_another_node_is_taken_when_metadata_has_no_epoch():
    kafka = TakingLeadershipKafka(refusals=1, metadata_epoch=None, hint_leader=2, hint_epoch=0, nodes=(1, 2))
    core, gaps = _run(kafka)
    assert gaps[0] < 100 * 0.8 - 1 and core.cluster.leader("t", 0) == 2


class LeaderlessKafka(FakeKafka):
    """Metadata says LEADER_NOT_AVAILABLE (leader -1) for the partitions while
    ``leaderless``; a Produce request to a leaderless partition would be
    refused (it is a test failure here: none may come)."""

    leaderless = True

    def __init__(self, **kw):
        super().__init__(**kw)
        self.metadata_answers = 0

    def _metadata(self, req):
        self.metadata_answers += 1
        body = super()._metadata(req)
        if self.leaderless:
            for t in body["topics"]:
                for p in t["partitions"]:
                    p.update(leader_id=-1, error_code=LEADER_NOT_AVAILABLE, replica_nodes=[], isr_nodes=[])
        return body


def test_a_partition_without_a_leader_is_not_drained_until_metadata_names_one():
    kafka = LeaderlessKafka()
    core, kafka, sim = make(kafka, enable_idempotence=False, linger_ms=0, retry_backoff_ms=100,
                            retry_backoff_max_ms=1000)
    h = sim.send(b"v")                      # the partition count is known, its leader is not
    assert core.cluster.leader("t", 0) is None
    start, answers = sim.now, kafka.metadata_answers
    sim.run_until(lambda: sim.now - start >= 2000)
    assert kafka.produce_requests == [] and not h.done
    # asked again with the growing back-off (100, 200, 400, 800, 1000 ms), not every round
    assert 2 <= kafka.metadata_answers - answers <= 6
    kafka.leaderless = False
    sim.run_until(lambda: h.done)
    assert h.error is None and kafka.values() == [b"v"]
    assert [n for n, _ in kafka.produce_requests] == [1]
