"""Known-bytes tests of the message codec and the public message API.

Why this exists: round-trip properties (test_codec_properties.py) cannot catch a
codec that is consistently wrong in both directions; these tests pin exact
bytes, written by hand from the protocol guide, for a few representative
messages (classic and flexible forms, tagged fields, headers), and check the
error behaviour callers rely on.
"""
import struct
import uuid

import pytest

from kproto import _codec
from kproto import messages as m
from kproto._wire import Reader, Writer
from kproto.errors import DecodeError, EncodeError, UnsupportedVersionError
from kproto.schema import api_versions, fetch, metadata, produce


def i16(v):
    return struct.pack(">h", v)


def i32(v):
    return struct.pack(">i", v)


def i64(v):
    return struct.pack(">q", v)


def s16(text):
    b = text.encode()
    return i16(len(b)) + b


def cstr(text):  # compact string, length < 127
    b = text.encode()
    return bytes([len(b) + 1]) + b


def frame(body):
    return i32(len(body)) + body


# -- requests --------------------------------------------------------------------

def test_api_versions_v0_request_bytes():
    got = m.encode_request("ApiVersions", 0, 1, "kio", {})
    assert got == frame(i16(18) + i16(0) + i32(1) + s16("kio"))
    assert got == b"\x00\x00\x00\x0d\x00\x12\x00\x00\x00\x00\x00\x01\x00\x03kio"


def test_api_versions_v3_request_is_flexible_with_classic_client_id():
    got = m.encode_request("ApiVersions", 3, 0x01020304, "kio",
                           {"client_software_name": "kio", "client_software_version": "1.0"})
    header = i16(18) + i16(3) + i32(0x01020304) + s16("kio") + b"\x00"   # header v2
    body = cstr("kio") + cstr("1.0") + b"\x00"
    assert got == frame(header + body)


def test_null_client_id():
    got = m.encode_request("ApiVersions", 0, 5, None, None)
    assert got == frame(i16(18) + i16(0) + i32(5) + i16(-1))


def test_metadata_v1_request_bytes():
    got = m.encode_request("Metadata", 1, 7, "c", {"topics": [{"name": "foo"}, {"name": "bar"}]})
    body = i32(2) + s16("foo") + s16("bar")
    assert got == frame(i16(3) + i16(1) + i32(7) + s16("c") + body)
    # null topics (v1+) means "all topics"
    got = m.encode_request("Metadata", 1, 7, "c", {"topics": None})
    assert got[-4:] == i32(-1)


def test_metadata_v0_topics_not_nullable():
    with pytest.raises(EncodeError, match=r"Metadata v0 request: field topics: null is not allowed"):
        m.encode_request("Metadata", 0, 1, "c", {"topics": None})


def test_metadata_v9_request_compact_bytes():
    got = m.encode_request("Metadata", 9, 1, "c", {
        "topics": [{"name": "t"}], "allow_auto_topic_creation": True,
        "include_topic_authorized_operations": False})
    header = i16(3) + i16(9) + i32(1) + s16("c") + b"\x00"
    # topics: compact array (1 + 1), topic struct: compact name + empty tags;
    # bools; top-level empty tags. include_cluster_authorized_operations is v8-v10.
    body = b"\x02" + cstr("t") + b"\x00" + b"\x01" + b"\x00" + b"\x00" + b"\x00"
    assert got == frame(header + body)


def test_produce_v3_request_bytes_and_records_from_memoryview():
    records = bytearray(b"RECORDBATCH")
    got = m.encode_request("Produce", 3, 9, "p", {
        "transactional_id": None, "acks": -1, "timeout_ms": 30000,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": memoryview(records)}]}]})
    body = (i16(-1) + i16(-1) + i32(30000) + i32(1) + s16("t") + i32(1) + i32(0)
            + i32(len(records)) + bytes(records))
    assert got == frame(i16(0) + i16(3) + i32(9) + s16("p") + body)


def test_request_round_trip_server_side():
    body = {"topics": [{"name": "x", "topic_id": uuid.UUID(int=5)}],
            "allow_auto_topic_creation": False, "include_topic_authorized_operations": True}
    data = m.encode_request("Metadata", 12, 42, "client-1", body)
    header, decoded = m.decode_request(data[4:])
    assert header == {"api_key": 3, "api_version": 12, "correlation_id": 42, "client_id": "client-1"}
    assert decoded["topics"] == [{"topic_id": uuid.UUID(int=5), "name": "x"}]
    assert decoded["include_topic_authorized_operations"] is True
    # v11+ has no include_cluster_authorized_operations: present with its default
    assert decoded["include_cluster_authorized_operations"] is False


# -- responses -------------------------------------------------------------------

def test_api_versions_v0_response_decode():
    payload = i32(77) + i16(0) + i32(2) + i16(0) + i16(0) + i16(9) + i16(18) + i16(0) + i16(3)
    corr, body = m.decode_response("ApiVersions", 0, payload)
    assert corr == 77
    assert body["error_code"] == 0
    assert body["api_keys"] == [{"api_key": 0, "min_version": 0, "max_version": 9},
                                {"api_key": 18, "min_version": 0, "max_version": 3}]
    # uniform shape: later fields at their defaults
    assert body["throttle_time_ms"] == 0
    assert body["supported_features"] == [] and body["finalized_features"] == []
    assert body["finalized_features_epoch"] == -1
    assert body["zk_migration_ready"] is False


def test_api_versions_v3_response_tagged_fields():
    # header v0 (ApiVersions responses never use header v1), then the body:
    # error_code, api_keys (compact), throttle, tagged fields:
    #   tag 0 SupportedFeatures, tag 7 (unknown: skipped), tag 1 epoch
    feat = b"\x02" + cstr("f") + i16(1) + i16(2) + b"\x00"
    unknown = b"\xde\xad"
    epoch = i64(12)
    payload = (i32(3) + i16(0) + b"\x02" + i16(18) + i16(0) + i16(4) + b"\x00" + i32(0)
               + b"\x03"
               + b"\x00" + bytes([len(feat)]) + feat
               + b"\x07" + bytes([len(unknown)]) + unknown
               + b"\x01" + bytes([len(epoch)]) + epoch)
    corr, body = m.decode_response("ApiVersions", 3, payload)
    assert corr == 3
    assert body["supported_features"] == [{"name": "f", "min_version": 1, "max_version": 2}]
    assert body["finalized_features_epoch"] == 12
    assert body["finalized_features"] == []
    assert body["api_keys"] == [{"api_key": 18, "min_version": 0, "max_version": 4}]


def test_tagged_fields_written_only_when_not_default_in_tag_order():
    plan = _codec.get_plan(api_versions.RESPONSE, 3)
    w = Writer()
    _codec.encode(plan, {"api_keys": [], "finalized_features_epoch": -1,
                         "zk_migration_ready": False, "supported_features": []}, w)
    assert w.getvalue() == i16(0) + b"\x01" + i32(0) + b"\x00"
    w = Writer()
    _codec.encode(plan, {"zk_migration_ready": True, "finalized_features_epoch": 3}, w)
    assert w.getvalue() == (i16(0) + b"\x01" + i32(0) + b"\x02"
                            + b"\x01\x08" + i64(3) + b"\x03\x01\x01")


def test_tagged_field_size_mismatch_is_a_decode_error():
    # tag 3 (bool) declared as 2 bytes
    payload = i32(1) + i16(0) + b"\x01" + i32(0) + b"\x01" + b"\x03\x02\x01\x00"
    with pytest.raises(DecodeError, match="ApiVersions v3 response: tagged field 3"):
        m.decode_response("ApiVersions", 3, payload)


def test_flexible_response_header_v1():
    data = m.encode_response("Heartbeat", 4, 99, {"error_code": 27})
    assert data == frame(i32(99) + b"\x00" + i32(0) + i16(27) + b"\x00")
    assert m.decode_response("Heartbeat", 4, data[4:]) == (99, {"throttle_time_ms": 0, "error_code": 27})
    assert m.peek_correlation_id(data[4:]) == 99
    # ApiVersions v3 response: header v0 (no tagged fields byte)
    data = m.encode_response("ApiVersions", 3, 99, {})
    assert data[4:9] == i32(99) + i16(0)[:1]


def test_apiversions_response_falls_back_to_v0_parsing():
    # a broker that does not know v4 answers with a v0 body, error 35
    payload = i32(1) + i16(35) + i32(1) + i16(18) + i16(0) + i16(2)
    corr, body = m.decode_response("ApiVersions", 4, payload)
    assert corr == 1 and body["error_code"] == 35
    assert body["api_keys"] == [{"api_key": 18, "min_version": 0, "max_version": 2}]


def test_fetch_records_are_zero_copy_views():
    records = b"\x00" * 10 + b"BATCH"
    body = {"responses": [{"topic_id": uuid.UUID(int=1), "partitions": [
        {"partition_index": 0, "high_watermark": 100, "records": records}]}]}
    data = m.encode_response("Fetch", 13, 5, body)
    payload = memoryview(data)[4:]
    corr, got = m.decode_response("Fetch", 13, payload)
    rec = got["responses"][0]["partitions"][0]["records"]
    assert isinstance(rec, memoryview) and bytes(rec) == records
    assert rec.obj is data      # a view into the received buffer, not a copy
    part = got["responses"][0]["partitions"][0]
    assert part["aborted_transactions"] == []
    assert part["current_leader"] == {"leader_id": -1, "leader_epoch": -1}
    assert part["preferred_read_replica"] == -1
    assert got["responses"][0]["topic"] == ""      # v13+ has topic ids instead


def test_bytes_decode_to_bytes_and_uuid_to_uuid():
    data = m.encode_response("SaslAuthenticate", 2, 1, {"auth_bytes": bytearray(b"tok")})
    _, body = m.decode_response("SaslAuthenticate", 2, data[4:])
    assert type(body["auth_bytes"]) is bytes and body["auth_bytes"] == b"tok"
    data = m.encode_response("Metadata", 12, 1, {"topics": [{"name": "a", "topic_id": uuid.UUID(int=7)}]})
    _, body = m.decode_response("Metadata", 12, data[4:])
    assert body["topics"][0]["topic_id"] == uuid.UUID(int=7)
    assert body["topics"][0]["partitions"] == []


def test_defaults_are_fresh_objects():
    _, a = m.decode_response("ApiVersions", 0, i32(1) + i16(0) + i32(0))
    a["supported_features"].append("x")
    _, b = m.decode_response("ApiVersions", 0, i32(1) + i16(0) + i32(0))
    assert b["supported_features"] == []


def test_fields_not_in_version_are_ignored_on_encode():
    a = m.encode_request("ApiVersions", 2, 1, "c", {"client_software_name": "x"})
    assert a == m.encode_request("ApiVersions", 2, 1, "c", {})


# -- errors ----------------------------------------------------------------------

@pytest.mark.parametrize("value, message", [
    (70000, "field acks: value too large"),
    ("1", "field acks: "),
    (1.5, "field acks: expected an int, got float"),
    (None, "field acks: null is not allowed"),
])
def test_encode_errors_name_message_and_field(value, message):
    with pytest.raises(EncodeError, match="^Produce v9 request: " + message):
        m.encode_request("Produce", 9, 1, "c", {"acks": value})


def test_encode_error_nested_path():
    body = {"topic_data": [{"name": "t", "partition_data": [{"index": 0}, {"index": -2**31 - 1}]}]}
    with pytest.raises(EncodeError, match=r"field topic_data\[0\]\.partition_data\[1\]\.index"):
        m.encode_request("Produce", 9, 1, "c", body)
    with pytest.raises(EncodeError, match=r"field topic_data\[0\]: expected a dict"):
        m.encode_request("Produce", 9, 1, "c", {"topic_data": ["t"]})
    with pytest.raises(EncodeError, match=r"field topic_data: expected a list"):
        m.encode_request("Produce", 9, 1, "c", {"topic_data": "t"})
    with pytest.raises(EncodeError, match=r"field topic_data\[0\]\.name: string: expected str"):
        m.encode_request("Produce", 9, 1, "c", {"topic_data": [{"name": 5}]})
    with pytest.raises(EncodeError, match="uint16|bool"):
        m.encode_request("Metadata", 9, 1, "c", {"allow_auto_topic_creation": "yes"})
    with pytest.raises(EncodeError, match=r"field topics\[0\]\.topic_id"):
        m.encode_request("Metadata", 12, 1, "c", {"topics": [{"topic_id": "x"}]})
    with pytest.raises(EncodeError, match="^Produce v9 request: expected a dict"):
        m.encode_request("Produce", 9, 1, "c", ["ab"])
    with pytest.raises(EncodeError, match="RequestHeader v2: field correlation_id"):
        m.encode_request("Produce", 9, 2**31, "c", {})


def test_unsupported_versions():
    with pytest.raises(UnsupportedVersionError, match="Produce v14"):
        m.encode_request("Produce", 14, 1, "c", {})
    with pytest.raises(UnsupportedVersionError, match="Produce v2"):      # dropped in Kafka 4 (KIP-896)
        m.encode_request("Produce", 2, 1, "c", {})
    with pytest.raises(UnsupportedVersionError):
        m.decode_response("Produce", -1, b"")
    with pytest.raises(KeyError):
        m.api("NoSuchApi")


def test_decode_errors_name_api_version_and_field():
    with pytest.raises(DecodeError, match=r"^Produce v9 response: truncated input: .*\(at responses\)"):
        m.decode_response("Produce", 9, i32(1) + b"\x00")
    with pytest.raises(DecodeError, match="^Produce v9 response: header: "):
        m.decode_response("Produce", 9, b"\x00\x00")
    with pytest.raises(DecodeError, match="unexpected bytes after the body"):
        m.decode_response("Heartbeat", 0, i16(0) + i32(1) + b"\x00\x00")
    with pytest.raises(DecodeError):
        m.peek_correlation_id(b"\x00")


def test_decode_request_unknown_api_and_version():
    with pytest.raises(UnsupportedVersionError) as info:
        m.decode_request(i16(18) + i16(99) + i32(1234) + s16("c"))
    assert (info.value.api_key, info.value.api_version, info.value.correlation_id) == (18, 99, 1234)
    with pytest.raises(UnsupportedVersionError, match="api key 999"):
        m.decode_request(i16(999) + i16(0) + i32(1) + s16("c"))
    with pytest.raises(DecodeError):
        m.decode_request(b"\x00\x12")


def test_invalid_utf8_is_a_decode_error():
    payload = i32(1) + i16(0) + s16("ok")[:2] + b"\xff\xfe"   # a "string" of bad UTF-8
    with pytest.raises(DecodeError):
        m.decode_response("SaslHandshake", 0, payload[:4] + i16(0) + i32(1) + i16(2) + b"\xff\xfe")


# -- Api objects -----------------------------------------------------------------

def test_api_objects():
    produce_api = m.api("Produce")
    assert m.api(0) is produce_api and m.APIS_BY_NAME["Produce"] is produce_api
    assert (produce_api.key, produce_api.min_version, produce_api.max_version) == (0, 3, 13)
    assert produce_api.request is produce.REQUEST and produce_api.response is produce.RESPONSE
    assert not produce_api.is_flexible(8) and produce_api.is_flexible(9)
    assert produce_api.request_header_version(8) == 1 and produce_api.request_header_version(9) == 2
    assert produce_api.response_header_version(8) == 0 and produce_api.response_header_version(9) == 1
    av = m.api("ApiVersions")
    assert av.request_header_version(3) == 2 and av.response_header_version(3) == 0
    sasl = m.api("SaslHandshake")
    assert sasl.flexible_from is None and sasl.request_header_version(1) == 1
    dc = m.api("DescribeCluster")
    assert dc.request_header_version(0) == 2 and dc.response_header_version(0) == 1
    # one Api object per API the schema generator writes (tools/gen_schema.py's list)
    import importlib.util
    from pathlib import Path
    spec = importlib.util.spec_from_file_location(
        "gen_schema", Path(__file__).resolve().parent.parent / "tools" / "gen_schema.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert len(m.APIS_BY_KEY) == len(gen.APIS) and m.api("UnregisterController").key == 94


def test_api_index_says_what_each_schema_module_says():
    """The index an Api is built from (its module is imported on first use,
    issue 27) agrees with the module: name, key, versions, flexibility."""
    from kproto.schema import API_INDEX, API_MODULES

    assert [entry.load() for entry in API_INDEX] == list(API_MODULES)
    for entry in API_INDEX:
        module = entry.load()
        a = m.api(entry.name)
        assert (module.NAME, module.API_KEY) == (entry.name, entry.api_key) == (a.name, a.key)
        assert module.REQUEST["valid"] == module.RESPONSE["valid"] == entry.valid == (a.min_version, a.max_version)
        assert module.REQUEST["flexible"] == entry.flexible == a.flexible_from
        assert bool(module.REQUEST.get("latest_unstable")) is entry.latest_unstable is a.latest_unstable
        assert a.request is module.REQUEST and a.response is module.RESPONSE


def test_unknown_schema_attribute_is_an_attribute_error():
    import kproto.schema

    with pytest.raises(AttributeError, match="module 'kproto.schema' has no attribute 'API_MODULE'"):
        kproto.schema.API_MODULE  # noqa: B018


def test_plans_are_cached():
    assert _codec.get_plan(fetch.REQUEST, 15) is _codec.get_plan(fetch.REQUEST, 15)
    assert m.api("Fetch").request_plan(15) is _codec.get_plan(fetch.REQUEST, 15)
    with pytest.raises(ValueError):
        _codec.get_plan(metadata.REQUEST, 14)


def test_fetch_v15_replica_state_tagged_struct_default_not_written():
    base = {"max_wait_ms": 500, "min_bytes": 1, "max_bytes": 1 << 20, "topics": []}
    a = m.encode_request("Fetch", 15, 1, "c", base)
    b = m.encode_request("Fetch", 15, 1, "c", dict(base, replica_state={"replica_id": -1, "replica_epoch": -1}))
    assert a == b
    c = m.encode_request("Fetch", 15, 1, "c", dict(base, replica_state={"replica_id": 3, "replica_epoch": 4}))
    assert c != a
    header, body = m.decode_request(c[4:])
    assert body["replica_state"] == {"replica_id": 3, "replica_epoch": 4}
    header, body = m.decode_request(a[4:])
    assert body["replica_state"] == {"replica_id": -1, "replica_epoch": -1}


# -- consumer protocol structs -----------------------------------------------------

def test_consumer_protocol_subscription_bytes():
    data = m.encode_struct("ConsumerProtocolSubscription", 0, {"topics": ["a", "bc"]})
    assert data == i16(0) + i32(2) + s16("a") + s16("bc") + i32(-1)
    version, value = m.decode_struct("ConsumerProtocolSubscription", data)
    assert version == 0
    assert value == {"topics": ["a", "bc"], "user_data": None, "owned_partitions": [],
                     "generation_id": -1, "rack_id": None}


def test_consumer_protocol_assignment_round_trip_and_newer_version():
    value = {"assigned_partitions": [{"topic": "t", "partitions": [0, 2]}], "user_data": b"u"}
    data = m.encode_struct("ConsumerProtocolAssignment", 3, value)
    assert data == (i16(3) + i32(1) + s16("t") + i32(2) + i32(0) + i32(2) + i32(1) + b"u")
    assert m.decode_struct("ConsumerProtocolAssignment", data) == (3, value)
    # a newer version (that may append fields) is read with our newest layout
    newer = i16(9) + data[2:] + b"future"
    assert m.decode_struct("ConsumerProtocolAssignment", newer) == (9, value)
    with pytest.raises(DecodeError):
        m.decode_struct("ConsumerProtocolAssignment", b"\x00")
    with pytest.raises(DecodeError):
        m.decode_struct("ConsumerProtocolAssignment", i16(-1))


def test_reader_pos_and_plan_introspection():
    plan = _codec.get_plan(produce.RESPONSE, 10)
    names = [f.name for f in plan.fields]
    assert names == ["responses", "throttle_time_ms", "node_endpoints"]
    ne = plan.fields[2]
    assert ne.present and ne.tagged and ne.tag == 0 and ne.kind_name == "array"
    r = Reader(b"\x01\x00\x00\x00\x07\x00++")
    assert _codec.decode(plan, r) == {"responses": [], "throttle_time_ms": 7, "node_endpoints": []}
    assert r.pos == 6


# -- strict bodies: a typo or another version's field is an error, not a default --

def test_a_key_naming_no_field_is_refused_with_the_key_and_the_message():
    body = {"group_id": "g", "generaton_id": 7, "member_id": "m", "group_instance_id": None}
    with pytest.raises(EncodeError) as exc:
        m.encode_request("Heartbeat", 4, 1, "c", body)
    text = str(exc.value)
    assert "'generaton_id'" in text and "Heartbeat v4 request" in text and "generation_id" in text


def test_a_typo_deep_in_a_body_names_its_path():
    body = {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "timestmap": 5}]}]}
    with pytest.raises(EncodeError, match=r"topics\[0\]\.partitions\[0\].*'timestmap'"):
        m.encode_request("ListOffsets", 7, 1, "c", body)


def test_a_field_the_version_lacks_is_refused_when_it_carries_a_value():
    # FindCoordinator v4+ asks by coordinator_keys: a body with only `key`
    # would ask for nothing, so the codec says so.
    with pytest.raises(EncodeError, match=r"FindCoordinator v4 request.*'key'.*versions 0-3"):
        m.encode_request("FindCoordinator", 4, 1, "c", {"key": "g", "key_type": 0})
    # LeaveGroup v3+ names the members leaving in a list (KIP-345).
    with pytest.raises(EncodeError, match=r"LeaveGroup v3 request.*'member_id'.*0-2"):
        m.encode_request("LeaveGroup", 3, 1, "c", {"group_id": "g", "member_id": "m"})


def test_another_versions_field_at_its_default_or_marked_ignorable_is_accepted():
    # At its default the field says nothing, so nothing is lost.
    m.encode_request("FindCoordinator", 4, 1, "c", {"key": "", "key_type": 0, "coordinator_keys": ["g"]})
    # client_software_name is ignorable in the schema (ApiVersions v3+), as
    # Produce's topic name is from v13 (the sender picks v12 while any topic
    # id is unknown): Java's generated messages drop those too.
    m.encode_request("ApiVersions", 0, 1, "c", {"client_software_name": "kio"})


def test_responses_may_carry_other_versions_fields():
    # A (test) broker writes one response dict for every version it serves.
    body = {"error_code": 0, "node_id": 1, "host": "h", "port": 9092,
            "coordinators": [{"key": "g", "node_id": 1, "host": "h", "port": 9092}]}
    for v in (0, 3, 4, 6):
        m.encode_response("FindCoordinator", v, 1, body)
    with pytest.raises(EncodeError, match="'nod_id'"):
        m.encode_response("FindCoordinator", 6, 1, dict(body, nod_id=1))
