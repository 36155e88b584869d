"""Typing and documentation of the public API (issue 15, point 8).

* mypy in strict mode on a small program that uses the Producer, Consumer and
  Admin of every driver (threading, asyncio, trio) and kio.errors: it fails
  on a call to an unannotated public function (``no-untyped-call``), on a
  result typed ``Any`` where the program expects a type, and on a class type
  checkers cannot see (the async classes used to be made with ``type()``);
* every public method of those classes is annotated and has a docstring of
  its own (``help()`` must not fall back to a source comment);
* py.typed and the stubs are shipped.
"""
import inspect
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import kio
import kio.aio
import kio.trio
from kio._async.clients import RecordHandle
from kio.producer import InOrderAcker

ROOT = Path(__file__).resolve().parent.parent

PUBLIC_CLASSES = [kio.Producer, kio.Consumer, kio.ShareConsumer, kio.Admin, InOrderAcker,
                  kio.aio.Producer, kio.aio.Consumer, kio.aio.ShareConsumer, kio.aio.Admin,
                  kio.trio.Producer, kio.trio.Consumer, kio.trio.ShareConsumer, kio.trio.Admin, RecordHandle]

# The program is only type-checked, never run. Annotated assignments pin the
# types: a method that returned Any, or the wrong type, fails the check.
EXAMPLE = '''
import re
import uuid
from typing import Dict, List, Optional, Set

import trio

import kio.aio
import kio.trio
from kio import (
    AcknowledgeType, Admin, Consumer, OffsetAndMetadata, Producer, RecordMetadata, ShareConsumer, ShareRecord,
    TopicPartition,
)
from kio.admin import ConfigResource, NewTopic
from kio.errors import (
    AdminTimeoutError, BrokerError, KafkaError, KafkaTimeoutError, NotLeaderOrFollowerError,
    RequestTimedOutError, TopicAlreadyExistsError,
)
from kio.producer import BulkResult, InOrderAcker
from kproto.admin import AdminHandle, ConsumerLag, TopicDescription, TopicListing
from kproto.share.admin import ShareGroupDescription, SharePartitionOffset
from kproto.consumer.core import OffsetAndTimestamp


def on_assign(partitions: List[TopicPartition]) -> None:
    print(partitions)


async def on_revoke(partitions: List[TopicPartition]) -> None:
    print(partitions)


def threading_clients() -> None:
    with Producer(bootstrap_servers="127.0.0.1:9092", linger_ms=5) as producer:
        future = producer.send("t", b"v", key="k", headers=[("h", b"1")],
                               on_delivery=lambda err, md: print(err, md))
        metadata: RecordMetadata = future.result(timeout=10)
        offset: int = metadata.offset + 1
        partition: int = metadata.partition
        bulk: BulkResult = producer.send_many("t", [b"a", b"b"], keys=[None, b"k"]).result()
        delivered: int = bulk.count
        pending: int = producer.flush(1.0)
        partitions: int = producer.partitions_for("t")
        linger = producer.config.linger_ms
        acker = InOrderAcker(producer, on_release=lambda token, err: print(token, err))
        acker.send("t", b"v", token=1).result()
        position: int = acker.acked_position

    with Consumer(bootstrap_servers="127.0.0.1:9092", group_id="g") as consumer:
        consumer.subscribe(["t"], on_assign=on_assign, on_revoke=on_assign)
        consumer.subscribe(re.compile("t-.*"))
        for record in consumer.poll(1.0, max_records=10):
            value: Optional[bytes] = record.value
            record_offset: int = record.offset
            headers = record.headers
        for batch in consumer.poll_batch(arrow=True):
            n: int = len(batch)
        tp = TopicPartition("t", 0)
        consumer.seek(tp, 5)
        consumer.seek(("t", 0), 5)
        consumer.seek_to_beginning([tp])
        next_offset: int = consumer.position(tp, timeout=5)
        committed: Optional[OffsetAndMetadata] = consumer.committed([tp])[tp]
        consumer.commit({tp: 5})
        consumer.commit(asynchronous=True, callback=lambda offsets, err: print(offsets, err))
        ends: Dict[TopicPartition, Optional[int]] = consumer.end_offsets([tp])
        lag: Optional[int] = consumer.lag(tp)
        assigned: Set[TopicPartition] = consumer.assignment()
        found: Optional[OffsetAndTimestamp] = consumer.offsets_for_times({tp: 0})[tp]
        consumer.pause([tp])
        consumer.resume(consumer.paused())
        for record in consumer:
            break

    with Admin(bootstrap_servers="127.0.0.1:9092") as admin:
        ids: Dict[str, Optional[uuid.UUID]] = admin.create_topics(["a", NewTopic("b", 3)], num_partitions=2)
        handle: AdminHandle = admin.create_topics(["a"], raise_errors=False)
        errors: Dict[object, BaseException] = handle.errors()
        topics: Dict[str, TopicListing] = admin.list_topics(timeout=5)
        description: TopicDescription = admin.describe_topics(["a"])["a"]
        lags: Dict[TopicPartition, ConsumerLag] = admin.consumer_group_lag("g")
        admin.delete_records({tp: -1})
        earliest: int = admin.list_offsets({tp: "earliest"})[tp].offset
        admin.describe_configs([ConfigResource.topic("a")])
        group_ids: List[str] = [g.group_id for g in admin.list_consumer_groups(states=["Stable"])]
        nodes = admin.describe_cluster().nodes
        admin.delete_topics(["a"])
        share_groups: List[str] = [g.group_id for g in admin.list_share_groups()]
        share_group: ShareGroupDescription = admin.describe_share_groups(["q"])["q"]
        share_offsets: Dict[TopicPartition, SharePartitionOffset] = admin.list_share_group_offsets("q")
        admin.incremental_alter_configs({ConfigResource.group("q"): {"share.auto.offset.reset": "earliest"}})

    with ShareConsumer(bootstrap_servers="127.0.0.1:9092", group_id="q",
                       share_acknowledgement_mode="explicit") as share_consumer:
        share_consumer.subscribe(["t"])
        share_consumer.set_acknowledgement_commit_callback(lambda offsets, err: print(offsets, err))
        for share_record in share_consumer.poll(1.0):
            deliveries: Optional[int] = share_record.delivery_count
            share_consumer.acknowledge(share_record, AcknowledgeType.REJECT)
        results: Dict[TopicPartition, Optional[KafkaError]] = share_consumer.commit_sync()
        share_consumer.commit_async()
        shared: Set[TopicPartition] = share_consumer.assignment()
        lock_ms: Optional[int] = share_consumer.acquisition_lock_timeout_ms


async def asyncio_clients() -> None:
    async with kio.aio.Producer(bootstrap_servers="127.0.0.1:9092") as producer:
        handle = await producer.send("t", b"v")
        metadata: RecordMetadata = await handle
        done: bool = handle.done
        bulk: BulkResult = await (await producer.send_many("t", [b"a"]))
        pending: int = await producer.flush()
    async with kio.aio.Consumer(bootstrap_servers="127.0.0.1:9092", group_id="g") as consumer:
        consumer.subscribe(["t"], on_assign=on_assign, on_revoke=on_revoke)
        for record in await consumer.poll(1.0):
            offset: int = record.offset
        async for record in consumer:
            break
        position: int = await consumer.position(TopicPartition("t", 0))
        await consumer.commit()
    async with kio.aio.ShareConsumer(bootstrap_servers="127.0.0.1:9092", group_id="q") as share_consumer:
        share_consumer.subscribe(["t"])
        records: List[ShareRecord] = await share_consumer.poll(1.0)
        async for share_record in share_consumer:
            count: Optional[int] = share_record.delivery_count
            break
        results = await share_consumer.commit_sync()
    async with kio.aio.Admin(bootstrap_servers="127.0.0.1:9092") as admin:
        topics: Dict[str, TopicListing] = await admin.list_topics()
        ids: Dict[str, Optional[uuid.UUID]] = await admin.create_topics(["t"])


async def trio_clients() -> None:
    async with trio.open_nursery() as nursery:
        producer = kio.trio.Producer(bootstrap_servers="127.0.0.1:9092", nursery=nursery)
        metadata: RecordMetadata = await (await producer.send("t", b"v"))
        await producer.close()
    async with kio.trio.Consumer(bootstrap_servers="127.0.0.1:9092", group_id="g") as consumer:
        consumer.assign([("t", 0)])
        records = await consumer.poll(1.0)
    async with kio.trio.Admin(bootstrap_servers="127.0.0.1:9092") as admin:
        nodes = (await admin.describe_cluster()).nodes
        share_offsets = await admin.list_share_group_offsets("q")
    async with kio.trio.ShareConsumer(bootstrap_servers="127.0.0.1:9092", group_id="q",
                                      share_acknowledgement_mode="explicit") as share_consumer:
        share_consumer.subscribe("t")
        for share_record in await share_consumer.poll(1.0):
            share_consumer.acknowledge(share_record, AcknowledgeType.RELEASE)
        await share_consumer.commit_async()


def errors() -> None:
    try:
        threading_clients()
    except NotLeaderOrFollowerError as e:
        code: int = e.code
        retriable: bool = e.retriable
    except (AdminTimeoutError, RequestTimedOutError) as e:
        timeout: KafkaTimeoutError = e
        builtin: TimeoutError = e
    except TopicAlreadyExistsError as e:
        broker_error: BrokerError = e
    except KafkaError as e:
        print(e.retriable)
'''

# An unannotated function called from typed code: the check must reject it.
UNTYPED = '''
def untyped(value):
    return value


def typed() -> None:
    untyped(1)
'''


@pytest.fixture(scope="module")
def mypy_cache(tmp_path_factory):
    """One mypy cache for this module's checks against the checkout: the
    first run analyses kio, kproto and typeshed, later ones re-check only
    their own program (mypy's incremental mode gives the same answers)."""
    return tmp_path_factory.mktemp("mypy-cache")


def _mypy(tmp_path, name, source, cache):
    (tmp_path / name).write_text(textwrap.dedent(source))
    # kio and kproto from this checkout (the editable install's import hook
    # is invisible to mypy); their own modules are analysed, and errors are
    # reported for the program only.
    env = dict(os.environ, MYPYPATH=str(ROOT))
    cmd = [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
           "--cache-dir", str(cache), "--no-color-output", name]
    start = time.monotonic()
    r = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    return r, time.monotonic() - start


def test_mypy_strict_accepts_the_typed_usage_example(tmp_path, mypy_cache):
    r, took = _mypy(tmp_path, "example.py", EXAMPLE, mypy_cache)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Success: no issues found in 1 source file" in r.stdout
    print(f"mypy --strict took {took:.1f} s")


def test_mypy_strict_rejects_an_untyped_call(tmp_path, mypy_cache):
    """The check bites: a call to an unannotated function fails it."""
    r, _ = _mypy(tmp_path, "untyped.py", UNTYPED, mypy_cache)
    assert r.returncode == 1 and "[no-untyped-call]" in r.stdout, r.stdout + r.stderr


AS_A_USER_WRITES = '''
from typing import Mapping, Optional

import kio


def delivered(err: Optional[Exception], md: Optional[kio.RecordMetadata]) -> None:
    print(err if err is not None else md)


def committed(offsets: Mapping[kio.TopicPartition, kio.OffsetAndMetadata], err: Optional[Exception]) -> None:
    print(offsets, err)


def main() -> None:
    with kio.Producer({"bootstrap.servers": "localhost:9092"}) as producer:
        producer.send("t", b"v", on_delivery=delivered)
    consumer = kio.Consumer({"bootstrap.servers": "localhost:9092", "group.id": "g"})
    consumer.subscribe(["t"])
    for record in consumer.poll(1.0):
        print(record.value)
    consumer.commit(asynchronous=True, callback=committed)
    consumer.close()
'''


def test_mypy_finds_kio_as_installed_and_accepts_callbacks_typed_as_java_types_them(tmp_path):
    """A user's program type-checks against the editable install the README
    makes (tools/dev.sh installs in setuptools' compat mode: the default
    mode's import hook is invisible to mypy), with no MYPYPATH, from a folder
    outside the checkout; callbacks take ``Optional[Exception]`` (what the
    clients pass, Java's ``Exception``), not only ``BaseException``."""
    (tmp_path / "app.py").write_text(AS_A_USER_WRITES)
    env = {k: v for k, v in os.environ.items() if k not in ("MYPYPATH", "PYTHONPATH")}
    r = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / ".cache"),
                        "--no-color-output", "app.py"], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0 and "Success" in r.stdout, r.stdout + r.stderr


def test_help_shows_the_real_signature_and_doc_of_send():
    """send() runs the shared body with no wrapper frame, yet help() shows
    Producer.send with its precise types and its own docstring."""
    import pydoc
    text = pydoc.render_doc(kio.Producer.send, renderer=pydoc.plaintext)
    assert "function send in module kio.producer" in text, text
    assert "on_delivery: 'Optional[DeliveryCallback]'" in text, text
    assert "-> 'concurrent.futures.Future[RecordMetadata]'" in text, text
    assert "Queue one record" in text and "max.block.ms" in text, text
    assert inspect.signature(kio.Producer.send).parameters["on_delivery"].default is None


def _public_methods(cls):
    for name in sorted(dir(cls)):
        if name.startswith("_") and name not in ("__iter__", "__aiter__", "__await__"):
            continue
        owner = next(k for k in cls.__mro__ if name in vars(k))
        if owner in (object, tuple) or owner.__module__ in ("typing", "abc"):
            continue
        attr = vars(owner)[name]
        if isinstance(attr, property):
            yield name, attr.fget
        elif inspect.isfunction(attr):
            yield name, attr


@pytest.mark.parametrize("cls", PUBLIC_CLASSES, ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_every_public_method_has_its_own_docstring(cls):
    assert cls.__doc__, cls
    missing = [name for name, fn in _public_methods(cls) if not (fn.__doc__ or "").strip()]
    assert not missing, f"{cls.__module__}.{cls.__qualname__}: no docstring on {missing}"


@pytest.mark.parametrize("cls", PUBLIC_CLASSES, ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_every_public_method_is_annotated(cls):
    untyped = []
    for name, fn in _public_methods(cls):
        sig = inspect.signature(fn)
        params = [p for i, p in enumerate(sig.parameters.values()) if i > 0]     # not self
        if sig.return_annotation is inspect.Signature.empty or any(
                p.annotation is inspect.Parameter.empty for p in params):
            untyped.append(name)
    assert not untyped, f"{cls.__module__}.{cls.__qualname__}: not annotated: {untyped}"


def test_help_shows_docstrings_not_comments():
    import pydoc
    text = pydoc.render_doc(kio.Consumer.seek, renderer=pydoc.plaintext)
    assert "Consume ``partition`` from ``offset`` on" in text


def test_py_typed_and_stubs_are_shipped():
    for f in ("kio/py.typed", "kproto/py.typed", "kproto/error_codes.pyi", "kproto/records/_batch.pyi"):
        assert (ROOT / f).is_file(), f
    try:
        import tomllib
    except ImportError:          # Python < 3.11
        tomllib = pytest.importorskip("tomli")
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = data["tool"]["setuptools"]["package-data"]["*"]
    assert "py.typed" in patterns and "*.pyi" in patterns
    assert any("mypy" in dep for dep in data["project"]["optional-dependencies"]["test"])


def test_the_async_admin_stub_is_generated_from_admin_ops():
    """The async Admin's operations are AdminOps' (written once); type
    checkers see them through kio/_async/admin.pyi, generated from AdminOps
    - which must be current and name every public method the class has."""
    import ast

    r = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_async_admin_stub.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    stub = ast.parse((ROOT / "kio" / "_async" / "admin.pyi").read_text())
    cls = next(n for n in stub.body if isinstance(n, ast.ClassDef) and n.name == "AsyncAdmin")
    in_stub = {f.name for f in cls.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
    runtime = {name for name, _ in _public_methods(kio.aio.Admin)} - {"close", "config"}   # _Client's
    assert in_stub - {"__init__"} == runtime
    # The rest are async def; these run no admin operation and return their value in every driver.
    assert {f.name for f in cls.body if isinstance(f, ast.FunctionDef)} == {
        "__init__", "metrics", "register_metric_for_subscription", "unregister_metric_from_subscription"}


ASYNC_ADMIN_RESULT = '''
from typing import Dict

import kio.trio
from kproto.admin import TopicListing


async def main() -> None:
    async with kio.trio.Admin(bootstrap_servers="127.0.0.1:9092") as admin:
        topics: Dict[str, TopicListing] = await admin.list_topics()
'''


def test_mypy_sees_what_an_async_admin_call_returns(tmp_path, mypy_cache):
    r, _ = _mypy(tmp_path, "ok.py", ASYNC_ADMIN_RESULT, mypy_cache)
    assert r.returncode == 0, r.stdout + r.stderr
    wrong = ASYNC_ADMIN_RESULT.replace("Dict[str, TopicListing]", "Dict[str, int]")
    r, _ = _mypy(tmp_path, "wrong.py", wrong, mypy_cache)
    assert r.returncode == 1 and "TopicListing" in r.stdout, r.stdout
    r, _ = _mypy(tmp_path, "unawaited.py", ASYNC_ADMIN_RESULT.replace("= await admin", "= admin"), mypy_cache)
    assert r.returncode == 1 and "Coroutine" in r.stdout, r.stdout


MESSAGE_BODIES = '''
import uuid
from kproto import messages
from kproto.message_types import HeartbeatRequest, ProduceRequest

ok: HeartbeatRequest = {"group_id": "g", "generation_id": 7, "member_id": "m",
                        "group_instance_id": None}
produce: ProduceRequest = {"acks": 1, "timeout_ms": 1000, "topic_data": [
    {"topic_id": uuid.uuid4(), "partition_data": [{"index": 0, "records": b""}]}]}
messages.encode_request("Heartbeat", 4, 1, "c", ok)
'''


def test_message_types_are_generated_from_the_schema_tables():
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_message_types.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_mypy_sees_message_body_field_names(tmp_path, mypy_cache):
    r, _ = _mypy(tmp_path, "bodies.py", MESSAGE_BODIES, mypy_cache)
    assert r.returncode == 0, r.stdout + r.stderr
    typo = MESSAGE_BODIES.replace('"generation_id": 7', '"generaton_id": 7')
    r, _ = _mypy(tmp_path, "typo.py", typo, mypy_cache)
    assert r.returncode != 0 and "generaton_id" in r.stdout, r.stdout
    wrong = MESSAGE_BODIES.replace('"index": 0', '"index": "0"')
    r, _ = _mypy(tmp_path, "wrong.py", wrong, mypy_cache)
    assert r.returncode != 0 and "index" in r.stdout, r.stdout
