"""Retry backoff and rate-limited logging, shared by every core.

One exponential backoff for the whole client, Java's ``ExponentialBackoff``
(KIP-144 reconnects, KIP-580 request retries): ``initial_ms`` after the first
failure, doubling (x2) with +-20% jitter, capped at ``max_ms``, restarting
from ``initial_ms`` after a success. Connections use it for
reconnect.backoff.ms / reconnect.backoff.max.ms; the producer's retries, the
group coordinator's lookups (consumer, share consumer) and the transaction
coordinator's use it for retry.backoff.ms / retry.backoff.max.ms.

:class:`RetryBackoff` adds the count of consecutive failures to it, and
:class:`RateLimitedLog` keeps a failure that repeats every second from
filling the log: the first one is logged, then at most one per interval,
saying how many were left out (those go to DEBUG).
"""
from __future__ import annotations

import logging
import math
import random
from typing import Optional

__all__ = ["ExponentialBackoff", "RetryBackoff", "RateLimitedLog"]


class ExponentialBackoff:
    """Java's ExponentialBackoff (base 2, jitter 0.2).

    ``backoff(attempts)`` = min(max_ms, initial_ms * 2**min(attempts, exp_max) * U(0.8, 1.2))
    where exp_max = log2(max_ms / initial_ms). ``rng`` is anything with a
    ``random()`` method returning a float in [0, 1) (random.Random); inject a
    seeded one for deterministic tests.
    """

    MULTIPLIER = 2.0
    JITTER = 0.2

    def __init__(self, initial_ms=50, max_ms=1000, rng=None, jitter=JITTER):
        self.initial_ms = initial_ms
        self.max_ms = max_ms
        self.jitter = jitter
        self.rng = rng if rng is not None else random.Random()
        if max_ms > initial_ms:
            self._exp_max = math.log(max_ms / max(initial_ms, 1)) / math.log(self.MULTIPLIER)
        else:
            self._exp_max = 0.0

    def backoff(self, attempts):
        if self._exp_max == 0:
            return self.initial_ms
        exp = min(attempts, self._exp_max)
        term = self.initial_ms * (self.MULTIPLIER ** exp)
        if self.jitter > 0:
            factor = (1 - self.jitter) + 2 * self.jitter * self.rng.random()
        else:
            factor = 1.0
        value = int(factor * term)
        return min(value, self.max_ms)


class RetryBackoff:
    """Consecutive failures of one kind of attempt and the wait after each
    (retry.backoff.ms growing to retry.backoff.max.ms); :meth:`reset` on success."""

    __slots__ = ("exp", "failures")

    def __init__(self, initial_ms=100, max_ms=1000, rng=None):
        self.exp = ExponentialBackoff(initial_ms, max(initial_ms, max_ms), rng)
        self.failures = 0

    def failed(self) -> int:
        """One more failure: the ms to wait before the next attempt."""
        delay = self.exp.backoff(self.failures)
        self.failures += 1
        return delay

    def reset(self) -> None:
        self.failures = 0

    def lost(self, served: bool) -> int:
        """What was found (a coordinator) is lost again: try again at once
        if it had served - a fresh start - else it counts as one more
        failure (Java: "found the coordinator, but the connection has
        failed ... backoff"). Returns the ms to wait."""
        if served:
            self.failures = 0
            return 0
        return self.failed()


class RateLimitedLog:
    """A message that may repeat: logged at its level the first time, then
    at most once per ``interval_ms`` (with how many were left out since);
    the ones in between go to DEBUG. Time is the caller's ``now`` (ms)."""

    __slots__ = ("logger", "interval_ms", "_next_at", "suppressed")

    def __init__(self, logger: logging.Logger, interval_ms: float = 10000):
        self.logger = logger
        self.interval_ms = interval_ms
        self._next_at: Optional[float] = None
        self.suppressed = 0

    def log(self, now, level, msg, *args) -> bool:
        """Returns True if logged at ``level``."""
        if self._next_at is not None and now < self._next_at:
            self.suppressed += 1
            self.logger.debug(msg, *args, stacklevel=2)
            return False
        if self.suppressed:
            msg += " (%d more like it in the last %.0f s not logged)"
            args += (self.suppressed, (now - self._next_at + self.interval_ms) / 1000.0)
            self.suppressed = 0
        self.logger.log(level, msg, *args, stacklevel=2)
        self._next_at = now + self.interval_ms
        return True
