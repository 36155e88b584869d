"""Tests of API version negotiation (kproto.versions).

Why this exists: choosing a version both sides support, failing with a message
that names the API and both ranges, and the KIP-511 ApiVersions retry rule are
small pieces of logic every connection depends on.
"""
import pytest

from kproto import messages as m
from kproto.errors import UnsupportedVersionError
from kproto.versions import (CLIENT_API_VERSIONS_MAX, VersionTable, apiversions_fallback_version,
                             client_max_version, negotiate)


def test_highest_common_version_from_api_keys_list():
    table = negotiate([
        {"api_key": 0, "min_version": 3, "max_version": 20},    # broker newer than us
        {"api_key": 1, "min_version": 4, "max_version": 11},    # broker older than us
        {"api_key": 21, "min_version": 3, "max_version": 5},    # no overlap
        {"api_key": 9999, "min_version": 0, "max_version": 1},  # unknown to us: kept, unused
    ])
    assert isinstance(table, VersionTable)
    assert table.pick("Produce") == m.api("Produce").max_version == client_max_version("Produce")
    # OffsetCommit v10 names topics by id only: a plain request stops at v9
    # (CLIENT_VERSION_CAPS); the cores' network client sends v10 where it knows the ids
    assert client_max_version("OffsetCommit") == 9 < m.api("OffsetCommit").max_version
    assert table.pick(1) == 11 and table.pick(m.api("Fetch")) == 11
    assert table.get("DeleteRecords") is None
    assert "Fetch" in table and "DeleteRecords" not in table and "Metadata" not in table
    assert table.broker_range("DeleteRecords") == (3, 5)
    assert table.broker[9999] == (0, 1)
    assert table.as_dict() == {"Produce": 13, "Fetch": 11}


def test_pick_errors_name_the_api_and_both_ranges():
    table = negotiate({21: (3, 5)})
    with pytest.raises(UnsupportedVersionError,
                       match=r"^the broker supports DeleteRecords v3-v5, this client v0-v2$"):
        table.pick("DeleteRecords")
    with pytest.raises(UnsupportedVersionError, match="the broker does not support Metadata"):
        table.pick("Metadata")


def test_pick_with_feature_bounds():
    table = negotiate({0: (0, 11), 22: (0, 1)})
    assert table.pick("Produce", max_version=7) == 7
    assert table.pick("Produce", min_version=3) == 11
    # InitProducerId v6 (KIP-939) is marked unstable in Kafka 4.4's definitions: not used
    with pytest.raises(UnsupportedVersionError, match=r"InitProducerId v0-v1, this client v3-v5 \(of v0-v6\)"):
        table.pick("InitProducerId", min_version=3)
    assert table.supports("Produce", 11) and not table.supports("Produce", 12)


def test_negotiate_accepts_a_whole_response_body():
    payload = m.encode_response("ApiVersions", 3, 1, {"api_keys": [
        {"api_key": 18, "min_version": 0, "max_version": 3},
        {"api_key": 3, "min_version": 0, "max_version": 12}]})[4:]
    _, body = m.decode_response("ApiVersions", 3, payload)
    assert negotiate(body).pick("ApiVersions") == 3
    assert negotiate(body["api_keys"]).pick("Metadata") == 12


def test_apiversions_fallback_version():
    assert CLIENT_API_VERSIONS_MAX == m.api("ApiVersions").max_version
    body = {"error_code": 35, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 2}]}
    assert apiversions_fallback_version(body) == 2
    # the broker is newer than us: never above our own max
    body = {"error_code": 35, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 99}]}
    assert apiversions_fallback_version(body) == CLIENT_API_VERSIONS_MAX
    # no ApiVersions entry (pre-KIP-511 brokers): v0
    assert apiversions_fallback_version({"error_code": 35, "api_keys": []}) == 0
    assert apiversions_fallback_version({"error_code": 35}) == 0


def test_fallback_end_to_end_with_a_v0_answer():
    # broker answers our v4 request in v0 with error 35 and its ApiVersions range
    answer = m.encode_response("ApiVersions", 0, 5, {
        "error_code": 35, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 2}]})
    corr, body = m.decode_response("ApiVersions", CLIENT_API_VERSIONS_MAX, answer[4:])
    assert corr == 5 and body["error_code"] == 35
    assert apiversions_fallback_version(body) == 2
