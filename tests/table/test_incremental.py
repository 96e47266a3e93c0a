"""Incremental reads follow Hudi's semantics (latest in-range version of each changed record)
and never answer partially after cleaning or archival. Oracle: hudi-rs's incremental query."""
from __future__ import annotations

import pyarrow as pa
import pytest

import multiwriter as mw
from multiwriter import errors
from tests.conftest import trips
from tests.oracle import hudi_read, rows

COLS = ["id", "_hoodie_commit_time", "value"]


def hudi_incremental(path: str, start: str | None, end: str | None) -> pa.Table | None:
    from hudi import HudiQueryType, HudiReadOptions, HudiTableBuilder

    opts = HudiReadOptions().with_query_type(HudiQueryType.Incremental)
    if start:
        opts = opts.with_start_timestamp(start)
    if end:
        opts = opts.with_end_timestamp(end)
    batches = HudiTableBuilder.from_base_uri(path).build().read(opts)
    return pa.Table.from_batches(batches) if batches else None


def _rows(t: pa.Table | None) -> list[tuple]:
    return rows(t, COLS) if t is not None else []


def _history(path: str, lock) -> list[mw.CommitResult]:
    """Insert keys 0..99, then update keys 1..5 in five commits (the repro of the issue)."""
    cfg = mw.WriterConfig(writer_id="w", lock=lock)
    out = [mw.write(trips(range(100), ts=0, value=0), path, cfg)]
    for k in range(1, 6):
        out.append(mw.write(trips([k], ts=k, value=k), path, cfg))
    return out


def _no_duplicate_keys(t: pa.Table) -> bool:
    keys = t.column("_hoodie_record_key").to_pylist()
    return len(keys) == len(set(keys))


def test_every_range_matches_hudi_rs_and_returns_one_version_per_key(trips_table, table_path):
    commits = _history(table_path, mw.InProcessLock())
    t = mw.Table.open(table_path)
    bounds = [None] + [c.instant.completion_time for c in commits]
    for a, start in enumerate(bounds):
        for end in bounds[a + 1:] + [None]:
            ours = t.read_incremental(start, end)
            assert _no_duplicate_keys(ours), (start, end)
            assert _rows(ours) == _rows(hudi_incremental(table_path, start, end)), (start, end)
    everything = t.read_incremental()
    assert everything.num_rows == 100
    assert dict(rows(everything, ["id", "value"]))["3"] == 3.0


def test_cleaning_keeps_full_range_exact_and_refuses_partial_answers(trips_table, table_path):
    lock = mw.InProcessLock()
    commits = _history(table_path, lock)
    with mw.Cleaner(table_path, lock=lock, retain_commits=1) as cleaner:
        assert cleaner.run_once().old_versions_deleted == 5
    t = mw.Table.open(table_path)

    ours = t.read_incremental(None, None)
    assert ours.num_rows == 100 and _no_duplicate_keys(ours)
    assert _rows(ours) == _rows(hudi_incremental(table_path, None, None))
    assert t.read().num_rows == 100

    # the slices (r2, r4] needs were deleted: a typed error, not a silently empty/partial answer
    c = [x.instant.completion_time for x in commits]
    with pytest.raises(errors.InstantNotRetainedError) as e:
        t.read_incremental(c[2], c[4])
    assert e.value.earliest == c[4]
    assert t.read_incremental(e.value.earliest, None).num_rows == 1  # key 5: still exact
    assert _rows(t.read_incremental(c[4], None)) == _rows(hudi_incremental(table_path, c[4], None))

    # time travel before the earliest retained commit is refused too; at it, it works
    with pytest.raises(errors.InstantNotRetainedError) as e:
        t.read(as_of=commits[2].instant.requested_time)
    assert e.value.earliest == commits[-1].instant.requested_time
    assert t.read(as_of=e.value.earliest).num_rows == 100


def test_after_archival_ranges_over_archived_instants_read_the_history(trips_table, table_path):
    lock = mw.InProcessLock()
    commits = _history(table_path, lock)
    c = [x.instant.completion_time for x in commits]
    before = {(s, None): _rows(hudi_incremental(table_path, s, None)) for s in (None, c[1], c[3])}
    with mw.Cleaner(table_path, lock=lock, retain_commits=1, archive_keep_min=1, archive_keep_max=2) as cleaner:
        report = cleaner.run_once()
    assert report.archived >= 4
    t = mw.Table.open(table_path)
    assert t.timeline().earliest_time() > commits[1].instant.requested_time
    everything = t.read_incremental()
    assert everything.num_rows == 100 and _no_duplicate_keys(everything)
    # equal to what hudi-rs answered before archival (it does not read the archived timeline)
    assert _rows(everything) == before[(None, None)] == rows(hudi_read(table_path), COLS)
    assert _rows(t.read_incremental(c[1], None)) == before[(c[1], None)] != []
    # a range whose slices the cleaner deleted is still refused
    with pytest.raises(errors.InstantNotRetainedError) as e:
        t.read_incremental(c[1], c[3])
    assert e.value.earliest == c[3]
    assert _rows(t.read_incremental(e.value.earliest, None)) == before[(c[3], None)]


# -- Merge-on-Read ----------------------------------------------------------------------------------


def _mor_history(path: str, lock) -> list[mw.CommitResult]:
    """Insert keys 0..7 (one partition, 4 buckets), then three deltacommits updating two keys each."""
    cfg = mw.WriterConfig(writer_id="w", lock=lock)
    out = [mw.write(trips(range(8), ts=0, value=0), path, cfg)]
    for k in range(1, 4):
        out.append(mw.write(trips([k, k + 4], ts=k, value=k), path, cfg))
    return out


def _compact_and_clean(path: str, lock) -> None:
    with mw.Cleaner(path, lock=lock, retain_commits=1, clustering=None,
                    compaction=mw.CompactionConfig(delta_commits=2)) as cleaner:
        first = cleaner.run_once()
        assert first.compaction_instants and first.old_versions_deleted > 0
        cleaner.run_once()


def test_merge_on_read_range_whose_slices_were_cleaned_is_refused_not_partial(mor_table, table_path):
    lock = mw.InProcessLock()
    commits = _mor_history(table_path, lock)
    c = [x.instant.completion_time for x in commits]
    t = mw.Table.open(table_path)
    # hand-derived: (c0, c2] changed keys 1, 5 (at c1) and 2, 6 (at c2)
    assert sorted(rows(t.read_incremental(c[0], c[2]), ["id", "value"])) == [("1", 1.0), ("2", 2.0), ("5", 1.0), ("6", 2.0)]
    latest = _rows(t.read_incremental(c[2], None))
    _compact_and_clean(table_path, lock)
    t = mw.Table.open(table_path)
    for start, end in [(c[0], c[2]), (c[1], c[2]), (None, c[2])]:
        with pytest.raises(errors.InstantNotRetainedError) as e:
            t.read_incremental(start, end)
        assert e.value.earliest is not None and "cleaner has deleted" in str(e.value)
    # what is still retained stays exact: up to the latest commit, and from the error's bound on
    assert _rows(t.read_incremental(c[2], None)) == latest
    everything = t.read_incremental(None, None)
    assert everything.num_rows == 8 and _no_duplicate_keys(everything)
    assert rows(everything, ["id", "value"]) == rows(t.read(), ["id", "value"])


def test_a_range_of_table_services_only_is_empty_without_reading_a_slice(mor_table, table_path):
    """A compaction moves a consumer's offset but delivers nothing and reads nothing; a range
    holding data commits and the compaction after them still returns the data commits' rows."""
    lock = mw.InProcessLock()
    commits = _mor_history(table_path, lock)
    before = _rows(mw.Table.open(table_path).read_incremental(commits[1].instant.completion_time, None))
    with mw.Cleaner(table_path, lock=lock, clustering=None, compaction=mw.CompactionConfig(delta_commits=2)) as cleaner:
        (ct,) = cleaner.run_once().compaction_instants
    t = mw.Table.open(table_path)
    tl = t.timeline()
    compaction = tl.find(ct)
    assert compaction.is_completed and compaction.action == "commit"
    last_data = commits[-1].instant.completion_time
    plan = t.incremental_plan(tl, last_data, compaction.completion_time)
    assert plan.slices == () and plan.commit_times == frozenset()
    assert t.read_incremental(last_data, None).num_rows == 0
    assert _rows(t.read_incremental(commits[1].instant.completion_time, None)) == before != []


def test_a_range_of_clustering_only_reads_nothing_on_copy_on_write(trips_table, table_path):
    cfg = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock())
    commits = [mw.write(trips(range(k * 2, k * 2 + 2), ts=k, value=k), table_path, cfg) for k in range(4)]
    small = mw.ClusteringConfig(small_file_bytes=1 << 20, target_file_bytes=4 << 20, max_bytes_per_run=64 << 20,
                                min_file_groups=2)
    with mw.Cleaner(table_path, lock=mw.InProcessLock(), clustering=small) as cleaner:
        assert len(cleaner.run_once().clustering_instants) == 1
    t = mw.Table.open(table_path)
    tl = t.timeline()
    last = commits[-1].instant.completion_time
    assert t.incremental_plan(tl, last, None).slices == ()
    assert t.read_incremental(last, None).num_rows == 0
    # the rows clustering moved are still delivered to a range holding their commits
    c1 = commits[1].instant.completion_time
    assert sorted(rows(t.read_incremental(c1, None), ["id", "value"])) == [(str(i), float(i // 2)) for i in range(4, 8)]
    assert _rows(t.read_incremental(c1, None)) == _rows(hudi_incremental(table_path, c1, None))


# -- the consumer loop -------------------------------------------------------------------------------


class _Consumer:
    """The loop README.md and docs/consumers.md show: read from the saved offset, apply, save ``batch.end``."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.offset: str | None = None
        self.state: dict[str, tuple[int, float]] = {}  # key -> (ts, value), event time wins
        self.seen: list[tuple[str, str]] = []  # (key, commit time) of every delivered row

    def poll(self) -> int:
        batch = mw.Table.open(self.path).read_incremental_batch(self.offset)
        assert batch.start == self.offset and batch.end is not None
        assert batch.end >= (self.offset or "")
        if batch.end != batch.start:  # hudi-rs reads the same range alike
            assert _rows(batch.rows) == _rows(hudi_incremental(self.path, batch.start, batch.end)), (batch.start, batch.end)
        for key, ct, ts, value in rows(batch.rows, ["id", "_hoodie_commit_time", "ts", "value"]):
            self.seen.append((key, ct))
            if key not in self.state or ts >= self.state[key][0]:
                self.state[key] = (ts, value)
        self.offset = batch.end
        return batch.rows.num_rows


@pytest.mark.parametrize("table_type", ["MERGE_ON_READ", "COPY_ON_WRITE"])
def test_a_consumer_loop_on_the_returned_end_sees_every_committed_row_once(table_type, request, table_path, tmp_path,
                                                                           monkeypatch):
    """Through a slow writer that completes after later commits, compaction (Merge-on-Read) or
    clustering (Copy-on-Write), cleaning and archival, a consumer that saves ``batch.end`` ends
    with the table's state, never getting a row version twice; the model is the acknowledged
    commits, and hudi-rs reads every range alike."""
    import threading

    from multiwriter import faults
    from tests.conftest import wait_hanging

    mor = table_type == "MERGE_ON_READ"
    request.getfixturevalue("mor_table" if mor else "trips_table")
    lock = mw.InProcessLock()

    def cfg(writer: str, **kw) -> mw.WriterConfig:
        return mw.WriterConfig(writer_id=writer, lock=lock, **kw)

    model: dict[str, tuple[int, float]] = {}

    def acknowledged(ids, ts, value) -> None:
        for i in ids:
            if str(i) not in model or ts >= model[str(i)][0]:
                model[str(i)] = (ts, float(value))

    consumer = _Consumer(table_path)
    mw.write(trips(range(10), ts=1, value=1.0), table_path, cfg("a"))
    acknowledged(range(10), 1, 1.0)
    assert consumer.poll() == 10
    first_end = consumer.offset
    assert first_end == mw.Table.open(table_path).timeline().last_completed_write().completion_time

    monkeypatch.setenv("MULTIWRITER_FAULT_DIR", str(tmp_path))
    faults.configure("after-data-files=hang")
    box: dict = {}
    slow = threading.Thread(target=lambda: box.setdefault(
        "r", mw.write(trips([20, 21], ts=5, value=5.0), table_path, cfg("slow", heartbeat_interval_s=5.0))))
    try:
        slow.start()
        assert wait_hanging(tmp_path, slow)
        faults.configure(None)
        for k in range(2, 5):
            mw.write(trips([k, k + 5], ts=k, value=float(k)), table_path, cfg("a"))
            acknowledged([k, k + 5], k, float(k))
            consumer.poll()
    finally:
        (tmp_path / "after-data-files.release").touch()
        slow.join(30)
    assert box["r"].instant.completion_time > consumer.offset, "the slow writer completed after the offset"
    acknowledged([20, 21], 5, 5.0)
    assert consumer.poll() == 2

    small = mw.ClusteringConfig(small_file_bytes=1 << 20, target_file_bytes=4 << 20, max_bytes_per_run=64 << 20,
                                min_file_groups=2)
    services = dict(retain_commits=3, archive_keep_min=2, archive_keep_max=3,
                    clustering=None if mor else small, compaction=mw.CompactionConfig(delta_commits=2) if mor else None)
    serviced = []
    for k in range(5, 11):
        mw.write(trips([k % 10, 30 + k], ts=k, value=float(k)), table_path, cfg("a"))
        acknowledged([k % 10, 30 + k], k, float(k))
        with mw.Cleaner(table_path, lock=lock, **services) as cleaner:
            report = cleaner.run_once()
        serviced += report.compaction_instants if mor else report.clustering_instants
        consumer.poll()
    assert consumer.poll() == 0  # nothing new: the offset stays
    tl = mw.Table.open(table_path).timeline()
    assert serviced, "compaction or clustering ran"
    assert tl.earliest_time() > box["r"].instant.requested_time, "instants were archived"

    assert len(consumer.seen) == len(set(consumer.seen)), "no row version delivered twice"
    assert consumer.state == model
    assert {k: v for k, (_, v) in model.items()} == dict(rows(mw.Table.open(table_path).read(), ["id", "value"]))


@pytest.mark.parametrize("table_type", ["MERGE_ON_READ", "COPY_ON_WRITE"])
def test_an_end_past_the_latest_commit_is_returned_clamped_so_the_next_read_misses_nothing(table_type, request,
                                                                                           table_path):
    """A consumer asking up to a far-future ``end`` gets back the latest completion time of the
    timeline it read, not that ``end``: reading on from it delivers the commits that completed
    after. The model is the acknowledged commits; hudi-rs reads the second range alike."""
    request.getfixturevalue("mor_table" if table_type == "MERGE_ON_READ" else "trips_table")
    cfg = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock())
    first = mw.write(trips(range(3), ts=1, value=1.0), table_path, cfg)
    far = "99991231235959999"
    t = mw.Table.open(table_path)
    batch = t.read_incremental_batch(None, far)
    assert batch.end == first.instant.completion_time
    assert rows(batch.rows, ["id", "value"]) == [("0", 1.0), ("1", 1.0), ("2", 1.0)]
    assert t.read_incremental_batch(batch.end, far).end == batch.end  # nothing new: the offset stays

    later = [mw.write(trips([k, 10 + k], ts=2, value=2.0), table_path, cfg) for k in range(2)]
    after = t.read_incremental_batch(batch.end, far)
    assert after.start == batch.end and after.end == later[-1].instant.completion_time
    expected = [("0", 2.0), ("1", 2.0), ("10", 2.0), ("11", 2.0)]
    assert rows(after.rows, ["id", "value"]) == expected
    assert rows(hudi_incremental(table_path, after.start, after.end), ["id", "value"]) == expected


def test_a_far_future_end_on_a_table_without_commits_returns_the_start(trips_table, table_path):
    batch = mw.Table.open(table_path).read_incremental_batch(None, "99991231235959999")
    assert batch.rows.num_rows == 0 and batch.end is None
