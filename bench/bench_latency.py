"""End-to-end latency at a fixed rate, and what a quiet client costs: kio vs confluent-kafka, aiokafka and Java.

For each rate (``--rates``, default 1,000, 10,000 and 50,000 records/s) and
each client, a producer process sends 100-byte records to a fresh
one-partition topic at that rate for ``--seconds`` (default 10) while a
consumer process of the same client, positioned at the end before the
producer starts, reads them. Each value carries its send time (wall clock,
µs); latency = the consumer's wall clock when the record is in its hands
minus that. Reported: p50, p99, p99.9 and max latency, and the whole-process
CPU (getrusage user+system, every thread) per record of the producer (from
its first send to the end of its flush) and of the consumer (from the
first record until the last arrived), both idle time included:
what an application running far below its peak pays. The producer's figure
includes its pacing loop (a sleep per record or so), and the loops differ
between clients: ``time.sleep`` for the threading ones (kio, confluent-kafka),
an asyncio or trio sleep for the others, which cost more CPU. Each round
therefore also runs each pacing loop alone at each rate (a process that only
makes the values), and the table gives what is left above it ("above its
pacing loop"): the client's own cost, whose ratios compare clients paced by
different loops.

Clients: kio threading (``kio.Producer``/``kio.Consumer``), kio asyncio
(``kio.aio``), kio trio (``kio.trio``), confluent-kafka (``produce`` +
``poll(0)``; ``Consumer.poll``: ``consume(n, timeout)`` waits for n records
or the timeout, which would add to the latency), aiokafka and the Java
client (``java``: kafka-clients of kio.testing's Kafka, bench/java/KioBench.java
compiled at run time by bench/_java.py, needs a JDK's javac). Each at its
defaults (kio, librdkafka and Java 4.x: acks=all + idempotence, linger.ms
5; aiokafka: acks=1, linger 0) and with linger.ms=0 (``--settings``). Rows
run in alternating rounds (``--repeat``); the table gives medians of the
rounds' figures and ratios against confluent-kafka's row of the same rate
and settings.

The Java rows are child JVMs (``-Xmx1g``, default collector) that follow
the same protocol: the producer paces itself with the same loop (parking
until the next send is due) and writes the same values; the consumer
(``poll(500 ms)``), positioned and fetching before it says ready, takes
each latency on its own wall clock and hands them back for the same
percentiles. Their CPU is the JVM's own (OperatingSystemMXBean
getProcessCpuTime(), 10 ms granularity) over the same intervals: the whole
JVM, every thread, the JIT compiling the hot paths of a fresh JVM and the GC
included; the JVM's start-up is not. Their pacing loop alone is KioBench's
``pace`` mode, in a JVM of its own. ``--trace`` leaves them out (it
instruments Python processes).

``--pair PRODUCER:CONSUMER`` adds a crossed row (e.g. ``kio:confluent-kafka``:
kio's producer, confluent-kafka's consumer) to find which side holds a gap;
``--split`` makes the topics LogAppendTime, so each latency splits at the
broker's append: send → append (the producer's linger and Produce) and
append → poll (the Fetch, its answer and the hand-off to the application).

    python bench/bench_latency.py --seconds 10 --repeat 3 --plot bench/latency.png
    python bench/bench_latency.py --settings defaults --only kio --only confluent \
        --pair kio:confluent-kafka --pair confluent-kafka:kio --split
"""
from __future__ import annotations

import argparse
import datetime
from array import array
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _bench import broker_label, cpu, create_topic, load_average, local_broker  # noqa: E402

# --trace: this child's _tail_trace.Trace (GC collections, slow send() calls), else None
TRACE = None

PAD = b"x" * 92             # + the 8-byte send time: 100-byte values


def stamp():
    return time.time_ns() // 1000


def value():
    return stamp().to_bytes(8, "big") + PAD


def sent_at(v):
    return int.from_bytes(v[:8], "big")


# -- the producer side: pacing ------------------------------------------------------------------------

def paced(send, rate, total):
    """Call send() ``total`` times at ``rate`` per second (catching up after a late wake-up)."""
    if TRACE is not None:
        send = TRACE.timed(send)
    t0 = time.monotonic()
    i = 0
    while i < total:
        due = min(total, int((time.monotonic() - t0) * rate) + 1)
        while i < due:
            send()
            i += 1
        ahead = t0 + i / rate - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)


async def paced_async(send, rate, total, sleep):
    t0 = time.monotonic()
    i = 0
    while i < total:
        due = min(total, int((time.monotonic() - t0) * rate) + 1)
        while i < due:
            await send()
            i += 1
        ahead = t0 + i / rate - time.monotonic()
        await sleep(ahead if ahead > 0 else 0)


def pace_alone(loop, rate, total):
    """The pacing loop of ``loop`` ("threads", "asyncio", "trio") with a send
    that only makes the record's value: CPU seconds. A producer's CPU per
    record includes its loop's, and the loops differ (an asyncio sleep costs
    more CPU than time.sleep, a trio sleep more again): what is left above the
    loop is the client's own cost, comparable between clients whatever loop
    paces them."""
    if loop == "java":                       # the JVM's loop (KioBench pace), CPU from its start to its end
        import _java
        return _java.kio_bench("pace", rate, total)["cpu"]
    c0 = cpu()
    if loop == "threads":
        paced(value, rate, total)
    else:
        async def send():
            value()
        if loop == "asyncio":
            import asyncio
            asyncio.run(paced_async(send, rate, total, asyncio.sleep))
        else:
            import trio
            trio.run(paced_async, send, rate, total, trio.sleep)
    return cpu() - c0


def produce_kio(bootstrap, topic, rate, total, linger0):
    from kio import Producer
    if TRACE is not None:
        TRACE.watch_kio_sockets()
        TRACE.watch_kio_waits()
    p = Producer(bootstrap_servers=bootstrap, **({"linger_ms": 0} if linger0 else {}))
    p.partitions_for(topic)
    c0 = cpu()
    paced(lambda: p.send(topic, value(), partition=0), rate, total)
    assert p.flush() == 0
    c1 = cpu()
    p.close()
    return c1 - c0


async def _produce_kio_async(mod, sleep, bootstrap, topic, rate, total, linger0):
    async with mod.Producer(bootstrap_servers=bootstrap, **({"linger_ms": 0} if linger0 else {})) as p:
        await p.partitions_for(topic)
        c0 = cpu()

        async def send():
            await p.send(topic, value(), partition=0)
        await paced_async(send, rate, total, sleep)
        assert await p.flush() == 0
        return cpu() - c0


def produce_kio_asyncio(bootstrap, topic, rate, total, linger0):
    import asyncio

    import kio.aio
    return asyncio.run(_produce_kio_async(kio.aio, asyncio.sleep, bootstrap, topic, rate, total, linger0))


def produce_kio_trio(bootstrap, topic, rate, total, linger0):
    import trio

    import kio.trio
    return trio.run(_produce_kio_async, kio.trio, trio.sleep, bootstrap, topic, rate, total, linger0)


def produce_confluent(bootstrap, topic, rate, total, linger0):
    import confluent_kafka as ck
    p = ck.Producer({"bootstrap.servers": bootstrap, **({"linger.ms": 0} if linger0 else {})})
    p.list_topics(topic, timeout=10)
    c0 = cpu()

    def send():
        p.produce(topic, value(), partition=0)
        p.poll(0)
    paced(send, rate, total)
    assert p.flush(60) == 0
    return cpu() - c0


def produce_aiokafka(bootstrap, topic, rate, total, linger0):
    import asyncio

    from aiokafka import AIOKafkaProducer

    async def main():
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, **({"linger_ms": 0} if linger0 else {}))
        await p.start()
        try:
            await p.partitions_for(topic)
            c0 = cpu()

            async def send():
                await p.send(topic, value(), partition=0)
            await paced_async(send, rate, total, asyncio.sleep)
            await p.flush()
            return cpu() - c0
        finally:
            await p.stop()
    return asyncio.run(main())


# -- the consumer side -----------------------------------------------------------------------------------

class Tally:
    """The latencies seen, and the CPU from the first record on (the
    producer's start-up, before it, is not the consumer's cost).

    With ``--split`` the topic has ``message.timestamp.type=LogAppendTime``:
    a record's timestamp is the broker's clock when it appended the batch
    (ms, truncated; same machine, same clock), which splits each latency in
    send → broker append (the producer's side: linger, the Produce request)
    and broker append → in the consumer's hands (the Fetch's completion, the
    answer, the hand-off to poll)."""

    def __init__(self):
        # Arrays of ints, not lists: a list is a container the cyclic GC
        # traverses, item by item, whenever it sits in a young generation - a
        # list of 80,000 latencies made a 4 ms collection in the middle of
        # kio's 50,000/s rows (bench_latency --trace, RESULTS.md), a cost of
        # the bench's, not of the client. An array is no container to the GC.
        self.lat = array("q")
        self.to_broker = array("q")
        self.cpu0 = None
        self.sent = array("q") if TRACE is not None else None     # --trace: each record's send time

    def add(self, v, ts=None):
        if self.cpu0 is None:
            self.cpu0 = cpu()
        now = stamp()
        sent = sent_at(v)
        self.lat.append(now - sent)
        if self.sent is not None:
            self.sent.append(sent)
        if ts is not None:
            self.to_broker.append(ts * 1000 - sent)

    def result(self):
        return self.lat, self.to_broker, (cpu() - self.cpu0) if self.cpu0 is not None else 0.0


def _signal_ready():
    print("ready", flush=True)
    sys.stdin.readline()           # the parent starts the producer, then says go


def _ready():
    _signal_ready()
    t = Tally()
    if TRACE is not None:
        TRACE.tally = t
    return t


def consume_kio(bootstrap, topic, total, deadline):
    from kio import Consumer, TopicPartition
    if TRACE is not None:
        TRACE.watch_kio_sockets()
        TRACE.watch_kio_waits()
    with Consumer(bootstrap_servers=bootstrap, enable_auto_commit=False) as c:
        c.assign([TopicPartition(topic, 0)])
        c.seek(TopicPartition(topic, 0), 0)
        c.poll(0.5)                                   # connected and fetching
        t = _ready()
        while len(t.lat) < total and time.monotonic() < deadline:
            for r in c.poll(0.5):
                t.add(r.value, r.timestamp)
        return t.result()


async def _consume_kio_async(mod, bootstrap, topic, total, deadline):
    from kio import TopicPartition
    async with mod.Consumer(bootstrap_servers=bootstrap, enable_auto_commit=False) as c:
        c.assign([TopicPartition(topic, 0)])
        c.seek(TopicPartition(topic, 0), 0)
        await c.poll(0.5)
        t = _ready()
        while len(t.lat) < total and time.monotonic() < deadline:
            for r in await c.poll(0.5):
                t.add(r.value, r.timestamp)
        return t.result()


def consume_kio_asyncio(bootstrap, topic, total, deadline):
    import asyncio

    import kio.aio
    return asyncio.run(_consume_kio_async(kio.aio, bootstrap, topic, total, deadline))


def consume_kio_trio(bootstrap, topic, total, deadline):
    import trio

    import kio.trio
    return trio.run(_consume_kio_async, kio.trio, bootstrap, topic, total, deadline)


def consume_confluent(bootstrap, topic, total, deadline):
    import confluent_kafka as ck
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "lat-" + topic, "enable.auto.commit": False})
    try:
        c.assign([ck.TopicPartition(topic, 0, 0)])
        c.poll(0.5)
        t = _ready()
        while len(t.lat) < total and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                t.add(m.value(), m.timestamp()[1])
        return t.result()
    finally:
        c.close()


def consume_aiokafka(bootstrap, topic, total, deadline):
    import asyncio

    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def main():
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await c.start()
        try:
            tp = TopicPartition(topic, 0)
            c.assign([tp])
            c.seek(tp, 0)
            await c.getmany(timeout_ms=500)
            t = _ready()
            while len(t.lat) < total and time.monotonic() < deadline:
                for records in (await c.getmany(timeout_ms=500)).values():
                    for r in records:
                        t.add(r.value, r.timestamp)
            return t.result()
        finally:
            await c.stop()
    return asyncio.run(main())


def produce_java(bootstrap, topic, rate, total, linger0):
    """The Java producer (bench/java/KioBench.java, latency-produce) in a
    child JVM: the same pacing loop as paced() (parking until the next send
    is due), the same values, at its defaults or with linger.ms=0. Its CPU is
    the JVM's own, from its first send to the end of its flush."""
    import _java
    r = _java.kio_bench("latency-produce", bootstrap, topic, rate, total, int(linger0))
    if r["errors"]:
        raise RuntimeError(f"the Java producer had {r['errors']} failed sends")
    return r["cpu"]


def consume_java(bootstrap, topic, total, deadline):
    """The Java consumer (KioBench latency-consume) in a child JVM, held to
    this child's protocol: it says ready once positioned and fetching, this
    child then says ready to the parent, and passes its go on. The JVM takes
    each record's latency on its own clock; they come back in a file."""
    import tempfile

    import _java
    with tempfile.NamedTemporaryFile(suffix=".lat") as out, tempfile.TemporaryFile() as err:
        jvm = subprocess.Popen(_java.kio_bench_command("latency-consume", bootstrap, topic, total,
                                                       max(1.0, deadline - time.monotonic()), out.name),
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
        try:
            for line in jvm.stdout:
                if line.strip() == b"ready":
                    break
            else:
                jvm.wait()
                err.seek(0)
                raise RuntimeError(f"the Java consumer ended before ready: {err.read().decode()[-1500:]}")
            _signal_ready()
            jvm.stdin.write(b"go\n")
            jvm.stdin.flush()
            rest = jvm.stdout.read().decode("utf-8", "replace")
            if jvm.wait() != 0:
                err.seek(0)
                raise RuntimeError(f"the Java consumer exited {jvm.returncode}: {err.read().decode()[-1500:]}")
        finally:
            if jvm.poll() is None:
                jvm.kill()
        r = _java.last_json(rest)
        both = array("q")
        both.frombytes(out.read())                   # native order, as the JVM wrote them
    kept = len(both) // 2
    return both[:kept], both[kept:], r["cpu"]


# The pacing loop each client's producer runs in (see pace_alone); Java's is
# its own, in the JVM (KioBench pace).
PACING = {"kio": "threads", "kio asyncio": "asyncio", "kio trio": "trio", "confluent-kafka": "threads",
          "aiokafka": "asyncio", "java": "java"}

CLIENTS = {
    "kio": (produce_kio, consume_kio),
    "kio asyncio": (produce_kio_asyncio, consume_kio_asyncio),
    "kio trio": (produce_kio_trio, consume_kio_trio),
    "confluent-kafka": (produce_confluent, consume_confluent),
    "aiokafka": (produce_aiokafka, consume_aiokafka),
    "java": (produce_java, consume_java),
}


def percentile(values, q):
    """The q-quantile of sorted µs values, in ms."""
    n = len(values)
    return values[min(n - 1, int(q * n))] / 1000 if n else float("nan")


def child(spec):
    global TRACE
    total = spec["rate"] * spec["seconds"]
    if spec.get("trace") and spec["role"] != "pace":
        from _tail_trace import Trace
        TRACE = Trace()
    if spec["role"] == "pace":
        print(json.dumps({"cpu": pace_alone(spec["loop"], spec["rate"], total)}), flush=True)
        return
    if spec["role"] == "produce":
        produce = CLIENTS[spec["producer"]][0]
        used = produce(spec["bootstrap"], spec["topic"], spec["rate"], total, spec["linger0"])
        if TRACE is not None:
            TRACE.dump(_trace_path(spec), client=spec["producer"], rate=spec["rate"])
        print(json.dumps({"cpu": used}), flush=True)
    else:
        consume = CLIENTS[spec["consumer"]][1]
        lat, to_broker, used = consume(spec["bootstrap"], spec["topic"], total,
                                       time.monotonic() + spec["seconds"] + 60)
        if TRACE is not None:
            sent = list(TRACE.tally.sent)
            TRACE.dump(_trace_path(spec), client=spec["consumer"], rate=spec["rate"], sent=sent,
                       arrived=[s + d for s, d in zip(sent, lat)],
                       appended=[s + d for s, d in zip(sent, to_broker)] if spec["split"] else [])
        # the consumer's part: arrival - append = latency - (append - send), per record
        from_broker = sorted(a - b for a, b in zip(lat, to_broker)) if spec["split"] else []
        lat = sorted(lat)
        to_broker = sorted(to_broker)
        out = {"received": len(lat), "cpu": used, "p50": percentile(lat, 0.5), "p99": percentile(lat, 0.99),
               "p999": percentile(lat, 0.999), "max": lat[-1] / 1000 if lat else float("nan")}
        if spec["split"]:
            out.update(send_append_p50=percentile(to_broker, 0.5), send_append_p99=percentile(to_broker, 0.99),
                       append_poll_p50=percentile(from_broker, 0.5), append_poll_p99=percentile(from_broker, 0.99))
        print(json.dumps(out), flush=True)


def _trace_path(spec):
    return os.path.join(spec["trace"], f"{spec['topic']}-{spec['role']}.json")


def warm_up(bootstrap):
    """One idempotent record before the rounds. On a broker just started the
    first InitProducerId takes ~100 ms more (its first block of producer ids
    comes from the controller: 107 ms after the metadata, measured, against
    0 for the next producer), and the records sent meanwhile wait for it:
    the first client measured (kio threading) had that wait in its latency
    tail, the others not - most likely the 70-140 ms threading stall seen
    only in the first round after a broker start."""
    from kio import Producer
    with Producer(bootstrap_servers=bootstrap) as p:
        p.send(create_topic(bootstrap), b"warm-up").result(60)


def run_pair(bootstrap, producer, consumer, rate, seconds, linger0, split=False, trace=None):
    """Consumer started and positioned, then the producer: both results.
    ``producer`` and ``consumer`` name clients of CLIENTS (the same one but
    for ``--pair``); ``split``: a LogAppendTime topic, and the latency split
    at the broker's append (see Tally); ``trace``: a directory for the
    children's _tail_trace records."""
    topic = create_topic(bootstrap, configs={"message.timestamp.type": "LogAppendTime"} if split else None)
    spec = {"bootstrap": bootstrap, "topic": topic, "producer": producer, "consumer": consumer, "rate": rate,
            "seconds": seconds, "linger0": linger0, "split": split, "trace": trace}
    me = [sys.executable, os.path.abspath(__file__), "--child"]
    cons = subprocess.Popen(me + [json.dumps({**spec, "role": "consume"})], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = cons.stdout.readline()
        if line.strip() != b"ready":
            raise RuntimeError(f"consumer: {line!r} {cons.stderr.read().decode()[-1500:]}")
        prod = subprocess.Popen(me + [json.dumps({**spec, "role": "produce"})], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        cons.stdin.write(b"go\n")
        cons.stdin.flush()
        pout, perr = prod.communicate(timeout=seconds + 120)
        cout, cerr = cons.communicate(timeout=seconds + 120)
    finally:
        if cons.poll() is None:
            cons.kill()
    if prod.returncode or cons.returncode:
        raise RuntimeError(f"producer {prod.returncode}: {perr.decode()[-800:]}\n"
                           f"consumer {cons.returncode}: {cerr.decode()[-800:]}")
    p, c = json.loads(pout.decode().splitlines()[-1]), json.loads(cout.decode().splitlines()[-1])
    total = rate * seconds
    if c["received"] < total:
        raise RuntimeError(f"the consumer got {c['received']} of {total} records")
    out = {f: c[f] for f, _ in FIELDS + SPLIT_FIELDS if f in c}
    out.update(producer_us=p["cpu"] / total * 1e6, consumer_us=c["cpu"] / total * 1e6)
    return out


def run_pacing(loop, rate, seconds):
    """CPU µs per record of the pacing loop ``loop`` alone, in a process of its own."""
    me = [sys.executable, os.path.abspath(__file__), "--child"]
    out = subprocess.run(me + [json.dumps({"role": "pace", "loop": loop, "rate": rate, "seconds": seconds})],
                         capture_output=True, timeout=seconds + 60, check=True)
    return json.loads(out.stdout.decode().splitlines()[-1])["cpu"] / (rate * seconds) * 1e6


FIELDS = (("p50", "p50 ms"), ("p99", "p99 ms"), ("p999", "p99.9 ms"), ("max", "max ms"),
          ("producer_us", "producer CPU µs/rec"), ("above_pacing_us", "producer CPU above its pacing loop µs/rec"),
          ("consumer_us", "consumer CPU µs/rec"))
# with --split: the two sides of the broker's append
SPLIT_FIELDS = (("send_append_p50", "send→append p50"), ("send_append_p99", "send→append p99"),
                ("append_poll_p50", "append→poll p50"), ("append_poll_p99", "append→poll p99"))


def markdown(results, title, split=False):
    fields = FIELDS + SPLIT_FIELDS if split else FIELDS
    out = [title, "", "| rate/s | settings | client | " + " | ".join(h for _, h in fields) + " |",
           "|---|---|---|" + "---|" * len(fields)]
    med = {k: {f: statistics.median(r[f] for r in runs) for f, _ in fields} for k, runs in results.items() if runs}
    for (client, rate, settings), m in med.items():
        base = med.get(("confluent-kafka", rate, settings))
        cells = []
        for f, _ in fields:
            ratio = f" ({m[f] / base[f]:.2f}×)" if base and client != "confluent-kafka" and base[f] else ""
            cells.append(f"{m[f]:.1f}{ratio}")
        out.append(f"| {rate:,} | {settings} | {client} | " + " | ".join(cells) + " |")
    out.append("")
    out.append("(×: against confluent-kafka at the same rate and settings)")
    return "\n".join(out)


def plot(results, rates, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    keys = sorted({(k[0], k[2]) for k, runs in results.items() if runs})
    for ax, (field, label) in zip(axes, (("p99", "p99 latency ms"), ("p999", "p99.9 latency ms"),
                                        ("producer_us", "producer CPU µs/record"))):
        for client, settings in keys:
            xs = [r for r in rates if results.get((client, r, settings))]
            ys = [statistics.median(x[field] for x in results[(client, r, settings)]) for r in xs]
            ax.plot(xs, ys, marker="o", linestyle="-" if settings == "defaults" else "--",
                    label=f"{client} [{settings}]")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("records/s")
        ax.set_title(label)
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="1000,10000,50000")
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--settings", default="defaults,linger.ms=0")
    ap.add_argument("--only", action="append", help="run only clients whose name contains this")
    ap.add_argument("--pair", action="append", metavar="PRODUCER:CONSUMER",
                    help="also run this crossed pair (client names as in the table, e.g. kio:confluent-kafka)")
    ap.add_argument("--split", action="store_true",
                    help="LogAppendTime topics: split the latency at the broker's append")
    ap.add_argument("--broker", choices=("kafka", "tansu"), default="kafka")
    ap.add_argument("--bootstrap", help="use this running broker instead of starting one")
    ap.add_argument("--plot", help="write the PNG plot here")
    ap.add_argument("--table", help="write the markdown table here too")
    ap.add_argument("--trace", metavar="DIR",
                    help="record each run's GC collections, slow send() calls and per-record times in DIR "
                         "and report what the slowest 0.1%% met (bench/_tail_trace.py)")
    ap.add_argument("--wire", metavar="JSON",
                    help="with --trace and --split: capture the broker port's Produce and Fetch requests and "
                         "answers (root, Linux: bench/_wire_trace.py) into JSON and split each slow episode "
                         "at the wire - client or broker - for every client alike")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(json.loads(args.child))
    rates = [int(r) for r in args.rates.split(",")]
    settings = args.settings.split(",")
    # (row name, producer client, consumer client): each client with itself, then the crossed pairs
    rows = [(c, c, c) for c in CLIENTS if not args.only or any(o in c for o in args.only)]
    for pair in args.pair or ():
        prod, _, cons = pair.partition(":")
        for name in (prod, cons):
            if name not in CLIENTS:
                ap.error(f"--pair {pair}: {name!r} is not one of {', '.join(CLIENTS)}")
        rows.append((f"{prod} → {cons}", prod, cons))
    if args.trace and any("java" in (prod, cons) for _, prod, cons in rows):
        # the trace watches a Python process's GC and calls; the JVM's are its own
        print("--trace: the Java rows are left out (the trace instruments Python processes)", file=sys.stderr)
        rows = [row for row in rows if "java" not in row[1:]]
    if args.wire and not (args.trace and args.split):
        ap.error("--wire splits the episodes --trace records at the broker's append: give --trace and --split too")
    load_before = load_average()
    results = {}

    def run(bootstrap):
        if args.wire:
            capture = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                     "_wire_trace.py"), "--capture",
                                        bootstrap.rsplit(":", 1)[1], args.wire], stdin=subprocess.PIPE)
            try:
                measure(bootstrap)
            finally:
                capture.stdin.close()       # it writes its JSON and ends
                capture.wait(60)
        else:
            measure(bootstrap)

    def measure(bootstrap):
        warm_up(bootstrap)
        for k in range(args.repeat):
            for rate in rates:
                # this round's cost of each pacing loop at this rate, alone
                loops = sorted({PACING[prod] for _, prod, _ in rows})
                pacing = {}
                for loop in loops:
                    try:
                        pacing[loop] = run_pacing(loop, rate, args.seconds)
                    except Exception as e:  # noqa: BLE001 - e.g. no javac: that loop's rows fail alone
                        print(f"pacing loop {loop} {rate}: failed: {e}", file=sys.stderr, flush=True)
                        pacing[loop] = float("nan")
                print(f"round {k + 1}: {rate:6,}/s pacing loops alone, CPU µs/rec: "
                      + ", ".join(f"{loop} {us:.1f}" for loop, us in pacing.items()), flush=True)
                for which in settings:
                    for client, prod, cons in rows:
                        key = (client, rate, which)
                        try:
                            r = run_pair(bootstrap, prod, cons, rate, args.seconds, which != "defaults",
                                         args.split, args.trace)
                        except Exception as e:  # noqa: BLE001 - report and go on with the others
                            print(f"{client} {rate} {which}: failed: {e}", file=sys.stderr, flush=True)
                            results.setdefault(key, [])
                            continue
                        r["above_pacing_us"] = r["producer_us"] - pacing[PACING[prod]]
                        results.setdefault(key, []).append(r)
                        print(f"round {k + 1}: {rate:6,}/s {which:12s} {client:16s} "
                              + " ".join(f"{h} {r[f]:.1f}" for f, h in FIELDS + SPLIT_FIELDS if f in r)
                              + f" (load {load_average()})", flush=True)

    if args.bootstrap:
        run(args.bootstrap)
        label = "a running broker"
    else:
        with local_broker(args.broker) as broker:
            run(broker.bootstrap_servers)
            label = broker_label(broker)
    extra = "".join(f" --pair {p}" for p in args.pair or ()) + (" --split" if args.split else "")
    title = (f"`python bench/bench_latency.py --seconds {args.seconds} --repeat {args.repeat} --rates "
             f"{args.rates}{extra}`: 100-byte records to one partition; {label}; Python {sys.version.split()[0]}; "
             f"median of {args.repeat} alternating rounds; "
             f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; load average "
             f"{load_before} before, {load_average()} after")
    table = markdown(results, title, args.split)
    print()
    print(table)
    if args.trace:
        from _tail_trace import report
        print()
        print(report(args.trace))
        if args.wire:
            from _wire_trace import wire_summary
            print()
            print(wire_summary(args.trace, args.wire))
    if args.table:
        with open(args.table, "w") as f:
            f.write(table + "\n")
    if args.plot:
        plot(results, rates, args.plot, f"{label}; median of {args.repeat} rounds; load {load_before}")


if __name__ == "__main__":
    main()
