"""What the callgrind benchmarks (send_cost, consumer_cost, partition_cost) share:
reading the instruction total of a callgrind output file.

Kept apart from ``_bench`` so that the measured processes import nothing but
the code they measure (``_bench`` loads a client at import).
"""
from __future__ import annotations

import re


def instructions(out_file: str, thread: str = "") -> int:
    """The instruction count (Ir) of a callgrind output: of the whole process
    (``thread=""``), or, with ``--separate-threads=yes``, of one thread, its
    file named ``<out_file><thread>`` (``"-01"`` is the application's)."""
    path = out_file + thread
    with open(path) as f:
        for line in f:
            m = re.match(r"(?:summary|totals):\s+(\d+)", line)
            if m:
                return int(m.group(1))
    raise RuntimeError(f"no instruction total (a 'summary:' or 'totals:' line) in {path}")
