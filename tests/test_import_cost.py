"""What ``import kio`` loads: a process that only imported the client stays small (issue 27).

Each check runs in a fresh interpreter (``sys.modules`` of this test process
holds everything the other tests imported) and names the modules that must not
be loaded, so a new eager import of one of them fails here with its name,
instead of as a resident-memory figure drifting up in a benchmark:

- ``import kio`` loads no client: the public names are imported on first use;
- ``from kio import Producer, Consumer`` (a PLAINTEXT client) does not load
  ssl or hashlib (OpenSSL, ~4 MB), asyncio or trio, inspect, the admin client,
  the share consumer, nor the ``crc32c`` package's ``__init__`` (it imports
  importlib.metadata and argparse: ~7 MB);
- ``from kio import Admin`` does not load hashlib or secrets (OpenSSL: SCRAM
  upsertions import them), the consumer's group machines and assignors
  (``kproto.consumer``'s names load on first use), nor any producer, consumer
  or share-consumer core;
- no client loads a generated API schema module at import: each is imported
  with the first request of its API (``kproto.schema.API_INDEX`` knows their
  names, keys and versions before).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# loaded by the optional parts of the client only (TLS, SCRAM, the async
# drivers, the admin client, the share consumer) or by nothing the client needs
HEAVY = ["ssl", "_ssl", "hashlib", "_hashlib", "hmac", "asyncio", "trio", "inspect", "importlib.metadata",
         "argparse", "crc32c", "kproto.admin", "kproto.share", "kio.admin", "kio.share_consumer", "kio.aio"]
CLIENTS = ["kio.producer", "kio.consumer", "kio.admin", "kio.share_consumer", "kproto.producer",
           "kproto.consumer", "kproto.client", "kproto.records"]


# what the admin client must not load: its own modules are in HEAVY (the
# producer and consumer must not load them), so they are taken out here
ADMIN_OWN = {"kproto.admin", "kproto.share", "kio.admin"}
ADMIN_HEAVY = sorted((set(HEAVY) - ADMIN_OWN) | {
    "secrets", "kio.producer", "kio.consumer", "kproto.producer", "kproto.records",
    "kproto.consumer.core", "kproto.consumer.fetcher", "kproto.consumer.positions",
    "kproto.consumer.assignors", "kproto.consumer.coordinator", "kproto.consumer.membership",
    "kproto.consumer.membership_consumer", "kproto.consumer.commits", "kproto.share.core"})
# the generated modules of kproto.schema that are not an API's (loaded with the codec)
SCHEMA_NOT_APIS = {"kproto.schema", "kproto.schema.headers", "kproto.schema.consumer_protocol"}


def _loaded_after(statement: str) -> set[str]:
    """The names in sys.modules of a fresh interpreter after running ``statement``."""
    code = f"import json, sys\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return set(json.loads(out.stdout))


def test_import_kio_loads_no_client():
    loaded = _loaded_after("import kio")
    assert "kio" in loaded
    assert sorted(loaded & set(CLIENTS + HEAVY)) == []


@pytest.mark.parametrize("statement", [
    "from kio import Producer",
    "from kio import Consumer",
    "from kio import Producer, Consumer, TopicPartition, RecordMetadata",
])
def test_plaintext_clients_load_nothing_heavy(statement):
    loaded = _loaded_after(statement)
    assert "kproto.records._batch" in loaded          # the client is really there
    assert sorted(loaded & set(HEAVY)) == []


def test_admin_loads_nothing_heavy():
    loaded = _loaded_after("from kio import Admin")
    assert {"kio.admin", "kproto.admin", "kproto.admin_scram"} <= loaded    # the client is really there
    assert sorted(loaded & set(ADMIN_HEAVY)) == []


@pytest.mark.parametrize("statement", [
    "from kio import Admin",
    "from kio import Producer, Consumer",
    "import kio.aio",
])
def test_no_api_schema_module_is_loaded_at_import(statement):
    loaded = _loaded_after(statement)
    assert "kproto.messages" in loaded
    assert sorted(m for m in loaded if m.startswith("kproto.schema") and m not in SCHEMA_NOT_APIS) == []


def test_an_api_schema_module_loads_with_its_first_request():
    loaded = _loaded_after("from kproto import messages\nmessages.encode_request('Produce', 9, 1, 'c', None)")
    assert {"kproto.schema.produce"} == {m for m in loaded if m.startswith("kproto.schema.")} - SCHEMA_NOT_APIS


def test_lazy_names_are_the_modules_objects():
    import kio
    from kio import admin, consumer, producer, share_consumer

    modules = {"kio.admin": admin, "kio.consumer": consumer, "kio.producer": producer,
               "kio.share_consumer": share_consumer}
    for name in kio.__all__:
        value = getattr(kio, name)
        assert value is getattr(modules[kio._LAZY[name]], name), name
    assert set(kio.__all__) <= set(dir(kio))
    namespace: dict = {}
    exec("from kio import *", namespace)
    assert set(kio.__all__) <= set(namespace)


def test_consumer_package_names_are_the_submodules_objects():
    import importlib

    import kproto.consumer as package

    for name in package.__all__:
        module = package._MODULE_OF.get(name)
        if module is not None:
            assert getattr(package, name) is getattr(importlib.import_module(module), name), name
    assert set(package.__all__) <= set(dir(package))
    with pytest.raises(AttributeError, match="module 'kproto.consumer' has no attribute 'GroupMembershp'"):
        package.GroupMembershp  # noqa: B018


def test_unknown_name_is_an_attribute_error():
    import kio

    with pytest.raises(AttributeError, match="module 'kio' has no attribute 'Prodcuer'"):
        kio.Prodcuer  # noqa: B018
    with pytest.raises(ImportError):
        exec("from kio import Prodcuer", {})


def test_crc32c_without_the_package_init_is_the_package_function():
    """The checksum kproto loads from crc32c's extension file is the package's own."""
    import crc32c as package

    from kproto._crc import crc32c

    assert crc32c(b"123456789") == 0xE3069283    # the CRC-32C check value (RFC 3720, B.4)
    data = bytes(range(256)) * 41
    assert crc32c(data) == package.crc32c(data)
    assert crc32c(memoryview(data)[7:]) == package.crc32c(data[7:])
