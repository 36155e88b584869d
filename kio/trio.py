"""trio drivers: ``kio.trio.Producer``, ``Consumer`` and ``Admin``, trio-native.

    async with kio.trio.Producer(bootstrap_servers="127.0.0.1:9092") as p:   # opens a nursery
        handle = await p.send("t", b"v")
        metadata = await handle

    async with trio.open_nursery() as nursery:                               # or bring your own
        p = kio.trio.Producer(bootstrap_servers=..., nursery=nursery)
        ...
        await p.close()

The clients are :mod:`kio._async.clients` (and :mod:`kio._async.share`,
:mod:`kio._async.admin`), shared with :mod:`kio.aio`; this
module is only how trio waits (``trio.lowlevel.wait_readable`` and friends,
trio events, cancel scopes) - no asyncio anywhere. Background tasks run in
the client's nursery. Cancellation is safe: a cancelled ``send``, ``poll``
or ``commit`` leaves the client consistent, and ``close`` is shielded.
"""
from __future__ import annotations

import math

import trio

from kio._async import clients
from kio._async.admin import AsyncAdmin
from kio._async.share import AsyncShareConsumer

__all__ = ["Producer", "Consumer", "ShareConsumer", "Admin"]


class Alarm:
    """The engine's main task's sleep (:meth:`kio._async.engine.Engine.wait_until`):
    until an event is set or ``timeout`` seconds (None: never) ran out, in
    a cancel scope whose deadline :meth:`move` sets for the sleep in progress
    without waking the task - the application's waits then open no cancel
    scope of their own."""
    __slots__ = ("_scope",)

    def __init__(self):
        self._scope = None

    async def wait(self, event, timeout):
        if event.is_set():
            return
        with trio.CancelScope(deadline=_deadline(timeout)) as self._scope:
            try:
                await event.wait()
            finally:
                self._scope = None

    def move(self, timeout):
        if self._scope is not None:
            self._scope.deadline = _deadline(timeout)


def _deadline(timeout):
    return math.inf if timeout is None else trio.current_time() + timeout


class TrioBackend:
    event = trio.Event
    alarm = Alarm

    def __init__(self, nursery=None):
        self.nursery = nursery
        self._own = None             # the nursery manager opened by ``async with``

    def check_can_spawn(self, what):
        if self.nursery is None:
            raise RuntimeError(f"kio.trio.{what} runs its network task in a nursery: use "
                               f"'async with kio.trio.{what}(...)' or pass nursery=")

    async def enter(self):
        if self.nursery is None:
            self._own = trio.open_nursery()
            self.nursery = await self._own.__aenter__()

    async def exit(self, *exc):
        if self._own is not None:
            own, self._own = self._own, None
            await own.__aexit__(*exc)

    async def wait(self, event, timeout):
        if timeout is None:                  # no deadline: no cancel scope either
            await event.wait()
            return
        with trio.move_on_after(timeout):
            await event.wait()

    async def getaddrinfo(self, host, port):
        # trio resolves names in a worker thread (numeric addresses at once).
        return await trio.socket.getaddrinfo(host, port, type=trio.socket.SOCK_STREAM)

    def spawn(self, fn, *args):
        scope = trio.CancelScope()

        async def run():
            with scope:
                await fn(*args)
        self.nursery.start_soon(run)
        return scope

    async def wait_readable(self, sock):
        await trio.lowlevel.wait_readable(sock)

    async def wait_writable(self, sock):
        await trio.lowlevel.wait_writable(sock)

    async def reading(self, sock, on_readable):
        """Call ``on_readable()`` each time ``sock`` is readable, until it returns False (in this task)."""
        while True:
            await trio.lowlevel.wait_readable(sock)
            if not on_readable():
                return

    def forget(self, sock):
        trio.lowlevel.notify_closing(sock)

    async def shielded(self, fn):
        with trio.CancelScope(shield=True):
            return await fn()


class Producer(clients.AsyncProducer):
    """The trio producer: ``async with kio.trio.Producer(bootstrap_servers=...) as p``
    (or pass ``nursery=``), then ``handle = await p.send(topic, value)`` and
    ``metadata = await handle``."""
    backend_class = TrioBackend
    delivery_class, callback_delivery_class, bulk_class = clients.delivery_classes(__name__, trio.Event)


class Consumer(clients.AsyncConsumer):
    """The trio consumer: ``async with kio.trio.Consumer(bootstrap_servers=..., group_id=...) as c``
    (or pass ``nursery=``), then ``c.subscribe([...])`` and ``await c.poll()`` or
    ``async for record in c``."""
    backend_class = TrioBackend


class Admin(AsyncAdmin):
    """The trio admin client: ``async with kio.trio.Admin(bootstrap_servers=...) as a``
    (or pass ``nursery=``), then ``await a.create_topics([...])``."""
    backend_class = TrioBackend


class ShareConsumer(AsyncShareConsumer):
    """The trio share consumer (KIP-932): ``async with kio.trio.ShareConsumer(bootstrap_servers=...,
    group_id=...) as c``, then ``c.subscribe([...])`` and ``await c.poll()``."""
    backend_class = TrioBackend
