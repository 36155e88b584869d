"""kio.spark fails at once, with a message that says what to do, when Spark's
Python workers cannot import kio (issue 26: the README's PySpark example run
with a venv's python without activating the venv: Spark starts ``python3``
from PATH for its workers, which has no kio).

A real local Spark, in a child process whose environment is a user's: no
PYSPARK_PYTHON, no PYTHONPATH naming this checkout (the program itself puts
the checkout on sys.path), and a ``python3`` first on PATH that is this
interpreter without its site-packages' .pth files, so pyspark and pyarrow
import there but kio does not. The positive path (workers that import kio)
is every other Spark test, whose sessions pass the same check.
"""
import os
import subprocess
import sys
import sysconfig
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROGRAM = """
import sys, time
sys.path.insert(0, {root!r})
from pyspark.sql import SparkSession
import kio.spark
from kio.errors import SparkWorkerError

spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
spark.sparkContext.setLogLevel("OFF")
df = spark.createDataFrame([("k1", "v1")], "key string, value string")
for attempt in ("write", "register"):
    start = time.monotonic()
    try:
        if attempt == "write":
            kio.spark.write(df, topic="clicks", bootstrap_servers="localhost:9092")
        else:
            kio.spark.register(spark)
    except SparkWorkerError as e:
        print("ERROR", attempt, round(time.monotonic() - start, 1), e, flush=True)
    else:
        print("NO ERROR", attempt, flush=True)
spark.stop()
"""


def test_workers_without_kio_fail_at_once_naming_the_interpreter_and_pyspark_python(tmp_path):
    site_packages = sysconfig.get_paths()["purelib"]
    fake = tmp_path / "bin" / "python3"
    fake.parent.mkdir()
    # -S: no site module, so the editable install's .pth (kio) is not read;
    # the site-packages folder itself stays importable (pyspark, pyarrow).
    fake.write_text(f'#!/bin/sh\nPYTHONPATH="$PYTHONPATH:{site_packages}" exec {sys.executable} -S "$@"\n')
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON",
                                                              "PYTHONPATH", "SPARK_HOME")}
    env["PATH"] = f"{fake.parent}{os.pathsep}{env.get('PATH', '')}"
    script = tmp_path / "job.py"
    script.write_text(PROGRAM.format(root=ROOT))
    start = time.monotonic()
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=240)
    took = time.monotonic() - start
    report = f"\n--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-4000:]}"
    assert proc.returncode == 0, report
    lines = [line for line in proc.stdout.splitlines() if line.startswith(("ERROR", "NO ERROR"))]
    assert [line.split()[:2] for line in lines] == [["ERROR", "write"], ["ERROR", "register"]], report
    message = lines[0]
    assert "'python3'" in message and sys.executable in message, message     # configured and ours
    assert "cannot import kio (ModuleNotFoundError: No module named 'kio')" in message, message
    assert "pyarrow" not in message.split("cannot import", 1)[1].split(".", 1)[0], message
    assert "PYSPARK_PYTHON" in message, message
    assert float(lines[0].split()[2]) < 30, f"the check took too long{report}"
    assert float(lines[1].split()[2]) < 30, f"the check took too long{report}"
    assert took < 200, took
