"""A Spark batch too large for one task: its table partitions packed into tasks, or (a
partition too large for a task) tagged on executors, planned on the driver from counts alone
and merged on executors. Same rows as the driver path (random batches, read by hudi-rs), typed
errors with nothing committed, and no key crossing to the driver."""
from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest

import multiwriter as mw
from multiwriter import errors
from multiwriter.write import spark as spark_path
from multiwriter.write.index import FILE_ID
from multiwriter.write.records import PARTITION
from tests.conftest import TRIPS_SCHEMA, trips
from tests.oracle import hudi_read, rows

VIEW = ["_hoodie_record_key", "_hoodie_partition_path", "id", "date", "ts", "value"]
DAYS = ["2024-01-01", "2024-01-02", "2024-01-03"]
MOR = {"table_type": "MERGE_ON_READ", "num_buckets": 3}
LAYOUTS = {"cow": {}, "mor": {"table_type": "MERGE_ON_READ"}, "mor-bucket": MOR}


def _table(path: str, **kw) -> None:
    mw.Table.create(path, name="trips", schema=TRIPS_SCHEMA, record_key="id", partition_by=["date"], ordering_field="ts", **kw)


def _random_batch(rng: np.random.Generator, n: int, key_space: int, ts: int) -> pa.Table:
    """``n`` rows of random keys (some repeated within the batch) over three days."""
    ids = rng.integers(0, key_space, n)
    return pa.table({
        "id": pa.array([str(i) for i in ids], pa.string()),
        "date": pa.array([DAYS[i % 3] for i in ids], pa.string()),
        "ts": pa.array(ts + rng.integers(0, 3, n), pa.int64()),
        "value": pa.array(rng.random(n), pa.float64()),
    })


def _spread(monkeypatch, how: str) -> None:
    """No batch is written by one task; ``tagged``: no partition is small enough for a task of its own."""
    monkeypatch.setattr(spark_path, "ONE_TASK_MAX_ROWS", 0)
    if how == "tagged":
        monkeypatch.setattr(spark_path, "TASKS_BY_PARTITION", False)


HOW = ["by-partition", "tagged"]


def _cfg(executor: str, operation: str = "upsert", **kw) -> mw.WriterConfig:
    return mw.WriterConfig(lock=mw.InProcessLock(), writer_id="w", executor=executor, operation=operation, **kw)


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_the_spread_path_writes_what_the_driver_path_writes(spark, tmp_path, monkeypatch, layout, how):
    """Random upserts (updates, new keys, keys repeated in a batch), an insert and a delete,
    through the driver path and through executors with every batch spread over tasks (in
    pieces of 40 rows per tagging step): the same rows, as hudi-rs reads them too."""
    _spread(monkeypatch, how)
    monkeypatch.setattr(spark_path, "TAG_CHUNK_ROWS", 40)
    monkeypatch.setattr(spark_path, "MERGE_TASK_ROWS", 100)
    rng = np.random.default_rng(7)
    batches = [("upsert", _random_batch(rng, 300, 400, 10)), ("upsert", _random_batch(rng, 300, 600, 10)),
               ("insert", trips([f"new-{i}" for i in range(50)], date=DAYS[1], ts=30)),
               ("delete", _random_batch(rng, 60, 600, 0).select(["id", "date"])),
               ("upsert", _random_batch(rng, 400, 700, 11))]
    paths = {ex: str(tmp_path / ex) for ex in ("driver", "spark")}
    for ex, p in paths.items():
        _table(p, **LAYOUTS[layout])
        for op, b in batches:
            data = spark.createDataFrame(b) if ex == "spark" else b
            mw.write(data, p, _cfg(ex, op))
    want = rows(mw.Table.open(paths["driver"]).read(), VIEW)
    assert rows(mw.Table.open(paths["spark"]).read(), VIEW) == want == rows(hudi_read(paths["spark"]), VIEW)
    assert len(want) > 500


@pytest.mark.parametrize("how", HOW)
def test_only_counts_cross_to_the_driver(spark, tmp_path, monkeypatch, how):
    """What the driver collects of a spread batch: rows per (partition, file group) and its
    write stats; never a key column, and far fewer rows than the batch has."""
    path = str(tmp_path / "t")
    _table(path)
    mw.write(trips(range(2000), ts=1), path, _cfg("driver"))
    _spread(monkeypatch, how)
    collected: list[pa.Table] = []
    to_arrow = spark_path.to_arrow

    def seen(df):
        t = to_arrow(df)
        collected.append(t)
        return t

    results = spark_path._results

    def seen_results(job, ctx):
        t = results(job, ctx)
        collected.append(t)
        return t

    monkeypatch.setattr(spark_path, "to_arrow", seen)
    monkeypatch.setattr(spark_path, "_results", seen_results)
    batch = pa.concat_tables([trips(range(1000, 3000), ts=2, value=2.0), trips(range(500), date=DAYS[1], ts=2)])
    mw.write(spark.createDataFrame(batch), path, _cfg("spark"))
    assert collected, "the driver collected nothing it planned from"
    for t in collected:
        assert t.num_rows < 20 and not {"id", "_mw_key", "_hoodie_record_key"} & set(t.column_names)
    if how == "tagged":  # first rows per (partition, file group), then the stats
        assert {PARTITION, FILE_ID}.issubset(collected[0].column_names)
        assert sum(collected[0].column("_mw_rows").to_pylist()) == 2500
    else:  # the stats alone
        assert len(collected) == 1
    got = {(r[0], r[1]): r[2] for r in rows(hudi_read(path), ["id", "date", "value"])}
    assert len(got) == 3500 and got[("1500", DAYS[0])] == 2.0 and got[("10", DAYS[0])] == 1.0 and got[("10", DAYS[1])] == 1.0


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("bad", ["null key", "escaping partition"])
def test_bad_input_of_a_spread_batch_is_its_typed_error_and_commits_nothing(spark, tmp_path, monkeypatch, bad, how):
    _spread(monkeypatch, how)
    path = str(tmp_path / "t")
    _table(path)
    mw.write(trips(range(10), ts=1), path, _cfg("driver"))
    good = trips(range(100), ts=2)
    if bad == "null key":
        broken = pa.table({"id": pa.array([None], pa.string()), "date": [DAYS[0]], "ts": [2], "value": [1.0]})
    else:
        broken = pa.table({"id": ["x"], "date": ["../escape"], "ts": [2], "value": [1.0]})
    df = spark.createDataFrame(pa.concat_tables([good, broken.cast(good.schema)]))
    with pytest.raises(errors.InvalidRecordError):
        mw.write(df, path, _cfg("spark"))
    tl = mw.Table.open(path).timeline()
    assert len(tl.completed_writes()) == 1 and not tl.pending()
    assert rows(hudi_read(path), ["id", "ts"]) == sorted((str(i), 1) for i in range(10))
    assert not os.path.exists(os.path.join(path, "..", "escape"))


@pytest.mark.parametrize("how", ["one task"] + HOW)
def test_executor_upserts_fill_a_small_group_they_rewrite_as_the_driver_path_does(spark, tmp_path, monkeypatch, how):
    """``small_file_limit_bytes``: a Copy-on-Write upsert's new keys join the small group it
    rewrites (one task and spread alike), and still count as inserted keys for the conflict check."""
    if how != "one task":
        _spread(monkeypatch, how)
    paths = {ex: str(tmp_path / ex) for ex in ("driver", "spark")}
    batch = pa.concat_tables([trips(range(5), ts=2, value=2.0), trips(range(100, 120), ts=2, value=3.0)])
    for ex, p in paths.items():
        _table(p)
        mw.write(trips(range(10), ts=1), p, _cfg("driver"))
        r = mw.write(spark.createDataFrame(batch) if ex == "spark" else batch, p, _cfg(ex, small_file_limit_bytes=1 << 20))
        assert (r.num_inserts, r.num_updates) == (20, 5)
    for p in paths.values():
        tl = mw.Table.open(p).timeline()
        stats = [s for ss in tl.commit_metadata(tl.completed_writes()[-1]).partition_to_write_stats.values() for s in ss]
        assert len(stats) == 1 and stats[0].num_inserts == 20 and stats[0].prev_base_file
    assert rows(hudi_read(paths["spark"]), VIEW) == rows(hudi_read(paths["driver"]), VIEW)
    inserted = spark_path.InsertedKeys(mw.Table.open(paths["spark"]).storage, stats)
    assert sorted(inserted[DAYS[0]].to_pylist()) == sorted(str(i) for i in range(100, 120))


def test_the_one_task_names_each_file_with_its_own_token(spark, tmp_path):
    """Merge-on-Read buckets written by the one task: each log file its own write token
    (``<group>-<stage>-<taskAttemptId>``), as Hudi's tasks name theirs."""
    path = str(tmp_path / "t")
    _table(path, **MOR)
    mw.write(trips(range(30), ts=1), path, _cfg("driver"))
    mw.write(spark.createDataFrame(trips(range(30), ts=2, value=2.0)), path, _cfg("spark"))
    tl = mw.Table.open(path).timeline()
    stats = [s for ss in tl.commit_metadata(tl.completed_writes()[-1]).partition_to_write_stats.values() for s in ss]
    tokens = [os.path.basename(s.path).rsplit("_", 1)[1] for s in stats]
    assert len(stats) == 3 and all(".log." in s.path for s in stats)
    assert len(set(tokens)) == 3 and len({t.split("-", 1)[1] for t in tokens}) == 1
    assert rows(hudi_read(path), ["id", "value"]) == sorted((str(i), 2.0) for i in range(30))


@pytest.mark.parametrize("how", HOW)
def test_a_batch_spark_cannot_size_is_read_once(spark, tmp_path, monkeypatch, how):
    """An RDD-backed batch (no size estimate) is read once, by the exchange that sends it to
    tasks by partition, or by the job that tags it (the tagged rows are then cached)."""
    if how == "tagged":
        monkeypatch.setattr(spark_path, "TASKS_BY_PARTITION", False)
    path = str(tmp_path / "t")
    _table(path)
    sc = spark.sparkContext
    reads = sc.accumulator(0)

    def count(rows):
        for r in rows:
            reads.add(1)
            yield r

    df = spark.createDataFrame(sc.parallelize(trips(range(50), ts=1).to_pylist(), 2).mapPartitions(count),
                               "id string, date string, ts long, value double")
    assert spark_path.estimated_bytes(df) is None
    r = mw.write(df, path, _cfg("spark"))
    assert r.num_inserts == 50 and reads.value == 50
    assert rows(hudi_read(path), ["id"]) == sorted((str(i),) for i in range(50))


@pytest.mark.parametrize(("layout", "how"), [("mor-bucket", "one-task"), ("mor-bucket", "tagged"), ("mor", "by-partition")])
def test_incremental_reads_of_merge_on_read_commits_written_on_executors(spark, tmp_path, monkeypatch, layout, how):
    """Log files written on executors are recorded as the driver records them (a delta write
    stat with its log version and files), so an incremental read of those commits on a table
    no cleaner touched returns their rows instead of taking each log for a cleaned slice. The
    model is the acknowledged batches; hudi-rs reads the same ranges alike."""
    from tests.table.test_incremental import hudi_incremental

    if how != "one-task":
        _spread(monkeypatch, how)
    path = str(tmp_path / "t")
    _table(path, **LAYOUTS[layout])
    first = mw.write(spark.createDataFrame(trips(range(20), ts=1, value=1.0)), path, _cfg("spark"))
    second = mw.write(spark.createDataFrame(trips(range(10, 30), ts=2, value=2.0)), path, _cfg("spark"))
    t = mw.Table.open(path)
    cols = ["id", "value"]
    since_first = [(str(i), 2.0) for i in range(10, 30)]
    got = t.read_incremental_batch(first.instant.completion_time)
    assert got.end == second.instant.completion_time
    assert sorted(rows(got.rows, cols)) == sorted(since_first)
    assert sorted(rows(hudi_incremental(path, got.start, got.end), cols)) == sorted(since_first)
    everything = sorted([(str(i), 1.0) for i in range(10)] + since_first)
    assert sorted(rows(t.read_incremental(), cols)) == everything
    logs = [s for s in t.commit_metadata(second.instant.requested_time).all_stats() if ".log." in s.path]
    assert logs and all(s.log_version == 1 and s.log_files == (s.path.rsplit("/", 1)[-1],) for s in logs)
