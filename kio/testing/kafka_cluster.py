"""A multi-node Apache Kafka cluster on loopback, for failover tests.

``KafkaCluster(nodes=3)`` runs ``nodes`` JVMs of the same Apache Kafka
release as :class:`kio.testing.kafka_broker.KafkaBroker` (fetched from Maven the same
way), each a combined KRaft broker+controller with a static quorum of all of
them, on free loopback ports and small heaps. Topics get three replicas and
``min.insync.replicas=2`` by default, and so do the internal topics (offsets,
transaction state, share-group state), so one node may die without data loss
or unavailability - which is what the failover tests check.

A dead broker is fenced by the controller after ``broker.session.timeout.ms``
(3 s here instead of 9 s) so leadership moves within seconds of a SIGKILL.

Besides starting and stopping the whole cluster, it kills (SIGKILL), stops
(SIGTERM: controlled shutdown) and starts single nodes, and answers the
questions a test asks around them: who leads a partition, who coordinates a
group, is every partition fully replicated again.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

from kio.testing.broker import BrokerStartError
from kio.testing.kafka_broker import KafkaBroker

__all__ = ["KafkaCluster", "ClusterNode"]

#: FindCoordinator key types.
COORDINATOR_KEY_TYPES = {"group": 0, "transaction": 1, "share": 2}


class ClusterNode(KafkaBroker):
    """One node of a :class:`KafkaCluster`: a KafkaBroker whose node id and
    controller quorum are the cluster's, and whose internal topics are
    replicated three ways (``config`` is the cluster's)."""

    def __init__(self, cluster: "KafkaCluster", node_id: int, log_path: Optional[str], heap: str):
        super().__init__(host=cluster.host, log_path=log_path, heap=heap, version=cluster.version)
        self.cluster = cluster
        self.node_id = node_id
        self.cluster_id = cluster.cluster_id

    def server_properties(self) -> dict[str, object]:
        props = super().server_properties()
        replicas = min(3, len(self.cluster.nodes))
        min_isr = max(1, replicas - 1)
        props.update({
            "node.id": self.node_id,
            "controller.quorum.voters": self.cluster.quorum_voters(),
            "default.replication.factor": replicas,
            "min.insync.replicas": min_isr,
            "num.partitions": 3,
            # Three partitions per internal topic (not 50), replicated like data.
            "offsets.topic.replication.factor": replicas,
            "offsets.topic.num.partitions": 3,
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": min_isr,
            "transaction.state.log.num.partitions": 3,
            "share.coordinator.state.topic.replication.factor": replicas,
            "share.coordinator.state.topic.min.isr": min_isr,
            "share.coordinator.state.topic.num.partitions": 3,
            # A SIGKILLed broker stops heartbeating; the controller fences it
            # (moving its leaderships and shrinking ISRs) after this long.
            "broker.heartbeat.interval.ms": 500,
            "broker.session.timeout.ms": 3000,
            "unclean.leader.election.enable": "false",
        })
        props.update(self.cluster.extra_config)
        return props


class KafkaCluster:
    """``nodes`` Apache Kafka KRaft nodes (combined broker+controller) on loopback.

    Use as a context manager or call :meth:`start` / :meth:`stop`. Node ids
    are 1..nodes. ``config`` adds or overrides server properties on every node.
    """

    kind = "kafka-cluster"

    def __init__(self, nodes: int = 3, *, host: str = "127.0.0.1", heap: str = "320m",
                 config: Optional[dict] = None, log_dir: Optional[str] = None,
                 version: Optional[str] = None):
        if nodes < 1:
            raise ValueError(f"a cluster needs at least one node, not {nodes}")
        from kio.testing.kafka_broker import KAFKA_VERSION, _cluster_id

        self.host = host
        self.version = version or KAFKA_VERSION
        self.extra_config = dict(config or {})
        self.cluster_id = _cluster_id()
        self.nodes: list[ClusterNode] = []
        folder = Path(log_dir) if log_dir else None
        for node_id in range(1, nodes + 1):
            # No folder: each node's BrokerProcess makes a temporary log file.
            log_path = str(folder / f"node-{node_id}.log") if folder else None
            self.nodes.append(ClusterNode(self, node_id, log_path, heap))

    # -- addresses -------------------------------------------------------------------
    def quorum_voters(self) -> str:
        return ",".join(f"{n.node_id}@{n.host}:{n.controller_port}" for n in self.nodes)

    @property
    def bootstrap_servers(self) -> str:
        """Every node's address (a client finds a live one among them)."""
        return ",".join(n.bootstrap_servers for n in self.nodes)

    def node(self, node_id: int) -> ClusterNode:
        for n in self.nodes:
            if n.node_id == node_id:
                return n
        raise KeyError(f"no node {node_id} in this cluster (ids 1..{len(self.nodes)})")

    def live_nodes(self) -> list[ClusterNode]:
        return [n for n in self.nodes if n.running]

    # -- the whole cluster ---------------------------------------------------------------
    def start(self, timeout: float = 180.0) -> "KafkaCluster":
        """Launch every node, then wait until each answers (none does before
        a majority of controllers is up)."""
        for n in self.nodes:
            n.launch()
        deadline = time.monotonic() + timeout
        try:
            for n in self.nodes:
                n.wait_ready(max(1.0, deadline - time.monotonic()))
            self.wait_in_sync(max(1.0, deadline - time.monotonic()))
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every node and remove what they stored (safe to call twice)."""
        for n in self.nodes:                 # SIGTERM all first: they shut down in parallel
            if n.running:
                n.process.terminate()
        for n in self.nodes:
            n.stop()

    def __enter__(self) -> "KafkaCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- one node ------------------------------------------------------------------------------
    def kill(self, node_id: int) -> None:
        """SIGKILL node ``node_id`` (a crash: no controlled shutdown)."""
        self.node(node_id).kill()

    def stop_node(self, node_id: int) -> None:
        """Stop node ``node_id`` gracefully (SIGTERM: controlled shutdown moves
        its leaderships first); its data stays for :meth:`start_node`."""
        self.node(node_id)._stop_process(60.0)

    def start_node(self, node_id: int, timeout: float = 90.0) -> None:
        """Start a killed or stopped node again on its ports, with its data."""
        self.node(node_id).start(timeout)

    def restart_node(self, node_id: int, timeout: float = 90.0) -> None:
        """Graceful stop and start of one node (one step of a rolling restart)."""
        self.stop_node(node_id)
        self.start_node(node_id, timeout)

    # -- questions ----------------------------------------------------------------------------------
    def _client(self):
        from kio.blocking import BlockingClient

        live = ",".join(n.bootstrap_servers for n in self.live_nodes())
        if not live:
            raise BrokerStartError("no node of the cluster is running")
        return BlockingClient(live, request_timeout_ms=10000)

    def metadata(self, topics: Optional[list] = None) -> dict:
        """A Metadata answer from a live node (``topics`` None: all topics)."""
        with self._client() as c:
            return c.metadata(topics)

    def leader(self, topic: str, partition: int = 0) -> int:
        """The node id that leads ``topic``/``partition`` now (-1 if none)."""
        for t in self.metadata([topic])["topics"]:
            if t["name"] == topic:
                for p in t["partitions"]:
                    if p["partition_index"] == partition:
                        return p["leader_id"]
        raise KeyError(f"{topic}-{partition} is not in the cluster's metadata")

    def coordinator(self, key: str, key_type: str = "group", timeout: float = 30.0) -> int:
        """The node id of the coordinator of group ``key`` (``key_type``
        "transaction": of a transactional id; "share": a share group's
        ``group:topic_id:partition`` state key). Retries while it loads."""
        from kproto.error_codes import error_for_code

        deadline = time.monotonic() + timeout
        while True:
            with self._client() as c:
                r = c.request("FindCoordinator", {"key_type": COORDINATOR_KEY_TYPES[key_type],
                                                  "coordinator_keys": [key]})
            entry = (r.get("coordinators") or [r])[0]
            code = entry["error_code"]
            if code == 0:
                return entry["node_id"]
            if time.monotonic() > deadline:
                raise error_for_code(code, context=f"coordinator of {key_type} {key!r}")
            time.sleep(0.2)

    def under_replicated(self) -> list:
        """(topic, partition) of every partition whose ISR is short of its
        replicas or that has no leader."""
        out = []
        for t in self.metadata(None)["topics"]:
            for p in t["partitions"]:
                if p["leader_id"] < 0 or len(p["isr_nodes"]) < len(p["replica_nodes"]):
                    out.append((t["name"], p["partition_index"]))
        return out

    def wait_in_sync(self, timeout: float = 60.0) -> None:
        """Wait until every node is a registered broker and no partition is
        under-replicated (after a restart, before the next fault)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                md = self.metadata(None)
                brokers = {b["node_id"] for b in md["brokers"]}
                short = self.under_replicated()
                wanted = {n.node_id for n in self.live_nodes()}
                if wanted <= brokers and not short:
                    return
                why = f"brokers {sorted(brokers)} of {sorted(wanted)}, under-replicated {short[:5]}"
            except Exception as exc:          # a node still starting: ask again
                why = repr(exc)
            if time.monotonic() > deadline:
                raise TimeoutError(f"the cluster is not in sync after {timeout:.0f} s: {why}")
            time.sleep(0.25)

    def create_topic(self, name: str, partitions: int = 3, replication_factor: int = 3,
                     configs: Optional[dict] = None, timeout: float = 30.0) -> str:
        """Create ``name`` and wait until every partition has a leader."""
        from kproto.error_codes import raise_for_code

        with self._client() as c:
            r = c.request("CreateTopics", {"topics": [{
                "name": name, "num_partitions": partitions, "replication_factor": replication_factor,
                "assignments": [],
                "configs": [{"name": k, "value": str(v)} for k, v in (configs or {}).items()]}],
                "timeout_ms": 10000})
            raise_for_code(r["topics"][0]["error_code"], r["topics"][0].get("error_message"))
        deadline = time.monotonic() + timeout
        while True:
            parts = [p for t in self.metadata([name])["topics"] if t["name"] == name
                     for p in t["partitions"]]
            if len(parts) == partitions and all(p["leader_id"] >= 0 for p in parts):
                return name
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {name}: partitions {parts} after {timeout:.0f} s")
            time.sleep(0.1)

    def reassign(self, topic: str, partition: int, replicas: list, timeout: float = 120.0) -> None:
        """Move ``topic``/``partition`` to ``replicas`` (node ids, the first
        the preferred leader) with Kafka's own kafka-reassign-partitions tool
        (``ReassignPartitionsCommand``; kio's Admin has no
        AlterPartitionReassignments yet), then wait until the partition's
        replicas are exactly those, all in sync."""
        import json
        import subprocess
        import tempfile

        from kio.testing.kafka_broker import java_binary, tools_classpath

        plan = {"version": 1, "partitions": [{"topic": topic, "partition": partition,
                                               "replicas": list(replicas)}]}
        with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
            json.dump(plan, f)
            f.flush()
            run = subprocess.run(
                [java_binary(), "-Xmx128m", "-cp", tools_classpath(),
                 "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
                 "--bootstrap-server", ",".join(n.bootstrap_servers for n in self.live_nodes()),
                 "--reassignment-json-file", f.name, "--execute"],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=timeout)
        if run.returncode != 0:
            raise RuntimeError(f"kafka-reassign-partitions failed (exit {run.returncode}):\n"
                               + run.stdout.decode("utf-8", "replace")[-3000:])
        deadline = time.monotonic() + timeout
        while True:
            for t in self.metadata([topic])["topics"]:
                for p in t["partitions"]:
                    if p["partition_index"] == partition and list(p["replica_nodes"]) == list(replicas) \
                            and sorted(p["isr_nodes"]) == sorted(replicas):
                        return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}-{partition} not on {replicas} after {timeout:.0f} s")
            time.sleep(0.2)

    def log_tail(self, max_bytes: int = 4000) -> str:
        return "\n".join(f"--- node {n.node_id} ---\n{n.log_tail(max_bytes)}" for n in self.nodes)
