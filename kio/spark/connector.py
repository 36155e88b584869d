"""Spark's own Kafka connector (``spark-sql-kafka-0-10``), fetched from Maven
Central for comparison tests and benchmarks: what a PySpark user would run
instead of ``kio.spark``.

:func:`connector_jars` returns the jars to pass to a SparkSession with
``spark.jars`` (comma-separated paths). They are fetched once with the
machine's ``mvn`` (a small pom, ``dependency:copy-dependencies`` with the
runtime scope; ``dependency:get`` fails on the connector's test-jar
dependencies) into ``$KIO_SPARK_CONNECTOR_HOME`` or
``~/.cache/kio/spark-kafka/<version>``. Jars that pyspark already ships
(scala-library, hadoop-client, spark-tags, snappy, lz4...) are left out, so
Spark's own win; kept are the connector, its token provider, the
kafka-clients release it was built against and commons-pool2 (Spark ships
only commons-pool 1).

The connector version should be pyspark's own. When Maven Central does not
serve it, the newest release it serves is tried (:data:`FALLBACK_VERSIONS`);
a release it refused is remembered for a day so that every session does not
ask again.
"""
from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import List, Optional, Sequence

from kio.testing.maven import fetch_jars
from kproto.errors import KafkaError

__all__ = ["ConnectorUnavailable", "connector_jars", "connector_version", "spark_jars_option",
           "FALLBACK_VERSIONS"]

#: Releases tried, newest first, when pyspark's own version is not served.
FALLBACK_VERSIONS = ("4.2.0",)

_ARTIFACT = "spark-sql-kafka-0-10_2.13"
_NOT_SERVED_TTL = 24 * 3600.0

_POM = """<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by kio.spark.connector: Spark's Kafka connector {version} and its runtime jars. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>kio.local</groupId>
  <artifactId>spark-kafka-connector</artifactId>
  <version>{version}</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.spark</groupId>
      <artifactId>{artifact}</artifactId>
      <version>{version}</version>
    </dependency>
  </dependencies>
</project>
"""


class ConnectorUnavailable(KafkaError):
    """Spark's Kafka connector could not be fetched (no Maven, not served)."""


def cache_root() -> Path:
    return Path(os.environ.get("KIO_SPARK_CONNECTOR_HOME")
                or Path.home() / ".cache" / "kio" / "spark-kafka")


def _pyspark_jars_dir() -> Path:
    import pyspark
    return Path(pyspark.__file__).parent / "jars"


def _artifact_name(jar: str) -> str:
    """``kafka-clients-3.9.2.jar`` -> ``kafka-clients``; ``scala-library-2.13.18.jar`` ->
    ``scala-library`` (the name without its version)."""
    m = re.match(r"(.+?)-\d[\w.\-]*\.jar$", jar)
    return m.group(1) if m else jar


def _shipped_by_spark() -> set:
    return {_artifact_name(p.name) for p in _pyspark_jars_dir().glob("*.jar")}


def _fetch(version: str) -> Path:
    """The folder of the connector ``version``'s runtime jars, fetched with Maven
    on first use. A release Maven Central refused is remembered for a day."""
    folder = cache_root() / version
    refused = folder / ".not-served"

    def known_refused() -> None:
        if refused.exists() and time.time() - refused.stat().st_mtime < _NOT_SERVED_TTL:
            raise ConnectorUnavailable(f"Maven Central did not serve org.apache.spark:{_ARTIFACT}:{version} "
                                       f"(remembered in {refused}):\n{refused.read_text()[-2000:]}")

    def fail(why: str) -> ConnectorUnavailable:
        if "was not found" in why or "Could not find artifact" in why:
            refused.write_text(why[-4000:])
        return ConnectorUnavailable(f"fetching org.apache.spark:{_ARTIFACT}:{version}: {why}")

    # -U: a refusal Maven cached in ~/.m2 earlier must not hide a release served since.
    lib = fetch_jars(folder, _POM.format(artifact=_ARTIFACT, version=version), _ARTIFACT, fail,
                     refresh=True, before=known_refused)
    refused.unlink(missing_ok=True)
    return lib


def connector_version(candidates: Optional[Sequence[str]] = None) -> str:
    """The connector release to use: pyspark's own version if Maven Central
    serves it, else the first of ``candidates`` (default
    :data:`FALLBACK_VERSIONS`) that it serves. Fetches it on the way."""
    import pyspark
    tried = []
    for version in (pyspark.__version__, *(candidates or FALLBACK_VERSIONS)):
        if version in tried:
            continue
        tried.append(version)
        try:
            _fetch(version)
            return version
        except ConnectorUnavailable as e:
            last = e
    raise ConnectorUnavailable(f"no release of org.apache.spark:{_ARTIFACT} could be fetched "
                               f"(tried {', '.join(tried)}); the last error: {last}")


def connector_jars(version: Optional[str] = None) -> List[Path]:
    """The jars to add to a SparkSession for ``format("kafka")``: the connector
    (``version``, or :func:`connector_version`'s choice) and those of its
    runtime dependencies that pyspark does not ship."""
    lib = _fetch(version or connector_version())
    shipped = _shipped_by_spark()
    return sorted(p for p in lib.glob("*.jar") if _artifact_name(p.name) not in shipped)


def spark_jars_option(version: Optional[str] = None) -> str:
    """:func:`connector_jars` as the value of the ``spark.jars`` setting."""
    return ",".join(str(p) for p in connector_jars(version))
