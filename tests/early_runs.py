"""Scenarios that mostly wait on a broker's fixed timer, run as child
processes started near the run's start, so their waiting overlaps the rest
of the suite instead of adding to it.

A test marked ``@pytest.mark.early_run("tests/some_file.py")`` names a
script (run as ``python <script>``) that does the whole scenario, with its
own broker, and exits 0 only when every check held. conftest plans the
script when the test is collected and selected and starts it once the
run's first test has finished; the test itself then waits for it
(``wait``) and fails with the script's output when it failed.
The checks are the script's plain ``assert`` statements: nothing is lost by
running them in a child, only the place in the run's timeline moves.

Why a child process and not a thread: the suite has tests that measure this
process's CPU time and wake-ups (tests/test_idle_cpu.py); a scenario polling
eight consumers beside them would be counted as theirs."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_planned: dict[str, str] = {}          # test node id -> script, not started yet
_runs: dict[str, "EarlyRun"] = {}


class EarlyRun:
    """One scenario script running in a child Python with its output in a file."""

    def __init__(self, script: str):
        self.script = script
        fd, self.output_path = tempfile.mkstemp(prefix="kio-early-", suffix=".log")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
        self.started = time.monotonic()
        with os.fdopen(fd, "wb") as out:
            self.proc = subprocess.Popen([sys.executable, os.path.join(ROOT, script)], cwd=ROOT, env=env,
                                         stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)

    def wait(self, timeout: float) -> tuple[int, str]:
        """(exit status, output) once the script ends; kills it after ``timeout`` seconds
        of waiting (exit status then -9, the output says so)."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            code = self.proc.returncode
        with open(self.output_path, encoding="utf-8", errors="replace") as f:
            output = f.read()
        os.unlink(self.output_path)
        took = time.monotonic() - self.started
        return code, f"{output}\n[{self.script}: exit {code}, {took:.0f} s after it started]"

    def stop(self) -> None:
        """Ends the script (SIGTERM, then SIGKILL) if it still runs; its own
        cleanup (``finally``) stops its broker on SIGTERM."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def plan(key: str, script: str) -> None:
    """Remembers ``script`` for the test ``key`` (its node id), for ``start_planned``."""
    _planned[key] = script


def start_planned() -> None:
    """Starts every planned script (each once)."""
    while _planned:
        start(*_planned.popitem())


def start(key: str, script: str) -> None:
    """Starts ``script`` for the test ``key`` (its node id), once."""
    _planned.pop(key, None)
    if key not in _runs:
        _runs[key] = EarlyRun(script)


def wait(key: str, script: str, timeout: float) -> tuple[int, str]:
    """The exit status and output of the test ``key``'s ``script`` (started
    now if conftest did not start it, e.g. in a run that did not collect it)."""
    start(key, script)
    return _runs.pop(key).wait(timeout)


def stop_all() -> None:
    """Ends every script no test waited for (a run stopped early, ``-x``)."""
    _planned.clear()
    while _runs:
        _runs.popitem()[1].stop()
