"""The async drivers resolve broker names without blocking the event loop
(issue 15, point 7).

A blocking ``socket.getaddrinfo`` inside the network task stopped every task
of the application while DNS answered (seconds, with a slow or unreachable
DNS server). Names are resolved through the framework instead - asyncio's
``loop.getaddrinfo`` (an executor thread), ``trio.socket.getaddrinfo`` (a
worker thread) - so other tasks keep running meanwhile.
"""
import asyncio
import socket
import threading
import time

import pytest

SLOW = 1.0                      # seconds the fake DNS server takes to answer


@pytest.fixture
def slow_dns(monkeypatch):
    """``slow.example`` resolves to a loopback port nobody listens on, after SLOW s."""
    real = socket.getaddrinfo
    calls = []

    def getaddrinfo(host, port, family=0, type=0, proto=0, flags=0):
        if host in ("slow.example", b"slow.example"):
            if flags & socket.AI_NUMERICHOST:           # trio tries a numeric lookup first
                raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
            calls.append(threading.current_thread())
            time.sleep(SLOW)
            return real("127.0.0.1", port, family, type, proto, flags)
        return real(host, port, family, type, proto, flags)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"slow.example:{port}", calls


async def longest_stall(mod, sleep, bootstrap, **kw):
    """Run a producer (it connects at once) beside a task that ticks every
    10 ms; return the longest gap between two ticks."""
    p = mod.Producer(bootstrap_servers=bootstrap, **kw)
    await p.flush()                         # starts the network task: it resolves the name
    gaps, last = [], time.monotonic()
    end = last + SLOW + 0.5
    while time.monotonic() < end:
        await sleep(0.01)
        now = time.monotonic()
        gaps.append(now - last)
        last = now
    await p.close(0)
    return max(gaps)


def check(stall, calls):
    assert calls, "the broker's name was never resolved"
    assert all(t is not threading.main_thread() for t in calls), "resolved on the event loop's thread"
    assert stall < 0.3, f"the event loop stood still for {stall:.2f} s while DNS answered"


def test_asyncio_resolves_without_blocking_the_loop(slow_dns):
    import kio.aio
    bootstrap, calls = slow_dns
    check(asyncio.run(longest_stall(kio.aio, asyncio.sleep, bootstrap)), calls)


def test_trio_resolves_without_blocking_the_loop(slow_dns):
    trio = pytest.importorskip("trio")
    import kio.trio
    bootstrap, calls = slow_dns

    async def main():
        async with trio.open_nursery() as nursery:
            return await longest_stall(kio.trio, trio.sleep, bootstrap, nursery=nursery)
    check(trio.run(main), calls)
