"""Assignors: Java's documented layouts, static-member ordering, unequal
subscriptions, balance, and cooperative-sticky stickiness / the cooperative rule."""
import struct

import pytest
from hypothesis import given, settings, strategies as st

from kproto import messages
from kproto.consumer import TopicPartition as TP
from kproto.consumer.assignors import (
    CooperativeStickyAssignor, MemberSubscription, RangeAssignor, RebalanceProtocol,
    RoundRobinAssignor, build_assignors, decode_assignment, decode_subscription,
    encode_assignment, encode_subscription, rebalance_protocol_for,
)
from kproto.errors import ConfigError


def sub(*topics, owned=(), generation=-1, instance=None, user_data=None):
    return MemberSubscription(tuple(topics), user_data, tuple(owned), generation, None, instance)


def parts(result):
    return {m: list(a.partitions) for m, a in result.items()}


def tps(topic, *ps):
    return [TP(topic, p) for p in ps]


# -- range -------------------------------------------------------------------------------

def test_range_java_example_two_topics_three_partitions():
    r = RangeAssignor().assign({"t0": 3, "t1": 3}, {"C0": sub("t0", "t1"), "C1": sub("t0", "t1")})
    assert parts(r) == {"C0": tps("t0", 0, 1) + tps("t1", 0, 1), "C1": tps("t0", 2) + tps("t1", 2)}


def test_range_is_per_topic_over_subscribed_members_only():
    r = RangeAssignor().assign({"a": 4, "b": 2},
                               {"m1": sub("a"), "m2": sub("a", "b"), "m3": sub("b")})
    assert parts(r) == {"m1": tps("a", 0, 1), "m2": tps("a", 2, 3) + tps("b", 0), "m3": tps("b", 1)}


def test_range_more_members_than_partitions_and_unknown_topic():
    r = RangeAssignor().assign({"a": 2}, {"x": sub("a", "nometa"), "y": sub("a"), "z": sub("a")})
    assert parts(r) == {"x": tps("a", 0), "y": tps("a", 1), "z": []}


def test_range_static_members_order_by_instance_id_not_member_id():
    # Member ids change on restart; group.instance.id keeps the order (Java MemberInfo).
    first = RangeAssignor().assign({"t": 4}, {"zzz-1": sub("t", instance="a"), "aaa-2": sub("t", instance="b")})
    again = RangeAssignor().assign({"t": 4}, {"bbb-3": sub("t", instance="a"), "aaa-4": sub("t", instance="b")})
    assert first["zzz-1"].partitions == again["bbb-3"].partitions == tuple(tps("t", 0, 1))
    assert first["aaa-2"].partitions == again["aaa-4"].partitions == tuple(tps("t", 2, 3))


def test_static_members_come_before_dynamic_ones():
    r = RangeAssignor().assign({"t": 3}, {"a-dyn": sub("t"), "z-static": sub("t", instance="i")})
    assert r["z-static"].partitions == tuple(tps("t", 0, 1))
    assert r["a-dyn"].partitions == tuple(tps("t", 2))


# -- roundrobin --------------------------------------------------------------------------

def test_roundrobin_java_example_equal_subscriptions():
    r = RoundRobinAssignor().assign({"t0": 3, "t1": 3}, {"C0": sub("t0", "t1"), "C1": sub("t0", "t1")})
    assert parts(r) == {"C0": tps("t0", 0, 2) + tps("t1", 1), "C1": tps("t0", 1) + tps("t1", 0, 2)}


def test_roundrobin_java_example_unequal_subscriptions():
    r = RoundRobinAssignor().assign({"t0": 1, "t1": 2, "t2": 3},
                                    {"C0": sub("t0"), "C1": sub("t0", "t1"), "C2": sub("t0", "t1", "t2")})
    assert parts(r) == {"C0": tps("t0", 0), "C1": tps("t1", 0), "C2": tps("t1", 1) + tps("t2", 0, 1, 2)}


def test_roundrobin_every_partition_once_and_balanced_for_equal_subscriptions():
    members = {f"m{i}": sub("a", "b", "c") for i in range(4)}
    r = RoundRobinAssignor().assign({"a": 5, "b": 3, "c": 7}, members)
    flat = [tp for a in r.values() for tp in a.partitions]
    assert sorted(flat) == sorted(tps("a", *range(5)) + tps("b", *range(3)) + tps("c", *range(7)))
    sizes = [len(a.partitions) for a in r.values()]
    assert max(sizes) - min(sizes) <= 1


# -- wire forms --------------------------------------------------------------------------

@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_subscription_round_trip_every_version(version):
    data = encode_subscription(["b", "a"], b"ud", tps("a", 1, 0), 7, "rack1", version=version)
    s = decode_subscription(data, group_instance_id="i")
    assert s.topics == ("a", "b") and s.user_data == b"ud" and s.group_instance_id == "i"
    assert s.owned_partitions == (tuple(tps("a", 0, 1)) if version >= 1 else ())
    assert s.generation_id == (7 if version >= 2 else -1)
    assert s.rack_id == ("rack1" if version >= 3 else None)


def test_assignment_round_trip_and_empty_bytes_mean_no_partitions():
    for v in range(4):
        a = decode_assignment(encode_assignment(tps("x", 2, 0) + tps("a", 1), b"u", version=v))
        assert a.partitions == (TP("a", 1), TP("x", 0), TP("x", 2)) and a.user_data == b"u"
    assert decode_assignment(b"").partitions == ()
    # What Java writes (via the shared codec) decodes the same.
    raw = messages.encode_struct("ConsumerProtocolAssignment", 1, {
        "assigned_partitions": [{"topic": "t", "partitions": [3]}], "user_data": None})
    assert decode_assignment(raw).partitions == (TP("t", 3),)


def test_strategy_config_and_protocol_choice():
    assert [a.name for a in build_assignors("range, cooperative-sticky")] == ["range", "cooperative-sticky"]
    assert rebalance_protocol_for(build_assignors(["range", "cooperative-sticky"])) is RebalanceProtocol.EAGER
    assert rebalance_protocol_for(build_assignors(["cooperative-sticky"])) is RebalanceProtocol.COOPERATIVE
    with pytest.raises(ConfigError):
        build_assignors("sticky-ish")
    with pytest.raises(ConfigError):
        build_assignors(["range", "range"])


# -- cooperative-sticky ------------------------------------------------------------------

CS = CooperativeStickyAssignor()


def owned_map(result):
    return {m: set(a.partitions) for m, a in result.items()}


def test_cooperative_sticky_fresh_group_is_balanced():
    r = CS.assign({"t": 7, "u": 2}, {f"m{i}": sub("t", "u") for i in range(3)})
    sizes = sorted(len(a.partitions) for a in r.values())
    assert sizes == [3, 3, 3]
    assert sorted(tp for a in r.values() for tp in a.partitions) == sorted(tps("t", *range(7)) + tps("u", 0, 1))


def test_cooperative_sticky_generation_in_user_data_and_field():
    assert CS.subscription_user_data(["t"], [], 5) == struct.pack(">i", 5)
    assert CS.member_generation(sub("t", user_data=struct.pack(">i", 9))) == 9
    assert CS.member_generation(sub("t", generation=4, user_data=struct.pack(">i", 9))) == 4
    assert CS.member_generation(sub("t")) == -1


def test_cooperative_sticky_new_member_takes_only_its_share_and_moves_are_revoked_first():
    # m1, m2 own 3 partitions each (generation 3); m3 joins.
    members = {"m1": sub("t", owned=tps("t", 0, 1, 2), generation=3),
               "m2": sub("t", owned=tps("t", 3, 4, 5), generation=3),
               "m3": sub("t")}
    full, _kept, moving = CS.sticky_assign({"t": 6}, members)
    assert sorted(len(v) for v in full.values()) == [2, 2, 2]
    assert len(moving) == 2                              # the minimum: m3's share
    assert all(new == "m3" for _prev, new in moving.values())
    r = CS.assign({"t": 6}, members)
    # Round 1: the two moving partitions are taken from their owners and given to nobody.
    assert len(r["m1"].partitions) == 2 and len(r["m2"].partitions) == 2 and r["m3"].partitions == ()
    assert set(r["m1"].partitions) <= set(tps("t", 0, 1, 2))
    assert set(r["m2"].partitions) <= set(tps("t", 3, 4, 5))
    # Round 2 (after the owners revoked and rejoined): m3 gets them, nobody else moves.
    members2 = {"m1": sub("t", owned=r["m1"].partitions, generation=4),
                "m2": sub("t", owned=r["m2"].partitions, generation=4),
                "m3": sub("t", owned=(), generation=4)}
    r2 = CS.assign({"t": 6}, members2)
    assert r2["m1"].partitions == r["m1"].partitions and r2["m2"].partitions == r["m2"].partitions
    assert set(r2["m3"].partitions) == set(tps("t", *range(6))) - set(r["m1"].partitions) - set(r["m2"].partitions)


def test_cooperative_sticky_member_leaving_its_partitions_go_without_revocation_round():
    members = {"m1": sub("t", owned=tps("t", 0, 1), generation=5),
               "m2": sub("t", owned=tps("t", 2, 3), generation=5)}
    # m3 (owner of 4, 5) left: its partitions are unowned now and assigned at once.
    r = CS.assign({"t": 6}, members)
    assert set(r["m1"].partitions) >= set(tps("t", 0, 1))
    assert set(r["m2"].partitions) >= set(tps("t", 2, 3))
    assert sorted(len(a.partitions) for a in r.values()) == [3, 3]


def test_cooperative_sticky_stale_generation_claims_are_not_sticky_but_still_block():
    # m2 claims t-0 from an old generation (it missed a rebalance): m1 (current) keeps
    # its own; t-0 is owned by nobody valid, but m2 still holds it so whoever gets
    # it must wait unless it is m2 itself.
    members = {"m1": sub("t", owned=tps("t", 1), generation=7),
               "m2": sub("t", owned=tps("t", 0), generation=6)}
    full, _k, moving = CS.sticky_assign({"t": 2}, members)
    assert TP("t", 1) in full["m1"]
    if TP("t", 0) in full["m1"]:
        assert moving[TP("t", 0)] == ("m2", "m1")
    else:
        assert TP("t", 0) not in moving


def test_cooperative_sticky_same_generation_double_claim_both_lose_stickiness():
    members = {"a": sub("t", owned=tps("t", 0), generation=2), "b": sub("t", owned=tps("t", 0), generation=2)}
    full, _k, moving = CS.sticky_assign({"t": 2}, members)
    owner = "a" if TP("t", 0) in full["a"] else "b"
    other = "b" if owner == "a" else "a"
    assert moving[TP("t", 0)] == (other, owner)          # the other claimant must revoke first


def test_cooperative_sticky_unsubscribed_topic_partitions_are_revoked_before_moving():
    members = {"m1": sub("u", owned=tps("t", 0, 1), generation=1), "m2": sub("t", "u", generation=1)}
    r = CS.assign({"t": 2, "u": 2}, members)
    # m1 no longer subscribes to t: t's partitions go to m2, but only next round.
    assert not any(tp.topic == "t" for tp in r["m1"].partitions)
    assert not any(tp.topic == "t" for tp in r["m2"].partitions)


def test_cooperative_sticky_unequal_subscriptions_balanced():
    members = {"a": sub("t1"), "b": sub("t1", "t2"), "c": sub("t2")}
    full, _k, _m = CS.sticky_assign({"t1": 4, "t2": 4}, members)
    assert sorted(len(v) for v in full.values()) == [2, 3, 3]
    _assert_balanced(full, members, {"t1": 4, "t2": 4})


def _assert_balanced(assignment, members, counts):
    """Java's definition: no partition can move to an eligible member that has
    two or more fewer partitions."""
    for src, ps in assignment.items():
        for tp in ps:
            for dst, s in members.items():
                if dst != src and tp.topic in s.topics:
                    assert len(assignment[dst]) >= len(ps) - 1, (tp, src, dst, assignment)


def _flat(assignment):
    return [tp for ps in assignment.values() for tp in ps]


topics_st = st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), st.integers(1, 12), min_size=1)


@settings(max_examples=120, deadline=None)
@given(counts=topics_st, data=st.data())
def test_property_cooperative_sticky_complete_balanced_and_sticky(counts, data):
    names = sorted(counts)
    n = data.draw(st.integers(1, 6), label="members")
    members = {}
    for i in range(n):
        topics = data.draw(st.lists(st.sampled_from(names), min_size=1, unique=True), label=f"topics{i}")
        members[f"m{i}"] = sub(*topics)
    # Round 1 from scratch, then a round 2 where everybody owns its round-1 result:
    # nothing must move when nothing changed.
    full, _k, moving = CS.sticky_assign(counts, members)
    assert not moving
    every = [TP(t, p) for t in counts for p in range(counts[t])
             if any(t in s.topics for s in members.values())]
    assert sorted(_flat(full)) == sorted(every)
    assert len(_flat(full)) == len(set(_flat(full)))
    for m, ps in full.items():
        assert all(tp.topic in members[m].topics for tp in ps)
    _assert_balanced(full, members, counts)
    again = {m: s._replace(owned_partitions=tuple(full[m]), generation_id=1) for m, s in members.items()}
    full2, _k2, moving2 = CS.sticky_assign(counts, again)
    assert full2 == full and not moving2


@settings(max_examples=120, deadline=None)
@given(p=st.integers(1, 40), before=st.integers(1, 6), after=st.integers(1, 6))
def test_property_cooperative_sticky_moves_the_fewest_partitions(p, before, after):
    # Equal subscriptions: going from `before` to `after` members moves exactly the
    # partitions that balance forces to move, and never hands a partition straight
    # from one owner to another in one round.
    members = {f"m{i}": sub("t") for i in range(before)}
    r1 = CS.assign({"t": p}, members)
    again = {f"m{i}": sub("t", owned=r1[f"m{i}"].partitions if f"m{i}" in r1 else (), generation=1)
             for i in range(after)}
    full, _k, moving = CS.sticky_assign({"t": p}, again)
    # The optimum: targets (ceil for p % after members, floor for the rest) matched
    # to the members owning the most; everything else must change owner.
    owned_counts = sorted((len(again[m].owned_partitions) for m in again), reverse=True)
    targets = sorted([p // after + (1 if i < p % after else 0) for i in range(after)], reverse=True)
    min_changes = p - sum(min(o, t) for o, t in zip(owned_counts, targets))
    kept = sum(1 for m, ps in full.items() for tp in ps if tp in again[m].owned_partitions)
    assert p - kept == min_changes
    # every move goes through revocation: never in the same round's assignment of the new owner
    r2 = CS.assign({"t": p}, again)
    for tp, (prev, new) in moving.items():
        assert tp not in r2[new].partitions and tp not in r2[prev].partitions
    sizes = [len(v) for v in full.values()]
    assert max(sizes) - min(sizes) <= 1


@settings(max_examples=150, deadline=None)
@given(counts=topics_st, data=st.data())
def test_property_range_and_roundrobin_complete_and_per_java_balance(counts, data):
    names = sorted(counts)
    n = data.draw(st.integers(1, 6), label="members")
    members = {}
    for i in range(n):
        topics = data.draw(st.lists(st.sampled_from(names + ["no-metadata"]), min_size=1, unique=True),
                           label=f"topics{i}")
        static = data.draw(st.booleans(), label=f"static{i}")
        members[f"m{i}"] = sub(*topics, instance=f"i{n - i}" if static else None)
    subscribed_topics = {t for s in members.values() for t in s.topics if t in counts}
    every = sorted(TP(t, p) for t in subscribed_topics for p in range(counts[t]))
    for assignor in (RangeAssignor(), RoundRobinAssignor()):
        r = assignor.assign(counts, members)
        assert set(r) == set(members)
        flat = [tp for a in r.values() for tp in a.partitions]
        assert sorted(flat) == every                                   # each exactly once
        for m, a in r.items():
            assert all(tp.topic in members[m].topics for tp in a.partitions)
    # range: per topic, the subscribers' shares differ by at most one
    r = RangeAssignor().assign(counts, members)
    for t in subscribed_topics:
        shares = [sum(1 for tp in r[m].partitions if tp.topic == t) for m in members if t in members[m].topics]
        assert max(shares) - min(shares) <= 1
    # roundrobin: equal subscriptions -> totals differ by at most one
    same = {m: sub(*names, instance=s.group_instance_id) for m, s in members.items()}
    sizes = [len(a.partitions) for a in RoundRobinAssignor().assign(counts, same).values()]
    assert max(sizes) - min(sizes) <= 1
