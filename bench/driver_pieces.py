"""Instructions of the threading driver's per-round pieces, without a broker (issue 27, branch pdrv).

Two pieces of a quiet producer's network thread, each run N times in a loop
(load-independent under callgrind: run it at two N and divide the difference)::

    valgrind --tool=callgrind --callgrind-out-file=a.out python bench/driver_pieces.py wake 1000
    valgrind --tool=callgrind --callgrind-out-file=b.out python bench/driver_pieces.py wake 6000
    # (totals of b.out - a.out) / 5000 = instructions per piece

* ``wake``: a wake-up that asks for no round (``send()`` opening a batch,
  once a batch at low rates): ``SocketLoop.wake(round=False)``, the select
  that returns it and ``handle`` (draining the pipe);
* ``round``: a quiet round's driver calls over a connected producer core
  with nothing due, written or completed (the test suite's scripted broker):
  ``ProducerCore.poll``, ``SocketLoop.write_all``, ``ProducerCore.events``,
  ``next_deadline``, ``SocketLoop.update_interest`` and ``error_callbacks``.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

from kio._shared.common import error_callbacks  # noqa: E402
from kio._threaded.network import SocketLoop  # noqa: E402
from test_producer_core import FakeKafka, make  # noqa: E402 - the scripted broker of the core's tests


def wake(n: int) -> None:
    core, _, _ = make(FakeKafka(), linger_ms=5)
    loop = SocketLoop(core)
    for _ in range(n):
        loop.wake(round=False)
        loop.handle(loop.select(0), 0.0)


def quiet_round(n: int) -> None:
    core, _, sim = make(FakeKafka(), linger_ms=5)
    sim.send(b"warm")
    sim.run_until(lambda: not core.pending)
    now = sim.now + 1
    loop = SocketLoop(core)
    for _ in range(n):
        actions = core.poll(now)
        if actions:
            loop.apply(actions, now)
        loop.write_all(now)
        core.events()
        core.next_deadline(now)
        loop.update_interest()
        error_callbacks(core)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("wake", "round"):
        sys.exit("usage: python bench/driver_pieces.py wake|round N")
    {"wake": wake, "round": quiet_round}[sys.argv[1]](int(sys.argv[2]))
