"""An Apache Kafka cluster with a dynamic KRaft quorum (KIP-853), for the
quorum administration tests (add/remove a voter, unregister a broker).

``DynamicQuorumCluster()`` runs three JVMs of the release
:class:`kio.testing.kafka_broker.KafkaBroker` runs, on loopback with small
heaps, all found through ``controller.quorum.bootstrap.servers`` (not the
static ``controller.quorum.voters``):

* node 1, broker and controller, formatted ``--standalone``: the quorum's
  only voter at first (``kraft.version`` 1: voters can be added and removed);
* node 2, controller only, formatted ``--no-initial-controllers``: it joins
  as an observer, ready to be made a voter (its directory id is in its
  meta.properties, :meth:`QuorumNode.directory_id`);
* node 3, broker only: registers with the controller, to be stopped and
  unregistered.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

from kio.testing.kafka_broker import KafkaBroker

__all__ = ["DynamicQuorumCluster", "QuorumNode"]

#: The roles of the three nodes, by node id.
ROLES = {1: "broker,controller", 2: "controller", 3: "broker"}


class QuorumNode(KafkaBroker):
    """One node of a :class:`DynamicQuorumCluster` (``roles`` as Kafka's
    ``process.roles``). A controller-only node has no client listener: its
    ``port`` is its controller port (it answers ApiVersions there)."""

    def __init__(self, cluster: "DynamicQuorumCluster", node_id: int, roles: str, heap: str,
                 log_path: Optional[str] = None):
        super().__init__(host=cluster.host, heap=heap, log_path=log_path)
        self.cluster = cluster
        self.node_id = node_id
        self.roles = roles
        self.cluster_id = cluster.cluster_id
        if "broker" not in roles:
            self.port = self.advertised_port = self.controller_port

    def server_properties(self) -> dict[str, object]:
        props = super().server_properties()
        del props["controller.quorum.voters"]
        props.update({"node.id": self.node_id, "process.roles": self.roles,
                      "controller.quorum.bootstrap.servers": self.cluster.first.controller_address})
        if "controller" not in self.roles:
            props["listeners"] = f"PLAINTEXT://{self.host}:{self.port}"
        if "broker" not in self.roles:
            props["listeners"] = f"CONTROLLER://{self.host}:{self.controller_port}"
            for broker_only in ("advertised.listeners", "inter.broker.listener.name"):
                props.pop(broker_only)
        return props

    def _jvm_options(self, heap: str) -> list[str]:
        # Three JVMs start at once on a small machine: the quick (C1) JIT
        # only, which starts them sooner; these tests need no peak speed.
        return [*super()._jvm_options(heap), "-XX:TieredStopAtLevel=1"]

    def _format_options(self) -> list[str]:
        if self.node_id == 1:
            return ["--standalone"]                   # the first voter, of a dynamic quorum
        if "controller" in self.roles:
            return ["--no-initial-controllers"]       # an observer until added as a voter
        return []

    @property
    def controller_address(self) -> str:
        return f"{self.host}:{self.controller_port}"

    def directory_id(self) -> str:
        """The ``directory.id`` of this node's metadata log directory (Kafka's
        base64 text), written by the storage tool at format time."""
        assert self.workdir is not None, "the node was never started"
        text = (self.workdir / "data" / "meta.properties").read_text()
        for line in text.splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "directory.id":
                return value.strip()
        raise KeyError(f"no directory.id in node {self.node_id}'s meta.properties:\n{text}")


class DynamicQuorumCluster:
    """The three nodes described in the module; a context manager."""

    def __init__(self, host: str = "127.0.0.1", heap: str = "256m", log_dir: Optional[str] = None):
        from kio.testing.kafka_broker import _cluster_id

        self.host = host
        self.cluster_id = _cluster_id()
        # No folder: each node's BrokerProcess makes a temporary log file.
        self.nodes = {n: QuorumNode(self, n, roles, heap, str(Path(log_dir) / f"node-{n}.log") if log_dir else None)
                      for n, roles in ROLES.items()}

    @property
    def first(self) -> QuorumNode:
        return self.nodes[1]

    @property
    def bootstrap_servers(self) -> str:
        """The broker-and-controller node's client listener."""
        return self.first.bootstrap_servers

    def start(self, timeout: float = 150.0) -> "DynamicQuorumCluster":
        """Launch every node at once (the others retry the first's controller
        until it is up) and wait until each answers."""
        for n in self.nodes.values():
            n.launch()
        deadline = time.monotonic() + timeout
        try:
            for n in self.nodes.values():
                n.wait_ready(max(1.0, deadline - time.monotonic()))
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every node and remove what they stored (safe to call twice)."""
        for n in self.nodes.values():          # SIGTERM all first: they shut down in parallel
            if n.process is not None and n.running:
                n.process.terminate()
        for n in self.nodes.values():
            n.stop()

    def __enter__(self) -> "DynamicQuorumCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def log_tail(self, max_bytes: int = 3000, node: Optional[int] = None) -> str:
        nodes = [self.nodes[node]] if node else self.nodes.values()
        return "\n".join(f"--- node {n.node_id} ---\n{n.log_tail(max_bytes)}" for n in nodes)
