"""The transition tables of the group membership machines (no network).

Each machine - classic :class:`GroupMembership`, KIP-848
:class:`ConsumerProtocolMembership`, KIP-932 :class:`ShareMembership` - lists
its moves in a ``TRANSITIONS`` table and changes state only through
``_move``, which refuses anything else (as the connection machine does, see
tests/test_connection.py). Here:

* every (state, state) pair: allowed ones succeed, forbidden ones raise
  IllegalStateTransitionError naming the machine's group and both states;
* the tables' shape: a row for every state, terminal states, every state
  reachable from the initial one, closing always possible;
* real scenarios driven through the public entry points (the harnesses of
  the core tests) with ``_move`` recorded: each takes only table
  transitions, each shows the transitions it is listed with, and together
  they take every transition of every table - no table entry is there
  without a scenario that needs it;
* the transitions the tables exposed as wrong (a closed member reopened by a
  late fatal commit answer or by unsubscribe(), a second fatal error, a
  leave answered after close() had already closed a failed member).
"""
import pytest

from kproto import error_codes as E
from kproto.consumer import GroupCoordinator, GroupMembership, MemberState
from kproto.consumer import membership as classic_module
from kproto.consumer import membership_consumer as consumer_module
from kproto.consumer.assignors import encode_subscription
from kproto.consumer.membership_consumer import ConsumerMemberState, ConsumerProtocolMembership
from kproto.errors import IllegalStateTransitionError, UnsupportedVersionError
from kproto.share import membership as share_module
from kproto.share.membership import ShareMembership, ShareMemberState

try:
    from scripted_broker import NO_RESPONSE
    from test_consumer_group_core import joined, make_member
    from test_consumer_protocol_core import NAMES, T1, Coordinator
    from test_share_core import hb_answer, known_coordinator
except ImportError:  # tests/ as a package
    from tests.scripted_broker import NO_RESPONSE
    from tests.test_consumer_group_core import joined, make_member
    from tests.test_consumer_protocol_core import NAMES, T1, Coordinator
    from tests.test_share_core import hb_answer, known_coordinator

M, C, S = MemberState, ConsumerMemberState, ShareMemberState

#: name -> (class, its table, its states, the initial state, a fresh instance)
MACHINES = {
    "classic": (GroupMembership, classic_module.TRANSITIONS, M, M.UNJOINED,
                lambda: GroupMembership(GroupCoordinator("g1"))),
    "consumer": (ConsumerProtocolMembership, consumer_module.TRANSITIONS, C, C.UNJOINED,
                 lambda: ConsumerProtocolMembership(GroupCoordinator("g1"))),
    "share": (ShareMembership, share_module.TRANSITIONS, S, S.UNSUBSCRIBED,
              lambda: ShareMembership(GroupCoordinator("g1"), "g1")),
}


def edges(name):
    table = MACHINES[name][1]
    return {(src, dst) for src, dsts in table.items() for dst in dsts}


def reachable(table, start):
    reached, todo = {start}, [start]
    while todo:
        for nxt in table[todo.pop()] - reached:
            reached.add(nxt)
            todo.append(nxt)
    return reached


# == the tables themselves ===================================================================

def try_move(fresh, src, dst):
    """Whether ``_move(dst)`` from ``src`` is accepted; a refusal must say what
    and leave the state alone."""
    m = fresh()
    m.state = src                               # put it there directly: this tests _move alone
    try:
        m._move(dst)
    except IllegalStateTransitionError as exc:
        assert f"'g1': {src.name} -> {dst.name} is not a transition" in str(exc)
        assert m.state is src                   # a refused move changes nothing
        return False
    assert m.state is dst
    return True


@pytest.mark.parametrize("name", MACHINES)
def test_every_pair_is_allowed_or_refused_as_the_table_says(name):
    _cls, _table, states, _initial, fresh = MACHINES[name]
    pairs = [(src, dst) for src in states for dst in states]
    accepted = {(src, dst) for src, dst in pairs if try_move(fresh, src, dst)}
    assert accepted == edges(name)
    assert len(pairs) - len(accepted) > 0       # (and there are forbidden ones, each refused)


@pytest.mark.parametrize("name", MACHINES)
def test_every_state_has_a_row_and_every_target_is_a_state_of_the_machine(name):
    _cls, table, states, _initial, _fresh = MACHINES[name]
    assert set(table) == set(states)
    for dsts in table.values():
        assert isinstance(dsts, frozenset) and dsts <= set(states)


@pytest.mark.parametrize("name", MACHINES)
def test_every_state_is_reachable_from_the_initial_one(name):
    _cls, table, states, initial, fresh = MACHINES[name]
    assert fresh().state is initial
    assert reachable(table, initial) == set(states)


def test_terminal_states_have_only_the_intended_ways_out():
    classic, consumer, share = (MACHINES[n][1] for n in ("classic", "consumer", "share"))
    assert classic[M.CLOSED] == frozenset() and consumer[C.CLOSED] == frozenset()
    assert share[S.FAILED] == frozenset()
    # a failed member can only be closed, or unsubscribed by the application to start over
    assert classic[M.FATAL] == {M.CLOSED, M.UNJOINED} and consumer[C.FATAL] == {C.CLOSED, C.UNJOINED}
    assert share[S.LEAVING] == {S.LEFT}           # once leaving, only the leave's end


def test_a_member_can_always_be_closed_or_leave():
    classic, consumer, share = (MACHINES[n][1] for n in ("classic", "consumer", "share"))
    for state in set(M) - {M.CLOSED}:
        assert M.CLOSED in classic[state], state          # close() works from every live state at once
    for state in set(C) - {C.CLOSED}:
        assert C.CLOSED in reachable(consumer, state), state
    for state in set(S) - {S.FAILED}:
        assert S.LEFT in reachable(share, state), state


def test_the_error_names_the_machine_the_group_and_both_states():
    m = ShareMembership(GroupCoordinator("orders"), "orders")
    with pytest.raises(IllegalStateTransitionError) as info:
        m._move(S.STABLE)
    assert str(info.value) == ("share group 'orders': UNSUBSCRIBED -> STABLE is not a transition "
                               "of the share group membership machine")
    assert not info.value.retriable


# == real scenarios =============================================================================
# Each scenario drives a machine through its public entry points and lists
# the transitions it shows; every move it makes is recorded.

SCENARIOS = []      # (machine name, scenario name, transitions it must show, function)


def scenario(machine, name, *shows):
    def register(fn):
        SCENARIOS.append((machine, name, frozenset(shows), fn))
        return fn
    return register


# -- classic: a member in each state, through the scripted group of test_consumer_group_core --

def classic_in(state, **config):
    """A classic member brought to ``state`` by real inputs; (member, net, group)."""
    if state is M.PREPARING:
        config["prepare_join"] = lambda now, round_: False
    coord, m, net, group = make_member(**config)
    m.update_metadata({"t": 4}, 0)
    group.first = False                                  # no MEMBER_ID_REQUIRED round here
    if state is M.JOIN_PENDING:
        group.errors["JoinGroup"].append(E.CoordinatorLoadInProgressError.code)   # retried after a backoff
    elif state is M.JOINING:
        net.brokers[1].on("JoinGroup", lambda req: NO_RESPONSE)
    elif state is M.AWAITING_METADATA:
        group.others = {"member-B": encode_subscription(["x"])}     # a topic our metadata lacks
    elif state is M.SYNCING:
        net.brokers[1].on("SyncGroup", lambda req: NO_RESPONSE)
    elif state is M.FATAL:
        group.errors["JoinGroup"].append(E.GroupAuthorizationFailedError.code)
    if state is not M.UNJOINED:
        m.subscribe(["t"], 0)
        m.poll_called(0)
        net.run()
    assert m.state is state, (m.state, state)
    return m, net, group


LIVE = [M.UNJOINED, M.PREPARING, M.JOIN_PENDING, M.JOINING, M.AWAITING_METADATA, M.SYNCING, M.STABLE]
REJOINING = [s for s in LIVE if s is not M.UNJOINED]


def _classic_unsubscribe(state):
    def run():
        m, net, _ = classic_in(state)
        m.unsubscribe(net.now)
        net.run()
        assert m.state is M.UNJOINED and m.assignment == frozenset()
    return run


def _classic_close(state):
    def run():
        m, net, _ = classic_in(state)
        m.close(net.now)
        net.run()                                        # the LeaveGroup (if any) is answered
        assert m.closed
    return run


def _classic_commit_fenced(state):
    def run():
        m, net, _ = classic_in(state)
        m.on_commit_error(E.FencedInstanceIdError(), m.generation_id, net.now)
        assert m.state is M.FATAL and isinstance(m.fatal_error, E.FencedInstanceIdError)
    return run


def _classic_commit_lost_generation(state):
    def run():
        m, net, _ = classic_in(state)
        m.on_commit_error(E.IllegalGenerationError(), m.generation_id, net.now)
        assert m.state is M.PREPARING and m.generation_id == -1
    return run


for _s in LIVE + [M.FATAL]:
    scenario("classic", f"unsubscribe-in-{_s.name}", (_s, M.UNJOINED))(_classic_unsubscribe(_s))
    scenario("classic", f"close-in-{_s.name}", (_s, M.CLOSED))(_classic_close(_s))
for _s in LIVE:
    scenario("classic", f"commit-fenced-instance-in-{_s.name}", (_s, M.FATAL))(_classic_commit_fenced(_s))
for _s in REJOINING:
    scenario("classic", f"commit-illegal-generation-in-{_s.name}",
             (_s, M.PREPARING))(_classic_commit_lost_generation(_s))


@scenario("classic", "join-as-leader-after-member-id-required",
          (M.UNJOINED, M.PREPARING), (M.PREPARING, M.JOIN_PENDING), (M.JOIN_PENDING, M.JOINING),
          (M.JOINING, M.JOIN_PENDING), (M.JOINING, M.SYNCING), (M.SYNCING, M.STABLE))
def _classic_join():
    joined()


@scenario("classic", "leader-waits-for-metadata",
          (M.JOINING, M.AWAITING_METADATA), (M.AWAITING_METADATA, M.SYNCING))
def _classic_leader_waits():
    m, net, _ = classic_in(M.AWAITING_METADATA)
    m.update_metadata({"t": 4, "x": 2}, net.now)
    net.run()
    assert m.state is M.STABLE


@scenario("classic", "sync-rebalance-in-progress", (M.SYNCING, M.JOIN_PENDING))
def _classic_sync_error():
    coord, m, net, group = make_member()
    m.update_metadata({"t": 1}, 0)
    group.errors["SyncGroup"].append(E.RebalanceInProgressError.code)
    m.subscribe(["t"], 0)
    net.run(steps=12)
    assert m.state is M.STABLE


@scenario("classic", "heartbeat-rebalance-in-progress", (M.STABLE, M.PREPARING))
def _classic_rebalance():
    coord, m, net, group = joined()
    group.errors["Heartbeat"].append(E.RebalanceInProgressError.code)
    m.poll_called(net.now)
    net.run(1000)
    assert m.state is M.STABLE and m.generation_id == 2


@scenario("classic", "poll-timeout-while-stable-or-awaiting-metadata",
          (M.STABLE, M.UNJOINED), (M.AWAITING_METADATA, M.UNJOINED))
def _classic_poll_timeout():
    coord, m, net, group = joined(max_poll_interval_ms=5000)
    net.run(5001)
    assert m.state is M.UNJOINED
    m, net, _ = classic_in(M.AWAITING_METADATA, max_poll_interval_ms=5000)
    net.run(5001)                                        # no metadata yet, and nobody polled
    assert m.state is M.UNJOINED


@scenario("classic", "commit-illegal-generation-while-preparing-restarts-the-round",
          (M.PREPARING, M.PREPARING))
def _classic_restart_prepare():
    m, net, _ = classic_in(M.PREPARING)
    m.on_commit_error(E.IllegalGenerationError(), m.generation_id, net.now)
    assert m.state is M.PREPARING


# -- consumer protocol: the scripted coordinator of test_consumer_protocol_core -----------------

def consumer_in(state):
    """A KIP-848 member brought to ``state`` by real inputs."""
    c = Coordinator()
    if state is C.UNJOINED:
        return c
    if state is C.FATAL:
        c.m.subscribe(["orders"], c.now)
        c.answer(c.heartbeat(), error=E.GroupAuthorizationFailedError.code)
    elif state is C.JOINING:
        c.m.update_metadata({"orders": 4}, c.now, topic_ids=NAMES)
        c.m.subscribe(["orders"], c.now)
        join = c.heartbeat()
        c.queued.append(join)                            # in flight: next_heartbeat() takes it
    else:
        c.joined({T1: [0, 1]}, epoch=2)
        if state is C.RECONCILING:
            c.hook_result = False                        # the commit before the revocation hangs
            c.now += 500
            c.answer(c.heartbeat(), assignment={T1: [0]})
    assert c.m.state is state, (c.m.state, state)
    return c


C_LIVE = [C.UNJOINED, C.JOINING, C.STABLE, C.RECONCILING]


def next_heartbeat(c):
    """The heartbeat the member sends next (the one in flight, or the next one due)."""
    queued = [r for r in c.queued if r.body["member_epoch"] >= 0]
    if queued:
        c.queued = []
        return queued[0]
    c.now += 500
    return c.heartbeat()


def _consumer_unsubscribe(state):
    def run():
        c = consumer_in(state)
        c.m.unsubscribe(c.now)
        assert c.m.state is C.UNJOINED
    return run


def _consumer_close(state):
    def run():
        c = consumer_in(state)
        c.m.close(c.now)
        for req in c.m.poll(c.now):                      # the leave heartbeat, answered
            c.m.on_response(req, {"error_code": 0, "member_epoch": -1}, c.now)
        assert c.m.closed
    return run


def _consumer_commit_fenced(state):
    def run():
        c = consumer_in(state)
        c.m.on_commit_error(E.FencedInstanceIdError(), c.m.member_epoch, c.now)
        assert c.m.state is C.FATAL
    return run


for _s in C_LIVE + [C.FATAL]:
    scenario("consumer", f"unsubscribe-in-{_s.name}", (_s, C.UNJOINED))(_consumer_unsubscribe(_s))
    scenario("consumer", f"close-in-{_s.name}",
             (C.UNJOINED if _s is not C.FATAL else C.FATAL, C.CLOSED))(_consumer_close(_s))
for _s in C_LIVE:
    scenario("consumer", f"commit-fenced-instance-in-{_s.name}", (_s, C.FATAL))(_consumer_commit_fenced(_s))


@scenario("consumer", "join-and-reconcile",
          (C.UNJOINED, C.JOINING), (C.JOINING, C.STABLE), (C.STABLE, C.RECONCILING),
          (C.RECONCILING, C.STABLE))
def _consumer_join():
    c = consumer_in(C.STABLE)
    assert c.m.assignment and c.m.state is C.STABLE


def _consumer_heartbeat_error(state, code, then):
    def run():
        c = consumer_in(state)
        c.answer(next_heartbeat(c), error=code)
        assert c.m.state is then
    return run


for _s in (C.JOINING, C.STABLE, C.RECONCILING):
    # fenced: the partitions are lost and the member rejoins at once, through UNJOINED
    scenario("consumer", f"fenced-in-{_s.name}", (_s, C.UNJOINED), (C.UNJOINED, C.JOINING))(
        _consumer_heartbeat_error(_s, E.FencedMemberEpochError.code, C.JOINING))
    scenario("consumer", f"group-full-in-{_s.name}", (_s, C.FATAL))(
        _consumer_heartbeat_error(_s, E.GroupMaxSizeReachedError.code, C.FATAL))


@scenario("consumer", "poll-timeout-leaves", (C.STABLE, C.UNJOINED))
def _consumer_poll_timeout():
    c = Coordinator(max_poll_interval_ms=5000)
    c.m.poll_called(c.now)
    c.joined({T1: [0]}, epoch=2)
    c.now += 5001
    c.poll()
    assert c.m.state is C.UNJOINED


@scenario("consumer", "unsubscribe-twice", (C.UNJOINED, C.UNJOINED))
def _consumer_unsubscribe_twice():
    c = consumer_in(C.STABLE)
    c.m.unsubscribe(c.now)
    c.m.unsubscribe(c.now)
    assert c.m.state is C.UNJOINED


# -- share: the answers of test_share_core --------------------------------------------------------

def share_in(state):
    """A share member brought to ``state`` by real inputs; (member, heartbeat in flight or None)."""
    m = ShareMembership(known_coordinator(), "g")
    req = None
    if state is S.UNSUBSCRIBED:
        return m, None
    m.subscribe(["a"], 0)
    if state is S.JOINING:
        return m, None
    (req,) = m.poll(0)
    if state is S.FAILED:
        m.on_response(req, hb_answer(0, error=E.GroupAuthorizationFailedError.code), 0)
        return m, None
    m.on_response(req, hb_answer(3, assignment={}), 0)
    if state is S.LEAVING:
        m.leave(1)
        (req,) = m.poll(1)
        return m, req
    if state is S.LEFT:
        m.leave(1)
        (req,) = m.poll(1)
        m.on_response(req, hb_answer(-1), 2)
        return m, None
    assert m.state is S.STABLE
    return m, None


@scenario("share", "join-heartbeat-leave-subscribe-again",
          (S.UNSUBSCRIBED, S.JOINING), (S.JOINING, S.STABLE), (S.STABLE, S.STABLE),
          (S.STABLE, S.LEAVING), (S.LEAVING, S.LEFT), (S.LEFT, S.JOINING))
def _share_life():
    m, _ = share_in(S.STABLE)
    (req,) = m.poll(600)
    m.on_response(req, hb_answer(3), 600)
    m.leave(700)
    (leave,) = m.poll(700)
    assert leave.body["member_epoch"] == -1
    m.on_response(leave, hb_answer(-1), 701)
    assert m.state is S.LEFT
    m.subscribe(["a"], 800)
    assert m.state is S.JOINING


@scenario("share", "leave-before-the-broker-knows-the-member", (S.UNSUBSCRIBED, S.LEFT), (S.JOINING, S.LEFT))
def _share_leave_early():
    m, _ = share_in(S.UNSUBSCRIBED)
    m.leave(0)
    assert m.done
    m, _ = share_in(S.JOINING)
    m.leave(0)
    assert m.state is S.LEFT


@scenario("share", "leave-with-the-join-in-flight", (S.JOINING, S.LEAVING))
def _share_leave_joining():
    m, _ = share_in(S.JOINING)
    (join,) = m.poll(0)
    m.leave(1)
    assert m.state is S.LEAVING
    m.on_response(join, hb_answer(1), 2)                 # the join's answer, then the leave
    (leave,) = m.poll(2)
    m.on_failure(leave, ConnectionError("cut"), 3)       # best effort
    assert m.state is S.LEFT


@scenario("share", "fenced-rejoins", (S.STABLE, S.JOINING), (S.JOINING, S.JOINING))
def _share_fenced():
    m, _ = share_in(S.STABLE)
    (req,) = m.poll(600)
    m.on_response(req, hb_answer(0, error=E.FencedMemberEpochError.code), 600)
    assert m.state is S.JOINING
    (req,) = m.poll(600)
    m.on_response(req, hb_answer(0, error=E.UnknownMemberIdError.code), 601)
    assert m.state is S.JOINING and m.epoch == 0


@scenario("share", "fatal-errors", (S.JOINING, S.FAILED), (S.STABLE, S.FAILED))
def _share_fatal():
    m, _ = share_in(S.FAILED)
    assert m.state is S.FAILED
    m, _ = share_in(S.STABLE)
    (req,) = m.poll(600)
    m.on_failure(req, UnsupportedVersionError("no ShareGroupHeartbeat"), 600)
    assert m.state is S.FAILED


@scenario("share", "subscribe-while-leaving-rejoins-after-the-leave", (S.LEAVING, S.LEFT), (S.LEFT, S.JOINING))
def _share_rejoin_after_leave():
    m, leave = share_in(S.LEAVING)
    m.subscribe(["b"], 2)
    assert m.state is S.LEAVING
    m.on_response(leave, hb_answer(-1), 3)
    assert m.state is S.JOINING and m.subscription == ["b"]


# == what the tables showed to be wrong ===========================================================

def _classic_closed():
    m, net, _ = classic_in(M.STABLE)
    m.close(net.now)
    net.run()
    assert m.closed
    return m, net.now


def _consumer_closed():
    c = consumer_in(C.STABLE)
    c.m.close(c.now)
    (leave,) = c.m.poll(c.now)
    c.m.on_response(leave, {"error_code": 0, "member_epoch": -1}, c.now)
    assert c.m.closed
    c.m.events()                             # the revocation close() made
    return c.m, c.now


CLOSED_MEMBERS = {"classic": _classic_closed, "consumer": _consumer_closed}


@pytest.mark.parametrize("machine", CLOSED_MEMBERS)
def test_a_late_fatal_commit_answer_leaves_a_closed_member_closed(machine):
    # An OffsetCommit still in flight when close() left the group (the core
    # gives up waiting for it at its deadline) answers FENCED_INSTANCE_ID:
    # the member used to move CLOSED -> FATAL, so `closed` turned False again
    # and a driver waiting for it waited for nothing.
    m, now = CLOSED_MEMBERS[machine]()
    m.on_commit_error(E.FencedInstanceIdError(), 1, now)
    assert m.closed and m.events() == [] and m.fatal_error is None


@pytest.mark.parametrize("machine", CLOSED_MEMBERS)
def test_unsubscribe_after_close_leaves_the_member_closed(machine):
    m, now = CLOSED_MEMBERS[machine]()
    m.unsubscribe(now)                       # used to move CLOSED -> UNJOINED
    assert m.closed and m.poll(now) == [] and m.next_deadline(now) is None


@pytest.mark.parametrize("machine", CLOSED_MEMBERS)
def test_a_second_fatal_error_keeps_the_first(machine):
    if machine == "classic":
        m, net, _ = classic_in(M.FATAL)
        now = net.now
    else:
        c = consumer_in(C.FATAL)
        m, now = c.m, c.now
        m.events()
    first = m.fatal_error
    m.on_commit_error(E.FencedInstanceIdError(), 1, now)     # used to replace it, and report again
    assert m.fatal_error is first and m.events() == []
    assert m.state.name == "FATAL"


def test_classic_leave_answered_after_a_fatal_error_closed_the_member():
    # close() sends the LeaveGroup; before its answer a commit is fenced
    # (FATAL) and close() is called again (FATAL -> CLOSED); the late
    # LeaveGroup answer must not try CLOSED -> CLOSED.
    m, net, _ = classic_in(M.STABLE)
    m.close(net.now)
    (leave,) = m.poll(net.now)
    m.on_commit_error(E.FencedInstanceIdError(), m.generation_id, net.now)
    m.close(net.now)
    assert m.closed
    m.on_response(leave, {"error_code": 0}, net.now)
    assert m.closed


def test_consumer_leave_answered_after_a_fatal_error_closed_the_member():
    c = consumer_in(C.STABLE)
    c.m.close(c.now)
    (leave,) = c.m.poll(c.now)
    c.m.on_commit_error(E.FencedInstanceIdError(), 2, c.now)
    c.m.close(c.now)
    assert c.m.closed
    c.m.on_response(leave, {"error_code": 0, "member_epoch": -1}, c.now)
    assert c.m.closed


def test_share_leave_from_stable_always_tells_the_broker():
    # The table has no STABLE -> LEFT: a member the broker answered is told
    # to leave with a heartbeat, whatever epoch it was given.
    m, _ = share_in(S.STABLE)
    m.epoch = 0                                  # a broker answering epoch 0 (Kafka never does)
    m.leave(600)
    assert m.state is S.LEAVING
    (leave,) = m.poll(600)
    assert leave.body["member_epoch"] == -1


# == every scenario above, recorded ==============================================================

@pytest.fixture
def recorded(monkeypatch):
    """Every move of every membership machine, as (class name, from, to)."""
    seen = []
    for cls, _table, _states, _initial, _fresh in MACHINES.values():
        def move(self, new, _orig=cls._move, _name=cls.__name__):
            seen.append((_name, self.state, new))
            _orig(self, new)
        monkeypatch.setattr(cls, "_move", move)
    return seen


@pytest.mark.parametrize("machine,name,shows,run", SCENARIOS, ids=[f"{s[0]}-{s[1]}" for s in SCENARIOS])
def test_real_scenarios_take_only_table_transitions(recorded, machine, name, shows, run):
    run()
    cls = MACHINES[machine][0].__name__
    taken = {(src, dst) for who, src, dst in recorded if who == cls}
    assert taken <= edges(machine), taken - edges(machine)
    assert shows <= taken, f"{name} did not take {shows - taken}"


@pytest.mark.parametrize("machine", MACHINES)
def test_the_scenarios_take_every_transition_of_the_table(machine):
    shown = set().union(*(shows for m, _n, shows, _f in SCENARIOS if m == machine))
    assert shown == edges(machine), {"never shown": edges(machine) - shown}
