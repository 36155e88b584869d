"""Per-request timings of the Produce requests in a Kafka broker's request log.

The broker writes one line per completed request when ``kafka.request.logger``
is at DEBUG (``KafkaBroker(jvm_options=["-Dlog4j2.configurationFile=<file>"])``
with that logger in the file: see README.md here). This sums, per client id,
how many partitions each Produce request carried and where the broker's time
went (queue, local = the append, remote = purgatory, throttle, response queue,
send)::

    python bench/broker_profile/request_log.py request.log [client-id ...]
"""
import json
import statistics as st
import sys

FIELDS = ["totalTimeMs", "requestQueueTimeMs", "localTimeMs", "remoteTimeMs", "throttleTimeMs",
          "responseQueueTimeMs", "sendTimeMs"]


def produce_requests(path, clients=()):
    """(partitions, {field: ms}, client id, version) of each Produce request logged in ``path``."""
    for line in open(path):
        i = line.find("Completed request:")
        if i < 0 or '"requestApiKey":0,' not in line:
            continue
        d = json.loads(line[i + len("Completed request:"):])
        header = d["requestHeader"]
        if clients and header["clientId"] not in clients:
            continue
        # the response lists every partition of the request (the request body is logged only at TRACE)
        resp = d.get("response") or {}
        parts = sum(len(t.get("partitionResponses", [])) for t in resp.get("responses", []))
        yield parts, {f: d[f] for f in FIELDS}, header["clientId"], header["requestApiVersion"]


def main():
    rows = list(produce_requests(sys.argv[1], set(sys.argv[2:])))
    print("requests", len(rows), "clients", sorted({r[2] for r in rows}), "versions", sorted({r[3] for r in rows}))
    if not rows:
        return
    columns = [("partitions", [r[0] for r in rows])] + [(f, [r[1][f] for r in rows]) for f in FIELDS]
    for name, v in columns:
        print(f"{name:20s} sum {sum(v):12.1f} mean {st.mean(v):10.2f} median {st.median(v):10.2f} max {max(v):10.1f}")
    partitions = sum(r[0] for r in rows)
    print(f"localTimeMs per partition (sum / sum): {sum(r[1]['localTimeMs'] for r in rows) / partitions:.3f}")


if __name__ == "__main__":
    main()
