"""A broker that accepts connections and never answers (the proxy stalls):
every timeout bounds what it promises to bound, and nothing hangs.
Elapsed times are checked against the configured bound plus a generous
slack - correctness bounds, not speed."""
import time

import pytest

from conftest import broker_kinds
from fault_proxy import proxied_broker
from kio import Consumer, KafkaTimeoutError, Producer, TopicPartition as TP
from kproto.errors import KafkaError

SLACK = 2.5


@pytest.fixture(params=broker_kinds())
def proxied(request):
    with proxied_broker(request.param) as bootstrap_and_proxy:
        yield bootstrap_and_proxy


def elapsed_since(start):
    return time.monotonic() - start


def test_request_and_delivery_timeouts_bound_a_record_and_requests_are_retried(proxied):
    bootstrap, proxy = proxied
    with Producer(bootstrap_servers=bootstrap, linger_ms=0, request_timeout_ms=400,
                  delivery_timeout_ms=1500, retry_backoff_ms=50, enable_idempotence=False, acks=1) as p:
        p.send("stalled", b"first", partition=0).result(10)      # the leader's connection is up
        proxy.stall = True
        start = time.monotonic()
        fut = p.send("stalled", b"v", partition=0)
        with pytest.raises(KafkaError, match="delivery.timeout.ms|timed out|Timeout"):
            fut.result(30)
        took = elapsed_since(start)
        m = p.metrics()
    assert 1.0 <= took <= 1.5 + SLACK, took
    assert m["retries"] >= 1, m           # the request timed out, the connection was closed, it was sent again
    assert m["records_failed"] == 1


def test_max_block_ms_bounds_send_waiting_for_metadata(proxied):
    bootstrap, proxy = proxied
    proxy.stall = True
    with Producer(bootstrap_servers=bootstrap, max_block_ms=800, request_timeout_ms=300) as p:
        start = time.monotonic()
        with pytest.raises(KafkaTimeoutError, match="not present in metadata after 800 ms"):
            p.send("never", b"v")
        assert elapsed_since(start) <= 0.8 + SLACK
        start = time.monotonic()
        assert p.flush(1.0) == 0
        assert elapsed_since(start) <= 1.0 + SLACK


def test_consumer_calls_return_within_their_bounds(proxied):
    bootstrap, proxy = proxied
    with Producer(bootstrap_servers=bootstrap) as p:
        p.send("cstall", b"v", partition=0).result(10)
    c = Consumer(bootstrap_servers=bootstrap, group_id="g-stall", enable_auto_commit=True,
                 request_timeout_ms=800, fetch_max_wait_ms=200, default_api_timeout_ms=1000,
                 session_timeout_ms=6000)
    c.assign([TP("cstall", 0)])
    c.seek_to_beginning()
    records = []
    for _ in range(40):
        records += c.poll(0.25)
        if records:
            break
    assert [r.value for r in records] == [b"v"]
    proxy.stall = True
    start = time.monotonic()
    assert c.poll(0.5) == []
    assert elapsed_since(start) <= 0.5 + SLACK
    start = time.monotonic()
    with pytest.raises(KafkaError):
        c.commit(timeout=1.0)
    assert elapsed_since(start) <= 1.0 + SLACK
    start = time.monotonic()
    with pytest.raises(KafkaError):
        c.committed([TP("cstall", 0)], timeout=1.0)
    assert elapsed_since(start) <= 1.0 + SLACK
    start = time.monotonic()
    c.close(timeout=1.0)                   # the auto-commit on close cannot succeed: bounded anyway
    assert elapsed_since(start) <= 1.0 + SLACK
