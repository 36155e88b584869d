"""When a batch is sendable before linger.ms: Java's rule, and kio's.

The Java producer (``RecordAccumulator.ready``: ``deque.size() > 1 ||
batch.isFull()``) sends a batch before linger.ms when the records written
reach its write limit (``MemoryRecordsBuilder.isFull``). The write limit is
``max(batch.size, the first record's upper bound)``, an upper bound counting
21 bytes of record overhead where a few are written: one record alone never
fills its batch, however large, so a record larger than batch.size waits
linger.ms like any other; records after the first that fill the batch to
exactly batch.size make it sendable at once. Measured with the Java client
(tests/producer_latency_java/SendLatency.java) against Kafka, batch.size
16384 and linger.ms 3000: a 32 KiB record 3010 ms, one whose batch is exactly
16384 bytes 3008 ms, 100 + 16203 bytes (exactly 16384) 3 ms, one byte less
3008 ms.

No network here (the accumulator, and ProducerCore with a scripted broker
and a fake clock, through the per-record fast path and without it), then
kio and the Java client on the Kafka broker.
"""
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kio import Producer
from kproto.producer.accumulator import RecordAccumulator
from kproto.producer.core import DeliveryHandle
from kproto.records import BatchBuilder

try:
    from test_producer_core import make
except ImportError:  # pragma: no cover
    from tests.test_producer_core import make

BATCH = 16384
LINGER = 3000
TS = 1_700_000_000_000          # one timestamp for every record: sizes are exact


def batch_bytes(*values):
    """The size of a batch holding ``values`` (null keys, timestamp TS)."""
    b = BatchBuilder(0, 1 << 22)
    for v in values:
        b.append(TS, None, v)
    return b.size_in_bytes()


def filling(first, total=BATCH):
    """A value that, after records ``first``, makes the batch exactly ``total`` bytes."""
    for n in range(total):
        if batch_bytes(*first, b"x" * n) == total:
            return b"x" * n
    raise AssertionError(f"no value fills a batch of {[len(v) for v in first]} to {total}")


def single_filling():
    """One value whose batch is exactly BATCH bytes."""
    return filling([], BATCH)


class _OneLeader:
    def leader(self, topic, partition):
        return 1


def _appended(values, batch_size=BATCH, many=False):
    acc = RecordAccumulator(batch_size=batch_size, linger_ms=LINGER)
    if many:
        assert acc.append_many("t", 0, TS, None, values, None, DeliveryHandle(), now=0) == len(values)
    else:
        for v in values:
            acc.append("t", 0, TS, None, v, None, DeliveryHandle(), now=0, size_hint=len(v) + 64)
    return acc


@pytest.mark.parametrize("many", [False, True], ids=["append", "append_many"])
def test_a_record_larger_than_batch_size_waits_linger_ms_as_in_java(many):
    for value in (b"x" * (2 * BATCH), b"x" * BATCH, single_filling(), single_filling()[1:]):
        acc = _appended([value], many=many)
        (batch,) = acc.queues[("t", 0)]
        assert not batch.full
        assert acc.ready(_OneLeader(), 0) == (set(), LINGER, set())
        assert acc.ready(_OneLeader(), LINGER)[0] == {1}


@pytest.mark.parametrize("many", [False, True], ids=["append", "append_many"])
def test_records_that_fill_a_batch_to_batch_size_make_it_sendable_at_once(many):
    first = [b"a" * 100, b"b" * 300]
    acc = _appended(first + [filling(first)], many=many)
    (batch,) = acc.queues[("t", 0)]
    assert batch.full and batch.builder.size_in_bytes() == BATCH
    assert acc.ready(_OneLeader(), 0) == ({1}, None, set())
    assert acc.wakeup and acc.next_round_ms == 0        # the driver is asked for a round now
    # one byte short: it waits for linger.ms (or for a record it refuses)
    acc = _appended(first + [filling(first)[1:]], many=many)
    (batch,) = acc.queues[("t", 0)]
    assert not batch.full and batch.builder.size_in_bytes() == BATCH - 1
    assert acc.ready(_OneLeader(), 0) == (set(), LINGER, set())


def test_a_batch_filled_below_batch_size_grows_instead():
    # batch.size 64 KiB: a batch opens at 16 KiB and doubles while records
    # come; filled to 16 KiB it is not full, the next record grows it
    first = [b"a" * 100]
    acc = _appended(first + [filling(first)], batch_size=4 * BATCH)
    (batch,) = acc.queues[("t", 0)]
    assert not batch.full and batch.builder.size_in_bytes() == BATCH
    assert acc.ready(_OneLeader(), 0) == (set(), LINGER, set())
    acc.append("t", 0, TS, None, b"c" * 100, None, DeliveryHandle(), now=0)
    assert len(acc.queues[("t", 0)]) == 1 and batch.builder.batch_size == 2 * BATCH


@pytest.mark.parametrize("fast", [True, False], ids=["fast path", "python"])
def test_the_core_sends_a_filled_batch_at_once_and_a_big_record_after_linger_ms(fast):
    def sent_after(values):
        """Fake milliseconds from the last send() to the last value's acknowledgement."""
        core, kafka, sim = make(linger_ms=LINGER, batch_size=BATCH)
        if not fast:
            del core.append_serialized              # the Python implementation only
            core.sender.use_python_reference()
        sim.send(b"warm", partition=0, timestamp_ms=TS)
        sim.run_until(lambda: not core.pending)
        appended = core._fast_append.appended
        start = sim.now
        handles = [sim.send(v, partition=0, timestamp_ms=TS) for v in values]
        sim.run_until(lambda: handles[-1].done)
        assert (core._fast_append.appended > appended) == fast
        assert kafka.values()[-len(values):] == values
        return sim.now - start

    first = [b"a" * 100, b"b" * 300]
    assert sent_after(first + [filling(first)]) < 10
    assert sent_after(first + [filling(first)[1:]]) >= LINGER
    assert sent_after([b"x" * (2 * BATCH)]) >= LINGER


# --- on the Kafka broker, with the Java client alongside ----------------------------------

JAVA_SOURCE = Path(__file__).parent / "producer_latency_java" / "SendLatency.java"


@pytest.fixture(scope="module")
def java_send_latency():
    """The command line of SendLatency, compiled with the machine's javac
    (bench/_java.py's compile, which keeps the classes in kio.testing's cache)."""
    import importlib.util

    from kio.testing.kafka_broker import java_binary, kafka_classpath
    bench = Path(__file__).parent.parent / "bench"
    spec = importlib.util.spec_from_file_location("_java", bench / "_java.py")
    _java = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(bench))              # _java imports bench/_bench.py
    try:
        spec.loader.exec_module(_java)
    finally:
        sys.path.remove(str(bench))
    classes = _java.compiled(JAVA_SOURCE, kafka_classpath())
    return [java_binary(), "-Xmx128m", "-XX:TieredStopAtLevel=1", "-cp",
            f"{classes}:{kafka_classpath()}", "SendLatency"]


@pytest.mark.parametrize("broker", ["kafka"], indirect=True)
def test_kio_waits_for_linger_ms_where_java_does_and_not_where_java_does_not(bootstrap, make_topic,
                                                                          java_send_latency):
    topic = make_topic(1)
    first = [b"a" * 100]
    cases = {"big": [b"x" * (2 * BATCH)], "filled": first + [filling(first)]}
    run = subprocess.run(java_send_latency + [bootstrap, topic, str(BATCH), str(LINGER)]
                         + ["+".join(str(len(v)) for v in vs) for vs in cases.values()],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    out = run.stdout.decode("utf-8", "replace")
    assert run.returncode == 0, out[-3000:]
    java = dict(zip(cases, (int(line.split()[1]) for line in out.splitlines()
                            if line.split()[0][:1].isdigit())))

    kio = {}
    with Producer(bootstrap_servers=bootstrap, batch_size=BATCH, linger_ms=LINGER) as p:
        p.send(topic, b"warm", partition=0, timestamp_ms=TS).result(30)
        for name, values in cases.items():
            futures = []
            for v in values:
                start = time.monotonic()
                futures.append(p.send(topic, v, partition=0, timestamp_ms=TS))
            futures[-1].result(30)
            kio[name] = (time.monotonic() - start) * 1000
    # a record of twice batch.size: linger.ms in both
    assert java["big"] >= LINGER - 10 and kio["big"] >= LINGER - 10, (java, kio)
    # records that fill the batch to batch.size: at once in both
    assert java["filled"] < LINGER / 3 and kio["filled"] < LINGER / 3, (java, kio)
