"""The local brokers start once and leave nothing behind."""
import pytest

from kio.testing.broker import BrokerStartError, LocalBroker, start_broker
from kio.testing.kafka_broker import KafkaBroker

from conftest import _live_children  # noqa: I100


def _brokers_running():
    import os
    return [c for _, c in _live_children(os.getpid()) if "tansu" in c or "kafka.Kafka" in c]


def test_with_started_broker_runs_one_process_and_stops_it():
    before = len(_brokers_running())
    # `with LocalBroker().start() as b:` used to start a second broker in
    # __enter__ and orphan the first one.
    with LocalBroker().start() as b:
        assert b.running
        assert len(_brokers_running()) == before + 1
        with pytest.raises(BrokerStartError, match="already started"):
            b.start()
        assert len(_brokers_running()) == before + 1
    assert not b.running and len(_brokers_running()) == before


def test_restart_keeps_one_process():
    with LocalBroker() as b:
        first = b.process.pid
        b.restart()
        assert b.running and b.process.pid != first
        assert len([c for c in _brokers_running() if str(b.port) in c]) == 1


def test_kafka_broker_formats_starts_answers_and_removes_its_data():
    b = start_broker("kafka")
    try:
        workdir = b.workdir
        assert b.kind == "kafka" and b.running and (workdir / "data" / "meta.properties").exists()
        props = (workdir / "server.properties").read_text()
        assert "group.initial.rebalance.delay.ms=0" in props
        assert f"advertised.listeners=PLAINTEXT://127.0.0.1:{b.port}" in props
    finally:
        b.stop()
    assert not b.running and not workdir.exists()


def test_unknown_broker_kind_is_refused():
    with pytest.raises(ValueError, match="unknown broker kind 'zookeeper'"):
        start_broker("zookeeper")


def test_kafka_broker_without_java_says_so(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    b = KafkaBroker()
    with pytest.raises(BrokerStartError, match="Java 17"):
        b.start()
    b.stop()


def test_kafka_cluster_id_starting_with_a_dash_still_formats(monkeypatch):
    # Cluster ids are random URL-safe base64: about one in 64 starts with "-",
    # which the storage tool's parser once took for an option.
    import kio.testing.kafka_broker as kb
    monkeypatch.setattr(kb, "_cluster_id", lambda: "-" + "A" * 21)
    b = KafkaBroker().start()
    try:
        assert b.running
    finally:
        b.stop()


def test_kafka_broker_jvm_options_reach_the_broker_after_kio_own(tmp_path):
    # jvm_options is how a profile of the broker is taken (bench/RESULTS.md,
    # issue 27: a Flight Recorder recording of 10,000 partitions' Produce
    # requests): they must reach the broker's JVM, after kio's own options so a
    # later -Dname=value (another log4j2 file) wins, and not the storage tool's.
    recording = tmp_path / "broker.jfr"
    b = KafkaBroker(heap="320m", jvm_options=[f"-XX:StartFlightRecording=filename={recording}",
                                              "-Dkio.test.marker=yes"]).start()
    try:
        with open(f"/proc/{b.process.pid}/cmdline", "rb") as f:
            argv = f.read().decode().split("\0")
        assert "-Dkio.test.marker=yes" in argv
        assert argv.index("-Xmx320m") < argv.index("-Dkio.test.marker=yes") < argv.index("kafka.Kafka")
    finally:
        b.stop(timeout=30.0)
    # the JVM wrote its recording when it stopped: the option was applied, not only passed
    assert recording.exists() and recording.stat().st_size > 0
