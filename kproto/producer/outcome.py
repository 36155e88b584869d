"""What became of one batch, shared by every record appended to it.

A send whose handle needs no notification of its own (no delivery callback)
is not kept in the batch at all: the handle is *attached* to the batch's
:class:`BatchOutcome` with its offset delta and reads its state from it.
Completing a batch of thousands of records then costs one assignment, not a
call per record, and a fire-and-forget record's handle dies as soon as the
application drops it instead of living in the batch until the broker
answers - a million queued records would otherwise be a million objects for
the cyclic garbage collector to walk, again and again.

When a batch is split (MESSAGE_TOO_LARGE) its outcome gets one child per new
batch and completes when the last child does; an attached handle finds its
record through :meth:`BatchOutcome.locate`. Nothing here knows about threads:
a driver whose handles block on a condition registers them with
:meth:`watch` and wakes them from :meth:`finish`'s return value, outside its
own lock (waking may run user callbacks).
"""
from __future__ import annotations

__all__ = ["BatchOutcome"]


class BatchOutcome:
    __slots__ = ("topic", "partition", "base_offset", "log_append_time", "error", "done",
                 "watchers", "children", "parent", "_pending")

    def __init__(self, topic, partition):
        self.topic = topic
        self.partition = partition
        self.base_offset = -1
        self.log_append_time = -1
        self.error = None
        self.done = False
        self.watchers = None        # handles to wake when done (made on first watch)
        self.children = None        # [(first_delta, BatchOutcome)] after a split
        self.parent = None
        self._pending = 0

    def watch(self, handle):
        """Wake ``handle`` (its ``_outcome_done()``) when the outcome is final.
        Callers check :attr:`done` after watching: a completion racing with
        this call is then seen by one side or the other."""
        w = self.watchers
        if w is None:
            w = self.watchers = []
        w.append(handle)

    def split(self, pieces):
        """This batch was re-batched: ``pieces`` are (first_delta, child) in order."""
        self.children = list(pieces)
        self._pending = len(self.children)
        for _, child in self.children:
            child.parent = self

    def finish(self, base_offset, log_append_time, error):
        """Record the broker's answer; returns the outcomes that became final
        (this one, and parents whose last child this was), whose watchers
        the driver wakes."""
        self.base_offset = base_offset
        self.log_append_time = log_append_time
        self.error = error
        self.done = True
        final = [self]
        parent = self.parent
        while parent is not None:
            parent._pending -= 1
            if parent._pending > 0:
                break
            parent.done = True
            final.append(parent)
            parent = parent.parent
        return final

    def locate(self, delta):
        """(outcome, delta) of the batch that finally carried record ``delta``."""
        outcome = self
        while outcome.children is not None:
            chosen = outcome.children[0]
            for piece in outcome.children:
                if piece[0] > delta:
                    break
                chosen = piece
            delta -= chosen[0]
            outcome = chosen[1]
        return outcome, delta

    def offset_of(self, delta):
        """(offset, log_append_time, error) of record ``delta``; -1 offset when unknown."""
        leaf, d = self.locate(delta)
        if leaf.error is not None:
            return -1, -1, leaf.error
        return (leaf.base_offset + d if leaf.base_offset >= 0 else -1), leaf.log_append_time, None

    def __repr__(self):
        return (f"<BatchOutcome {self.topic}-{self.partition} done={self.done} "
                f"base={self.base_offset} error={self.error!r}>")
