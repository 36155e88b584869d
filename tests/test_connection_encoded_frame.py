"""A request whose body is already written (``EncodedBody``: the consumer's
Fetch, the producer's Produce) is framed by the connection from a header
kept per API and version (``Connection._encoded_frame``), and its version is
checked once per negotiation: the frames must be byte for byte those of
``messages.encode_request``, the reference, and a version the broker does
not take must still be refused every time, also after a reconnection that
negotiated other versions."""
import random

import pytest

from kproto import messages
from kproto.connection import Connection, ConnectionState
from kproto.errors import UnsupportedVersionError

try:
    from scripted_broker import ScriptedBroker, handshake
except ImportError:  # tests/ as a package
    from tests.scripted_broker import ScriptedBroker, handshake

APIV_MAX = messages.api("ApiVersions").max_version


def ready(client_id, broker=None, now=0, conn=None):
    broker = broker or ScriptedBroker()
    conn = conn or Connection(1, "h1", 9092, client_id=client_id, rng=random.Random(7))
    handshake(conn, broker, now=now)
    assert conn.state is ConnectionState.READY
    return conn, broker


def sent_frames(conn):
    data = bytes(conn.data_to_send())
    conn.bytes_sent(len(data), 1)
    frames = []
    while data:
        size = int.from_bytes(data[:4], "big")
        frames.append(data[:4 + size])
        data = data[4 + size:]
    return frames


@pytest.mark.parametrize("client_id", ["consumer-1", "", None, "kliënt-ü"])
@pytest.mark.parametrize("api,versions", [("Fetch", range(4, 19)), ("Produce", range(3, 12))])
def test_encoded_bodies_are_framed_as_the_codec_frames_them(client_id, api, versions):
    conn, _ = ready(client_id)
    key = messages.api(api).key
    for round_ in range(3):                      # the kept headers, re-used
        for version in versions:
            if not conn.versions.supports(messages.api(api), version):
                continue
            body = messages.EncodedBody(key, version, bytes(range(version + round_)))
            req = conn.send(api, body, 1, version=version, expect_response=False)
            frame, = sent_frames(conn)
            assert frame == messages.encode_request(api, version, req.correlation_id, client_id, body)


def test_a_version_the_broker_does_not_take_is_refused_every_time():
    broker = ScriptedBroker(api_versions={"ApiVersions": (0, APIV_MAX), "Fetch": (4, 12)}, only_listed=True)
    conn, _ = ready("c", broker)
    fetch = messages.api("Fetch")
    conn.send("Fetch", messages.EncodedBody(fetch.key, 12, b""), 1, version=12, expect_response=False)
    for _ in range(2):
        with pytest.raises(UnsupportedVersionError, match="Fetch v13"):
            conn.send("Fetch", messages.EncodedBody(fetch.key, 13, b""), 1, version=13, expect_response=False)
    # Reconnected to a broker that takes only older versions: v12, accepted
    # before, is checked again against the new negotiation.
    conn.close("test", 2)
    older = ScriptedBroker(api_versions={"ApiVersions": (0, APIV_MAX), "Fetch": (4, 11)}, only_listed=True)
    conn.start_connect(3)
    ready("c", older, now=3, conn=conn)
    with pytest.raises(UnsupportedVersionError, match="Fetch v12"):
        conn.send("Fetch", messages.EncodedBody(fetch.key, 12, b""), 4, version=12, expect_response=False)


def test_a_body_encoded_for_another_version_goes_to_the_codec_and_is_refused():
    conn, _ = ready("c")
    fetch = messages.api("Fetch")
    with pytest.raises(Exception, match="encoded for api key 1 v11"):
        conn.send("Fetch", messages.EncodedBody(fetch.key, 11, b""), 1, version=12)
