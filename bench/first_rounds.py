"""Who waits in the first rounds on a new many-partition topic: kio or the broker.

Runs bench_partitions.py's two producer rows (N keyed records x 100 B, each
client at its defaults, each round in its own process) on one new topic, in
the order given, after ``--warm`` untimed rounds, and prints per round: wall
seconds, CPU µs per record, the seconds spent in ``send()``/``produce()``
calls longer than 1 ms, and what the client saw of the broker -

* kio: its ``metrics()`` sampled every 250 ms (Produce requests and answers,
  batches sent, buffer.memory used, batches in flight, the answers' mean
  latency) and every failed batch answer by error (retried or not);
* confluent-kafka: its ``stats_cb`` (``statistics.interval.ms=250``): requests
  awaiting an answer, round-trip time, requests sent, retries.

bench/RESULTS.md, "The first round on a fresh topic", was measured this way.

    python bench/first_rounds.py --order kio,confluent,kio,confluent --warm 2
    python bench/first_rounds.py --order confluent,kio --warm 0 --bootstrap HOST:PORT
    python bench/first_rounds.py --order kio,confluent --fresh --count-errors --warm 0

``--fresh``: each round on its own topic created just before it;
``--count-errors``: confluent-kafka's failed message sets counted from its
``debug=msg`` log (its ``txretries`` does not count them).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_partitions as bp  # noqa: E402
from _bench import create_topic, load_average, measure, on_broker  # noqa: E402

SAMPLE_S = 0.25
SLOW_CALL_S = 0.001


def _timed(call, slow):
    """``call`` wrapped: the seconds of its calls over SLOW_CALL_S add up in slow[0]."""
    pc = time.perf_counter

    def timed(*args, **kwargs):
        t = pc()
        try:
            return call(*args, **kwargs)
        finally:
            d = pc() - t
            if d > SLOW_CALL_S:
                slow[0] += d
    return timed


def _count_failed_answers():
    """Every failed batch answer by error name (kio's metrics count only the
    batches that finally failed, not the retried ones; "+hint": those whose
    answer moved the leader, KIP-951), and the Metadata requests made
    ("Metadata requests"). A probe: it wraps the sender's and the metadata
    cache's methods for this process only."""
    from kproto.cluster import ClusterMetadata
    from kproto.producer.sender import Sender
    counts: dict = {}
    complete = Sender._complete
    request_body = ClusterMetadata.request_body

    def counting(self, batch, err, *args, **kwargs):
        if err is not None:
            name = type(err).__name__ + ("+hint" if kwargs.get("leader_hinted") else "")
            counts[name] = counts.get(name, 0) + 1
        return complete(self, batch, err, *args, **kwargs)

    def counting_metadata(self, now):
        counts["Metadata requests"] = counts.get("Metadata requests", 0) + 1
        return request_body(self, now)
    Sender._complete = counting
    ClusterMetadata.request_body = counting_metadata
    return counts


def kio_round(bootstrap, topic, n):
    from kio import Producer
    failed = _count_failed_answers()
    keys = bp.random_keys(n)
    p = Producer(bootstrap_servers=bootstrap)
    p.partitions_for(topic)
    slow, samples, stop = [0.0], [], threading.Event()
    t0 = time.perf_counter()

    def sample():
        while not stop.is_set():
            m = p.metrics()
            samples.append({"t": round(time.perf_counter() - t0, 2), "requests": m["requests"],
                            "answers": m["responses"], "batches": m["batches_sent"],
                            "buffer_used": m["buffer_used_bytes"], "in_flight": m["in_flight_batches"],
                            "latency_ms": round(m["request_latency_ms_avg"], 1)})
            stop.wait(SAMPLE_S)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()

    def run():
        send = _timed(p.send, slow)
        for k in keys:
            send(topic, bp.VALUE, key=k)
        assert p.flush() == 0
    try:
        rate, us, secs = measure(run, n)
    finally:
        stop.set()
        sampler.join()
        m = p.metrics()
        p.close()
    return {"rate": rate, "us": us, "secs": secs, "slow_calls_s": slow[0], "failed_answers": failed,
            "batches": m["batches_sent"], "requests": m["requests"],
            "max_buffer_used": max((s["buffer_used"] for s in samples), default=0), "samples": samples}


def confluent_round(bootstrap, topic, n):
    import confluent_kafka as ck
    keys = bp.random_keys(n)
    samples = []
    t0 = time.perf_counter()

    def on_stats(text):
        d = json.loads(text)
        for b in d["brokers"].values():
            if b.get("nodeid", -1) >= 0:
                samples.append({"t": round(time.perf_counter() - t0, 2), "node": b["nodeid"], "awaiting": b["waitresp_cnt"],
                                "queued": b["outbuf_cnt"], "requests": b["tx"], "retries": b["txretries"],
                                "rtt_ms": round(b["rtt"]["avg"] / 1000, 1),
                                "rtt_max_ms": round(b["rtt"]["max"] / 1000, 1),
                                "produce": b["req"].get("Produce", 0), "metadata": b["req"].get("Metadata", 0)})
    conf = {"bootstrap.servers": bootstrap, "statistics.interval.ms": int(SAMPLE_S * 1000), "stats_cb": on_stats}
    log = _librdkafka_log_to_file(conf) if os.environ.get(COUNT_ERRORS_ENV) else None
    p = ck.Producer(conf)
    p.list_topics(topic, timeout=10)
    slow = [0.0]

    def run():
        produce, poll = p.produce, p.poll
        for i, k in enumerate(keys):
            while True:
                try:
                    produce(topic, bp.VALUE, key=k)
                    break
                except BufferError:
                    _timed(poll, slow)(0.01)
            if i % 1000 == 0:
                poll(0)
        assert p.flush(60) == 0
    rate, us, secs = measure(run, n)
    p.poll(SAMPLE_S + 0.05)                   # one more stats report
    failed = _failed_message_sets(log) if log is not None else "not counted (--count-errors)"
    return {"failed_answers": failed, "rate": rate, "us": us, "secs": secs, "slow_calls_s": slow[0], "samples": samples,
            "max_awaiting": max((s["awaiting"] for s in samples), default=0),
            "max_rtt_ms": max((s["rtt_max_ms"] for s in samples), default=0),
            "retries": max((s["retries"] for s in samples), default=0),
            "produce_requests": _last_per_broker(samples, "produce"),
            "metadata_requests": _last_per_broker(samples, "metadata")}


def _last_per_broker(samples, key):
    """The sum over brokers of ``key``'s last (largest) value: librdkafka's
    counters are per broker and only grow."""
    last: dict = {}
    for s in samples:
        last[s["node"]] = max(last.get(s["node"], 0), s[key])
    return sum(last.values())


#: Set for a confluent round: count the failed message sets (below)
COUNT_ERRORS_ENV = "FIRST_ROUNDS_COUNT_ERRORS"


def _librdkafka_log_to_file(conf):
    """librdkafka's ``debug=msg`` log, to a file this process's stderr is
    pointed at: its stats count request retries (``txretries``) but not a
    partition's message set re-queued after an error such as
    NOT_LEADER_OR_FOLLOWER, which only this log tells. It costs CPU: such a
    round's timing is not comparable."""
    import tempfile
    log = tempfile.NamedTemporaryFile(prefix="first_rounds-librdkafka-", suffix=".log", delete=False)
    os.dup2(log.fileno(), 2)
    conf["debug"] = "msg"
    return log.name


def _failed_message_sets(path):
    """{error: count} of the message sets librdkafka's log says failed
    ("... encountered error: <error> (actions ...)"), then the log removed."""
    counts: dict = {}
    with open(path, errors="replace") as f:
        for line in f:
            if "encountered error: " in line:
                name = line.split("encountered error: ", 1)[1].split(" (actions", 1)[0].strip()
                counts[name] = counts.get(name, 0) + 1
    os.unlink(path)
    return counts


ROUNDS = {"kio": kio_round, "confluent": confluent_round}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--order", default="kio,confluent,kio,confluent",
                    help="comma-separated rounds: kio, confluent")
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--warm", type=int, default=2, help="untimed kio rounds first (min(N, 100,000) records)")
    ap.add_argument("--pause", type=float, default=0.0, help="seconds between the warm-up and the first round")
    ap.add_argument("--bootstrap", help="use this running broker instead of starting Apache Kafka")
    ap.add_argument("--samples", action="store_true", help="print every sample too")
    ap.add_argument("--count-errors", action="store_true",
                    help="count confluent-kafka's failed message sets from its debug=msg log (slows its rounds)")
    ap.add_argument("--fresh", action="store_true",
                    help="each round on its own topic, created just before it (no warm-up)")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        client, bootstrap, topic = args.child
        out = ROUNDS[client](bootstrap, topic, args.records)
        out["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(out), flush=True)
        return
    order = args.order.split(",")
    unknown = [c for c in order if c not in ROUNDS]
    if unknown:
        ap.error(f"--order: unknown client(s) {', '.join(unknown)}; expected kio or confluent")

    def run(bootstrap):
        topic = create_topic(bootstrap, args.partitions)
        for _ in range(args.warm):
            t = time.perf_counter()
            bp.run_child({"row": 0, "bootstrap": bootstrap, "topic": topic,
                          "records": min(args.records, 100_000), "partitions": args.partitions})
            print(f"warm round: {time.perf_counter() - t:.2f} s", flush=True)
        time.sleep(args.pause)
        for i, client in enumerate(order):
            if args.fresh:
                topic = create_topic(bootstrap, args.partitions)
            out = subprocess.run([sys.executable, os.path.abspath(__file__), "--records", str(args.records),
                                  "--child", client, bootstrap, topic],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=bp.TIMEOUT * 2,
                                 env={**os.environ, COUNT_ERRORS_ENV: "1" if args.count_errors else ""})
            if out.returncode != 0:
                print(f"{client}: failed: {out.stderr.decode('utf-8', 'replace')[-1500:]}", flush=True)
                continue
            r = json.loads(out.stdout.decode().strip().splitlines()[-1])
            samples = r.pop("samples")
            print(f"round {i + 1} {client:9s} {r.pop('secs'):6.2f} s {r.pop('rate'):9,.0f} rec/s "
                  f"{r.pop('us'):6.2f} CPU us/rec, slow calls {r.pop('slow_calls_s'):.2f} s, "
                  f"RSS {r.pop('rss_mb'):.0f} MB, {r} (load {load_average()})", flush=True)
            if args.samples:
                for s in samples:
                    print("    ", s)

    on_broker(run, args.bootstrap)


if __name__ == "__main__":
    main()
