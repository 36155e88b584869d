"""Property tests of the codec over every API, direction and version.

Why this exists: with 28 APIs, ~190 versions and two directions, hand-written
tests cannot cover the codec. Here values are generated from the compiled
plans themselves (respecting which fields exist in the version, nullability,
tagged fields), encoded through the public API, decoded back and compared; and
random bytes plus mutations (truncation, bit flips, insertions) of valid
encodings are fed to every decoder, which must raise DecodeError and nothing
else (no IndexError, OverflowError, UnicodeDecodeError, no hang).
"""
import os
import random
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kproto import _codec
from kproto import messages as m
from kproto.errors import DecodeError

# KPROTO_PROPERTY_SCALE=10 (say) runs ten times more examples, for a soak.
_SCALE = max(1, int(os.environ.get("KPROTO_PROPERTY_SCALE", "1")))
SETTINGS = settings(max_examples=12 * _SCALE, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))
FUZZ_SETTINGS = settings(max_examples=40 * _SCALE, deadline=None, database=None,
                         suppress_health_check=list(HealthCheck))

INT_RANGES = {"int8": 7, "int16": 15, "int32": 31, "int64": 63}

_TEXT = st.text(max_size=6)
_BIN = st.binary(max_size=8)


def scalar_strategy(kind_name, type_name):
    if kind_name in INT_RANGES:
        bits = INT_RANGES[kind_name]
        return st.integers(-(1 << bits), (1 << bits) - 1)
    if kind_name == "uint16":
        return st.integers(0, 0xFFFF)
    if kind_name == "uint32":
        return st.integers(0, 0xFFFFFFFF)
    if kind_name == "float64":
        return st.floats(allow_nan=False)
    if kind_name == "bool":
        return st.booleans()
    if kind_name == "uuid":
        return st.one_of(st.just(uuid.UUID(int=0)), st.uuids())
    if "string" in kind_name:
        return _TEXT
    if "bytes" in kind_name or "records" in kind_name:
        return _BIN
    raise AssertionError(kind_name)


_STRATEGY_CACHE = {}


def struct_strategy(plan):
    key = id(plan)
    if key not in _STRATEGY_CACHE:
        _STRATEGY_CACHE[key] = (plan, st.fixed_dictionaries(
            {f.name: field_strategy(f) for f in plan.fields if f.present}))
    return _STRATEGY_CACHE[key][1]


def field_strategy(f):
    if f.kind_name == "array":
        if f.elem_name == "struct":
            elem = st.deferred(lambda: struct_strategy(f.sub))
        else:
            elem = scalar_strategy(f.elem_name, f.type[2:])
        s = st.lists(elem, max_size=3)
    elif f.kind_name == "struct":
        s = struct_strategy(f.sub)
    else:
        s = scalar_strategy(f.kind_name, f.type)
    if f.nullable:
        s = st.none() | s
    return s


def expected(plan, value):
    """What decoding should give: every field, defaults where the version lacks it."""
    out = plan.make_default()
    for f in plan.fields:
        if not f.present:
            continue
        v = value[f.name]
        if v is not None and f.sub is not None:
            v = [expected(f.sub, x) for x in v] if f.kind_name == "array" else expected(f.sub, v)
        out[f.name] = v
    return out


def canonical(v):
    """Decoded values with memoryviews (records) turned into bytes."""
    if isinstance(v, dict):
        return {k: canonical(x) for k, x in v.items()}
    if isinstance(v, list):
        return [canonical(x) for x in v]
    if isinstance(v, memoryview):
        return bytes(v)
    return v


CASES = [(a.name, v) for a in sorted(m.APIS_BY_KEY.values(), key=lambda a: a.key)
         for v in range(a.min_version, a.max_version + 1)]
IDS = [f"{name}-v{v}" for name, v in CASES]


@pytest.mark.parametrize("api_name, version", CASES, ids=IDS)
@SETTINGS
@given(data=st.data())
def test_request_round_trip(api_name, version, data):
    a = m.api(api_name)
    plan = a.request_plan(version)
    value = data.draw(struct_strategy(plan), label="body")
    client_id = data.draw(st.none() | _TEXT, label="client_id")
    corr = data.draw(st.integers(-(1 << 31), (1 << 31) - 1), label="correlation_id")
    frame = m.encode_request(a, version, corr, client_id, value)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    header, body = m.decode_request(memoryview(frame)[4:])
    assert header == {"api_key": a.key, "api_version": version,
                      "correlation_id": corr, "client_id": client_id}
    assert canonical(body) == expected(plan, value)
    # re-encoding the decoded body gives the same bytes
    assert m.encode_request(a, version, corr, client_id, body) == frame


@pytest.mark.parametrize("api_name, version", CASES, ids=IDS)
@SETTINGS
@given(data=st.data())
def test_response_round_trip(api_name, version, data):
    a = m.api(api_name)
    plan = a.response_plan(version)
    value = data.draw(struct_strategy(plan), label="body")
    corr = data.draw(st.integers(-(1 << 31), (1 << 31) - 1), label="correlation_id")
    frame = m.encode_response(a, version, corr, value)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    assert m.peek_correlation_id(frame[4:]) == corr
    got_corr, body = m.decode_response(a, version, frame[4:])
    assert got_corr == corr
    if a.key == 18 and version > 0 and canonical(body) != expected(plan, value):
        # ApiVersions: a body that also parses as v0 may legitimately have taken
        # the v0 fallback only if the real version failed -- which it must not.
        pytest.fail("ApiVersions response fell back to v0 parsing of a valid encoding")
    assert canonical(body) == expected(plan, value)
    assert m.encode_response(a, version, corr, body) == frame


@pytest.mark.parametrize("name", ["ConsumerProtocolSubscription", "ConsumerProtocolAssignment"])
@SETTINGS
@given(data=st.data())
def test_consumer_protocol_round_trip(name, data):
    schema = m.STRUCT_SCHEMAS[name]
    version = data.draw(st.integers(*schema["valid"]), label="version")
    plan = _codec.get_plan(schema, version)
    value = data.draw(struct_strategy(plan), label="value")
    encoded = m.encode_struct(name, version, value)
    got_version, got = m.decode_struct(name, encoded)
    assert got_version == version
    assert got == expected(plan, value)


# -- hostile input ---------------------------------------------------------------

def mutate(data, frame):
    buf = bytearray(frame)
    how = data.draw(st.sampled_from(["truncate", "flip", "insert", "overwrite", "append"]), label="how")
    if how == "truncate":
        return bytes(buf[:data.draw(st.integers(0, max(0, len(buf) - 1)), label="cut")])
    if how == "append":
        return bytes(buf) + data.draw(st.binary(min_size=1, max_size=8), label="tail")
    if not buf:
        return b"\xff"
    pos = data.draw(st.integers(0, len(buf) - 1), label="pos")
    if how == "flip":
        buf[pos] ^= 1 << data.draw(st.integers(0, 7), label="bit")
    elif how == "insert":
        buf[pos:pos] = data.draw(st.binary(min_size=1, max_size=4), label="ins")
    else:
        buf[pos] = data.draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF]), label="byte")
    return bytes(buf)


def only_decode_errors(fn, *args):
    try:
        fn(*args)
    except DecodeError:
        pass


API_NAMES = [a.name for a in sorted(m.APIS_BY_KEY.values(), key=lambda a: a.key)]


@pytest.mark.parametrize("api_name", API_NAMES)
@FUZZ_SETTINGS
@given(data=st.data())
def test_response_decoders_raise_only_decode_error(api_name, data):
    a = m.api(api_name)
    version = data.draw(st.integers(a.min_version, a.max_version), label="version")
    if data.draw(st.booleans(), label="random"):
        payload = data.draw(st.binary(max_size=64), label="payload")
    else:
        value = data.draw(struct_strategy(a.response_plan(version)), label="body")
        payload = mutate(data, m.encode_response(a, version, 1, value)[4:])
    only_decode_errors(m.decode_response, a, version, payload)
    only_decode_errors(m.decode_response, a, version, memoryview(payload))


@pytest.mark.parametrize("api_name", API_NAMES)
@FUZZ_SETTINGS
@given(data=st.data())
def test_request_decoder_raises_only_decode_error(api_name, data):
    a = m.api(api_name)
    version = data.draw(st.integers(a.min_version, a.max_version), label="version")
    value = data.draw(struct_strategy(a.request_plan(version)), label="body")
    payload = mutate(data, m.encode_request(a, version, 1, "c", value)[4:])
    try:
        m.decode_request(payload)
    except DecodeError:
        pass
    except m.UnsupportedVersionError:
        pass  # a mutated api key / version in the header


@SETTINGS
@given(name=st.sampled_from(sorted(m.STRUCT_SCHEMAS)), payload=st.binary(max_size=48))
def test_struct_decoder_raises_only_decode_error(name, payload):
    only_decode_errors(m.decode_struct, name, payload)


@pytest.mark.parametrize("api_name, version", CASES, ids=IDS)
def test_every_truncation_of_a_default_response_fails_cleanly(api_name, version):
    a = m.api(api_name)
    frame = m.encode_response(a, version, 1, None)[4:]
    for cut in range(len(frame)):
        try:
            m.decode_response(a, version, frame[:cut])
        except DecodeError:
            continue
        # only ApiVersions may accept a prefix: the fallback to v0 parsing
        # (a v1+ body cut after api_keys is a well-formed v0 body)
        assert a.key == 18 and version > 0, f"accepted a {cut}-byte prefix"
        m.decode_response(a, 0, frame[:cut])
    m.decode_response(a, version, frame)


# -- a cheap, seeded mutation sweep (many more inputs than hypothesis runs) ------

def random_value(rnd, plan, depth=0):
    """A value for plan with every present field filled (lists of 1-2 items)."""
    out = {}
    for f in plan.fields:
        if not f.present:
            continue
        if f.nullable and rnd.random() < 0.15:
            out[f.name] = None
        elif f.kind_name == "array":
            n = rnd.randint(1, 2)
            if f.elem_name == "struct":
                out[f.name] = [random_value(rnd, f.sub, depth + 1) for _ in range(n)]
            else:
                out[f.name] = [random_scalar(rnd, f.elem_name) for _ in range(n)]
        elif f.kind_name == "struct":
            out[f.name] = random_value(rnd, f.sub, depth + 1)
        else:
            out[f.name] = random_scalar(rnd, f.kind_name)
    return out


def random_scalar(rnd, kind):
    if kind in INT_RANGES:
        bits = INT_RANGES[kind]
        return rnd.choice([0, 1, -1, rnd.randint(-(1 << bits), (1 << bits) - 1)])
    if kind in ("uint16", "uint32"):
        return rnd.randint(0, 0xFFFF)
    if kind == "float64":
        return rnd.random()
    if kind == "bool":
        return rnd.random() < 0.5
    if kind == "uuid":
        return uuid.UUID(int=rnd.getrandbits(128))
    if "string" in kind:
        return rnd.choice(["", "a", "topic-\u00e9", "x" * 20])
    return bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 12)))


def test_seeded_mutation_sweep_of_every_decoder():
    rnd = random.Random(20241028)
    for api_name, version in CASES:
        a = m.api(api_name)
        for direction in ("request", "response"):
            if direction == "request":
                value = random_value(rnd, a.request_plan(version))
                frame = m.encode_request(a, version, 7, "c", value)
                header, body = m.decode_request(frame[4:])
                assert m.encode_request(a, version, 7, "c", body) == frame
                decode = m.decode_request
            else:
                value = random_value(rnd, a.response_plan(version))
                frame = m.encode_response(a, version, 7, value)
                body = m.decode_response(a, version, frame[4:])[1]
                assert m.encode_response(a, version, 7, body) == frame

                def decode(p, a=a, version=version):
                    return m.decode_response(a, version, p)
            payload = frame[4:]
            for _ in range(300 * _SCALE):
                buf = bytearray(payload)
                op = rnd.randrange(4)
                pos = rnd.randrange(len(buf))
                if op == 0:
                    del buf[pos:]
                elif op == 1:
                    buf[pos] ^= 1 << rnd.randrange(8)
                elif op == 2:
                    buf[pos:pos] = bytes([rnd.choice([0, 0x7F, 0x80, 0xFF, rnd.randrange(256)])])
                else:
                    buf[pos] = rnd.choice([0x00, 0x7F, 0x80, 0xFF])
                try:
                    decode(bytes(buf))
                except (DecodeError, m.UnsupportedVersionError):
                    pass
