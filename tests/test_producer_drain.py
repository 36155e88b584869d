"""The drain of one node in C (kproto/producer/_drain.pyx ``drain_node``)
against its reference, ``RecordAccumulator._drain_node``: two identical
cores, the same queues, heads in flight, backing off, vetoed by idempotence
(a partition's first batch of an epoch goes alone) or by another check, and
a max.request.size that stops the walk part way - the same batches taken in
the same order, the same queues left, the same place for the next drain and
the same buffer.memory given back."""
import pytest

try:
    from test_producer_core import FakeKafka, make
except ImportError:  # pragma: no cover
    from tests.test_producer_core import FakeKafka, make

from kproto.producer._drain import drain_node

PARTITIONS = 40


def _core(max_request_size):
    core, kafka, sim = make(FakeKafka(partitions={"t": PARTITIONS}), max_request_size=max_request_size,
                            linger_ms=1000)
    sim.send(b"first", key=b"k", partition=0)                  # metadata and producer id first
    sim.run_until(lambda: not core.pending)
    for p in range(PARTITIONS):
        for n in range(1 + p % 3):                               # 1-3 records per partition
            core.send("t", b"v" * (50 + 10 * n), key=b"k%d" % p, partition=p, now=sim.now)
    acc = core.accumulator
    now = sim.now
    for p in range(0, PARTITIONS, 7):                            # heads in flight
        acc.queues[("t", p)][0].in_flight = True
    for p in range(3, PARTITIONS, 11):                           # heads backing off, one due already
        head = acc.queues[("t", p)][0]
        head.attempts = 1
        head.retry_after_ms = now + (100 if p != 14 else 0)
    # partition 5's first batch of the epoch is still unacknowledged: its next waits
    core.idempotence._part(("t", 5)).unacked_list().append(object())
    return core, now


def _state(core, taken, node):
    acc = core.accumulator
    # reserved / used_memory: each drained batch's buffer.memory beyond its
    # records given back (``_release_unused``, done in C by drain_node)
    return ([(b.partition, b.builder.record_count, b.full, b.drained_ms, b.reserved) for b in taken],
            {tp: len(dq) for tp, dq in acc.queues.items()}, acc._drain_index.get(node), acc.used_memory)


@pytest.mark.parametrize("max_request_size", [1_000_000, 600])
@pytest.mark.parametrize("check", ["idempotence", "python", "none"])
@pytest.mark.parametrize("start", [0, 17])
def test_drain_node_takes_what_the_reference_takes(max_request_size, check, start):
    cores = [_core(max_request_size) for _ in range(2)]
    results = []
    for (core, now), in_c in zip(cores, (True, False)):
        acc = core.accumulator
        by_node = core.cluster.partitions_by_node()
        (node,) = by_node
        tps = by_node[node]
        indexes = [(start + k) % len(tps) for k in range(len(tps))]
        if check == "idempotence":
            can_drain = core.sender.can_drain                    # partial(can_drain, idem, READY): in C
        elif check == "python":
            can_drain = lambda b: b.partition % 4 != 1          # noqa: E731 - called as it is
        else:
            can_drain = None
        if in_c:
            taken = drain_node(acc, node, tps, list(indexes), start, now, can_drain)
        else:
            taken = acc._drain_node(node, tps, list(indexes), start, now, can_drain)
        results.append(_state(core, taken, node))
    assert results[0] == results[1]
    taken = results[0][0]
    assert taken, "the script drains something"
    assert all(reserved < 16384 for *_, reserved in taken), "every drained batch gave memory back"
    if max_request_size == 600:
        assert len(taken) < PARTITIONS // 2, "max.request.size stopped the walk part way"
    if check == "idempotence":
        assert 5 not in [p for p, *_ in taken]
