"""The part of :class:`kproto.admin.AdminCore` its operation mixins
(kproto.admin_acls, admin_configs, admin_scram, admin_tokens, admin_cluster) use, declared
for type checkers: annotations only, so nothing here shadows the core's
attributes at run time."""
from __future__ import annotations

from typing import Any, Callable


class AdminMixin:
    """Declares the AdminCore machinery a mixin's operations call."""

    config: Any
    client: Any
    cluster: Any
    _op: Callable[..., Any]
    _submit: Callable[..., Any]
    _complete: Callable[..., Any]
    _fail_call: Callable[..., Any]
    _retry: Callable[..., Any]
    _unanswered: Callable[..., Any]
    _seen_metadata: Callable[..., Any]
    _per_resource: Callable[..., Any]
    _broker_or_active_controller: str
