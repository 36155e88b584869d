"""The Java client's rows, each run as a child JVM against the bench's broker.

* bench_produce / bench_consume: Kafka's own ProducerPerformance and
  ConsumerPerformance tools (kafka-tools, fetched from Maven Central by
  kio.testing.kafka_broker). Records/s is what the tool itself reports (its
  clock starts after the JVM is up). CPU is the child process's user+system
  time from getrusage(RUSAGE_CHILDREN), minus that of the same tool run for a
  single record: JVM start-up, class loading and connecting are taken out,
  JIT compilation during the run stays in.
* bench_partitions / bench_latency: bench/java/KioBench.java, our own program
  (the tools send unkeyed records and put no send time in them), compiled at
  run time with the machine's javac against the kafka-clients jar of
  kio.testing's Kafka and its runtime dependencies (no logging backend: SLF4J
  falls back to no-op). It measures itself: records/s from the JVM's clock
  and CPU from OperatingSystemMXBean.getProcessCpuTime() deltas over the
  measured interval - the whole JVM, every thread (the client's I/O thread,
  the JIT compiler threads, the GC), as getrusage is for the Python clients;
  JVM start-up is outside the interval. Peak RSS is the JVM's own VmHWM. The
  JVM runs with -Xmx1g (HEAP) and its default collector: its RSS follows how
  much of that heap the collector touches, not only what the client holds.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from pathlib import Path

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


# -- bench/java/KioBench.java ------------------------------------------------------------------

KIO_BENCH_SOURCE = Path(__file__).parent / "java" / "KioBench.java"
HEAP = "-Xmx1g"
#: kafka-clients' runtime dependencies (its pom), beside it in kio.testing's Kafka folder
_CLIENT_JARS = ("kafka-clients-", "lz4-java-", "snappy-java-", "zstd-jni-", "slf4j-api-")


def client_classpath() -> str:
    """The Java client as an application has it: kafka-clients and its
    runtime dependencies, the ones of kio.testing's Kafka (KAFKA_VERSION)."""
    from kio.testing.kafka_broker import kafka_clients_jar
    lib = kafka_clients_jar().parent
    return os.pathsep.join(sorted(str(j) for j in lib.glob("*.jar") if j.name.startswith(_CLIENT_JARS)))


def compiled(source: Path = KIO_BENCH_SOURCE, classpath: str | None = None) -> Path:
    """The folder of ``source``'s classes, compiled with the machine's javac
    against ``classpath`` (default: client_classpath()) once per source and
    class path, in kio.testing's cache (never in the repository)."""
    import shutil
    import tempfile

    from kio.testing.kafka_broker import cache_root, java_binary
    classpath = client_classpath() if classpath is None else classpath
    digest = hashlib.sha256(source.read_bytes() + classpath.encode()).hexdigest()[:16]
    folder = cache_root().parent / "java-classes" / f"{source.stem}-{digest}"
    if folder.exists():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    javac = shutil.which("javac") or str(Path(java_binary()).with_name("javac"))
    if not Path(javac).exists():
        raise RuntimeError("compiling the Java bench needs a JDK's javac (Debian: openjdk-17-jdk-headless)")
    tmp = tempfile.mkdtemp(dir=folder.parent, prefix=f".{source.stem}-")
    run = subprocess.run([javac, "-nowarn", "-d", tmp, "-cp", classpath, str(source)], capture_output=True)
    if run.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise RuntimeError(f"javac {source.name}: {run.stderr.decode('utf-8', 'replace')[-2000:]}")
    try:
        os.rename(tmp, folder)            # atomic: a concurrent compile of the same source wins or loses whole
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def kio_bench_command(mode: str, *args) -> list[str]:
    """The command line of KioBench in ``mode`` (see bench/java/KioBench.java)."""
    from kio.testing.kafka_broker import java_binary
    classpath = client_classpath()
    return [java_binary(), HEAP, "-cp", f"{compiled(KIO_BENCH_SOURCE, classpath)}{os.pathsep}{classpath}",
            "KioBench", mode, *(str(a) for a in args)]


def last_json(out: str) -> dict:
    """The JSON line KioBench ends with (anything the JVM printed before is skipped)."""
    for line in reversed(out.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"no JSON line from KioBench:\n{out[-2000:]}")


def kio_bench(mode: str, *args, timeout: float = 900) -> dict:
    """Run KioBench in ``mode`` to its end: its JSON line."""
    run = subprocess.run(kio_bench_command(mode, *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         timeout=timeout)
    if run.returncode != 0:
        raise RuntimeError(f"KioBench {mode} exited {run.returncode}:\n"
                           f"{run.stderr.decode('utf-8', 'replace')[-2000:]}")
    return last_json(run.stdout.decode("utf-8", "replace"))
