"""API version negotiation between this client and a broker.

Why this exists: every connection starts with an ApiVersions exchange; the
broker lists, per api key, the versions it supports, and for every request the
client must then use the highest version both sides support (or fail clearly
when there is none). :func:`negotiate` turns the broker's list into a
:class:`VersionTable`; :func:`apiversions_fallback_version` implements KIP-511's
retry rule for the ApiVersions request itself.
"""
from __future__ import annotations

from kproto.errors import UnsupportedVersionError
from kproto.messages import APIS_BY_KEY, api as _api

__all__ = ["VersionTable", "negotiate", "apiversions_fallback_version", "CLIENT_VERSION_CAPS",
           "client_max_version",
           "CLIENT_API_VERSIONS_MAX", "API_VERSIONS_KEY", "UNSUPPORTED_VERSION"]

API_VERSIONS_KEY = 18
#: The newest ApiVersions version this client speaks (sent first on a new connection).
CLIENT_API_VERSIONS_MAX = APIS_BY_KEY[API_VERSIONS_KEY].max_version
#: Kafka error code UNSUPPORTED_VERSION.
UNSUPPORTED_VERSION = 35


#: Versions newer than these exist in the schema tables but a plain request
#: (a Connection picking the highest common version, as kio.blocking does)
#: never goes at them: from them on, requests name topics by id only
#: (KIP-848's OffsetCommit/OffsetFetch v10, KIP-1319's TxnOffsetCommit v6).
#: The cores' network client sends those versions itself where the metadata
#: knows every topic's id (kproto.topic_ids), as the producer sends Produce v13
#: (v12 for a topic whose id it does not know).
CLIENT_VERSION_CAPS = {
    "OffsetCommit": 9,
    "OffsetFetch": 9,
    "TxnOffsetCommit": 5,
}
_CAPS_BY_KEY = {_api(name).key: v for name, v in CLIENT_VERSION_CAPS.items()}


def client_max_version(api) -> int:
    """The newest version of ``api`` this client sends: its table's max, less
    one when the official definitions mark that one unstable (as the Java
    client does unless told otherwise), or a cap of CLIENT_VERSION_CAPS."""
    a = _api(api)
    top = a.max_version - 1 if a.latest_unstable and a.max_version > a.min_version else a.max_version
    return min(top, _CAPS_BY_KEY.get(a.key, top))


def _broker_ranges(broker_versions) -> dict:
    """{api_key: (min, max)} from an ApiVersions response's api_keys list, the
    whole decoded response body, or an existing {api_key: (min, max)} dict."""
    if isinstance(broker_versions, dict) and "api_keys" in broker_versions:
        broker_versions = broker_versions["api_keys"]
    ranges = {}
    if isinstance(broker_versions, dict):
        for key, (lo, hi) in broker_versions.items():
            ranges[int(key)] = (int(lo), int(hi))
        return ranges
    for entry in broker_versions or ():
        if isinstance(entry, dict):
            key, lo, hi = entry["api_key"], entry["min_version"], entry["max_version"]
        else:
            key, lo, hi = entry
        ranges[int(key)] = (int(lo), int(hi))
    return ranges


class VersionTable:
    """The version to use for each API with one broker.

    ``table.pick(api)`` -> the highest version both sides support (raises
    UnsupportedVersionError when there is none); ``table.get(api)`` -> the
    same or None. ``api`` is an :class:`kproto.messages.Api`, a name or a key.
    """

    __slots__ = ("broker", "_chosen")

    def __init__(self, broker_ranges: dict):
        #: {api_key: (min, max)} as the broker advertised them (every key, even
        #: APIs this client does not implement).
        self.broker = dict(broker_ranges)
        self._chosen = {}
        for key, a in APIS_BY_KEY.items():
            rng = self.broker.get(key)
            if rng is None:
                continue
            lo, hi = max(a.min_version, rng[0]), min(client_max_version(a), rng[1])
            if lo <= hi:
                self._chosen[key] = hi

    def __repr__(self):
        inner = ", ".join(f"{APIS_BY_KEY[k].name}=v{v}" for k, v in sorted(self._chosen.items()))
        return f"VersionTable({inner})"

    def __contains__(self, api) -> bool:
        return self.get(api) is not None

    def broker_range(self, api):
        """(min, max) the broker advertised for the API, or None."""
        return self.broker.get(_api(api).key)

    def get(self, api, default=None):
        """The highest common version, or default when there is none."""
        return self._chosen.get(_api(api).key, default)

    def supports(self, api, version: int) -> bool:
        """True when both sides support this exact version."""
        a = _api(api)
        rng = self.broker.get(a.key)
        return (rng is not None and a.has_version(version)
                and rng[0] <= version <= rng[1])

    def pick(self, api, min_version: int | None = None, max_version: int | None = None) -> int:
        """The highest version both support, optionally within
        [min_version, max_version] (a feature's needs). Raises
        UnsupportedVersionError naming the API and both ranges."""
        a = _api(api)
        lo, hi = a.min_version, client_max_version(a)
        if min_version is not None:
            lo = max(lo, min_version)
        if max_version is not None:
            hi = min(hi, max_version)
        rng = self.broker.get(a.key)
        ours = f"this client v{lo}-v{hi}"
        if (lo, hi) != (a.min_version, a.max_version):
            ours += f" (of v{a.min_version}-v{a.max_version})"
        if rng is None:
            raise UnsupportedVersionError(
                f"the broker does not support {a.name} (api key {a.key}); {ours}")
        best = min(hi, rng[1])
        if best < max(lo, rng[0]):
            raise UnsupportedVersionError(
                f"the broker supports {a.name} v{rng[0]}-v{rng[1]}, {ours}")
        return best

    def as_dict(self) -> dict:
        """{api name: chosen version} of every API usable with this broker."""
        return {APIS_BY_KEY[k].name: v for k, v in sorted(self._chosen.items())}


def negotiate(broker_versions) -> VersionTable:
    """Build the VersionTable from the broker's ApiVersions answer.

    broker_versions: the decoded ApiVersions response's ``api_keys`` list
    (dicts with api_key, min_version, max_version), the whole response body,
    or a dict {api_key: (min, max)}."""
    return VersionTable(_broker_ranges(broker_versions))


def apiversions_fallback_version(response_body: dict) -> int:
    """The ApiVersions version to retry with after an UNSUPPORTED_VERSION answer.

    KIP-511: a broker that does not support the client's ApiVersions version
    answers (in v0) with error 35 and lists its own ApiVersions range in
    api_keys. Like Kafka's Java client, retry with the broker's max version
    (capped at ours), or v0 when the broker did not list ApiVersions."""
    for entry in response_body.get("api_keys") or ():
        if entry.get("api_key") == API_VERSIONS_KEY:
            return max(0, min(int(entry.get("max_version", 0)), CLIENT_API_VERSIONS_MAX))
    return 0
