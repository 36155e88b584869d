"""What every client's ``metrics()`` reports about its network client, once:
the producer's, the consumer's and the admin's dicts start from
:func:`network_metrics` and add what their core counts."""
from __future__ import annotations

__all__ = ["network_metrics"]


def network_metrics(client) -> dict:
    """The :class:`~kproto.client.NetworkClient`'s counters: connections
    opened, closed and ready now, requests sent, responses received, and the
    KIP-714 telemetry pushes acknowledged (0 with enable.metrics.push off)."""
    s = client.stats
    tel = client.telemetry
    return {"connection_creation_total": s["connection_creation"],
            "connection_close_total": s["connection_close"],
            "connection_count": sum(1 for c in client.connections.values() if c.is_ready),
            "request_total": s["requests"], "response_total": s["responses"],
            "telemetry_pushes": tel.pushes if tel is not None else 0}
