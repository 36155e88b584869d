"""What a quiet producer's core no longer calls per round (issue 27, branch psend).

At 1,000 records/s a batch holds one record and costs two rounds (its
linger timer's, its answer's), most with nothing due. These tests pin what
such rounds no longer do, over the scripted broker of the core's tests
(fake clock, no network): work out the metadata refresh time or ask the
telemetry for its deadline (both are read as fields, kept up to date by
their owners: ``ClusterMetadata.update_due_ms``, ``ClientTelemetry.send_at``),
run the accumulator's ``ready``/``expired`` over empty queues or the
answer-round promise with none made, ask the connection's version table
for the Produce version of every request, or go through the ``DriverIO``
methods rather than the network client's own. And that the kept values
are the ones the full computations give, over random states.
"""
import random

import pytest

from kproto.cluster import ClusterMetadata
from kproto.telemetry import ClientTelemetry, TelemetryState
from call_counter import Calls, PatchableNetworkClient, patchable_network_clients

try:
    from test_producer_core import FakeKafka, make
except ImportError:  # pragma: no cover
    from tests.test_producer_core import FakeKafka, make


def quiet_batches(core, sim, count=40, every_ms=10):
    """One record every ``every_ms`` ms to partition 0, a driver round each
    millisecond (most with nothing due), the core's deadline asked after
    each; returns the handles."""
    handles = []
    for i in range(count):
        handles.append(core.send("t", b"v%d" % i, partition=0, now=sim.now))
        for _ in range(every_ms):
            sim.now += 1
            sim.step()
            core.next_deadline(sim.now)
    return handles


@pytest.fixture
def warm(monkeypatch):
    """A producer core over the scripted broker that sent one record, with
    telemetry on; its network client takes :class:`Calls` (a subclass)."""
    patchable_network_clients(monkeypatch)
    kafka = FakeKafka()
    for b in kafka.brokers.values():      # (a broker with the telemetry APIs, subscribing to nothing)
        b.versions["GetTelemetrySubscriptions"] = (0, 0)
        b.versions["PushTelemetry"] = (0, 0)
        b.on("GetTelemetrySubscriptions", lambda req: {
            "error_code": 0, "client_instance_id": req.body["client_instance_id"], "subscription_id": 1,
            "accepted_compression_types": [0], "push_interval_ms": 300000, "telemetry_max_bytes": 1 << 20,
            "delta_temporality": True, "requested_metrics": []})
    core, kafka, sim = make(kafka, linger_ms=5, enable_metrics_push=True)
    sim.send(b"warm")
    sim.run_until(lambda: not core.pending)
    sim.advance(1)
    assert core.client.telemetry is not None
    assert type(core.client) is PatchableNetworkClient
    return core, kafka, sim


def test_quiet_rounds_read_the_metadata_and_telemetry_times_without_calls(warm):
    core, kafka, sim = warm
    cluster, tel = core.cluster, core.client.telemetry
    worked_out = Calls(cluster, "next_update_at")
    to_next = Calls(cluster, "time_to_next_update")
    tel_deadline = Calls(tel, "next_deadline")
    tel_poll = Calls(tel, "poll")
    handles = quiet_batches(core, sim)
    assert [h.metadata.offset for h in handles] == list(range(1, 41))
    assert to_next.n == 0 and tel_deadline.n == 0, "a round called in for a time it can read"
    assert tel_poll.n == 0, "telemetry was polled with nothing due"
    # the refresh time was worked out again only when something it depends on changed
    assert worked_out.n <= 1
    assert cluster.update_due_ms == cluster.last_refresh_ms + cluster.metadata_max_age_ms


def test_quiet_rounds_run_no_ready_expiry_or_answer_round_over_nothing(warm):
    core, kafka, sim = warm
    acc, sender = core.accumulator, core.sender
    ready = Calls(acc, "ready")
    expired = Calls(acc, "expired")
    answer_round = Calls(sender, "_answer_round")
    rounds = Calls(core, "poll")
    versions = Calls(core.client, "api_version")
    handles = quiet_batches(core, sim)
    assert [h.metadata.offset for h in handles] == list(range(1, 41))
    batches = 40
    assert rounds.n >= 10 * batches
    # ready only while a queue holds a batch (its linger round, and the
    # rounds of the linger time itself: a few a batch), not every round
    assert ready.n <= 6 * batches, (ready.n, rounds.n)
    assert expired.n == 0, "nothing was past its delivery deadline"
    # the answer-round promise is looked at when a request left and in the
    # round after, which drops it (the answer came), not every round
    assert answer_round.n <= 2 * batches, (answer_round.n, rounds.n)
    assert versions.n == 0, "the Produce version was asked again of the same connection"


def test_the_produce_version_is_asked_again_of_a_new_connection(warm):
    core, kafka, sim = warm
    versions = Calls(core.client, "api_version")
    node = next(n for n in core.client.connections if n >= 0)
    core.disconnected(node, sim.now, ConnectionResetError("reset"))
    handles = quiet_batches(core, sim, count=5, every_ms=200)
    assert [h.metadata.offset for h in handles] == list(range(1, 6))
    assert versions.n == 1


def test_driver_calls_go_straight_to_the_network_client(warm):
    core, kafka, sim = warm
    for name in ("connected", "received", "disconnected", "nodes_with_output", "output", "sent"):
        assert getattr(core, name) == getattr(core.client, name), name
    assert core.nodes_with_output() is core.nodes_with_output() == ()
    assert core.client.poll_requests(sim.now) == ()


def java_update_due(c):
    """Java's Metadata.timeToNextUpdate as an absolute time (-inf: at once)."""
    expire = float("-inf") if c.need_update or c.last_refresh_ms is None \
        else c.last_refresh_ms + c.metadata_max_age_ms
    if c.last_attempt_ms is None or c._urgent:
        return expire
    backoff = c.retry_backoff_ms if c._failed_attempts == 0 else \
        min(c.retry_backoff_max_ms, c.retry_backoff_ms * 2 ** (c._failed_attempts - 1))
    return max(expire, c.last_attempt_ms + backoff)


def test_the_kept_refresh_time_follows_every_change():
    rng = random.Random(27)
    c = ClusterMetadata([("h", 1)], metadata_max_age_ms=300000, retry_backoff_ms=100, retry_backoff_max_ms=1000)
    now = 1_000_000.0
    for _ in range(3000):
        change = rng.randrange(8)
        if change == 0:
            c.need_update = rng.random() < 0.5
        elif change == 1:
            c.last_refresh_ms = rng.choice([None, now - 400_000, now - 10, now])
        elif change == 2:
            c.last_attempt_ms = rng.choice([None, now - 1, now - 99, now - 1000, now + 5])
        elif change == 3:
            c._urgent = rng.random() < 0.3
        elif change == 4:
            c._failed_attempts = rng.choice([0, 1, 3])
        elif change == 5:
            c.add_topic(f"t{rng.randrange(5)}", now)
        elif change == 6:
            c.failed_update(now)
        else:
            c.request_body(now)
        want = java_update_due(c)
        assert c.next_update_at() == want
        assert c.update_due_ms == want
        assert c.time_to_next_update(now) == max(0, want - now)
        now += rng.choice([0, 1, 50])


def test_the_telemetry_send_time_follows_every_state_and_due_change():
    rng = random.Random(714)
    tel = ClientTelemetry("producer", "kio", base_metrics=lambda now: [], rng=rng)
    states = list(TelemetryState)
    for _ in range(2000):
        if rng.random() < 0.5:
            tel.state = rng.choice(states)
        else:
            tel._due = rng.choice([0.0, 5.0, 1000.0, 250_000.0])
        now = rng.choice([0.0, 10.0, 2000.0])
        want = tel.next_deadline(now)
        at = tel.send_at
        assert (None if at is None else max(now, at)) == want


def test_the_sticky_partition_of_a_topic_is_what_current_gave():
    from kproto.producer.partitioner import StickyPartitioner
    rng = random.Random(480)
    part = StickyPartitioner(random.Random(1))
    cluster = ClusterMetadata([("h", 1)])
    for _ in range(2000):
        topic = f"t{rng.randrange(3)}"
        n = rng.choice([0, 1, 3, 8])
        if n:
            cluster.partitions[topic] = {p: 0 for p in range(n)}
        else:
            cluster.partitions.pop(topic, None)
        if rng.random() < 0.5:
            part.partition(topic, None, rng.choice([1, 3, 8]))       # a keyless record picks one
        count = cluster.partition_count(topic)
        assert part.current_of(topic, cluster) == (part.current(topic, count) if count else None)
