"""KIP-368 re-authentication against a real Apache Kafka with
``connections.max.reauth.ms`` = 2 s (the ``reauth_kafka`` fixture).

For each SASL mechanism a producer and a consumer run for 8 s (four sessions) through
SASL_SSL. A broker cuts a connection whose session ran out; a client that
re-authenticates in place keeps every socket it opened. So: every
connection of both clients was opened once (``sessions_started``), each
re-authenticated again and again on the same socket, and every record sent
was consumed. confluent-kafka (librdkafka) runs the same case for the
record: its statistics count connects and disconnects per broker.
"""
import json
import time
import uuid

import pytest

import kio
from kio.admin import NewTopic

try:
    from conftest import OIDC_CLIENTS, REAUTH_MS
except ImportError:  # tests/ as a package
    from tests.conftest import OIDC_CLIENTS, REAUTH_MS

RUN_S = 4 * REAUTH_MS / 1000       # four session lifetimes
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


def client_config(broker, issuer, mechanism):
    if mechanism == "OAUTHBEARER":
        client_id, secret = next(iter(OIDC_CLIENTS.items()))
        return {"bootstrap_servers": f"{broker.host}:{broker.sasl_ssl_port}", "security_protocol": "SASL_SSL",
                "ssl_cafile": broker.certs.ca, "sasl_mechanism": "OAUTHBEARER",
                "sasl_oauthbearer_token_endpoint_url": issuer.token_url,
                "sasl_oauthbearer_client_credentials_client_id": client_id,
                "sasl_oauthbearer_client_credentials_client_secret": secret}
    return broker.client_config("alice", mechanism, "SASL_SSL")


def new_topic(broker, mechanism):
    name = f"ok-reauth-{mechanism.lower()}-{uuid.uuid4().hex[:6]}"
    with kio.Admin(**broker.client_config()) as admin:
        admin.create_topics([NewTopic(name, 1, 1)])
    return name


def connection_stats(client):
    """(sockets opened, re-authentications) per node of a kio client."""
    conns = client._core.client.connections
    return {node: (c.sessions_started, c.reauthentications) for node, c in conns.items()}


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_connections_survive_the_session_lifetime(reauth_kafka, mechanism):
    broker, issuer = reauth_kafka
    cfg = client_config(broker, issuer, mechanism)
    topic = new_topic(broker, mechanism)
    sent, received = [], []
    with kio.Producer(**cfg, linger_ms=5) as producer, \
            kio.Consumer(**cfg, group_id=f"ok-g-{uuid.uuid4().hex[:6]}", auto_offset_reset="earliest") as consumer:
        consumer.subscribe([topic])
        start = time.monotonic()
        i = 0
        while time.monotonic() - start < RUN_S:
            for _ in range(20):
                value = f"{i}".encode()
                producer.send(topic, value, partition=0)
                sent.append(value)
                i += 1
            received.extend(r.value for r in consumer.poll(0.05))
        producer.flush(30)
        deadline = time.monotonic() + 30
        while len(received) < len(sent) and time.monotonic() < deadline:
            received.extend(r.value for r in consumer.poll(0.5))
        stats = {"producer": connection_stats(producer), "consumer": connection_stats(consumer)}
    print(f"{mechanism}: {len(sent)} records; (sockets opened, re-authentications) per node: {stats}")
    assert received == sent, f"{len(sent) - len(set(received))} records lost or reordered"
    used = [(who, node, s) for who, nodes in stats.items() for node, s in nodes.items() if s[0]]
    # No socket was opened twice: the broker never cut a connection.
    assert all(opened == 1 for _, _, (opened, _) in used), stats
    # Connections busy for the whole run re-authenticated in place, at least
    # once per session lifetime (85-95% of it: at least three in four lifetimes).
    busiest = max(reauths for _, _, (_, reauths) in used)
    assert busiest >= int(RUN_S * 1000 / REAUTH_MS) - 1, stats


def test_confluent_kafka_in_the_same_case(reauth_kafka):
    """For the record: librdkafka re-authenticates too (KIP-368 since 2.2);
    its connects/disconnects in the same RUN_S SCRAM-SHA-512 run."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    broker, _ = reauth_kafka
    topic = new_topic(broker, "confluent")
    conf = {"bootstrap.servers": f"{broker.host}:{broker.sasl_ssl_port}", "security.protocol": "SASL_SSL",
            "ssl.ca.location": broker.certs.ca, "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "alice", "sasl.password": broker.users["alice"],
            "statistics.interval.ms": 1000}
    stats = {}

    def keep(name):
        return lambda text: stats.__setitem__(name, json.loads(text))

    producer = confluent_kafka.Producer({**conf, "linger.ms": 5, "stats_cb": keep("producer")})
    start, n = time.monotonic(), 0
    while time.monotonic() - start < RUN_S:
        for _ in range(20):
            producer.produce(topic, f"{n}".encode(), partition=0)
            n += 1
        producer.poll(0.05)
    assert producer.flush(30) == 0
    producer.poll(1.5)      # one more statistics round
    brokers = {name: (b["connects"], b["disconnects"]) for name, b in stats["producer"]["brokers"].items()
               if b["nodeid"] >= 0}
    print(f"confluent-kafka SCRAM-SHA-512: {n} records; (connects, disconnects) per broker: {brokers}")
    assert all(disconnects == 0 for _, disconnects in brokers.values()), brokers


def test_the_minimal_blocking_driver_reauthenticates_too(reauth_kafka):
    """kio.blocking drives the socket only inside a call: a re-authentication
    that came due between calls runs before the next request."""
    from kio.blocking import BlockingClient
    from kproto.connection import SaslAuthenticator
    from kproto.sasl import ScramMechanism

    broker, _ = reauth_kafka
    auth = SaslAuthenticator(lambda: ScramMechanism("alice", broker.users["alice"], "sha512"))
    with BlockingClient(f"{broker.host}:{broker.port}", authenticator=auth) as client:
        start = time.monotonic()
        answers = 0
        while time.monotonic() - start < 12:
            client.request("Metadata", {"topics": []})
            answers += 1
            time.sleep(0.7)         # idle between calls, past the re-authentication time now and then
        conn = client.any_connection().conn
    assert answers >= 15 and conn.sessions_started == 1 and conn.reauthentications >= 2, \
        (answers, conn.sessions_started, conn.reauthentications)
