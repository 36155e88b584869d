"""The consumer group side of the sans-IO core: coordinator discovery, group
membership (the classic protocol, :class:`GroupMembership`, and the KIP-848
consumer protocol, :class:`ConsumerProtocolMembership`: one interface, the
same events), partition assignors and offset commits.

Every state machine here follows one driver contract (no sockets, threads or
clock; ``now`` is milliseconds)::

    for req in machine.poll(now):          # list of OutgoingRequest
        node = "least loaded node" if req.destination == ANY else coordinator.coordinator
        # (connect to the coordinator under coordinator.connection_id, as Java does;
        #  COORDINATOR_NODE: under its node id, i.e. not on the group connection)
        ... if the version negotiated for req.api_name < req.min_version:
                req.owner.on_failure(req, UnsupportedVersionError(...), now)
        ... else send req.api_name / req.body there (timeout: req.timeout_ms or request.timeout.ms)
        ... then on the answer:  req.owner.on_response(req, body, now)
        ... or on failure:      req.owner.on_failure(req, error, now)   # connection closed, timeout
    machine.next_deadline(now)             # call poll again at the latest then (None: no timer)
    machine.events()                       # application events, drained

Poll the shared GroupCoordinator first, then GroupMembership, then
OffsetCommitter. On a CoordinatorLost event close the coordinator connection
(failing what is in flight on it). Hand membership events to the
application's rebalance listener before polling again: revocations are
emitted one poll before the JoinGroup they precede, so the listener can still
commit with the current generation.

Request bodies are version-agnostic: they carry the fields of every version
(the codec ignores the fields a version lacks), so the driver may send them at
whatever version it negotiated with the broker.

The shared value types live here so that every module and the fetcher agree on
them; the submodules' names are re-exported here but loaded on first use.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple, Optional

from kproto._lazy import lazy_names

#: OutgoingRequest destinations: the least-loaded known node (FindCoordinator),
#: or the group coordinator found by FindCoordinator.
ANY = "any"
COORDINATOR = "coordinator"
#: The coordinator's broker over its ordinary connection (its node id), not
#: the group connection: for a request that must not queue behind a JoinGroup
#: or SyncGroup the coordinator holds there - a broker answers the requests of
#: one connection in order, and holds those until the rebalance completes.
COORDINATOR_NODE = "coordinator-node"


# One TopicPartition type for the whole client (the metadata cache, the fetcher
# and the group machines); a plain (topic, partition) tuple compares equal too.
from kproto.cluster import TopicPartition  # noqa: E402


class OffsetAndMetadata(NamedTuple):
    """A committed (or to-be-committed) position: the offset of the NEXT record
    to consume, its leader epoch (-1 unknown) and free-form metadata."""
    offset: int
    metadata: str = ""
    leader_epoch: int = -1


class OutgoingRequest:
    """A request a state machine wants sent.

    Compared by identity: the driver hands the same object back to
    ``owner.on_response`` / ``owner.on_failure``. ``coordinator_epoch`` is the
    coordinator incarnation the request was built for, so a late failure of a
    request to an old coordinator cannot knock out a newer one.
    """

    __slots__ = ("destination", "api_name", "body", "owner", "timeout_ms",
                 "coordinator_epoch", "context", "min_version")

    def __init__(self, destination: str, api_name: str, body: dict, owner: Any = None, *,
                 timeout_ms: Optional[int] = None, coordinator_epoch: int = -1,
                 context: Any = None, min_version: int = 0):
        self.destination = destination
        self.api_name = api_name
        self.body = body
        self.owner = owner
        #: request timeout for this request (None: the driver's request.timeout.ms);
        #: JoinGroup needs longer, as in Java (rebalance timeout + 5 s).
        self.timeout_ms = timeout_ms
        self.coordinator_epoch = coordinator_epoch
        #: private to the owner (e.g. the commit a request belongs to)
        self.context = context
        #: the lowest version that can carry this body's meaning (e.g. v5 for a
        #: JoinGroup with group.instance.id): if the negotiated version is lower,
        #: the driver must call on_failure with UnsupportedVersionError instead
        #: of sending (the codec would silently drop the field).
        self.min_version = min_version

    def __repr__(self):
        return f"<OutgoingRequest {self.api_name} -> {self.destination}>"


# The names of the submodules below are loaded on their first use (PEP 562
# module ``__getattr__``), not here: a client that only needs the shared types
# above (the admin client's OffsetAndMetadata, a driver's OutgoingRequest) does
# not pay for the group machines and assignors (~1.5 MB of RSS, issue 27).
# ``from kproto.consumer import GroupMembership`` works as before.
_LAZY = {
    "kproto.consumer.assignors": (
        "Assignment", "CooperativeStickyAssignor", "MemberSubscription", "RangeAssignor",
        "RebalanceProtocol", "RoundRobinAssignor", "assignor_by_name", "build_assignors"),
    "kproto.consumer.coordinator": (
        "CoordinatorFound", "CoordinatorInfo", "CoordinatorLookupFailed", "CoordinatorLost",
        "CoordinatorState", "GroupCoordinator"),
    "kproto.consumer.membership": (
        "GroupError", "GroupFatalError", "GroupMembership", "MemberState", "MetadataNeeded",
        "PartitionsAssigned", "PartitionsLost", "PartitionsRevoked"),
    "kproto.consumer.membership_consumer": (
        "ConsumerMemberState", "ConsumerProtocolMembership", "to_broker_regex"),
    "kproto.consumer.commits": (
        "CommitCompleted", "CommitFailed", "CommitFailedError", "CommitHandle", "CommitTimeoutError",
        "FetchHandle", "OffsetCommitter", "OffsetsFetched"),
}
_MODULE_OF = {name: module for module, names in _LAZY.items() for name in names}

if TYPE_CHECKING:   # type checkers see the names as ordinary imports
    from kproto.consumer.assignors import (
        Assignment, CooperativeStickyAssignor, MemberSubscription, RangeAssignor,
        RebalanceProtocol, RoundRobinAssignor, assignor_by_name, build_assignors,
    )
    from kproto.consumer.commits import (
        CommitCompleted, CommitFailed, CommitFailedError, CommitHandle, CommitTimeoutError,
        FetchHandle, OffsetCommitter, OffsetsFetched,
    )
    from kproto.consumer.coordinator import (
        CoordinatorFound, CoordinatorInfo, CoordinatorLookupFailed, CoordinatorLost,
        CoordinatorState, GroupCoordinator,
    )
    from kproto.consumer.membership import (
        GroupError, GroupFatalError, GroupMembership, MemberState, MetadataNeeded, PartitionsAssigned,
        PartitionsLost, PartitionsRevoked,
    )
    from kproto.consumer.membership_consumer import (
        ConsumerMemberState, ConsumerProtocolMembership, to_broker_regex,
    )


__getattr__, __dir__ = lazy_names(globals(), _MODULE_OF)

__all__ = [
    "ANY", "COORDINATOR", "COORDINATOR_NODE", "TopicPartition", "OffsetAndMetadata", "OutgoingRequest",
    "Assignment", "MemberSubscription", "RebalanceProtocol", "RangeAssignor",
    "RoundRobinAssignor", "CooperativeStickyAssignor", "assignor_by_name", "build_assignors",
    "GroupCoordinator", "CoordinatorState", "CoordinatorInfo", "CoordinatorFound",
    "CoordinatorLost", "CoordinatorLookupFailed",
    "GroupMembership", "MemberState", "PartitionsAssigned", "PartitionsRevoked",
    "PartitionsLost", "GroupFatalError", "GroupError", "MetadataNeeded",
    "ConsumerProtocolMembership", "ConsumerMemberState", "to_broker_regex",
    "OffsetCommitter", "CommitHandle", "FetchHandle", "CommitCompleted", "CommitFailed",
    "OffsetsFetched", "CommitTimeoutError", "CommitFailedError",
]
