"""What an open producer batch keeps alive for the cyclic garbage collector.

With keys over many partitions nearly every record opens a batch, and each
batch waits for a linger and a Produce round trip: every GC-tracked object it
holds is walked by each collection meanwhile (bench/batch_objects.py counts
them). A batch keeps its ProducerBatch, and its BatchOutcome once a handle
is attached to it; the builder is not tracked (it can be in no cycle), and
the outcome and the lists of told handles and of callbacks are made only
when something needs them."""
import collections
import gc

import pytest

try:
    from test_producer_core import FakeKafka, make
except ImportError:  # pragma: no cover
    from tests.test_producer_core import FakeKafka, make

from kproto.producer.core import DeliveryHandle
from kproto.records import BatchBuilder

BATCHES = 300


def _tracked():
    gc.collect()
    return collections.Counter(type(o).__name__ for o in gc.get_objects())


def _open_batches(handle_type):
    """GC-tracked objects alive per batch after BATCHES one-record batches, by type."""
    core, kafka, sim = make(FakeKafka(partitions={"t": BATCHES + 1}))
    sim.send(b"first", key=b"k", partition=BATCHES)        # metadata and producer id first
    sim.run_until(lambda: not core.pending)
    for p in range(BATCHES):                                 # every partition's queue exists first
        core.accumulator.queues.setdefault(("t", p), collections.deque())
    handles = [handle_type() for _ in range(BATCHES)]
    gc.disable()
    try:
        before = _tracked()
        for p, h in enumerate(handles):
            core.send("t", b"v", key=b"k", partition=p, now=sim.now, handle=h)
        after = _tracked()
    finally:
        gc.enable()
    batches = [dq[0] for (t, p), dq in core.accumulator.queues.items() if p < BATCHES]
    assert len(batches) == BATCHES and all(b.builder.record_count == 1 for b in batches)
    per_batch = {k: (after[k] - before[k]) / BATCHES for k in after if after[k] != before[k]}
    # what every batch keeps (one each); the rest is the process's own (first-use caches)
    kept = {k: v for k, v in per_batch.items() if v >= 0.5}
    assert sum(per_batch.values()) - sum(kept.values()) < 0.5, per_batch
    return kept, batches


def test_a_batch_with_an_attached_handle_keeps_two_tracked_objects():
    from kio.producer import DeliveryFuture
    per_batch, batches = _open_batches(DeliveryFuture)
    assert per_batch == {"ProducerBatch": 1.0, "BatchOutcome": 1.0}
    assert all(b.parts == () and b.callbacks == () for b in batches)


def test_a_batch_with_a_told_handle_keeps_its_list_of_parts_and_no_outcome():
    per_batch, batches = _open_batches(DeliveryHandle)
    assert per_batch == {"ProducerBatch": 1.0, "list": 1.0}
    assert all(type(b.parts) is list and len(b.parts) == 1 and b.callbacks == () for b in batches)
    assert all(b.outcome_if_made is None for b in batches)


def test_a_batch_outcome_is_made_on_first_use_and_kept():
    """A batch of told handles makes no BatchOutcome; asking for it (a
    handle attached later, a split) makes it once, and the completed
    batch's result carries it (None when never made, which completing takes)."""
    from kio.producer import DeliveryFuture
    from kproto.producer.core import complete_results
    from kproto.producer.outcome import BatchOutcome
    core, kafka, sim = make(FakeKafka(partitions={"t": 3}))
    sim.send(b"first", key=b"k", partition=2)           # metadata and producer id first
    sim.run_until(lambda: not core.pending)
    sim.collect_events = False          # the results stay in the core, to look at
    core.sender.results.clear()
    told = DeliveryHandle()
    core.send("t", b"v", key=b"k", partition=0, now=sim.now, handle=told)
    (batch,) = core.accumulator.queues[("t", 0)]
    assert batch.outcome_if_made is None
    attached = DeliveryFuture()
    core.send("t", b"w", key=b"k", partition=0, now=sim.now, handle=attached)
    made = batch.outcome_if_made
    assert type(made) is BatchOutcome and batch.outcome is made and attached._outcome is made
    assert (made.topic, made.partition, made.done) == ("t", 0, False)
    core.send("t", b"v", key=b"k", partition=1, now=sim.now, handle=DeliveryHandle())
    (alone,) = core.accumulator.queues[("t", 1)]
    sim.run_until(lambda: not core.accumulator.has_incomplete)
    results = {r.partition: r for r in core.sender.results}
    assert results[0].outcome is made and results[1].outcome is None and alone.outcome_if_made is None
    complete_results(core.sender.results)
    assert made.done and made.base_offset == 0 and attached.result().offset == 1
    assert told.done and told.offset == 0


def test_a_batch_key_is_made_once_per_partition():
    """Every batch of a partition opened by the fast path carries the same
    (topic, partition) tuple, the accumulator's key of its queue."""
    core, kafka, sim = make(FakeKafka(partitions={"t": 4}))
    sim.send(b"first", key=b"k", partition=3)
    sim.run_until(lambda: not core.pending)
    keys = []
    for _ in range(3):
        core.send("t", b"v", key=b"k", partition=2, now=sim.now)
        (batch,) = core.accumulator.queues[("t", 2)]
        keys.append(batch.tp)
        sim.run_until(lambda: not core.pending)
    assert keys[0] == ("t", 2) and keys[0] is keys[1] is keys[2]
    assert [k for k in core.accumulator.queues if k == ("t", 2)][0] is keys[0]


def test_a_callback_makes_the_list_of_callbacks():
    from kio.producer import DeliveryFuture

    def on_delivery(err, md):
        pass

    per_batch, batches = _open_batches(lambda: DeliveryFuture(on_delivery))
    assert per_batch == {"ProducerBatch": 1.0, "BatchOutcome": 1.0, "list": 1.0}
    assert all(b.parts == () and b.callbacks[0] is on_delivery for b in batches)


def test_the_builder_is_not_tracked_and_takes_only_an_int_level():
    assert not gc.is_tracked(BatchBuilder(0, 1000))
    assert BatchBuilder(1, 1000, compression_level=6).compression_level == 6
    for level in (1.5, "6", True):
        with pytest.raises(TypeError, match=r"compression_level must be an int or None, not "
                                            + type(level).__name__):
            BatchBuilder(1, 1000, compression_level=level)


def test_a_batch_outcome_is_made_as_the_class_makes_it():
    """Opening a batch copies its BatchOutcome from a template instead of
    the class call (kproto/producer/_append.pyx): the same slots and values,
    a tracked object of its own."""
    from kproto.producer._append import OUTCOME_COPIED, new_outcome
    from kproto.producer.outcome import BatchOutcome
    assert OUTCOME_COPIED, "BatchOutcome changed: outcomes are made by the class call again"
    made, called = new_outcome("t", 3), BatchOutcome("t", 3)
    assert type(made) is BatchOutcome and gc.is_tracked(made)
    assert [(n, getattr(made, n)) for n in BatchOutcome.__slots__] == \
        [(n, getattr(called, n)) for n in BatchOutcome.__slots__]
    made.watch("a handle")
    made.finish(7, 8, None)
    other = new_outcome("u", 0)
    assert (other.watchers, other.done, other.base_offset, other.topic) == (None, False, -1, "u")


def _bench_batch_objects():
    """bench/batch_objects.py, whose way of counting the tests share."""
    import importlib.util
    import os
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench", "batch_objects.py")
    spec = importlib.util.spec_from_file_location("batch_objects", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_partition_written_once_keeps_only_its_queue():
    """What the core keeps for good per partition it wrote (bench/batch_objects.py
    --per-partition): its queue. Its sequence state is not tracked (a C class
    in no cycle) and its list of unacknowledged batches is dropped once the
    answer came (the shared empty tuple), so a full collection walks one
    object per partition, not three (with 10,000 partitions, 20,000 fewer)."""
    from kproto.producer._acknowledge import PartitionSequences
    total, by_type = _bench_batch_objects().count_per_partition(BATCHES)
    kept = {k: v for k, v in by_type.items() if abs(v) >= 0.5}
    assert kept == {"deque": 1.0}, by_type
    assert abs(total / BATCHES - 1.0) < 0.5, by_type
    core, kafka, sim = make(FakeKafka())
    sim.send(b"v", key=b"k")
    sim.run_until(lambda: not core.pending)
    (state,) = core.idempotence.partitions.values()
    assert type(state) is PartitionSequences and not gc.is_tracked(state)
    assert state.unacked == () and state.unacked is ()
    assert (state.next_sequence, state.last_acked) == (1, 0)


def test_a_partitions_unacknowledged_batches_are_forgotten_in_any_order():
    """``forget`` drops a batch wherever it is in the list (the oldest, or one
    that failed behind it), ignores one not there, and leaves the empty tuple
    once the list is empty; ``unacked_list`` makes the list again."""
    from kproto.producer._acknowledge import PartitionSequences
    p = PartitionSequences()
    assert p.unacked == ()
    p.forget("a batch never sent")
    a, b, c = object(), object(), object()
    p.unacked_list().extend([a, b, c])
    p.forget(b)
    assert p.unacked == [a, c]
    p.forget(a)
    p.forget(b)
    assert p.unacked == [c]
    p.forget(c)
    assert p.unacked is ()
    assert p.unacked_list() == [] and type(p.unacked) is list


def test_a_batch_result_is_made_as_the_class_makes_it():
    """An acknowledged batch's BatchResult is allocated by its type and filled
    in C (kproto/producer/_acknowledge.pyx): the same named tuple, field by
    field, as the class call; a result type that is not a named tuple is refused."""
    from kproto.producer._acknowledge import acknowledge
    from kproto.producer.sender import BatchResult
    core, kafka, sim = make(FakeKafka(partitions={"t": 2}))
    sim.send(b"first", key=b"k", partition=1)
    sim.run_until(lambda: not core.pending)
    sim.collect_events = False
    handle = DeliveryHandle()
    core.send("t", b"v", key=b"k", partition=0, now=sim.now, handle=handle)
    (batch,) = core.accumulator.queues[("t", 0)]
    sim.run_until(lambda: not core.accumulator.has_incomplete)
    (r,) = core.sender.results
    expected = BatchResult("t", 0, 0, -1, None, batch.parts, None, ())
    assert type(r) is BatchResult and r == expected and gc.is_tracked(r)
    assert r.parts is batch.parts and r.parts[0] is handle and r._fields == expected._fields
    with pytest.raises(TypeError, match="result_type must be a named tuple type, not <class 'dict'>"):
        acknowledge(core.sender, dict, batch, 0, -1)
