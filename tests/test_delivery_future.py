"""kio.Producer's DeliveryFuture is a real concurrent.futures.Future even
though Future.__init__ runs only when something needs it: wait(),
as_completed(), add_done_callback() and result(timeout) must all work,
whether they start before or after the record is delivered - and without
touching Future's private attributes, so that a Python whose Future keeps its
state under other names still works (simulated below)."""
import concurrent.futures
import threading

import pytest

from kio.producer import DeliveryFuture
from kproto.errors import KafkaError


def _deliver(fut, offset=7, error=None, delay=0.05):
    """Attach ``fut`` as record ``offset`` of a batch of partition 3 and
    complete that batch (base offset 100) on a timer thread, as the network
    thread does (kproto.producer.complete_results)."""
    from kproto.producer import complete_results
    from kproto.producer.sender import BatchResult
    if fut._outcome is None:
        _attach(fut, offset)
    result = BatchResult("t", 3, 100, -1, error, [], fut._outcome)
    t = threading.Timer(delay, complete_results, args=([result],))
    t.start()
    return t


def _attach(fut, offset=7):
    """What send() does: the future reads record ``offset`` of its batch's outcome."""
    from kproto.producer.outcome import BatchOutcome
    fut.partition, fut._outcome, fut._delta = 3, BatchOutcome("t", 3), offset
    return fut


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
    fut = _attach(DeliveryFuture())
    fut.add_done_callback(lambda f: seen.append(("before", f.exception())))
    err = KafkaError("broker said no")
    _deliver(fut, error=err).join()
    fut.add_done_callback(lambda f: seen.append(("after", f.exception())))
    assert seen == [("before", err), ("after", err)]
    with pytest.raises(KafkaError, match="broker said no"):
        fut.result(timeout=1)


def _has_future_state(fut):
    """Whether Future.__init__ ran on ``fut`` (its Condition is there), found
    without naming Future's private attributes."""
    return any(isinstance(v, threading.Condition) for v in vars(fut).values())


def test_a_future_nobody_waits_on_allocates_no_condition():
    fut = DeliveryFuture()
    _deliver(fut, delay=0).join()
    assert fut.done() and fut.result().offset == 107 and fut.exception() is None
    fut.add_done_callback(lambda f: None)      # already done: called at once
    assert not fut.running() and not fut.cancelled() and not fut.cancel()
    assert not _has_future_state(fut)


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


# -- no dependence on concurrent.futures' private attributes -------------------------------------

def test_our_attributes_do_not_collide_with_futures_own_state():
    # Future.__init__ runs on a live DeliveryFuture: it must not overwrite
    # anything of ours (class defaults included).
    ours = {n for n in vars(DeliveryFuture) if not n.startswith("__")}
    assert not ours & set(vars(concurrent.futures.Future()))
    # ... and it overrides only the documented methods of Future.
    documented = {"result", "exception", "done", "running", "cancelled", "cancel", "add_done_callback"}
    assert ours & set(dir(concurrent.futures.Future)) == documented


def _renamed_futures_module():
    """concurrent.futures._base as a future CPython might have it: the same
    code with Future's private state under other names."""
    import inspect
    import re
    import types
    src = inspect.getsource(concurrent.futures._base)
    for name in ("_condition", "_state", "_waiters", "_result", "_exception", "_done_callbacks"):
        src, n = re.subn(rf"\b{name}\b", f"{name}_v2", src)
        assert n, name
    mod = types.ModuleType("renamed_futures_base")
    exec(compile(src, "<renamed concurrent.futures._base>", "exec"), mod.__dict__)
    return mod


@pytest.fixture
def renamed():
    """(module, DeliveryFuture): kio/producer.py loaded on top of a Future
    whose private attributes have other names."""
    import importlib.util

    import kio.producer
    mod = _renamed_futures_module()
    real = concurrent.futures.Future
    concurrent.futures.Future = mod.Future
    try:
        spec = importlib.util.spec_from_file_location("kio_producer_on_renamed_futures",
                                                      kio.producer.__file__)
        producer = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(producer)
    finally:
        concurrent.futures.Future = real
    assert issubclass(producer.DeliveryFuture, mod.Future)
    return mod, producer.DeliveryFuture


def test_works_on_a_future_class_with_other_private_names(renamed):
    mod, Fut = renamed
    fut = Fut()
    _deliver(fut, offset=5)
    assert fut.result(timeout=5).offset == 105              # waited on another thread
    futs = [Fut() for _ in range(3)]
    for i, f in enumerate(futs):
        _deliver(f, offset=i, delay=0.02 * (i + 1))
    done, not_done = mod.wait(futs, timeout=5)
    assert done == set(futs) and not not_done
    again = [Fut() for _ in range(2)]
    for f in again:
        _deliver(f, error=KafkaError("no"))
    assert [type(f.exception()) for f in mod.as_completed(again, timeout=5)] == [KafkaError] * 2
    seen = []
    f = _attach(Fut(), 1)
    f.add_done_callback(lambda x: seen.append(x.result().offset))
    _deliver(f, offset=1).join()
    f.add_done_callback(lambda x: seen.append(-x.result().offset))
    assert seen == [101, -101]
    assert "finished" in repr(f)


def test_attached_futures_work_on_a_future_class_with_other_private_names(renamed):
    mod, Fut = renamed
    from kproto.producer.outcome import BatchOutcome
    outcome, futs = BatchOutcome("t", 2), []
    for i in range(3):
        f = Fut()
        f.topic, f.partition, f.timestamp, f._outcome, f._delta = "t", 2, 50, outcome, i
        futs.append(f)
    _finish_later(outcome)
    done, _ = mod.wait(futs, timeout=5)
    assert len(done) == 3 and [f.result().offset for f in futs] == [1000, 1001, 1002]


def test_a_waiter_racing_with_the_completion_is_always_woken():
    # Many short races between a waiter initialising the Future and the
    # network thread completing the record: none may hang.
    from kproto.producer import complete_results
    from kproto.producer.outcome import BatchOutcome
    from kproto.producer.sender import BatchResult
    for i in range(300):
        outcome, futs = _attached(2)
        other, more = _attached(1)
        futs += more
        t = threading.Thread(target=lambda o=outcome, o2=other: (
            complete_results([BatchResult("t", 2, 0, -1, None, [], o)]),
            complete_results([BatchResult("t", 2, 5, -1, None, [], o2)])))
        t.start()
        done, not_done = concurrent.futures.wait(futs, timeout=5)
        t.join()
        assert not not_done, i


def test_asyncio_wrap_future_awaits_a_delivery():
    import asyncio

    async def main():
        fut = DeliveryFuture()
        _deliver(fut, offset=3)
        return (await asyncio.wait_for(asyncio.wrap_future(fut), 5)).offset
    assert asyncio.run(main()) == 103
