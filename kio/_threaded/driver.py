"""What every threading client shares: one network thread that runs a sans-IO
core over a :class:`kio._threaded.network.SocketLoop`, a Condition the application
waits on, and the runner of the step generators the client's shared method
bodies are written as (see :mod:`kio._shared.consumer_ops`).

A client (``kio.Producer``, ``kio.Consumer``, ``kio.ShareConsumer``) mixes
:class:`ThreadDriver` in, calls :meth:`ThreadDriver._start_network` once its
core exists, and overrides the hooks that differ between clients:

* ``_after_round(timer)`` - lock held, after the core was polled and its
  output written: collect the core's events, call ``_notify()`` when a
  waiting application thread may go on, and return work to do outside the
  lock (the producer's delivery callbacks) or None;
* ``_outside_lock(work)`` - run that work without the lock;
* ``_on_failure(exc)`` / ``_on_close(now)`` - lock held, when the loop failed
  or ends; they return outside-the-lock work too.

Nothing here knows a protocol: the loop asks the core for its actions and
deadline, and the runner only waits.
"""
from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any, Optional, TypeVar

from kio._shared.common import Steps, Stepper, call_error_cb, error_callbacks, now_ms, sleep_time
from kio._threaded.network import SocketLoop
from kproto.errors import KafkaError

__all__ = ["ThreadDriver", "PolledThreadDriver", "ConsumerThreadError"]

log = logging.getLogger("kio")

_T = TypeVar("_T")


class ThreadDriver:
    """The network thread, the Condition and the steps runner of a threading client."""

    _core: Any
    _net: SocketLoop
    _thread: threading.Thread
    _fatal: Optional[BaseException]
    _seen_progress = -1          # the client's progress the last round saw
    #: the longest the network thread sleeps in select (ms; None: until the
    #: core's deadline), see PolledThreadDriver._start_network
    _longest_sleep_ms: Optional[float] = None
    #: said when a step yields an awaitable (a coroutine listener's call) this runner cannot await
    _refuse_awaitable = "a threading client cannot await {step!r}; use kio.aio or kio.trio for coroutine functions"

    def _start_network(self, core: Any, thread_name: str, recv_size: int = 1 << 18) -> None:
        """Set up the waiting state and start the network thread over ``core``."""
        self._core = core
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._changes = 0            # notifications so far: a wait started after one is not lost
        self._waiters = 0            # application threads inside _run
        self._stop = False
        self._fatal = None
        self._net = SocketLoop(core, recv_size=recv_size)
        # When the network thread's select ends unless I/O or a wake-up comes
        # first (the core's deadline at its last round; None: no timer): a
        # round the application runs itself (_round_here) wakes it only if
        # that round needs it earlier.
        self._planned: Optional[float] = None
        self._round_error: Optional[BaseException] = None   # raised by a round run on the application's thread
        self._rounds_here = 0        # rounds the application's thread ran itself (tests, profiling)
        self._thread = threading.Thread(target=self._network_loop, daemon=True, name=thread_name)
        self._thread.start()

    def _stop_network(self) -> None:
        """Ask the network thread to end (it runs ``_on_close``) and wait for it."""
        with self._lock:
            self._stop = True
        self._net.wake()
        if threading.current_thread() is not self._thread:
            self._thread.join()

    # -- hooks ------------------------------------------------------------------------------
    def _enter(self) -> None:
        """Called by :meth:`_run` first (the consumers check their owner thread)."""

    def _after_round(self, timer: bool) -> Any:
        self._notify_if_waiting()
        return None

    def _outside_lock(self, work: Any) -> None:
        """Run what a hook returned, without the lock (user callbacks)."""

    def _before_wait(self) -> bool:
        """Called by :meth:`_run` on the application's thread before it waits
        on the Condition; True when it ran a round (PolledThreadDriver: the
        one its kicks asked for), after which the steps look again before
        any wait: that round may have done what they wait for."""
        return False

    def _on_failure(self, exc: BaseException) -> Any:
        self._fatal = exc
        return None

    def _on_close(self, now: float) -> Any:
        self._net.apply(self._core.close(now), now)
        return None

    # -- waking the application -----------------------------------------------------------
    def _notify(self) -> None:
        """Wake the waiting application threads (lock held)."""
        self._changes += 1
        self._changed.notify_all()

    def _notify_if_waiting(self) -> None:
        if self._waiters:
            self._notify()

    def _round_here(self) -> None:
        """Run the network side's round on this (the application's) thread
        instead of waking the network thread for it: what the application
        just changed in the core (records drained, a commit, an assignment)
        goes out at once - the next Fetch leaves before poll() returns, as in
        Java's consumer - without a hand-off to the network thread and back
        (a socketpair write, a select wake-up, two GIL and lock changes of
        hands, and a scheduler delay on a busy machine: the latency tail).

        The network thread keeps waiting in select for answers; it is woken
        only when this round leaves it something: a Connect or Close, a
        socket whose wanted events changed (a request not fully written),
        a deadline earlier than the one it sleeps towards, error callbacks to
        run, or work outside the lock. A round that raises is handed to the
        network thread, whose loop fails the client as for its own rounds."""
        net = self._net
        work = None
        with self._lock:
            if self._stop or self._fatal is not None or self._round_error is not None \
                    or not self._thread.is_alive():
                wake = True
            else:
                try:
                    now = now_ms()
                    actions = self._core.poll(now)
                    if actions:
                        net.apply(actions, now)
                    net.write_all(now)
                    work = self._after_round(False)
                    deadline = self._core.next_deadline(now)
                    planned = self._planned
                    wake = net.update_interest() or bool(actions) or work is not None \
                        or self._core.client.has_errors() \
                        or (deadline is not None and (planned is None or deadline < planned))
                    self._rounds_here += 1
                except Exception as e:  # noqa: BLE001 - failed where the network thread fails it
                    self._round_error = e
                    work, wake = None, True
        if wake:
            net.wake()
        if work is not None:
            self._outside_lock(work)

    def _network_moved(self, timer: bool) -> bool:
        """Lock held, once per round: whether the network side did something a
        waiting application thread may be waiting for - a request completed
        (the client's progress), a timer round (the core's timeouts), or a
        round after the application woke us (what it asked for may be done
        at once). The clients add their own reasons (events, records)."""
        net = self._net
        progress = self._core.client.progress
        woken, net.woken = net.woken, False
        moved = progress != self._seen_progress or timer or woken
        self._seen_progress = progress
        return moved

    # -- the application's side: run a generator of waits --------------------------------
    def _run(self, steps: Steps[_T]) -> _T:
        """Run a blocking operation on this thread: each deadline it yields is
        a wait on the Condition until the network thread notifies or the
        deadline passes. ``_changes`` tells whether a notification came since
        the operation last looked, so none is lost between a check and the wait."""
        self._enter()
        with self._lock:
            self._waiters += 1
            seen = self._changes
        try:
            stepper = Stepper(steps)
            for step in stepper:
                if isinstance(step, float):
                    if self._before_wait():
                        continue
                    with self._lock:
                        if self._changes == seen:
                            left = stepper.seconds_left(step)
                            if left is None or left > 0:
                                self._changed.wait(left)
                        seen = self._changes
                else:
                    close = getattr(step, "close", None)
                    if close is not None:
                        close()           # a coroutine never awaited: no RuntimeWarning on top
                    stepper.fail(TypeError(self._refuse_awaitable.format(step=step)))
            return stepper.result  # type: ignore[no-any-return]
        finally:
            steps.close()
            with self._lock:
                self._waiters -= 1

    # -- the network thread -----------------------------------------------------------------
    def _sleep_until(self, now: float) -> Optional[float]:
        """Lock held: when the network thread's select must end at the latest
        (the core's deadline, capped by ``_longest_sleep_ms``; None: never)."""
        deadline = self._core.next_deadline(now)
        cap = self._longest_sleep_ms
        if cap is not None and (deadline is None or deadline > now + cap):
            deadline = now + cap
        self._planned = deadline
        return deadline  # type: ignore[no-any-return]

    def _network_loop(self) -> None:
        core, net = self._core, self._net
        timer = True                      # the last select returned no I/O event
        try:
            while True:
                with self._lock:
                    now = now_ms()
                    if self._stop:
                        break
                    if self._round_error is not None:
                        raise self._round_error
                    net.round_wanted = False      # this round covers the wake-ups so far
                    net.apply(core.poll(now), now)
                    net.write_all(now)
                    work = self._after_round(timer)
                    deadline = self._sleep_until(now)
                    net.update_interest()
                    errors = error_callbacks(core)
                if work is not None:
                    self._outside_lock(work)
                for cb, error in errors:
                    call_error_cb(cb, error, can_await=False)
                if self._stop:
                    break
                while True:
                    events = net.select(sleep_time(deadline, now_ms()))
                    timer = not events
                    with self._lock:
                        net.handle(events, now_ms())
                        if timer or len(events) > 1 or events[0][0].data is not None \
                                or net.round_wanted or self._stop or self._round_error is not None:
                            break
                        # Only a wake-up that asked for no round (a batch
                        # opened by send(): SocketLoop.wake(round=False)):
                        # sleep again towards the core's new deadline.
                        deadline = self._sleep_until(now_ms())
        except BaseException as e:  # noqa: BLE001 - fail loudly, never hang the application
            log.exception("the network thread %s failed", threading.current_thread().name)
            with self._lock:
                work = self._on_failure(e)
                self._notify()
            if work is not None:
                self._outside_lock(work)
        finally:
            work = None
            with self._lock:
                try:
                    work = self._on_close(now_ms())
                except Exception:  # noqa: BLE001
                    log.exception("closing the core of %s", threading.current_thread().name)
                net.close_all()
                self._notify()
            if work is not None:
                self._outside_lock(work)
            net.close()


class ConsumerThreadError(KafkaError, RuntimeError):
    """A consumer or share consumer was used from a second thread (neither is thread-safe)."""


ConsumerThreadError.__module__ = "kio.consumer"

_Self = TypeVar("_Self", bound="PolledThreadDriver")


class PolledThreadDriver(ThreadDriver):
    """The threading driver of a client one application thread polls (the
    consumer and the share consumer, with a :class:`kio._shared.client_ops.ClientOps`):
    that thread owns it, runs its callbacks, and is woken when the core's
    events, records or answers may be what it waits for. It comes first in
    the client's bases: its hooks replace the defaults of ClientOps."""

    #: the class in messages ("kio.Consumer is not safe for multi-threaded access")
    _client_name = "kio client"
    _awaits_callbacks = False       # callbacks run on the polling thread: a coroutine cannot be awaited
    _what: str
    _closed: bool
    _wakeup: bool
    _owner: Optional[int] = None
    _runs = 0                       # _run calls the owner thread is inside (a listener may nest one)
    _round_wanted = False           # a kick inside _run: one round before the next wait or the return

    if TYPE_CHECKING:                     # ClientOps', which comes after this class in the MRO
        def _collect_events(self) -> bool: ...
        def _close_steps(self, timeout: Optional[float]) -> Steps[None]: ...
        def _dispatch_steps(self) -> Steps[None]: ...
        def close(self, timeout: Optional[float] = None) -> None: ...      # the client's, documented there

    def wakeup(self) -> None:
        """Make a blocked poll() raise WakeupError (thread-safe)."""
        with self._lock:
            self._wakeup = True
            self._notify()

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _close_client(self, timeout: Optional[float]) -> None:
        """The client's close(): its core's close steps, then the network
        thread stops; idempotent."""
        if self._closed:
            return
        try:
            self._run(self._close_steps(timeout))
        finally:
            self._stop_network()
            self._closed = True
            self._run(self._dispatch_steps())      # the callbacks of what the close settled

    # == hooks of the shared method bodies and of the network thread ==============================
    def _enter(self) -> None:
        me = threading.get_ident()
        if self._owner is None:
            self._owner = me
        elif self._owner != me:
            raise ConsumerThreadError(
                f"{self._client_name} is not safe for multi-threaded access: it is used by thread "
                f"{self._owner} and was called from thread {me} ({threading.current_thread().name}); "
                f"use one {self._what} per thread")

    def _start_network(self, core: Any, thread_name: str, recv_size: int = 1 << 18) -> None:
        # The rounds run on the application's thread send requests whose
        # timeouts (request.timeout.ms, more for a Fetch) are later than the
        # network thread's next wake-up if it never sleeps longer than
        # request.timeout.ms: they do not need to wake it. (Otherwise each
        # Fetch sent by poll() would, the network thread sleeping towards the
        # metadata refresh.) A request given a shorter timeout (a commit with
        # its own) still wakes it.
        self._longest_sleep_ms = core.config.request_timeout_ms
        super()._start_network(core, thread_name, recv_size)

    def _run(self, steps: Steps[_T]) -> _T:
        # Kicks inside a blocking call (poll's drained partitions, a commit)
        # are coalesced: one round on this thread before it waits, and one
        # before it returns - never one per kick (a round may plan a Fetch
        # over every assigned partition).
        self._enter()                     # another thread is refused before it counts
        self._runs += 1
        try:
            return super()._run(steps)
        finally:
            self._runs -= 1
            self._before_wait()

    def _before_wait(self) -> bool:
        if not self._round_wanted:
            return False
        self._round_wanted = False
        self._round_here()
        return True

    def _kick(self) -> None:
        # The application changed the core. Inside a blocking call on the
        # owner thread the round waits for _before_wait; a plain method
        # (assign, seek, resume) wakes the network thread, whose one round
        # covers any number of them.
        if self._runs and threading.get_ident() == self._owner:
            self._round_wanted = True
        else:
            self._net.wake()

    @property
    def _failure(self) -> Optional[BaseException]:
        return self._fatal

    def _after_round(self, timer: bool) -> None:
        # Hand the core's events to the application, and wake it only when
        # something it may wait for can have changed: events, records, a
        # completed request, a timer (commit and lookup timeouts), or a round
        # after the application woke us (what it asked for may be done at
        # once: closing, a commit that cannot be sent). Not on every partial
        # read of a large fetch response. The application waits without a
        # timer: each of these counts.
        fresh = self._collect_events()
        moved = self._network_moved(timer)
        if self._waiters and (fresh or moved):
            self._notify()
