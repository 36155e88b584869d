"""The async drivers' engine: one sans-IO core run by background tasks of an
async framework, written once for asyncio and trio.

The framework is reached only through a small *backend* (see
:mod:`kio.aio` and :mod:`kio.trio`)::

    backend.event()                  -> an event: set(), is_set(), await wait()
    await backend.wait(event, secs)  -> returns when the event is set or secs (None: never) ran out
    backend.alarm()                  -> the main task's sleep: await alarm.wait(event, secs) as above;
                                        alarm.move(secs) re-arms the sleep in progress without waking it
    backend.spawn(fn, *args)         -> a running task; .cancel()
    await backend.getaddrinfo(host, port) -> socket.getaddrinfo's answer, without blocking the loop
    await backend.wait_readable(sock) / wait_writable(sock)
    await backend.reading(sock, on_readable) -> on_readable() each time sock is readable, until it returns False
    backend.forget(sock)             -> before closing a socket a task may wait on
    backend.shielded()               -> a context in which cancellation waits

Sockets are plain non-blocking sockets; the backend only waits for them to
be ready, then reads and writes happen synchronously (no bytes the core
handed out are held across an await). Per connection one task reads and one
writes what the socket did not take at once; the main task runs
``core.poll``, opens and closes connections, and sleeps until the core's
next deadline or a kick. No retries, timeouts or protocol decisions live
here: those are the core's.

One answer, one wake-up: the task that fed the core runs its round itself
(:meth:`Engine.round_here`: the reader after an answer - or, when a
consumer's ``poll()`` waits for records, that poll after it took them, one
round for both), and a round writes what the core queued straight to the
socket. The main task is woken only for what a round
elsewhere cannot do: an earlier deadline to sleep towards, ``error_cb``
calls to await, a failure. (Before, an answer at a low rate woke the main
task twice, the writer once and the polling task twice: six passes of the
event loop, each with its futures, timers and handles - issue 27.)

No timer per wait either: an application task that waits until an end (a
``poll(timeout)``, :meth:`Engine.wait_until`) waits on ``changed`` alone and
leaves its end to the main task, which sleeps anyway: its alarm is moved
earlier only when the end comes before it, and a wait that ended (records
came) leaves it as it is - the main task wakes then, finds no end passed
and sleeps again. A quiet consumer's poll() made a timer (asyncio) or a
cancel scope (trio) per answer; now the main task makes one per poll timeout
at most.
"""
from __future__ import annotations

import inspect
import logging
import ssl

from kio._shared.common import INF, RecvBuffer, call_error_cb, connect_error, error_callbacks, now_ms, open_socket, sleep_time
from kio._shared.tls import context_for, tls_error
from kproto.client import Close, Connect

__all__ = ["Engine"]

log = logging.getLogger("kio.async")


class _Conn:
    __slots__ = ("sock", "tasks", "want_write", "writing")

    def __init__(self):
        self.sock = None
        self.tasks = []
        self.want_write = None      # the writer task's event (None until connected)
        self.writing = False        # the writer task waits for the socket to take the rest


class Engine:
    """Runs ``core`` until :meth:`stop`. ``after_poll()`` is the client's
    hook (collect results, decide whether waiters must wake), ``on_failure(exc)``
    its hook when the main task failed (fail what waits in the core); ``changed``
    is set (and replaced) whenever something an application task may wait
    for can have changed."""

    def __init__(self, core, backend, recv_size=1 << 20, after_poll=None, on_failure=None):
        self.core = core
        self.io = backend
        self.recv_size = recv_size
        self._recv = RecvBuffer(recv_size).recv
        self.after_poll = after_poll
        self.on_failure = on_failure
        # deadline_after_kick(planned): the core's deadline after kicks that
        # asked for no round, given the one planned at the last round; None:
        # ask the core's full next_deadline again. The producer's
        # (ProducerCore.next_deadline_after_appends) does not ask the network
        # client: only appends happened since, and they move only the
        # accumulator's next round (a wake-up per batch at low rates).
        self.deadline_after_kick = None
        self.conns: dict = {}
        self.kicked = backend.event()
        # A kick since the last round asked for a round (kick()); one that
        # did not (kick(round=False)) only wants the deadline looked at again.
        self.round_wanted = False
        self.changed = backend.event()
        self.stopping = False
        self.finished = backend.event()
        self.fatal = None
        self._main = None
        # The deadline the main task sleeps towards; a round elsewhere
        # (round_here) that finds an earlier one lowers it and wakes it.
        self.planned = None
        # What a round elsewhere raised: the main task fails the client with
        # it, as with its own rounds.
        self.round_error = None
        # Consumer polls (their fast path) waiting for records: an answer
        # read meanwhile leaves its round owed to the poll, which runs it
        # after its look took the records - the round that sends the next
        # Fetch - as the threading consumer's poll() does: one round per
        # answer, not the reader's and the poll's.
        self.polls_waiting = 0
        self.round_owed = False
        # The ends (now_ms()) of the application tasks' waits (wait_until),
        # kept by the main task's sleep: its alarm, and when it sleeps
        # towards (alarm_at: INF no deadline; None while it does not sleep
        # - then a wait makes its own timer).
        self.wait_ends: list = []
        self.alarm = backend.alarm()
        self.alarm_at = None
        # Counts (tests, profiling): rounds of the core, those run elsewhere
        # than the main task, and the main task's and writers' wake-ups.
        self.rounds = 0
        self.rounds_here = 0
        self.main_wakeups = 0
        self.alarm_wakeups = 0          # the main task's wake-ups only for an application task's end
        self.writer_wakeups = 0
        self.tls = context_for(core.config)      # security.protocol SSL / SASL_SSL

    # -- application side -----------------------------------------------------------------
    def start(self):
        if self._main is None:
            self._main = self.io.spawn(self._run)

    @property
    def started(self) -> bool:
        return self._main is not None

    def kick(self, round=True):
        """Wake the main task: for a round of the core, or (``round`` False)
        only to sleep again towards the core's deadline, which changed (a
        batch opened by send())."""
        if round:
            self.round_wanted = True
        self.kicked.set()

    def notify(self):
        """Wake every task waiting on ``changed``."""
        ev, self.changed = self.changed, self.io.event()
        ev.set()

    async def wait_until(self, end: float) -> None:
        """Wait until something changed or ``end`` (``now_ms()``; INF: no
        limit) passed - or earlier: the caller looks again. No polling
        interval: the main task notifies after every poll while a task waits
        (``after_poll``), and it polls on every I/O event and at every core
        deadline. No timer of its own while the main task sleeps: the end
        goes to the main task's alarm (moved only when the end comes first),
        which wakes the waiters whose end passed."""
        if end == INF:
            await self.changed.wait()
            return
        at = self.alarm_at
        if at is None:
            # The main task does not sleep (not started yet, awaiting an
            # error_cb, stopped): nothing would wake this wait at its end.
            await self.io.wait(self.changed, max(0.0, (end - now_ms()) / 1000.0))
            return
        ends = self.wait_ends
        ends.append(end)
        if end < at:
            self.alarm_at = end
            self.alarm.move(max(0.0, (end - now_ms()) / 1000.0))
        try:
            await self.changed.wait()
        finally:
            ends.remove(end)

    async def stop(self):
        """Stop the main task after its last poll; close every socket."""
        self.stopping = True
        self.kick()
        if self._main is not None:
            await self.finished.wait()

    def round_here(self) -> None:
        """Run the core's round in the calling task - the reader that fed it
        an answer, the application task whose poll took records - instead of
        waking the main task for it (a task switch, a future and a timer each
        way). The main task is woken only for what it must do itself: the
        ``error_cb`` calls (it awaits them), sleeping towards a deadline
        earlier than the one it sleeps towards, failing the client when the
        round raised; and for every kick while it is not running yet or stopping."""
        if self._main is None or self.stopping or self.finished.is_set():
            self.kick()
            return
        core = self.core
        try:
            now = now_ms()
            self._round(now)
            deadline = core.next_deadline(now)
        except Exception as e:  # noqa: BLE001 - failed by the main task, as its own rounds
            self.round_error = e
            self.kick()
            return
        self.rounds_here += 1
        if core.client.has_errors():
            self.kick()
        elif deadline is not None:
            planned = self.planned
            if planned is None or deadline < planned:
                self.planned = deadline
                self.kick(round=False)

    def _round(self, now):
        """One round of the core, in whichever task runs it: its actions
        applied, what it queued written, the client's hook."""
        core = self.core
        self.rounds += 1
        self.round_owed = False
        for action in core.poll(now):
            if isinstance(action, Connect):
                self._open(action)
            elif isinstance(action, Close):
                self._close(action.node)
        for node in core.nodes_with_output():
            conn = self.conns.get(node)
            if conn is not None and conn.want_write is not None:
                self._write(node, conn)
        if self.after_poll is not None and self.after_poll():
            self.notify()

    # -- the main task ------------------------------------------------------------------------
    async def _run(self):
        core = self.core
        try:
            while True:
                if self.round_error is not None:
                    raise self.round_error
                now = now_ms()
                self.round_wanted = False            # this round covers the kicks so far
                self._round(now)
                for cb, error in error_callbacks(core):
                    result = call_error_cb(cb, error)
                    if inspect.isawaitable(result):
                        if self.wait_ends:
                            # No alarm while this task awaits it: the waits
                            # look again and make timers of their own.
                            self.notify()
                        try:
                            await result
                        except Exception:  # noqa: BLE001 - the application's callback
                            log.exception("error_cb raised for %r", error)
                if self.stopping:
                    break
                self.planned = core.next_deadline(now)
                while True:
                    if not self.kicked.is_set():
                        await self._sleep()
                        self.main_wakeups += 1
                    if not self.kicked.is_set() or self.round_wanted or self.stopping \
                            or self.round_error is not None:
                        break
                    # Only kicks that asked for no round: sleep again towards
                    # the core's new deadline (a round each was a third per
                    # batch of a quiet producer, issue 27).
                    self.kicked = self.io.event()
                    after_kick = self.deadline_after_kick
                    self.planned = after_kick(self.planned) if after_kick is not None \
                        else core.next_deadline(now_ms())
                self.kicked = self.io.event()
        except BaseException as e:  # noqa: BLE001 - fail the waiters loudly, never hang them
            if not isinstance(e, Exception):
                raise
            log.exception("the async driver's network task failed")
            self.fatal = e
            if self.on_failure is not None:
                try:
                    self.on_failure(e)
                except Exception:  # noqa: BLE001 - the waiters are woken below whatever happens
                    log.exception("the client's failure hook raised")
        finally:
            for node in list(self.conns):
                self._close(node)
            self.notify()
            self.finished.set()

    async def _sleep(self):
        """Sleep until a kick or the core's deadline (``planned``); on the
        way, wake the application tasks whose wait's end passed (wait_until)."""
        while True:
            now = now_ms()
            at = self.planned
            timeout = sleep_time(at, now)
            ends = self.wait_ends
            if ends:
                if min(ends) <= now:
                    self.notify()           # their end passed: they look again, and return
                ends = [end for end in ends if end > now]
            if ends:
                end = min(ends)
                if at is None or end < at:
                    at = end
                    timeout = (end - now) / 1000.0
            self.alarm_at = INF if at is None else at
            try:
                await self.alarm.wait(self.kicked, timeout)
            finally:
                at, self.alarm_at = self.alarm_at, None     # (moved earlier meanwhile by a wait)
            if self.kicked.is_set():
                return
            if self.planned is not None and at >= self.planned:
                # The core's deadline (a timer tick early at most, as
                # sleep_time has it): a round; the waits woken after it.
                return
            self.alarm_wakeups += 1         # only a wait's end (or one that ended before it): woken next

    # -- connections ---------------------------------------------------------------------------
    def _open(self, action):
        self._close(action.node)
        conn = self.conns[action.node] = _Conn()
        conn.tasks.append(self.io.spawn(self._connection, action.node, conn, action.host, action.port))

    def _close(self, node):
        conn = self.conns.pop(node, None)
        if conn is None:
            return
        for task in conn.tasks:
            task.cancel()
        if conn.sock is not None:            # None while the name is being resolved
            self.io.forget(conn.sock)
            conn.sock.close()

    def _lost(self, node, conn, exc):
        if self.conns.get(node) is conn:
            self._close(node)
            self.core.disconnected(node, now_ms(), exc)
            self.kick()

    async def _connection(self, node, conn, host, port):
        """Resolve, connect (and the TLS handshake), then read until the connection goes."""
        try:
            # Through the framework: a blocking getaddrinfo here would stop
            # every task of the application while DNS answers.
            infos = await self.io.getaddrinfo(host, port)
        except OSError as e:
            self._lost(node, conn, e)
            return
        if self.conns.get(node) is not conn:
            return
        sock, error = open_socket(host, port, infos)
        if sock is None:
            self._lost(node, conn, error)
            return
        conn.sock = sock
        await self.io.wait_writable(sock)
        err = connect_error(sock)
        if err is not None:
            self._lost(node, conn, err)
            return
        if self.tls is not None:
            sock = conn.sock = self.tls.wrap_socket(sock, server_hostname=host, do_handshake_on_connect=False)
            if not await self._handshake(node, conn, host, port):
                return
        conn.want_write = self.io.event()
        self.core.connected(node, now_ms())
        conn.tasks.append(self.io.spawn(self._writer, node, conn))
        self.kick()
        await self.io.reading(sock, lambda: self._read(node, conn, host, port))

    def _read(self, node, conn, host, port):
        """The socket is readable: read what it has, feed the core and run
        its round here (:meth:`round_here`), or leave it to the poll that
        waits for records (``polls_waiting``); whether to go on reading
        (False once the connection is gone)."""
        if self.conns.get(node) is not conn:
            return False
        sock = conn.sock
        try:
            data = self._recv(sock)
            while data and self.tls is not None and sock.pending():   # decrypted, select() won't tell
                data += sock.recv(sock.pending())
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return True
        except OSError as e:
            self._failed(node, conn, host, port, e)
            return False
        if not data:
            self._lost(node, conn, None)
            return False
        self.core.received(node, data, now_ms())
        if self.polls_waiting and not self.stopping:
            # The waiting poll runs the round after its look (see polls_waiting).
            self.round_owed = True
            if self.after_poll is not None:
                self.after_poll()
            self.notify()
        else:
            self.round_here()
        return self.conns.get(node) is conn

    async def _handshake(self, node, conn, host, port) -> bool:
        sock = conn.sock
        while True:
            try:
                sock.do_handshake()
                return True
            except ssl.SSLWantReadError:
                await self.io.wait_readable(sock)
            except ssl.SSLWantWriteError:
                await self.io.wait_writable(sock)
            except OSError as e:
                self._failed(node, conn, host, port, e)
                return False

    def _failed(self, node, conn, host, port, exc):
        """Reading or the TLS handshake failed: the connection is lost (a TLS
        error said as such, naming the broker)."""
        self._lost(node, conn, tls_error(exc, host, port) if isinstance(exc, ssl.SSLError) else exc)

    def _write(self, node, conn):
        """Write what the core queued for ``node`` as far as the socket takes
        it now, in the task that ran the round; the writer task is woken only
        for what is left (a full socket buffer, TLS wanting to read, an error
        it reports). Not while it waits for the socket itself: it writes the
        rest, in order."""
        if conn.writing:
            return
        core = self.core
        client = core.client
        sock = conn.sock
        while True:
            data = core.output(node)
            if not data:
                return
            try:
                n = sock.send(data)
            except OSError:          # would block, TLS wants to read, or failed: the writer task's
                n = 0
            if not n:
                conn.want_write.set()
                return
            progress = client.progress
            core.sent(node, n, now_ms())
            # A round only when the write completed something (a request
            # without a response) or changed the connection: a written
            # request changes no deadline (its timeout runs from when it was
            # queued).
            if client.progress != progress:
                self.kick()

    async def _writer(self, node, conn):
        """Write what a round could not (see :meth:`_write`): wait for the
        socket, then write until the core has nothing left for ``node``."""
        sock = conn.sock
        while self.conns.get(node) is conn:
            data = self.core.output(node)
            if not data:
                conn.want_write = self.io.event()
                await conn.want_write.wait()
                self.writer_wakeups += 1
                continue
            try:
                n = sock.send(data)
            except (BlockingIOError, InterruptedError, ssl.SSLWantWriteError):
                n = 0
            except ssl.SSLWantReadError:
                await self._wait_socket(conn, self.io.wait_readable)
                continue
            except OSError as e:             # a TLS failure here surfaces on the reader's next recv
                self._lost(node, conn, e)
                return
            if n:
                client = self.core.client
                progress = client.progress
                self.core.sent(node, n, now_ms())
                if client.progress != progress:      # (as in _write)
                    self.kick()
            else:
                await self._wait_socket(conn, self.io.wait_writable)

    async def _wait_socket(self, conn, wait):
        """The writer waits for its socket; meanwhile rounds leave it the output."""
        conn.writing = True
        try:
            await wait(conn.sock)
        finally:
            conn.writing = False
