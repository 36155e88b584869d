"""FrameDecoder: any chunking gives the same frames; bad sizes fail clearly."""
import random
import struct
import time

import pytest
from hypothesis import given, settings, strategies as st

from kproto.errors import DecodeError, FrameError
from kproto.framing import DEFAULT_MAX_FRAME_SIZE, ZERO_COPY_MIN, FrameDecoder, frame


def _feed_all(decoder, chunks):
    out = []
    for c in chunks:
        out.extend(bytes(f) for f in decoder.feed(c))
    return out


def test_frame_adds_big_endian_size():
    assert frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert frame(b"") == b"\x00\x00\x00\x00"
    assert frame(bytearray(b"x")) == b"\x00\x00\x00\x01x"
    assert frame(memoryview(b"xyz")[1:]) == b"\x00\x00\x00\x02yz"


def test_default_max_is_100_mib():
    assert DEFAULT_MAX_FRAME_SIZE == 100 * 1024 * 1024
    assert FrameDecoder().max_frame_size == DEFAULT_MAX_FRAME_SIZE


def test_one_byte_at_a_time():
    payloads = [b"hello", b"", b"x" * 1000, bytes(range(256))]
    stream = b"".join(frame(p) for p in payloads)
    d = FrameDecoder()
    got = []
    for i in range(len(stream)):
        got.extend(bytes(f) for f in d.feed(stream[i:i + 1]))
    assert got == payloads
    assert d.pending_bytes == 0 and d.frames_decoded == 4


def test_many_frames_in_one_chunk_and_exact_boundaries():
    payloads = [struct.pack(">i", i) * (i % 7) for i in range(500)]
    stream = b"".join(frame(p) for p in payloads)
    assert _feed_all(FrameDecoder(), [stream]) == payloads
    # Chunks that end exactly on frame boundaries, and exactly after size prefixes.
    chunks, prefix_cuts = [], []
    for p in payloads[:50]:
        chunks.append(frame(p))
        f = frame(p)
        prefix_cuts += [f[:4], f[4:]]
    d = FrameDecoder()
    for c, p in zip(chunks, payloads):
        assert [bytes(f) for f in d.feed(c)] == [p]
        assert d.pending_bytes == 0
    d = FrameDecoder()
    got = []
    for c in prefix_cuts:
        got.extend(bytes(f) for f in d.feed(c))
    assert got == payloads[:50]


def test_pending_bytes_counts_prefix_and_body():
    d = FrameDecoder()
    assert d.feed(b"\x00\x00") == [] and d.pending_bytes == 2
    assert d.feed(b"\x00\x05ab") == [] and d.pending_bytes == 6
    assert d.feed(b"cd") == [] and d.pending_bytes == 8
    assert d.feed(b"e\x00") == [b"abcde"] and d.pending_bytes == 1


def test_megabyte_chunks_and_large_frames():
    big = [random.Random(i).randbytes(3 * 1024 * 1024 + i) for i in range(3)]
    stream = b"".join(frame(p) for p in big)
    for size in (1 << 20, 65536, 4 * 1024 * 1024, len(stream)):
        chunks = [stream[i:i + size] for i in range(0, len(stream), size)]
        assert _feed_all(FrameDecoder(), chunks) == big


def test_large_whole_frame_in_bytes_chunk_is_zero_copy():
    payload = b"z" * (ZERO_COPY_MIN + 10)
    chunk = frame(payload) + frame(b"small")
    frames = FrameDecoder().feed(chunk)
    assert isinstance(frames[0], memoryview) and frames[0].readonly and frames[0].obj is chunk
    assert frames[0] == payload
    assert frames[1] == b"small" and isinstance(frames[1], bytes)


def test_mutable_chunk_is_never_aliased():
    payload = b"q" * (ZERO_COPY_MIN + 10)
    buf = bytearray(frame(payload))
    frames = FrameDecoder().feed(buf)
    assert isinstance(frames[0], bytes)
    buf[10:20] = b"\x00" * 10          # the driver reuses its receive buffer
    assert frames[0] == payload
    frames = FrameDecoder().feed(memoryview(bytearray(frame(b"abc"))))
    assert frames == [b"abc"]


def test_one_byte_at_a_time_is_linear():
    """A 2 MiB frame fed byte by byte must not be quadratic (it would take minutes)."""
    payload = b"a" * (2 * 1024 * 1024)
    stream = frame(payload)
    d = FrameDecoder()
    t = time.perf_counter()
    out = []
    mv = memoryview(stream)
    for i in range(len(stream)):
        r = d.feed(mv[i:i + 1])
        if r:
            out.extend(r)
    assert time.perf_counter() - t < 10
    assert out == [payload]


def test_oversize_and_negative_sizes():
    d = FrameDecoder(max_frame_size=1000)
    assert d.feed(frame(b"x" * 1000)) == [b"x" * 1000]
    with pytest.raises(FrameError, match=r"frame size 1001 exceeds the maximum 1000 .* stream is corrupt"):
        d.feed(struct.pack(">i", 1001))
    with pytest.raises(FrameError, match=r"frame size -1 is negative \u2014 is this a Kafka broker\?"):
        FrameDecoder().feed(b"\xff\xff\xff\xff")
    assert issubclass(FrameError, DecodeError)


def test_no_allocation_before_validation():
    # A hostile 2 GiB size is refused from the prefix alone, before any body arrives.
    d = FrameDecoder()
    with pytest.raises(FrameError):
        d.feed(b"\x7f\xff")
        d.feed(b"\xff\xff")


def test_http_hint():
    d = FrameDecoder()
    with pytest.raises(FrameError) as ei:
        d.feed(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    assert str(ei.value) == ("frame size 1213486160 exceeds the maximum 104857600 \u2014 is this a Kafka "
                             "broker? (the first bytes look like an HTTP response)")


def test_http_hint_split_prefix():
    d = FrameDecoder()
    d.feed(b"HT")
    with pytest.raises(FrameError, match="HTTP response"):
        d.feed(b"TP/1.0")


@pytest.mark.parametrize("first,kind", [(b"\x15\x03\x03\x00\x02\x02\x46", "alert"),
                                        (b"\x16\x03\x01\x00\x7a\x02", "handshake")])
def test_tls_hint(first, kind):
    with pytest.raises(FrameError, match=f"TLS {kind}.*security.protocol=SSL"):
        FrameDecoder().feed(first)


def test_text_hint():
    with pytest.raises(FrameError, match="text: 'SSH-'"):
        FrameDecoder().feed(b"SSH-2.0-OpenSSH_9.2\r\n")


def test_failed_decoder_stays_failed():
    d = FrameDecoder()
    with pytest.raises(FrameError):
        d.feed(b"HTTP")
    assert d.failed and d.pending_bytes == 0
    for data in (b"", frame(b"ok"), b"\x00"):
        with pytest.raises(FrameError, match="failed earlier"):
            d.feed(data)


def test_bad_max_frame_size():
    with pytest.raises(ValueError):
        FrameDecoder(max_frame_size=-1)
    with pytest.raises(ValueError):
        FrameDecoder(max_frame_size=1 << 31)


def _split(data, cuts):
    cuts = sorted(set(c % (len(data) + 1) for c in cuts))
    pieces, last = [], 0
    for c in cuts + [len(data)]:
        pieces.append(data[last:c])
        last = c
    return pieces


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=20), st.lists(st.integers(min_value=0), max_size=40),
       st.sampled_from([bytes, bytearray, memoryview]))
def test_random_chunkings_give_the_same_frames(payloads, cuts, kind):
    stream = b"".join(frame(p) for p in payloads)
    d = FrameDecoder()
    got = _feed_all(d, [kind(c) for c in _split(stream, cuts)])
    assert got == payloads and d.pending_bytes == 0


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2000), st.lists(st.integers(min_value=0), max_size=20),
       st.integers(min_value=0, max_value=5000))
def test_random_bytes_only_raise_frame_error(data, cuts, max_size):
    d = FrameDecoder(max_frame_size=max_size)
    total = 0
    try:
        for c in _split(data, cuts):
            for f in d.feed(c):
                assert len(f) <= max_size
                total += 4 + len(f)
    except FrameError:
        assert d.failed
        return
    assert total + d.pending_bytes == len(data)
