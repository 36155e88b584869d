"""The genuine Apache Kafka broker, fetched from Maven Central and run locally.

``KafkaBroker`` is a single-node KRaft cluster (one JVM that is broker and
controller) on two free loopback ports, with the settings a test or a
development machine wants: internal topics with one replica and one
partition, ``group.initial.rebalance.delay.ms=0`` so a group forms at once,
and (Kafka 4.4 defaults) the consumer, share and streams group protocols on
(KIP-848, KIP-932, KIP-1071).

The jars come from Maven Central through the machine's ``mvn`` into a cache
folder (``$KIO_KAFKA_HOME`` or ``~/.cache/kio/kafka``), once per version; the
storage is formatted with Kafka's own storage tool before the first start.
Java 17 or newer must be on the PATH (or in ``$JAVA_HOME``).
"""
from __future__ import annotations

import base64
import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

from kio.testing.maven import fetch_jars
from kio.testing.broker import BrokerProcess, BrokerStartError, free_port

__all__ = ["KafkaBroker", "KAFKA_VERSION", "KAFKA_TOOLS_VERSION", "kafka_classpath",
           "tools_classpath", "java_binary", "official_message_dir"]

#: The Apache Kafka release the suite runs against (the broker and its client jar).
KAFKA_VERSION = "4.4.0"
#: kafka-tools (ProducerPerformance, ConsumerPerformance, the console consumer):
#: Maven Central serves no kafka-tools 4.4.0 here, so the Java tools come from
#: the newest release that it serves, with that release's kafka-clients.
KAFKA_TOOLS_VERSION = "4.3.1"
#: Kafka logs through SLF4J 1.7; this binding sends it to log4j2 (the broker's own choice).
_LOG4J_VERSION = "2.25.5"

_POM = """<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by kio.testing.kafka_broker: the jars of {artifact} {version} for a local broker/tools. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>kio.local</groupId>
  <artifactId>{artifact}-runtime</artifactId>
  <version>{version}</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>{artifact}</artifactId>
      <version>{version}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>{log4j}</version>
    </dependency>
  </dependencies>
</project>
"""

_LOG4J2_CONFIG = """\
Configuration:
  Appenders:
    Console:
      name: STDOUT
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: WARN
      AppenderRef:
        - ref: STDOUT
    Logger:
      - name: kafka.server.BrokerServer
        level: INFO
"""


def cache_root() -> Path:
    return Path(os.environ.get("KIO_KAFKA_HOME") or Path.home() / ".cache" / "kio" / "kafka")


def java_binary() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise BrokerStartError("the Apache Kafka broker needs Java 17 or newer on the PATH "
                               "(Debian: apt-get install openjdk-17-jre-headless)")
    return java


def _fetch(artifact: str, version: str) -> Path:
    """The folder of ``org.apache.kafka:artifact:version``'s jars and its runtime
    dependencies, fetched with Maven on first use."""
    return fetch_jars(cache_root() / f"{artifact}-{version}",
                      _POM.format(artifact=artifact, version=version, log4j=_LOG4J_VERSION), artifact,
                      lambda why: BrokerStartError(f"fetching Apache Kafka ({artifact} {version}): {why}"))


def kafka_classpath(version: str = KAFKA_VERSION) -> str:
    """Class path of the Apache Kafka broker (``kafka_2.13``) of ``version``."""
    return str(_fetch("kafka_2.13", version) / "*")


def kafka_clients_jar(version: str = KAFKA_VERSION) -> Path:
    """The ``kafka-clients`` jar of ``version`` (it holds the official message definitions)."""
    return _fetch("kafka_2.13", version) / f"kafka-clients-{version}.jar"


def official_message_dir(version: str = KAFKA_VERSION) -> Path:
    """A folder with the official message definitions (``*.json``) of Kafka
    ``version``, unpacked once from its kafka-clients jar (``common/message/``):
    what kproto's schema tables are generated from and checked against."""
    import zipfile

    jar = kafka_clients_jar(version)
    folder = jar.parent.parent / "messages"
    done = folder / ".complete"
    if not done.exists():
        folder.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(jar) as z:
            for name in z.namelist():
                if name.startswith("common/message/") and name.endswith(".json"):
                    (folder / name.rsplit("/", 1)[1]).write_bytes(z.read(name))
        done.write_text(version)
    return folder


def tools_classpath(version: str = KAFKA_TOOLS_VERSION) -> str:
    """Class path of Kafka's Java tools (ProducerPerformance, ConsoleConsumer...)."""
    return str(_fetch("kafka-tools", version) / "*")


def _cluster_id() -> str:
    # Kafka's cluster ids are 16 random bytes in URL-safe base64 without padding.
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class KafkaBroker(BrokerProcess):
    """Apache Kafka as a single-node KRaft broker+controller on loopback.

    ``config`` adds or overrides server properties. The data lives in a
    temporary folder that ``stop()`` removes; ``restart()`` keeps it (unlike
    Tansu's memory storage, Kafka's log survives a restart).
    """

    kind = "kafka"
    start_timeout = 90.0          # a JVM's first start on a busy 2-core machine

    def __init__(self, host: str = "127.0.0.1", port: int | None = None,
                 advertised_port: int | None = None, log_path: str | None = None,
                 config: dict[str, object] | None = None, version: str = KAFKA_VERSION,
                 heap: str = "1g", extra_classpath: list[str] | None = None,
                 jvm_options: list[str] | None = None):
        super().__init__(host, port, advertised_port, log_path)
        #: More options of the broker's JVM, after kio's own (a later
        #: ``-Dname=value`` wins): a Flight Recorder recording
        #: (``-XX:StartFlightRecording=...``) or another log4j2 file for a
        #: profile of the broker. The storage tool's JVM does not get them.
        self.jvm_options = list(jvm_options or [])
        # Plugins of the broker (a metrics reporter, an authorizer) compiled
        # elsewhere: folders or jars appended to its classpath.
        self.extra_classpath = [str(p) for p in extra_classpath or []]
        self.controller_port = free_port(host)
        self.version = version
        self.heap = heap
        self.extra_config = dict(config or {})
        self.workdir: Path | None = None
        #: Formatted into the storage; the nodes of one cluster share it.
        self.cluster_id = _cluster_id()

    def server_properties(self) -> dict[str, object]:
        assert self.workdir is not None
        props: dict[str, object] = {
            "process.roles": "broker,controller",
            "node.id": 1,
            "controller.quorum.voters": f"1@{self.host}:{self.controller_port}",
            "listeners": f"PLAINTEXT://{self.host}:{self.port},"
                         f"CONTROLLER://{self.host}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{self.advertised_port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.workdir / "data"),
            "num.partitions": 1,
            # One broker: internal topics with one replica; one partition each so
            # the coordinators load at once instead of 50 partitions' worth.
            "offsets.topic.replication.factor": 1,
            "offsets.topic.num.partitions": 1,
            "transaction.state.log.replication.factor": 1,
            "transaction.state.log.min.isr": 1,
            "transaction.state.log.num.partitions": 1,
            "share.coordinator.state.topic.replication.factor": 1,
            "share.coordinator.state.topic.min.isr": 1,
            "share.coordinator.state.topic.num.partitions": 1,
            # A group forms as soon as its first member joins (the default waits 3 s).
            "group.initial.rebalance.delay.ms": 0,
            # KIP-848 groups: the broker tells members how often to heartbeat
            # (default 5 s, and no group may go below the minimum, also 5 s);
            # 500 ms lets tests see rebalances in a second or two. A member
            # that vanished is expelled after the session timeout (45 s by
            # default; 10 s here).
            "group.consumer.min.heartbeat.interval.ms": 500,
            "group.consumer.heartbeat.interval.ms": 500,
            "group.consumer.min.session.timeout.ms": 6000,
            "group.consumer.session.timeout.ms": 10000,
            # KIP-1071 streams groups (on by default in 4.4: streams.version 1),
            # tuned as the consumer groups above: no initial assignment delay
            # (3 s by default), heartbeats every 500 ms, 10 s session timeout.
            "group.streams.initial.rebalance.delay.ms": 0,
            "group.streams.min.heartbeat.interval.ms": 500,
            "group.streams.heartbeat.interval.ms": 500,
            "group.streams.min.session.timeout.ms": 6000,
            "group.streams.session.timeout.ms": 10000,
            # KIP-932 share groups, tuned the same way: heartbeats every 500 ms
            # (default and minimum 5 s: a member's first assignment came 5-10 s
            # after it joined); a group may set its acquisition lock as low as
            # 5 s (the broker's floor is 15 s by default), so a test of a lock
            # running out waits seconds, not 15. The default lock stays 30 s.
            "group.share.min.heartbeat.interval.ms": 500,
            "group.share.heartbeat.interval.ms": 500,
            "group.share.min.record.lock.duration.ms": 5000,
            "auto.create.topics.enable": "true",
            "delete.topic.enable": "true",
        }
        props.update(self.extra_config)
        return props

    def _prepare(self) -> None:
        fresh = self.workdir is None
        if fresh:
            self.workdir = Path(tempfile.mkdtemp(prefix="kio-kafka-"))
        classpath = kafka_classpath(self.version)
        props = self.server_properties()
        (self.workdir / "server.properties").write_text(
            "".join(f"{k}={v}\n" for k, v in props.items()))
        (self.workdir / "log4j2.yaml").write_text(_LOG4J2_CONFIG)
        if fresh:
            fmt = subprocess.run(
                [java_binary(), *self._jvm_options(heap="256m"), "-cp", classpath,
                 # "--cluster-id=ID" in one word: a random id may start with "-",
                 # which the tool's argument parser would take for an option.
                 "kafka.tools.StorageTool", "format", f"--cluster-id={self.cluster_id}",
                 "-c", str(self.workdir / "server.properties"), *self._format_options()],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            if fmt.returncode != 0:
                raise BrokerStartError("Kafka's storage tool could not format the log folder:\n"
                                       + fmt.stdout.decode("utf-8", "replace")[-4000:])

    def _format_options(self) -> list[str]:
        """More options of the storage tool's ``format`` (SCRAM users, for one)."""
        return []

    def _jvm_options(self, heap: str) -> list[str]:
        assert self.workdir is not None
        return [f"-Xmx{heap}", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true",
                f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.yaml'}"]

    def _command(self) -> list[str]:
        assert self.workdir is not None
        classpath = os.pathsep.join([kafka_classpath(self.version), *self.extra_classpath])
        return [java_binary(), *self._jvm_options(self.heap), *self.jvm_options,
                "-cp", classpath, "kafka.Kafka", str(self.workdir / "server.properties")]

    def _cleanup(self) -> None:
        workdir, self.workdir = self.workdir, None
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
