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


def _tagged(keys: list[str], parts: list[str], fids: list[str | None]) -> pa.Table:
    return pa.table({"v": [1.0] * len(keys), records.KEY: keys, records.PARTITION: parts,
                     records.OP: pa.array([records.OP_UPSERT] * len(keys), pa.int8()),
                     index.FILE_ID: pa.array(fids, pa.string())})


def _slices(sizes: dict[tuple[str, str], int]) -> Snapshot:
    from multiwriter.table.files import FileSlice

    return Snapshot({g: FileSlice(g[0], g[1], "20240101000000000", f"{g[1]}_0-0-0_20240101000000000.parquet", size)
                     for g, size in sizes.items()}, None, None, view=object())


@pytest.mark.parametrize("limit,target,joins", [(100 << 20, 128 << 20, True), (0, 128 << 20, False),
                                                 (1 << 10, 128 << 20, False), (100 << 20, 4 << 10, False)],
                         ids=["fills", "turned-off", "group-not-small", "no-room-under-target"])
def test_new_keys_join_the_smallest_group_the_upsert_rewrites_anyway(limit, target, joins):
    """Small-file handling: the new keys of a partition where the batch updates keys go into
    the smallest group it rewrites there (not into one it leaves alone), and still count as
    inserts for the same-new-key check; a partition without updates gets a new group."""
    snap = _slices({("p1", "big"): 50 << 20, ("p1", "small"): 2 << 20, ("p1", "untouched"): 1 << 10,
                    ("p2", "other"): 1 << 10})
    tagged = _tagged(["u1", "u2", "n1", "n2", "n3"], ["p1", "p1", "p1", "p1", "p2"], ["big", "small", None, None, None])
    got = plan.make_plan(tagged, snap, target_file_size=target, small_file_limit=limit)
    groups = {(t.partition, t.file_id): sorted(got.rows_for(t).column(records.KEY).to_pylist()) for t in got.tasks}
    assert groups[("p1", "big")] == ["u1"]
    if joins:
        assert groups[("p1", "small")] == ["n1", "n2", "u2"]
        assert len(groups) == 3, "p1 gets no new group; p2 (no update there) gets one"
    else:
        assert groups[("p1", "small")] == ["u2"]
        assert sorted(len(v) for g, v in groups.items() if g[1] not in ("big", "small")) == [1, 2]
    new_p2 = [k for (p, f), k in groups.items() if p == "p2"]
    assert new_p2 == [["n3"]] and ("p2", "other") not in groups
    assert {p: sorted(k.to_pylist()) for p, k in got.inserted_keys().items()} == {"p1": ["n1", "n2"], "p2": ["n3"]}
