"""Load and checks shared by the cluster failover tests and bench/soak_cluster.py.

A load writes ``"<partition>:<sequence>"`` values to explicit partitions, so
reading a partition back tells at once what was lost, duplicated or
reordered; it also times the longest stretch without progress (an ack, a
record consumed) - the *stall* a failover causes.
"""
from __future__ import annotations

import threading
import time
from collections import defaultdict

from kio import Admin, Consumer, Producer, TopicPartition


class Stall:
    """The longest gap between two progress events (thread-safe)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.last = None
        self.longest = 0.0
        self.events = 0

    def tick(self):
        now = time.monotonic()
        with self._lock:
            if self.last is not None:
                self.longest = max(self.longest, now - self.last)
            self.last = now
            self.events += 1


class ProduceLoad:
    """A thread that sends ``"<p>:<seq>"`` records round-robin over
    ``partitions`` with at most ``window`` unacknowledged, until stopped.
    ``acked[p]`` lists the sequences acknowledged, ``errors`` the failures."""

    def __init__(self, bootstrap, topic, partitions, *, window=200, pace=0.002, **config):
        self.topic, self.partitions, self.window, self.pace = topic, partitions, window, pace
        self.producer = Producer(bootstrap_servers=bootstrap, linger_ms=5, **config)
        self.sent = defaultdict(int)
        self.acked = defaultdict(list)
        self.errors = []
        self.stall = Stall()
        self._slots = threading.Semaphore(window)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"load-{topic}", daemon=True)

    def start(self):
        self._thread.start()
        return self

    def _on_delivery(self, p, seq):
        def done(err, md):
            with self._lock:
                if err is None:
                    self.acked[p].append(seq)
                else:
                    self.errors.append(err)
            self.stall.tick()
            self._slots.release()
        return done

    def _run(self):
        i = 0
        while not self._stop.is_set():
            if not self._slots.acquire(timeout=0.1):
                continue
            p = i % self.partitions
            seq = self.sent[p]
            self.sent[p] += 1
            self.producer.send(self.topic, f"{p}:{seq}".encode(), partition=p,
                               on_delivery=self._on_delivery(p, seq))
            i += 1
            if self.pace:
                time.sleep(self.pace)

    def total_acked(self):
        with self._lock:
            return sum(len(v) for v in self.acked.values())

    def wait_acked(self, more, timeout=60):
        """Wait until ``more`` further records are acknowledged."""
        goal = self.total_acked() + more
        end = time.monotonic() + timeout
        while self.total_acked() < goal:
            if time.monotonic() > end:
                raise AssertionError(f"{self.topic}: {self.total_acked()}/{goal} acked after {timeout} s "
                                     f"(errors: {self.errors[:3]})")
            time.sleep(0.05)

    def stop(self, timeout=120):
        self._stop.set()
        self._thread.join()
        self.producer.flush(timeout)
        self.producer.close(timeout)


def read_partitions(bootstrap, topic, partitions, *, read_committed=False, timeout=60):
    """Every value of every partition, in offset order: {p: [value, ...]}."""
    iso = 1 if read_committed else 0
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    with Admin(bootstrap_servers=bootstrap) as admin:
        ends = {tp.partition: info.offset for tp, info in
                admin.list_offsets({tp: "latest" for tp in tps}, isolation_level=iso).items()}
    out = {p: [] for p in range(partitions)}
    with Consumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                  isolation_level="read_committed" if read_committed else "read_uncommitted") as c:
        c.assign(tps)
        c.seek_to_beginning(tps)
        end = time.monotonic() + timeout
        while any(c.position((topic, p)) < ends[p] for p in range(partitions)):
            for r in c.poll(0.5):
                out[r.partition].append(r.value.decode())
            if time.monotonic() > end:
                raise AssertionError(f"{topic}: could not read up to {ends} in {timeout} s")
    return out


def check_exactly_once_in_order(log, acked, what):
    """Each partition's log holds every acknowledged sequence exactly once,
    in sequence order (idempotence's promise). Returns the record count."""
    total = 0
    for p, values in log.items():
        seqs = [int(v.split(":")[1]) for v in values]
        assert all(v.startswith(f"{p}:") for v in values), f"{what}: foreign records in partition {p}"
        assert len(seqs) == len(set(seqs)), f"{what}: duplicates in partition {p}"
        assert seqs == sorted(seqs), f"{what}: partition {p} out of order"
        missing = set(acked.get(p, ())) - set(seqs)
        assert not missing, f"{what}: partition {p} lost acknowledged records {sorted(missing)[:10]}"
        total += len(seqs)
    return total


def restart_and_check(cluster, node, load, topic, partitions, what):
    """Brings ``node`` back, waits until every replica is in sync, then checks
    what ``load`` wrote: no error, every acknowledged record once and in
    order, everything sent written. Returns the record count."""
    cluster.start_node(node)
    cluster.wait_in_sync(120)
    assert not load.errors, load.errors[:3]
    total = check_exactly_once_in_order(read_partitions(cluster.bootstrap_servers, topic, partitions),
                                        load.acked, what)
    assert total == sum(load.sent.values()), f"{what}: not everything sent was written"
    return total


def report(name, stall, **figures):
    """One line for the run's output (``pytest -s``) and the soak script."""
    extra = " ".join(f"{k}={v}" for k, v in figures.items())
    print(f"\n[failover] {name}: longest stall {stall:.2f} s {extra}", flush=True)
