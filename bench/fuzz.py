"""Bounded fuzzing of every decoder that reads bytes from the network.

Feeds random and mutated inputs to the frame decoder, every response decoder
(every API, every version) and the record batch reader, and checks that each
input either decodes or raises the project's DecodeError - nothing else, no
hang, bounded memory. Seeds are valid encodings (generated from the schema
tables and the batch builder) so mutations reach deep into the decoders.

    python bench/fuzz.py --inputs 1000000           # the long run
    python bench/fuzz.py --inputs 20000 --seed 1    # what the test suite runs

Exit status 0 when every input behaved; 1 otherwise (the offending input is
printed as hex with the exception).
"""
from __future__ import annotations

import argparse
import os
import random
import resource
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a checkout

from kproto import messages
from kproto._codec import default_value, get_plan
from kproto.errors import DecodeError, UnsupportedCodecError
from kproto.framing import FrameDecoder
from kproto.records import BatchBuilder, ColumnBuffers, LegacyBatchBuilder, RecordBatch, read_batches

MAX_INPUT = 4096


def _response_seeds():
    """(api, version, payload-without-size-prefix) of default-valued responses."""
    seeds = []
    for api in messages.APIS_BY_KEY.values():
        for v in range(api.min_version, api.max_version + 1):
            body = default_value(get_plan(api.response, v))
            frame = messages.encode_response(api, v, 7, body)
            seeds.append((api, v, frame[4:]))
    return seeds


def _batch_seeds():
    seeds = []
    for codec in ("none", "gzip", "lz4", "snappy", "zstd"):
        b = BatchBuilder(codec, 1 << 16, producer_id=3, producer_epoch=1, base_sequence=5)
        for i in range(5):
            b.append(1000 + i, None if i == 2 else b"k%d" % i, b"value-%d" % i * 3,
                     [("h", b"x")] if i % 2 else None)
        seeds.append(b.build())
    for magic in (0, 1):
        lb = LegacyBatchBuilder(magic, "gzip", 1 << 16)
        for i in range(3):
            lb.append(2000 + i, b"k", b"v%d" % i)
        seeds.append(lb.build())
    return seeds


def mutate(rng: random.Random, data: bytes) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(6)
        if op == 0 and buf:                                    # flip a bit
            i = rng.randrange(len(buf))
            buf[i] ^= 1 << rng.randrange(8)
        elif op == 1 and buf:                                  # random byte
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        elif op == 2 and buf:                                  # truncate
            del buf[rng.randrange(len(buf)):]
        elif op == 3:                                          # insert bytes
            i = rng.randrange(len(buf) + 1)
            buf[i:i] = rng.randbytes(rng.randint(1, 8))
        elif op == 4 and len(buf) >= 4:                        # interesting int32
            i = rng.randrange(len(buf) - 3)
            buf[i:i + 4] = rng.choice([b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff",
                                       b"\x80\x00\x00\x00", b"\x00\x00\x00\x00"])
        elif op == 5 and buf:                                  # duplicate a slice
            i = rng.randrange(len(buf))
            buf[i:i] = buf[i:i + rng.randint(1, 16)]
    return bytes(buf[:MAX_INPUT])


def run(inputs: int, seed: int, out=sys.stdout) -> int:
    rng = random.Random(seed)
    responses, batches = _response_seeds(), _batch_seeds()
    counts = {"frame": 0, "response": 0, "batch": 0}
    decoded = {"frame": 0, "response": 0, "batch": 0}
    t0 = time.perf_counter()
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for n in range(inputs):
        kind = ("frame", "response", "batch")[n % 3]
        data = b""
        try:
            if kind == "frame":
                data = rng.randbytes(rng.randint(0, 64)) if rng.random() < 0.3 else \
                    mutate(rng, messages.encode_response("Heartbeat", 0, 1, {"error_code": 0}) * 3)
                dec = FrameDecoder(max_frame_size=1 << 20)
                pos = 0
                while pos < len(data):                         # random chunking
                    step = rng.randint(1, 16)
                    dec.feed(data[pos:pos + step])
                    pos += step
            elif kind == "response":
                api, v, seed_payload = rng.choice(responses)
                data = rng.randbytes(rng.randint(0, 64)) if rng.random() < 0.2 else mutate(rng, seed_payload)
                messages.decode_response(api, v, data)
            else:
                data = rng.randbytes(rng.randint(0, 128)) if rng.random() < 0.1 else mutate(rng, rng.choice(batches))
                for b in read_batches(data, check_crc=rng.random() < 0.5, max_decompressed_size=1 << 20):
                    # every reader of a batch on its own: one failing first must not hide another
                    readers = [b.columns, lambda: list(b.records())]
                    if isinstance(b, RecordBatch):
                        readers.append(lambda: ColumnBuffers().add(b))
                    for read in readers:
                        try:
                            read()
                        except (DecodeError, UnsupportedCodecError):
                            pass
            decoded[kind] += 1
        except (DecodeError, UnsupportedCodecError):
            pass
        except Exception:
            print(f"FAIL: {kind} input {data.hex()} raised:", file=out)
            traceback.print_exc(file=out)
            return 1
        counts[kind] += 1
    elapsed = time.perf_counter() - t0
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"{inputs:,} inputs in {elapsed:.1f} s ({inputs / elapsed:,.0f}/s), seed {seed}; "
          f"max RSS grew {(rss1 - rss0) / 1024:.1f} MiB", file=out)
    for kind in counts:
        print(f"  {kind:8s} {counts[kind]:>10,} inputs, {decoded[kind]:>10,} decoded, "
              f"{counts[kind] - decoded[kind]:>10,} DecodeError", file=out)
    print("only DecodeError raised: OK", file=out)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--inputs", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    args = ap.parse_args(argv)
    return run(args.inputs, args.seed)


if __name__ == "__main__":
    sys.exit(main())
