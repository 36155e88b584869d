"""Record batch throughput: kproto.records vs aiokafka's Cython record batches.

Builds N records of 100-byte values (null keys) into ~16 KiB batches, then
reads the concatenated batches back as one fetch buffer, with no compression
and with lz4. aiokafka's DefaultRecordBatchBuilder / DefaultRecordBatch are
used only if they are its compiled extension (aiokafka.record._crecords); the
run stops otherwise, since the pure-Python fallback would flatter us.

Fairness rules: the same values list feeds both builders; built batches are
dropped as they come (like a producer that sends and frees them), so neither
side is timed on page faults of 100+ MB of retained output; both readers read
the same bytes (built by us; both sides check that they can read the other's);
reads are timed with CRC checking (ours in read_batches by default, aiokafka's
validate_crc() per batch, as its consumer does with check_crcs=True) and
without; every value is touched. Each figure is the best of --repeat runs,
interleaving ours and theirs so machine noise hits both.

    python bench/bench_records.py [--records N] [--value-size B]
        [--batch-size BYTES] [--codecs none,lz4] [--repeat R]
"""
import argparse
import gc
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from kproto.records import BatchBuilder, read_batches  # noqa: E402

TS = 1_700_000_000_000


def make_values(size, distinct=1024):
    """Deterministic, JSON-ish (so compressible like real payloads) values."""
    out = []
    for i in range(distinct):
        v = (b'{"id":%d,"user":"user-%05d","event":"click","page":"/p/%d","x":"'
             % (i * 7919, i % 977, i % 131))
        v += (b"abcdefghijklmnopqrstuvwxyz0123456789" * 8)[: max(0, size - len(v) - 2)]
        out.append((v + b'"}')[:size])
    return out


def aiokafka_classes():
    os.environ.pop("AIOKAFKA_NO_EXTENSIONS", None)
    from aiokafka.record import default_records as dr
    from aiokafka.record.memory_records import MemoryRecords
    b, r = dr.DefaultRecordBatchBuilder, dr.DefaultRecordBatch
    is_c = "_crecords" in b.__module__ and "_crecords" in r.__module__
    import aiokafka
    return b, r, MemoryRecords, is_c, aiokafka.__version__


# --------------------------------------------------------------------------
# build
#
# Built batches go to `out`: a list when we need them for the read test, a
# _Sink (which drops them, like a producer that sends and frees them) in the
# timed runs, so the timings measure the builders rather than page faults of
# 100+ MB of retained output.

class _Sink:
    __slots__ = ("n",)

    def __init__(self):
        self.n = 0

    def append(self, b):
        self.n += len(b)


def ours_append(cols, codec, batch_size, out, level=None):
    """Per-record API, as a producer's send() would call it."""
    ts = TS
    b = BatchBuilder(codec, batch_size, compression_level=level)
    append = b.append
    for v in cols:
        if not append(ts, None, v):
            out.append(b.build())
            b = BatchBuilder(codec, batch_size, base_offset=b.base_offset + b.record_count,
                             compression_level=level)
            append = b.append
            append(ts, None, v)
    out.append(b.build())
    return out


def ours_append_many(cols, codec, batch_size, out):
    """Columnar API: the builder takes what fits from index i on."""
    n = len(cols)
    i = 0
    while i < n:
        b = BatchBuilder(codec, batch_size, base_offset=i)
        i += b.append_many(TS, None, cols, start=i)
        out.append(b.build())
    return out


def aio_build(cols, codec, batch_size, B, out):
    """aiokafka's per-record API (it takes the offset delta per record)."""
    ts = TS
    b = B(2, codec, 0, -1, -1, -1, batch_size)
    append = b.append
    off = 0
    empty = []
    for v in cols:
        if append(off, ts, None, v, empty) is None:
            out.append(b.build())
            b = B(2, codec, 0, -1, -1, -1, batch_size)
            append = b.append
            off = 0
            append(off, ts, None, v, empty)
        off += 1
    out.append(b.build())
    return out


# --------------------------------------------------------------------------
# read

def ours_records(buf, crc=True):
    n = 0
    for batch in read_batches(buf, check_crc=crc):
        for r in batch.records():
            r.value
            n += 1
    return n


def ours_columns(buf, crc=True):
    n = 0
    for batch in read_batches(buf, check_crc=crc):
        offsets, timestamps, keys, values = batch.columns()
        n += len(values)
    return n


def aio_read(buf, MemoryRecords, crc=True):
    n = 0
    mr = MemoryRecords(buf)
    while True:
        batch = mr.next_batch()
        if batch is None:
            break
        if crc and not batch.validate_crc():
            raise RuntimeError("crc")
        for r in batch:
            r.value
            n += 1
    return n


# --------------------------------------------------------------------------

def best_rate(fn, n, results, key):
    gc.collect()
    t0 = time.perf_counter()
    out = fn()
    dt = time.perf_counter() - t0
    rate = n / dt
    if rate > results.get(key, 0):
        results[key] = rate
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--batch-size", type=int, default=16384)
    ap.add_argument("--codecs", default="none,lz4")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    n = args.records
    codecs = args.codecs.split(",")
    codec_ids = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

    B, R, MemoryRecords, is_c, aio_version = aiokafka_classes()
    print(f"aiokafka {aio_version}: DefaultRecordBatchBuilder = {B.__module__}."
          f"{B.__name__}, DefaultRecordBatch = {R.__module__}.{R.__name__}")
    if not is_c:
        sys.exit("aiokafka's C extension (aiokafka.record._crecords) is not in use; "
                 "refusing to compare against the pure-Python fallback")
    print("  -> aiokafka's compiled Cython implementation is in use")
    print(f"{n} records, {args.value_size}-byte values, null keys, batch.size "
          f"{args.batch_size}, best of {args.repeat}, Python {sys.version.split()[0]}")
    values = make_values(args.value_size)
    # the record values, prepared once outside the timings (a producer gets them
    # from its caller)
    cols = (values * (n // len(values) + 1))[:n]

    rows = []
    for codec in codecs:
        cid = codec_ids[codec]
        res = {}
        for _ in range(args.repeat):
            best_rate(lambda: ours_append(cols, cid, args.batch_size, _Sink()), n, res,
                      "ours_append")
            best_rate(lambda: ours_append_many(cols, cid, args.batch_size, _Sink()), n, res,
                      "ours_many")
            if codec == "lz4":
                best_rate(lambda: ours_append(cols, cid, args.batch_size, _Sink(), 9), n, res,
                          "ours_append_l9")
            best_rate(lambda: aio_build(cols, cid, args.batch_size, B, _Sink()), n, res,
                      "aio_build")
        ours, theirs = [], []
        ours_append(cols, cid, args.batch_size, ours)
        aio_build(cols, cid, args.batch_size, B, theirs)
        buf = b"".join(ours)
        # sanity: both read our bytes, we read theirs
        assert ours_columns(buf) == n
        assert aio_read(buf, MemoryRecords) == n
        assert ours_records(b"".join(bytes(x) for x in theirs)) == n
        for _ in range(args.repeat):
            for crc in (True, False):
                best_rate(lambda: ours_records(buf, crc), n, res, ("ours_records", crc))
                best_rate(lambda: ours_columns(buf, crc), n, res, ("ours_columns", crc))
                best_rate(lambda: aio_read(buf, MemoryRecords, crc), n, res, ("aio_read", crc))
        mb = len(buf) / 1e6
        ref = res["aio_build"]
        rows.append((codec, "build", "kproto append() per record", res["ours_append"], ref))
        if codec == "lz4":
            rows.append((codec, "build", "kproto append() lz4 level 9", res["ours_append_l9"],
                         ref))
        rows.append((codec, "build", "kproto append_many() columnar", res["ours_many"], ref))
        rows.append((codec, "build", "aiokafka append() per record", ref, ref))
        for crc, label in ((True, "CRC checked"), (False, "no CRC check")):
            op = f"read, {label}"
            ref = res[("aio_read", crc)]
            rows.append((codec, op, "kproto records() (Record objects)",
                         res[("ours_records", crc)], ref))
            rows.append((codec, op, "kproto columns() (4 lists)",
                         res[("ours_columns", crc)], ref))
            rows.append((codec, op, "aiokafka iterate records", ref, ref))
        print(f"  {codec}: {len(ours)} batches, {mb:.1f} MB")

    print()
    print(f"{'codec':<6} {'op':<20} {'implementation':<36} {'records/s':>13} "
          f"{'vs aiokafka':>12}")
    print("-" * 91)
    last = None
    for codec, op, impl, rate, ref in rows:
        if last is not None and (codec, op) != last:
            print()
        last = (codec, op)
        print(f"{codec:<6} {op:<20} {impl:<36} {rate:>13,.0f} {rate / ref:>11.2f}x")
    if "lz4" in codecs:
        print("\nlz4 build: each library at its default level: kproto 0 (LZ4 fast mode, "
              "as librdkafka),\naiokafka 9 (LZ4-HC); the 'level 9' row is kproto at "
              "aiokafka's level.")


if __name__ == "__main__":
    main()
