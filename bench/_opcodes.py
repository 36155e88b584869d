"""Python opcodes executed per function on one thread: a load-independent
split of the Python part of a profile (callgrind sees only the interpreter's
C functions, and Python 3.11 runs nested Python calls in one
``_PyEval_EvalFrameDefault``, so their costs are not told apart there).

``OpcodeCount().start()`` traces the calling thread (``sys.settrace`` with
``f_trace_opcodes``) until ``stop()``: each Python function's own opcodes,
its inclusive opcodes (its own and those of the Python functions it called,
directly or not; compiled Cython code runs no opcode and is invisible), and
its calls (a generator's resumptions count as calls). Slow - tens of times
slower than untraced - so measure at a low rate and take a difference of
two runs, as with callgrind.
"""
from __future__ import annotations

import json
import sys
from collections import Counter
from typing import Any, Dict, List


def _name(code: Any) -> str:
    return f"{code.co_filename.rsplit('/', 2)[-2:][-1]}:{code.co_qualname}"


class OpcodeCount:
    """Opcodes per Python function on the thread that calls :meth:`start`."""

    def __init__(self) -> None:
        self.own: Counter = Counter()
        self.inclusive: Counter = Counter()
        self.calls: Counter = Counter()
        self._total = 0
        # (code, opcodes so far when it was entered) of the traced frames, innermost last
        self._stack: List[Any] = []

    def _trace(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "opcode":
            self.own[frame.f_code] += 1
            self._total += 1
        elif event == "call":
            frame.f_trace_opcodes = True
            self._stack.append((frame.f_code, self._total))
            self.calls[frame.f_code] += 1
        elif event == "return" and self._stack:
            # (a recursive function counts its inner calls twice; none on the measured paths)
            code, entered = self._stack.pop()
            self.inclusive[code] += self._total - entered
        return self._trace

    def start(self) -> None:
        """Trace the calling thread's new frames from now on."""
        sys.settrace(self._trace)

    def stop(self) -> None:
        sys.settrace(None)

    def totals(self) -> Dict[str, List[int]]:
        """{``file:qualname``: [own opcodes, inclusive opcodes, calls]} (functions of
        the same name in one file are added up)."""
        out: Dict[str, List[int]] = {}
        for code in set(self.own) | set(self.inclusive):
            row = out.setdefault(_name(code), [0, 0, 0])
            row[0] += self.own[code]
            row[1] += self.inclusive[code]
            row[2] += self.calls[code]
        return out

    def dump(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(self.totals(), f)


def per_unit(small: str, large: str, units: float, top: int = 40) -> str:
    """The difference of two dumps per unit (a record, a Fetch answer),
    largest inclusive first, as a text table."""
    with open(small) as f:
        a = json.load(f)
    with open(large) as f:
        b = json.load(f)
    rows = []
    for name, (own, inc, calls) in b.items():
        o0, i0, c0 = a.get(name, (0, 0, 0))
        rows.append(((inc - i0) / units, (own - o0) / units, (calls - c0) / units, name))
    rows.sort(reverse=True)
    total = sum(r[1] for r in rows)
    lines = [f"opcodes per unit: {total:.0f}", f"{'inclusive':>10} {'own':>8} {'calls':>6}  function"]
    lines += [f"{i:10.0f} {o:8.0f} {c:6.2f}  {n}" for i, o, c, n in rows[:top]]
    return "\n".join(lines)


if __name__ == "__main__":
    print(per_unit(sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else 40))
