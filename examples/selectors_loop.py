"""kproto in a plain ``selectors`` loop - no kio, no threads: the whole
driver a sans-IO core needs, then a produce and a consume with it.

    python examples/selectors_loop.py 127.0.0.1:9092 [records]

Any event loop can drive the cores the same way: open a socket for each
``Connect``, close it on ``Close``, write ``core.output(node)`` and report
``core.sent``, feed what arrives to ``core.received``, and wake up by
``core.next_deadline``.
"""
import selectors
import socket
import sys
import time
import uuid

from kproto.client import Close, Connect
from kproto.consumer.core import ConsumerCore
from kproto.producer import ProducerCore, complete_results


def now_ms():
    return time.monotonic() * 1000.0


class Loop:
    """The sockets of one core; ``run_until(done)`` drives it."""

    def __init__(self, core):
        self.core, self.sel, self.socks, self.connecting = core, selectors.DefaultSelector(), {}, set()

    def run_until(self, done, timeout_s=30.0, on_events=None):
        core, sel, socks, connecting = self.core, self.sel, self.socks, self.connecting
        end = time.monotonic() + timeout_s
        while not done():
            if time.monotonic() > end:
                raise TimeoutError("the broker did not answer in time")
            now = now_ms()
            for action in core.poll(now):
                if isinstance(action, Connect):
                    sock = socket.socket()
                    sock.setblocking(False)
                    sock.connect_ex((action.host, action.port))
                    socks[action.node] = sock
                    connecting.add(action.node)
                    sel.register(sock, selectors.EVENT_WRITE, action.node)
                elif isinstance(action, Close) and action.node in socks:
                    self._drop(action.node)
            for node in core.nodes_with_output():
                if node in socks and node not in connecting:
                    core.sent(node, socks[node].send(core.output(node)), now)
            if on_events is not None:
                on_events()
            deadline = core.next_deadline(now)
            wait = 0.1 if deadline is None else max(0.0, min(0.1, (deadline - now_ms()) / 1000.0))
            for key, _ in sel.select(wait):
                node, sock = key.data, key.fileobj
                if node in connecting:
                    connecting.discard(node)
                    sel.modify(sock, selectors.EVENT_READ, node)
                    core.connected(node, now_ms())
                    continue
                data = sock.recv(1 << 20)
                if data:
                    core.received(node, data, now_ms())
                else:
                    self._drop(node)
                    core.disconnected(node, now_ms(), None)

    def _drop(self, node):
        sock = self.socks.pop(node)
        self.connecting.discard(node)
        self.sel.unregister(sock)
        sock.close()

    def close(self):
        for node in list(self.socks):
            self._drop(node)
        self.sel.close()


def main(bootstrap, records=1000):
    topic = f"selectors-{uuid.uuid4().hex[:8]}"
    producer = ProducerCore({"bootstrap.servers": bootstrap, "linger.ms": 5})
    loop = Loop(producer)
    loop.run_until(lambda: producer.partitions_for(topic, now_ms()) is not None)
    handles = [producer.send(topic, b"value-%d" % i, key=b"%d" % i, now=now_ms()) for i in range(records)]
    loop.run_until(lambda: all(h.done for h in handles), on_events=lambda: complete_results(producer.events()))
    loop.close()
    failed = [h.error for h in handles if h.error is not None]
    print(f"produced {records - len(failed)} records to {topic}" + (f", {len(failed)} failed" if failed else ""))

    consumer = ConsumerCore({"bootstrap.servers": bootstrap, "group.id": f"{topic}-g",
                             "auto.offset.reset": "earliest", "session.timeout.ms": 6000})
    consumer.subscribe([topic], now_ms())
    seen = {}

    def take():
        consumer.events()                  # rebalance events: nothing to do in this example
        consumer.poll_called(now_ms())
        for r in consumer.drain():
            seen[r.key] = r.value
    loop = Loop(consumer)
    loop.run_until(lambda: len(seen) >= records, on_events=take)
    loop.close()
    ok = seen == {b"%d" % i: b"value-%d" % i for i in range(records)}
    print(f"consumed {len(seen)} records: {'all match' if ok else 'MISMATCH'}")
    return 0 if ok and not failed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1000))
