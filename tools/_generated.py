"""The command line every generator in tools/ shares: write its output file,
or with ``--check`` say whether the file in the tree is what it would write."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable, List, Optional


def generator_main(tool: str, doc: Optional[str], out: Path, render: Callable[[], str],
                   argv: Optional[List[str]] = None) -> int:
    """Run the generator ``tool`` (its file): ``doc`` is its module docstring
    (the first paragraph is the help), ``render()`` the text ``out`` must
    hold. Returns the exit status."""
    ap = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help=f"exit 1 if {out.name} is out of date")
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        if not out.exists() or out.read_text() != text:
            print(f"{out} is out of date: run python tools/{Path(tool).name}", file=sys.stderr)
            return 1
        return 0
    out.write_text(text)
    return 0
