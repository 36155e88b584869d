"""A sans-IO fake Kafka broker for tests: bytes in, scripted responses out.

Why: the connection, producer and consumer cores must be tested without a
network and with full control over what the "broker" says (errors, wrong
correlation ids, garbage, silence). A :class:`ScriptedBroker` decodes request
frames with ``messages.decode_request`` and answers with
``messages.encode_response``, using, per API, the next scripted answer or a
handler, or a built-in default (ApiVersions, SaslHandshake, SaslAuthenticate;
Produce with acks=0 gets no response, like a real broker).

Usage::

    broker = ScriptedBroker(api_versions={"ApiVersions": (0, 2)})   # others: everything we know
    broker.script("Metadata", {"brokers": [...], "topics": [...]})   # next Metadata answer
    broker.script("Fetch", Reply({"error_code": 0}, correlation_id=999))   # a wrong id
    broker.on("Produce", lambda req: {...})                          # a handler for every one
    events = pump(conn, broker, now)      # shuttle bytes both ways until quiet

Scripted answers are a dict body, a :class:`Reply` (wrong correlation id,
raw bytes, hold back, answer with another version), :data:`NO_RESPONSE`, or a
callable ``f(request) -> one of those``. Every request seen is recorded in
``broker.requests`` as a :class:`Request`. Use ``broker.channel()`` for a
second connection to the same broker (each channel has its own framing).
"""
import collections
from typing import Any, NamedTuple, Optional

from kproto import messages
from kproto.errors import UnsupportedVersionError
from kproto.framing import FrameDecoder, frame

NO_RESPONSE = object()   # script value: swallow the request (no answer at all)


class Request(NamedTuple):
    api: Any            # messages.Api
    version: int
    correlation_id: int
    client_id: Optional[str]
    body: dict
    channel: "BrokerChannel"

    @property
    def api_name(self):
        return self.api.name


class Reply:
    """A scripted answer with options.

    ``body``: the response dict (missing fields take defaults);
    ``correlation_id``: answer with this id instead of the request's;
    ``raw``: send these bytes as the frame payload (size prefix added) instead
    of an encoded response - for garbage tests; ``frame_raw``: send these bytes
    as they are (no size prefix); ``version``: encode with this version;
    ``hold``: keep it in ``broker.held`` until ``broker.release()``.
    """

    def __init__(self, body=None, *, correlation_id=None, raw=None, frame_raw=None, version=None,
                 hold=False):
        self.body = body
        self.correlation_id = correlation_id
        self.raw = raw
        self.frame_raw = frame_raw
        self.version = version
        self.hold = hold


class BrokerChannel:
    """One client connection as the broker sees it (its own frame decoder)."""

    def __init__(self, broker):
        self.broker = broker
        self.decoder = FrameDecoder()

    def receive(self, data):
        """Feed bytes the client wrote; return the response bytes to hand back."""
        out = []
        for payload in self.decoder.feed(data):
            out.append(self.broker._handle(self, payload))
        return b"".join(out)


#: APIs a ScriptedBroker advertises only when ``api_versions`` lists them.
_UNLESS_LISTED = frozenset({"GetTelemetrySubscriptions", "PushTelemetry"})
#: Versions a ScriptedBroker advertises unless ``api_versions`` lists the API:
#: the last ones that name topics (OffsetCommit/OffsetFetch v10 and
#: TxnOffsetCommit v6 name them by id only), so the scripted answers of the
#: core tests stay written by name; the by-id versions are tested against
#: Apache Kafka 4.4 (tests/test_topic_ids.py) and in kproto.topic_ids' tests.
_NAMED_UNLESS_LISTED = {"OffsetCommit": 9, "OffsetFetch": 9, "TxnOffsetCommit": 5}


class ScriptedBroker:
    """See the module docstring. ``api_versions`` maps API names to
    (min, max) the broker claims; APIs not listed default to the full range
    this client implements (pass ``only_listed=True`` to advertise just those)."""

    def __init__(self, api_versions=None, only_listed=False, node_id=0, sasl_mechanisms=("PLAIN",)):
        # The KIP-714 telemetry APIs are advertised only when listed: a
        # scripted broker is one without client telemetry (a client then
        # turns it off quietly), so scripted request sequences stay as written.
        self.node_id = node_id
        self.versions = {}
        if not only_listed:
            for a in messages.APIS_BY_KEY.values():
                if a.name not in _UNLESS_LISTED:
                    self.versions[a.name] = (a.min_version, _NAMED_UNLESS_LISTED.get(a.name, a.max_version))
        for name, rng in (api_versions or {}).items():
            self.versions[name] = tuple(rng)
        self.sasl_mechanisms = list(sasl_mechanisms)
        self.scripts = collections.defaultdict(collections.deque)
        self.handlers = {}
        self.requests = []
        self.held = []
        self._default = BrokerChannel(self)

    # -- scripting ------------------------------------------------------------------
    def script(self, api_name, *answers):
        """Queue answers for the next requests of this API (used in order)."""
        self.scripts[api_name].extend(answers)
        return self

    def on(self, api_name, handler):
        """Answer every request of this API (when no scripted answer is queued)
        with ``handler(request)``."""
        self.handlers[api_name] = handler
        return self

    def channel(self):
        return BrokerChannel(self)

    def receive(self, data):
        """Bytes from the client on the default channel -> response bytes."""
        return self._default.receive(data)

    def release(self):
        """Bytes of every held reply, in order; clears ``held``."""
        out = b"".join(self.held)
        self.held = []
        return out

    def requests_of(self, api_name):
        return [r for r in self.requests if r.api.name == api_name]

    # -- answering -----------------------------------------------------------------
    def _handle(self, channel, payload):
        try:
            # strict: unlike Kafka, this broker refuses bytes after a body,
            # so an encoder writing more than the schema fails the test.
            header, body = messages.decode_request(payload, strict=True)
        except UnsupportedVersionError as e:
            if getattr(e, "api_key", None) == 18:
                # ApiVersions newer than this codec: answer v0 + UNSUPPORTED_VERSION, as brokers do.
                return self._encode(messages.api("ApiVersions"), 0, e.correlation_id,
                                    self._api_versions_body(error_code=35))
            raise
        a = messages.api(header["api_key"])
        req = Request(a, header["api_version"], header["correlation_id"], header["client_id"], body, channel)
        self.requests.append(req)
        lo_hi = self.versions.get(a.name)
        if a.name == "ApiVersions":
            if lo_hi is None or req.version > lo_hi[1]:
                return self._encode(a, 0, req.correlation_id, self._api_versions_body(error_code=35))
        answer = self._answer_for(req)
        while callable(answer) and not isinstance(answer, Reply):
            answer = answer(req)
        if answer is NO_RESPONSE:
            return b""
        if not isinstance(answer, Reply):
            answer = Reply(answer)
        if answer.frame_raw is not None:
            data = bytes(answer.frame_raw)
        elif answer.raw is not None:
            data = frame(answer.raw)
        else:
            cid = req.correlation_id if answer.correlation_id is None else answer.correlation_id
            version = req.version if answer.version is None else answer.version
            data = self._encode(a, version, cid, answer.body or {})
        if answer.hold:
            self.held.append(data)
            return b""
        return data

    def _answer_for(self, req):
        q = self.scripts.get(req.api.name)
        if q:
            return q.popleft()
        h = self.handlers.get(req.api.name)
        if h is not None:
            return h
        default = getattr(self, "_default_" + req.api.name, None)
        if default is not None:
            return default
        raise AssertionError(f"scripted broker: no answer scripted for {req.api.name} v{req.version} "
                             f"(correlation id {req.correlation_id})")

    @staticmethod
    def _encode(a, version, cid, body):
        return messages.encode_response(a, version, cid, body)

    def _api_versions_body(self, error_code=0):
        keys = []
        for name, (lo, hi) in self.versions.items():
            keys.append({"api_key": messages.api(name).key, "min_version": lo, "max_version": hi})
        if error_code:
            # Like a real broker: only its ApiVersions range matters to the client.
            keys = [k for k in keys if k["api_key"] == 18] or [{"api_key": 18, "min_version": 0,
                                                                "max_version": 0}]
        return {"error_code": error_code, "api_keys": keys, "throttle_time_ms": 0}

    # Defaults (a handler or script for the same API takes precedence).
    def _default_ApiVersions(self, req):
        return self._api_versions_body()

    def _default_SaslHandshake(self, req):
        code = 0 if req.body["mechanism"] in self.sasl_mechanisms else 33
        return {"error_code": code, "mechanisms": self.sasl_mechanisms}

    def _default_SaslAuthenticate(self, req):
        return {"error_code": 0, "auth_bytes": b"", "session_lifetime_ms": 0}

    def _default_Produce(self, req):
        if req.body.get("acks") == 0:
            return NO_RESPONSE
        raise AssertionError("scripted broker: no answer scripted for Produce with acks != 0")


def pump(conn, broker, now, max_rounds=20):
    """Move bytes client -> broker -> client until nothing moves; return the
    connection's events. ``broker`` is a ScriptedBroker or a BrokerChannel."""
    events = []
    for _ in range(max_rounds):
        data = conn.data_to_send()
        if not data:
            break
        events.extend(conn.bytes_sent(len(data), now))
        reply = broker.receive(bytes(data))
        if reply:
            events.extend(conn.receive_data(reply, now))
    return events


def handshake(conn, broker, now=0):
    """Connect ``conn`` and run the handshake against ``broker``; return the events."""
    if conn.state.name == "DISCONNECTED":
        conn.start_connect(now)
    conn.connection_made(now)
    return pump(conn, broker, now)


class ScriptedServer:
    """A :class:`ScriptedBroker` on a real loopback socket, for tests of the
    drivers (threading, asyncio, trio) against a broker whose every answer
    the test controls::

        with ScriptedServer(broker) as server:       # server.bootstrap: "127.0.0.1:port"
            ...

    Like a Kafka broker it answers the requests of one connection in order,
    one at a time: a request that expects an answer and gets none
    (:data:`NO_RESPONSE`, e.g. a JoinGroup the coordinator holds) holds back
    every later request of that connection. ``server.port`` is what handlers
    put into Metadata/FindCoordinator answers. One thread serves every
    connection; handlers run on it. A handler that raises (or a request
    nothing answers) closes its connection; the error is re-raised when the
    ``with`` block ends.
    """

    def __init__(self, broker):
        import socket
        self.broker = broker
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.setblocking(False)
        self.port = self._listener.getsockname()[1]
        self.bootstrap = f"127.0.0.1:{self.port}"
        self._stop_r, self._stop_w = socket.socketpair()
        self._thread = None
        self.connections = 0
        self.errors = []

    def start(self) -> "ScriptedServer":
        import threading
        self._thread = threading.Thread(target=self._serve, daemon=True, name="scripted-server")
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._stop_w.send(b"x")
            self._thread.join(10)
            self._thread = None
        for s in (self._listener, self._stop_r, self._stop_w):
            s.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, exc_type, *exc):
        self.stop()
        if self.errors and exc_type is None:
            raise self.errors[0]

    def _serve(self):
        import selectors
        sel = selectors.DefaultSelector()
        sel.register(self._listener, selectors.EVENT_READ, "accept")
        sel.register(self._stop_r, selectors.EVENT_READ, "stop")
        conns = {}                               # socket -> [decoder, channel, held]
        try:
            while True:
                for key, _ in sel.select():
                    if key.data == "stop":
                        return
                    if key.data == "accept":
                        try:
                            sock, _ = self._listener.accept()
                        except BlockingIOError:
                            continue
                        self.connections += 1
                        sock.setblocking(True)
                        conns[sock] = [FrameDecoder(), BrokerChannel(self.broker), False]
                        sel.register(sock, selectors.EVENT_READ, "conn")
                        continue
                    sock = key.fileobj
                    state = conns[sock]
                    try:
                        data = sock.recv(1 << 16)
                    except OSError:
                        data = b""
                    if not data:
                        sel.unregister(sock)
                        sock.close()
                        del conns[sock]
                        continue
                    if state[2]:
                        continue                 # held: nothing more is answered here
                    for payload in state[0].feed(data):
                        seen = len(self.broker.requests)
                        try:
                            reply = self.broker._handle(state[1], payload)
                        except Exception as e:  # noqa: BLE001 - reported by __exit__
                            self.errors.append(e)
                            sel.unregister(sock)
                            sock.close()
                            del conns[sock]
                            break
                        if reply:
                            sock.sendall(reply)
                            continue
                        req = self.broker.requests[seen] if len(self.broker.requests) > seen else None
                        acks0 = req is not None and req.api.name == "Produce" and req.body.get("acks") == 0
                        if not acks0:
                            state[2] = True      # an unanswered request holds the connection
                            break
        finally:
            for sock in conns:
                sock.close()
            sel.close()
