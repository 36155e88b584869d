"""The Produce and Fetch requests and answers of every client on the wire
(``bench_latency.py --wire``): one capture of the broker's loopback port for
the whole run, so kio and confluent-kafka are measured the same way, by the
kernel, with no instrument inside either client.

A raw packet socket (``AF_PACKET``, root; Linux) on ``lo`` with a kernel
filter for the broker's TCP port keeps, for each segment that starts a Kafka
request (Produce or Fetch header: size, api key, version, correlation id) or
the answer to one (size, correlation id matching a request of that
connection), the kernel's receive time (``SO_TIMESTAMPNS``). ``capture``
runs in a process of its own until stdin closes, then writes them as JSON:
``[[µs, client port, "q" or "a", api key, correlation id], ...]``.

``wire_summary(trace_dir, wire_json)`` then splits each slow episode of the
traced runs (``--trace``, ``--split``) at the wire: on the producer's side,
send → its Produce on the wire (the client: linger.ms and its thread) and
that Produce → its answer (the broker); on the consumer's side, whether a
Fetch was waiting at the append, the broker's append → its Fetch answer on
the wire (the broker) and that answer → the record in the application's
hands (the client). Whole runs, too: how often the broker took more than
5 ms to answer a Produce, or to answer a waiting Fetch after it answered the
Produce whose records it carried.
"""
from __future__ import annotations

import bisect
import ctypes
import glob
import json
import os
import socket
import struct
import sys
import threading

ETH_P_ALL = 0x0003
SO_ATTACH_FILTER = 26
SO_TIMESTAMPNS = 35
PRODUCE, FETCH = 0, 1


def _filter(port: int) -> bytes:
    """Classic BPF for "IPv4 TCP, source or destination port ``port``,
    first fragment" (tcpdump -dd 'ip and tcp port N', by hand)."""
    ins = [
        (0x28, 0, 0, 12),            # ldh [12]: ethertype
        (0x15, 0, 10, 0x0800),       # IPv4, else drop
        (0x30, 0, 0, 23),            # ldb [23]: protocol
        (0x15, 0, 8, 6),             # TCP, else drop
        (0x28, 0, 0, 20),            # ldh [20]: fragment offset
        (0x45, 6, 0, 0x1FFF),        # a later fragment: drop
        (0xB1, 0, 0, 14),            # ldxb 4*([14]&0xf): IP header length
        (0x48, 0, 0, 14),            # ldh [x+14]: source port
        (0x15, 2, 0, port),          # the broker's: keep
        (0x48, 0, 0, 16),            # ldh [x+16]: destination port
        (0x15, 0, 1, port),          # the broker's: keep, else drop
        (0x06, 0, 0, 0x40000),       # keep (up to 256 KiB)
        (0x06, 0, 0, 0),             # drop
    ]
    return b"".join(struct.pack("HBBI", *i) for i in ins)


def capture(port: int, out_path: str, stop: threading.Event | None = None,
            ready: threading.Event | None = None) -> None:
    """Capture until ``stop`` is set (None: until stdin closes; see the
    module docstring); ``ready`` is set once the socket listens."""
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    prog = _filter(port)
    buf = ctypes.create_string_buffer(prog)
    fprog = struct.pack("HL", len(prog) // 8, ctypes.addressof(buf))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    sock.bind(("lo", 0))
    sock.settimeout(0.2)
    done = stop
    if done is None:
        done = threading.Event()
        threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    if ready is not None:
        ready.set()
    pending = {}                 # client port -> {correlation id: api key}
    out = []
    seen = set()                 # loopback shows each segment twice (out and in): keep one
    draining = False
    while True:
        if not draining and done.is_set():
            draining = True              # what the socket holds already, then stop
            sock.settimeout(0.05)
        try:
            data, anc, _, addr = sock.recvmsg(1 << 18, 64)
        except socket.timeout:
            if draining:
                break
            continue
        if addr[2] == socket.PACKET_OUTGOING:
            continue
        t = 0
        for _, kind, d in anc:
            if kind == SO_TIMESTAMPNS:
                sec, ns = struct.unpack_from("qq", d)
                t = sec * 1_000_000 + ns // 1000
        ihl = (data[14] & 0x0F) * 4
        tcp = 14 + ihl
        sport, dport, seq = struct.unpack_from("!HHI", data, tcp)
        payload = data[tcp + (data[tcp + 12] >> 4) * 4:]
        if len(payload) < 8:
            continue
        key = (sport, dport, seq)
        if key in seen:
            continue
        seen.add(key)
        if len(seen) > 100_000:
            seen.clear()
        if dport == port and len(payload) >= 12:
            size, api, version, corr = struct.unpack_from("!ihhi", payload)
            if api in (PRODUCE, FETCH) and 0 <= version < 32 and size >= 8:
                pending.setdefault(sport, {})[corr] = api
                out.append((t, sport, "q", api, corr))
        elif sport == port:
            size, corr = struct.unpack_from("!ii", payload)
            api = pending.get(dport, {}).pop(corr, None)
            if api is not None:
                out.append((t, dport, "a", api, corr))
    with open(out_path, "w") as f:
        json.dump(out, f)


# -- the analysis ------------------------------------------------------------------------------------

def _load_wire(path):
    """{client port: {"q": {api: [µs...]}, "a": {api: [µs...]}, "pairs": {api: [(q µs, a µs)...]}}}"""
    with open(path) as f:
        events = json.load(f)
    conns = {}
    asked = {}
    for t, port, kind, api, corr in sorted(events):
        c = conns.setdefault(port, {"q": {}, "a": {}, "pairs": {}})
        c[kind].setdefault(api, []).append(t)
        if kind == "q":
            asked[(port, corr)] = t
        else:
            q = asked.pop((port, corr), None)
            if q is not None:
                c["pairs"].setdefault(api, []).append((q, t))
    return conns


def _busiest(conns, api, start, end):
    """The connection with the most requests of ``api`` in [start, end]: the run's producer (Produce) or consumer (Fetch)."""
    best, n = None, 0
    for port, c in conns.items():
        times = c["q"].get(api, [])
        k = bisect.bisect_right(times, end) - bisect.bisect_left(times, start)
        if k > n:
            best, n = port, k
    return best


def _pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def wire_summary(trace_dir: str, wire_path: str, threshold_ms: int = 10) -> str:
    """Per client pair, over its runs in ``trace_dir``: episodes > ``threshold_ms``
    split at the wire, and the broker's turnarounds over the whole runs
    (see the module docstring). Markdown."""
    import _tail_trace as tt
    conns = _load_wire(wire_path)
    rows = {}
    for cons_path in sorted(glob.glob(os.path.join(trace_dir, "*-consume.json"))):
        p, c = tt._load(cons_path)
        sent, arrived, appended = c["sent"], c["arrived"], c.get("appended") or []
        if not appended:
            continue
        start, end = min(sent), max(arrived)
        pport, cport = _busiest(conns, PRODUCE, start, end), _busiest(conns, FETCH, start, end)
        if pport is None or cport is None:
            continue
        pairs_p = sorted(x for x in conns[pport]["pairs"].get(PRODUCE, []) if start <= x[0] <= end)
        pairs_f = [x for x in conns[cport]["pairs"].get(FETCH, []) if start <= x[0] <= end]
        fa = [a for _, a in pairs_f]
        r = rows.setdefault((p["client"], c["client"]), {
            "seconds": 0.0, "episodes": 0, "client_p": 0, "broker_p": 0, "broker_c": 0, "client_c": 0,
            "late_fetch": 0, "produce_rt": [], "fetch_after_produce": [], "fetch_turn": []})
        r["seconds"] += (end - start) / 1e6
        r["produce_rt"] += [a - q for q, a in pairs_p]
        # a Fetch waiting when the broker answered a Produce: its answer that long after
        for q, a in pairs_p:
            k = bisect.bisect_left(fa, a - 200)      # (two threads of the broker: allow 0.2 ms before)
            if k < len(pairs_f):
                fq, fans = pairs_f[k]
                if fq < q:                           # it was waiting before the Produce came
                    r["fetch_after_produce"].append(fans - a)
        # the consumer: its answer → its next Fetch
        for (_, a1), (q2, _) in zip(pairs_f, pairs_f[1:]):
            r["fetch_turn"].append(q2 - a1)
        lat = [a - s for s, a in zip(sent, arrived)]
        for ep in tt.episodes(sent, lat, threshold_ms * 1000):
            i = max(ep, key=lat.__getitem__)
            r["episodes"] += 1
            # the first Produce on the wire after its send() carried it
            k = bisect.bisect_left(pairs_p, (sent[i],))
            if k >= len(pairs_p):
                continue
            pair = pairs_p[k]
            # the four parts of its latency: the biggest names who held it
            wire_q, wire_a = pair
            fk = bisect.bisect_left(fa, appended[i])
            fetch_ans = fa[fk] if fk < len(fa) else arrived[i]
            if fetch_ans > arrived[i]:
                fetch_ans = arrived[i]
            parts = {"client_p": wire_q - sent[i] - tt.LINGER_US, "broker_p": wire_a - wire_q,
                     "broker_c": fetch_ans - max(wire_a, appended[i]), "client_c": arrived[i] - fetch_ans}
            r[max(parts, key=parts.get)] += 1
            fq = pairs_f[fk][0] if fk < len(pairs_f) else None
            r["late_fetch"] += fq is not None and fq > wire_a
    out = [f"| producer → consumer | episodes > {threshold_ms} ms per min | most of it: the producer client "
           "(send → Produce on the wire, past linger.ms) | the broker's Produce (request → answer) | the broker's "
           "Fetch answer (Produce answered → Fetch answered) | the consumer client (Fetch answer → in the "
           "application's hands) | Produce answers > 5 ms per min (p99 ms) | waiting Fetch answered > 5 ms after "
           "the Produce, per min (p99 ms) | consumer: answer → next Fetch p50 / p99 ms |",
           "|---|---|---|---|---|---|---|---|---|"]
    for (prod, cons), r in sorted(rows.items()):
        m = 60 / r["seconds"] if r["seconds"] else 0
        rt, fap, ft = r["produce_rt"], r["fetch_after_produce"], r["fetch_turn"]
        out.append(
            f"| {prod} → {cons} | {r['episodes'] * m:.1f} | {r['client_p'] * m:.1f} | {r['broker_p'] * m:.1f} | "
            f"{r['broker_c'] * m:.1f} | {r['client_c'] * m:.1f} | "
            f"{sum(x > 5000 for x in rt) * m:.1f} ({_pct(rt, 0.99) / 1000:.1f}) | "
            f"{sum(x > 5000 for x in fap) * m:.1f} ({_pct(fap, 0.99) / 1000:.1f}) | "
            f"{_pct(ft, 0.5) / 1000:.2f} / {_pct(ft, 0.99) / 1000:.2f} |")
    return "\n".join(out)


if __name__ == "__main__":
    if sys.argv[1] == "--capture":
        capture(int(sys.argv[2]), sys.argv[3])
    else:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        print(wire_summary(sys.argv[1], sys.argv[2]))
