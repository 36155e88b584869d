"""Partition assignors run by the group leader: range, roundrobin, cooperative-sticky.

Semantics follow the Java client's assignors (``RangeAssignor``,
``RoundRobinAssignor``, ``CooperativeStickyAssignor``):

* members are ordered as Java's ``MemberInfo``: static members (with a
  group.instance.id) first, by instance id, then dynamic members by member id -
  so a static member keeps its place (and its partitions) across restarts;
* topics the leader has no metadata for are skipped (assigned to nobody);
* cooperative-sticky keeps every member's still-valid owned partitions, balances
  (no partition can move to an eligible member with 2+ fewer partitions), and
  applies the cooperative rule: a partition that changes owner is *not* given to
  its new owner in this round - the old owner revokes it, rejoins, and the
  follow-up rebalance hands it over. Placement of moved partitions may differ
  from Java's (the guarantees are the same, not the exact layout).

The subscription and assignment bytes are ConsumerProtocolSubscription /
ConsumerProtocolAssignment (versions 0-3), see :func:`encode_subscription` etc.
"""
from __future__ import annotations

import enum
import struct
from collections import defaultdict
from typing import Iterable, NamedTuple, Optional

from kproto import messages
from kproto.consumer import TopicPartition
from kproto.errors import ConfigError

__all__ = [
    "RebalanceProtocol", "MemberSubscription", "Assignment", "Assignor", "RangeAssignor",
    "RoundRobinAssignor", "CooperativeStickyAssignor", "assignor_by_name", "build_assignors",
    "encode_subscription", "decode_subscription", "encode_assignment", "decode_assignment",
    "group_partitions", "rebalance_protocol_for",
]

SUBSCRIPTION_SCHEMA = "ConsumerProtocolSubscription"
ASSIGNMENT_SCHEMA = "ConsumerProtocolAssignment"
#: The versions we write (the newest; older readers ignore the appended fields).
SUBSCRIPTION_VERSION = 3
ASSIGNMENT_VERSION = 3


class RebalanceProtocol(enum.Enum):
    EAGER = "EAGER"              # revoke everything before every rebalance
    COOPERATIVE = "COOPERATIVE"  # keep what stays; revoke only what moves


class MemberSubscription(NamedTuple):
    """One member's decoded subscription, as the leader sees it."""
    topics: tuple
    user_data: Optional[bytes] = None
    owned_partitions: tuple = ()          # TopicPartitions the member owns now
    generation_id: int = -1               # generation of owned_partitions (-1: unknown)
    rack_id: Optional[str] = None
    group_instance_id: Optional[str] = None


class Assignment(NamedTuple):
    partitions: tuple                     # sorted TopicPartitions
    user_data: Optional[bytes] = None


# -- wire forms ------------------------------------------------------------------------

def group_partitions(partitions: Iterable[TopicPartition]) -> list:
    """[TopicPartition] -> [{"topic", "partitions"}] sorted, as the structs want."""
    by_topic = defaultdict(list)
    for tp in partitions:
        by_topic[tp.topic].append(tp.partition)
    return [{"topic": t, "partitions": sorted(ps)} for t, ps in sorted(by_topic.items())]


def _ungroup(entries) -> tuple:
    return tuple(sorted(TopicPartition(e["topic"], p) for e in entries or () for p in e["partitions"]))


def encode_subscription(topics, user_data=None, owned_partitions=(), generation_id=-1,
                        rack_id=None, version=SUBSCRIPTION_VERSION) -> bytes:
    return messages.encode_struct(SUBSCRIPTION_SCHEMA, version, {
        "topics": sorted(topics), "user_data": user_data,
        "owned_partitions": group_partitions(owned_partitions),
        "generation_id": generation_id, "rack_id": rack_id})


def decode_subscription(data, group_instance_id=None) -> MemberSubscription:
    _version, v = messages.decode_struct(SUBSCRIPTION_SCHEMA, data)
    return MemberSubscription(tuple(v["topics"]), v["user_data"], _ungroup(v["owned_partitions"]),
                              v["generation_id"], v["rack_id"], group_instance_id)


def encode_assignment(partitions, user_data=None, version=ASSIGNMENT_VERSION) -> bytes:
    return messages.encode_struct(ASSIGNMENT_SCHEMA, version, {
        "assigned_partitions": group_partitions(partitions), "user_data": user_data})


def decode_assignment(data) -> Assignment:
    """An empty byte string (what a broker sends a member without assignment) is
    an empty assignment, as in Java."""
    if data is None or len(data) == 0:
        return Assignment(())
    _version, v = messages.decode_struct(ASSIGNMENT_SCHEMA, data)
    return Assignment(_ungroup(v["assigned_partitions"]), v["user_data"])


# -- shared helpers ---------------------------------------------------------------------

def _member_sort_key(member_id: str, sub: MemberSubscription):
    # Java's MemberInfo.compareTo: static members first (by instance id), then member id.
    if sub.group_instance_id is not None:
        return (0, sub.group_instance_id, member_id)
    return (1, member_id, member_id)


def _sorted_members(members: dict) -> list:
    return sorted(members, key=lambda m: _member_sort_key(m, members[m]))


def _topic_partitions(topic: str, partitions_per_topic: dict) -> list:
    n = partitions_per_topic.get(topic)
    return [TopicPartition(topic, p) for p in range(n)] if n else []


def _finish(assignment: dict, members: dict) -> dict:
    return {m: Assignment(tuple(sorted(assignment.get(m, ())))) for m in members}


class Assignor:
    """Base class: ``name`` is the protocol name sent in JoinGroup."""

    name = ""
    supported_protocols = (RebalanceProtocol.EAGER,)

    def subscription_user_data(self, topics, owned_partitions, generation_id) -> Optional[bytes]:
        return None

    def assign(self, partitions_per_topic: dict, members: dict) -> dict:
        """partitions_per_topic {topic: count}; members {member_id: MemberSubscription}
        -> {member_id: Assignment} (every member present, possibly empty)."""
        raise NotImplementedError

    def __repr__(self):
        return f"<{type(self).__name__} {self.name!r}>"


class RangeAssignor(Assignor):
    """Per topic, consecutive ranges over the subscribed members in MemberInfo
    order; the first (count % members) members get one extra partition."""

    name = "range"

    def assign(self, partitions_per_topic, members):
        out = defaultdict(list)
        by_topic = defaultdict(list)
        for m in _sorted_members(members):
            for t in set(members[m].topics):
                by_topic[t].append(m)
        for topic, consumers in by_topic.items():
            parts = _topic_partitions(topic, partitions_per_topic)
            per, extra = divmod(len(parts), len(consumers))
            start = 0
            for i, m in enumerate(consumers):
                n = per + (1 if i < extra else 0)
                out[m].extend(parts[start:start + n])
                start += n
        return _finish(out, members)


class RoundRobinAssignor(Assignor):
    """All topic-partitions sorted by (topic, partition), dealt one by one to
    the members in MemberInfo order, skipping members not subscribed to the
    partition's topic (Java's circular iterator)."""

    name = "roundrobin"

    def assign(self, partitions_per_topic, members):
        out = defaultdict(list)
        order = _sorted_members(members)
        if not order:
            return {}
        subscribed = {m: set(members[m].topics) for m in order}
        topics = sorted(set().union(*subscribed.values()))
        i = 0
        for topic in topics:
            for tp in _topic_partitions(topic, partitions_per_topic):
                while topic not in subscribed[order[i % len(order)]]:
                    i += 1
                out[order[i % len(order)]].append(tp)
                i += 1
        return _finish(out, members)


class CooperativeStickyAssignor(Assignor):
    """Sticky, balanced, cooperative (see the module docstring).

    User data is the member's generation as a 4-byte int, as Java writes it for
    leaders that only read subscription v0/v1; v2+ subscriptions also carry it
    in ``generation_id``, which wins when present.
    """

    name = "cooperative-sticky"
    supported_protocols = (RebalanceProtocol.EAGER, RebalanceProtocol.COOPERATIVE)

    def subscription_user_data(self, topics, owned_partitions, generation_id):
        return struct.pack(">i", generation_id)

    @staticmethod
    def member_generation(sub: MemberSubscription) -> int:
        if sub.generation_id is not None and sub.generation_id >= 0:
            return sub.generation_id
        if sub.user_data is not None and len(sub.user_data) >= 4:
            return struct.unpack_from(">i", sub.user_data)[0]
        return -1

    def assign(self, partitions_per_topic, members):
        assignment, _kept, moving = self.sticky_assign(partitions_per_topic, members)
        # The cooperative rule: a partition whose previous owner is someone else is
        # held back this round; its owner revokes it and the follow-up rebalance
        # (which the revoking member triggers by rejoining) hands it over.
        for tp, (_prev, new) in moving.items():
            assignment[new].discard(tp)
        return _finish(assignment, members)

    def sticky_assign(self, partitions_per_topic, members):
        """The balanced sticky assignment before the cooperative rule.

        Returns ({member: set(TopicPartition)}, {tp: keeper}, {tp: (previous, new)})."""
        order = _sorted_members(members)
        rank = {m: i for i, m in enumerate(order)}
        eligible_topics = {m: {t for t in members[m].topics if partitions_per_topic.get(t)} for m in order}
        consumers_of = defaultdict(list)
        for m in order:
            for t in eligible_topics[m]:
                consumers_of[t].append(m)
        all_parts = [tp for t in sorted(consumers_of) for tp in _topic_partitions(t, partitions_per_topic)]
        existing = set(all_parts)

        # Who owns what now. Claims of the newest generation are valid for
        # stickiness; two members claiming a partition in that generation both
        # lose it (Java logs this as an error and reassigns it).
        gen = {m: self.member_generation(members[m]) for m in order}
        claims = defaultdict(list)          # tp -> [(generation, member)]
        for m in order:
            for tp in members[m].owned_partitions:
                tp = TopicPartition(*tp)
                if tp in existing:     # even if m dropped the topic: it must revoke first
                    claims[tp].append((gen[m], m))
        max_gen = max(gen.values(), default=-1)
        valid_owner = {}
        for tp, cs in claims.items():
            top = [m for g, m in cs if g == max_gen and tp.topic in eligible_topics[m]]
            if len(top) == 1:
                valid_owner[tp] = top[0]

        assignment = {m: set() for m in order}
        for tp, m in valid_owner.items():
            assignment[m].add(tp)
        sticky = {m: set(ps) for m, ps in assignment.items()}

        # Unowned partitions: hardest to place first (fewest eligible members),
        # each to the eligible member with the fewest partitions.
        unassigned = [tp for tp in all_parts if tp not in valid_owner]
        unassigned.sort(key=lambda tp: (len(consumers_of[tp.topic]), tp))
        for tp in unassigned:
            dst = min(consumers_of[tp.topic], key=lambda m: (len(assignment[m]), rank[m]))
            assignment[dst].add(tp)

        self._balance(assignment, consumers_of, sticky, rank)

        moving = {}
        for m, ps in assignment.items():
            for tp in ps:
                prev = self._previous_owner(tp, m, claims.get(tp, ()), gen)
                if prev is not None:
                    moving[tp] = (prev, m)
        kept = {tp: m for m, ps in assignment.items() for tp in ps if tp not in moving}
        return assignment, kept, moving

    @staticmethod
    def _previous_owner(tp, new_owner, tp_claims, gen):
        """The member that must give tp up before new_owner may have it, or None.

        A claim means the member holds the partition right now (a member that lost
        its generation also drops its claims), so any other claimant blocks the
        transfer - unless new_owner itself claims it with a newer generation (then
        the others are stale zombies and new_owner keeps it). Two claims of the
        same generation are a conflict: the other claimant revokes first."""
        mine = [g for g, m in tp_claims if m == new_owner]
        others = [(g, m) for g, m in tp_claims if m != new_owner]
        if not others:
            return None
        if mine and max(mine) > max(g for g, _ in others):
            return None
        return max(others)[1]

    @staticmethod
    def _balance(assignment, consumers_of, sticky, rank):
        """Move partitions from a member to an eligible member with 2+ fewer
        partitions until no such move exists (Java's definition of balanced).
        Freshly placed partitions move before sticky ones; most loaded first."""
        while True:
            moved = False
            for src in sorted(assignment, key=lambda m: (-len(assignment[m]), rank[m])):
                n_src = len(assignment[src])
                if n_src < 2:
                    break
                for tp in sorted(assignment[src], key=lambda tp: (tp in sticky[src], tp)):
                    dst = min(consumers_of[tp.topic], key=lambda m: (len(assignment[m]), rank[m]))
                    if len(assignment[dst]) < n_src - 1:
                        assignment[src].discard(tp)
                        assignment[dst].add(tp)
                        moved = True
                        break
                if moved:
                    break
            if not moved:
                return


_ASSIGNORS = {a.name: a for a in (RangeAssignor, RoundRobinAssignor, CooperativeStickyAssignor)}


def assignor_by_name(name: str) -> Assignor:
    try:
        return _ASSIGNORS[name]()
    except KeyError:
        raise ConfigError(f"unknown partition.assignment.strategy {name!r} "
                          f"(known: {', '.join(_ASSIGNORS)})") from None


def build_assignors(strategy) -> list:
    """partition.assignment.strategy: a comma-separated string or a list of names
    and/or Assignor instances, in preference order. Java's default is
    ["range", "cooperative-sticky"]."""
    if isinstance(strategy, str):
        strategy = [s.strip() for s in strategy.split(",") if s.strip()]
    out = [s if isinstance(s, Assignor) else assignor_by_name(s) for s in strategy]
    if not out:
        raise ConfigError("partition.assignment.strategy is empty")
    names = [a.name for a in out]
    if len(set(names)) != len(names):
        raise ConfigError(f"partition.assignment.strategy names an assignor twice: {names}")
    return out


def rebalance_protocol_for(assignors) -> RebalanceProtocol:
    """The protocol every configured assignor supports, COOPERATIVE preferred
    (Java: with ["range", "cooperative-sticky"] the member stays EAGER until the
    eager assignor is removed from the list)."""
    common = set(RebalanceProtocol)
    for a in assignors:
        common &= set(a.supported_protocols)
    if RebalanceProtocol.COOPERATIVE in common:
        return RebalanceProtocol.COOPERATIVE
    if RebalanceProtocol.EAGER in common:
        return RebalanceProtocol.EAGER
    raise ConfigError("the configured assignors share no rebalance protocol")
