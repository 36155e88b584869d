"""``kio.Admin``: the blocking admin client over :class:`kproto.admin.AdminCore`.

    with Admin(bootstrap_servers="127.0.0.1:9092") as admin:
        admin.create_topics([NewTopic("orders", 6)])      # or just ["orders"]
        admin.describe_topics(["orders"])["orders"].partitions
        admin.consumer_group_lag("billing")               # {TopicPartition: ConsumerLag}

Every method starts one operation in the core and drives the sockets on the
calling thread until it is done - an admin call is a short exchange that
the caller waits for anyway, so there is no background thread. The core
owns retries, re-routing and the deadline (``default.api.timeout.ms``, or
``timeout`` in seconds per call), so a call always returns or raises within
it. Methods return what the core's handle holds: the single value, or
``{key: value}``; the first failed item raises its typed error (Java's
``all().get()``). With ``raise_errors=False`` the handle itself is returned
(``handle.values()`` / ``handle.errors()`` per item). Calls from several
threads are serialised.
"""
from __future__ import annotations

import threading
import time
from typing import Optional

from kio._network import SocketLoop
from kproto.admin import (
    AdminCore, ConfigResource, NewPartitions, NewTopic, OffsetSpec,
)
from kproto.errors import KafkaError

__all__ = ["Admin", "AdminClosedError", "NewTopic", "NewPartitions", "ConfigResource", "OffsetSpec"]


class AdminClosedError(KafkaError):
    """The admin client is closed."""


def _now_ms():
    return time.monotonic() * 1000.0


def _operation(name):
    """A blocking method for the core operation ``name`` (same arguments,
    ``now`` supplied, ``timeout`` in seconds instead of ``timeout_ms``)."""
    def method(self, *args, timeout: Optional[float] = None, raise_errors: bool = True, **kwargs):
        if timeout is not None:
            kwargs["timeout_ms"] = int(timeout * 1000)
        handle = self._run(lambda now: getattr(self._core, name)(*args, now=now, **kwargs))
        return handle.result() if raise_errors else handle
    core_method = getattr(AdminCore, name)
    method.__name__ = name
    method.__doc__ = core_method.__doc__
    return method


class Admin:
    """``Admin(bootstrap_servers=...)`` or ``Admin({"bootstrap.servers": ...})``."""

    def __init__(self, config: Optional[dict] = None, **kwargs):
        self._core = AdminCore(config, **kwargs)
        self._net = SocketLoop(self._core)
        self._lock = threading.Lock()
        self._closed = False

    @property
    def config(self):
        return self._core.config

    def _run(self, start):
        with self._lock:
            if self._closed:
                raise AdminClosedError("the admin client is closed")
            core, net = self._core, self._net
            handle = start(_now_ms())
            while True:
                now = _now_ms()
                net.apply(core.poll(now), now)
                net.write_all(now)
                core.events()
                if handle.done:
                    return handle
                deadline = core.next_deadline(now)
                net.update_interest()
                timeout = 0.2 if deadline is None else max(0.0, min(0.2, (deadline - now) / 1000.0))
                net.handle(net.select(timeout), _now_ms())

    # -- topics --------------------------------------------------------------------------------
    def create_topics(self, topics, *, num_partitions: int = -1, replication_factor: int = -1,
                      validate_only: bool = False, timeout: Optional[float] = None,
                      raise_errors: bool = True):
        """Create topics: NewTopic values, or names (with ``num_partitions`` and
        ``replication_factor``; -1 is the broker's default). {name: None}."""
        new = [t if isinstance(t, NewTopic) else NewTopic(t, num_partitions, replication_factor)
               for t in topics]
        return self._op("create_topics", new, validate_only=validate_only, timeout=timeout,
                        raise_errors=raise_errors)

    def _op(self, name, *args, timeout=None, raise_errors=True, **kwargs):
        return _operation(name)(self, *args, timeout=timeout, raise_errors=raise_errors, **kwargs)

    delete_topics = _operation("delete_topics")
    list_topics = _operation("list_topics")
    describe_topics = _operation("describe_topics")
    describe_cluster = _operation("describe_cluster")
    create_partitions = _operation("create_partitions")
    describe_configs = _operation("describe_configs")
    # -- groups and offsets --------------------------------------------------------------------
    list_consumer_groups = _operation("list_consumer_groups")
    describe_consumer_groups = _operation("describe_consumer_groups")
    delete_consumer_groups = _operation("delete_consumer_groups")
    list_consumer_group_offsets = _operation("list_consumer_group_offsets")
    consumer_group_lag = _operation("consumer_group_lag")
    list_offsets = _operation("list_offsets")
    delete_records = _operation("delete_records")

    # -- lifecycle -----------------------------------------------------------------------------
    def close(self) -> None:
        """Fail whatever is unfinished and close every connection (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            now = _now_ms()
            self._net.apply(self._core.close(now), now)
            self._net.close()

    def __enter__(self) -> "Admin":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self):
        state = "closed" if self._closed else "open"
        return f"<kio.Admin {self.config.bootstrap_servers} {state}>"
