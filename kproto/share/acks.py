"""Acknowledgements in the protocol's shape (ShareFetch/ShareAcknowledge
``AcknowledgementBatches``)."""
from __future__ import annotations

from typing import Dict, List

__all__ = ["ack_batches"]


def ack_batches(acks: Dict[int, int]) -> List[dict]:
    """{offset: type} -> [{first_offset, last_offset, acknowledge_types}]:
    one batch per run of consecutive offsets with the same type, sent with a
    single type (the broker applies it to every offset of the batch), so a
    poll of 500 accepted records is one batch of a few bytes."""
    out: List[dict] = []
    first = last = kind = None
    for off in sorted(acks):
        t = acks[off]
        if first is not None and off == last + 1 and t == kind:
            last = off
            continue
        if first is not None:
            out.append({"first_offset": first, "last_offset": last, "acknowledge_types": [kind]})
        first = last = off
        kind = t
    if first is not None:
        out.append({"first_offset": first, "last_offset": last, "acknowledge_types": [kind]})
    return out
