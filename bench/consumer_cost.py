"""Instructions per consumed record over many partitions, without a network: a load-independent measure.

The consumer's core (``ConsumerCore``: the fetcher, the Fetch codec, record
batch decoding, positions) is assigned every partition of a topic, positioned
at offset 0, and read the way ``Consumer.poll_batch()`` reads it
(``drain_columns`` of everything buffered) - the many-partition case of
issue 27: each Fetch answer carries few records per partition
(``--per-fetch``, one batch each). The broker is the scripted one of the
core's tests (tests/test_consumer_core.py: ``FakeKafka``), under simulated
time.

So that the broker's own work (decoding the 1,000-partition Fetch requests,
building the batches, encoding the answers) is not counted, a run first
*records* every exchange (request bytes, answer bytes) with the scripted
broker, outside the measurement; the measured run then *replays* the
answers, checking that each request is byte for byte the recorded one (the
core is deterministic: fixed topic id, seeded random). Under callgrind, two
measured runs with a different ``--records`` give the instructions per record
(start-up, imports, metadata and the replay file's loading per run cancel
out; reading the answers' bytes from the file stays, a copy)::

    python bench/consumer_cost.py --partitions 1000 --per-fetch 10 --callgrind 20000,100000

Without ``--callgrind`` it runs once (recording, then replaying) and prints
the number of Fetch requests.
"""
from __future__ import annotations

import argparse
import os
import pickle
import random
import subprocess
import sys
import tempfile
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
sys.path.insert(0, HERE)

from _callgrind import instructions  # noqa: E402

TOPIC = "t"
TOPIC_ID = uuid.UUID(int=27)          # fixed: the requests must be the same in every run


class _Recording:
    """A broker channel that keeps every (request, answer) exchange."""

    def __init__(self, channel, log):
        self.channel, self.log = channel, log

    def receive(self, data):
        reply = self.channel.receive(data)
        self.log.append((data, reply))
        return reply


class _Replay:
    """Hands back the recorded answers, checking that the core asks the same.

    One replay serves every connection: the order of the exchanges over all
    of them is part of what the core does deterministically."""

    def __init__(self, log):
        self.log, self.i = log, 0

    def channel(self):
        return self

    def receive(self, data):
        expected, reply = self.log[self.i]
        if data != expected:
            raise AssertionError(f"exchange {self.i}: the core sent other bytes than in the recording: "
                                 "is it deterministic?")
        self.i += 1
        return reply


def _scenario(partitions: int, records: int, per_fetch: int, channel_for, replaying: bool = False):
    """Consume ``records`` records spread over ``partitions`` partitions; returns (records, fetches)."""
    from kproto.consumer.core import ConsumerCore
    from kproto.records import BatchBuilder
    from test_consumer_core import FakeKafka, Sim
    from kproto.cluster import TopicPartition

    kafka = FakeKafka(partitions={TOPIC: partitions})
    kafka.ids[TOPIC] = TOPIC_ID
    per_partition = records // partitions
    if not replaying:                    # the replay never asks the broker: its logs would be counted
        for p in range(partitions):
            kafka.produce(TOPIC, p, per_partition)

    def fetch(req):
        # as FakeKafka._Fetch, but at most per_fetch records per partition and answer
        out = []
        for t in req.body["topics"]:
            ps = []
            for p in t["partitions"]:
                log = kafka.logs[(TOPIC, p["partition"])]
                start = p["fetch_offset"]
                recs = None
                if start < len(log):
                    b = BatchBuilder("none", 1 << 20, base_offset=start)
                    for k, v, ts in log[start:start + per_fetch]:
                        b.append(ts, k, v)
                    recs = b.build()
                ps.append({"partition_index": p["partition"], "error_code": 0, "high_watermark": len(log),
                           "last_stable_offset": len(log), "log_start_offset": 0,
                           "aborted_transactions": None, "preferred_read_replica": -1, "records": recs})
            out.append({"topic_id": t["topic_id"], "partitions": ps})
        return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": out}

    kafka.broker.on("Fetch", fetch)
    kafka.broker.channel = lambda original=kafka.broker.channel: channel_for(original)
    core = ConsumerCore({"bootstrap.servers": "b1:9092", "enable.auto.commit": False,
                         "client.id": "consumer-cost"}, rng=random.Random(27))
    sim = Sim(kafka, core)
    tps = [TopicPartition(TOPIC, p) for p in range(partitions)]
    core.assign(tps, 0)
    for tp in tps:
        core.seek(tp, 0)
    total = per_partition * partitions
    got = 0
    steps = 0
    while got < total:
        sim.step()
        sim.now += 1
        core.poll_called(sim.now)
        for offsets, _timestamps, _keys, values in core.drain_columns(1 << 62).values():
            got += len(values)
        steps += 1
        if steps > 10 * total + 1000:
            raise AssertionError(f"only {got} of {total} records")
    return got, kafka.count("Fetch")


def record(partitions: int, records: int, per_fetch: int) -> tuple[list, int]:
    """Run against the scripted broker; return its exchanges and the number of Fetch requests."""
    log: list = []
    _, fetches = _scenario(partitions, records, per_fetch, lambda make: _Recording(make(), log))
    return log, fetches


def replay(log: list, partitions: int, records: int, per_fetch: int):
    """Run against the recorded answers: the measured part."""
    replayed = _Replay(log)
    return _scenario(partitions, records, per_fetch, lambda make: replayed, replaying=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--per-fetch", type=int, default=10, help="records per partition in a Fetch answer")
    ap.add_argument("--replay", metavar="FILE", help="(internal) replay this recording")
    ap.add_argument("--callgrind", metavar="N0,N1", help="instructions per record: two runs under callgrind")
    args = ap.parse_args()
    if os.environ.get("PYTHONHASHSEED") != "0":
        # the order of partitions in a request follows set and dict iteration
        # over str-keyed TopicPartitions: the same order in every run needs the
        # same string hashes (valgrind's run inherits this environment)
        os.execve(sys.executable, [sys.executable, *sys.argv], dict(os.environ, PYTHONHASHSEED="0"))
    if args.replay:
        with open(args.replay, "rb") as f:
            log = pickle.load(f)
        replay(log, args.partitions, args.records, args.per_fetch)
        return
    if not args.callgrind:
        log, fetches = record(args.partitions, args.records, args.per_fetch)
        got, _ = replay(log, args.partitions, args.records, args.per_fetch)
        print(f"{args.partitions} partitions, {got:,} records, {args.per_fetch} per partition and answer: "
              f"{fetches:,} Fetch requests")
        return
    counts = [int(x) for x in args.callgrind.split(",")]
    found = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in counts:
            rec = os.path.join(tmp, f"log.{n}")
            with open(rec, "wb") as f:
                pickle.dump(record(args.partitions, n, args.per_fetch)[0], f)
            out = os.path.join(tmp, f"cg.{n}")
            subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
                            os.path.abspath(__file__), "--partitions", str(args.partitions), "--records", str(n),
                            "--per-fetch", str(args.per_fetch), "--replay", rec], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            found.append(instructions(out))
    dn = counts[1] - counts[0]
    print(f"{args.partitions} partitions, {args.per_fetch} records per partition and answer: "
          f"{(found[1] - found[0]) / dn:,.0f} instructions per record (callgrind, whole process, "
          f"{counts[0]:,} vs {counts[1]:,} records, answers replayed)")


if __name__ == "__main__":
    main()
