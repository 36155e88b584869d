"""KRaft quorum administration, as operations of :class:`kproto.admin.AdminCore`
(mixed in), with the semantics of Java's Admin (4.4):

* ``add_raft_voter`` / ``remove_raft_voter`` (KIP-853 dynamic quorums, Kafka
  3.9+): AddRaftVoter / RemoveRaftVoter;
* ``unregister_broker`` (KIP-631): UnregisterBroker, which removes a broker's
  registration from the cluster metadata (for a broker that is gone for good);
* ``unregister_controller`` (Kafka 4.4): UnregisterController, the same for a
  controller's registration.

Where they go: every one of these APIs is accepted by brokers as well as by
controllers (the definitions' "listeners"); a broker forwards it to the active
controller. Java's Admin sends them to the least loaded broker, or, when
bootstrapped from the controllers (``bootstrap.controllers``, KIP-919), to
the active controller (``LeastLoadedBrokerOrActiveKController``); so does
kproto.

Retries, as Java: NOT_CONTROLLER (the controller moved while the broker
forwarded) is retried for the voter calls, REQUEST_TIMED_OUT for
``unregister_broker`` and ``unregister_controller``; any other error fails
the operation at once with its specific exception (e.g. DuplicateVoterError,
VoterNotFoundError, BrokerIdNotRegisteredError, ControllerIdNotRegisteredError)
and the broker's message. A quorum that is not
dynamic (formatted with ``controller.quorum.voters``: ``kraft.version`` 0)
refuses voter changes with UNSUPPORTED_VERSION, raised as
BrokerUnsupportedVersionError whose text says so.
"""
from __future__ import annotations

import re
import uuid
from typing import Iterable, NamedTuple, Optional, Union

from kproto import error_codes
from kproto._admin_mixin import AdminMixin

__all__ = ["QuorumAdmin", "RaftVoterEndpoint", "kafka_uuid"]

_NOT_CONTROLLER = 41
_REQUEST_TIMED_OUT = 7
_WHITESPACE = re.compile(r"\s")


class RaftVoterEndpoint(NamedTuple):
    """One listener a voter is reached on (Java's ``RaftVoterEndpoint``): the
    controller listener's name as the controllers know it (e.g.
    ``"CONTROLLER"``; upper case, as Java requires), its host and port."""
    name: str
    host: str
    port: int

    @classmethod
    def checked(cls, endpoint) -> "RaftVoterEndpoint":
        """``endpoint`` (a RaftVoterEndpoint or a (name, host, port) tuple)
        validated as Java validates it; ValueError/TypeError saying what is wrong."""
        try:
            name, host, port = endpoint
        except (TypeError, ValueError):
            raise TypeError(f"a voter endpoint is (listener name, host, port), not {endpoint!r}") from None
        for what, text in (("listener name", name), ("host", host)):
            if not isinstance(text, str):
                raise TypeError(f"voter endpoint {endpoint!r}: the {what} must be a string, not {text!r}")
            if not text:
                raise ValueError(f"voter endpoint {endpoint!r}: the {what} is empty")
            if _WHITESPACE.search(text[0] + text[-1]):
                raise ValueError(f"voter endpoint {endpoint!r}: the {what} has leading or trailing whitespace")
        if name != name.upper():
            raise ValueError(f"voter endpoint {endpoint!r}: the listener name must be UPPERCASE, as the "
                             f"controllers' listener names are (Java's RaftVoterEndpoint)")
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ValueError(f"voter endpoint {endpoint!r}: the port must be an int in 0..65535")
        return cls(name, host, port)


def kafka_uuid(value: Union[uuid.UUID, str, None], what: str) -> uuid.UUID:
    """A Kafka Uuid from a ``uuid.UUID`` or its Kafka text form (22 characters
    of URL-safe base64, as ``meta.properties`` and Kafka's tools write it;
    the dashed hex form is taken too). ``what`` names it in errors."""
    import base64
    import binascii

    if isinstance(value, uuid.UUID):
        return value
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a uuid.UUID or Kafka's base64 text form, not {value!r}")
    if len(value) == 22:
        try:
            raw = base64.urlsafe_b64decode(value + "==")
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) == 16:
            return uuid.UUID(bytes=raw)
    try:
        return uuid.UUID(value)
    except ValueError:
        raise ValueError(f"{what} {value!r} is not a Kafka Uuid (22 characters of URL-safe base64, "
                         f"e.g. from the directory.id line of the node's meta.properties)") from None


def _node_id(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {value!r}")
    if value < 0:
        raise ValueError(f"{what} must be >= 0, not {value}")
    return value


class QuorumAdmin(AdminMixin):
    """The KRaft quorum operations of AdminCore (a mixin)."""

    def add_raft_voter(self, voter_id: int, voter_directory_id: Union[uuid.UUID, str],
                       endpoints: Iterable, *, cluster_id: Optional[str] = None,
                       timeout_ms: Optional[int] = None, now):
        """Make controller ``voter_id`` (an observer of the metadata quorum,
        caught up, whose metadata log directory has ``voter_directory_id``) a
        voter, reachable on ``endpoints`` ((listener, host, port) or
        RaftVoterEndpoint; at least one). ``cluster_id``: refuse unless the
        cluster's id is this one (InconsistentClusterIdError). One item
        "voter" (value None) once the new voter set is committed."""
        vid = _node_id(voter_id, "add_raft_voter: voter_id")
        did = kafka_uuid(voter_directory_id, "add_raft_voter: voter_directory_id")
        eps = [RaftVoterEndpoint.checked(e) for e in endpoints]
        if not eps:
            raise ValueError("add_raft_voter: a voter needs at least one endpoint (its controller listener)")
        names = [e.name for e in eps]
        if len(set(names)) != len(names):
            raise ValueError(f"add_raft_voter: one endpoint per listener name, not {names}")
        what = f"add voter {vid} (directory {did})"

        def build(timeout):
            return {"cluster_id": cluster_id, "timeout_ms": timeout, "voter_id": vid, "voter_directory_id": did,
                    "listeners": [{"name": e.name, "host": e.host, "port": e.port} for e in eps]}
        return self._quorum_call("add_raft_voter", "AddRaftVoter", "voter", build, what,
                                 {_NOT_CONTROLLER}, timeout_ms, now)

    def remove_raft_voter(self, voter_id: int, voter_directory_id: Union[uuid.UUID, str], *,
                          cluster_id: Optional[str] = None, timeout_ms: Optional[int] = None, now):
        """Remove voter ``voter_id`` whose metadata log directory has
        ``voter_directory_id`` from the metadata quorum (it stays an observer
        while it runs). Not a voter with that id and directory:
        VoterNotFoundError. One item "voter" (value None)."""
        vid = _node_id(voter_id, "remove_raft_voter: voter_id")
        did = kafka_uuid(voter_directory_id, "remove_raft_voter: voter_directory_id")
        what = f"remove voter {vid} (directory {did})"

        def build(timeout):
            return {"cluster_id": cluster_id, "voter_id": vid, "voter_directory_id": did}
        return self._quorum_call("remove_raft_voter", "RemoveRaftVoter", "voter", build, what,
                                 {_NOT_CONTROLLER}, timeout_ms, now)

    def unregister_broker(self, broker_id: int, *, timeout_ms: Optional[int] = None, now):
        """Remove broker ``broker_id``'s registration from the cluster
        metadata (for a broker gone for good; a running broker registers
        again). Not registered: BrokerIdNotRegisteredError. One item
        "broker" (value None)."""
        bid = _node_id(broker_id, "unregister_broker: broker_id")

        def build(timeout):
            return {"broker_id": bid}
        return self._quorum_call("unregister_broker", "UnregisterBroker", "broker", build,
                                 f"unregister broker {bid}", {_REQUEST_TIMED_OUT}, timeout_ms, now)

    def unregister_controller(self, controller_id: int, *, timeout_ms: Optional[int] = None, now):
        """Remove controller ``controller_id``'s registration from the cluster
        metadata (Java 4.4's ``unregisterController``: for a controller gone
        for good, e.g. after ``remove_raft_voter``). Not registered:
        ControllerIdNotRegisteredError. One item "controller" (value None)."""
        cid = _node_id(controller_id, "unregister_controller: controller_id")

        def build(timeout):
            return {"controller_id": cid}
        return self._quorum_call("unregister_controller", "UnregisterController", "controller", build,
                                 f"unregister controller {cid}", {_REQUEST_TIMED_OUT}, timeout_ms, now)

    def _quorum_call(self, operation, api, key, build_body, what, retried, timeout_ms, now):
        """One request to the least loaded broker answering only an error
        code: the codes in ``retried`` are retried after the backoff, any
        other error fails the operation's one item."""
        from kproto.admin import _SelfCall
        op = self._op(operation, [key], now, timeout_ms, single=True)

        # How long the controller may take (AddRaftVoter waits for the new
        # voter to catch up and the voter set to commit): as the other
        # controller operations, the operation's timeout.
        wait = self.config.request_timeout_ms if timeout_ms is None else timeout_ms

        def build(node, call=None):
            return build_body(wait)

        def handle(call, body, now2):
            code = body.get("error_code", 0)
            if not code:
                self._complete(op, key)
                return
            err = error_codes.error_for_code(code, body.get("error_message"), what)
            if code in retried:
                self._retry(call, err, now2, moved=True)
            else:
                self._fail_call(call, err)

        self._submit(_SelfCall(op, api, [key], build, handle, target=self._broker_or_active_controller))
        return op
