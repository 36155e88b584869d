"""The consumer's fetcher as a sans-IO state machine (Java's ``Fetcher`` +
``FetchCollector`` + ``OffsetFetcher`` without the network).

It decides *what* to fetch and turns responses into records:

* ``fetch_requests(...)`` builds at most one Fetch request per leader node
  (like Java: a node with a fetch in flight gets no second one), for the
  assigned, unpaused partitions that have a position and no buffered data -
  so the next fetch is already in flight while the application processes the
  records of the previous one;
* ``on_fetch_response`` / ``on_fetch_failure`` digest the answer: records are
  buffered per partition (parsed lazily, CRC-checked), errors are handled as
  the Java client does (leadership errors ask for a metadata refresh,
  OFFSET_OUT_OF_RANGE resets the position by auto.offset.reset or raises,
  authorization and corruption errors surface to the application);
* ``drain(max_records)`` hands out up to max.poll.records records and moves
  positions; ``drain_columns`` is the bulk path (lists per partition);
* ``reset_requests`` / ``on_list_offsets_response`` resolve pending offset
  resets (earliest/latest) with ListOffsets.

``read_committed`` filtering follows the protocol: transactional batches of
producers listed in the response's aborted transactions are dropped from
the first offset of the aborted transaction until that producer's ABORT
marker; control batches never reach the application.
"""
from __future__ import annotations

import collections
from typing import Callable, Dict, List, NamedTuple, Optional

from kproto import error_codes
from kproto.cluster import TopicPartition
from kproto.consumer._fetch import (
    Buffered as _Buffered, FetchAnswer, apply_fetch_answer, drain_columns, fetch_partitions, select_fetchable,
    take_records,
)
from kproto.consumer._fetch_request import FetchFrame, fetch_request_body
from kproto.consumer.fetch_plan import FetchPlan
from kproto.consumer.fetch_session import (
    FETCH_SESSION_TOPIC_ID_ERROR, FIRST_SESSION_VERSION, SESSION_ERRORS, FetchSession,
)
from kproto.consumer.positions import (
    EARLIEST, LIST_OFFSETS_EARLIEST, LIST_OFFSETS_LATEST, OffsetOutOfRangeError, Positions,
)
from kproto.errors import ConfigError, KafkaError
from kproto.messages import EncodedBody
from kproto.records import CONTROL_ABORT, ColumnBuffers, RecordBatch

READ_UNCOMMITTED, READ_COMMITTED = 0, 1
FETCH_API_KEY = 1
ISOLATION_LEVELS = {"read_uncommitted": READ_UNCOMMITTED, "read_committed": READ_COMMITTED}

# Partition errors after which the leader we fetched from is no longer right:
# refresh metadata and fetch again (Java: Fetcher.handleFetchResponse).
_REFRESH_METADATA = {
    "NOT_LEADER_OR_FOLLOWER", "REPLICA_NOT_AVAILABLE", "KAFKA_STORAGE_ERROR",
    "FENCED_LEADER_EPOCH", "OFFSET_NOT_AVAILABLE", "UNKNOWN_TOPIC_OR_PARTITION",
    "UNKNOWN_TOPIC_ID", "INCONSISTENT_TOPIC_ID", "UNKNOWN_LEADER_EPOCH",
}


class RecordTooLargeForFetchError(KafkaError):
    """A batch at the position is larger than max.partition.fetch.bytes
    allows and the broker returned only part of it."""


class FetchRequest(NamedTuple):
    node: int
    version: int
    body: dict
    offsets: Dict[TopicPartition, int]       # the fetch offset of every partition in it
    topic_names: Dict[object, str]           # topic id -> name, for v13+ responses
    # topic -> partition index -> TopicPartition of every partition in it: the
    # answer's partitions are found here, not rebuilt as TopicPartitions
    # (a thousand partitions per answer made that a cost per partition)
    partitions: Dict[str, Dict[int, TopicPartition]]
    # ``body`` written in C (kproto/consumer/_fetch_request.pyx), what is
    # sent; None: the generic codec encodes ``body`` (the reference path).
    encoded: Optional[EncodedBody] = None
    # the fetch session epoch it was sent with (kproto.consumer.fetch_session);
    # None: no session (sessions off, or Fetch below v7)
    session_epoch: Optional[int] = None

    @property
    def wire_body(self):
        """What to hand to ``send``: the body written in C, or the dict."""
        return self.body if self.encoded is None else self.encoded


# When the walk over every partition (in C: select_fetchable, fetch_partitions)
# is cheaper than the kept plan's book-keeping (measured with
# bench/consumer_cost.py, issue 27): for a few partitions assigned, and when
# more than a quarter of them changed since the last Fetch (every partition
# busy: each one's position moved).
_WALK_AT_MOST = 64
_WALK_ABOVE_SHARE = 4


# Frames kept per node (by number of partitions listed): a quiet consumer
# alternates between two shapes; more come and go with the load.
_FRAMES_PER_NODE = 4


def _first(item):
    return item[0]


#: _incremental's answer when the walk over every partition must plan a node
_WALK = object()


class ListOffsetsRequest(NamedTuple):
    node: int
    body: dict
    strategies: Dict[TopicPartition, str]


def take_legacy_columns(batch, cols, min_offset: int, room: int):
    """A legacy message set's records at or above min_offset (at most room)
    appended to the (offsets, timestamps, keys, values) lists cols; returns
    (count, complete, last offset taken) as RecordBatch.append_columns."""
    n, last = 0, -1
    for rec in batch.records(None, -1, min_offset):
        if n == room:
            return n, False, last
        cols[0].append(rec.offset); cols[1].append(rec.timestamp)
        cols[2].append(rec.key); cols[3].append(rec.value)
        n, last = n + 1, rec.offset
    return n, True, last


class Fetcher:
    def __init__(self, positions: Positions, *, fetch_min_bytes=1, fetch_max_wait_ms=500,
                 fetch_max_bytes=52428800, max_partition_fetch_bytes=1048576,
                 isolation_level="read_uncommitted", check_crcs=True, max_poll_records=500,
                 client_rack=""):
        if isolation_level not in ISOLATION_LEVELS:
            raise ConfigError(f"isolation.level must be read_uncommitted or read_committed, "
                              f"not {isolation_level!r}")
        if max_poll_records < 1:
            raise ConfigError(f"max.poll.records must be at least 1, not {max_poll_records}")
        self.positions = positions
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_max_bytes = fetch_max_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.isolation = ISOLATION_LEVELS[isolation_level]
        self.check_crcs = check_crcs
        self.max_poll_records = max_poll_records
        self.client_rack = client_rack
        # Fetch bodies written in C (kproto/consumer/_fetch_request.pyx); False
        # leaves them to the generic codec, the reference the twin tests
        # compare with (tests/test_fetch_request_writer.py).
        self.write_in_c = True
        #: KIP-227 fetch sessions (kproto.consumer.fetch_session): after a
        #: full Fetch, a node is sent only the partitions that changed and
        #: answers only the partitions that did. False: every Fetch is full
        #: (session id 0, epoch -1), the reference the tests compare with.
        self.use_sessions = True
        #: node -> its FetchSession
        self.sessions: Dict[int, FetchSession] = {}
        #: With a session open, plan the next Fetch from the partitions that
        #: changed only (kproto.consumer.fetch_plan); False: walk every
        #: partition each round, the reference (tests/test_fetch_plan.py).
        self.incremental_plan = True
        self._plan = FetchPlan()
        self._plan_dirty = self._plan.dirty
        #: With ``write_in_c``, a Fetch of the same shape as the last one to
        #: its node (the same partitions, only offsets and the session epoch
        #: changed) is that one's bytes patched (_fetch_request.FetchFrame);
        #: False: every body is written anew, the reference.
        self.reuse_frames = True
        self._frames: Dict[int, Dict[int, FetchFrame]] = {}     # node -> partitions listed -> frame
        self.frames_reused = 0                   # (tests and benchmarks count them)
        #: With a session open and a walk that planned one request to one
        #: node from every assigned partition (a quiet consumer of a few
        #: partitions), the next round re-uses that plan while nothing it
        #: depends on moved (see ``_quiet_request``): no walk, no topic
        #: lookups, the same names and index. False: the walk every round,
        #: the reference (tests/test_fetch_quiet.py).
        self.quiet_path = True
        self._quiet: Optional[tuple] = None      # what the last walk planned, and under which versions
        self.quiet_requests = 0                  # (tests and benchmarks count them)
        self._in_flight_nodes: set = set()
        self._buffered: "collections.deque[_Buffered]" = collections.deque()
        self._errors: List[Exception] = []       # raised to the application on the next drain
        self.metadata_refresh_needed = False
        self._resets_in_flight: set = set()
        #: KIP-951: ``leader_hint(tp, partition_answer, node_endpoints) -> bool``
        #: gives a NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH answer's
        #: CurrentLeader to the metadata cache (the core sets it to
        #: ClusterMetadata.apply_leader_hint); True spares the refresh.
        self.leader_hint: Optional[Callable] = None

    # -- building fetches ------------------------------------------------------
    def _buffered_partitions(self):
        return {b.tp for b in self._buffered}

    def fetch_requests(self, leader_of: Callable[[TopicPartition], Optional[int]],
                       version_of: Callable[[int], Optional[int]],
                       topic_id_of: Callable[[str], object] = lambda topic: None,
                       leaders_of_topic: Optional[Callable[[str], Optional[Dict[int, int]]]] = None,
                       leaders_version: Optional[int] = None,
                       ) -> List[FetchRequest]:
        """Fetch requests to send now: one per leader without a fetch in flight.

        ``leader_of(tp)`` is the leader's node id or None when unknown;
        ``leaders_of_topic(topic)``, when given, answers for a whole topic
        instead: its {partition: leader node, -1 when unknown} or None (one
        call per topic rather than one per partition, which counted with a
        thousand partitions);
        ``version_of(node)`` the negotiated Fetch version for that node (None
        while not connected: that node is skipped for now);
        ``topic_id_of(topic)`` the topic id, needed from Fetch v13 on;
        ``leaders_version``, with ``leaders_of_topic``, a number that changes
        whenever a leader or a topic id may have (``ClusterMetadata.leaders_version``):
        the plan is then kept between rounds and an incremental request
        visits only the partitions that changed (kproto.consumer.fetch_plan).
        """
        if leaders_of_topic is not None:
            if (self.incremental_plan and leaders_version is not None
                    and len(self.positions.states) > _WALK_AT_MOST):
                self._quiet = None
                return self._planned_requests(self._buffered_partitions(), leaders_of_topic, leaders_version,
                                              version_of, topic_id_of)
            quiet = self._quiet
            if quiet is not None:
                requests = self._quiet_request(quiet, version_of, leaders_version)
                if requests is not None:
                    return requests
            buffered = self._buffered_partitions()
            self.positions.touched.clear()       # (kept for the plan only)
            self._plan_dirty.clear()
            states = self.positions.states
            by_node, refresh = select_fetchable(states, buffered, leaders_of_topic, self._in_flight_nodes)
            self.metadata_refresh_needed = self.metadata_refresh_needed or refresh
            requests = self._requests(by_node, version_of, topic_id_of)
            self._quiet = None
            if (len(requests) == 1 and self.quiet_path and leaders_version is not None and not refresh
                    and not buffered):
                self._keep_quiet(requests[0], by_node, states, leaders_version)
            return requests
        self._quiet = None
        buffered = self._buffered_partitions()
        self.positions.touched.clear()
        self._plan_dirty.clear()
        by_node: Dict[int, list] = {}
        for tp, st in self.positions.fetchable_states():
            if tp in buffered:
                continue
            leader = leader_of(tp)
            if leader is None or leader < 0:
                self.metadata_refresh_needed = True
                continue
            if leader in self._in_flight_nodes:
                continue
            by_node.setdefault(leader, []).append((tp, st))
        return self._requests(by_node, version_of, topic_id_of)

    def _keep_quiet(self, req: FetchRequest, by_node, states, leaders_version) -> None:
        """Keep what the walk planned for ``req`` when the next round can
        re-use it: the only request, to a node with a session, naming every
        assigned partition (none buffered, none without a leader or a topic
        id, no other node) - so that nothing but the partitions' positions
        and leader epochs can change the next walk's outcome while the
        versions it is kept under stay."""
        tps = by_node.get(req.node)
        session = self.sessions.get(req.node)
        if (req.session_epoch is None or session is None or len(by_node) != 1 or tps is None
                or len(tps) != len(states) or len(req.offsets) != len(tps) or session.offsets is not req.offsets):
            return
        self._quiet = (states, self.positions.assignment_version, leaders_version, req.node, req.version, tps,
                       session, req.offsets, session.topic_ids, req.topic_names, req.partitions)

    def _quiet_request(self, quiet, version_of, leaders_version) -> Optional[List[FetchRequest]]:
        """The walk's outcome from the plan ``_keep_quiet`` kept, or None
        when the walk must decide (the plan is dropped). Kept valid by:
        the same states dict and assignment (``assignment_version``), no
        seek, reset, pause or resume since (``touched``: a partition that
        became unfetchable went through one of them), nothing buffered, the
        same leaders and topic ids (``leaders_version``: every metadata
        update, leader hint or rebootstrap bumps it), the same open session
        holding exactly what the last request sent, the same Fetch version.
        The request is then ``_build``'s for the same partitions: those
        whose position or leader epoch moved are listed, nothing is
        forgotten (the session holds exactly these partitions)."""
        (states, assignment_version, kept_version, node, version, tps, session, sent, topic_ids, names,
         index) = quiet
        positions = self.positions
        if (kept_version != leaders_version or positions.states is not states
                or positions.assignment_version != assignment_version or positions.touched or self._buffered
                or not self.quiet_path or not self.use_sessions or self.sessions.get(node) is not session
                or session.offsets is not sent or session.topic_ids is not topic_ids or session.is_full):
            self._quiet = None
            return None
        self._plan_dirty.clear()                 # as the walk does (the kept plan is not in use)
        if node in self._in_flight_nodes:
            return []                            # the walk skips it: every partition is its
        now_version = version_of(node)
        if now_version is None:
            return []                            # not ready: skipped, as _requests would
        if now_version != version:
            self._quiet = None
            return None
        topics, offsets, _, epochs, _ = fetch_partitions(tps, self.max_partition_fetch_bytes, sent, session.epochs)
        by_id = version >= 13
        topic_entries = []
        for topic, parts in (sorted(topics.items(), key=_first) if len(topics) > 1 else topics.items()):
            if parts:
                if by_id:
                    topic_entries.append({"topic_id": topic_ids[topic], "partitions": parts})
                else:
                    topic_entries.append({"topic": topic, "partitions": parts})
        session_id, epoch = session.session_id, session.epoch
        session.sent(offsets, epochs, topic_ids)
        req = self._request(node, version, session_id, epoch, topic_entries, [], offsets, names, index, epoch)
        self._in_flight_nodes.add(node)
        self._quiet = (states, assignment_version, kept_version, node, version, tps, session, offsets, topic_ids,
                       names, index)
        self.quiet_requests += 1
        return [req]

    def _planned_requests(self, buffered, leaders_of_topic, leaders_version, version_of,
                          topic_id_of) -> List[FetchRequest]:
        """fetch_requests with the kept plan: every node with an open session
        and a request built at the current plan gets its incremental request
        from its pending partitions; if any other node could be fetched from,
        this round walks every partition (the reference path) and the nodes
        it built requests for are in step again."""
        plan = self._plan
        walk = plan.update(self.positions, leaders_of_topic, leaders_version, _WALK_ABOVE_SHARE)
        states = self.positions.states
        in_flight = self._in_flight_nodes
        fast = None if walk else []
        if fast is not None:
            for node in plan.index:
                if node in in_flight:
                    continue
                if node in plan.idle:
                    if plan.pending.get(node):
                        fast = None              # a partition of an idle node changed: walk
                        break
                    continue                     # still nothing to fetch from it
                synced = plan.synced.get(node)
                session = self.sessions.get(node)
                if synced is None or session is None or session.is_full:
                    fast = None                  # a node to walk for
                    break
                fast.append((node, synced, session))
        requests = []
        if fast is not None:
            if plan.leaderless and plan.leaderless_fetchable(states, buffered):
                self.metadata_refresh_needed = True
            for node, (sent_version, names), session in fast:
                req = self._incremental(plan, node, sent_version, names, session, states, buffered, version_of)
                if req is _WALK:
                    break
                if req is not None:
                    self._in_flight_nodes.add(node)
                    requests.append(req)
            else:
                return requests
        # The walk over every partition (the reference path), for every node
        # without a request yet; the nodes it plans for are in step after it.
        plan.visited += len(states)
        by_node, refresh = select_fetchable(states, buffered, leaders_of_topic, in_flight)
        self.metadata_refresh_needed = self.metadata_refresh_needed or refresh
        walked = self._requests(by_node, version_of, topic_id_of)
        plan.after_walk(walked, by_node, in_flight, buffered)
        return requests + walked

    def _incremental(self, plan: FetchPlan, node, version, names, session, states, buffered,
                     version_of) -> Optional[FetchRequest]:
        """The incremental Fetch to ``node`` from its pending partitions
        only, as ``_build`` would make it from every partition (the same
        partitions, in the same order); None when nothing is to be fetched
        from it, or the walk must decide (a version or a topic changed)."""
        pending = plan.pending.get(node)
        known_offsets, known_epochs = session.offsets, session.epochs
        listed = []
        removed = []
        held = set()
        if pending:
            plan.visited += len(pending)
            order = plan.order
            for tp in sorted(pending, key=order.__getitem__):
                st = states.get(tp)
                if st is not None and not st.paused and st.position is not None and st.reset_to is None:
                    if tp not in buffered:
                        if known_offsets.get(tp) != st.position or known_epochs.get(tp) != st.leader_epoch:
                            listed.append((tp, st))
                        continue
                    held.add(tp)                 # its drain will move it without a word
                if tp in known_offsets:
                    removed.append(tp)
        adds = 0
        for tp, _ in listed:
            adds += tp not in known_offsets
        if len(known_offsets) - len(removed) + adds == 0:
            return None                          # nothing to fetch from this node now
        now_version = version_of(node)
        if now_version is None:
            return None                          # not ready: skipped, as the walk would
        if now_version != version:
            plan.synced.pop(node, None)          # reconnected with another version: walk
            return _WALK
        topic_ids = session.topic_ids
        by_id = version >= 13
        topics, _, _, _, _ = fetch_partitions(listed, self.max_partition_fetch_bytes)
        topic_entries = []
        for topic, parts in (sorted(topics.items(), key=_first) if len(topics) > 1 else topics.items()):
            if by_id:
                topic_id = topic_ids.get(topic)
                if topic_id is None:
                    plan.synced.pop(node, None)  # a topic new to this session: walk
                    return _WALK
                topic_entries.append({"topic_id": topic_id, "partitions": parts})
            else:
                topic_entries.append({"topic": topic, "partitions": parts})
        forgotten = []
        if removed:
            gone: Dict[str, list] = {}
            for tp in sorted(removed):           # as FetchSession.forgotten: by topic, then partition
                found = gone.get(tp.topic)
                if found is None:
                    found = gone[tp.topic] = []
                found.append(tp.partition)
            for topic, partitions in gone.items():
                if by_id:
                    forgotten.append({"topic_id": topic_ids[topic], "partitions": partitions})
                else:
                    forgotten.append({"topic": topic, "partitions": partitions})
        # Changed in place: the last request to this node shares these dicts
        # with the session, and it was answered (a node with a Fetch in flight
        # gets none); copying a thousand entries twice per Fetch was most of
        # what was left of this plan.
        offsets = known_offsets
        epochs = known_epochs
        for tp in removed:
            del offsets[tp]
            del epochs[tp]
        for tp, st in listed:
            offsets[tp] = st.position
            epochs[tp] = st.leader_epoch
        session_id, epoch = session.session_id, session.epoch
        session.sent(offsets, epochs, topic_ids)
        plan.pending[node] = held
        return self._request(node, version, session_id, epoch, topic_entries, forgotten, offsets, names,
                             plan.index.get(node, {}), epoch)

    def _requests(self, by_node, version_of, topic_id_of) -> List[FetchRequest]:
        requests = []
        for node, tps in by_node.items():
            version = version_of(node)
            if version is None:
                continue
            req = self._build(node, version, tps, topic_id_of)
            if req is not None:
                self._in_flight_nodes.add(node)
                requests.append(req)
        return requests

    def _session(self, node: int, version: int) -> Optional[FetchSession]:
        """The fetch session with ``node``, None when requests to it are
        full always (sessions off, or Fetch below v7)."""
        if not self.use_sessions or version < FIRST_SESSION_VERSION:
            return None
        session = self.sessions.get(node)
        if session is None:
            session = self.sessions[node] = FetchSession(node)
        return session

    def _build(self, node, version, tps, topic_id_of) -> Optional[FetchRequest]:
        """The Fetch request to ``node`` for ``tps``, (partition, state) pairs:
        full, or with a fetch session incremental (only what changed)."""
        session = self._session(node, version)
        known_offsets, known_epochs = session.known() if session is not None else (None, None)
        topics, offsets, index, epochs, kept = fetch_partitions(
            tps, self.max_partition_fetch_bytes, known_offsets, known_epochs)
        names, ids = {}, {}
        topic_entries = []
        # Topics in name order, partitions in the order of the positions: a
        # request's bytes do not depend on which partitions were fetchable
        # before (the kept plan, _incremental, writes the same).
        for topic, parts in (sorted(topics.items(), key=_first) if len(topics) > 1 else topics.items()):
            if version >= 13:
                topic_id = topic_id_of(topic)
                if topic_id is None:
                    # v13+ fetches by id only; without one we need fresh metadata.
                    self.metadata_refresh_needed = True
                    for tp in index.pop(topic).values():
                        offsets.pop(tp, None)
                        if epochs is not None:
                            epochs.pop(tp, None)
                            kept -= tp in known_offsets      # to be forgotten after all
                    continue
                if session is not None and session.topic_id_changed(topic, topic_id):
                    # Deleted and made again: a new session, listing everything.
                    session.on_failure()
                    return self._build(node, version, tps, topic_id_of)
                names[topic_id] = topic
                ids[topic] = topic_id
                if parts:
                    topic_entries.append({"topic_id": topic_id, "partitions": parts})
            elif parts:
                topic_entries.append({"topic": topic, "partitions": parts})
        if not offsets:
            return None
        session_id, epoch, forgotten = 0, -1, []
        if session is not None:
            session_id, epoch = session.session_id, session.epoch
            if kept < len(known_offsets):
                forgotten = self._forgotten(session, offsets, version)
            session.sent(offsets, epochs, ids)
        return self._request(node, version, session_id, epoch, topic_entries, forgotten, offsets, names,
                             index, None if session is None else epoch)

    def _request(self, node, version, session_id, epoch, topic_entries, forgotten, offsets, names, index,
                 session_epoch) -> FetchRequest:
        """The FetchRequest with its body dict and, with ``write_in_c``, its bytes."""
        body = {"replica_id": -1, "max_wait_ms": self.fetch_max_wait_ms,
                "min_bytes": self.fetch_min_bytes, "max_bytes": self.fetch_max_bytes,
                "isolation_level": self.isolation, "session_id": session_id, "session_epoch": epoch,
                "topics": topic_entries, "forgotten_topics_data": forgotten, "rack_id": self.client_rack}
        data = None
        if self.write_in_c:
            if self.reuse_frames:
                # One frame per node and number of partitions listed: a quiet
                # consumer's incremental Fetch alternates between naming its
                # partition (a record was read) and naming none.
                listed = 0
                for topic in topic_entries:
                    listed += len(topic["partitions"])
                frames = self._frames.get(node)
                if frames is None:
                    frames = self._frames[node] = {}
                frame = frames.get(listed)
                if frame is not None:
                    data = frame.patched(version, body)
                if data is not None:
                    self.frames_reused += 1
                else:
                    data, frame = FetchFrame.write(version, body)
                    if frame is not None:
                        if len(frames) >= _FRAMES_PER_NODE:
                            frames.clear()       # shapes come and go: keep a few, not one per count
                        frames[listed] = frame
            else:
                data = fetch_request_body(version, body)
        encoded = None if data is None else EncodedBody(FETCH_API_KEY, version, data)
        # (tuple.__new__: a NamedTuple's own __new__ is Python code, one per Fetch)
        return tuple.__new__(FetchRequest, (node, version, body, offsets, names, index, encoded, session_epoch))

    @staticmethod
    def _forgotten(session: FetchSession, offsets, version) -> list:
        """forgotten_topics_data: the session's partitions not in ``offsets``
        (moved to another leader, paused, revoked, or with buffered data:
        as in Java, a partition is in the session while it is fetched)."""
        out = []
        for topic, partitions in session.forgotten(offsets).items():
            if version >= 13:
                out.append({"topic_id": session.topic_ids[topic], "partitions": partitions})
            else:
                out.append({"topic": topic, "partitions": partitions})
        return out

    def close_session_requests(self, version_of: Callable[[int], Optional[int]]) -> List[FetchRequest]:
        """Fetch requests that end every open fetch session (the final
        epoch, no partitions), as Java's consumer sends on close so that
        the brokers free the sessions' cache slots at once; the sessions are
        dropped. ``version_of(node)`` as for fetch_requests (None: that
        node's session is left to expire on the broker)."""
        out = []
        for node, session in list(self.sessions.items()):
            final = session.final_metadata()
            version = version_of(node)
            del self.sessions[node]
            if final is None or version is None or version < FIRST_SESSION_VERSION:
                continue
            body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": self.fetch_max_bytes,
                    "isolation_level": self.isolation, "session_id": final[0], "session_epoch": final[1],
                    "topics": [], "forgotten_topics_data": [], "rack_id": self.client_rack}
            data = fetch_request_body(version, body) if self.write_in_c else None
            encoded = None if data is None else EncodedBody(FETCH_API_KEY, version, data)
            out.append(FetchRequest(node, version, body, {}, {}, {}, encoded, final[1]))
        return out

    # -- handling fetch responses ---------------------------------------------
    def on_fetch_failure(self, request: FetchRequest, error: Exception) -> None:
        """The request failed (connection lost, timeout): fetch again later."""
        self._in_flight_nodes.discard(request.node)
        self.metadata_refresh_needed = True
        session = self.sessions.get(request.node)
        if session is not None and request.session_epoch is not None:
            session.on_failure()

    def on_fetch_unsent(self, request: FetchRequest) -> None:
        """A request built by fetch_requests was not sent after all (its
        node went away meanwhile): fetch from that node again later. Its
        session already counts the request's partitions as the broker's,
        so the next request to that node is a full one."""
        self._in_flight_nodes.discard(request.node)
        session = self.sessions.get(request.node)
        if session is not None and request.session_epoch is not None:
            session.on_failure()

    def on_fetch_response(self, request: FetchRequest, body) -> None:
        """Digest a Fetch answer: ``body`` is the codec's dict (the reference
        path) or a :class:`~kproto.consumer._fetch.FetchAnswer` from
        ``decode_fetch_response`` (the consumer's path: no Python object per
        partition; the same outcome, tests/test_fetch_answer.py)."""
        self._in_flight_nodes.discard(request.node)
        answer = isinstance(body, FetchAnswer)
        top = body.error_code if answer else body.get("error_code", 0)
        session = self.sessions.get(request.node) if request.session_epoch is not None else None
        if session is not None:
            session_id = body.session_id if answer else body.get("session_id", 0)
            session.on_response(request.session_epoch, top, session_id)
            if top in SESSION_ERRORS:
                # Evicted, restarted broker, epoch or topic id mismatch: the
                # session starts again with a full request (Java logs these;
                # nothing for the application).
                if top == FETCH_SESSION_TOPIC_ID_ERROR:
                    self.metadata_refresh_needed = True
                return
        if top:
            # Anything else at the top level fails every partition in the request.
            self._errors.append(error_codes.error_for_code(top, None, context="fetch"))
            return
        if answer:
            apply_fetch_answer(self, request, body, self.positions.states, self.isolation == READ_COMMITTED,
                               self.check_crcs, self._buffered, self._plan_dirty)
            return
        endpoints = body.get("node_endpoints")
        asked = request.partitions
        for t in body["responses"]:
            topic = t["topic"] if request.version < 13 else request.topic_names.get(t["topic_id"])
            index = asked.get(topic) if topic is not None else None
            if index is None:
                continue                             # a topic we did not ask for
            for p in t["partitions"]:
                tp = index.get(p["partition_index"])
                if tp is not None:                   # else a partition we did not ask for
                    self._on_partition(request, tp, p, endpoints)

    def _on_partition(self, request, tp, p, endpoints=None):
        fetch_offset = request.offsets.get(tp)
        st = self.positions.states.get(tp)
        if fetch_offset is None or st is None:
            return                                   # not asked for, or revoked meanwhile
        if st.position != fetch_offset:
            return                                   # a seek happened meanwhile: stale data
        code = p["error_code"]
        if code == 0:
            st.high_watermark = p["high_watermark"]
            if p.get("last_stable_offset", -1) >= 0:
                st.last_stable_offset = p["last_stable_offset"]
            if p.get("log_start_offset", -1) >= 0:
                st.log_start_offset = p["log_start_offset"]
            records = p["records"]
            if records is None or len(records) == 0:
                return
            aborted = p.get("aborted_transactions") if self.isolation == READ_COMMITTED else None
            self._take_records(tp, fetch_offset, records, aborted)
            return
        err = error_codes.error_for_code(code, None, context=f"fetch {tp.topic}-{tp.partition}")
        hinted = self.leader_hint is not None and self.leader_hint(tp, p, endpoints)
        if err.name == "FENCED_LEADER_EPOCH":
            # The epoch we fetch with (the committed offset's, or ListOffsets')
            # is older than the leader's - a broker restart or a leader change.
            # Nothing here would ever make it newer (no OffsetsForLeaderEpoch
            # validation yet), so every fetch was fenced again, without end:
            # fetch without an epoch claim (-1: the broker does not check it).
            st.leader_epoch = -1
            self._plan.mark(tp)
            self.metadata_refresh_needed = self.metadata_refresh_needed or not hinted
        elif err.name in _REFRESH_METADATA:
            self.metadata_refresh_needed = self.metadata_refresh_needed or not hinted
        elif err.name == "OFFSET_OUT_OF_RANGE":
            if self.positions.auto_offset_reset == "none":
                # One pending error per partition and offset: the partition
                # stays fetchable (as in Java), so fetches at the same
                # position keep answering this until the application seeks.
                err = OffsetOutOfRangeError(
                    f"offset {fetch_offset} is out of range for {tp.topic}-{tp.partition} "
                    f"and auto.offset.reset is 'none'")
                err.partitions = {tp: fetch_offset}     # Java's offsetOutOfRangePartitions()
                self._partition_error(err, tp, fetch_offset)
            else:
                self.positions.request_reset(tp)
        else:
            self._partition_error(err, tp, fetch_offset)

    def _take_records(self, tp, fetch_offset, records, aborted) -> None:
        """Buffer a partition's records (non-empty) from an answer: both the
        dict path above and kproto.consumer._fetch.apply_fetch_answer end in
        kproto.consumer._fetch.take_records (in C: parsed, buffered, marked
        for the plan; the errors come back to this class)."""
        take_records(self, tp, fetch_offset, records, aborted)

    def _record_too_large(self, tp, fetch_offset, records) -> None:
        """An answer held only part of one batch at the position: it is
        bigger than the fetch size allows (brokers since KIP-74 send at
        least one whole batch, so this means a very old broker or a tiny
        setting)."""
        self._partition_error(RecordTooLargeForFetchError(
            f"{tp.topic}-{tp.partition} at offset {fetch_offset}: the batch there "
            f"is larger than max.partition.fetch.bytes={self.max_partition_fetch_bytes} "
            f"({len(records)} bytes returned); raise it to consume this partition"), tp, fetch_offset)

    def _partition_error(self, err, tp, fetch_offset):
        """Keep a partition's fetch error for the next drain: once per
        partition, offset and kind (the partition stays fetchable, as in
        Java, so later fetches at the same position answer the same until
        the application acts), and dropped by :meth:`_stale` if the
        application moved on before draining."""
        for e in self._errors:
            if type(e) is type(err) and getattr(e, "_fetched_at", None) == (tp, fetch_offset):
                return
        err._fetched_at = (tp, fetch_offset)
        self._errors.append(err)

    # -- handing out records -----------------------------------------------------
    def has_buffered(self) -> bool:
        """Records poll() could hand out now (paused partitions' do not count)."""
        paused = self.positions.is_paused
        return any(not paused(b.tp) for b in self._buffered)

    def _next_head(self, kept: list):
        """The oldest buffered fetch poll() may hand out now (its partition's
        state in ``buf.state``), or None. A
        revoked partition's data is dropped; a paused partition's is moved
        to ``kept``, which the caller puts back in front: Java keeps a paused
        partition's fetched records and returns them after resume(), so
        nothing is dropped and nothing fetched twice (fetch_requests skips
        partitions with buffered data)."""
        states = self.positions.states
        while self._buffered:
            buf = self._buffered[0]
            st = states.get(buf.tp)
            if st is None:
                self._buffered.popleft()
            elif st.paused:
                kept.append(self._buffered.popleft())
            else:
                buf.state = st
                return buf
        return None

    def _raise_pending_error(self):
        while self._errors:
            err = self._errors.pop(0)
            if self._stale(err):
                continue
            raise err

    def _stale(self, err) -> bool:
        """A partition's fetch error for a position the application has left
        since (a seek, or the partition was unassigned: a refused partition
        swapped for another) is not raised: Java checks the fetch offset
        against the position when it collects the answer, and drops it the
        same way."""
        at = getattr(err, "_fetched_at", None)
        if at is None:
            return False
        tp, offset = at
        return not self.positions.is_assigned(tp) or self.positions.state(tp).position != offset

    def drain(self, max_records: Optional[int] = None) -> list:
        """Up to max_records (default max.poll.records) records, advancing positions.

        A pending error (authorization, corruption, out of range with 'none')
        is raised here, once, before any further records are handed out."""
        if self._errors:                # (a call, a reversed() and a list fewer per drain when all is well)
            self._raise_pending_error()
        limit = max_records or self.max_poll_records
        out: list = []
        kept: list = []
        try:
            while len(out) < limit:
                buf = self._next_head(kept)
                if buf is None:
                    break
                self._drain_one(buf, out, limit)
                if self._used_up(buf):
                    self._buffered.popleft()
        finally:
            if kept:
                self._buffered.extendleft(reversed(kept))
        return out

    def _drain_one(self, buf: _Buffered, out: list, limit: int) -> None:
        st = buf.state
        topic, partition = buf.tp
        while len(out) < limit:
            if buf.record_iter is None:
                batch = self._next_visible_batch(buf, st)
                if batch is None:
                    return
                buf.current = batch
                buf.record_iter = batch.records(topic, partition, st.position)
            for rec in buf.record_iter:
                out.append(rec)
                st.position = rec.offset + 1
                if len(out) >= limit:
                    return
            # A whole batch consumed: continue after it, even when compaction
            # removed its last records.
            st.position = max(st.position, buf.current.next_offset)
            buf.record_iter = None

    def _used_up(self, buf: _Buffered) -> bool:
        """Whether ``buf`` has nothing left for the application, also when
        the drain stopped at its limit on the fetch's last record (its
        record iterator not yet seen to end) or before trailing control
        batches: then it is dropped by the drain that handed out that
        record. Left buffered, it kept its partition out of fetch_requests
        and, the count of buffered fetches unchanged, the core's fetch plan
        from running; the next poll() only found it empty, and with no
        records nothing asked for another round: the next Fetch waited for
        the driver's next timer, up to request.timeout.ms (issue 27)."""
        st = buf.state
        if buf.record_iter is not None:
            if st.position <= buf.current.last_offset:
                return False                   # records may be left in this batch
            st.position = max(st.position, buf.current.next_offset)
            buf.record_iter = None
        if self._next_visible_batch(buf, st) is None:
            return True                        # (control batches left are skipped as a drain would)
        buf.next_batch -= 1                    # a batch to read: the next drain starts with it
        return False

    def _next_visible_batch(self, buf: _Buffered, st):
        """The next batch whose records the application may see; moves the
        position past control batches and aborted transactional batches."""
        while buf.next_batch < len(buf.batches):
            batch = buf.batches[buf.next_batch]
            buf.next_batch += 1
            if batch.next_offset <= st.position:
                continue                       # entirely before the position
            if self.isolation == READ_COMMITTED and buf.aborted:
                # Producers whose aborted transaction started at or before this batch.
                while buf.aborted and buf.aborted[0][0] <= batch.last_offset:
                    buf.aborted_pids.add(buf.aborted.pop(0)[1])
            if batch.is_control:
                if batch.control_type == CONTROL_ABORT:
                    if buf.aborted_pids:
                        buf.aborted_pids.discard(batch.producer_id)
                st.position = batch.next_offset
                continue
            if (self.isolation == READ_COMMITTED and buf.aborted_pids and batch.is_transactional
                    and batch.producer_id in buf.aborted_pids):
                st.position = batch.next_offset
                continue
            return batch
        return None

    def drain_columns(self, max_records: Optional[int] = None) -> Dict[TopicPartition, tuple]:
        """The bulk path: {tp: (offsets, timestamps, keys, values)} lists,
        no Record objects (headers are not returned here).

        Walked in C (kproto.consumer._fetch.drain_columns); ``_drain_columns_py``
        is its reference twin (tests/test_fetch_answer.py compares them)."""
        if self._errors:                # (no call per drain when all is well, as drain())
            self._raise_pending_error()
        return drain_columns(self, max_records or self.max_poll_records)

    def _drain_columns_py(self, max_records: Optional[int] = None) -> Dict[TopicPartition, tuple]:
        """drain_columns() walked by _drain_columnar: the reference."""
        out: Dict[TopicPartition, tuple] = {}

        def take(tp, batch, min_offset, room):
            cols = out.get(tp)
            if cols is None:
                cols = out[tp] = ([], [], [], [])
            if isinstance(batch, RecordBatch):
                return batch.append_columns(*cols, min_offset, room)
            return take_legacy_columns(batch, cols, min_offset, room)

        self._drain_columnar(max_records, take)
        return {tp: cols for tp, cols in out.items() if cols[0]}

    def drain_buffers(self, max_records: Optional[int] = None,
                      headers: bool = False) -> Dict[TopicPartition, ColumnBuffers]:
        """The bulk path in Arrow's memory layout: {tp: ColumnBuffers}, no
        Python object per record (see kproto.records.arrow); with
        ``headers`` the records' headers are gathered too."""
        out: Dict[TopicPartition, ColumnBuffers] = {}

        def take(tp, batch, min_offset, room):
            acc = out.get(tp)
            if acc is None:
                acc = out[tp] = ColumnBuffers(headers)
            if isinstance(batch, RecordBatch):
                n, complete = acc.add(batch, min_offset, room)
                return n, complete, acc.last_offset
            n = 0
            for rec in batch.records(None, -1, min_offset):     # legacy message sets
                if n == room:
                    return n, False, acc.last_offset
                acc.add_record(rec.offset, rec.timestamp, rec.key, rec.value, rec.timestamp_type)
                n += 1
            return n, True, acc.last_offset

        self._drain_columnar(max_records, take)
        return {tp: acc for tp, acc in out.items() if len(acc)}

    def _drain_columnar(self, max_records, take) -> None:
        """Walk the buffered batches for a columnar drain, advancing
        positions. ``take(tp, batch, min_offset, room)`` copies the batch's
        records at or above min_offset (at most room) and returns (count,
        complete, last offset taken); an incomplete batch is left where the
        record-by-record drain() can resume it too."""
        self._raise_pending_error()
        limit = max_records or self.max_poll_records
        kept: list = []
        try:
            self._walk_columnar(limit, take, kept)
        finally:
            self._buffered.extendleft(reversed(kept))

    def _walk_columnar(self, limit, take, kept) -> None:
        count = 0
        while count < limit:
            buf = self._next_head(kept)
            if buf is None:
                break
            st = buf.state
            if buf.record_iter is not None:
                batch = buf.current               # a drain stopped inside this batch
                buf.record_iter = None
            else:
                batch = self._next_visible_batch(buf, st)
                if batch is None:
                    self._buffered.popleft()
                    continue
            n, complete, last = take(buf.tp, batch, st.position, limit - count)
            count += n
            if complete:
                st.position = max(st.position, batch.next_offset)
            else:
                if n:
                    st.position = last + 1
                buf.current = batch
                buf.record_iter = batch.records(buf.tp.topic, buf.tp.partition, st.position)
                if not n:
                    break                         # the sink is full
            if self._used_up(buf):
                self._buffered.popleft()

    # -- offset resets (ListOffsets) ----------------------------------------------
    def reset_requests(self, leader_of, version_of) -> List[ListOffsetsRequest]:
        """ListOffsets requests for partitions waiting for an offset reset."""
        by_node: Dict[int, Dict[TopicPartition, str]] = {}
        for tp, strategy in self.positions.awaiting_reset():
            if tp in self._resets_in_flight:
                continue
            leader = leader_of(tp)
            if leader is None or leader < 0:
                self.metadata_refresh_needed = True
                continue
            if version_of(leader) is None:
                continue
            by_node.setdefault(leader, {})[tp] = strategy
        out = []
        for node, strategies in by_node.items():
            topics: Dict[str, list] = {}
            for tp, strategy in strategies.items():
                ts = LIST_OFFSETS_EARLIEST if strategy == EARLIEST else LIST_OFFSETS_LATEST
                topics.setdefault(tp.topic, []).append({
                    "partition_index": tp.partition, "current_leader_epoch": -1,
                    "timestamp": ts})
                self._resets_in_flight.add(tp)
            body = {"replica_id": -1, "isolation_level": self.isolation, "timeout_ms": 30000,
                    "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
            out.append(ListOffsetsRequest(node, body, strategies))
        return out

    def on_list_offsets_failure(self, request: ListOffsetsRequest, error: Exception) -> None:
        self._resets_in_flight.difference_update(request.strategies)
        self.metadata_refresh_needed = True

    def on_list_offsets_response(self, request: ListOffsetsRequest, body: dict) -> None:
        self._resets_in_flight.difference_update(request.strategies)
        for t in body["topics"]:
            for p in t["partitions"]:
                tp = TopicPartition(t["name"], p["partition_index"])
                strategy = request.strategies.get(tp)
                if strategy is None or not self.positions.is_assigned(tp):
                    continue
                st = self.positions.state(tp)
                if st.reset_to != strategy:
                    continue                     # a seek or another reset happened meanwhile
                if p["error_code"]:
                    err = error_codes.error_for_code(p["error_code"], None,
                                                     context=f"list offsets {tp.topic}-{tp.partition}")
                    if err.retriable:
                        self.metadata_refresh_needed = True
                    else:
                        self._errors.append(err)
                    continue
                # v0 answered with a list of offsets; v1+ with one offset.
                offset = p.get("offset", -1)
                if offset is None or offset < 0:
                    olds = p.get("old_style_offsets") or []
                    offset = olds[0] if olds else -1
                if offset >= 0:
                    st.position, st.reset_to = offset, None
                    st.leader_epoch = p.get("leader_epoch", -1)
                    self._plan.mark(tp)
