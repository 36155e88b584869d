"""Requests that name topics by id from some version on (KIP-848's
OffsetCommit/OffsetFetch v10, KIP-1319's TxnOffsetCommit v6).

The cores build these requests with topic names, as every version up to then
does; the network client (:meth:`kproto.client.NetworkClient.send`) asks here
what to send: where the version negotiated with the broker names topics by id
and the metadata knows the id of every topic in the request, the ids are added
(the encoder writes ``topic_id`` from that version on, ``name`` before it) and
the answer's topics get their names back from the request before the core
sees it; otherwise the request goes at the last version that names topics, as
Java's clients do for a topic whose id they do not know. An OffsetFetch for
all of a group's topics stays at the named version too: its answer would name
topics this client may never have seen, by id only.
"""
from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional, Tuple

__all__ = ["BY_TOPIC_ID", "with_topic_ids", "name_topics"]

#: api -> the first version whose topics are named by id only
BY_TOPIC_ID = {"OffsetCommit": 10, "OffsetFetch": 10, "TxnOffsetCommit": 6}


def _request_topics(api: str, body: dict) -> Optional[List[dict]]:
    """The topic entries of a request (None: some list means "all topics")."""
    if api == "OffsetFetch":
        out: List[dict] = []
        for g in body.get("groups") or ():
            if g.get("topics") is None:
                return None
            out.extend(g["topics"])
        return out
    return list(body.get("topics") or ())


def _response_topics(api: str, body: dict) -> Iterator[dict]:
    if api == "OffsetFetch":
        for g in body.get("groups") or ():
            yield from g.get("topics") or ()
    else:
        yield from body.get("topics") or ()


def with_topic_ids(api: str, version: int, body: dict,
                   topic_ids: Dict[str, Any]) -> Tuple[int, dict, Optional[Dict[Any, str]]]:
    """(version to send, body, {topic id: name} to name the answer's topics,
    or None when the answer names them itself)."""
    first = BY_TOPIC_ID[api]
    if version < first:
        return version, body, None
    topics = _request_topics(api, body)
    if topics is None or api == "OffsetFetch" and "groups" not in body:
        return first - 1, body, None
    names: Dict[Any, str] = {}
    for t in topics:
        tid = topic_ids.get(t.get("name"))
        if tid is None:
            return first - 1, body, None        # an id the metadata does not know: by name
        names[tid] = t["name"]
    for t in topics:
        t["topic_id"] = topic_ids[t["name"]]
    return version, body, names


def name_topics(api: str, body: dict, names: Dict[Any, str]) -> None:
    """Gives the topics of an answer sent by id their names (in place); an id
    the request did not carry keeps ``name`` None."""
    for t in _response_topics(api, body):
        if not t.get("name"):
            t["name"] = names.get(t.get("topic_id"))
