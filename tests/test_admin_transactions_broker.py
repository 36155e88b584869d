"""Transaction administration (describe_producers, list/describe_transactions,
abort_transaction, fence_producers) and ``kio transactions`` against Apache
Kafka 4.4.

Kafka only: Tansu has none of DescribeProducers, ListTransactions,
DescribeTransactions and WriteTxnMarkers (they are not in its ApiVersions;
test_tansu_lacks_the_transaction_apis pins that the client says so).
"""
import time
import uuid

import pytest

from kio import Admin, Consumer, Producer
from kio.admin import AbortTransactionSpec
from kproto.cluster import TopicPartition
from kproto.errors import KafkaError, UnsupportedVersionError
from kproto import error_codes
from test_cli import kio, ok

TP = TopicPartition


def _hanging_transaction(bootstrap, topic, tid):
    """A transactional producer that wrote 3 records to partition 0 and never
    commits (its transaction stays open for 10 minutes); then a plain record
    after it. Returns the producer (still open)."""
    p = Producer(bootstrap_servers=bootstrap, transactional_id=tid, transaction_timeout_ms=600000)
    p.init_transactions()
    p.begin_transaction()
    for i in range(3):
        p.send(topic, b"txn-%d" % i, partition=0)
    p.flush()
    with Producer(bootstrap_servers=bootstrap) as plain:
        plain.send(topic, b"after", partition=0)
        plain.flush()
    return p


def _read_committed(bootstrap, topic, timeout=20.0):
    """The values a read_committed consumer gets from partition 0 in ``timeout``."""
    got = []
    with Consumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                  auto_offset_reset="earliest", enable_auto_commit=False) as c:
        c.assign([TP(topic, 0)])
        end = time.monotonic() + timeout
        while time.monotonic() < end and b"after" not in got:
            got += [r.value for r in c.poll(0.5)]
    return got


@pytest.mark.parametrize("broker", ["kafka"], indirect=True)
def test_a_hanging_transaction_is_found_described_and_aborted(bootstrap, make_topic):
    topic = make_topic(1)
    tid = "tx-" + uuid.uuid4().hex[:8]
    producer = _hanging_transaction(bootstrap, topic, tid)
    try:
        with Admin(bootstrap_servers=bootstrap) as admin:
            # the coordinator's view
            listed = {t.transactional_id: t for t in admin.list_transactions(states=["Ongoing"])}
            assert listed[tid].state == "Ongoing"
            pid = listed[tid].producer_id
            assert [t.transactional_id for t in admin.list_transactions(producer_ids=[pid])] == [tid]
            assert tid in {t.transactional_id for t in admin.list_transactions(duration_filter_ms=0)}
            assert tid not in {t.transactional_id for t in admin.list_transactions(duration_filter_ms=3600_000)}
            assert [t.transactional_id for t in admin.list_transactions(transactional_id_pattern=f"^{tid}$")] == [tid]
            d = admin.describe_transactions([tid])[tid]
            assert (d.state, d.producer_id, d.topic_partitions) == ("Ongoing", pid, (TP(topic, 0),))
            assert d.transaction_timeout_ms == 600000 and d.transaction_start_time_ms is not None
            # the partition's view: the open transaction holds the last stable offset at 0
            state = admin.describe_producers([TP(topic, 0)])[TP(topic, 0)]
            txn = [s for s in state if s.producer_id == pid]
            assert len(txn) == 1 and txn[0].current_transaction_start_offset == 0
            assert txn[0].coordinator_epoch is None        # no marker written yet: the leader knows none
            stable = admin.list_offsets({TP(topic, 0): "latest"}, isolation_level=1)[TP(topic, 0)].offset
            assert stable == 0 and admin.list_offsets({TP(topic, 0): "latest"})[TP(topic, 0)].offset == 4
            assert b"after" not in _read_committed(bootstrap, topic, timeout=3)
            # the abort marker, as Java's Admin.abortTransaction writes it
            assert admin.abort_transaction(AbortTransactionSpec.for_producer(TP(topic, 0), txn[0])) == \
                {TP(topic, 0): None}
            after = admin.describe_producers([TP(topic, 0)])[TP(topic, 0)]
            assert all(s.current_transaction_start_offset is None for s in after)
            assert admin.list_offsets({TP(topic, 0): "latest"}, isolation_level=1)[TP(topic, 0)].offset == 5
        # read_committed consumers move past it: the aborted records are not delivered
        assert _read_committed(bootstrap, topic) == [b"after"]
    finally:
        producer.close(timeout=5)


@pytest.mark.parametrize("broker", ["kafka"], indirect=True)
def test_fence_producers_bumps_the_epoch_and_fences_the_producer(bootstrap, make_topic):
    topic = make_topic(1)
    tid = "tx-" + uuid.uuid4().hex[:8]
    producer = _hanging_transaction(bootstrap, topic, tid)
    try:
        with Admin(bootstrap_servers=bootstrap) as admin:
            before = admin.describe_transactions([tid])[tid]
            fenced = admin.fence_producers([tid])[tid]
            assert fenced.producer_id == before.producer_id and fenced.epoch > before.producer_epoch
            # the coordinator aborted the open transaction before it answered
            after = admin.describe_transactions([tid])[tid]
            assert (after.state, after.producer_epoch, after.topic_partitions) == ("Empty", fenced.epoch, ())
            assert _read_committed(bootstrap, topic) == [b"after"]
            unknown = admin.fence_producers(["no-such-" + tid])["no-such-" + tid]
            assert unknown.epoch == 0                  # a new id is simply initialised, as in Java
        with pytest.raises(KafkaError) as e:
            producer.commit_transaction(timeout=10)
        assert isinstance(e.value, (error_codes.ProducerFencedError, error_codes.InvalidProducerEpochError)), e.value
    finally:
        producer.close(timeout=5)


@pytest.mark.parametrize("broker", ["kafka"], indirect=True)
def test_transaction_operations_errors_a_user_meets(bootstrap, make_topic):
    topic = make_topic(1)
    with Admin(bootstrap_servers=bootstrap) as admin:
        h = admin.describe_transactions(["no-such-id"], raise_errors=False)
        assert isinstance(h.errors()["no-such-id"], error_codes.TransactionalIdNotFoundError)
        with pytest.raises(ValueError, match="unknown state"):
            admin.list_transactions(states=["ongoing"])
        with pytest.raises(ValueError, match="producer epoch"):
            admin.abort_transaction(AbortTransactionSpec(TP(topic, 0), 1, 40000, 0))
        h = admin.describe_producers([TP(topic, 0), TP("no-such-" + topic, 0)], raise_errors=False)
        assert h.values()[TP(topic, 0)] == ()
        assert isinstance(h.errors()[TP("no-such-" + topic, 0)], error_codes.UnknownTopicOrPartitionError)


@pytest.mark.parametrize("broker", ["kafka"], indirect=True)
def test_async_and_trio_admins_have_the_transaction_operations(bootstrap, make_topic):
    import asyncio

    import trio

    import kio.aio
    import kio.trio
    topic = make_topic(1)
    tid = "tx-" + uuid.uuid4().hex[:8]
    producer = _hanging_transaction(bootstrap, topic, tid)

    async def run(admin_class):
        async with admin_class(bootstrap_servers=bootstrap) as admin:
            listed = [t.transactional_id for t in await admin.list_transactions(states=["Ongoing"])]
            described = (await admin.describe_transactions([tid]))[tid]
            states = (await admin.describe_producers([TP(topic, 0)]))[TP(topic, 0)]
            return listed, described.state, [s.current_transaction_start_offset for s in states]

    try:
        for result in (asyncio.run(run(kio.aio.Admin)), trio.run(run, kio.trio.Admin)):
            assert tid in result[0] and result[1] == "Ongoing" and 0 in result[2]
    finally:
        producer.close(timeout=5)


@pytest.mark.parametrize("broker", ["kafka"], indirect=True)
def test_kio_transactions_list_describe_abort(bootstrap, make_topic):
    topic = make_topic(1)
    tid = "tx-" + uuid.uuid4().hex[:8]
    producer = _hanging_transaction(bootstrap, topic, tid)
    try:
        out = ok(kio("transactions", "list", "--bootstrap-server", bootstrap, "--state", "Ongoing"))
        rows = {line.split("\t")[0]: line.split("\t") for line in out.splitlines()[1:]}
        assert out.splitlines()[0] == "TRANSACTIONAL-ID\tPRODUCER-ID\tSTATE" and rows[tid][2] == "Ongoing"
        out = ok(kio("transactions", "describe", "--bootstrap-server", bootstrap, "--transactional-id", tid))
        row = out.splitlines()[1].split("\t")
        assert row[1:3] == [tid, rows[tid][1]] and row[4] == "Ongoing" and row[7] == f"{topic}-0"
        res = kio("transactions", "abort", "--bootstrap-server", bootstrap, "--topic", topic, "--partition", "0",
                  "--start-offset", "2")
        assert res.returncode == 2 and b"no open transaction starting at offset 2 (open: producer" in res.stderr
        out = ok(kio("transactions", "abort", "--bootstrap-server", bootstrap, "--topic", topic, "--partition", "0",
                     "--start-offset", "0"))
        assert f"on {topic}-0, which started at offset 0" in out
        assert _read_committed(bootstrap, topic) == [b"after"]
        res = kio("transactions", "describe", "--bootstrap-server", bootstrap, "--transactional-id", "no-" + tid)
        assert res.returncode == 1 and b"TransactionalIdNotFoundError" in res.stderr
    finally:
        producer.close(timeout=5)


@pytest.mark.parametrize("broker", ["tansu"], indirect=True)
def test_tansu_lacks_the_transaction_apis(bootstrap, make_topic):
    topic = make_topic(1)
    with Admin(bootstrap_servers=bootstrap) as admin:
        for call, api in ((lambda: admin.describe_producers([TP(topic, 0)]), "DescribeProducers"),
                          (lambda: admin.list_transactions(), "ListTransactions"),
                          (lambda: admin.describe_transactions(["x"]), "DescribeTransactions"),
                          (lambda: admin.abort_transaction(AbortTransactionSpec(TP(topic, 0), 1, 0, 0)),
                           "WriteTxnMarkers")):
            with pytest.raises(UnsupportedVersionError, match=api):
                call()
