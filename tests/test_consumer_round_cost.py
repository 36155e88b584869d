"""A consumer core round with nothing new does not walk every assigned partition.

A driver may run the core's round once per poll() (the threading consumer
runs it on the polling thread, kio._threaded.driver.PolledThreadDriver): with
1,000 partitions assigned, a round that planned the next Fetch over all of
them every time made poll_batch() cost 4-5 CPU µs per record instead of
under 1 (the reverted branch ``lat``, bench/RESULTS.md). The core keeps
what it derives from every partition - the fetch plan, the partitions
without a position, pending resets - until an answer, a connection event, a
change of the positions or a drained partition can change it.

Deterministic: a scripted broker whose Fetch answers the test holds and
delivers itself, simulated time, and the walks counted on the core's own
Positions (each walk is one call of these methods).
"""
from unittest import mock

import kproto.consumer.core as core_module
from kproto.cluster import TopicPartition as TP
from kproto.consumer.core import ConsumerCore
from kproto.consumer.fetcher import Fetcher

from test_consumer_core import FakeKafka

PARTITIONS = 1000
WALKS = ("fetchable_states", "needs_position", "awaiting_reset")
# A fetch plan visits every assigned partition, through Positions.fetchable_states
# or, with leaders known per topic, kproto.consumer._fetch.select_fetchable over
# the states themselves: counted as calls of Fetcher.fetch_requests.
PLAN = "fetch_requests"


class HeldFetches:
    """The driver: delivers every answer at once except Fetch answers (and
    what follows them on their connection), which wait in ``held`` until
    :meth:`deliver`."""

    def __init__(self, kafka, core):
        self.kafka, self.core = kafka, core
        self.now = 0
        self.channels = {}
        self.held = []                       # (node, answer bytes)

    def round(self):
        core = self.core
        for a in core.poll(self.now):
            if hasattr(a, "host"):           # Connect
                self.channels[a.node] = self.kafka.broker.channel()
                core.connected(a.node, self.now)
        for node in core.nodes_with_output():
            fetches = self.kafka.count("Fetch")
            data = bytes(core.output(node))
            core.sent(node, len(data), self.now)
            reply = self.channels[node].receive(data)
            if reply and (self.kafka.count("Fetch") > fetches or any(n == node for n, _ in self.held)):
                self.held.append((node, reply))       # (answers come in order on a connection)
            elif reply:
                core.received(node, reply, self.now)
        self.now += 1

    def deliver(self):
        held, self.held = self.held, []
        for node, reply in held:
            self.core.received(node, reply, self.now)


class CountingFetcher(Fetcher):
    """The core's Fetcher, counting the core's calls of fetch_requests once
    ``counts`` is set: a subclass, as the compiled Fetcher (a C class,
    fetcher.pxd) takes no method replaced on an instance."""

    counts = None

    def fetch_requests(self, *args, **kw):
        if self.counts is not None:
            self.counts[PLAN] += 1
        return super().fetch_requests(*args, **kw)


def count_walks(core):
    """Count the calls that visit every partition: the Positions walks and
    the fetch plans."""
    counts = dict.fromkeys(WALKS + (PLAN,), 0)
    for name in WALKS:
        real = getattr(core.positions, name)

        def counted(*args, _real=real, _name=name, **kw):
            counts[_name] += 1
            return _real(*args, **kw)
        setattr(core.positions, name, counted)
    assert type(core.fetcher) is CountingFetcher
    core.fetcher.counts = counts
    return counts


def started(records_per_partition=3):
    kafka = FakeKafka(partitions={"t": PARTITIONS})
    for p in range(PARTITIONS):
        kafka.produce("t", p, records_per_partition)
    with mock.patch.object(core_module, "Fetcher", CountingFetcher):
        core = ConsumerCore({"bootstrap.servers": "b1:9092", "enable.auto.commit": False})
    driver = HeldFetches(kafka, core)
    core.assign([TP("t", p) for p in range(PARTITIONS)], 0)
    for p in range(PARTITIONS):
        core.seek(TP("t", p), 0)
    for _ in range(50):
        driver.round()
        if driver.held:
            break
    assert driver.held, "no Fetch was sent"
    return kafka, core, driver


def test_rounds_while_the_fetch_is_in_flight_walk_no_partition():
    kafka, core, driver = started()
    walks = count_walks(core)
    for _ in range(200):
        core.poll_called(driver.now)
        driver.round()
        core.next_deadline(driver.now)
    assert walks == dict.fromkeys(WALKS + (PLAN,), 0), walks
    assert kafka.count("Fetch") == 1                  # and nothing else went out


def test_draining_plans_the_next_fetch_once_per_answer_not_once_per_poll():
    """poll() hands out a few partitions at a time: only the first drain
    after an answer plans a Fetch (over every partition); the polls while
    that Fetch is in flight cost no walk, though each drained partitions."""
    kafka, core, driver = started()
    walks = count_walks(core)
    answers = polls = 0
    got = 0
    while got < 3 * PARTITIONS:
        if driver.held and polls % 5 == 0:           # an answer takes a while to come
            driver.deliver()
            answers += 1
            driver.round()                            # the network side's round after the answer
        cols = core.drain_columns(300)                # ~100 partitions per poll
        got += sum(len(c[0]) for c in cols.values())
        polls += 1
        driver.round()                                # the round poll() runs
        assert polls < 1000, "the records did not all arrive"
    assert polls >= 10
    # One plan on the answer's round and one on the first drain after it,
    # at most; the old core planned on every round (two per poll here).
    assert 1 <= walks[PLAN] <= 2 * answers + 2, (walks, answers, polls)
    assert walks[PLAN] <= polls // 2, (walks, answers, polls)
    assert walks["needs_position"] == 0, walks
    assert walks["awaiting_reset"] == walks[PLAN], walks      # (part of the plan)


def test_a_change_of_the_positions_is_planned_at_once():
    """The kept plan is not stale: rounds with the Fetch in flight walk
    nothing, but a seek while it is there is fetched from its new offset
    as soon as the answer came, and a drained partition's next Fetch goes
    out on the first round after its node answered."""
    kafka, core, driver = started()
    for _ in range(3):
        driver.round()
    core.seek(TP("t", 7), 1)                           # not buffered yet: its answer is stale
    driver.round()
    assert kafka.count("Fetch") == 1                  # one Fetch per node: it waits for the answer
    driver.deliver()
    driver.round()
    assert kafka.count("Fetch") == 2                  # partition 7 again, from offset 1
    body = kafka.broker.requests_of("Fetch")[-1].body
    assert [(p["partition"], p["fetch_offset"]) for t in body["topics"] for p in t["partitions"]] == [(7, 1)]
    driver.deliver()
    driver.round()
    cols = core.drain_columns(1 << 62)
    assert cols[TP("t", 7)][0] == [1, 2] and len(cols) == PARTITIONS
    driver.round()                                    # every partition drained: the next Fetch
    assert kafka.count("Fetch") == 3
    body = kafka.broker.requests_of("Fetch")[-1].body
    assert {p["fetch_offset"] for t in body["topics"] for p in t["partitions"]} == {3}


def test_a_committed_offsets_fetch_started_late_in_a_round_asks_for_the_next_round_at_once():
    """A driver runs a round when the core's deadline says so or on I/O,
    not on every poll(): a partition assigned to a consumer with a group
    starts a committed offsets fetch after the committer's turn in the
    round (the coordinator still to be found), so the deadline must be
    now - else only a later kick sent it."""
    kafka = FakeKafka(partitions={"t": 2})
    kafka.committed[("t", 0)] = kafka.committed[("t", 1)] = 1
    core = ConsumerCore({"bootstrap.servers": "b1:9092", "group.id": "g", "enable.auto.commit": False})
    driver = HeldFetches(kafka, core)
    core.assign([TP("t", 0)], 0)
    core.seek(TP("t", 0), 0)
    for _ in range(100):
        driver.round()
        if driver.held:
            break
    assert driver.held and not core.coordinator.known   # connected and fetching; no commit yet
    core.assign([TP("t", 0), TP("t", 1)], driver.now)  # (what the driver's assign() wakes a round for)
    offset_fetches = kafka.count("OffsetFetch")
    driver.round()
    assert kafka.count("OffsetFetch") == offset_fetches  # started, not sent yet
    assert core.next_deadline(driver.now) == driver.now
    for _ in range(50):                     # FindCoordinator, its connection, OffsetFetch, the answer
        driver.deliver()
        driver.round()
        if core.position(TP("t", 1)) is not None:
            break
    assert kafka.count("OffsetFetch") == offset_fetches + 1
    assert core.position(TP("t", 1)) == 1
