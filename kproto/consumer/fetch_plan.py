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
        #: the partitions buffered at the last walk, to be given to their nodes
        #: at the next update (a drain frees them without a word)
        self.carried: Optional[set] = None
        #: partitions looked at by the last plan (tests count them)
        self.visited = 0

    def mark(self, tp: TopicPartition) -> None:
        """``tp``'s fetch state changed outside ``Positions`` (records
        buffered, a reset answered, a leader epoch dropped): visit it at its
        node's next request. (The fetcher adds to ``dirty`` directly on its
        per-answer path.)"""
        self.dirty.add(tp)

    def update(self, positions, leaders_of_topic, leaders_version: int, walk_above_share: int) -> bool:
        """Bring the plan up to date: rebuilt from every partition when the
        assignment or the leaders changed, else the partitions touched since
        the last update are handed to their nodes' pending sets. True when
        every node not in flight is to be walked this round: after a rebuild,
        or when more than 1/``walk_above_share`` of the partitions changed
        (every partition busy: the walk, in C, is cheaper than visiting
        them one by one here; every node walks when it can then)."""
        key = (positions.assignment_version, leaders_version)
        touched = positions.touched
        dirty = self.dirty
        carried = self.carried
        self.carried = None
        if key != self.key:
            self._rebuild(positions.states, leaders_of_topic)
            self.key = key
            touched.clear()
            dirty.clear()
            return True
        changed = len(dirty) + len(touched) + (len(carried) if carried else 0)
        self.visited = changed
        if not changed:
            return False
        if changed * walk_above_share > len(self.order):
            self.synced, self.pending, self.idle = {}, {}, set()
            touched.clear()
            dirty.clear()
            return True
        if touched:
            dirty |= touched
            touched.clear()
        if carried:
            dirty |= carried
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
        return False

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
        self.carried = None
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

    def after_walk(self, walked: list, by_node: dict, in_flight, buffered: set) -> None:
        """The walk over every partition just built ``walked`` (requests)
        from ``by_node`` (the nodes it found partitions to fetch from): the
        sessions of those nodes hold what the positions say, but for the
        partitions buffered now, which a drain may free without a word (they
        are handed to their nodes at the next update: ``carried``); a node it
        found nothing to fetch from, and not in flight, is idle until one of
        its partitions is pending."""
        synced, pending = self.synced, self.pending
        for req in walked:
            synced[req.node] = (req.version, req.topic_names)
            pending[req.node] = set()
            self.idle.discard(req.node)
        for node in self.index:
            if node in by_node or node in in_flight:
                continue
            self.idle.add(node)
            synced.pop(node, None)
            pending[node] = set()
        self.carried = buffered
