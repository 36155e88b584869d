"""Request bodies that several state machines send and whose fields differ
between versions.

The codec refuses a field the chosen version does not have (rather than send
the request without it), so a body meant for any version is a function of the
version, which the connection calls once it has negotiated one (see
``Connection.send``).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1

Body = Dict[str, Any]


def find_coordinator_body(key: str, key_type: int = KEY_TYPE_GROUP) -> Callable[[int], Body]:
    """FindCoordinator for one group or transactional id: ``key`` up to v3,
    the batched ``coordinator_keys`` (KIP-699) from v4."""
    def build(version: int) -> Body:
        if version >= 4:
            return {"key_type": key_type, "coordinator_keys": [key]}
        return {"key": key, "key_type": key_type}
    return build


def offset_fetch_body(group_id: str, topics: Optional[List[Body]],
                      require_stable: bool) -> Callable[[int], Body]:
    """OffsetFetch for one group (``topics`` None: every partition it
    committed): the group's fields at the top up to v7, a one-group ``groups``
    list (KIP-709) from v8."""
    def build(version: int) -> Body:
        if version >= 8:
            return {"groups": [{"group_id": group_id, "topics": topics}],
                    "require_stable": require_stable}
        body: Body = {"group_id": group_id, "topics": topics}
        if version >= 7:
            body["require_stable"] = require_stable
        return body
    return build
