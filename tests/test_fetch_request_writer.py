"""The Fetch request written in C (kproto/consumer/_fetch_request.pyx)
against the generic codec, the reference: every version the client speaks
(4-18; topics by id from 13, flexible from 12, no replica_id from 15), both
isolation levels, rack ids, one and many topics and partitions, forgotten
topics, the bodies the Fetcher itself builds; the frames must be the same
bytes. And what the writer leaves to the codec."""
import itertools
import uuid

import pytest

from kproto import messages
from kproto.cluster import TopicPartition
from kproto.consumer._fetch_request import FIRST_VERSION, LAST_VERSION, fetch_request_body
from kproto.consumer.fetcher import FETCH_API_KEY, Fetcher
from kproto.consumer.positions import Positions
from kproto.messages import EncodedBody

VERSIONS = range(FIRST_VERSION, LAST_VERSION + 1)
TOPIC_IDS = {"a": uuid.UUID(int=0xA1), "bb": uuid.UUID(int=0xB2), "c.dotted-topic_name": uuid.uuid4()}


def _partition(p, offset):
    return {"partition": p, "current_leader_epoch": p % 3 - 1, "fetch_offset": offset,
            "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1048576 + p}


def _body(version, shape, isolation, rack):
    """A Fetch body of ``shape`` as Fetcher._build makes it (names or ids by version)."""
    if shape == "one":
        topics = {"a": [_partition(0, 42)]}
    else:
        topics = {"a": [_partition(p, 10 ** p) for p in (5, 0, 17, 3)],
                  "bb": [_partition(0, 0)],
                  "c.dotted-topic_name": [_partition(p, 2 ** 40 + p) for p in range(1000)]}
    key = "topic_id" if version >= 13 else "topic"
    entries = [{key: TOPIC_IDS[t] if version >= 13 else t, "partitions": parts} for t, parts in topics.items()]
    forgotten = []
    if shape == "forgotten" and version >= 7:
        forgotten = [{key: TOPIC_IDS["bb"] if version >= 13 else "bb", "partitions": [1, 2, 70000]}]
    return {"replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 52428800,
            "isolation_level": isolation, "session_id": 0, "session_epoch": -1, "topics": entries,
            "forgotten_topics_data": forgotten, "rack_id": rack}


def _frames(version, body):
    reference = messages.encode_request("Fetch", version, 987654, "client-é", body)
    data = fetch_request_body(version, body)
    assert data is not None
    written = messages.encode_request("Fetch", version, 987654, "client-é", EncodedBody(FETCH_API_KEY, version, data))
    return reference, written


@pytest.mark.parametrize("version,shape,isolation,rack", list(itertools.product(
    VERSIONS, ["one", "many", "forgotten"], [0, 1], ["", "eu-west-1a"])))
def test_written_in_c_is_byte_identical_to_the_codec(version, shape, isolation, rack):
    reference, written = _frames(version, _body(version, shape, isolation, rack))
    assert written == reference
    # And it reads back as the request sent: the codec decodes what C wrote.
    header, decoded = messages.decode_request(written[4:], strict=True)
    assert header["api_version"] == version
    assert sum(len(t["partitions"]) for t in decoded["topics"]) == (1 if shape == "one" else 1005)


def _fetcher(partitions, **kw):
    positions = Positions()
    tps = [TopicPartition(t, p) for t, n in partitions.items() for p in range(n)]
    positions.assign(tps)
    for i, tp in enumerate(tps):
        positions.seek(tp, 1000 * i + 7, leader_epoch=i % 4)
    return Fetcher(positions, **kw), tps


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("kw", [{}, {"isolation_level": "read_committed", "client_rack": "rack-2"}])
def test_the_fetchers_own_requests_are_sent_as_the_codec_would_write_them(version, kw):
    fetcher, tps = _fetcher({"a": 3, "bb": 200}, **kw)
    reqs = fetcher.fetch_requests(lambda tp: 1 if tp.partition % 2 else 2, lambda node: version,
                                  TOPIC_IDS.get)
    assert sorted(r.node for r in reqs) == [1, 2]
    for req in reqs:
        assert isinstance(req.wire_body, EncodedBody) and req.wire_body.version == version
        reference = messages.encode_request("Fetch", version, 5, "c", req.body)
        assert messages.encode_request("Fetch", version, 5, "c", req.wire_body) == reference
    # The next round (positions moved): only the offsets change, the bytes still agree.
    fetcher.positions.seek(tps[0], 10 ** 12)
    fetcher._in_flight_nodes.clear()
    for req in fetcher.fetch_requests(lambda tp: 1, lambda node: version, TOPIC_IDS.get):
        assert messages.encode_request("Fetch", version, 6, "c", req.wire_body) == \
            messages.encode_request("Fetch", version, 6, "c", req.body)
        assert req.offsets[tps[0]] == 10 ** 12


def test_the_reference_path_sends_the_dict():
    fetcher, _ = _fetcher({"a": 1})
    fetcher.write_in_c = False
    (req,) = fetcher.fetch_requests(lambda tp: 1, lambda node: 13, TOPIC_IDS.get)
    assert req.encoded is None and req.wire_body is req.body


@pytest.mark.parametrize("version", [3, 19])
def test_versions_outside_the_written_range_go_to_the_codec(version):
    assert fetch_request_body(version, _body(13, "one", 0, "")) is None


@pytest.mark.parametrize("extra", [{"cluster_id": "abc"}, {"replica_state": {"replica_id": 1, "replica_epoch": 2}}])
def test_a_body_with_a_tagged_field_goes_to_the_codec(extra):
    assert fetch_request_body(15, {**_body(15, "one", 0, ""), **extra}) is None


def test_a_partition_with_a_tagged_field_goes_to_the_codec():
    body = _body(18, "one", 0, "")
    body["topics"][0]["partitions"][0]["high_watermark"] = 5
    assert fetch_request_body(18, body) is None


def test_a_topic_name_too_long_is_refused_as_the_codec_does():
    body = _body(12, "one", 0, "")
    body["topics"][0]["topic"] = "x" * 40000
    with pytest.raises(messages.EncodeError):
        messages.encode_request("Fetch", 11, 1, "c", _body(11, "one", 0, "") | {"topics": body["topics"]})
    with pytest.raises(messages.EncodeError):
        fetch_request_body(11, _body(11, "one", 0, "") | {"topics": body["topics"]})
