"""Legacy message sets: magic 0 (Kafka < 0.10) and magic 1 (0.10, timestamps).

A message set is a sequence of ``offset int64, size int32, message``; a message
is ``crc uint32 (CRC-32 of magic..end), magic int8, attributes int8,
[timestamp int64 if magic 1], key bytes, value bytes``. A compressed message is
a wrapper whose value is a whole inner message set compressed with the codec in
its attributes; its offset is that of the last inner message. Inner offsets are
absolute in magic 0 and relative (0..n-1) in magic 1.

Brokers still return these for old topics, and a fetch may mix them with v2
batches, so ``kproto.records.read_batches`` dispatches here on the magic byte.
Reading is pure Python: this is not a hot path any more. Every failure on bad
input is a DecodeError (CorruptRecordError for CRC mismatches).
"""
import struct
import zlib

from kproto import compression as _compression
from kproto.errors import CorruptRecordError, DecodeError, EncodeError, UnsupportedCodecError
from kproto.records._batch import DEFAULT_MAX_DECOMPRESSED_SIZE, Record

__all__ = ["LegacyBatch", "LegacyBatchBuilder"]

_ENTRY = struct.Struct(">qi")       # offset, message size
_MSG_HEAD = struct.Struct(">IbB")   # crc, magic, attributes
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")

LOG_OVERHEAD = 12
MIN_MESSAGE_SIZE_V0 = 14            # crc 4 + magic 1 + attrs 1 + key len 4 + value len 4
MIN_MESSAGE_SIZE_V1 = 22            # + timestamp 8
ATTR_CODEC_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08


class _Message:
    __slots__ = ("offset", "crc", "magic", "attributes", "timestamp", "key", "value")


def _read_nullable_bytes(mv, pos, end, what):
    if end - pos < 4:
        raise DecodeError(f"legacy message: {what} length is truncated")
    (n,) = _I32.unpack_from(mv, pos)
    pos += 4
    if n < 0:
        if n != -1:
            raise DecodeError(f"legacy message: invalid {what} length {n}")
        return None, pos
    if n > end - pos:
        raise DecodeError(f"legacy message: {what} of {n} bytes exceeds the "
                          f"{end - pos} bytes left")
    return mv[pos:pos + n], pos + n


def _parse_message(mv, pos, end, check_crc):
    """Parse the complete entry (offset, size, message) at pos; return
    (_Message, position after it)."""
    if end - pos < LOG_OVERHEAD:
        raise DecodeError("legacy message set: entry header is truncated")
    offset, size = _ENTRY.unpack_from(mv, pos)
    if size < MIN_MESSAGE_SIZE_V0:
        raise DecodeError(f"legacy message set: invalid message size {size}")
    start = pos + LOG_OVERHEAD
    mend = start + size
    if mend > end:
        raise DecodeError(f"legacy message set: message of {size} bytes is truncated")
    crc, magic, attrs = _MSG_HEAD.unpack_from(mv, start)
    if magic not in (0, 1):
        raise DecodeError(f"legacy message set: unknown magic {magic}")
    if magic == 1 and size < MIN_MESSAGE_SIZE_V1:
        raise DecodeError(f"legacy message set: v1 message size {size} is too small")
    if check_crc:
        actual = zlib.crc32(mv[start + 4:mend])
        if actual != crc:
            raise CorruptRecordError(
                f"legacy message at offset {offset}: CRC-32 mismatch "
                f"(stored {crc:#010x}, computed {actual:#010x})")
    q = start + 6
    ts = -1
    if magic == 1:
        (ts,) = _I64.unpack_from(mv, q)
        q += 8
    key, q = _read_nullable_bytes(mv, q, mend, "key")
    value, q = _read_nullable_bytes(mv, q, mend, "value")
    if q != mend:
        raise DecodeError(f"legacy message at offset {offset}: {mend - q} unexpected "
                          f"trailing bytes")
    m = _Message()
    m.offset = offset
    m.crc = crc
    m.magic = magic
    m.attributes = attrs
    m.timestamp = ts
    m.key = key
    m.value = value
    return m, mend


def _as_bytes(v):
    return None if v is None else bytes(v)


class LegacyBatch:
    """One top-level entry of a v0/v1 message set: a single message, or a
    compressed wrapper whose inner messages are decompressed on demand.

    Offers the same attributes as RecordBatch (producer fields are -1)."""

    partition_leader_epoch = -1
    producer_id = -1
    producer_epoch = -1
    base_sequence = -1
    is_transactional = False
    is_control = False
    control_type = None
    coordinator_epoch = None
    has_delete_horizon = False
    last_sequence = -1

    def __init__(self, mv, start, size, check_crc=True,
                 max_decompressed_size=DEFAULT_MAX_DECOMPRESSED_SIZE):
        self._mv = mv[start:start + size]
        self.size_in_bytes = size
        self._check_crc = check_crc
        self._max_decompressed = max_decompressed_size
        self._wrapper, _ = _parse_message(self._mv, 0, size, check_crc)
        self._records = None
        w = self._wrapper
        self.magic = w.magic
        self.crc = w.crc
        self.attributes = w.attributes
        self.compression = w.attributes & ATTR_CODEC_MASK
        if self.compression > 3:
            raise DecodeError(f"legacy message at offset {w.offset}: invalid codec id "
                              f"{self.compression} for magic {w.magic}")
        if w.magic == 0:
            self.timestamp_type = -1
        else:
            self.timestamp_type = 1 if w.attributes & ATTR_TIMESTAMP_TYPE else 0
        self.base_timestamp = w.timestamp
        self.max_timestamp = w.timestamp
        self.last_offset = w.offset
        if self.compression and w.value is None:
            raise DecodeError(f"legacy message at offset {w.offset}: compressed wrapper "
                              f"has a null value")

    # -- helpers shared with RecordBatch's interface

    @property
    def buffer(self):
        return self._mv

    @property
    def batch_length(self):
        return self.size_in_bytes - LOG_OVERHEAD

    @property
    def next_offset(self):
        return self.last_offset + 1

    @property
    def last_offset_delta(self):
        return self.last_offset - self.base_offset

    @property
    def base_offset(self):
        if not self.compression:
            return self.last_offset
        recs = self._load()
        return recs[0].offset

    @property
    def record_count(self):
        return 1 if not self.compression else len(self._load())

    def compute_crc(self):
        return zlib.crc32(self._mv[LOG_OVERHEAD + 4:])

    def validate_crc(self):
        return self.compute_crc() == self.crc

    def _load(self):
        if self._records is not None:
            return self._records
        w = self._wrapper
        if not self.compression:
            ttype = self.timestamp_type
            self._records = [Record(w.offset, w.timestamp, ttype, _as_bytes(w.key),
                                    _as_bytes(w.value), [])]
            return self._records
        try:
            self._records = self._load_inner()
        except (DecodeError, UnsupportedCodecError):
            raise
        except (struct.error, IndexError, ValueError, OverflowError, TypeError) as e:
            raise DecodeError(f"legacy message at offset {w.offset}: {e}") from None
        return self._records

    def _load_inner(self):
        w = self._wrapper
        if self.compression == _compression.LZ4:
            data = _compression.lz4_decompress(
                w.value, self._max_decompressed, fix_header_checksum=(w.magic == 0))
        else:
            data = _compression.decompress(self.compression, w.value, self._max_decompressed)
        mv = memoryview(data)
        end = len(mv)
        pos = 0
        inner = []
        while pos < end:
            m, pos = _parse_message(mv, pos, end, self._check_crc)
            if m.attributes & ATTR_CODEC_MASK:
                raise DecodeError(f"legacy message at offset {w.offset}: nested "
                                  f"compression in an inner message")
            inner.append(m)
        if not inner:
            raise DecodeError(f"legacy message at offset {w.offset}: compressed "
                              f"wrapper holds no messages")
        log_append = w.magic == 1 and (w.attributes & ATTR_TIMESTAMP_TYPE)
        if w.magic >= 1:
            # relative inner offsets; the wrapper carries the last one's absolute
            delta = w.offset - inner[-1].offset
        else:
            delta = 0
        out = []
        for m in inner:
            if log_append:
                ts, ttype = w.timestamp, 1
            elif m.magic == 0:
                ts, ttype = -1, -1
            else:
                ts, ttype = m.timestamp, 0
            out.append(Record(m.offset + delta, ts, ttype, _as_bytes(m.key),
                              _as_bytes(m.value), []))
        return out

    def records(self, topic=None, partition=-1, min_offset=-1):
        """Same contract as RecordBatch.records (legacy sets are small and rare:
        no fast path needed)."""
        for r in self._load():
            if r.offset < min_offset:
                continue
            if topic is None:
                yield r
            else:
                yield Record(r.offset, r.timestamp, r.timestamp_type, r.key, r.value,
                             r.headers, topic, partition)

    def __iter__(self):
        return self.records()

    def __len__(self):
        return self.record_count

    def columns(self):
        recs = self._load()
        return ([r.offset for r in recs], [r.timestamp for r in recs],
                [r.key for r in recs], [r.value for r in recs])

    def __repr__(self):
        return (f"<LegacyBatch magic={self.magic} last_offset={self.last_offset} "
                f"codec={_compression.CODEC_NAMES.get(self.compression, '?')} "
                f"{self.size_in_bytes} bytes>")


def _read_entry(mv, start, size, check_crc, max_decompressed_size):
    """Called by read_batches for a complete entry whose magic is 0 or 1."""
    try:
        return LegacyBatch(mv, start, size, check_crc, max_decompressed_size)
    except DecodeError:
        raise
    except (struct.error, IndexError, ValueError, OverflowError, TypeError) as e:
        raise DecodeError(f"legacy message set at byte {start}: {e}") from None


# ---------------------------------------------------------------------------
# builder (tests and fake brokers need legacy bytes)

def _bytes_field(b):
    if b is None:
        return _I32.pack(-1)
    b = bytes(b)
    return _I32.pack(len(b)) + b


def _message(magic, attributes, timestamp, key, value):
    body = struct.pack(">bB", magic, attributes)
    if magic == 1:
        body += _I64.pack(timestamp)
    body += _bytes_field(key) + _bytes_field(value)
    return struct.pack(">I", zlib.crc32(body)) + body


def _entry(offset, msg):
    return _ENTRY.pack(offset, len(msg)) + msg


class LegacyBatchBuilder:
    """Builds a v0/v1 message set: plain messages, or one compressed wrapper.

    Mirrors what old producers and brokers wrote: v1 wrappers carry relative
    inner offsets and the max timestamp; v0 lz4 wrappers carry the broken
    (pre-KAFKA-3160) frame header checksum."""

    def __init__(self, magic=1, compression=0, batch_size=16384, *, base_offset=0,
                 timestamp_type=0, log_append_time=None):
        if magic not in (0, 1):
            raise ValueError(f"LegacyBatchBuilder writes magic 0 or 1, not {magic!r}")
        self.magic = magic
        self.compression = _compression.check_codec(compression)
        if self.compression == _compression.ZSTD:
            raise UnsupportedCodecError("zstd needs message format v2 (magic 2)")
        self.batch_size = batch_size
        self.base_offset = base_offset
        self.timestamp_type = timestamp_type
        self.log_append_time = log_append_time
        self._messages = []     # (timestamp, key, value)
        self._size = 0

    @property
    def record_count(self):
        return len(self._messages)

    def _msg_size(self, key, value):
        return (LOG_OVERHEAD + (MIN_MESSAGE_SIZE_V1 if self.magic else MIN_MESSAGE_SIZE_V0)
                + (len(key) if key is not None else 0)
                + (len(value) if value is not None else 0))

    def append(self, timestamp_ms, key, value):
        """Append a message; return its size, or 0 when the set is full."""
        for what, b in (("key", key), ("value", value)):
            if b is not None and not isinstance(b, (bytes, bytearray, memoryview)):
                raise EncodeError(f"{what} must be bytes, bytearray, memoryview or None")
        size = self._msg_size(key, value)
        if self._messages and self._size + size > self.batch_size:
            return 0
        self._messages.append((timestamp_ms, _as_bytes(key), _as_bytes(value)))
        self._size += size
        return size

    def size_in_bytes(self):
        return self._size

    def build(self):
        magic = self.magic
        ts_attr = ATTR_TIMESTAMP_TYPE if (magic == 1 and self.timestamp_type == 1) else 0
        if not self.compression:
            parts = []
            for i, (ts, k, v) in enumerate(self._messages):
                if ts_attr and self.log_append_time is not None:
                    ts = self.log_append_time
                parts.append(_entry(self.base_offset + i, _message(magic, ts_attr, ts, k, v)))
            return b"".join(parts)
        inner = []
        for i, (ts, k, v) in enumerate(self._messages):
            off = i if magic == 1 else self.base_offset + i
            inner.append(_entry(off, _message(magic, 0, ts, k, v)))
        raw = b"".join(inner)
        if self.compression == _compression.LZ4:
            payload = _compression.lz4_compress(raw, broken_header_checksum=(magic == 0))
        else:
            payload = _compression.compress(self.compression, raw)
        if ts_attr and self.log_append_time is not None:
            wts = self.log_append_time
        else:
            wts = max((m[0] for m in self._messages), default=-1)
        last = self.base_offset + len(self._messages) - 1
        return _entry(last, _message(magic, self.compression | ts_attr, wts, None, payload))
