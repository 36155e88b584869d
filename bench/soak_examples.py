#!/usr/bin/env python3
"""Runs every example of the README and the docs many times in a row against
a broker this script starts (issue 26: examples that never flake). The suite
runs each block once (tests/test_docs.py); this is the long version.

    python bench/soak_examples.py [--runs 50] [--broker kafka|tansu] [--match admin]

Prints, per block, how many runs passed, and the first failure's report.
Exit status 1 when any run failed.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import test_docs  # noqa: E402  (the blocks and how one is run: the suite's own code)

from kio.testing import default_broker_kind, start_broker  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--broker", choices=["kafka", "tansu"], default=default_broker_kind())
    ap.add_argument("--match", default="", help="only blocks whose id contains this")
    ap.add_argument("--skip-spark", action="store_true", help="leave out the PySpark blocks (minutes each)")
    args = ap.parse_args()
    blocks = [b for b in test_docs.RUNNABLE if args.match in b[0]
              and not (args.skip_spark and "pyspark" in b[2])]
    broker = start_broker(args.broker)
    failed_any = False
    try:
        print(f"{len(blocks)} block(s) x {args.runs} runs against {args.broker} at {broker.bootstrap_servers}")
        for block_id, lang, code in blocks:
            passed, first, started = 0, None, time.monotonic()
            for _ in range(args.runs):
                with tempfile.TemporaryDirectory() as tmp:
                    failure = test_docs.run_block(block_id, lang, code, broker.bootstrap_servers,
                                                  args.broker, Path(tmp))
                if failure is None:
                    passed += 1
                elif first is None:
                    first = failure
            took = time.monotonic() - started
            print(f"{passed:4d}/{args.runs}  {block_id}  ({took:.0f} s)", flush=True)
            if first is not None:
                failed_any = True
                print(first[-3000:], flush=True)
    finally:
        broker.stop()
    return 1 if failed_any else 0


if __name__ == "__main__":
    sys.exit(main())
