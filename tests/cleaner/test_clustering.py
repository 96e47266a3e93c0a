"""Clustering in the companion cleaner: small file groups stitched into target-size ones in
Hudi's version-8 format, ingestion first. Oracles: hudi-rs (rows, as-of reads), fastavro (the
timeline files), pyarrow (data files)."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import threading
from pathlib import Path

import fastavro
import pyarrow.parquet as pq
import pytest
from prometheus_client import CollectorRegistry

import multiwriter as mw
from multiwriter.cleaner import clustering
from multiwriter.metrics import Metrics
from multiwriter.format import instant as inst
from tests.cleaner.conftest import HB, MISSES, ROOT, data_files_of, writer_config
from tests.conftest import TRIPS_SCHEMA, trips
from tests.oracle import hudi_read, rows

SMALL = mw.ClusteringConfig(small_file_bytes=1 << 20, target_file_bytes=4 << 20, max_bytes_per_run=64 << 20, min_file_groups=2)
COLS = ["_hoodie_record_key", "_hoodie_commit_time", "_hoodie_partition_path", "id", "date", "value"]
DATES = ("2024-01-01", "2024-01-02")


def _timeline_files(path: str) -> list[str]:
    return sorted(os.listdir(Path(path, ".hoodie", "timeline")))


def _avro(path: str, name: str) -> dict:
    with open(Path(path, ".hoodie", "timeline", name), "rb") as f:
        (rec,) = list(fastavro.reader(f))
    return rec


def _live_per_partition(path: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for f in mw.Table.open(path).snapshot().files():
        out[f.partition] = out.get(f.partition, 0) + 1
    return out


def _small_inserts(path: str, n: int, cfg: mw.WriterConfig) -> None:
    for k in range(n):
        mw.write(trips(range(k * 10, k * 10 + 10), date=DATES[k % 2], value=k), path, cfg)


def test_small_inserts_are_clustered_and_every_reader_agrees(trips_table, table_path):
    cfg = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock())
    _small_inserts(table_path, 8, cfg)
    assert _live_per_partition(table_path) == {"2024-01-01": 4, "2024-01-02": 4}
    before = mw.Table.open(table_path).timeline().last_completed_write().requested_time
    expected = rows(hudi_read(table_path), COLS)
    with mw.Cleaner(table_path, lock=mw.InProcessLock(), clustering=SMALL) as cleaner:
        report = cleaner.run_once()
    assert len(report.clustering_instants) == 1 and report.clustered_file_groups == 8
    (t,) = report.clustering_instants
    # version-8 names: requested/inflight as clustering, completed as replacecommit
    names = _timeline_files(table_path)
    assert f"{t}.clustering.requested" in names and f"{t}.clustering.inflight" in names
    (done,) = [n for n in names if n.startswith(f"{t}_") and n.endswith(".replacecommit")]
    plan = _avro(table_path, f"{t}.clustering.requested")
    assert plan["operationType"] == "CLUSTER"
    planned = {(s["partitionPath"], s["fileId"]) for g in plan["clusteringPlan"]["inputGroups"] for s in g["slices"]}
    meta = _avro(table_path, done)
    replaced = {(p, f) for p, ids in meta["partitionToReplaceFileIds"].items() for f in ids}
    assert replaced == planned and len(replaced) == 8
    # one file group per partition now (all inputs fit one target-size output), read the same by all
    assert _live_per_partition(table_path) == {"2024-01-01": 1, "2024-01-02": 1}
    assert rows(hudi_read(table_path), COLS) == expected == rows(mw.Table.open(table_path).read(), COLS)
    assert rows(hudi_read(table_path, as_of=before), COLS) == expected
    # rows were moved, not written: they keep their commit time, so the clustering adds no
    # incremental data; the new files name themselves in _hoodie_file_name
    tbl = mw.Table.open(table_path)
    ct = tbl.timeline().find(t).completion_time
    assert tbl.read_incremental(start=tbl.timeline().completed_writes()[-2].completion_time).num_rows == 0
    assert ct is not None
    for stats in meta["partitionToWriteStats"].values():
        for s in stats:
            f = pq.read_table(Path(table_path, s["path"]))
            assert set(f.column("_hoodie_file_name").to_pylist()) == {Path(s["path"]).name}
            assert t not in set(f.column("_hoodie_commit_time").to_pylist())


def test_completed_clustering_is_not_pending_for_later_cleaner_runs(trips_table, table_path):
    """A completed clustering keeps its requested/inflight files beside the replacecommit; later
    runs (rollback of lapsed instants, archival) must treat it as completed, never roll it back."""
    cfg = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock())
    _small_inserts(table_path, 6, cfg)
    expected = rows(hudi_read(table_path), COLS)
    with mw.Cleaner(table_path, lock=mw.InProcessLock(), clustering=SMALL, heartbeat_interval_s=HB,
                    heartbeat_tolerable_misses=MISSES) as cleaner:
        (t,) = cleaner.run_once().clustering_instants
    with mw.Cleaner(table_path, lock=mw.InProcessLock(), clustering=None, heartbeat_interval_s=HB,
                    heartbeat_tolerable_misses=MISSES, archive_keep_min=1, archive_keep_max=2, retain_commits=1) as c:
        report = c.run_once()
    assert t not in report.rolled_back
    assert rows(hudi_read(table_path), COLS) == expected == rows(mw.Table.open(table_path).read(), COLS)
    tl = mw.Table.open(table_path).timeline()
    assert t not in {i.requested_time for i in tl.pending()}
    assert report.errors == []


def _context(cleaner):
    return cleaner._context()


def test_writer_update_between_plan_and_commit_aborts_the_clustering(trips_table, table_path):
    cfg = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock(), max_conflict_retries=0)
    _small_inserts(table_path, 6, cfg)
    with mw.Cleaner(table_path, lock=mw.InProcessLock(), clustering=SMALL) as cleaner:
        ctx = _context(cleaner)
        plan = clustering.schedule(ctx, SMALL)
        assert plan is not None
        stats = clustering.execute(ctx, plan)
        written = {s.path for s in stats}
        assert all(Path(table_path, p).exists() for p in written)
        # the writer updates key 0 (an input group) while the clustering is pending: the writer
        # wins without a retry, whatever the pending plan says
        r = mw.write(trips([0], date=DATES[0], value=99), table_path, cfg)
        assert r.attempts == 1 and r.conflicts == 0
        with pytest.raises(clustering.ClusteringAbortedError, match=r.instant.requested_time):
            clustering.commit(ctx, plan, stats)
        deleted = clustering.abort(ctx, plan)
    assert set(deleted) == written and not any(Path(table_path, p).exists() for p in written)
    t = plan.clustering_time
    assert not [n for n in _timeline_files(table_path) if n.startswith(t)]
    got = {r[3]: r[5] for r in rows(hudi_read(table_path), COLS)}
    assert got["0"] == 99.0 and len(got) == 60
    assert rows(hudi_read(table_path), COLS) == rows(mw.Table.open(table_path).read(), COLS)


def test_writer_whose_base_predates_a_completed_clustering_retries_onto_the_new_groups(trips_table, table_path):
    cfg = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock())
    _small_inserts(table_path, 6, cfg)
    table = mw.Table.open(table_path)
    from multiwriter.conflict import FileGroupOverlapStrategy

    base_tl = table.timeline()
    base = base_tl.last_completed_write()
    old_group = next(f.group for f in table.snapshot().files() if f.partition == DATES[0])
    with mw.Cleaner(table_path, lock=mw.InProcessLock(), clustering=SMALL) as cleaner:
        (t,) = cleaner.run_once().clustering_instants
    conflict = FileGroupOverlapStrategy().find_conflict(table.timeline(), base.completion_time, "99999999999999999", {old_group})
    assert conflict is not None and conflict.winner.requested_time == t
    # the sink's retry path: a fresh write lands on the new groups
    mw.write(trips([0], date=DATES[0], value=7), table_path, cfg)
    assert {r[3]: r[5] for r in rows(hudi_read(table_path), COLS)}["0"] == 7.0
    assert _live_per_partition(table_path)[DATES[0]] == 1


def test_killed_clustering_is_rolled_back_by_the_next_cleaner_run(trips_table, table_path):
    lock = mw.FileSystemLock()
    cfg = writer_config(lock)
    for k in range(6):
        mw.write(trips(range(k * 10, k * 10 + 10), date=DATES[k % 2], value=k), table_path, cfg)
    expected = rows(hudi_read(table_path), COLS)
    script = (
        "import multiwriter as mw\n"
        f"c = mw.Cleaner({table_path!r}, lock=mw.FileSystemLock(), heartbeat_interval_s={HB}, "
        f"heartbeat_tolerable_misses={MISSES}, clustering=mw.ClusteringConfig(small_file_bytes=1<<20, "
        "target_file_bytes=4<<20, max_bytes_per_run=64<<20, min_file_groups=2))\n"
        "c.run_once()\n"
    )
    env = dict(os.environ, MULTIWRITER_FAULTS="mid-clustering=crash", PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-c", script], env=env, cwd=str(ROOT), capture_output=True, text=True, timeout=60)
    assert p.returncode == 137, p.stderr
    table = mw.Table.open(table_path)
    (pending,) = table.timeline().pending(frozenset({inst.CLUSTERING}))
    t = pending.requested_time
    assert data_files_of(table, t), "the killed clustering wrote no file before the fault point"
    assert rows(hudi_read(table_path), COLS) == expected
    with mw.Cleaner(table_path, lock=lock, heartbeat_interval_s=HB, heartbeat_tolerable_misses=MISSES, clustering=None) as c:
        report = c.run_once()
    assert t in report.rolled_back
    assert data_files_of(table, t) == []
    assert table.timeline().find(t) is None
    assert rows(hudi_read(table_path), COLS) == expected == rows(table.read(), COLS)


def test_two_streaming_writers_and_continuous_clustering(trips_table, table_path):
    """Two writers upsert overlapping keys batch by batch while clustering runs in a loop: every
    batch lands exactly once, no batch fails because of clustering, the table equals the
    committed batches applied in completion order, and hudi-rs agrees after every round."""
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    stop = threading.Event()
    errors: list[BaseException] = []
    cleaner = mw.Cleaner(table_path, lock=mw.InProcessLock(), clustering=SMALL, retain_commits=200, metrics=metrics,
                         archive_keep_min=150, archive_keep_max=200)

    def clean_loop() -> None:
        while not stop.is_set():
            try:
                cleaner.run_once()
            except BaseException as e:  # noqa: BLE001 - surfaced by the assertion below
                errors.append(e)
                return

    committed: list[tuple[str, str, int, dict[str, tuple[str, float]]]] = []
    mu = threading.Lock()

    def batch(writer: int, b: int):
        ids = [(b * 7 + writer * 3 + j) % 40 for j in range(6)]
        data = {str(i): (DATES[i % 2], float(writer * 1000 + b)) for i in ids}
        return data

    def write(writer: int, b: int) -> None:
        data = batch(writer, b)
        import pyarrow as pa

        tbl = pa.table({
            "id": pa.array(list(data), pa.string()),
            "date": pa.array([d for d, _ in data.values()], pa.string()),
            "ts": pa.array([1] * len(data), pa.int64()),
            "value": pa.array([v for _, v in data.values()], pa.float64()),
        })
        # no small-file filling: each batch's new keys start new groups, so clustering always has
        # small groups to merge whatever order the writers happen to commit in
        cfg = mw.WriterConfig(writer_id=f"w{writer}", lock=mw.InProcessLock(), max_conflict_retries=20,
                              retry_backoff_s=0.01, retry_backoff_max_s=0.05, small_file_limit_bytes=0)
        try:
            r = mw.write(tbl, table_path, cfg, batch_id=b)
        except BaseException as e:  # noqa: BLE001 - surfaced by the assertion below
            errors.append(e)
            return
        with mu:
            committed.append((r.instant.requested_time, f"w{writer}", b, data))

    loop = threading.Thread(target=clean_loop)
    loop.start()
    try:
        for b in range(10):
            ws = [threading.Thread(target=write, args=(w, b)) for w in (1, 2)]
            for th in ws:
                th.start()
            for th in ws:
                th.join()
            assert not errors, errors
            ours = rows(mw.Table.open(table_path).read(), ["id", "value"])
            assert rows(hudi_read(table_path), ["id", "value"]) == ours
    finally:
        stop.set()
        loop.join()
        cleaner.close()
    assert not errors, errors
    with mw.Cleaner(table_path, lock=mw.InProcessLock(), clustering=SMALL, retain_commits=200, metrics=metrics,
                    archive_keep_min=150, archive_keep_max=200) as last:
        last.run_once()
    # exactly once: 20 batches, each one commit naming its writer and batch
    assert sorted((w, b) for _, w, b, _ in committed) == sorted((f"w{w}", b) for w in (1, 2) for b in range(10))
    tl = mw.Table.open(table_path).timeline()
    completion = {i.requested_time: i.completion_time for i in tl.completed_writes()}
    expected: dict[str, float] = {}
    for _, _, _, data in sorted(committed, key=lambda c: completion[c[0]]):
        expected.update({k: v for k, (_, v) in data.items()})
    assert rows(hudi_read(table_path), ["id", "value"]) == sorted(expected.items(), key=repr)
    assert rows(mw.Table.open(table_path).read(), ["id", "value"]) == sorted(expected.items(), key=repr)
    replaced = registry.get_sample_value("multiwriter_clustering_file_groups_total", {"table": "trips", "outcome": "replaced"})
    assert replaced and replaced > 0
    assert registry.get_sample_value("multiwriter_live_files", {"table": "trips"}) == sum(_live_per_partition(table_path).values())


def test_large_groups_are_clustered_on_spark_executors(spark, trips_table, table_path):
    """With a SparkSession and ``executor_min_bytes`` reached, the plan groups are rewritten by
    Spark tasks (one job in the clustering's job group) and every reader agrees with before."""
    from multiwriter.cleaner.clustering_spark import JOB_GROUP_PREFIX

    cfg = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock())
    _small_inserts(table_path, 8, cfg)
    expected = rows(hudi_read(table_path), COLS)
    on_executors = dataclasses.replace(SMALL, executor_min_bytes=1)
    with mw.Cleaner(table_path, lock=mw.InProcessLock(), clustering=on_executors, spark=spark) as cleaner:
        report = cleaner.cluster_once()
    (t,) = report.clustering_instants
    jobs = spark.sparkContext.statusTracker().getJobIdsForGroup(JOB_GROUP_PREFIX + t)
    assert len(jobs) == 1
    assert _live_per_partition(table_path) == {"2024-01-01": 1, "2024-01-02": 1}
    assert rows(hudi_read(table_path), COLS) == expected == rows(mw.Table.open(table_path).read(), COLS)


def test_small_groups_stay_on_the_driver_below_executor_min_bytes(spark, trips_table, table_path):
    from multiwriter.cleaner.clustering_spark import JOB_GROUP_PREFIX

    cfg = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock())
    _small_inserts(table_path, 8, cfg)
    with mw.Cleaner(table_path, lock=mw.InProcessLock(), clustering=SMALL, spark=spark) as cleaner:
        report = cleaner.cluster_once()
    (t,) = report.clustering_instants
    assert spark.sparkContext.statusTracker().getJobIdsForGroup(JOB_GROUP_PREFIX + t) == []
    assert _live_per_partition(table_path) == {"2024-01-01": 1, "2024-01-02": 1}


def test_clustering_never_drops_the_log_files_of_a_merge_on_read_table(tmp_path):
    """A Merge-on-Read table without a bucket index has small base files with updates in log
    files: clustering the base files alone would bring back the old values."""
    from tests.conftest import TRIPS_SCHEMA
    from tests.oracle import hudi_read, rows

    path = str(tmp_path / "mor")
    mw.Table.create(path, name="trips", schema=TRIPS_SCHEMA, record_key="id", partition_by=["date"],
                    ordering_field="ts", table_type="MERGE_ON_READ")
    cfg = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock())
    for n in range(4):
        mw.write(trips(range(n * 5, n * 5 + 5), ts=1, value=1.0), path, cfg)  # four small base files
    mw.write(trips(range(0, 20, 3), ts=2, value=2.0), path, cfg)  # updates: log files
    before = rows(mw.Table.open(path).read(), ["id", "value"])
    mw.Cleaner(path, lock=mw.InProcessLock(), clustering=SMALL, compaction=None).run_once()
    after = rows(mw.Table.open(path).read(), ["id", "value"])
    assert after == before and dict(after)["3"] == 2.0
    assert rows(hudi_read(path), ["id", "value"]) == before


def test_clustering_keeps_virtual_key_files_without_meta_values(table_path):
    """Virtual keys (``hoodie.populate.meta.fields=false``): clustering moves the rows as they
    are, meta columns still null and no bloom filter written; every reader agrees after."""
    mw.Table.create(table_path, name="trips", schema=TRIPS_SCHEMA, record_key="id", partition_by=["date"],
                    ordering_field="ts", populate_meta_fields=False)
    cfg = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock())
    _small_inserts(table_path, 6, cfg)
    data = ["id", "date", "ts", "value"]
    expected = rows(mw.Table.open(table_path).read(), data)
    assert rows(hudi_read(table_path), data) == expected
    with mw.Cleaner(table_path, lock=mw.InProcessLock(), clustering=SMALL) as cleaner:
        report = cleaner.run_once()
    assert report.clustered_file_groups == 6
    assert _live_per_partition(table_path) == {"2024-01-01": 1, "2024-01-02": 1}
    assert rows(mw.Table.open(table_path).read(), data) == expected == rows(hudi_read(table_path), data)
    for f in mw.Table.open(table_path).snapshot().files():
        pf = pq.ParquetFile(Path(table_path, f.path))
        t = pf.read(columns=["_hoodie_commit_time", "_hoodie_record_key", "_hoodie_file_name"])
        assert all(c.null_count == t.num_rows for c in t.columns)
        assert not any(k.startswith((b"org.apache.hudi.bloom", b"hoodie_")) for k in pf.metadata.metadata or {})
    mw.write(trips([0, 7, 21, 28, 42, 49], date=DATES[0], ts=9, value=99), table_path, cfg)  # updates after clustering
    after = rows(mw.Table.open(table_path).read(), data)
    assert len(after) == len(expected) and after == rows(hudi_read(table_path), data)
    assert sum(r[3] == 99 for r in after) == 6
