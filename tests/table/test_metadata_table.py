"""Hudi's metadata table (``files`` partition): hudi-rs, which lists a table's files from it when
the properties name it, reads every table we write with it on exactly as we do, through commits,
clustering, compaction, cleaning, rollbacks, archival and crashes at the new points."""
from __future__ import annotations

import os
import time

import pyarrow as pa
import pytest

import multiwriter as mw
from multiwriter import faults
from multiwriter.instant_time import format_time, parse_time
from multiwriter.table import metadata_files as mf
from multiwriter.table.files import list_files
from multiwriter.table.view import TimelineView
from tests.oracle import hudi_read, rows

SCHEMA = pa.schema([("id", pa.string()), ("ts", pa.int64()), ("v", pa.float64()), ("d", pa.string())])
COLS = ["_hoodie_record_key", "_hoodie_commit_time", "id", "ts", "v", "d"]


def _batch(ids, ts: int, v: float) -> pa.Table:
    ids = list(ids)
    return pa.table({"id": [f"k{i:03d}" for i in ids], "ts": [ts] * len(ids), "v": [v] * len(ids),
                     "d": [f"p{i % 3}" for i in ids]}, schema=SCHEMA)


def _create(path: str, kind: str) -> mw.Table:
    kw = {"table_type": "MERGE_ON_READ", "num_buckets": 2} if kind == "mor" else {}
    return mw.Table.create(path, name="mdt", schema=SCHEMA, record_key="id", partition_by=["d"],
                           ordering_field="ts", metadata=True, **kw)


def _agreed(path: str) -> list[tuple]:
    ours = rows(mw.Table.open(path).read(), COLS)
    assert ours == rows(hudi_read(path), COLS)
    return ours


def _listed_names(t: mw.Table) -> set[str]:
    """Every file name the metadata table's files partition lists now."""
    return {n for files in mf.MetadataTable(t.storage, t.config).listing().values() for n in files}


def _roll_back_the_failed_write(path: str, lock) -> bool:
    """The companion job, run until it has rolled a failed write back (at most ~10 s); whether it did."""
    with mw.Cleaner(path, lock=lock, heartbeat_interval_s=1.0, heartbeat_tolerable_misses=0, clustering=None,
                    compaction=None) as clean:
        for _ in range(40):
            if clean.run_once().rolled_back:
                return True
            time.sleep(0.25)
    return False


def _write_that_dies(path: str, batch: pa.Table, cfg: mw.WriterConfig) -> str:
    """A write that dies after its metadata-table deltacommit, nothing of its own abort run
    (a killed process); returns its pending instant's time."""
    from multiwriter.transaction import Transaction

    faults.configure("after-metadata-table=error")
    try:
        with pytest.MonkeyPatch.context() as mp, pytest.raises(faults.InjectedFault):
            mp.setattr(Transaction, "abort", lambda self: self.stop_heartbeat() or [])
            mw.write(batch, path, cfg)
    finally:
        faults.configure(None)
    (lost,) = mw.Table.open(path).timeline().pending()
    return lost.requested_time


def _compact_and_cluster(path: str, lock, kind: str):
    """One companion-job run that compacts (Merge-on-Read) and clusters small groups; its report."""
    with mw.Cleaner(path, lock=lock, heartbeat_interval_s=1.0, heartbeat_tolerable_misses=0,
                    compaction=mw.CompactionConfig(delta_commits=1) if kind == "mor" else None,
                    clustering=mw.ClusteringConfig(small_file_bytes=1 << 20, target_file_bytes=4 << 20,
                                                   max_bytes_per_run=64 << 20, min_file_groups=2)) as cleaner:
        return cleaner.run_once()


def _listing_is_storage(path: str) -> None:
    """The metadata table lists exactly the committed files on storage."""
    t = mw.Table.open(path)
    view = TimelineView(t.timeline())
    bases, logs = list_files(t.storage)
    on_storage = {(f.partition, f.name) for f in [*bases, *logs] if view.committed(f.instant_time)}
    listed = {(p, n) for p, files in mf.MetadataTable(t.storage, t.config).listing().items() for n in files}
    assert listed == on_storage


@pytest.mark.parametrize("kind", ["cow", "mor"])
def test_hudi_rs_reads_as_we_do_through_every_table_service(kind, tmp_path):
    path = str(tmp_path / "t")
    _create(path, kind)
    lock = mw.InProcessLock()
    cfg = mw.WriterConfig(writer_id="w", lock=lock, small_file_limit_bytes=0)  # small groups for clustering
    clean = mw.Cleaner(path, lock=lock, heartbeat_interval_s=1.0, heartbeat_tolerable_misses=1, retain_commits=2,
                       archive_keep_min=3, archive_keep_max=5,
                       clustering=mw.ClusteringConfig(small_file_bytes=1 << 20, target_file_bytes=4 << 20, min_file_groups=2)
                       if kind == "cow" else None,
                       compaction=mw.CompactionConfig(delta_commits=2) if kind == "mor" else None)
    expect: dict[str, float] = {}
    services = {"rewrites": 0, "cleans": 0, "archived": 0}
    with clean:
        for i in range(14):
            mw.write(_batch(range(i, i + 6), ts=i, v=float(i)), path, cfg)
            expect.update({f"k{j:03d}": float(i) for j in range(i, i + 6)})
            if i % 4 == 3:
                report = clean.run_once()
                assert not report.errors, report.errors
                services["rewrites"] += len(report.clustering_instants) + len(report.compaction_instants)
                services["cleans"] += len(report.clean_instants)
                services["archived"] += report.archived
            got = _agreed(path)
        assert {r[2]: r[4] for r in got} == expect
    t = mw.Table.open(path)
    assert t.config.raw[mf.PARTITIONS_KEY] == "files"
    _listing_is_storage(path)
    assert all(services.values()), services
    names = os.listdir(os.path.join(path, ".hoodie", "metadata", "files"))
    assert sum(n.endswith(".hfile") for n in names) >= 2, "the files partition was compacted"
    assert sum(n.startswith(".files") for n in names) <= mf.RETAIN_COMMITS + 2 * mf.MAX_DELTA_COMMITS, "old slices deleted"


@pytest.mark.parametrize("kind", ["cow", "mor"])
def test_a_crash_after_the_metadata_deltacommit_shows_nothing_and_is_rolled_back(kind, tmp_path):
    """The metadata table names the files of a data instant that never completed (its writer died
    there, nothing of its own abort run): no reader shows them; the cleaner's rollback rolls its
    deltacommit back, and both readers still agree."""
    from multiwriter.transaction import Transaction

    path = str(tmp_path / "t")
    _create(path, kind)
    lock = mw.InProcessLock()
    mw.write(_batch(range(6), ts=1, v=1.0), path, mw.WriterConfig(writer_id="w", lock=lock))
    before = _agreed(path)
    faults.configure("after-metadata-table=error")
    try:
        with pytest.MonkeyPatch.context() as mp, pytest.raises(faults.InjectedFault):
            mp.setattr(Transaction, "abort", lambda self: self.stop_heartbeat() or [])
            mw.write(_batch(range(3, 9), ts=2, v=2.0), path, mw.WriterConfig(
                writer_id="w", lock=lock, heartbeat_interval_s=1.0, heartbeat_tolerable_misses=0))
    finally:
        faults.configure(None)
    t = mw.Table.open(path)
    pending = [i.requested_time for i in t.timeline().pending()]
    assert pending, "the data instant did not complete"
    listed = _listed_names(t)
    assert any(pending[0] in n for n in listed), "the metadata table named its files"
    assert _agreed(path) == before
    _roll_back_the_failed_write(path, lock)
    assert not mw.Table.open(path).timeline().pending()
    assert _agreed(path) == before
    _listing_is_storage(path)


def test_a_table_without_it_stays_without_it(tmp_path):
    path = str(tmp_path / "t")
    mw.Table.create(path, name="plain", schema=SCHEMA, record_key="id", partition_by=["d"], ordering_field="ts",
                    metadata=False)
    mw.write(_batch(range(3), ts=1, v=1.0), path, mw.WriterConfig(writer_id="w", lock=mw.InProcessLock()))
    assert not os.path.exists(os.path.join(path, ".hoodie", "metadata"))
    assert mf.PARTITIONS_KEY not in mw.Table.open(path).config.raw
    _agreed(path)


def test_records_merge_as_hudis_payload_does():
    into: mf.Records = {}
    mf._merge(into, {"p": {"a": (10, False), "b": (5, False)}})
    mf._merge(into, {"p": {"a": (7, False), "b": (0, True), "c": (3, False)}})
    assert into["p"] == {"a": (10, False), "b": (0, True), "c": (3, False)}
    mf._merge(into, {"p": {"b": (4, False)}})
    assert into["p"]["b"] == (4, False), "a file written again after its tombstone is live"


@pytest.mark.needs_fixtures
@pytest.mark.parametrize(("kind", "name"), [("mor", "v8_trips_8i3u1d"), ("mor", "v9_txns_simple_meta"),
                                            ("cow", "v9_txns_simple_meta"), ("mor", "v9_nonpartitioned_rollback")])
def test_continues_the_files_partition_hudi_started(kind, name, tmp_path):
    """Tables Hudi wrote with its metadata table: our commits go into Hudi's own files partition
    (with Hudi's record schema), so hudi-rs, listing from it, sees them; before, it returned the
    old rows."""
    from tests.oracle import unzip_fixture

    path = str(unzip_fixture(name, tmp_path, kind))
    t = mw.Table.open(path)
    assert mf.enabled(t.config)
    before = t.read()
    cols = [c for c in before.column_names if not c.startswith("_hoodie")]
    key, order = t.config.record_key[0], t.config.ordering_field
    first = before.select(cols).slice(0, 1).to_pylist()[0]
    changed = {**first, order: first[order] + 1000} if order else dict(first)
    new = {**first, key: "NEW-KEY-1"}
    mw.write(pa.Table.from_pylist([changed, new], schema=before.select(cols).schema), path,
             mw.WriterConfig(writer_id="c", lock=mw.InProcessLock()))
    ours, theirs = mw.Table.open(path).read(), hudi_read(path)
    assert rows(ours, cols) == rows(theirs, cols)
    assert "NEW-KEY-1" in theirs.column(key).to_pylist()
    assert ours.num_rows == before.num_rows + 1


@pytest.mark.parametrize("kind", ["cow", "mor"])
def test_started_on_a_table_with_commits(kind, tmp_path):
    """A table written without it gets it from a listing of its committed files (an
    uncommitted file left by a failed writer is not listed); later commits go into it."""
    path = str(tmp_path / "t")
    kw = {"table_type": "MERGE_ON_READ", "num_buckets": 2} if kind == "mor" else {}
    mw.Table.create(path, name="late", schema=SCHEMA, record_key="id", partition_by=["d"], ordering_field="ts",
                    metadata=False, **kw)
    lock = mw.InProcessLock()
    cfg = mw.WriterConfig(writer_id="w", lock=lock)
    for i in range(3):
        mw.write(_batch(range(i, i + 5), ts=i, v=float(i)), path, cfg)
    stray = os.path.join(path, "p0", "00000000-aaaa-bbbb-cccc-000000000000-0_0-0-0_20991231235959999.parquet")
    with open(stray, "wb") as f:
        f.write(b"not committed")
    t = mw.Table.open(path)
    assert t.enable_metadata(lock) is True and mf.enabled(t.config)
    assert t.enable_metadata(lock) is False
    listed = _listed_names(t)
    assert os.path.basename(stray) not in listed
    os.remove(stray)
    _agreed(path)
    _listing_is_storage(path)
    mw.write(_batch(range(10, 14), ts=9, v=9.0), path, cfg)
    assert {r[2] for r in _agreed(path)} == {f"k{i:03d}" for i in [*range(0, 7), *range(10, 14)]}
    _listing_is_storage(path)


def test_a_crash_mid_compaction_of_the_files_partition_is_undone(tmp_path):
    """The new base HFile is written, its compaction never completes: the write, decided
    before its compaction, stands; readers keep the old slice (and the write's log on it); the
    next compaction removes the dead one's base and pending instant, then compacts."""
    path = str(tmp_path / "t")
    _create(path, "cow")
    lock = mw.InProcessLock()
    cfg = mw.WriterConfig(writer_id="w", lock=lock, heartbeat_interval_s=1.0, heartbeat_tolerable_misses=0)
    for i in range(mf.MAX_DELTA_COMMITS):
        mw.write(_batch([i], ts=i, v=float(i)), path, cfg)
    before = _agreed(path)
    faults.configure("mid-metadata-compaction=error")
    try:
        mw.write(_batch([50], ts=50, v=50.0), path, cfg)  # the failed compaction is only logged
    finally:
        faults.configure(None)
    files_dir = os.path.join(path, ".hoodie", "metadata", "files")
    dead = [n for n in os.listdir(files_dir) if n.endswith(".hfile") and not n.endswith("00000000000000000.hfile")]
    assert len(dead) == 1, "the dead compaction's base is on storage"
    assert {r[2] for r in _agreed(path)} == {r[2] for r in before} | {"k050"}, \
        "no reader takes a base whose compaction did not complete; the decided write is read"
    mw.write(_batch([60], ts=60, v=60.0), path, cfg)
    names = os.listdir(files_dir)
    assert dead[0] not in names and sum(n.endswith(".hfile") for n in names) == 2
    timeline = os.listdir(os.path.join(path, ".hoodie", "metadata", ".hoodie", "timeline"))
    dead_t = dead[0][:-len(".hfile")].rsplit("_", 1)[1]
    assert not [n for n in timeline if n.startswith(dead_t)]
    assert {r[2] for r in _agreed(path)} == {r[2] for r in before} | {"k050", "k060"}
    _listing_is_storage(path)


@pytest.mark.parametrize("kind", ["cow", "mor"])
def test_an_undecided_commit_stays_invisible_while_its_entries_outlive_compactions(kind, tmp_path, monkeypatch):
    """A writer that died deciding its completion leaves its files in the metadata table until the
    cleaner's rollback rolls its deltacommit back. Through compactions of the files partition
    (timed below it, its log stays in the open slice) neither reader shows them; the rollback then
    removes them from the listing."""
    from multiwriter.table import decisions

    class Killed(BaseException):
        pass

    path = str(tmp_path / "t")
    _create(path, kind)
    lock = mw.InProcessLock()
    cfg = mw.WriterConfig(writer_id="w", lock=lock, heartbeat_interval_s=1.0, heartbeat_tolerable_misses=0)
    mw.write(_batch(range(6), ts=1, v=1.0), path, cfg)
    real_decide = decisions.DecisionLog.decide
    monkeypatch.setattr(decisions.DecisionLog, "decide", lambda self, after, d, **kw: (_ for _ in ()).throw(Killed()))
    with pytest.raises(Killed):
        mw.write(_batch(range(3, 9), ts=2, v=2.0), path, cfg)
    monkeypatch.setattr(decisions.DecisionLog, "decide", real_decide)
    t = mw.Table.open(path)
    (withdrawn,) = [i.requested_time for i in t.timeline().pending()]
    expect = {f"k{i:03d}": 1.0 for i in range(6)}
    for i in range(mf.MAX_DELTA_COMMITS + 2):
        mw.write(_batch([20 + i], ts=3 + i, v=3.0), path, cfg)
        expect[f"k{20 + i:03d}"] = 3.0
    listed = _listed_names(t)
    base = mf.MetadataTable(t.storage, t.config).latest_slice()[0]
    assert base is not None and not base.endswith(f"{mf.BOOTSTRAP_TIME}.hfile"), "the files partition compacted"
    assert any(withdrawn in n for n in listed), "its entries are still listed"
    assert {r[2]: r[4] for r in _agreed(path)} == expect
    _roll_back_the_failed_write(path, lock)
    assert not mw.Table.open(path).timeline().pending()
    listed = _listed_names(t)
    assert not any(withdrawn in n for n in listed)
    assert {r[2]: r[4] for r in _agreed(path)} == expect
    _listing_is_storage(path)


@pytest.mark.parametrize("kind", ["cow", "mor"])
def test_a_commit_records_from_its_metadata_what_its_instant_file_says(kind, tmp_path):
    """The writer hands the metadata table the commit metadata it encoded (no decode): the
    records are those decoded from each completed instant file, and hudi-rs lists the same."""
    path = str(tmp_path / "t")
    t = _create(path, kind)
    cfg = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock())
    mw.write(_batch(range(12), ts=1, v=1.0), path, cfg)
    mw.write(_batch(range(6, 20), ts=2, v=2.0), path, cfg)
    mw.write(_batch(range(30, 40), ts=3, v=3.0), path, mw.WriterConfig(writer_id="w", lock=mw.InProcessLock(),
                                                                       operation="insert"))
    tl = mw.Table.open(path).timeline()
    for i in tl.completed():
        data = t.storage.read_bytes(tl.path_of(i))
        decoded = mf.records_of(i.action, data, source="x")
        assert decoded and mf.records_of(i.action, data, source="x", metadata=tl.commit_metadata(i)) == decoded
        listed = mf.MetadataTable(t.storage, t.config).read()
        assert all(listed[p][n] == v for p, files in decoded.items() for n, v in files.items())
    _agreed(path)
    _listing_is_storage(path)


def test_deltacommits_after_a_compaction_read_the_base_schema_once(tmp_path, monkeypatch):
    """Each deltacommit writes its log block with the record schema of the group's base file;
    base files never change, so it is read once per process (reading one parses all of it),
    however many deltacommits follow, and readers agree with every one of them (hudi-rs)."""
    path = str(tmp_path / "t")
    _create(path, "cow")
    cfg = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock(), operation="insert")
    for b in range(mf.MAX_DELTA_COMMITS + 1):  # the files partition is compacted on the way
        mw.write(_batch(range(b * 10, b * 10 + 10), ts=1, v=float(b)), path, cfg)
    t = mw.Table.open(path)
    base, _, _ = mf.MetadataTable(t.storage, t.config).latest_slice()
    assert base is not None
    reads: list[int] = []
    real_read = mf.hfile.read
    monkeypatch.setattr(mf.hfile, "read", lambda data, **kw: reads.append(1) or real_read(data, **kw))
    for b in range(100, 104):
        mw.write(_batch(range(b * 10, b * 10 + 10), ts=1, v=1.0), path, cfg)
    assert mf.MetadataTable(t.storage, t.config).latest_slice()[0] == base, "no compaction meanwhile"
    assert len(reads) <= 1
    assert mf.MetadataTable(t.storage, t.config).schema_json == mf._SCHEMA_JSON
    _agreed(path)
    _listing_is_storage(path)


def _timeline_files(d: str) -> dict[str, bytes]:
    return {n: open(os.path.join(d, n), "rb").read() for n in os.listdir(d) if os.path.isfile(os.path.join(d, n))}


def _restore(d: str, files: dict[str, bytes]) -> None:
    for n in os.listdir(d):
        if os.path.isfile(os.path.join(d, n)) and n not in files:
            os.remove(os.path.join(d, n))
    for n, data in files.items():
        with open(os.path.join(d, n), "wb") as f:
            f.write(data)


def test_a_reader_that_loaded_the_timelines_before_a_compaction_still_reads_its_slice(tmp_path):
    """A compaction of the files partition keeps the previous slice whole for readers that
    loaded the timelines before it: hudi-rs, given the timelines as they were and the files
    as they are after the compaction, reads what it read then. The previous slice's first log
    completed at the very time of its base (it belongs to that slice), and it must stay."""
    import shutil

    path = str(tmp_path / "t")
    _create(path, "cow")
    cfg = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock())
    tl_dir = os.path.join(path, ".hoodie", "timeline")
    mdt_tl = os.path.join(path, ".hoodie", "metadata", ".hoodie", "timeline")

    def compactions() -> int:
        return sum(n.endswith(".commit") for n in os.listdir(mdt_tl))

    seen = 0
    for i in range(3 * mf.MAX_DELTA_COMMITS):
        before = (rows(mw.Table.open(path).read(), COLS), _timeline_files(tl_dir), _timeline_files(mdt_tl))
        mw.write(_batch([i], ts=i, v=float(i)), path, cfg)
        n = compactions()
        if n > seen and seen > 0:
            break
        seen = max(seen, n)
    else:
        pytest.fail("no second compaction of the files partition")
    old = str(tmp_path / "as-loaded-before")
    shutil.copytree(path, old)
    _restore(os.path.join(old, ".hoodie", "timeline"), before[1])
    _restore(os.path.join(old, ".hoodie", "metadata", ".hoodie", "timeline"), before[2])
    assert rows(hudi_read(old), COLS) == before[0]
    assert _agreed(path) and len(_agreed(path)) == len(before[0]) + 1


def test_a_pending_compaction_newer_than_a_completed_one_is_left_for_its_writer(tmp_path):
    """A compaction planned at ``p`` and not completed (its writer, decided, paused inside it)
    survives a compaction at an earlier time (one held below a pending data instant): its writer
    may still complete it, and it would then be the newest base. A compaction completed at a
    later time undoes it: completed after that, it is never the newest."""
    path = str(tmp_path / "t")
    _create(path, "cow")
    lock = mw.InProcessLock()
    cfg = mw.WriterConfig(writer_id="w", lock=lock, heartbeat_interval_s=1.0, heartbeat_tolerable_misses=0)
    for i in range(3):
        mw.write(_batch([i], ts=i, v=float(i)), path, cfg)
    t = mw.Table.open(path)
    newest = max(c for _, (_, c) in mf.MetadataTable(t.storage, t.config)._completed().items())
    # as the companion job times one, right after the newest completion; the paused writer's
    # just after it (its own completion); later commits complete above both
    early, paused = (format_time(parse_time(newest) + s) for s in (0.001, 0.002))
    faults.configure("mid-metadata-compaction=error")
    try:
        with pytest.raises(faults.InjectedFault):
            mf.MetadataTable(t.storage, t.config).maybe_compact(paused, paused, min_logs=1)
    finally:
        faults.configure(None)
    files_dir = os.path.join(path, ".hoodie", "metadata", "files")

    def bases() -> set[str]:
        return {n[:-len(".hfile")].rsplit("_", 1)[1] for n in os.listdir(files_dir) if n.endswith(".hfile")}

    assert paused in bases()
    assert not mf.MetadataTable(t.storage, t.config).maybe_compact(paused, paused, min_logs=1), \
        "no second compaction at the time of a pending one"
    assert mf.MetadataTable(t.storage, t.config).maybe_compact(early, early, min_logs=1)
    assert {early, paused} <= bases(), "the newer pending compaction keeps its base"
    done = mw.write(_batch([9], ts=9, v=9.0), path, cfg)  # a log for the next compaction to merge
    assert done.instant.completion_time > paused
    late = format_time(parse_time(done.instant.completion_time) + 0.001)
    assert mf.MetadataTable(t.storage, t.config).maybe_compact(late, late, min_logs=1)
    assert paused not in bases() and late in bases(), "undone once a later compaction completed"
    timeline = os.listdir(os.path.join(path, ".hoodie", "metadata", ".hoodie", "timeline"))
    assert not [n for n in timeline if n.startswith(paused)]
    assert {r[2] for r in _agreed(path)} == {"k000", "k001", "k002", "k009"}
    _listing_is_storage(path)
