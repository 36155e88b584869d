"""A consumer group under faults, against the real broker: three members
over 6 partitions while records are produced; one is killed (SIGKILL: no
LeaveGroup, no commit), one stops polling past max.poll.interval.ms. Every
record is processed at least once; duplicates are counted and reported."""
import collections
import os
import signal
import subprocess
import sys
import threading
import time

from kio import Consumer, Producer
from kio.admin import Admin

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PARTITIONS = 6
RECORDS = 3000
GROUP_CONFIG = dict(session_timeout_ms=6000, heartbeat_interval_ms=500, max_poll_interval_ms=4000,
                    auto_offset_reset="earliest", enable_auto_commit=True, auto_commit_interval_ms=300)

MEMBER_SCRIPT = """
import sys
from kio import Consumer
c = Consumer(bootstrap_servers=sys.argv[1], group_id=sys.argv[2], client_id="doomed", **eval(sys.argv[4]))
c.subscribe([sys.argv[3]])
while True:
    for r in c.poll(0.2):
        sys.stdout.write(f"{r.partition} {r.offset}\\n")
    sys.stdout.flush()
"""


def test_every_record_processed_at_least_once_with_a_killed_and_a_stalled_member(bootstrap):
    topic = f"grpfault-{time.monotonic_ns()}"
    group = f"g-{topic}"
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([topic], num_partitions=PARTITIONS)
    processed = collections.Counter()
    lock = threading.Lock()
    stop = threading.Event()
    lost_events = []

    def record(partition, offset):
        with lock:
            processed[(partition, offset)] += 1

    def member(name, stall_after=None):
        c = Consumer(bootstrap_servers=bootstrap, group_id=group, client_id=name, **GROUP_CONFIG)
        c.subscribe([topic], on_lost=lambda ps: lost_events.append((name, ps)))
        started = time.monotonic()
        stalled = False
        while not stop.is_set():
            if stall_after is not None and not stalled and time.monotonic() - started > stall_after:
                stalled = True
                time.sleep(6.0)            # past max.poll.interval.ms: the member leaves the group
            for r in c.poll(0.2):
                record(r.partition, r.offset)
        c.close()

    env = dict(os.environ, PYTHONPATH=ROOT)
    doomed = subprocess.Popen([sys.executable, "-c", MEMBER_SCRIPT, bootstrap, group, topic,
                               repr(GROUP_CONFIG)], stdout=subprocess.PIPE, env=env, text=True)

    def read_doomed():
        for line in doomed.stdout:
            p, o = line.split()
            record(int(p), int(o))
    threads = [threading.Thread(target=read_doomed, daemon=True),
               threading.Thread(target=member, args=("steady",)),
               threading.Thread(target=member, args=("staller", 5.0))]
    for t in threads:
        t.start()

    offsets = {}
    with Producer(bootstrap_servers=bootstrap, linger_ms=5) as p:
        for i in range(RECORDS):
            md = p.send(topic, b"%d" % i, partition=i % PARTITIONS)
            offsets[i] = md
            if i == RECORDS // 3:
                time.sleep(4.0)             # the group has formed; the killed member holds partitions
                os.kill(doomed.pid, signal.SIGKILL)
            if i % 100 == 0:
                time.sleep(0.05)
        p.flush()
    expected = {(md.result().partition, md.result().offset) for md in offsets.values()}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with lock:
            if expected <= set(processed):
                break
        time.sleep(0.5)
    stop.set()
    for t in threads[1:]:
        t.join(30)
    doomed.wait(10)
    with lock:
        missing = expected - set(processed)
        duplicates = sum(n - 1 for n in processed.values())
    print(f"\ngroup under faults: produced {RECORDS}, processed {sum(processed.values())}, "
          f"lost {len(missing)}, duplicated {duplicates}, staller on_lost events {len(lost_events)}")
    assert doomed.returncode == -signal.SIGKILL
    assert not missing, sorted(missing)[:10]
    assert any(name == "staller" for name, _ in lost_events), "the stalled member never lost its partitions"
