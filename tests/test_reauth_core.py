"""KIP-368 re-authentication in the connection state machine (scripted broker, no sockets)."""
import random

import pytest

from kproto import error_codes
from kproto.connection import (
    REAUTH_WINDOW_FACTOR,
    REAUTH_WINDOW_JITTER,
    Connection,
    ConnectionClosed,
    ConnectionReady,
    Reauthenticated,
    RequestCompleted,
    SaslAuthenticator,
    reauthentication_delay_ms,
)
from kproto.errors import NotReadyError
from kproto.sasl import OAuthBearerMechanism, PlainMechanism

try:
    from scripted_broker import Reply, ScriptedBroker, handshake, pump
except ImportError:  # tests/ as a package
    from tests.scripted_broker import Reply, ScriptedBroker, handshake, pump

LIFETIME = 10_000
METADATA_OK = {"brokers": [], "topics": []}


def of(events, cls):
    return [e for e in events if isinstance(e, cls)]


def session(lifetime=LIFETIME):
    return {"error_code": 0, "auth_bytes": b"", "session_lifetime_ms": lifetime}


def sasl_connection(broker, mechanism_factory, seed=3):
    conn = Connection(1, "h1", 9092, client_id="t", authenticator=SaslAuthenticator(mechanism_factory),
                      rng=random.Random(seed))
    events = handshake(conn, broker, now=0)
    assert of(events, ConnectionReady) and conn.is_ready
    return conn


def test_delay_is_85_to_95_percent_of_the_lifetime_with_jitter():
    rng = random.Random(1)
    delays = [reauthentication_delay_ms(LIFETIME, rng) for _ in range(2000)]
    assert min(delays) >= LIFETIME * REAUTH_WINDOW_FACTOR
    assert max(delays) <= LIFETIME * (REAUTH_WINDOW_FACTOR + REAUTH_WINDOW_JITTER)
    # spread over the window, not one point (many connections must not re-authenticate together)
    assert max(delays) - min(delays) > 0.9 * LIFETIME * REAUTH_WINDOW_JITTER
    assert reauthentication_delay_ms(0, rng) is None


def test_reauthenticates_on_the_same_connection_before_the_session_ends():
    broker = ScriptedBroker(sasl_mechanisms=["PLAIN"])
    broker.script("SaslAuthenticate", session(), session(), session(0))
    conn = sasl_connection(broker, lambda: PlainMechanism("alice", "pw"))
    due = conn.next_deadline(0)
    assert LIFETIME * 0.85 <= due <= LIFETIME * 0.95
    assert conn.check_timeouts(due - 1) == [] and conn.can_send(due - 1)

    conn.check_timeouts(due)
    assert conn.reauthenticating and not conn.can_send(due) and conn.is_ready
    with pytest.raises(NotReadyError, match="re-authenticating"):
        conn.send("Metadata", {"topics": []}, due)
    events = pump(conn, broker, due + 5)
    (reauth,) = of(events, Reauthenticated)
    assert reauth.session_lifetime_ms == LIFETIME
    assert not of(events, ConnectionClosed) and not of(events, ConnectionReady)
    assert conn.can_send(due + 5) and conn.reauthentications == 1 and conn.sessions_started == 1
    names = [r.api.name for r in broker.requests]
    assert names == ["ApiVersions", "SaslHandshake", "SaslAuthenticate", "SaslHandshake", "SaslAuthenticate"]
    # the next round is scheduled from the new session's end
    second = conn.next_deadline(due + 5)
    assert due + 5 + LIFETIME * 0.85 <= second <= due + 5 + LIFETIME * 0.95
    conn.check_timeouts(second)
    pump(conn, broker, second)
    # a lifetime of 0 (connections.max.reauth.ms unset) means no more re-authentication
    assert conn.reauthentications == 2 and conn.next_deadline(second) is None


def test_requests_in_flight_complete_around_the_reauthentication():
    broker = ScriptedBroker(sasl_mechanisms=["PLAIN"])
    broker.script("SaslAuthenticate", session(), session())
    broker.script("Metadata", Reply(METADATA_OK, hold=True))
    conn = sasl_connection(broker, lambda: PlainMechanism("alice", "pw"))
    due = conn.next_deadline(0)
    req = conn.send("Metadata", {"topics": []}, due - 1)
    pump(conn, broker, due - 1)            # on the wire, its answer held back by the broker
    conn.check_timeouts(due)               # the SaslHandshake goes out behind it
    assert conn.reauthenticating and not req.done
    data = bytes(conn.data_to_send())      # the SaslHandshake
    events = conn.bytes_sent(len(data), due)
    handshake_reply = broker.receive(data)
    # A broker answers one request of a connection at a time, in order: the
    # Metadata response first, then the SaslHandshake's.
    events += conn.receive_data(broker.release() + handshake_reply, due)
    assert req.succeeded and conn.reauthenticating
    events += pump(conn, broker, due)      # SaslAuthenticate finishes the exchange
    assert req.succeeded and of(events, RequestCompleted)[0].request is req
    assert of(events, Reauthenticated) and not of(events, ConnectionClosed)
    assert conn.can_send(due)


def test_oauthbearer_presents_a_fresh_token_when_reauthenticating():
    tokens = iter(["token-1", "token-2"])
    current = {}

    def provider():
        current["token"] = next(tokens)
        return current["token"]

    broker = ScriptedBroker(sasl_mechanisms=["OAUTHBEARER"])
    broker.script("SaslAuthenticate", session(), session())
    conn = sasl_connection(broker, lambda: OAuthBearerMechanism(provider))
    due = conn.next_deadline(0)
    conn.check_timeouts(due)
    pump(conn, broker, due)
    sent = [bytes(r.body["auth_bytes"]) for r in broker.requests_of("SaslAuthenticate")]
    assert b"Bearer token-1" in sent[0] and b"Bearer token-2" in sent[1]
    assert conn.reauthentications == 1


def test_a_refused_reauthentication_closes_with_the_authentication_error():
    broker = ScriptedBroker(sasl_mechanisms=["PLAIN"])
    broker.script("SaslAuthenticate", session(),
                  {"error_code": 58, "error_message": "password changed", "session_lifetime_ms": 0})
    conn = sasl_connection(broker, lambda: PlainMechanism("alice", "pw"))
    due = conn.next_deadline(0)
    conn.check_timeouts(due)
    events = pump(conn, broker, due)
    (closed,) = of(events, ConnectionClosed)
    assert isinstance(closed.error, error_codes.SaslAuthenticationFailedError)
    assert "password changed" in str(closed.error) and not conn.is_connected


def test_a_new_connection_forgets_the_old_schedule():
    broker = ScriptedBroker(sasl_mechanisms=["PLAIN"])
    broker.script("SaslAuthenticate", session(), session(0))
    conn = sasl_connection(broker, lambda: PlainMechanism("alice", "pw"))
    conn.connection_lost(100)
    handshake(conn, broker, now=200)
    assert conn.is_ready and conn.next_deadline(200) is None and conn.sessions_started == 2
