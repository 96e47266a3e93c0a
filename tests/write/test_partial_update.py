"""Partial updates (``WriterConfig(partial_update=True)``, Copy-on-Write): an update lacking a
column keeps the stored value of that column, an insert lacking it writes null; hudi-rs and
literal values are the oracles."""
from __future__ import annotations

import pyarrow as pa
import pytest

import multiwriter as mw
from multiwriter.errors import ConfigError, SchemaMismatchError
from tests.oracle import hudi_read, rows

SCHEMA = pa.schema([("id", pa.string()), ("p", pa.string()), ("ts", pa.int64()), ("v", pa.string()), ("n", pa.int64())])


def _cfg(**kw) -> mw.WriterConfig:
    return mw.WriterConfig(lock=mw.InProcessLock(), writer_id="w", **kw)


def test_update_lacking_a_column_keeps_its_stored_value(table_path):
    mw.Table.create(table_path, name="t", schema=SCHEMA, record_key="id", partition_by=["p"], ordering_field="ts")
    mw.write(pa.Table.from_pylist([{"id": "e", "p": "a", "ts": 1, "v": "v1", "n": 7},
                                   {"id": "f", "p": "a", "ts": 1, "v": "v1", "n": 8}], schema=SCHEMA), table_path, _cfg())
    partial = pa.table({"id": ["e", "g"], "p": ["a", "a"], "ts": [2, 2], "v": ["v2", "v2"]})
    with pytest.raises(SchemaMismatchError, match=r"\['n'\]"):  # the default refuses it
        mw.write(partial, table_path, _cfg())
    mw.write(partial, table_path, _cfg(partial_update=True))
    want = [("e", "v2", 7), ("f", "v1", 8), ("g", "v2", None)]
    assert rows(hudi_read(table_path), ["id", "v", "n"]) == want
    assert rows(mw.Table.open(table_path).read(), ["id", "v", "n"]) == want
    # an older version (lower ordering value) still loses, and keeps nothing of its own
    mw.write(pa.table({"id": ["e"], "p": ["a"], "ts": [1], "n": [99]}), table_path, _cfg(partial_update=True))
    assert rows(hudi_read(table_path), ["id", "v", "n"]) == want


def test_partial_update_is_refused_on_merge_on_read(table_path):
    mw.Table.create(table_path, name="t", schema=SCHEMA, record_key="id", ordering_field="ts", table_type="MERGE_ON_READ")
    with pytest.raises(ConfigError, match="Copy-on-Write"):
        mw.write(pa.table({"id": ["e"], "p": ["a"], "ts": [2], "v": ["v2"]}), table_path, _cfg(partial_update=True))
