"""bench/bench_partitions.py's ``--topic-config``: the bench's topics get the
configs given (checked on Apache Kafka with DescribeConfigs), the title
names them, and a malformed one is refused with a message naming it."""
import os
import subprocess
import sys

import pytest

import kio
from kio.admin import ConfigResource

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")
SCRIPT = os.path.join(BENCH, "bench_partitions.py")


@pytest.mark.parametrize("bad", ["segment.index.bytes", "=65536", "segment.index.bytes= "])
def test_a_malformed_topic_config_is_refused_before_anything_runs(bad):
    run = subprocess.run([sys.executable, SCRIPT, "--topic-config", bad, "--bootstrap", "127.0.0.1:1"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode != 0
    assert "--topic-config wants KEY=VALUE" in run.stderr and repr(bad) in run.stderr


@pytest.mark.parametrize("broker", ["kafka"], indirect=True)
def test_the_bench_topics_get_the_topic_configs(bootstrap):
    with kio.Admin(bootstrap_servers=bootstrap) as admin:
        before = set(admin.list_topics())
    run = subprocess.run([sys.executable, SCRIPT, "--bootstrap", bootstrap, "--records", "300", "--repeat", "1",
                          "--partitions", "2", "--only", "kio send", "--topic-config", "segment.index.bytes=65536",
                          "--topic-config", "retention.ms=3600000"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "--topic-config segment.index.bytes=65536 --topic-config retention.ms=3600000" in run.stdout
    assert "round 1:" in run.stdout and "kio" in run.stdout
    with kio.Admin(bootstrap_servers=bootstrap) as admin:
        made = sorted(t for t in set(admin.list_topics()) - before if t.startswith("bench-"))
        assert len(made) == 2                              # the producer's topic and the consumers'
        resources = [ConfigResource.topic(t) for t in made]
        for entries in admin.describe_configs(resources).values():
            assert entries["segment.index.bytes"].value == "65536" and not entries["segment.index.bytes"].is_default
            assert entries["retention.ms"].value == "3600000"
