"""The ``kio`` command line (also ``python -m kio``).

    kio produce  --bootstrap-server H:P --topic T [--parse-key] [--sync] ...   lines -> records
    kio consume  --bootstrap-server H:P --topic T [--group G] [--json] ...     records -> lines
    kio topics   create|list|describe|delete
    kio groups   list|describe|reset-offsets|delete-offsets   (describe shows the lag per partition)
    kio transactions list|describe|abort
    kio delegation-tokens create|renew|expire|describe   (as kafka-delegation-tokens)
    kio perf     produce|consume          throughput and latency percentiles
    kio broker                            a local broker in the foreground (Apache Kafka where Java is, else Tansu)
    kio demo                              the round trip of the README (starts its own broker)

Errors are printed as one line (the traceback only with ``--debug``); long
runs show a progress line when stderr is a terminal; Ctrl-C and SIGTERM
shut down cleanly. Exit codes: see :data:`kio.cli.common.EXIT_CODES_HELP`.
"""
from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import time

from kio.cli import admin, consume, perf, produce, security, tokens, transactions
from kio.cli.common import (
    EXIT_CODES_HELP, EXIT_ERROR, EXIT_INTERRUPTED, EXIT_USAGE, ArgumentParser, UsageError, interrupts,
)
from kproto.errors import ConfigError, KafkaError

__all__ = ["main", "build_parser"]


#: what a user of the Tansu broker should know before trusting what it shows
TANSU_WARNING = ("warning: Tansu is not Apache Kafka: ListOffsets LATEST can be below the high "
                 "watermark (reads that end at 'latest' may miss records), aborted transactions "
                 "and some group APIs differ; install Java 17 and Maven (or pass --kafka) for "
                 "the genuine broker")


def _broker_kind(args) -> str:
    """Apache Kafka where Java and Maven are there (the reference: what users
    run), Tansu with ``--tansu`` or where they are not."""
    if args.tansu:
        return "tansu"
    has_jvm = shutil.which("java") is not None and shutil.which("mvn") is not None
    if args.kafka and not has_jvm:
        raise UsageError("--kafka needs Java 17+ and Maven on the PATH (Debian: apt-get install "
                         "openjdk-17-jre-headless maven); without them, kio broker runs Tansu")
    return "kafka" if has_jvm else "tansu"


def _cmd_broker(args) -> int:
    from kio.testing.broker import start_broker

    kind = _broker_kind(args)
    if kind == "kafka":
        print("starting Apache Kafka (Java found; the first start fetches its jars with Maven; "
              "--tansu runs the light broker instead)...", file=sys.stderr, flush=True)
    else:
        print(TANSU_WARNING, file=sys.stderr, flush=True)
    broker = start_broker(kind, host=args.host, port=args.port)
    storage = "a temporary log folder" if kind == "kafka" else "memory storage"
    print(f"{kind} broker ready on {broker.bootstrap_servers} ({storage}; Ctrl-C stops it)",
          flush=True)
    try:
        while broker.running:
            time.sleep(0.5)
        print(f"broker exited; log:\n{broker.log_tail()}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        broker.stop()


def _cmd_demo(args) -> int:
    from kio.demo import run_demo

    return run_demo(bootstrap_servers=args.bootstrap_server, records=args.records,
                    value_size=args.value_size, partitions=args.partitions,
                    compression=args.compression, timeout=args.timeout)


def _common_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--bootstrap-server", required=True, help="HOST:PORT[,HOST:PORT...]")
    common.add_argument("--property", action="append", metavar="KEY=VALUE",
                        help="any client setting, by its Kafka name (repeatable)")
    common.add_argument("--timeout", type=float, default=30.0,
                        help="seconds to wait for the broker (metadata, buffer space, flush, "
                             "admin calls); default 30")
    return common


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="kio", description="Kafka tools built on kproto/kio",
                            epilog=EXIT_CODES_HELP,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--debug", action="store_true",
                        help="show tracebacks on errors, and the client's log from WARNING up as it happens")
    sub = parser.add_subparsers(dest="command", required=True)
    common = _common_options()
    produce.add_parser(sub, common)
    consume.add_parser(sub, common)
    admin.add_parsers(sub, common)
    security.add_parsers(sub, common)
    tokens.add_parsers(sub, common)
    transactions.add_parsers(sub, common, admin._admin)
    perf.add_parsers(sub, common)

    p = sub.add_parser("demo", help="produce and consume records against a broker "
                                    "(starts a local one unless --bootstrap-server is given)")
    p.add_argument("--bootstrap-server", default=None, help="HOST:PORT of an existing broker")
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--value-size", type=int, default=100)
    p.add_argument("--partitions", type=int, default=3)
    p.add_argument("--compression", default="lz4", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the broker")
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("broker", help="run a local broker in the foreground: Apache Kafka where "
                                      "Java and Maven are installed, Tansu otherwise or with --tansu")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=9092)
    which = p.add_mutually_exclusive_group()
    which.add_argument("--kafka", action="store_true",
                       help="insist on the genuine Apache Kafka broker (needs Java 17+ and Maven; "
                            "the jars are fetched from Maven Central on first use)")
    which.add_argument("--tansu", action="store_true",
                       help="run Tansu, the light Java-free broker (memory storage; it deviates "
                            "from Apache Kafka in places, see the docs)")
    p.set_defaults(func=_cmd_broker)
    return parser


def _configure_logging(debug: bool) -> None:
    """A command that fails prints one line naming what the client saw
    (e.g. "no broker answered: 127.0.0.1:1: ... ECONNREFUSED"), so the
    client's WARNING lines (a failed connection, once a second) would only
    repeat it before it comes: they show with --debug, or at the level
    KIO_LOG_LEVEL names (WARNING, INFO, DEBUG). Errors always show."""
    if logging.getLogger().handlers:
        return                              # called from a program whose logging is set up
    level = os.environ.get("KIO_LOG_LEVEL") or ("WARNING" if debug else "ERROR")
    logging.basicConfig(level=level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _configure_logging(getattr(args, "debug", False))
    interrupts.install()
    name = " ".join(filter(None, (args.command, getattr(args, "action", None))))
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print(f"kio {name}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (UsageError, ConfigError) as exc:
        if args.debug:
            raise
        print(f"kio {name}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (KafkaError, OSError) as exc:
        if args.debug:
            raise
        print(f"kio {name}: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_ERROR
