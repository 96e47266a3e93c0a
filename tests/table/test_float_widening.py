"""float -> double widening as Hudi's Java does it (through the float's decimal text), on every
path: reads of old files, Copy-on-Write merges, Merge-on-Read merges and compaction. hudi-rs
and literal values are the oracles."""
from __future__ import annotations

import pyarrow as pa
import pytest

import multiwriter as mw
from multiwriter.format.schema import cast_column
from tests.oracle import hudi_read, rows


def _schema(t: pa.DataType) -> pa.Schema:
    return pa.schema([("id", pa.string()), ("ts", pa.int64()), ("p", pa.string()), ("v", t)])


def test_cast_column_widens_through_the_text_value():
    f = pa.array([0.7, None, 0.1, float("inf"), 1e-45], pa.float32())
    assert cast_column(f, pa.float64()).to_pylist() == [0.7, None, 0.1, float("inf"), 1e-45]
    s = pa.array([{"a": 0.3, "l": [0.7, None]}, None], pa.struct([("a", pa.float32()), ("l", pa.list_(pa.float32()))]))
    wide = pa.struct([("a", pa.float64()), ("l", pa.list_(pa.float64())), ("z", pa.int32())])
    assert cast_column(s.slice(0), wide).to_pylist() == [{"a": 0.3, "l": [0.7, None], "z": None}, None]
    m = pa.array([None, [("k", 0.7)]], pa.map_(pa.string(), pa.float32())).slice(1)
    assert cast_column(m, pa.map_(pa.string(), pa.float64())).to_pylist() == [[("k", 0.7)]]


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_widened_floats_read_alike_before_and_after_compaction(table_path, table_type):
    cfg = mw.WriterConfig(lock=mw.InProcessLock(), writer_id="w")
    mw.Table.create(table_path, name="t", schema=_schema(pa.float32()), record_key="id", partition_by=["p"],
                    ordering_field="ts", table_type=table_type)
    mw.write(pa.Table.from_pylist([{"id": "k1", "ts": 1, "p": "a", "v": 0.7}, {"id": "k2", "ts": 1, "p": "a", "v": 0.1},
                                   {"id": "k3", "ts": 1, "p": "b", "v": 0.3}], schema=_schema(pa.float32())), table_path, cfg)
    # k2 shares k1's file group: a Copy-on-Write merge rewrites it, a Merge-on-Read read merges it
    mw.write(pa.Table.from_pylist([{"id": "k1", "ts": 2, "p": "a", "v": 0.9}], schema=_schema(pa.float64())), table_path, cfg)
    want = [("k1", 0.9), ("k2", 0.1), ("k3", 0.3)]
    assert rows(hudi_read(table_path), ["id", "v"]) == want
    assert rows(mw.Table.open(table_path).read(), ["id", "v"]) == want
    if table_type == "MERGE_ON_READ":
        with mw.Cleaner(table_path, lock=mw.InProcessLock(), compaction=mw.CompactionConfig(delta_commits=1)) as c:
            assert c.compact_once().compaction_instants
        assert rows(hudi_read(table_path), ["id", "v"]) == want
        assert rows(mw.Table.open(table_path).read(), ["id", "v"]) == want


def test_spark_reads_widened_floats_as_hudi_rs(spark, table_path):
    cfg = mw.WriterConfig(lock=mw.InProcessLock(), writer_id="w")
    mw.Table.create(table_path, name="t", schema=_schema(pa.float32()), record_key="id", partition_by=["p"], ordering_field="ts")
    mw.write(pa.Table.from_pylist([{"id": "k3", "ts": 1, "p": "b", "v": 0.3}], schema=_schema(pa.float32())), table_path, cfg)
    mw.write(pa.Table.from_pylist([{"id": "k1", "ts": 2, "p": "a", "v": 0.9}], schema=_schema(pa.float64())), table_path, cfg)
    mw.register(spark)
    got = sorted((r["id"], r["v"]) for r in spark.read.format("multiwriter").load(table_path).collect())
    assert got == [("k1", 0.9), ("k3", 0.3)] == rows(hudi_read(table_path), ["id", "v"])
