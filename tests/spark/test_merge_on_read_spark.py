"""Merge-on-Read tables through Spark: the data source reads merged slices (snapshot,
read-optimized, incremental, streaming) and every Spark write path appends log files; hudi-rs
reads each table as we do."""
from __future__ import annotations

import os

import pyarrow.parquet as pq

import multiwriter as mw
from multiwriter.table.files import list_files
from tests.conftest import trips
from tests.oracle import hudi_read, rows
from tests.spark.conftest import trips_write_options

COLS = ["id", "date", "ts", "value"]
FMT = "multiwriter"
MOR_OPTS = {"hoodie.datasource.write.table.type": "MERGE_ON_READ", "hoodie.index.type": "BUCKET",
            "hoodie.bucket.index.num.buckets": "4"}


def _spark_rows(df) -> list[tuple]:
    return sorted((tuple(r[c] for c in COLS) for r in df.select(*COLS).collect()), key=repr)


def _cfg(writer_id="w", **kw):
    return mw.WriterConfig(writer_id=writer_id, lock=mw.InProcessLock(), **kw)


def test_data_source_reads_merged_slices(sp, mor_table, table_path):
    mw.write(trips(range(8), ts=1, value=1.0), table_path, _cfg())
    mw.write(trips(range(4), ts=2, value=2.0), table_path, _cfg())
    mw.write(trips([1], ts=3), table_path, _cfg(operation="delete"))
    t = mw.Table.open(table_path)
    ours = rows(t.read(), COLS)
    assert ours == rows(hudi_read(table_path), COLS) and len(ours) == 7
    assert _spark_rows(sp.read.format(FMT).load(table_path)) == ours
    assert _spark_rows(t.to_spark(sp)) == ours
    ro = sp.read.format(FMT).option("hoodie.datasource.query.type", "read_optimized").load(table_path)
    assert _spark_rows(ro) == rows(hudi_read(table_path, read_optimized=True), COLS)
    first = t.timeline().completed_writes()[0].completion_time
    inc = sp.read.format(FMT).option("hoodie.datasource.query.type", "incremental") \
        .option("hoodie.datasource.read.begin.instanttime", first).load(table_path)
    assert _spark_rows(inc) == rows(t.read_incremental(first), COLS)
    assert sorted(r[0] for r in _spark_rows(inc)) == ["0", "2", "3"]
    filtered = sp.read.format(FMT).load(table_path).where("value < 1.5")
    assert sorted(r[0] for r in _spark_rows(filtered)) == ["4", "5", "6", "7"], "filters apply after the merge"


def test_spark_dataframes_write_log_files(sp, mor_table, table_path):
    df = sp.createDataFrame(trips(range(10), ts=1, value=1.0).to_pandas())
    mw.write(df, table_path, _cfg(executor="spark"))
    df2 = sp.createDataFrame(trips(range(5), ts=2, value=2.0).to_pandas()).repartition(3)
    r = mw.write(df2, table_path, _cfg(executor="spark"))
    assert r.instant.action == "deltacommit"
    _, logs = list_files(mw.Table.open(table_path).storage)
    assert logs, "updates of existing buckets are log files"
    got = rows(mw.Table.open(table_path).read(), COLS)
    assert got == rows(hudi_read(table_path), COLS)
    assert dict((r[0], r[3]) for r in got) == {str(i): 2.0 if i < 5 else 1.0 for i in range(10)}


def test_write_and_write_stream_create_and_append_to_a_merge_on_read_table(sp, tmp_path, zk_server, zk_base):
    path = str(tmp_path / "t")
    opts = {**trips_write_options(zk_server, zk_base), **MOR_OPTS}
    sp.createDataFrame(trips(range(6)).to_pandas()).write.format(FMT).options(**opts).mode("append").save(path)
    t = mw.Table.open(path)
    assert t.config.merge_on_read and t.config.num_buckets == 4
    src = tmp_path / "src"
    os.makedirs(src)
    pq.write_table(trips(range(3), ts=5, value=5.0), src / "a.parquet")
    q = (sp.readStream.schema("id string, date string, ts long, value double").parquet(str(src)).writeStream
         .format(FMT).options(**opts, **{"hoodie.datasource.write.streaming.checkpoint.identifier": "s"})
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start(path))
    q.awaitTermination(180)
    assert q.exception() is None
    tl = mw.Table.open(path).timeline()
    assert [i.action for i in tl.completed_writes()] == ["deltacommit", "deltacommit"]
    got = rows(mw.Table.open(path).read(), COLS)
    assert got == rows(hudi_read(path), COLS)
    assert dict((r[0], r[3]) for r in got) == {str(i): 5.0 if i < 3 else 1.0 for i in range(6)}


def test_read_stream_delivers_each_committed_version_once(sp, mor_table, table_path, tmp_path):
    mw.write(trips(range(4), ts=1, value=1.0), table_path, _cfg())
    got = []

    def collect(df, batch_id):
        got.extend(_spark_rows(df))

    def run():
        q = (sp.readStream.format(FMT).load(table_path).writeStream.foreachBatch(collect)
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
        q.awaitTermination(120)
        assert q.exception() is None

    run()
    assert sorted(r[0] for r in got) == ["0", "1", "2", "3"]
    mw.write(trips(range(2), ts=2, value=2.0), table_path, _cfg())
    run()
    assert sorted((r[0], r[3]) for r in got[4:]) == [("0", 2.0), ("1", 2.0)], "the updates once, from the log files"


def test_read_stream_replaying_a_batch_whose_slices_were_cleaned_says_it_fell_behind(sp, mor_table, table_path, tmp_path):
    """A micro-batch replayed after a restart keeps its logged range; after a compaction and a
    clean removed the slices that range merges, the query fails with InstantNotRetainedError
    (never an empty or partial batch), and a new query from the offset it names delivers the rest."""
    import pytest

    from multiwriter.spark import options as opt

    lock = mw.InProcessLock()
    cfg = mw.WriterConfig(writer_id="w", lock=lock, executor="driver")
    got: list[tuple[int, list[tuple]]] = []
    ck = tmp_path / "ck"

    def run(path_ck, **options):
        q = (sp.readStream.format(FMT).options(**options).load(table_path).writeStream
             .foreachBatch(lambda df, i: got.append((i, _spark_rows(df))))
             .option("checkpointLocation", str(path_ck)).trigger(availableNow=True).start())
        q.awaitTermination(120)
        return q

    mw.write(trips(range(8), ts=0, value=0.0), table_path, cfg)
    assert run(ck).exception() is None
    mw.write(trips([1, 5], ts=1, value=1.0), table_path, cfg)
    assert run(ck).exception() is None and [b for b, _ in got] == [0, 1]
    assert got[1][1] == [("1", "2024-01-01", 1, 1.0), ("5", "2024-01-01", 1, 1.0)]
    (ck / "commits" / "1").unlink()  # as if the query died before Spark logged batch 1 done
    for k in (2, 3):
        mw.write(trips([k, k + 4], ts=k, value=float(k)), table_path, cfg)
    with mw.Cleaner(table_path, lock=lock, retain_commits=1, clustering=None,
                    compaction=mw.CompactionConfig(delta_commits=2)) as cleaner:
        report = cleaner.run_once()
    assert report.compaction_instants and report.old_versions_deleted > 0
    got.clear()
    with pytest.raises(Exception, match="InstantNotRetainedError") as e:
        run(ck).awaitTermination(1)
    assert got == [], "no empty or partial replay of batch 1"
    assert "fell behind" in str(e.value) and opt.START_OFFSET in str(e.value)
    resume = str(e.value).split(f"{opt.START_OFFSET}=")[1].split(" ")[0]
    assert resume.isdigit()
    assert run(tmp_path / "ck2", **{opt.START_OFFSET: resume}).exception() is None
    assert sorted(r for _, rs in got for r in rs) == sorted(
        [("2", "2024-01-01", 2, 2.0), ("6", "2024-01-01", 2, 2.0), ("3", "2024-01-01", 3, 3.0), ("7", "2024-01-01", 3, 3.0)])


def test_a_micro_batch_of_a_compaction_only_plans_no_partition(mor_table, table_path):
    """The compaction moves the stream's offset; its micro-batch reads no file."""
    from pyspark.sql.types import StructType

    from multiwriter.spark import options as opt
    from multiwriter.spark.stream_read import MultiWriterStreamReader, offset

    for k in range(3):
        mw.write(trips(range(4), ts=k, value=float(k)), table_path, _cfg())
    reader = MultiWriterStreamReader(opt.parse_stream_read({"path": table_path}), StructType())
    before = reader.latestOffset(offset(None), None)
    assert len(reader.partitions(offset(None), before)) >= 1
    with mw.Cleaner(table_path, lock=mw.InProcessLock(), clustering=None,
                    compaction=mw.CompactionConfig(delta_commits=2)) as cleaner:
        assert cleaner.run_once().compaction_instants
    after = reader.latestOffset(before, None)
    assert after != before, "the compaction's completion is the new offset"
    assert reader.partitions(before, after) == []


def test_data_source_reads_a_log_only_group_as_hudis_jvm_does(sp, mor_table, table_path):
    """A bucket a JVM writer started with a log file (no base): the data source returns its rows
    (snapshot), none read-optimized (base files only)."""
    from tests.table.jvm_style import at, bucket_group, deltacommit, keys_in_bucket

    a, b = keys_in_bucket(2, 2)
    deltacommit(mor_table, at(1), at(2), bucket_group(2), upserts=[(a, 1, 1.0), (b, 1, 2.0)])
    expect = sorted([(a, "2024-01-01", 1, 1.0), (b, "2024-01-01", 1, 2.0)], key=repr)
    assert _spark_rows(sp.read.format(FMT).load(table_path)) == expect
    assert _spark_rows(mw.Table.open(table_path).to_spark(sp)) == expect
    ro = sp.read.format(FMT).option("hoodie.datasource.query.type", "read_optimized").load(table_path)
    assert ro.count() == 0
