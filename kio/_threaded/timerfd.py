"""A one-shot timer one thread sets and another thread's ``epoll`` waits on:
Linux's ``timerfd``, so the application's thread can move the network
thread's wake-up earlier without waking it now.

Why (issue 27): at 1,000 records/s a batch that ``send()`` opens while no
Produce is in flight must make the network thread wake at the batch's linger
deadline. A byte on the wake-up socketpair did that by waking the thread at
once - a ``send`` syscall on the application's thread, then on the network
thread an ``epoll_wait`` return, the GIL, a ``recv``, the deadline worked out
again and a second ``epoll_wait``: ~30 µs of CPU on a cold cache, for half
of the batches. Setting this timer is one ``timerfd_settime`` call on the
application's thread; the network thread sleeps on until the timer fires,
when its round is due anyway.

Python has ``os.timerfd_create`` from 3.13; before, the C library's functions
are called through ``ctypes`` (imported only when a timer is made: the
import's memory is not paid by a process that makes none). Where there is no
timerfd (not Linux), :func:`new_deadline_timer` returns None and the driver
wakes its thread as before.
"""
from __future__ import annotations

import os
from typing import Any, Optional

__all__ = ["DeadlineTimer", "new_deadline_timer"]

_CLOCK_MONOTONIC = 1            # <time.h>: the clock of time.monotonic() on Linux
_TFD_TIMER_ABSTIME = 1          # <sys/timerfd.h>
_TFD_NONBLOCK = os.O_NONBLOCK if hasattr(os, "O_NONBLOCK") else 0
_TFD_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class DeadlineTimer:
    """A non-blocking timerfd on ``CLOCK_MONOTONIC`` (``time.monotonic()``'s
    clock): :attr:`fd` turns readable once the time given to :meth:`set`
    has come; :meth:`take` makes it unreadable again. Setting it again
    replaces the time (and forgets an expiry not taken yet)."""

    fd: int

    def __init__(self) -> None:
        create = getattr(os, "timerfd_create", None)        # Python 3.13+
        if create is not None:
            settime_ns = getattr(os, "timerfd_settime_ns")
            self.fd = fd = create(_CLOCK_MONOTONIC, flags=_TFD_NONBLOCK | _TFD_CLOEXEC)

            def settime(ns: int) -> None:
                settime_ns(fd, flags=_TFD_TIMER_ABSTIME, initial=ns)
            self._settime = settime
            return
        self._settime = _ctypes_timer(self)

    def set(self, at_ms: float) -> None:
        """Fire at ``at_ms`` (``time.monotonic()`` in milliseconds; a time
        already past fires at once)."""
        # 0 would disarm the timer: a time at the clock's start fires at its first nanosecond
        self._settime(max(1, int(at_ms * 1_000_000.0)))

    def take(self) -> None:
        """Read the expirations (the fd is level-triggered: unread, every
        wait would return at once)."""
        try:
            os.read(self.fd, 8)
        except (BlockingIOError, InterruptedError):
            pass                  # set again since it fired: nothing to read

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _ctypes_timer(timer: DeadlineTimer) -> Any:
    """Create ``timer``'s fd through the C library; returns its set function
    (nanoseconds of ``CLOCK_MONOTONIC``). Raises OSError when there is no timerfd."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    try:
        create, settime_c = libc.timerfd_create, libc.timerfd_settime
    except AttributeError:
        raise OSError("this C library has no timerfd") from None
    create.restype = settime_c.restype = ctypes.c_int
    fd = create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"timerfd_create: {os.strerror(err)}")
    timer.fd = fd
    # struct itimerspec {it_interval, it_value}, each {tv_sec, tv_nsec} (two
    # C longs on Linux), as one array written in place for every set: the
    # interval stays 0 (one-shot). No argtypes: ctypes then passes the ints
    # and the pointer as they are, half the cost of a call that checks them
    # (~1 µs a set with the syscall).
    spec = (ctypes.c_long * 4)()
    ref = ctypes.byref(spec)

    def settime(ns: int) -> None:
        spec[2], spec[3] = divmod(ns, 1_000_000_000)
        if settime_c(fd, _TFD_TIMER_ABSTIME, ref, None) < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_settime: {os.strerror(err)}")
    return settime


def new_deadline_timer() -> Optional[DeadlineTimer]:
    """A :class:`DeadlineTimer`, or None where the system has no timerfd."""
    try:
        return DeadlineTimer()
    except (OSError, AttributeError, ImportError):
        return None
