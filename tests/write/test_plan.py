"""The plan's gather: columns that repeat another column's values (the record key of a
one-field key, the partition column whose values are the partition paths) are not gathered
twice but rebuilt per task; the files must still hold every row's own values."""
from __future__ import annotations

import glob
import os

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import multiwriter as mw
from multiwriter.table.snapshot import Snapshot
from multiwriter.write import index, plan, records
from tests.oracle import hudi_read, rows

SCHEMA = pa.schema([("id", pa.string()), ("date", pa.string()), ("ts", pa.int64()), ("v", pa.float64())])


def batch(n: int, dates: list[str | None]) -> pa.Table:
    """One chunk (as a batch read from a file arrives): ``n`` rows over ``dates``."""
    return pa.table({"id": [f"k{i:05d}" for i in range(n)], "date": [dates[i % len(dates)] for i in range(n)],
                     "ts": pa.array(range(n), pa.int64()), "v": [float(i) for i in range(n)]}, schema=SCHEMA)


def planned(table: mw.Table, data: pa.Table) -> plan.Plan:
    prepared = records.prepare(data, table.config, SCHEMA, operation="insert")
    return plan.make_plan(index.untagged(prepared), Snapshot({}, table.timeline(), None), target_file_size=128 << 20)


def test_gathered_rows_rebuild_the_key_and_partition_columns_with_each_rows_own_values(tmp_path):
    t = mw.Table.create(str(tmp_path / "t"), name="t", schema=SCHEMA, record_key="id", partition_by=["date"])
    data = batch(3_000, ["2024-01-01", "2024-01-02", "2024-01-03"])
    p = planned(t, data)
    assert p.twins == {records.KEY: "id"} and p.partition_column == "date"
    p.gather(parts=2)
    for task in p.tasks:
        got = p.rows_for(task)
        want = data.filter(pc.equal(data["date"], task.partition))  # the oracle: the input itself
        assert got.column_names == p.rows.column_names
        assert got["id"].to_pylist() == want["id"].to_pylist()
        assert got[records.KEY].to_pylist() == want["id"].to_pylist()
        assert got["date"].cast(pa.string()).to_pylist() == want["date"].to_pylist()
        assert got["ts"].to_pylist() == want["ts"].to_pylist()


def test_no_partition_twin_when_paths_are_not_the_values(tmp_path):
    """Null and empty values go to the default partition, hive-style paths carry the field
    name, and a batch of several chunks is combined: the column is gathered as it is."""
    t = mw.Table.create(str(tmp_path / "t"), name="t", schema=SCHEMA, record_key="id", partition_by=["date"])
    assert planned(t, batch(100, ["2024-01-01", None, ""])).partition_column is None
    two_chunks = pa.concat_tables([batch(50, ["2024-01-01"]), batch(50, ["2024-01-02"])])
    assert planned(t, two_chunks).twins == {} and planned(t, two_chunks).partition_column is None
    hive = mw.Table.create(str(tmp_path / "h"), name="h", schema=SCHEMA, record_key="id", partition_by=["date"],
                           hive_style_partitioning=True)
    assert planned(hive, batch(100, ["2024-01-01"])).partition_column is None


@pytest.mark.parametrize("hive", [False, True])
@pytest.mark.parametrize("dates", [["2024-01-01", "2024-01-02"], ["2024-01-01", None, ""]])
def test_written_files_hold_each_rows_partition_value(tmp_path, hive, dates):
    path = str(tmp_path / "t")
    mw.Table.create(path, name="t", schema=SCHEMA, record_key="id", partition_by=["date"], hive_style_partitioning=hive)
    data = batch(2_000, dates)
    mw.write(data, path, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="w", operation="insert"))
    want = rows(data, ["id", "date", "ts", "v"])
    assert rows(hudi_read(path), ["id", "date", "ts", "v"]) == want
    assert rows(mw.Table.open(path).read(), ["id", "date", "ts", "v"]) == want
    for f in glob.glob(os.path.join(path, "**", "*.parquet"), recursive=True):
        pf = pq.ParquetFile(f)
        assert pf.schema_arrow.field("date").type == pa.string()  # a plain string column to every reader
        values = set(pf.read(columns=["date"])["date"].to_pylist())
        chunk = pf.metadata.row_group(0).column(pf.schema_arrow.get_field_index("date"))
        if None not in values:
            assert (chunk.statistics.min, chunk.statistics.max) == (min(values), max(values))
