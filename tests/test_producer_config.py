"""Producer configuration: names, values, conflicts, serializers; the in-order ack helper."""
import pytest

from kproto.config import ConfigDef, ConfigError, Setting, normalize_name
from kproto.producer import InOrderAcks, ProducerCore, SerializationError, parse_producer_config

B = {"bootstrap.servers": "127.0.0.1:9092"}


def parse(**kw):
    return parse_producer_config(dict(B), **kw)


def test_dotted_and_underscored_names_are_the_same_setting():
    assert parse(linger_ms=7).linger_ms == 7
    assert parse_producer_config({**B, "linger.ms": 7})["linger_ms"] == 7
    assert normalize_name("Max_In.Flight_Requests_Per_Connection") == "max.in.flight.requests.per.connection"
    with pytest.raises(ConfigError, match="name the same setting 'linger.ms'"):
        parse_producer_config({**B, "linger.ms": 1}, linger_ms=2)


def test_defaults_follow_kafka():
    # except batch.size: 256 KiB, not 16 KiB (docs/guides/producer.md, "Producer defaults")
    c = parse()
    assert (c.acks, c.enable_idempotence, c.batch_size, c.buffer_memory, c.max_block_ms,
            c.delivery_timeout_ms, c.request_timeout_ms, c.max_in_flight_requests_per_connection,
            c.retries) == (-1, True, 262144, 32 * 1024 * 1024, 60000, 120000, 30000, 5, 2147483647)


def test_unknown_key_suggests_the_near_miss():
    with pytest.raises(ConfigError, match="unknown configuration key 'linger.sm'; did you mean 'linger.ms'"):
        parse_producer_config({**B, "linger.sm": 5})
    with pytest.raises(ConfigError, match="'bootstrap_server'.*did you mean 'bootstrap.servers'"):
        parse_producer_config({"bootstrap_server": "x:1"})
    with pytest.raises(ConfigError, match="unknown configuration key 'zzz'$"):
        parse(zzz=1)


@pytest.mark.parametrize("key,value,match", [
    ("linger_ms", -1, r"invalid value -1 for linger.ms: must be in \[0, \+inf\]"),
    ("linger_ms", "soon", "invalid value 'soon' for linger.ms"),
    ("acks", 2, "must be 0, 1, 'all' or -1"),
    ("enable_idempotence", "maybe", "expected true or false"),
    ("compression_type", "brotli", "compression.type"),
    ("batch_size", True, "not a bool"),
    ("value_serializer", 5, "must be a callable"),
    ("partitioner", "roundrobin", "partitioner"),
])
def test_bad_values_are_clear(key, value, match):
    with pytest.raises(ConfigError, match=match):
        parse(**{key: value})


def test_value_conversions():
    assert parse(acks="all").acks == -1 and parse(acks="1").acks == 1 and parse(acks=0).acks == 0
    assert parse(linger_ms="12").linger_ms == 12
    assert parse(enable_idempotence="false").enable_idempotence is False
    assert parse(compression_type="zstd").compression_type == 4
    assert parse(compression_type="none").compression_type == 0
    assert parse_producer_config({"bootstrap.servers": "a:1,b:2"}).bootstrap_servers == ["a:1", "b:2"]


def test_bootstrap_servers_required():
    with pytest.raises(ConfigError, match="bootstrap.servers is required"):
        parse_producer_config({})


def test_default_idempotence_silently_disabled_by_conflicting_explicit_settings():
    assert parse(acks=1).enable_idempotence is False
    assert parse(acks=0).enable_idempotence is False
    assert parse(retries=0).enable_idempotence is False
    assert parse(max_in_flight_requests_per_connection=6).enable_idempotence is False
    assert parse(acks="all").enable_idempotence is True


def test_explicit_idempotence_with_conflicts_is_an_error():
    with pytest.raises(ConfigError, match="enable.idempotence=true conflicts with acks=1"):
        parse(enable_idempotence=True, acks=1)
    with pytest.raises(ConfigError, match="max.in.flight.requests.per.connection=6"):
        parse(enable_idempotence=True, max_in_flight_requests_per_connection=6)
    with pytest.raises(ConfigError, match="retries=0"):
        parse(enable_idempotence=True, retries=0)
    assert parse(enable_idempotence=False, acks=1).acks == 1


def test_transactional_id_requires_idempotence():
    with pytest.raises(ConfigError, match="transactional.id requires enable.idempotence=true"):
        parse(transactional_id="tx", enable_idempotence=False)
    with pytest.raises(ConfigError, match="transactional.id requires idempotence"):
        parse(transactional_id="tx", acks=1)


def test_delivery_timeout_must_cover_linger_and_request_timeout():
    with pytest.raises(ConfigError, match="delivery.timeout.ms .* must be at least"):
        parse(delivery_timeout_ms=1000, request_timeout_ms=30000)
    # not set explicitly: raised to the minimum, like Java
    assert parse(request_timeout_ms=200000).delivery_timeout_ms == 200005


def test_config_framework_is_reusable():
    d = ConfigDef([Setting("fetch.max.bytes", "int", 50, doc="x")]).extend(
        [Setting("group.id", "str", None)])
    c = d.parse({"fetch_max_bytes": "60"}, group_id="g")
    assert c.fetch_max_bytes == 60 and c.group_id == "g" and c.is_set("group.id")
    assert not c.is_set("client.id") if "client.id" in d.settings else True
    assert "fetch.max.bytes (int, default 50)" in d.doc()
    with pytest.raises(AttributeError):
        c.fetch_max_bytes = 1


def test_serialization_errors_name_the_type_and_serializer():
    core = ProducerCore(B)
    assert core.serialize("t", "clé", "v") == ("clé".encode(), b"v")
    assert core.serialize("t", None, bytearray(b"x")) == (None, b"x")
    with pytest.raises(SerializationError, match="value of type dict .* configure value.serializer"):
        core.serialize("t", None, {"a": 1})

    def to_int_bytes(v):
        return v.to_bytes(4, "big")
    core2 = ProducerCore(B, key_serializer=to_int_bytes, value_serializer=lambda v: 42)
    assert core2.serialize("t", 1, None)[0] == b"\0\0\0\1"
    with pytest.raises(SerializationError, match="key serializer .*to_int_bytes failed on a value of type str"):
        core2.serialize("t", "x", None)
    with pytest.raises(SerializationError, match="value serializer .* returned int, not bytes"):
        core2.serialize("t", None, "v")


# --- in-order acknowledgement ---------------------------------------------------------

def test_in_order_acks_release_strictly_in_submission_order():
    acks = InOrderAcks(capacity=4)
    seqs = [acks.acquire(f"pos{i}") for i in range(4)]
    assert seqs == [0, 1, 2, 3]
    assert acks.acquire("full") is None and not acks.has_room        # bounded: backpressure
    assert acks.complete(2) == []
    assert acks.complete(1) == []
    err = RuntimeError("x")
    assert acks.complete(0, err) == [(0, "pos0", err), (1, "pos1", None), (2, "pos2", None)]
    assert acks.acked_position == 3 and acks.outstanding == 1 and acks.has_room
    assert acks.acquire("pos4") == 4
    assert acks.complete(4) == []
    assert acks.complete(3) == [(3, "pos3", None), (4, "pos4", None)]
    with pytest.raises(ValueError, match="not outstanding"):
        acks.complete(3)
    assert acks.released == 5


def test_producer_constructor_reports_config_errors_before_starting():
    from kio import Producer
    with pytest.raises(ConfigError, match="did you mean 'linger.ms'"):
        Producer(bootstrap_servers="127.0.0.1:1", lingr_ms=5)
    with pytest.raises(ConfigError, match="invalid value 'x' for acks"):
        Producer({"bootstrap.servers": "127.0.0.1:1", "acks": "x"})
