"""The admin client written once: every operation of :class:`kio.Admin`
(blocking) and of ``kio.aio.Admin`` / ``kio.trio.Admin`` (awaitable), with
its overloads and docstring, stated here a single time.

Each method prepares its arguments and returns ``self._call(name, *args,
timeout=..., raise_errors=..., **kwargs)``: the driver runs the
:class:`kproto.admin.AdminCore` operation ``name`` (``now`` supplied,
``timeout`` in seconds made ``timeout_ms``) to its end. The threading
driver's ``_call`` returns the value; the async driver's returns an
awaitable of it. The annotations here are the blocking ones; the async
class's are generated from them into ``kio/_async/admin.pyi`` by
``tools/gen_async_admin_stub.py`` (``--check`` in the tests keeps it current).
"""
from __future__ import annotations

import uuid
from typing import Any, Dict, Iterable, List, Literal, Mapping, Optional, Union, overload

from kio._shared.admin_cluster_ops import AdminClusterOps
from kio._shared.admin_group_ops import AdminGroupOps
from kio._shared.admin_token_ops import AdminTokenOps
from kio._shared.common import ClosedChecks
from kio._shared.telemetry_ops import MetricSubscriptionOps
from kproto.admin import (
    AdminHandle, ClusterDescription, ConfigEntry, ConfigResource, ConsumerGroupDescription, ConsumerGroupListing,
    ConsumerLag, DeletedRecords, ListOffsetsResultInfo, NewPartitions, NewTopic, TopicDescription, TopicListing,
)
from kproto.cluster import TopicPartition
from kproto.consumer import OffsetAndMetadata
from kproto.errors import KafkaError
from kproto.telemetry import check_instance_id_timeout
from kproto.share.admin import ShareGroupDescription, ShareGroupListing, SharePartitionOffset

__all__ = ["AdminOps", "AdminClosedError"]


class AdminClosedError(KafkaError):
    """The admin client is closed (or its network side failed)."""


AdminClosedError.__module__ = "kio.admin"


class AdminOps(AdminGroupOps, ClosedChecks, AdminClusterOps, AdminTokenOps, MetricSubscriptionOps):
    """The admin operations, shared by every driver (see the module docstring).

    Every operation takes ``timeout`` (seconds; default
    default.api.timeout.ms, then :class:`AdminTimeoutError`) and
    ``raise_errors``: True (the default) returns the result and raises the
    first failed item's error; False returns the operation's
    :class:`AdminHandle` (``values()`` and ``errors()`` per item)."""

    _what = "admin client"
    _core: Any                            # the driver's kproto.admin.AdminCore
    _closed_error = AdminClosedError      # the drivers' _call checks _check_open() first

    def _call(self, name: str, *args: Any, timeout: Optional[float], raise_errors: bool, **kwargs: Any) -> Any:
        """Run the core operation ``name`` to its end (the driver's)."""
        raise NotImplementedError

    # -- KIP-714 client telemetry ----------------------------------------------------------------
    def client_instance_id(self, timeout: Optional[float] = None) -> uuid.UUID:
        """The client instance id (KIP-714) the broker assigned this client in
        GetTelemetrySubscriptions, waiting up to ``timeout`` seconds (default
        default.api.timeout.ms; then :class:`AdminTimeoutError`) for its
        answer. :class:`~kio.errors.IllegalStateError` when there is none to
        wait for: ``enable.metrics.push`` is off, or the broker has no
        telemetry APIs (or refused them); ValueError for a negative timeout."""
        check_instance_id_timeout(timeout)
        return self._call("client_instance_id", timeout=timeout, raise_errors=True)  # type: ignore[no-any-return]

    def metrics(self) -> Dict[str, Any]:
        """The admin client's counters ({name: value}: connections, requests,
        responses, telemetry pushes, retried calls, calls in progress)."""
        return self._core.metrics()  # type: ignore[no-any-return]

    # -- topics --------------------------------------------------------------------------------
    @overload
    def create_topics(self, topics: Iterable[Union[str, NewTopic]], *, num_partitions: int = ...,
                      replication_factor: int = ..., validate_only: bool = ..., timeout: Optional[float] = ...,
                      raise_errors: Literal[True] = ...) -> Dict[str, Optional[uuid.UUID]]: ...

    @overload
    def create_topics(self, topics: Iterable[Union[str, NewTopic]], *, num_partitions: int = ...,
                      replication_factor: int = ..., validate_only: bool = ..., timeout: Optional[float] = ...,
                      raise_errors: Literal[False]) -> AdminHandle: ...

    def create_topics(self, topics: Iterable[Union[str, NewTopic]], *, num_partitions: int = -1,
                      replication_factor: int = -1, validate_only: bool = False,
                      timeout: Optional[float] = None, raise_errors: bool = True) -> Any:
        """Create topics: NewTopic values, or names (with ``num_partitions`` and
        ``replication_factor``; -1 is the broker's default). Returns {name:
        topic id} (a :class:`uuid.UUID`; None from a broker that reports no
        ids). A name Kafka does not allow fails with InvalidTopicError, one
        that exists with TopicAlreadyExistsError. ``validate_only``: only check."""
        new = [t if isinstance(t, NewTopic) else NewTopic(t, num_partitions, replication_factor)
               for t in topics]
        return self._call("create_topics", new, validate_only=validate_only, timeout=timeout,
                        raise_errors=raise_errors)

    @overload
    def delete_topics(self, topics: Iterable[str], *, timeout: Optional[float] = ...,
                      raise_errors: Literal[True] = ...) -> Dict[str, None]: ...

    @overload
    def delete_topics(self, topics: Iterable[str], *, timeout: Optional[float] = ...,
                      raise_errors: Literal[False]) -> AdminHandle: ...

    def delete_topics(self, topics: Iterable[str], *, timeout: Optional[float] = None,
                      raise_errors: bool = True) -> Any:
        """Delete topics by name: {name: None}; a missing topic fails with
        UnknownTopicOrPartitionError."""
        return self._call("delete_topics", topics, timeout=timeout, raise_errors=raise_errors)

    @overload
    def list_topics(self, *, list_internal: bool = ..., timeout: Optional[float] = ...,
                    raise_errors: Literal[True] = ...) -> Dict[str, TopicListing]: ...

    @overload
    def list_topics(self, *, list_internal: bool = ..., timeout: Optional[float] = ...,
                    raise_errors: Literal[False]) -> AdminHandle: ...

    def list_topics(self, *, list_internal: bool = False, timeout: Optional[float] = None,
                    raise_errors: bool = True) -> Any:
        """Every topic: {name: TopicListing(name, topic_id, internal)}, by name;
        internal topics (``__consumer_offsets``...) only with ``list_internal``."""
        return self._call("list_topics", list_internal=list_internal, timeout=timeout,
                        raise_errors=raise_errors)

    @overload
    def describe_topics(self, topics: Iterable[str], *,
                        include_authorized_operations: bool = ..., partition_size_limit_per_response: int = ...,
                        timeout: Optional[float] = ...,
                        raise_errors: Literal[True] = ...) -> Dict[str, TopicDescription]: ...

    @overload
    def describe_topics(self, topics: Iterable[uuid.UUID], *,
                        include_authorized_operations: bool = ..., partition_size_limit_per_response: int = ...,
                        timeout: Optional[float] = ...,
                        raise_errors: Literal[True] = ...) -> Dict[uuid.UUID, TopicDescription]: ...

    @overload
    def describe_topics(self, topics: Iterable[Union[str, uuid.UUID]], *, include_authorized_operations: bool = ...,
                        partition_size_limit_per_response: int = ..., timeout: Optional[float] = ...,
                        raise_errors: Literal[True] = ...) -> Dict[Union[str, uuid.UUID], TopicDescription]: ...

    @overload
    def describe_topics(self, topics: Iterable[Union[str, uuid.UUID]], *, include_authorized_operations: bool = ...,
                        partition_size_limit_per_response: int = ..., timeout: Optional[float] = ...,
                        raise_errors: Literal[False]) -> AdminHandle: ...

    def describe_topics(self, topics: Iterable[Union[str, uuid.UUID]], *, include_authorized_operations: bool = False,
                        partition_size_limit_per_response: int = 2000,
                        timeout: Optional[float] = None, raise_errors: bool = True) -> Any:
        """{name: TopicDescription(name, topic_id, internal, partitions)}, the
        partitions as PartitionInfo (leader, replicas, isr, ...); a missing
        topic fails with UnknownTopicOrPartitionError. Asked with
        DescribeTopicPartitions (KIP-966), ``partition_size_limit_per_response``
        partitions a request, where the broker has it; else Metadata. Topics
        given by id (``uuid.UUID``, Java's ``TopicCollection.ofTopicIds``)
        are keyed by their id and asked with Metadata v12+; an id no topic
        has fails with UnknownTopicIdError naming it.

        ``include_authorized_operations``: fill each description's
        ``authorized_operations`` (the AclOperations the caller may do with it;
        None unless asked), Java's ``includeAuthorizedOperations``."""
        return self._call("describe_topics", topics,
                          partition_size_limit_per_response=partition_size_limit_per_response,
                          include_authorized_operations=include_authorized_operations,
                          timeout=timeout, raise_errors=raise_errors)

    @overload
    def describe_cluster(self, *, include_authorized_operations: bool = ..., timeout: Optional[float] = ...,
                         raise_errors: Literal[True] = ...) -> ClusterDescription: ...

    @overload
    def describe_cluster(self, *, include_authorized_operations: bool = ..., timeout: Optional[float] = ...,
                         raise_errors: Literal[False]) -> AdminHandle: ...

    def describe_cluster(self, *,
                         include_authorized_operations: bool = False,
                         timeout: Optional[float] = None, raise_errors: bool = True) -> Any:
        """ClusterDescription(cluster_id, controller, nodes): the brokers as
        Node(id, host, port, rack).

        ``include_authorized_operations``: fill its ``authorized_operations``
        (the AclOperations the caller may do with the cluster;
        None unless asked), Java's ``includeAuthorizedOperations``."""
        return self._call("describe_cluster", include_authorized_operations=include_authorized_operations,
                          timeout=timeout, raise_errors=raise_errors)

    @overload
    def create_partitions(self, new_partitions: Mapping[str, Union[int, NewPartitions]], *,
                          validate_only: bool = ..., timeout: Optional[float] = ...,
                          raise_errors: Literal[True] = ...) -> Dict[str, None]: ...

    @overload
    def create_partitions(self, new_partitions: Mapping[str, Union[int, NewPartitions]], *,
                          validate_only: bool = ..., timeout: Optional[float] = ...,
                          raise_errors: Literal[False]) -> AdminHandle: ...

    def create_partitions(self, new_partitions: Mapping[str, Union[int, NewPartitions]], *,
                          validate_only: bool = False, timeout: Optional[float] = None,
                          raise_errors: bool = True) -> Any:
        """Grow topics to {name: total partition count, or NewPartitions(total_count,
        assignments)}: {name: None}."""
        return self._call("create_partitions", new_partitions, validate_only=validate_only, timeout=timeout,
                        raise_errors=raise_errors)

    @overload
    def describe_configs(self, resources: Iterable[ConfigResource], *, include_synonyms: bool = ...,
                         timeout: Optional[float] = ...,
                         raise_errors: Literal[True] = ...) -> Dict[ConfigResource, Dict[str, ConfigEntry]]: ...

    @overload
    def describe_configs(self, resources: Iterable[ConfigResource], *, include_synonyms: bool = ...,
                         timeout: Optional[float] = ..., raise_errors: Literal[False]) -> AdminHandle: ...

    def describe_configs(self, resources: Iterable[ConfigResource], *, include_synonyms: bool = False,
                         timeout: Optional[float] = None, raise_errors: bool = True) -> Any:
        """The settings of topics and brokers (``ConfigResource.topic(name)``,
        ``ConfigResource.broker(node_id)``): {resource: {name: ConfigEntry}}."""
        return self._call("describe_configs", resources, include_synonyms=include_synonyms, timeout=timeout,
                        raise_errors=raise_errors)

    # -- groups and offsets --------------------------------------------------------------------
    @overload
    def list_consumer_groups(self, *, states: Optional[Iterable[str]] = ..., timeout: Optional[float] = ...,
                             raise_errors: Literal[True] = ...) -> List[ConsumerGroupListing]: ...

    @overload
    def list_consumer_groups(self, *, states: Optional[Iterable[str]] = ..., timeout: Optional[float] = ...,
                             raise_errors: Literal[False]) -> AdminHandle: ...

    def list_consumer_groups(self, *, states: Optional[Iterable[str]] = None, timeout: Optional[float] = None,
                             raise_errors: bool = True) -> Any:
        """Every group of every broker: [ConsumerGroupListing(group_id,
        is_simple, state, ...)]; ``states`` keeps only groups in these states
        (e.g. ["Stable", "Empty"])."""
        return self._call("list_consumer_groups", states=states, timeout=timeout, raise_errors=raise_errors)

    @overload
    def describe_consumer_groups(self, group_ids: Iterable[str], *,
                                 include_authorized_operations: bool = ..., timeout: Optional[float] = ...,
                                 raise_errors: Literal[True] = ...) -> Dict[str, ConsumerGroupDescription]: ...

    @overload
    def describe_consumer_groups(self, group_ids: Iterable[str], *,
                                 include_authorized_operations: bool = ..., timeout: Optional[float] = ...,
                                 raise_errors: Literal[False]) -> AdminHandle: ...

    def describe_consumer_groups(self, group_ids: Iterable[str], *,
                                 include_authorized_operations: bool = False, timeout: Optional[float] = None,
                                 raise_errors: bool = True) -> Any:
        """{group: ConsumerGroupDescription(state, assignor, members, ...)},
        each member's assignment decoded.

        ``include_authorized_operations``: fill each description's
        ``authorized_operations`` (the AclOperations the caller may do with it;
        None unless asked), Java's ``includeAuthorizedOperations``."""
        return self._call("describe_consumer_groups", group_ids,
                          include_authorized_operations=include_authorized_operations,
                          timeout=timeout, raise_errors=raise_errors)

    @overload
    def delete_consumer_groups(self, group_ids: Iterable[str], *, timeout: Optional[float] = ...,
                               raise_errors: Literal[True] = ...) -> Dict[str, None]: ...

    @overload
    def delete_consumer_groups(self, group_ids: Iterable[str], *, timeout: Optional[float] = ...,
                               raise_errors: Literal[False]) -> AdminHandle: ...

    def delete_consumer_groups(self, group_ids: Iterable[str], *, timeout: Optional[float] = None,
                               raise_errors: bool = True) -> Any:
        """Delete groups (and their committed offsets): {group: None}; a group
        with members fails with NonEmptyGroupError."""
        return self._call("delete_consumer_groups", group_ids, timeout=timeout, raise_errors=raise_errors)

    @overload
    def list_consumer_group_offsets(self, group_id: str, partitions: Optional[Iterable[TopicPartition]] = ...,
                                    *, require_stable: bool = ..., timeout: Optional[float] = ...,
                                    raise_errors: Literal[True] = ...
                                    ) -> Dict[TopicPartition, OffsetAndMetadata]: ...

    @overload
    def list_consumer_group_offsets(self, group_id: Mapping[str, Optional[Iterable[TopicPartition]]],
                                    partitions: None = ..., *, require_stable: bool = ...,
                                    timeout: Optional[float] = ..., raise_errors: Literal[True] = ...
                                    ) -> Dict[str, Dict[TopicPartition, OffsetAndMetadata]]: ...

    @overload
    def list_consumer_group_offsets(self, group_id: Union[str, Mapping[str, Optional[Iterable[TopicPartition]]]],
                                    partitions: Optional[Iterable[TopicPartition]] = ...,
                                    *, require_stable: bool = ..., timeout: Optional[float] = ...,
                                    raise_errors: Literal[False]) -> AdminHandle: ...

    def list_consumer_group_offsets(self, group_id: Union[str, Mapping[str, Optional[Iterable[TopicPartition]]]],
                                    partitions: Optional[Iterable[TopicPartition]] = None,
                                    *, require_stable: bool = True, timeout: Optional[float] = None,
                                    raise_errors: bool = True) -> Any:
        """{TopicPartition: OffsetAndMetadata} committed by ``group_id`` (all its
        partitions, or ``partitions``); partitions without a commit are left out.
        Many groups at once (Java's ``listConsumerGroupOffsets(Map<String,
        ListConsumerGroupOffsetsSpec>)``): ``group_id`` a mapping ``{group:
        partitions, or None for all}`` gives ``{group: {TopicPartition:
        OffsetAndMetadata}}``, one OffsetFetch per coordinator."""
        return self._call("list_consumer_group_offsets", group_id, partitions, require_stable=require_stable,
                        timeout=timeout, raise_errors=raise_errors)

    @overload
    def consumer_group_lag(self, group_id: str, *, timeout: Optional[float] = ...,
                           raise_errors: Literal[True] = ...) -> Dict[TopicPartition, ConsumerLag]: ...

    @overload
    def consumer_group_lag(self, group_id: str, *, timeout: Optional[float] = ...,
                           raise_errors: Literal[False]) -> AdminHandle: ...

    def consumer_group_lag(self, group_id: str, *, timeout: Optional[float] = None,
                           raise_errors: bool = True) -> Any:
        """{TopicPartition: ConsumerLag(committed, end_offset, lag)} for every
        partition ``group_id`` committed (end offset: the high watermark)."""
        return self._call("consumer_group_lag", group_id, timeout=timeout, raise_errors=raise_errors)

    @overload
    def list_offsets(self, specs: Mapping[TopicPartition, Union[int, str]], *, isolation_level: int = ...,
                     timeout: Optional[float] = ...,
                     raise_errors: Literal[True] = ...) -> Dict[TopicPartition, ListOffsetsResultInfo]: ...

    @overload
    def list_offsets(self, specs: Mapping[TopicPartition, Union[int, str]], *, isolation_level: int = ...,
                     timeout: Optional[float] = ..., raise_errors: Literal[False]) -> AdminHandle: ...

    def list_offsets(self, specs: Mapping[TopicPartition, Union[int, str]], *, isolation_level: int = 0,
                     timeout: Optional[float] = None, raise_errors: bool = True) -> Any:
        """{TopicPartition: ListOffsetsResultInfo(offset, timestamp, leader_epoch)}
        for {TopicPartition: spec}, spec one of OffsetSpec.EARLIEST/LATEST/
        MAX_TIMESTAMP, 'earliest'/'latest', or a timestamp in ms (the first
        offset with a timestamp >= it; offset -1 when there is none).
        ``isolation_level`` 1 = read_committed."""
        return self._call("list_offsets", specs, isolation_level=isolation_level, timeout=timeout,
                        raise_errors=raise_errors)

    @overload
    def delete_records(self, before: Mapping[TopicPartition, int], *, timeout: Optional[float] = ...,
                       raise_errors: Literal[True] = ...) -> Dict[TopicPartition, DeletedRecords]: ...

    @overload
    def delete_records(self, before: Mapping[TopicPartition, int], *, timeout: Optional[float] = ...,
                       raise_errors: Literal[False]) -> AdminHandle: ...

    def delete_records(self, before: Mapping[TopicPartition, int], *, timeout: Optional[float] = None,
                       raise_errors: bool = True) -> Any:
        """Delete the records before {TopicPartition: offset} (-1: the high
        watermark, i.e. all): {TopicPartition: DeletedRecords(low_watermark)}."""
        return self._call("delete_records", before, timeout=timeout, raise_errors=raise_errors)

    # -- share groups (KIP-932) ----------------------------------------------------------------
    @overload
    def list_share_groups(self, *, states: Optional[Iterable[str]] = ..., timeout: Optional[float] = ...,
                          raise_errors: Literal[True] = ...) -> List[ShareGroupListing]: ...

    @overload
    def list_share_groups(self, *, states: Optional[Iterable[str]] = ..., timeout: Optional[float] = ...,
                          raise_errors: Literal[False]) -> AdminHandle: ...

    def list_share_groups(self, *, states: Optional[Iterable[str]] = None, timeout: Optional[float] = None,
                          raise_errors: bool = True) -> Any:
        """Every share group of every broker: [ShareGroupListing(group_id,
        state, coordinator)]; ``states`` keeps only groups in these states."""
        return self._call("list_share_groups", states=states, timeout=timeout, raise_errors=raise_errors)

    @overload
    def describe_share_groups(self, group_ids: Iterable[str], *,
                              include_authorized_operations: bool = ..., timeout: Optional[float] = ...,
                              raise_errors: Literal[True] = ...) -> Dict[str, ShareGroupDescription]: ...

    @overload
    def describe_share_groups(self, group_ids: Iterable[str], *,
                              include_authorized_operations: bool = ..., timeout: Optional[float] = ...,
                              raise_errors: Literal[False]) -> AdminHandle: ...

    def describe_share_groups(self, group_ids: Iterable[str], *,
                              include_authorized_operations: bool = False, timeout: Optional[float] = None,
                              raise_errors: bool = True) -> Any:
        """{group: ShareGroupDescription(state, epochs, assignor, members,
        coordinator)}, each member with its subscription and assignment.

        ``include_authorized_operations``: fill each description's
        ``authorized_operations`` (the AclOperations the caller may do with it;
        None unless asked), Java's ``includeAuthorizedOperations``."""
        return self._call("describe_share_groups", group_ids,
                          include_authorized_operations=include_authorized_operations,
                          timeout=timeout, raise_errors=raise_errors)

    @overload
    def list_share_group_offsets(self, group_id: str, partitions: Optional[Iterable[TopicPartition]] = ..., *,
                                 timeout: Optional[float] = ...,
                                 raise_errors: Literal[True] = ...) -> Dict[TopicPartition, SharePartitionOffset]: ...

    @overload
    def list_share_group_offsets(self, group_id: str, partitions: Optional[Iterable[TopicPartition]] = ..., *,
                                 timeout: Optional[float] = ...,
                                 raise_errors: Literal[False]) -> AdminHandle: ...

    def list_share_group_offsets(self, group_id: str, partitions: Optional[Iterable[TopicPartition]] = None, *,
                                 timeout: Optional[float] = None, raise_errors: bool = True) -> Any:
        """{TopicPartition: SharePartitionOffset(start_offset, leader_epoch,
        lag)} of a share group: every partition it has read, or ``partitions``."""
        return self._call("list_share_group_offsets", group_id, partitions, timeout=timeout,
                        raise_errors=raise_errors)

    @overload
    def incremental_alter_configs(self, changes: Mapping[ConfigResource, Mapping[str, Any]], *,
                                  validate_only: bool = ..., timeout: Optional[float] = ...,
                                  raise_errors: Literal[True] = ...) -> Dict[ConfigResource, None]: ...

    @overload
    def incremental_alter_configs(self, changes: Mapping[ConfigResource, Mapping[str, Any]], *,
                                  validate_only: bool = ..., timeout: Optional[float] = ...,
                                  raise_errors: Literal[False]) -> AdminHandle: ...

    def incremental_alter_configs(self, changes: Mapping[ConfigResource, Mapping[str, Any]], *,
                                  validate_only: bool = False, timeout: Optional[float] = None,
                                  raise_errors: bool = True) -> Any:
        """Change some settings of topics, brokers or groups and keep the rest:
        ``{ConfigResource: {name: value, None for the default, or an
        AlterConfigOp}}``, e.g. ``{ConfigResource.group("jobs"):
        {"share.auto.offset.reset": "earliest"}}`` or, for a list-valued
        setting, ``{ConfigResource.topic("t"): {"cleanup.policy":
        AlterConfigOp.append("compact")}}`` (Java's APPEND / SUBTRACT)."""
        return self._call("incremental_alter_configs", changes, validate_only=validate_only, timeout=timeout,
                        raise_errors=raise_errors)
