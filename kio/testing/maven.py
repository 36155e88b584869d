"""Jars fetched from Maven Central with the machine's ``mvn``, once per cache
folder: the suite's Apache Kafka broker and tools (kio.testing.kafka_broker) and
Spark's own Kafka connector (kio.spark.connector) both come this way."""
from __future__ import annotations

import fcntl
import shutil
import subprocess
from pathlib import Path
from typing import Callable, Optional


def fetch_jars(folder: Path, pom: str, main_jar: str, fail: Callable[[str], Exception], *,
               refresh: bool = False, before: Optional[Callable[[], None]] = None) -> Path:
    """``folder/lib`` with the runtime jars of the project ``pom`` describes,
    fetched by ``mvn dependency:copy-dependencies`` unless a completed fetch
    is there. A file lock keeps two processes from fetching into one folder
    at once. ``main_jar`` is the artifact name whose jar must arrive;
    ``fail(message)`` makes the exception raised when mvn is missing or fails
    (its message carries Maven's output); ``before`` runs under the lock
    before fetching (e.g. to refuse a release known not to be served);
    ``refresh`` (mvn -U) asks the registry again instead of trusting a
    refusal cached in ~/.m2."""
    lib = folder / "lib"
    done = folder / ".complete"
    if done.exists():
        return lib
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return lib
        if before is not None:
            before()
        mvn = shutil.which("mvn")
        if mvn is None:
            raise fail("Maven (mvn) is not on the PATH (Debian: apt-get install maven)")
        (folder / "pom.xml").write_text(pom)
        shutil.rmtree(lib, ignore_errors=True)
        cmd = [mvn, "-q", "-B", *(["-U"] if refresh else []), "-f", str(folder / "pom.xml"),
               "dependency:copy-dependencies", f"-DoutputDirectory={lib}", "-DincludeScope=runtime"]
        run = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        if run.returncode != 0 or not any(lib.glob(f"{main_jar}-*.jar")):
            out = run.stdout.decode("utf-8", "replace")
            raise fail(f"Maven could not fetch it (exit {run.returncode}):\n{out[-4000:]}")
        done.write_text(pom)
    return lib
