"""The selector-based socket loop shared by the threading drivers.

It owns the sockets of one sans-IO core (``ProducerCore``, ``ConsumerCore``:
anything with the driver contract of :mod:`kproto.client`) and does nothing
but I/O: open a non-blocking connection for a ``Connect`` action, close the
socket for a ``Close``, write ``core.output(node)`` and report ``sent``, feed
what it reads to ``received``, report ``connected`` / ``disconnected`` (I/O
error, EOF, failed connect), and wait in ``select`` until a socket is ready,
the core's deadline comes or another thread calls :meth:`wake`.

No retries, timeouts or protocol logic live here: those are the core's.
The caller serialises access (the drivers hold their lock around every call
except :meth:`select` and :meth:`wake`).

The wait is ``select.epoll.poll`` itself where there is one (Linux): it
returns ``(fd, mask)`` pairs built in C, where ``selectors.select`` ran ~70
bytecodes a wait to turn them into key/event tuples (a quiet producer waits
twice a batch). Elsewhere :class:`_SelectorPoller` gives ``selectors``' best
selector the same face.

With ``deadline_timer`` (the producer's) the loop also waits on a
:class:`kio._threaded.timerfd.DeadlineTimer`: another thread moves the wait's
end earlier with :meth:`SocketLoop.wake_by` (one syscall) instead of waking
the waiting thread to work the new end out itself.
"""
from __future__ import annotations

import select as _select
import selectors
import socket
from typing import Optional

from kio._shared.common import RecvBuffer, connect_error, open_socket
from kio._shared.tls import context_for, socket_errors, tls_error
from kio._threaded.timerfd import new_deadline_timer
from kproto.client import Close, Connect
from kproto.driver import precise_timer_at

__all__ = ["SocketLoop"]

#: the masks of :meth:`SocketLoop.select`'s pairs: epoll's bits (EPOLLIN, EPOLLOUT), on any platform
_READ, _WRITE = 0x001, 0x004
#: what else a ready mask may hold: an error or hang-up reads and writes (as selectors maps them)
_NOT_READ, _NOT_WRITE = ~_READ, ~_WRITE


class _SelectorPoller:
    """``select.epoll``'s interface (register/modify/unregister by file
    descriptor, ``poll`` giving ``(fd, mask)`` pairs with epoll's bits) over
    ``selectors.DefaultSelector``, for platforms with no epoll."""

    def __init__(self) -> None:
        self._sel = selectors.DefaultSelector()

    @staticmethod
    def _events(mask: int) -> int:
        return (selectors.EVENT_READ if mask & _READ else 0) | (selectors.EVENT_WRITE if mask & _WRITE else 0)

    def register(self, fd: int, mask: int) -> None:
        self._sel.register(fd, self._events(mask))

    def modify(self, fd: int, mask: int) -> None:
        self._sel.modify(fd, self._events(mask))

    def unregister(self, fd: int) -> None:
        self._sel.unregister(fd)

    def poll(self, timeout: float = -1) -> list:
        if timeout is not None and timeout < 0:
            timeout = None
        return [(key.fd, (_READ if events & selectors.EVENT_READ else 0)
                 | (_WRITE if events & selectors.EVENT_WRITE else 0))
                for key, events in self._sel.select(timeout)]

    def close(self) -> None:
        self._sel.close()


def _new_poller():
    if hasattr(_select, "epoll"):
        assert (_select.EPOLLIN, _select.EPOLLOUT) == (_READ, _WRITE)
        return _select.epoll()
    return _SelectorPoller()        # pragma: no cover - not Linux


class SocketLoop:
    """The sockets of one core and the wait on them (see the module docstring).
    :meth:`select` gives ``(fd, mask)`` pairs; the wake-up pipe's is
    :attr:`wake_fd`, the deadline timer's :attr:`timer_fd` (-1: none)."""

    def __init__(self, core, recv_size: int = 1 << 18, deadline_timer: bool = False):
        self.core = core
        self.recv_size = recv_size
        self._recv = RecvBuffer(recv_size).recv
        self._poller = _new_poller()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self.wake_fd: int = self._wake_r.fileno()
        self._poller.register(self.wake_fd, _READ)
        self._poll = self._poller.poll
        self._fd_node: dict = {}         # registered socket's fd -> node
        self.wake_pending = False
        self.woken = False               # a wake-up arrived (the caller resets it)
        # A wake-up since the caller last took this flag asked for a round
        # (wake(); the caller resets it): one that did not (wake(round=False))
        # only wants the caller to look at its deadline again.
        self.round_wanted = False
        # The deadline timer (wake_by): the core's deadline it is set for,
        # until the caller's loop takes its expiry (None: not set, or fired
        # and taken). Only lowered while set: the loop that waits on it may
        # have let it replace a later deadline of its own (ThreadDriver._select).
        self.timer_due: Optional[float] = None
        self._timer = new_deadline_timer() if deadline_timer else None
        self.timer_fd: int = -1
        if self._timer is not None:
            self.timer_fd = self._timer.fd
            self._poller.register(self.timer_fd, _READ)
        self.socks: dict = {}            # node -> socket
        self._connecting: set = set()
        self._interest: dict = {}        # node -> registered event mask
        # Every registered socket waits for reads only (as the last walk of
        # update_interest left them; cleared by a socket registered for a
        # write): a round with no output then need not walk them.
        self._all_read = True
        # TLS (security.protocol SSL / SASL_SSL): sockets are wrapped once
        # connected; _handshaking maps a node to what its handshake waits for.
        self.tls = context_for(core.config)
        # what a socket operation may raise that means "later" or "TLS failed"
        # (ssl's classes only when TLS is on: see kio._shared.tls)
        self._retry_errors, self._tls_errors = socket_errors(self.tls)
        self._handshaking: dict = {}
        self._addr: dict = {}            # node -> (host, port), for TLS names and errors

    # -- any thread ------------------------------------------------------------------
    def wake(self, round: bool = True) -> None:
        """Make a pending or the next :meth:`select` return at once;
        ``round`` False: the caller's loop need only compute its deadline
        again (see :attr:`round_wanted`), not run a round of its core."""
        if round:
            # Set before the byte is sent: the loop takes the flag after it
            # read the byte, so it sees this one or the next select returns.
            self.round_wanted = True
        if not self.wake_pending:
            self.wake_pending = True
            try:
                self._wake_w.send(b"\0")
            except OSError:
                pass

    def wake_by(self, deadline: float) -> bool:
        """With the caller's lock: make the loop's wait end by the core's
        ``deadline`` (ms) - a batch due then - without waking it now: the
        deadline timer, set a little before it (``kproto.driver.precise_timer_at``)
        unless it is already set for that or earlier. False when there is no
        deadline timer: the caller wakes the loop instead (:meth:`wake`)."""
        timer = self._timer
        if timer is None:
            return False
        due = self.timer_due
        if due is None or deadline < due:
            self.timer_due = deadline
            timer.set(precise_timer_at(deadline))
        return True

    # -- the network thread ------------------------------------------------------------
    def apply(self, actions, now) -> None:
        """Act on the core's Connect / Close actions."""
        for a in actions:
            if isinstance(a, Connect):
                self._open(a, now)
            elif isinstance(a, Close):
                self.close_socket(a.node)

    def write_all(self, now) -> None:
        for node in self.core.nodes_with_output():
            sock = self.socks.get(node)
            if sock is not None and node not in self._connecting and node not in self._handshaking:
                self._write(node, sock, now)

    def update_interest(self) -> bool:
        """Register what each socket waits for; whether anything changed (a
        select already waiting may not see the change on every platform)."""
        pending = self.core.nodes_with_output()
        if not pending and self._all_read and not self._connecting and not self._handshaking:
            return False        # a quiet round (most at low rates): nothing to change
        pending = set(pending)
        changed = False
        all_read = True
        for node, sock in self.socks.items():
            if node in self._connecting:
                want = _WRITE
            elif node in self._handshaking:
                want = self._handshaking[node]
            else:
                want = _READ | (_WRITE if node in pending else 0)
            if self._interest.get(node) != want:
                self._poller.modify(sock.fileno(), want)
                self._interest[node] = want
                changed = True
            if want != _READ:
                all_read = False
        self._all_read = all_read
        return changed

    def select(self, timeout: Optional[float]) -> list:
        """Wait (without the caller's lock) for I/O, a wake-up or ``timeout``
        s (None: no timer); the ready ``(fd, mask)`` pairs. (A timeout is
        rounded up to whole milliseconds, as ``selectors`` did: the drivers'
        waits are whole milliseconds already, see ``kproto.driver.wait_ms``.)"""
        return self._poll(-1 if timeout is None else timeout)

    def handle(self, events: list, now: float) -> None:
        """Process what :meth:`select` returned (with the caller's lock)."""
        wake_fd, fd_node = self.wake_fd, self._fd_node
        for fd, mask in events:
            if fd == wake_fd:
                self._drain_wakeups()
                continue
            if fd == self.timer_fd:
                self._take_timer()
                continue
            node = fd_node.get(fd)
            if node is not None:
                # an error or hang-up is both: the read or write says which (as selectors)
                self._io(node, self.socks[node], (_READ if mask & _NOT_WRITE else 0)
                         | (_WRITE if mask & _NOT_READ else 0), now)

    def close_all(self) -> None:
        for node in list(self.socks):
            self.close_socket(node)

    def close(self) -> None:
        self.close_all()
        if self._timer is not None:
            self._timer.close()
        self._poller.close()
        self._wake_r.close()
        self._wake_w.close()

    # -- internals ---------------------------------------------------------------------
    def _take_timer(self) -> None:
        # The deadline timer fired: the round it asked for runs next.
        timer = self._timer
        assert timer is not None, "an event on the deadline timer's fd with no timer"
        timer.take()
        self.timer_due = None

    def _drain_wakeups(self):
        # The flag is cleared only once the pipe is empty. Cleared first, a
        # wake() from another thread during the drain would set it again and
        # have its byte read here: the flag would then stay set with nothing in
        # the pipe, every later wake() would be skipped, and a core with no
        # timer would sleep in select for good (a flush that never returned).
        # Cleared last, a wake() during the drain sends nothing, which is
        # safe: this thread polls the core after handle() and sees its change.
        # One recv takes every byte: a wake() sends one only while the flag is
        # clear, so at most a few are pending; reading on to EAGAIN was a second
        # syscall per wake-up (a byte left over makes select return at once).
        try:
            self._wake_r.recv(4096)
        except (BlockingIOError, InterruptedError):
            pass
        self.wake_pending = False
        self.woken = True

    def _open(self, a, now):
        self.close_socket(a.node)
        sock, error = open_socket(a.host, a.port)
        if sock is None:
            self.core.disconnected(a.node, now, error)
            return
        self.socks[a.node] = sock
        self._addr[a.node] = (a.host, a.port)
        self._connecting.add(a.node)
        self._register(a.node, sock, _WRITE)
        self._interest[a.node] = _WRITE
        self._all_read = False

    def close_socket(self, node):
        sock = self.socks.pop(node, None)
        self._connecting.discard(node)
        self._handshaking.pop(node, None)
        self._interest.pop(node, None)
        if sock is not None:
            self._unregister(sock)
            sock.close()

    def _register(self, node, sock, mask):
        fd = sock.fileno()
        self._poller.register(fd, mask)
        self._fd_node[fd] = node

    def _unregister(self, sock):
        fd = sock.fileno()
        if fd < 0:      # closed behind our back (epoll dropped it): forget its old number
            for fd, node in list(self._fd_node.items()):
                if self.socks.get(node) is None:
                    del self._fd_node[fd]
            return
        if self._fd_node.pop(fd, None) is not None:
            try:
                self._poller.unregister(fd)
            except (KeyError, ValueError, OSError):
                pass

    def _lost(self, node, now, exc):
        self.close_socket(node)
        self.core.disconnected(node, now, exc)

    def _io(self, node, sock, mask, now):
        if self.socks.get(node) is not sock:
            return
        if node in self._connecting:
            if not mask & _WRITE:
                return
            err = connect_error(sock)
            self._connecting.discard(node)
            if err is not None:
                self._lost(node, now, err)
                return
            if self.tls is not None:
                self._start_tls(node, sock, now)
                return
            self.core.connected(node, now)
            self._write(node, sock, now)
            return
        if node in self._handshaking:
            self._handshake(node, sock, now)
            return
        if mask & _READ:
            try:
                data = self._recv(sock)
                # TLS: records already decrypted inside the SSL object do not
                # wake select() again - take them now.
                while data and self.tls is not None and sock.pending():
                    data += sock.recv(sock.pending())
            except self._retry_errors:
                data = None
            except self._tls_errors as e:
                self._lost(node, now, tls_error(e, *self._addr.get(node, (None, None))))
                return
            except OSError as e:
                self._lost(node, now, e)
                return
            if data == b"":
                self._lost(node, now, None)
                return
            if data:
                self.core.received(node, data, now)
        if mask & _WRITE and self.socks.get(node) is sock:
            self._write(node, sock, now)

    def _start_tls(self, node, sock, now):
        host, _ = self._addr[node]
        self._unregister(sock)
        tls_sock = self.tls.wrap_socket(sock, server_hostname=host, do_handshake_on_connect=False)
        self.socks[node] = tls_sock
        self._register(node, tls_sock, _WRITE)
        self._interest[node] = _WRITE
        self._all_read = False
        self._handshaking[node] = _WRITE
        self._handshake(node, tls_sock, now)

    def _handshake(self, node, sock, now):
        import ssl   # loaded: a handshake means TLS is on
        try:
            sock.do_handshake()
        except ssl.SSLWantReadError:
            self._handshaking[node] = _READ
            return
        except ssl.SSLWantWriteError:
            self._handshaking[node] = _WRITE
            return
        except ssl.SSLError as e:
            self._lost(node, now, tls_error(e, *self._addr[node]))
            return
        except OSError as e:
            self._lost(node, now, e)
            return
        del self._handshaking[node]
        self.core.connected(node, now)
        self._write(node, sock, now)

    def _write(self, node, sock, now):
        data = self.core.output(node)
        if not data:
            return
        try:
            n = sock.send(data)
        except self._retry_errors:
            return
        except self._tls_errors as e:
            self._lost(node, now, tls_error(e, *self._addr.get(node, (None, None))))
            return
        except OSError as e:
            self._lost(node, now, e)
            return
        if n:
            self.core.sent(node, n, now)
