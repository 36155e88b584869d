"""Issue 23 (5, 6): what retrying cannot fix fails at once, with a hint that
names the cause; a dead cluster is visible (WARNING logs, ``error_cb``)."""
import logging
import socket
import ssl
import threading
import time

import pytest

from kio import Admin, Consumer, Producer, TopicPartition as TP
from kio._shared.tls import tls_error
from kproto.client import NetworkClient
from kproto.cluster import ClusterMetadata
from kproto.connection import Connection, ConnectionClosed
from kproto.errors import SslAuthenticationError

TLS_ALERT = b"\x15\x03\x03\x00\x02\x02\x50"      # what Kafka's TLS port answers a plaintext request


# -- network-free ---------------------------------------------------------------------------------

def test_tls_record_start():
    from kproto.connection import tls_record_start
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


# -- a dead cluster is visible: WARNING logs and error_cb ----------------------------------------

def _refused(client, node, now):
    assert not client.ready(node, now)
    client.poll(now)
    client.disconnected(node, now, ConnectionRefusedError(111, "ECONNREFUSED"))


def test_connect_failures_warn_rate_limited_and_all_brokers_down_once(caplog):
    from kproto.error_codes import SaslAuthenticationFailedError
    from kproto.errors import AllBrokersDownError
    caplog.set_level(logging.WARNING, logger="kproto.client")
    client = NetworkClient(ClusterMetadata([("127.0.0.1", 9), ("127.0.0.1", 10)]), reconnect_backoff_ms=1,
                           reconnect_backoff_max_ms=1000)
    nodes = client.cluster.candidate_nodes()
    _refused(client, nodes[0], 0)
    assert client.take_errors() == []                 # the other broker was not tried yet
    _refused(client, nodes[1], 1)
    (err,) = client.take_errors()
    assert isinstance(err, AllBrokersDownError) and "2/2 brokers are down" in str(err)
    for t in (5, 10, 500):                            # within reconnect.backoff.max.ms: no more lines
        _refused(client, nodes[0], t)
    assert client.take_errors() == []                 # told once, until a connection succeeds
    _refused(client, nodes[0], 1100)
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(lines) == 3, lines                     # node a at 0 and 1100, node b at 1
    assert lines[0].startswith(f"Connection to node {nodes[0]} (127.0.0.1/127.0.0.1:") and \
        "could not be established. Node may not be available." in lines[0]

    # an authentication failure is told once (until a connection authenticates)
    wrong = SaslAuthenticationFailedError("wrong password")
    client._handle([ConnectionClosed(nodes[0], "authentication failed", wrong)] * 2)
    assert client.take_errors() == [wrong]


def test_error_cb_is_a_documented_common_setting():
    from kproto.config import COMMON
    (s,) = [s for s in COMMON if s.name == "error.cb"]
    assert "AllBrokersDownError" in s.doc
    with pytest.raises(Exception, match="error_cb must be a callable"):
        Consumer(bootstrap_servers="127.0.0.1:9", error_cb=3)


DEAD = "127.0.0.1:9"           # nothing listens on the discard port


def test_a_dead_cluster_warns_and_calls_error_cb_threading(caplog):
    from kio.errors import AllBrokersDownError
    caplog.set_level(logging.WARNING)
    got = []
    start = time.monotonic()
    with Consumer(bootstrap_servers=DEAD, group_id="g", reconnect_backoff_max_ms=1000,
                  error_cb=lambda e: got.append((time.monotonic() - start, threading.current_thread(), e))) as c:
        c.subscribe(["t"])
        while time.monotonic() - start < 3.5:
            assert c.poll(0.5) == []                  # poll stays quiet, as Java's
    took, thread, err = got[0]
    assert isinstance(err, AllBrokersDownError) and "1/1 brokers are down" in str(err) and DEAD in str(err)
    assert took < 2 and thread is not threading.main_thread()       # on the network thread
    assert len(got) == 1
    lines = [r.getMessage() for r in caplog.records
             if r.levelno >= logging.WARNING and "could not be established" in r.getMessage()]
    assert 2 <= len(lines) <= 6, lines                # about one per reconnect.backoff.max.ms
    assert lines[0] == ("Connection to node -1 (127.0.0.1/127.0.0.1:9) could not be established. Node may not "
                        "be available. [connect failed: [Errno 111] connect failed: ECONNREFUSED]")

    for make in (lambda cb: Producer(bootstrap_servers=DEAD, error_cb=cb),
                 lambda cb: Admin(bootstrap_servers=DEAD, error_cb=cb)):
        got = []
        start = time.monotonic()
        with make(got.append) as client:
            with pytest.raises(Exception):
                if isinstance(client, Producer):
                    client.partitions_for("t", timeout=1.5)
                else:
                    client.list_topics(timeout=1.5)
        assert got and isinstance(got[0], AllBrokersDownError), (make, got)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("coroutine", [False, True])
def test_a_dead_cluster_calls_error_cb_async(backend, coroutine):
    from kio.errors import AllBrokersDownError
    got = []

    async def main(mod, sleep):
        if coroutine:
            async def cb(e):
                await sleep(0)
                got.append(e)
        else:
            cb = got.append
        start = time.monotonic()
        async with mod.Consumer(bootstrap_servers=DEAD, group_id="g", error_cb=cb) as c:
            c.subscribe(["t"])
            while not got and time.monotonic() - start < 5:
                assert await c.poll(0.2) == []
        return time.monotonic() - start

    if backend == "asyncio":
        import asyncio

        import kio.aio
        took = asyncio.run(main(kio.aio, asyncio.sleep))
    else:
        import trio

        import kio.trio
        took = trio.run(main, kio.trio, trio.sleep)
    assert got and isinstance(got[0], AllBrokersDownError) and took < 2


def test_authentication_failure_reaches_error_cb(secured_kafka):
    from kio.errors import AuthenticationError
    got = []
    config = dict(secured_kafka.client_config("alice", listener="SASL_PLAINTEXT"), sasl_password="wrong")
    start = time.monotonic()
    with Consumer(group_id="ok-ff", error_cb=got.append, **config) as c:
        c.subscribe(["ok-ff"])
        with pytest.raises(AuthenticationError, match="invalid credentials"):
            while time.monotonic() - start < 10:
                c.poll(0.2)
    assert time.monotonic() - start < 2
    assert got and isinstance(got[0], AuthenticationError)
