"""The ``multiwriter`` Spark data source: batch reads (snapshot, as-of, incremental, pruning,
splits), the append write, option errors; checked against hudi-rs and plain pyarrow."""
from __future__ import annotations

import os

import pyarrow.parquet as pq
import pytest

import multiwriter as mw
from multiwriter.spark.options import PARALLELISM
from multiwriter.table.snapshot import list_data_files
from tests.conftest import trips
from tests.oracle import hudi_read, rows
from tests.spark.conftest import trips_write_options

COLS = ["id", "date", "ts", "value"]
FMT = "multiwriter"
INCR = {"hoodie.datasource.query.type": "incremental"}


def _cfg() -> mw.WriterConfig:
    return mw.WriterConfig(writer_id="w", lock=mw.InProcessLock(), executor="driver")


def _spark_rows(df, cols=COLS) -> list[tuple]:
    return sorted((tuple(r[c] for c in cols) for r in df.select(*cols).collect()), key=repr)


@pytest.fixture()
def two_commits(trips_table, table_path):
    """Commit 1: ids 0-4 on 01-01; commit 2: ids 3-4 updated and 5-7 inserted on 01-02, and
    ids 0-1 updated on 01-01."""
    r1 = mw.write(trips(range(5)), table_path, _cfg())
    r2 = mw.write(trips(range(3, 8), date="2024-01-02", ts=2, value=2.0), table_path, _cfg())
    r3 = mw.write(trips(range(2), ts=3, value=3.0), table_path, _cfg())
    return r1.instant, r2.instant, r3.instant


def test_snapshot_and_as_of_match_hudi_rs(sp, table_path, two_commits):
    i1, i2, _ = two_commits
    df = sp.read.format(FMT).load(table_path)
    assert [f.name for f in df.schema.fields][:5] == ["_hoodie_commit_time", "_hoodie_commit_seqno",
                                                         "_hoodie_record_key", "_hoodie_partition_path",
                                                         "_hoodie_file_name"]
    assert _spark_rows(df) == rows(hudi_read(table_path), COLS)
    assert _spark_rows(df, COLS + ["_hoodie_commit_time"]) == rows(hudi_read(table_path), COLS + ["_hoodie_commit_time"])
    for t in (i1.requested_time, i2.requested_time):
        old = sp.read.format(FMT).option("as.of.instant", t).load(table_path)
        assert _spark_rows(old) == rows(hudi_read(table_path, as_of=t), COLS)
    assert _spark_rows(mw.Table.open(table_path).to_spark(sp, as_of=i1.requested_time)) == rows(
        hudi_read(table_path, as_of=i1.requested_time), COLS)


def test_incremental_follows_completion_times(sp, table_path, two_commits):
    i1, i2, i3 = two_commits
    # (c1, c2]: what commit 2 wrote, ids 3-7 on 01-02 with value 2
    df = sp.read.format(FMT).options(**INCR).option("hoodie.datasource.read.begin.instanttime", i1.completion_time) \
        .option("hoodie.datasource.read.end.instanttime", i2.completion_time).load(table_path)
    assert _spark_rows(df) == sorted(((str(i), "2024-01-02", 2, 2.0) for i in range(3, 8)), key=repr)
    # (c1, latest]: commit 2 and commit 3 (ids 0-1 at value 3), each record once
    df = sp.read.format(FMT).options(**INCR).option("hoodie.datasource.read.begin.instanttime", i1.completion_time) \
        .load(table_path)
    expect = [(str(i), "2024-01-02", 2, 2.0) for i in range(3, 8)] + [(str(i), "2024-01-01", 3, 3.0) for i in range(2)]
    assert _spark_rows(df) == sorted(expect, key=repr)
    # from the beginning ("000") up to c1: commit 1 only
    df = sp.read.format(FMT).options(**INCR).option("hoodie.datasource.read.begin.instanttime", "000") \
        .option("hoodie.datasource.read.end.instanttime", i1.completion_time).load(table_path)
    assert _spark_rows(df, ["id", "value", "_hoodie_commit_time"]) == sorted(
        ((str(i), 1.0, i1.requested_time) for i in range(5)), key=repr)


def test_cleaned_ranges_raise_instant_not_retained(sp, table_path, two_commits):
    i1, i2, i3 = two_commits
    with mw.Cleaner(table_path, lock=mw.InProcessLock(), retain_commits=1) as c:
        report = c.run_once()
    assert report.old_versions_deleted >= 1
    with pytest.raises(Exception, match="InstantNotRetainedError") as e:
        sp.read.format(FMT).option("as.of.instant", i1.requested_time).load(table_path).collect()
    assert i1.requested_time in str(e.value)
    with pytest.raises(Exception, match="InstantNotRetainedError"):
        sp.read.format(FMT).options(**INCR).option("hoodie.datasource.read.begin.instanttime", "000") \
            .option("hoodie.datasource.read.end.instanttime", i1.completion_time).load(table_path).collect()
    with pytest.raises(mw.errors.InstantNotRetainedError):  # to_spark raises the typed error itself
        mw.Table.open(table_path).to_spark(sp, as_of=i1.requested_time)


def test_partition_filters_prune_file_slices(sp, table_path, two_commits):
    snap = mw.Table.open(table_path).snapshot()
    in_02 = snap.in_partition("2024-01-02")
    assert 0 < len(in_02) < len(snap.files())
    one_per_slice = sp.read.format(FMT).option(PARALLELISM, "1000")  # no packing: pruning shows in task counts
    df = one_per_slice.load(table_path).where("date = '2024-01-02'")
    assert df.rdd.getNumPartitions() == len(in_02)
    assert _spark_rows(df) == [r for r in rows(hudi_read(table_path), COLS) if r[1] == "2024-01-02"]
    df = one_per_slice.load(table_path).where("date in ('2024-01-03', '2024-01-04')")
    assert df.rdd.getNumPartitions() <= 1 and df.count() == 0  # Spark may plan one empty partition
    # a data-column filter skips rows but never partitions; Spark keeps the exact answer
    df = one_per_slice.load(table_path).where("id >= '5' and value > 1.5")
    assert df.rdd.getNumPartitions() == len(snap.files())
    assert _spark_rows(df) == [r for r in rows(hudi_read(table_path), COLS) if r[0] >= "5" and r[3] > 1.5]


def test_small_slices_are_packed_into_spark_tasks(sp, table_path, two_commits):
    """As ``spark.read.parquet`` packs small files: about total bytes / parallelism per task
    (an open cost counted per file), so many small slices do not make as many tasks."""
    n = len(mw.Table.open(table_path).snapshot().files())
    assert n >= 2
    expect = rows(hudi_read(table_path), COLS)
    for parallelism, tasks in (("1", 1), (str(n), n), ("1000", n)):
        df = sp.read.format(FMT).option(PARALLELISM, parallelism).load(table_path)
        assert df.rdd.getNumPartitions() == tasks, parallelism
        assert _spark_rows(df) == expect


def test_declared_columns_and_row_group_splits(sp, tmp_path):
    path = str(tmp_path / "big")
    mw.Table.create(path, name="big", schema=trips([1]).schema, record_key="id", ordering_field="ts")
    mw.write(trips(range(3000)), path, _cfg())
    (f,) = list_data_files(mw.Table.open(path).storage)
    # the writer's file has one row group: rewrite it with many (same rows) to exercise splits
    full = os.path.join(path, f.path)
    t = pq.read_table(full)
    pq.write_table(t, full, row_group_size=300)
    df = sp.read.format(FMT).option("multiwriter.read.split.bytes", "4096").option(PARALLELISM, "1000").load(path)
    assert df.rdd.getNumPartitions() > 1
    assert sorted(r.id for r in df.select("id").collect()) == sorted(str(i) for i in range(3000))
    narrow = sp.read.format(FMT).schema("id string, value double").load(path)
    assert narrow.columns == ["id", "value"] and narrow.count() == 3000


def _write_opts(zk_server, zk_base, name="trips"):
    return trips_write_options(zk_server, zk_base, **{
        "hoodie.table.name": name,
        "hoodie.datasource.write.operation": "upsert",
        "hoodie.datasource.write.streaming.checkpoint.identifier": "batch-job",
        "hoodie.client.heartbeat.interval_in_ms": "1000"})


def test_append_creates_the_table_and_upserts(sp, tmp_path, zk_server, zk_base):
    path = str(tmp_path / "t")
    opts = _write_opts(zk_server, zk_base)
    sp.createDataFrame(trips(range(4)).to_pandas()).write.format(FMT).options(**opts).mode("append").save(path)
    sp.createDataFrame(trips(range(2, 6), ts=2, value=2.0).to_pandas()).repartition(2) \
        .write.format(FMT).options(**opts).mode("append").save(path)
    tl = mw.Table.open(path).timeline()
    assert len(tl.completed_writes()) == 2
    expect = [(str(i), "2024-01-01", 1, 1.0) for i in range(2)] + [(str(i), "2024-01-01", 2, 2.0) for i in range(2, 6)]
    assert rows(hudi_read(path), COLS) == sorted(expect, key=repr)
    assert mw.Table.open(path).config.raw.get("multiwriter.lock.zookeeper.base_path") == zk_base


@pytest.mark.parametrize(
    "change, message",
    [
        ({"hoodie.datasource.write.recordkey.feild": "id"}, "hoodie.datasource.write.recordkey.feild"),
        ({"hoodie.datasource.write.recordkey.field": None}, "hoodie.datasource.write.recordkey.field"),
        ({"hoodie.write.lock.zookeeper.url": None}, "hoodie.write.lock.zookeeper.url"),
        ({"hoodie.datasource.write.table.type": "MERGE_ON_WRITE"}, "MERGE_ON_WRITE"),
    ],
)
def test_option_errors_fail_at_save_before_anything_is_written(sp, tmp_path, zk_server, zk_base, change, message):
    path = str(tmp_path / "t")
    opts = {k: v for k, v in {**_write_opts(zk_server, zk_base), **change}.items() if v is not None}
    with pytest.raises(Exception, match=message.replace(".", r"\.")):
        sp.createDataFrame(trips(range(2)).to_pandas()).write.format(FMT).options(**opts).mode("append").save(path)
    assert not os.path.exists(path)


def test_reads_reject_unknown_options(sp, table_path, two_commits):
    with pytest.raises(Exception, match="as.of.instnat"):
        sp.read.format(FMT).option("as.of.instnat", "1").load(table_path).collect()


def test_virtual_keys_as_a_write_option(sp, tmp_path, zk_server, zk_base):
    """``hoodie.populate.meta.fields=false`` creates a table with virtual keys: snapshot reads
    return null meta columns (as Hudi's), incremental reads are refused by the property's name,
    and a write asking for meta fields on it is refused."""
    path = str(tmp_path / "t")
    opts = {**_write_opts(zk_server, zk_base), "hoodie.populate.meta.fields": "false"}
    sp.createDataFrame(trips(range(4)).to_pandas()).write.format(FMT).options(**opts).mode("append").save(path)
    sp.createDataFrame(trips(range(2, 6), ts=2, value=2.0).to_pandas()).write.format(FMT).options(**opts) \
        .mode("append").save(path)
    assert mw.Table.open(path).config.virtual_keys
    expect = [(str(i), "2024-01-01", 1, 1.0) for i in range(2)] + [(str(i), "2024-01-01", 2, 2.0) for i in range(2, 6)]
    df = sp.read.format(FMT).load(path)
    assert _spark_rows(df) == sorted(expect, key=repr) == rows(hudi_read(path), COLS)
    assert df.where("_hoodie_record_key is not null or _hoodie_commit_time is not null").count() == 0
    with pytest.raises(Exception, match="hoodie.populate.meta.fields=false"):
        sp.read.format(FMT).options(**INCR).option("hoodie.datasource.read.begin.instanttime", "000").load(path).collect()
    with pytest.raises(Exception, match="populate_meta_fields"):
        sp.createDataFrame(trips(range(2)).to_pandas()).write.format(FMT) \
            .options(**{**opts, "hoodie.populate.meta.fields": "true"}).mode("append").save(path)
