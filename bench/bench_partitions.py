"""How the cost of a record grows with the partitions it may go to: kio vs confluent-kafka and the Java client.

For each partition count (``--partitions``, default 1,10,100,1000; add
10000 where the machine allows it: a single-node Apache Kafka with 10,000
partitions needs about 2 GB of heap and several minutes to create them, so it
is left out by default) the bench runs, each in a fresh child process (so
its peak RSS is its own):

* producer: N records of 100 bytes with a random 16-byte key each (the
  default partitioner spreads them over every partition), each client at its
  defaults (kio: acks=all + idempotence; confluent-kafka: its own), ending
  with flush. kio ``send(key=)`` against confluent-kafka ``produce(key=)``
  (``poll(0)`` every 1,000 records).
* consumer, all partitions assigned from offset 0 (no group), and in a group
  (subscribe, a fresh group id, auto.offset.reset earliest): N records
  written before (keyed, as above) read until all are in hand, every value
  touched. kio ``poll_batch()`` and ``poll()`` against confluent-kafka
  ``consume(500)``.

The Java client (kafka-clients of kio.testing's Kafka, at its defaults:
acks=all, idempotence, linger.ms 5) runs the same workloads in
bench/java/KioBench.java, compiled at run time by bench/_java.py (needs a
JDK's javac): ``send(key, value, callback)`` (the callback counts errors),
then flush; ``poll(1 s)``, every value touched. Its rows are a child JVM
each (``-Xmx1g``, its default collector) that measures itself: records/s on
the JVM's clock, CPU from OperatingSystemMXBean.getProcessCpuTime() over the
same interval as the Python rows' (producer: first send to the end of flush;
consumer: making the consumer to the last record, after a consumer made and
closed beforehand loaded its classes, as the Python rows import their
client first), the whole JVM - every thread, the JIT compiler's and the
GC's included - with the 10 ms granularity of that counter; peak RSS is the
JVM's own VmHWM, which includes as much of the heap as the collector
touched, not only what the client holds. ``java`` is a fresh JVM, whose
figures include the JIT compiling the hot paths (its round lines print the
JIT's and GC's time in the interval); ``java, warm JVM`` runs the workload
``--java-warm-rounds`` times (default 2) in one JVM and reports the last,
closer to a long-running application's steady state (the round lines show
how much the JIT still compiled in it, and the earlier rounds' CPU).

Rows run in alternating rounds (``--repeat``, default 3: every row once per
round, each round starting with the next row), so a machine that gets busier
or quieter moves every client alike, and no client is always the first;
the tables give medians and ratios against confluent-kafka in the same run.
CPU is the child process's getrusage user+system (every thread: kio's
network thread, librdkafka's threads), not the broker's; RSS is the child's
peak (VmHWM, see peak_rss_mb), imports included. The markdown tables and the PNG plot
(``--plot``, needs matplotlib: ``pip install 'kproto-kio[bench]'``) are what
bench/RESULTS.md shows.

    python bench/bench_partitions.py --records 300000 --repeat 3 --plot bench/partitions.png
    python bench/bench_partitions.py --partitions 1,10,100,1000,10000 ...

``--topic-config KEY=VALUE`` (repeatable) gives the bench's topics a topic
config. At 10,000 partitions a single broker's appends are bound by the page
cache around its sparse index files (bench/RESULTS.md, "where the broker's
time goes": ~1 ms a partition append); ``--topic-config
segment.index.bytes=65536`` makes them small, so the rows measure the
clients rather than the broker's read-ahead. The title names the configs.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _bench import broker_label, create_topic, load_average, local_broker, measure  # noqa: E402

VALUE = b"x" * 100
TIMEOUT = 300.0
#: untimed rounds of records written to each producer topic before the timed ones
WARM_ROUNDS = 2


def random_keys(n, seed=1):
    rnd = random.Random(seed)
    return [rnd.getrandbits(128).to_bytes(16, "big") for _ in range(n)]


# -- one measurement, in a child process ----------------------------------------------------------

def produce_kio(bootstrap, topic, n, metrics=None):
    """kio's keyed producer at its defaults; ``metrics``, a dict, gets the
    producer's metrics() once it has flushed (bench/producer_batching.py)."""
    from kio import Producer
    keys = random_keys(n)
    p = Producer(bootstrap_servers=bootstrap)
    p.partitions_for(topic)

    def run():
        send = p.send
        for k in keys:
            send(topic, VALUE, key=k)
        assert p.flush() == 0
    try:
        return measure(run, n)
    finally:
        if metrics is not None:
            metrics.update(p.metrics())
        p.close()


def produce_confluent(bootstrap, topic, n):
    import confluent_kafka as ck
    keys = random_keys(n)
    p = ck.Producer({"bootstrap.servers": bootstrap})
    p.list_topics(topic, timeout=10)

    def run():
        produce, poll = p.produce, p.poll
        for i, k in enumerate(keys):
            while True:
                try:
                    produce(topic, VALUE, key=k)
                    break
                except BufferError:           # queue.buffering.max.messages: serve reports, retry
                    poll(0.01)
            if i % 1000 == 0:
                poll(0)
        assert p.flush(60) == 0
    return measure(run, n)


def _read_all(make, read_round, close, n):
    """Create a client and read until n records are in hand (both measured)."""
    held = []

    def run():
        c = make()
        held.append(c)
        got, start = 0, time.monotonic()
        while got < n and time.monotonic() - start < TIMEOUT:
            got += read_round(c)
        if got < n:
            raise RuntimeError(f"only {got} of {n} records after {time.monotonic() - start:.0f} s")
    try:
        return measure(run, n)
    finally:
        if held:
            close(held[0])


def _kio_consumer(bootstrap, topic, partitions, group):
    c = _kio_consumer_of(bootstrap, topic, partitions, group)
    if os.environ.get("KIO_BENCH_NO_FETCH_SESSIONS") == "1":    # --no-fetch-sessions: the reference
        c._core.fetcher.use_sessions = False
    return c


def _kio_consumer_of(bootstrap, topic, partitions, group):
    from kio import Consumer, TopicPartition
    if group:
        c = Consumer(bootstrap_servers=bootstrap, group_id="bench-" + os.urandom(4).hex(),
                     auto_offset_reset="earliest", enable_auto_commit=False)
        c.subscribe([topic])
        return c
    c = Consumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    c.assign(tps)
    for tp in tps:
        c.seek(tp, 0)
    return c


def consume_kio_batch(bootstrap, topic, n, partitions, group):
    # kio's public names load on first use: load the consumer's modules before
    # the measurement, as consume_confluent imports confluent_kafka before its own
    import kio.consumer  # noqa: F401
    return _read_all(lambda: _kio_consumer(bootstrap, topic, partitions, group),
                     lambda c: sum(len(b.values) for b in c.poll_batch(1.0)), lambda c: c.close(), n)


def consume_kio_poll(bootstrap, topic, n, partitions, group):
    # kio's public names load on first use: load the consumer's modules before
    # the measurement, as consume_confluent imports confluent_kafka before its own
    import kio.consumer  # noqa: F401
    def read_round(c):
        records = c.poll(1.0)
        for r in records:
            r.value
        return len(records)
    return _read_all(lambda: _kio_consumer(bootstrap, topic, partitions, group), read_round,
                     lambda c: c.close(), n)


def consume_confluent(bootstrap, topic, n, partitions, group):
    import confluent_kafka as ck

    def make():
        c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-" + os.urandom(4).hex(),
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        if group:
            c.subscribe([topic])
        else:
            c.assign([ck.TopicPartition(topic, p, 0) for p in range(partitions)])
        return c

    def read_round(c):
        got = 0
        for m in c.consume(500, 1.0):
            if m.error() is None:
                m.value()
                got += 1
        return got
    return _read_all(make, read_round, lambda c: c.close(), n)


def _java_row(mode, spec, *extra):
    """A Java row (bench/java/KioBench.java) in a child JVM of its own: it
    measures itself (records/s, CPU over the measured interval, its VmHWM).
    ``spec["rounds"]`` > 1: the workload runs that many times in the JVM,
    the last reported (a JIT-warm JVM)."""
    import _java
    r = _java.kio_bench(mode, spec["bootstrap"], spec["topic"], spec["records"], *extra, spec.get("rounds", 1),
                        timeout=TIMEOUT * 2 * spec.get("rounds", 1))
    if r["records"] < spec["records"] or r.get("errors"):
        raise RuntimeError(f"KioBench {mode}: {r}")
    return r


def produce_java(spec):
    return _java_row("produce", spec)


def consume_java_assigned(spec):
    return _java_row("consume-assign", spec, spec["partitions"])


def consume_java_group(spec):
    return _java_row("consume-group", spec)


def warm(fn):
    """The Java row ``fn`` in a JIT-warm JVM: its workload ``--java-warm-rounds``
    times (default 2), the last measured."""
    return lambda spec: fn({**spec, "rounds": spec.get("warm_rounds", 2)})


# (client, call, role, function): role "produce", "assigned" or "group"; the
# Java rows' functions take the spec and run in the parent (their JVM is the child)
ROWS = [
    ("kio", "send(key=)", "produce", produce_kio),
    ("confluent-kafka", "produce(key=)", "produce", produce_confluent),
    ("kio", "poll_batch()", "assigned", consume_kio_batch),
    ("kio", "poll()", "assigned", consume_kio_poll),
    ("confluent-kafka", "consume(500)", "assigned", consume_confluent),
    ("kio", "poll_batch()", "group", consume_kio_batch),
    ("confluent-kafka", "consume(500)", "group", consume_confluent),
    ("java", "send(key=)", "produce", produce_java),
    ("java", "poll()", "assigned", consume_java_assigned),
    ("java", "poll()", "group", consume_java_group),
    ("java, warm JVM", "send(key=)", "produce", warm(produce_java)),
    ("java, warm JVM", "poll()", "assigned", warm(consume_java_assigned)),
    ("java, warm JVM", "poll()", "group", warm(consume_java_group)),
]


def child(spec):
    """Run one row (``spec`` as JSON) and print its result as one JSON line."""
    client, call, role, fn = ROWS[spec["row"]]
    if role == "produce":
        rate, us, secs = fn(spec["bootstrap"], spec["topic"], spec["records"])
    else:
        rate, us, secs = fn(spec["bootstrap"], spec["topic"], spec["records"], spec["partitions"],
                            role == "group")
    rss_mb = peak_rss_mb()
    print(json.dumps({"rate": rate, "us": us, "secs": secs, "rss_mb": rss_mb}), flush=True)


def peak_rss_mb():
    """This process's peak RSS. Linux's ru_maxrss of an exec'd child keeps the
    high-water mark of the process it was forked from (the parent, which after
    a 10,000-partition Metadata answer is larger than either client), so the
    kernel's VmHWM of this process's own memory is read where there is one."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_child(spec):
    client, _, _, fn = ROWS[spec["row"]]
    if client.startswith("java"):
        return fn(spec)
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=TIMEOUT * 2)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.decode("utf-8", "replace")[-1500:])
    return json.loads(out.stdout.decode().strip().splitlines()[-1])


# -- the parent: topics, rounds, tables, plot -------------------------------------------------------

def fill(bootstrap, topic, n):
    """n keyed records (the same random keys as the producer rows) for the consumer rows."""
    from kio import Producer
    with Producer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=262144,
                  buffer_memory=256 << 20) as p:
        keys = random_keys(n, seed=2)
        for i in range(0, n, 100_000):
            p.send_many(topic, [VALUE] * len(keys[i:i + 100_000]), keys=keys[i:i + 100_000])
        assert p.flush() == 0


def markdown(results, partition_counts, n, title):
    """One table per role: per partition count, each row's medians and its
    ratio to confluent-kafka's row of the same role and partition count."""
    out = [title, ""]
    for role, heading in (("produce", "Producer, random keys"),
                          ("assigned", "Consumer, all partitions assigned"),
                          ("group", "Consumer in a group")):
        out += [f"**{heading}**", "",
                "| partitions | client | records/s | CPU µs/record | peak RSS MB | records/s vs confluent | "
                "CPU vs confluent |", "|---|---|---|---|---|---|---|"]
        for parts in partition_counts:
            rows = [(k, v) for k, v in results.items() if k[2] == role and k[3] == parts and v]
            base = next((v for k, v in rows if k[0] == "confluent-kafka"), None)
            for (client, call, _, _), runs in rows:
                rate = statistics.median(r["rate"] for r in runs)
                us = statistics.median(r["us"] for r in runs)
                rss = statistics.median(r["rss_mb"] for r in runs)
                ratio = "- | -"
                if base:
                    brate = statistics.median(r["rate"] for r in base)
                    bus = statistics.median(r["us"] for r in base)
                    ratio = f"{rate / brate:.2f}× | {us / bus:.2f}×"
                out.append(f"| {parts:,} | {client} `{call}` | {rate:,.0f} | {us:.2f} | {rss:.0f} | {ratio} |")
        out.append("")
    return "\n".join(out)


def plot(results, partition_counts, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for ax, role, heading in zip(axes, ("produce", "assigned", "group"),
                                 ("producer, random keys", "consumer, all assigned", "consumer in a group")):
        for client, call in sorted({(k[0], k[1]) for k in results if k[2] == role}):
            xs, ys = [], []
            for parts in partition_counts:
                runs = results.get((client, call, role, parts))
                if runs:
                    xs.append(parts)
                    ys.append(statistics.median(x["us"] for x in runs))
            ax.plot(xs, ys, marker="o", label=f"{client} {call}")
        ax.set_xscale("log")
        ax.set_xlabel("partitions")
        ax.set_ylabel("CPU µs / record (median)")
        ax.set_title(heading)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--partitions", default="1,10,100,1000",
                    help="comma-separated partition counts (10000 is possible, see the docstring)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", action="append", help="run only rows whose 'client call role' contains this")
    ap.add_argument("--broker", choices=("kafka", "tansu"), default="kafka")
    ap.add_argument("--bootstrap", help="use this running broker instead of starting one")
    ap.add_argument("--plot", help="write the PNG plot here")
    ap.add_argument("--table", help="write the markdown tables here too")
    ap.add_argument("--no-fetch-sessions", action="store_true",
                    help="kio's consumers send full Fetch requests only (no KIP-227 sessions)")
    ap.add_argument("--java-warm-rounds", type=int, default=2,
                    help="the 'java, warm JVM' rows run their workload this many times in one JVM, the last measured")
    ap.add_argument("--topic-config", action="append", default=[], metavar="KEY=VALUE",
                    help="a topic config of the bench's topics (repeatable), e.g. segment.index.bytes=65536")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.no_fetch_sessions:
        os.environ["KIO_BENCH_NO_FETCH_SESSIONS"] = "1"          # the children inherit it
    if args.child:
        return child(json.loads(args.child))
    counts = [int(x) for x in args.partitions.split(",")]
    configs = topic_configs(args.topic_config)
    n = args.records
    load_before = load_average()
    rows = [i for i, (client, call, role, _) in enumerate(ROWS)
            if not args.only or any(o in f"{client} {call} {role}" for o in args.only)]
    results = {}

    def run(bootstrap, label):
        produce_topics = {p: create_topic(bootstrap, p, configs) for p in counts}
        consume_topics = {}
        for p in counts:
            consume_topics[p] = create_topic(bootstrap, p, configs)
            fill(bootstrap, consume_topics[p], n)
            # warm: the first heavy writes to a new topic's partitions cost the
            # broker (at 1,000 partitions the first round of 100,000 records took
            # 5-17 s, the next ones 0.6-1.5 s, whichever client wrote; after one
            # warm round the first timed round was still slow for whichever client
            # went first, after two it was not: bench/RESULTS.md, "The first round
            # on a fresh topic"): untimed, written by the kio row in its own process.
            for _ in range(WARM_ROUNDS):
                run_child({"row": 0, "bootstrap": bootstrap, "topic": produce_topics[p],
                           "records": min(n, 100_000), "partitions": p})
        for k in range(args.repeat):
            for p in counts:
                # each round starts with another row, so no client is always the
                # first to write to a topic after the others' rows
                for i in rows[k % len(rows):] + rows[:k % len(rows)]:
                    client, call, role, _ = ROWS[i]
                    topic = produce_topics[p] if role == "produce" else consume_topics[p]
                    key = (client, call, role, p)
                    try:
                        r = run_child({"row": i, "bootstrap": bootstrap, "topic": topic, "records": n,
                                       "partitions": p, "warm_rounds": args.java_warm_rounds})
                    except Exception as e:  # noqa: BLE001 - report and go on with the others
                        print(f"{client} {call} {role} {p}: failed: {e}", file=sys.stderr, flush=True)
                        results.setdefault(key, [])
                        continue
                    results.setdefault(key, []).append(r)
                    print(f"round {k + 1}: {p:6,} partitions {client:16s} {call:14s} {role:8s} "
                          f"{r['rate']:10,.0f} rec/s {r['us']:7.2f} CPU us/rec {r['rss_mb']:6.0f} MB  "
                          + (f"JIT {r['jit_ms']} ms GC {r['gc_ms']} ms earlier rounds {r['earlier_us']} "
                             if "jit_ms" in r else "")
                          + f"(load {load_average()})", flush=True)
        return label

    if args.bootstrap:
        label = run(args.bootstrap, "a running broker")
    else:
        with local_broker(args.broker) as broker:
            label = run(broker.bootstrap_servers, broker_label(broker))
    extra = "".join(f" --only {o}" for o in args.only or ()) + (
        f" --java-warm-rounds {args.java_warm_rounds}" if args.java_warm_rounds != 2 else "") + "".join(
        f" --topic-config {k}={v}" for k, v in configs.items())
    title = (f"`python bench/bench_partitions.py --records {n} --repeat {args.repeat} --partitions "
             f"{args.partitions}{extra}`: {n:,} records x {len(VALUE)} B, random 16-byte keys; {label}; Python "
             f"{sys.version.split()[0]}; median of {args.repeat} alternating rounds; "
             f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; load average "
             f"{load_before} before, {load_average()} after")
    table = markdown(results, counts, n, title)
    print()
    print(table)
    if args.table:
        with open(args.table, "w") as f:
            f.write(table + "\n")
    if args.plot:
        plot(results, counts, args.plot, f"{n:,} records x 100 B, random keys; {label}; median of "
                                         f"{args.repeat} rounds; load {load_before}")


def topic_configs(items: list) -> dict:
    """``KEY=VALUE`` strings as a dict of topic configs; a malformed one is
    an error that names it (the broker checks names and values itself)."""
    configs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise SystemExit(f"--topic-config wants KEY=VALUE (e.g. segment.index.bytes=65536), not {item!r}")
        configs[key.strip()] = value.strip()
    return configs


if __name__ == "__main__":
    main()
