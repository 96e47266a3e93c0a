"""NOT NULL columns stay NOT NULL in the table schema and are enforced; a value that does not
fit its column is a typed error naming the column; nothing is written in either case."""
from __future__ import annotations

import pyarrow as pa
import pytest

import multiwriter as mw
from multiwriter import errors
from tests.oracle import hudi_read, rows

TS = pa.timestamp("ms", tz="UTC")
SCHEMA = pa.schema([pa.field("id", pa.string(), False), ("ts", pa.int64()), pa.field("n", pa.int32(), False),
                    ("i", pa.int32()), ("t", TS)])


def _cfg(**kw) -> mw.WriterConfig:
    return mw.WriterConfig(lock=mw.InProcessLock(), writer_id="w", **kw)


@pytest.fixture(params=["COPY_ON_WRITE", "MERGE_ON_READ"])
def table(request, table_path):
    mw.Table.create(table_path, name="t", schema=SCHEMA, record_key="id", ordering_field="ts", table_type=request.param)
    mw.write(pa.Table.from_pylist([{"id": "k1", "ts": 1, "n": 1, "i": 1}], schema=SCHEMA), table_path, _cfg())
    return table_path


def _completed(path: str) -> int:
    return len(mw.Table.open(path).timeline().completed())


def test_not_null_is_kept_through_evolution(table):
    wider = pa.table({"id": ["k1"], "ts": [2], "n": pa.array([5], pa.int32()), "i": pa.array([2], pa.int32()),
                      "t": pa.array([None], TS), "x": ["new"]})
    mw.write(wider, table, _cfg())
    assert not mw.Table.open(table).schema().field("n").nullable
    assert mw.Table.open(table).schema().field("x").nullable
    got = hudi_read(table)
    assert not got.schema.field("n").nullable
    assert rows(got, ["id", "n", "x"]) == [("k1", 5, "new")] == rows(mw.Table.open(table).read(), ["id", "n", "x"])


@pytest.mark.parametrize("allow_missing", [False, True])
@pytest.mark.parametrize(("bad", "error", "column"), [
    ({"n": pa.array([None], pa.int32())}, errors.InvalidRecordError, "'n'"),
    ({"n": None}, errors.SchemaMismatchError, "'n'"),  # the column left out
    ({"i": pa.array([3_000_000_000], pa.uint32())}, errors.InvalidRecordError, "'i'"),
    ({"t": pa.array([1001], pa.timestamp("us", tz="UTC"))}, errors.InvalidRecordError, "'t'"),
], ids=["null-in-not-null", "not-null-missing", "uint32-overflow", "timestamp-precision"])
def test_bad_values_are_typed_errors_naming_the_column(table, allow_missing, bad, error, column):
    cols = {"id": ["k2"], "ts": [1], "n": pa.array([1], pa.int32()), "i": pa.array([1], pa.int32()), "t": pa.array([None], TS)}
    for k, v in bad.items():
        if v is None:
            del cols[k]
        else:
            cols[k] = v
    before = _completed(table)
    with pytest.raises(error, match=column):
        mw.write(pa.table(cols), table, _cfg(allow_missing_columns=allow_missing))
    assert _completed(table) == before
    assert rows(hudi_read(table), ["id"]) == [("k1",)]
