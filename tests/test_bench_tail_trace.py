"""bench/_tail_trace.py, the instrument of ``bench_latency.py --trace``: the
GC log it keeps and how it matches the slowest records against it (no network)."""
import gc
import importlib.util
import json
import os

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")


def _tail_trace():
    spec = importlib.util.spec_from_file_location("_tail_trace", os.path.join(BENCH, "_tail_trace.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_trace_records_each_collection_with_its_generation_and_leaves_gc_callbacks_as_it_found_them(tmp_path):
    tt = _tail_trace()
    before = list(gc.callbacks)
    trace = tt.Trace()
    t0 = tt.now_us()
    gc.collect(2)
    gc.collect(0)
    t1 = tt.now_us()
    gens = [g for g, start, took, *_ in trace.gc if t0 <= start <= t1]
    assert gens[-2:] == [2, 0]
    assert all(took >= 0 for _, _, took, *_ in trace.gc)
    trace.dump(str(tmp_path / "t-consume.json"), client="x", rate=1)
    assert gc.callbacks == before


def test_a_slow_call_is_recorded_and_a_quick_one_is_not(tmp_path):
    import time
    tt = _tail_trace()
    trace = tt.Trace()
    quick = trace.timed(lambda: None)
    slow = trace.timed(lambda: time.sleep(tt.SLOW_CALL_US * 3 / 1e6))
    quick()
    slow()
    path = tmp_path / "t-produce.json"
    trace.dump(str(path), client="x", rate=1)
    assert trace._on_gc not in gc.callbacks
    kept = json.loads(path.read_text())["slow"]
    assert len(kept) == 1 and kept[0][1] >= tt.SLOW_CALL_US * 3


def _run(tmp_path, name, sent, lat, gc_events, slow=(), appended=None):
    """A traced run's two files as bench_latency's children write them."""
    prod = {"gc": gc_events, "slow": list(slow), "client": "p", "rate": 1000}
    cons = {"gc": [], "slow": [], "client": "c", "rate": 1000, "sent": sent,
            "arrived": [s + d for s, d in zip(sent, lat)], "appended": appended or []}
    (tmp_path / f"{name}-produce.json").write_text(json.dumps(prod))
    (tmp_path / f"{name}-consume.json").write_text(json.dumps(cons))


def test_slow_records_sent_close_together_are_one_episode():
    tt = _tail_trace()
    sent = [0, 1_000, 2_000, 500_000, 501_000, 900_000]
    lat = [30_000, 30_000, 4_000, 30_000, 30_000, 4_000]
    eps = tt.episodes(sent, lat, 20_000)
    assert eps == [[0, 1], [3, 4]]


def test_the_summary_counts_episodes_per_minute_their_side_and_the_collections_inside_them(tmp_path):
    tt = _tail_trace()
    n = 6000
    sent = [i * 10_000 for i in range(n)]                 # 100 records/s for 60 s
    lat = [3_000] * n
    lat[100] = lat[101] = 25_000                           # one episode, the producer's side
    lat[3000] = 60_000                                     # another, the consumer's side, a GC inside
    appended = [s + 1_000 for s in sent]
    appended[100] += 20_000
    appended[101] += 20_000
    gc_events = [[2, sent[3000] + 5_000, 4_000, 0]]
    _run(tmp_path, "r1", sent, lat, gc_events, appended=appended)
    table = tt.episode_summary(str(tmp_path))
    row = [line for line in table.splitlines() if line.startswith("| p → c")][0]
    cells = [c.strip() for c in row.strip("|").split("|")]
    seconds = (sent[-1] + lat[-1] - sent[0]) / 1e6
    per_min = 60 / seconds
    # > 10 ms: two episodes, > 20 ms: two, > 50 ms: one
    assert cells[3:6] == [f"{2 * per_min:.1f}", f"{2 * per_min:.1f}", f"{1 * per_min:.1f}"]
    # per minute by side above 10 ms (one each), then of the two above 20 ms: the
    # producer's side, with a collection, with a slow send(); no load recorded
    assert cells[6:] == [f"{per_min:.1f} / {per_min:.1f}", "1/2", "1/2", "0/2", "-"]


def test_a_consumer_side_episode_is_split_at_the_fetch_that_brought_it(tmp_path):
    """One record lost 31 ms after its append: its Fetch was in flight (written
    before the append), the answer became readable 30 ms after the append,
    poll() had it 1 ms later; another lost 40 ms because its Fetch was written
    25 ms after the append."""
    tt = _tail_trace()
    n = 2000
    sent = [i * 10_000 for i in range(n)]
    appended = [s + 1_000 for s in sent]
    lat = [3_000] * n
    first, second = 500, 1500
    lat[first] = 1_000 + 31_000
    lat[second] = 1_000 + 40_000
    a1, a2 = appended[first], appended[second]
    net = [["w", a1 - 2_000, 0], ["r", a1 + 30_000, 0],
           ["w", a2 + 25_000, 0], ["r", a2 + 35_000, 0], ["r", a2 + 36_000, 0]]
    _run(tmp_path, "r2", sent, lat, [], appended=appended)
    cons_path = tmp_path / "r2-consume.json"
    cons = json.loads(cons_path.read_text())
    cons["net"] = net
    cons_path.write_text(json.dumps(cons))
    rows = [line for line in tt.consumer_side(str(tmp_path)).splitlines() if line.startswith("| r2")]
    cells = [[c.strip() for c in row.strip("|").split("|")][3:] for row in rows]
    # the kernel's receive time of the answers is not known here (0): the wait
    # is append → read, the wake-up column empty
    assert cells == [["31.0", "0.0", "-", "-", "1.0"], ["40.0", "25.0", "-", "-", "5.0"]]
    # with it: 26 ms of the 30 the broker's (bytes in the kernel), 4 the client's wake-up
    cons["net"][1][2] = a1 + 26_000
    cons_path.write_text(json.dumps(cons))
    rows = [line for line in tt.consumer_side(str(tmp_path)).splitlines() if line.startswith("| r2")]
    assert [c.strip() for c in rows[0].strip("|").split("|")][3:] == ["31.0", "0.0", "26.0", "4.0", "1.0"]


def test_a_producer_side_episode_is_split_at_the_produce_write_that_carried_it(tmp_path):
    """A record 30 ms from send() to the append: its batch was written 7 ms
    after the send (linger.ms and the round), and the append came 23 ms after
    the write."""
    tt = _tail_trace()
    n = 2000
    sent = [i * 10_000 for i in range(n)]
    appended = [s + 1_000 for s in sent]
    slow = 700
    appended[slow] = sent[slow] + 30_000
    lat = [a - s + 1_000 for s, a in zip(sent, appended)]
    _run(tmp_path, "r3", sent, lat, [], appended=appended)
    prod_path = tmp_path / "r3-produce.json"
    prod = json.loads(prod_path.read_text())
    prod["net"] = [["w", sent[slow] - 3_000, 0], ["w", sent[slow] + 7_000, 0],
                   ["r", sent[slow] + 28_500, sent[slow] + 28_000]]
    # the network thread's wait before the write ended on its timer 1.5 ms
    # late, 1 ms of it waiting for a CPU
    prod["waits"] = [[sent[slow] + 6_900, sent[slow] + 5_400, 0, 1_000],
                     # the next wait records the round that wrote: 0.4 ms wall, 0.1 of it
                     # waiting for a CPU, 0.3 ms of CPU
                     [sent[slow] + 8_000, 0, 1, 0, 400, 100, 300]]
    prod_path.write_text(json.dumps(prod))
    rows = [line for line in tt.producer_side(str(tmp_path)).splitlines() if line.startswith("| r3")]
    # send → append 30, → written 7 (past the batch's linger: 2), the timer 1.5
    # late, written → append 23, → the answer in the kernel 21, read 0.5 later
    assert [[c.strip() for c in row.strip("|").split("|")][3:] for row in rows] == [
        ["30.0", "7.0", "2.0", "1.5 (run delay 1.0)", "0.4/0.1/0.3", "23.0", "21.0", "0.5"]]


def test_a_select_wait_is_recorded_with_its_due_time_events_and_run_delay(tmp_path):
    """watch_kio_waits: a wait that ended on its timer (due = its start +
    timeout, no events) and one a wake-up ended (no due time: None, one event)."""
    from kio._threaded import network
    from kproto.producer.core import ProducerCore
    tt = _tail_trace()
    original = network.SocketLoop.select
    trace = tt.Trace()
    try:
        trace.watch_kio_waits()
        loop = network.SocketLoop(ProducerCore(bootstrap_servers="127.0.0.1:9"))
        t0 = tt.now_us()
        assert loop.select(0.02) == []
        loop.wake()
        assert len(loop.select(None)) == 1
        loop.close()
    finally:
        network.SocketLoop.select = original
    trace.dump(str(tmp_path / "t-produce.json"), client="x", rate=1)
    waits = json.loads((tmp_path / "t-produce.json").read_text())["waits"]
    (woke1, due1, n1, delay1, *_), (woke2, due2, n2, delay2, wall, round_delay, cpu) = waits
    assert n1 == 0 and t0 + 20_000 <= due1 <= woke1 and delay1 >= 0
    assert n2 == 1 and due2 == 0 and woke2 >= woke1 and delay2 >= 0
    # the round between the two waits (the wake() call): its wall time holds its CPU time
    assert wall >= 0 and round_delay >= 0 and 0 <= cpu <= wall + 1_000


def test_jvm_pauses_are_read_from_the_safepoint_lines_of_a_gc_log(tmp_path):
    tt = _tail_trace()
    log = tmp_path / "jvm.log"
    log.write_text(
        "[1795721041860ms][12ms] Using G1\n"
        "[1795721042672ms][824ms] GC(0) Pause Young (Normal) (G1 Evacuation Pause) 19M->4M(380M) 43.247ms\n"
        '[1795721042673ms][824ms] Safepoint "G1CollectForAllocation", Time since last: 707741076 ns, '
        "Reaching safepoint: 3319 ns, Cleanup: 1238459 ns, At safepoint: 44093239 ns, Total: 45335017 ns\n"
        '[1795721043100ms][1250ms] Safepoint "Cleanup", Time since last: 1 ns, Reaching safepoint: 1 ns, '
        "Cleanup: 1 ns, At safepoint: 1 ns, Total: 200000 ns\n")
    # the 0.2 ms pause is under the 1 ms kept; the other started 45.335 ms before its line
    assert tt.jvm_pauses(str(log)) == [(1795721042673_000 - 45_335, 45_335)]


def _wire_trace():
    import sys
    sys.path.insert(0, BENCH)
    spec = importlib.util.spec_from_file_location("_wire_trace", os.path.join(BENCH, "_wire_trace.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_wire_capture_keeps_produce_and_fetch_requests_and_their_answers_only(tmp_path):
    """A loopback server on a port of its own stands for the broker: the
    capture (a raw packet socket, as root) keeps the Produce and the Fetch
    and their answers, matched by correlation id, not a Metadata request."""
    import socket
    import struct
    import threading
    wt = _wire_trace()
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    out = tmp_path / "wire.json"
    stop, ready = threading.Event(), threading.Event()
    cap = threading.Thread(target=wt.capture, args=(port, str(out), stop, ready))
    cap.start()
    assert ready.wait(10)
    client = socket.create_connection(("127.0.0.1", port))
    conn, _ = server.accept()
    for api, corr in ((0, 7), (3, 8), (1, 9)):          # Produce, Metadata, Fetch
        body = struct.pack("!hhi", api, 9, corr) + b"x" * 20
        client.sendall(struct.pack("!i", len(body)) + body)
        got = conn.recv(100)
        assert len(got) == 4 + len(body)
        conn.sendall(struct.pack("!ii", 8, corr) + b"yyyy")
        assert len(client.recv(100)) == 12
    client_port = client.getsockname()[1]
    stop.set()
    cap.join(10)
    for s in (client, conn, server):
        s.close()
    events = json.loads(out.read_text())
    assert [(kind, api, corr) for _, _, kind, api, corr in events] == [
        ("q", 0, 7), ("a", 0, 7), ("q", 1, 9), ("a", 1, 9)]
    assert {e[1] for e in events} == {client_port}
    times = [e[0] for e in events]
    assert times == sorted(times)


def test_a_slow_episode_is_split_at_the_wire_between_the_clients_and_the_broker(tmp_path):
    """Two episodes: one whose Produce the broker answered 12 ms after the
    request (the broker's Produce), one whose records a waiting Fetch brought
    15 ms after the Produce was answered (the broker's Fetch answer)."""
    wt = _wire_trace()
    n = 3000
    sent = [i * 10_000 for i in range(n)]          # 100/s, 30 s
    base = sent[0]
    wire = []
    appended, arrived = [], []
    pp, cp = 40001, 40002
    slow_p, slow_c = 1000, 2000
    a = fa = 0
    for i, s in enumerate(sent):
        q = s + 5_000                              # linger.ms
        # answers in order on a connection, as the broker gives them
        a = max(a, q + (12_000 if i == slow_p else 300))
        app = a - 100
        fa = max(fa, a + (15_000 if i == slow_c else 200))
        wire += [(q, pp, "q", 0, i), (a, pp, "a", 0, i), (s - 2_000, cp, "q", 1, i), (fa, cp, "a", 1, i)]
        appended.append(app)
        arrived.append(fa + 300)
    (tmp_path / "w.json").write_text(json.dumps(wire))
    _run(tmp_path, "r5", sent, [a - s for s, a in zip(sent, arrived)], [], appended=appended)
    table = wt.wire_summary(str(tmp_path), str(tmp_path / "w.json"))
    row = [line for line in table.splitlines() if line.startswith("| p → c")][0]
    cells = [c.strip() for c in row.strip("|").split("|")]
    per_min = 60 / ((arrived[-1] - base) / 1e6)
    assert cells[1] == f"{2 * per_min:.1f}"                              # two episodes
    assert cells[2:6] == ["0.0", f"{per_min:.1f}", f"{per_min:.1f}", "0.0"]   # the broker's, each
    assert cells[6].startswith(f"{per_min:.1f} (")                        # one Produce answer > 5 ms
    assert cells[7].startswith(f"{per_min:.1f} (")                        # one Fetch answer > 5 ms late


def test_the_runs_table_gives_each_run_in_the_order_it_ran_with_its_load_and_episodes_by_side(tmp_path):
    tt = _tail_trace()
    n = 6000
    for name, start, load, slow_side in (("late", 10**9, 3.5, "consumer"), ("early", 0, 0.5, "producer")):
        sent = [start + i * 10_000 for i in range(n)]        # 60 s at 100/s
        appended = [s + 1_000 for s in sent]
        lat = [3_000] * n
        lat[100] = 25_000
        if slow_side == "producer":
            appended[100] += 20_000
        _run(tmp_path, name, sent, lat, [], appended=appended)
        path = tmp_path / f"{name}-consume.json"
        cons = json.loads(path.read_text())
        cons["load"] = load
        path.write_text(json.dumps(cons))
    rows = [line for line in tt.runs_table(str(tmp_path)).splitlines() if line.startswith("| early") or
            line.startswith("| late")]
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows]
    per_min = 60 / ((6000 - 1) * 10_000 / 1e6 + 0.003)
    assert [c[0] for c in cells] == ["early", "late"]                 # the order they ran, not the names'
    assert [c[2] for c in cells] == ["0.5", "3.5"]
    assert cells[0][4:] == [f"{per_min:.1f}", f"{per_min:.1f}", "0.0"]
    assert cells[1][4:] == [f"{per_min:.1f}", "0.0", f"{per_min:.1f}"]
