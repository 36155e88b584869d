"""Explicit transition tables for the core's state machines, as h11's ``_state.py``.

A machine keeps its states in an :class:`enum.Enum` and lists, for every
state, the states it may move to next (a ``dict`` state -> ``frozenset``).
Every state change goes through :func:`checked_move`, which refuses a move
that is not in the table with an exception naming the machine and both
states. The table is then the whole truth about the machine's life: a
reader sees every path in one place, and a test can walk every allowed and
every forbidden pair.
"""
import enum
from typing import FrozenSet, Mapping, Type, TypeVar

from kproto.errors import IllegalStateTransitionError, KafkaError

__all__ = ["TransitionTable", "checked_move"]

S = TypeVar("S", bound=enum.Enum)

#: state -> the states it may move to
TransitionTable = Mapping[S, FrozenSet[S]]


def checked_move(table: "TransitionTable[S]", current: S, new: S, *, machine: str, owner: str,
                 error: Type[KafkaError] = IllegalStateTransitionError) -> S:
    """``new`` if ``table`` allows ``current -> new``, else raise ``error``.

    ``machine`` names the machine ("connection", "group membership"),
    ``owner`` the instance ("connection to node 1", "group 'g1'"); both go
    into the message, with the two states."""
    if new not in table[current]:
        raise error(f"{owner}: {current.name} -> {new.name} is not a transition of the "
                    f"{machine} machine")
    return new
