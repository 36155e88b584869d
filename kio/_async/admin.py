"""The async admin client: ``kio.aio.Admin`` and ``kio.trio.Admin`` bind
:class:`AsyncAdmin` to their backend.

The operations are :class:`kio._shared.admin_ops.AdminOps`', shared with the
blocking :class:`kio.Admin`: here ``_call`` returns an awaitable of the
result. Type checkers read ``kio/_async/admin.pyi`` instead of this module:
the same operations as ``async def``, generated from AdminOps by
``tools/gen_async_admin_stub.py``.
"""
from __future__ import annotations

from typing import Any, Dict, Optional

from kio._shared.admin_ops import AdminClosedError, AdminOps
from kio._async.clients import _Client
from kio._shared.common import INF, Steps, now_ms
from kproto.admin import AdminCore, AdminHandle

__all__ = ["AsyncAdmin"]


class AsyncAdmin(_Client, AdminOps):
    """``async with Admin(bootstrap_servers=...) as admin: await admin.list_topics()``.

    The operations of the threading :class:`kio.Admin`, awaitable: each
    takes ``timeout`` (seconds; default default.api.timeout.ms) and
    ``raise_errors`` (False: return the :class:`AdminHandle`)."""

    def __init__(self, config: Optional[Dict[str, Any]] = None, *, nursery: Any = None, **kwargs: Any) -> None:
        self._setup(AdminCore(config, **kwargs), nursery, 1 << 18)

    async def _call(self, name: str, *args: Any, timeout: Optional[float], raise_errors: bool,
                    **kwargs: Any) -> Any:
        """Run the core operation ``name`` (``now`` supplied, ``timeout`` in
        seconds instead of ``timeout_ms``) to its end."""
        self._check_open()
        self._ensure_started()
        if timeout is not None:
            kwargs["timeout_ms"] = int(timeout * 1000)
        handle: AdminHandle = getattr(self._core, name)(*args, now=now_ms(), **kwargs)
        self._kick()
        await self._run(self._done_steps(handle))
        return handle.result() if raise_errors else handle

    def _done_steps(self, handle: AdminHandle) -> Steps[None]:
        """Wait until the core finished the operation (it enforces the
        deadline); the network task failing raises AdminClosedError."""
        while not handle.done:
            self._check_failed()
            yield INF

    async def _close(self, timeout: Optional[float]) -> None:
        """The terminating telemetry push (KIP-714; at most ``timeout`` and
        request.timeout.ms), then stop the network task and close the core."""
        if self._engine.started:
            if self._engine.fatal is None:
                try:
                    await self._call("terminate_telemetry", timeout=timeout, raise_errors=False)
                except AdminClosedError:      # the network task failed: close what is left
                    pass
            await self._engine.stop()
        self._core.close(now_ms())
        self._closed = True
