"""Pieces every driver (threading, asyncio, trio) shares and that do no I/O."""
from __future__ import annotations

import errno
import math
import socket
import time
from typing import Any, Generator, Optional, Tuple, TypeVar

from kproto.consumer.membership import GroupFatalError, PartitionsAssigned, PartitionsLost, PartitionsRevoked

__all__ = ["INF", "Steps", "next_step", "now_ms", "wall_ms", "sleep_time", "rebalance_calls", "resolve", "open_socket", "connect_error"]

#: a wait without a deadline (a step of a blocking operation, see kio._consumer_ops)
INF = math.inf
_T = TypeVar("_T")
#: a blocking operation: yields waits (a float deadline) or awaitables, returns the result
Steps = Generator[Any, Any, _T]


def next_step(steps: Steps[Any], value: Any, error: Optional[BaseException]) -> Tuple[bool, Any]:
    """Hand a blocking operation the outcome of its last step (``value``, or
    ``error`` thrown in): ``(True, result)`` once it returned, else ``(False,
    next step)``. The runners of every driver go through here."""
    try:
        return False, (steps.send(value) if error is None else steps.throw(error))
    except StopIteration as stop:
        return True, stop.value


def now_ms() -> float:
    """The cores' clock: monotonic milliseconds."""
    return time.monotonic() * 1000.0


def wall_ms() -> int:
    """Record timestamps: wall-clock milliseconds."""
    return time.time_ns() // 1000000


def sleep_time(deadline, now):
    """How long a driver waits for I/O: until the core's ``next_deadline``
    (seconds, never negative), or None - no timer at all - when the core has
    none. A wake-up (a socket, the application) ends the wait earlier; a
    fixed polling interval would only burn CPU, and hide a core that forgot
    to report a deadline."""
    return None if deadline is None else max(0.0, (deadline - now) / 1000.0)


def rebalance_calls(events, on_assign, on_revoke, on_lost):
    """What the application's listeners must be told, in order:
    ([(listener, partitions)], revoked, fatal_error). ``on_lost`` defaults to
    ``on_revoke`` (Java's onPartitionsLost); ``revoked`` says the core waits
    for ``rebalance_listener_done`` once they have run."""
    calls = []
    revoked = False
    fatal = None
    for ev in events:
        if isinstance(ev, PartitionsRevoked):
            revoked = True
            if on_revoke is not None:
                calls.append((on_revoke, list(ev.partitions)))
        elif isinstance(ev, PartitionsLost):
            fn = on_lost or on_revoke
            if fn is not None:
                calls.append((fn, list(ev.partitions)))
        elif isinstance(ev, PartitionsAssigned):
            if on_assign is not None:
                calls.append((on_assign, list(ev.partitions)))
        elif isinstance(ev, GroupFatalError):
            fatal = fatal or ev.error
    return calls, revoked, fatal


def resolve(host, port):
    """The addresses of ``host``, as ``open_socket`` takes them. Blocking (DNS):
    the threading drivers call it on their network thread; the async drivers
    resolve through their framework instead (``backend.getaddrinfo``), which
    runs it without blocking the event loop."""
    return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)


def open_socket(host, port, infos=None):
    """A non-blocking TCP socket with its connect started: (socket, None),
    or (None, OSError) when it failed at once. ``infos``: the result of
    :func:`resolve` (or the framework's getaddrinfo); None resolves here."""
    try:
        if infos is None:
            infos = resolve(host, port)
        family, stype, proto, _, addr = infos[0]
        sock = socket.socket(family, stype, proto)
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        rc = sock.connect_ex(addr)
    except OSError as e:
        return None, e
    if rc not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EAGAIN):
        sock.close()
        return None, OSError(rc, f"connect to {host}:{port}: {errno.errorcode.get(rc, rc)}")
    return sock, None


def connect_error(sock):
    """After the socket became writable: the connect's error, or None."""
    err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    return OSError(err, f"connect failed: {errno.errorcode.get(err, err)}") if err else None
