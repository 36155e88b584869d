"""``client_instance_id`` (KIP-714) of the producer and the consumers, written
once: the steps wait (see :mod:`kio._shared.producer_ops` for steps) until
the core's :func:`kproto.telemetry.client_instance_id` knows the id. The
admin's is an AdminCore operation (:mod:`kproto.admin_telemetry`): its
threading driver has no network thread and drives its sockets only while an
operation runs."""
from __future__ import annotations

import uuid
from typing import Any, Callable, Optional

from kio._shared.common import Steps, now_ms
from kproto.errors import KafkaTimeoutError
from kproto.telemetry import check_instance_id_timeout, client_instance_id

__all__ = ["instance_id_steps"]


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
