"""``kio demo``: a produce/consume round trip against a broker, with figures.

Starts the local development broker unless a bootstrap server is given,
creates a topic, produces the records in RecordBatch v2 batches built by
kproto, fetches them back, and verifies count and checksum. Until the
producer and consumer drivers exist it uses the blocking driver directly,
pipelining requests to keep the broker busy.
"""
from __future__ import annotations

import os
import sys
import time
import zlib

from kio.blocking import BlockingClient
from kproto.error_codes import raise_for_code
from kproto.records import BatchBuilder, read_batches

PIPELINE = 5                 # produce requests in flight at once
BATCH_BYTES = 256 * 1024     # one batch per partition per request
FETCH_MAX_BYTES = 8 * 1024 * 1024


def _value(i: int, size: int) -> bytes:
    head = b"%010d:" % i
    return (head + b"x" * size)[:max(size, len(head))]


def _produce(client, topic, leaders, records, value_size, compression):
    """Produce `records` values round-robin over partitions; return the checksum."""
    partitions = sorted(leaders)
    checksum = 0
    i = 0
    in_flight = []
    now_ts = int(time.time() * 1000)
    while i < records:
        per_node: dict[int, list] = {}
        for p in partitions:
            if i >= records:
                break
            b = BatchBuilder(compression, BATCH_BYTES)
            while i < records:
                v = _value(i, value_size)
                if not b.append(now_ts, None, v):
                    break
                checksum = (checksum + zlib.crc32(v)) & 0xFFFFFFFFFFFFFFFF
                i += 1
            per_node.setdefault(leaders[p], []).append({"index": p, "records": b.build()})
        for node, parts in per_node.items():
            body = {"transactional_id": None, "acks": -1, "timeout_ms": 30000,
                    "topic_data": [{"name": topic, "partition_data": parts}]}
            conn = client.node(node)
            in_flight.append((conn, conn.send("Produce", body)))
        while len(in_flight) >= PIPELINE or (i >= records and in_flight):
            conn, req = in_flight.pop(0)
            (resp,) = conn.wait(req)
            for t in resp["responses"]:
                for pr in t["partition_responses"]:
                    raise_for_code(pr["error_code"], pr.get("error_message"),
                                   context=f"produce to {topic}-{pr['index']}")
    return checksum


def _consume(client, topic, leaders, records):
    """Fetch every partition from offset 0 to its end; return (count, checksum)."""
    offsets = {p: 0 for p in leaders}
    done: set[int] = set()
    count = checksum = 0
    while len(done) < len(offsets):
        for p, node in leaders.items():
            if p in done:
                continue
            body = {"replica_id": -1, "max_wait_ms": 100, "min_bytes": 1,
                    "max_bytes": FETCH_MAX_BYTES, "isolation_level": 0,
                    "topics": [{"topic": topic, "partitions": [{
                        "partition": p, "fetch_offset": offsets[p],
                        "partition_max_bytes": FETCH_MAX_BYTES}]}]}
            # Fetch v13+ names topics by id; the demo names them, so v12 at most.
            version = client.node(node).versions.pick("Fetch", max_version=12)
            resp = client.request("Fetch", body, node_id=node, version=version)
            pr = resp["responses"][0]["partitions"][0]
            raise_for_code(pr["error_code"], None, context=f"fetch {topic}-{p}")
            for batch in read_batches(pr["records"] or b""):
                offs, _ts, _keys, values = batch.columns()
                for off, v in zip(offs, values):
                    if off < offsets[p]:
                        continue    # a batch may start before the fetch offset
                    checksum = (checksum + zlib.crc32(v)) & 0xFFFFFFFFFFFFFFFF
                    count += 1
                offsets[p] = max(offsets[p], batch.next_offset)
            if offsets[p] >= pr["high_watermark"]:
                done.add(p)
        if count > records:
            break
    return count, checksum


def run_demo(bootstrap_servers=None, records=1_000_000, value_size=100, partitions=3,
             compression="lz4", out=sys.stdout) -> int:
    broker = None
    if bootstrap_servers is None:
        from kio.broker import LocalBroker
        broker = LocalBroker().start()
        bootstrap_servers = broker.bootstrap_servers
        print(f"started local broker on {bootstrap_servers}", file=out)
    try:
        topic = f"kio-demo-{os.getpid()}-{int(time.time())}"
        with BlockingClient(bootstrap_servers, client_id="kio-demo") as client:
            resp = client.request("CreateTopics", {"topics": [{
                "name": topic, "num_partitions": partitions, "replication_factor": 1}],
                "timeout_ms": 10000})
            for t in resp["topics"]:
                raise_for_code(t["error_code"], t.get("error_message"), context=f"create {topic}")
            leaders = client.leaders(topic)
            print(f"topic {topic}: {partitions} partitions; producing {records:,} records "
                  f"of {value_size} bytes ({compression})", file=out)

            t0, c0 = time.perf_counter(), time.process_time()
            sent_sum = _produce(client, topic, leaders, records, value_size, compression)
            t1, c1 = time.perf_counter(), time.process_time()
            print(f"produced {records:,} records in {t1 - t0:.2f} s: "
                  f"{records / (t1 - t0):,.0f} records/s, client CPU "
                  f"{(c1 - c0) / records * 1e6:.2f} us/record", file=out)

            count, got_sum = _consume(client, topic, leaders, records)
            t2, c2 = time.perf_counter(), time.process_time()
            print(f"consumed {count:,} records in {t2 - t1:.2f} s: "
                  f"{count / (t2 - t1):,.0f} records/s, client CPU "
                  f"{(c2 - c1) / max(count, 1) * 1e6:.2f} us/record", file=out)
        ok = count == records and got_sum == sent_sum
        print(f"verification: count {count:,}/{records:,}, checksum "
              f"{got_sum:016x} vs {sent_sum:016x}: {'OK' if ok else 'MISMATCH'}", file=out)
        return 0 if ok else 1
    finally:
        if broker is not None:
            broker.stop()
            print("stopped local broker", file=out)
