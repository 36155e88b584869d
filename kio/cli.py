"""The ``kio`` command line: ``kio demo`` and ``kio broker``.

Errors are printed as one clear line (the traceback only with ``--debug``);
exit codes: 0 success, 1 a Kafka or verification error, 2 bad usage,
130 interrupted.
"""
from __future__ import annotations

import argparse
import sys
import time

from kproto.errors import KafkaError

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def _cmd_broker(args) -> int:
    import signal

    from kio.broker import LocalBroker

    # SIGTERM must run the finally below, or the broker process outlives us.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(EXIT_INTERRUPTED))
    broker = LocalBroker(host=args.host, port=args.port).start()
    print(f"broker ready on {broker.bootstrap_servers} (memory storage; Ctrl-C stops it)",
          flush=True)
    try:
        while broker.process is not None and broker.process.poll() is None:
            time.sleep(0.5)
        print(f"broker exited; log:\n{broker.log_tail()}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        broker.stop()


def _cmd_demo(args) -> int:
    from kio.demo import run_demo

    return run_demo(bootstrap_servers=args.bootstrap_server, records=args.records,
                    value_size=args.value_size, partitions=args.partitions,
                    compression=args.compression)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kio", description="Kafka tools built on kproto/kio")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("demo", help="produce and consume records against a broker "
                                    "(starts a local one unless --bootstrap-server is given)")
    p.add_argument("--bootstrap-server", default=None, help="HOST:PORT of an existing broker")
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--value-size", type=int, default=100)
    p.add_argument("--partitions", type=int, default=3)
    p.add_argument("--compression", default="lz4", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("broker", help="run the pinned local development broker (Tansu) in the foreground")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=9092)
    p.set_defaults(func=_cmd_broker)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (KafkaError, OSError) as exc:
        if args.debug:
            raise
        print(f"kio {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
