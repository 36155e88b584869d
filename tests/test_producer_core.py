"""ProducerCore without a network: scripted brokers and simulated time.

The :class:`Sim` harness plays the driver: it turns Connect actions into
channels of :class:`ScriptedBroker` objects, moves bytes both ways, advances a
fake millisecond clock to the core's next deadline, and resolves handles.
Produce answers come from a per-broker handler so tests can inject errors
per partition and attempt.
"""
import random

import pytest

try:
    from scripted_broker import NO_RESPONSE, Reply, ScriptedBroker
except ImportError:  # pragma: no cover
    from tests.scripted_broker import NO_RESPONSE, Reply, ScriptedBroker

from kproto import error_codes
from kproto.client import Close, Connect
from kproto.producer.core import DeliveryHandle
from kproto.producer import (
    BufferExhausted, DeliveryTimeoutError, InvalidPartitionError, MetadataPending, ProducerCore,
    RecordTooLargeError, complete_results,
)
from kproto.producer.partitioner import murmur2, murmur2_partition, to_positive
from kproto.records import read_batches


# --- harness -------------------------------------------------------------------------

class FakeKafka:
    """A cluster of scripted brokers with a log per partition, answering
    Metadata and Produce like Kafka (sequence checks included when a batch
    carries a producer id). ``inject(topic, partition, *codes)`` makes the
    next Produce answers for that partition return those error codes."""

    def __init__(self, nodes=(1,), partitions=None, leaders=None):
        self.brokers = {n: ScriptedBroker(node_id=n) for n in nodes}
        self.partitions = partitions or {"t": 1}
        self.leaders = leaders or {}            # (topic, p) -> node; default first node
        self.logs = {}                           # (topic, p) -> list of (offset, record)
        self.injected = {}
        self.hold = False                        # swallow Produce requests (timeouts)
        self.hold_replies = False                # process Produce, keep the answer until release
        self.seq = {}                            # (pid, epoch, topic, p) -> last sequence written
        self.max_epoch = 0                       # the highest epoch a batch carried
        self.recent = {}                         # same key -> base sequences of the last 5 batches
        self.produce_requests = []
        self.pid = 1000
        self.topic_error = {}
        self.topic_ids = {}                      # name -> uuid.UUID: Metadata answers with them
        for n, b in self.brokers.items():
            b.on("Metadata", self._metadata)
            b.on("Produce", lambda req, n=n: self._produce(n, req))
            b.on("InitProducerId", self._init_pid)

    def leader(self, topic, p):
        return self.leaders.get((topic, p), min(self.brokers))

    def _metadata(self, req):
        topics = []
        for t in req.body["topics"] or []:
            name = t["name"]
            if name in self.topic_error:
                topics.append({"name": name, "error_code": self.topic_error[name], "partitions": []})
            elif name in self.partitions:
                topics.append({"name": name, "error_code": 0,
                               **({"topic_id": self.topic_ids[name]} if name in self.topic_ids else {}),
                               "partitions": [
                    {"partition_index": p, "leader_id": self.leader(name, p), "error_code": 0,
                     "replica_nodes": [self.leader(name, p)], "isr_nodes": [self.leader(name, p)]}
                    for p in range(self.partitions[name])]})
            else:
                topics.append({"name": name, "error_code": 3, "partitions": []})
        return {"brokers": [{"node_id": n, "host": f"b{n}", "port": 9092} for n in self.brokers],
                "cluster_id": "sim", "controller_id": min(self.brokers), "topics": topics}

    def _init_pid(self, req):
        self.pid += 1 if req.body.get("producer_id", -1) < 0 else 0
        epoch = req.body["producer_epoch"] + 1 if req.body.get("producer_id", -1) >= 0 else 0
        return {"error_code": 0, "producer_id": self.pid, "producer_epoch": epoch}

    def inject(self, topic, p, *codes):
        self.injected.setdefault((topic, p), []).extend(codes)

    def _produce(self, node, req):
        self.produce_requests.append((node, req))
        if self.hold:
            return NO_RESPONSE
        responses = []
        names = {v: k for k, v in self.topic_ids.items()}
        for t in req.body["topic_data"]:
            parts = []
            name = t["name"] if req.version < 13 else names.get(t["topic_id"])
            for pd in t["partition_data"]:
                if name is None:                                # UNKNOWN_TOPIC_ID
                    parts.append({"index": pd["index"], "error_code": 100, "base_offset": -1})
                    continue
                tp = (name, pd["index"])
                parts.append(self._append(node, tp, pd["records"]))
            responses.append({"name": t.get("name", ""), "topic_id": t.get("topic_id"),
                              "partition_responses": parts})
        if req.body["acks"] == 0:
            return NO_RESPONSE
        if self.hold_replies:
            return Reply({"responses": responses}, hold=True)
        return {"responses": responses}

    def _append(self, node, tp, data):
        res = {"index": tp[1], "error_code": 0, "base_offset": -1, "log_append_time_ms": -1,
               "log_start_offset": 0}
        if self.leader(*tp) != node:
            res["error_code"] = 6                               # NOT_LEADER_OR_FOLLOWER
            return res
        inj = self.injected.get(tp)
        if inj:
            res["error_code"] = inj.pop(0)
            return res
        (batch,) = read_batches(data)
        log = self.logs.setdefault(tp, [])
        if batch.producer_id >= 0:
            key = (batch.producer_id, batch.producer_epoch) + tp
            last = self.seq.get(key, -1)
            recent = self.recent.setdefault(key, [])        # the broker caches 5 batches
            if batch.base_sequence in recent:
                res["error_code"] = 46                          # DUPLICATE_SEQUENCE_NUMBER
                return res
            # Kafka (ProducerAppendInfo.checkSequence) takes any sequence from a
            # producer it has no state for on this partition (a new producer, or
            # one whose state expired); a known producer with a new epoch must
            # start at 0; otherwise the sequence must follow the last one.
            # (epoch by epoch, not a walk over every partition's state: the
            # many-partition tests and bench/partition_cost.py send thousands of batches)
            self.max_epoch = max(self.max_epoch, batch.producer_epoch)
            known = any((batch.producer_id, e) + tp in self.seq for e in range(self.max_epoch + 1))
            if known and batch.base_sequence != (last + 1) % 2 ** 31:
                res["error_code"] = 45                          # OUT_OF_ORDER_SEQUENCE_NUMBER
                return res
            self.seq[key] = (batch.base_sequence + batch.record_count - 1) % 2 ** 31
            recent.append(batch.base_sequence)
            del recent[:-5]
        res["base_offset"] = len(log)
        for r in batch.records():
            log.append(r)
        return res

    def forget_producers(self, topic="t", p=0):
        """The broker loses its producer state for a partition (expired)."""
        for k in [k for k in self.seq if k[2:] == (topic, p)]:
            del self.seq[k]
            self.recent.pop(k, None)

    def values(self, topic="t", p=0):
        return [r.value for r in self.logs.get((topic, p), [])]


class Sim:
    """The driver: actions -> channels, bytes both ways, fake time."""

    def __init__(self, core, kafka, now=0):
        self.core = core
        self.kafka = kafka
        self.now = now
        self.channels = {}
        self.refuse = set()          # node ids whose connects fail
        self.log = []
        self.collect_events = True   # False: completions stay in the core, as between two driver rounds

    def _broker_for(self, host):
        if host[:1] == "b" and host[1:].isdigit():
            return self.kafka.brokers[int(host[1:])]
        return self.kafka.brokers[min(self.kafka.brokers)]     # bootstrap address

    def step(self):
        core = self.core
        for _ in range(50):
            moved = False
            for a in core.poll(self.now):
                self.log.append(a)
                if isinstance(a, Connect):
                    if a.node in self.refuse:
                        core.disconnected(a.node, self.now, ConnectionRefusedError("refused"))
                    else:
                        self.channels[a.node] = self._broker_for(a.host).channel()
                        core.connected(a.node, self.now)
                    moved = True
                elif isinstance(a, Close):
                    self.channels.pop(a.node, None)
            for node in core.nodes_with_output():
                data = bytes(core.output(node))
                core.sent(node, len(data), self.now)
                ch = self.channels.get(node)
                if ch is not None:
                    reply = ch.receive(data)
                    if reply:
                        core.received(node, reply, self.now)
                moved = True
            if self.collect_events:
                complete_results(core.events())
            if not moved:
                break

    def release(self, node=1):
        """Deliver the answers the broker held back (in order)."""
        data = self.kafka.brokers[node].release()
        if data:
            self.core.received(node, data, self.now)
        self.step()

    def advance(self, ms):
        self.now += ms
        self.step()

    def run_until(self, cond, max_ms=200000):
        """Step, then jump to the next deadline, until cond() or max_ms passed."""
        end = self.now + max_ms
        self.step()
        while not cond():
            d = self.core.next_deadline(self.now)
            nxt = self.now + 1 if d is None or d <= self.now else d
            if nxt > end:
                raise AssertionError(f"condition not met by t={end} (now {self.now})")
            self.now = nxt
            self.step()

    def send(self, value, topic="t", **kw):
        """send(), first waiting (in fake time) for metadata like a driver."""
        for _ in range(1000):
            try:
                return self.core.send(topic, value, now=self.now, **kw)
            except MetadataPending:
                self.advance(1)
        raise AssertionError("metadata never arrived")


def make(kafka=None, **cfg):
    kafka = kafka or FakeKafka()
    conf = {"bootstrap.servers": "boot:9092", "linger.ms": 5, "retry.backoff.ms": 100}
    conf.update({k.replace("_", "."): v for k, v in cfg.items()})
    core = ProducerCore(conf, rng=random.Random(7))
    return core, kafka, Sim(core, kafka)


# --- murmur2 and partitioning ---------------------------------------------------------

# From the Java client's UtilsTest.testMurmur2.
JAVA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize("key,expected", sorted(JAVA_MURMUR2.items()))
def test_murmur2_matches_java(key, expected):
    assert murmur2(key) == expected


def test_group_by_partition_matches_murmur2_per_row_and_sends_null_keys_to_the_sticky_choice():
    from kproto.producer.partitioner import group_by_partition
    keys = [b"k%d" % i if i % 5 else None for i in range(100)] + [b""]
    values = [b"v" * i for i in range(100)] + [None]
    groups, sizes, largest = group_by_partition(keys, values, 3, 101, 7, 4)
    want = {}
    for r in range(3, 101):
        want.setdefault(4 if keys[r] is None else murmur2_partition(keys[r], 7), []).append(r)
    assert groups == {p: (rows, [keys[r] for r in rows], [values[r] for r in rows]) for p, rows in want.items()}
    assert sizes == {p: sum(len(keys[r] or b"") + len(values[r] or b"") for r in rows)
                     for p, rows in want.items()}
    assert largest == max(len(keys[r] or b"") + len(values[r] or b"") for r in range(3, 101))
    assert murmur2(b"") == murmur2(bytearray())
    with pytest.raises(ValueError):
        group_by_partition(keys, values, 0, 1, 0, 0)


def test_group_by_partition_takes_any_buffer_and_checks_its_bounds():
    from kproto.producer.partitioner import group_by_partition
    keys = [b"a", bytearray(b"b"), memoryview(b"c"), None]
    values = (b"1", bytearray(b"22"), None, b"4444")              # a tuple works too
    groups, sizes, largest = group_by_partition(keys, values, 0, 4, 3, 1)
    rows = {p: g[0] for p, g in groups.items()}
    for r, k in enumerate(keys):
        p = 1 if k is None else murmur2_partition(bytes(k), 3)
        assert r in rows[p]
    assert sum(sizes.values()) == 3 + 1 + 2 + 4 and largest == 4
    with pytest.raises(ValueError, match="outside"):
        group_by_partition(keys, values, 0, 5, 3, 1)
    with pytest.raises(ValueError, match="null_key_partition"):
        group_by_partition(keys, values, 0, 4, 3, 3)
    with pytest.raises(TypeError):
        group_by_partition([1], [b"v"], 0, 1, 3, 0)                 # an int is no key


def test_all_bytes_or_none():
    from kproto.producer.partitioner import all_bytes_or_none
    assert all_bytes_or_none([b"a", None, b""]) and all_bytes_or_none(())
    assert not all_bytes_or_none([b"a", "s"]) and not all_bytes_or_none([bytearray(b"x")])


def test_send_many_takes_arrow_string_and_binary_columns():
    pa = pytest.importorskip("pyarrow")
    core, kafka, sim = make(FakeKafka(partitions={"t": 3}), linger_ms=0)
    sim.send(b"warm")
    h, n = core.send_many("t", pa.array(["é", None, "c"]), keys=pa.array([b"k1", b"k2", b"k3"]),
                          now=sim.now)
    sim.run_until(lambda: h.done)
    assert n == 3 and h.error is None
    got = {r.key: r.value for p in range(3) for r in kafka.logs.get(("t", p), []) if r.key is not None}
    assert got == {b"k1": "é".encode(), b"k2": None, b"k3": b"c"}


def test_quota_throttle_delays_the_next_produce_request():
    kafka = FakeKafka()
    orig = kafka.brokers[1].handlers["Produce"]

    def throttled(req):
        reply = orig(req)
        reply["throttle_time_ms"] = 400
        return reply
    kafka.brokers[1].on("Produce", throttled)
    core, kafka, sim = make(kafka, linger_ms=0)
    first = sim.send(b"a")
    sim.run_until(lambda: first.done)
    t_answer = sim.now
    second = sim.send(b"b")
    sim.advance(100)
    assert len(kafka.produce_requests) == 1            # the node is throttled
    sim.run_until(lambda: second.done)
    assert second.error is None and kafka.values() == [b"a", b"b"]
    assert sim.now >= t_answer + 400


def test_to_positive_clears_sign_bit_like_java():
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-2147483648) == 0
    assert murmur2_partition(b"foobar", 7) == (-790332482 & 0x7FFFFFFF) % 7


def test_keyed_records_go_to_murmur2_partition_and_keyless_stick():
    core, kafka, sim = make(FakeKafka(partitions={"t": 6}))
    h = sim.send(b"v", key=b"foobar")
    assert h.partition == murmur2_partition(b"foobar", 6)
    keyless = [sim.send(b"x") for _ in range(20)]
    assert len({x.partition for x in keyless}) == 1       # one open batch: sticky
    sim.run_until(lambda: all(x.done for x in keyless))
    after = sim.send(b"y")                                   # batch sent: sticky moved on
    assert after.partition != keyless[0].partition


def test_explicit_partition_out_of_range_names_the_range():
    core, kafka, sim = make(FakeKafka(partitions={"t": 3}))
    with pytest.raises(InvalidPartitionError, match=r"\[0, 2\]"):
        sim.send(b"v", partition=3)


def test_user_partitioner_callable():
    core, kafka, sim = make(FakeKafka(partitions={"t": 4}), partitioner=lambda k, n, avail: n - 1)
    h = sim.send(b"v", key=b"k")
    sim.run_until(lambda: h.done)
    assert h.partition == 3 and h.error is None and kafka.values("t", 3) == [b"v"]


# --- batching ---------------------------------------------------------------------------

def test_linger_expiry_sends_one_batch():
    core, kafka, sim = make(linger_ms=50)
    hs = [sim.send(b"v%d" % i) for i in range(10)]
    t0 = sim.now
    sim.step()
    assert not kafka.produce_requests                        # lingering
    sim.run_until(lambda: all(h.done for h in hs))
    assert sim.now - t0 >= 50 - 1
    assert len(kafka.produce_requests) == 1
    assert [h.metadata.offset for h in hs] == list(range(10))
    assert kafka.values() == [b"v%d" % i for i in range(10)]


def test_completed_records_stay_pending_until_the_driver_collects_them():
    # A driver reads the answers in one step and collects the completions in
    # the next (the threading driver releases its lock in between). A flush
    # that looked at the core in that gap must not see "nothing pending":
    # the futures it waits for are resolved only once events() handed them over.
    core, kafka, sim = make(linger_ms=0)
    hs = [sim.send(b"v%d" % i) for i in range(7)]
    sim.collect_events = False
    sim.advance(1)
    assert len(kafka.values()) == 7 and not core.accumulator.has_incomplete   # acknowledged...
    assert not any(h.done for h in hs)
    assert core.pending and core.pending_records == 7                          # ...but not resolved
    complete_results(core.events())
    assert all(h.done for h in hs)
    assert not core.pending and core.pending_records == 0


def test_full_batch_is_sent_before_linger():
    core, kafka, sim = make(linger_ms=100000, batch_size=1024)
    hs = [sim.send(b"x" * 100) for _ in range(30)]
    sim.step()
    assert kafka.produce_requests, "a full batch must not wait for linger.ms"
    sim.run_until(lambda: hs[0].done, max_ms=10)
    assert hs[0].error is None


def test_buffer_exhaustion_signals_backpressure_and_recovers():
    core, kafka, sim = make(buffer_memory=4096, batch_size=1024, linger_ms=1000,
                            max_request_size=1024)
    hs = []
    with pytest.raises(BufferExhausted):
        for i in range(1000):
            hs.append(sim.send(b"y" * 200))
    assert 4 <= len(hs) < 1000
    assert core.buffer_available < 1024
    sim.run_until(lambda: all(h.done for h in hs))          # exhaustion makes batches sendable
    assert core.buffer_available == 4096
    h = sim.send(b"z")
    sim.run_until(lambda: h.done)
    assert h.error is None


def test_record_larger_than_max_request_size():
    core, kafka, sim = make(max_request_size=1000)
    with pytest.raises(RecordTooLargeError, match="max.request.size"):
        sim.send(b"x" * 2000)


def test_acks_zero_completes_when_written_without_offsets():
    core, kafka, sim = make(acks=0)
    h = sim.send(b"v")
    sim.run_until(lambda: h.done)
    assert h.error is None and h.metadata.offset == -1
    assert kafka.values() == [b"v"]
    assert kafka.produce_requests[0][1].body["acks"] == 0


# --- retries, backoff, delivery timeout ---------------------------------------------------------

def test_retriable_error_retries_with_growing_backoff():
    core, kafka, sim = make(enable_idempotence=False, acks=1, retry_backoff_ms=100,
                            retry_backoff_max_ms=1000)
    kafka.inject("t", 0, 7, 7, 7, 7)                         # REQUEST_TIMED_OUT x4
    h = sim.send(b"v")
    times = []
    orig = kafka._produce

    def spy(node, req):
        times.append(sim.now)
        return orig(node, req)
    kafka.brokers[1].on("Produce", lambda req: spy(1, req))
    sim.run_until(lambda: h.done)
    assert h.error is None and kafka.values() == [b"v"]
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert len(gaps) == 4
    # 100, 200, 400, 800 ms each +-20% jitter
    for gap, base in zip(gaps, [100, 200, 400, 800]):
        assert base * 0.8 - 1 <= gap <= base * 1.2 + 1, (gaps)
    assert core.metrics()["retries"] == 4


def test_non_retriable_error_fails_fast():
    core, kafka, sim = make()
    kafka.inject("t", 0, 87)                                 # INVALID_RECORD
    h = sim.send(b"v")
    sim.run_until(lambda: h.done)
    assert h.error is not None and h.error.code == 87
    assert len(kafka.produce_requests) == 1


def test_retries_exhausted_fails_with_broker_error():
    core, kafka, sim = make(enable_idempotence=False, retries=2)
    kafka.inject("t", 0, 7, 7, 7, 7)
    h = sim.send(b"v")
    sim.run_until(lambda: h.done)
    assert h.error.code == 7 and len(kafka.produce_requests) == 3


def test_delivery_timeout_is_separate_from_request_timeout():
    core, kafka, sim = make(request_timeout_ms=1000, delivery_timeout_ms=3500, linger_ms=0)
    kafka.hold = True                                        # broker never answers
    h = sim.send(b"v")
    t0 = sim.now
    sim.run_until(lambda: h.done)
    # several request timeouts (each closes the connection, then a retry) ...
    assert len(kafka.produce_requests) >= 2
    # ... but the record fails only at delivery.timeout.ms
    assert isinstance(h.error, DeliveryTimeoutError)
    assert 3500 <= sim.now - t0 <= 3600


def test_delivery_timeout_in_accumulator_when_no_leader():
    core, kafka, sim = make(request_timeout_ms=500, delivery_timeout_ms=2000, linger_ms=0)
    h = sim.send(b"v")
    sim.refuse.add(1)                                        # broker unreachable
    for n, c in list(core.client.connections.items()):
        c.close("test", sim.now)
    sim.run_until(lambda: h.done)
    assert isinstance(h.error, DeliveryTimeoutError) and "accumulator" in str(h.error)


# --- metadata refresh on leadership change --------------------------------------------------------

def test_leadership_change_refreshes_metadata_and_retries_on_new_leader():
    kafka = FakeKafka(nodes=(1, 2))
    core, kafka, sim = make(kafka)
    h = sim.send(b"a")
    sim.run_until(lambda: h.done)
    assert h.error is None
    kafka.leaders[("t", 0)] = 2                              # leader moved
    h2 = sim.send(b"b")
    sim.run_until(lambda: h2.done)
    assert h2.error is None
    nodes = [n for n, _ in kafka.produce_requests]
    assert nodes[:2] == [1, 1] and nodes[-1] == 2
    assert kafka.values() == [b"a", b"b"]


def test_bootstrap_rotation_over_several_servers():
    kafka = FakeKafka()
    core = ProducerCore({"bootstrap.servers": "dead:1,boot:9092"}, rng=random.Random(1))
    sim = Sim(core, kafka)
    sim.refuse.add(-1)
    h = sim.send(b"v")
    sim.run_until(lambda: h.done)
    assert h.error is None
    connects = [a.node for a in sim.log if isinstance(a, Connect)]
    assert connects[0] == -1 and -2 in connects


def test_unknown_topic_keeps_asking_with_backoff():
    core, kafka, sim = make()
    assert core.partitions_for("nope", sim.now) is None
    sim.run_until(lambda: core.metadata_error("nope") is not None)
    asked = len(kafka.brokers[1].requests_of("Metadata"))
    sim.advance(50)
    assert len(kafka.brokers[1].requests_of("Metadata")) == asked   # backoff between attempts
    kafka.partitions["nope"] = 2
    sim.run_until(lambda: core.partitions_for("nope", sim.now) == 2, max_ms=5000)


# --- MESSAGE_TOO_LARGE split ---------------------------------------------------------------------

def test_message_too_large_splits_and_retries():
    core, kafka, sim = make(enable_idempotence=False, acks=1, linger_ms=10)
    kafka.inject("t", 0, 10)                                 # MESSAGE_TOO_LARGE once
    hs = [sim.send(b"r%03d" % i) for i in range(40)]
    bulk, n = core.send_many("t", [b"m%d" % i for i in range(20)], now=sim.now)
    assert n == 20
    sim.run_until(lambda: all(h.done for h in hs) and bulk.done)
    assert all(h.error is None for h in hs) and bulk.error is None and bulk.delivered == 20
    assert core.metrics()["splits"] == 1
    assert len(kafka.produce_requests) >= 3
    assert kafka.values() == [b"r%03d" % i for i in range(40)] + [b"m%d" % i for i in range(20)]
    assert [h.metadata.offset for h in hs] == list(range(40))


def test_message_too_large_split_resolves_attached_handles_through_the_outcome():
    """Handles without a callback are not kept in the batch but attached to its
    BatchOutcome (kio's DeliveryFuture): after a split they resolve only when
    every piece is acknowledged, each to its own record's offset, and a
    thread waiting on one is woken."""
    from kio.producer import DeliveryFuture
    core, kafka, sim = make(enable_idempotence=False, acks=1, linger_ms=10)
    kafka.inject("t", 0, 10)                                 # MESSAGE_TOO_LARGE once
    futs = [sim.send(b"r%03d" % i, handle=DeliveryFuture()) for i in range(40)]
    called = []
    futs[-1].add_done_callback(lambda f: called.append(f.result().offset))
    batch = core.accumulator.queues[("t", 0)][0]
    assert batch.parts == () and futs[7]._outcome is batch.outcome and futs[7]._delta == 7
    sim.run_until(lambda: all(f.done() for f in futs))
    assert core.metrics()["splits"] == 1 and batch.outcome.children is not None
    assert [f.result(0).offset for f in futs] == list(range(40))
    assert called == [39]


def test_attached_handles_fail_with_their_batch():
    from kio.producer import DeliveryFuture
    core, kafka, sim = make(enable_idempotence=False, acks=1, retries=0)
    kafka.inject("t", 0, 87)                                 # INVALID_RECORD: not retriable
    futs = [sim.send(b"v%d" % i, handle=DeliveryFuture()) for i in range(3)]
    sim.run_until(lambda: all(f.done() for f in futs))
    assert all(f.exception().code == 87 for f in futs)


def test_message_too_large_single_record_fails():
    core, kafka, sim = make(enable_idempotence=False, acks=1)
    kafka.inject("t", 0, 10)
    h = sim.send(b"big")
    sim.run_until(lambda: h.done)
    assert h.error.code == 10


# --- send_many ---------------------------------------------------------------------------------

def test_send_many_columnar_with_keys_spreads_by_murmur2():
    core, kafka, sim = make(FakeKafka(partitions={"t": 3}))
    sim.send(b"warmup")
    keys = [b"k%d" % i for i in range(30)]
    bulk, n = core.send_many("t", [b"v%d" % i for i in range(30)], keys=keys, now=sim.now)
    sim.run_until(lambda: bulk.done)
    assert bulk.delivered == 30 and bulk.error is None
    for p in range(3):
        want = [b"v%d" % i for i in range(30) if murmur2_partition(keys[i], 3) == p]
        assert [v for v in kafka.values("t", p) if v != b"warmup"] == want


@pytest.mark.parametrize("limit", ["max.request.size", "buffer.memory"])
@pytest.mark.parametrize("shape", ["unkeyed", "keyed", "headers", "arrow", "partition", "resumed"])
def test_send_many_refuses_a_row_send_would_refuse_before_appending_any(limit, shape):
    """send()'s size check on every send_many path (issue 25): a row over
    max.request.size or buffer.memory fails the call with
    RecordTooLargeError and its index, and nothing of the call is queued.
    Rows near the limit but under it still go."""
    cfg = {"max_request_size": 4000} if limit == "max.request.size" else {"buffer_memory": 4000,
                                                                         "batch_size": 1024}
    core, kafka, sim = make(FakeKafka(partitions={"t": 3}), **cfg)
    sim.send(b"warmup")
    sim.run_until(lambda: not core.pending)
    queued = core.metrics()["records_queued"]
    values = [b"a", b"b" * 3800, b"c", b"d" * 4100, b"e"]
    kw = {"now": sim.now}
    if shape == "keyed":
        kw["keys"] = [b"k%d" % i for i in range(5)]
    elif shape == "headers":
        values[3] = b"d" * 3900                   # too large only with its header
        kw["headers"] = [None, None, [("h", b"1")], [("h", b"x" * 200)], None]
    elif shape == "arrow":
        import pyarrow as pa
        values = pa.array(values)
    elif shape == "partition":
        kw["partition"] = 2
    elif shape == "resumed":
        kw["start"] = 2
    with pytest.raises(RecordTooLargeError, match=rf"send_many\(\) row 3: the record is \d+ bytes when "
                                                  rf"serialized, larger than {limit} \(4000\); nothing of "
                                                  rf"this call was sent") as e:
        core.send_many("t", values, **kw)
    assert e.value.index == 3
    assert core.metrics()["records_queued"] == queued and not core.pending
    bulk, n = core.send_many("t", values[:3], **{k: v[:3] if k in ("keys", "headers") else v
                                                  for k, v in kw.items() if k != "start"})
    assert n == 3
    sim.run_until(lambda: bulk.done)
    assert bulk.error is None and bulk.delivered == 3


def test_send_many_per_record_timestamps_keyed_and_unkeyed():
    core, kafka, sim = make(FakeKafka(partitions={"t": 3}))
    sim.send(b"warmup")
    keys = [b"k%d" % i for i in range(12)]
    stamps = [1000 + i if i % 4 else None for i in range(12)]
    bulk, _ = core.send_many("t", [b"v%d" % i for i in range(12)], keys=keys, timestamp_ms=stamps,
                             now=sim.now, default_timestamp_ms=777)
    plain, _ = core.send_many("t", [b"a", b"b"], partition=1, timestamp_ms=[5, None], now=sim.now,
                              default_timestamp_ms=888)
    sim.run_until(lambda: bulk.done and plain.done)
    got = {r.value: r.timestamp for p in range(3) for r in kafka.logs.get(("t", p), [])}
    assert {v: got[v] for v in (b"v0", b"v1", b"v4", b"v11")} == {b"v0": 777, b"v1": 1001, b"v4": 777,
                                                                b"v11": 1011}
    assert (got[b"a"], got[b"b"]) == (5, 888)
    with pytest.raises(ValueError, match="3 timestamps for 2 values"):
        core.send_many("t", [b"a", b"b"], timestamp_ms=[1, 2, 3], now=sim.now)
    with pytest.raises(TypeError, match="int milliseconds"):
        core.send_many("t", [b"a"], timestamp_ms=[1.5], now=sim.now)


# --- metadata age, close, bulk backpressure -----------------------------------------------

def test_metadata_refreshed_after_metadata_max_age():
    core, kafka, sim = make(metadata_max_age_ms=10000)
    h = sim.send(b"v")
    sim.run_until(lambda: h.done)
    asked = len(kafka.brokers[1].requests_of("Metadata"))
    sim.advance(9000)
    assert len(kafka.brokers[1].requests_of("Metadata")) == asked
    sim.run_until(lambda: len(kafka.brokers[1].requests_of("Metadata")) > asked, max_ms=1500)


def test_close_fails_every_pending_record_with_a_clear_error():
    from kproto.producer import ProducerClosedError
    core, kafka, sim = make(linger_ms=100000)
    hs = [sim.send(b"v%d" % i) for i in range(5)]
    actions = core.close(sim.now)
    complete_results(core.events())
    assert all(isinstance(h.error, ProducerClosedError) for h in hs)
    assert "closed before these records were delivered" in str(hs[0].error)
    assert any(isinstance(a, Close) for a in actions)
    with pytest.raises(ProducerClosedError):
        core.send("t", b"late", now=sim.now)


def test_send_many_stops_when_memory_runs_out_and_continues_from_there():
    core, kafka, sim = make(buffer_memory=8192, batch_size=1024, linger_ms=100000, max_request_size=1024)
    sim.send(b"warm")
    values = [b"%04d" % i + b"x" * 96 for i in range(200)]
    bulk, n = core.send_many("t", values, now=sim.now)
    assert 0 < n < 200
    start = n
    while start < 200:
        sim.advance(10)                                     # batches go out, memory comes back
        _, got = core.send_many("t", values, now=sim.now, handle=bulk, start=start)
        start += got
    sim.run_until(lambda: bulk.done)
    assert bulk.error is None and bulk.delivered == 200
    assert kafka.values()[1:] == values


def _keyed_send_many_through_a_small_buffer(core, kafka, sim, count):
    """send_many ``count`` keyed rows, resuming as memory comes back; checks
    every row arrived, in order per partition. Returns (bulk, first call's
    rows, calls)."""
    values = [b"%05d" % i + b"x" * 95 for i in range(count)]
    keys = [b"k%d" % i for i in range(count)]
    bulk, first = core.send_many("t", values, keys=keys, now=sim.now)
    start, calls = first, 1
    while start < count:
        calls += 1
        assert calls < 1000
        sim.advance(10)                                     # batches go out, memory comes back
        _, got = core.send_many("t", values, keys=keys, now=sim.now, handle=bulk, start=start)
        start += got
    sim.run_until(lambda: bulk.done)
    assert bulk.error is None and bulk.delivered == count
    for p in range(3):
        want = [values[i] for i in range(count) if murmur2_partition(keys[i], 3) == p]
        assert [v for v in kafka.values("t", p) if v != b"warm"] == want
    return bulk, first, calls


def test_keyed_send_many_larger_than_buffer_memory_resumes_in_order_and_loses_nothing():
    core, kafka, sim = make(FakeKafka(partitions={"t": 3}), buffer_memory=16384, batch_size=1024,
                            linger_ms=100000, max_request_size=1024)
    sim.send(b"warm")
    _, first, calls = _keyed_send_many_through_a_small_buffer(core, kafka, sim, 600)
    assert 0 < first < 600 and calls > 1          # a prefix went in first; nothing failed


def test_keyed_send_many_under_memory_pressure_keeps_appending_in_chunks_not_row_by_row():
    # Regression: once buffer.memory was nearly full, the keyed path shrank
    # its chunk to one row and kept it there, so every row became its own
    # part of a batch (one completion each) - ten times the CPU per record.
    # Now it waits for memory instead and appends whole per-partition runs.
    core, kafka, sim = make(FakeKafka(partitions={"t": 3}), buffer_memory=64 * 1024, batch_size=4096,
                            linger_ms=100000, max_request_size=4096)
    sim.send(b"warm")
    bulk, _, _ = _keyed_send_many_through_a_small_buffer(core, kafka, sim, 6000)
    # runs of rows, not single rows (it was about one part per row)
    assert len(bulk.ranges) <= 6000 // 10, len(bulk.ranges)

def test_in_flight_requests_never_exceed_the_limit():
    core, kafka, sim = make(FakeKafka(partitions={"t": 8}), linger_ms=0,
                            max_in_flight_requests_per_connection=2, enable_idempotence=False, acks=1)
    sim.send(b"warm", partition=0)
    kafka.hold_replies = True
    hs = []
    for i in range(16):
        hs.append(sim.send(b"v", partition=i % 8))
        sim.step()
        assert core.client.in_flight(1) <= 2
    kafka.hold_replies = False
    while not all(h.done for h in hs):
        sim.release(1)
        sim.advance(1)
    assert all(h.error is None for h in hs)


def test_idle_topics_are_dropped_from_metadata_after_metadata_max_idle_ms():
    core, kafka, sim = make(FakeKafka(partitions={"t": 1, "u": 1}), metadata_max_idle_ms=60000,
                            metadata_max_age_ms=20000)
    h = sim.send(b"v", topic="t")
    h2 = sim.send(b"v", topic="u")
    sim.run_until(lambda: h.done and h2.done)
    for _ in range(4):                                       # keep "t" busy, leave "u" idle
        sim.advance(20000)
        hx = sim.send(b"again", topic="t")
        sim.run_until(lambda: hx.done)
    sim.advance(20001)
    last = kafka.brokers[1].requests_of("Metadata")[-1]
    assert [t["name"] for t in last.body["topics"]] == ["t"]
    assert core.cluster.partition_count("u") is None


@pytest.mark.parametrize("bad", ["bad name?", "x" * 250, ".", "..", ""])
def test_illegal_topic_names_are_refused_before_any_metadata_request(bad):
    # Kafka's rules, checked by the client: a broker that does not enforce
    # them would create the topic, one that does would leave send() waiting
    # for metadata until max.block.ms.
    from kproto.error_codes import InvalidTopicError
    core, kafka, sim = make()
    with pytest.raises(InvalidTopicError):
        core.send(bad, b"v", now=0)
    with pytest.raises(InvalidTopicError):
        core.send_many(bad, [b"v"], now=0)
    with pytest.raises(InvalidTopicError):
        core.partitions_for(bad, 0)
    assert bad not in core.cluster.topics
    with pytest.raises(TypeError):
        core.send(None, b"v", now=0)


def test_produce_v13_names_topics_by_id_when_every_id_is_known():
    import uuid
    kafka = FakeKafka(partitions={"t": 1, "u": 1})
    kafka.topic_ids["t"] = uuid.uuid4()
    core, kafka, sim = make(kafka, linger_ms=0)
    h = sim.send(b"a")
    sim.run_until(lambda: h.done)
    assert h.error is None and kafka.values() == [b"a"]
    (_, req), = kafka.produce_requests
    assert req.version == 13 and req.body["topic_data"][0]["topic_id"] == kafka.topic_ids["t"]
    # a topic without a known id (a broker before Metadata v10 ids): v12, by name
    h2 = sim.send(b"b", topic="u", partition=0)
    sim.run_until(lambda: h2.done)
    assert h2.error is None and kafka.values("u") == [b"b"]
    assert kafka.produce_requests[-1][1].version == 12
    assert kafka.produce_requests[-1][1].body["topic_data"][0]["name"] == "u"


def test_unknown_topic_id_refreshes_metadata_and_retries_with_the_new_id():
    import uuid
    kafka = FakeKafka()
    old, new = uuid.uuid4(), uuid.uuid4()
    kafka.topic_ids["t"] = old
    core, kafka, sim = make(kafka, linger_ms=0)
    h = sim.send(b"a")
    sim.run_until(lambda: h.done)
    kafka.topic_ids["t"] = new                 # the topic was recreated: a new id
    h2 = sim.send(b"b")
    sim.run_until(lambda: h2.done, max_ms=5000)
    assert h2.error is None and kafka.values() == [b"a", b"b"]
    ids = [req.body["topic_data"][0]["topic_id"] for _, req in kafka.produce_requests]
    assert ids[0] == old and ids[-1] == new and len(ids) >= 3


# --- batches that grow (batch.size larger than what a partition needs) ---------------------

def _open_batch(core, topic="t", p=0):
    return core.accumulator.queues[(topic, p)][-1]


def test_a_new_batch_reserves_the_initial_size_and_doubles_up_to_batch_size():
    core, kafka, sim = make(batch_size=64 * 1024, buffer_memory=1 << 20, linger_ms=100000,
                            max_request_size=1 << 20)
    core.accumulator.initial_reserve = 4096
    hs = [sim.send(b"x" * 100)]
    batch = _open_batch(core)
    assert (batch.reserved, batch.builder.batch_size, core.accumulator.used_memory) == (4096, 4096, 4096)
    while len(hs) < 100:                                     # ~11.5 KiB: grown twice
        hs.append(sim.send(b"x" * 100))
    assert _open_batch(core) is batch and batch.builder.batch_size == 16384
    assert batch.reserved == core.accumulator.used_memory == 16384
    while batch.builder.record_count == len(hs):             # until the batch is full at 64 KiB
        hs.append(sim.send(b"x" * 100))
    assert batch.full and batch.builder.batch_size == 64 * 1024
    assert 64 * 1024 - 200 < batch.builder.size_in_bytes() <= 64 * 1024
    sim.run_until(lambda: all(h.done for h in hs))
    assert all(h.error is None for h in hs)
    assert kafka.values() == [b"x" * 100] * len(hs)
    assert core.accumulator.used_memory == 0                 # every reservation came back


def test_a_batch_does_not_grow_past_buffer_memory_it_is_sent_as_it_is():
    core, kafka, sim = make(batch_size=64 * 1024, buffer_memory=12 * 1024, linger_ms=100000,
                            max_request_size=1 << 20)
    core.accumulator.initial_reserve = 4096
    hs = []
    with pytest.raises(BufferExhausted):
        for _ in range(1000):
            hs.append(sim.send(b"y" * 100))
    first = core.accumulator.queues[("t", 0)][0]
    assert first.full and first.builder.batch_size == 8192    # 8 KiB: 16 KiB would not fit
    assert core.accumulator.used_memory <= 12 * 1024
    sim.run_until(lambda: all(h.done for h in hs))
    assert all(h.error is None for h in hs) and kafka.values() == [b"y" * 100] * len(hs)
    assert core.accumulator.used_memory == 0


def test_send_many_grows_its_batch_and_keeps_one_part_per_call():
    core, kafka, sim = make(batch_size=64 * 1024, buffer_memory=1 << 20, linger_ms=100000,
                            max_request_size=1 << 20)
    core.accumulator.initial_reserve = 4096
    warm = sim.send(b"warm")                                 # metadata; opens the batch
    values = [b"%04d" % i + b"z" * 96 for i in range(500)]
    bulk, n = core.send_many("t", values, partition=0, now=sim.now)
    assert n == 500
    batch = _open_batch(core)
    assert batch.builder.record_count == 501 and batch.builder.batch_size == 64 * 1024
    assert batch.parts == [warm, (bulk, 1, 500)]             # grown, not split into parts
    sim.run_until(lambda: bulk.done)
    assert bulk.error is None and bulk.delivered == 500 and kafka.values()[1:] == values


def test_keyed_send_many_with_growing_batches_stays_within_buffer_memory_and_in_order():
    # batch.size far above the initial reserve: the keyed memory bound must
    # count the growth of open batches too, or an append would be refused
    # after the bound said it fits (AssertionError in the bulk result).
    core, kafka, sim = make(FakeKafka(partitions={"t": 3}), buffer_memory=48 * 1024, batch_size=32 * 1024,
                            linger_ms=100000, max_request_size=32 * 1024)
    core.accumulator.initial_reserve = 2048
    sim.send(b"warm")
    _, first, calls = _keyed_send_many_through_a_small_buffer(core, kafka, sim, 3000)
    assert 0 < first < 3000 and calls > 1
    assert core.accumulator.used_memory == 0


class _Attached:
    """A handle that reads its batch's shared outcome (as kio's futures
    without on_delivery do): kept in no part of the batch."""
    notify = False
    _outcome = None
    _delta = 0
    on_delivery = None
    topic = partition = timestamp = None

    def offset(self):
        return self._outcome.offset_of(self._delta)[0]


def test_told_and_attached_records_mixed_in_one_batch_each_get_their_own_offset():
    # Regression: deltas of told handles and bulk parts were counted from the
    # parts, which skip attached records: a callback's record after an
    # attached one got its neighbour's offset.
    core, kafka, sim = make(linger_ms=5)
    sim.send(b"warm")                                             # offset 0, told
    a1 = core.send("t", b"a", now=sim.now, handle=_Attached())     # 1, attached
    t2 = core.send("t", b"b", now=sim.now)                        # 2, told
    a3 = core.send("t", b"c", now=sim.now, handle=_Attached())     # 3, attached
    bulk, n = core.send_many("t", [b"d", b"e"], partition=0, now=sim.now)   # 4-5, a bulk part
    t6 = core.send("t", b"f", now=sim.now)                        # 6, told
    assert n == 2 and len(core.accumulator.queues[("t", 0)]) == 1  # all in one batch
    sim.run_until(lambda: t6.done and bulk.done)
    assert kafka.values() == [b"warm", b"a", b"b", b"c", b"d", b"e", b"f"]
    assert (a1.offset(), t2.metadata.offset, a3.offset(), t6.metadata.offset) == (1, 2, 3, 6)
    assert bulk.ranges == [(0, 4, 2)]


def test_a_split_batch_keeps_every_handle_on_its_own_record():
    core, kafka, sim = make(linger_ms=5, batch_size=4096, max_request_size=1 << 20)
    hs = []
    for i in range(20):
        if i % 3 == 0:
            hs.append(core.send("t", b"%03d" % i + b"x" * 97, now=sim.now, handle=_Attached())
                      if hs else sim.send(b"%03d" % i + b"x" * 97))
        else:
            hs.append(core.send("t", b"%03d" % i + b"x" * 97, now=sim.now))
    kafka.inject("t", 0, 10)                                      # MESSAGE_TOO_LARGE: split in two
    told = [h for h in hs if not isinstance(h, _Attached)]
    sim.run_until(lambda: all(h.done for h in told))
    assert core.metrics()["splits"] == 1
    got = [h.offset() if isinstance(h, _Attached) else h.metadata.offset for h in hs]
    assert got == list(range(20))
    assert [v[:3] for v in kafka.values()] == [b"%03d" % i for i in range(20)]


class _Told(DeliveryHandle):
    """A handle told one by one that notes when it was."""
    __slots__ = ("log",)

    def __init__(self, log):
        super().__init__()
        self.log = log

    def _resolved(self):
        self.log.append(("told", self.offset))


def _with_callback(log):
    h = _Attached()
    h.on_delivery = lambda err, md: log.append(("cb", md.offset if err is None else type(err).__name__))
    return h


def test_on_delivery_of_attached_records_runs_in_record_order_with_the_told_handles():
    core, kafka, sim = make(linger_ms=5)
    sim.send(b"warm")
    log = []
    core.send("t", b"a", now=sim.now, handle=_with_callback(log))          # 1
    core.send("t", b"b", now=sim.now, handle=_Told(log))                   # 2
    core.send("t", b"c", now=sim.now, handle=_Attached())                  # 3: no callback
    core.send("t", b"d", now=sim.now, handle=_with_callback(log))          # 4
    bulk, _ = core.send_many("t", [b"e", b"f"], partition=0, now=sim.now)  # 5-6
    last = core.send("t", b"g", now=sim.now, handle=_with_callback(log))   # 7
    batch = core.accumulator.queues[("t", 0)][-1]
    assert len(batch.callbacks) == 9 and not any(isinstance(x, _Attached) for x in batch.callbacks)
    sim.run_until(lambda: last._outcome.done and bulk.done)
    assert log == [("cb", 1), ("told", 2), ("cb", 4), ("cb", 7)]
    assert bulk.ranges == [(0, 5, 2)]


def test_on_delivery_of_attached_records_follows_them_through_a_split_and_a_failure():
    core, kafka, sim = make(linger_ms=5, batch_size=4096, max_request_size=1 << 20)
    log = []
    sim.send(b"000" + b"x" * 97)
    for i in range(1, 20):
        core.send("t", b"%03d" % i + b"x" * 97, now=sim.now, handle=_with_callback(log))
    kafka.inject("t", 0, 10)                                      # MESSAGE_TOO_LARGE: split in two
    sim.run_until(lambda: len(log) == 19)
    assert core.metrics()["splits"] == 1
    assert log == [("cb", i) for i in range(1, 20)]
    log.clear()
    kafka.inject("t", 0, 87)                                      # INVALID_RECORD: not retriable
    core.send("t", b"bad", now=sim.now, handle=_with_callback(log))
    sim.run_until(lambda: log)
    want = type(error_codes.error_for_code(87, None)).__name__
    assert log == [("cb", want)]


def test_a_topic_the_broker_refuses_fails_at_once_and_is_asked_again_on_the_next_call():
    core, kafka, sim = make()
    kafka.topic_error["secret"] = 29                        # TOPIC_AUTHORIZATION_FAILED: no DESCRIBE ACL
    assert core.partitions_for("secret", sim.now) is None
    sim.run_until(lambda: core.metadata_error("secret") is not None)
    with pytest.raises(error_codes.TopicAuthorizationFailedError) as e:
        sim.send(b"v", topic="secret")                      # no wait for max.block.ms
    assert e.value.unauthorized_topics == {"secret"} and "[secret]" in str(e.value)
    # told once, as Java: the next call waits for a fresh answer (an ACL may have come)
    assert core.partitions_for("secret", sim.now) is None
    sim.run_until(lambda: core.metadata_error("secret") is not None, max_ms=5000)
    with pytest.raises(error_codes.TopicAuthorizationFailedError):
        core.partitions_for("secret", sim.now)
    del kafka.topic_error["secret"]
    kafka.partitions["secret"] = 2
    assert core.partitions_for("secret", sim.now) is None
    sim.run_until(lambda: core.partitions_for("secret", sim.now) == 2, max_ms=5000)


# --- many partitions: wake-ups and linger ------------------------------------------------------

def test_new_batches_over_many_partitions_wake_the_driver_once_per_round_and_still_go_within_linger():
    # Random keys over 1,000 partitions: nearly every record opens a batch. The
    # driver is woken (accumulator.wakeup) only when the core's next round would
    # come later than the new batch is due, not once per batch; polled only then
    # and at its deadlines (as kio's drivers do), every batch still leaves within
    # linger.ms of its creation (plus the 0.25 ms clock step).
    core, kafka, sim = make(FakeKafka(partitions={"t": 1000}), linger_ms=5)
    sim.send(b"warm", key=b"w")
    sim.run_until(lambda: not core.pending)
    acc = core.accumulator
    drained = []
    drain = acc.drain

    def noting_drain(cluster, nodes, now, can_drain=None):
        out = drain(cluster, nodes, now, can_drain)
        drained.extend(now - b.created_ms for bs in out.values() for b in bs)
        return out
    acc.drain = noting_drain
    rng = random.Random(3)
    wakeups = 0
    for i in range(3000):
        core.send("t", b"v%d" % i, key=rng.getrandbits(64).to_bytes(8, "big"), now=sim.now)
        sim.now += 0.25
        deadline = core.next_deadline(sim.now)
        if acc.wakeup:
            wakeups += 1
        if acc.wakeup or (deadline is not None and deadline <= sim.now):
            acc.wakeup = False
            sim.step()
    core.begin_flush()
    sim.run_until(lambda: not core.pending)
    assert core.metrics()["records_sent"] == 3001
    batches = core.metrics()["batches_sent"]
    assert batches > 2000                              # a batch per record or so: the case at hand
    assert wakeups < batches / 10, (wakeups, batches)
    assert len(drained) == batches - 1
    assert max(drained) <= 5 + 0.25, max(drained)


class _OneLeader:
    """A cluster whose every partition is led by node 1."""

    def leader(self, topic, partition):
        return 1


@pytest.mark.parametrize("order", ["retrying first", "retrying last"])
def test_a_retry_back_off_counts_for_the_next_round_whatever_the_queue_order(order):
    # A leader with one partition sendable now and one backing off for a
    # retry: the retry time sets the next round in either order (the
    # incremental ready looks at queues in no fixed order; the walk skipped
    # the retry when its leader had been found sendable before it).
    from kproto.producer.accumulator import RecordAccumulator

    for ready in ("ready", "ready_by_walk"):
        acc = RecordAccumulator(linger_ms=5)
        tps = [("t", 0), ("t", 1)] if order == "retrying first" else [("t", 1), ("t", 0)]
        for tp in tps:
            acc.append(tp[0], tp[1], 0, None, b"v", None, DeliveryHandle(), now=0)
        retrying = acc.queues[("t", 0)][0]
        retrying.attempts, retrying.retry_after_ms = 1, 40
        nodes, delay, unknown = getattr(acc, ready)(_OneLeader(), 10)
        assert nodes == {1} and unknown == set()
        assert delay == 30, (ready, order)
        # and the drain leaves the retrying batch where it is
        assert [b.partition for b in acc.drain(_ByNode(), [1], 10)[1]] == [1]


class _ByNode(_OneLeader):
    def partitions_by_node(self):
        return {1: [("t", 0), ("t", 1)]}
