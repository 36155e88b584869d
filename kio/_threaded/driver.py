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
from time import monotonic
from typing import TYPE_CHECKING, Any, Optional, TypeVar

from kio._shared.client_ops import DISPATCH
from kio._shared.common import INF, Steps, Stepper, call_error_cb, error_callbacks, now_ms, sleep_time
from kio._threaded.network import SocketLoop
from kproto.driver import TIMER_RESOLUTION_MS, wait_ms
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
    #: the network thread's loop has ended (set under the lock as it closes
    #: the core): Thread.is_alive(), without its two calls and lock per look
    _loop_ended = False
    #: the longest the network thread sleeps in select (ms; None: until the
    #: core's deadline), see PolledThreadDriver._start_network
    _longest_sleep_ms: Optional[float] = None
    #: said when a step yields an awaitable (a coroutine listener's call) this runner cannot await
    _refuse_awaitable = "a threading client cannot await {step!r}; use kio.aio or kio.trio for coroutine functions"

    def _start_network(self, core: Any, thread_name: str, recv_size: int = 1 << 18,
                       deadline_timer: bool = False) -> None:
        """Set up the waiting state and start the network thread over ``core``;
        ``deadline_timer``: the socket loop gets one (:meth:`SocketLoop.wake_by`)."""
        self._core = core
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._changes = 0            # notifications so far: a wait started after one is not lost
        self._waiters = 0            # application threads inside _run
        self._stop = False
        self._fatal = None
        self._net = SocketLoop(core, recv_size=recv_size, deadline_timer=deadline_timer)
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
                    seen = self._wait(step, seen)
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

    def _wait(self, deadline: float, seen: int) -> int:
        """One wait of a blocking operation until ``deadline`` (``now_ms()``;
        INF: none): on the Condition until the network thread notifies, unless
        it already did since ``seen``. Returns the notifications so far."""
        with self._lock:
            if self._changes == seen:
                left = Stepper.seconds_left(deadline)
                if left is None or left > 0:
                    self._changed.wait(left)
            return self._changes

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

    def _deadline_after_wake(self, now: float) -> Optional[float]:
        """Lock held, after a wake-up that asked for no round (nothing read,
        no round run since :meth:`_sleep_until`): when select must end now.
        The producer's asks its core for the batches' due time only."""
        return self._sleep_until(now)

    def _select(self, deadline: Optional[float]) -> list:
        """The network thread's wait for I/O until ``deadline`` (the core's,
        ``now_ms()``; None: none), without the lock: its events."""
        net = self._net
        if deadline is None:
            return net.select(None)
        due = net.timer_due
        if due is not None and due <= deadline:
            # The deadline timer ends this wait first (set by wake_by for
            # this deadline or an earlier one, only lowered meanwhile): a
            # whole-millisecond timeout for the same deadline would end it
            # too, a second wake-up and a round with nothing due. The
            # timeout stays, one tick late, should the timer ever not fire.
            deadline += TIMER_RESOLUTION_MS
        return net.select(wait_ms(deadline, monotonic() * 1000.0) / 1000.0)   # sleep_time(), inline

    def _network_loop(self) -> None:
        # At 1,000 records/s this loop runs two rounds a batch: what does not
        # change is looked up once, and now_ms(), sleep_time() and
        # error_callbacks()'s common case are inline (each a Python call
        # a round). Methods stay looked up per round: tests and benches
        # replace them on a running client (core.poll).
        core, net, lock = self._core, self._net, self._lock
        client, wake_fd, timer_fd = core.client, net.wake_fd, net.timer_fd
        timer = True                      # the last select returned no I/O event
        try:
            while True:
                with lock:
                    now = monotonic() * 1000.0          # now_ms(), inline
                    if self._stop:
                        break
                    if self._round_error is not None:
                        raise self._round_error
                    net.round_wanted = False      # this round covers the wake-ups so far
                    actions = core.poll(now)
                    if actions:
                        net.apply(actions, now)
                    net.write_all(now)
                    work = self._after_round(timer)
                    deadline = self._sleep_until(now)
                    net.update_interest()
                    # error_callbacks(core), its common case inline: nothing reported
                    errors = error_callbacks(core) if client.has_errors() else ()
                if work is not None:
                    self._outside_lock(work)
                for cb, error in errors:
                    call_error_cb(cb, error, can_await=False)
                if self._stop:
                    break
                while True:
                    events = self._select(deadline)
                    # (the deadline timer alone: a timer's round too)
                    timer = not events or (events[0][0] == timer_fd and len(events) == 1)
                    with lock:
                        net.handle(events, monotonic() * 1000.0)
                        if timer or len(events) > 1 or events[0][0] != wake_fd \
                                or net.round_wanted or self._stop or self._round_error is not None:
                            break
                        # Only a wake-up that asked for no round (a batch
                        # opened by send(): SocketLoop.wake(round=False)):
                        # sleep again towards the core's new deadline.
                        deadline = self._deadline_after_wake(monotonic() * 1000.0)
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
                self._loop_ended = True
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
    the client's bases: its hooks replace the defaults of ClientOps.

    Who waits on the sockets: while the application thread keeps calling
    poll() (or another blocking method), *it* waits in select itself, and an
    answer is read, decoded and handed over on that one thread - no hand-off
    from the network thread per answer (a Condition notify, the GIL changing
    hands twice), as Java's consumer runs its network I/O in poll(). The
    network thread then stands by: it sleeps on its own Condition, runs the
    core's timers (heartbeats, auto-commits, request timeouts) when one falls
    due while the application is between two waits, and takes the sockets
    back when the application has not waited for ``_handback_ms`` (busy with
    its records, a listener, or gone): from then on it reads answers and
    heartbeats as before, until the application's next wait asks for the
    sockets again (one wake-up per take-over, not per poll()). Only one
    thread waits in select at a time; the switches happen under the lock,
    and in the steady state none needs a wake-up: the application notes when
    its blocking call ends at the latest and when it last left select, and
    the standing-by thread sleeps until the first moment it could have to
    act - while the application selects, ``_handback_ms`` after the core's
    next timer or the call's end, whichever is first (see
    :meth:`_standby_wake_at`); else when the application will have stayed
    out of select for ``_handback_ms``, or the core's next timer. An idle
    consumer blocked in poll() wakes it once per core timer (a heartbeat)
    or poll() timeout, not on a fixed 100 ms tick."""

    #: the class in messages ("kio.Consumer is not safe for multi-threaded access")
    _client_name = "kio client"
    _awaits_callbacks = False       # callbacks run on the polling thread: a coroutine cannot be awaited
    _what: str
    _closed: bool
    _wakeup: bool
    _owner: Optional[int] = None
    _runs = 0                       # _run calls the owner thread is inside (a listener may nest one)
    _round_wanted = False           # a kick inside _run: one round before the next wait or the return
    #: how long the application may stay out of select (between two waits)
    #: before the network thread takes the sockets back (ms): short against
    #: session.timeout.ms / 3, long against the time between two polls of a
    #: busy loop (a take-over costs a wake-up on each side)
    _handback_ms = 100.0
    _net_selects = True             # the network thread waits on the sockets (False: it stands by)
    _app_selects = False            # the application thread is in select now
    _app_waited_at = 0.0            # now_ms() when the application thread last left select
    _app_call_end: Optional[float] = None    # when its blocking call's wait ends at the latest (None: never)
    _sockets_wanted = False         # the application asked the network thread to hand the sockets over
    _standby_until: Optional[float] = None   # when the standing-by network thread looks again (None: awake)
    _standby_timer = False          # the last stand-by ended for a timer round
    _app_round_due = True           # the core was fed since the application thread's last round
    _app_deadline: Optional[float] = None   # the core's deadline after that round
    _app_rounds_seen = -1           # _rounds_run then (another round makes it stale)
    _rounds_run = 0                 # rounds of the core, on either thread
    _select_rounds = 0              # rounds after the application thread's own select (tests, profiling)
    _handovers = 0                  # take-overs by the application thread (tests, profiling)
    _takebacks = 0                  # take-overs by the network thread (tests, profiling)

    if TYPE_CHECKING:                     # ClientOps', which comes after this class in the MRO
        def _collect_events(self) -> bool: ...
        def _poll_begin(self, timeout: Optional[float]) -> float: ...
        def _poll_look(self, end: float, take: Any, arg: Any) -> Any: ...
        def _close_steps(self, timeout: Optional[float]) -> Steps[None]: ...
        def _dispatch_steps(self) -> Steps[None]: ...
        def close(self, timeout: Optional[float] = None) -> None: ...      # the client's, documented there

    def wakeup(self) -> None:
        """Make a blocked poll() raise WakeupError (thread-safe)."""
        with self._lock:
            self._wakeup = True
            self._notify()
            app_selects = self._app_selects
        if app_selects:
            self._net.wake()            # poll() waits in select, not on the Condition

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _close_client(self, timeout: Optional[float]) -> None:
        """The client's close(): its core's close steps, then the network
        thread stops; idempotent."""
        if self._closed:
            return
        # Another thread's close() is refused before anything is stopped (as
        # Java's ConcurrentModificationException): the owner's poll() goes on.
        self._enter()
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

    def _start_network(self, core: Any, thread_name: str, recv_size: int = 1 << 18,
                       deadline_timer: bool = False) -> None:
        # The rounds run on the application's thread send requests whose
        # timeouts (request.timeout.ms, more for a Fetch) are later than the
        # network thread's next wake-up if it never sleeps longer than
        # request.timeout.ms: they do not need to wake it. (Otherwise each
        # Fetch sent by poll() would, the network thread sleeping towards the
        # metadata refresh.) A request given a shorter timeout (a commit with
        # its own) still wakes it.
        self._longest_sleep_ms = core.config.request_timeout_ms
        super()._start_network(core, thread_name, recv_size, deadline_timer)
        self._standby = threading.Condition(self._lock)

    def _stop_network(self) -> None:
        with self._lock:
            self._standby.notify()      # a standing-by network thread sees _stop
        super()._stop_network()

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

    def _poll_now(self, timeout: Optional[float], take: Any, arg: Any) -> Any:
        """poll()'s fast path: the looks and waits of the shared poll
        (:meth:`kio._shared.client_ops.ClientOps._poll_steps`) in a plain loop,
        without a generator, a Stepper or the runner per call - at a low rate
        a poll() is one look, one wait in select (the answer read and fed to
        the core there), one look that takes its records, and the round that
        sends the next Fetch. Everything else is the steps' own: the core
        decides what is due (``_poll_begin``: the max.poll.interval.ms timer,
        an auto-commit; ``_poll_look``: closed, wakeup(), the core's errors,
        the records), the waits are :meth:`_run`'s (the round a kick asked
        for, then :meth:`_wait`), and callbacks the collected events call for
        run through the steps runner (rebalance listeners, commit callbacks:
        rare) before the next look, as the steps run them."""
        self._enter()                     # another thread is refused before it counts
        self._runs += 1
        lock = self._lock
        try:
            with lock:
                self._waiters += 1
                seen = self._changes
            try:
                end = self._poll_begin(timeout)
                while True:
                    out = self._poll_look(end, take, arg)
                    if out is None:
                        if not self._before_wait():
                            seen = self._wait(end, seen)
                    elif out is DISPATCH:
                        ThreadDriver._run(self, self._dispatch_steps())
                    else:
                        return out
            finally:
                with lock:
                    self._waiters -= 1
        finally:
            self._runs -= 1
            self._before_wait()

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
        work, deadline, errors = None, None, []
        with self._lock:
            if self._stop or self._fatal is not None or self._round_error is not None \
                    or self._loop_ended:
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
                    self._note_round(deadline)
                    planned = self._planned
                    wake = net.update_interest() or bool(actions) or work is not None \
                        or self._core.client.has_errors() \
                        or (deadline is not None and (planned is None or deadline < planned))
                    self._rounds_here += 1
                except Exception as e:  # noqa: BLE001 - failed where the network thread fails it
                    self._round_error = e
                    work, wake = None, True
                if not self._net_selects:
                    # Standing by, it needs no wake-up for a socket (the
                    # application waits next, or it takes the sockets back
                    # and registers what they wait for), only to look at its
                    # timer again - the core's, not what the network thread
                    # planned before it stood by - or to stop or fail; the
                    # error callbacks run here.
                    if self._stop or self._round_error is not None or work is not None:
                        self._standby.notify()
                    else:
                        self._standby_sees(deadline)
                    if wake:
                        errors = error_callbacks(self._core)
                        wake = False
        if wake:
            net.wake()
        if work is not None:
            self._outside_lock(work)
        for cb, error in errors:
            call_error_cb(cb, error, can_await=False)

    def _before_wait(self) -> bool:
        if not self._round_wanted:
            return False
        self._round_wanted = False
        self._round_here()
        return True

    # -- who waits on the sockets (see the class docstring) ---------------------------------------
    def _wait(self, deadline: float, seen: int) -> int:
        # The application thread's wait: in select itself when the network
        # thread stands by, else on the Condition, having asked the network
        # thread for the sockets. An answer read here is decoded (its
        # callbacks run) as it is fed to the core, so the steps can take its
        # records at once: the core's round that plans the next Fetch waits
        # until they did (poll()'s round before it returns), and one runs
        # here before the next select only if a request completed (or a
        # connection changed) since the last. A partial read of a large
        # answer selects again, with no round and no look by the steps.
        net = self._net
        client = self._core.client
        lock = self._lock
        while True:
            with lock:
                if self._changes != seen:
                    return self._changes
                left = None if deadline == INF else (deadline - now_ms()) / 1000.0    # Stepper.seconds_left
                if left is not None and left <= 0:
                    return self._changes
                if self._net_selects or self._stop or self._fatal is not None or self._round_error is not None \
                        or self._loop_ended:
                    if self._net_selects and not self._sockets_wanted and not self._stop:
                        self._sockets_wanted = True      # handed over after its next round (_select)
                        net.wake()
                    self._changed.wait(left)
                    return self._changes
                round_due = self._app_round_due or self._app_rounds_seen != self._rounds_run
                if not round_due:
                    self._app_selects = True
                    self._app_call_end = None if left is None else deadline     # (_standby_wake_at)
                    timeout = sleep_time(self._app_deadline, now_ms())
                    if left is not None and (timeout is None or left < timeout):
                        timeout = left
            if round_due:
                # The steps look again after it: what it completed (a close,
                # a commit) need not notify - the progress it follows from
                # was seen when the answer was read.
                return self._app_round(timer=False)
            try:
                events = net.select(timeout)
            except BaseException:
                with lock:
                    self._app_selects = False
                    self._app_waited_at = now_ms()
                raise
            with lock:
                self._app_selects = False
                self._app_waited_at = now = now_ms()
                if events:
                    progress = client.progress
                    try:
                        net.handle(events, now)
                        self._after_round(False)            # the answer's records and events, for the steps
                    except Exception as e:  # noqa: BLE001 - failed where the network thread fails it
                        self._fail_round(e)
                    if client.progress != progress:
                        self._app_round_due = True
                    if self._changes != seen:
                        return self._changes            # (the loop's first look, without a second lock)
            if not events:
                return self._app_round(timer=True)      # the core's timer, or the step's deadline

    def _app_round(self, timer: bool) -> int:
        """The network side's round on the application thread, which has the
        sockets (the network thread stands by): poll the core, write, collect
        its events, note its next deadline for the select. A failure is
        handed to the network thread, which fails the client. Returns the
        notifications so far."""
        net, core = self._net, self._core
        work, errors = None, []
        with self._lock:
            try:
                now = now_ms()
                actions = core.poll(now)
                if actions:
                    net.apply(actions, now)
                net.write_all(now)
                work = self._after_round(timer)
                deadline = core.next_deadline(now)
                self._note_round(deadline)
                self._standby_sees(deadline)
                net.update_interest()
                errors = error_callbacks(core)
                self._select_rounds += 1
            except Exception as e:  # noqa: BLE001 - failed where the network thread fails it
                self._fail_round(e)
            changes = self._changes
        if work is not None:
            self._outside_lock(work)
        for cb, error in errors:
            call_error_cb(cb, error, can_await=False)
        return changes

    def _standby_sees(self, deadline: Optional[float]) -> None:
        """Lock held, after a round on the application thread: wake the
        standing-by thread if it sleeps past ``_handback_ms`` after the
        core's new ``deadline`` - should the application leave now, that
        timer must not wait for the stand-by's later look. (Not per poll()
        in the steady state: the stand-by already sleeps towards the core's
        timer, which such a round seldom moves earlier.)"""
        until = self._standby_until
        if deadline is not None and until is not None and deadline + self._handback_ms < until:
            self._standby.notify()

    def _note_round(self, deadline: Optional[float]) -> None:
        """Lock held, after a round on the application thread: the core's
        next deadline is what its select waits for, until another round
        (the network thread's timer rounds; _after_round counts them)."""
        self._app_deadline = deadline
        self._app_round_due = False
        self._app_rounds_seen = self._rounds_run

    def _fail_round(self, exc: BaseException) -> None:
        """Lock held: a round on the application thread raised; the network
        thread raises it from its loop (and fails the client as for its own)."""
        self._round_error = exc
        self._standby.notify()

    def _select(self, deadline: Optional[float]) -> list:
        # The network thread's wait: on the sockets, unless the application
        # waits there (then it stands by). [] (no I/O) makes its loop run a
        # round: a timer that fell due, or the sockets just taken back.
        with self._lock:
            if self._sockets_wanted and not self._stop:
                self._sockets_wanted = False
                self._net_selects = False
                self._handovers += 1
                self._app_waited_at = now_ms()
                self._notify()
            if not self._net_selects:
                self._stand_by()
                return []
        return self._net.select(sleep_time(deadline, now_ms()))

    def _stand_by(self) -> None:
        """Lock held, on the network thread while the application thread
        has the sockets: sleep until the core's next timer (when the
        application is not in select, which would run it), or until the
        application has stayed out of select for ``_handback_ms`` (then take
        the sockets back), or until the client stops or a round failed."""
        timer_ran = self._standby_timer
        self._standby_timer = False
        while not self._stop and self._round_error is None:
            now = now_ms()
            if self._app_selects:
                until = self._standby_wake_at(now)
            else:
                back_at = self._app_waited_at + self._handback_ms
                due = self._core.next_deadline(now)
                # (a timer still due after the round it was given needs I/O:
                # take the sockets back rather than spin)
                if now >= back_at or (timer_ran and due is not None and due <= now):
                    self._net_selects = True
                    self._takebacks += 1
                    break
                if due is not None and due <= now:
                    self._standby_timer = True
                    break
                until = back_at if due is None else min(back_at, due)
            timer_ran = False
            self._standby_until = until
            self._standby.wait((until - now) / 1000.0)
        self._standby_until = None

    def _standby_wake_at(self, now: float) -> float:
        """Lock held, the application thread in select: when the standing-by
        thread looks again - ``_handback_ms`` after the first of the core's
        next timer and the end of the application's blocking call (poll()'s
        timeout). Until the call ends, only a timer falling due can end the
        application's selects for good (it returns records, or a listener
        runs); if the application is still gone ``_handback_ms`` later, the
        stand-by runs that timer or takes the sockets back. So it need not
        be told when poll() returns (no notify per poll()): while polls keep
        coming, each look finds the application in select again and sleeps
        towards the next timer. The cost: after a poll() that returned
        early, the take-over can come as late as that timer (a heartbeat,
        an auto-commit, a request's timeout) or the call's end, instead of
        ``_handback_ms`` after the return - the timers themselves are at
        most ``_handback_ms`` late. With neither, it looks after
        request.timeout.ms (the network thread's longest sleep)."""
        end = self._app_call_end
        due = self._core.next_deadline(now)
        if due is not None and (end is None or due < end):
            end = due
        if end is None:
            end = now + (self._longest_sleep_ms or 0.0)
        return max(end, now) + self._handback_ms

    def _kick(self) -> None:
        # The application changed the core. Inside a blocking call on the
        # owner thread the round waits for _before_wait; a plain method
        # (assign, seek, resume) wakes the network thread if it waits on the
        # sockets, whose one round covers any number of them; if it stands
        # by, the application's next wait runs the round (or the network
        # thread, when it takes the sockets back).
        if (self._runs or not self._net_selects) and threading.get_ident() == self._owner:
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
        self._rounds_run += 1           # the core moved: the deadline the application noted is stale
        fresh = self._collect_events()
        moved = self._network_moved(timer)
        if self._waiters and (fresh or moved):
            self._notify()
