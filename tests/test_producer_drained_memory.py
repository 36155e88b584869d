"""A drained batch gives buffer.memory back what it does not hold.

A batch opens with a 16 KiB reservation (INITIAL_BATCH_RESERVE). Over many
partitions a drain sends batches of a few records; if each kept its 16 KiB
until the broker answered, a few thousand of them filled buffer.memory,
send() blocked, and the exhausted buffer made every partition ready at once,
so the next batches were as small again (bench/RESULTS.md, "The first round
on a fresh topic"). At drain the batch's buffer shrinks to its records and
its reservation with it.
"""
import pytest

try:
    from test_producer_core import FakeKafka, make
except ImportError:  # pragma: no cover
    from tests.test_producer_core import FakeKafka, make

from kproto.producer import BufferExhausted
from kproto.producer.accumulator import INITIAL_BATCH_RESERVE
from kproto.records import BatchBuilder, read_batches

PARTITIONS = 100
VALUE = b"v" * 100


def _records(data):
    return [(r.key, r.value) for rb in read_batches(data) for r in rb.records()]


def test_shrink_to_fit_keeps_the_batch_and_returns_the_bytes_held():
    kept, shrunk = BatchBuilder(0, 16384), BatchBuilder(0, 16384)
    for i in range(3):
        for b in (kept, shrunk):
            b.append(1000 + i, b"k%d" % i, VALUE, [])
    held = shrunk.shrink_to_fit()
    assert held == shrunk.size_in_bytes() == kept.size_in_bytes() < 1024
    assert shrunk.shrink_to_fit() == held                 # nothing more to give back
    assert shrunk.build() == kept.build()                 # the same batch, byte for byte
    # a later append grows the buffer again (the producer does not append to a
    # drained batch, but the builder stays correct if anything does)
    assert shrunk.append(2000, b"late", b"w" * 5000, []) > 0
    assert _records(shrunk.build())[-1] == (b"late", b"w" * 5000)
    assert len(_records(shrunk.build())) == 4


def _send_one_per_partition(core, sim, tag):
    return [sim.send(VALUE, partition=p, key=b"%s-%d" % (tag, p)) for p in range(PARTITIONS)]


def test_batches_in_flight_hold_only_their_records_so_new_batches_open():
    # Room for one round of open batches and two more: the second round opens
    # while the first is in flight (about 200 bytes a batch), which only fits
    # when the drained batches gave back the 16 KiB they opened with.
    budget = (PARTITIONS + 2) * INITIAL_BATCH_RESERVE
    core, kafka, sim = make(FakeKafka(partitions={"t": PARTITIONS}), buffer_memory=budget,
                            linger_ms=5, max_request_size=1 << 20)
    kafka.hold_replies = True
    first = _send_one_per_partition(core, sim, b"a")
    assert core.accumulator.used_memory == PARTITIONS * INITIAL_BATCH_RESERVE
    sim.advance(5)                                         # linger: every batch drained, answers held
    in_flight = list(core.sender.in_flight.values())
    assert len(in_flight) == PARTITIONS and not any(h.done for h in first)
    assert all(b.reserved == b.builder.size_in_bytes() < 1024 for b in in_flight)
    assert core.accumulator.used_memory == sum(b.reserved for b in in_flight)

    second = _send_one_per_partition(core, sim, b"b")     # BufferExhausted before the change
    assert core.accumulator.used_memory <= budget
    kafka.hold_replies = False
    while not all(h.done for h in first + second):
        sim.release()
        sim.advance(1)
    assert all(h.error is None for h in first + second)
    for p in range(PARTITIONS):
        assert kafka.values(p=p) == [VALUE, VALUE]
    assert core.accumulator.used_memory == 0               # every byte came back, none twice


def test_buffer_memory_still_bounds_what_the_open_batches_reserve():
    # The memory given back is only what drained batches do not hold: open
    # batches still reserve their 16 KiB, and past the budget send() is refused.
    budget = 10 * INITIAL_BATCH_RESERVE
    core, kafka, sim = make(FakeKafka(partitions={"t": PARTITIONS}), buffer_memory=budget,
                            linger_ms=100000, max_request_size=1 << 20)
    for p in range(10):
        sim.send(VALUE, partition=p)
    with pytest.raises(BufferExhausted):
        sim.send(VALUE, partition=10)
    assert core.accumulator.used_memory == budget


def test_a_retried_batch_keeps_its_records_and_its_accounting():
    core, kafka, sim = make(FakeKafka(partitions={"t": PARTITIONS}), linger_ms=5,
                            max_request_size=1 << 20)
    kafka.inject("t", 3, 7, 7)                             # REQUEST_TIMED_OUT twice: resent from the shrunk buffer
    hs = [sim.send(VALUE + b"%d" % i, partition=3) for i in range(5)]
    others = [sim.send(VALUE, partition=p) for p in range(PARTITIONS) if p != 3]
    sim.run_until(lambda: all(h.done for h in hs + others))
    assert all(h.error is None for h in hs + others)
    assert core.metrics()["retries"] == 2
    assert kafka.values(p=3) == [VALUE + b"%d" % i for i in range(5)]
    assert core.accumulator.used_memory == 0
