"""Can Spark's Python workers import kio? Checked once per session, up front.

What :func:`kio.spark.write` and the ``kio-kafka`` data source ship to Spark
(the ``mapInArrow`` function, the data source class) is pickled by reference
to kio's modules, so every Python worker must import kio and pyarrow. Spark
starts its workers with ``PYSPARK_PYTHON`` (``python3`` from ``PATH`` when it
is unset), which is often not the interpreter the program runs: a venv used
without being activated, a notebook kernel. Spark then fails deep inside the
first job (``ModuleNotFoundError: No module named 'kio'`` after a minute of
JVM traces). :func:`check_workers` runs one tiny job first whose function
does not need kio (it is pickled by value, and the UDF runs without Arrow),
and turns a worker that cannot import kio or pyarrow, or cannot run at all,
into one :class:`SparkWorkerError` that names the interpreter and says to
set ``PYSPARK_PYTHON``.

kio never creates the session (the user's builder does), so it does not set
``spark.pyspark.python`` itself: the environment variable must be set before
the session's JVM starts, which only the program can do.
"""
from __future__ import annotations

import json
import os
import sys
import weakref

from kproto.errors import KafkaError

__all__ = ["SparkWorkerError", "check_workers", "worker_python"]

# The probe's source: compiled into a function of a module that does not
# exist, so cloudpickle sends it by value and a worker without kio can run it.
_PROBE = '''
def probe():
    import json, sys
    missing = []
    for name in ("kio", "pyarrow"):
        try:
            __import__(name)
        except Exception as e:  # noqa: BLE001 - any import failure is the answer
            missing.append("%s (%s: %s)" % (name, type(e).__name__, e))
    return json.dumps({"python": sys.executable, "version": sys.version.split()[0], "missing": missing})
'''

_checked: "weakref.WeakSet" = weakref.WeakSet()
_checked_ids: set = set()          # sessions that cannot be weakly referenced


class SparkWorkerError(KafkaError):
    """Spark's Python workers cannot run kio's code: the message names the
    interpreter they run and what to set."""


def worker_python(spark) -> str:
    """The interpreter Spark starts its Python workers with, as configured:
    the session's ``pythonExec`` (``PYSPARK_PYTHON`` when the session was
    made, else ``python3``), or for a Spark Connect session this process's
    ``PYSPARK_PYTHON`` (the server's own may differ)."""
    try:
        return spark.sparkContext.pythonExec
    except Exception:  # noqa: BLE001 - Spark Connect has no sparkContext
        return os.environ.get("PYSPARK_PYTHON", "python3")


def _already_checked(spark) -> bool:
    try:
        return spark in _checked
    except TypeError:
        return id(spark) in _checked_ids


def _mark_checked(spark) -> None:
    try:
        _checked.add(spark)
    except TypeError:
        _checked_ids.add(id(spark))


def _probe_function():
    namespace = {"__name__": "kio_spark_worker_probe"}   # no such module: pickled by value
    exec(compile(_PROBE, "<kio.spark worker probe>", "exec"), namespace)
    return namespace["probe"]


def _advice(configured: str) -> str:
    return (f"Set PYSPARK_PYTHON to an interpreter that has kio installed - this program runs "
            f"{sys.executable} - before the SparkSession is created (e.g. "
            f"`export PYSPARK_PYTHON={sys.executable}`, or os.environ['PYSPARK_PYTHON'] = "
            f"sys.executable at the top of the program), or spark.pyspark.python in "
            f"spark-submit / spark-defaults.conf; on a cluster, install kio where the "
            f"executors run. (Workers configured: {configured!r}.)")


def check_workers(spark) -> None:
    """Raise :class:`SparkWorkerError` unless Spark's Python workers import
    kio and pyarrow. Runs one one-row job the first time for ``spark``
    (about a second); later calls for the same session return at once."""
    if _already_checked(spark):
        return
    from pyspark.sql.functions import udf

    configured = worker_python(spark)
    probe = udf(_probe_function(), "string", useArrow=False)
    try:
        answer = json.loads(spark.range(1).select(probe()).collect()[0][0])
    except Exception as e:  # noqa: BLE001 - a worker that cannot start fails the job
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise SparkWorkerError(
            f"kio.spark: Spark's Python workers ({configured!r}) could not run a one-row job: "
            f"{first[:500]}. {_advice(configured)}") from e
    if answer["missing"]:
        raise SparkWorkerError(
            f"kio.spark: Spark's Python workers run {configured!r} ({answer['python']}, Python "
            f"{answer['version']}), which cannot import {', '.join(answer['missing'])}. "
            f"{_advice(configured)}")
    _mark_checked(spark)
