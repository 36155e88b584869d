"""The metadata cache: brokers, topics of interest, partitions and their leaders.

Java's ``Metadata``/``Cluster`` without I/O. The cache knows *when* it needs a
refresh - an explicit request (unknown topic, unknown leader,
NOT_LEADER_OR_FOLLOWER), or ``metadata.max.age.ms`` since the last one - and
applies ``retry.backoff.ms`` between attempts so a broken cluster is not
hammered. The network client (:mod:`kproto.client`) sends the Metadata
request; this module only builds its body and digests the answer.

Before the first answer the only known nodes are the bootstrap servers, with
negative ids (-1, -2, ...), tried in rotation: a failed attempt moves to the
next one.
"""
from __future__ import annotations

import re
from typing import NamedTuple, Optional

from kproto import error_codes

__all__ = ["ClusterMetadata", "TopicPartition", "LEADER_HINT_CODES", "validate_topic_name", "MAX_TOPIC_NAME_LENGTH",
           "topic_authorization_error"]

#: Kafka's limit (org.apache.kafka.common.internals.Topic): a partition's log
#: directory is "<topic>-<partition>", and 249 + "-" + a partition number
#: stays within the 255 bytes a file name may have.
MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")


def validate_topic_name(topic) -> str:
    """Return ``topic`` if Kafka accepts it as a topic name; else raise
    :class:`kproto.error_codes.InvalidTopicError` (the class of the broker's
    INVALID_TOPIC_EXCEPTION, so one ``except`` catches either) saying why.

    The rules are the broker's (Topic.validate): 1 to 249 characters out of
    ``[a-zA-Z0-9._-]``, and not ``.`` or ``..``. Checked on the client
    because not every broker enforces them (a Kafka-compatible broker may
    create ``'bad name?'``, which Kafka clients then cannot use), and a
    name the broker refuses would otherwise surface as a metadata timeout."""
    if not isinstance(topic, str):
        raise TypeError(f"a topic name is a str, not {type(topic).__name__}: {topic!r}")
    if _LEGAL_TOPIC.fullmatch(topic) and len(topic) <= MAX_TOPIC_NAME_LENGTH \
            and topic not in (".", ".."):
        return topic
    if not topic:
        why = "a topic name cannot be empty"
    elif topic in (".", ".."):
        why = f"topic name {topic!r} is not allowed"
    elif len(topic) > MAX_TOPIC_NAME_LENGTH:
        why = (f"topic name {topic[:40]!r}... is {len(topic)} characters long; "
               f"the limit is {MAX_TOPIC_NAME_LENGTH}")
    else:
        bad = "".join(sorted({c for c in topic if not _LEGAL_TOPIC.fullmatch(c)}))
        why = (f"topic name {topic!r} contains {bad!r}; only ASCII letters, digits, "
               f"'.', '_' and '-' are allowed")
    raise error_codes.InvalidTopicError(why)


def topic_authorization_error(topics, context: str = "") -> Exception:
    """Java's ``TopicAuthorizationException(unauthorizedTopics)``: a
    :class:`~kproto.error_codes.TopicAuthorizationFailedError` whose message
    names the topics, also kept as its ``unauthorized_topics`` (a frozenset)."""
    names = sorted(topics)
    err = error_codes.TopicAuthorizationFailedError(
        f"not authorized to access topics: [{', '.join(names)}]", context=context)
    err.unauthorized_topics = frozenset(names)
    return err


#: The error codes whose Produce/Fetch partition answers carry a KIP-951
#: CurrentLeader hint: NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH.
LEADER_HINT_CODES = frozenset((6, 74))


class TopicPartition(NamedTuple):
    topic: str
    partition: int


#: ``update_due_ms`` when a refresh may go at once
_AT_ONCE = float("-inf")


def _refresh_input(name: str, doc: str) -> property:
    """A field of :class:`ClusterMetadata` the refresh time depends on: kept
    as ``_f_<name>``, and a write forgets the cached ``update_due_ms``
    (tests and subclasses write these fields directly too)."""
    attr = "_f_" + name

    def get(self):
        return getattr(self, attr)

    def set_(self, value):
        setattr(self, attr, value)
        self.update_due_ms = None
    return property(get, set_, doc=doc)


class ClusterMetadata:
    #: The request NetworkClient refreshes this cache with (an admin
    #: bootstrapped from the controllers: kproto.controller_metadata).
    metadata_api = "Metadata"

    def __init__(self, bootstrap: list, *, metadata_max_age_ms=300000, retry_backoff_ms=100,
                 retry_backoff_max_ms=1000, allow_auto_topic_creation=True, metadata_max_idle_ms=None,
                 metadata_recovery_strategy="rebootstrap", rebootstrap_trigger_ms=300000):
        if not bootstrap:
            raise ValueError("at least one bootstrap server is needed")
        if metadata_recovery_strategy not in ("none", "rebootstrap"):
            raise ValueError(f"metadata.recovery.strategy must be 'none' or 'rebootstrap', "
                             f"not {metadata_recovery_strategy!r}")
        #: KIP-899/KIP-1102: go back to the bootstrap servers when the known
        #: brokers are all unreachable or metadata stays stale (see rebootstrap).
        self.recovery_strategy = metadata_recovery_strategy
        self.rebootstrap_trigger_ms = rebootstrap_trigger_ms
        self.rebootstraps = 0                               # how many times (metrics, tests)
        self._stale_since: Optional[float] = None           # first failed/pending refresh since an answer
        self.bootstrap = {-(i + 1): (h, p) for i, (h, p) in enumerate(bootstrap)}
        self._bootstrap_next = 0
        self.metadata_max_age_ms = metadata_max_age_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = retry_backoff_max_ms
        self.allow_auto_topic_creation = allow_auto_topic_creation
        self.brokers: dict[int, tuple] = {}
        self.extra_nodes: dict[int, tuple] = {}
        self.topics: set[str] = set()                       # topics of interest
        self.metadata_max_idle_ms = metadata_max_idle_ms
        self.last_used: dict[str, float] = {}               # topic -> last time it had data
        self.partitions: dict[str, dict[int, int]] = {}     # topic -> {partition: leader (-1 unknown)}
        #: topic -> {partition: leader epoch} (-1 unknown), from Metadata and
        #: KIP-951 hints; an answer with an older epoch does not move a leader back.
        self.leader_epochs: dict[str, dict[int, int]] = {}
        #: Leaders learnt from KIP-951 hints in Produce/Fetch errors (a counter
        #: for metrics and tests: each one is a Metadata round trip saved).
        self.leader_hints_applied = 0
        #: How many times a known partition's leader epoch rose, from a
        #: Metadata answer or a KIP-951 hint (a clock of leader moves), and
        #: (topic, partition) -> that clock's value at its last move: a
        #: producer compares it with the clock when a batch went out to tell
        #: whether its retry goes to a newer leader (see leader_moved_since).
        self.leader_moves = 0
        self.leader_moved_at: dict = {}
        #: Called with (topic, partition, now) when that partition's leader
        #: epoch rises (None: nobody listens; ``now`` None when not known):
        #: the producer lifts the retry back-off of its batches waiting for
        #: that partition (Java skips the back-off when the leader changed
        #: for the ongoing retry).
        self.on_leader_moved = None
        #: topic -> its topic id (Metadata v10+), for requests that name topics by
        #: id only (Produce v13); a topic recreated under the same name gets a new one.
        self.topic_ids: dict = {}
        self.topic_errors: dict[str, Exception] = {}        # last error per topic
        self.cluster_id = None
        self.controller_id = None
        #: The last metadata answer's top-level error (None once one succeeds).
        self.refusal: Optional[Exception] = None
        self.version = 0                                    # bumped on every update
        # When the next Metadata request may go (absolute ms; -inf: at
        # once), kept until a field it depends on changes (the properties
        # below forget it): the network client reads it twice a round, and
        # working it out (time_to_next_update) was a Python call each time.
        self.update_due_ms: Optional[float] = None
        self.last_refresh_ms = None
        self.last_attempt_ms = None
        #: Bumped whenever a partition's leader or a topic may have changed
        #: (an update, a KIP-951 hint, a leader forgotten, a rebootstrap):
        #: the consumer's kept fetch plan (kproto.consumer.fetch_plan) is
        #: rebuilt then, and trusted in between.
        self.leaders_version = 0
        self._failed_attempts = 0
        self.need_update = True
        self._urgent = False
        self._by_node: Optional[dict] = None
        # topic -> its partitions with a known leader, built once per change of
        # ``partitions`` (see _changed): the producer asks for it per new batch
        # and a sticky or user partitioner per record, and building it walks
        # every partition of the topic.
        self._available: dict[str, tuple] = {}

    # -- interest --------------------------------------------------------------
    def add_topic(self, topic: str, now=None) -> bool:
        """Track ``topic``; returns True (and asks for a refresh) if it was new."""
        if now is not None:
            self.last_used[topic] = now
        if topic in self.topics:
            return False
        self.topics.add(topic)
        self.need_update = True
        # A new topic should not wait out the refresh backoff (Java
        # requestUpdateForNewTopics).
        self._urgent = True
        return True

    def request_update(self):
        self.need_update = True

    # -- when to refresh ----------------------------------------------------------
    # What the refresh time depends on: each write forgets update_due_ms.
    need_update = _refresh_input("need_update", "a refresh was asked for (an unknown topic or leader, an error)")
    last_refresh_ms = _refresh_input("last_refresh_ms", "when the last answer came (None: none yet)")
    last_attempt_ms = _refresh_input("last_attempt_ms", "when the last request went (None: none yet)")
    _failed_attempts = _refresh_input("_failed_attempts", "refreshes failed in a row (the backoff grows)")
    _urgent = _refresh_input("_urgent", "a new topic: the next refresh does not wait out the backoff")

    def _backoff(self):
        if self._failed_attempts == 0:
            return self.retry_backoff_ms
        return min(self.retry_backoff_max_ms, self.retry_backoff_ms * 2 ** (self._failed_attempts - 1))

    def next_update_at(self) -> float:
        """When a Metadata request should go out (absolute ms; ``-inf``: at
        once): Java's max(time to expiry, time the refresh backoff allows).
        Kept in :attr:`update_due_ms` until something it depends on changes."""
        due = self.update_due_ms
        if due is None:
            if self.need_update or self.last_refresh_ms is None:
                due = _AT_ONCE
            else:
                due = self.last_refresh_ms + self.metadata_max_age_ms
            if self.last_attempt_ms is not None and not self._urgent:
                allowed = self.last_attempt_ms + self._backoff()
                if allowed > due:
                    due = allowed
            self.update_due_ms = due
        return due

    def time_to_next_update(self, now) -> float:
        """0 when a Metadata request should go out now, else ms to wait."""
        due = self.update_due_ms
        if due is None:
            due = self.next_update_at()
        return due - now if due > now else 0

    def request_body(self, now) -> dict:
        """The Metadata request for the topics of interest (an empty list
        would mean "all topics" in v0 only, so we never send None here)."""
        self.last_attempt_ms = now
        self._urgent = False
        if self._stale_since is None:
            self._stale_since = now
        self._expire_idle_topics(now)
        return {"topics": [{"name": t} for t in sorted(self.topics)],
                "allow_auto_topic_creation": self.allow_auto_topic_creation}

    def touch(self, topic, now):
        """The topic is still in use (metadata.max.idle.ms)."""
        self.last_used[topic] = now

    def _expire_idle_topics(self, now):
        """Java producer: topics without records for metadata.max.idle.ms are
        dropped from the metadata requests (and the cache)."""
        if self.metadata_max_idle_ms is None:
            return
        for t in [t for t in self.topics
                  if now - self.last_used.get(t, now) >= self.metadata_max_idle_ms]:
            self.topics.discard(t)
            self.last_used.pop(t, None)
            self.partitions.pop(t, None)
            self.leader_epochs.pop(t, None)
            self.topic_ids.pop(t, None)
            self.topic_errors.pop(t, None)
            self._changed()

    def failed_update(self, now, error=None):
        """The Metadata request failed (no answer, or ``error``: the answer's
        top-level error, kept in ``refusal`` until an answer succeeds): back
        off, rotate bootstrap."""
        self.refusal = error
        self._failed_attempts += 1
        self.last_attempt_ms = now
        self._bootstrap_next += 1

    # -- rebootstrap (KIP-899, KIP-1102) -------------------------------------------------
    def may_rebootstrap(self) -> bool:
        """True when rebootstrapping would change anything: the strategy asks
        for it and the cache holds brokers learnt from a Metadata answer."""
        return self.recovery_strategy == "rebootstrap" and bool(self.brokers)

    def rebootstrap_due(self, now) -> bool:
        """KIP-1102: metadata refreshes have been tried and failed for
        ``metadata.recovery.rebootstrap.trigger.ms`` since the last answer."""
        return (self.may_rebootstrap() and self._stale_since is not None
                and now - self._stale_since >= self.rebootstrap_trigger_ms)

    def rebootstrap(self, now) -> None:
        """Forget the brokers and leaders learnt so far and start again from
        the bootstrap servers (Java ``Metadata.rebootstrap``): the next
        Metadata request goes to them at once. The topics of interest stay,
        and so do coordinators (FindCoordinator's answers): one that moved
        fails to connect and is looked up again by its own logic."""
        self.brokers = {}
        for parts in self.partitions.values():
            for p in parts:
                parts[p] = -1
        self.leader_epochs.clear()
        self._by_node = None
        self.leaders_version += 1
        self._bootstrap_next = 0
        self._failed_attempts = 0
        self._stale_since = None
        self.need_update = True
        self._urgent = True
        self.rebootstraps += 1

    # -- nodes ---------------------------------------------------------------------
    def node_address(self, node_id) -> Optional[tuple]:
        return self.brokers.get(node_id) or self.extra_nodes.get(node_id) or self.bootstrap.get(node_id)

    def add_node(self, node_id, host, port):
        """A node learnt outside Metadata (a coordinator from FindCoordinator)."""
        self.extra_nodes[node_id] = (host, port)

    def bootstrap_addresses(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in self.bootstrap.values())

    def bootstrap_node(self) -> int:
        ids = sorted(self.bootstrap, reverse=True)      # -1, -2, ...
        return ids[self._bootstrap_next % len(ids)]

    def candidate_nodes(self) -> list:
        """Nodes to ask for metadata: known brokers, else the bootstrap servers
        starting with the current rotation point."""
        if self.brokers:
            return list(self.brokers)
        ids = sorted(self.bootstrap, reverse=True)
        k = self._bootstrap_next % len(ids)
        return ids[k:] + ids[:k]

    # -- answers ---------------------------------------------------------------------
    def update(self, body: dict, now) -> None:
        """Digest a Metadata response body."""
        brokers = {b["node_id"]: (b["host"], b["port"]) for b in body.get("brokers") or []}
        if brokers:
            self.brokers = brokers
        self.cluster_id = body.get("cluster_id")
        self.controller_id = body.get("controller_id")
        self.refusal = None
        retry_soon = False
        for t in body.get("topics") or []:
            name = t["name"]
            code = t.get("error_code", 0)
            if code:
                err = error_codes.error_for_code(code, context=f"metadata for topic {name!r}")
                self.topic_errors[name] = err
                # UNKNOWN_TOPIC_OR_PARTITION / LEADER_NOT_AVAILABLE while a topic is
                # being created: keep asking (with backoff) while someone waits.
                retry_soon = retry_soon or err.retriable
                if not err.retriable or code == 3:
                    self.partitions.pop(name, None)
                    self.leader_epochs.pop(name, None)
                    self.topic_ids.pop(name, None)
                continue
            self.topic_errors.pop(name, None)
            topic_id = t.get("topic_id")
            if topic_id is not None and self.topic_ids.get(name, topic_id) != topic_id:
                self.leader_epochs.pop(name, None)          # recreated: its epochs start again
            if topic_id is not None and topic_id.int:         # the zero UUID means "none"
                self.topic_ids[name] = topic_id
            else:
                self.topic_ids.pop(name, None)
            parts = {}
            known_epochs = self.leader_epochs.get(name) or {}
            epochs = {}
            moved = None
            for p in t.get("partitions") or []:
                leader = p["leader_id"]
                index = p["partition_index"]
                epoch = p.get("leader_epoch", -1)
                if 0 <= epoch < known_epochs.get(index, -1):
                    # A broker behind the controller answered: a KIP-951 hint
                    # already gave a newer leader; keep it (Java Metadata does too).
                    parts[index] = self.partitions.get(name, {}).get(index, -1)
                    epochs[index] = known_epochs[index]
                    continue
                if p.get("error_code", 0) and leader < 0:
                    retry_soon = True
                if leader not in self.brokers:
                    leader = -1
                parts[index] = leader
                epochs[index] = epoch
                if known_epochs and epoch > known_epochs.get(index, -1):
                    # a newer leader of a partition already known (a topic's
                    # first answer is no move: nothing was sent to it before)
                    if moved is None:
                        moved = []
                    moved.append(index)
            self.leader_epochs[name] = epochs
            if any(v < 0 for v in parts.values()):
                retry_soon = True
            self.partitions[name] = parts
            if moved is not None:
                for index in moved:
                    self._leader_moved(name, index, now)
        self._changed()
        self.version += 1
        self.last_refresh_ms = now
        self.last_attempt_ms = now
        self._stale_since = None
        if retry_soon:
            # Partial answer: ask again after the backoff, not at once.
            self._failed_attempts = max(1, self._failed_attempts + 1)
            self.need_update = True
        else:
            self._failed_attempts = 0
            self.need_update = False

    # -- queries ---------------------------------------------------------------------
    def unauthorized_topics(self, topics) -> list:
        """Those of ``topics`` the last metadata answer refused
        (TOPIC_AUTHORIZATION_FAILED: no DESCRIBE ACL), sorted. Not
        retriable: the clients fail what waits for them instead of waiting
        for partitions that will not come (Java: Metadata's unauthorizedTopics)."""
        errors = self.topic_errors
        if not errors:
            return []
        return sorted(t for t in set(topics)
                      if type(errors.get(t)) is error_codes.TopicAuthorizationFailedError)

    def partition_count(self, topic) -> Optional[int]:
        parts = self.partitions.get(topic)
        return len(parts) if parts else None

    def leader(self, topic, partition) -> Optional[int]:
        parts = self.partitions.get(topic)
        if not parts:
            return None
        leader = parts.get(partition, -1)
        return leader if leader >= 0 else None

    def _changed(self):
        """``partitions`` changed: drop what was derived from it."""
        self.leaders_version += 1
        self._by_node = None
        self._available = {}

    def available_partitions(self, topic) -> tuple:
        """The partitions of ``topic`` with a known leader (a tuple, shared
        between calls until the metadata changes: do not hold it across an update)."""
        got = self._available.get(topic)
        if got is None:
            parts = self.partitions.get(topic) or {}
            got = self._available[topic] = tuple(p for p, l in parts.items() if l >= 0)
        return got

    def partitions_by_node(self) -> dict:
        """{node: [(topic, partition), ...]} for partitions with a known leader."""
        if self._by_node is None:
            by = {}
            for topic, parts in self.partitions.items():
                for p, leader in sorted(parts.items()):
                    if leader >= 0:
                        by.setdefault(leader, []).append(TopicPartition(topic, p))
            self._by_node = by
        return self._by_node

    def mark_leader_unknown(self, topic, partition):
        """Forget a partition's leader until the next refresh (and ask for
        one). The producer no longer does this on NOT_LEADER_OR_FOLLOWER:
        Java only asks for a refresh and keeps the leader it knows."""
        parts = self.partitions.get(topic)
        if parts is not None and partition in parts:
            parts[partition] = -1
            self._changed()
        self.need_update = True

    def _leader_moved(self, topic, partition, now):
        """The leader epoch of a known partition rose (learnt at ``now``,
        None: not known): tick the clock of leader moves, tell the listener."""
        self.leader_moves += 1
        self.leader_moved_at[(topic, partition)] = self.leader_moves
        listener = self.on_leader_moved
        if listener is not None:
            listener(topic, partition, now)

    def leader_moved_since(self, topic, partition, mark: int) -> bool:
        """Whether the leader of ``topic``/``partition`` moved (its epoch
        rose) after the clock of leader moves read ``mark``
        (``leader_moves`` then): a batch sent at ``mark`` and refused is
        retried to a newer leader - Java's ``hasLeaderChangedForTheOngoingRetry``."""
        return self.leader_moved_at.get((topic, partition), 0) > mark

    def update_leader(self, topic, partition, leader_id, leader_epoch, endpoints=(),
                      sent_to: Optional[int] = None, now=None) -> bool:
        """KIP-951: a Produce or Fetch error (NOT_LEADER_OR_FOLLOWER,
        FENCED_LEADER_EPOCH) named the partition's current leader
        (``CurrentLeader``) and, where the client may not know it, its address
        (``NodeEndpoints``: dicts with node_id, host, port). Take the new
        leader at once instead of waiting for a Metadata round trip, if the
        hint is newer than what the cache has and its node's address is known.
        ``sent_to``: the node that refused the request, when known; ``now``
        the time of the answer (for ``on_leader_moved``), when known.

        Returns True when the leader changed (a producer then retries at
        once: Java's ``hasLeaderChangedForTheOngoingRetry``); False when the hint tells
        nothing new - an epoch not newer than the cache's, or, when the cache
        has no epoch (a Metadata answer without one), the very node that
        refused: a broker still taking the leadership of a new partition
        answers so, and that calls for the retry back-off, not a retry at once."""
        parts = self.partitions.get(topic)
        if parts is None or partition not in parts or leader_id < 0 or leader_epoch < 0:
            return False
        epochs = self.leader_epochs.setdefault(topic, {})
        known = epochs.get(partition, -1)
        if leader_epoch <= known:
            return False                   # not newer than what we have
        if known < 0 and leader_id == sent_to:
            return False                   # no epoch to compare: the refusing node names itself
        for e in endpoints or ():
            if e["node_id"] not in self.brokers:
                self.brokers = {**self.brokers, e["node_id"]: (e["host"], e["port"])}
        if leader_id not in self.brokers:
            return False                   # no address: the metadata refresh must tell
        parts[partition] = leader_id
        epochs[partition] = leader_epoch
        self._by_node = None
        self.leaders_version += 1
        self.leader_hints_applied += 1
        self._leader_moved(topic, partition, now)
        return True

    def apply_leader_hint(self, topic, partition, answer: dict, endpoints=(),
                          sent_to: Optional[int] = None, now=None) -> bool:
        """:meth:`update_leader` from one partition of a Produce (v10+) or
        Fetch (v12+) response: ``answer`` is the partition's entry (its
        ``error_code`` and tagged ``current_leader``), ``endpoints`` the
        response's ``node_endpoints``. False (nothing learnt) for other
        errors or when the broker sent no hint (an older version, or it does
        not know the leader either). ``sent_to``, ``now`` as in :meth:`update_leader`."""
        if answer.get("error_code", 0) not in LEADER_HINT_CODES:
            return False
        hint = answer.get("current_leader")
        if not hint:
            return False
        return self.update_leader(topic, partition, hint.get("leader_id", -1),
                                  hint.get("leader_epoch", -1), endpoints, sent_to, now)
