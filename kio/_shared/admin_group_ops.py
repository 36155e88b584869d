"""The group and transaction operations of every admin client (blocking
:class:`kio.Admin`, ``kio.aio.Admin``, ``kio.trio.Admin``), written once as
:class:`kio._shared.admin_ops.AdminOps` writes the others, which inherits them: each
prepares its arguments and returns ``self._call(name, ...)`` of the
:class:`kproto.admin.AdminCore` operation (kproto/admin_groups.py,
kproto/admin_transactions.py). ``tools/gen_async_admin_stub.py`` puts them
in the async stub too.
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Literal, Mapping, Optional, Tuple, Union, overload

from kproto.admin import AdminHandle
from kproto.admin_groups import ClassicGroupDescription, GroupListing
from kproto.admin_streams import StreamsGroupDescription
from kproto.admin_transactions import (
    AbortTransactionSpec, ProducerIdAndEpoch, ProducerState, TransactionDescription, TransactionListing,
)
from kproto.cluster import TopicPartition
from kproto.consumer import OffsetAndMetadata

__all__ = ["AdminGroupOps"]


class AdminGroupOps:
    """Group and transaction administration (Java's Admin names in
    snake_case); ``timeout`` and ``raise_errors`` as every admin operation."""

    def _call(self, name: str, *args: Any, timeout: Optional[float], raise_errors: bool, **kwargs: Any) -> Any:
        raise NotImplementedError

    # -- groups (KIP-1043) ----------------------------------------------------------------------
    @overload
    def list_groups(self, *, types: Optional[Iterable[str]] = ..., states: Optional[Iterable[str]] = ...,
                    timeout: Optional[float] = ..., raise_errors: Literal[True] = ...) -> List[GroupListing]: ...

    @overload
    def list_groups(self, *, types: Optional[Iterable[str]] = ..., states: Optional[Iterable[str]] = ...,
                    timeout: Optional[float] = ..., raise_errors: Literal[False]) -> AdminHandle: ...

    def list_groups(self, *, types: Optional[Iterable[str]] = None, states: Optional[Iterable[str]] = None,
                    timeout: Optional[float] = None, raise_errors: bool = True) -> Any:
        """Every group of every broker, of every type: [GroupListing(group_id,
        type, protocol_type, state, coordinator)]. ``types`` keeps these
        types only ("classic", "consumer", "share", "streams"), ``states``
        these states (e.g. ["Stable", "Empty"])."""
        return self._call("list_groups", types=types, states=states, timeout=timeout, raise_errors=raise_errors)

    @overload
    def describe_classic_groups(self, group_ids: Iterable[str], *,
                                include_authorized_operations: bool = ..., timeout: Optional[float] = ...,
                                raise_errors: Literal[True] = ...) -> Dict[str, ClassicGroupDescription]: ...

    @overload
    def describe_classic_groups(self, group_ids: Iterable[str], *,
                                include_authorized_operations: bool = ..., timeout: Optional[float] = ...,
                                raise_errors: Literal[False]) -> AdminHandle: ...

    def describe_classic_groups(self, group_ids: Iterable[str], *,
                                include_authorized_operations: bool = False, timeout: Optional[float] = None,
                                raise_errors: bool = True) -> Any:
        """{group: ClassicGroupDescription(group_id, protocol, protocol_data,
        members, state, coordinator)} of classic groups (KIP-1043, Java's
        ``describeClassicGroups``), one DescribeGroups per coordinator; a
        group that is not a classic group, or does not exist, fails with
        GroupIdNotFoundError.

        ``include_authorized_operations``: fill each description's
        ``authorized_operations`` (the AclOperations the caller may do with it;
        None unless asked), Java's ``includeAuthorizedOperations``."""
        return self._call("describe_classic_groups", group_ids,
                          include_authorized_operations=include_authorized_operations,
                          timeout=timeout, raise_errors=raise_errors)

    @overload
    def alter_consumer_group_offsets(
            self, group_id: str, offsets: Mapping[TopicPartition, Union[int, OffsetAndMetadata]], *,
            timeout: Optional[float] = ..., raise_errors: Literal[True] = ...) -> Dict[TopicPartition, None]: ...

    @overload
    def alter_consumer_group_offsets(
            self, group_id: str, offsets: Mapping[TopicPartition, Union[int, OffsetAndMetadata]], *,
            timeout: Optional[float] = ..., raise_errors: Literal[False]) -> AdminHandle: ...

    def alter_consumer_group_offsets(
            self, group_id: str, offsets: Mapping[TopicPartition, Union[int, OffsetAndMetadata]], *,
            timeout: Optional[float] = None, raise_errors: bool = True) -> Any:
        """Commit ``{TopicPartition: offset or OffsetAndMetadata}`` for a group
        that has no members (its consumers stopped): {TopicPartition: None}.
        A group with members fails with UnknownMemberIdError, as in Java."""
        return self._call("alter_consumer_group_offsets", group_id, offsets, timeout=timeout,
                          raise_errors=raise_errors)

    @overload
    def delete_consumer_group_offsets(self, group_id: str, partitions: Iterable[TopicPartition], *,
                                      timeout: Optional[float] = ...,
                                      raise_errors: Literal[True] = ...) -> Dict[TopicPartition, None]: ...

    @overload
    def delete_consumer_group_offsets(self, group_id: str, partitions: Iterable[TopicPartition], *,
                                      timeout: Optional[float] = ...,
                                      raise_errors: Literal[False]) -> AdminHandle: ...

    def delete_consumer_group_offsets(self, group_id: str, partitions: Iterable[TopicPartition], *,
                                      timeout: Optional[float] = None, raise_errors: bool = True) -> Any:
        """Delete a group's committed offsets of ``partitions``: {TopicPartition:
        None}. A topic the group's members subscribe to fails with
        GroupSubscribedToTopicError, an unknown group with GroupIdNotFoundError."""
        return self._call("delete_consumer_group_offsets", group_id, partitions, timeout=timeout,
                          raise_errors=raise_errors)

    @overload
    def remove_members_from_consumer_group(self, group_id: str, members: Optional[Iterable[str]] = ..., *,
                                           reason: Optional[str] = ..., timeout: Optional[float] = ...,
                                           raise_errors: Literal[True] = ...) -> Dict[str, None]: ...

    @overload
    def remove_members_from_consumer_group(self, group_id: str, members: Optional[Iterable[str]] = ..., *,
                                           reason: Optional[str] = ..., timeout: Optional[float] = ...,
                                           raise_errors: Literal[False]) -> AdminHandle: ...

    def remove_members_from_consumer_group(self, group_id: str, members: Optional[Iterable[str]] = None, *,
                                           reason: Optional[str] = None, timeout: Optional[float] = None,
                                           raise_errors: bool = True) -> Any:
        """Make members leave a group now: ``members`` are group instance ids
        of static members (an id the group lacks fails with
        UnknownMemberIdError); None removes every member (Java's
        ``removeAll``). Returns {group instance id, or member id: None}."""
        return self._call("remove_members_from_consumer_group", group_id, members, reason=reason,
                          timeout=timeout, raise_errors=raise_errors)

    # -- share groups -----------------------------------------------------------------------------
    @overload
    def delete_share_groups(self, group_ids: Iterable[str], *, timeout: Optional[float] = ...,
                            raise_errors: Literal[True] = ...) -> Dict[str, None]: ...

    @overload
    def delete_share_groups(self, group_ids: Iterable[str], *, timeout: Optional[float] = ...,
                            raise_errors: Literal[False]) -> AdminHandle: ...

    def delete_share_groups(self, group_ids: Iterable[str], *, timeout: Optional[float] = None,
                            raise_errors: bool = True) -> Any:
        """Delete share groups and their state: {group: None}; a group with
        members fails with NonEmptyGroupError."""
        return self._call("delete_share_groups", group_ids, timeout=timeout, raise_errors=raise_errors)

    @overload
    def alter_share_group_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int], *,
                                  timeout: Optional[float] = ...,
                                  raise_errors: Literal[True] = ...) -> Dict[TopicPartition, None]: ...

    @overload
    def alter_share_group_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int], *,
                                  timeout: Optional[float] = ..., raise_errors: Literal[False]) -> AdminHandle: ...

    def alter_share_group_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int], *,
                                  timeout: Optional[float] = None, raise_errors: bool = True) -> Any:
        """Set where an empty share group starts on partitions: {TopicPartition:
        start offset} -> {TopicPartition: None}."""
        return self._call("alter_share_group_offsets", group_id, offsets, timeout=timeout,
                          raise_errors=raise_errors)

    @overload
    def delete_share_group_offsets(self, group_id: str, topics: Iterable[str], *, timeout: Optional[float] = ...,
                                   raise_errors: Literal[True] = ...) -> Dict[str, None]: ...

    @overload
    def delete_share_group_offsets(self, group_id: str, topics: Iterable[str], *, timeout: Optional[float] = ...,
                                   raise_errors: Literal[False]) -> AdminHandle: ...

    def delete_share_group_offsets(self, group_id: str, topics: Iterable[str], *, timeout: Optional[float] = None,
                                   raise_errors: bool = True) -> Any:
        """Forget an empty share group's state on every partition of ``topics``:
        {topic: None}."""
        return self._call("delete_share_group_offsets", group_id, topics, timeout=timeout,
                          raise_errors=raise_errors)

    # -- streams groups (KIP-1071) ---------------------------------------------------------------
    @overload
    def describe_streams_groups(self, group_ids: Iterable[str], *,
                                include_authorized_operations: bool = ..., timeout: Optional[float] = ...,
                                raise_errors: Literal[True] = ...) -> Dict[str, StreamsGroupDescription]: ...

    @overload
    def describe_streams_groups(self, group_ids: Iterable[str], *,
                                include_authorized_operations: bool = ..., timeout: Optional[float] = ...,
                                raise_errors: Literal[False]) -> AdminHandle: ...

    def describe_streams_groups(self, group_ids: Iterable[str], *,
                                include_authorized_operations: bool = False, timeout: Optional[float] = None,
                                raise_errors: bool = True) -> Any:
        """{group: StreamsGroupDescription(group_id, group_epoch,
        target_assignment_epoch, topology_epoch, subtopologies, members,
        group_state, coordinator, assignor_name)}, each member with its
        active, standby and warm-up tasks; an unknown group fails with
        GroupIdNotFoundError.

        ``include_authorized_operations``: fill each description's
        ``authorized_operations`` (the AclOperations the caller may do with it;
        None unless asked), Java's ``includeAuthorizedOperations``."""
        return self._call("describe_streams_groups", group_ids,
                          include_authorized_operations=include_authorized_operations,
                          timeout=timeout, raise_errors=raise_errors)

    @overload
    def list_streams_group_offsets(self, group_id: str, partitions: Optional[Iterable[TopicPartition]] = ..., *,
                                   require_stable: bool = ..., timeout: Optional[float] = ...,
                                   raise_errors: Literal[True] = ...) -> Dict[TopicPartition, OffsetAndMetadata]: ...

    @overload
    def list_streams_group_offsets(self, group_id: str, partitions: Optional[Iterable[TopicPartition]] = ..., *,
                                   require_stable: bool = ..., timeout: Optional[float] = ...,
                                   raise_errors: Literal[False]) -> AdminHandle: ...

    def list_streams_group_offsets(self, group_id: str, partitions: Optional[Iterable[TopicPartition]] = None, *,
                                   require_stable: bool = True, timeout: Optional[float] = None,
                                   raise_errors: bool = True) -> Any:
        """{TopicPartition: OffsetAndMetadata} a streams group committed (all, or
        ``partitions``); partitions without a commit are left out."""
        return self._call("list_streams_group_offsets", group_id, partitions, require_stable=require_stable,
                          timeout=timeout, raise_errors=raise_errors)

    @overload
    def alter_streams_group_offsets(
            self, group_id: str, offsets: Mapping[TopicPartition, Union[int, OffsetAndMetadata]], *,
            timeout: Optional[float] = ..., raise_errors: Literal[True] = ...) -> Dict[TopicPartition, None]: ...

    @overload
    def alter_streams_group_offsets(
            self, group_id: str, offsets: Mapping[TopicPartition, Union[int, OffsetAndMetadata]], *,
            timeout: Optional[float] = ..., raise_errors: Literal[False]) -> AdminHandle: ...

    def alter_streams_group_offsets(
            self, group_id: str, offsets: Mapping[TopicPartition, Union[int, OffsetAndMetadata]], *,
            timeout: Optional[float] = None, raise_errors: bool = True) -> Any:
        """Commit ``{TopicPartition: offset or OffsetAndMetadata}`` for a streams
        group that has no members (its applications stopped): {TopicPartition:
        None}. A group with members fails, as in Java."""
        return self._call("alter_streams_group_offsets", group_id, offsets, timeout=timeout,
                          raise_errors=raise_errors)

    @overload
    def delete_streams_group_offsets(self, group_id: str, partitions: Iterable[TopicPartition], *,
                                     timeout: Optional[float] = ...,
                                     raise_errors: Literal[True] = ...) -> Dict[TopicPartition, None]: ...

    @overload
    def delete_streams_group_offsets(self, group_id: str, partitions: Iterable[TopicPartition], *,
                                     timeout: Optional[float] = ..., raise_errors: Literal[False]) -> AdminHandle: ...

    def delete_streams_group_offsets(self, group_id: str, partitions: Iterable[TopicPartition], *,
                                     timeout: Optional[float] = None, raise_errors: bool = True) -> Any:
        """Delete a streams group's committed offsets of ``partitions``:
        {TopicPartition: None}; a source topic of an active group fails with
        GroupSubscribedToTopicError."""
        return self._call("delete_streams_group_offsets", group_id, partitions, timeout=timeout,
                          raise_errors=raise_errors)

    @overload
    def delete_streams_groups(self, group_ids: Iterable[str], *, timeout: Optional[float] = ...,
                              raise_errors: Literal[True] = ...) -> Dict[str, None]: ...

    @overload
    def delete_streams_groups(self, group_ids: Iterable[str], *, timeout: Optional[float] = ...,
                              raise_errors: Literal[False]) -> AdminHandle: ...

    def delete_streams_groups(self, group_ids: Iterable[str], *, timeout: Optional[float] = None,
                              raise_errors: bool = True) -> Any:
        """Delete streams groups and their offsets: {group: None}; a group with
        members fails with NonEmptyGroupError."""
        return self._call("delete_streams_groups", group_ids, timeout=timeout, raise_errors=raise_errors)

    # -- transactions -----------------------------------------------------------------------------
    @overload
    def describe_producers(self, partitions: Iterable[TopicPartition], *, timeout: Optional[float] = ...,
                           raise_errors: Literal[True] = ...
                           ) -> Dict[TopicPartition, Tuple[ProducerState, ...]]: ...

    @overload
    def describe_producers(self, partitions: Iterable[TopicPartition], *, timeout: Optional[float] = ...,
                           raise_errors: Literal[False]) -> AdminHandle: ...

    def describe_producers(self, partitions: Iterable[TopicPartition], *, timeout: Optional[float] = None,
                           raise_errors: bool = True) -> Any:
        """The active producers of partitions: {TopicPartition:
        (ProducerState(producer_id, producer_epoch, last_sequence,
        last_timestamp, coordinator_epoch, current_transaction_start_offset), ...)}."""
        return self._call("describe_producers", partitions, timeout=timeout, raise_errors=raise_errors)

    @overload
    def list_transactions(self, *, states: Optional[Iterable[str]] = ...,
                          producer_ids: Optional[Iterable[int]] = ..., duration_filter_ms: Optional[int] = ...,
                          transactional_id_pattern: Optional[str] = ..., timeout: Optional[float] = ...,
                          raise_errors: Literal[True] = ...) -> List[TransactionListing]: ...

    @overload
    def list_transactions(self, *, states: Optional[Iterable[str]] = ...,
                          producer_ids: Optional[Iterable[int]] = ..., duration_filter_ms: Optional[int] = ...,
                          transactional_id_pattern: Optional[str] = ..., timeout: Optional[float] = ...,
                          raise_errors: Literal[False]) -> AdminHandle: ...

    def list_transactions(self, *, states: Optional[Iterable[str]] = None,
                          producer_ids: Optional[Iterable[int]] = None, duration_filter_ms: Optional[int] = None,
                          transactional_id_pattern: Optional[str] = None, timeout: Optional[float] = None,
                          raise_errors: bool = True) -> Any:
        """Every transactional id the coordinators know: [TransactionListing(
        transactional_id, producer_id, state)]; ``states`` (e.g. ["Ongoing"]),
        ``producer_ids``, ``duration_filter_ms`` (open longer than that) and
        ``transactional_id_pattern`` (a regular expression) narrow it."""
        return self._call("list_transactions", states=states, producer_ids=producer_ids,
                          duration_filter_ms=duration_filter_ms, transactional_id_pattern=transactional_id_pattern,
                          timeout=timeout, raise_errors=raise_errors)

    @overload
    def describe_transactions(self, transactional_ids: Iterable[str], *, timeout: Optional[float] = ...,
                              raise_errors: Literal[True] = ...) -> Dict[str, TransactionDescription]: ...

    @overload
    def describe_transactions(self, transactional_ids: Iterable[str], *, timeout: Optional[float] = ...,
                              raise_errors: Literal[False]) -> AdminHandle: ...

    def describe_transactions(self, transactional_ids: Iterable[str], *, timeout: Optional[float] = None,
                              raise_errors: bool = True) -> Any:
        """{transactional id: TransactionDescription(coordinator_id, state,
        producer_id, producer_epoch, transaction_timeout_ms,
        transaction_start_time_ms, topic_partitions)}; an unknown id fails
        with TransactionalIdNotFoundError."""
        return self._call("describe_transactions", transactional_ids, timeout=timeout, raise_errors=raise_errors)

    @overload
    def abort_transaction(self, spec: AbortTransactionSpec, *, timeout: Optional[float] = ...,
                          raise_errors: Literal[True] = ...) -> Dict[TopicPartition, None]: ...

    @overload
    def abort_transaction(self, spec: AbortTransactionSpec, *, timeout: Optional[float] = ...,
                          raise_errors: Literal[False]) -> AdminHandle: ...

    def abort_transaction(self, spec: AbortTransactionSpec, *, timeout: Optional[float] = None,
                          raise_errors: bool = True) -> Any:
        """End a hanging transaction on one partition: the abort marker written
        by its leader for ``spec`` (``AbortTransactionSpec.for_producer(tp,
        state)`` of a describe_producers ProducerState): {TopicPartition: None}."""
        return self._call("abort_transaction", spec, timeout=timeout, raise_errors=raise_errors)

    @overload
    def fence_producers(self, transactional_ids: Iterable[str], *, timeout: Optional[float] = ...,
                        raise_errors: Literal[True] = ...) -> Dict[str, ProducerIdAndEpoch]: ...

    @overload
    def fence_producers(self, transactional_ids: Iterable[str], *, timeout: Optional[float] = ...,
                        raise_errors: Literal[False]) -> AdminHandle: ...

    def fence_producers(self, transactional_ids: Iterable[str], *, timeout: Optional[float] = None,
                        raise_errors: bool = True) -> Any:
        """Fence the producers of transactional ids (their epoch bumped, their
        open transactions aborted): {id: ProducerIdAndEpoch(producer_id, epoch)}."""
        return self._call("fence_producers", transactional_ids, timeout=timeout, raise_errors=raise_errors)
