"""Where a JVM's threads were, from a Flight Recorder recording (JDK 17 has no ``jfr view``).

Counts the events of one type (``jdk.ExecutionSample``: running Java code;
``jdk.NativeMethodSample``: in native code) by thread, then, for the threads
whose name contains FILTER, by their top DEPTH frames and by every method
anywhere in the stack (inclusive)::

    python bench/broker_profile/jfr_stacks.py broker.jfr jdk.ExecutionSample request-handler [DEPTH]
"""
import collections
import json
import subprocess
import sys


def frame(f):
    m = f["method"]
    return f'{m["type"]["name"].split(".")[-1]}.{m["name"]}'


def main():
    path, event = sys.argv[1], sys.argv[2]
    thread_filter = sys.argv[3] if len(sys.argv) > 3 else ""
    depth = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    out = subprocess.run(["jfr", "print", "--json", "--stack-depth", "64", "--events", event, path],
                         capture_output=True, text=True, check=True).stdout
    events = json.loads(out)["recording"]["events"]
    by_thread, top, inclusive = collections.Counter(), collections.Counter(), collections.Counter()
    for e in events:
        v = e["values"]
        thread = (v.get("sampledThread") or v.get("eventThread") or {}).get("javaName", "?")
        by_thread[thread] += 1
        frames = (v.get("stackTrace") or {}).get("frames") or []
        if thread_filter not in thread or not frames:
            continue
        top[" < ".join(frame(f) for f in frames[:depth])] += 1
        for name in {frame(f) for f in frames}:
            inclusive[name] += 1
    n = sum(c for t, c in by_thread.items() if thread_filter in t) or 1
    print(f"{event}: {len(events)} events; by thread:")
    for t, c in by_thread.most_common(12):
        print(f"  {c:6d} {t}")
    print(f"top frames of threads matching {thread_filter!r} ({n} samples):")
    for f, c in top.most_common(25):
        print(f"  {c:6d} {100 * c / n:5.1f}% {f}")
    print("inclusive:")
    for f, c in inclusive.most_common(40):
        print(f"  {c:6d} {100 * c / n:5.1f}% {f}")


if __name__ == "__main__":
    main()
