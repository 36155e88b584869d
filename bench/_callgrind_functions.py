"""The quiet threading producer's network thread, function by function: the
inclusive instructions per batch of the compiled functions on its path, from
``bench/quiet_producer.py --callgrind N1,N2`` runs (the difference of the two
runs' network-thread files over the difference of their batches, as the
script's own total)::

    python bench/quiet_producer.py --bootstrap HOST:PORT --client kio --rate 20 --callgrind 50,200 > before.json
    python bench/quiet_producer.py ... > after.json
    python bench/_callgrind_functions.py before.json after.json

Each file holds the script's JSON line (its ``out`` names the callgrind
files).

``--consumer`` does the same for the consumer's core, per record, from
``bench/consumer_cost.py --callgrind N0,N1 --keep DIR`` runs (their last
line is a JSON line naming DIR)::

    python bench/consumer_cost.py --partitions 1 --per-fetch 1 --callgrind 500,1500 --keep /tmp/a > a.json
    python bench/_callgrind_functions.py --consumer a.json b.json

Prints a Markdown table, one column per file. Functions are matched by
class and method name, whatever number Cython gave the method (a class made
an extension type renumbers them), through their Cython wrapper
(``__pyx_pw_...``) or a cpdef's C function: only compiled code shows
(the drivers' Python runs under the interpreter and is counted by
``--opcodes``). Needs ``callgrind_annotate`` (valgrind).
"""
from __future__ import annotations

import json
import re
import subprocess
import sys

#: label -> the end of its Cython wrapper's C name
FUNCTIONS = {
    "Sender.run_once": "Sender_5run_once",
    "Sender._drain_ready": "Sender_7_drain_ready",
    "RecordAccumulator.ready": "RecordAccumulator_21ready",
    "RecordAccumulator.drain": "RecordAccumulator_29drain",
    "Sender._send_produce": "Sender_19_send_produce",
    "NetworkClient.send": "NetworkClient_23send",
    "Connection.send": "Connection_31send",
    "Connection._enqueue": "Connection_33_enqueue",
    "NetworkClient.sent": "NetworkClient_61sent",
    "NetworkClient.received": "NetworkClient_53received",
    "Connection.receive_data": "Connection_43receive_data",
    "Connection._handle_frame": "Connection_45_handle_frame",
    "read_acknowledged": "_produce_answer_1read_acknowledged",
    "Connection._run_callbacks": "Connection_73_run_callbacks",
    "Sender._on_produce": "Sender_33_on_produce",
    "NetworkClient.poll": "NetworkClient_73poll",
    "NetworkClient.next_deadline": "NetworkClient_79next_deadline",
    "NetworkClient.nodes_with_output": "NetworkClient_57nodes_with_output",
}


#: label -> (module, class and method) of the consumer's core, for --consumer
CONSUMER_FUNCTIONS = {
    "Fetcher.fetch_requests": r"fetcher_\d+Fetcher_\d+fetch_requests",
    "Fetcher._quiet_request": r"fetcher_\d+Fetcher_\d*_quiet_request",
    "Fetcher._request": r"fetcher_\d+Fetcher_\d*_request",
    "Fetcher._planned_requests": r"fetcher_\d+Fetcher_\d+_planned_requests",
    "Fetcher._incremental": r"fetcher_\d+Fetcher_\d+_incremental",
    "Fetcher._requests": r"fetcher_\d+Fetcher_\d+_requests",
    "Fetcher._build": r"fetcher_\d+Fetcher_\d+_build",
    "FetchPlan.update": r"fetch_plan_\d+FetchPlan_\d+update",
    "select_fetchable": r"_fetch_\d+select_fetchable",
    "fetch_partitions": r"_fetch_\d+fetch_partitions",
    "Fetcher.on_fetch_response": r"fetcher_\d+Fetcher_\d*on_fetch_response",
    "apply_fetch_answer": r"_fetch_\d+apply_fetch_answer",
    "Fetcher._take_records": r"fetcher_\d+Fetcher_\d*_take_records",
    "take_records (C)": r"_fetch_\d*_take_records",
    "decode_fetch_response": r"_fetch_\d+decode_fetch_response",
    "Fetcher.drain_columns": r"fetcher_\d+Fetcher_\d+drain_columns",
    "drain_columns (C)": r"_fetch_\d+drain_columns",
    "FetchSession.sent": r"FetchSession_\d+sent",
    "FetchSession.on_response": r"FetchSession_\d+on_response",
    "FetchSession.is_full": r"FetchSession_\d+is_full",
    "NetworkClient.received": r"NetworkClient_\d+received",
    "NetworkClient.send": r"NetworkClient_\d+send",
    "NetworkClient.poll": r"NetworkClient_\d+poll",
}


def inclusive(path: str) -> dict:
    """{function: inclusive instructions} of one callgrind output file."""
    out = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", path],
                         capture_output=True, text=True, check=True).stdout
    costs: dict = {}
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(\S.*)", line)
        if m and ":" in m.group(2) and "=>" not in line:
            name = re.sub(r"\s*\[.*\]$", "", m.group(2).strip())
            costs[name] = costs.get(name, 0) + int(m.group(1).replace(",", ""))
    return costs


def per_batch(result: dict) -> dict:
    """{label: inclusive instructions per batch} of one --callgrind result."""
    a = inclusive(result["out"] + "/a.out-02")
    b = inclusive(result["out"] + "/b.out-02")
    batches = result["batches"][1] - result["batches"][0]
    return {label: _cost(a, b, suffix) / batches for label, suffix in FUNCTIONS.items()}


def _cost(a: dict, b: dict, suffix: str) -> float:
    """b - a of one function: its Python wrapper (``__pyx_pw_``), whatever
    its method number (it moves as methods are added or become cpdef), or
    for a cpdef method of an extension type (kproto/*.pxd) its C function
    (``__pyx_f_``), which counts the C calls that bypass the wrapper too."""
    owner, _, name = re.match(r"(.*?)_(\d+)(.+)$", suffix).groups()
    for pattern in (r"__pyx_f_\w*" + re.escape(owner) + "_" + re.escape(name) + r"$",
                    r"__pyx_pw_\w*" + re.escape(owner) + r"_\d+" + re.escape(name) + r"$"):
        found = [k for k in b if re.search(pattern, k)]
        if found:
            return sum(b[k] - a.get(k, 0) for k in found)
    return 0


def per_record(result: dict) -> dict:
    """{label: inclusive instructions per record} of one consumer_cost.py --keep result."""
    n0, n1 = result["records"]
    a = inclusive(f"{result['out']}/cg.{n0}")
    b = inclusive(f"{result['out']}/cg.{n1}")
    got = {}
    for label, name in CONSUMER_FUNCTIONS.items():
        # a def's Python wrapper (__pyx_pw_), or for a cpdef/cdef called from
        # C its C function (__pyx_f_): the larger of the two (the wrapper
        # includes the function when only Python calls it)
        found = []
        for kind in ("pw", "f"):
            pattern = re.compile(r"__pyx_" + kind + r"_\w*?\d" + name + r"$")
            found.append(sum(b[k] - a.get(k, 0) for k in b if pattern.search(k)))
        got[label] = max(found) / (n1 - n0)
    return got


def main_consumer(paths: list) -> None:
    results = [json.loads(open(p).read().strip().splitlines()[-1]) for p in paths]
    rows = [per_record(r) for r in results]
    print("| per record (inclusive) | " + " | ".join(paths) + " |")
    print("|---|" + "---|" * len(paths))
    print("| **whole process** | " + " | ".join(f"**{r['instructions_per_record']:,}**" for r in results) + " |")
    for label in CONSUMER_FUNCTIONS:
        print(f"| `{label}` | " + " | ".join(f"{row[label]:,.0f}" for row in rows) + " |")


def main(paths: list) -> None:
    results = [json.loads(open(p).read().strip().splitlines()[-1]) for p in paths]
    rows = [per_batch(r) for r in results]
    print("| per batch (inclusive) | " + " | ".join(paths) + " |")
    print("|---|" + "---|" * len(paths))
    print("| **network thread** | " + " | ".join(f"**{r['network_instructions_per_batch']:,}**" for r in results) + " |")
    print("| rounds per batch | " + " | ".join(str(r["rounds_per_batch"]) for r in results) + " |")
    print("| per round | " + " | ".join(f"{r['network_instructions_per_round']:,}" for r in results) + " |")
    for label in FUNCTIONS:
        print(f"| `{label}` | " + " | ".join(f"{row[label]:,.0f}" for row in rows) + " |")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--consumer"]:
        main_consumer(sys.argv[2:])
    else:
        main(sys.argv[1:])
