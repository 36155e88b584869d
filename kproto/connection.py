"""One broker connection as a sans-IO state machine.

This is the bookkeeping that Java splits between ``NetworkClient``,
``ClusterConnectionStates`` and ``KafkaChannel`` (seed-notes section 3), without
the I/O: :class:`Connection` never touches a socket, a thread or the clock. The
driver owns the socket and tells the connection what happened, passing the
current time ``now`` in milliseconds (int or float) to every call; the
connection answers with bytes to write and with *events*.

Lifecycle and driver contract::

    conn = Connection(node_id, host, port, client_id="app")
    if conn.can_connect(now):             # DISCONNECTED and reconnect backoff elapsed
        conn.start_connect(now)           # -> CONNECTING; driver opens the socket
    conn.connection_made(now)             # -> HANDSHAKE; ApiVersions is queued
    conn.connection_lost(now, exc)        # socket failed/closed -> DISCONNECTED

    data = conn.data_to_send()            # bytes-like, NOT consumed ...
    n = sock.send(data)                   # ... write what you can,
    events = conn.bytes_sent(n, now)      # then report how much was written
    events = conn.receive_data(chunk, now)
    events = conn.check_timeouts(now)     # call at conn.next_deadline(now) at the latest

    req = conn.send("Metadata", {...}, now)   # only when conn.can_send()

``data_to_send()`` returns the unsent bytes without consuming them; the
driver reports written bytes with ``bytes_sent(n, now)``. This handles partial
writes (the unsent tail stays queued) and tells the connection when a request
is completely on the wire, which is when a request that expects no response
(Produce with acks=0, ``expect_response=False``) completes - as in Java. A
driver that hands everything to a transport (asyncio) calls
``bytes_sent(len(data), now)`` right after ``transport.write(data)``.

States: DISCONNECTED -> CONNECTING -> HANDSHAKE (ApiVersions, with the
UNSUPPORTED_VERSION fallback) -> AUTHENTICATING (only with an
``authenticator``) -> READY; any failure or ``close`` -> DISCONNECTED (or
CLOSED for ``close(..., permanent=True)``, which never reconnects).

Events (returned by every input method, a list, possibly empty; NamedTuples):

* :class:`RequestCompleted` ``(request, body)``: the response arrived and was
  decoded (``body`` is the response dict), or - for a request without
  response - it was completely written (``body`` is None);
* :class:`RequestFailed` ``(request, error)``: timed out, connection closed,
  undecodable response;
* :class:`ConnectionReady` ``(node_id, versions)``: handshake done, ``send``
  may be used;
* :class:`Reauthenticated` ``(node_id, session_lifetime_ms)``: a KIP-368
  re-authentication finished on the same socket (see below);
* :class:`ConnectionClosed` ``(node_id, reason, error)``: the state machine
  closed the connection (or was told it was lost): the driver must close the
  socket if it still has one. Failed requests are reported before it.

Every request is also an :class:`InFlightRequest` handle (``.result``,
``.error``, ``.done``) with an optional ``callback(request)`` called on
completion, so callers can use events, handles or callbacks - none is required.
Handshake and authentication requests are internal: they produce no request
events.

Semantics kept from Java:

* in-flight requests are a FIFO: a response matches the oldest request that
  expects one, and its correlation id must agree, otherwise the connection is
  closed (ProtocolError) and every in-flight request fails;
* a request's deadline is the time it was handed to ``send`` plus
  ``request_timeout_ms`` (or its own ``timeout_ms``); one timed-out request
  closes the connection and fails everything in flight with
  RequestTimedOutError;
* reconnect backoff: ``reconnect_backoff_ms * 2**failures`` with +-20% jitter,
  capped at ``reconnect_backoff_max_ms``; the failure count resets on READY.

KIP-368 re-authentication: when SaslAuthenticate (v1+) gives a
``session_lifetime_ms`` (the broker's ``connections.max.reauth.ms``, or a
token's expiry), the connection re-authenticates at a random 85-95% of it
(Java's ``ReauthInfo``): ``check_timeouts`` at ``next_deadline`` sends
SaslHandshake + SaslAuthenticate again behind the requests in flight, whose
responses still arrive in order; ``can_send`` is false until it ends, the
state stays READY, and a refusal closes the connection with the
authentication error.

Deliberate difference: Java allows a new request only once the previous one
is completely written (its Selector holds one Send per channel);
here requests queue in ``data_to_send`` and only ``max_in_flight`` limits them.
Quotas (KIP-219): a broker answers a request that violated a quota at once
with ``throttle_time_ms`` and expects the client to hold back; from the API
versions in :data:`CLIENT_THROTTLES_FROM` on (older ones were throttled by
the broker before answering) ``can_send(now)`` is false until that time has
passed, as Java's ``NetworkClient.maybeThrottle`` mutes the node.
"""
import collections
import enum
import random
import struct
from typing import Any, NamedTuple, Optional

from kproto import error_codes, messages, versions
from kproto.backoff import ExponentialBackoff
from kproto.errors import (
    AuthenticationError,
    ConnectionClosedError,
    DecodeError,
    KafkaError,
    NotReadyError,
    ProtocolError,
    RequestTimedOutError,
    SslAuthenticationError,
    UnsupportedVersionError,
)
from kproto.framing import DEFAULT_MAX_FRAME_SIZE, FrameDecoder
from kproto.statemachine import checked_move

__all__ = [
    "ConnectionState", "Connection", "InFlightRequest", "ReconnectBackoff",
    "RequestCompleted", "RequestFailed", "ConnectionReady", "ConnectionClosed", "Reauthenticated",
    "Authenticator", "SaslMechanism", "SaslAuthenticator", "client_software_version",
]

UNSUPPORTED_VERSION = 35

# A request frame's first 12 bytes: its size, API key and version, correlation id.
_FRAME_HEAD = struct.Struct(">i4si")
# A response frame's first 4 bytes: its correlation id.
_CID = struct.Struct(">i")


def client_software_version():
    """The version sent as client_software_version in ApiVersions v3+."""
    import kproto
    return kproto.__version__


#: API -> first version whose response asks the *client* to throttle (the
#: official definitions say "Starting in version N, on quota violation,
#: brokers send out responses before throttling"; Produce and DescribeCluster
#: as in Java's ProduceResponse/DescribeClusterResponse.shouldClientThrottle).
CLIENT_THROTTLES_FROM = {
    "Produce": 6, "Fetch": 8, "ListOffsets": 3, "Metadata": 6, "OffsetCommit": 4, "OffsetFetch": 4,
    "FindCoordinator": 2, "JoinGroup": 3, "Heartbeat": 2, "LeaveGroup": 2, "SyncGroup": 2,
    "DescribeGroups": 2, "ListGroups": 2, "ApiVersions": 2, "CreateTopics": 3, "DeleteTopics": 2,
    "DeleteRecords": 1, "InitProducerId": 1, "AddPartitionsToTxn": 1, "AddOffsetsToTxn": 1, "EndTxn": 1,
    "TxnOffsetCommit": 1, "DescribeConfigs": 2, "CreatePartitions": 1, "DeleteGroups": 1,
    "DescribeCluster": 0, "CreateAcls": 1, "DescribeAcls": 1, "DeleteAcls": 1, "AlterConfigs": 1,
    "DescribeLogDirs": 1, "AlterReplicaLogDirs": 1,
}


class ConnectionState(enum.Enum):
    DISCONNECTED = "DISCONNECTED"
    CONNECTING = "CONNECTING"
    HANDSHAKE = "HANDSHAKE"
    AUTHENTICATING = "AUTHENTICATING"
    READY = "READY"
    CLOSED = "CLOSED"


_S = ConnectionState
# The states as module constants for the per-request checks below: Python
# 3.11's EnumMeta defines __getattr__, so ``ConnectionState.READY`` takes the
# slow generic attribute hook on every lookup, compiled or not (~42k
# instructions per Fetch answer, bench/RESULTS.md, branch cround); a module
# global is one dict lookup. The members are the same objects.
_DISCONNECTED = ConnectionState.DISCONNECTED
_CONNECTING = ConnectionState.CONNECTING
_HANDSHAKE = ConnectionState.HANDSHAKE
_AUTHENTICATING = ConnectionState.AUTHENTICATING
_READY = ConnectionState.READY
_CLOSED = ConnectionState.CLOSED
# Tuples, not sets: ``in`` on a tuple matches by identity first, a set would
# call Enum.__hash__ (a Python function) each time.
_CONNECTED_STATES = (_READY, _CONNECTING, _HANDSHAKE, _AUTHENTICATING)
_RECEIVING_STATES = (_READY, _HANDSHAKE, _AUTHENTICATING)
#: The connection machine's transition table (as h11's ``_state.py``): the
#: states each state may move to. ``Connection._move`` refuses any other move,
#: so a driver calling things in the wrong order gets NotReadyError at once
#: instead of a connection in a state nothing expects.
TRANSITIONS = {
    _S.DISCONNECTED: frozenset({_S.CONNECTING, _S.CLOSED}),
    # the socket opened (HANDSHAKE: ApiVersions first), or failed / timed out
    _S.CONNECTING: frozenset({_S.HANDSHAKE, _S.DISCONNECTED, _S.CLOSED}),
    # versions agreed: SASL next if configured, else ready
    _S.HANDSHAKE: frozenset({_S.AUTHENTICATING, _S.READY, _S.DISCONNECTED, _S.CLOSED}),
    _S.AUTHENTICATING: frozenset({_S.READY, _S.DISCONNECTED, _S.CLOSED}),
    _S.READY: frozenset({_S.DISCONNECTED, _S.CLOSED}),
    _S.CLOSED: frozenset(),   # closed for good: a new Connection is needed
}


# --- events -----------------------------------------------------------------

_tuple_new = tuple.__new__


class RequestCompleted(NamedTuple):
    request: "InFlightRequest"
    body: Optional[dict]


class RequestFailed(NamedTuple):
    request: "InFlightRequest"
    error: BaseException


class ConnectionReady(NamedTuple):
    node_id: Any
    versions: Any


def tls_record_start(data) -> Optional[str]:
    """"alert" or "handshake" if ``data`` starts like a TLS record of that
    type (content type 0x15 / 0x16, then major version 3), else None: what a
    TLS port sends back to a plaintext client (its size prefix would read as
    a frame of hundreds of megabytes)."""
    head = bytes(data[:2])
    if len(head) == 2 and head[1] == 0x03 and head[0] in (0x15, 0x16):
        return "alert" if head[0] == 0x15 else "handshake"
    return None


class ConnectionClosed(NamedTuple):
    node_id: Any
    reason: str
    error: Optional[BaseException]


class Reauthenticated(NamedTuple):
    """KIP-368: the connection authenticated again in place (same socket);
    ``session_lifetime_ms`` is the new session's (0: no further re-authentication)."""
    node_id: Any
    session_lifetime_ms: int


#: KIP-368 re-authentication time, as Java's SaslClientAuthenticator.ReauthInfo:
#: a random point between 85% and 95% of the session lifetime after the
#: authentication ended - early enough for network latency and clock drift,
#: spread so that many connections do not re-authenticate at once.
REAUTH_WINDOW_FACTOR = 0.85
REAUTH_WINDOW_JITTER = 0.10


def reauthentication_delay_ms(session_lifetime_ms, rng) -> Optional[float]:
    """Milliseconds after authentication at which to re-authenticate a
    session of ``session_lifetime_ms`` (None when the broker gave no lifetime:
    ``connections.max.reauth.ms`` unset)."""
    if not session_lifetime_ms or session_lifetime_ms <= 0:
        return None
    return int(session_lifetime_ms * (REAUTH_WINDOW_FACTOR + REAUTH_WINDOW_JITTER * rng.random()))


# --- request handle -----------------------------------------------------------

class InFlightRequest:
    """A request handed to a connection; completed exactly once.

    ``result`` is the decoded response body (None for requests without
    response), ``error`` the exception if it failed. ``sent_at`` is the ``now``
    of ``send``; ``deadline`` is when it times out; ``written`` tells whether all
    its bytes were reported written.
    """

    # Compiled, an extension type whose attributes kproto/connection.pxd
    # declares (no __slots__ then: a cdef class refuses them).

    def __init__(self, api, version, correlation_id, body, node_id, expect_response,
                 timeout_ms, sent_at, callback=None, internal=False):
        self.api = api
        self.version = version
        self.correlation_id = correlation_id
        self.body = body
        self.node_id = node_id
        self.expect_response = expect_response
        self.timeout_ms = timeout_ms
        self.sent_at = sent_at
        self.deadline = sent_at + timeout_ms
        self.written = False
        self.written_at = None
        self.completed_at = None
        self.result = None
        self.error = None
        self.done = False
        self.callback = callback
        self.internal = internal
        # decoder(version, payload): (correlation_id, body) read by a reader of
        # the caller's own (the consumer's Fetch answers, the producer's Produce
        # answers), or None to leave the answer to the generic codec
        self.decoder = None
        self._end = 0     # stream offset just past this request's last byte
        self._seq = 0

    @property
    def api_name(self):
        return self.api.name

    @property
    def succeeded(self):
        return self.done and self.error is None

    def __repr__(self):
        state = "pending" if not self.done else ("failed: %r" % (self.error,) if self.error else "done")
        return (f"<InFlightRequest {self.api.name} v{self.version} corr={self.correlation_id} "
                f"node={self.node_id} {state}>")


# --- reconnect backoff ----------------------------------------------------------

#: Java's ExponentialBackoff as used for reconnects: the client's one
#: exponential backoff (kproto.backoff), under the name this module always had.
ReconnectBackoff = ExponentialBackoff


# --- authentication hook ----------------------------------------------------------

#: The pseudo API name of a raw SASL token (SaslHandshake v0) in authenticator steps.
RAW_SASL_TOKEN = "raw SASL token"


class Authenticator:
    """Interface of the authentication step run between ApiVersions and READY.

    The connection calls ``start(conn)`` once the version table is known
    (``conn.versions``); it returns the first request to send as a tuple
    ``(api_name, body)``, or None when there is nothing to do. Each response
    to such a request goes to ``on_response(conn, api_name, body)``, which
    returns the next ``(api_name, body)`` or None when authentication is
    complete. A request may also be ``(api_name, body, version)`` to force a
    version. To fail, raise a KafkaError (typically an
    :class:`kproto.errors.AuthenticationError` subclass from
    :mod:`kproto.error_codes`): the connection closes with that error.
    Requests go out at the highest version both sides support.

    Subclass it, or pass any object with these two methods. For SASL, use
    :class:`SaslAuthenticator` with a :class:`SaslMechanism`.
    """

    def start(self, conn):
        raise NotImplementedError

    def on_response(self, conn, api_name, body):
        raise NotImplementedError


class SaslMechanism:
    """A SASL client mechanism (PLAIN, SCRAM-SHA-256, ...), token level only.

    Mirrors javax.security.sasl.SaslClient: ``name`` is the mechanism name
    sent in SaslHandshake; ``initial_response()`` returns the first token;
    ``evaluate_challenge(challenge)`` returns the next token, or None when the
    exchange is finished (``complete`` is then True). Raise
    AuthenticationError on a bad challenge (e.g. a wrong server signature).
    """

    name = None
    complete = False
    #: Appended to the broker's text when it refuses the credentials (what
    #: the user may do about it), e.g. for a delegation token.
    failure_advice = ""

    def initial_response(self):
        raise NotImplementedError

    def evaluate_challenge(self, challenge):
        raise NotImplementedError


class SaslAuthenticator(Authenticator):
    """KIP-152 SASL: SaslHandshake (v1+), then SaslAuthenticate round trips.

    Drives a :class:`SaslMechanism`. The broker's ``session_lifetime_ms``
    (SaslAuthenticate v1+, KIP-368) is kept in ``session_lifetime_ms``; the
    connection re-authenticates before it runs out by calling ``start`` again
    on the same socket (a fresh mechanism from the factory, so OAUTHBEARER
    presents its current token).
    """

    def __init__(self, mechanism):
        # A SaslMechanism, or a factory of them: mechanisms hold the state of
        # one exchange, so a connection that reconnects needs a fresh one.
        self._factory = None if isinstance(mechanism, SaslMechanism) else mechanism
        self.mechanism = mechanism if self._factory is None else None
        self.session_lifetime_ms = 0
        self.broker_mechanisms = None

    def start(self, conn):
        if self._factory is not None:
            self.mechanism = self._factory()
        self.session_lifetime_ms = 0
        # A broker without SaslAuthenticate (before KIP-152) takes SaslHandshake
        # v0 and then the raw tokens.
        self.raw = conn.versions.broker_range("SaslAuthenticate") is None
        if self.raw:
            return ("SaslHandshake", {"mechanism": self.mechanism.name}, 0)
        conn.versions.pick("SaslHandshake", min_version=1)
        conn.versions.pick("SaslAuthenticate")
        return ("SaslHandshake", {"mechanism": self.mechanism.name})

    def on_response(self, conn, api_name, body):
        if api_name == "SaslHandshake":
            self.broker_mechanisms = list(body.get("mechanisms") or [])
            code = body.get("error_code", 0)
            if code:
                raise error_codes.error_for_code(
                    code, context=f"SASL mechanism {self.mechanism.name} "
                                  f"(broker enables {', '.join(self.broker_mechanisms) or 'none'})")
            token = self.mechanism.initial_response()
            return (RAW_SASL_TOKEN, token) if self.raw else ("SaslAuthenticate", {"auth_bytes": token})
        if api_name == RAW_SASL_TOKEN:
            if self.mechanism.complete:
                return None
            token = self.mechanism.evaluate_challenge(body)
            if token is None:
                if not self.mechanism.complete:
                    raise AuthenticationError(
                        f"SASL {self.mechanism.name}: the mechanism produced no token but is not complete")
                return None
            return (RAW_SASL_TOKEN, token)
        if api_name == "SaslAuthenticate":
            code = body.get("error_code", 0)
            if code:
                message = body.get("error_message") or None
                if self.mechanism.failure_advice:
                    message = f"{message or 'authentication failed'}; {self.mechanism.failure_advice}"
                raise error_codes.error_for_code(code, message, context=f"SASL {self.mechanism.name}")
            self.session_lifetime_ms = body.get("session_lifetime_ms", 0) or 0
            challenge = body.get("auth_bytes") or b""
            if self.mechanism.complete:
                return None
            token = self.mechanism.evaluate_challenge(challenge)
            if token is None:
                if not self.mechanism.complete:
                    raise AuthenticationError(
                        f"SASL {self.mechanism.name}: the mechanism produced no token but is not complete")
                return None
            return ("SaslAuthenticate", {"auth_bytes": token})
        raise ProtocolError(f"SASL authenticator got an unexpected {api_name} response")


# --- the connection -------------------------------------------------------------

class Connection:
    """The state of one connection to one broker (see the module docstring).

    Configuration mirrors the Java client: ``request_timeout_ms``
    (request.timeout.ms), ``max_in_flight``
    (max.in.flight.requests.per.connection), ``reconnect_backoff_ms`` /
    ``reconnect_backoff_max_ms``, ``connections_max_idle_ms``,
    ``connection_setup_timeout_ms`` (socket.connection.setup.timeout.ms: how
    long CONNECTING may last), ``max_frame_size`` (largest response accepted).
    ``rng`` feeds the backoff jitter.
    """

    def __init__(self, node_id, host=None, port=None, *, client_id="kproto",
                 request_timeout_ms=30000, max_in_flight=5,
                 reconnect_backoff_ms=50, reconnect_backoff_max_ms=1000,
                 connections_max_idle_ms=540000, connection_setup_timeout_ms=10000,
                 max_frame_size=DEFAULT_MAX_FRAME_SIZE, authenticator=None, rng=None,
                 client_software_name="kproto", client_software_version=None,
                 initial_correlation_id=0):
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be >= 1")
        self.node_id = node_id
        self.host = host
        self.port = port
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.max_in_flight = max_in_flight
        self.connections_max_idle_ms = connections_max_idle_ms
        self.connection_setup_timeout_ms = connection_setup_timeout_ms
        self.max_frame_size = max_frame_size
        self.authenticator = authenticator
        self.client_software_name = client_software_name
        self._client_software_version = client_software_version
        self._rng = rng if rng is not None else random.Random()
        self.backoff = ReconnectBackoff(reconnect_backoff_ms, reconnect_backoff_max_ms, self._rng)

        self.state = _DISCONNECTED   # changed only by _move (see TRANSITIONS)
        self.versions = None             # VersionTable once the handshake is done
        self.api_versions_response = None
        self.last_error = None           # why the connection last closed
        self.last_close_reason = None
        self.last_throttle_time_ms = 0
        self.throttled_until = None      # KIP-219: no request to this node before then

        # Reconnect bookkeeping (Java ClusterConnectionStates).
        self.failed_attempts = 0
        self.last_connect_attempt = None
        self.reconnect_backoff_current_ms = 0
        self.connect_failed = False      # the last attempt never got READY (not a close of ours)
        self.connect_started_at = None
        self.last_activity = None
        # Counters for tests and stats: sockets opened, KIP-368 re-authentications done.
        self.sessions_started = 0
        self.reauthentications = 0
        # KIP-1242: (cluster id, node id) of the broker this connection is
        # meant to reach, sent in ApiVersions v5 so that a broker of another
        # cluster, or another node now behind this address, answers
        # REBOOTSTRAP_REQUIRED instead of serving what it has. Set by the
        # cores' network client once metadata named them; None (a raw
        # Connection, bootstrap connections) sends null and -1, which every
        # broker accepts.
        self.expected_broker = None

        self._next_correlation_id = initial_correlation_id & 0x7FFFFFFF
        self._seq = 0
        # (API key, version) -> the VersionTable it was checked against (_enqueue)
        self._versions_checked: dict = {}
        # (API key, version) -> the header's key and version bytes and its
        # bytes after the correlation id (_encoded_frame)
        self._header_tails: dict = {}
        self._reset_session()

    # -- per-session state ------------------------------------------------------
    def _reset_session(self):
        self._decoder = FrameDecoder(self.max_frame_size)
        self._out = collections.deque()      # unsent bytes-like chunks
        self._out_offset = 0                 # bytes of _out[0] already written
        self._out_pending = 0                # unsent byte count
        self._stream_queued = 0              # total bytes ever queued this session
        self._stream_sent = 0                # total bytes reported written
        self._awaiting = collections.deque()  # requests expecting a response, FIFO
        self._raw_deadline = None             # SaslHandshake v0: a raw SASL token awaits its answer
        self._unwritten = collections.deque()  # requests not yet completely written
        self._noresp_in_flight = 0           # expect_response=False requests not yet written
        self._apiversions_attempts = 0
        self._reauth_at = None               # KIP-368: when to re-authenticate (READY only)
        self.reauthenticating = False        # SASL exchange under way on a READY connection

    # -- properties ------------------------------------------------------------
    @property
    def in_flight_count(self):
        """Requests sent and not completed (handshake ones included)."""
        return len(self._awaiting) + self._noresp_in_flight

    @property
    def is_ready(self):
        return self.state is _READY

    @property
    def is_connected(self):
        """A socket should exist (CONNECTING through READY)."""
        return self.state in _CONNECTED_STATES

    @property
    def pending_output(self):
        """Bytes queued but not yet reported written."""
        return self._out_pending

    def can_send(self, now=None):
        """READY and below max_in_flight: ``send`` will accept a request.
        With ``now``, also false while the broker asked us to throttle.
        False while re-authenticating (KIP-368: the broker takes nothing but
        SASL requests until the new session is established)."""
        if (self.state is not _READY or self.reauthenticating
                or self.in_flight_count >= self.max_in_flight):
            return False
        return now is None or not self.is_throttled(now)

    def is_throttled(self, now) -> bool:
        return self.throttled_until is not None and now < self.throttled_until

    # -- reconnect backoff --------------------------------------------------------
    @property
    def next_connect_time(self):
        """Earliest time a new connection attempt is allowed (None: connected or closed for good)."""
        if self.state is not _DISCONNECTED:
            return None
        if self.last_connect_attempt is None:
            return 0
        return self.last_connect_attempt + self.reconnect_backoff_current_ms

    def can_connect(self, now):
        """DISCONNECTED and the reconnect backoff since the last attempt has elapsed."""
        t = self.next_connect_time
        return t is not None and now >= t

    def connection_delay(self, now):
        """Milliseconds until ``can_connect`` (0 if now; None if not disconnected)."""
        t = self.next_connect_time
        if t is None:
            return None
        return max(0, t - now)

    def _move(self, new: ConnectionState) -> None:
        """The one place the state changes: only along TRANSITIONS."""
        self.state = checked_move(TRANSITIONS, self.state, new, machine="connection",
                                  owner=f"connection to node {self.node_id}", error=NotReadyError)

    def start_connect(self, now):
        """The driver starts opening the socket now: DISCONNECTED -> CONNECTING."""
        if self.state is _CLOSED:
            raise NotReadyError(f"connection to node {self.node_id} was closed for good")
        if self.state is not _DISCONNECTED:
            raise NotReadyError(f"start_connect on node {self.node_id} in state {self.state.name}")
        self._reset_session()
        # A new session negotiates again: the broker may have been upgraded or downgraded.
        self.versions = None
        self.api_versions_response = None
        self._move(_CONNECTING)
        self.sessions_started += 1
        self.last_connect_attempt = now
        self.connect_started_at = now
        self.last_activity = now
        self.last_error = None

    def connection_made(self, now):
        """The socket is connected (TLS done, if any): start the ApiVersions handshake."""
        if self.state is _DISCONNECTED:
            self.start_connect(now)
        if self.state is not _CONNECTING:
            raise NotReadyError(f"connection_made on node {self.node_id} in state {self.state.name}")
        self._move(_HANDSHAKE)
        self.connect_started_at = None
        self.last_activity = now
        m = messages
        self._send_api_versions(m.api("ApiVersions").max_version, now)
        return []

    def _send_api_versions(self, version, now):
        self._apiversions_attempts += 1
        body = {}
        if version >= 3:
            body = {"client_software_name": self.client_software_name,
                    "client_software_version": self._client_software_version or client_software_version()}
        if version >= 5 and self.expected_broker is not None:
            body["cluster_id"], body["node_id"] = self.expected_broker
        self._enqueue("ApiVersions", body, now, version, True, None, None, internal=True)

    # -- sending -----------------------------------------------------------------
    def send(self, api, body, now, version=None, expect_response=True, timeout_ms=None, callback=None,
             decoder=None):
        """Queue a request; return its :class:`InFlightRequest` handle.

        ``api`` is a name ("Metadata") or an Api. ``version`` defaults to the
        highest version both sides support (UnsupportedVersionError if none).
        ``body`` is a dict, or a callable taking the chosen version and
        returning the dict, for bodies whose fields differ between versions
        (the codec refuses a field the version lacks rather than drop it).
        ``decoder(version, payload)``, if given, reads the answer first: it
        returns ``(correlation_id, body)``, or None to leave the answer to
        the generic codec. A body that is not a dict carries
        ``throttle_time_ms`` as an attribute. The consumer reads its Fetch
        answers this way (kproto/consumer/_fetch.pyx), the producer a Produce
        answer that acknowledges every batch (kproto/producer/_produce_answer.pyx).
        Raises NotReadyError unless ``can_send()``.
        """
        if self.state is not _READY:
            raise NotReadyError(
                f"node {self.node_id} is not ready (state {self.state.name}); wait for ConnectionReady")
        if self.reauthenticating:
            raise NotReadyError(
                f"node {self.node_id} is re-authenticating (KIP-368); check can_send()")
        if self.in_flight_count >= self.max_in_flight:
            raise NotReadyError(
                f"node {self.node_id} has {self.in_flight_count} requests in flight "
                f"(max_in_flight={self.max_in_flight}); check can_send()")
        req = self._enqueue(api, body, now, version, expect_response, timeout_ms, callback)
        req.decoder = decoder
        return req

    def _enqueue(self, api, body, now, version, expect_response, timeout_ms, callback, internal=False):
        m = messages
        # An API name (the cores' usual argument) is one dict lookup; hasattr
        # on a str raised and caught an AttributeError per request.
        api_obj = m.APIS_BY_NAME.get(api) if type(api) is str else None
        if api_obj is None:
            api_obj = m.api(api) if not hasattr(api, "key") else api
        if version is None:
            if self.versions is None:
                version = api_obj.max_version
            else:
                version = self.versions.pick(api_obj)
        elif self.versions is None or self._versions_checked.get((api_obj.key, version)) is not self.versions:
            # Checked once per API, version and negotiation: a consumer sends
            # the same Fetch version every round (issue 27).
            api_obj.check_version(version)
            if self.versions is not None:
                if not self.versions.supports(api_obj, version):
                    raise UnsupportedVersionError(
                        f"node {self.node_id} does not support {api_obj.name} v{version} "
                        f"(it supports {self.versions.broker_range(api_obj) or 'no version'})")
                self._versions_checked[(api_obj.key, version)] = self.versions
        if callable(body):
            # A body whose fields depend on the version negotiated just above
            # (e.g. FindCoordinator's key vs coordinator_keys): built now.
            body = body(version)
        cid = self._next_correlation_id
        if type(body) is m.EncodedBody and body.api_key == api_obj.key and body.version == version:
            data = self._encoded_frame(api_obj, version, cid, body.data)
        else:
            data = m.encode_request(api_obj, version, cid, self.client_id, body)
        self._next_correlation_id = (cid + 1) & 0x7FFFFFFF
        req = InFlightRequest(api_obj, version, cid, body, self.node_id, expect_response,
                              self.request_timeout_ms if timeout_ms is None else timeout_ms,
                              now, callback, internal)
        self._seq += 1
        req._seq = self._seq
        self._out.append(data)
        self._out_pending += len(data)
        self._stream_queued += len(data)
        req._end = self._stream_queued
        self._unwritten.append(req)
        if expect_response:
            self._awaiting.append(req)
        else:
            self._noresp_in_flight += 1
        self.last_activity = now
        return req

    def _encoded_frame(self, api_obj, version, cid, data) -> bytes:
        """The frame of a body already written (``messages.encode_request``
        for an EncodedBody, which stays the reference: tests/test_fetch_plan.py
        compares them): the request header's bytes after the correlation id
        - the client id, and for a flexible version the empty tagged fields -
        are the same for every request of this version, so they are written
        once per API and version and joined to the size, key, version and
        correlation id and the body."""
        key = (api_obj.key, version)
        head = self._header_tails.get(key)
        if head is None:
            empty = messages.encode_request(api_obj, version, 0, self.client_id,
                                            messages.EncodedBody(api_obj.key, version, b""))
            head = self._header_tails[key] = (empty[4:8], empty[12:])
        tail = head[1]
        return b"".join((_FRAME_HEAD.pack(8 + len(tail) + len(data), head[0], cid), tail, data))

    def data_to_send(self):
        """The bytes not yet reported written (b"" if none); not consumed.

        Several queued requests are joined once into one buffer; after a
        partial write the unsent tail is returned as a memoryview (no copy).
        """
        if not self._out:
            return b""
        if len(self._out) > 1:
            first = self._out[0]
            if self._out_offset:
                first = memoryview(first)[self._out_offset:]
            joined = b"".join([first] + [self._out[i] for i in range(1, len(self._out))])
            self._out.clear()
            self._out.append(joined)
            self._out_offset = 0
            return joined
        first = self._out[0]
        if self._out_offset:
            return memoryview(first)[self._out_offset:]
        return first

    def bytes_sent(self, n, now):
        """The driver wrote ``n`` bytes of ``data_to_send()``; returns events
        (requests without response complete once completely written)."""
        if not self.is_connected:
            return []    # the session closed after data_to_send(); nothing to account
        if n < 0 or n > self._out_pending:
            raise ValueError(f"bytes_sent({n}) but only {self._out_pending} bytes are pending")
        if n == 0:
            return []
        self._out_pending -= n
        self._stream_sent += n
        while n:
            chunk_left = len(self._out[0]) - self._out_offset
            if n >= chunk_left:
                n -= chunk_left
                self._out.popleft()
                self._out_offset = 0
            else:
                self._out_offset += n
                n = 0
        self.last_activity = now
        events = []
        done = []
        unwritten = self._unwritten
        while unwritten:
            req = unwritten[0]          # (a typed local compiled: its _end is a C field)
            if req._end > self._stream_sent:
                break
            self._mark_written(unwritten.popleft(), now, events, done)
        if done:            # (mostly none: a request that expects an answer completes with it)
            self._run_callbacks(done)
        return events

    def _mark_written(self, req, now, events, done):
        req.written = True
        req.written_at = now
        if not req.expect_response:
            self._noresp_in_flight -= 1
            self._complete(req, None, now, events, done)

    # -- receiving -------------------------------------------------------------------
    def receive_data(self, data, now):
        """Feed bytes read from the socket; returns events.

        Responses are matched in order to the oldest request awaiting one and
        checked by correlation id. Bad framing, an unexpected correlation id
        or an undecodable response closes the connection (ConnectionClosed
        event) and fails everything in flight.
        """
        if self.state not in _RECEIVING_STATES:
            return []
        if not data:
            return []
        self.last_activity = now
        events = []
        done = []
        try:
            frames = self._decoder.feed(data)
        except DecodeError as e:
            tls = self._decoder.frames_decoded == 0 and tls_record_start(data)
            if tls:
                # A TLS port answers a plaintext request with a TLS alert:
                # retrying cannot fix it, so it fails like a TLS handshake.
                where = f"{self.host}:{self.port}" if self.host is not None else f"node {self.node_id}"
                e = SslAuthenticationError(
                    f"{where} answered with a TLS {tls} record: the broker port speaks TLS: "
                    f"set security.protocol=SSL (or SASL_SSL with SASL) and ssl.cafile")
            self._fail_connection(f"bad framing from node {self.node_id}: {e}", e, now, events, done)
            self._run_callbacks(done)
            return events
        for payload in frames:
            if self._raw_deadline is not None:
                if not self._handle_raw_token(payload, now, events, done):
                    break
                continue
            if not self._handle_frame(payload, now, events, done):
                break
        self._run_callbacks(done)
        return events

    def _handle_frame(self, payload, now, events, done):
        m = messages
        try:
            # (messages.peek_correlation_id, without a Reader per answer)
            cid = _CID.unpack_from(payload)[0] if len(payload) >= 4 else m.peek_correlation_id(payload)
        except DecodeError as e:
            self._fail_connection(f"response from node {self.node_id} too short for a correlation id: {e}",
                                  e, now, events, done)
            return False
        if not self._awaiting:
            err = ProtocolError(f"node {self.node_id} sent a response with correlation id {cid} "
                                f"but no request is awaiting one")
            self._fail_connection(str(err), err, now, events, done)
            return False
        req = self._awaiting[0]
        if cid != req.correlation_id:
            err = ProtocolError(
                f"correlation id mismatch on node {self.node_id}: expected {req.correlation_id} "
                f"(response to {req.api.name} v{req.version}) but the response carries {cid}")
            self._fail_connection(str(err), err, now, events, done, culprit=req)
            return False
        try:
            _, body = self._decode(req, payload)
        except DecodeError as e:
            err = DecodeError(f"cannot decode the {req.api.name} v{req.version} response "
                              f"(correlation id {cid}) from node {self.node_id}: {e}")
            err.__cause__ = e
            self._fail_connection(str(err), err, now, events, done, culprit=req)
            return False
        self._awaiting.popleft()
        # A response proves every earlier request was written, even if the
        # driver has not reported it yet.
        unwritten = self._unwritten
        while unwritten:
            first = unwritten[0]
            if first._seq > req._seq:
                break
            self._mark_written(unwritten.popleft(), now, events, done)
        if isinstance(body, dict):
            if "throttle_time_ms" in body:
                self._maybe_throttle(req, body["throttle_time_ms"], now)
        elif req.decoder is not None:
            self._maybe_throttle(req, body.throttle_time_ms, now)
        if req.internal:
            return self._handle_internal(req, body, now, events, done)
        self._complete(req, body, now, events, done)
        return True

    def _maybe_throttle(self, req, throttle_ms, now):
        self.last_throttle_time_ms = throttle_ms
        since = CLIENT_THROTTLES_FROM.get(req.api.name)
        if throttle_ms > 0 and since is not None and req.version >= since:
            until = now + throttle_ms
            if self.throttled_until is None or until > self.throttled_until:
                self.throttled_until = until

    def _decode(self, req, payload):
        # (messages.decode_response also reads the v0 answer a broker gives to
        # an ApiVersions version it does not support.)
        decoder = req.decoder
        if decoder is not None:
            got = decoder(req.version, payload)
            if got is not None:
                return got
        return messages.decode_response(req.api, req.version, payload)

    # -- handshake & authentication ---------------------------------------------------
    def _handle_internal(self, req, body, now, events, done):
        req.done = True
        req.result = body
        req.completed_at = now
        try:
            if req.api.name == "ApiVersions":
                self._on_api_versions(req, body, now, events)
            else:
                self._auth_step(self.authenticator.on_response(self, req.api.name, body), now, events)
        except KafkaError as e:
            self._fail_connection(f"handshake with node {self.node_id} failed: {e}", e, now, events, done)
            return False
        return self.state is not _DISCONNECTED

    def _on_api_versions(self, req, body, now, events):
        code = body.get("error_code", 0)
        if code == UNSUPPORTED_VERSION:
            fallback = versions.apiversions_fallback_version(body)
            if fallback is None or fallback >= req.version or self._apiversions_attempts >= 3:
                raise UnsupportedVersionError(
                    f"node {self.node_id} rejected ApiVersions v{req.version} and offers no usable "
                    f"lower version")
            self._send_api_versions(fallback, now)
            return
        if code:
            raise error_codes.error_for_code(code, context=f"ApiVersions v{req.version}")
        self.versions = versions.negotiate(body.get("api_keys") or [])
        self.api_versions_response = body
        if self.authenticator is not None:
            self._move(_AUTHENTICATING)
            self._auth_step(self.authenticator.start(self), now, events)
        else:
            self._become_ready(now, events)

    def _auth_step(self, next_request, now, events):
        if next_request is None:
            if self.reauthenticating:
                self._reauthenticated(now, events)
            else:
                self._become_ready(now, events)
            return
        if next_request[0] == RAW_SASL_TOKEN:
            self._send_raw_token(next_request[1], now)
            return
        api_name, body = next_request[0], next_request[1]
        version = next_request[2] if len(next_request) > 2 else None
        self._enqueue(api_name, body, now, version, True, None, None, internal=True)

    def _send_raw_token(self, token, now):
        # SaslHandshake v0 (before KIP-152): SASL tokens go as bare size-prefixed
        # frames, without request headers, and come back the same way.
        data = len(token).to_bytes(4, "big", signed=True) + bytes(token)
        self._out.append(data)
        self._out_pending += len(data)
        self._stream_queued += len(data)
        self._raw_deadline = now + self.request_timeout_ms
        self.last_activity = now

    def _handle_raw_token(self, payload, now, events, done):
        self._raw_deadline = None
        try:
            self._auth_step(self.authenticator.on_response(self, RAW_SASL_TOKEN, bytes(payload)), now, events)
        except KafkaError as e:
            self._fail_connection(f"handshake with node {self.node_id} failed: {e}", e, now, events, done)
            return False
        return self.state is not _DISCONNECTED

    def _become_ready(self, now, events):
        self._move(_READY)
        self.connect_failed = False
        self.failed_attempts = 0
        self.reconnect_backoff_current_ms = 0
        self._schedule_reauthentication(now)
        events.append(ConnectionReady(self.node_id, self.versions))

    # -- KIP-368 re-authentication ------------------------------------------------------
    def _schedule_reauthentication(self, now):
        delay = reauthentication_delay_ms(getattr(self.authenticator, "session_lifetime_ms", 0), self._rng)
        self._reauth_at = None if delay is None else now + delay

    def _maybe_reauthenticate(self, now, events):
        """Start the SASL exchange again on this socket once its time came.

        Requests already queued stay in flight: the broker handles one
        request per connection at a time and answers in order, so their
        responses arrive before the SaslHandshake's and match the FIFO as
        usual. New requests wait (``can_send`` is false) until the exchange
        ends, as Java's channel is not ready while it re-authenticates.
        """
        if (self._reauth_at is None or now < self._reauth_at or self.reauthenticating
                or self.state is not _READY):
            return
        self._reauth_at = None
        self.reauthenticating = True
        self._auth_step(self.authenticator.start(self), now, events)

    def _reauthenticated(self, now, events):
        self.reauthenticating = False
        self.reauthentications += 1
        self._schedule_reauthentication(now)
        events.append(Reauthenticated(self.node_id, self.authenticator.session_lifetime_ms))

    # -- completion helpers ----------------------------------------------------------
    def _complete(self, req, body, now, events, done):
        req.done = True
        req.result = body
        req.completed_at = now
        if not req.internal:
            # tuple.__new__ straight: a NamedTuple's own __new__ is Python
            # bytecode (collections' generated code), run for every answer
            events.append(_tuple_new(RequestCompleted, (req, body)))
            done.append(req)

    def _fail(self, req, error, now, events, done):
        if req.done:
            return
        req.done = True
        req.error = error
        req.completed_at = now
        if not req.internal:
            events.append(RequestFailed(req, error))
            done.append(req)

    @staticmethod
    def _run_callbacks(done):
        """Run user callbacks after all state changes; the first exception a
        callback raises is re-raised once all of them ran."""
        first = None
        for req in done:
            if req.callback is not None:
                try:
                    req.callback(req)
                except Exception as e:  # noqa: BLE001 - re-raised below
                    if first is None:
                        first = e
        if first is not None:
            raise first

    # -- closing ---------------------------------------------------------------------
    def _fail_connection(self, reason, error, now, events, done, culprit=None, permanent=False):
        """Close the session: fail every in-flight request, clear buffers, start backoff."""
        if self.state in (_DISCONNECTED, _CLOSED):
            if permanent and self.state is not _CLOSED:
                self._move(_CLOSED)
            return
        if self.state in (_CONNECTING, _HANDSHAKE,
                          _AUTHENTICATING):
            # It never got ready (a refused connect, a server that is not Kafka):
            # a connection failure, as Java counts it, and what error messages report.
            self.connect_failed = True
        where = f"node {self.node_id}" + (f" ({self.host}:{self.port})" if self.host is not None else "")
        pending = []
        seen = set()
        for req in list(self._awaiting) + list(self._unwritten):
            if id(req) not in seen:
                seen.add(id(req))
                pending.append(req)
        pending.sort(key=lambda r: r._seq)
        for req in pending:
            if req is culprit and error is not None:
                self._fail(req, error, now, events, done)
            elif isinstance(error, RequestTimedOutError):
                self._fail(req, RequestTimedOutError(str(error)), now, events, done)
            else:
                exc = ConnectionClosedError(f"connection to {where} closed: {reason}")
                exc.__cause__ = error if isinstance(error, BaseException) else None
                self._fail(req, exc, now, events, done)
        self._reset_session()
        self._move(_CLOSED if permanent else _DISCONNECTED)
        self.connect_started_at = None
        self.last_error = error
        self.last_close_reason = reason
        # Java ClusterConnectionStates.disconnected(): backoff from the failure count.
        self.last_connect_attempt = now
        self.reconnect_backoff_current_ms = self.backoff.backoff(self.failed_attempts)
        self.failed_attempts += 1
        events.append(ConnectionClosed(self.node_id, reason, error))

    def connection_lost(self, now, exc=None):
        """The driver saw the socket fail or close (or the connect fail)."""
        events, done = [], []
        reason = f"connection lost: {exc}" if exc is not None else "connection lost"
        if self.state is _CONNECTING:
            reason = f"connect failed: {exc}" if exc is not None else "connect failed"
        if self.state in (_CONNECTING, _HANDSHAKE,
                          _AUTHENTICATING):
            self.connect_failed = True
        self._fail_connection(reason, exc, now, events, done)
        self._run_callbacks(done)
        return events

    def close(self, reason="closed by client", now=None, permanent=False):
        """Close on our side (idle, shutdown, ...): fails everything in flight.
        With ``permanent`` the connection goes to CLOSED and never reconnects.
        ``now`` (default: the last activity time) starts the reconnect backoff."""
        events, done = [], []
        if now is None:
            now = self.last_activity if self.last_activity is not None else 0
        if self.state in (_DISCONNECTED, _CLOSED):
            if permanent and self.state is not _CLOSED:
                self._move(_CLOSED)
            return events
        self._fail_connection(reason, None, now, events, done, permanent=permanent)
        self._run_callbacks(done)
        return events

    # -- time ------------------------------------------------------------------------
    def check_timeouts(self, now):
        """Close the connection if a request or the connection setup timed out."""
        events, done = [], []
        if self.state is _CONNECTING and self.connect_started_at is not None:
            if now - self.connect_started_at >= self.connection_setup_timeout_ms:
                err = ConnectionClosedError(
                    f"connection setup to node {self.node_id} timed out after "
                    f"{self.connection_setup_timeout_ms} ms")
                self._fail_connection(str(err), err, now, events, done)
            return events
        if self._raw_deadline is not None and now >= self._raw_deadline:
            err = RequestTimedOutError(f"node {self.node_id} did not answer a SASL token within "
                                       f"{self.request_timeout_ms} ms")
            self._fail_connection(str(err), err, now, events, done)
            return events
        expired = self._oldest_expired(now)
        if expired is None:
            try:
                self._maybe_reauthenticate(now, events)
            except KafkaError as e:
                self._fail_connection(f"re-authentication with node {self.node_id} failed: {e}",
                                      e, now, events, done)
        if expired is not None:
            err = RequestTimedOutError(
                f"{expired.api.name} v{expired.version} (correlation id {expired.correlation_id}) "
                f"to node {self.node_id} got no response within {expired.timeout_ms} ms; "
                f"closing the connection and failing all {self.in_flight_count} in-flight requests")
            self._fail_connection(str(err), err, now, events, done)
        self._run_callbacks(done)
        return events

    def _oldest_expired(self, now):
        worst = None
        for q in (self._awaiting, self._unwritten):
            for req in q:
                if now >= req.deadline and (worst is None or req.deadline < worst.deadline):
                    worst = req
        return worst

    def next_deadline(self, now=None):
        """The earliest time ``check_timeouts`` has something to do, or None."""
        if self.state is _CONNECTING and self.connect_started_at is not None:
            return self.connect_started_at + self.connection_setup_timeout_ms
        # Plain loops, no list of candidates nor generators: drivers call this
        # every round and it was ~4 us per connection (bench/partition_cost.py).
        best = self._raw_deadline
        if not self.reauthenticating:
            t = self._reauth_at
            if t is not None and (best is None or t < best):
                best = t
        t = self.throttled_until
        if now is not None and t is not None and now < t and (best is None or t < best):
            best = t
        for req in self._awaiting:
            t = req.deadline
            if t is not None and (best is None or t < best):
                best = t
        for req in self._unwritten:
            t = req.deadline
            if t is not None and (best is None or t < best):
                best = t
        return best

    def is_idle(self, now):
        """READY, nothing in flight or queued, and no activity for connections_max_idle_ms."""
        return (self.state is _READY and self.in_flight_count == 0
                and self._out_pending == 0 and self.last_activity is not None
                and now - self.last_activity >= self.connections_max_idle_ms)

    @property
    def idle_deadline(self):
        """When the connection becomes idle if nothing happens (None if not applicable)."""
        if self.state is not _READY or self.last_activity is None:
            return None
        return self.last_activity + self.connections_max_idle_ms

    def __repr__(self):
        return (f"<Connection node={self.node_id} {self.host}:{self.port} {self.state.name} "
                f"in_flight={self.in_flight_count}>")
