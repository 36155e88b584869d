"""Pieces every driver (threading, asyncio, trio) shares and that do no I/O."""
from __future__ import annotations

import errno
import logging
import math
import socket
import time
import types
from typing import Any, Callable, ClassVar, Generator, Optional, Type, TypeVar

from kproto.driver import wait_ms
from kproto.errors import KafkaError

__all__ = ["INF", "ClosedChecks", "Steps", "Stepper", "now_ms", "wall_ms", "sleep_time", "resolve", "open_socket", "connect_error",
           "error_callbacks", "call_error_cb", "runs_body_of", "RecvBuffer"]

#: a wait without a deadline (a step of a blocking operation, see kio._shared.consumer_ops)
INF = math.inf
_T = TypeVar("_T")
#: a blocking operation: yields waits (a float deadline) or awaitables, returns the result
Steps = Generator[Any, Any, _T]
_F = TypeVar("_F", bound=Callable[..., Any])


class ClosedChecks:
    """The checks every client's shared method bodies start with (the
    consumers', the admin's): once close() ran, or the driver's network side
    (thread, task, or the blocking admin's loop) failed, a call raises
    ``_closed_error`` saying which."""

    #: the client in messages ("the consumer is closed")
    _what: ClassVar[str] = "client"
    _closed_error: ClassVar[Type[KafkaError]] = KafkaError
    _closed: bool

    @property
    def _failure(self) -> Optional[BaseException]:
        """What ended the driver's network side (the client is unusable), or None: the driver's."""
        raise NotImplementedError

    def _check_failed(self) -> None:
        failure = self._failure
        if failure is not None:
            raise self._closed_error(f"the {self._what}'s network side failed: {failure!r}") from failure

    def _check_open(self) -> None:
        """Closed (or failed): every call but the state getters and close() raises. The
        callbacks close() runs may still seek, commit..."""
        self._check_failed()
        if self._closed:
            raise self._closed_error(f"the {self._what} is closed")


def runs_body_of(shared: Callable[..., Any]) -> Callable[[_F], _F]:
    """Decorates a public method whose body is ``shared`` (a function of the
    same parameters): calls run ``shared``'s code with no wrapper frame (the
    per-record path pays for none), while ``help()``, ``inspect`` and type
    checkers see the public method's name, precise annotations and docstring."""
    def public(declared: _F) -> _F:
        f = types.FunctionType(shared.__code__, shared.__globals__, declared.__name__,
                               shared.__defaults__, shared.__closure__)
        f.__kwdefaults__ = shared.__kwdefaults__
        f.__qualname__ = declared.__qualname__
        f.__module__ = declared.__module__
        f.__doc__ = declared.__doc__
        f.__annotations__ = dict(declared.__annotations__)
        return f  # type: ignore[return-value]
    return public


class Stepper:
    """Drives a blocking operation (a generator of steps, see
    kio._shared.consumer_ops) for a driver's runner: iterating gives its steps;
    ``reply(value)`` or ``fail(error)`` hands a step's outcome back before the
    next one; ``result`` is what it returned. Every driver's runner goes
    through here, so they differ only in how they wait."""

    __slots__ = ("_steps", "_value", "_error", "result")

    def __init__(self, steps: Steps[Any]) -> None:
        self._steps = steps
        self._value: Any = None
        self._error: Optional[BaseException] = None
        self.result: Any = None

    def __iter__(self) -> "Stepper":
        return self

    def __next__(self) -> Any:
        value, error = self._value, self._error
        self._value = self._error = None
        try:
            return self._steps.send(value) if error is None else self._steps.throw(error)
        except StopIteration as stop:
            self.result = stop.value
            raise StopIteration from None

    def reply(self, value: Any) -> None:
        self._value = value

    def fail(self, error: BaseException) -> None:
        self._error = error

    @staticmethod
    def seconds_left(deadline: float) -> Optional[float]:
        """A wait step's time left in seconds (None: no deadline)."""
        return None if deadline == INF else (deadline - now_ms()) / 1000.0


def now_ms() -> float:
    """The cores' clock: monotonic milliseconds."""
    return time.monotonic() * 1000.0


def wall_ms() -> int:
    """Record timestamps: wall-clock milliseconds."""
    return time.time_ns() // 1000000


def sleep_time(deadline, now):
    """How long a driver waits for I/O: until the core's ``next_deadline``
    (seconds, never negative; whole milliseconds rounded down, see
    :func:`kproto.driver.wait_ms`), or None - no timer at all - when the core
    has none. A wake-up (a socket, the application) ends the wait earlier; a
    fixed polling interval would only burn CPU, and hide a core that forgot
    to report a deadline."""
    left = wait_ms(deadline, now)
    return None if left is None else left / 1000.0


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


_NO_ERRORS: list = []      # error_callbacks' answer when nothing was reported (never appended to)


def error_callbacks(core) -> list:
    """The ``error_cb`` calls due (network side, the driver's lock held): one
    ``(error_cb, error)`` per error the core's NetworkClient reported
    (``take_errors``); empty without ``error_cb``."""
    client = core.client
    if not client.has_errors():
        return _NO_ERRORS       # every round: no new list, no config lookup (a missing setting raises inside)
    errors = client.take_errors()
    cb = getattr(core.config, "error_cb", None)
    return [(cb, e) for e in errors] if cb is not None else []


def is_awaitable(value: Any) -> bool:
    """``inspect.isawaitable``, importing inspect on first use (not with the client)."""
    import inspect
    return inspect.isawaitable(value)


def call_error_cb(cb, error, can_await=True):
    """Call ``error_cb(error)`` (without the lock): what it returns (an
    awaitable for the async drivers to await); what it raises is logged, it
    must not break the network side."""
    try:
        result = cb(error)
    except Exception:  # noqa: BLE001 - the application's callback
        logging.getLogger("kio").exception("error_cb raised for %r", error)
        return None
    # inspect is imported only for a callback that returned something: it is
    # a megabyte of modules a client that never sees one does not need.
    if not can_await and result is not None and is_awaitable(result):
        getattr(result, "close", lambda: None)()
        logging.getLogger("kio").warning("error_cb %r returned an awaitable: a threading client cannot "
                                         "await it; use kio.aio or kio.trio for coroutine functions", cb)
        return None
    return result


class RecvBuffer:
    """Reads from sockets into one buffer kept for the client's life.

    ``sock.recv(size)`` allocates ``size`` bytes per call: above glibc's mmap
    threshold (128 KiB; a receive size is 256 KiB or 1 MiB) that is an mmap,
    an mremap down to what arrived and a munmap - three syscalls and fresh
    pages per read, and at a low rate a read per response. Here the kernel
    fills the kept buffer and only what arrived is copied out. One reader at
    a time: the bytes are copied out before the caller can yield."""

    def __init__(self, size: int) -> None:
        self._buf = bytearray(size)
        self._view = memoryview(self._buf)

    def recv(self, sock: Any) -> bytes:
        """What ``sock.recv(size)`` returns (b"" at end of stream; its exceptions too)."""
        n = sock.recv_into(self._buf)
        return bytes(self._view[:n])
