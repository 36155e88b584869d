"""Instructions per keyed record over many partitions, without a network: a load-independent measure.

The producer's core (``ProducerCore``) runs against the scripted brokers of
the core's own tests (tests/test_producer_core.py: ``FakeKafka`` answers
Metadata, InitProducerId and Produce as Kafka does, sequence checks
included) under simulated time: records with random 16-byte keys arrive at
``--rate`` per simulated second, and the core is polled as the threading
driver polls it - after a send that opened or filled a batch (the driver's
wake-up) and when its next deadline comes. Like the driver's network thread,
it asks the core for that deadline once per round (a send changes no
deadline: only a round or an answer does); ``--deadline-every-send`` asks
after every send instead, as this bench did before (same rounds, same
batches; it counts one ``next_deadline`` per record, which drivers do not pay). Everything is deterministic, so
the instruction count of a run does not depend on the machine's load:
under callgrind, two runs with a different ``--records`` give the
instructions per record (start-up, imports and metadata cancel out)::

    python bench/partition_cost.py --partitions 1000 --callgrind 5000,25000

prints instructions per record, whole process (the core, the scripted
broker's answers included: the same work for the same batches), with the
number of batches and requests per record. Without ``--callgrind`` it runs
once and prints those counts.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
sys.path.insert(0, HERE)

from _callgrind import instructions  # noqa: E402

VALUE = b"x" * 100


def run(partitions: int, records: int, rate: int, deadline_every_send: bool = False,
        handle: str = "told", capture: list | None = None) -> dict:
    """Send ``records`` keyed records over ``partitions`` partitions in simulated time,
    each with the core's own handle (``told``, completed one by one) or kio's
    ``DeliveryFuture`` (``attached`` to its batch's outcome). ``capture``, if
    given, gets every (node, channel number, bytes) the client wrote to the
    scripted broker, in order (see ``replay``)."""
    import random

    from test_producer_core import FakeKafka, make
    if handle == "attached":
        from kio.producer import DeliveryFuture as make_handle
    else:
        make_handle = None

    core, kafka, sim = make(FakeKafka(partitions={"t": partitions}))
    if capture is not None:
        _capture_channels(kafka, capture)
    rnd = random.Random(1)
    keys = [rnd.getrandbits(128).to_bytes(16, "big") for _ in range(records)]
    sim.send(VALUE, key=keys[0])                         # metadata and producer id first
    sim.run_until(lambda: not core.pending)
    acc = core.accumulator
    start = sim.now
    step_ms = 1000.0 / rate
    deadline = core.next_deadline(sim.now)
    for i, key in enumerate(keys):
        sim.now = start + i * step_ms
        if make_handle is None:
            core.send("t", VALUE, key=key, now=sim.now)
        else:
            core.send("t", VALUE, key=key, now=sim.now, handle=make_handle())
        if deadline_every_send:
            deadline = core.next_deadline(sim.now)
        if acc.wakeup or (deadline is not None and deadline <= sim.now):
            acc.wakeup = False
            sim.step()
            deadline = core.next_deadline(sim.now)
    core.begin_flush()
    sim.run_until(lambda: not core.pending)
    m = core.metrics()
    assert m["records_sent"] == records + 1, m
    return m


def _capture_channels(kafka, capture: list) -> None:
    """Make every channel of ``kafka``'s brokers record what it receives into ``capture``."""
    for node, broker in kafka.brokers.items():
        def channel(node=node, make=broker.channel):
            ch = make()
            number = sum(1 for c in capture if c[0] == node and c[2] is None)
            capture.append((node, number, None))              # a new connection
            receive = ch.receive

            def recording(data, receive=receive):
                capture.append((node, number, bytes(data)))
                return receive(data)
            ch.receive = recording
            return ch
        broker.channel = channel


def replay(partitions: int, capture_file: str) -> None:
    """The scripted broker's side of a run alone: a fresh ``FakeKafka`` fed,
    in order, the bytes a run wrote to it (``capture``), its answers thrown
    away. Under callgrind, the broker's own instructions, which the whole-process
    figure includes: the client's are the difference."""
    import pickle

    from test_producer_core import FakeKafka
    with open(capture_file, "rb") as f:
        capture = pickle.load(f)
    kafka = FakeKafka(partitions={"t": partitions})
    channels = {}
    for node, number, data in capture:
        if data is None:
            channels[node, number] = kafka.brokers[node].channel()
        else:
            channels[node, number].receive(data)


def _callgrind(argv: list) -> int:
    """Instructions of ``python partition_cost.py *argv`` under callgrind."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg.out")
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
                        os.path.abspath(__file__), *argv], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        return instructions(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--rate", type=int, default=60_000, help="records per simulated second")
    ap.add_argument("--callgrind", metavar="N0,N1", help="instructions per record: two runs under callgrind")
    ap.add_argument("--handle", choices=["told", "attached"], default="told",
                    help="the core's DeliveryHandle (default) or kio's DeliveryFuture, attached to its batch")
    ap.add_argument("--deadline-every-send", action="store_true",
                    help="ask the core for its next deadline after every send (this bench's old way)")
    ap.add_argument("--broker-share", action="store_true",
                    help="with --callgrind: also count the scripted broker's own instructions (its side of "
                         "the same run replayed alone) and print the client's (the rest)")
    ap.add_argument("--replay", metavar="FILE", help=argparse.SUPPRESS)   # the broker-share child
    args = ap.parse_args()
    if args.replay:
        replay(args.partitions, args.replay)
        return
    every = (["--deadline-every-send"] if args.deadline_every_send else []) + ["--handle", args.handle]
    if not args.callgrind:
        m = run(args.partitions, args.records, args.rate, args.deadline_every_send, args.handle)
        print(f"{args.partitions} partitions, {args.records:,} records: {m['batches_sent']:,} batches, "
              f"{m['requests']:,} requests")
        return
    counts = [int(x) for x in args.callgrind.split(",")]
    found = [_callgrind(["--partitions", str(args.partitions), "--records", str(n), "--rate", str(args.rate),
                         *every]) for n in counts]
    captures = ([], [])
    m0, m1 = (run(args.partitions, n, args.rate, args.deadline_every_send, args.handle, capture)
              for n, capture in zip(counts, captures))
    dn = counts[1] - counts[0]
    if args.broker_share:
        import pickle
        broker = []
        with tempfile.TemporaryDirectory() as tmp:
            for n, capture in zip(counts, captures):
                path = os.path.join(tmp, f"capture.{n}")
                with open(path, "wb") as f:
                    pickle.dump(capture, f)
                broker.append(_callgrind(["--partitions", str(args.partitions), "--replay", path]))
        per_broker = (broker[1] - broker[0]) / dn
        per_all = (found[1] - found[0]) / dn
        print(f"{args.partitions} partitions: of {per_all:,.0f} instructions per record, the scripted broker's "
              f"own (its side replayed alone) {per_broker:,.0f}, the client's and the bench loop's "
              f"{per_all - per_broker:,.0f}")
    print(f"{args.partitions} partitions at {args.rate:,} records/s (simulated): "
          f"{(found[1] - found[0]) / dn:,.0f} instructions per record (callgrind, whole process, "
          f"{counts[0]:,} vs {counts[1]:,} records); {(m1['batches_sent'] - m0['batches_sent']) / dn:.3f} "
          f"batches and {(m1['requests'] - m0['requests']) / dn:.4f} requests per record"
          f"{' (deadline after every send)' if args.deadline_every_send else ''}"
          f"{' (attached handles)' if args.handle == 'attached' else ''}")


if __name__ == "__main__":
    main()
