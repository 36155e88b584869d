"""Why kio's producer CPU per record swings over many partitions: batches per record.

With random keys over 1,000 partitions a batch holds the records a partition
gets while the previous request is in flight, so records per batch follow the
broker's Produce latency (a warming JVM, a fresh topic) more than the client.
This bench runs kio's keyed producer (defaults) and confluent-kafka's in
alternating rounds on one topic, each in a child process, and prints per kio
round its CPU per record, records/s, batches per record and the Produce
request latency, then fits kio's CPU per record to
``per_record + per_batch * batches_per_record`` (least squares): the per-batch
cost is what the 1,000-partition aim of issue 27 depends on.

    python bench/producer_batching.py --partitions 1000 --rounds 8

The broker is Apache Kafka started by the bench (``--bootstrap`` for a running
one); the first round of each client is a warm-up on the fresh topic and is
left out of the medians and the fit.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _bench import create_topic, load_average, local_broker  # noqa: E402
from bench_partitions import produce_confluent, produce_kio  # noqa: E402


def produce_kio_counted(bootstrap, topic, n):
    """kio's keyed producer at its defaults; with the batches it made and its Produce latency."""
    m = {}
    rate, us, _ = produce_kio(bootstrap, topic, n, metrics=m)
    return {"rate": rate, "us": us, "batches_per_record": m["batches_sent"] / n,
            "produce_latency_ms": m["request_latency_ms_avg"]}


def child(client, bootstrap, topic, n):
    if client == "kio":
        return produce_kio_counted(bootstrap, topic, n)
    rate, us, _ = produce_confluent(bootstrap, topic, n)
    return {"rate": rate, "us": us}


def fit(points):
    """Least squares of us = a + b * batches_per_record: (a, b)."""
    xs, ys = [x for x, _ in points], [y for _, y in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else 0.0
    return my - b * mx, b


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--bootstrap", help="use this running broker instead of starting one")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        spec = json.loads(args.child)
        print(json.dumps(child(spec["client"], spec["bootstrap"], spec["topic"], spec["records"])))
        return

    def run(bootstrap):
        topic = create_topic(bootstrap, args.partitions)
        got = {"kio": [], "confluent": []}
        for r in range(args.rounds):
            for client in got:
                spec = {"client": client, "bootstrap": bootstrap, "topic": topic, "records": args.records}
                out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
                if out.returncode:
                    raise RuntimeError(f"{client} round {r + 1} failed: {out.stderr[-2000:]}")
                res = json.loads(out.stdout.strip().splitlines()[-1])
                got[client].append(res)
                extra = (f"  {res['batches_per_record']:.3f} batches/record, Produce latency "
                         f"{res['produce_latency_ms']:.0f} ms" if client == "kio" else "")
                print(f"round {r + 1}: {client:9s} {res['rate']:10,.0f} rec/s {res['us']:6.2f} CPU us/rec{extra}"
                      f"  (load {load_average()})", flush=True)
        kio, ck = got["kio"][1:], got["confluent"][1:]
        if not kio:
            return
        kio_us, ck_us = statistics.median(r["us"] for r in kio), statistics.median(r["us"] for r in ck)
        print(f"\nmedians without the first round: kio {kio_us:.2f}, confluent-kafka {ck_us:.2f} CPU us/record "
              f"({kio_us / ck_us:.2f}x); records/s {statistics.median(r['rate'] for r in kio):,.0f} vs "
              f"{statistics.median(r['rate'] for r in ck):,.0f}")
        a, b = fit([(r["batches_per_record"], r["us"]) for r in kio])
        print(f"kio CPU per record ~ {a:.2f} us + {b:.1f} us per batch x batches per record")

    if args.bootstrap:
        run(args.bootstrap)
    else:
        with local_broker("kafka") as broker:
            run(broker.bootstrap_servers)


if __name__ == "__main__":
    main()
