"""Idempotent producing in the sans-IO core: sequences, 5 in flight, epoch bumps.

The FakeKafka of test_producer_core checks sequences like a broker: in order
-> written, already seen -> DUPLICATE_SEQUENCE_NUMBER, gap ->
OUT_OF_ORDER_SEQUENCE_NUMBER.
"""
import pytest

try:
    from test_producer_core import FakeKafka, Sim, make
except ImportError:  # pragma: no cover
    from tests.test_producer_core import FakeKafka, Sim, make

from kproto.error_codes import OutOfOrderSequenceNumberError
from kproto.errors import KafkaError
from kproto.producer import DeliveryTimeoutError
from kproto.producer.idempotence import MAX_SEQUENCE, increment_sequence


def batches_sent(kafka):
    from kproto.records import read_batches
    out = []
    for node, req in kafka.produce_requests:
        for t in req.body["topic_data"]:
            for pd in t["partition_data"]:
                (b,) = read_batches(pd["records"])
                out.append((b.producer_id, b.producer_epoch, b.base_sequence, b.record_count))
    return out


def test_increment_sequence_wraps_like_java():
    assert increment_sequence(5, 3) == 8
    assert increment_sequence(MAX_SEQUENCE, 1) == 0
    assert increment_sequence(MAX_SEQUENCE - 2, 5) == 2


def test_init_producer_id_first_and_sequences_per_partition():
    core, kafka, sim = make(FakeKafka(partitions={"t": 2}), linger_ms=0)
    hs = []
    for i in range(6):
        hs.append(sim.send(b"v%d" % i, partition=i % 2))
        sim.step()
    sim.run_until(lambda: all(h.done for h in hs))
    names = [r.api_name for r in kafka.brokers[1].requests]
    assert names.count("InitProducerId") == 1 and names.index("InitProducerId") < names.index("Produce")
    sent = batches_sent(kafka)
    assert all(pid == 1001 and epoch == 0 for pid, epoch, _, _ in sent)
    assert kafka.values("t", 0) == [b"v0", b"v2", b"v4"] and kafka.values("t", 1) == [b"v1", b"v3", b"v5"]
    assert core.idempotence.partitions[("t", 0)].next_sequence == 3


def test_five_in_flight_keep_order_after_a_retriable_failure():
    core, kafka, sim = make(linger_ms=0, max_in_flight_requests_per_connection=5)
    first = sim.send(b"warm")
    sim.run_until(lambda: first.done)
    kafka.hold_replies = True
    kafka.inject("t", 0, 6)                  # NOT_LEADER_OR_FOLLOWER on the first of the five
    hs = []
    for i in range(5):
        hs.append(sim.send(b"m%d" % i))
        sim.step()
    assert core.client.in_flight(1) == 5      # five requests really were in flight at once
    # The broker rejected #0 and then #1..#4 as out of order (a gap).
    kafka.hold_replies = False
    sim.release(1)
    sim.run_until(lambda: all(h.done for h in hs))
    assert all(h.error is None for h in hs)
    assert kafka.values() == [b"warm"] + [b"m%d" % i for i in range(5)]
    assert [h.metadata.offset for h in hs] == [1, 2, 3, 4, 5]
    seqs = [s for _, _, s, _ in batches_sent(kafka)]
    assert seqs[:6] == [0, 1, 2, 3, 4, 5]          # first sends
    assert seqs[6:] == [1, 2, 3, 4, 5]             # retries keep their sequences, in order
    assert core.metrics()["retries"] >= 5


def test_duplicate_sequence_is_success_after_a_lost_response():
    core, kafka, sim = make(linger_ms=0, request_timeout_ms=1000)
    kafka.hold = True                               # broker writes nothing and never answers ...
    h = sim.send(b"once")
    sim.step()
    kafka.hold = False
    # ... but the write did happen: simulate by appending through the broker logic
    (node, req), = kafka.produce_requests
    kafka._append(1, ("t", 0), req.body["topic_data"][0]["partition_data"][0]["records"])
    sim.run_until(lambda: h.done)                   # request timeout -> retry -> DUPLICATE
    assert h.error is None and h.metadata.offset == -1
    assert kafka.values() == [b"once"]              # written exactly once


def test_out_of_order_on_the_next_expected_batch_fails_it_and_bumps_epoch():
    core, kafka, sim = make(linger_ms=0)
    kafka.inject("t", 0, 45)
    h = sim.send(b"a")
    sim.run_until(lambda: h.done)
    assert isinstance(h.error, OutOfOrderSequenceNumberError)
    h2 = sim.send(b"b")
    sim.run_until(lambda: h2.done)
    assert h2.error is None
    inits = kafka.brokers[1].requests_of("InitProducerId")
    assert len(inits) == 2 and inits[1].body["producer_id"] == 1001 and inits[1].body["producer_epoch"] == 0
    assert batches_sent(kafka)[-1][:3] == (1001, 1, 0)    # new epoch, sequence restarts


def test_unknown_producer_id_bumps_epoch_and_retries():
    core, kafka, sim = make(linger_ms=0)
    kafka.inject("t", 0, 59)
    h = sim.send(b"a")
    sim.run_until(lambda: h.done)
    assert h.error is None and kafka.values() == [b"a"]
    assert core.metrics()["epoch_bumps"] == 1 and core.idempotence.epoch == 1
    assert batches_sent(kafka)[-1][:3] == (1001, 1, 0)


def test_expired_in_flight_batch_bumps_epoch():
    core, kafka, sim = make(linger_ms=0, request_timeout_ms=2000, delivery_timeout_ms=2500)
    kafka.hold = True
    h = sim.send(b"lost")
    sim.run_until(lambda: h.done)
    assert isinstance(h.error, DeliveryTimeoutError)
    kafka.hold = False
    h2 = sim.send(b"next")
    sim.run_until(lambda: h2.done)
    assert h2.error is None and core.idempotence.epoch == 1


def test_batch_expiring_while_waiting_for_a_retry_does_not_block_its_partition():
    """A sequenced batch that expires in the queue (between retries) leaves a
    gap: the epoch is bumped and later batches of the partition go out,
    instead of waiting behind the dead batch until they expire too."""
    core, kafka, sim = make(linger_ms=0, request_timeout_ms=1000, delivery_timeout_ms=2000,
                            retry_backoff_ms=300, retry_backoff_max_ms=300)
    warm = sim.send(b"warm")
    sim.run_until(lambda: warm.done)
    kafka.inject("t", 0, *[19] * 1000)             # NOT_ENOUGH_REPLICAS: retriable, again and again
    h = sim.send(b"doomed")
    sim.run_until(lambda: h.done)
    assert isinstance(h.error, DeliveryTimeoutError) and "waiting for a retry" in str(h.error)
    kafka.injected.clear()
    h2 = sim.send(b"after")
    sim.run_until(lambda: h2.done, max_ms=5000)
    assert h2.error is None and kafka.values() == [b"warm", b"after"]
    assert core.idempotence.epoch == 1                     # a new epoch: sequences restart at 0
    assert batches_sent(kafka)[-1][:3] == (1001, 1, 0)


def test_expired_in_flight_batch_is_finished_once():
    core, kafka, sim = make(linger_ms=0, request_timeout_ms=2000, delivery_timeout_ms=2500)
    kafka.hold = True
    h = sim.send(b"lost")
    sim.run_until(lambda: h.done)                          # the retry expired in flight
    assert "in flight" in str(h.error)
    assert len(core.sender.in_flight) == 1                 # its request is still out
    sim.advance(1000)
    assert core.metrics()["records_failed"] == 1           # failed once, not on every pass
    assert core.metrics()["epoch_bumps"] == 1


def test_sequence_wraps_to_zero_after_int32_max():
    core, kafka, sim = make(linger_ms=0)
    h = sim.send(b"first")
    sim.run_until(lambda: h.done)
    # Pretend the producer has been running for a long time.
    core.idempotence.partitions[("t", 0)].next_sequence = MAX_SEQUENCE - 2
    core.idempotence.partitions[("t", 0)].last_acked = MAX_SEQUENCE - 3
    kafka.seq[(1001, 0, "t", 0)] = MAX_SEQUENCE - 3
    bulk, _ = core.send_many("t", [b"w%d" % i for i in range(5)], now=sim.now)
    sim.run_until(lambda: bulk.done)
    h2 = sim.send(b"after")
    sim.run_until(lambda: h2.done)
    assert bulk.error is None and h2.error is None
    seqs = [s for _, _, s, _ in batches_sent(kafka)]
    assert seqs[-2:] == [MAX_SEQUENCE - 2, 2]
    assert core.idempotence.partitions[("t", 0)].last_acked == 2


def test_max_in_flight_one_without_idempotence_keeps_order_by_muting():
    core, kafka, sim = make(linger_ms=0, enable_idempotence=False, acks=1,
                            max_in_flight_requests_per_connection=1)
    kafka.hold_replies = True
    hs = []
    for i in range(3):
        hs.append(sim.send(b"o%d" % i))
        sim.step()
    assert len(kafka.produce_requests) == 1          # muted until the answer
    kafka.hold_replies = False
    sim.release(1)
    sim.run_until(lambda: all(h.done for h in hs))
    assert kafka.values() == [b"o0", b"o1", b"o2"]


def test_explicit_idempotence_needs_init_producer_id_support():
    from kproto.producer import ProducerCore
    kafka = FakeKafka()
    kafka.brokers[1].versions.pop("InitProducerId")
    core = ProducerCore({"bootstrap.servers": "boot:9092", "linger.ms": 0})
    sim = Sim(core, kafka)
    # The producer becomes unusable, with a message that says why and what to do.
    with pytest.raises(KafkaError, match="does not support InitProducerId.*enable.idempotence=false"):
        for _ in range(10):
            h = sim.send(b"v")
            sim.run_until(lambda: h.done)


def test_epoch_bump_refused_by_broker_falls_back_to_a_new_producer_id():
    # Tansu answers InitProducerId with an existing id/epoch (KIP-360) with
    # UNKNOWN_SERVER_ERROR; the producer then asks for a fresh id.
    kafka = FakeKafka()
    orig = kafka._init_pid

    def init(req):
        if req.body.get("producer_id", -1) >= 0:
            return {"error_code": -1, "producer_id": -1, "producer_epoch": -1}
        return orig(req)
    kafka.brokers[1].on("InitProducerId", init)
    core, kafka, sim = make(kafka, linger_ms=0)
    kafka.inject("t", 0, 59)                                 # UNKNOWN_PRODUCER_ID
    h = sim.send(b"a")
    sim.run_until(lambda: h.done)
    assert h.error is None and kafka.values() == [b"a"]
    inits = kafka.brokers[1].requests_of("InitProducerId")
    assert [r.body["producer_id"] for r in inits] == [-1, 1001, -1]
    assert batches_sent(kafka)[-1][:3] == (1002, 0, 0)


def send_with_replies_held(core, kafka, sim, values):
    """Send each value in its own batch while the broker holds its answers,
    then release them and run until every record is done. Returns the
    handles and how many requests were in flight at once."""
    kafka.hold_replies = True
    hs = []
    for v in values:
        hs.append(sim.send(v))
        sim.step()
    in_flight = core.client.in_flight(1)
    kafka.hold_replies = False
    sim.release(1)
    sim.run_until(lambda: all(h.done for h in hs))
    return hs, in_flight


def test_first_batch_of_a_partition_goes_alone_until_the_broker_knows_the_producer():
    # Kafka takes any sequence from a producer it has no state for on a
    # partition. If the first batch (sequence 0) were rejected as
    # NOT_LEADER_OR_FOLLOWER (a just-created partition whose leader is not
    # ready yet) while later batches were already in flight, the broker would
    # write those first, and the retry of sequence 0 could never be accepted
    # again (OUT_OF_ORDER_SEQUENCE_NUMBER until delivery.timeout.ms). So a
    # partition's later batches wait until its first batch of the epoch is
    # answered. Seen against Apache Kafka 4.4 right after CreateTopics.
    core, kafka, sim = make(linger_ms=0, max_in_flight_requests_per_connection=5)
    kafka.inject("t", 0, 6)
    hs, in_flight = send_with_replies_held(core, kafka, sim, [b"m%d" % i for i in range(4)])
    assert in_flight == 1                          # only the first batch went out
    assert [h.error for h in hs] == [None] * 4
    assert kafka.values() == [b"m0", b"m1", b"m2", b"m3"]
    assert core.metrics()["epoch_bumps"] == 0
    # Once the first answer is in, the partition is back to five in flight.
    more, in_flight = send_with_replies_held(core, kafka, sim, [b"n%d" % i for i in range(5)])
    assert in_flight == 5
    assert all(h.error is None for h in more)


def test_a_batch_the_broker_wrote_past_is_resent_under_a_new_epoch():
    # The broker lost the producer's state on the partition (it expired), then
    # rejected a batch with a retriable error and wrote the later ones in
    # flight. The rejected batch's sequence is now behind what the broker
    # acknowledged: it can never be accepted in this epoch. It was never
    # written (every attempt was refused), so it is sent again under a new
    # epoch instead of being retried until delivery.timeout.ms.
    core, kafka, sim = make(linger_ms=0, max_in_flight_requests_per_connection=5)
    warm = sim.send(b"warm")
    sim.run_until(lambda: warm.done)
    kafka.forget_producers()
    kafka.inject("t", 0, 6)
    hs, in_flight = send_with_replies_held(core, kafka, sim, [b"m%d" % i for i in range(3)])
    assert in_flight == 3
    assert [h.error for h in hs] == [None] * 3
    assert sorted(kafka.values()) == [b"m0", b"m1", b"m2", b"warm"]
    assert kafka.values().count(b"m0") == 1                 # written once
    assert core.metrics()["epoch_bumps"] == 1
    assert batches_sent(kafka)[-1][:3] == (1001, 1, 0)     # m0 again: new epoch, sequence 0
    assert sim.now < 10_000                                 # not after delivery.timeout.ms


def test_a_batch_behind_the_acknowledged_sequence_that_may_be_written_fails_at_once():
    # Same gap, but one attempt of the batch timed out: the broker may have
    # written it. Sending it again under a new epoch could write it twice, so
    # it fails (as Java's producer fails it), at once rather than after
    # delivery.timeout.ms, with an error that says why; the epoch is bumped.
    core, kafka, sim = make(linger_ms=0, max_in_flight_requests_per_connection=5,
                            request_timeout_ms=1000)
    warm = sim.send(b"warm")
    sim.run_until(lambda: warm.done)
    kafka.hold = True                                        # m0's first attempt: no answer
    h0 = sim.send(b"m0")
    sim.step()
    kafka.hold = False
    sim.advance(1100)                                        # m0 times out (unknown outcome)
    kafka.forget_producers()
    kafka.hold_replies = True
    kafka.inject("t", 0, 6)                                  # m0's retry is refused ...
    sim.step()
    sim.advance(200)                                         # ... once its backoff is over
    assert core.client.in_flight(1) == 1
    h1 = sim.send(b"m1")                                     # ... and m1 is written past it
    sim.step()
    kafka.hold_replies = False
    sim.release(1)
    sim.run_until(lambda: h0.done and h1.done)
    assert isinstance(h0.error, OutOfOrderSequenceNumberError)
    assert "may have been written" in str(h0.error)
    assert h1.error is None
    assert core.metrics()["epoch_bumps"] == 1
    assert sim.now < 30_000
