"""Objects the cyclic garbage collector tracks per open producer batch.

Opens ``--batches`` batches on a ``ProducerCore`` (one record each, every
record to a partition of its own, no round in between: the batches wait as
they do while a Produce is in flight) and counts the GC-tracked objects
alive before and after, by type, per batch (each batch here is its
partition's first, so the partition's deque counts too). With a handle that is told one
by one (the core's ``DeliveryHandle``: ``--handle told``) or attached to its
batch's outcome (kio's ``DeliveryFuture``: ``--handle attached``)::

    python bench/batch_objects.py --batches 2000 --handle attached

``--per-partition`` counts instead what the core keeps per partition once
that batch was sent and acknowledged (its queue, its sequence state): what
every partition the producer ever wrote holds for good, walked by every full
collection. (The scripted broker's own records of the run - its logs, the
requests it keeps for tests - are dropped before counting.)

Deterministic: the figures do not depend on the machine or its load. Each
tracked object a batch keeps alive is one more for every collection to walk
while the batch waits, and the young collections come sooner (the
generation-0 count is tracked allocations minus deallocations).
"""
from __future__ import annotations

import argparse
import collections
import gc
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))


def tracked_by_type() -> collections.Counter:
    gc.collect()
    return collections.Counter(type(o).__name__ for o in gc.get_objects())


def count(batches: int, handle: str) -> tuple:
    """(tracked objects per batch, Counter of them by type per batch)."""
    from test_producer_core import FakeKafka, make

    core, kafka, sim = make(FakeKafka(partitions={"t": batches + 1}))
    sim.send(b"first", key=b"k", partition=batches)    # metadata and producer id first
    sim.run_until(lambda: not core.pending)
    if handle == "attached":
        from kio.producer import DeliveryFuture as make_handle
    else:
        from kproto.producer.core import DeliveryHandle as make_handle
    handles = [make_handle() for _ in range(batches)]   # the application's, made before counting
    before = tracked_by_type()
    for p, h in enumerate(handles):
        core.send("t", b"x" * 100, key=b"k", partition=p, now=sim.now, handle=h)
    after = tracked_by_type()
    assert sum(len(dq) for dq in core.accumulator.queues.values()) == batches, "one batch per record"
    diff = {k: (after[k] - before[k]) / batches for k in after if after[k] != before[k]}
    return sum(after.values()) - sum(before.values()), diff


def _forget_broker_state(kafka) -> None:
    """Drop what the scripted broker keeps of a run for tests to look at."""
    kafka.logs.clear()
    kafka.seq.clear()
    kafka.recent.clear()
    kafka.produce_requests.clear()
    for broker in kafka.brokers.values():
        broker.requests.clear()


def count_per_partition(partitions: int) -> tuple:
    """(tracked objects per partition, Counter of them by type per partition)
    the core keeps once one batch was sent and acknowledged on each of
    ``partitions`` partitions."""
    from test_producer_core import FakeKafka, make

    core, kafka, sim = make(FakeKafka(partitions={"t": partitions + 1}))
    sim.send(b"first", key=b"k", partition=partitions)    # metadata and producer id first
    sim.run_until(lambda: not core.pending)
    _forget_broker_state(kafka)
    sim.log.clear()
    before = tracked_by_type()
    for p in range(partitions):
        core.send("t", b"x" * 100, key=b"k", partition=p, now=sim.now)
    sim.run_until(lambda: not core.pending)
    assert core.metrics()["records_sent"] == partitions + 1, "every record acknowledged"
    _forget_broker_state(kafka)
    sim.log.clear()
    after = tracked_by_type()
    diff = {k: (after[k] - before[k]) / partitions for k in after.keys() | before.keys() if after[k] != before[k]}
    return sum(after.values()) - sum(before.values()), diff


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=2000)
    ap.add_argument("--handle", choices=["told", "attached"], default="attached")
    ap.add_argument("--per-partition", action="store_true",
                    help="what the core keeps per partition after its batch was acknowledged")
    args = ap.parse_args()
    if args.per_partition:
        total, by_type = count_per_partition(args.batches)
        shown = ", ".join(f"{k} {v:.2f}" for k, v in sorted(by_type.items(), key=lambda kv: -kv[1])
                          if abs(v) >= 0.01)
        print(f"{total / args.batches:.2f} GC-tracked objects kept per partition written once ({shown})")
        return
    total, by_type = count(args.batches, args.handle)
    shown = ", ".join(f"{k} {v:.2f}" for k, v in sorted(by_type.items(), key=lambda kv: -kv[1]) if abs(v) >= 0.01)
    print(f"{args.handle} handles: {total / args.batches:.2f} GC-tracked objects per open batch ({shown})")


if __name__ == "__main__":
    main()
