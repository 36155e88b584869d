"""What every console command shares: exit codes, ``--property`` parsing,
the progress line, and turning SIGTERM into a clean shutdown."""
from __future__ import annotations

import argparse
import signal
import sys
import time

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130

EXIT_CODES_HELP = """exit codes:
  0    success
  1    a Kafka error (unreachable broker, unknown topic, failed delivery,
       verification mismatch)
  2    bad usage (unknown option, bad --property key or value, an illegal
       topic name, an unreadable --file)
  130  interrupted (Ctrl-C or SIGTERM) after a clean shutdown"""


class UsageError(Exception):
    """Bad command-line input: exit code 2."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, except that an argument a subcommand does not know
    is reported by that subcommand: argparse hands a subparser's leftovers
    back to the top-level parser, so ``kio consume --from-begining`` printed
    ``kio``'s usage instead of ``kio consume``'s. Subparsers are made of the
    class of their parent (add_subparsers' default), so making the top-level
    parser one of these is enough."""

    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras


def topic_name(value: str) -> str:
    """argparse ``type=`` for a topic to create or write: Kafka's naming
    rules, checked before anything connects (exit code 2 with the usage)."""
    from kproto.cluster import validate_topic_name
    from kproto.errors import KafkaError

    try:
        return validate_topic_name(value)
    except KafkaError as e:
        raise argparse.ArgumentTypeError(getattr(e, "message", str(e))) from None


def properties(pairs, what="--property") -> dict:
    """['key=value', ...] -> {key: value} (values stay strings: the config
    parsers convert and check them)."""
    out = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"{what} {pair!r}: expected key=value")
        out[key.strip()] = value
    return out


def headers(pairs):
    """['k=v', ...] -> [(k, b'v'), ...] in order."""
    return [(k, v.encode()) for k, v in properties(pairs, "--header").items()] if pairs else None


class Interrupts:
    """Ctrl-C (SIGINT) and SIGTERM as KeyboardInterrupt - but never in the
    middle of a client call: inside ``with interrupts.deferred():`` a signal
    is remembered and raised when the block ends, so a send or poll is never
    cut half-way (a record appended without its handle, records drained
    from the consumer but not returned, then committed by close)."""

    def __init__(self):
        self._deferring = 0
        self._pending = False

    def install(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._handler)
        return self

    def _handler(self, signum, frame):
        if self._deferring:
            self._pending = True
        else:
            raise KeyboardInterrupt

    def deferred(self):
        return _Deferred(self)


class _Deferred:
    def __init__(self, owner):
        self.owner = owner

    def __enter__(self):
        self.owner._deferring += 1

    def __exit__(self, *exc):
        self.owner._deferring -= 1
        if self.owner._pending and not self.owner._deferring and exc[0] is None:
            self.owner._pending = False
            raise KeyboardInterrupt


#: the process's interrupt policy, installed by kio.cli.main
interrupts = Interrupts()


class Progress:
    """A progress line on stderr - records, rate, elapsed - redrawn at most
    once per ``every`` seconds, and only when stderr is a terminal: piped
    output stays clean."""

    def __init__(self, what: str, every: float = 1.0, stream=None):
        self.what = what
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty()
        self.every = every
        self.start = time.monotonic()
        self._next = self.start + every
        self._shown = False

    def update(self, count: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self.every
        elapsed = now - self.start
        self.stream.write(f"\r{self.what}: {count:,} records, {count / elapsed:,.0f}/s, "
                          f"{elapsed:.0f} s elapsed ")
        self.stream.flush()
        self._shown = True

    def done(self) -> None:
        if self._shown:
            self.stream.write("\n")
            self.stream.flush()
