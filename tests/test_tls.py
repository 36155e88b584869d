"""TLS against the real brokers, with a test CA and certificates made by
openssl (kio.testing.secured_kafka.make_certificates). Debian's stunnel4 terminates
TLS in front of Tansu (which serves plaintext) and the broker advertises the
stunnel port: right CA -> works; system CAs only -> a verification error;
wrong host name -> error; a client certificate required, given and missing.
Apache Kafka's own SSL listener (the ``secured_kafka`` fixture: mutual TLS,
``ssl.client.auth=required``) is checked for the same cases."""
import os
import shutil
import subprocess
import time

import pytest

from kio import Consumer, Producer, TopicPartition as TP
from kio.testing.broker import LocalBroker, free_port
from kio.testing.secured_kafka import make_certificates
from kproto.errors import SslAuthenticationError

STUNNEL = shutil.which("stunnel4") or shutil.which("stunnel")


class Stunnel:
    def __init__(self, d, name, upstream_port, cert, key, require_client_cert=False):
        self.port = free_port()
        conf = os.path.join(d, f"{name}.conf")
        with open(conf, "w") as f:
            f.write(f"foreground = yes\npid =\n[kafka]\naccept = 127.0.0.1:{self.port}\n"
                    f"connect = 127.0.0.1:{upstream_port}\ncert = {cert}\nkey = {key}\n"
                    + (f"CAfile = {os.path.join(d, 'ca.pem')}\nrequireCert = yes\nverifyChain = yes\n"
                       if require_client_cert else ""))
        self.proc = subprocess.Popen([STUNNEL, conf], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        import socket
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"stunnel did not start on port {self.port}")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    assert STUNNEL, "stunnel4 is installed by tools/dev.sh (Debian package stunnel4)"
    d = str(tmp_path_factory.mktemp("tls"))
    certs = make_certificates(d)
    server, wrong, client = certs.server, certs.wrong_host, certs.client
    started = []
    try:
        # broker A behind a TLS port; broker B behind one that requires client certificates
        port_a, port_b = free_port(), free_port()
        tunnel_a = Stunnel(d, "a", port_a, *server)
        tunnel_b = Stunnel(d, "b", port_b, *server, require_client_cert=True)
        tunnel_wrong = Stunnel(d, "w", port_a, *wrong)
        started += [tunnel_a, tunnel_b, tunnel_wrong]
        broker_a = LocalBroker(port=port_a, advertised_port=tunnel_a.port).start()
        started.append(broker_a)
        broker_b = LocalBroker(port=port_b, advertised_port=tunnel_b.port).start()
        started.append(broker_b)
        yield dict(ca=certs.ca, client=client, a=tunnel_a.port, b=tunnel_b.port,
                   wrong=tunnel_wrong.port)
    finally:
        for s in reversed(started):
            s.stop()


def round_trip(bootstrap, prefix="tls", **tls_config):
    topic = f"{prefix}-{time.monotonic_ns()}"
    with Producer(bootstrap_servers=bootstrap, max_block_ms=10000, **tls_config) as p:
        md = p.send(topic, b"secret payload", key=b"k", partition=0).result(20)
    with Consumer(bootstrap_servers=bootstrap, **tls_config) as c:
        c.assign([TP(topic, 0)])
        c.seek_to_beginning()
        for _ in range(50):
            records = c.poll(0.2)
            if records:
                return md, records
    return md, []


def test_right_ca_works_end_to_end(tls):
    md, records = round_trip(f"127.0.0.1:{tls['a']}", security_protocol="SSL", ssl_cafile=tls["ca"])
    assert md.offset == 0 and [(r.key, r.value) for r in records] == [(b"k", b"secret payload")]


def fails_fast(bootstrap, match, **tls_config):
    start = time.monotonic()
    with pytest.raises(SslAuthenticationError, match=match) as e:
        with Producer(bootstrap_servers=bootstrap, max_block_ms=20000, **tls_config) as p:
            p.send("t", b"v", partition=0).result(20)
    assert time.monotonic() - start < 10, "an authentication failure must not wait out max.block.ms"
    return str(e.value)


def test_system_cas_only_is_a_clear_verification_error(tls):
    msg = fails_fast(f"127.0.0.1:{tls['a']}", "certificate did not verify", security_protocol="SSL")
    assert f"127.0.0.1:{tls['a']}" in msg and "ssl.cafile" in msg


def test_wrong_host_name_is_an_error_unless_checks_are_off(tls):
    msg = fails_fast(f"127.0.0.1:{tls['wrong']}", "did not verify", security_protocol="SSL",
                     ssl_cafile=tls["ca"])
    assert "127.0.0.1" in msg and ("mismatch" in msg.lower() or "hostname" in msg.lower() or "IP" in msg)
    md, records = round_trip(f"127.0.0.1:{tls['wrong']}", security_protocol="SSL", ssl_cafile=tls["ca"],
                             ssl_endpoint_identification_algorithm="")
    assert [r.value for r in records] == [b"secret payload"]


def test_client_certificate_required_missing_and_given(tls):
    fails_fast(f"127.0.0.1:{tls['b']}", "client certificate|failed", security_protocol="SSL",
               ssl_cafile=tls["ca"])
    cert, key = tls["client"]
    md, records = round_trip(f"127.0.0.1:{tls['b']}", security_protocol="SSL", ssl_cafile=tls["ca"],
                             ssl_certfile=cert, ssl_keyfile=key)
    assert [r.value for r in records] == [b"secret payload"]


def test_asyncio_and_trio_drivers_over_tls(tls):
    import asyncio

    import trio

    import kio.aio
    import kio.trio

    async def produce_consume(mod):
        topic = f"tls-async-{time.monotonic_ns()}"
        config = dict(bootstrap_servers=f"127.0.0.1:{tls['a']}", security_protocol="SSL", ssl_cafile=tls["ca"])
        async with mod.Producer(**config) as p:
            md = await (await p.send(topic, b"async secret", partition=0))
        async with mod.Consumer(**config) as c:
            c.assign([TP(topic, 0)])
            c.seek_to_beginning()
            for _ in range(50):
                records = await c.poll(0.2)
                if records:
                    return md.offset, [r.value for r in records]
        return md.offset, []

    assert asyncio.run(produce_consume(kio.aio)) == (0, [b"async secret"])
    assert trio.run(produce_consume, kio.trio) == (0, [b"async secret"])


# == Apache Kafka's SSL listener (mutual TLS) ===============================================================

def test_kafka_mutual_tls_right_ca_with_and_without_a_client_certificate(secured_kafka):
    mtls = secured_kafka.client_config(listener="SSL")
    bootstrap = mtls.pop("bootstrap_servers")
    # the certificate's CN is the principal (User:client), allowed on ok-* topics
    md, records = round_trip(bootstrap, prefix="ok-tls", **mtls)
    assert md.offset == 0 and [(r.key, r.value) for r in records] == [(b"k", b"secret payload")]
    msg = fails_fast(bootstrap, "client certificate", security_protocol="SSL", ssl_cafile=mtls["ssl_cafile"])
    assert bootstrap in msg and "ssl.certfile" in msg
    msg = fails_fast(bootstrap, "certificate did not verify", security_protocol="SSL",
                     ssl_certfile=mtls["ssl_certfile"], ssl_keyfile=mtls["ssl_keyfile"])
    assert "ssl.cafile" in msg
