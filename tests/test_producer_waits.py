"""The producer core's backpressure answers (kproto.producer.waits), without
a network: ``append_serialized``/``append_many``/``wait_for_partitions``
answer AppendBlocked instead of raising, ``retry_append`` takes the record
once what it waited for is there, keeps the first deadline, and builds the
timeout errors every driver raises."""
import pytest

try:
    from test_producer_core import FakeKafka, make
except ImportError:  # pragma: no cover - run as a package
    from tests.test_producer_core import FakeKafka, make

from kproto.errors import AuthenticationError, KafkaTimeoutError
from kproto.producer import AppendBlocked, BulkDelivery, DeliveryHandle
from kproto.producer.waits import MEMORY, METADATA


def test_unknown_metadata_is_answered_then_the_retry_takes_the_record():
    core, kafka, sim = make(max_block_ms=1000)
    h = DeliveryHandle()
    answer = core.append_serialized("t", b"v", None, None, None, 5, sim.now, h)
    assert type(answer) is AppendBlocked
    assert (answer.waiting_for, answer.topic, answer.until, answer.operation) == (METADATA, "t", sim.now + 1000, "send()")
    start = sim.now
    while answer is not h:
        sim.advance(1)
        answer = core.retry_append(answer, sim.now)
        assert answer is h or answer.until == start + 1000        # the first deadline stays
    sim.run_until(lambda: h.done)
    assert h.error is None and h.offset == 0 and kafka.values() == [b"v"]


def test_a_topic_that_never_appears_times_out_with_the_brokers_error():
    core, kafka, sim = make(max_block_ms=50)
    kafka.topic_error["gone"] = 3
    answer = core.append_serialized("gone", b"v", None, None, None, 5, sim.now, None)
    with pytest.raises(KafkaTimeoutError) as e:
        for _ in range(100):
            sim.advance(1)
            assert core.retry_append(answer, sim.now) is answer
    assert str(e.value).startswith("topic 'gone' not present in metadata after 50 ms "
                                   "(last error: UNKNOWN_TOPIC_OR_PARTITION (code 3)")
    assert sim.now >= answer.until


def test_no_broker_answering_is_said_in_the_metadata_timeout():
    core, _, _ = make(max_block_ms=10)
    answer = core.wait_for_partitions("t", 0.0)
    assert type(answer) is AppendBlocked and answer.operation == "partitions_for()"
    core.poll(0.0)                                       # it asks for a connection, which fails
    core.disconnected(next(iter(core.client.connections)), 1.0, ConnectionRefusedError(111, "refused"))
    with pytest.raises(KafkaTimeoutError, match=r"^topic 't' not present in metadata after 10 ms "
                                                 r"\(no broker answered: .*refused"):
        core.retry_append(answer, 11.0)


def test_wait_for_partitions_honours_its_own_wait():
    core, kafka, sim = make(max_block_ms=60000)
    answer = core.wait_for_partitions("t", sim.now, 20)
    assert answer.until == sim.now + 20
    with pytest.raises(KafkaTimeoutError, match="after 20 ms"):
        core.retry_append(answer, sim.now + 20)
    sim.advance(5)
    assert core.wait_for_partitions("t", sim.now) == 1


def test_max_block_ms_zero_fails_at_once():
    core, _, sim = make(max_block_ms=0)
    with pytest.raises(KafkaTimeoutError, match="not present in metadata after 0 ms"):
        core.append_serialized("t", b"v", None, None, None, 5, sim.now, None)


def test_an_authentication_failure_ends_the_wait_at_once():
    core, _, sim = make()
    answer = core.append_serialized("t", b"v", None, None, None, 5, sim.now, None)
    core.client.auth_error = AuthenticationError("bad password")
    with pytest.raises(AuthenticationError, match="bad password"):
        core.retry_append(answer, sim.now + 1)
    with pytest.raises(AuthenticationError):
        core.append_serialized("other", b"v", None, None, None, 5, sim.now, None)


def _fill(core, sim, topic="t"):
    handles = []
    for _ in range(1000):
        h = DeliveryHandle()
        answer = core.append_serialized(topic, b"y" * 200, None, None, None, 5, sim.now, h)
        if answer is not h:
            return handles, h, answer
        handles.append(h)
    raise AssertionError("buffer.memory never ran out")


def test_full_buffer_memory_is_answered_and_the_retry_goes_on_once_memory_is_back():
    core, kafka, sim = make(buffer_memory=4096, batch_size=1024, linger_ms=1000, max_request_size=1024,
                            max_block_ms=5000)
    sim.send(b"warm")                                     # metadata known
    handles, h, answer = _fill(core, sim)
    assert (answer.waiting_for, answer.until) == (MEMORY, sim.now + 5000)
    assert core.retry_append(answer, sim.now) is answer   # nothing changed yet
    sim.run_until(lambda: all(x.done for x in handles))   # exhaustion makes the batches sendable
    assert core.retry_append(answer, sim.now) is h
    sim.run_until(lambda: h.done)
    assert h.error is None


def test_full_buffer_memory_times_out_with_javas_text():
    core, kafka, sim = make(buffer_memory=4096, batch_size=1024, linger_ms=1000, max_request_size=1024,
                            max_block_ms=30)
    sim.send(b"warm")
    kafka.hold = True                                     # the broker takes requests and never answers
    _, _, answer = _fill(core, sim)
    sim.advance(30)
    with pytest.raises(KafkaTimeoutError) as e:
        core.retry_append(answer, sim.now)
    assert str(e.value) == ("failed to allocate memory within the configured max blocking time 30 ms "
                            "(buffer.memory=4096)")


def test_append_many_resumes_where_memory_ran_out_and_completes_once():
    core, kafka, sim = make(buffer_memory=4096, batch_size=1024, linger_ms=1000, max_request_size=1024)
    values = [b"z" * 200 for _ in range(40)]
    calls = []
    bulk = BulkDelivery(len(values), "t", lambda err, res: calls.append((err, res.count)))
    answer = core.append_many("t", values, None, None, None, None, sim.now, bulk, 77)
    assert type(answer) is AppendBlocked and answer.waiting_for == METADATA and answer.operation == "send_many()"
    for _ in range(10000):
        sim.advance(1)
        answer = core.retry_append(answer, sim.now)
        if answer is bulk:
            break
        assert answer.waiting_for in (METADATA, MEMORY)
    else:
        raise AssertionError("send_many never finished")
    sim.run_until(lambda: bulk.done)
    assert bulk.error is None and bulk.value == ("t", 40, bulk.ranges) and calls == [(None, 40)]
    assert kafka.values() == values                        # every row once, in order


def test_the_raising_send_keeps_its_exceptions():
    from kproto.producer import MetadataPending
    core, _, sim = make()
    with pytest.raises(MetadataPending):
        core.send("t", b"v", now=sim.now)


def test_an_empty_bulk_delivery_is_done_at_once_and_wakes_its_driver():
    woken, calls = [], []
    bulk = BulkDelivery(0, "t", lambda err, res: calls.append((err, tuple(res))), woken.append)
    assert bulk.done and woken == [bulk] and calls == [(None, ("t", 0, []))]


def test_a_raising_callback_is_logged_not_raised(caplog):
    h = DeliveryHandle(callback=lambda err, md: 1 / 0)
    h.topic, h.timestamp = "t", 9
    h._complete("t", 0, 10, 2, 1, -1, None)
    assert h.done and h.metadata == ("t", 0, 12, 9)
    assert "on_delivery callback" in caplog.text


def test_a_retry_that_asks_for_metadata_again_says_the_driver_must_poll():
    """A metadata answer without the topic clears the refresh request; the
    retry asks again, and the driver must wake its network side for it (it
    computed its next deadline without it): otherwise both wait until
    max.block.ms (seen under valgrind, where the first answer came before
    the topic was added)."""
    core, _, sim = make()
    answer = core.wait_for_partitions("late", sim.now)
    core.cluster.need_update = False           # what an answer without the topic leaves
    assert core.retry_append(answer, sim.now) is answer and answer.wants_poll
    assert core.retry_append(answer, sim.now) is answer and not answer.wants_poll   # already asked
