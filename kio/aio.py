"""asyncio drivers: ``kio.aio.Producer``, ``Consumer`` and ``Admin``.

    async with kio.aio.Producer(bootstrap_servers="127.0.0.1:9092") as p:
        handle = await p.send("t", b"v")      # waits for buffer space only
        metadata = await handle               # waits for the acknowledgement

    async with kio.aio.Consumer(bootstrap_servers=..., group_id="g") as c:
        c.subscribe(["t"])
        async for record in c: ...

The clients are :mod:`kio._async.clients` (and :mod:`kio._async.share`,
:mod:`kio._async.admin`), shared with :mod:`kio.trio`;
this module is only how asyncio waits: one task runs the core, sockets are
watched with ``loop.add_reader``/``add_writer``. Use a client from the
event loop that created its first task (asyncio objects are loop-bound).
"""
from __future__ import annotations

import asyncio
import socket

from kio._async import clients
from kio._async.admin import AsyncAdmin
from kio._async.share import AsyncShareConsumer

__all__ = ["Producer", "Consumer", "ShareConsumer", "Admin"]


def _wake(fut):
    if not fut.done():
        fut.set_result(None)


class Event:
    """asyncio.Event without its lock and task per wait: waiters are bare
    futures, and a timed wait (:meth:`AsyncioBackend.wait`) needs no task."""
    __slots__ = ("_set", "_waiters")

    def __init__(self):
        self._set = False
        self._waiters = []

    def is_set(self):
        return self._set

    def set(self):
        if not self._set:
            self._set = True
            waiters, self._waiters = self._waiters, []
            for fut in waiters:
                _wake(fut)

    def _future(self):
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        return fut

    async def wait(self):
        if not self._set:
            await self._future()


class Alarm:
    """The engine's main task's sleep (:meth:`kio._async.engine.Engine.wait_until`):
    until an event is set or ``timeout`` seconds (None: never) ran out;
    :meth:`move` gives the sleep in progress a new timeout without waking
    the task - its timer replaced, which the application's waits then need
    none of their own."""
    __slots__ = ("_fut", "_timer")

    def __init__(self):
        self._fut = None
        self._timer = None

    async def wait(self, event, timeout):
        if event.is_set():
            return
        fut = self._fut = event._future()
        self._arm(timeout)
        try:
            await fut
        finally:
            self._fut = None
            if not event._set:                 # the timer's: no future left behind on the event
                event._waiters.remove(fut)
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def move(self, timeout):
        if self._fut is None:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._arm(timeout)

    def _arm(self, timeout):
        self._timer = None if timeout is None else \
            asyncio.get_running_loop().call_later(timeout, _wake, self._fut)


class AsyncioBackend:
    event = Event
    alarm = Alarm

    def __init__(self, nursery=None):
        self._tasks = set()          # strong references: the loop keeps only weak ones

    def check_can_spawn(self, what):
        asyncio.get_running_loop()   # raises a clear RuntimeError outside a running loop

    async def enter(self):
        pass

    async def exit(self, *exc):
        pass

    async def wait(self, event, timeout):
        if event.is_set():
            return
        fut = event._future()
        if timeout is None:                  # no deadline: only the event ends the wait
            await fut
            return
        timer = asyncio.get_running_loop().call_later(timeout, _wake, fut)
        try:
            await fut
        finally:
            timer.cancel()

    async def getaddrinfo(self, host, port):
        # In the loop's executor: a slow DNS server must not stall the loop.
        return await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)

    def spawn(self, fn, *args):
        task = asyncio.get_running_loop().create_task(fn(*args))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _ready(self, sock, add, remove):
        loop = asyncio.get_running_loop()
        fd = sock.fileno()
        fut = loop.create_future()
        add(fd, _wake, fut)
        try:
            await fut
        finally:
            if sock.fileno() == fd:          # not closed (and the number reused) meanwhile
                remove(fd)

    async def wait_readable(self, sock):
        loop = asyncio.get_running_loop()
        await self._ready(sock, loop.add_reader, loop.remove_reader)

    async def wait_writable(self, sock):
        loop = asyncio.get_running_loop()
        await self._ready(sock, loop.add_writer, loop.remove_writer)

    async def reading(self, sock, on_readable):
        """Call ``on_readable()`` each time ``sock`` is readable, until it
        returns False: in the loop's reader callback, registered once - no
        future, task step or selector update per read (an answer at a low
        rate cost all three)."""
        loop = asyncio.get_running_loop()
        fd = sock.fileno()
        done = loop.create_future()

        def readable():
            try:
                more = on_readable()
            except Exception as e:  # noqa: BLE001 - raised by the waiting task, as a task's own read would
                more = False
                if not done.done():
                    done.set_exception(e)
            if not more:
                if sock.fileno() == fd:
                    loop.remove_reader(fd)
                if not done.done():
                    done.set_result(None)
        loop.add_reader(fd, readable)
        try:
            await done
        finally:
            if sock.fileno() == fd:          # not closed (and the number reused) meanwhile
                loop.remove_reader(fd)

    def forget(self, sock):
        loop = asyncio.get_running_loop()
        fd = sock.fileno()
        if fd >= 0:
            loop.remove_reader(fd)
            loop.remove_writer(fd)

    async def shielded(self, fn):
        return await asyncio.shield(fn())


class Producer(clients.AsyncProducer):
    """The asyncio producer: ``async with kio.aio.Producer(bootstrap_servers=...) as p``,
    then ``handle = await p.send(topic, value)`` and ``metadata = await handle``."""
    backend_class = AsyncioBackend
    delivery_class, callback_delivery_class, bulk_class = clients.delivery_classes(__name__, Event)


class Consumer(clients.AsyncConsumer):
    """The asyncio consumer: ``async with kio.aio.Consumer(bootstrap_servers=..., group_id=...) as c``,
    then ``c.subscribe([...])`` and ``await c.poll()`` or ``async for record in c``."""
    backend_class = AsyncioBackend


class Admin(AsyncAdmin):
    """The asyncio admin client: ``async with kio.aio.Admin(bootstrap_servers=...) as a``,
    then ``await a.create_topics([...])``."""
    backend_class = AsyncioBackend


class ShareConsumer(AsyncShareConsumer):
    """The asyncio share consumer (KIP-932): ``async with kio.aio.ShareConsumer(bootstrap_servers=...,
    group_id=...) as c``, then ``c.subscribe([...])`` and ``await c.poll()`` or ``async for record in c``."""
    backend_class = AsyncioBackend
