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
    return find_coordinators_body([key], key_type)


def find_coordinators_body(keys: List[str], key_type: int = KEY_TYPE_GROUP) -> Callable[[int], Body]:
    """FindCoordinator for several keys: all of them in ``coordinator_keys``
    from v4 (KIP-699); before v4 a request takes one key, the first (the
    caller asks again for the others)."""
    def build(version: int) -> Body:
        if version >= 4:
            return {"key_type": key_type, "coordinator_keys": list(keys)}
        return {"key": keys[0], "key_type": key_type}
    return build


def offset_fetch_body(group_id: str, topics: Optional[List[Body]],
                      require_stable: bool) -> Callable[[int], Body]:
    """OffsetFetch for one group (``topics`` None: every partition it
    committed): the group's fields at the top up to v7, a one-group ``groups``
    list (KIP-709) from v8."""
    return offsets_fetch_body({group_id: topics}, require_stable)


def offsets_fetch_body(groups: Dict[str, Optional[List[Body]]], require_stable: bool) -> Callable[[int], Body]:
    """OffsetFetch for several groups ({group: topics, None for all}): every
    group in ``groups`` from v8 (KIP-709); before v8 a request takes one
    group, the first (the caller asks again for the others)."""
    def build(version: int) -> Body:
        if version >= 8:
            return {"groups": [{"group_id": g, "topics": t} for g, t in groups.items()],
                    "require_stable": require_stable}
        group_id, topics = next(iter(groups.items()))
        body: Body = {"group_id": group_id, "topics": topics}
        if version >= 7:
            body["require_stable"] = require_stable
        return body
    return build
