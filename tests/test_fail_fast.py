"""Issue 23 (5, 6): what retrying cannot fix fails at once, with a hint that
names the cause; a dead cluster is visible (WARNING logs, ``error_cb``)."""
import socket
import ssl
import threading
import time

import pytest

from kio import Admin, Consumer, Producer, TopicPartition as TP
from kio._tls import tls_error
from kproto.client import NetworkClient
from kproto.cluster import ClusterMetadata
from kproto.connection import Connection, ConnectionClosed, tls_record_start
from kproto.errors import SslAuthenticationError

TLS_ALERT = b"\x15\x03\x03\x00\x02\x02\x50"      # what Kafka's TLS port answers a plaintext request


# -- network-free ---------------------------------------------------------------------------------

def test_tls_record_start():
    assert tls_record_start(TLS_ALERT) == "alert"
    assert tls_record_start(b"\x16\x03\x01\x00") == "handshake"
    assert tls_record_start(b"\x00\x00\x00\x10") is None and tls_record_start(b"\x15") is None


def test_a_tls_alert_for_a_plaintext_request_is_a_tls_error_that_fails_the_client_fast():
    conn = Connection(-1, "127.0.0.1", 9093)
    conn.start_connect(0)
    conn.connection_made(1)
    (closed,) = [e for e in conn.receive_data(TLS_ALERT, 2) if isinstance(e, ConnectionClosed)]
    assert isinstance(closed.error, SslAuthenticationError)
    assert "127.0.0.1:9093" in str(closed.error) and "security.protocol=SSL" in str(closed.error)
    assert "speaks TLS" in str(closed.error)

    client = NetworkClient(ClusterMetadata([("127.0.0.1", 9093)]))
    assert not client.ready(-1, 0)
    client.poll(0)
    client.connected(-1, 1)
    client.received(-1, TLS_ALERT, 2)
    assert isinstance(client.auth_error, SslAuthenticationError)     # every core fails with it at once


def _verify_error(code, message):
    e = ssl.SSLCertVerificationError(1, f"[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: {message}")
    e.verify_code, e.verify_message = code, message
    return e


def test_tls_hints_tell_host_mismatch_from_unknown_ca():
    msg = str(tls_error(_verify_error(64, "IP address mismatch, certificate is not valid for '127.0.0.1'."),
                        "127.0.0.1", 9093))
    assert "another host" in msg and "ssl.endpoint.identification.algorithm" in msg and "ssl.cafile" not in msg
    msg = str(tls_error(_verify_error(62, "Hostname mismatch, certificate is not valid for 'b1'."), "b1", 1))
    assert "another host" in msg and "ssl.cafile" not in msg
    msg = str(tls_error(_verify_error(20, "unable to get local issuer certificate"), "b1", 1))
    assert "unknown CA" in msg and "ssl.cafile" in msg and "another host" not in msg


# -- against brokers --------------------------------------------------------------------------------

def _timed(fn):
    start = time.monotonic()
    with pytest.raises(Exception) as e:
        fn()
    return e.value, time.monotonic() - start


def _every_call(config):
    """The calls a user makes first, each with a long timeout: (name, call)."""
    def send():
        with Producer(max_block_ms=20000, **config) as p:
            p.send("ok-ff", b"v").result(20)

    def flush():
        with Producer(max_block_ms=20000, **config) as p:
            p.send("ok-ff", b"v", partition=0)
            p.flush(20)
            p.send("ok-ff", b"v", partition=0).result(1)

    def partitions_for():
        with Producer(max_block_ms=20000, **config) as p:
            p.partitions_for("ok-ff")

    def poll():
        with Consumer(group_id="ok-ff", **config) as c:
            c.subscribe(["ok-ff"])
            end = time.monotonic() + 20
            while time.monotonic() < end:
                c.poll(0.5)

    def admin():
        with Admin(default_api_timeout_ms=20000, **config) as a:
            a.list_topics()

    return [("send", send), ("flush", flush), ("partitions_for", partitions_for), ("poll", poll),
            ("admin", admin)]


@pytest.mark.parametrize("protocol", ["PLAINTEXT", "SASL_PLAINTEXT"])
def test_plaintext_client_on_a_tls_port_fails_at_once(secured_kafka, protocol):
    config = dict(bootstrap_servers=f"{secured_kafka.host}:{secured_kafka.sasl_ssl_port}",
                  security_protocol=protocol)
    if protocol == "SASL_PLAINTEXT":
        config.update(sasl_mechanism="PLAIN", sasl_username="alice", sasl_password="alice-secret")
    for name, call in _every_call(config):
        err, took = _timed(call)
        assert isinstance(err, SslAuthenticationError), (name, err)
        assert "the broker port speaks TLS: set security.protocol=SSL" in str(err), name
        assert took < 2, (name, took)


def test_tls_certificate_for_another_host_fails_at_once_naming_the_host(secured_kafka):
    """A TLS endpoint whose certificate names wrong.example (signed by the right CA)."""
    certs = secured_kafka.certs
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(*certs.wrong_host)
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def serve():
        while True:
            try:
                s, _ = server.accept()
            except OSError:
                return
            try:
                ctx.wrap_socket(s, server_side=True).close()
            except (OSError, ssl.SSLError):
                s.close()

    threading.Thread(target=serve, daemon=True).start()
    try:
        config = dict(bootstrap_servers=f"127.0.0.1:{port}", security_protocol="SSL", ssl_cafile=certs.ca)
        for name, call in _every_call(config):
            err, took = _timed(call)
            assert isinstance(err, SslAuthenticationError), (name, err)
            assert "another host" in str(err) and "ssl.cafile" not in str(err), (name, err)
            assert took < 2, (name, took)
    finally:
        server.close()
