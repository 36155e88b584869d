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


def _scenario(partitions: int, records: int, per_fetch: int, channel_for, replaying: bool = False,
              busy: int = 0, sessions: bool = True):
    """Consume ``records`` records spread over ``busy`` of ``partitions``
    partitions (0: all); returns (records, fetches). The scripted broker
    keeps KIP-227 fetch sessions when asked (session epoch 0), as Kafka:
    an incremental answer lists only the partitions with records or a new
    high watermark; ``sessions`` False: the consumer asks for none."""
    from kproto.consumer.core import ConsumerCore
    from kproto.records import BatchBuilder
    from test_consumer_core import FakeKafka, Sim
    from kproto.cluster import TopicPartition

    kafka = FakeKafka(partitions={TOPIC: partitions})
    kafka.ids[TOPIC] = TOPIC_ID
    busy = busy or partitions
    per_partition = records // busy
    if not replaying:                    # the replay never asks the broker: its logs would be counted
        for p in range(busy):
            kafka.produce(TOPIC, p, per_partition)
    held: dict = {}                      # the broker's fetch sessions: id -> {partition: [offset, hw sent]}

    def fetch(req):
        # as FakeKafka._Fetch, but at most per_fetch records per partition
        # and answer, and with fetch sessions
        body = req.body
        listed = {p["partition"]: p["fetch_offset"] for t in body["topics"] for p in t["partitions"]}
        session_id, epoch = body.get("session_id", 0), body.get("session_epoch", -1)
        if epoch > 0:
            session = held[session_id]
            for t in body["forgotten_topics_data"]:
                for p in t["partitions"]:
                    session.pop(p, None)
        else:
            session = {}
            held.pop(session_id, None)
            session_id = len(held) + 1 if epoch == 0 else 0
            if session_id:
                held[session_id] = session
        for p, offset in listed.items():
            session[p] = [offset, session.get(p, [0, None])[1]]
        ps = []
        for partition, entry in session.items():
            log = kafka.logs[(TOPIC, partition)]
            start = entry[0]
            recs = None
            if start < len(log):
                b = BatchBuilder("none", 1 << 20, base_offset=start)
                for k, v, ts in log[start:start + per_fetch]:
                    b.append(ts, k, v)
                recs = b.build()
            if epoch > 0 and recs is None and entry[1] == len(log):
                continue                 # incremental: nothing new for this partition
            entry[1] = len(log)
            ps.append({"partition_index": partition, "error_code": 0, "high_watermark": len(log),
                       "last_stable_offset": len(log), "log_start_offset": 0,
                       "aborted_transactions": None, "preferred_read_replica": -1, "records": recs})
        if not session_id:
            held.clear()
        out = [{"topic_id": TOPIC_ID, "partitions": ps}] if ps else []
        return {"throttle_time_ms": 0, "error_code": 0, "session_id": session_id, "responses": out}

    kafka.broker.on("Fetch", fetch)
    kafka.broker.channel = lambda original=kafka.broker.channel: channel_for(original)
    core = ConsumerCore({"bootstrap.servers": "b1:9092", "enable.auto.commit": False,
                         "client.id": "consumer-cost"}, rng=random.Random(27))
    core.fetcher.use_sessions = sessions
    sim = Sim(kafka, core)
    tps = [TopicPartition(TOPIC, p) for p in range(partitions)]
    core.assign(tps, 0)
    for tp in tps:
        core.seek(tp, 0)
    total = per_partition * busy
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


def record(partitions: int, records: int, per_fetch: int, **kw) -> tuple[list, int]:
    """Run against the scripted broker; return its exchanges and the number of Fetch requests."""
    log: list = []
    _, fetches = _scenario(partitions, records, per_fetch, lambda make: _Recording(make(), log), **kw)
    return log, fetches


def replay(log: list, partitions: int, records: int, per_fetch: int, **kw):
    """Run against the recorded answers: the measured part."""
    replayed = _Replay(log)
    return _scenario(partitions, records, per_fetch, lambda make: replayed, replaying=True, **kw)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--per-fetch", type=int, default=10, help="records per partition in a Fetch answer")
    ap.add_argument("--busy", type=int, default=0,
                    help="only this many partitions receive records (default: all)")
    ap.add_argument("--no-sessions", action="store_true",
                    help="full Fetch requests only (no KIP-227 fetch sessions): the reference")
    ap.add_argument("--replay", metavar="FILE", help="(internal) replay this recording")
    ap.add_argument("--callgrind", metavar="N0,N1", help="instructions per record: two runs under callgrind")
    ap.add_argument("--keep", metavar="DIR",
                    help="with --callgrind: keep the two callgrind files in DIR (cg.N0, cg.N1) and print a JSON "
                         "line for bench/_callgrind_functions.py --consumer (per-function tables)")
    args = ap.parse_args()
    kw = {"busy": args.busy, "sessions": not args.no_sessions}
    if os.environ.get("PYTHONHASHSEED") != "0":
        # the order of partitions in a request follows set and dict iteration
        # over str-keyed TopicPartitions: the same order in every run needs the
        # same string hashes (valgrind's run inherits this environment)
        os.execve(sys.executable, [sys.executable, *sys.argv], dict(os.environ, PYTHONHASHSEED="0"))
    if args.replay:
        with open(args.replay, "rb") as f:
            log = pickle.load(f)
        replay(log, args.partitions, args.records, args.per_fetch, **kw)
        return
    if not args.callgrind:
        log, fetches = record(args.partitions, args.records, args.per_fetch, **kw)
        got, _ = replay(log, args.partitions, args.records, args.per_fetch, **kw)
        print(f"{args.partitions} partitions, {got:,} records, {args.per_fetch} per partition and answer: "
              f"{fetches:,} Fetch requests")
        return
    counts = [int(x) for x in args.callgrind.split(",")]
    found = []
    with tempfile.TemporaryDirectory() as tmp:
        outdir = os.path.abspath(args.keep) if args.keep else tmp
        os.makedirs(outdir, exist_ok=True)
        for n in counts:
            rec = os.path.join(tmp, f"log.{n}")
            with open(rec, "wb") as f:
                pickle.dump(record(args.partitions, n, args.per_fetch, **kw)[0], f)
            out = os.path.join(outdir, f"cg.{n}")
            subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
                            os.path.abspath(__file__), "--partitions", str(args.partitions), "--records", str(n),
                            "--per-fetch", str(args.per_fetch), "--busy", str(args.busy),
                            *(["--no-sessions"] if args.no_sessions else []), "--replay", rec], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            found.append(instructions(out))
    dn = counts[1] - counts[0]
    print(f"{args.partitions} partitions ({args.busy or 'all'} with records, fetch sessions "
          f"{'off' if args.no_sessions else 'on'}), {args.per_fetch} records per partition and answer: "
          f"{(found[1] - found[0]) / dn:,.0f} instructions per record (callgrind, whole process, "
          f"{counts[0]:,} vs {counts[1]:,} records, answers replayed)")
    if args.keep:
        import json
        print(json.dumps({"out": outdir, "records": counts,
                          "instructions_per_record": round((found[1] - found[0]) / dn)}))


if __name__ == "__main__":
    main()
