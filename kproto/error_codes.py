"""Kafka error codes as exception classes.

Every response carries ``error_code`` fields; this module turns a code into an
exception the application can catch by class (``except NotLeaderOrFollowerError``)
or by property (``if exc.retriable``, ``if exc.invalid_metadata``). The classes are
built at import from the literal table below (name, code, retriable, flags,
message) so the table is the single source of truth and a test can compare it
with the protocol guide. Messages are our own short paraphrases.

Flags column: ``M`` = the error means our metadata is stale (Java's
InvalidMetadataException: refresh metadata before retrying), ``Z`` = authorization
failure, ``A`` = authentication failure.

Two names would clash with client-side errors of :mod:`kproto.errors`, so their
classes are named ``Broker...`` and also derive from the client-side class, so
one ``except`` catches both: code 7 is :class:`BrokerRequestTimedOutError`
(a :class:`kproto.errors.RequestTimedOutError`) and code 35 is
:class:`BrokerUnsupportedVersionError` (a :class:`kproto.errors.UnsupportedVersionError`).
"""
from kproto import errors as _errors
from kproto.errors import BrokerError, UnknownBrokerError, AuthorizationError, AuthenticationError

# (code, NAME, retriable, flags, default message)
ERROR_TABLE = (
    (-1, "UNKNOWN_SERVER_ERROR", False, "", "the broker hit an unexpected error while handling the request"),
    (1, "OFFSET_OUT_OF_RANGE", False, "", "the requested offset is outside the log's range"),
    (2, "CORRUPT_MESSAGE", True, "", "a message failed its CRC check, is too large or is otherwise corrupt"),
    (3, "UNKNOWN_TOPIC_OR_PARTITION", True, "M", "this broker does not host the topic-partition"),
    (4, "INVALID_FETCH_SIZE", False, "", "the requested fetch size is invalid"),
    (5, "LEADER_NOT_AVAILABLE", True, "M", "the partition has no leader right now (election in progress)"),
    (6, "NOT_LEADER_OR_FOLLOWER", True, "M", "this broker is not the leader (or not a replica) of the partition"),
    (7, "REQUEST_TIMED_OUT", True, "", "the request timed out on the broker"),
    (8, "BROKER_NOT_AVAILABLE", False, "", "the broker is not available"),
    (9, "REPLICA_NOT_AVAILABLE", True, "M", "the replica is not available for the partition"),
    (10, "MESSAGE_TOO_LARGE", False, "", "a message is larger than the broker accepts"),
    (11, "STALE_CONTROLLER_EPOCH", False, "", "the controller moved to another broker"),
    (12, "OFFSET_METADATA_TOO_LARGE", False, "", "the offset commit metadata is too large"),
    (13, "NETWORK_EXCEPTION", True, "M", "the broker disconnected before answering"),
    (14, "COORDINATOR_LOAD_IN_PROGRESS", True, "", "the coordinator is still loading its state"),
    (15, "COORDINATOR_NOT_AVAILABLE", True, "", "the coordinator is not available"),
    (16, "NOT_COORDINATOR", True, "", "this broker is not the coordinator"),
    (17, "INVALID_TOPIC_EXCEPTION", False, "", "the topic name is invalid for this operation"),
    (18, "RECORD_LIST_TOO_LARGE", False, "", "a record batch is larger than the broker's segment size"),
    (19, "NOT_ENOUGH_REPLICAS", True, "", "fewer in-sync replicas than min.insync.replicas: records rejected"),
    (20, "NOT_ENOUGH_REPLICAS_AFTER_APPEND", True, "", "records were written but to fewer in-sync replicas than required"),
    (21, "INVALID_REQUIRED_ACKS", False, "", "invalid acks value in a produce request"),
    (22, "ILLEGAL_GENERATION", False, "", "the group generation id is not current"),
    (23, "INCONSISTENT_GROUP_PROTOCOL", False, "", "the member's protocols do not match the group's"),
    (24, "INVALID_GROUP_ID", False, "", "the group id is invalid"),
    (25, "UNKNOWN_MEMBER_ID", False, "", "the coordinator does not know this member id"),
    (26, "INVALID_SESSION_TIMEOUT", False, "", "the session timeout is outside the broker's allowed range"),
    (27, "REBALANCE_IN_PROGRESS", False, "", "the group is rebalancing: rejoin"),
    (28, "INVALID_COMMIT_OFFSET_SIZE", False, "", "the offset commit is too large"),
    (29, "TOPIC_AUTHORIZATION_FAILED", False, "Z", "not authorized to access the topic"),
    (30, "GROUP_AUTHORIZATION_FAILED", False, "Z", "not authorized to access the group"),
    (31, "CLUSTER_AUTHORIZATION_FAILED", False, "Z", "not authorized for this cluster operation"),
    (32, "INVALID_TIMESTAMP", False, "", "a record timestamp is out of the accepted range"),
    (33, "UNSUPPORTED_SASL_MECHANISM", False, "A", "the broker does not support this SASL mechanism"),
    (34, "ILLEGAL_SASL_STATE", False, "A", "the request is not valid in the current SASL state"),
    (35, "UNSUPPORTED_VERSION", False, "", "the broker does not support this API version"),
    (36, "TOPIC_ALREADY_EXISTS", False, "", "the topic already exists"),
    (37, "INVALID_PARTITIONS", False, "", "the partition count is invalid"),
    (38, "INVALID_REPLICATION_FACTOR", False, "", "the replication factor is invalid for this cluster"),
    (39, "INVALID_REPLICA_ASSIGNMENT", False, "", "the replica assignment is invalid"),
    (40, "INVALID_CONFIG", False, "", "the configuration is invalid"),
    (41, "NOT_CONTROLLER", True, "", "this broker is not the controller"),
    (42, "INVALID_REQUEST", False, "", "the broker found the request malformed (client bug or incompatible broker; see broker logs)"),
    (43, "UNSUPPORTED_FOR_MESSAGE_FORMAT", False, "", "the broker's message format version does not support the request"),
    (44, "POLICY_VIOLATION", False, "", "the request violates a broker policy"),
    (45, "OUT_OF_ORDER_SEQUENCE_NUMBER", False, "", "the broker saw an out-of-order producer sequence number"),
    (46, "DUPLICATE_SEQUENCE_NUMBER", False, "", "the broker saw a duplicate producer sequence number"),
    (47, "INVALID_PRODUCER_EPOCH", False, "", "the producer epoch is stale"),
    (48, "INVALID_TXN_STATE", False, "", "the transactional operation is invalid in the current state"),
    (49, "INVALID_PRODUCER_ID_MAPPING", False, "", "the producer id is not assigned to this transactional id"),
    (50, "INVALID_TRANSACTION_TIMEOUT", False, "", "the transaction timeout exceeds transaction.max.timeout.ms"),
    (51, "CONCURRENT_TRANSACTIONS", True, "", "another operation on the same transaction is in progress"),
    (52, "TRANSACTION_COORDINATOR_FENCED", False, "", "the transaction coordinator is no longer current"),
    (53, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", False, "Z", "not authorized for this transactional id"),
    (54, "SECURITY_DISABLED", False, "", "security features are disabled on the broker"),
    (55, "OPERATION_NOT_ATTEMPTED", False, "", "the broker did not attempt this operation (another in the batch failed)"),
    (56, "KAFKA_STORAGE_ERROR", True, "M", "the broker had a disk error accessing the log"),
    (57, "LOG_DIR_NOT_FOUND", False, "", "the log directory is not in the broker's configuration"),
    (58, "SASL_AUTHENTICATION_FAILED", False, "A", "SASL authentication failed"),
    (59, "UNKNOWN_PRODUCER_ID", False, "", "the broker has no state for this producer id (e.g. its records expired)"),
    (60, "REASSIGNMENT_IN_PROGRESS", False, "", "a partition reassignment is in progress"),
    (61, "DELEGATION_TOKEN_AUTH_DISABLED", False, "", "delegation tokens are disabled"),
    (62, "DELEGATION_TOKEN_NOT_FOUND", False, "", "the delegation token was not found"),
    (63, "DELEGATION_TOKEN_OWNER_MISMATCH", False, "", "the principal is not the token's owner or renewer"),
    (64, "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED", False, "", "delegation token requests are not allowed on this channel"),
    (65, "DELEGATION_TOKEN_AUTHORIZATION_FAILED", False, "Z", "not authorized for the delegation token"),
    (66, "DELEGATION_TOKEN_EXPIRED", False, "", "the delegation token has expired"),
    (67, "INVALID_PRINCIPAL_TYPE", False, "", "the principal type is not supported"),
    (68, "NON_EMPTY_GROUP", False, "", "the group is not empty"),
    (69, "GROUP_ID_NOT_FOUND", False, "", "the group does not exist"),
    (70, "FETCH_SESSION_ID_NOT_FOUND", True, "", "the fetch session id is unknown"),
    (71, "INVALID_FETCH_SESSION_EPOCH", True, "", "the fetch session epoch is invalid"),
    (72, "LISTENER_NOT_FOUND", True, "M", "the leader has no listener matching the one the metadata came from"),
    (73, "TOPIC_DELETION_DISABLED", False, "", "topic deletion is disabled"),
    (74, "FENCED_LEADER_EPOCH", True, "M", "our leader epoch is older than the broker's"),
    (75, "UNKNOWN_LEADER_EPOCH", True, "", "our leader epoch is newer than the broker's"),
    (76, "UNSUPPORTED_COMPRESSION_TYPE", False, "", "the client does not support the partition's compression type"),
    (77, "STALE_BROKER_EPOCH", False, "", "the broker epoch has changed"),
    (78, "OFFSET_NOT_AVAILABLE", True, "", "the new leader's high watermark has not caught up yet"),
    (79, "MEMBER_ID_REQUIRED", False, "", "the member must rejoin with the member id the broker assigned"),
    (80, "PREFERRED_LEADER_NOT_AVAILABLE", True, "M", "the preferred leader is not available"),
    (81, "GROUP_MAX_SIZE_REACHED", False, "", "the group is full"),
    (82, "FENCED_INSTANCE_ID", False, "", "another member with the same group.instance.id fenced this one"),
    (83, "ELIGIBLE_LEADERS_NOT_AVAILABLE", True, "M", "no eligible leader is available"),
    (84, "ELECTION_NOT_NEEDED", True, "M", "the leader election is not needed"),
    (85, "NO_REASSIGNMENT_IN_PROGRESS", False, "", "no partition reassignment is in progress"),
    (86, "GROUP_SUBSCRIBED_TO_TOPIC", False, "", "the group is subscribed to the topic, its offsets cannot be deleted"),
    (87, "INVALID_RECORD", False, "", "the broker rejected a record that failed validation"),
    (88, "UNSTABLE_OFFSET_COMMIT", True, "", "there are pending transactional offsets for the partition"),
    (89, "THROTTLING_QUOTA_EXCEEDED", True, "", "the throttling quota is exceeded"),
    (90, "PRODUCER_FENCED", False, "", "a newer producer with the same transactional id fenced this one"),
    (91, "RESOURCE_NOT_FOUND", False, "", "the request refers to a resource that does not exist"),
    (92, "DUPLICATE_RESOURCE", False, "", "the request names the same resource twice"),
    (93, "UNACCEPTABLE_CREDENTIAL", False, "", "the credential does not meet the acceptance criteria"),
    (94, "INCONSISTENT_VOTER_SET", False, "", "sender or receiver is not one of the expected voters"),
    (95, "INVALID_UPDATE_VERSION", False, "", "the update version is invalid"),
    (96, "FEATURE_UPDATE_FAILED", False, "", "updating the finalized features failed on the broker"),
    (97, "PRINCIPAL_DESERIALIZATION_FAILURE", False, "", "the broker could not deserialize a forwarded principal"),
    (98, "SNAPSHOT_NOT_FOUND", False, "", "the requested snapshot was not found"),
    (99, "POSITION_OUT_OF_RANGE", False, "", "the requested position is outside the snapshot"),
    (100, "UNKNOWN_TOPIC_ID", True, "M", "this broker does not host the topic id"),
    (101, "DUPLICATE_BROKER_REGISTRATION", False, "", "the broker id is already registered"),
    (102, "BROKER_ID_NOT_REGISTERED", False, "", "the broker id is not registered"),
    (103, "INCONSISTENT_TOPIC_ID", True, "M", "the log's topic id differs from the request's"),
    (104, "INCONSISTENT_CLUSTER_ID", False, "", "the cluster id differs from the server's"),
    (105, "TRANSACTIONAL_ID_NOT_FOUND", False, "", "the transactional id was not found"),
    (106, "FETCH_SESSION_TOPIC_ID_ERROR", True, "", "the fetch session used topic ids inconsistently"),
    (107, "INELIGIBLE_REPLICA", False, "", "the new ISR contains an ineligible replica"),
    (108, "NEW_LEADER_ELECTED", False, "", "the partition state was updated but the leader changed"),
    (109, "OFFSET_MOVED_TO_TIERED_STORAGE", False, "", "the requested offset has moved to tiered storage"),
    (110, "FENCED_MEMBER_EPOCH", False, "", "the member epoch is fenced: give up partitions and rejoin"),
    (111, "UNRELEASED_INSTANCE_ID", False, "", "the instance id is still held by another member"),
    (112, "UNSUPPORTED_ASSIGNOR", False, "", "the group does not support the assignor or its version"),
    (113, "STALE_MEMBER_EPOCH", False, "", "the member epoch is stale: retry with the epoch from the heartbeat"),
    (114, "MISMATCHED_ENDPOINT_TYPE", False, "", "the request went to an endpoint of the wrong type"),
    (115, "UNSUPPORTED_ENDPOINT_TYPE", False, "", "this endpoint type is not supported"),
    (116, "UNKNOWN_CONTROLLER_ID", False, "", "the controller id is unknown"),
    (117, "UNKNOWN_SUBSCRIPTION_ID", False, "", "the telemetry subscription id is unknown or outdated"),
    (118, "TELEMETRY_TOO_LARGE", False, "", "the telemetry push is larger than the broker accepts"),
    (119, "INVALID_REGISTRATION", False, "", "the controller considers the broker registration invalid"),
    (120, "TRANSACTION_ABORTABLE", False, "", "the transaction failed on the broker; abort it to continue"),
    (121, "INVALID_RECORD_STATE", False, "", "the record state is invalid; the acknowledgement failed"),
    (122, "SHARE_SESSION_NOT_FOUND", True, "", "the share session was not found"),
    (123, "INVALID_SHARE_SESSION_EPOCH", True, "", "the share session epoch is invalid"),
    (124, "FENCED_STATE_EPOCH", False, "", "the share-group state epoch does not match"),
    (125, "INVALID_VOTER_KEY", False, "", "the voter key does not match the replica's"),
    (126, "DUPLICATE_VOTER", False, "", "the voter is already in the voter set"),
    (127, "VOTER_NOT_FOUND", False, "", "the voter is not in the voter set"),
    (128, "INVALID_REGULAR_EXPRESSION", False, "", "the regular expression is invalid"),
    (129, "REBOOTSTRAP_REQUIRED", False, "", "client metadata is stale; rebootstrap from the bootstrap servers"),
    (130, "STREAMS_INVALID_TOPOLOGY", False, "", "the streams topology is invalid"),
    (131, "STREAMS_INVALID_TOPOLOGY_EPOCH", False, "", "the streams topology epoch is invalid"),
    (132, "STREAMS_TOPOLOGY_FENCED", False, "", "the streams topology epoch is outdated"),
    (133, "SHARE_SESSION_LIMIT_REACHED", True, "", "the share session limit has been reached"),
    (134, "GROUP_DELETION_FAILED", False, "", "DeleteGroups could not complete; see the per-group error message"),
    (135, "STREAMS_TOPOLOGY_DESCRIPTION_UPDATE_FAILED", False, "",
     "the broker could not process the topology description update"),
    (136, "CONTROLLER_ID_NOT_REGISTERED", False, "", "the given controller id is not registered"),
)

# Names whose plain CamelCase form would clash with client-side errors, and the
# client-side class each one also derives from.
_RENAMED = {
    "REQUEST_TIMED_OUT": ("BrokerRequestTimedOutError", _errors.RequestTimedOutError),
    "UNSUPPORTED_VERSION": ("BrokerUnsupportedVersionError", _errors.UnsupportedVersionError),
}


def class_name_for(name):
    """UPPER_SNAKE Kafka name -> CamelCase class name ending in ``Error``."""
    if name in _RENAMED:
        return _RENAMED[name][0]
    words = name.split("_")
    if words[-1] in ("ERROR", "EXCEPTION"):
        words = words[:-1]
    return "".join(w.capitalize() for w in words) + "Error"


ERRORS_BY_CODE = {}
ERRORS_BY_NAME = {}
__all__ = [
    "ERROR_TABLE", "ERRORS_BY_CODE", "ERRORS_BY_NAME", "BrokerError", "UnknownBrokerError",
    "AuthorizationError", "AuthenticationError", "error_for_code", "raise_for_code",
    "error_class", "class_name_for",
]


def _build():
    g = globals()
    for code, name, retriable, flags, message in ERROR_TABLE:
        cls_name = class_name_for(name)
        bases = [BrokerError]
        if "Z" in flags:
            bases = [AuthorizationError]
        elif "A" in flags:
            bases = [AuthenticationError]
        if name in _RENAMED:
            bases.append(_RENAMED[name][1])
        cls = type(cls_name, tuple(bases), {
            "__module__": __name__,
            "__qualname__": cls_name,
            "__doc__": f"Kafka error {name} ({code}): {message}.",
            "code": code,
            "name": name,
            "retriable": retriable,
            "invalid_metadata": "M" in flags,
            "default_message": message,
        })
        if cls_name in g or code in ERRORS_BY_CODE:
            raise RuntimeError(f"duplicate error table entry {name} ({code})")
        g[cls_name] = cls
        ERRORS_BY_CODE[code] = cls
        ERRORS_BY_NAME[name] = cls
        __all__.append(cls_name)


_build()
del _build


def error_class(code):
    """The class for ``code`` (UnknownBrokerError for codes not in the table,
    None for 0)."""
    if code == 0:
        return None
    return ERRORS_BY_CODE.get(code, UnknownBrokerError)


def error_for_code(code, message=None, context=""):
    """An exception instance for a response's error code, or None for 0 (NONE).

    ``message`` is the broker's ``error_message`` field when the response has
    one (None or "" keeps the default text); ``context`` says what failed
    (e.g. "Produce to orders-3") and is prefixed to the message.
    """
    if code == 0:
        return None
    cls = ERRORS_BY_CODE.get(code)
    if cls is None:
        return UnknownBrokerError(code, message, context=context)
    return cls(message, context=context)


def raise_for_code(code, message=None, context=""):
    """Raise the exception for ``code``; do nothing for 0."""
    exc = error_for_code(code, message, context)
    if exc is not None:
        raise exc
