"""The Java client's rows: Kafka's own ProducerPerformance and ConsumerPerformance
tools (kafka-tools, fetched from Maven Central by kio.testing.kafka_broker), each run
as a child JVM against the bench's broker.

Records/s is what the tool itself reports (its clock starts after the JVM is
up). CPU is the child process's user+system time from getrusage(RUSAGE_CHILDREN),
minus that of the same tool run for a single record: JVM start-up, class
loading and connecting are taken out, JIT compilation during the run stays in.
"""
from __future__ import annotations

import re
import subprocess

from _bench import child_cpu

_PRODUCER = "org.apache.kafka.tools.ProducerPerformance"
_CONSUMER = "org.apache.kafka.tools.ConsumerPerformance"


def _run(args, timeout=600):
    from kio.testing.kafka_broker import java_binary, tools_classpath
    c0 = child_cpu()
    run = subprocess.run([java_binary(), "-Xmx1g", "-cp", tools_classpath(), *args],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    cpu = child_cpu() - c0
    out = run.stdout.decode("utf-8", "replace")
    if run.returncode != 0:
        raise RuntimeError(f"{args[0]} exited {run.returncode}:\n{out[-2000:]}")
    return out, cpu


def producer_perf(bootstrap, topic, n, record_size, props):
    """(records/s, CPU µs/record, seconds) of ProducerPerformance sending n records."""
    def run(count, t):
        return _run([_PRODUCER, "--topic", t, "--num-records", str(count), "--record-size",
                     str(record_size), "--throughput", "-1", "--producer-props",
                     f"bootstrap.servers={bootstrap}", *(f"{k}={v}" for k, v in props.items())])
    _, base_cpu = run(1, topic + "-warm")
    out, cpu = run(n, topic)
    # the tool prints a line every 5 s while it runs, then the totals: take the last
    found = re.findall(r"(\d+) records sent, ([\d.]+) records/sec", out)
    if not found or int(found[-1][0]) != n:
        raise RuntimeError(f"unexpected ProducerPerformance output:\n{out[-2000:]}")
    rate = float(found[-1][1])
    return rate, (cpu - base_cpu) / n * 1e6, n / rate


def consumer_perf(bootstrap, topic, n, props=None):
    """(records/s, CPU µs/record, seconds) of ConsumerPerformance reading n records."""
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".properties") as cfg:
        cfg.write("".join(f"{k}={v}\n" for k, v in (props or {}).items()))
        cfg.flush()

        def run(count):
            return _run([_CONSUMER, "--bootstrap-server", bootstrap, "--topic", topic,
                         "--messages", str(count), "--command-config", cfg.name,
                         "--timeout", "120000"])
        _, base_cpu = run(1)
        out, cpu = run(n)
    # header: start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg,
    # nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
    lines = [ln for ln in out.splitlines() if ln.count(",") >= 9 and not ln.startswith("start.time")]
    if not lines:
        raise RuntimeError(f"unexpected ConsumerPerformance output:\n{out[-2000:]}")
    cols = [c.strip() for c in lines[-1].split(",")]
    consumed, fetch_ms, rate = int(cols[4]), float(cols[7]), float(cols[9])
    if consumed < n:
        raise RuntimeError(f"ConsumerPerformance read {consumed} of {n} records")
    return rate, (cpu - base_cpu) / n * 1e6, fetch_ms / 1000.0
