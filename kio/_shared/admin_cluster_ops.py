"""The security, config and cluster operations of the admin clients
(:class:`kio.Admin`, ``kio.aio.Admin``, ``kio.trio.Admin``), written once as
:mod:`kio._shared.admin_ops` writes the others: each method prepares its arguments
and returns ``self._call(name, ...)``, the driver running the
:class:`kproto.admin.AdminCore` operation ``name`` to its end. A mixin of
:class:`kio._shared.admin_ops.AdminOps`; ``tools/gen_async_admin_stub.py`` writes
the async view of these methods too.
"""
from __future__ import annotations

import uuid
from typing import Any, Dict, Iterable, List, Literal, Mapping, Optional, Tuple, Union, overload

from kproto.admin import AdminHandle, ConfigResource
from kproto.admin_acls import AclBinding, AclBindingFilter
from kproto.admin_cluster import (
    ElectionType, FeatureMetadata, FeatureUpdate, LogDirDescription, PartitionReassignment, QuorumInfo,
    ReplicaLogDirInfo, TopicPartitionReplica,
)
from kproto.admin_quorum import RaftVoterEndpoint
from kproto.admin_configs import ClientQuotaAlteration, ClientQuotaEntity, ClientQuotaFilter, ConfigResourceListing
from kproto.admin_scram import (
    UserScramCredentialDeletion, UserScramCredentialsDescription, UserScramCredentialUpsertion,
)
from kproto.cluster import TopicPartition

__all__ = ["AdminClusterOps"]


class AdminClusterOps:
    """ACLs, legacy configs, quotas, SCRAM credentials, log dirs, leaders,
    reassignments, features, the metadata quorum and its voters, broker
    registrations (see the module)."""

    def _call(self, name: str, *args: Any, timeout: Optional[float], raise_errors: bool, **kwargs: Any) -> Any:
        raise NotImplementedError

    # -- ACLs ------------------------------------------------------------------------------------
    @overload
    def create_acls(self, bindings: Iterable[AclBinding], *, timeout: Optional[float] = ...,
            raise_errors: Literal[True] = ...) -> Dict[AclBinding, None]: ...

    @overload
    def create_acls(self, bindings: Iterable[AclBinding], *, timeout: Optional[float] = ...,
            raise_errors: Literal[False]) -> AdminHandle: ...

    def create_acls(self, bindings: Iterable[AclBinding], *, timeout: Optional[float] = None,
                    raise_errors: bool = True) -> Any:
        """Create ACLs: {AclBinding: None}. Every field of a binding must be
        concrete (ValueError for ANY or MATCH); a user without ALTER on the
        cluster gets ClusterAuthorizationFailedError, a broker without an
        authorizer SecurityDisabledError."""
        return self._call("create_acls", list(bindings), timeout=timeout, raise_errors=raise_errors)

    @overload
    def describe_acls(self, acl_filter: AclBindingFilter = ..., *, timeout: Optional[float] = ...,
            raise_errors: Literal[True] = ...) -> List[AclBinding]: ...

    @overload
    def describe_acls(self, acl_filter: AclBindingFilter = ..., *, timeout: Optional[float] = ...,
            raise_errors: Literal[False]) -> AdminHandle: ...

    def describe_acls(self, acl_filter: AclBindingFilter = AclBindingFilter(), *,
                      timeout: Optional[float] = None, raise_errors: bool = True) -> Any:
        """The ACLs matching ``acl_filter`` (Java's semantics: ANY fields match
        everything; ``PatternType.MATCH`` finds the literal, wildcard and prefixed
        bindings that apply to a name), sorted."""
        return self._call("describe_acls", acl_filter, timeout=timeout, raise_errors=raise_errors)

    @overload
    def delete_acls(self, filters: Iterable[AclBindingFilter], *, timeout: Optional[float] = ...,
            raise_errors: Literal[True] = ...) -> Dict[AclBindingFilter, List[AclBinding]]: ...

    @overload
    def delete_acls(self, filters: Iterable[AclBindingFilter], *, timeout: Optional[float] = ...,
            raise_errors: Literal[False]) -> AdminHandle: ...

    def delete_acls(self, filters: Iterable[AclBindingFilter], *, timeout: Optional[float] = None,
                    raise_errors: bool = True) -> Any:
        """Delete the ACLs matching each filter: {filter: [AclBinding deleted]}."""
        return self._call("delete_acls", list(filters), timeout=timeout, raise_errors=raise_errors)

    # -- configs and quotas ----------------------------------------------------------------------
    @overload
    def alter_configs(self, configs: Mapping[ConfigResource, Mapping[str, Any]], *,
                      validate_only: bool = ..., timeout: Optional[float] = ...,
            raise_errors: Literal[True] = ...) -> Dict[ConfigResource, None]: ...

    @overload
    def alter_configs(self, configs: Mapping[ConfigResource, Mapping[str, Any]], *,
                      validate_only: bool = ..., timeout: Optional[float] = ...,
            raise_errors: Literal[False]) -> AdminHandle: ...

    def alter_configs(self, configs: Mapping[ConfigResource, Mapping[str, Any]], *,
                      validate_only: bool = False, timeout: Optional[float] = None,
raise_errors: bool = True) -> Any:
        """Replace the dynamic settings of each resource (legacy AlterConfigs,
        Java's deprecated ``alterConfigs``): settings not given return to their
        defaults. Prefer ``incremental_alter_configs``. An invalid value fails
        its resource with InvalidConfigError (InvalidRequestError for a
        resource type the broker does not alter this way)."""
        return self._call("alter_configs", configs, validate_only=validate_only, timeout=timeout,
                          raise_errors=raise_errors)

    @overload
    def describe_client_quotas(self, quota_filter: ClientQuotaFilter = ..., *, timeout: Optional[float] = ...,
            raise_errors: Literal[True] = ...) -> Dict[ClientQuotaEntity, Dict[str, float]]: ...

    @overload
    def describe_client_quotas(self, quota_filter: ClientQuotaFilter = ..., *, timeout: Optional[float] = ...,
            raise_errors: Literal[False]) -> AdminHandle: ...

    def describe_client_quotas(self, quota_filter: ClientQuotaFilter = ClientQuotaFilter(), *,
                               timeout: Optional[float] = None, raise_errors: bool = True) -> Any:
        """{ClientQuotaEntity: {quota key: value}} of the entities matching
        ``quota_filter`` (default: all)."""
        return self._call("describe_client_quotas", quota_filter, timeout=timeout, raise_errors=raise_errors)

    @overload
    def alter_client_quotas(self, entries: Iterable[ClientQuotaAlteration], *, validate_only: bool = ...,
                            timeout: Optional[float] = ...,
            raise_errors: Literal[True] = ...) -> Dict[ClientQuotaEntity, None]: ...

    @overload
    def alter_client_quotas(self, entries: Iterable[ClientQuotaAlteration], *, validate_only: bool = ...,
                            timeout: Optional[float] = ...,
            raise_errors: Literal[False]) -> AdminHandle: ...

    def alter_client_quotas(self, entries: Iterable[ClientQuotaAlteration], *, validate_only: bool = False,
                            timeout: Optional[float] = None, raise_errors: bool = True) -> Any:
        """Set quotas ({key: value}) or remove them ({key: None}) per entity:
        {ClientQuotaEntity: None}."""
        return self._call("alter_client_quotas", list(entries), validate_only=validate_only, timeout=timeout,
                          raise_errors=raise_errors)

    @overload
    def describe_user_scram_credentials(self, users: Optional[Iterable[str]] = ..., *,
                                        timeout: Optional[float] = ...,
            raise_errors: Literal[True] = ...) -> Dict[str, UserScramCredentialsDescription]: ...

    @overload
    def describe_user_scram_credentials(self, users: Optional[Iterable[str]] = ..., *,
                                        timeout: Optional[float] = ...,
            raise_errors: Literal[False]) -> AdminHandle: ...

    def describe_user_scram_credentials(self, users: Optional[Iterable[str]] = None, *,
                                        timeout: Optional[float] = None, raise_errors: bool = True) -> Any:
        """{user: UserScramCredentialsDescription(name, credential_infos)} of
        ``users`` (a user without credentials fails with ResourceNotFoundError),
        or of every user with a credential when None."""
        return self._call("describe_user_scram_credentials", users, timeout=timeout, raise_errors=raise_errors)

    @overload
    def alter_user_scram_credentials(self, alterations: Iterable[Union[UserScramCredentialUpsertion,
                                     UserScramCredentialDeletion]], *, timeout: Optional[float] = ...,
            raise_errors: Literal[True] = ...) -> Dict[str, None]: ...

    @overload
    def alter_user_scram_credentials(self, alterations: Iterable[Union[UserScramCredentialUpsertion,
                                     UserScramCredentialDeletion]], *, timeout: Optional[float] = ...,
            raise_errors: Literal[False]) -> AdminHandle: ...

    def alter_user_scram_credentials(self, alterations: Iterable[Union[UserScramCredentialUpsertion,
                                     UserScramCredentialDeletion]], *, timeout: Optional[float] = None,
raise_errors: bool = True) -> Any:
        """Upsert (salted here: PBKDF2-HMAC with the mechanism's hash, as Java's
        Admin) or delete SCRAM credentials: {user: None}. Fewer than 4096
        iterations fail with UnacceptableCredentialError."""
        return self._call("alter_user_scram_credentials", list(alterations), timeout=timeout,
                          raise_errors=raise_errors)

    @overload
    def list_config_resources(self, resource_types: Iterable[int] = ..., *, timeout: Optional[float] = ...,
            raise_errors: Literal[True] = ...) -> List[ConfigResourceListing]: ...

    @overload
    def list_config_resources(self, resource_types: Iterable[int] = ..., *, timeout: Optional[float] = ...,
            raise_errors: Literal[False]) -> AdminHandle: ...

    def list_config_resources(self, resource_types: Iterable[int] = (), *, timeout: Optional[float] = None,
                              raise_errors: bool = True) -> Any:
        """The config resources with dynamic settings, of ``resource_types``
        (ConfigResource.TOPIC, BROKER, GROUP, CLIENT_METRICS; empty: all)."""
        return self._call("list_config_resources", resource_types, timeout=timeout, raise_errors=raise_errors)

    @overload
    def list_client_metrics_resources(self, *, timeout: Optional[float] = ...,
            raise_errors: Literal[True] = ...) -> List[ConfigResourceListing]: ...

    @overload
    def list_client_metrics_resources(self, *, timeout: Optional[float] = ...,
            raise_errors: Literal[False]) -> AdminHandle: ...

    def list_client_metrics_resources(self, *, timeout: Optional[float] = None,
                                      raise_errors: bool = True) -> Any:
        """The client-metrics resources (KIP-714 subscriptions)."""
        return self._call("list_client_metrics_resources", timeout=timeout, raise_errors=raise_errors)

    # -- cluster and replicas --------------------------------------------------------------------
    @overload
    def describe_log_dirs(self, broker_ids: Iterable[int], *, timeout: Optional[float] = ...,
            raise_errors: Literal[True] = ...) -> Dict[int, Dict[str, LogDirDescription]]: ...

    @overload
    def describe_log_dirs(self, broker_ids: Iterable[int], *, timeout: Optional[float] = ...,
            raise_errors: Literal[False]) -> AdminHandle: ...

    def describe_log_dirs(self, broker_ids: Iterable[int], *, timeout: Optional[float] = None,
                          raise_errors: bool = True) -> Any:
        """{broker: {log dir: LogDirDescription(error, replica_infos, total_bytes,
        usable_bytes)}}."""
        return self._call("describe_log_dirs", list(broker_ids), timeout=timeout, raise_errors=raise_errors)

    @overload
    def describe_replica_log_dirs(self, replicas: Iterable[TopicPartitionReplica], *,
                                  timeout: Optional[float] = ...,
                                  raise_errors: Literal[True] = ...
                                  ) -> Dict[TopicPartitionReplica, ReplicaLogDirInfo]: ...

    @overload
    def describe_replica_log_dirs(self, replicas: Iterable[TopicPartitionReplica], *,
                                  timeout: Optional[float] = ...,
                                  raise_errors: Literal[False]) -> AdminHandle: ...

    def describe_replica_log_dirs(self, replicas: Iterable[TopicPartitionReplica], *,
                                  timeout: Optional[float] = None, raise_errors: bool = True) -> Any:
        """{TopicPartitionReplica: ReplicaLogDirInfo(current dir, its lag, future
        dir, its lag)}: where each replica lives on its broker, and where it
        is moving to (None, -1 when not)."""
        return self._call("describe_replica_log_dirs", list(replicas), timeout=timeout, raise_errors=raise_errors)

    @overload
    def alter_replica_log_dirs(self, assignments: Mapping[TopicPartitionReplica, str], *,
                               timeout: Optional[float] = ...,
            raise_errors: Literal[True] = ...) -> Dict[TopicPartitionReplica, None]: ...

    @overload
    def alter_replica_log_dirs(self, assignments: Mapping[TopicPartitionReplica, str], *,
                               timeout: Optional[float] = ...,
            raise_errors: Literal[False]) -> AdminHandle: ...

    def alter_replica_log_dirs(self, assignments: Mapping[TopicPartitionReplica, str], *,
                               timeout: Optional[float] = None, raise_errors: bool = True) -> Any:
        """Move replicas to another log dir of their broker: {TopicPartitionReplica:
        path} -> {replica: None}; an unknown path fails with LogDirNotFoundError."""
        return self._call("alter_replica_log_dirs", assignments, timeout=timeout, raise_errors=raise_errors)

    @overload
    def elect_leaders(self, election_type: ElectionType = ...,
                      partitions: Optional[Iterable[TopicPartition]] = ..., *, timeout: Optional[float] = ...,
            raise_errors: Literal[True] = ...) -> Dict[TopicPartition, Optional[BaseException]]: ...

    @overload
    def elect_leaders(self, election_type: ElectionType = ...,
                      partitions: Optional[Iterable[TopicPartition]] = ..., *, timeout: Optional[float] = ...,
            raise_errors: Literal[False]) -> AdminHandle: ...

    def elect_leaders(self, election_type: ElectionType = ElectionType.PREFERRED,
                      partitions: Optional[Iterable[TopicPartition]] = None, *,
timeout: Optional[float] = None, raise_errors: bool = True) -> Any:
        """Elect leaders (preferred or unclean). With ``partitions``: {tp: None},
        raising the first failure (ElectionNotNeededError where the preferred
        replica already leads, as Java's ``all()``). Without: every partition,
        {tp: None or its error} (Java's ``partitions()``), raising nothing per
        partition."""
        return self._call("elect_leaders", election_type, partitions, timeout=timeout,
                          raise_errors=raise_errors)

    @overload
    def alter_partition_reassignments(self, reassignments: Mapping[TopicPartition, Optional[Iterable[int]]],
                                      *, timeout: Optional[float] = ...,
            raise_errors: Literal[True] = ...) -> Dict[TopicPartition, None]: ...

    @overload
    def alter_partition_reassignments(self, reassignments: Mapping[TopicPartition, Optional[Iterable[int]]],
                                      *, timeout: Optional[float] = ...,
            raise_errors: Literal[False]) -> AdminHandle: ...

    def alter_partition_reassignments(self, reassignments: Mapping[TopicPartition, Optional[Iterable[int]]],
                                      *, timeout: Optional[float] = None, raise_errors: bool = True) -> Any:
        """Move partitions to {tp: [broker ids]}, or cancel a move ({tp: None};
        NoReassignmentInProgressError when there is none). A broker that does
        not exist fails with InvalidReplicaAssignmentError."""
        return self._call("alter_partition_reassignments", reassignments, timeout=timeout,
                          raise_errors=raise_errors)

    @overload
    def list_partition_reassignments(self, partitions: Optional[Iterable[TopicPartition]] = ..., *,
                                     timeout: Optional[float] = ...,
            raise_errors: Literal[True] = ...) -> Dict[TopicPartition, PartitionReassignment]: ...

    @overload
    def list_partition_reassignments(self, partitions: Optional[Iterable[TopicPartition]] = ..., *,
                                     timeout: Optional[float] = ...,
            raise_errors: Literal[False]) -> AdminHandle: ...

    def list_partition_reassignments(self, partitions: Optional[Iterable[TopicPartition]] = None, *,
                                     timeout: Optional[float] = None, raise_errors: bool = True) -> Any:
        """{tp: PartitionReassignment(replicas, adding, removing)} of the moves in
        progress (of ``partitions``, or all)."""
        return self._call("list_partition_reassignments", partitions, timeout=timeout,
                          raise_errors=raise_errors)

    @overload
    def describe_features(self, *, timeout: Optional[float] = ...,
            raise_errors: Literal[True] = ...) -> FeatureMetadata: ...

    @overload
    def describe_features(self, *, timeout: Optional[float] = ...,
            raise_errors: Literal[False]) -> AdminHandle: ...

    def describe_features(self, *, timeout: Optional[float] = None, raise_errors: bool = True) -> Any:
        """FeatureMetadata(finalized_features, finalized_features_epoch,
        supported_features) of the cluster."""
        return self._call("describe_features", timeout=timeout, raise_errors=raise_errors)

    @overload
    def update_features(self, updates: Mapping[str, FeatureUpdate], *, validate_only: bool = ...,
                        timeout: Optional[float] = ...,
            raise_errors: Literal[True] = ...) -> Dict[str, None]: ...

    @overload
    def update_features(self, updates: Mapping[str, FeatureUpdate], *, validate_only: bool = ...,
                        timeout: Optional[float] = ...,
            raise_errors: Literal[False]) -> AdminHandle: ...

    def update_features(self, updates: Mapping[str, FeatureUpdate], *, validate_only: bool = False,
                        timeout: Optional[float] = None, raise_errors: bool = True) -> Any:
        """Upgrade or downgrade features: {name: FeatureUpdate(level, upgrade_type)}
        -> {name: None}; a level the cluster cannot take fails with
        InvalidUpdateVersionError."""
        return self._call("update_features", updates, validate_only=validate_only, timeout=timeout,
                          raise_errors=raise_errors)

    @overload
    def describe_metadata_quorum(self, *, timeout: Optional[float] = ...,
            raise_errors: Literal[True] = ...) -> QuorumInfo: ...

    @overload
    def describe_metadata_quorum(self, *, timeout: Optional[float] = ...,
            raise_errors: Literal[False]) -> AdminHandle: ...

    def describe_metadata_quorum(self, *, timeout: Optional[float] = None, raise_errors: bool = True) -> Any:
        """QuorumInfo(leader_id, leader_epoch, high_watermark, voters, observers,
        nodes) of the KRaft metadata quorum."""
        return self._call("describe_metadata_quorum", timeout=timeout, raise_errors=raise_errors)

    # -- the KRaft quorum's voters and the brokers' registrations --------------------------------
    @overload
    def add_raft_voter(self, voter_id: int, voter_directory_id: Union[uuid.UUID, str],
                       endpoints: Iterable[Union[RaftVoterEndpoint, Tuple[str, str, int]]], *,
                       cluster_id: Optional[str] = ..., timeout: Optional[float] = ...,
                       raise_errors: Literal[True] = ...) -> None: ...

    @overload
    def add_raft_voter(self, voter_id: int, voter_directory_id: Union[uuid.UUID, str],
                       endpoints: Iterable[Union[RaftVoterEndpoint, Tuple[str, str, int]]], *,
                       cluster_id: Optional[str] = ..., timeout: Optional[float] = ...,
                       raise_errors: Literal[False]) -> AdminHandle: ...

    def add_raft_voter(self, voter_id: int, voter_directory_id: Union[uuid.UUID, str],
                       endpoints: Iterable[Union[RaftVoterEndpoint, Tuple[str, str, int]]], *,
                       cluster_id: Optional[str] = None, timeout: Optional[float] = None,
                       raise_errors: bool = True) -> Any:
        """Make controller ``voter_id`` a voter of the KRaft metadata quorum
        (KIP-853; Java's ``addRaftVoter``). It must run as an observer (e.g.
        formatted with ``--no-initial-controllers``); ``voter_directory_id`` is
        its metadata log directory's id (``directory.id`` in its
        meta.properties: Kafka's base64 text or a uuid.UUID); ``endpoints``
        its controller listeners as (name, host, port). Returns once the new
        voter set is committed. A voter already: DuplicateVoterError; a quorum
        that is not dynamic: BrokerUnsupportedVersionError; ``cluster_id``
        not the cluster's: InconsistentClusterIdError."""
        return self._call("add_raft_voter", voter_id, voter_directory_id, list(endpoints), cluster_id=cluster_id,
                          timeout=timeout, raise_errors=raise_errors)

    @overload
    def remove_raft_voter(self, voter_id: int, voter_directory_id: Union[uuid.UUID, str], *,
                          cluster_id: Optional[str] = ..., timeout: Optional[float] = ...,
                          raise_errors: Literal[True] = ...) -> None: ...

    @overload
    def remove_raft_voter(self, voter_id: int, voter_directory_id: Union[uuid.UUID, str], *,
                          cluster_id: Optional[str] = ..., timeout: Optional[float] = ...,
                          raise_errors: Literal[False]) -> AdminHandle: ...

    def remove_raft_voter(self, voter_id: int, voter_directory_id: Union[uuid.UUID, str], *,
                          cluster_id: Optional[str] = None, timeout: Optional[float] = None,
                          raise_errors: bool = True) -> Any:
        """Remove voter ``voter_id`` (with that metadata log directory id)
        from the KRaft metadata quorum (Java's ``removeRaftVoter``); no such
        voter: VoterNotFoundError."""
        return self._call("remove_raft_voter", voter_id, voter_directory_id, cluster_id=cluster_id,
                          timeout=timeout, raise_errors=raise_errors)

    @overload
    def unregister_broker(self, broker_id: int, *, timeout: Optional[float] = ...,
                          raise_errors: Literal[True] = ...) -> None: ...

    @overload
    def unregister_broker(self, broker_id: int, *, timeout: Optional[float] = ...,
                          raise_errors: Literal[False]) -> AdminHandle: ...

    def unregister_broker(self, broker_id: int, *, timeout: Optional[float] = None,
                          raise_errors: bool = True) -> Any:
        """Remove the registration of broker ``broker_id``, one that is gone
        for good, from the cluster metadata (Java's ``unregisterBroker``); not
        registered: BrokerIdNotRegisteredError."""
        return self._call("unregister_broker", broker_id, timeout=timeout, raise_errors=raise_errors)

    @overload
    def unregister_controller(self, controller_id: int, *, timeout: Optional[float] = ...,
                              raise_errors: Literal[True] = ...) -> None: ...

    @overload
    def unregister_controller(self, controller_id: int, *, timeout: Optional[float] = ...,
                              raise_errors: Literal[False]) -> AdminHandle: ...

    def unregister_controller(self, controller_id: int, *, timeout: Optional[float] = None,
                              raise_errors: bool = True) -> Any:
        """Remove the registration of controller ``controller_id``, one that is
        gone for good, from the cluster metadata (Java 4.4's
        ``unregisterController``); not registered:
        ControllerIdNotRegisteredError."""
        return self._call("unregister_controller", controller_id, timeout=timeout, raise_errors=raise_errors)
