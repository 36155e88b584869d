"""The driver contract: what every sans-IO core (producer, consumer, admin,
share consumer) offers the code that owns its sockets and its clock.

A driver, whatever its I/O framework, does only this (``examples/
selectors_loop.py`` is a complete one in about a hundred lines):

1. ``actions = core.poll(now)``: open a socket for each ``Connect(node, host,
   port)`` and close the one named by each ``Close(node, reason)``.
2. Report what the sockets did: ``core.connected(node, now)`` once a socket is
   open, ``core.received(node, data, now)`` with every chunk read,
   ``core.disconnected(node, now, exc)`` when one fails or closes.
3. For each node in ``core.nodes_with_output()``, write ``core.output(node)``
   and report ``core.sent(node, n, now)`` with the number of bytes written.
4. Take what the core completed from ``core.events()`` and hand it to the
   application (wake its waiters, run its callbacks).
5. Sleep until a socket is readable/writable or ``core.next_deadline(now)``
   (an absolute time in the core's milliseconds; ``None``: no timer, only I/O
   or a call from the application wakes the core), for :func:`wait_ms`: the
   deadline's round may come up to :data:`TIMER_RESOLUTION_MS` early, never late.

``now`` is always the caller's monotonic clock in milliseconds; the core never
reads a clock, opens a socket or starts a thread. The methods the application
calls (``send``, ``subscribe``, ``commit``...) are each core's own.
"""
from __future__ import annotations

import math
from typing import Iterable, List, Optional, Protocol, Union, runtime_checkable

from kproto.client import Close, Connect

__all__ = ["Action", "SansIOCore", "Connect", "Close", "TIMER_RESOLUTION_MS", "PRECISE_TIMER_MARGIN_MS", "wait_ms",
           "precise_timer_at"]

#: The drivers' timers count whole milliseconds: epoll_wait and poll take
#: milliseconds, and Python's selectors and the asyncio and trio loops round a
#: wait *up* to the next one, so a 4.3 ms wait for a linger timer slept 5 ms
#: and every batch left up to a millisecond after its linger.ms (0.2-0.6 ms
#: measured; librdkafka rounds down instead). Drivers round *down*
#: (:func:`wait_ms`): a deadline's round comes up to this much early, and
#: the producer counts a batch whose linger ends within this as due (Java's
#: clock is whole milliseconds too: its batches leave within the last one).
TIMER_RESOLUTION_MS = 1.0

#: What ``poll`` asks the driver to do with sockets.
Action = Union[Connect, Close]


@runtime_checkable
class SansIOCore(Protocol):
    """The methods every core implements for its driver (see the module text)."""

    def poll(self, now: float) -> List[Action]:
        """Advance timers and state machines; the socket actions to carry out."""
        ...

    def next_deadline(self, now: float) -> Optional[float]:
        """When ``poll`` must run next at the latest (None: only on I/O)."""
        ...

    def events(self) -> list:
        """Results completed since the last call, for the application."""
        ...

    def connected(self, node: int, now: float) -> None:
        """The socket to ``node`` is open (after TLS, if any)."""
        ...

    def received(self, node: int, data: bytes, now: float) -> None:
        """Bytes read from ``node``'s socket."""
        ...

    def disconnected(self, node: int, now: float, exc: Optional[BaseException] = None) -> None:
        """``node``'s socket failed or closed (``exc``: why, if known)."""
        ...

    def nodes_with_output(self) -> Iterable[int]:
        """The nodes with bytes waiting to be written."""
        ...

    def output(self, node: int) -> bytes:
        """The bytes to write to ``node`` (not consumed until ``sent``)."""
        ...

    def sent(self, node: int, n: int, now: float) -> None:
        """``n`` bytes of ``output(node)`` were written."""
        ...


def wait_ms(deadline: Optional[float], now: float) -> Optional[float]:
    """How long a driver waits for I/O (ms, never negative) before the
    core's ``deadline`` (``next_deadline``; None: no timer, None returned).

    Whole milliseconds, rounded down, so that the timer, which cannot wait
    for a fraction, never ends after the deadline: the round comes up to
    :data:`TIMER_RESOLUTION_MS` early. Under one millisecond the rest is
    returned as it is: the timer makes it a whole one (late by less than
    that) rather than a wait of 0, which would spin until the deadline."""
    if deadline is None:
        return None
    left = deadline - now
    if left <= 0.0:
        return 0.0
    if left < TIMER_RESOLUTION_MS:
        return left
    return math.floor(left / TIMER_RESOLUTION_MS) * TIMER_RESOLUTION_MS


#: How much a precise timer (:func:`precise_timer_at`) fires inside the window
#: the core counts a deadline as come in: float rounding of the clock's
#: milliseconds, and the timer's nanoseconds truncated.
PRECISE_TIMER_MARGIN_MS = 0.05


def precise_timer_at(deadline: float) -> float:
    """When a driver's precise timer (one that waits fractions of a
    millisecond, as Linux's timerfd) should fire for the core's ``deadline``
    (ms): :data:`TIMER_RESOLUTION_MS` before it, less a hair. The core counts
    a deadline as come that much early (a round there does what it asked
    for: a batch whose linger ends within the tick is sent), and a
    whole-millisecond wait (:func:`wait_ms`) ends up to one tick early: the
    round comes as early as it may, as the whole-millisecond timer's measured
    (a batch left 4.2 ms after it opened at linger.ms 5, median) - the batch's
    latency does not grow with the timer that ends it."""
    return deadline - TIMER_RESOLUTION_MS + PRECISE_TIMER_MARGIN_MS
