"""``kio produce``: one record per input line, from stdin or ``--file``."""
from __future__ import annotations

import sys
import threading
import time

from kio.cli.common import (
    EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, Progress, UsageError, headers, interrupts, properties,
    topic_name,
)


def add_parser(sub, common):
    p = sub.add_parser("produce", parents=[common], help="send lines from stdin or a file as records")
    p.add_argument("--topic", required=True, type=topic_name)
    p.add_argument("--file", help="read lines from this file instead of stdin")
    p.add_argument("--parse-key", action="store_true", help="split each line into key and value")
    p.add_argument("--key-separator", default="\t", help="between key and value (default: tab)")
    p.add_argument("--sync", action="store_true", help="wait for each record's acknowledgement")
    p.add_argument("--acks", choices=["0", "1", "all", "-1"], default=None)
    p.add_argument("--compression", choices=["none", "gzip", "snappy", "lz4", "zstd"], default=None)
    p.add_argument("--header", action="append", metavar="K=V", help="add this header to every record")
    p.add_argument("--rate", type=float, default=None, help="at most this many records per second")
    p.set_defaults(func=run)


class _Deliveries:
    """Counts acknowledgements and failures (callbacks run on the network thread)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.delivered = 0
        self.failed = 0
        self.first_error = None

    def __call__(self, err, metadata):
        with self.lock:
            if err is None:
                self.delivered += 1
            else:
                self.failed += 1
                if self.first_error is None:
                    self.first_error = err


def _config(args) -> dict:
    conf = {"bootstrap.servers": args.bootstrap_server, "linger.ms": 5,
            "max.block.ms": int(args.timeout * 1000)}
    if args.acks is not None:
        conf["acks"] = args.acks
    if args.compression is not None:
        conf["compression.type"] = args.compression
    conf.update(properties(args.property))
    return conf


def _open_input(args):
    """The binary stream of input lines. A --file that cannot be read is the
    user's input error (exit 2, like a bad option), not a Kafka error
    (exit 1); opened before the producer, so nothing connects in vain."""
    if not args.file:
        return sys.stdin.buffer
    try:
        return open(args.file, "rb")
    except OSError as e:
        raise UsageError(f"--file {args.file!r}: cannot read it: {e.strerror or e}") from None


def _lines(source):
    try:
        yield from source
    finally:
        if source is not sys.stdin.buffer:
            source.close()


def run(args) -> int:
    from kio.producer import Producer

    source = _open_input(args)
    sep = args.key_separator.encode()
    hdrs = headers(args.header)
    deliveries = _Deliveries()
    progress = Progress("produce")
    sent = 0
    interval = 1.0 / args.rate if args.rate else 0.0
    next_at = time.monotonic()
    with Producer(_config(args)) as producer:
        try:
            for number, line in enumerate(_lines(source), 1):
                line = line.rstrip(b"\r\n") if line.endswith(b"\n") else line
                key = None
                if args.parse_key:
                    key, found, line = line.partition(sep)
                    if not found:
                        raise UsageError(f"line {number} has no key separator {args.key_separator!r}")
                if interval:
                    delay = next_at - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                    next_at = max(next_at + interval, time.monotonic() - 1.0)
                with interrupts.deferred():
                    fut = producer.send(args.topic, line, key=key, headers=hdrs, on_delivery=deliveries)
                    sent += 1
                if args.sync:
                    fut.result()
                progress.update(sent)
            pending = producer.flush(args.timeout)
        except KeyboardInterrupt:
            producer.flush(min(args.timeout, 10.0))
            progress.done()
            print(f"interrupted: {deliveries.delivered:,} records delivered, "
                  f"{sent - deliveries.delivered:,} not delivered", file=sys.stderr)
            return EXIT_INTERRUPTED
        finally:
            progress.done()
    if deliveries.failed or pending:
        print(f"kio produce: error: {deliveries.failed + pending:,} of {sent:,} records not delivered"
              + (f": {deliveries.first_error}" if deliveries.first_error else ""), file=sys.stderr)
        return EXIT_ERROR
    if progress.enabled:
        print(f"{deliveries.delivered:,} records delivered to {args.topic}", file=sys.stderr)
    return EXIT_OK
