"""Soak: faults on a three-node Apache Kafka cluster under load, for longer
than the test suite affords (tests/test_cluster_failover.py runs one short
round of each case).

Each round runs an idempotent producer (kio, threading) and a KIP-848
consumer group on a fresh topic, applies one fault - SIGKILL of a partition
leader, SIGKILL of the group coordinator, or a controlled restart of a node
- brings the node back, and checks: nothing acknowledged lost, no
duplicates, order per partition, every record consumed. It prints the
longest stall per round. ``--confluent`` runs the leader-kill case with
confluent-kafka's producer too, on the same cluster, for comparison.

    python bench/soak_cluster.py --rounds 6 [--confluent]
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import uuid
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from cluster_load import ProduceLoad, Stall, check_exactly_once_in_order, read_partitions, report  # noqa: E402

from kio import Consumer  # noqa: E402
from kio.testing.kafka_cluster import KafkaCluster  # noqa: E402

PARTITIONS = 3
FAULTS = ("leader-kill", "coordinator-kill", "restart")


class ConfluentLoad:
    """ProduceLoad's twin on confluent-kafka (librdkafka): same values, same
    window, same stall measure."""

    def __init__(self, bootstrap, topic, partitions, window=200, pace=0.002):
        from confluent_kafka import Producer as CKProducer
        self.topic, self.partitions, self.window, self.pace = topic, partitions, window, pace
        self.producer = CKProducer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all",
                                    "enable.idempotence": True})
        self.sent = defaultdict(int)
        self.acked = defaultdict(list)
        self.errors = []
        self.stall = Stall()
        self.in_flight = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self._thread.start()
        return self

    def _cb(self, p, seq):
        def done(err, msg):
            self.in_flight -= 1
            if err is None:
                self.acked[p].append(seq)
            else:
                self.errors.append(err)
            self.stall.tick()
        return done

    def _run(self):
        i = 0
        while not self._stop.is_set():
            self.producer.poll(0)
            if self.in_flight >= self.window:
                self.producer.poll(0.05)
                continue
            p = i % self.partitions
            seq = self.sent[p]
            self.sent[p] += 1
            self.in_flight += 1
            self.producer.produce(self.topic, f"{p}:{seq}".encode(), partition=p, on_delivery=self._cb(p, seq))
            i += 1
            time.sleep(self.pace)
        self.producer.flush(120)

    def total_acked(self):
        return sum(len(v) for v in self.acked.values())

    def wait_acked(self, more, timeout=90):
        goal = self.total_acked() + more
        end = time.monotonic() + timeout
        while self.total_acked() < goal:
            if time.monotonic() > end:
                raise AssertionError(f"confluent: {self.total_acked()}/{goal} acked after {timeout} s")
            time.sleep(0.05)

    def stop(self, timeout=120):
        self._stop.set()
        self._thread.join(timeout)


def consume_group(bootstrap, topic, group, seen, stall, stop):
    with Consumer(bootstrap_servers=bootstrap, group_id=group, group_protocol="consumer",
                  auto_offset_reset="earliest") as c:
        c.subscribe([topic])
        while not stop.is_set():
            records = c.poll(0.2)
            for r in records:
                seen.add(r.value.decode())
            if records:
                stall.tick()


def one_round(cluster, fault, load_class=ProduceLoad, records=3000):
    topic = cluster.create_topic(f"soak-{uuid.uuid4().hex[:8]}", PARTITIONS)
    group = f"soak-{uuid.uuid4().hex[:8]}"
    seen, consumer_stall, stop = set(), Stall(), threading.Event()
    consumer = threading.Thread(target=consume_group,
                                args=(cluster.bootstrap_servers, topic, group, seen, consumer_stall, stop))
    consumer.start()
    if load_class is ProduceLoad:
        load = ProduceLoad(cluster.bootstrap_servers, topic, PARTITIONS, acks="all", enable_idempotence=True)
    else:
        load = load_class(cluster.bootstrap_servers, topic, PARTITIONS)
    load.start()
    try:
        load.wait_acked(records // 4)
        if fault == "leader-kill":
            node = cluster.leader(topic, 0)
            cluster.kill(node)
        elif fault == "coordinator-kill":
            node = cluster.coordinator(group)
            cluster.kill(node)
        else:
            node = cluster.leader(topic, 0)
            cluster.restart_node(node)
        load.wait_acked(records, timeout=120)
    finally:
        load.stop()
    if not cluster.node(node).running:
        cluster.start_node(node)
    cluster.wait_in_sync(180)
    acked = sum(len(v) for v in load.acked.values())
    end = time.monotonic() + 120
    while len(seen) < acked and time.monotonic() < end:
        time.sleep(0.1)
    stop.set()
    consumer.join(60)
    assert not load.errors, load.errors[:3]
    total = check_exactly_once_in_order(read_partitions(cluster.bootstrap_servers, topic, PARTITIONS),
                                        load.acked, f"{fault} round")
    missing = {f"{p}:{s}" for p, ss in load.acked.items() for s in ss} - seen
    assert not missing, f"{fault}: the group never consumed {sorted(missing)[:10]}"
    name = "confluent-kafka" if load_class is not ProduceLoad else "kio"
    report(f"{name} {fault} (node {node})", load.stall.longest, records=total,
           consumer_stall=f"{consumer_stall.longest:.2f}")
    return load.stall.longest


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=len(FAULTS), help="faults to apply, cycling through the kinds")
    ap.add_argument("--records", type=int, default=3000, help="records acknowledged after each fault")
    ap.add_argument("--confluent", action="store_true", help="also run leader kills with confluent-kafka")
    args = ap.parse_args(argv)
    with KafkaCluster(3) as cluster:
        stalls = defaultdict(list)
        for i in range(args.rounds):
            fault = FAULTS[i % len(FAULTS)]
            stalls[("kio", fault)].append(one_round(cluster, fault, records=args.records))
            if args.confluent and fault == "leader-kill":
                stalls[("confluent-kafka", fault)].append(
                    one_round(cluster, fault, ConfluentLoad, records=args.records))
        print("\nlongest producer stall per case (s):")
        for (client, fault), values in sorted(stalls.items()):
            print(f"  {client:16} {fault:17} max {max(values):.2f}  all {', '.join(f'{v:.2f}' for v in values)}")


if __name__ == "__main__":
    main()
