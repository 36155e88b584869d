"""A fault-injecting TCP proxy for the test suite (loopback only).

    proxy = FaultProxy(upstream=("127.0.0.1", broker_port)).start()
    broker = LocalBroker(advertised_port=proxy.port)      # all client traffic crosses the proxy
    proxy.cut_all()                  # reset every connection now
    proxy.cut_randomly(every_s=0.1)  # ... and keep doing it at random intervals
    proxy.delay = 0.05               # seconds added to each chunk, both ways
    proxy.stall = True               # accept and read, but never forward or answer
    proxy.truncate_next()            # forward part of the next broker answer, then close
    proxy.stop()

One thread accepts; each connection gets one thread per direction. Every
socket has a timeout, so nothing outlives ``stop()`` by more than a moment.
"""
from __future__ import annotations

import random
import select
import socket
import struct
import threading
import time

__all__ = ["FaultProxy"]


class FaultProxy:
    def __init__(self, upstream, host="127.0.0.1", port=0, seed=1):
        self.upstream = upstream
        self._listen = socket.create_server((host, port))
        self._listen.settimeout(0.2)
        self.host, self.port = self._listen.getsockname()[:2]
        self.delay = 0.0
        self.stall = False
        self.refuse = False             # close new connections at once
        self._truncate = False
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._pairs: list = []          # (client socket, upstream socket)
        self._stop = threading.Event()
        self._cutter = None
        self.cuts = 0                   # connections cut so far
        self.accepted = 0
        self._threads: list = []

    # -- control -------------------------------------------------------------------------------
    def start(self) -> "FaultProxy":
        self._spawn(self._accept_loop)
        return self

    def stop(self) -> None:
        self._stop.set()
        self.stop_cutting()
        self.cut_all(count=False)
        self._listen.close()
        for t in self._threads:
            t.join(5)

    def cut_all(self, count=True) -> int:
        """Reset every open connection (RST: SO_LINGER 0)."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for a, b in pairs:
            for s in (a, b):
                try:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    s.close()
                except OSError:
                    pass
        if count:
            self.cuts += len(pairs)
        return len(pairs)

    def cut_randomly(self, every_s=0.1) -> None:
        """Cut all connections at random intervals averaging ``every_s``."""
        self.stop_cutting()
        done = threading.Event()

        def loop():
            while not done.is_set() and not self._stop.is_set():
                done.wait(self._rng.uniform(0.2, 1.8) * every_s)
                if not done.is_set():
                    self.cut_all()
        self._cutter = (done, self._spawn(loop))

    def stop_cutting(self) -> None:
        if self._cutter is not None:
            done, thread = self._cutter
            done.set()
            thread.join(5)
            self._cutter = None

    def truncate_next(self) -> None:
        """The next chunk from the broker is cut in half and the connection closed."""
        self._truncate = True

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # -- internals -------------------------------------------------------------------------------
    def _spawn(self, fn, *args):
        t = threading.Thread(target=fn, args=args, daemon=True, name="fault-proxy")
        t.start()
        self._threads.append(t)
        return t

    def _accept_loop(self):
        while not self._stop.is_set():
            try:
                client, _ = self._listen.accept()
            except (socket.timeout, OSError):
                continue
            self.accepted += 1
            if self.refuse:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            for s in (client, upstream):
                s.settimeout(10)         # sends; reads wait in select() so stop() is seen
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._pairs.append((client, upstream))
            self._spawn(self._pump, client, upstream, False)
            self._spawn(self._pump, upstream, client, True)

    def _pump(self, src, dst, from_broker):
        while not self._stop.is_set():
            try:
                readable, _, _ = select.select([src], [], [], 0.2)
                if not readable:
                    continue
                data = src.recv(65536)
            except (OSError, ValueError):        # closed by cut_all meanwhile
                break
            if not data:
                break
            if self.stall:
                continue                 # swallowed: the other side waits forever
            if self.delay:
                time.sleep(self.delay)
            if from_broker and self._truncate:
                self._truncate = False
                try:
                    dst.sendall(data[:max(1, len(data) // 2)])
                except OSError:
                    pass
                break
            try:
                dst.sendall(data)
            except OSError:
                break
        self._close_pair(src, dst)

    def _close_pair(self, a, b):
        with self._lock:
            self._pairs = [p for p in self._pairs if a not in p]
        for s in (a, b):
            try:
                s.close()
            except OSError:
                pass
