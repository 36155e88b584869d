"""kproto.compression: codec ids, round trips, interop with the formats other
clients write, bounded output on bombs, DecodeError on bad data, and a clear
error when an optional package is missing."""
import gzip
import os
import struct
import sys
import zlib

import pytest

from kproto import compression as C
from kproto.errors import DecodeError, UnsupportedCodecError

# kafka-python's protocol modules warn about importlib.resources on import
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

CODECS = [C.GZIP, C.SNAPPY, C.LZ4, C.ZSTD]
PAYLOADS = [
    b"",
    b"x",
    b"hello kafka " * 100,
    os.urandom(5000),
    (b"abcdefgh" * 10000) + os.urandom(70000),   # > 64 KiB: several lz4/xerial blocks
]


def test_codec_ids():
    assert (C.NONE, C.GZIP, C.SNAPPY, C.LZ4, C.ZSTD) == (0, 1, 2, 3, 4)
    for cid, name in C.CODEC_NAMES.items():
        assert C.codec_id(name) == cid
        assert C.codec_id(name.upper()) == cid
        assert C.codec_id(cid) == cid
        assert C.codec_name(cid) == name
    assert C.codec_id(None) == C.NONE
    for bad in ("brotli", 5, -1, 1.0, True, b"gzip"):
        with pytest.raises(UnsupportedCodecError):
            C.codec_id(bad)


@pytest.mark.parametrize("codec", CODECS + [C.NONE])
@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: f"{len(p)}B")
def test_round_trip(codec, payload):
    out = C.compress(codec, payload)
    assert isinstance(out, bytes)
    assert C.decompress(codec, out) == payload
    assert C.decompress(codec, memoryview(out)) == payload
    assert C.decompress(C.CODEC_NAMES[codec], bytearray(out)) == payload


@pytest.mark.parametrize("codec,level", [(C.GZIP, 1), (C.GZIP, 9), (C.LZ4, 9), (C.ZSTD, 1),
                                         (C.ZSTD, 19)])
def test_levels(codec, level):
    data = b"level test " * 1000
    assert C.decompress(codec, C.compress(codec, data, level=level)) == data


# -- bombs: output is bounded by max_size ------------------------------------

BIG = bytes(50 * 1024 * 1024)


@pytest.fixture(scope="module")
def bombs():
    import zstandard
    return {
        C.GZIP: C.gzip_compress(BIG),
        C.LZ4: C.lz4_compress(BIG),
        C.SNAPPY: C.snappy_compress(BIG),
        "snappy-raw": C.snappy_compress(BIG, xerial=False),
        C.ZSTD: zstandard.ZstdCompressor().compress(BIG),   # content size in header
        "zstd-streamed": zstandard.ZstdCompressor(write_content_size=False).compress(BIG),
    }


@pytest.mark.parametrize("kind", [C.GZIP, C.LZ4, C.SNAPPY, "snappy-raw", C.ZSTD,
                                  "zstd-streamed"])
def test_bomb_is_refused(bombs, kind):
    data = bombs[kind]
    codec = kind if isinstance(kind, int) else C.codec_id(kind.split("-")[0])
    with pytest.raises(DecodeError):
        C.decompress(codec, data, max_size=1024 * 1024)
    # exactly at the limit is fine, one byte less is not
    small = C.compress(codec, bytes(100_000))
    assert len(C.decompress(codec, small, max_size=100_000)) == 100_000
    with pytest.raises(DecodeError):
        C.decompress(codec, small, max_size=99_999)


def test_none_codec_bounded():
    with pytest.raises(DecodeError):
        C.decompress(C.NONE, b"x" * 11, max_size=10)


# -- corrupt / truncated input: DecodeError only ---------------------------------

@pytest.mark.parametrize("codec", CODECS)
def test_truncated_and_garbage(codec):
    data = C.compress(codec, (b"some data to compress " * 300) + os.urandom(300))
    for cut in (1, 2, 5, len(data) // 2, len(data) - 1):
        with pytest.raises(DecodeError):
            C.decompress(codec, data[:cut])
    for garbage in (b"", b"\x00", os.urandom(100), b"\xff" * 40):
        try:
            out = C.decompress(codec, garbage, max_size=1 << 20)
        except DecodeError:
            continue
        assert isinstance(out, bytes)


@pytest.mark.parametrize("codec", CODECS)
def test_bit_flips_only_decode_error(codec):
    data = bytearray(C.compress(codec, b"flip me " * 500))
    rnd = __import__("random").Random(codec)
    for _ in range(200):
        m = bytearray(data)
        i = rnd.randrange(len(m))
        m[i] ^= 1 << rnd.randrange(8)
        try:
            C.decompress(codec, bytes(m), max_size=1 << 20)
        except DecodeError:
            pass


# -- snappy: xerial framing written, both framings read ---------------------------

def test_snappy_writes_xerial():
    data = os.urandom(100) * 700          # 70 KB: three 32 KiB blocks
    out = C.snappy_compress(data)
    assert out[:8] == b"\x82SNAPPY\x00"
    assert struct.unpack(">ii", out[8:16]) == (1, 1)
    # blocks: int32 length + raw snappy, 32 KiB of input each
    pos, blocks = 16, 0
    while pos < len(out):
        (n,) = struct.unpack_from(">i", out, pos)
        pos += 4 + n
        blocks += 1
    assert pos == len(out) and blocks == 3
    assert C.snappy_decompress(out) == data


def test_snappy_reads_raw_and_other_clients():
    import cramjam
    from aiokafka import codec as aio
    data = b"interop " * 5000
    raw = bytes(cramjam.snappy.compress_raw(data))       # what librdkafka writes
    assert C.decompress(C.SNAPPY, raw) == data
    assert C.decompress(C.SNAPPY, aio.snappy_encode(data, xerial_compatible=True)) == data
    assert C.decompress(C.SNAPPY, aio.snappy_encode(data, xerial_compatible=False)) == data
    assert aio.snappy_decode(C.snappy_compress(data)) == data


def test_snappy_xerial_bad_block_length():
    good = C.snappy_compress(b"abc" * 100)
    bad = good[:16] + struct.pack(">i", 1 << 30) + good[20:]
    with pytest.raises(DecodeError):
        C.snappy_decompress(bad)
    bad = good[:16] + struct.pack(">i", -5) + good[20:]
    with pytest.raises(DecodeError):
        C.snappy_decompress(bad)
    with pytest.raises(DecodeError):
        C.snappy_decompress(good[:18])


# -- lz4: the frame format Kafka's Java client reads ---------------------------------

def test_lz4_frame_flags():
    out = C.lz4_compress(b"a" * 100000)
    assert out[:4] == b"\x04\x22\x4d\x18"
    flg, bd = out[4], out[5]
    assert flg >> 6 == 1                  # version 01
    assert flg & 0x20                     # independent blocks (Java refuses linked)
    assert not flg & 0x08                 # no content size
    assert not flg & 0x04                 # no content checksum
    assert (bd >> 4) & 7 == 4             # 64 KiB max block size


def test_lz4_interop():
    from aiokafka import codec as aio
    from kafka import codec as kc
    data = b"lz4 interop " * 3000
    assert aio.lz4_decode(C.lz4_compress(data)) == data
    assert kc.lz4_decode(C.lz4_compress(data)) == data
    assert C.lz4_decompress(aio.lz4_encode(data)) == data
    assert C.lz4_decompress(kc.lz4_encode(data)) == data


def test_lz4_kafka_3160_broken_header_checksum():
    data = b"old kafka lz4 " * 500
    good = C.lz4_compress(data)
    broken = C.lz4_compress(data, broken_header_checksum=True)
    # pre-0.10 Java clients (and magic 0 to this day) hash the magic number too
    assert good[:6] == broken[:6]
    assert good[6] == (C._xxh32(good[4:6]) >> 8) & 0xFF
    assert broken[6] == (C._xxh32(good[0:6]) >> 8) & 0xFF
    assert good[6] != broken[6]
    with pytest.raises(DecodeError):
        C.lz4_decompress(broken)
    assert C.lz4_decompress(broken, fix_header_checksum=True) == data
    # fixing a correct checksum is harmless
    assert C.lz4_decompress(good, fix_header_checksum=True) == data


def test_xxh32_against_lz4_content_checksum():
    import lz4.frame
    for n in (0, 1, 3, 4, 15, 16, 17, 31, 32, 33, 100, 1000):
        d = os.urandom(n)
        f = lz4.frame.compress(d, content_checksum=True)
        assert struct.unpack("<I", f[-4:])[0] == C._xxh32(d)


# -- gzip / zstd details ---------------------------------------------------------

def test_gzip_concatenated_members_and_stdlib_interop():
    a, b = b"first member " * 10, b"second member " * 10
    assert C.gzip_decompress(gzip.compress(a) + gzip.compress(b)) == a + b
    assert gzip.decompress(C.gzip_compress(a)) == a
    with pytest.raises(DecodeError):
        C.gzip_decompress(zlib.compress(a))       # zlib, not gzip


def test_zstd_interop():
    from aiokafka import codec as aio
    data = b"zstd interop " * 4000
    assert C.zstd_decompress(aio.zstd_encode(data)) == data
    assert aio.zstd_decode(C.zstd_compress(data)) == data


# -- missing optional packages ------------------------------------------------------

@pytest.fixture
def hide_modules(monkeypatch):
    def hide(*names):
        for name in names:
            monkeypatch.setitem(sys.modules, name, None)   # import -> ImportError
        C._reset_imports()
    yield hide
    monkeypatch.undo()
    C._reset_imports()


def test_missing_cramjam_names_the_package(hide_modules):
    hide_modules("cramjam")
    with pytest.raises(UnsupportedCodecError, match="cramjam"):
        C.compress("snappy", b"x")
    with pytest.raises(UnsupportedCodecError, match="pip install cramjam"):
        C.decompress(C.SNAPPY, b"x")
    assert not C.is_available("snappy")
    assert C.is_available("gzip")
    from kproto.records import BatchBuilder
    with pytest.raises(UnsupportedCodecError, match="cramjam"):
        BatchBuilder("snappy", 1000)


def test_missing_lz4_names_the_package(hide_modules):
    hide_modules("lz4", "lz4.frame")
    with pytest.raises(UnsupportedCodecError, match="lz4"):
        C.compress(C.LZ4, b"x")


def test_zstd_falls_back_to_cramjam(hide_modules):
    hide_modules("zstandard")
    data = b"fallback " * 1000
    out = C.compress(C.ZSTD, data)
    assert C.decompress(C.ZSTD, out) == data
    with pytest.raises(DecodeError):
        C.decompress(C.ZSTD, out, max_size=100)
    with pytest.raises(DecodeError):
        C.decompress(C.ZSTD, out[:len(out) // 2])


def test_zstd_missing_both(hide_modules):
    hide_modules("zstandard", "cramjam")
    with pytest.raises(UnsupportedCodecError, match="zstandard"):
        C.compress("zstd", b"x")
