"""kio.Producer's DeliveryFuture is a real concurrent.futures.Future even
though its Condition and waiter/callback lists are made lazily: wait(),
as_completed(), add_done_callback() and result(timeout) must all work,
whether they start before or after the record is delivered."""
import concurrent.futures
import threading

import pytest

from kio.producer import DeliveryFuture
from kproto.errors import KafkaError


def _deliver(fut, offset=7, error=None, delay=0.05):
    t = threading.Timer(delay, fut._complete, args=("t", 3, 100, offset, 1, -1, error))
    t.start()
    return t


def test_result_waits_for_delivery_on_another_thread():
    fut = DeliveryFuture()
    _deliver(fut, offset=5)
    md = fut.result(timeout=5)
    assert (md.topic, md.partition, md.offset) == (None, 3, 105)
    assert fut.done() and not fut.cancel()


def test_wait_and_as_completed_see_deliveries():
    futs = [DeliveryFuture() for _ in range(3)]
    for i, f in enumerate(futs):
        _deliver(f, offset=i, delay=0.02 * (i + 1))
    done, not_done = concurrent.futures.wait(futs, timeout=5)
    assert len(done) == 3 and not not_done
    again = [DeliveryFuture() for _ in range(2)]
    for f in again:
        _deliver(f)
    assert sorted(f.result().offset for f in concurrent.futures.as_completed(again, timeout=5)) == [107, 107]


def test_done_callbacks_before_and_after_delivery_and_errors():
    seen = []
    fut = DeliveryFuture()
    fut.add_done_callback(lambda f: seen.append(("before", f.exception())))
    err = KafkaError("broker said no")
    _deliver(fut, error=err).join()
    fut.add_done_callback(lambda f: seen.append(("after", f.exception())))
    assert seen == [("before", err), ("after", err)]
    with pytest.raises(KafkaError, match="broker said no"):
        fut.result(timeout=1)


def test_a_future_nobody_waits_on_allocates_no_condition():
    fut = DeliveryFuture()
    _deliver(fut, delay=0).join()
    assert fut._cond is None and fut.done()


# -- attached futures: state read from the batch's shared outcome -------------------------------

def _attached(n, outcome=None):
    from kproto.producer.outcome import BatchOutcome
    outcome = outcome or BatchOutcome("t", 2)
    futs = []
    for i in range(n):
        f = DeliveryFuture()
        f.topic, f.partition, f.timestamp, f._outcome, f._delta = "t", 2, 50, outcome, i
        futs.append(f)
    return outcome, futs


def _finish_later(outcome, base=1000, error=None, delay=0.05):
    from kproto.producer import complete_results
    from kproto.producer.sender import BatchResult
    r = BatchResult("t", 2, base, -1, error, [], outcome)
    t = threading.Timer(delay, complete_results, args=([r],))
    t.start()
    return t


def test_attached_futures_are_woken_and_resolve_to_their_own_offsets():
    outcome, futs = _attached(3)
    assert not any(f.done() for f in futs)
    _finish_later(outcome)
    assert futs[2].result(timeout=5).offset == 1002        # a waiter blocked before completion
    done, _ = concurrent.futures.wait(futs, timeout=5)
    assert len(done) == 3 and [f.result().offset for f in futs] == [1000, 1001, 1002]
    assert futs[0].result().timestamp == 50


def test_attached_futures_of_a_split_batch_wait_for_every_piece():
    from kproto.producer import complete_results
    from kproto.producer.outcome import BatchOutcome
    from kproto.producer.sender import BatchResult
    outcome, futs = _attached(4)
    first, second = BatchOutcome("t", 2), BatchOutcome("t", 2)
    outcome.split([(0, first), (2, second)])
    complete_results([BatchResult("t", 2, 10, -1, None, [], first)])
    assert not futs[0].done()                    # the batch is complete only with all its pieces
    _finish_later(second, base=20)
    assert [f.result(timeout=5).offset for f in futs] == [10, 11, 20, 21]


def test_attached_futures_fail_with_the_batch_error():
    outcome, futs = _attached(2)
    err = KafkaError("batch failed")
    _finish_later(outcome, error=err).join()
    assert [f.exception(0) for f in futs] == [err, err]
    with pytest.raises(KafkaError, match="batch failed"):
        futs[1].result(0)
