"""Data skipping wired into ``Table.read`` and the Spark scan's planning, on tables we write.

Here ``metadata_files.column_stats_of`` and ``partition_stats_of`` are stood in for by the
stats Hudi computes from the data files themselves, so each case controls its stats exactly
(``tests/table/test_metadata_stats.py`` reads tables that keep the indexes) (:func:`~multiwriter.format.column_stats.parquet_stats` of each base file's footer;
a log file's data blocks the same way). Oracle: the same read without stats."""
from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import multiwriter as mw
from multiwriter.format import column_stats as cs
from multiwriter.format.log_file import read_log_blocks
from multiwriter.spark.options import ReadOptions
from multiwriter.spark.scan import Predicate, plan_scan
from multiwriter.table import metadata_files
from multiwriter.table.files import list_files
from tests.oracle import rows

SCHEMA = pa.schema([("id", pa.string()), ("p", pa.string()), ("ts", pa.int64()), ("x", pa.int64()), ("v", pa.string())])


def _cfg(**kw) -> mw.WriterConfig:
    return mw.WriterConfig(lock=mw.InProcessLock(), writer_id="w", **kw)


def _parquet_stats(data: pa.Table, name: str) -> dict[str, cs.ColumnStats]:
    buf = io.BytesIO()
    pq.write_table(data, buf)
    buf.seek(0)
    return {s.column: s for s in cs.parquet_stats(pq.ParquetFile(buf).metadata, name)}


def file_stats(table: mw.Table) -> dict[tuple[str, str], dict[str, cs.ColumnStats]]:
    """Every data file's column stats, as a writer keeping the column_stats partition records
    them: a base file's from its footer, a log file's from its data blocks' records (a column a
    partial-update block does not carry counts as null there)."""
    storage = table.storage
    full = table.read_schema(table.timeline())
    bases, logs = list_files(storage)
    out = {}
    for b in bases:
        with storage.fs.open_input_file(storage.abs(b.path)) as f:
            out[(b.partition, b.name)] = {s.column: s for s in cs.parquet_stats(pq.ParquetFile(f).metadata, b.name)}
    for lf in logs:
        recs = [b.records for b in read_log_blocks(storage.read_bytes(lf.path)) if b.kind == "data" and b.records is not None]
        if not recs:
            continue
        data = pa.concat_tables([pa.table({f.name: r.column(f.name).cast(f.type) if f.name in r.column_names
                                           else pa.nulls(r.num_rows, f.type) for f in full}) for r in recs])
        out[(lf.partition, lf.name)] = _parquet_stats(data, lf.name)
    return out


@pytest.fixture()
def stats(monkeypatch):
    """``install(table)``: the metadata table's stats readers stood in for by the files' own
    stats (partition stats merged over the latest snapshot's files); returns the Pruned of each
    Table.prune call."""
    seen = []
    prune = mw.Table.prune

    def spy(self, *a, **kw):
        out = prune(self, *a, **kw)
        seen.append(out)
        return out

    monkeypatch.setattr(mw.Table, "prune", spy)

    def install(table: mw.Table, *, partitions: bool = False) -> list:
        seen.clear()
        by_file = file_stats(table)
        monkeypatch.setattr(metadata_files, "column_stats_of", lambda storage, config, partitions=None: by_file,
                            raising=False)
        if partitions:
            snap = table.snapshot()
            pstats = {}
            for p in snap.partitions():
                names = [n for fs in snap.in_partition(p) for n in ([fs.name] if fs.has_base else []) +
                         [lf.name for lf in fs.logs]]
                merged = cs.partition_stats(p, [s for n in names for s in by_file.get((p, n), {}).values()])
                pstats[p] = {s.column: s for s in merged}
            monkeypatch.setattr(metadata_files, "partition_stats_of", lambda storage, config, partitions=None: pstats,
                                raising=False)
        return seen

    return install


def _rows_of(p: str, xs: range) -> pa.Table:
    return pa.Table.from_pylist([{"id": f"{p}{x}", "p": p, "ts": 1, "x": x, "v": f"v{x % 3}"} for x in xs], schema=SCHEMA)


def _three_partitions(path: str, **kw) -> mw.Table:
    mw.Table.create(path, name="t", schema=SCHEMA, record_key="id", partition_by=["p"], ordering_field="ts", **kw)
    for i, p in enumerate("abc"):
        mw.write(_rows_of(p, range(i * 100, i * 100 + 10)), path, _cfg())
    return mw.Table.open(path)


FILTERS = [
    [("x", "=", 105)], [("x", "<", 5)], [("x", ">=", 205)], [("x", "in", [1, 209])], [("x", "!=", 5)],
    [("x", "not in", [1])], [[("x", "=", 5)], [("v", "=", "v1")]], [("x", ">", 5), ("p", "=", "c")],
    [("v", "=", "nope")], [("id", "=", "b103")], [("_hoodie_record_key", "=", "b103")], [("x", "=", 1000)],
]


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_read_skips_slices_and_returns_the_same_rows(table_path, table_type, stats):
    kw = {"table_type": table_type, "num_buckets": 1} if table_type == "MERGE_ON_READ" else {}
    table = _three_partitions(table_path, **kw)
    want = {i: rows(table.read(filters=f), ["id"]) for i, f in enumerate(FILTERS)}
    seen = stats(table)
    for i, f in enumerate(FILTERS):
        assert rows(table.read(filters=f), ["id"]) == want[i], f
    by_filter = {str(f): p for f, p in zip(FILTERS, seen, strict=True)}
    assert by_filter[str([("x", "=", 105)])].slices_skipped == 2
    assert by_filter[str([("x", "=", 1000)])].slices_kept == 0
    assert by_filter[str([("x", "!=", 5)])].slices_skipped == 0
    assert by_filter[str([("id", "=", "b103")])].slices_skipped == 2
    if table_type == "COPY_ON_WRITE":  # base files hold no statistics of record keys: "all null" proves nothing
        assert by_filter[str([("_hoodie_record_key", "=", "b103")])].slices_skipped == 0
    assert table.read(filters=pa.compute.field("x") == 105).num_rows == 1
    assert seen[-1].slices_skipped == 0  # an expression cannot be inspected


def test_partition_stats_skip_partitions_of_the_latest_snapshot_only(table_path, stats):
    table = _three_partitions(table_path)
    first = table.timeline().completed_writes()[0].requested_time
    seen = stats(table, partitions=True)
    assert rows(table.read(filters=[("x", "=", 105)]), ["id"]) == [("b105",)]
    assert seen[-1].partitions_skipped == ("a", "c")
    assert rows(table.read(as_of=first, filters=[("x", "<", 1000)]), ["id"]) == [(f"a{x}",) for x in range(10)]
    assert seen[-1].partitions_skipped == ()


def test_errors_of_the_filter_are_raised_when_every_slice_is_skipped(table_path, stats):
    table = _three_partitions(table_path)
    bad = [("x", "=", 1000), ("p", "=", 5)]
    with pytest.raises(pa.ArrowNotImplementedError) as without:
        table.read(filters=bad)
    seen = stats(table)
    with pytest.raises(type(without.value)):
        table.read(filters=bad)
    assert seen[-1].slices_kept == 0


def test_a_partial_update_keeps_the_slice_whose_files_each_rule_the_filter_out(table_path, stats):
    mw.Table.create(table_path, name="t", schema=SCHEMA, record_key="id", partition_by=["p"], ordering_field="ts",
                    table_type="MERGE_ON_READ", num_buckets=1)
    mw.write(pa.Table.from_pylist([{"id": "e", "p": "a", "ts": 1, "x": 7, "v": "v1"}], schema=SCHEMA), table_path, _cfg())
    mw.write(pa.table({"id": ["e"], "p": ["a"], "ts": [2], "v": ["v2"]}), table_path, _cfg(partial_update=True))
    table = mw.Table.open(table_path)
    f = [("v", "=", "v2"), ("x", "=", 7)]
    assert rows(table.read(filters=f), ["id", "x", "v"]) == [("e", 7, "v2")]
    seen = stats(table)
    by_file = file_stats(table)
    (fs,) = table.snapshot().files()
    assert fs.logs and by_file[(fs.partition, fs.logs[0].name)]["x"].null_count == 1, "the log's x: all null"
    assert rows(table.read(filters=f), ["id", "x", "v"]) == [("e", 7, "v2")]
    assert seen[-1].slices_kept == 1
    assert rows(table.read(filters=[("v", "=", "v3")]), ["id"]) == []
    assert seen[-1].slices_skipped == 1


def test_spark_scan_planning_skips_slices(table_path, stats):
    table = _three_partitions(table_path)
    opts = ReadOptions(path=table_path)
    assert len(plan_scan(opts, [Predicate("=", "x", 105)]).tasks) == 3
    stats(table, partitions=True)
    assert {t.partition for t in plan_scan(opts, [Predicate("=", "x", 105)]).tasks} == {"b"}
    assert len(plan_scan(opts, [Predicate("in", "x", (1, 205))]).tasks) == 2
    assert len(plan_scan(opts, [Predicate("notnull", "x")]).tasks) == 3
    assert plan_scan(opts, [Predicate(">", "x", 1000)]).tasks == ()
    incremental = ReadOptions(path=table_path, incremental=True)
    assert {t.partition for t in plan_scan(incremental, [Predicate("<", "x", 5)]).tasks} == {"a"}
