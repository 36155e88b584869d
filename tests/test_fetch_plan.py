"""The kept fetch plan (kproto.consumer.fetch_plan) against the walk over
every partition (``Fetcher.incremental_plan = False``), without a network:
two fetchers driven in lockstep through the same rounds - answers with and
without records, drains, seeks, resets, pauses and resumes, revocations and
additions, leader moves, session errors and failed requests, a node kept in
flight, a Fetch version changing - must send byte-identical requests and
end every round in the same state; and the number of partitions a round
visits grows with the partitions that changed, not with those assigned."""
import collections
import random

import pytest

from kproto.cluster import TopicPartition
from kproto.consumer._fetch_request import fetch_request_body
from kproto.consumer import fetcher as fetcher_module
from kproto.consumer.fetcher import Fetcher
from kproto.consumer.positions import Positions
from test_fetch_session import TOPIC_IDS, answer, batch

SESSION = 91


def encode_answer(req, parts, session_id, error_code, as_c):
    """The broker's answer to ``req`` with ``parts`` ({tp: partition dict}):
    the codec's dict or the C FetchAnswer of its bytes."""
    return answer(req, parts, session_id=session_id, error_code=error_code,
                  path="c" if as_c else "dict", high_watermark=0)


class Side:
    """One consumer's positions and fetcher."""

    def __init__(self, tps, incremental, reuse=True, quiet=True):
        self.pos = Positions("earliest")
        self.pos.assign(tps)
        for tp in tps:
            self.pos.seek(tp, 0)
        self.f = Fetcher(self.pos)
        self.f.incremental_plan = incremental
        self.f.reuse_frames = reuse
        self.f.quiet_path = quiet                # (the reference walks every round: tests/test_fetch_quiet.py)
        self.in_flight = {}                      # node -> request

    def drop_buffered(self, tps):
        self.f._buffered = collections.deque(b for b in self.f._buffered if b.tp not in tps)

    def state(self):
        return ({tp: (st.position, st.leader_epoch, st.paused, st.reset_to, st.high_watermark)
                 for tp, st in self.pos.states.items()},
                [(b.tp, b.next_batch) for b in self.f._buffered],
                sorted(self.f._in_flight_nodes),
                {n: (s.session_id, s.epoch, dict(s.offsets), dict(s.epochs)) for n, s in self.f.sessions.items()},
                [type(e).__name__ for e in self.f._errors])


class Twin:
    """The kept plan and the walk, fed the same rounds."""

    def __init__(self, seed, version, topics=("t", "u"), partitions=6, nodes=2, incremental=True):
        self.rng = random.Random(seed)
        self.version = version
        self.versions = {n: version for n in range(1, nodes + 1)}
        self.nodes = nodes
        self.tps = [TopicPartition(t, p) for p in range(partitions) for t in topics]
        self.rng.shuffle(self.tps)               # topics interleaved in the positions
        self.leaders = {t: {p: 1 + (p % nodes) for p in range(partitions)} for t in topics}
        self.leaders_version = 0
        # the kept plan (or the walk) re-using frames, against the walk writing every body
        self.plan, self.walk = Side(self.tps, incremental, True), Side(self.tps, False, False, False)
        self.requests = 0

    def sides(self):
        return self.plan, self.walk

    def fetch(self):
        out = []
        for side in self.sides():
            reqs = side.f.fetch_requests(
                lambda tp: self.leaders[tp.topic].get(tp.partition), lambda node: self.versions.get(node),
                TOPIC_IDS.get, self.leaders.get, self.leaders_version)
            out.append(sorted(reqs, key=lambda r: r.node))
        a, b = out
        assert [r.node for r in a] == [r.node for r in b]
        for x, y in zip(a, b):
            assert x.version == y.version and x.session_epoch == y.session_epoch
            assert x.body == y.body
            assert x.encoded.data == y.encoded.data          # the bytes sent
            assert x.offsets == y.offsets
            for tp in x.offsets:                              # the answer's index covers the request
                assert x.partitions[tp.topic][tp.partition] == tp
            # (the kept plan's names may hold more topics than this request's: harmless)
            assert set(x.topic_names.items()) >= set(y.topic_names.items())
            self.plan.in_flight[x.node] = x
            self.walk.in_flight[y.node] = y
            self.requests += 1
        return a

    def answer(self, node):
        """Answer the Fetch in flight to ``node`` on both sides alike."""
        rng = self.rng
        req = self.plan.in_flight.get(node)
        if req is None:
            return
        roll = rng.random()
        as_c = rng.random() < 0.5
        if roll < 0.04:
            for side in self.sides():
                side.f.on_fetch_failure(side.in_flight.pop(node), ConnectionError("lost"))
            return
        error_code, session_id, parts = 0, SESSION + node, {}
        if roll < 0.10 and req.version >= 7:
            error_code = rng.choice([70, 71, 106])
        elif roll < 0.13:
            session_id = 0                                   # the broker keeps no session
        else:
            for tp, offset in sorted(req.offsets.items()):
                r = rng.random()
                if r < 0.3:
                    n = rng.randint(1, 3)
                    parts[tp] = {"records": batch(offset, n), "high_watermark": offset + n + rng.randint(0, 2)}
                elif r < 0.35:
                    parts[tp] = {"high_watermark": offset + rng.randint(0, 5)}
                elif r < 0.37:
                    parts[tp] = {"error_code": rng.choice([74, 6])}   # FENCED_LEADER_EPOCH, NOT_LEADER
        for side in self.sides():
            sreq = side.in_flight.pop(node)
            side.f.on_fetch_response(sreq, encode_answer(sreq, parts, session_id, error_code, as_c))

    def act(self):
        """One random change between rounds, on both sides."""
        rng = self.rng
        roll = rng.random()
        tp = rng.choice(self.tps)
        if roll < 0.35:
            n = rng.randint(1, 8)
            kind = rng.random() < 0.5
            raised = []
            for side in self.sides():
                try:
                    side.f.drain_columns(n) if kind else side.f.drain(n)
                    raised.append(None)
                except Exception as exc:                     # the same on both sides
                    raised.append(type(exc).__name__)
            assert raised[0] == raised[1]
        elif roll < 0.45:
            offset = rng.randint(0, 30)
            for side in self.sides():
                if side.pos.is_assigned(tp):
                    side.pos.seek(tp, offset)
                    side.drop_buffered({tp})
        elif roll < 0.52:
            for side in self.sides():
                if side.pos.is_assigned(tp):
                    side.pos.pause([tp]) if not side.pos.is_paused(tp) else side.pos.resume([tp])
        elif roll < 0.57:
            offset = rng.randint(0, 10)
            for side in self.sides():
                if side.pos.is_assigned(tp):
                    side.pos.request_reset(tp)
                    side.drop_buffered({tp})
                    for lo in side.f.reset_requests(lambda tp: 1, lambda node: 1):
                        body = {"topics": [{"name": t.topic, "partitions": [
                            {"partition_index": t.partition, "error_code": 0, "offset": offset,
                             "leader_epoch": 3}]} for t in lo.strategies]}
                        side.f.on_list_offsets_response(lo, body)
        elif roll < 0.61:
            for side in self.sides():
                if side.pos.is_assigned(tp):
                    side.pos.remove([tp])
                    side.drop_buffered({tp})
                else:
                    side.pos.add([tp])
                    side.pos.seek(tp, 0)
        elif roll < 0.64:
            self.leaders[tp.topic][tp.partition] = 1 + rng.randrange(self.nodes)
            self.leaders_version += 1
        elif roll < 0.65 and self.version >= 7:
            node = 1 + rng.randrange(self.nodes)
            other = [v for v in (7, 11, 12, 13, 16, 18) if v != self.versions[node] and (v >= 13) == (self.version >= 13)]
            self.versions[node] = rng.choice(other)
        elif roll < 0.67:
            self.leaders[tp.topic][tp.partition] = -1          # leader unknown until the next update
            self.leaders_version += 1
        elif roll < 0.70:
            self.leaders[tp.topic][tp.partition] = 1 + (tp.partition % self.nodes)
            self.leaders_version += 1

    def check(self):
        assert self.plan.state() == self.walk.state()
        assert self.plan.f.metadata_refresh_needed == self.walk.f.metadata_refresh_needed
        self.plan.f.metadata_refresh_needed = self.walk.f.metadata_refresh_needed = False

    def run(self, rounds):
        for _ in range(rounds):
            self.fetch()
            for node in range(1, self.nodes + 1):
                if self.rng.random() < 0.8:                  # else kept in flight a round
                    self.answer(node)
            for _ in range(self.rng.randint(0, 3)):
                self.act()
            self.check()


@pytest.fixture(params=["always", "by-share"])
def small_plans(request, monkeypatch):
    """The kept plan for a dozen partitions (it leaves fewer than 65 to the
    walk), used every round or, as by default, only while at most a quarter
    of the partitions are pending."""
    monkeypatch.setattr(fetcher_module, "_WALK_AT_MOST", 0)
    if request.param == "always":
        monkeypatch.setattr(fetcher_module, "_WALK_ABOVE_SHARE", 0)
    return request.param


@pytest.mark.parametrize("version", [4, 7, 11, 12, 13, 16, 18])
@pytest.mark.parametrize("seed", range(6))
def test_kept_plan_sends_what_the_walk_sends(version, seed, small_plans):
    twin = Twin(seed * 100 + version, version)
    twin.run(300)
    assert twin.requests > 200
    if version >= 7:
        incremental = sum(s.incremental_sent for s in twin.plan.f.sessions.values())
        assert incremental > 0
    if small_plans == "always" and version >= 7:
        assert twin.plan.f._plan.key is not None          # the kept plan was used
    assert twin.plan.f.frames_reused > 10


@pytest.mark.parametrize("version", [4, 9, 12, 13, 18])
@pytest.mark.parametrize("seed", range(3))
def test_reused_frames_equal_fresh_ones_on_the_walk(version, seed):
    """The walk (sessions or not) with frames re-used vs written anew."""
    twin = Twin(seed, version, incremental=False)
    twin.run(300)
    assert twin.plan.f.frames_reused > 20                  # frames were re-used


@pytest.mark.parametrize("version", [12, 13])
def test_one_node_one_partition_many_rounds(version, small_plans):
    twin = Twin(7, version, topics=("t",), partitions=1, nodes=1)
    twin.run(400)
    assert twin.plan.f.frames_reused > 5


def busy_rounds(incremental, partitions=1000, busy=10, rounds=30):
    """A consumer of ``partitions`` partitions of which ``busy`` get a record
    per answer; returns the partitions visited by each round's plan."""
    tps = [TopicPartition("t", p) for p in range(partitions)]
    side = Side(tps, incremental)
    leaders = {"t": {p: 1 for p in range(partitions)}}
    visited = []
    for _ in range(rounds):
        reqs = side.f.fetch_requests(lambda tp: 1, lambda node: 13, TOPIC_IDS.get, leaders.get, 0)
        visited.append(side.f._plan.visited)
        if not reqs:
            continue
        req, = reqs
        parts = {TopicPartition("t", p): {"records": batch(req.offsets[TopicPartition("t", p)], 1),
                                          "high_watermark": 1 << 20}
                 for p in range(busy) if TopicPartition("t", p) in req.offsets}
        side.f.on_fetch_response(req, encode_answer(req, parts, SESSION, 0, True))
        side.f.drain_columns(1 << 20)
    return visited, side


def test_partitions_visited_grow_with_the_busy_ones_not_the_assigned():
    visited, side = busy_rounds(True)
    assert visited[0] == 2000                                 # built, then walked: every partition
    steady = visited[3:]
    assert max(steady) <= 20, steady                          # the 10 busy ones, not 1,000
    assert side.f.sessions[1].incremental_sent >= 25
    walked, _ = busy_rounds(False)
    assert walked[3:] == [0] * len(walked[3:])                # (the walk does not count in the plan)


def test_a_paused_node_is_not_walked_every_round():
    """A node whose partitions are all paused is idle: rounds stay small."""
    tps = [TopicPartition("t", p) for p in range(200)]
    side = Side(tps, True)
    leaders = {"t": {p: 1 + (p >= 100) for p in range(200)}}
    side.pos.pause(tps[100:])
    for _ in range(5):
        for req in side.f.fetch_requests(lambda tp: 1, lambda node: 13, TOPIC_IDS.get, leaders.get, 0):
            side.f.on_fetch_response(req, encode_answer(req, {}, SESSION, 0, False))
    assert side.f._plan.visited <= 1
    side.pos.resume(tps[150:151])
    reqs = side.f.fetch_requests(lambda tp: 1, lambda node: 13, TOPIC_IDS.get, leaders.get, 0)
    by_node = {r.node: r for r in reqs}
    assert list(by_node[2].offsets) == [tps[150]]             # the walk found it
    assert len(by_node[1].offsets) == 100


@pytest.mark.parametrize("version", [4, 7, 9, 12, 13, 15, 18])
@pytest.mark.parametrize("sessions", [True, False])
def test_a_quiet_consumer_resends_its_last_frame_patched(version, sessions):
    """One partition, a record per answer: after the first requests every
    body is the last one patched, and byte for byte what the writer writes."""
    tp = TopicPartition("t", 0)
    side = Side([tp], True)
    side.f.use_sessions = sessions
    leaders = {"t": {0: 1}}
    epochs = []
    for i in range(60):
        req, = side.f.fetch_requests(lambda tp: 1, lambda node: version, TOPIC_IDS.get, leaders.get, 0)
        assert req.encoded.data == fetch_request_body(version, req.body)
        epochs.append(req.body["session_epoch"])
        offset = req.offsets[tp]
        parts = {tp: {"records": batch(offset, 1), "high_watermark": offset + 1}} if i % 3 else {}
        side.f.on_fetch_response(req, encode_answer(req, parts, SESSION, 0, True))
        side.f.drain_columns(10)
    assert side.pos.position(tp) == 40
    assert side.f.frames_reused >= 55
    assert sum(len(frames) for frames in side.f._frames.values()) <= 4          # kept frames stay few
    if sessions and version >= 7:
        assert epochs[:3] == [0, 1, 2] and epochs[-1] == 59     # patched in as it counts up
    else:
        assert set(epochs) == {-1}
