"""The share group core (kproto.share) without a network: the machines are
fed the broker's answers as response bodies and time is a number."""
import uuid

import pytest

from kproto import error_codes as E
from kproto.cluster import TopicPartition as TP
from kproto.consumer import COORDINATOR
from kproto.consumer.coordinator import GroupCoordinator
from kproto.errors import ConfigError, UnsupportedVersionError
from kproto.records import BatchBuilder, Record, build_control_batch
from kproto.share import GAP, AcknowledgeType, ShareRecord, ShareStateError
from kproto.share.acks import ack_batches
from kproto.share.core import ShareConsumerCore
from kproto.share.fetcher import AcknowledgementsDone, ShareFetcher
from kproto.share.membership import (
    JOINING_HEARTBEAT_MS, AssignmentChanged, ShareGroupFatalError, ShareMembership, ShareMemberState,
)

TOPIC = "jobs"
TID = uuid.UUID(int=7)
ACCEPT, RELEASE, REJECT = AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT


# == acknowledgement batches ===============================================================

def test_ack_batches_are_runs_of_one_type():
    assert ack_batches({}) == []
    acks = {0: 1, 1: 1, 2: 1, 3: 2, 4: 3, 5: 3, 7: 1, 8: 0}
    assert ack_batches(acks) == [
        {"first_offset": 0, "last_offset": 2, "acknowledge_types": [1]},
        {"first_offset": 3, "last_offset": 3, "acknowledge_types": [2]},
        {"first_offset": 4, "last_offset": 5, "acknowledge_types": [3]},
        {"first_offset": 7, "last_offset": 7, "acknowledge_types": [1]},
        {"first_offset": 8, "last_offset": 8, "acknowledge_types": [0]},
    ]
    # 500 accepted records are one batch
    assert len(ack_batches({o: 1 for o in range(1000, 1500)})) == 1


def test_share_records_are_records_with_a_delivery_count():
    r = Record(5, 1000, 0, b"k", b"v", [("h", b"x")], TOPIC, 2)
    assert r.delivery_count is None and "delivery_count" not in repr(r)     # a Consumer's record
    r._set_delivery_count(3)
    assert ShareRecord is Record
    assert (r.topic, r.partition, r.offset, r.key, r.value, r.headers, r.delivery_count) == \
        (TOPIC, 2, 5, b"k", b"v", [("h", b"x")], 3)
    assert "delivery_count=3" in repr(r)


def test_config_errors_are_specific():
    with pytest.raises(ConfigError, match="group.id"):
        ShareConsumerCore({"bootstrap.servers": "h:1"})
    with pytest.raises(ConfigError, match="share.acknowledgement.mode"):
        ShareConsumerCore({"bootstrap.servers": "h:1", "group.id": "g", "share.acknowledgement.mode": "auto"})
    with pytest.raises(ConfigError, match="share.acquire.mode"):
        ShareConsumerCore({"bootstrap.servers": "h:1", "group.id": "g", "share.acquire.mode": "greedy"})
    with pytest.raises(ConfigError, match="max.poll.records"):
        ShareConsumerCore({"bootstrap.servers": "h:1", "group.id": "g", "max.poll.records": 0})


# == membership ===============================================================================

def known_coordinator():
    coord = GroupCoordinator("g")
    coord.want()
    (req,) = coord.poll(0)
    coord.on_response(req, {"coordinators": [{"key": "g", "node_id": 1, "host": "b1", "port": 9092,
                                              "error_code": 0}]}, 0)
    assert coord.known
    return coord


def hb_answer(epoch, interval=5000, assignment=None, error=0):
    return {"error_code": error, "error_message": None, "member_id": None, "member_epoch": epoch,
            "heartbeat_interval_ms": interval,
            "assignment": None if assignment is None else {"topic_partitions": [
                {"topic_id": tid, "partitions": ps} for tid, ps in assignment.items()]}}


def test_membership_joins_heartbeats_at_the_brokers_interval_and_takes_the_assignment():
    m = ShareMembership(known_coordinator(), "g", rack_id="r1")
    assert m.poll(0) == []                                     # nothing before subscribe
    m.subscribe(["b", "a"], 0)
    (req,) = m.poll(0)
    assert req.destination == COORDINATOR and req.api_name == "ShareGroupHeartbeat"
    assert req.body == {"group_id": "g", "member_id": m.member_id, "member_epoch": 0, "rack_id": "r1",
                        "subscribed_topic_names": ["a", "b"]}
    uuid.UUID(m.member_id)                                     # a client-made UUID (KIP-1082)
    assert m.poll(0) == []                                     # one heartbeat in flight at a time
    m.on_response(req, hb_answer(3, assignment={}), 10)
    assert m.state is ShareMemberState.STABLE and m.epoch == 3
    # no partitions yet: the broker assigns asynchronously; ask again soon
    assert m.next_deadline(10) == 10 + JOINING_HEARTBEAT_MS
    (req,) = m.poll(10 + JOINING_HEARTBEAT_MS)
    assert req.body["member_epoch"] == 3 and req.body["subscribed_topic_names"] is None
    m.on_response(req, hb_answer(4, assignment={TID: [0, 1]}), 600)
    assert m.events() == [AssignmentChanged({TID: frozenset({0, 1})})]
    assert m.next_deadline(600) == 5600                        # the broker's interval now
    (req,) = m.poll(5600)
    m.on_response(req, hb_answer(4), 5610)                     # no assignment field: unchanged
    assert m.events() == [] and m.assignment == {TID: frozenset({0, 1})}


def test_membership_rejoins_with_the_same_member_id_when_fenced():
    for code in (E.FencedMemberEpochError.code, E.UnknownMemberIdError.code):
        m = ShareMembership(known_coordinator(), "g")
        m.subscribe(["a"], 0)
        (req,) = m.poll(0)
        m.on_response(req, hb_answer(5, assignment={TID: [0]}), 0)
        m.events()
        (req,) = m.poll(5000)
        m.on_response(req, hb_answer(0, error=code), 5000)
        assert m.events() == [AssignmentChanged({})]
        (req,) = m.poll(5000)                                  # at once
        assert req.body["member_epoch"] == 0 and req.body["subscribed_topic_names"] == ["a"]
        assert req.body["member_id"] == m.member_id


def test_membership_coordinator_errors_and_fatal_errors():
    coord = known_coordinator()
    m = ShareMembership(coord, "g")
    m.subscribe(["a"], 0)
    (req,) = m.poll(0)
    m.on_response(req, hb_answer(0, error=E.NotCoordinatorError.code), 0)
    assert not coord.known                                     # looked up again
    assert m.poll(0) == []                                     # waits for the coordinator
    coord2 = known_coordinator()
    m2 = ShareMembership(coord2, "g")
    m2.subscribe(["a"], 0)
    (req,) = m2.poll(0)
    m2.on_response(req, hb_answer(0, error=E.GroupMaxSizeReachedError.code), 0)
    (ev,) = m2.events()
    assert isinstance(ev, ShareGroupFatalError) and isinstance(ev.error, E.GroupMaxSizeReachedError)
    assert m2.state is ShareMemberState.FAILED and m2.poll(100) == []
    # a connection failure: coordinator unknown, retried after a backoff
    coord3 = known_coordinator()
    m3 = ShareMembership(coord3, "g", retry_backoff_ms=100)
    m3.subscribe(["a"], 0)
    (req,) = m3.poll(0)
    m3.on_failure(req, ConnectionError("cut"), 0)
    assert not coord3.known


def test_a_refused_topic_is_told_but_not_fatal_and_the_member_retries():
    from kproto.consumer.membership import GroupError
    m = ShareMembership(known_coordinator(), "g", retry_backoff_ms=100)
    m.subscribe(["a"], 0)
    (req,) = m.poll(0)
    m.on_response(req, hb_answer(0, error=E.TopicAuthorizationFailedError.code), 0)
    (ev,) = m.events()
    assert isinstance(ev, GroupError) and isinstance(ev.error, E.TopicAuthorizationFailedError)
    assert m.state is not ShareMemberState.FAILED and m.poll(50) == []
    (req,) = m.poll(120)                                       # again after the backoff (100 ms ± 20%)
    m.on_response(req, hb_answer(3, assignment={TID: [0]}), 120)
    assert m.events() == [AssignmentChanged({TID: frozenset({0})})]


def test_membership_leaves_with_epoch_minus_one_after_the_heartbeat_in_flight():
    m = ShareMembership(known_coordinator(), "g")
    m.subscribe(["a"], 0)
    (req,) = m.poll(0)
    m.on_response(req, hb_answer(2, assignment={TID: [0]}), 0)
    m.events()
    (hb,) = m.poll(5000)
    m.leave(5001)
    assert m.state is ShareMemberState.LEAVING and m.poll(5001) == []
    m.on_response(hb, hb_answer(2), 5002)                      # the heartbeat's answer first
    (leave,) = m.poll(5002)
    assert leave.body["member_epoch"] == -1
    assert not m.done
    m.on_response(leave, hb_answer(-1), 5003)
    assert m.done and m.state is ShareMemberState.LEFT
    assert m.events() == [AssignmentChanged({})]
    # never joined: leaving is immediate
    m2 = ShareMembership(known_coordinator(), "g")
    m2.leave(0)
    assert m2.done


# == share sessions and records ==================================================================

def batch(base, n, values=None):
    b = BatchBuilder("none", 1 << 16)
    b.set_base_offset(base)
    for i in range(n):
        b.append(1_700_000_000_000 + i, None, (values or {}).get(base + i, b"v%d" % (base + i)), [])
    return bytes(b.build())


def fetch_answer(records=b"", acquired=(), error=0, ack_error=0, top_error=0, partition=0):
    return {"error_code": top_error, "error_message": None, "acquisition_lock_timeout_ms": 15000,
            "responses": [{"topic_id": TID, "partitions": [{
                "partition_index": partition, "error_code": error, "error_message": None,
                "acknowledge_error_code": ack_error, "acknowledge_error_message": None,
                "current_leader": {"leader_id": 1, "leader_epoch": 0}, "records": records,
                "acquired_records": [{"first_offset": f, "last_offset": l, "delivery_count": d}
                                     for f, l, d in acquired]}]}],
            "node_endpoints": []}


def ack_answer(error=0, top_error=0, partition=0):
    return {"error_code": top_error, "error_message": None, "responses": [{"topic_id": TID, "partitions": [
        {"partition_index": partition, "error_code": error, "error_message": None,
         "current_leader": {"leader_id": 1, "leader_epoch": 0}}]}], "node_endpoints": []}


class Fetch:
    """A ShareFetcher with one leader (node 1) for every partition of TOPIC."""

    def __init__(self, partitions=(0,), **kw):
        self.f = ShareFetcher("g", "m1", max_records=kw.pop("max_records", 500), **kw)
        self.f.set_assignment({TP(TOPIC, p) for p in partitions})

    def requests(self, now=0, ready=True):
        return self.f.requests(lambda tp: 1, {TOPIC: TID}.get, lambda node: ready, now)

    def one(self, now=0):
        (req,) = self.requests(now)
        return req


def listed(req):
    return {p["partition_index"]: p["acknowledgement_batches"] for t in req.body["topics"] for p in t["partitions"]}


def test_share_fetch_opens_a_session_hands_out_only_acquired_records_and_piggybacks_acks():
    fx = Fetch(partitions=(0, 1))
    req = fx.one()
    assert req.api == "ShareFetch" and req.body["share_session_epoch"] == 0
    assert listed(req) == {0: [], 1: []} and req.body["member_id"] == "m1"
    assert fx.requests() == []                                 # one request per session in flight
    # offsets 0-9 in the batch; 2-4 and 7 acquired by us (others are someone else's)
    fx.f.on_response(req, fetch_answer(batch(0, 10), [(2, 4, 1), (7, 7, 3)]), 1)
    assert fx.requests() == []                                 # records buffered: no fetch yet
    recs = fx.f.drain()
    assert [(r.offset, r.delivery_count, r.value) for r in recs] == [
        (2, 1, b"v2"), (3, 1, b"v3"), (4, 1, b"v4"), (7, 3, b"v7")]
    assert all(isinstance(r, ShareRecord) and r.topic == TOPIC and r.partition == 0 for r in recs)
    assert [r.delivery_count for r in fx.f.drain()] == []
    fx.f.acknowledge(TP(TOPIC, 0), 2, ACCEPT)
    fx.f.acknowledge(TP(TOPIC, 0), 3, REJECT)
    with pytest.raises(ShareStateError):
        fx.f.acknowledge(TP(TOPIC, 0), 3, ACCEPT)              # twice
    with pytest.raises(ShareStateError):
        fx.f.acknowledge(TP(TOPIC, 0), 5, ACCEPT)              # never delivered to us
    assert fx.f.acknowledge_delivered(RELEASE) == 2            # 4 and 7
    req = fx.one()
    # incremental: the session has both partitions already, only acks are listed
    assert req.body["share_session_epoch"] == 1 and req.body["forgotten_topics_data"] == []
    assert listed(req) == {0: [{"first_offset": 2, "last_offset": 2, "acknowledge_types": [1]},
                               {"first_offset": 3, "last_offset": 3, "acknowledge_types": [3]},
                               {"first_offset": 4, "last_offset": 4, "acknowledge_types": [2]},
                               {"first_offset": 7, "last_offset": 7, "acknowledge_types": [2]}]}
    # the answer names partitions this request did not list: their records count
    fx.f.on_response(req, fetch_answer(batch(10, 2), [(10, 11, 1)], partition=1), 2)
    (ev,) = fx.f.events()
    assert isinstance(ev, AcknowledgementsDone) and ev.results == {TP(TOPIC, 0): ([2, 3, 4, 7], None)}
    assert [(r.partition, r.offset) for r in fx.f.drain()] == [(1, 10), (1, 11)]
    assert fx.one().body["share_session_epoch"] == 2


def test_acquired_offsets_without_a_record_are_acknowledged_as_gaps():
    fx = Fetch()
    req = fx.one()
    # records 0-1, a transaction marker at 2, records 3-4 (5 compacted away): 0-5 acquired
    marker = bytes(build_control_batch(True, 9, 0, 0, 1_700_000_000_000, base_offset=2))
    fx.f.on_response(req, fetch_answer(batch(0, 2) + marker + batch(3, 2), [(0, 5, 1)]), 1)
    assert [r.offset for r in fx.f.drain()] == [0, 1, 3, 4]
    fx.f.acknowledge_delivered(ACCEPT)
    req = fx.one()
    assert listed(req)[0] == [{"first_offset": 0, "last_offset": 1, "acknowledge_types": [1]},
                              {"first_offset": 2, "last_offset": 2, "acknowledge_types": [GAP]},
                              {"first_offset": 3, "last_offset": 4, "acknowledge_types": [1]},
                              {"first_offset": 5, "last_offset": 5, "acknowledge_types": [GAP]}]


def test_max_records_leaves_the_rest_buffered():
    fx = Fetch(max_records=3)
    req = fx.one()
    assert req.body["max_records"] == 3 and req.body["batch_size"] == 3
    fx.f.on_response(req, fetch_answer(batch(0, 8), [(0, 7, 1)]), 1)
    assert [r.offset for r in fx.f.drain()] == [0, 1, 2]
    assert [r.offset for r in fx.f.drain()] == [3, 4, 5]
    assert [r.offset for r in fx.f.drain()] == [6, 7]
    assert fx.f.drain() == []


def test_a_commit_goes_as_share_acknowledge_and_reports_per_partition():
    fx = Fetch()
    req = fx.one()
    fx.f.on_response(req, fetch_answer(batch(0, 3), [(0, 2, 1)]), 1)
    fx.f.drain()
    fx.f.acknowledge_delivered(ACCEPT)
    h = fx.f.commit(2, 60002)
    assert not h.done
    req = fx.one()
    assert req.api == "ShareAcknowledge" and req.body["share_session_epoch"] == 1
    assert listed(req) == {0: [{"first_offset": 0, "last_offset": 2, "acknowledge_types": [1]}]}
    fx.f.on_response(req, ack_answer(error=E.InvalidRecordStateError.code), 3)
    assert h.done and isinstance(h.result()[TP(TOPIC, 0)], E.InvalidRecordStateError)
    # nothing pending: a commit is done at once
    assert fx.f.commit(4, 5).done and fx.f.commit(4, 5).result() == {}


def test_a_commit_waits_for_acks_already_in_flight():
    fx = Fetch()
    req = fx.one()
    fx.f.on_response(req, fetch_answer(batch(0, 1), [(0, 0, 1)]), 1)
    fx.f.drain()
    fx.f.acknowledge_delivered(ACCEPT)
    req = fx.one()                                             # a fetch carrying the ack
    h = fx.f.commit(2, 60002)
    assert not h.done
    fx.f.on_response(req, fetch_answer(), 3)
    assert h.done and h.result() == {TP(TOPIC, 0): None}


def test_session_errors_reset_the_epoch_and_fail_what_the_request_carried():
    fx = Fetch()
    req = fx.one()
    fx.f.on_response(req, fetch_answer(batch(0, 1), [(0, 0, 1)]), 1)
    fx.f.drain()
    fx.f.acknowledge_delivered(ACCEPT)
    req = fx.one()
    fx.f.on_response(req, fetch_answer(top_error=E.InvalidShareSessionEpochError.code), 2)
    (ev,) = fx.f.events()
    assert isinstance(ev.results[TP(TOPIC, 0)][1], E.InvalidShareSessionEpochError)
    req = fx.one()
    assert req.body["share_session_epoch"] == 0 and listed(req) == {0: []}    # a new session
    fx.f.on_failure(req, ConnectionError("cut"))
    assert fx.one().body["share_session_epoch"] == 0


def test_partitions_leaving_the_assignment_are_forgotten_and_their_buffered_records_released():
    fx = Fetch(partitions=(0, 1))
    req = fx.one()
    fx.f.on_response(req, fetch_answer(batch(0, 4), [(0, 3, 1)], partition=1), 1)
    assert [r.offset for r in fx.f.drain(max_records=1)] == [0]
    fx.f.set_assignment({TP(TOPIC, 0)})                        # partition 1 went to others
    assert fx.f.drain() == []
    req = fx.one()
    # the undelivered 1-3 are released at once; delivered 0 awaits the application
    assert req.api == "ShareAcknowledge"
    assert listed(req) == {1: [{"first_offset": 1, "last_offset": 3, "acknowledge_types": [2]}]}
    fx.f.on_response(req, ack_answer(partition=1), 2)
    req = fx.one()
    assert req.api == "ShareFetch" and req.body["forgotten_topics_data"] == [{"topic_id": TID, "partitions": [1]}]


def test_fetch_errors_refresh_metadata_or_surface_once():
    fx = Fetch()
    req = fx.one()
    fx.f.on_response(req, fetch_answer(error=E.NotLeaderOrFollowerError.code), 1)
    assert fx.f.metadata_refresh_needed and fx.f.drain() == []
    req = fx.one()
    fx.f.on_response(req, fetch_answer(error=E.TopicAuthorizationFailedError.code), 2)
    with pytest.raises(E.TopicAuthorizationFailedError):
        fx.f.drain()
    assert fx.f.drain() == []


def test_closing_sends_epoch_minus_one_with_what_is_pending():
    fx = Fetch()
    req = fx.one()
    fx.f.on_response(req, fetch_answer(batch(0, 2), [(0, 1, 1)]), 1)
    fx.f.drain()
    fx.f.acknowledge(TP(TOPIC, 0), 0, ACCEPT)                  # 1 stays unacknowledged
    fx.f.begin_close()
    req = fx.one()
    assert req.api == "ShareAcknowledge" and req.body["share_session_epoch"] == -1
    assert listed(req) == {0: [{"first_offset": 0, "last_offset": 0, "acknowledge_types": [1]}]}
    assert not fx.f.closed
    fx.f.on_response(req, ack_answer(), 2)
    assert fx.f.closed and fx.requests() == []


def test_renew_goes_alone_in_a_share_acknowledge_and_the_records_come_back():
    """RENEW (KIP-1222): never piggy-backed on a fetch, sent with is_renew_ack;
    a renewed record is handed out again, to be acknowledged once more; one
    whose renewal failed is not."""
    RENEW = AcknowledgeType.RENEW
    fx = Fetch()
    req = fx.one()
    fx.f.on_response(req, fetch_answer(batch(0, 3), [(0, 2, 1)]), 1)
    recs = {r.offset: r for r in fx.f.drain()}
    fx.f.acknowledge(TP(TOPIC, 0), 0, RENEW, recs[0])
    fx.f.acknowledge(TP(TOPIC, 0), 1, RENEW, recs[1])
    fx.f.acknowledge(TP(TOPIC, 0), 2, ACCEPT)
    req = fx.one()
    assert req.api == "ShareAcknowledge" and req.body["is_renew_ack"] is True
    assert listed(req) == {0: [{"first_offset": 0, "last_offset": 1, "acknowledge_types": [4]},
                               {"first_offset": 2, "last_offset": 2, "acknowledge_types": [1]}]}
    assert fx.f.drain() == []                                  # not back before the leader answered
    fx.f.on_response(req, ack_answer(), 2)
    back = fx.f.drain()
    assert [r.offset for r in back] == [0, 1] and back[0] is recs[0]
    fx.f.acknowledge(TP(TOPIC, 0), 0, ACCEPT)                  # theirs again: acknowledged anew
    fx.f.acknowledge(TP(TOPIC, 0), 1, RENEW, back[1])
    req = fx.one()
    assert req.body["is_renew_ack"] is True
    fx.f.on_response(req, ack_answer(error=E.InvalidRecordStateError.code), 3)
    assert fx.f.drain() == []                                  # renewal refused: not handed out again
    evs = fx.f.events()
    assert isinstance(evs[-1].results[TP(TOPIC, 0)][1], E.InvalidRecordStateError)


def test_renew_to_a_leader_without_share_acknowledge_v2_fails_clearly():
    fx = Fetch()
    req = fx.one()
    fx.f.on_response(req, fetch_answer(batch(0, 1), [(0, 0, 1)]), 1)
    (rec,) = fx.f.drain()
    fx.f.acknowledge(TP(TOPIC, 0), 0, AcknowledgeType.RENEW, rec)
    reqs = fx.f.requests(lambda tp: 1, {TOPIC: TID}.get, lambda node: True, 0, lambda node: False)
    assert all(not r.body.get("is_renew_ack") for r in reqs)
    (ev,) = fx.f.events()
    err = ev.results[TP(TOPIC, 0)][1]
    assert isinstance(err, UnsupportedVersionError) and "KIP-1222" in str(err)
    assert ev.results[TP(TOPIC, 0)][0] == [0]


def test_close_releases_what_was_to_be_renewed():
    fx = Fetch()
    req = fx.one()
    fx.f.on_response(req, fetch_answer(batch(0, 1), [(0, 0, 1)]), 1)
    (rec,) = fx.f.drain()
    fx.f.acknowledge(TP(TOPIC, 0), 0, AcknowledgeType.RENEW, rec)
    fx.f.begin_close()
    req = fx.one()
    assert req.body["share_session_epoch"] == -1 and not req.body["is_renew_ack"]
    assert listed(req) == {0: [{"first_offset": 0, "last_offset": 0, "acknowledge_types": [2]}]}


# == the core's acknowledgement modes ==============================================================

def core_with_records(mode):
    core = ShareConsumerCore({"bootstrap.servers": "h:1", "group.id": "g", "share.acknowledgement.mode": mode})
    core.subscribe([TOPIC], 0)
    f = core.fetcher
    f.set_assignment({TP(TOPIC, 0)})
    (req,) = f.requests(lambda tp: 1, {TOPIC: TID}.get, lambda n: True, 0)
    f.on_response(req, fetch_answer(batch(0, 3), [(0, 2, 1)]), 1)
    return core


def test_explicit_mode_wants_every_record_acknowledged_before_the_next_poll():
    core = core_with_records("explicit")
    core.poll_started(0)
    recs = core.drain()
    assert len(recs) == 3
    with pytest.raises(ShareStateError, match="3 record"):
        core.poll_started(1)
    core.acknowledge(recs[0], ACCEPT)
    core.acknowledge(recs[1], RELEASE)
    with pytest.raises(ValueError, match="ACCEPT, RELEASE, REJECT or RENEW"):
        core.acknowledge(recs[2], 9)
    core.acknowledge(recs[2], REJECT)
    core.poll_started(2)
    assert core.fetcher._pending[1][TP(TOPIC, 0)] == {0: ACCEPT, 1: RELEASE, 2: REJECT}


def test_implicit_mode_accepts_the_last_poll_and_refuses_acknowledge():
    core = core_with_records("implicit")
    core.poll_started(0)
    recs = core.drain()
    with pytest.raises(ShareStateError, match="explicit"):
        core.acknowledge(recs[0], ACCEPT)
    core.poll_started(1)
    assert core.fetcher._pending[1][TP(TOPIC, 0)] == {0: ACCEPT, 1: ACCEPT, 2: ACCEPT}
    assert core.fetcher.delivered == {}


def test_deserializers_apply_to_share_records():
    core = ShareConsumerCore({"bootstrap.servers": "h:1", "group.id": "g",
                              "value.deserializer": lambda b: b.decode().upper()})
    f = core.fetcher
    f.set_assignment({TP(TOPIC, 0)})
    (req,) = f.requests(lambda tp: 1, {TOPIC: TID}.get, lambda n: True, 0)
    f.on_response(req, fetch_answer(batch(0, 1), [(0, 0, 2)]), 1)
    (r,) = core.drain()
    assert (r.value, r.delivery_count) == ("V0", 2)


def test_a_broker_without_share_groups_fails_the_member_with_a_clear_error():
    from kproto.errors import UnsupportedVersionError
    m = ShareMembership(known_coordinator(), "g")
    m.subscribe(["a"], 0)
    (req,) = m.poll(0)
    m.on_failure(req, UnsupportedVersionError("ShareGroupHeartbeat needs v0+; node 1 supports at most None"), 0)
    (ev,) = m.events()
    assert isinstance(ev, ShareGroupFatalError) and "does not support share groups" in str(ev.error)
    assert m.state is ShareMemberState.FAILED and m.poll(1000) == [] and m.done


def test_unsubscribe_leaves_and_subscribe_joins_again_with_the_same_member_id():
    m = ShareMembership(known_coordinator(), "g")
    m.subscribe(["a"], 0)
    (req,) = m.poll(0)
    m.on_response(req, hb_answer(4, assignment={TID: [0]}), 0)
    m.events()
    m.leave(10)
    (leave,) = m.poll(10)
    m.subscribe(["b"], 11)                       # while the leave is on its way
    m.on_response(leave, hb_answer(-1), 12)
    assert m.events() == [AssignmentChanged({})]
    (join,) = m.poll(12)
    assert join.body["member_epoch"] == 0 and join.body["subscribed_topic_names"] == ["b"]
    assert join.body["member_id"] == m.member_id


def test_core_unsubscribe_releases_what_was_buffered_and_poll_then_wants_a_subscription():
    core = core_with_records("implicit")
    core.unsubscribe(0)
    assert core.fetcher.assigned == set() and core.drain() == []
    assert core.fetcher._pending[1][TP(TOPIC, 0)] == {0: RELEASE, 1: RELEASE, 2: RELEASE}
    with pytest.raises(ShareStateError, match="not subscribed"):
        core.poll_started(1)


def test_close_accepts_nothing_by_itself_in_implicit_mode():
    # as Java's close(): the last poll's records go back (the session's close
    # releases them) unless a commit accepted them
    core = core_with_records("implicit")
    core.poll_started(0)
    assert len(core.drain()) == 3
    core.begin_close(1)
    assert core.fetcher.delivered == {} and not core.fetcher.has_pending_acks
    core2 = core_with_records("implicit")
    core2.poll_started(0)
    core2.drain()
    core2.commit(1)
    assert core2.fetcher._pending[1][TP(TOPIC, 0)] == {0: ACCEPT, 1: ACCEPT, 2: ACCEPT}


def test_a_fatal_coordinator_lookup_error_reaches_the_application():
    core = ShareConsumerCore({"bootstrap.servers": "h:1", "group.id": "g"})
    core.subscribe(["a"], 0)
    core.coordinator.want()
    (req,) = core.coordinator.poll(0)
    core.coordinator.on_response(req, {"coordinators": [{"key": "g", "node_id": -1, "host": "", "port": -1,
                                                         "error_code": E.GroupAuthorizationFailedError.code}]}, 0)
    core.poll(1)
    with pytest.raises(E.GroupAuthorizationFailedError):
        core.drain()


def test_no_held_fetch_while_the_application_holds_unacknowledged_records():
    fx = Fetch()
    req = fx.one()
    assert req.body["max_wait_ms"] == 500                      # nothing held: the broker may wait
    fx.f.on_response(req, fetch_answer(batch(0, 2), [(0, 1, 1)]), 1)
    fx.f.drain()                                               # the application holds 0 and 1
    req = fx.one()                                             # prefetch, but not held by the broker:
    assert req.body["max_wait_ms"] == 0                        # the acks made meanwhile must not wait
    fx.f.on_response(req, fetch_answer(), 2)                   # nothing more for us (in-flight limit)
    assert fx.requests() == []                                 # no spinning on empty answers
    fx.f.acknowledge(TP(TOPIC, 0), 0, ACCEPT)
    req = fx.one()                                             # an acknowledgement: fetch with it
    assert listed(req)[0] == [{"first_offset": 0, "last_offset": 0, "acknowledge_types": [1]}]
    assert req.body["max_wait_ms"] == 0                        # 1 is still held
    fx.f.on_response(req, fetch_answer(), 3)
    fx.f.acknowledge(TP(TOPIC, 0), 1, ACCEPT)
    req = fx.one()
    fx.f.on_response(req, fetch_answer(), 4)
    req = fx.one()                                             # hands empty: a normal long poll
    assert req.body["max_wait_ms"] == 500


def test_a_commit_that_no_leader_answers_times_out():
    from kproto.errors import KafkaTimeoutError
    from kproto.share import ShareCommitTimeoutError
    core = core_with_records("implicit")
    core.poll_started(0)
    core.drain()
    h = core.commit(100, timeout_ms=1000)             # no network: nothing will answer
    assert not h.done and core.next_deadline(100) <= 1100
    core.poll(1100)
    assert h.done
    with pytest.raises(ShareCommitTimeoutError, match="1000 ms") as e:
        h.result()
    assert isinstance(e.value, KafkaTimeoutError)


def test_an_empty_drain_that_drops_a_used_up_fetch_asks_the_driver_for_a_round():
    # As ConsumerCore.fetch_freed, which the drivers' shared poll steps read
    # from both cores: records 0-2 of an answer that acquired 0-4 (3 and 4
    # compacted away), max.poll.records 3. The drain that hands out 0-2 keeps
    # the answer buffered (offsets still left); the next hands out nothing
    # and drops it - the leader may be fetched again and the gaps told, which
    # only a round does.
    core = ShareConsumerCore({"bootstrap.servers": "h:1", "group.id": "g", "max.poll.records": 3})
    core.subscribe([TOPIC], 0)
    f = core.fetcher
    f.set_assignment({TP(TOPIC, 0)})
    (req,) = f.requests(lambda tp: 1, {TOPIC: TID}.get, lambda n: True, 0)
    f.on_response(req, fetch_answer(batch(0, 3), [(0, 4, 1)]), 1)
    assert [r.offset for r in core.drain()] == [0, 1, 2]
    assert not core.fetch_freed and f.has_buffered()
    assert f.requests(lambda tp: 1, {TOPIC: TID}.get, lambda n: True, 0) == []     # buffered: no fetch
    assert core.drain() == []
    assert core.fetch_freed and not f.has_buffered()
    core.fetch_freed = False                     # taken, as the poll steps take it
    (req,) = f.requests(lambda tp: 1, {TOPIC: TID}.get, lambda n: True, 0)
    assert req.api == "ShareFetch"
    gaps = [b for b in listed(req)[0] if b["acknowledge_types"] == [GAP]]
    assert gaps == [{"first_offset": 3, "last_offset": 4, "acknowledge_types": [GAP]}]
    assert core.drain() == [] and not core.fetch_freed        # nothing dropped: nothing asked
