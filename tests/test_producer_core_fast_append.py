"""The per-record fast path (kproto/producer/_append.pyx) against the Python
implementation it stands in for.

``ProducerCore.append_serialized`` is bound to ``FastAppend.append``, which
does the common case in C and hands everything else to the Python method;
``del core.append_serialized`` leaves that method alone. Every test here
plays the same script twice, on twin cores (same config, same random seed,
same scripted broker) - one with the fast path, one without - and compares
everything observable: what each call returned or raised, the batches
(their bytes, parts, callbacks, reservations), buffer memory, the handles
(topic, partition, timestamp, offset delta, final offset or error), the
order and arguments of on_delivery callbacks, the broker's logs with their
producer ids and sequences, and the transaction coordinator's log. A fast
path that put a record in another partition or batch, gave a handle a
wrong delta, skipped a callback, or accepted what the Python path refuses
fails these tests; each also checks that the fast path did take records.
"""
import random
import uuid

import pytest

try:
    from test_producer_core import FakeKafka, make
    from test_producer_core_transactions import TxnKafka
except ImportError:  # pragma: no cover
    from tests.test_producer_core import FakeKafka, make
    from tests.test_producer_core_transactions import TxnKafka

from kio.producer import DeliveryFuture, _new_future
from kproto.producer import BufferExhausted, MetadataPending, complete_results
from kproto.producer._append import Allocator, FastAppend, ProducerBatch
from kproto.producer.core import DeliveryHandle
from kproto.records import read_batches


# --- handles of every kind a driver or a test uses ------------------------------------------

class Attached:
    """notify false (like kio's futures): attached to the batch's outcome."""
    notify = False
    on_delivery = None
    _outcome = None
    _delta = 0
    topic = partition = timestamp = None


class NotingTold(DeliveryHandle):
    """Told one by one, and notes every attribute written to it (a class
    with its own __setattr__: the fast path's generic branch)."""
    __slots__ = ("names",)

    def __init__(self):
        object.__setattr__(self, "names", [])
        super().__init__()

    def __setattr__(self, name, value):
        self.names.append(name)
        object.__setattr__(self, name, value)


class NotingAttached(Attached):
    def __init__(self):
        object.__setattr__(self, "names", [])

    def __setattr__(self, name, value):
        self.names.append(name)
        object.__setattr__(self, name, value)


def _future(on_delivery=None):
    fut = _new_future()                          # as kio.Producer.send makes it
    if on_delivery is not None:
        fut.on_delivery = on_delivery
    return fut


class Script:
    """One run of a script on one core: a transcript of what happened."""

    def __init__(self, core, kafka, sim):
        self.core, self.kafka, self.sim = core, kafka, sim
        self.events = []
        self.handles = []               # (label, handle)
        self.labels = {}                # id(object) -> label (handles, callbacks)
        self.callbacks = []             # on_delivery calls: (label, error type, metadata)

    def handle(self, kind):
        """A new handle of ``kind``; None for kind "none" (the core makes one).
        Labelled by creation order; listed once a send took it."""
        self.made = getattr(self, "made", 0) + 1
        label = f"h{self.made}"
        if kind == "none":
            return None
        if kind == "told":
            h = DeliveryHandle()
        elif kind == "noting_told":
            h = NotingTold()
        elif kind == "attached":
            h = Attached()
        elif kind == "noting_attached":
            h = NotingAttached()
        elif kind in ("attached_cb", "future_cb"):
            def cb(err, md, label=label):
                self.callbacks.append((label, type(err).__name__ if err else None, md and tuple(md)))
            self.labels[id(cb)] = "cb-" + label
            h = Attached() if kind == "attached_cb" else _future(cb)
            if kind == "attached_cb":
                h.on_delivery = cb
        elif kind == "future":
            h = _future()
        else:
            raise AssertionError(kind)
        self.labels[id(h)] = label
        return h

    def call(self, what, fn):
        try:
            out = fn()
        except Exception as e:  # noqa: BLE001 - the transcript compares exceptions too
            self.events.append((what, "raised", type(e).__name__, str(e)))
            return None
        self.events.append((what, "ok"))
        return out

    def send(self, topic, value, key=None, partition=None, headers=None, timestamp_ms="now", kind="told",
             direct=False):
        """send() as a driver does it: wait (in fake time) while metadata is
        unknown or memory is short, up to a limit; ``direct`` calls
        append_serialized itself (values the driver would have serialized)."""
        h = self.handle(kind)
        core, sim = self.core, self.sim
        if timestamp_ms == "now":               # the simulated clock may be a float
            timestamp_ms = int(sim.now)
        elif timestamp_ms == "float":           # float ms, as kio.Producer.send passes them
            timestamp_ms = sim.now + 1_700_000_000_000.6
        for _ in range(200):
            try:
                if direct:
                    got = core.append_serialized(topic, value, key, partition, headers,
                                                 sim.now if timestamp_ms is None else timestamp_ms, sim.now, h)
                else:
                    got = core.send(topic, value, key=key, partition=partition, headers=headers,
                                    timestamp_ms=timestamp_ms, now=sim.now, handle=h)
            except (MetadataPending, BufferExhausted) as e:
                self.events.append(("send", "wait", type(e).__name__))
                sim.advance(1)
                continue
            except Exception as e:  # noqa: BLE001
                self.events.append(("send", "raised", type(e).__name__, str(e)))
                return None
            if h is None:
                self.labels[id(got)] = self.handle("told") and f"made{len(self.handles)}"
            else:
                assert got is h
            self.handles.append((self.labels[id(got)], got))
            self.events.append(("send", "ok", self.labels[id(got)]))
            return got
        raise AssertionError("send waited too long")

    def send_many(self, topic, values, keys=None, partition=None):
        core, sim = self.core, self.sim
        h, start = None, 0
        for _ in range(200):
            try:
                h, n = core.send_many(topic, values, keys, partition, now=sim.now, handle=h, start=start)
            except (MetadataPending, BufferExhausted) as e:
                self.events.append(("send_many", "wait", type(e).__name__))
                sim.advance(1)
                continue
            start += n
            if start >= len(values):
                label = f"bulk{len(self.handles)}"
                self.labels[id(h)] = label
                self.handles.append((label, h))
                self.events.append(("send_many", "ok", label))
                return h
            sim.advance(1)
        raise AssertionError("send_many waited too long")

    def snapshot(self, what):
        """The accumulator as it stands: every queued batch and its bookkeeping."""
        acc = self.core.accumulator
        batches = []
        for tp, dq in sorted(acc.queues.items()):
            for b in dq:
                assert type(b) is ProducerBatch
                parts = [("bulk", self.labels.get(id(p[0]), "?"), p[1], p[2]) if type(p) is tuple
                         else ("told", self.labels[id(p)], p._delta) for p in b.parts]
                cbs = [self.labels.get(id(x), x) for x in b.callbacks]
                batches.append((tp, b.full, b.reserved, b.builder.record_count, b.builder.batch_size,
                                bytes(b.builder.build()), parts, cbs))
        self.events.append((what, batches, acc.used_memory, acc.wakeup, len(acc.incomplete),
                            self.core.metrics()["records_queued"]))

    def finish(self):
        """Run until every handle is resolved; the final transcript."""
        sim = self.sim

        def resolved(h):
            if isinstance(h, DeliveryFuture):
                return h.done()
            if getattr(h, "notify", True):
                return h.done
            return h._outcome is not None and h._outcome.locate(h._delta)[0].done

        sim.run_until(lambda: all(resolved(h) for _, h in self.handles), max_ms=600000)
        complete_results(self.core.events())
        out = []
        for label, h in self.handles:
            if isinstance(h, DeliveryFuture):
                exc = h.exception(0)
                state = (type(exc).__name__, None) if exc else (None, tuple(h.result(0)))
                out.append((label, "future", h.topic, h.partition, h.timestamp, h._delta, state))
            elif getattr(h, "total", None) is not None:         # BulkDelivery
                out.append((label, "bulk", h.delivered, h.failed, sorted(h.ranges), type(h.error).__name__))
            elif getattr(h, "notify", True):
                out.append((label, "told", h.topic, h.partition, h.timestamp, h._delta, h.offset,
                            type(h.error).__name__, sorted(getattr(h, "names", ()))))
            else:
                off, lat, err = h._outcome.offset_of(h._delta)
                out.append((label, "attached", h.topic, h.partition, h.timestamp, h._delta, off,
                            type(err).__name__, sorted(getattr(h, "names", ()))))
        logs = {tp: [(r.offset, r.key, r.value, r.timestamp, list(r.headers)) for r in recs]
                for tp, recs in self.kafka.logs.items()}
        sequences = []
        for node, req in self.kafka.produce_requests:
            for t in req.body["topic_data"]:
                for pd in t["partition_data"]:
                    for b in read_batches(pd["records"]):
                        sequences.append((t.get("name"), pd["index"], b.producer_id, b.producer_epoch,
                                          b.base_sequence, b.record_count, b.is_transactional))
        return {"events": self.events, "handles": out, "callbacks": self.callbacks, "logs": logs,
                "sequences": sequences, "txn_log": getattr(self.kafka, "txn_log", None),
                "metrics": {k: v for k, v in self.core.metrics().items()
                            if k in ("records_sent", "records_failed", "records_queued", "splits", "retries")}}


def twins(kafka_factory=FakeKafka, setup=None, **cfg):
    """(fast, slow) Scripts on identical cores; slow has no fast path."""
    runs = []
    for fast in (True, False):
        kafka = kafka_factory()
        if setup is not None:
            setup(kafka)
        core, kafka, sim = make(kafka, **cfg)
        assert isinstance(core._fast_append, FastAppend)
        if not fast:
            del core.append_serialized          # the Python implementation only
            core.sender.use_python_reference()
        runs.append(Script(core, kafka, sim))
    return runs


def compare(play, kafka_factory=FakeKafka, setup=None, min_fast=1, **cfg):
    fast, slow = twins(kafka_factory, setup, **cfg)
    got = [play(s) for s in (fast, slow)]
    assert got[0] == got[1]
    assert slow.core._fast_append.appended == 0
    assert fast.core._fast_append.appended >= min_fast, "the fast path took no record: nothing was compared"
    return fast, got[0]


HANDLE_KINDS = ["told", "attached", "attached_cb", "future", "future_cb", "none", "noting_told",
                "noting_attached"]


def _mixed(s, rng, count, topics=("t",), max_value=300, partitions=3):
    """``count`` random operations: every kind of handle, keyed, keyless and
    explicit-partition sends, odd arguments, headers, send_many, time passing."""
    for i in range(count):
        r = rng.random()
        topic = rng.choice(topics)
        if r < 0.04:
            s.sim.advance(rng.choice([1, 3, 6, 20]))
            continue
        if r < 0.07:
            keys = None if rng.random() < 0.5 else [b"bk%d" % rng.randrange(50) for _ in range(5)]
            s.send_many(topic, [b"m%d" % i] * 5, keys=keys,
                        partition=rng.randrange(partitions) if keys is None and rng.random() < 0.5 else None)
            continue
        if r < 0.08:
            s.snapshot(f"snapshot {i}")
            continue
        value = None if rng.random() < 0.03 else bytes([65 + i % 26]) * rng.randrange(max_value)
        key = None if rng.random() < 0.4 else b"k%d" % rng.randrange(200)
        partition = None
        if rng.random() < 0.25:
            partition = rng.choice([0, 1, 2, 0, 1, 2, -1, 7, True, "1", 2 ** 70])
        headers = [("h", b"v%d" % i)] if rng.random() < 0.05 else None
        ts = rng.choice(["now"] * 4 + ["float"] * 3 + [None, 1_000_000 + i, 2 ** 63 - 1, 2 ** 64, 1.5e6,
                                                       -2.5, 9.3e18, float("nan"), float("inf")])
        direct = rng.random() < 0.05
        if direct:                                  # values a driver would have serialized
            value = rng.choice([value, bytearray(b"ba"), "str", memoryview(b"mv")])
            key = rng.choice([key, memoryview(b"mk"), bytearray(b"bk")])
        s.send(topic, value, key=key, partition=partition, headers=headers, timestamp_ms=ts,
               kind=rng.choice(HANDLE_KINDS), direct=direct)


def test_random_sends_of_every_kind_match_the_python_path():
    def play(s):
        s.send("t", b"warm", partition=0)               # metadata, first batch (Python path)
        _mixed(s, random.Random(11), 1500, topics=("t", "u"))
        s.snapshot("end of sends")
        return s.finish()

    fast, out = compare(play, setup=lambda k: k.partitions.update({"t": 3, "u": 2}), min_fast=500,
                        batch_size=32768, linger_ms=5)
    # the script covered what it should: several batches per partition, errors, callbacks
    assert len(out["sequences"]) > 10
    assert {e[2] for e in out["events"] if e[1] == "raised"} >= {"InvalidPartitionError"}
    assert len(out["callbacks"]) > 100


def test_batch_boundaries_growth_and_memory_pressure_match():
    # Small batches and little memory: records keep landing on full batches,
    # growing ones and BufferExhausted waits.
    def play(s):
        s.send("t", b"warm", partition=0)
        rng = random.Random(5)
        for i in range(800):
            s.send("t", b"x" * rng.randrange(50, 900), key=None if i % 3 else b"k%d" % i,
                   partition=(i % 3) if i % 7 == 0 else None, kind=HANDLE_KINDS[i % len(HANDLE_KINDS)])
            if i % 97 == 0:
                s.snapshot(f"snapshot {i}")
            if i % 50 == 0:
                s.sim.advance(2)
        return s.finish()

    compare(play, setup=lambda k: k.partitions.update({"t": 3}), min_fast=200,
            batch_size=32768, buffer_memory=100_000, linger_ms=2)


def test_more_partitions_after_a_metadata_refresh_match():
    # Keyed records follow murmur2 over the new count at once; the fast path's
    # per-topic deque list grows with it.
    def play(s):
        s.send("t", b"warm", partition=0)
        rng = random.Random(3)
        _mixed(s, rng, 300)
        s.kafka.partitions["t"] = 7
        s.core.cluster.request_update()
        s.sim.run_until(lambda: s.core.partitions_for("t") == 7)
        s.snapshot("after the refresh")
        for i in range(300):
            s.send("t", b"after%d" % i, key=b"key%d" % i, kind=HANDLE_KINDS[i % len(HANDLE_KINDS)])
            s.send("t", b"sticky%d" % i, kind="attached")
            s.send("t", b"explicit%d" % i, partition=6 - i % 7, kind="future")
        s.snapshot("end")
        return s.finish()

    fast, out = compare(play, setup=lambda k: k.partitions.update({"t": 3}), min_fast=500)
    assert {tp[1] for tp in out["logs"]} == set(range(7))


def _keyed_over_many_partitions(s, rng, start, count, topic="t"):
    """``count`` sends with random 16-byte keys (every one may open a batch
    of its own partition; one in three goes to one of 30 hot keys, whose open
    batches the fast path appends to), the network side polled the way a
    driver polls it: when the core asks to be woken (``accumulator.wakeup``)
    and when its next deadline has come; the clock moves 0-2 ms between sends."""
    acc = s.core.accumulator
    for i in range(start, start + count):
        key = b"hot%d" % rng.randrange(30) if i % 3 == 0 else rng.getrandbits(128).to_bytes(16, "big")
        s.send(topic, b"%s-%d" % (topic.encode(), i), key=key,
               partition=rng.randrange(40) if i % 17 == 0 else None, kind=HANDLE_KINDS[i % len(HANDLE_KINDS)])
        s.sim.now += rng.choice([0] * 8 + [0.5, 1, 2])
        deadline = s.core.next_deadline(s.sim.now)
        if acc.wakeup or (deadline is not None and deadline <= s.sim.now):
            acc.wakeup = False
            s.sim.step()
        if i % 1500 == 0:
            s.snapshot(f"snapshot {i}")


def _in_send_order(logs):
    """Every partition's log holds its records in the order they were sent."""
    for tp, records in logs.items():
        sent = [int(r[2].rsplit(b"-", 1)[1]) for r in records if r[2] and b"-" in r[2]]
        assert sent == sorted(sent), tp


@pytest.mark.parametrize("idempotence", [True, False])
def test_keyed_sends_over_a_thousand_partitions_match_the_python_path(idempotence):
    # Many partitions, each with a batch of a record or two: the accumulator's
    # wake-up decisions, ready/drain over every partition, per-batch sequences
    # and a partition count that grows mid-way, the same on both paths.
    def play(s):
        s.send("t", b"warm", partition=0)
        rng = random.Random(17)
        _keyed_over_many_partitions(s, rng, 0, 4000)
        s.kafka.partitions["t"] = 1500
        s.core.cluster.request_update()
        s.sim.run_until(lambda: s.core.partitions_for("t") == 1500)
        _keyed_over_many_partitions(s, rng, 4000, 3000)
        s.snapshot("end of sends")
        return s.finish()

    fast, out = compare(play, setup=lambda k: k.partitions.update({"t": 1000}), min_fast=150,
                        linger_ms=5, enable_idempotence=idempotence)
    assert len(out["logs"]) > 1200                       # spread over (nearly) every partition
    assert out["metrics"]["records_sent"] == 7001 and out["metrics"]["records_failed"] == 0
    # The fast path took every record, opening every batch (a partition's
    # first one and its deque included): the comparison covered it.
    assert fast.core._fast_append.appended == out["metrics"]["records_sent"]
    assert out["metrics"]["records_queued"] == 7001
    _in_send_order(out["logs"])
    if idempotence:
        # per partition, each batch's sequence follows the previous one's last record
        nxt = {}
        for topic, p, pid, epoch, base, count, _ in out["sequences"]:
            assert base == nxt.get((topic, p), 0), (topic, p)
            nxt[(topic, p)] = base + count


def test_keyed_sends_over_ten_thousand_partitions_match_the_python_path():
    # Issue 27's 10,000 partitions: nearly every record a batch of its own,
    # opened with its partition's one key tuple, its outcome made only for
    # attached handles, its sequence given in C, its memory given back in C
    # at drain and its BatchResult made in C - against the Python reference
    # (every partition walked, the generic codec, sequences and
    # acknowledgements in Python): the same transcript, and per partition
    # the records in send order under contiguous sequences, each once.
    def play(s):
        s.send("t", b"warm", partition=0)
        _keyed_over_many_partitions(s, random.Random(27), 0, 6000)
        s.snapshot("end of sends")
        return s.finish()

    fast, out = compare(play, setup=lambda k: k.partitions.update({"t": 10000}), min_fast=150,
                        linger_ms=5, enable_idempotence=True)
    assert len(out["logs"]) > 3000                       # spread over thousands of partitions
    assert out["metrics"]["records_sent"] == 6001 and out["metrics"]["records_failed"] == 0
    assert fast.core._fast_append.appended == out["metrics"]["records_sent"]
    _in_send_order(out["logs"])
    nxt, written = {}, {}
    for topic, p, pid, epoch, base, count, _ in out["sequences"]:
        assert base == nxt.get((topic, p), 0), (topic, p)
        nxt[(topic, p)] = base + count
    for (topic, p), records in out["logs"].items():
        written[(topic, p)] = len(records)
    assert nxt == written, "every record written once, under the sequences given"
    states = fast.core.idempotence.partitions
    assert {tp: st.next_sequence for tp, st in states.items()} == nxt
    assert all(st.unacked == () and st.last_acked == st.next_sequence - 1 for st in states.values())


def test_closed_producer_refuses_through_the_python_path():
    def play(s):
        s.send("t", b"warm", partition=0)
        for i in range(20):
            s.send("t", b"v%d" % i, key=b"k%d" % i, kind=HANDLE_KINDS[i % len(HANDLE_KINDS)])
        s.snapshot("open batches")
        s.call("close", lambda: s.core.close(s.sim.now))
        # closing empties every queue: no open batch the fast path could append to
        assert not any(s.core.accumulator.queues.values())
        for kind in ("told", "attached", "future_cb"):
            s.send("t", b"late", partition=0, kind=kind)
            s.send("t", b"late", key=b"k", kind=kind)
        complete_results(s.core.events())
        return s.finish()

    fast, out = compare(play, setup=lambda k: k.partitions.update({"t": 2}), min_fast=15, linger_ms=1000)
    refused = [e for e in out["events"] if e[1] == "raised"]
    assert len(refused) == 6 and {e[2] for e in refused} == {"ProducerClosedError"}


def test_transactions_register_partitions_and_refuse_outside_match():
    def play(s):
        res = s.core.init_transactions()
        s.sim.run_until(lambda: res.done)
        for txn in range(3):
            s.call("begin", s.core.begin_transaction)
            rng = random.Random(txn)
            for i in range(150):
                s.send("t", b"tx%d-%d" % (txn, i), key=b"k%d" % rng.randrange(40),
                       partition=rng.choice([None, None, 0, 1, 2]),
                       kind=HANDLE_KINDS[i % len(HANDLE_KINDS)])
            s.events.append(("pending", sorted(s.core.transactions.pending_partitions),
                             sorted(s.core.transactions.partitions)))
            s.snapshot(f"txn {txn}")
            res = s.call("commit", s.core.commit_transaction)
            # committing: open batches remain until drained, and sends are refused
            s.send("t", b"during commit", partition=0)
            s.send("t", b"during commit", key=b"k1")
            s.sim.run_until(lambda: res.done)
        s.send("t", b"outside", partition=1)              # no transaction begun
        return s.finish()

    fast, out = compare(play, kafka_factory=TxnKafka, setup=lambda k: k.partitions.update({"t": 3}),
                        min_fast=300, transactional_id="tx-1", linger_ms=100000)
    refused = [e[2] for e in out["events"] if e[1] == "raised"]
    assert refused.count("TransactionStateError") == 7
    assert all(s[-1] for s in out["sequences"])           # every batch transactional


def test_fatal_error_refuses_through_the_python_path():
    # PRODUCER_FENCED is fatal: the sender fails every queued batch, and
    # later sends raise it - with records queued on other partitions too.
    def play(s):
        res = s.core.init_transactions()
        s.sim.run_until(lambda: res.done)
        s.call("begin", s.core.begin_transaction)
        for i in range(30):
            s.send("t", b"v%d" % i, partition=i % 3, kind=HANDLE_KINDS[i % len(HANDLE_KINDS)])
        s.kafka.inject("t", 0, 90)
        s.call("commit", s.core.commit_transaction)
        s.sim.run_until(lambda: s.core.sender.fatal_error is not None)
        assert not any(s.core.accumulator.queues.values())
        for p in (0, 1, 2):
            s.send("t", b"after", partition=p)
            s.send("t", b"after", key=b"k%d" % p, kind="attached")
        return s.finish()

    fast, out = compare(play, kafka_factory=TxnKafka, setup=lambda k: k.partitions.update({"t": 3}),
                        min_fast=20, transactional_id="tx-1", linger_ms=100000)
    refused = [e[2] for e in out["events"] if e[1] == "raised"]
    assert refused == ["ProducerFencedError"] * 6


def test_a_user_partitioner_leaves_the_python_path_alone():
    core, kafka, sim = make(partitioner=lambda key, n, available: n - 1)
    assert core._fast_append is None
    assert "append_serialized" not in vars(core)


def test_the_fast_path_writes_the_same_handle_attributes_as_the_python_path():
    # NotingTold/NotingAttached record every attribute written: the same set,
    # whichever path appended the record.
    def play(s):
        s.send("t", b"warm", partition=0)
        for kind in ("noting_told", "noting_attached"):
            for i in range(5):
                s.send("t", b"v", partition=0, kind=kind)
        return s.finish()

    fast, out = compare(play, min_fast=10)
    names = {h[0]: h[-1] for h in out["handles"] if h[1] in ("told", "attached") and h[-1]}
    assert len(names) == 10
    assert all(set(n) >= {"topic", "partition", "timestamp", "_delta"} for n in names.values())


def test_retried_and_split_batches_are_not_appended_to():
    # A batch put back for a retry, or split after MESSAGE_TOO_LARGE, returns
    # to its queue marked full: new records go to a new batch behind it (its
    # bytes and sequence were fixed when it was first sent).
    def play(s):
        s.send("t", b"warm", partition=0)
        rng = random.Random(9)
        for rnd in range(12):
            for p in (0, 1):
                s.kafka.inject("t", p, rng.choice([6, 7, 10, 10]))   # NOT_LEADER, TIMED_OUT, TOO_LARGE
            for i in range(60):
                s.send("t", b"r%d-%d" % (rnd, i) + b"x" * rng.randrange(200), partition=i % 2,
                       kind=HANDLE_KINDS[i % len(HANDLE_KINDS)])
                if i % 20 == 19:
                    s.sim.advance(rng.choice([1, 5, 50, 120]))
                    s.snapshot(f"round {rnd} step {i}")
        return s.finish()

    fast, out = compare(play, setup=lambda k: k.partitions.update({"t": 2}), min_fast=300,
                        batch_size=4096, linger_ms=2)
    assert out["metrics"]["splits"] > 0 and out["metrics"]["retries"] > 0


def test_ordered_keyless_and_retried_sends_over_two_topics_match():
    # The sender's per-batch bookkeeping of a request (gather_batches in C,
    # Sender.gather_in_python the reference): with one request in flight per
    # connection every batch sent mutes its partition; keyless records move
    # each topic's sticky partition as its batch goes out; injected errors
    # send batches again (attempts > 0: no sticky bookkeeping then).
    def play(s):
        s.send("t", b"warm", partition=0)
        s.send("u", b"warm", partition=0)
        rng = random.Random(11)
        for rnd in range(10):
            for topic, n in (("t", 4), ("u", 3)):
                s.kafka.inject(topic, rng.randrange(n), rng.choice([6, 7]))   # NOT_LEADER, TIMED_OUT
            for i in range(80):
                topic = "t" if i % 3 else "u"
                s.send(topic, b"r%d-%d" % (rnd, i) + b"x" * rng.randrange(300),
                       key=b"k%d" % rng.randrange(50) if i % 4 == 0 else None,
                       kind=HANDLE_KINDS[i % len(HANDLE_KINDS)])
                if i % 16 == 15:
                    s.sim.advance(rng.choice([1, 3, 20, 150]))
                    s.snapshot(f"round {rnd} step {i}")
        return s.finish()

    fast, out = compare(play, setup=lambda k: k.partitions.update({"t": 4, "u": 3}), min_fast=300,
                        batch_size=2048, linger_ms=2, max_in_flight_requests_per_connection=1)
    assert out["metrics"]["retries"] > 0
    assert {tp for tp in out["logs"]} == {("t", p) for p in range(4)} | {("u", p) for p in range(3)}


def test_on_delivery_callbacks_get_record_metadata_in_record_order_and_one_raising_stops_none(caplog):
    # kproto/producer/_callbacks.pyx calls them: each gets a RecordMetadata
    # (or None and the error), merged in record order with told handles.
    from kproto.producer import RecordMetadata
    core, kafka, sim = make(linger_ms=5)
    sim.send(b"warm")
    got = []

    def cb(err, md):
        got.append((err, md))

    def bad(err, md):
        raise RuntimeError("callback boom")

    for i in range(1, 6):
        h = Attached()
        h.on_delivery = bad if i == 3 else cb
        core.send("t", b"v%d" % i, now=sim.now, handle=h, timestamp_ms=1000 + i)
        if i == 2:
            told = core.send("t", b"told", now=sim.now, handle=NotingTold())     # offset 3
    sim.run_until(lambda: told.done)
    assert [(err, type(md), tuple(md)) for err, md in got] == [
        (None, RecordMetadata, ("t", 0, 1, 1001)), (None, RecordMetadata, ("t", 0, 2, 1002)),
        (None, RecordMetadata, ("t", 0, 5, 1004)), (None, RecordMetadata, ("t", 0, 6, 1005))]
    assert told.offset == 3 and "callback boom" in caplog.text
    got.clear()
    kafka.inject("t", 0, 87)                                       # INVALID_RECORD: fails the batch
    for i in range(2):
        h = Attached()
        h.on_delivery = cb
        core.send("t", b"bad", now=sim.now, handle=h)
    sim.run_until(lambda: len(got) == 2)
    assert [md for _, md in got] == [None, None] and all(err is not None for err, _ in got)


def test_allocator_makes_uninitialised_instances_and_refuses_classes_with_their_own_new():
    class Plain:
        def __init__(self):
            raise AssertionError("__init__ must not run")

    made = Allocator(Plain).new()
    assert type(made) is Plain and not vars(made)
    fut = Allocator(DeliveryFuture).new()
    assert type(fut) is DeliveryFuture and not fut._kio_future   # Future.__init__ not run either
    for cls in (tuple, int, ProducerBatch):
        with pytest.raises(TypeError, match="own __new__"):
            Allocator(cls)


def test_answers_after_lost_responses_and_expiry_in_flight_match_the_python_path():
    # The rarer branches of the C completion (kproto/producer/_acknowledge.pyx):
    # DUPLICATE_SEQUENCE_NUMBER for a retry of a batch the broker had written
    # (its response lost), and an answer that comes after its batch expired in
    # flight (done already: only the in-flight bookkeeping changes).
    def play(s):
        s.send("t", b"warm", partition=0)
        s.sim.run_until(lambda: not s.core.pending)
        s.kafka.hold = True                          # the broker writes nothing, answers nothing
        for i in range(12):
            s.send("t", b"lost-%d" % i, partition=i % 4, kind=HANDLE_KINDS[i % len(HANDLE_KINDS)])
        s.sim.step()
        s.kafka.hold = False
        for node, req in s.kafka.produce_requests[-1:]:     # ... but half the writes did happen
            for t in req.body["topic_data"]:
                for pd in t["partition_data"][::2]:
                    s.kafka._append(node, ("t", pd["index"]), pd["records"])
        s.snapshot("writes lost")
        out = s.finish()                             # request timeout -> retries -> DUPLICATE or written
        for p in range(4):
            s.kafka.inject("t", p, 7)                # REQUEST_TIMED_OUT: retried after the backoff
        for i in range(8):
            s.send("t", b"late-%d" % i, partition=i % 4, kind=HANDLE_KINDS[i % len(HANDLE_KINDS)])
        s.sim.step()
        s.kafka.hold_replies = True                  # the retries' answers kept back ...
        s.sim.advance(4500)                          # (sent now, within their delivery timeout)
        s.sim.advance(600)                           # ... past it: expired in flight
        s.kafka.hold_replies = False
        s.sim.release()                              # the answers come, too late
        s.snapshot("after late answers")
        return out, s.finish(), s.core.metrics()["records_failed"], s.core.metrics()["records_sent"]

    fast, (first, second, failed, sent) = compare(
        play, setup=lambda k: k.partitions.update({"t": 4}), min_fast=10, linger_ms=0,
        request_timeout_ms=1000, delivery_timeout_ms=5000, retry_backoff_ms=2000, retry_backoff_max_ms=2000,
        enable_idempotence=True)
    lost = [h for h in first["handles"] if h[0] != "h1"]
    assert len(lost) == 12 and all("Error" not in str(h) for h in lost)     # every lost write delivered once
    assert sorted(v for (_, v) in ((tp, r[2]) for tp, recs in first["logs"].items() for r in recs)
                  if v.startswith(b"lost")) == sorted(b"lost-%d" % i for i in range(12))
    assert failed == 8 and sent == 13                # the late ones expired; their answers changed nothing


@pytest.mark.parametrize("topic_ids", [True, False])
def test_produce_answers_read_in_c_match_the_generic_codec_with_errors_between(topic_ids):
    # Answers that acknowledge every batch are read in C
    # (kproto/producer/_produce_answer.pyx; Produce v13 names topics by id),
    # the others - a partition refused by an injected error, retried after
    # the backoff or failed for good - by the generic codec: the same
    # transcript as the reference, which reads every answer generically.
    def setup(k):
        k.partitions.update({"t": 300, "u": 40})
        if topic_ids:
            k.topic_ids.update({"t": uuid.UUID(int=7), "u": uuid.UUID(int=8)})

    read_in_c = []                   # per answer the fast core got: read in C (True) or left (False)

    def play(s):
        read = s.core.sender.read_answer
        if read is not None:
            def counting(*args):
                got = read(*args)
                read_in_c.append(got is not None)
                return got
            s.core.sender.read_answer = counting
        s.send("t", b"warm", partition=0)
        s.send("u", b"warm", partition=0)
        s.sim.run_until(lambda: not s.core.pending)
        rng = random.Random(5)
        for round_ in range(6):
            for p in rng.sample(range(300), 4):
                s.kafka.inject("t", p, rng.choice([6, 7, 46, 87]))   # NOT_LEADER, TIMEOUT, DUPLICATE, INVALID_RECORD
            _keyed_over_many_partitions(s, rng, round_ * 400, 300, topic="t")
            _keyed_over_many_partitions(s, rng, round_ * 400 + 300, 100, topic="u")
        s.snapshot("end of sends")
        return s.finish()

    fast, out = compare(play, setup=setup, min_fast=1000, linger_ms=5, enable_idempotence=True,
                        retry_backoff_ms=10)
    versions = {req.version for _, req in fast.kafka.produce_requests}
    assert versions == ({13} if topic_ids else {12})
    assert read_in_c.count(True) >= 20 and read_in_c.count(False) >= 10    # both ways were compared
    assert out["metrics"]["records_failed"] > 0 and out["metrics"]["retries"] > 0
    assert out["metrics"]["records_sent"] + out["metrics"]["records_failed"] == 2402
    _in_send_order(out["logs"])


def test_drains_over_three_leaders_with_small_requests_match_the_full_walk():
    # The incremental ready/drain (RecordAccumulator.nonempty: only queues that
    # may hold a batch are looked at) against the walks over every partition
    # (the reference core): three leaders, and a max.request.size that stops
    # nearly every drain part-way, so each node's next drain starts mid-list
    # (its drain index) and goes round it - the same batches in the same
    # requests, in the same order, with the same sequences.
    def three_leaders():
        return FakeKafka(nodes=(1, 2, 3), partitions={"t": 600}, leaders={("t", p): 1 + p % 3 for p in range(600)})

    def play(s):
        s.send("t", b"warm", partition=0)
        rng = random.Random(23)
        _keyed_over_many_partitions(s, rng, 0, 3000)
        s.snapshot("end of sends")
        return s.finish()

    fast, out = compare(play, kafka_factory=three_leaders, min_fast=2000, linger_ms=5, enable_idempotence=True,
                        max_request_size=2500)
    requests = fast.kafka.produce_requests
    assert {node for node, _ in requests} == {1, 2, 3}
    # most requests were cut by max.request.size: far fewer batches than partitions waiting
    assert max(len(req.body["topic_data"][0]["partition_data"]) for _, req in requests) < 40
    assert out["metrics"]["records_sent"] == 3001
    _in_send_order(out["logs"])
