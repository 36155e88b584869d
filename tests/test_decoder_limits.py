"""The message decoder's limits, and what it does with bytes after a request.

Why this exists: a frame comes from the network, so the counts in it are
hostile until checked. Like Apache Kafka's decoder, kproto refuses an array
declaring more than MAX_ARRAY_ELEMENTS (1,000,000) elements, or more than the
bytes left could hold, and a tagged-fields section declaring more than
MAX_TAGGED_FIELDS (10,000) fields -- with a DecodeError naming the message,
field and offset, before allocating anything for them. And like Kafka's broker,
``decode_request`` ignores bytes after a request's fields (librdkafka's
Metadata v9+ "all topics" request leaves 3), unless ``strict=True``; responses
stay strict. Frames are built by hand here, so each test states its bytes.
"""
import struct
import tracemalloc

import pytest

from kproto import messages as m
from kproto._wire import MAX_ARRAY_ELEMENTS, MAX_TAGGED_FIELDS, Reader, Writer
from kproto.errors import DecodeError

CORRELATION_ID = 7


def i16(v):
    return struct.pack(">h", v)


def i32(v):
    return struct.pack(">i", v)


def uvarint(v):
    w = Writer()
    w.write_uvarint(v)
    return w.getvalue()


def array_len(n, compact):
    """An array count as the codec reads it: int32, or uvarint of n + 1."""
    return uvarint(n + 1) if compact else i32(n)


def request_header(api_name, version, client_id="c"):
    """Request header v1 (classic) or v2 (flexible: an empty tagged-fields section)."""
    a = m.api(api_name)
    head = i16(a.key) + i16(version) + i32(CORRELATION_ID) + i16(len(client_id)) + client_id.encode()
    return head + (b"\x00" if a.is_flexible(version) else b"")


def request_with_first_array(api_name, version, field, n, elements):
    """A request payload (no size prefix) whose first body field, an array,
    declares n elements and carries `elements`; the other fields at their
    defaults, as encode_request writes them."""
    a = m.api(api_name)
    assert a.request_plan(version).fields[0].name == field
    compact = a.is_flexible(version)
    head = request_header(api_name, version)
    empty = m.encode_request(a, version, CORRELATION_ID, "c", {field: []})[4:]
    assert empty.startswith(head + array_len(0, compact))
    rest = empty[len(head) + len(array_len(0, compact)):]
    return head + array_len(n, compact) + elements + rest


def peak_traced_bytes(fn, *args, **kwargs):
    """Run fn (expected to raise DecodeError) and return the peak memory it
    allocated, as tracemalloc sees it (PyList_New's item array included)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        with pytest.raises(DecodeError) as info:
            fn(*args, **kwargs)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, str(info.value)


# -- the limits are Kafka's --------------------------------------------------------

def test_the_limits_are_kafkas():
    assert MAX_ARRAY_ELEMENTS == 1_000_000
    assert MAX_TAGGED_FIELDS == 10_000


# -- arrays: at most MAX_ARRAY_ELEMENTS --------------------------------------------

# (api, version, first array field, bytes of one smallest element, value decoded)
ARRAY_FORMS = [
    # classic array of classic strings ("" = int16 0)
    ("DeleteGroups", 0, "groups_names", i16(0), ""),
    # classic nullable array of structs {name: ""}
    ("Metadata", 4, "topics", i16(0), {"name": ""}),
    # compact array of compact strings ("" = uvarint 1)
    ("ListGroups", 4, "states_filter", b"\x01", ""),
    # compact nullable array of structs {name: "", no tagged fields}
    ("Metadata", 9, "topics", b"\x01\x00", {"name": ""}),
]
ARRAY_IDS = [f"{api}-v{v}-{field}" for api, v, field, _, _ in ARRAY_FORMS]


@pytest.mark.parametrize("api_name, version, field, element, value", ARRAY_FORMS, ids=ARRAY_IDS)
def test_an_array_of_the_limit_decodes_and_one_more_element_is_refused(
        api_name, version, field, element, value):
    n = MAX_ARRAY_ELEMENTS
    header, body = m.decode_request(request_with_first_array(api_name, version, field, n, element * n))
    got = body[field]
    assert len(got) == n
    for item in (got[0], got[-1]):
        assert item == value if isinstance(value, str) else value.items() <= item.items()
    del got, body
    # One more element, and all its bytes present: refused for the count alone,
    # before the list is allocated (8 MB of item pointers alone).
    payload = request_with_first_array(api_name, version, field, n + 1, element * (n + 1))
    peak, msg = peak_traced_bytes(m.decode_request, payload)
    offset = len(request_header(api_name, version))
    assert msg == (f"{m.api(api_name).name} v{version} request: array length {n + 1} at offset "
                   f"{offset} exceeds the limit of {MAX_ARRAY_ELEMENTS} elements (Kafka's) "
                   f"(at {field})")
    assert peak < 1_000_000, f"{peak} bytes allocated before refusing"


def test_a_response_array_over_the_limit_is_refused():
    # SaslHandshake v0 response: correlation id, error_code, mechanisms []string
    def payload(n):
        return i32(CORRELATION_ID) + i16(0) + i32(n) + i16(0) * n

    n = MAX_ARRAY_ELEMENTS
    assert len(m.decode_response("SaslHandshake", 0, payload(n))[1]["mechanisms"]) == n
    peak, msg = peak_traced_bytes(m.decode_response, "SaslHandshake", 0, payload(n + 1))
    assert msg == (f"SaslHandshake v0 response: array length {n + 1} at offset 6 exceeds the "
                   f"limit of {MAX_ARRAY_ELEMENTS} elements (Kafka's) (at mechanisms)")
    assert peak < 1_000_000


def test_a_nested_array_over_the_limit_is_refused_and_its_path_named():
    # Metadata v12 response, topics[0].partitions[0].replica_nodes: a compact
    # []int32, spliced in where encode_response wrote a one-element marker.
    marker = 0x5A5A5A5A
    value = {"topics": [{"name": "t", "partitions": [{"replica_nodes": [marker]}]}]}
    frame = m.encode_response("Metadata", 12, CORRELATION_ID, value)[4:]
    one = array_len(1, True) + i32(marker)
    assert frame.count(one) == 1
    at = frame.index(one)

    def payload(n):
        return frame[:at] + array_len(n, True) + i32(0) * n + frame[at + len(one):]

    n = MAX_ARRAY_ELEMENTS
    body = m.decode_response("Metadata", 12, payload(n))[1]
    assert len(body["topics"][0]["partitions"][0]["replica_nodes"]) == n
    del body
    peak, msg = peak_traced_bytes(m.decode_response, "Metadata", 12, payload(n + 1))
    assert msg == (f"Metadata v12 response: array length {n + 1} at offset {at} exceeds the "
                   f"limit of {MAX_ARRAY_ELEMENTS} elements (Kafka's) "
                   f"(at topics[0].partitions[0].replica_nodes)")
    assert peak < 1_000_000


def test_the_wire_readers_bound_array_lengths_by_the_limit():
    n = MAX_ARRAY_ELEMENTS
    assert Reader(i32(n) + bytes(n)).read_array_len() == n
    assert Reader(uvarint(n + 1) + bytes(n)).read_compact_array_len() == n
    with pytest.raises(DecodeError, match=f"^array length {n + 1} at offset 0 exceeds the limit of {n} "):
        Reader(i32(n + 1) + bytes(n + 1)).read_array_len()
    with pytest.raises(DecodeError, match=f"^array length {n + 1} at offset 0 exceeds the limit of {n} "):
        Reader(uvarint(n + 2) + bytes(n + 1)).read_compact_array_len()


# -- arrays: no more elements than bytes left ----------------------------------------

@pytest.mark.parametrize("api_name, version, field, element, value", ARRAY_FORMS, ids=ARRAY_IDS)
def test_a_huge_count_in_a_small_frame_fails_fast_without_allocating(
        api_name, version, field, element, value):
    # The largest count the wire form can say (2**31-1 classic, 2**32-2
    # compact), in a frame with 16 bytes after it: refused at once, and
    # nothing like a 16 GB list allocated first.
    compact = m.api(api_name).is_flexible(version)
    head = request_header(api_name, version)
    count, n = (uvarint(2**32 - 1), 2**32 - 2) if compact else (i32(2**31 - 1), 2**31 - 1)
    payload = head + count + bytes(16)
    peak, msg = peak_traced_bytes(m.decode_request, payload)
    assert msg == (f"{api_name} v{version} request: array length {n} at offset {len(head)} "
                   f"exceeds the 16 bytes remaining (at {field})")
    assert peak < 100_000
    # The same holds for a count under MAX_ARRAY_ELEMENTS that the bytes left
    # cannot hold (each element takes at least one byte).
    payload = head + array_len(1000, compact) + bytes(16)
    with pytest.raises(DecodeError, match=f"array length 1000 at offset {len(head)} exceeds the "
                                          f"16 bytes remaining \\(at {field}\\)$"):
        m.decode_request(payload)


# -- tagged fields: at most MAX_TAGGED_FIELDS per section ------------------------------

def tagged_section(count):
    """count tagged fields with unknown tags 1000, 1001, ... and empty values."""
    return uvarint(count) + b"".join(uvarint(1000 + i) + b"\x00" for i in range(count))


def test_a_request_body_with_the_limit_of_tagged_fields_decodes_and_one_more_is_refused():
    # ApiVersions v3 request: client_software_name, client_software_version, tagged fields
    head = request_header("ApiVersions", 3)
    fields = b"\x04kio\x041.0"
    header, body = m.decode_request(head + fields + tagged_section(MAX_TAGGED_FIELDS), strict=True)
    assert (body["client_software_name"], body["client_software_version"]) == ("kio", "1.0")
    with pytest.raises(DecodeError) as info:
        m.decode_request(head + fields + tagged_section(MAX_TAGGED_FIELDS + 1))
    assert str(info.value) == (
        f"ApiVersions v3 request: tagged fields at offset {len(head) + len(fields)}: "
        f"{MAX_TAGGED_FIELDS + 1} fields declared, more than the limit of {MAX_TAGGED_FIELDS} (Kafka's)")


def test_a_request_header_with_too_many_tagged_fields_is_refused():
    classic = request_header("ApiVersions", 3)[:-1]        # header v2 up to its tagged fields
    body = b"\x04kio\x041.0\x00"
    header, _ = m.decode_request(classic + tagged_section(MAX_TAGGED_FIELDS) + body)
    assert header["correlation_id"] == CORRELATION_ID
    with pytest.raises(DecodeError, match=(
            f"^ApiVersions v3 request: header: RequestHeader v2: tagged fields at offset "
            f"{len(classic)}: {MAX_TAGGED_FIELDS + 1} fields declared, more than the limit")):
        m.decode_request(classic + tagged_section(MAX_TAGGED_FIELDS + 1) + body)


def test_too_many_tagged_fields_in_a_nested_struct_are_refused_and_its_path_named():
    # Metadata v9 request, topics[0] = {name: ""} and its tagged fields
    head = request_header("Metadata", 9)

    def payload(count):
        topics = array_len(1, True) + b"\x01" + tagged_section(count)
        return head + topics + b"\x00\x00\x00" + b"\x00"     # three bools, tagged fields

    _, body = m.decode_request(payload(MAX_TAGGED_FIELDS), strict=True)
    assert [t["name"] for t in body["topics"]] == [""]
    with pytest.raises(DecodeError) as info:
        m.decode_request(payload(MAX_TAGGED_FIELDS + 1))
    assert str(info.value) == (
        f"Metadata v9 request: tagged fields at offset {len(head) + 2}: {MAX_TAGGED_FIELDS + 1} "
        f"fields declared, more than the limit of {MAX_TAGGED_FIELDS} (Kafka's) (at topics[0])")


def test_a_response_with_too_many_tagged_fields_is_refused():
    # Heartbeat v4 response: header v1 (correlation id, tagged fields), throttle, error, tagged fields
    def payload(count):
        return i32(CORRELATION_ID) + b"\x00" + i32(0) + i16(0) + tagged_section(count)

    assert m.decode_response("Heartbeat", 4, payload(MAX_TAGGED_FIELDS))[1]["error_code"] == 0
    with pytest.raises(DecodeError, match=(
            f"^Heartbeat v4 response: tagged fields at offset 11: {MAX_TAGGED_FIELDS + 1} fields "
            f"declared, more than the limit of {MAX_TAGGED_FIELDS}")):
        m.decode_response("Heartbeat", 4, payload(MAX_TAGGED_FIELDS + 1))
    # The largest count a uvarint32 can say, and nothing after it: the count is refused first.
    with pytest.raises(DecodeError, match=f"{2**32 - 1} fields declared, more than the limit"):
        m.decode_response("Heartbeat", 4, i32(CORRELATION_ID) + b"\x00" + i32(0) + i16(0)
                          + uvarint(2**32 - 1))


# -- bytes after the body --------------------------------------------------------------

def librdkafka_all_topics_metadata_request(version, allow_auto_create_topics=True):
    """librdkafka's Metadata v9+ request for all topics, byte for byte
    (rd_kafka_MetadataRequest0): header v2, then the 4-byte placeholder of the
    topics count (rd_kafka_buf_write_arraycnt_pos) left at zero -- "varint
    encoded null, all topics" -- AllowAutoTopicCreation, v9-10's
    IncludeClusterAuthorizedOperations, IncludeTopicAuthorizedOperations, and
    the empty tagged fields rd_kafka_buf_finalize appends."""
    body = b"\x00\x00\x00\x00" + bytes([allow_auto_create_topics])
    if version <= 10:
        body += b"\x00"
    body += b"\x00" + b"\x00"
    return request_header("Metadata", version, client_id="rdkafka") + body


def test_librdkafkas_all_topics_metadata_request_decodes_as_kafka_reads_it():
    # Kafka reads the fields from the front and ignores the rest: the topics
    # count is the placeholder's first byte (null: all topics), the next zero
    # bytes are the booleans and the (empty) tagged fields, and 3 bytes are
    # left over.
    frame = librdkafka_all_topics_metadata_request(12)
    header, body = m.decode_request(frame)
    assert header == {"api_key": 3, "api_version": 12, "correlation_id": CORRELATION_ID,
                      "client_id": "rdkafka"}
    assert body["topics"] is None
    assert body["allow_auto_topic_creation"] is False
    assert body["include_topic_authorized_operations"] is False
    with pytest.raises(DecodeError, match="^Metadata v12 request: 3 unexpected bytes after the body"):
        m.decode_request(frame, strict=True)


@pytest.mark.parametrize("version", range(9, m.api("Metadata").max_version + 1))
@pytest.mark.parametrize("allow_auto_create_topics", [False, True])
def test_every_flexible_librdkafka_all_topics_metadata_request_decodes(version, allow_auto_create_topics):
    frame = librdkafka_all_topics_metadata_request(version, allow_auto_create_topics)
    assert m.decode_request(frame)[1]["topics"] is None
    with pytest.raises(DecodeError, match="unexpected bytes after the body"):
        m.decode_request(frame, strict=True)


def test_trailing_bytes_are_ignored_after_a_request_only():
    request = m.encode_request("Heartbeat", 4, CORRELATION_ID, "c",
                               {"group_id": "g", "generation_id": 3, "member_id": "m"})[4:]
    header, body = m.decode_request(request + b"\xff" * 5)
    assert body["generation_id"] == 3 and body["member_id"] == "m"
    assert m.decode_request(request, strict=True) == (header, body)
    with pytest.raises(DecodeError, match="^Heartbeat v4 request: 5 unexpected bytes after the body"):
        m.decode_request(request + b"\xff" * 5, strict=True)
    # A response is still refused: the client asked for this version, so bytes
    # left over mean the two sides disagree on the layout.
    response = m.encode_response("Heartbeat", 4, CORRELATION_ID, {})[4:]
    with pytest.raises(DecodeError, match="^Heartbeat v4 response: 2 unexpected bytes after the body"):
        m.decode_response("Heartbeat", 4, response + b"\x00\x00")
