"""The share consumer written once: what :class:`kio.ShareConsumer` (threads)
and the async share consumers (``kio.aio.ShareConsumer``,
``kio.trio.ShareConsumer``) share - every method body, as
:mod:`kio._shared.consumer_ops` does for the consumer.

Methods that do not wait (subscribe, acknowledge, ...) are plain methods;
those that wait (poll, commit_sync, commit_async, close) are generators of
steps (``_<name>_steps``) a driver runs: ``self._run(...)`` on the threading
driver's Condition, ``await self._run(...)`` on the async engine. The
acknowledgement commit callback runs in the application's thread or task; in
the async drivers it may be a coroutine function (its result is yielded as a
step and awaited there; the threading driver refuses it with TypeError).
"""
from __future__ import annotations

import inspect
import logging
from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Union

from kio._shared.client_ops import ClientOps, callback_steps
from kio._shared.common import Steps, now_ms
from kproto.cluster import TopicPartition
from kproto.errors import KafkaError
from kproto.share import AcknowledgeType, ShareRecord
from kproto.share.core import ShareConsumerCore
from kproto.share.fetcher import AcknowledgementsDone

__all__ = ["ShareConsumerOps", "AcknowledgementCallback", "ack_callback_calls"]

log = logging.getLogger("kio.share_consumer")

#: ``callback(offsets, error)``: the offsets of one partition whose
#: acknowledgements the leader answered ({TopicPartition: [offsets]}), and
#: None or the error they failed with. In kio.aio and kio.trio it may be a
#: coroutine function.
AcknowledgementCallback = Callable[[Dict[TopicPartition, List[int]], Optional[Exception]], Any]


def ack_callback_calls(events: Iterable[Any]) -> List[Any]:
    """The (offsets, error) arguments of the acknowledgement commit callback
    for these core events: one call per partition and outcome."""
    calls = []
    for ev in events:
        if isinstance(ev, AcknowledgementsDone):
            for tp, (offsets, err) in ev.results.items():
                calls.append(({tp: list(offsets)}, err))
    return calls


class ShareConsumerOps(ClientOps):
    """The share consumer's methods, shared by every driver (see the module docstring)."""

    _what = "share consumer"
    _core: ShareConsumerCore
    _ack_callback: Optional[AcknowledgementCallback]
    # _app_events: AcknowledgementsDone events; _callbacks stays empty (the events say whom to call)

    def _init_ops(self, core: ShareConsumerCore) -> None:
        self._init_client_ops(core)
        self._ack_callback = None

    def _core_events(self) -> List[Any]:
        return self._core.events()

    def _poll_started(self, now: float) -> bool:
        self._core.poll_started(now)
        return True        # (the share core's acknowledgements may be due: always a round)

    # == state ==================================================================================
    @property
    def member_id(self) -> str:
        """This member's id in the share group (made by the client, KIP-1082)."""
        return self._core.member_id

    @property
    def acquisition_lock_timeout_ms(self) -> Optional[int]:
        """How long the leaders lock records acquired for this member (the
        group's share.record.lock.duration.ms, as the last share fetch
        answered; None before one did): acknowledge well within it."""
        return self._core.fetcher.lock_timeout_ms

    # == subscription ===========================================================================
    def subscribe(self, topics: Union[str, Iterable[str]]) -> None:
        """Join the share group for these topics (replaces the subscription)."""
        self._enter()
        self._start()
        with self._lock:
            self._check_usable()
            self._core.subscribe(topics, now_ms())
        self._kick()

    def unsubscribe(self) -> None:
        """Leave the share group; subscribe() joins it again. Records of the
        last poll not acknowledged (or, in implicit mode, committed) are
        released, as in Java."""
        self._enter()
        with self._lock:
            self._check_usable()
            self._core.unsubscribe(now_ms())
        self._kick()

    def subscription(self) -> Set[str]:
        """The topics subscribed to."""
        self._enter()
        with self._lock:
            return self._core.subscription()

    def assignment(self) -> Set[TopicPartition]:
        """The partitions the broker gave this member (shared with others)."""
        self._enter()
        with self._lock:
            return self._core.assignment()

    def set_acknowledgement_commit_callback(self, callback: Optional[AcknowledgementCallback]) -> None:
        """``callback(offsets, error)`` runs whenever a leader answered
        acknowledgements: in the application's thread or task, inside poll,
        commit_sync, commit_async and close. The async share consumers take a
        coroutine function too (the threading one refuses it: TypeError)."""
        self._enter()
        if callback is not None and not callable(callback):
            raise TypeError(f"the acknowledgement commit callback must be callable, not {callback!r}")
        if inspect.iscoroutinefunction(callback) and not self._awaits_callbacks:
            raise TypeError(f"{callback!r} is a coroutine function: this share consumer runs the callback on its "
                            f"polling thread and cannot await it; use kio.aio or kio.trio, or a plain function")
        self._ack_callback = callback

    # == records ================================================================================
    def _poll_records_steps(self, timeout: Optional[float], max_records: Optional[int]) -> Steps[List[ShareRecord]]:
        """First settles the last poll's records (the core: implicit mode
        accepts them, explicit mode raises ShareStateError while one is
        unacknowledged, as without a subscription)."""
        return (yield from self._poll_steps(timeout, self._core.drain, max_records))  # type: ignore[no-any-return]

    def acknowledge(self, record: ShareRecord, type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        """Acknowledge a record of the last poll (explicit mode): ACCEPT
        (done), RELEASE (deliver again, to anyone), REJECT (archive) or RENEW
        (still processing: extend the acquisition lock, KIP-1222; the record
        comes back in a later poll once the leader renewed it, to be
        acknowledged again). It goes to the leader with the next fetch (RENEW:
        the next poll's ShareAcknowledge), or at once with commit_sync."""
        self._enter()
        with self._lock:
            self._check_usable()
            self._core.acknowledge(record, type)
        # No wake-up per record: the acknowledgement leaves with the next
        # request to that leader (at the latest the next poll's or commit's).

    # == commits ================================================================================
    def _commit_sync_steps(self, timeout: Optional[float]) -> Steps[Dict[TopicPartition, Optional[KafkaError]]]:
        result = yield from self._handle_steps(lambda core, now, t: core.commit(now, t), timeout)
        yield from self._dispatch_steps()          # the callback hears of this commit before it returns
        return result  # type: ignore[no-any-return]

    def _commit_async_steps(self) -> Steps[None]:
        self._start()
        with self._lock:
            self._check_usable()
            self._core.commit(now_ms())
        self._kick()
        yield from self._dispatch_steps()

    # == callbacks ==============================================================================
    def _dispatch_steps(self) -> Steps[None]:
        """Run the acknowledgement commit callback for the answered
        acknowledgements, in the application's thread or task; a bug in it
        is logged and must not stop the share consumer."""
        if not self._app_events:
            return
        with self._lock:
            events, self._app_events = self._app_events, []
        callback = self._ack_callback
        if callback is None:
            return
        for offsets, err in ack_callback_calls(events):
            try:
                yield from callback_steps(callback, offsets, err)
            except Exception:  # noqa: BLE001
                log.exception("acknowledgement commit callback %r raised", callback)
