"""Transactions in the sans-IO core, following the Java client's protocol path.

(Tansu accepts the same requests; these tests pin down the order and the error
handling, which the real broker cannot be made to exercise.)
"""
import pytest

try:
    from test_producer_core import FakeKafka, make
except ImportError:  # pragma: no cover
    from tests.test_producer_core import FakeKafka, make

from kproto.error_codes import ProducerFencedError
from kproto.producer import TransactionAbortedError, TransactionStateError


class TxnKafka(FakeKafka):
    """FakeKafka plus a transaction coordinator on node 2 (and the group
    coordinator too); ``txn_errors[api]`` lists error codes to answer first."""

    def __init__(self):
        super().__init__(nodes=(1, 2))
        self.txn_errors = {}
        self.txn_log = []
        b = self.brokers[2]
        for n in (1, 2):
            self.brokers[n].on("FindCoordinator", self._find)
        b.on("InitProducerId", self._init_txn)
        b.on("AddPartitionsToTxn", self._add_partitions)
        b.on("EndTxn", lambda req: self._simple("EndTxn", req))
        b.on("AddOffsetsToTxn", lambda req: self._simple("AddOffsetsToTxn", req))
        b.on("TxnOffsetCommit", self._txn_offset_commit)

    def _err(self, api):
        q = self.txn_errors.get(api)
        return q.pop(0) if q else 0

    def _find(self, req):
        self.txn_log.append(("FindCoordinator", req.body.get("key_type")))
        c = {"key": "x", "node_id": 2, "host": "b2", "port": 9092, "error_code": 0, "error_message": None}
        return {"error_code": 0, "node_id": 2, "host": "b2", "port": 9092, "coordinators": [c]}

    def _init_txn(self, req):
        self.txn_log.append(("InitProducerId", req.body["transactional_id"]))
        code = self._err("InitProducerId")
        return {"error_code": code, "producer_id": 5000, "producer_epoch": 3}

    def _add_partitions(self, req):
        self.txn_log.append(("AddPartitionsToTxn", sorted(
            (t["name"], p) for t in req.body["v3_and_below_topics"] for p in t["partitions"])))
        code = self._err("AddPartitionsToTxn")
        return {"results_by_topic_v3_and_below": [
            {"name": t["name"], "results_by_partition": [
                {"partition_index": p, "partition_error_code": code} for p in t["partitions"]]}
            for t in req.body["v3_and_below_topics"]]}

    def _simple(self, api, req):
        self.txn_log.append((api, req.body.get("committed", req.body.get("group_id"))))
        return {"error_code": self._err(api)}

    def _txn_offset_commit(self, req):
        self.txn_log.append(("TxnOffsetCommit", req.channel is not None))
        return {"topics": [{"name": t["name"], "partitions": [
            {"partition_index": p["partition_index"], "error_code": 0} for p in t["partitions"]]}
            for t in req.body["topics"]]}


def txn_producer(**cfg):
    kafka = TxnKafka()
    core, kafka, sim = make(kafka, transactional_id="tx-1", **cfg)
    res = core.init_transactions()
    sim.run_until(lambda: res.done)
    assert res.error is None
    return core, kafka, sim


def test_init_finds_coordinator_and_gets_producer_id_from_it():
    core, kafka, sim = txn_producer()
    assert kafka.txn_log[:2] == [("FindCoordinator", 1), ("InitProducerId", "tx-1")]
    assert not kafka.brokers[1].requests_of("InitProducerId")
    assert (core.idempotence.producer_id, core.idempotence.epoch) == (5000, 3)


def test_commit_adds_partitions_before_producing_then_ends_after_acks():
    core, kafka, sim = txn_producer(linger_ms=100000)
    core.begin_transaction()
    hs = [sim.send(b"v%d" % i) for i in range(3)]
    res = core.commit_transaction()                 # flushes despite the long linger
    sim.run_until(lambda: res.done, max_ms=1000)
    assert res.error is None and all(h.done and h.error is None for h in hs)
    assert [e[0] for e in kafka.txn_log[2:]] == ["AddPartitionsToTxn", "EndTxn"]
    assert kafka.txn_log[-1] == ("EndTxn", True)
    (node, req), = kafka.produce_requests
    assert req.body["transactional_id"] == "tx-1"
    from kproto.records import read_batches
    (b,) = read_batches(req.body["topic_data"][0]["partition_data"][0]["records"])
    assert b.is_transactional and b.producer_id == 5000 and b.producer_epoch == 3


def test_end_txn_v5_epoch_bump_is_adopted_for_the_next_transaction():
    # KIP-890 part 2 (transaction.version 2, Kafka 4.x): EndTxn v5 answers with
    # the epoch the coordinator bumped to. The next transaction must use it,
    # or the coordinator fences the producer (PRODUCER_FENCED on
    # AddPartitionsToTxn, as Apache Kafka 4.4 did before this was handled).
    core, kafka, sim = txn_producer(linger_ms=100000)
    kafka.brokers[2].on("EndTxn", lambda req: (
        kafka.txn_log.append(("EndTxn", req.body["producer_epoch"])),
        {"error_code": 0, "producer_id": 5000, "producer_epoch": req.body["producer_epoch"] + 1})[1])
    seen_epochs = []
    for i in range(3):
        core.begin_transaction()
        h = sim.send(b"v%d" % i)
        res = core.commit_transaction()
        sim.run_until(lambda: res.done, max_ms=1000)
        assert res.error is None and h.error is None
        seen_epochs.append(core.idempotence.epoch)
    assert [e for api, e in kafka.txn_log if api == "EndTxn"] == [3, 4, 5]
    assert seen_epochs == [4, 5, 6]
    from kproto.records import read_batches
    batches = [read_batches(req.body["topic_data"][0]["partition_data"][0]["records"])[0]
               for _, req in kafka.produce_requests]
    # each transaction's batch carries its own epoch, and sequences restart at 0
    assert [(b.producer_epoch, b.base_sequence) for b in batches] == [(3, 0), (4, 0), (5, 0)]


def test_abort_fails_unsent_records_and_ends_with_abort():
    core, kafka, sim = txn_producer(linger_ms=100000)
    core.begin_transaction()
    h = sim.send(b"never")
    res = core.abort_transaction()
    sim.run_until(lambda: res.done, max_ms=1000)
    assert isinstance(h.error, TransactionAbortedError)
    assert not kafka.produce_requests
    # the partition never got a record: nothing to tell the coordinator
    assert "EndTxn" not in [e[0] for e in kafka.txn_log]
    core.begin_transaction()                          # the producer is usable again
    h2 = sim.send(b"next")
    res2 = core.commit_transaction()
    sim.run_until(lambda: res2.done, max_ms=1000)
    assert res2.error is None and h2.error is None and kafka.values() == [b"next"]


def test_failed_record_makes_the_transaction_abortable():
    core, kafka, sim = txn_producer(linger_ms=0)
    core.begin_transaction()
    kafka.inject("t", 0, 87)                          # INVALID_RECORD
    h = sim.send(b"bad")
    sim.run_until(lambda: h.done)
    with pytest.raises(TransactionStateError, match="call abort_transaction"):
        core.commit_transaction()
    res = core.abort_transaction()
    sim.run_until(lambda: res.done)
    assert res.error is None and kafka.txn_log[-1] == ("EndTxn", False)


def test_concurrent_transactions_and_not_coordinator_are_retried():
    kafka_errors = {"AddPartitionsToTxn": [51], "EndTxn": [16]}   # CONCURRENT_TRANSACTIONS, NOT_COORDINATOR
    core, kafka, sim = txn_producer(linger_ms=0)
    kafka.txn_errors.update(kafka_errors)
    core.begin_transaction()
    h = sim.send(b"v")
    res = core.commit_transaction()
    sim.run_until(lambda: res.done, max_ms=5000)
    assert res.error is None and h.error is None
    names = [e[0] for e in kafka.txn_log]
    assert names.count("AddPartitionsToTxn") == 2 and names.count("EndTxn") == 2
    assert names.count("FindCoordinator") == 2           # looked up again after NOT_COORDINATOR


def test_fencing_is_fatal():
    core, kafka, sim = txn_producer(linger_ms=0)
    core.begin_transaction()
    kafka.inject("t", 0, 90)                             # PRODUCER_FENCED
    h = sim.send(b"v")
    sim.run_until(lambda: h.done)
    assert isinstance(h.error, ProducerFencedError)
    with pytest.raises(ProducerFencedError):
        core.commit_transaction()
    with pytest.raises(ProducerFencedError):
        sim.send(b"more")


def test_a_leaders_invalid_producer_epoch_is_abortable_as_in_java():
    """INVALID_PRODUCER_EPOCH on a Produce answer (a leader that saw a newer
    epoch) makes the transaction abortable, not the producer unusable: Java's
    TransactionManager keeps fatal for a batch only PRODUCER_FENCED, the
    authorization errors, UNSUPPORTED_VERSION and INVALID_PRODUCER_ID_MAPPING."""
    from kproto.error_codes import InvalidProducerEpochError
    core, kafka, sim = txn_producer(linger_ms=0)
    core.begin_transaction()
    kafka.inject("t", 0, 47)                             # INVALID_PRODUCER_EPOCH
    h = sim.send(b"v")
    sim.run_until(lambda: h.done)
    assert isinstance(h.error, InvalidProducerEpochError)
    with pytest.raises(TransactionStateError, match="call abort_transaction"):
        core.commit_transaction()
    res = core.abort_transaction()
    sim.run_until(lambda: res.done)
    assert res.error is None and kafka.txn_log[-1] == ("EndTxn", False)
    core.begin_transaction()                             # the producer goes on
    h = sim.send(b"again")
    res = core.commit_transaction()
    sim.run_until(lambda: res.done)
    assert res.error is None and h.error is None


def test_the_coordinators_invalid_producer_epoch_is_fatal():
    """From the transaction coordinator (an older one's way of saying fenced)
    it stays fatal, as Java treats it like PRODUCER_FENCED there."""
    from kproto.error_codes import InvalidProducerEpochError
    core, kafka, sim = txn_producer(linger_ms=0)
    kafka.txn_errors["EndTxn"] = [47]
    core.begin_transaction()
    h = sim.send(b"v")
    res = core.commit_transaction()
    sim.run_until(lambda: res.done)
    assert h.error is None and isinstance(res.error, InvalidProducerEpochError)
    with pytest.raises(InvalidProducerEpochError):
        sim.send(b"more")


def test_send_offsets_to_transaction_takes_java_types_and_refuses_bad_offsets():
    """{TopicPartition: OffsetAndMetadata} as Java's sendOffsetsToTransaction
    takes it (epoch and metadata committed too), or plain ints; anything else
    is a ValueError naming the partition at the call, not an encode failure
    on the network side later."""
    from kproto.consumer import OffsetAndMetadata
    core, kafka, sim = txn_producer(linger_ms=0)
    core.begin_transaction()
    for bad in ("7", -1, 2.0, None, True):
        with pytest.raises(ValueError, match=r"offset of \('t', 0\) must be an int >= 0 or an OffsetAndMetadata"):
            core.send_offsets_to_transaction({("t", 0): bad}, "g")
    res = core.send_offsets_to_transaction({("t", 0): OffsetAndMetadata(5, "m", 3), ("t", 1): 9}, "g")
    sim.run_until(lambda: res.done)
    assert res.error is None


def test_send_offsets_to_transaction():
    core, kafka, sim = txn_producer(linger_ms=0)
    core.begin_transaction()
    h = sim.send(b"v")
    res = core.send_offsets_to_transaction({("in", 0): 42}, "grp")
    sim.run_until(lambda: res.done)
    assert res.error is None
    names = [e for e in kafka.txn_log]
    assert ("AddOffsetsToTxn", "grp") in names and ("FindCoordinator", 0) in names
    assert names.index(("AddOffsetsToTxn", "grp")) < [n[0] for n in names].index("TxnOffsetCommit")
    req = kafka.brokers[2].requests_of("TxnOffsetCommit")[0]
    assert req.body["topics"][0]["partitions"][0]["committed_offset"] == 42
    res2 = core.commit_transaction()
    sim.run_until(lambda: res2.done)
    assert res2.error is None and h.error is None


def test_send_outside_transaction_is_refused():
    core, kafka, sim = txn_producer()
    with pytest.raises(TransactionStateError, match="begin_transaction"):
        sim.send(b"v")
