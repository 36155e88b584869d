"""Kafka requests and responses as plain dicts: the public face of the codec.

Why this exists: the I/O drivers (kio) and the client logic need one small,
stable API to turn a request body (a dict keyed by snake_case field names) into
a complete size-prefixed frame, and a response frame back into a dict -- with
the right header version for every API and version. This module wraps the
schema tables (:mod:`kproto.schema`) and the compiled codec engine
(:mod:`kproto._codec`) into:

- :class:`Api` objects (``APIS_BY_KEY``, ``APIS_BY_NAME``, :func:`api`);
- client side: :func:`encode_request` (a body as a dict, or an
  :class:`EncodedBody` written by a typed writer of its own),
  :func:`decode_response`, :func:`peek_correlation_id`;
- server side (scripted brokers in tests): :func:`decode_request`,
  :func:`encode_response`;
- the consumer protocol's embedded structs: :func:`encode_struct`,
  :func:`decode_struct`.

Decoded dicts hold every field of the schema: fields the version lacks (and
tagged fields not sent) carry their defaults. Errors name the API, version and
direction, e.g. ``"Produce v9 response: truncated input: ..."``.
"""
from __future__ import annotations

from kproto import _codec
from kproto._wire import Reader, Writer
from kproto.errors import DecodeError, EncodeError, UnsupportedVersionError
from kproto.schema import API_INDEX, ApiEntry
from kproto.schema import consumer_protocol as _consumer_protocol
from kproto.schema import headers as _headers

__all__ = [
    "Api", "APIS_BY_KEY", "APIS_BY_NAME", "api",
    "encode_request", "EncodedBody", "decode_response", "peek_correlation_id",
    "decode_request", "encode_response",
    "encode_struct", "decode_struct", "STRUCT_SCHEMAS",
]

API_VERSIONS_KEY = 18


class Api:
    """One Kafka API (a request/response pair) and the versions this client knows."""

    __slots__ = ("key", "name", "min_version", "max_version", "flexible_from",
                 "latest_unstable", "_entry", "_req_plans", "_resp_plans")

    def __init__(self, entry: ApiEntry):
        self.key = entry.api_key
        self.name = entry.name
        self.min_version, self.max_version = entry.valid
        #: first flexible version (compact encodings + tagged fields), or None
        self.flexible_from = entry.flexible
        #: True when the official definitions mark max_version as not yet stable
        self.latest_unstable = entry.latest_unstable
        # the schema module is imported with the first plan asked for (issue 27)
        self._entry = entry
        n = self.max_version + 1
        self._req_plans = [None] * n
        self._resp_plans = [None] * n

    @property
    def request(self) -> dict:
        """The request's schema table (its module is imported on first use)."""
        return self._entry.load().REQUEST

    @property
    def response(self) -> dict:
        """The response's schema table (its module is imported on first use)."""
        return self._entry.load().RESPONSE

    def __repr__(self):
        return f"<Api {self.name} key={self.key} v{self.min_version}-v{self.max_version}>"

    def has_version(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version

    def check_version(self, version: int) -> None:
        """Raise UnsupportedVersionError unless this client knows the version."""
        if not (isinstance(version, int) and self.min_version <= version <= self.max_version):
            raise UnsupportedVersionError(
                f"{self.name} v{version} is not supported by this client "
                f"(v{self.min_version}-v{self.max_version})")

    def is_flexible(self, version: int) -> bool:
        return self.flexible_from is not None and version >= self.flexible_from

    def request_header_version(self, version: int) -> int:
        """Request header v2 for flexible versions, else v1."""
        return 2 if self.is_flexible(version) else 1

    def response_header_version(self, version: int) -> int:
        """Response header v1 for flexible versions, else v0 -- except that
        ApiVersions responses always use v0 (a client that does not know the
        broker's versions yet must be able to read the correlation id)."""
        if self.key == API_VERSIONS_KEY:
            return 0
        return 1 if self.is_flexible(version) else 0

    def request_plan(self, version: int):
        """The compiled codec plan of the request body in this version."""
        try:
            plan = self._req_plans[version] if version >= 0 else None
        except (IndexError, TypeError):
            plan = None
        if plan is None:
            self.check_version(version)
            plan = self._req_plans[version] = _codec.get_plan(self.request, version)
        return plan

    def response_plan(self, version: int):
        """The compiled codec plan of the response body in this version."""
        try:
            plan = self._resp_plans[version] if version >= 0 else None
        except (IndexError, TypeError):
            plan = None
        if plan is None:
            self.check_version(version)
            plan = self._resp_plans[version] = _codec.get_plan(self.response, version)
        return plan


#: Every API this client implements, by api key and by name ("Produce").
APIS_BY_KEY: dict[int, Api] = {}
APIS_BY_NAME: dict[str, Api] = {}
for _entry in API_INDEX:
    _a = Api(_entry)
    APIS_BY_KEY[_a.key] = _a
    APIS_BY_NAME[_a.name] = _a
del _entry, _a


def api(name_or_key) -> Api:
    """The Api for a name ("Produce"), an api key (0) or an Api (returned as is).

    Raises KeyError for an API this client does not implement."""
    if isinstance(name_or_key, Api):
        return name_or_key
    found = (APIS_BY_NAME.get(name_or_key) if isinstance(name_or_key, str)
             else APIS_BY_KEY.get(name_or_key))
    if found is None:
        raise KeyError(f"unknown or unimplemented Kafka API: {name_or_key!r}")
    return found


# Request header v0 (no client id) served only ControlledShutdown v0, which Kafka
# 4 dropped along with it; this client sends v1 or v2 (request_header_version).
_REQUEST_HEADER_PLANS = {v: _codec.get_plan(_headers.REQUEST_HEADER, v)
                         for v in range(_headers.REQUEST_HEADER["valid"][0],
                                        _headers.REQUEST_HEADER["valid"][1] + 1)}
_RESPONSE_HEADER_PLANS = [_codec.get_plan(_headers.RESPONSE_HEADER, v) for v in range(2)]


def _check_end(r: Reader, label: str) -> None:
    n = r.remaining()
    if n:
        raise DecodeError(f"{label}: {n} unexpected bytes after the body (offset {r.pos})")


# -- client side ------------------------------------------------------------------

class EncodedBody:
    """A request body already encoded, for one API and version: the
    producer writes its Produce requests in C straight from its batches
    (kproto/producer/_produce_request.pyx), where the generic codec would
    need a dict per partition first. :func:`encode_request` puts the bytes
    after the header as they are."""

    __slots__ = ("api_key", "version", "data")

    def __init__(self, api_key: int, version: int, data: bytes):
        self.api_key = api_key
        self.version = version
        self.data = data

    def __repr__(self):
        return f"<EncodedBody api_key={self.api_key} v{self.version} {len(self.data)} bytes>"


def encode_request(api_, version: int, correlation_id: int, client_id, body) -> bytes:
    """A complete request frame: 4-byte big-endian size, header, body.

    api_ is an Api, a name or a key; client_id a str or None; body a dict
    (missing fields take their defaults; None means all defaults) or an
    :class:`EncodedBody` of this API and version."""
    a = api(api_)
    encoded = type(body) is EncodedBody
    if encoded and (body.api_key != a.key or body.version != version):
        raise EncodeError(f"{a.name} v{version} request: the body was encoded for api key "
                          f"{body.api_key} v{body.version}")
    w = Writer()
    w.write_int32(0)
    if encoded:
        # A body written by a typed writer is sent per round (the consumer's
        # Fetch, the producer's Produce): its header is written field by field
        # as the header plan would (request header v1: key, version,
        # correlation id, nullable client id; v2 adds empty tagged fields),
        # without a header dict and a walk of the plan. The twin tests
        # (tests/test_fetch_request_writer.py) compare the frames with the
        # codec's.
        w.write_int16(a.key)
        w.write_int16(version)
        w.write_int32(correlation_id)
        w.write_nullable_string(client_id)
        if a.request_header_version(version) >= 2:
            w.write_uvarint(0)
        w.write_raw(body.data)
        w.write_int32_at(0, len(w) - 4)
        return w.getvalue()
    plan = a.request_plan(version)
    header = {"request_api_key": a.key, "request_api_version": version,
              "correlation_id": correlation_id, "client_id": client_id}
    try:
        _codec.encode(_REQUEST_HEADER_PLANS[a.request_header_version(version)], header, w)
    except EncodeError as exc:
        raise EncodeError(f"{a.name} v{version} request: {exc}") from None
    _codec.encode(plan, {} if body is None else body, w)
    w.write_int32_at(0, len(w) - 4)
    return w.getvalue()


def peek_correlation_id(payload) -> int:
    """The correlation id of a response frame body (the first 4 bytes)."""
    try:
        return Reader(payload).read_int32()
    except DecodeError as exc:
        raise DecodeError(f"response header: {exc}") from None


def decode_response(api_, version: int, payload):
    """Decode a response frame body (without its size prefix).

    Returns (correlation_id, body dict). Raises DecodeError on malformed or
    truncated input, or trailing bytes after the body."""
    # Trailing bytes stay an error here, unlike in decode_request. Kafka's Java
    # client does not check for them (AbstractResponse.parseResponse reads the
    # fields and stops), but we keep refusing them: we know the version we asked
    # for, a broker writes exactly that schema, so bytes left over mean the two
    # disagree about the layout and the fields read are likely wrong -- better
    # said than guessed. The ApiVersions v0 fallback below also relies on it to
    # tell a v0 answer from the version asked for.
    a = api(api_)
    plan = a.response_plan(version)
    r = Reader(payload)
    try:
        if a.response_header_version(version) == 0:
            correlation_id = r.read_int32()
        else:
            correlation_id = _codec.decode(_RESPONSE_HEADER_PLANS[1], r)["correlation_id"]
    except DecodeError as exc:
        raise DecodeError(f"{a.name} v{version} response: header: {exc}") from None
    start = r.pos
    try:
        body = _codec.decode(plan, r)
        _check_end(r, plan.label)
    except DecodeError as exc:
        if a.key != API_VERSIONS_KEY or version == 0:
            raise
        # A broker that does not support our ApiVersions version answers in v0
        # (error UNSUPPORTED_VERSION, plus its own ApiVersions range); Kafka's
        # clients parse such a response as v0 when the requested version fails.
        body = _decode_v0_fallback(a, r, start)
        if body is None:
            raise exc
    return correlation_id, body


def _decode_v0_fallback(a: Api, r: Reader, start: int):
    r.pos = start
    plan0 = a.response_plan(0)
    try:
        body = _codec.decode(plan0, r)
        _check_end(r, plan0.label)
    except DecodeError:
        return None
    return body


# -- server side (scripted brokers) ----------------------------------------------

def decode_request(payload, *, strict: bool = False):
    """Decode a request frame body (without its size prefix), as a broker does.

    Returns (header, body) where header is {api_key, api_version,
    correlation_id, client_id}. An api key or version this module does not
    implement raises UnsupportedVersionError carrying .api_key, .api_version
    and .correlation_id (so a broker can still answer); malformed input raises
    DecodeError.

    Bytes left after the body are ignored, as Kafka's broker does (it reads
    the fields and stops): librdkafka's Metadata v9+ request for all topics
    keeps its 4-byte placeholder for the topics count, a compact null that
    takes 1, so 3 bytes are left over. ``strict=True`` refuses them with
    DecodeError instead."""
    r = Reader(payload)
    try:
        key = r.read_int16()
        version = r.read_int16()
        correlation_id = r.read_int32()
    except DecodeError as exc:
        raise DecodeError(f"request header: {exc}") from None
    a = APIS_BY_KEY.get(key)
    if a is None or not a.has_version(version):
        what = (f"api key {key}" if a is None
                else f"{a.name} v{version} (this side supports v{a.min_version}-v{a.max_version})")
        err = UnsupportedVersionError(f"unsupported request: {what}, correlation id {correlation_id}")
        err.api_key, err.api_version, err.correlation_id = key, version, correlation_id
        raise err
    r.pos = 0
    try:
        h = _codec.decode(_REQUEST_HEADER_PLANS[a.request_header_version(version)], r)
    except DecodeError as exc:
        raise DecodeError(f"{a.name} v{version} request: header: {exc}") from None
    plan = a.request_plan(version)
    body = _codec.decode(plan, r)
    if strict:
        _check_end(r, plan.label)
    header = {"api_key": key, "api_version": version,
              "correlation_id": h["correlation_id"], "client_id": h["client_id"]}
    return header, body


def encode_response(api_, version: int, correlation_id: int, body) -> bytes:
    """A complete response frame: 4-byte big-endian size, header, body."""
    a = api(api_)
    plan = a.response_plan(version)
    w = Writer()
    w.write_int32(0)
    try:
        _codec.encode(_RESPONSE_HEADER_PLANS[a.response_header_version(version)],
                      {"correlation_id": correlation_id}, w)
    except EncodeError as exc:
        raise EncodeError(f"{a.name} v{version} response: {exc}") from None
    _codec.encode(plan, {} if body is None else body, w, True)
    w.write_int32_at(0, len(w) - 4)
    return w.getvalue()


# -- embedded structs (consumer protocol) -----------------------------------------

#: The versioned structs without an api key, by official name.
STRUCT_SCHEMAS = dict(_consumer_protocol.BY_NAME)


def _struct_schema(schema_name):
    schema = STRUCT_SCHEMAS.get(schema_name)
    if schema is None:
        raise KeyError(f"unknown struct schema {schema_name!r} "
                       f"(known: {', '.join(STRUCT_SCHEMAS)})")
    return schema


def encode_struct(schema_name: str, version: int, value) -> bytes:
    """Encode e.g. a ConsumerProtocolSubscription: int16 version, then the struct."""
    schema = _struct_schema(schema_name)
    lo, hi = schema["valid"]
    if not (isinstance(version, int) and lo <= version <= hi):
        raise UnsupportedVersionError(f"{schema_name} v{version} is not supported (v{lo}-v{hi})")
    w = Writer()
    w.write_int16(version)
    _codec.encode(_codec.get_plan(schema, version), {} if value is None else value, w)
    return w.getvalue()


def decode_struct(schema_name: str, data):
    """Decode bytes written by encode_struct (or any Kafka client).

    Returns (version, value dict). As in Kafka, a version newer than ours is
    read with our newest layout and trailing bytes are ignored (newer versions
    only append fields)."""
    schema = _struct_schema(schema_name)
    lo, hi = schema["valid"]
    r = Reader(data)
    try:
        version = r.read_int16()
    except DecodeError as exc:
        raise DecodeError(f"{schema_name}: {exc}") from None
    if version < lo:
        raise DecodeError(f"{schema_name}: invalid version {version}")
    return version, _codec.decode(_codec.get_plan(schema, min(version, hi)), r)
