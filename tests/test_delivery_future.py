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
