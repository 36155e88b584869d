"""The consumer's fetch plan kept between rounds: which node leads each
assigned partition, and which partitions may have changed since the last
Fetch to each node (issue 27).

Why: with a fetch session (kproto.consumer.fetch_session) an incremental
Fetch lists only the partitions whose fetch offset or leader epoch changed,
yet planning it walked every assigned partition each round (its state, its
leader, an entry in the offsets, epochs and answer index): with 10 busy
partitions of 1,000, about 47,700 instructions per record went to partitions
that had not changed. This plan is rebuilt from every partition only when
the assignment or the metadata changed (``Positions.assignment_version``,
``ClusterMetadata.leaders_version``); in between, a Fetch to a node with an
open session visits only the partitions *pending* for that node: those a
seek, reset, pause or resume touched (``Positions.touched``), those an
answer buffered records for or whose state it changed (``mark``), and those
that were buffered at the node's last request (a drain moves a buffered
partition's position without telling anyone; it is not fetched while
buffered).

``Fetcher.incremental_plan = False`` walks every partition each round, the
reference: tests/test_fetch_plan.py runs both side by side and compares the
requests byte for byte.
"""
from __future__ import annotations

from typing import Dict, Optional, Set

from kproto.cluster import TopicPartition


class FetchPlan:
    """Leaders and pending partitions by node (see the module docstring)."""

    def __init__(self):
        #: (assignment version, leaders version) the plan was built at; None: never built
        self.key: Optional[tuple] = None
        #: partition -> the node leading it, for every assigned partition with a known leader
        self.node_of: Dict[TopicPartition, int] = {}
        #: partition -> its place in ``Positions.states``: requests list partitions in
        #: that order, as the walk over every partition does
        self.order: Dict[TopicPartition, int] = {}
        #: node -> {topic: {partition index: TopicPartition}} of every partition it leads:
        #: the index the answer's partitions are found in (a superset of a request's)
        self.index: Dict[int, Dict[str, Dict[int, TopicPartition]]] = {}
        #: assigned partitions without a known leader (a metadata refresh is asked for
        #: while one of them could be fetched)
        self.leaderless: Set[TopicPartition] = set()
        #: node -> the Fetch version and topic names (id -> name) of the last full walk
        #: that built a request to it at the current key; a node absent is planned by the walk
        self.synced: Dict[int, tuple] = {}
        #: nodes leading assigned partitions of which none could be fetched at the
        #: last walk (and none was in flight): skipped until one of theirs is pending
        self.idle: Set[int] = set()
        #: node -> the partitions to visit at its next request
        self.pending: Dict[int, Set[TopicPartition]] = {}
        #: partitions whose state an answer changed, not yet given to their node
        self.dirty: Set[TopicPartition] = set()
        #: partitions looked at by the last plan (tests count them)
        self.visited = 0

    def mark(self, tp: TopicPartition) -> None:
        """``tp``'s fetch state changed outside ``Positions`` (records
        buffered, a reset answered, a leader epoch dropped): visit it at its
        node's next request."""
        self.dirty.add(tp)

    def update(self, positions, leaders_of_topic, leaders_version: int) -> None:
        """Bring the plan up to date: rebuilt from every partition when the
        assignment or the leaders changed, else the partitions touched since
        the last update are handed to their nodes' pending sets."""
        key = (positions.assignment_version, leaders_version)
        touched = positions.touched
        if key != self.key:
            self._rebuild(positions.states, leaders_of_topic)
            self.key = key
            touched.clear()
            self.dirty.clear()
            return
        dirty = self.dirty
        if touched:
            dirty |= touched
            touched.clear()
        if not dirty:
            self.visited = 0
            return
        self.visited = len(dirty)
        node_of = self.node_of
        pending = self.pending
        for tp in dirty:
            node = node_of.get(tp)
            if node is None:
                continue                     # not assigned, or no leader (see ``leaderless``)
            found = pending.get(node)
            if found is None:
                found = pending[node] = set()
            found.add(tp)
        dirty.clear()

    def _rebuild(self, states: dict, leaders_of_topic) -> None:
        node_of: Dict[TopicPartition, int] = {}
        order: Dict[TopicPartition, int] = {}
        index: Dict[int, Dict[str, Dict[int, TopicPartition]]] = {}
        leaderless: Set[TopicPartition] = set()
        topic = None
        leaders: dict = {}
        i = 0
        for tp in states:
            order[tp] = i
            i += 1
            t, partition = tp
            if t != topic:
                topic = t
                leaders = leaders_of_topic(t) or {}
            leader = leaders.get(partition, -1)
            if leader is None or leader < 0:
                leaderless.add(tp)
                continue
            node_of[tp] = leader
            by_topic = index.get(leader)
            if by_topic is None:
                by_topic = index[leader] = {}
            parts = by_topic.get(t)
            if parts is None:
                parts = by_topic[t] = {}
            parts[partition] = tp
        self.node_of, self.order, self.index, self.leaderless = node_of, order, index, leaderless
        self.synced, self.pending, self.idle = {}, {}, set()
        self.visited = i

    def leaderless_fetchable(self, states: dict, buffered) -> bool:
        """Whether a partition without a known leader could be fetched now
        (the walk over every partition asks for a metadata refresh then)."""
        for tp in self.leaderless:
            st = states.get(tp)
            if (st is not None and not st.paused and st.position is not None and st.reset_to is None
                    and tp not in buffered):
                return True
        return False

    def synced_by_walk(self, node: int, version: int, topic_names: dict, buffered) -> None:
        """A full walk just built the request to ``node``: what its session
        holds is what the positions say, but for the partitions buffered
        now, which a drain may free without a word."""
        self.synced[node] = (version, topic_names)
        self.idle.discard(node)
        node_of = self.node_of
        self.pending[node] = {tp for tp in buffered if node_of.get(tp) == node}

    def idle_after_walk(self, by_node: dict, in_flight, buffered) -> None:
        """After a walk: the nodes it found nothing to fetch from (not in
        ``by_node``, not in flight) wait, without a walk per round, until
        one of their partitions is pending (a buffered one among them)."""
        node_of = self.node_of
        for node in self.index:
            if node in by_node or node in in_flight:
                continue
            self.idle.add(node)
            self.synced.pop(node, None)
            self.pending[node] = {tp for tp in buffered if node_of.get(tp) == node}
