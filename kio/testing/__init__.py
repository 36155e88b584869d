"""A real Kafka for your own test suite, without Docker.

``pip install kproto-kio[broker]`` and pytest finds the plugin
(:mod:`kio.testing.plugin`, entry point ``pytest11``): a test that names the
``kafka_broker`` fixture gets a broker started once per session on a free
loopback port — Apache Kafka (fetched from Maven Central on first use) where
Java 17+ and Maven are installed, Tansu otherwise, or as chosen with
``--kio-broker=kafka|tansu`` (or ``kio_broker`` in the ini file)::

    def test_round_trip(kafka_bootstrap, kafka_topic):
        topic = kafka_topic(partitions=3)
        with kio.Producer({"bootstrap.servers": kafka_bootstrap}) as p:
            p.send(topic, b"hello").result(10)

The helpers below work without pytest too (a script, unittest, a notebook).
"""
from __future__ import annotations

import shutil
import time
import uuid
from typing import Any, Dict, Mapping, Optional

from kio.testing.broker import BROKER_KINDS, BrokerProcess, free_port, start_broker

__all__ = ["BROKER_KINDS", "BrokerProcess", "default_broker_kind", "start_broker", "free_port",
           "new_topic", "wait_for_leaders", "wait_for_group_stable"]


def default_broker_kind() -> str:
    """"kafka" where Java and Maven are on the PATH (the genuine broker, what
    production runs), else "tansu" (the light, Java-free one)."""
    return "kafka" if shutil.which("java") and shutil.which("mvn") else "tansu"


def wait_for_leaders(client: Any, topic: str, partitions: int, timeout: float = 15.0) -> Dict[int, int]:
    """Waits until every partition of ``topic`` has a leader in the metadata of
    ``client`` (a :class:`kio.blocking.BlockingClient`) and returns
    {partition: leader}. Kafka answers CreateTopics once the controller has
    the topic; the brokers' metadata shows its leaders a moment later."""
    end = time.monotonic() + timeout
    while True:
        leaders = client.leaders(topic)
        if len(leaders) == partitions and all(n >= 0 for n in leaders.values()):
            return leaders
        if time.monotonic() > end:
            raise TimeoutError(f"topic {topic}: leaders {leaders} after {timeout} s")
        time.sleep(0.05)


def new_topic(bootstrap_servers: str, partitions: int = 1, *, prefix: str = "t",
              configs: Optional[Mapping[str, Any]] = None, replication_factor: int = -1,
              timeout: float = 15.0) -> str:
    """Creates a topic with a fresh name (``prefix-<random>``) and returns the
    name once every partition has a leader. ``replication_factor`` -1 takes
    the broker's default."""
    from kio.blocking import BlockingClient
    from kproto.error_codes import raise_for_code

    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    with BlockingClient(bootstrap_servers) as client:
        r = client.request("CreateTopics", {"topics": [{
            "name": name, "num_partitions": partitions, "replication_factor": replication_factor,
            "assignments": [],
            "configs": [{"name": k, "value": str(v)} for k, v in (configs or {}).items()]}],
            "timeout_ms": int(timeout * 1000)})
        raise_for_code(r["topics"][0]["error_code"], r["topics"][0].get("error_message"))
        wait_for_leaders(client, name, partitions, timeout)
    return name


def wait_for_group_stable(bootstrap_servers: str, group_id: str, members: Optional[int] = None,
                          timeout: float = 30.0) -> Any:
    """Waits until consumer group ``group_id`` is Stable (with ``members``
    members, if given) and returns its description
    (:class:`kio.admin.ConsumerGroupDescription`); raises TimeoutError with
    the last state seen."""
    from kio.admin import Admin
    from kproto.error_codes import GroupIdNotFoundError
    from kproto.errors import KafkaTimeoutError

    end = time.monotonic() + timeout
    last: Any = None
    seen = "nothing yet"
    with Admin({"bootstrap.servers": bootstrap_servers}) as admin:
        while time.monotonic() < end:
            try:
                last = admin.describe_consumer_groups([group_id],
                                                      timeout=max(0.5, end - time.monotonic()))[group_id]
                seen = f"{last.state} with {len(last.members)} member(s)"
            except GroupIdNotFoundError:   # nobody joined yet: Kafka 4 says GROUP_ID_NOT_FOUND
                last, seen = None, "no such group"
            except KafkaTimeoutError as e:     # its coordinator still loading: ask again
                last, seen = None, str(e)
            if last is not None and last.state == "Stable" and (members is None or len(last.members) == members):
                return last
            time.sleep(0.1)
    raise TimeoutError(f"group {group_id} not Stable{'' if members is None else f' with {members} members'} "
                       f"after {timeout} s (last seen: {seen})")
