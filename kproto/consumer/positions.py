"""Per-partition consumer state: position, pause, pending offset reset, lag.

Java's ``SubscriptionState`` restricted to what the fetcher needs: which
partitions are assigned, the offset to fetch next (the *position*), whether a
partition is paused or waiting for an offset reset (auto.offset.reset or an
explicit seek_to_beginning/seek_to_end), and the last high watermark and log
start offset the broker reported. Group membership decides *what* is
assigned; this module only keeps the state of what is.
"""
from __future__ import annotations

from typing import Dict, Iterable, Optional

from kproto import error_codes
from kproto.cluster import TopicPartition
from kproto.consumer._fetch import PartitionState as _PartitionState
from kproto.errors import ConfigError, KafkaError

EARLIEST = "earliest"
LATEST = "latest"
NONE = "none"
RESET_STRATEGIES = (EARLIEST, LATEST, NONE)

# ListOffsets timestamps with a special meaning.
LIST_OFFSETS_EARLIEST = -2
LIST_OFFSETS_LATEST = -1


class NoOffsetForPartitionError(KafkaError):
    """A partition has no position and auto.offset.reset is 'none'."""


# The position is outside the log and auto.offset.reset is 'none': raised as
# the broker's OFFSET_OUT_OF_RANGE class (one class, as Java's
# OffsetOutOfRangeException), so one ``except`` catches both.
OffsetOutOfRangeError = error_codes.OffsetOutOfRangeError


# One partition's state (position, leader epoch, paused, pending reset, the
# watermarks last answered, its reused Fetch entry): a C class defined with
# the fetcher's per-partition code in kproto/consumer/_fetch.pyx, which reads
# its fields as struct members (issue 27); re-exported here, its home for
# readers and callers.
PartitionState = _PartitionState


class Positions:
    """The assigned partitions and where each one is read from next."""

    def __init__(self, auto_offset_reset: str = LATEST):
        if auto_offset_reset not in RESET_STRATEGIES:
            raise ConfigError(f"auto.offset.reset must be one of {', '.join(RESET_STRATEGIES)}, "
                              f"not {auto_offset_reset!r}")
        self.auto_offset_reset = auto_offset_reset
        #: Every assigned partition's state, by partition: the fetcher's
        #: per-partition paths look a partition up once here instead of calling
        #: is_assigned, is_paused and state in turn (an attribute, not a
        #: property: read once per partition of every answer). Read it anew
        #: after an assignment change (assign() replaces the dict); only this
        #: class modifies it.
        self.states: Dict[TopicPartition, PartitionState] = {}
        #: Bumped by every change made through this class (assignment,
        #: seek, reset, pause, resume): the core's round caches what it
        #: derives from every partition (the partitions without a position,
        #: whether a reset is pending, the nodes fetched from) under it, so
        #: that a round with nothing new is not a walk over every partition.
        #: (A position moved by a drain or set by a reset's answer changes
        #: none of those: a drain only moves positions that exist, an answer
        #: ends a reset.)
        self.version = 0
        #: Bumped by a change of the assigned partitions (assign, add,
        #: remove): the fetcher's kept plan (kproto.consumer.fetch_plan)
        #: is rebuilt from every partition then.
        self.assignment_version = 0
        #: The partitions a seek, reset, pause or resume changed since the
        #: fetcher's plan last looked (it empties the set): that plan visits
        #: these rather than every partition.
        self.touched: set = set()
        # Whether a reset may be pending: set by request_reset, cleared by
        # awaiting_reset when it finds none (a reset is only ever asked for
        # there), so that a round without one walks no partition for it.
        self._resets_asked = False

    # -- assignment ------------------------------------------------------------
    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Replace the assignment; kept partitions keep their state.
        Partitions keep the order they were given in (duplicates dropped):
        the Fetch requests list them in this order, and a set's order would
        change with the process's hash seed."""
        wanted = dict.fromkeys(TopicPartition(*tp) for tp in partitions)
        self.version += 1
        self.assignment_version += 1
        self.states = {tp: self.states.get(tp) or PartitionState() for tp in wanted}

    def add(self, partitions: Iterable[TopicPartition]) -> None:
        self.version += 1
        self.assignment_version += 1
        for tp in partitions:
            self.states.setdefault(TopicPartition(*tp), PartitionState())

    def remove(self, partitions: Iterable[TopicPartition]) -> None:
        self.version += 1
        self.assignment_version += 1
        for tp in partitions:
            self.states.pop(TopicPartition(*tp), None)

    def assigned(self):
        return list(self.states)

    def fetchable_states(self):
        """(partition, state) of every fetchable partition (see :meth:`fetchable`)."""
        return [(tp, st) for tp, st in self.states.items()
                if not st.paused and st.position is not None and st.reset_to is None]

    def is_assigned(self, tp) -> bool:
        return tp in self.states

    def state(self, tp) -> PartitionState:
        try:
            return self.states[tp]
        except KeyError:
            raise KafkaError(f"partition {tp.topic}-{tp.partition} is not assigned to this consumer") from None

    # -- positions -------------------------------------------------------------
    def seek(self, tp, offset: int, leader_epoch: int = -1) -> None:
        if offset < 0:
            raise ValueError(f"offset must be >= 0, not {offset}")
        st = self.state(tp)
        self.version += 1
        self.touched.add(tp)
        st.position, st.leader_epoch, st.reset_to = offset, leader_epoch, None

    def position(self, tp) -> Optional[int]:
        return self.state(tp).position

    def request_reset(self, tp, strategy: Optional[str] = None) -> None:
        """Ask for the position to be reset (ListOffsets) to `strategy`
        (default: auto.offset.reset). With 'none' this raises instead."""
        strategy = strategy or self.auto_offset_reset
        st = self.state(tp)
        if strategy == NONE:
            err = NoOffsetForPartitionError(
                f"no valid offset for {tp.topic}-{tp.partition} and auto.offset.reset is 'none'")
            err.partitions = {tp}              # as Java's NoOffsetForPartitionException.partitions()
            raise err
        self.version += 1
        self.touched.add(tp)
        self._resets_asked = True
        st.reset_to, st.position = strategy, None

    def needs_position(self):
        """Partitions with neither a position nor a pending reset (the
        caller fetches committed offsets for them, or resets them)."""
        return [tp for tp, st in self.states.items() if st.position is None and st.reset_to is None]

    def awaiting_reset(self):
        """(partition, strategy) of every partition waiting for an offset
        reset, in assignment order; no walk while none was asked for since
        the last call that found none (the fetcher asks every round)."""
        if not self._resets_asked:
            return []
        out = [(tp, st.reset_to) for tp, st in self.states.items() if st.reset_to is not None]
        if not out:
            self._resets_asked = False
        return out

    def pause(self, partitions) -> None:
        self.version += 1
        for tp in partitions:
            self.state(tp).paused = True
            self.touched.add(tp)

    def resume(self, partitions) -> None:
        self.version += 1
        for tp in partitions:
            self.state(tp).paused = False
            self.touched.add(tp)

    def paused(self):
        return [tp for tp, st in self.states.items() if st.paused]

    def is_paused(self, tp) -> bool:
        st = self.states.get(tp)
        return st is not None and st.paused

    def fetchable(self):
        """Assigned, not paused, with a known position."""
        return [tp for tp, st in self.states.items()
                if not st.paused and st.position is not None and st.reset_to is None]

    def lag(self, tp) -> Optional[int]:
        """Records between the position and the high watermark (None until known)."""
        st = self.state(tp)
        if st.position is None or st.high_watermark is None:
            return None
        return max(0, st.high_watermark - st.position)
