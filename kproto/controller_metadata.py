"""The admin's metadata when it talks to the KRaft controllers directly
(``bootstrap.controllers``, KIP-919), as Java's Admin does then.

Controllers do not answer Metadata: the client learns the controllers and
which of them is active from DescribeCluster (v1+) with the controller
endpoint type, asked of the bootstrap controllers and then of the known
ones. The answer's "brokers" are the controllers; its ``controller_id`` is
the active controller, where Java's Admin sends the operations it would send
to "the least loaded broker or the active controller" (the quorum and
voter operations, describe_metadata_quorum). A broker asked this way
answers MISMATCHED_ENDPOINT_TYPE: ``bootstrap.controllers`` names brokers.
"""
from __future__ import annotations

from kproto.cluster import ClusterMetadata

__all__ = ["ControllerMetadata", "CONTROLLER_ENDPOINT"]

#: DescribeCluster's EndpointType: 1 brokers, 2 controllers.
CONTROLLER_ENDPOINT = 2


class ControllerMetadata(ClusterMetadata):
    """ClusterMetadata fed by DescribeCluster answers of the controllers."""

    #: The request NetworkClient refreshes this cache with.
    metadata_api = "DescribeCluster"

    def request_body(self, now) -> dict:
        super().request_body(now)            # the refresh bookkeeping; topics mean nothing here
        return {"include_cluster_authorized_operations": False, "endpoint_type": CONTROLLER_ENDPOINT,
                "include_fenced_brokers": False}

    def update(self, body: dict, now) -> None:
        """Digest a DescribeCluster answer as a Metadata answer without topics."""
        super().update({"brokers": [{"node_id": b["broker_id"], "host": b["host"], "port": b["port"],
                                     "rack": b.get("rack")} for b in body.get("brokers") or []],
                        "cluster_id": body.get("cluster_id"), "controller_id": body.get("controller_id"),
                        "topics": []}, now)
