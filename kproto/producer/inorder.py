"""In-order acknowledgement: release acks strictly in submission order.

Kafka orders callbacks per partition only. An application that must
acknowledge its *source* in order (a binlog position, a queue offset) needs a
ring of sequence numbers: take one per record before sending, mark it when
its delivery completes (in any order), and only advance the acknowledged
position over a contiguous prefix of completed numbers (seed-notes section 1).

Sans-IO and thread-agnostic (the kio driver wraps it in a lock)::

    acks = InOrderAcks(capacity=10000)
    seq = acks.acquire(token)            # None when `capacity` are outstanding (backpressure)
    ...
    released = acks.complete(seq)        # [(seq, token, error), ...] now releasable, in order
"""
from __future__ import annotations

import collections

__all__ = ["InOrderAcks"]

_PENDING = object()


class InOrderAcks:
    def __init__(self, capacity=10000):
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.capacity = capacity
        self._next = 0                       # next sequence number handed out
        self._base = 0                       # sequence number of _ring[0]
        self._ring = collections.deque()     # [token, result] per outstanding number
        self.released = 0                    # how many were released so far

    @property
    def outstanding(self) -> int:
        return len(self._ring)

    @property
    def has_room(self) -> bool:
        return len(self._ring) < self.capacity

    def acquire(self, token=None):
        """A new sequence number for ``token`` (any object given back on
        release), or None when ``capacity`` numbers are outstanding: the
        caller must wait for releases (bounded memory)."""
        if len(self._ring) >= self.capacity:
            return None
        seq = self._next
        self._next += 1
        self._ring.append([token, _PENDING])
        return seq

    def complete(self, seq, error=None):
        """Mark ``seq`` delivered (or failed with ``error``); return the list
        of ``(seq, token, error)`` that became releasable, in order."""
        i = seq - self._base
        if i < 0 or i >= len(self._ring):
            raise ValueError(f"sequence {seq} is not outstanding")
        slot = self._ring[i]
        if slot[1] is not _PENDING:
            raise ValueError(f"sequence {seq} was already completed")
        slot[1] = error
        out = []
        ring = self._ring
        while ring and ring[0][1] is not _PENDING:
            token, err = ring.popleft()
            out.append((self._base, token, err))
            self._base += 1
        self.released += len(out)
        return out

    @property
    def acked_position(self) -> int:
        """Every sequence below this number has been released."""
        return self._base
