"""Upsert, insert and delete into file groups: driver path, executor path, a model, hudi-rs."""
from __future__ import annotations

import glob
import os

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import multiwriter as mw
from multiwriter import errors
from multiwriter.write import spark as spark_path
from tests.conftest import TRIPS_SCHEMA, trips
from tests.oracle import hudi_read, rows, unzip_fixture

VIEW = ["_hoodie_record_key", "_hoodie_partition_path", "id", "date", "ts", "value"]


def new_table(path):
    return mw.Table.create(path, name="trips", schema=TRIPS_SCHEMA, record_key="id", partition_by=["date"], ordering_field="ts")


BATCHES = [
    ("upsert", trips(range(50), date="2024-01-01", ts=1, value=1)),
    ("upsert", trips(range(30, 80), date="2024-01-02", ts=2, value=2)),
    ("upsert", pa.concat_tables([trips(range(10, 40), ts=3, value=3), trips(range(10, 20), ts=4, value=4),
                                 trips(range(15, 18), ts=2, value=-1)])),  # duplicates: greatest ts wins
    ("delete", trips(range(5))),
    ("upsert", trips(range(45, 55), ts=0, value=9)),  # older ts than stored for 45..49: those keep their value
]


@pytest.mark.parametrize("executor", ["driver", "spark", "spark-spread", "spark-fallback"])
def test_driver_and_executor_paths_write_the_same_rows(spark, tmp_path, monkeypatch, executor):
    """``spark-spread``: every write is spread over Spark tasks by an exchange (as large ones are)
    instead of written by one task; ``spark-fallback``: batches of more than 20 rows are first
    seen by the one task, which writes nothing, then spread."""
    if executor in ("spark-spread", "spark-fallback"):
        monkeypatch.setattr(spark_path, "ONE_TASK_MAX_ROWS", 0 if executor == "spark-spread" else 20)
        executor = "spark"
    driver, other = str(tmp_path / "driver"), str(tmp_path / executor)
    for p, ex in ((driver, "driver"), (other, executor)):
        new_table(p)
        for op, b in BATCHES:
            data = spark.createDataFrame(b.to_pandas()) if ex == "spark" else b
            mw.write(data, p, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="w", executor=ex, operation=op))
    a, b = mw.Table.open(driver).read(), mw.Table.open(other).read()
    assert rows(a, VIEW) == rows(b, VIEW) == rows(hudi_read(other), VIEW)
    got = {(i, d): v for i, d, v in rows(a, ["id", "date", "value"])}
    day1 = "2024-01-01"
    assert ("0", day1) not in got and got[("16", day1)] == 4.0 and got[("45", day1)] == 1.0 and got[("50", day1)] == 9.0
    assert a.num_rows == 45 + 5 + 50


def test_a_small_spark_batch_is_written_by_one_job_of_one_task(spark, tmp_path):
    """The input is read once: no job collects the batch's keys before the one that writes."""
    path = str(tmp_path / "t")
    new_table(path)
    sc = spark.sparkContext
    cfg = mw.WriterConfig(lock=mw.InProcessLock(), writer_id="w", executor="spark")
    mw.write(spark.createDataFrame(trips(range(40), ts=1).to_pandas()), path, cfg)
    df = spark.createDataFrame(pa.concat_tables([trips(range(20, 60), ts=2, value=2), trips(range(5), date="2024-01-02")]).to_pandas())
    sc.setJobGroup("mw-one-task", "the write under test")
    try:
        r = mw.write(df, path, cfg)
    finally:
        sc.setJobGroup("", "")
    jobs = [sc.statusTracker().getJobInfo(j) for j in sc.statusTracker().getJobIdsForGroup("mw-one-task")]
    assert len(jobs) == 1 and len(jobs[0].stageIds) == 1
    assert sc.statusTracker().getStageInfo(jobs[0].stageIds[0]).numTasks == 1
    assert (r.num_inserts, r.num_updates) == (25, 20)
    got = {(i, d): v for i, d, v in rows(hudi_read(path), ["id", "date", "value"])}
    assert len(got) == 65 and got[("39", "2024-01-01")] == 2.0 and got[("19", "2024-01-01")] == 1.0


def test_a_new_key_the_executor_path_inserted_conflicts_with_a_rival_inserting_it(spark, tmp_path, monkeypatch):
    """The executor path's inserted keys (read from its new files only when a rival created file
    groups meanwhile) still make the second of two writers inserting one new key lose."""
    path = str(tmp_path / "t")
    new_table(path)
    lock = mw.InProcessLock()
    original = spark_path.run_on_executors

    def rival_commits_meanwhile(*args, **kwargs):
        out = original(*args, **kwargs)
        mw.write(trips(["same"], ts=1, value=7), path, mw.WriterConfig(lock=lock, writer_id="rival"))
        return out

    monkeypatch.setattr(spark_path, "run_on_executors", rival_commits_meanwhile)
    df = spark.createDataFrame(trips(["same", "own"], ts=1, value=1).to_pandas())
    with pytest.raises(errors.WriteConflictError):
        mw.write(df, path, mw.WriterConfig(lock=lock, writer_id="w", executor="spark", max_conflict_retries=0))
    assert rows(hudi_read(path), ["id", "value"]) == [("same", 7.0)]


def test_a_new_key_routed_by_a_bloom_false_positive_still_conflicts_with_a_rival_inserting_it(tmp_path, monkeypatch):
    """The driver path sends a key that only one file may hold (by its bloom filter) to that
    file's group without reading the file's keys. When the key is new after all (a false
    positive, forced here), the merge inserts it and reports it, so a rival that inserted the
    same key meanwhile still makes this write lose."""
    import importlib

    index_mod = importlib.import_module("multiwriter.write.index")
    writer_mod = importlib.import_module("multiwriter.write.writer")
    path = str(tmp_path / "t")
    new_table(path)
    lock = mw.InProcessLock()
    mw.write(trips(range(10), ts=1, value=1), path, mw.WriterConfig(lock=lock, writer_id="w"))
    may_hold = index_mod.FooterKeys.may_hold
    rivals: list[str] = []  # the rival's own index sees no false positive

    def false_positive_for_same(self, keys, *args, **kwargs):
        mask = may_hold(self, keys, *args, **kwargs)
        strings = keys.strings if isinstance(keys, index_mod.PartitionKeys) else keys
        same = np.array([k == "same" and not rivals for k in strings.to_pylist()])
        return (np.zeros(len(keys), bool) if mask is False else mask) | same

    original = writer_mod.run_on_driver

    def rival_commits_meanwhile(*args, **kwargs):
        out = original(*args, **kwargs)
        if not rivals:
            rivals.append("rival")
            mw.write(trips(["same"], ts=1, value=7), path, mw.WriterConfig(lock=lock, writer_id="rival"))
        return out

    monkeypatch.setattr(index_mod.FooterKeys, "may_hold", false_positive_for_same)
    monkeypatch.setattr(writer_mod, "run_on_driver", rival_commits_meanwhile)
    with pytest.raises(errors.WriteConflictError):
        mw.write(trips(["same", "3"], ts=2, value=2), path, mw.WriterConfig(lock=lock, writer_id="w", max_conflict_retries=0))
    got = rows(hudi_read(path), ["id", "value"])
    assert [r for r in got if r[0] == "same"] == [("same", 7.0)] and ("3", 1.0) in got


def test_the_one_task_refuses_to_write_for_an_instant_rolled_back_meanwhile(spark, tmp_path, monkeypatch):
    """A cleaner rolled the instant back before the task ran: the task writes no data file and
    the write raises the typed error; nothing is committed (plain directory walk, hudi-rs)."""
    path = str(tmp_path / "t")
    new_table(path)
    cfg = mw.WriterConfig(lock=mw.InProcessLock(), writer_id="w", executor="spark")
    mw.write(spark.createDataFrame(trips(range(5), value=1).to_pandas()), path, cfg)
    before = sorted(glob.glob(f"{path}/*/*.parquet"))
    original = spark_path._in_one_task

    def rolled_back_first(df, cfg_, ctx, *rest):
        for f in glob.glob(f"{path}/.hoodie/timeline/{ctx.instant_time}.*"):
            os.remove(f)
        return original(df, cfg_, ctx, *rest)

    monkeypatch.setattr(spark_path, "_in_one_task", rolled_back_first)
    with pytest.raises(errors.InstantRolledBackError):
        mw.write(spark.createDataFrame(trips(range(3, 8), ts=2, value=2).to_pandas()), path, cfg)
    assert sorted(glob.glob(f"{path}/*/*.parquet")) == before
    assert rows(hudi_read(path), ["id", "value"]) == [(str(i), 1.0) for i in range(5)]


def test_every_attempt_of_the_one_task_names_its_new_file_groups_alike(tmp_path):
    """Two plans of one batch (as a retried or speculative task attempt makes) give their new
    file groups the same names, each holding the same keys."""
    from multiwriter.write.index import KeyIndex
    from multiwriter.write.merge import context
    from multiwriter.write.records import KEY, prepare
    from multiwriter.write.plan import plan_batch

    path = str(tmp_path / "t")
    new_table(path)
    mw.write(trips(range(10)), path, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="w"))
    t = mw.Table.open(path)
    batch = pa.concat_tables([trips(range(5, 400), ts=2), trips(range(300), date="2024-01-02")])
    prepared = prepare(batch, t.config, t.schema(), operation="upsert", hashes=True)
    ctx = context(path, "20990101000000000", t.schema(), "ts", 1, ("id",))

    def groups():
        plan = spark_path.stable_new_ids(plan_batch(prepared, t.timeline(), KeyIndex(t.storage), "upsert", 2048),
                                          ctx.instant_time)
        return {(task.partition, task.file_id, task.is_new): sorted(plan.rows_for(task).column(KEY).to_pylist())
                for task in plan.tasks}

    first, second = groups(), groups()
    assert first == second
    assert sum(new for _, _, new in first) >= 3, "several new file groups were planned"


def test_new_file_group_names_do_not_depend_on_row_order(tmp_path):
    """A rerun attempt may get its rows in another order (a recomputed shuffle): it must still
    name its new file groups as the first attempt did, so a late attempt collides with the
    committed group instead of adding a second copy of its rows. Bucket tables keep the bucket
    number in the name."""
    from multiwriter.table import bucket
    from multiwriter.write.index import KeyIndex
    from multiwriter.write.records import prepare
    from multiwriter.write.plan import plan_batch

    for kind, extra in (("cow", {}), ("mor", {"table_type": "MERGE_ON_READ", "num_buckets": 4})):
        path = str(tmp_path / kind)
        mw.Table.create(path, name="t", schema=TRIPS_SCHEMA, record_key="id", partition_by=["date"],
                        ordering_field="ts", **extra)
        t = mw.Table.open(path)
        batch = pa.concat_tables([trips(range(400), ts=2), trips(range(300), date="2024-01-02")])

        def names(rows: pa.Table, t=t) -> dict[str, list[str]]:
            prepared = prepare(rows, t.config, t.schema(), operation="upsert", hashes=True)
            plan = spark_path.stable_new_ids(plan_batch(prepared, t.timeline(), KeyIndex(t.storage), "upsert", 2048),
                                              "20990101000000000", bucketed=t.config.bucket_index)
            return {task.file_id: sorted(plan.rows_for(task).column("_mw_key").to_pylist()) for task in plan.tasks}

        forward = names(batch)
        backward = names(batch.take(pa.array(range(batch.num_rows - 1, -1, -1))))
        shuffled = names(batch.take(pa.array(sorted(range(batch.num_rows), key=lambda i: (i * 7919) % batch.num_rows))))
        assert forward == backward == shuffled, kind
        assert len(forward) >= 2
        if extra:
            assert all(bucket.bucket_of_file_id(f) is not None for f in forward), forward


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(["upsert", "delete"]),
                          st.lists(st.tuples(st.integers(0, 30), st.sampled_from(["a", "b"]), st.integers(0, 5)), min_size=1, max_size=25)),
                min_size=1, max_size=5))
def test_random_batches_match_a_model(tmp_path_factory, ops):
    path = str(tmp_path_factory.mktemp("model") / "t")
    new_table(path)
    model: dict[tuple[str, str], tuple[int, float]] = {}
    for n, (op, recs) in enumerate(ops):
        batch = pa.table({"id": [str(k) for k, _, _ in recs], "date": [d for _, d, _ in recs],
                          "ts": pa.array([ts for _, _, ts in recs], pa.int64()), "value": [float(n * 100 + i) for i in range(len(recs))]})
        mw.write(batch, path, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="m", operation=op))
        latest: dict[tuple[str, str], tuple[int, float]] = {}
        for i, (k, d, ts) in enumerate(recs):  # in-batch dedupe: greatest ts, then the last (a delete batch: the last)
            cur = latest.get((str(k), d))
            if cur is None or ts >= cur[0] or op == "delete":
                latest[(str(k), d)] = (ts, float(n * 100 + i))
        for key, (ts, v) in latest.items():
            # a delete carrying the ordering field competes by it as an upsert does (event time:
            # it removes the stored row unless that row's ts is greater), on both table types
            if op == "delete":
                if key in model and ts >= model[key][0]:
                    del model[key]
            elif key not in model or ts >= model[key][0]:
                model[key] = (ts, v)
    got = mw.Table.open(path).read()
    expect = sorted(((k, d, ts, v) for (k, d), (ts, v) in model.items()), key=repr)
    assert rows(got, ["id", "date", "ts", "value"]) == expect
    assert rows(hudi_read(path), ["id", "date", "ts", "value"]) == expect


@pytest.mark.needs_fixtures
@pytest.mark.parametrize("executor", ["driver", "spark"])
def test_upsert_into_spark_written_fixture(spark, tmp_path, executor):
    path = str(unzip_fixture("v8_simplekeygen_nonhivestyle", tmp_path))
    t = mw.Table.open(path)
    base = t.read().drop_columns(list(mw.format.schema.META_COLUMNS))
    upd = base.filter(pa.compute.equal(base["id"], 2))
    upd = upd.set_column(upd.schema.get_field_index("name"), "name", pa.array(["Bobby"]))
    upd = upd.set_column(upd.schema.get_field_index("longField"), "longField", pa.array([9876543211], pa.int64()))
    new = base.filter(pa.compute.equal(base["id"], 3))
    new = new.set_column(0, "id", pa.array([5], pa.int32()))
    batch = pa.concat_tables([upd, new])
    data = spark.createDataFrame(batch) if executor == "spark" else batch
    mw.write(data, path, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="w", executor=executor))
    got = rows(mw.Table.open(path).read(), ["id", "name"])
    assert got == [(1, "Alice"), (2, "Bobby"), (3, "Carol"), (4, "Diana"), (5, "Carol")]
    assert rows(hudi_read(path), ["id", "name"]) == got


def test_schema_evolution_adds_nullable_columns(trips_table, table_path):
    mw.write(trips(range(3)), table_path, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="w"))
    wider = trips(range(2, 5)).append_column("note", pa.array(["x", "y", "z"]))
    mw.write(wider, table_path, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="w"))
    got = dict(rows(mw.Table.open(table_path).read(), ["id", "note"]))
    assert got == {"0": None, "1": None, "2": "x", "3": "y", "4": "z"}
    assert dict(rows(hudi_read(table_path), ["id", "note"])) == got


def test_commit_metadata_carries_full_write_stats(trips_table, table_path):
    mw.write(trips(range(10)), table_path, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="w"))
    r = mw.write(trips(range(5, 12), ts=2), table_path, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="w",
                                                                       small_file_limit_bytes=0))  # new keys: a new group
    meta = mw.Table.open(table_path).commit_metadata(r.instant.requested_time)
    stats = {s.prev_commit != "null": s for s in meta.all_stats()}
    upd, ins = stats[True], stats[False]
    assert (upd.num_writes, upd.num_update_writes, upd.num_inserts, upd.num_deletes) == (10, 5, 0, 0)
    assert upd.prev_base_file and upd.prev_base_file.endswith(".parquet") and upd.file_size == upd.total_write_bytes > 0
    assert (ins.num_writes, ins.num_inserts) == (2, 2) and ins.prev_base_file is None
    for s in (upd, ins):  # the sizes are the files' sizes on disk
        assert s.file_size == os.path.getsize(f"{table_path}/{s.path}")
    assert meta.operation_type == "UPSERT" and '"name":"id"' in meta.extra_metadata["schema"]
    # small-file handling: the new keys join the group the upsert rewrites anyway
    r = mw.write(trips(range(10, 14), ts=3), table_path, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="w"))
    [both] = mw.Table.open(table_path).commit_metadata(r.instant.requested_time).all_stats()
    assert (both.num_writes, both.num_update_writes, both.num_inserts, both.prev_base_file is not None) == (4, 2, 2, True)


def test_spark_null_key_and_unsafe_partition_write_nothing(spark, trips_table, table_path):
    bad = trips(range(3)).set_column(0, "id", pa.array(["a", None, "c"]))
    cfg = mw.WriterConfig(lock=mw.InProcessLock(), writer_id="w", executor="spark")
    with pytest.raises(errors.InvalidRecordError):
        mw.write(spark.createDataFrame(bad.to_pandas()), table_path, cfg)
    with pytest.raises(errors.InvalidRecordError):
        mw.write(spark.createDataFrame(trips(range(2), date="../../etc").to_pandas()), table_path, cfg)
    tl = mw.Table.open(table_path).timeline()
    assert tl.instants == []


def test_large_insert_spreads_over_groups_and_mixed_batch_routes_every_row(trips_table, table_path):
    """A partition's new rows beyond the target file size go to several new file groups, each
    key to the group its hash picks; a batch mixing updates, new keys and deletes of absent keys
    in interleaved partitions writes exactly the expected rows (plain Parquet and hudi-rs)."""
    import pyarrow.parquet as pq

    cfg = mw.WriterConfig(lock=mw.InProcessLock(), writer_id="w", target_file_size_bytes=1024)
    r = mw.write(pa.concat_tables([trips(range(0, 300), date=d) for d in ("2024-01-01", "2024-01-02")]), table_path, cfg)
    assert r.files_written >= 4
    for f in glob.glob(f"{table_path}/2024-01-0*/*.parquet"):  # every group's keys in its own file, once
        keys = pq.read_table(f, columns=["_hoodie_record_key"]).column(0).to_pylist()
        assert len(keys) == len(set(keys)) > 0
    interleaved = pa.concat_tables([trips([i], date=("2024-01-01", "2024-01-02")[i % 2], ts=2, value=2) for i in range(250, 350)])
    deletes = pa.concat_tables([trips(range(5), date="2024-01-02"), trips(range(900, 905), date="2024-01-03")])
    mw.write(interleaved, table_path, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="w"))
    mw.write(deletes, table_path, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="w", operation="delete"))
    want = {(str(i), d): 1.0 for i in range(300) for d in ("2024-01-01", "2024-01-02")}
    want.update({(str(i), ("2024-01-01", "2024-01-02")[i % 2]): 2.0 for i in range(250, 350)})
    for i in range(5):
        del want[(str(i), "2024-01-02")]
    expect = sorted((k, d, v) for (k, d), v in want.items())
    assert sorted(rows(mw.Table.open(table_path).read(), ["id", "date", "value"])) == expect
    assert sorted(rows(hudi_read(table_path), ["id", "date", "value"])) == expect


def test_a_gather_that_fails_on_the_merge_threads_fails_the_write_and_leaves_nothing(trips_table, table_path, monkeypatch):
    """The rows are gathered by task on the merge threads while the writer writes its inflight
    file and markers: when that gather fails, the write raises it, the attempt is undone, and
    the table reads as before (hudi-rs), with no pending instant and no stray data file."""
    from multiwriter.write import plan as plan_mod

    cfg = mw.WriterConfig(lock=mw.InProcessLock(), writer_id="w", operation="insert")
    mw.write(trips(range(20), date="2024-01-01"), table_path, cfg)
    before = rows(hudi_read(table_path), VIEW)
    files_before = sorted(glob.glob(os.path.join(table_path, "**", "*.parquet"), recursive=True))

    def failing_take(self, ix):
        raise RuntimeError("gather failed")

    monkeypatch.setattr(plan_mod.Plan, "_take", failing_take)
    batch = pa.concat_tables([trips(range(100, 120), date=d) for d in ("2024-01-01", "2024-01-02", "2024-01-03")])
    with pytest.raises(RuntimeError, match="gather failed"):
        mw.write(batch, table_path, cfg)
    assert rows(hudi_read(table_path), VIEW) == before
    assert mw.Table.open(table_path).timeline().pending() == []
    assert sorted(glob.glob(os.path.join(table_path, "**", "*.parquet"), recursive=True)) == files_before
