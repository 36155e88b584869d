"""The admin core's KIP-714 calls: ``client_instance_id`` as an operation
(an :class:`~kproto.admin.AdminHandle` the drivers wait for like any other:
the threading Admin drives its sockets only while one runs) and ``metrics``."""
from __future__ import annotations

from kproto.client_metrics import network_metrics
from kproto.errors import IllegalStateError
from kproto.telemetry import client_instance_id

__all__ = ["TelemetryAdmin"]

_KEY = "client_instance_id"


class TelemetryAdmin:
    """Mixed into :class:`~kproto.admin.AdminCore` (its ``_op``, ``_complete``,
    ``client``; its ``poll`` and ``next_deadline`` call the two hooks below)."""

    _instance_id_waits: list        # the client_instance_id operations still waiting (AdminCore.__init__)

    def client_instance_id(self, *, timeout_ms=None, now):
        """The client instance id the broker assigned (a uuid.UUID), once
        GetTelemetrySubscriptions answered; AdminTimeoutError after
        ``timeout_ms`` (default default.api.timeout.ms), IllegalStateError
        when telemetry is off (enable.metrics.push false, or no broker support)."""
        op = self._op("client_instance_id", [_KEY], now, timeout_ms, single=True)
        self._instance_id_waits.append(op)
        self._check_instance_id_waits(now)
        return op

    def _check_instance_id_waits(self, now) -> None:
        """Complete the waiting client_instance_id operations that can be (poll)."""
        waits = self._instance_id_waits
        if not waits:
            return
        keep = []
        for op in waits:
            try:
                found = client_instance_id(self.client.telemetry)
            except IllegalStateError as e:
                self._complete(op, _KEY, error=e)
                continue
            if found is not None:
                self._complete(op, _KEY, value=found)
            elif now >= op.deadline:
                from kproto.admin import AdminTimeoutError      # kproto.admin imports this module
                self._complete(op, _KEY, error=AdminTimeoutError(
                    f"client_instance_id timed out after {op.timeout_ms} ms: no GetTelemetrySubscriptions "
                    f"answer yet (telemetry state: {self.client.telemetry.state.value})"))
            else:
                keep.append(op)
        self._instance_id_waits = keep

    def _instance_id_deadline(self):
        """The earliest deadline of the waiting client_instance_id operations, or None."""
        return min((op.deadline for op in self._instance_id_waits), default=None)

    def metrics(self) -> dict:
        """The admin client's counters: the network client's
        (:func:`~kproto.client_metrics.network_metrics`), retried calls and
        operations in progress."""
        m = network_metrics(self.client)
        m["retries"] = self.retries
        m["calls_pending"] = len(self._calls) + len(self._in_flight)
        return m
