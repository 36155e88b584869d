"""kio.testing: the pytest plugin users get for their own suites (issue 26,
point 6). A user's test file runs in its own pytest process, as in their
project: the plugin comes from the installed package's ``pytest11`` entry
point (nothing in the file loads it), starts the broker asked for, and the
test produces and consumes through it."""
import os
import subprocess
import sys
import textwrap

import pytest

import kio.testing

USERS_SUITE = '''
import kio
import kio.testing


def test_round_trip(kafka_broker, kafka_bootstrap, kafka_topic):
    topic = kafka_topic(partitions=3)
    with kio.Producer({"bootstrap.servers": kafka_bootstrap}) as producer:
        for i in range(30):
            producer.send(topic, f"v{i}".encode(), key=str(i).encode())
    consumer = kio.Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "g-" + topic,
                             "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    try:
        got = []
        while len(got) < 30:
            got += [r.value for r in consumer.poll(1.0)]
        kio.testing.wait_for_group_stable(kafka_bootstrap, "g-" + topic, members=1)
    finally:
        consumer.close()
    assert sorted(got) == sorted(f"v{i}".encode() for i in range(30))
    print("BROKER-KIND", kafka_broker.kind)


def test_a_failure_shows_the_broker_log(kafka_broker):
    assert False, "on purpose"
'''


def _run_users_suite(tmp_path, *args):
    (tmp_path / "test_users_app.py").write_text(textwrap.dedent(USERS_SUITE))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS")}
    return subprocess.run([sys.executable, "-m", "pytest", "-s", "-q", "-p", "no:cacheprovider",
                           "test_users_app.py", *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.mark.parametrize("kind", ["kafka", "tansu"])
def test_a_users_suite_gets_a_real_broker_from_the_plugin(tmp_path, kind):
    r = _run_users_suite(tmp_path, f"--kio-broker={kind}")
    out = r.stdout + r.stderr
    assert "1 failed, 1 passed" in out, out
    assert f"BROKER-KIND {kind}" in out, out
    assert f"{kind} broker log (tail)" in out, out        # the failing test's report


def test_auto_picks_apache_kafka_where_java_is():
    # this machine has Java 17 and Maven (the suite's own Kafka broker needs them)
    assert kio.testing.default_broker_kind() == "kafka"


def test_a_wrong_choice_is_a_usage_error(tmp_path):
    r = _run_users_suite(tmp_path, "-o", "kio_broker=redpanda")
    assert r.returncode == 4, r.stdout + r.stderr
    assert "kio_broker = 'redpanda': choose from auto, kafka, tansu" in r.stdout + r.stderr


def test_wait_for_group_stable_says_what_it_saw(broker):
    with pytest.raises(TimeoutError, match=r"group nobody-\w+ not Stable after 1.0 s \(last seen: "):
        kio.testing.wait_for_group_stable(broker.bootstrap_servers, "nobody-" + os.urandom(4).hex(),
                                          timeout=1.0)
