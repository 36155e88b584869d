"""``kio perf produce|consume``: throughput and latency, in the manner of
Kafka's producer and consumer perf-test tools."""
from __future__ import annotations

import os
import sys
import time

from kio.cli.common import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, Progress, interrupts, properties


def add_parsers(sub, common):
    perf = sub.add_parser("perf", help="measure produce or consume throughput and latency")
    psub = perf.add_subparsers(dest="action", required=True)
    p = psub.add_parser("produce", parents=[common])
    p.add_argument("--topic", required=True)
    p.add_argument("--num-records", type=int, required=True)
    p.add_argument("--record-size", type=int, default=100, help="value bytes per record")
    p.add_argument("--throughput", type=float, default=-1, help="records/s at most (-1: no limit)")
    p.set_defaults(func=perf_produce)
    p = psub.add_parser("consume", parents=[common])
    p.add_argument("--topic", required=True)
    p.add_argument("--messages", type=int, required=True, help="records to read")
    p.add_argument("--group", default=None,
                   help="read as a member of this group (default: assign every partition)")
    p.set_defaults(func=perf_consume)


def percentiles(latencies_ms, points=(50, 95, 99, 99.9)) -> dict:
    """{point: latency} by the nearest-rank method on sorted values."""
    if not latencies_ms:
        return {p: 0.0 for p in points}
    ordered = sorted(latencies_ms)
    n = len(ordered)
    return {p: ordered[min(n - 1, max(0, int(round(p / 100.0 * n + 0.5)) - 1))] for p in points}


def perf_produce(args) -> int:
    from kio.producer import Producer

    conf = {"bootstrap.servers": args.bootstrap_server, "max.block.ms": int(args.timeout * 1000)}
    conf.update(properties(args.property))
    value = os.urandom(args.record_size)
    latencies = []
    failures = []
    mono = time.monotonic

    def sent_at(start):
        def done(err, md):
            if err is None:
                latencies.append((mono() - start) * 1000.0)
            else:
                failures.append(err)
        return done

    progress = Progress("perf produce")
    interval = 1.0 / args.throughput if args.throughput > 0 else 0.0
    sent = 0
    with Producer(conf) as producer:
        start = next_at = mono()
        try:
            for sent in range(1, args.num_records + 1):
                if interval:
                    delay = next_at - mono()
                    if delay > 0:
                        time.sleep(delay)
                    next_at += interval
                with interrupts.deferred():
                    producer.send(args.topic, value, on_delivery=sent_at(mono()))
                progress.update(sent)
            pending = producer.flush(args.timeout)
        except KeyboardInterrupt:
            producer.flush(10.0)
            progress.done()
            print(f"interrupted: {len(latencies):,} of {sent:,} records acknowledged", file=sys.stderr)
            return EXIT_INTERRUPTED
        finally:
            progress.done()
        elapsed = mono() - start
    n = len(latencies)
    pct = percentiles(latencies)
    print(f"{n:,} records sent, {n / elapsed:,.1f} records/sec "
          f"({n * args.record_size / elapsed / 1048576:.2f} MB/sec), "
          f"{sum(latencies) / max(n, 1):.2f} ms avg latency, {max(latencies, default=0):.2f} ms max latency, "
          + ", ".join(f"{v:.2f} ms {p}th" for p, v in pct.items()) + ".")
    if failures or pending:
        print(f"kio perf: error: {len(failures) + pending:,} records not delivered"
              + (f": {failures[0]}" if failures else ""), file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK


def perf_consume(args) -> int:
    """Read ``--messages`` records from the beginning: by hand-assigned
    partitions (no group join in the measurement) unless ``--group`` asks
    for a group member."""
    from kio.cli.consume import topic_partitions
    from kio.consumer import Consumer

    conf = {"bootstrap.servers": args.bootstrap_server, "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "default.api.timeout.ms": int(args.timeout * 1000)}
    if args.group:
        conf["group.id"] = args.group
    conf.update(properties(args.property))
    tps = None if args.group else topic_partitions(args, args.topic)
    progress = Progress("perf consume")
    count = size = 0
    poll_ms = []                  # how long each poll() that returned records took
    with Consumer(conf) as consumer:
        start = time.monotonic()
        if tps is None:
            consumer.subscribe([args.topic])
        else:
            consumer.assign(tps)
            consumer.seek_to_beginning(tps)
        idle_since = start
        try:
            while count < args.messages:
                t0 = time.monotonic()
                with interrupts.deferred():
                    batch = consumer.poll(timeout=0.5, max_records=args.messages - count)
                    count += len(batch)
                now = time.monotonic()
                if not batch:
                    if now - idle_since > args.timeout:
                        break
                    continue
                idle_since = now
                poll_ms.append((now - t0) * 1000.0)
                size += sum(len(r.value or b"") for r in batch)
                progress.update(count)
        except KeyboardInterrupt:
            progress.done()
            print(f"interrupted after {count:,} records", file=sys.stderr)
            return EXIT_INTERRUPTED
        finally:
            progress.done()
        span = max(time.monotonic() - start, 1e-9)
    pct = percentiles(poll_ms)
    print(f"{count:,} records, {size / 1048576:.2f} MB in {span:.2f} s"
          + (" (group join included)" if args.group else "")
          + f": {count / span:,.1f} records/sec, {size / span / 1048576:.2f} MB/sec; "
          f"{len(poll_ms):,} polls with records, poll latency "
          + ", ".join(f"{v:.2f} ms {p}th" for p, v in pct.items()) + ".")
    if count < args.messages:
        print(f"kio perf: error: only {count:,} of {args.messages:,} records arrived within "
              f"{args.timeout} s of silence", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK
