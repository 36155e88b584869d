"""What the shared method bodies of the consumer (:mod:`kio._shared.consumer_ops`)
and of the share consumer (:mod:`kio._shared.share_ops`) have in common, once: the
driver's hooks, the closed checks (:class:`~kio._shared.common.ClosedChecks`, the admin's too),
the poll loop, the waits, and calling the application's callbacks.

Both clients are polled by one application thread or task, which runs the
callbacks; the network side (a thread, or an async task) collects the core's
events for it. Waiting methods are generators of steps (see
:mod:`kio._shared.consumer_ops`): a float deadline (``now_ms()``; ``INF`` none) or
an awaitable a coroutine callback returned.
"""
from __future__ import annotations

import uuid
from typing import Any, Callable, ClassVar, ContextManager, Dict, List, Optional, TypeVar

from kio._shared.common import INF, ClosedChecks, Steps, is_awaitable, now_ms
from kio._shared.telemetry_ops import MetricSubscriptionOps, instance_id_steps
from kproto.consumer.core import ConsumerClosedError
from kproto.errors import KafkaError, KafkaTimeoutError

__all__ = ["ClosedChecks", "ClientOps", "DISPATCH", "WakeupError", "callback_steps", "ms"]

_T = TypeVar("_T")


#: what :meth:`ClientOps._poll_look` returns when callbacks must run before any record is taken
DISPATCH = object()


class WakeupError(KafkaError):
    """poll() was interrupted by wakeup()."""


WakeupError.__module__ = "kio.consumer"


def ms(timeout: Optional[float]) -> Optional[int]:
    """A timeout in seconds (the API's) as the cores' milliseconds."""
    return None if timeout is None else int(timeout * 1000)


def callback_steps(fn: Callable[..., Any], *args: Any) -> Steps[None]:
    """Call an application callback in the application's thread or task; what
    a coroutine function returned is yielded, for the async runner to await
    (the threading runner refuses it). Its exceptions are the caller's."""
    result = fn(*args)
    if result is not None and is_awaitable(result):
        yield result


class ClientOps(ClosedChecks, MetricSubscriptionOps):
    """The hooks, checks and waits of a polled client's shared method bodies."""

    _closed_error = ConsumerClosedError
    #: whether the driver awaits what a callback returns (the async drivers; not the threading one)
    _awaits_callbacks: ClassVar[bool] = True
    _core: Any
    _lock: ContextManager[Any]
    _wakeup: bool
    _app_events: List[Any]              # the core's events, for the application's thread or task
    _callbacks: List[Any]               # callbacks to run there: (callback, *arguments)

    def _init_client_ops(self, core: Any) -> None:
        self._core = core
        self._closed = False
        self._wakeup = False
        self._app_events = []
        self._callbacks = []

    # -- the driver's hooks ---------------------------------------------------------------------
    def _enter(self) -> None:
        """Called first by every public method (the threading driver checks its thread)."""

    def _start(self) -> None:
        """Called by the methods that need the network side running (the async drivers start it)."""

    def _kick(self) -> None:
        raise NotImplementedError

    # -- the client's hooks ---------------------------------------------------------------------
    def _core_events(self) -> List[Any]:
        """The core's new events (network side, lock held)."""
        raise NotImplementedError

    def _poll_started(self, now: float) -> bool:
        """Tell the core the application polls (lock held); whether that gave
        the network side work (an auto-commit, a rejoin): then it is kicked."""
        raise NotImplementedError

    def _dispatch_steps(self) -> Steps[None]:
        """Run the callbacks the collected events call for, in the application's thread or task."""
        raise NotImplementedError

    # -- the network side -------------------------------------------------------------------------
    def _collect_events(self) -> bool:
        """Take the core's events for the application (network side, lock
        held): whether anything came that a waiting application may want -
        events, or records (``core.data_ready``)."""
        core = self._core
        evs = self._core_events()
        if evs:
            self._app_events.extend(evs)
        fresh = bool(evs) or core.data_ready
        core.data_ready = False
        return fresh

    # -- checks (and ClosedChecks') ---------------------------------------------------------------
    def _check_usable(self) -> None:
        """As _check_open, and no new poll, commit or lookup once close() began."""
        if self._closed or self._core.closing or self._failure is not None:    # (one test a look when usable)
            self._check_open()
            raise ConsumerClosedError(f"the {self._what} is closed")

    # == polling =================================================================================
    # A poll is _poll_begin, then looks (_poll_look) until one gives records
    # or its end passed: between two looks the callbacks the collected events
    # call for run, or the driver waits. The steps (_poll_steps) are the
    # general form every driver runs; the consumers run the same pieces in
    # a plain loop (PolledThreadDriver._poll_now, and the async drivers'
    # PolledClient._poll_now): a poll() that finds records, or gets them
    # from one wait, creates and drives no generator.
    def _poll_begin(self, timeout: Optional[float]) -> float:
        """A poll starts (the driver's own checks done): tell the core (the
        max.poll.interval.ms timer, an auto-commit due; the work that gives
        the network side is kicked); returns when the poll ends at the latest
        (``now_ms()``; INF: never)."""
        self._start()
        now = now_ms()
        with self._lock:
            self._check_usable()
            work = self._poll_started(now)
        if work:
            self._kick()
        return INF if timeout is None else now + timeout * 1000.0

    def _poll_look(self, end: float, take: Callable[[Any], _T], arg: Any) -> Any:
        """One look of a poll ending at ``end``: what ``take(arg)`` gave (the
        core's records; the partitions drained, the network side is kicked
        for their next fetch), or that empty result once ``end`` passed;
        None when the poll must wait for more; :data:`DISPATCH` when the
        collected events call for callbacks (``_dispatch_steps``) before any
        record is taken. Raises as poll() does: closed (or the network side
        failed), WakeupError, and what the core's drain raises (an
        authentication failure, an offset out of range under
        ``auto.offset.reset=none``...)."""
        with self._lock:
            self._check_usable()
            if self._wakeup:
                self._wakeup = False
                raise WakeupError("poll() was interrupted by wakeup()")
            if self._app_events or self._callbacks:
                return DISPATCH
            out = take(arg)
            if not out:
                core = self._core
                freed = core.fetch_freed
                if freed:
                    core.fetch_freed = False
                expired = now_ms() >= end
        if out:
            self._kick()        # partitions drained: their next fetch can go out now
            return out
        if freed:
            self._kick()        # a used-up fetch dropped, nothing handed out: its partitions' next fetch
        return out if expired else None

    def _poll_steps(self, timeout: Optional[float], take: Callable[[Any], _T], arg: Any) -> Steps[_T]:
        """What ``take(arg)`` gives (records), waiting up to ``timeout``
        seconds (None: no limit) until it gives something; callbacks run first."""
        end = self._poll_begin(timeout)
        while True:
            yield from self._dispatch_steps()
            out = self._poll_look(end, take, arg)
            if out is None:
                yield end
            elif out is not DISPATCH:
                return out  # type: ignore[no-any-return]

    # == closing ================================================================================
    def _close_steps(self, timeout: Optional[float]) -> Steps[None]:
        """Start the core's close (commits, leaving the group...) and wait
        until it is done; the driver then stops its network side."""
        with self._lock:
            if self._failure is not None:
                return
            self._core.begin_close(now_ms(), ms(timeout))
        self._kick()
        yield from self._until(lambda: self._core.close_done or self._failure is not None)

    def metrics(self) -> Dict[str, Any]:
        """The client's counters and gauges ({name: value}: connections,
        requests, responses, telemetry pushes, the consumer's assigned
        partitions, ...)."""
        with self._lock:
            return self._core.metrics()  # type: ignore[no-any-return]

    # == KIP-714 ===================================================================================
    def _client_instance_id_steps(self, timeout: Optional[float]) -> Steps[uuid.UUID]:
        self._start()
        return (yield from instance_id_steps(self._lock, self._check_open, self._core.client.telemetry,
                                             self._core.config.default_api_timeout_ms, timeout))

    # == waiting =================================================================================
    def _handle_steps(self, start: Callable[[Any, float, Optional[int]], Any],
                      timeout: Optional[float]) -> Steps[Any]:
        """Start a request of the core (it enforces ``timeout`` itself) and wait for its handle."""
        self._start()
        with self._lock:
            self._check_usable()
            h = start(self._core, now_ms(), ms(timeout))
        self._kick()
        yield from self._until(lambda: h.done)
        return h.result()

    def _until(self, cond: Callable[[], bool], timeout: Optional[float] = None,
               what: str = "the operation") -> Steps[None]:
        """Wait until ``cond()`` (checked under the lock), running callbacks
        meanwhile; the network side failing raises ConsumerClosedError,
        ``timeout`` seconds passing KafkaTimeoutError."""
        end = INF if timeout is None else now_ms() + timeout * 1000.0
        while True:
            yield from self._dispatch_steps()
            with self._lock:
                if cond():
                    return
                self._check_failed()
            if now_ms() >= end:
                raise KafkaTimeoutError(f"timed out after {timeout} s waiting for {what}")
            yield end
