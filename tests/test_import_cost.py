"""What ``import kio`` loads: a process that only imported the client stays small (issue 27).

Each check runs in a fresh interpreter (``sys.modules`` of this test process
holds everything the other tests imported) and names the modules that must not
be loaded, so a new eager import of one of them fails here with its name,
instead of as a resident-memory figure drifting up in a benchmark:

- ``import kio`` loads no client: the public names are imported on first use;
- ``from kio import Producer, Consumer`` (a PLAINTEXT client) does not load
  ssl or hashlib (OpenSSL, ~4 MB), asyncio or trio, inspect, the admin client,
  the share consumer, nor the ``crc32c`` package's ``__init__`` (it imports
  importlib.metadata and argparse: ~7 MB).
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
