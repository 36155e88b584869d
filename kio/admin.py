"""``kio.Admin``: the blocking admin client over :class:`kproto.admin.AdminCore`.

    with Admin(bootstrap_servers="127.0.0.1:9092") as admin:
        admin.create_topics([NewTopic("orders", 6)])      # or just ["orders"]
        admin.describe_topics(["orders"])["orders"].partitions
        admin.consumer_group_lag("billing")               # {TopicPartition: ConsumerLag}

Every method starts one operation in the core and drives the sockets on the
calling thread until it is done - an admin call is a short exchange that
the caller waits for anyway, so there is no background thread. The core
owns retries, re-routing and the deadline (``default.api.timeout.ms``, or
``timeout`` in seconds per call), so a call always returns or raises within
it. Methods return what the core's handle holds: the single value, or
``{key: value}``; the first failed item raises its typed error (Java's
``all().get()``). With ``raise_errors=False`` the handle itself is returned
(``handle.values()`` / ``handle.errors()`` per item). Calls from several
threads are serialised.
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Dict, Optional

from kio._shared.admin_ops import AdminClosedError, AdminOps
from kio._shared.common import now_ms as _now_ms  # the cores' one clock
from kio._shared.common import call_error_cb, error_callbacks, sleep_time
from kio._threaded.network import SocketLoop
from kproto.admin import AdminCore, ConfigResource, NewPartitions, NewTopic, OffsetSpec
from kproto.admin_acls import (
    AccessControlEntry, AccessControlEntryFilter, AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
    PatternType, ResourcePattern, ResourcePatternFilter, ResourceType,
)
from kproto.admin_cluster import ElectionType, FeatureUpdate, TopicPartitionReplica, UpgradeType
from kproto.admin_quorum import RaftVoterEndpoint
from kproto.admin_configs import AlterConfigOp, ClientQuotaAlteration, ClientQuotaEntity, ClientQuotaFilter, ClientQuotaFilterComponent
from kproto.admin_scram import ScramMechanism, UserScramCredentialDeletion, UserScramCredentialUpsertion
from kproto.admin_tokens import DelegationToken, TokenInformation
from kproto.admin_transactions import AbortTransactionSpec
from kproto.consumer import OffsetAndMetadata
from kproto.config import Config

__all__ = ["Admin", "AdminClosedError", "NewTopic", "NewPartitions", "ConfigResource", "OffsetSpec",
           # ACLs, quotas, SCRAM and cluster operations' inputs (kproto.admin_* have the results' types)
           "AclBinding", "AclBindingFilter", "ResourcePattern", "ResourcePatternFilter", "AccessControlEntry",
           "AccessControlEntryFilter", "ResourceType", "PatternType", "AclOperation", "AclPermissionType",
           "AlterConfigOp", "ClientQuotaEntity", "ClientQuotaFilter", "ClientQuotaFilterComponent",
           "ClientQuotaAlteration",
           "ScramMechanism", "UserScramCredentialUpsertion", "UserScramCredentialDeletion",
           "ElectionType", "FeatureUpdate", "UpgradeType", "TopicPartitionReplica", "RaftVoterEndpoint",
           # group and transaction operations' inputs
           "AbortTransactionSpec", "OffsetAndMetadata",
           # delegation tokens (results: the token is also what renew and expire take)
           "DelegationToken", "TokenInformation"]

log = logging.getLogger("kio.admin")


class Admin(AdminOps):
    """``Admin(bootstrap_servers=...)`` or ``Admin({"bootstrap.servers": ...})``.

    Every operation takes ``timeout`` (seconds; default
    default.api.timeout.ms, then :class:`AdminTimeoutError`) and
    ``raise_errors``: True (the default) returns the result and raises the
    first failed item's error; False returns the operation's
    :class:`AdminHandle` (``values()`` and ``errors()`` per item). The
    operations are :class:`kio._shared.admin_ops.AdminOps`', shared with the async
    Admin of kio.aio and kio.trio."""

    def __init__(self, config: Optional[Dict[str, Any]] = None, **kwargs: Any) -> None:
        self._core = AdminCore(config, **kwargs)
        self._net = SocketLoop(self._core)
        self._lock = threading.Lock()
        self._closed = False
        self._fatal: Optional[BaseException] = None

    @property
    def config(self) -> Config:
        """The parsed settings (``admin.config.bootstrap_servers``)."""
        return self._core.config

    def _call(self, name: str, *args: Any, timeout: Optional[float], raise_errors: bool, **kwargs: Any) -> Any:
        """Run the core operation ``name`` (its arguments, ``now`` supplied,
        ``timeout`` in seconds instead of ``timeout_ms``) to its end."""
        if timeout is not None:
            kwargs["timeout_ms"] = int(timeout * 1000)
        handle = self._run(lambda now: getattr(self._core, name)(*args, now=now, **kwargs))
        return handle.result() if raise_errors else handle

    @property
    def _failure(self) -> Optional[BaseException]:
        return self._fatal

    def _run(self, start: Callable[[float], Any]) -> Any:
        """Start an operation (``start(now)``: its handle) and drive the
        sockets on this thread until it is done. A failure of the loop
        itself (not of the operation: that is the handle's) breaks the
        client, as a failed network thread or task does in the other drivers."""
        with self._lock:
            self._check_open()
            core, net = self._core, self._net
            handle = start(_now_ms())
            try:
                while True:
                    now = _now_ms()
                    net.apply(core.poll(now), now)
                    net.write_all(now)
                    core.events()
                    for cb, error in error_callbacks(core):
                        call_error_cb(cb, error, can_await=False)
                    if handle.done:
                        return handle
                    deadline = core.next_deadline(now)
                    net.update_interest()
                    net.handle(net.select(sleep_time(deadline, _now_ms())), _now_ms())
            except Exception as e:  # noqa: BLE001 - fail loudly, and every later call too
                log.exception("the admin client's network loop failed")
                self._fatal = e
                self._check_failed()          # raises AdminClosedError from e
                raise

    # -- lifecycle -----------------------------------------------------------------------------
    def close(self, timeout: Optional[float] = None) -> None:
        """Send the terminating telemetry push (KIP-714, when the broker's
        metrics subscription asked for pushes; waiting at most ``timeout``
        seconds and request.timeout.ms), then fail whatever is unfinished
        and close every connection (idempotent)."""
        if not self._closed and self._fatal is None:
            try:
                self._call("terminate_telemetry", timeout=timeout, raise_errors=False)
            except AdminClosedError:          # the loop failed (logged): close what is left
                pass
        with self._lock:
            if self._closed:
                return
            self._closed = True
            now = _now_ms()
            self._net.apply(self._core.close(now), now)
            self._net.close()

    def __enter__(self) -> "Admin":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self):
        state = "closed" if self._closed else "open"
        return f"<kio.Admin {self.config.bootstrap_servers} {state}>"
