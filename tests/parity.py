"""Helpers of the driver parity tests (issue 16 point 3): one scenario, an
``async def scenario(kind, ...)`` that records what it observed, run under
the threading driver (kio), asyncio (kio.aio) and trio (kio.trio); the
transcripts must be equal. A scenario calls every client method through
:func:`call` (awaits what the async drivers return) and :func:`outcome`
(the result, or the *type* of the exception raised)."""
import asyncio
import concurrent.futures
import inspect
import socket
from contextlib import asynccontextmanager

import sniffio
import trio

import kio
import kio.aio
import kio.trio

DRIVERS = ["thread", "asyncio", "trio"]


def module(kind):
    """The driver's module: kio, kio.aio or kio.trio."""
    return {"thread": kio, "asyncio": kio.aio, "trio": kio.trio}[kind]


def run(kind, scenario, *args):
    if kind == "trio":
        return trio.run(scenario, kind, *args)
    return asyncio.run(scenario(kind, *args))


async def call(value, seconds=60.0):
    """A driver call's result: awaited for the async drivers, for ``seconds``
    at most (a call that hangs under one driver is drift too: it ends as a
    TimeoutError / trio.TooSlowError in the transcript, not as a hung test)."""
    if not inspect.isawaitable(value):
        return value
    if sniffio.current_async_library() == "trio":
        with trio.fail_after(seconds):
            return await value
    return await asyncio.wait_for(value, seconds)


async def outcome(fn, *args, **kwargs):
    """('ok', result) or ('raised', the name of the exception type)."""
    try:
        return ("ok", await call(fn(*args, **kwargs), 20.0))
    except Exception as e:  # noqa: BLE001 - the type is what is compared
        return ("raised", type(e).__name__)


async def resolved(handle, seconds=30.0):
    """A send's outcome: a Future's result under threads, the awaited handle otherwise."""
    if isinstance(handle, concurrent.futures.Future):
        return handle.result(seconds)
    return await call(handle, seconds)


def text(exc, *names):
    """The error's type and message, with the run's own names (topics...) replaced."""
    msg = str(exc)
    for i, name in enumerate(names):
        msg = msg.replace(name, f"<name{i}>")
    return type(exc).__name__, msg


async def attempt(fn, *args, names=(), **kwargs):
    """('ok', result) or ('raised', type name, message)."""
    try:
        return ("ok", await call(fn(*args, **kwargs), 30.0))
    except Exception as e:  # noqa: BLE001 - the type and text are what is compared
        return ("raised",) + text(e, *names)


async def sleep(seconds):
    """Sleep in the scenario's framework (the threading driver's scenarios run under asyncio)."""
    if sniffio.current_async_library() == "trio":
        await trio.sleep(seconds)
    else:
        await asyncio.sleep(seconds)


@asynccontextmanager
async def opened(client):
    if hasattr(client, "__aenter__"):
        async with client:
            yield client
    else:
        with client:
            yield client


def nowhere():
    """A bootstrap address nobody listens on (a free loopback port)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def all_the_same(scenario, *args):
    """The scenario's transcript under every driver; they must be equal."""
    transcripts = {kind: run(kind, scenario, *args) for kind in DRIVERS}
    for kind in DRIVERS[1:]:
        assert transcripts[kind] == transcripts["thread"], f"{kind} drifted from the threading driver:\n" + \
            _differences(transcripts["thread"], transcripts[kind])
    return transcripts["thread"]


def _differences(thread, other):
    """The rows of two transcripts that differ (this module's asserts are not rewritten by pytest)."""
    rows = [f"  thread: {a!r}\n  other:  {b!r}" for a, b in zip(thread, other) if a != b]
    if len(thread) != len(other):
        rows.append(f"  {len(thread)} rows against {len(other)}")
    return "\n".join(rows)
