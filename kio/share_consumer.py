"""The threading share consumer: :class:`ShareConsumer`, a thin driver around
:class:`kproto.share.core.ShareConsumerCore` (KIP-932 share groups).

As with :class:`kio.Consumer`, a background thread (``kio-share-consumer-network-thread
| <client_id>``) owns the sockets and runs the core, so heartbeats and the
next share fetch go on while the application processes records. The
consumer is used from one thread (a second thread gets
:class:`~kio.consumer.ConsumerThreadError`); acknowledgement commit callbacks
run on that thread inside ``poll``, ``commit_sync``, ``commit_async`` and
``close``.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Set, Union

from kio._common import now_ms, sleep_time
from kio._network import SocketLoop
from kio.consumer import ConsumerThreadError
from kio.producer import KafkaTimeoutError
from kproto.cluster import TopicPartition
from kproto.config import Config
from kproto.consumer.core import ConsumerClosedError
from kproto.errors import KafkaError
from kproto.share import AcknowledgeType, ShareRecord, ShareStateError
from kproto.share.core import ShareConsumerCore
from kproto.share.fetcher import AcknowledgementsDone

__all__ = ["ShareConsumer", "AcknowledgeType", "ShareRecord", "ShareStateError", "AcknowledgementCallback",
           "ack_callback_calls"]

log = logging.getLogger("kio.share_consumer")

#: ``callback(offsets, error)``: the offsets of one partition whose
#: acknowledgements the leader answered ({TopicPartition: [offsets]}), and
#: None or the error they failed with
AcknowledgementCallback = Callable[[Dict[TopicPartition, List[int]], Optional[BaseException]], Any]


def ack_callback_calls(events) -> list:
    """The (offsets, error) arguments of the acknowledgement commit callback
    for these core events: one call per partition and outcome."""
    calls = []
    for ev in events:
        if isinstance(ev, AcknowledgementsDone):
            for tp, (offsets, err) in ev.results.items():
                calls.append(({tp: list(offsets)}, err))
    return calls


class ShareConsumer:
    """``ShareConsumer(bootstrap_servers=..., group_id="jobs")``; Java's
    KafkaShareConsumer: ``subscribe``, ``poll``, ``acknowledge`` (explicit
    mode), ``commit_sync``, ``commit_async``, ``close``.

    ``share_acknowledgement_mode="implicit"`` (the default) accepts the
    records of a poll at the next poll or commit; ``"explicit"`` wants
    ``acknowledge(record, AcknowledgeType.ACCEPT | RELEASE | REJECT)`` for
    every record before the next poll."""

    config: Config
    """The parsed settings."""

    def __init__(self, config: Optional[Dict[str, Any]] = None, **kwargs: Any) -> None:
        self._core = ShareConsumerCore(config, **kwargs)
        self.config = self._core.config
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._net = SocketLoop(self._core, recv_size=1 << 20)
        self._owner: Optional[int] = None
        self._ack_callback: Optional[AcknowledgementCallback] = None
        self._app_events: list = []
        self._waiters = 0
        self._stop = False
        self._closed = False
        self._wakeup = False
        self._fatal: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"kio-share-consumer-network-thread | {self.config.client_id}")
        self._thread.start()

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
        with self._lock:
            self._check_usable()
            self._core.subscribe(topics, now_ms())
        self._net.wake()

    def unsubscribe(self) -> None:
        """Leave the share group; subscribe() joins it again. Records of the
        last poll not acknowledged (or, in implicit mode, committed) are
        released, as in Java."""
        self._enter()
        with self._lock:
            self._check_usable()
            self._core.unsubscribe(now_ms())
        self._net.wake()

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
        """``callback(offsets, error)`` runs (on this consumer's thread, in
        poll/commit/close) whenever a leader answered acknowledgements."""
        self._enter()
        self._ack_callback = callback

    # == records ===================================================================================
    def poll(self, timeout: Optional[float] = 1.0, max_records: Optional[int] = None) -> List[ShareRecord]:
        """Records acquired for this member (each with ``delivery_count``),
        waiting up to ``timeout`` seconds for some (None: until there are).
        First settles the last poll's records: implicit mode accepts them;
        explicit mode raises :class:`ShareStateError` if one is unacknowledged
        (as it does without a subscription)."""
        self._enter()
        end = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            self._check_usable()
            self._core.poll_started(now_ms())
        self._net.wake()
        while True:
            self._dispatch()
            with self._lock:
                self._check_usable()
                if self._wakeup:
                    self._wakeup = False
                    from kio.consumer import WakeupError
                    raise WakeupError("poll() was interrupted by wakeup()")
                if self._core.client.auth_error is not None:
                    raise self._core.client.auth_error
                out = self._core.drain(max_records)
                if out:
                    break
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    break
                self._waiters += 1
                try:
                    self._changed.wait(left)
                finally:
                    self._waiters -= 1
        self._net.wake()           # drained: that leader's next share fetch can go out
        return out

    def __iter__(self) -> Iterator[ShareRecord]:
        """Every record, as it arrives (``poll(1.0)`` in a loop), until closed."""
        while not self._closed:
            yield from self.poll(1.0)

    def acknowledge(self, record: ShareRecord, type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        """Acknowledge a record of the last poll (explicit mode): ACCEPT
        (done), RELEASE (deliver again, to anyone) or REJECT (archive). It
        goes to the leader with the next fetch, or at once with commit_sync."""
        self._enter()
        with self._lock:
            self._check_usable()
            self._core.acknowledge(record, type)
        # No wake-up per record: the acknowledgement leaves with the next
        # request to that leader (at the latest the next poll's or commit's).

    def commit_sync(self, timeout: Optional[float] = None) -> Dict[TopicPartition, Optional[KafkaError]]:
        """Send the acknowledgements made so far (implicit mode: accepts the
        last poll's records) and wait for the leaders: {TopicPartition: None
        (committed) or the error}. ``timeout`` defaults to default.api.timeout.ms."""
        self._enter()
        with self._lock:
            self._check_usable()
            h = self._core.commit(now_ms(), None if timeout is None else int(timeout * 1000))
        self._net.wake()
        self._wait_for(lambda: h.done, None)
        self._dispatch()
        return h.result()

    def commit_async(self) -> None:
        """Send the acknowledgements made so far without waiting; the
        acknowledgement commit callback hears the outcome."""
        self._enter()
        with self._lock:
            self._check_usable()
            self._core.commit(now_ms())
        self._net.wake()
        self._dispatch()

    # == closing ====================================================================================
    def wakeup(self) -> None:
        """Make a blocked poll() raise WakeupError (thread-safe)."""
        with self._lock:
            self._wakeup = True
            self._changed.notify_all()

    def close(self, timeout: Optional[float] = None) -> None:
        """Send the acknowledgements made so far, close the share sessions -
        the leaders release whatever this member still holds - and leave the
        group. As Java's close(), it accepts nothing by itself: in implicit
        mode call commit_sync() first to accept the last poll's records, or
        they are delivered again. ``timeout`` bounds it (default
        default.api.timeout.ms)."""
        if self._closed:
            return
        self._enter()
        with self._lock:
            if self._fatal is None:
                self._core.begin_close(now_ms(), None if timeout is None else int(timeout * 1000))
        self._net.wake()
        try:
            if self._fatal is None:
                self._wait_for(lambda: self._core.close_done or self._fatal is not None, None)
        finally:
            with self._lock:
                self._stop = True
            self._net.wake()
            self._thread.join()
            self._closed = True
            self._dispatch()

    def __enter__(self) -> ShareConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # == helpers (the application's thread) ==============================================================
    def _enter(self):
        me = threading.get_ident()
        if self._owner is None:
            self._owner = me
        elif self._owner != me:
            raise ConsumerThreadError(
                f"kio.ShareConsumer is not safe for multi-threaded access: it is used by thread "
                f"{self._owner} and was called from thread {me}; use one share consumer per thread")

    def _check_usable(self):
        if self._fatal is not None:
            raise ConsumerClosedError(f"the share consumer's network thread failed: {self._fatal!r}") \
                from self._fatal
        if self._closed or self._core.closing:
            raise ConsumerClosedError("the share consumer is closed")

    def _wait_for(self, cond, timeout, what="the operation"):
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            self._dispatch()
            with self._lock:
                if cond():
                    return
                if self._fatal is not None:
                    self._check_usable()
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    raise KafkaTimeoutError(f"timed out after {timeout} s waiting for {what}")
                self._waiters += 1
                try:
                    self._changed.wait(left)
                finally:
                    self._waiters -= 1

    def _dispatch(self):
        """Run the acknowledgement commit callback on the application's thread."""
        if not self._app_events:
            return
        with self._lock:
            events, self._app_events = self._app_events, []
        if self._ack_callback is None:
            return
        for offsets, err in ack_callback_calls(events):
            try:
                self._ack_callback(offsets, err)
            except Exception:  # noqa: BLE001 - a callback's bug must not stop the consumer
                log.exception("acknowledgement commit callback %r raised", self._ack_callback)

    # == the network thread ==============================================================================
    def _run(self):
        core, net = self._core, self._net
        seen_progress = -1
        events = ()
        try:
            while True:
                with self._lock:
                    now = now_ms()
                    if self._stop:
                        break
                    net.apply(core.poll(now), now)
                    net.write_all(now)
                    evs = core.events()
                    if evs:
                        self._app_events.extend(evs)
                    progress = core.client.progress
                    woken, net.woken = net.woken, False
                    # Wake the application when what it waits for may have
                    # changed: an event, an answer, a wake-up, or a timer
                    # (no I/O event: a commit may have timed out).
                    if self._waiters and (evs or core.data_ready or progress != seen_progress or woken
                                          or not events):
                        self._changed.notify_all()
                    seen_progress = progress
                    core.data_ready = False
                    deadline = core.next_deadline(now)
                    net.update_interest()
                events = net.select(sleep_time(deadline, now_ms()))
                with self._lock:
                    net.handle(events, now_ms())
        except BaseException as e:  # noqa: BLE001 - fail loudly, never hang the caller
            log.exception("the share consumer network thread failed")
            with self._lock:
                self._fatal = e
                self._changed.notify_all()
        finally:
            with self._lock:
                try:
                    net.apply(core.close(now_ms()), now_ms())
                except Exception:  # noqa: BLE001
                    log.exception("closing the share consumer core")
                net.close()
                self._changed.notify_all()
