"""KIP-714/KIP-1076 calls of every client, written once:
:class:`MetricSubscriptionOps` (the application's metrics, mixed into the
producer's, the consumers' and the admin's shared bodies) and
``client_instance_id`` of the producer and the consumers: the steps wait (see :mod:`kio._shared.producer_ops` for steps) until
the core's :func:`kproto.telemetry.client_instance_id` knows the id. The
admin's is an AdminCore operation (:mod:`kproto.admin_telemetry`): its
threading driver has no network thread and drives its sockets only while an
operation runs."""
from __future__ import annotations

import uuid
from typing import Any, Callable, Mapping, Optional

from kio._shared.common import Steps, now_ms
from kproto.errors import KafkaTimeoutError
from kproto.telemetry import check_instance_id_timeout, client_instance_id, register_metric, unregister_metric

__all__ = ["instance_id_steps", "MetricSubscriptionOps"]


class MetricSubscriptionOps:
    """KIP-1076 (Java's ``registerMetricForSubscription``): application
    metrics pushed with the client's own. Thread-safe and never waiting in
    every driver (the core swaps its table, no lock)."""

    _core: Any

    def register_metric_for_subscription(self, group: str, name: str, value: Callable[[], float], *,
                                         tags: Optional[Mapping[str, str]] = None,
                                         cumulative: bool = False) -> None:
        """Push the application's metric too when the broker's client-metrics
        subscription selects it: named as Java names its metrics
        (``("app-metrics", "jobs-done")`` is org.apache.kafka.app.jobs.done),
        ``tags`` its attributes, ``value()`` read at each push (a number;
        ``cumulative``: a monotonic total, else a gauge). The same group,
        name and tags again replace it; with enable.metrics.push off nothing
        is pushed (no error, as Java). TypeError for a bad argument."""
        register_metric(self._core.client.telemetry, group, name, value, tags=tags, cumulative=cumulative)

    def unregister_metric_from_subscription(self, group: str, name: str, *,
                                            tags: Optional[Mapping[str, str]] = None) -> None:
        """Stop pushing a metric :meth:`register_metric_for_subscription` added
        (one never registered is ignored, as in Java)."""
        unregister_metric(self._core.client.telemetry, group, name, tags=tags)


def instance_id_steps(lock: Any, check: Callable[[], None], telemetry: Any, default_ms: float,
                      timeout: Optional[float]) -> Steps[uuid.UUID]:
    """Wait up to ``timeout`` seconds (None: ``default_ms``) for the client
    instance id of ``telemetry`` (the core's ClientTelemetry, None when
    enable.metrics.push is off: IllegalStateError at once). ``check()``
    raises when the client is closed or its network side failed (lock
    held). The network side sends GetTelemetrySubscriptions by itself: this
    only looks after each of its rounds."""
    check_instance_id_timeout(timeout)
    limit_ms = default_ms if timeout is None else timeout * 1000.0
    end = now_ms() + limit_ms
    while True:
        with lock:
            check()
            found = client_instance_id(telemetry)
        if found is not None:
            return found
        if now_ms() >= end:
            raise KafkaTimeoutError(
                f"client_instance_id timed out after {limit_ms / 1000.0:g} s: the broker has not answered "
                f"GetTelemetrySubscriptions yet (telemetry state: {telemetry.state.value})")
        yield end
