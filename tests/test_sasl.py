"""SASL: PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER at the token level
(RFC test vectors, an independent SCRAM computation) and through the
connection's handshake against scripted broker frames; configuration;
credentials kept out of reprs and errors; wrong credentials fail fast."""
import base64
import hashlib
import hmac

import pytest

try:
    from scripted_broker import Reply, ScriptedBroker
except ImportError:  # pragma: no cover - run from the repository root
    from tests.scripted_broker import Reply, ScriptedBroker
from test_connection import handshake, of

from kproto import error_codes
from kproto.client import network_for
from kproto.config import ConfigError
from kproto.connection import Connection, ConnectionClosed, ConnectionReady
from kproto.errors import AuthenticationError
from kproto.producer import ProducerCore, parse_producer_config
from kproto.sasl import (
    OAuthBearerMechanism, PlainMechanism, ScramMechanism, authenticator_for, parse_jaas_config,
)

# RFC 7677 section 3
RFC7677 = dict(
    client_first=b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
    server_first=b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
    client_final=b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                 b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
    server_final=b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
)


def test_scram_sha256_reproduces_the_rfc7677_exchange():
    m = ScramMechanism("user", "pencil", "sha256", nonce="rOprNGfwEbeRWgbNEkqO")
    assert m.name == "SCRAM-SHA-256"
    assert m.initial_response() == RFC7677["client_first"]
    assert m.evaluate_challenge(RFC7677["server_first"]) == RFC7677["client_final"]
    assert m.evaluate_challenge(RFC7677["server_final"]) is None and m.complete


def test_scram_rejects_a_wrong_server_signature_and_server_errors():
    m = ScramMechanism("user", "pencil", "sha256", nonce="rOprNGfwEbeRWgbNEkqO")
    m.initial_response()
    m.evaluate_challenge(RFC7677["server_first"])
    with pytest.raises(AuthenticationError, match="server signature is wrong"):
        m.evaluate_challenge(b"v=" + base64.b64encode(b"\0" * 32))
    m = ScramMechanism("user", "pencil", nonce="abc")
    m.initial_response()
    with pytest.raises(AuthenticationError, match="does not extend"):
        m.evaluate_challenge(b"r=zzz,s=AAAA,i=4096")
    m = ScramMechanism("user", "pencil", nonce="abc")
    m.initial_response()
    with pytest.raises(AuthenticationError, match="invalid-proof"):
        m.evaluate_challenge(b"e=invalid-proof")


class ScramServer:
    """An independent SCRAM server side (hashlib/hmac), for the handshake tests."""

    def __init__(self, hash_name, users, iterations=4096, salt=b"0123456789abcdef"):
        self.hash, self.users, self.iterations, self.salt = hash_name, users, iterations, salt
        self.client_first_bare = self.server_first = None

    def _h(self, key, msg):
        return hmac.new(key, msg, self.hash).digest()

    def step(self, token):
        text = token.decode()
        if text.startswith("n,,"):
            self.client_first_bare = text[3:]
            fields = dict(kv.split("=", 1) for kv in self.client_first_bare.split(","))
            self.user = fields["n"]
            self.server_first = (f"r={fields['r']}SERVERNONCE,s={base64.b64encode(self.salt).decode()},"
                                 f"i={self.iterations}")
            return self.server_first.encode(), 0
        without_proof, proof = text.rsplit(",p=", 1)
        password = self.users.get(self.user)
        if password is None:
            return b"", 58
        salted = hashlib.pbkdf2_hmac(self.hash, password.encode(), self.salt, self.iterations)
        client_key = self._h(salted, b"Client Key")
        auth = f"{self.client_first_bare},{self.server_first},{without_proof}".encode()
        expected = bytes(a ^ b for a, b in zip(client_key, self._h(hashlib.new(self.hash, client_key).digest(),
                                                                  auth)))
        if base64.b64decode(proof) != expected:
            return b"", 58
        return b"v=" + base64.b64encode(self._h(self._h(salted, b"Server Key"), auth)), 0


def sasl_broker(mechanism, answer):
    broker = ScriptedBroker(sasl_mechanisms=[mechanism])

    def on_auth(req):
        token, code = answer(req.body["auth_bytes"])
        body = {"auth_bytes": token}
        if code:
            body.update(error_code=code, error_message="Authentication failed: Invalid username or password")
        return Reply(body)
    broker.on("SaslAuthenticate", on_auth)
    return broker


def connect_with(config, broker):
    cfg = parse_producer_config({"bootstrap.servers": "127.0.0.1:9092", **config})
    conn = Connection(1, authenticator=authenticator_for(cfg)())
    return handshake(conn, broker), conn


@pytest.mark.parametrize("mechanism,hash_name", [("SCRAM-SHA-256", "sha256"), ("SCRAM-SHA-512", "sha512")])
def test_scram_handshake_against_an_independent_server(mechanism, hash_name):
    server = ScramServer(hash_name, {"alice": "s3cret"})
    events, conn = connect_with({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
                                 "sasl.username": "alice", "sasl.password": "s3cret"},
                                sasl_broker(mechanism, server.step))
    assert of(events, ConnectionReady) and conn.is_ready
    server = ScramServer(hash_name, {"alice": "other"})
    events, conn = connect_with({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
                                 "sasl.username": "alice", "sasl.password": "s3cret"},
                                sasl_broker(mechanism, server.step))
    (closed,) = of(events, ConnectionClosed)
    assert isinstance(closed.error, error_codes.SaslAuthenticationFailedError)
    assert "s3cret" not in str(closed.error) and "Invalid username or password" in str(closed.error)


def test_plain_and_jaas_config():
    seen = []
    broker = sasl_broker("PLAIN", lambda tok: (seen.append(tok) or b"", 0))
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
            'username="bob" password="p\\"w";')
    events, conn = connect_with({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                 "sasl.jaas.config": jaas}, broker)
    assert conn.is_ready and seen == [b"\0bob\0p\"w"]
    assert parse_jaas_config(jaas) == {"username": "bob", "password": 'p"w'}
    assert PlainMechanism("bob", "x").initial_response() == b"\0bob\0x"


def test_oauthbearer_token_from_a_callback():
    seen = []
    broker = sasl_broker("OAUTHBEARER", lambda tok: (seen.append(tok) or b"", 0))
    events, conn = connect_with({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
                                 "sasl.oauthbearer.token.provider": lambda: ("tok123", {"x": "1"})}, broker)
    assert conn.is_ready and seen == [b"n,,\x01auth=Bearer tok123\x01x=1\x01\x01"]
    m = OAuthBearerMechanism(lambda: "t")
    m.initial_response()
    assert m.evaluate_challenge(b'{"status":"invalid_token"}') == b"\x01"      # RFC 7628 error reply


def test_unsupported_mechanism_names_the_brokers_list():
    broker = ScriptedBroker(sasl_mechanisms=["SCRAM-SHA-512"])
    events, _ = connect_with({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                              "sasl.username": "u", "sasl.password": "p"}, broker)
    (closed,) = of(events, ConnectionClosed)
    assert isinstance(closed.error, error_codes.UnsupportedSaslMechanismError)
    assert "SCRAM-SHA-512" in str(closed.error)


def test_config_errors_and_secrets_stay_hidden():
    base = {"bootstrap.servers": "h:1", "security.protocol": "SASL_PLAINTEXT"}
    with pytest.raises(ConfigError, match="needs sasl.username and sasl.password"):
        authenticator_for(parse_producer_config({**base, "sasl.mechanism": "PLAIN"}))
    # GSSAPI, Java's default mechanism, needs a service name; with a user name the error says why
    with pytest.raises(ConfigError, match="needs sasl.kerberos.service.name.*defaults to GSSAPI as in Java"):
        authenticator_for(parse_producer_config({**base, "sasl.username": "u", "sasl.password": "p"}))
    with pytest.raises(ConfigError, match="token.provider"):
        authenticator_for(parse_producer_config({**base, "sasl.mechanism": "OAUTHBEARER"}))
    with pytest.raises(ConfigError, match="ssl.keyfile needs ssl.certfile"):
        parse_producer_config({"bootstrap.servers": "h:1", "security.protocol": "SSL", "ssl.keyfile": "k"})
    with pytest.raises(ConfigError, match="sasl.mechanism"):
        parse_producer_config({**base, "sasl.mechanism": "plain-ish"})
    cfg = parse_producer_config({**base, "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "u",
                                 "sasl.password": "hunter2",
                                 "sasl.jaas.config": 'x.ScramLoginModule required password="hunter2";'})
    assert "hunter2" not in repr(cfg) and "(hidden)" in repr(cfg)
    assert "hunter2" not in repr(ScramMechanism("u", "hunter2")) + repr(PlainMechanism("u", "hunter2"))
    with pytest.raises(ConfigError) as e:
        parse_producer_config({**base, "sasl.password": 12345})
    assert "12345" not in str(e.value)


def test_wrong_credentials_fail_the_core_fast_not_a_retry_loop():
    # The network client records the authentication failure; drivers and the
    # admin core fail what waits with it instead of retrying until a timeout.
    broker = sasl_broker("PLAIN", lambda tok: (b"", 58))
    cfg = parse_producer_config({"bootstrap.servers": "127.0.0.1:9092", "security.protocol": "SASL_PLAINTEXT",
                                 "sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": "wrongpw"})
    _, client = network_for(cfg, rng=None, max_in_flight=5, allow_auto_topic_creation=True)
    conn = client._conn(-1)
    events = handshake(conn, broker)
    client._handle(events)
    assert isinstance(client.auth_error, error_codes.SaslAuthenticationFailedError)
    assert "wrongpw" not in str(client.auth_error)
    assert ProducerCore({"bootstrap.servers": "h:1"}).client.auth_error is None
    # the admin core fails pending operations with it at once
    from kproto.admin import AdminCore
    admin = AdminCore({"bootstrap.servers": "127.0.0.1:9092"})
    admin.client.auth_error = client.auth_error
    h = admin.list_topics(now=0)
    admin.poll(1)
    assert h.done and h.error is client.auth_error


# -- SaslHandshake v0: raw tokens, for brokers before KIP-152 ------------------------------------------

def _v0_broker(mechanism):
    broker = ScriptedBroker(sasl_mechanisms=[mechanism])
    del broker.versions["SaslAuthenticate"]
    broker.versions["SaslHandshake"] = (0, 0)
    return broker


def _exchange(conn, broker, now=0):
    data = bytes(conn.data_to_send())
    conn.bytes_sent(len(data), now)
    return conn.receive_data(broker.receive(data), now)


def _raw(token):
    return len(token).to_bytes(4, "big") + token


def test_v0_raw_token_handshake_plain_and_scram():
    from kproto.connection import SaslAuthenticator
    broker = _v0_broker("PLAIN")
    conn = Connection(1, authenticator=SaslAuthenticator(lambda: PlainMechanism("u", "pw")))
    conn.start_connect(0)
    conn.connection_made(0)
    _exchange(conn, broker)                                    # ApiVersions
    _exchange(conn, broker)                                    # SaslHandshake v0
    assert [r.version for r in broker.requests_of("SaslHandshake")] == [0]
    sent = bytes(conn.data_to_send())
    assert sent == _raw(b"\0u\0pw")                            # a bare frame, no request header
    conn.bytes_sent(len(sent), 0)
    assert of(conn.receive_data(_raw(b""), 0), ConnectionReady) and conn.is_ready

    server = ScramServer("sha512", {"alice": "pw"})
    broker = _v0_broker("SCRAM-SHA-512")
    conn = Connection(1, authenticator=SaslAuthenticator(lambda: ScramMechanism("alice", "pw", "sha512")))
    conn.start_connect(0)
    conn.connection_made(0)
    _exchange(conn, broker)
    _exchange(conn, broker)
    events = []
    for _ in range(2):
        sent = bytes(conn.data_to_send())
        conn.bytes_sent(len(sent), 0)
        answer, code = server.step(sent[4:])
        assert code == 0
        events = conn.receive_data(_raw(answer), 0)
    assert of(events, ConnectionReady)


def test_v0_raw_token_without_answer_times_out():
    from kproto.connection import SaslAuthenticator
    broker = _v0_broker("PLAIN")
    conn = Connection(1, request_timeout_ms=500,
                      authenticator=SaslAuthenticator(lambda: PlainMechanism("u", "pw")))
    conn.start_connect(0)
    conn.connection_made(0)
    _exchange(conn, broker)
    _exchange(conn, broker)
    sent = bytes(conn.data_to_send())
    conn.bytes_sent(len(sent), 0)
    assert conn.next_deadline(0) == 500 and conn.check_timeouts(499) == []
    (closed,) = of(conn.check_timeouts(500), ConnectionClosed)
    assert "SASL token" in str(closed.error)


# -- against Apache Kafka: the secured_kafka fixture (conftest.py) -------------------------------------

@pytest.mark.parametrize("listener", ["SASL_SSL", "SASL_PLAINTEXT"])
@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_every_mechanism_against_kafka(secured_kafka, mechanism, listener):
    import time
    import uuid

    import kio
    cfg = secured_kafka.client_config("alice", mechanism, listener)
    topic = f"ok-sasl-{uuid.uuid4().hex[:8]}"                    # alice may create and use ok-* topics
    with kio.Producer(**cfg, max_block_ms=10000) as p:
        md = p.send(topic, b"over " + listener.encode(), partition=0).result(20)
    with kio.Consumer(**cfg, auto_offset_reset="earliest") as c:
        c.assign([kio.TopicPartition(topic, 0)])
        end = time.monotonic() + 10
        records = []
        while not records and time.monotonic() < end:
            records = c.poll(0.2)
    assert md.offset == 0 and [r.value for r in records] == [b"over " + listener.encode()]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_a_wrong_password_fails_fast_against_kafka(secured_kafka, mechanism):
    import time

    import kio
    cfg = {**secured_kafka.client_config("alice", mechanism), "sasl_password": "wrong"}
    start = time.monotonic()
    with pytest.raises(error_codes.SaslAuthenticationFailedError, match=mechanism):
        with kio.Producer(**cfg, max_block_ms=20000) as p:
            p.send("ok-sasl", b"v").result(20)
    assert time.monotonic() - start < 10
