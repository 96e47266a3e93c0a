"""Compaction in the companion cleaner: Merge-on-Read file slices merged into new base files in
Hudi's version-8 format, writers never held up. Oracles: hudi-rs (snapshot, read-optimized and
as-of reads, before and after every compaction), fastavro (the timeline files)."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import fastavro
import pytest

import multiwriter as mw
from multiwriter import faults
from multiwriter.cleaner import compaction
from multiwriter.conflict import is_compaction
from multiwriter.format import instant as inst
from multiwriter.table.compaction_plan import decode_plan
from multiwriter.table.files import list_files
from tests.cleaner.conftest import HB, MISSES, ROOT
from tests.conftest import trips, wait_hanging
from tests.oracle import hudi_read, rows

COLS = ["_hoodie_record_key", "_hoodie_commit_time", "_hoodie_partition_path", "id", "date", "ts", "value"]
DATES = ("2024-01-01", "2024-01-02")
EVERY_2 = mw.CompactionConfig(delta_commits=2)


def _cfg(writer: str = "w", lock=None, **kw) -> mw.WriterConfig:
    return mw.WriterConfig(writer_id=writer, lock=lock or mw.InProcessLock(), **kw)


def _cleaner(path: str, lock=None, **kw) -> mw.Cleaner:
    kw.setdefault("heartbeat_interval_s", HB)
    kw.setdefault("heartbeat_tolerable_misses", MISSES)
    kw.setdefault("clustering", None)
    kw.setdefault("compaction", EVERY_2)
    return mw.Cleaner(path, lock=lock or mw.InProcessLock(), **kw)


def _agreed(path: str, *, read_optimized: bool = False, as_of: str | None = None) -> list[tuple]:
    """Our read of the table, asserted equal to hudi-rs's."""
    ours = rows(mw.Table.open(path).read(as_of=as_of, read_optimized=read_optimized), COLS)
    assert ours == rows(hudi_read(path, as_of=as_of, read_optimized=read_optimized), COLS)
    return ours


def _write(path: str, ids, ts: int, value: float, cfg: mw.WriterConfig | None = None, **kw) -> mw.CommitResult:
    """One deltacommit touching both partitions."""
    import pyarrow as pa

    ids = list(ids)
    data = pa.concat_tables([trips(ids, date=d, ts=ts, value=value) for d in DATES])
    return mw.write(data, path, cfg or _cfg(**kw))


def _timeline(path: str) -> list[str]:
    return sorted(os.listdir(Path(path, ".hoodie", "timeline")))


def _avro(path: str, name: str) -> dict:
    with open(Path(path, ".hoodie", "timeline", name), "rb") as f:
        (rec,) = list(fastavro.reader(f))
    return rec


def _plan(path: str, t: str):
    name = f"{t}.compaction.requested"
    return decode_plan(Path(path, ".hoodie", "timeline", name).read_bytes(), source=name)


def _files_named(path: str, t: str) -> list[str]:
    bases, _ = list_files(mw.Table.open(path).storage)
    return sorted(b.path for b in bases if b.instant_time == t)


def _no_logs_left(path: str) -> bool:
    return all(not f.logs for f in mw.Table.open(path).snapshot().files())


# -- compaction after N delta commits ---------------------------------------------------------------------


def test_compaction_after_n_delta_commits_leaves_every_read_unchanged(mor_table, table_path):
    from prometheus_client import CollectorRegistry

    from multiwriter.metrics import Metrics

    registry = CollectorRegistry()
    first = _write(table_path, range(12), ts=1, value=1.0)
    _write(table_path, range(0, 6), ts=2, value=2.0)
    with _cleaner(table_path, compaction=mw.CompactionConfig(delta_commits=4), metrics=Metrics(registry)) as cleaner:
        assert cleaner.run_once().compaction_instants == [], "2 deltacommits: below the trigger"
        assert registry.get_sample_value("multiwriter_uncompacted_delta_commits", {"table": "trips"}) == 1
        _write(table_path, range(4, 9), ts=3, value=3.0)
        _write(table_path, [1, 5], ts=4, value=0.0, operation="delete")
        before = _agreed(table_path)
        as_of = mw.Table.open(table_path).timeline().last_completed_write().requested_time
        report = cleaner.run_once()
    (t,) = report.compaction_instants
    plan = _plan(table_path, t)
    assert registry.get_sample_value("multiwriter_compaction_file_groups_total", {"table": "trips"}) == len(plan.operations)
    assert registry.get_sample_value("multiwriter_compaction_duration_seconds_count", {"table": "trips"}) == 1
    assert registry.get_sample_value("multiwriter_uncompacted_delta_commits", {"table": "trips"}) == 0
    assert report.compacted_file_groups == len(plan.operations) == len(mw.Table.open(table_path).snapshot().files())
    assert report.compacted_log_files == sum(len(op.delta_file_names) for op in plan.operations) > 0
    # every reader sees the same table, now from base files only
    assert _agreed(table_path) == before
    assert _agreed(table_path, read_optimized=True) == before
    assert _agreed(table_path, as_of=as_of) == before
    assert _no_logs_left(table_path)
    assert {r[3] for r in before} == {str(i) for i in range(12) if i not in (1, 5)}
    assert t not in {r[1] for r in before}, "rows keep their own commit time"
    # Hudi's version-8 instant files: the plan, an empty inflight, a completed commit
    names = _timeline(table_path)
    assert f"{t}.compaction.requested" in names and f"{t}.compaction.inflight" in names
    assert Path(table_path, ".hoodie", "timeline", f"{t}.compaction.inflight").stat().st_size == 0
    (done,) = [n for n in names if n.startswith(f"{t}_") and n.endswith(".commit")]
    assert {op.base_instant_time for op in plan.operations} == {first.instant.requested_time}
    assert all(len(op.delta_file_names) in (1, 2, 3) for op in plan.operations)
    meta = _avro(table_path, done)
    assert meta["operationType"] == "COMPACT" and meta["compacted"] is True and meta["extraMetadata"]["schema"]
    stats = [s for ss in meta["partitionToWriteStats"].values() for s in ss]
    by_group = {(op.partition_path, op.file_id): op for op in plan.operations}
    assert {(s["partitionPath"], s["fileId"]) for s in stats} == set(by_group)
    for s in stats:
        op = by_group[(s["partitionPath"], s["fileId"])]
        assert s["path"].endswith(f"_{t}.parquet") and Path(s["path"]).name.startswith(s["fileId"] + "_")
        assert s["prevCommit"] == op.base_instant_time and s["prevBaseFile"] == op.data_file_name
        assert s["totalLogFilesCompacted"] == len(op.delta_file_names) and s["totalLogSizeCompacted"] > 0
        assert s["baseFile"] is None and s["logFiles"] is None
    tl = mw.Table.open(table_path).timeline()
    assert is_compaction(tl, tl.find(t)) and tl.find(t).action == inst.COMMIT
    assert tl.pending() == []
    # a write after the compaction lands on top of the new base files
    _write(table_path, [0, 2], ts=5, value=5.0)
    after = dict(rows(mw.Table.open(table_path).read(), ["_hoodie_record_key", "value"]))
    assert after["0"] == 5.0 and after["2"] == 5.0 and "1" not in after
    _agreed(table_path)
    assert all(f.instant_time == t for f in mw.Table.open(table_path).snapshot().files())


# -- the in-flight writer boundary ----------------------------------------------------------------------


@pytest.mark.parametrize("completes", ["before-compaction-commits", "after-compaction-commits"])
def test_deltacommit_in_flight_at_planning_is_read_on_top_of_the_new_base(
    mor_table, table_path, tmp_path, monkeypatch, completes
):
    """A deltacommit that began before the compaction was planned and completes after it: its
    log is not in the plan, and every read (ours, hudi-rs) merges it over the compacted base.
    One that completed just before T is in the plan."""
    _write(table_path, range(8), ts=1, value=1.0)
    _write(table_path, range(8), ts=2, value=2.0)
    monkeypatch.setenv("MULTIWRITER_FAULT_DIR", str(tmp_path))
    faults.configure("after-data-files=hang@1")  # only the first writer past its data files hangs
    box: dict = {}
    late = threading.Thread(target=lambda: box.setdefault("r", _write(table_path, range(0, 8, 2), ts=9, value=9.0, writer="late")))
    released = False
    try:
        late.start()
        assert wait_hanging(tmp_path, late)
        just_before = _write(table_path, range(1, 8, 2), ts=6, value=6.0, writer="punctual")
        with_punctual = _agreed(table_path)
        with _cleaner(table_path) as cleaner:
            ctx = cleaner._context()
            sched = compaction.schedule(ctx, EVERY_2)
            assert sched is not None
            t = sched.compaction_time
            planned = {name for op in sched.plan.operations for name in op.delta_file_names}
            _, logs = list_files(mor_table.storage)
            completed = mw.Table.open(table_path).timeline().completed_write_times()
            late_logs = {lf.name for lf in logs if lf.instant_time not in completed}
            assert late_logs and not late_logs & planned, "still in flight at T: not in the plan"
            assert any(just_before.instant.requested_time in n for n in planned), "completed before T: in the plan"
            assert _agreed(table_path) == with_punctual, "a pending compaction changes no read"
            if completes == "before-compaction-commits":
                (tmp_path / "after-data-files.release").touch()
                released = True
                late.join(30)
                with_late = _agreed(table_path)
            stats = compaction.execute(ctx, sched, EVERY_2)
            compaction.commit(ctx, sched, stats)
        if completes == "after-compaction-commits":
            assert _agreed(table_path) == with_punctual, "the compaction alone changes no read"
            assert _agreed(table_path, read_optimized=True) == with_punctual
            (tmp_path / "after-data-files.release").touch()
            released = True
            late.join(30)
            with_late = _agreed(table_path)
    finally:
        if not released:
            (tmp_path / "after-data-files.release").touch()
        late.join(30)
        faults.configure(None)
    late_instant = box["r"].instant
    assert late_instant.requested_time < t < late_instant.completion_time
    assert box["r"].attempts == 1, "the writer never conflicts with the compaction"
    got = dict(rows(mw.Table.open(table_path).read(), ["_hoodie_record_key", "value"]))
    assert got == {str(i): (9.0 if i % 2 == 0 else 6.0) for i in range(8)}
    assert _agreed(table_path) == with_late
    # the late log sits on top of the compacted base; read-optimized is the compacted base alone
    for f in mw.Table.open(table_path).snapshot().files():
        assert f.instant_time == t
        assert {lf.instant_time for lf in f.logs} <= {late_instant.requested_time}
    assert _agreed(table_path, read_optimized=True) == with_punctual


def test_deltacommit_completing_between_listing_and_lock_is_in_the_plan(mor_table, table_path, monkeypatch):
    """The table is listed outside the lock; a deltacommit that completes before the lock (so
    before T) must still be in the plan, or its log would be left on the old slice: it comes
    from its commit's write statistics."""
    from multiwriter.table.snapshot import Snapshot

    _write(table_path, range(8), ts=1, value=1.0)
    _write(table_path, range(4), ts=2, value=2.0)
    real = Snapshot.build.__func__
    box: dict = {}

    def listed_then_a_write(cls, storage, timeline, **kw):
        snap = real(cls, storage, timeline, **kw)
        if "sneaky" not in box:
            box["sneaky"] = None
            box["sneaky"] = _write(table_path, range(2, 8), ts=3, value=3.0, writer="sneaky")
        return snap

    with _cleaner(table_path) as cleaner:
        monkeypatch.setattr(Snapshot, "build", classmethod(listed_then_a_write))
        ctx = cleaner._context()
        sched = compaction.schedule(ctx, EVERY_2)
        monkeypatch.undo()
        sneaky = box["sneaky"].instant
        assert sneaky.completion_time < sched.compaction_time
        planned = {n for op in sched.plan.operations for n in op.delta_file_names}
        assert any(sneaky.requested_time in n for n in planned)
        before = _agreed(table_path)
        compaction.commit(ctx, sched, compaction.execute(ctx, sched, EVERY_2))
    assert _no_logs_left(table_path)
    assert _agreed(table_path) == before == _agreed(table_path, read_optimized=True)
    assert {r[0]: r[6] for r in before} == {str(i): (3.0 if i >= 2 else 2.0) for i in range(8)}


# -- a killed compaction ---------------------------------------------------------------------------------


@pytest.mark.parametrize("point", ["compaction-after-files", "compaction-before-complete"])
def test_killed_compaction_is_finished_by_the_next_run(mor_table, table_path, point):
    lock = mw.FileSystemLock()
    for n in range(3):
        _write(table_path, range(n, 10), ts=n + 1, value=float(n + 1), cfg=_cfg(lock=lock))
    before = _agreed(table_path)
    script = (
        "import multiwriter as mw\n"
        f"c = mw.Cleaner({table_path!r}, lock=mw.FileSystemLock(), heartbeat_interval_s={HB}, "
        f"heartbeat_tolerable_misses={MISSES}, clustering=None, compaction=mw.CompactionConfig(delta_commits=2))\n"
        "c.run_once()\n"
    )
    env = dict(os.environ, MULTIWRITER_FAULTS=f"{point}=crash", PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-c", script], env=env, cwd=str(ROOT), capture_output=True, text=True, timeout=60)
    assert p.returncode == 137, p.stderr
    table = mw.Table.open(table_path)
    (pending,) = table.timeline().pending(frozenset({inst.COMPACTION}))
    t = pending.requested_time
    dead_files = _files_named(table_path, t)
    assert dead_files, "the killed compaction wrote no file before the fault point"
    assert _agreed(table_path) == before, "an uncommitted compaction's files are invisible"
    with _cleaner(table_path, lock=lock) as cleaner:
        report = cleaner.run_once()
    assert report.compaction_instants == [t] and t in report.resumed
    assert report.errors == []
    done = table.timeline().find(t)
    assert done.is_completed and done.action == inst.COMMIT
    meta = table.timeline().commit_metadata(done)
    named = sorted(s.path for s in meta.all_stats())
    assert _files_named(table_path, t) == named and not set(dead_files) & set(named), "the dead attempt's files are gone"
    assert _agreed(table_path) == before
    assert _agreed(table_path, read_optimized=True) == before
    assert _no_logs_left(table_path)
    assert not Path(table_path, ".hoodie", ".temp", t).exists()


def test_unreadable_plan_is_unscheduled_and_planned_again(mor_table, table_path):
    for n in range(3):
        _write(table_path, range(n, 6), ts=n + 1, value=float(n + 1))
    before = _agreed(table_path)
    with _cleaner(table_path) as cleaner:
        sched = compaction.schedule(cleaner._context(), EVERY_2)
        t = sched.compaction_time
        cleaner._context().stop_heartbeat(t)
    Path(table_path, ".hoodie", "timeline", f"{t}.compaction.requested").write_bytes(b"not avro")
    with _cleaner(table_path) as cleaner:
        report = cleaner.run_once(raise_errors=False)
        assert any(t in e for e in report.errors)
        assert not [n for n in _timeline(table_path) if n.startswith(t)]
        assert report.compaction_instants and report.compaction_instants[0] > t, "planned again in the same run"
    assert _agreed(table_path) == before == _agreed(table_path, read_optimized=True)


# -- writers never wait ----------------------------------------------------------------------------------


def test_streaming_writers_and_continuous_compaction(mor_table, table_path):
    """Two non-blocking writers upsert overlapping keys batch by batch while the cleaner compacts
    in a loop: no batch retries or fails, and the table equals the highest event time per key."""
    stop = threading.Event()
    errors: list[BaseException] = []
    results: list[mw.CommitResult] = []
    _write(table_path, range(10), ts=0, value=0.0)

    def writer(name: str, parity: int) -> None:
        try:
            for b in range(6):
                ts = 2 * b + parity + 1
                results.append(_write(table_path, range(b, b + 6), ts=ts, value=float(ts), writer=name))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    def clean_loop(cleaner: mw.Cleaner) -> None:
        while not stop.is_set():
            try:
                cleaner.run_once()
            except BaseException as e:  # noqa: BLE001
                errors.append(e)
                return

    with _cleaner(table_path, heartbeat_interval_s=5.0) as cleaner:
        threads = [threading.Thread(target=writer, args=("a", 0)), threading.Thread(target=writer, args=("b", 1))]
        loop = threading.Thread(target=clean_loop, args=(cleaner,))
        loop.start()
        for th in threads:
            th.start()
        for th in threads:
            th.join(60)
        stop.set()
        loop.join(60)
        final = cleaner.run_once()
    assert errors == []
    assert all(r.attempts == 1 and r.conflicts == 0 for r in results) and len(results) == 12
    compactions = [i for i in mw.Table.open(table_path).timeline().completed() if i.action == inst.COMMIT]
    assert compactions, "the cleaner compacted while the writers wrote"
    expected: dict[str, float] = {str(k): 0.0 for k in range(10)}
    for b in range(6):
        for parity in (0, 1):
            ts = 2 * b + parity + 1
            for k in range(b, b + 6):
                expected[str(k)] = max(expected.get(str(k), 0.0), float(ts))
    got = _agreed(table_path)
    assert {r[0]: r[6] for r in got} == expected
    assert final.errors == []


# -- wiring ----------------------------------------------------------------------------------------------------


def test_off_on_copy_on_write_and_when_disabled_and_no_clustering_of_bucket_tables(mor_table, table_path, tmp_path):
    for n in range(4):
        _write(table_path, range(n, 8), ts=n + 1, value=float(n + 1))
    before = _agreed(table_path)
    small = mw.ClusteringConfig(small_file_bytes=1 << 20, target_file_bytes=4 << 20, max_bytes_per_run=64 << 20,
                                min_file_groups=2)
    with _cleaner(table_path, compaction=None, clustering=small) as cleaner:
        report = cleaner.run_once()
        assert report.compaction_instants == [] and report.clustering_instants == []
        assert cleaner.cluster_once().clustering_instants == [], "a bucket table's layout is its index"
    assert _agreed(table_path) == before and not _no_logs_left(table_path)
    with _cleaner(table_path) as cleaner:  # the default config compacts after 5 deltacommits
        assert cleaner.compaction is not None
    with _cleaner(table_path, compaction=mw.CompactionConfig()) as cleaner:
        assert cleaner.run_once().compaction_instants == [], "4 deltacommits: below Hudi's default of 5"
        _write(table_path, [0], ts=9, value=9.0)
        before = _agreed(table_path)
        (t,) = cleaner.compact_once().compaction_instants
    assert _agreed(table_path) == before == _agreed(table_path, read_optimized=True)
    cow = str(tmp_path / "cow")
    mw.Table.create(cow, name="cow", schema=trips([0]).schema, record_key="id", partition_by=["date"], ordering_field="ts")
    for n in range(6):
        mw.write(trips(range(n, 4), ts=n), cow, _cfg())
    with _cleaner(cow, compaction=mw.CompactionConfig(delta_commits=1)) as cleaner:
        assert cleaner.run_once().compaction_instants == []
    with pytest.raises(mw.errors.ConfigError, match="CompactionConfig"):
        mw.CompactionConfig(delta_commits=0)
    with pytest.raises(mw.errors.ConfigError, match="CompactionConfig"):
        mw.Cleaner(table_path, lock=mw.InProcessLock(), compaction={"delta_commits": 2})


def test_compact_command_with_zookeeper(mor_table, table_path, zk_server, zk_base, capsys):
    from multiwriter.cli import main

    zk = mw.ZooKeeperLock(connect=zk_server.connect, base_path=zk_base)
    try:
        for n in range(3):
            _write(table_path, range(n, 9), ts=n + 1, value=float(n + 1), cfg=_cfg(lock=zk))
        before = _agreed(table_path)
        args = ["compact", table_path, "--zk", zk_server.connect, "--zk-base-path", zk_base, "--once",
                "--heartbeat-interval", str(HB), "--heartbeat-misses", str(MISSES)]
        assert main([*args, "--delta-commits", "4"]) == 0
        assert "compacted" not in capsys.readouterr().out, "3 deltacommits: below --delta-commits 4"
        assert main([*args, "--delta-commits", "3"]) == 0
        assert "compacted 2 file groups" in capsys.readouterr().out or _no_logs_left(table_path)
        assert _no_logs_left(table_path)
        assert _agreed(table_path) == before == _agreed(table_path, read_optimized=True)
        _write(table_path, [0], ts=9, value=9.0, cfg=_cfg(lock=zk))
        got = dict(rows(mw.Table.open(table_path).read(), ["_hoodie_record_key", "value"]))
        assert got["0"] == 9.0
        _agreed(table_path)
    finally:
        zk.close()


def test_large_slices_are_compacted_on_spark_executors(spark, mor_table, table_path):
    """With a SparkSession and ``executor_min_bytes`` reached, each slice is compacted by a Spark
    task (one job in the compaction's job group), with the driver's merge rule."""
    for n in range(3):
        _write(table_path, range(n, 10), ts=n + 1, value=float(n + 1))
    before = _agreed(table_path)
    on_executors = mw.CompactionConfig(delta_commits=2, executor_min_bytes=1)
    with _cleaner(table_path, compaction=on_executors, spark=spark) as cleaner:
        (t,) = cleaner.run_once().compaction_instants
    assert len(spark.sparkContext.statusTracker().getJobIdsForGroup(f"multiwriter-compaction-{t}")) == 1
    assert _no_logs_left(table_path)
    assert _agreed(table_path) == before == _agreed(table_path, read_optimized=True)
