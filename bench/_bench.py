"""What the client benchmarks share: CPU accounting, topic creation, the
measurement of one run and the comparison table.

CPU is resource.getrusage(RUSAGE_SELF) user+system: every thread of this
process (librdkafka's C threads, kio's network thread), not the broker, which
runs in another process.
"""
from __future__ import annotations

import os
import resource
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kio.blocking import BlockingClient  # noqa: E402


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


# A KRaft controller refuses an operation of more than 10,000 records
# (POLICY_VIOLATION, "Unable to perform excessively large batch operation"):
# a topic of 10,000 partitions is created in steps, as an admin would.
PARTITIONS_PER_STEP = 5000


def create_topic(bootstrap: str, partitions: int = 1, configs: dict | None = None) -> str:
    """A fresh topic of ``partitions`` partitions (``configs``: its topic
    configs, e.g. message.timestamp.type). Raises RuntimeError with the
    broker's error when it refuses: a bench must never measure a topic the
    broker auto-created with one partition instead."""
    name = "bench-" + uuid.uuid4().hex[:8]
    configs = [{"name": k, "value": v} for k, v in (configs or {}).items()]
    with BlockingClient(bootstrap) as c:
        first = min(partitions, PARTITIONS_PER_STEP)
        answer = c.request("CreateTopics", {"topics": [{"name": name, "num_partitions": first,
                                                        "replication_factor": 1, "assignments": [],
                                                        "configs": configs}],
                                            "timeout_ms": 60000})
        _check(answer["topics"][0], f"creating {name} with {first} partitions")
        count = first
        while count < partitions:
            count = min(partitions, count + PARTITIONS_PER_STEP)
            answer = c.request("CreatePartitions", {"topics": [{"name": name, "count": count, "assignments": None}],
                                                    "timeout_ms": 60000, "validate_only": False})
            _check(answer["results"][0], f"growing {name} to {count} partitions")
        if partitions > PARTITIONS_PER_STEP:
            _wait_for_partitions(c, name, partitions)
    return name


def _wait_for_partitions(client, name, partitions, timeout=300.0):
    """Until the broker's metadata shows all of ``name``'s partitions: after
    a grow it lags the controller by seconds (it creates the logs first)."""
    end = time.monotonic() + timeout
    while True:
        answer = client.request("Metadata", {"topics": [{"name": name, "topic_id": uuid.UUID(int=0)}],
                                             "allow_auto_topic_creation": False,
                                             "include_topic_authorized_operations": False})
        seen = len(answer["topics"][0]["partitions"])
        if seen >= partitions:
            return
        if time.monotonic() > end:
            raise RuntimeError(f"{name}: the broker shows {seen} of {partitions} partitions after {timeout:.0f} s")
        time.sleep(1.0)


def _check(result, what):
    if result["error_code"]:
        raise RuntimeError(f"the broker refused {what}: error {result['error_code']} "
                           f"({result.get('error_message')})")


def measure(fn, n):
    """(records/s, CPU µs per record, seconds) of ``fn()`` handling n records."""
    c0, t0 = cpu(), time.perf_counter()
    fn()
    t1, c1 = time.perf_counter(), cpu()
    return n / (t1 - t0), (c1 - c0) / n * 1e6, t1 - t0


def print_line(name, rate, us, secs):
    print(f"{name:30s} {rate:12,.0f} rec/s {us:8.2f} CPU us/rec ({secs:.2f} s)", flush=True)


def bench_args(doc, default_records=1_000_000):
    """The common command line: --records N, --only NAME (repeatable) and
    --broker kafka|tansu (the broker the bench starts)."""
    import argparse
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--records", type=int, default=default_records)
    ap.add_argument("--only", action="append", help="run only clients whose name contains this")
    ap.add_argument("--broker", choices=("kafka", "tansu"), default="kafka",
                    help="the local broker to run against: Apache Kafka (the reference, "
                         "default) or Tansu")
    return ap.parse_args()


def local_broker(kind):
    """The broker of ``--broker``, started; use it as a context manager."""
    from kio.testing.broker import start_broker
    return start_broker(kind)


def on_broker(run, bootstrap=None, kind="kafka"):
    """``run(bootstrap_servers)`` against ``bootstrap`` (a running broker) or,
    without one, a local broker of ``kind`` started for it and stopped after."""
    if bootstrap:
        return run(bootstrap)
    with local_broker(kind) as broker:
        return run(broker.bootstrap_servers)


def broker_label(broker) -> str:
    if broker.kind == "kafka":
        from kio.testing.kafka_broker import KAFKA_VERSION
        return f"Apache Kafka {KAFKA_VERSION}"
    return "Tansu"


def child_cpu() -> float:
    """CPU seconds of this process's waited-for children (the Java tools)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_clients(clients, only, call):
    """Run each (name, fn) of clients (those whose name contains one of
    ``only``, if given) as call(fn) -> (records/s, CPU µs, seconds); a client
    that fails is reported and skipped. Returns the results for print_table."""
    results = []
    for name, fn in clients:
        if only and not any(o in name for o in only):
            continue
        try:
            rate, us, secs = call(fn)
        except Exception as e:  # noqa: BLE001 - report and continue with the others
            print(f"{name}: failed: {e!r}", file=sys.stderr)
            continue
        results.append((name, rate, us, secs))
        print_line(name, rate, us, secs)
    return results


def print_table(results, headline, base_prefix="confluent"):
    """results: [(name, records/s, CPU µs/rec, seconds)]; ratios against the
    first client whose name starts with base_prefix."""
    if not results:
        return
    base = next((r for r in results if r[0].startswith(base_prefix)), results[0])
    short = base[0].split()[0]
    print()
    print(headline)
    print(f"{'client':30s} {'records/s':>12s} {'CPU us/rec':>11s} {'rate vs ' + short:>20s} "
          f"{'CPU vs ' + short:>20s}")
    for name, rate, us, secs in results:
        print(f"{name:30s} {rate:12,.0f} {us:11.2f} {rate / base[1]:19.2f}x {us / base[2]:19.2f}x")


# -- like-with-like tables: each client at its defaults and at shared tuned settings -------------

def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


class Row:
    """One configuration of one client: ``client`` (e.g. "kio"), ``call``
    (e.g. "send()"), ``settings`` ("defaults" or "tuned"), ``delivery`` (how
    delivery reports are asked for), ``described`` (the settings in force,
    named) and ``fn`` () -> (records/s, CPU µs/record, seconds)."""

    def __init__(self, client, call, settings, delivery, described, fn):
        self.client, self.call, self.settings, self.delivery = client, call, settings, delivery
        self.described, self.fn = described, fn
        self.runs: list = []

    @property
    def name(self):
        return f"{self.client} {self.call} [{self.settings}, {self.delivery}]"


def run_rows(rows, only, repeat):
    """Run every row (those whose name contains one of ``only``) ``repeat``
    times, alternating: round 1 runs each row once, then round 2, ... so a
    machine that gets busier or quieter moves every client alike. A row
    that fails is reported and dropped."""
    rows = [r for r in rows if not only or any(o in r.name for o in only)]
    for k in range(repeat):
        for r in list(rows):
            try:
                rate, us, secs = r.fn()
            except Exception as e:  # noqa: BLE001 - report and continue with the others
                print(f"{r.name}: failed: {e!r}", file=sys.stderr, flush=True)
                rows.remove(r)
                continue
            r.runs.append((rate, us, secs))
            print(f"round {k + 1}: {r.name:62s} {rate:12,.0f} rec/s {us:7.2f} CPU us/rec  "
                  f"(load {load_average()})", flush=True)
    return rows


def _median(xs):
    xs = sorted(xs)
    m = len(xs) // 2
    return xs[m] if len(xs) % 2 else (xs[m - 1] + xs[m]) / 2


def markdown_table(rows, base_client, title, notes=(), delivery_column=True):
    """A markdown table of ``rows`` (medians of their runs) with ratios against
    the ``base_client`` row of the same settings and delivery mode (or, for a
    call that has no such row, the base client's row of the same settings
    without delivery reports)."""
    out = [title, ""]
    out += [f"{n}" for n in notes]
    if notes:
        out.append("")
    dcol = " delivery reports |" if delivery_column else ""
    out.append(f"| client | settings |{dcol} records/s | CPU µs/record | "
               f"records/s vs {base_client} | CPU vs {base_client} |")
    out.append("|---|---|" + ("---|" if delivery_column else "") + "---|---|---|---|")
    med = {id(r): (_median([x[0] for x in r.runs]), _median([x[1] for x in r.runs])) for r in rows}
    bases = {}
    for r in rows:
        if r.client == base_client:
            bases.setdefault((r.settings, r.delivery), r)
            bases.setdefault((r.settings, None), r)
    for r in rows:
        rate, us = med[id(r)]
        base = bases.get((r.settings, r.delivery)) or bases.get((r.settings, None))
        if base is not None:
            brate, bus = med[id(base)]
            ratios = f"{rate / brate:.2f}× | {us / bus:.2f}×"
        else:
            ratios = "- | -"
        dcell = f" {r.delivery} |" if delivery_column else ""
        out.append(f"| {r.client} `{r.call}` | {r.settings}: {r.described} |{dcell} "
                   f"{rate:,.0f} | {us:.2f} | {ratios} |")
    return "\n".join(out)


def matrix_args(doc, default_records=1_000_000):
    """bench_args plus --repeat (rounds, median reported) and --settings."""
    import argparse
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--records", type=int, default=default_records)
    ap.add_argument("--only", action="append", help="run only rows whose name contains this")
    ap.add_argument("--broker", choices=("kafka", "tansu"), default="kafka",
                    help="the local broker to run against: Apache Kafka (the reference, "
                         "default) or Tansu")
    ap.add_argument("--repeat", type=int, default=3,
                    help="rounds over every row, alternating clients; the table gives medians")
    ap.add_argument("--settings", default="defaults,tuned",
                    help="comma-separated: defaults (each client's own), tuned (the same for all)")
    ap.add_argument("--batch-sizes", help="bench_produce: kio send() at these batch.size values "
                                          "(comma-separated bytes) against confluent-kafka's defaults")
    return ap.parse_args()
