"""The KIP-848 consumer protocol membership (group.protocol=consumer) as a
sans-IO state machine, with no network: the test plays the coordinator,
answering the ConsumerGroupHeartbeat requests the machine emits; time is a
number the test advances.

Covered: joining (epoch 0, every field), incremental fields (null = unchanged),
reconciliation order (revoke -> listener/commits -> assign -> acknowledge),
topic ids that metadata does not name yet, fencing (FENCED_MEMBER_EPOCH,
UNKNOWN_MEMBER_ID: lost, rejoin with epoch 0 and the same member id),
leaving (epoch -1, static members -2), the poll timeout, coordinator errors,
fatal errors, the configuration checks, the regex conversion for the broker,
and commits carrying the member epoch (STALE_MEMBER_EPOCH retried after the
next heartbeat).
"""
import re
import uuid

import pytest

from kproto import error_codes as E
from kproto.consumer import (
    COORDINATOR, GroupCoordinator, OffsetCommitter, PartitionsAssigned, PartitionsLost,
    PartitionsRevoked, GroupFatalError, TopicPartition as TP,
)
from kproto.consumer.commits import CommitFailedError
from kproto.consumer.core import ConsumerCore
from kproto.consumer.membership import MetadataNeeded
from kproto.consumer.membership_consumer import (
    ConsumerMemberState, ConsumerProtocolMembership, to_broker_regex,
)
from kproto.errors import ConfigError, ConnectionClosedError, UnsupportedVersionError

GROUP = "g1"
T1, T2 = uuid.uuid4(), uuid.uuid4()
NAMES = {"orders": T1, "payments": T2}
COUNTS = {"orders": 4, "payments": 2}


class Coordinator:
    """Plays the broker: answers FindCoordinator at once and keeps the
    heartbeats the member sends for the test to answer."""

    def __init__(self, hook_result=True, **kw):
        self.coord = GroupCoordinator(GROUP, retry_backoff_ms=100)
        self.hook_calls = []
        self.hook_result = hook_result
        kw.setdefault("max_poll_interval_ms", 60000)
        self.m = ConsumerProtocolMembership(self.coord, prepare_join=self._hook, retry_backoff_ms=100, **kw)
        self.events = []
        self.queued = []              # requests a step after an answer produced
        self.now = 1000

    def _hook(self, now, round_):
        self.hook_calls.append(round_)
        return self.hook_result

    def poll(self):
        """One driver step: the requests of the member (FindCoordinator answered)."""
        out, self.queued = self.queued, []
        for _ in range(2):             # the member asks for the coordinator, the next step finds it
            for req in self.coord.poll(self.now):
                self.coord.on_response(req, {"error_code": 0, "node_id": 1, "host": "b1", "port": 9093,
                                             "coordinators": []}, self.now)
            for req in self.m.poll(self.now):
                assert req.destination == COORDINATOR
                out.append(req)
            self.events.extend(self.m.events())
            if out or self.coord.known:
                break
        return out

    def heartbeat(self):
        """The one heartbeat the member sends now."""
        reqs = [r for r in self.poll() if r.body["member_epoch"] >= 0]
        assert len(reqs) == 1, reqs
        assert reqs[0].api_name == "ConsumerGroupHeartbeat"
        return reqs[0]

    def answer(self, req, epoch=None, assignment=None, error=0, interval=500):
        body = {"throttle_time_ms": 0, "error_code": error, "error_message": None,
                "member_id": req.body["member_id"] if not error else None,
                "member_epoch": req.body["member_epoch"] if epoch is None else epoch,
                "heartbeat_interval_ms": interval if not error else 0,
                "assignment": None if assignment is None else {"topic_partitions": [
                    {"topic_id": tid, "partitions": ps} for tid, ps in assignment.items()]}}
        self.m.on_response(req, body, self.now)
        if self.coord.known and req.coordinator_epoch == self.coord.epoch:
            self.coord.confirmed(self.now)           # as ConsumerCore._group_done does
        self.events.extend(self.m.events())
        more = self.poll()                   # a driver polls after every answer
        self.queued.extend(more)

    def take_events(self):
        out, self.events = self.events, []
        return out

    def joined(self, assignment, epoch=1):
        """Subscribe to orders+payments, join and reconcile ``assignment``."""
        self.m.update_metadata(COUNTS, self.now, topic_ids=NAMES)
        self.m.subscribe(["orders", "payments"], self.now)
        self.answer(self.heartbeat(), epoch=epoch, assignment=assignment)
        ack = self.heartbeat()
        self.answer(ack)
        return ack


def owned(body):
    return {(t["topic_id"], p) for t in body["topic_partitions"] for p in t["partitions"]}


def test_join_sends_every_field_then_only_what_changed():
    c = Coordinator(remote_assignor="range", group_instance_id=None, client_rack="r1")
    c.m.update_metadata(COUNTS, c.now, topic_ids=NAMES)
    c.m.subscribe(["payments", "orders"], c.now)
    join = c.heartbeat()
    b = join.body
    assert b["member_epoch"] == 0 and len(b["member_id"]) == 22       # a Java-style Uuid
    assert b["subscribed_topic_names"] == ["orders", "payments"]
    assert (b["rebalance_timeout_ms"], b["server_assignor"], b["rack_id"]) == (60000, "range", "r1")
    assert b["topic_partitions"] == [] and b["subscribed_topic_regex"] is None
    c.answer(join, epoch=3, assignment={T1: [0, 1]})
    assert c.take_events() == [PartitionsAssigned((TP("orders", 0), TP("orders", 1)), 3)]
    assert c.m.assignment == {TP("orders", 0), TP("orders", 1)}
    # acknowledged at once (no waiting for the interval), and only the new field
    ack = c.heartbeat()
    assert ack.body["member_epoch"] == 3 and owned(ack.body) == {(T1, 0), (T1, 1)}
    assert ack.body["subscribed_topic_names"] is None and ack.body["rebalance_timeout_ms"] == -1
    assert ack.body["server_assignor"] is None and ack.body["rack_id"] is None
    c.answer(ack)
    assert c.poll() == []                                  # next one after the broker's interval
    assert c.m.next_deadline(c.now) == c.now + 500
    c.now += 500
    hb = c.heartbeat()
    assert hb.body["topic_partitions"] is None and hb.body["subscribed_topic_names"] is None
    c.answer(hb)
    # a subscription change goes out at once
    c.m.subscribe(["orders"], c.now)
    hb = c.heartbeat()
    assert hb.body["subscribed_topic_names"] == ["orders"] and hb.body["topic_partitions"] is None


def test_reconciliation_revokes_first_then_assigns_then_acknowledges():
    c = Coordinator()
    c.joined({T1: [0, 1, 2]}, epoch=1)
    c.take_events()
    c.hook_result = False                                  # auto-commit still running
    c.now += 500
    hb = c.heartbeat()
    c.answer(hb, epoch=1, assignment={T1: [0], T2: [0]})   # 1, 2 go; payments-0 comes
    assert c.take_events() == [] and c.hook_calls            # waiting for the commit
    assert c.m.assignment == {TP("orders", p) for p in (0, 1, 2)}
    assert c.m.commit_generation() == (1, c.m.member_id, None)   # commits still allowed
    c.hook_result = True
    c.poll()
    assert c.take_events() == [PartitionsRevoked((TP("orders", 1), TP("orders", 2)))]
    # the listener has not run yet (the hook says so): the broker keeps hearing
    # that we own them, and nothing is assigned yet
    c.hook_result = False
    c.now += 500
    hb = c.heartbeat()
    assert hb.body["topic_partitions"] is None
    c.answer(hb)
    assert c.take_events() == []
    c.hook_result = True
    ack = c.heartbeat()                                    # sent at once when reconciled
    assert c.take_events() == [PartitionsAssigned((TP("payments", 0),), 1)]
    assert owned(ack.body) == {(T1, 0), (T2, 0)}
    assert c.m.assignment == {TP("orders", 0), TP("payments", 0)}
    rounds = set(c.hook_calls)
    assert len(rounds) == 1                                 # one reconciliation, one round


def test_the_acknowledgement_waits_until_the_revocation_was_handed_out_and_its_listener_ran():
    # As the consumer core does: its hook says "not yet" while a revocation
    # handed to the application has not been through the listener. The answer
    # that starts the reconciliation and the polls of the same step come
    # before the driver took the events, so the machine itself must wait.
    pending = []
    c = Coordinator()
    c.m.prepare_join = lambda now, round_: not pending
    c.joined({T1: [0, 1]}, epoch=2)
    c.take_events()
    c.now += 500
    hb = c.heartbeat()
    c.m.on_response(hb, {"error_code": 0, "member_id": hb.body["member_id"], "member_epoch": 2,
                         "heartbeat_interval_ms": 500,
                         "assignment": {"topic_partitions": [{"topic_id": T1, "partitions": [0]}]}}, c.now)
    reqs = c.m.poll(c.now) + c.m.poll(c.now)
    assert reqs == []
    assert c.m.events() == [PartitionsRevoked((TP("orders", 1),))]
    pending.append("listener")                        # the driver runs it later
    c.now += 50
    assert c.m.poll(c.now) == []
    pending.clear()
    (ack,) = c.m.poll(c.now)
    assert owned(ack.body) == {(T1, 0)}


def test_assignment_of_an_unknown_topic_id_waits_for_metadata():
    c = Coordinator()
    c.m.update_metadata({"orders": 4}, c.now, topic_ids={"orders": T1})
    c.m.subscribe(["orders", "payments"], c.now)
    c.answer(c.heartbeat(), epoch=1, assignment={T1: [0], T2: [1]})
    evs = c.take_events()
    assert MetadataNeeded(()) in evs
    assert [e for e in evs if isinstance(e, PartitionsAssigned)] == [PartitionsAssigned((TP("orders", 0),), 1)]
    ack = c.heartbeat()
    assert owned(ack.body) == {(T1, 0)}                    # only what is reconciled
    c.answer(ack)
    c.m.update_metadata(COUNTS, c.now, topic_ids=NAMES)
    assert c.m.next_deadline(c.now) == c.now                # reconciled at the next step
    ack = c.heartbeat()
    assert c.take_events() == [PartitionsAssigned((TP("payments", 1),), 1)]
    assert owned(ack.body) == {(T1, 0), (T2, 1)}


@pytest.mark.parametrize("code", [E.FencedMemberEpochError.code, E.UnknownMemberIdError.code])
def test_fencing_loses_the_partitions_and_rejoins_with_epoch_zero(code):
    c = Coordinator()
    c.joined({T1: [0, 1]}, epoch=5)
    c.take_events()
    member = c.m.member_id
    c.now += 500
    c.answer(c.heartbeat(), error=code)
    (lost,) = c.take_events()
    assert isinstance(lost, PartitionsLost) and set(lost.partitions) == {TP("orders", 0), TP("orders", 1)}
    assert c.m.assignment == set() and c.m.commit_generation() is None
    rejoin = c.heartbeat()
    b = rejoin.body
    assert (b["member_id"], b["member_epoch"]) == (member, 0)        # same id, as Java 4.x
    assert b["subscribed_topic_names"] == ["orders", "payments"] and b["topic_partitions"] == []
    c.answer(rejoin, epoch=7, assignment={T1: [1]})
    assert c.take_events() == [PartitionsAssigned((TP("orders", 1),), 7)]


def test_close_revokes_and_leaves_with_epoch_minus_one():
    c = Coordinator()
    c.joined({T1: [0]}, epoch=2)
    c.take_events()
    c.m.close(c.now)
    assert c.m.events() == [PartitionsRevoked((TP("orders", 0),))]
    (leave,) = c.m.poll(c.now)
    assert leave.body["member_epoch"] == -1 and leave.body["member_id"] == c.m.member_id
    assert not c.m.closed
    c.m.on_response(leave, {"error_code": 0, "member_epoch": -1, "heartbeat_interval_ms": 0}, c.now)
    assert c.m.closed and c.m.next_deadline(c.now) is None


def test_close_while_the_join_is_unanswered_still_leaves():
    # The member id is the client's own: the broker may have added the member
    # already, so it is told, or the partitions would wait for the session timeout.
    c = Coordinator()
    c.m.subscribe(["orders"], c.now)
    join = c.heartbeat()
    c.m.close(c.now)
    (leave,) = c.m.poll(c.now)
    assert (leave.body["member_id"], leave.body["member_epoch"]) == (join.body["member_id"], -1)
    c.m.on_response(join, {"error_code": 0, "member_id": join.body["member_id"], "member_epoch": 1,
                           "heartbeat_interval_ms": 500, "assignment": None}, c.now)   # late: ignored
    assert c.m.events() == [] and not c.m.closed
    c.m.on_response(leave, {"error_code": 0, "member_epoch": -1}, c.now)
    assert c.m.closed


def test_close_before_any_heartbeat_has_nothing_to_leave():
    c = Coordinator()
    c.m.subscribe(["orders"], c.now)
    c.m.close(c.now)
    assert c.m.closed and c.m.poll(c.now) == []


def test_static_member_sends_its_instance_id_and_leaves_with_epoch_minus_two():
    c = Coordinator(group_instance_id="inst-1")
    ack = c.joined({T1: [0]}, epoch=2)
    assert ack.body["instance_id"] == "inst-1"
    c.m.unsubscribe(c.now)
    (leave,) = c.m.poll(c.now)
    assert (leave.body["member_epoch"], leave.body["instance_id"]) == (-2, "inst-1")
    assert c.m.poll(c.now) == []                            # unsubscribed: nothing more


def test_unreleased_instance_id_is_fatal():
    c = Coordinator(group_instance_id="inst-1")
    c.m.update_metadata(COUNTS, c.now, topic_ids=NAMES)
    c.m.subscribe(["orders"], c.now)
    c.answer(c.heartbeat(), error=E.UnreleasedInstanceIdError.code)
    (ev,) = c.take_events()
    assert isinstance(ev, GroupFatalError) and isinstance(ev.error, E.UnreleasedInstanceIdError)
    assert c.poll() == []


def test_a_refused_topic_is_told_but_not_fatal_and_the_member_joins_once_allowed():
    """TOPIC_AUTHORIZATION_FAILED (a subscribed topic without a DESCRIBE ACL):
    as Java 4.x, an error for poll, not a fatal one; the member heartbeats
    on and joins when an ACL comes."""
    from kproto.consumer.membership import GroupError
    c = Coordinator()
    c.m.update_metadata(COUNTS, c.now, topic_ids=NAMES)
    c.m.subscribe(["orders"], c.now)
    c.answer(c.heartbeat(), error=E.TopicAuthorizationFailedError.code)
    (ev,) = c.take_events()
    assert isinstance(ev, GroupError) and isinstance(ev.error, E.TopicAuthorizationFailedError)
    assert c.m.state is ConsumerMemberState.JOINING and c.m.fatal_error is None
    assert c.poll() == []                                   # not at once: after a backoff
    c.now += 1000
    hb = c.heartbeat()
    assert hb.body["member_epoch"] == 0 and hb.body["subscribed_topic_names"] == ["orders"]
    c.answer(hb, epoch=1, assignment={T1: [0]})
    assert c.m.member_epoch == 1 and c.m.state is not ConsumerMemberState.FATAL


def test_poll_timeout_leaves_loses_partitions_and_rejoins_at_the_next_poll():
    c = Coordinator(max_poll_interval_ms=5000)
    c.m.poll_called(c.now)
    c.joined({T1: [0, 1]}, epoch=4)
    c.take_events()
    for _ in range(9):                                      # heartbeats go on, no poll
        c.now += 500
        c.answer(c.heartbeat())
    c.now += 1001
    reqs = c.poll()
    (leave,) = reqs
    assert leave.body["member_epoch"] == -1
    (lost,) = c.take_events()
    assert isinstance(lost, PartitionsLost) and "poll timeout" in lost.reason
    c.now += 10000
    assert c.poll() == [] and c.m.next_deadline(c.now) is None   # stays out until polled
    c.m.poll_called(c.now)
    rejoin = c.heartbeat()
    assert rejoin.body["member_epoch"] == 0 and rejoin.body["member_id"] == leave.body["member_id"]


def test_coordinator_errors_rediscover_and_resend_every_field():
    c = Coordinator()
    c.joined({T1: [0]}, epoch=2)
    c.now += 500
    c.answer(c.heartbeat(), error=E.NotCoordinatorError.code)
    hb = c.heartbeat()                                       # at once, after a fresh lookup
    assert c.coord.known and c.coord.epoch == 2
    assert hb.body["subscribed_topic_names"] == ["orders", "payments"] and owned(hb.body) == {(T1, 0)}
    # a broken connection does the same
    c.m.on_failure(hb, ConnectionClosedError("gone"), c.now)
    c.now += 150        # (that coordinator never answered: looked up after retry.backoff.ms +-20%)
    hb = c.heartbeat()
    assert hb.body["rebalance_timeout_ms"] == 60000 and owned(hb.body) == {(T1, 0)}


def test_a_broker_without_the_consumer_protocol_is_a_clear_fatal_error():
    c = Coordinator()
    c.m.subscribe(["orders"], c.now)
    req = c.heartbeat()
    c.m.on_failure(req, UnsupportedVersionError("ConsumerGroupHeartbeat: node 1 supports at most None"), c.now)
    (ev,) = c.m.events()
    assert isinstance(ev, GroupFatalError) and "group.protocol=classic" in str(ev.error)


def test_regex_subscription_goes_to_the_broker():
    c = Coordinator()
    c.m.update_metadata(COUNTS, c.now, topic_ids=NAMES)
    c.m.subscribe_pattern(re.compile(r"ord.*"), c.now)
    b = c.heartbeat().body
    assert b["subscribed_topic_regex"] == "ord.*" and b["subscribed_topic_names"] == []
    assert c.m.subscription == {"orders"}                  # the local view, for subscription()
    with pytest.raises(E.InvalidRegularExpressionError, match="lookahead"):
        c.m.subscribe_pattern("(?=x)ord.*", c.now)
    assert c.m.regex == "ord.*"                             # a bad pattern changed nothing


@pytest.mark.parametrize("python, broker", [
    ("orders-.*", "orders-.*"),
    (r"a\Z", r"a\z"),
    (r"(?P<x>t)[\]Z]+\d{2,3}?", r"(?P<x>t)[\]Z]+\d{2,3}?"),
    (re.compile("orders", re.IGNORECASE), "(?i)orders"),
    (re.compile("a.b", re.DOTALL | re.MULTILINE), "(?ms)a.b"),
])
def test_python_patterns_convert_to_the_brokers_syntax(python, broker):
    assert to_broker_regex(python) == broker


@pytest.mark.parametrize("bad, why", [
    ("(?!x)y", "negative lookahead"), ("(?<=x)y", "lookbehind"), (r"(a)\1", "backreference"),
    ("(?P<n>a)(?P=n)", "named backreference"), ("a++", "possessive"), ("(?>a)", "atomic"),
    ("(?x)a b", "inline flags"), ("", "empty"), ("(", "invalid topic pattern"),
])
def test_patterns_the_broker_cannot_evaluate_are_rejected(bad, why):
    with pytest.raises(E.InvalidRegularExpressionError, match=why):
        to_broker_regex(bad)
    with pytest.raises(E.InvalidRegularExpressionError, match="VERBOSE"):
        to_broker_regex(re.compile("a", re.VERBOSE))


def test_commits_carry_the_member_epoch_and_stale_epoch_waits_for_the_next_heartbeat():
    c = Coordinator()
    committer = OffsetCommitter(c.coord, membership=c.m, enable_auto_commit=False)
    c.joined({T1: [0]}, epoch=6)
    h = committer.commit_sync({TP("orders", 0): 42}, c.now, 30000)
    (req,) = committer.poll(c.now)
    assert req.api_name == "OffsetCommit"
    assert (req.body["generation_id_or_member_epoch"], req.body["member_id"]) == (6, c.m.member_id)
    stale = {"topics": [{"name": "orders", "partitions": [
        {"partition_index": 0, "error_code": E.StaleMemberEpochError.code}]}]}
    committer.on_response(req, stale, c.now)
    assert not h.done
    c.now += 200
    assert committer.poll(c.now) == []                      # not before a heartbeat answered
    assert committer.next_deadline(c.now) == h.deadline     # and no timer spinning for it
    hb = c.heartbeat()                                      # the member heartbeats at once
    c.answer(hb, epoch=7)
    (req,) = committer.poll(c.now)
    assert req.body["generation_id_or_member_epoch"] == 7
    committer.on_response(req, {"topics": [{"name": "orders", "partitions": [
        {"partition_index": 0, "error_code": 0}]}]}, c.now)
    assert h.done and h.error is None


def test_a_fenced_commit_fails_with_commit_failed():
    c = Coordinator()
    committer = OffsetCommitter(c.coord, membership=c.m, enable_auto_commit=False)
    c.joined({T1: [0]}, epoch=6)
    h = committer.commit_sync({TP("orders", 0): 1}, c.now, 30000)
    (req,) = committer.poll(c.now)
    committer.on_response(req, {"topics": [{"name": "orders", "partitions": [
        {"partition_index": 0, "error_code": E.FencedMemberEpochError.code}]}]}, c.now)
    assert h.done and isinstance(h.error, CommitFailedError)


def test_commit_while_joining_is_a_rebalance_in_progress():
    c = Coordinator()
    committer = OffsetCommitter(c.coord, membership=c.m, enable_auto_commit=False)
    c.m.subscribe(["orders"], c.now)
    c.heartbeat()
    h = committer.commit_async({TP("orders", 0): 1}, c.now)
    assert committer.poll(c.now) == []
    assert h.done and isinstance(h.error, E.RebalanceInProgressError)


# == configuration ====================================================================
BASE = {"bootstrap.servers": "127.0.0.1:9092", "group.id": "g"}


@pytest.mark.parametrize("value", ["consumer", "CONSUMER", "Consumer"])
def test_group_protocol_is_case_insensitive_and_chooses_the_machine(value):
    core = ConsumerCore(dict(BASE, **{"group.protocol": value, "group.remote.assignor": "uniform"}))
    assert core.config.group_protocol == "consumer"
    assert isinstance(core.membership, ConsumerProtocolMembership)
    assert core.membership.remote_assignor == "uniform"


def test_classic_stays_the_default():
    from kproto.consumer.membership import GroupMembership
    assert isinstance(ConsumerCore(BASE).membership, GroupMembership)


@pytest.mark.parametrize("key", ["partition.assignment.strategy", "session.timeout.ms",
                                 "heartbeat.interval.ms"])
def test_classic_only_settings_are_rejected_with_the_consumer_protocol(key):
    value = {"partition.assignment.strategy": "range"}.get(key, 3000)
    with pytest.raises(ConfigError, match=f"{key} cannot be set when group.protocol=consumer"):
        ConsumerCore(dict(BASE, **{"group.protocol": "consumer", key: value}))


def test_remote_assignor_is_rejected_with_the_classic_protocol_and_bad_protocols_named():
    with pytest.raises(ConfigError, match="group.remote.assignor cannot be set when group.protocol=classic"):
        ConsumerCore(dict(BASE, **{"group.remote.assignor": "uniform"}))
    with pytest.raises(ConfigError, match="'classic' or 'consumer'"):
        ConsumerCore(dict(BASE, **{"group.protocol": "streams"}))


def test_core_routes_a_pattern_to_the_broker_and_rejects_what_it_cannot_evaluate():
    core = ConsumerCore(dict(BASE, **{"group.protocol": "consumer"}))
    with pytest.raises(E.InvalidRegularExpressionError):
        core.subscribe_pattern(r"(?<!x)t", 0)
    assert core.mode is None                               # nothing changed
    core.subscribe_pattern(r"t-\d+", 0)
    assert core.mode == "pattern" and core.membership.regex == r"t-\d+"
    assert core.membership.state is ConsumerMemberState.JOINING


def test_static_member_poll_timeout_leaves_with_epoch_minus_two():
    # Java's leaveGroupEpoch(): a static member's leave keeps its assignment
    # on the broker for the session timeout, so its return moves nothing.
    c = Coordinator(max_poll_interval_ms=1000, group_instance_id="inst-1")
    c.m.poll_called(c.now)
    c.joined({T1: [0]}, epoch=2)
    c.take_events()
    c.now += 1001
    (leave,) = c.poll()
    assert (leave.body["member_epoch"], leave.body["instance_id"]) == (-2, "inst-1")
    assert [type(e) for e in c.take_events()] == [PartitionsLost]
