"""Compression codecs of Kafka record batches (and legacy message sets).

Codec ids are Kafka's attribute bits: none=0, gzip=1, snappy=2, lz4=3, zstd=4.
gzip uses the stdlib; lz4 needs the ``lz4`` package (Kafka uses the LZ4 *frame*
format); snappy needs ``cramjam``; zstd uses ``zstandard`` (or ``cramjam`` when
``zstandard`` is missing). The optional packages are imported on first use, so a
missing one only fails the codec that needs it, with an
:class:`~kproto.errors.UnsupportedCodecError` naming the package to install.

Every decompressor takes ``max_size`` and refuses to produce more than that many
bytes: a fetch response is untrusted input and a few KiB of gzip or zstd can
expand to gigabytes. Any failure on bad input is a
:class:`~kproto.errors.DecodeError`; codec-specific exceptions never leak.
"""
import struct
import threading
import zlib

from kproto.errors import DecodeError, UnsupportedCodecError

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4

CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
_CODEC_IDS = {name: cid for cid, name in CODEC_NAMES.items()}

#: Default bound on the output of one decompression (one batch's records).
DEFAULT_MAX_DECOMPRESSED_SIZE = 64 * 1024 * 1024

__all__ = [
    "NONE", "GZIP", "SNAPPY", "LZ4", "ZSTD", "CODEC_NAMES",
    "DEFAULT_MAX_DECOMPRESSED_SIZE",
    "codec_id", "codec_name", "check_codec", "is_available",
    "compress", "decompress",
    "gzip_compress", "gzip_decompress",
    "snappy_compress", "snappy_decompress",
    "lz4_compress", "lz4_decompress",
    "zstd_compress", "zstd_decompress",
]


def codec_id(codec):
    """Normalise a codec given as a name ("lz4"), a Kafka id (3) or None."""
    if codec is None:
        return NONE
    if isinstance(codec, str):
        cid = _CODEC_IDS.get(codec.strip().lower())
        if cid is None:
            raise UnsupportedCodecError(
                f"unknown compression type {codec[:50]!r}; expected one of "
                f"{', '.join(_CODEC_IDS)}")
        return cid
    if isinstance(codec, int) and not isinstance(codec, bool) and codec in CODEC_NAMES:
        return int(codec)
    shown = repr(codec)
    if len(shown) > 60:
        shown = f"{shown[:50]}... ({type(codec).__name__})"
    raise UnsupportedCodecError(
        f"unknown compression type {shown}; expected a name "
        f"({', '.join(_CODEC_IDS)}) or a Kafka codec id 0-4")


def codec_name(codec):
    return CODEC_NAMES[codec_id(codec)]


# --------------------------------------------------------------------------
# optional packages, imported lazily

_missing = object()
_modules = {}


def _import(modname):
    mod = _modules.get(modname)
    if mod is None:
        try:
            mod = __import__(modname, fromlist=["_"])
        except ImportError:
            mod = _missing
        _modules[modname] = mod
    return None if mod is _missing else mod


def _reset_imports():
    """Forget cached imports (tests use this to simulate missing packages)."""
    _modules.clear()


def _need(modname, codec, package):
    mod = _import(modname)
    if mod is None:
        raise UnsupportedCodecError(
            f"{codec} compression needs the {package!r} package, which is not "
            f"installed: pip install {package}")
    return mod


def _zstd_backend():
    zstd = _import("zstandard")
    if zstd is not None:
        return "zstandard", zstd
    cj = _import("cramjam")
    if cj is not None:
        return "cramjam", cj
    raise UnsupportedCodecError(
        "zstd compression needs the 'zstandard' (or 'cramjam') package, which "
        "is not installed: pip install zstandard")


def check_codec(codec):
    """Return the codec id, raising UnsupportedCodecError if it cannot be used."""
    cid = codec_id(codec)
    if cid == SNAPPY:
        _need("cramjam", "snappy", "cramjam")
    elif cid == LZ4:
        _need("lz4.frame", "lz4", "lz4")
    elif cid == ZSTD:
        _zstd_backend()
    return cid


def is_available(codec):
    try:
        check_codec(codec)
    except UnsupportedCodecError:
        return False
    return True


def _too_big(codec, max_size):
    return DecodeError(
        f"{codec} data decompresses to more than {max_size} bytes "
        f"(max_decompressed_size); refusing (corrupt or a compression bomb)")


# --------------------------------------------------------------------------
# gzip

def gzip_compress(data, level=-1):
    """Kafka's gzip is a plain gzip member (Java's GZIPOutputStream)."""
    c = zlib.compressobj(level, zlib.DEFLATED, 31)
    return c.compress(data) + c.flush()


def gzip_decompress(data, max_size=DEFAULT_MAX_DECOMPRESSED_SIZE):
    """Decompress one or more gzip members, never producing more than max_size."""
    out = []
    total = 0
    buf = data
    try:
        while True:
            d = zlib.decompressobj(31)
            chunk = d.decompress(buf, max_size - total + 1)
            total += len(chunk)
            if total > max_size:
                raise _too_big("gzip", max_size)
            out.append(chunk)
            if not d.eof:
                raise DecodeError("gzip data is truncated")
            buf = d.unused_data
            if not buf:
                break
    except zlib.error as e:
        raise DecodeError(f"invalid gzip data: {e}") from None
    return out[0] if len(out) == 1 else b"".join(out)


# --------------------------------------------------------------------------
# snappy
#
# Two encodings exist in Kafka: the Java client writes snappy through
# snappy-java's SnappyOutputStream, the "xerial" framing (a 16-byte header
# b"\x82SNAPPY\x00" + version + compatible-version, then blocks of
# int32-length + raw snappy); librdkafka (confluent-kafka) writes plain raw
# snappy. Both readers accept both: librdkafka checks for the xerial magic,
# and snappy-java's SnappyInputStream falls back to raw snappy when the magic
# is absent. (Checked in librdkafka's sources: rdkafka_msgset_writer.c
# compresses with rd_kafka_snappy_compress_iov, i.e. raw; rdkafka_msgset_reader.c
# tests for b"\x82SNAPPY\x00" and otherwise decodes raw.) We write xerial
# framing because it is what the reference client writes, so every broker and
# every consumer ever tested against Java producers reads it, old Java
# consumers included; and we read both.

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024   # snappy-java's default block size


def snappy_compress(data, xerial=True):
    cj = _need("cramjam", "snappy", "cramjam")
    if not xerial:
        return bytes(cj.snappy.compress_raw(data))
    mv = memoryview(data).cast("B") if not isinstance(data, bytes) else data
    parts = [_XERIAL_HEADER]
    pack = struct.Struct(">i").pack
    for i in range(0, len(mv), _XERIAL_BLOCK):
        block = bytes(cj.snappy.compress_raw(mv[i:i + _XERIAL_BLOCK]))
        parts.append(pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_raw(cj, block, budget, max_size):
    try:
        n = cj.snappy.decompress_raw_len(block)
    except Exception as e:   # cramjam raises its own error types
        raise DecodeError(f"invalid snappy data: {e}") from None
    if n > budget:
        raise _too_big("snappy", max_size)
    try:
        return bytes(cj.snappy.decompress_raw(block))
    except Exception as e:
        raise DecodeError(f"invalid snappy data: {e}") from None


def snappy_decompress(data, max_size=DEFAULT_MAX_DECOMPRESSED_SIZE):
    """Decompress xerial-framed or raw snappy (whichever the magic says)."""
    cj = _need("cramjam", "snappy", "cramjam")
    mv = memoryview(data)
    if mv.ndim != 1 or mv.itemsize != 1:
        mv = mv.cast("B")
    if len(mv) >= 16 and mv[:8] == XERIAL_MAGIC:
        out = []
        total = 0
        pos = 16
        end = len(mv)
        while pos < end:
            if end - pos < 4:
                raise DecodeError("xerial snappy block length is truncated")
            (n,) = struct.unpack_from(">i", mv, pos)
            pos += 4
            if n < 0 or n > end - pos:
                raise DecodeError(f"xerial snappy block of {n} bytes does not fit "
                                  f"in the {end - pos} bytes left")
            block = _snappy_raw(cj, mv[pos:pos + n], max_size - total, max_size)
            total += len(block)
            out.append(block)
            pos += n
        return out[0] if len(out) == 1 else b"".join(out)
    return _snappy_raw(cj, mv, max_size, max_size)


# --------------------------------------------------------------------------
# lz4 (frame format)
#
# Java's KafkaLZ4BlockOutputStream writes 64 KiB independent blocks without
# content size or content checksum, and its reader refuses linked blocks, so
# we write exactly that. Before Kafka 0.10 (KAFKA-3160) the frame header
# checksum byte (HC) was computed over the magic number too; message format
# v0 keeps writing it that way for compatibility, so for magic 0 we recompute
# HC before handing the frame to the (strict) lz4 library.

_LZ4_MAGIC = b"\x04\x22\x4d\x18"

_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x, r):
    return ((x << r) | (x >> (32 - r))) & _M32


def _xxh32(data, seed=0):
    """xxHash32, only used for the few bytes of an LZ4 frame descriptor."""
    n = len(data)
    i = 0
    if n >= 16:
        v1 = (seed + _P1 + _P2) & _M32
        v2 = (seed + _P2) & _M32
        v3 = seed & _M32
        v4 = (seed - _P1) & _M32
        while i + 16 <= n:
            lanes = struct.unpack_from("<4I", data, i)
            v1 = (_rotl((v1 + lanes[0] * _P2) & _M32, 13) * _P1) & _M32
            v2 = (_rotl((v2 + lanes[1] * _P2) & _M32, 13) * _P1) & _M32
            v3 = (_rotl((v3 + lanes[2] * _P2) & _M32, 13) * _P1) & _M32
            v4 = (_rotl((v4 + lanes[3] * _P2) & _M32, 13) * _P1) & _M32
            i += 16
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while i + 4 <= n:
        (w,) = struct.unpack_from("<I", data, i)
        h = (_rotl((h + w * _P3) & _M32, 17) * _P4) & _M32
        i += 4
    while i < n:
        h = (_rotl((h + data[i] * _P5) & _M32, 11) * _P1) & _M32
        i += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    h ^= h >> 16
    return h


def _lz4_descriptor_end(buf):
    """Index of the HC byte of an LZ4 frame header, or -1 if not a frame."""
    if len(buf) < 7 or bytes(buf[:4]) != _LZ4_MAGIC:
        return -1
    flg = buf[4]
    end = 6
    if flg & 0x08:
        end += 8
    if flg & 0x01:
        end += 4
    return end if end < len(buf) else -1


def _lz4_set_hc(data, broken):
    """Return data with the frame header checksum recomputed (correct or the
    pre-KAFKA-3160 broken variant that also hashes the magic number)."""
    buf = bytearray(data)
    hc = _lz4_descriptor_end(buf)
    if hc < 0:
        return bytes(buf)
    start = 0 if broken else 4
    buf[hc] = (_xxh32(bytes(buf[start:hc])) >> 8) & 0xFF
    return bytes(buf)


def lz4_compress(data, level=0, broken_header_checksum=False):
    """LZ4 frame as Kafka's Java client writes it.

    level 0 is LZ4's fast mode (librdkafka's default); levels >= 3 use LZ4-HC
    (the Java client's compression.lz4.level defaults to 9: slower, smaller)."""
    lz4f = _need("lz4.frame", "lz4", "lz4")
    out = lz4f.compress(
        data, compression_level=level, block_size=lz4f.BLOCKSIZE_MAX64KB,
        block_linked=False, content_checksum=False, store_size=False)
    if broken_header_checksum:
        out = _lz4_set_hc(out, broken=True)
    return out


def lz4_decompress(data, max_size=DEFAULT_MAX_DECOMPRESSED_SIZE,
                   fix_header_checksum=False):
    """Decompress LZ4 frame(s); fix_header_checksum for legacy magic 0 data."""
    lz4f = _need("lz4.frame", "lz4", "lz4")
    if fix_header_checksum:
        data = _lz4_set_hc(data, broken=False)
    out = []
    total = 0
    buf = data
    # The lz4 binding allocates max_length bytes up front, so ask for a
    # plausible size first and grow geometrically (never past max_size + 1).
    step = min(max_size + 1, max(65536, 8 * len(data)))
    try:
        while True:
            d = lz4f.LZ4FrameDecompressor()
            chunk = d.decompress(buf, max_length=min(step, max_size - total + 1))
            total += len(chunk)
            out.append(chunk)
            while not d.eof:
                if total > max_size:
                    raise _too_big("lz4", max_size)
                if d.needs_input:
                    raise DecodeError("lz4 frame is truncated")
                step *= 2
                chunk = d.decompress(b"", max_length=min(step, max_size - total + 1))
                if not chunk and not d.eof and not d.needs_input:
                    raise DecodeError("lz4 decompressor made no progress")
                total += len(chunk)
                out.append(chunk)
            if total > max_size:
                raise _too_big("lz4", max_size)
            buf = d.unused_data
            if not buf:
                break
    except DecodeError:
        raise
    except Exception as e:   # lz4 raises RuntimeError on corrupt frames
        raise DecodeError(f"invalid lz4 data: {e}") from None
    return out[0] if len(out) == 1 else b"".join(out)


# --------------------------------------------------------------------------
# zstd

# zstandard contexts cost ~5 us to create (a third of a 16 KiB batch's
# decompression); they are reusable but not thread-safe, so cache per thread.
_tls = threading.local()


def _zstd_dctx(mod):
    d = getattr(_tls, "zstd_d", None)
    if d is None or d[0] is not mod:
        d = _tls.zstd_d = (mod, mod.ZstdDecompressor())
    return d[1]


def _zstd_cctx(mod, level):
    cache = getattr(_tls, "zstd_c", None)
    if cache is None or cache[0] is not mod:
        cache = _tls.zstd_c = (mod, {})
    c = cache[1].get(level)
    if c is None:
        c = cache[1][level] = mod.ZstdCompressor(level=level)
    return c


def zstd_compress(data, level=3):
    backend, mod = _zstd_backend()
    if backend == "zstandard":
        return _zstd_cctx(mod, level).compress(data)
    return bytes(mod.zstd.compress(data, level=level))


def zstd_decompress(data, max_size=DEFAULT_MAX_DECOMPRESSED_SIZE):
    """Decompress one zstd frame, bounded by max_size.

    zstandard's one-shot decompress allocates the content size written in the
    frame header, so that size is checked first; without one, max_output_size
    bounds the output buffer."""
    backend, mod = _zstd_backend()
    try:
        if backend == "zstandard":
            dctx = _zstd_dctx(mod)
            size = mod.get_frame_parameters(data).content_size
            if size != mod.CONTENTSIZE_UNKNOWN:
                if size > max_size:
                    raise _too_big("zstd", max_size)
                return dctx.decompress(data)
            # Unknown size (streaming writers such as the Java client): the
            # binding allocates max_output_size up front, so grow the bound
            # geometrically from a plausible guess up to max_size.
            cap = min(max_size, max(65536, 16 * len(data)))
            while True:
                try:
                    return dctx.decompress(data, max_output_size=cap)
                except mod.ZstdError as e:
                    if cap >= max_size or "did not decompress full frame" not in str(e):
                        raise
                    cap = min(max_size, cap * 4)
        # cramjam: decompress into buffers of growing size, up to max_size + 1
        n = min(max_size + 1, max(65536, 8 * len(data)))
        while True:
            out = bytearray(n)
            try:
                got = mod.zstd.decompress_into(data, out)
            except Exception:
                if n > max_size:
                    raise
                n = min(max_size + 1, n * 4)
                continue
            if got > max_size:
                raise _too_big("zstd", max_size)
            return bytes(out[:got])
    except DecodeError:
        raise
    except Exception as e:   # ZstdError, cramjam.DecompressionError, ...
        msg = str(e)
        if "did not decompress full frame" in msg:
            msg += f" (truncated, or larger than max_decompressed_size={max_size})"
        raise DecodeError(f"invalid zstd data: {msg}") from None


# --------------------------------------------------------------------------
# dispatch

_COMPRESS = {GZIP: gzip_compress, SNAPPY: snappy_compress, LZ4: lz4_compress,
             ZSTD: zstd_compress}
_DECOMPRESS = {GZIP: gzip_decompress, SNAPPY: snappy_decompress,
               LZ4: lz4_decompress, ZSTD: zstd_decompress}


def compress(codec, data, level=None):
    """Compress data with a codec (id or name); codec none returns bytes(data).

    level: codec-specific compression level, None for the codec's default
    (gzip 6, lz4 0 = fast, zstd 3; snappy has none)."""
    cid = codec_id(codec)
    if cid == NONE:
        return bytes(data)
    if level is None or cid == SNAPPY:
        return _COMPRESS[cid](data)
    return _COMPRESS[cid](data, level=level)


def decompress(codec, data, max_size=DEFAULT_MAX_DECOMPRESSED_SIZE):
    """Decompress data, raising DecodeError if it is corrupt or would exceed
    max_size bytes."""
    cid = codec_id(codec)
    if cid == NONE:
        if len(data) > max_size:
            raise _too_big("uncompressed", max_size)
        return bytes(data)
    return _DECOMPRESS[cid](data, max_size)
