"""Retention of old file slices and archival of old instants, checked against hudi-rs."""

from __future__ import annotations

import json
import os
import time

import pyarrow as pa

import multiwriter as mw
from multiwriter.cleaner import archive
from multiwriter.format import lsm_timeline as lsm
from multiwriter.heartbeat.client import HeartbeatClient
from multiwriter.format import instant as inst
from multiwriter.table import timeline as tlmod
from multiwriter.table.metadata import CommitMetadata
from multiwriter.table.snapshot import list_data_files
from multiwriter.transaction import CHECKPOINT_KEY, Transaction
from tests.cleaner.conftest import HB, MISSES, writer_config
from tests.conftest import trips
from tests.oracle import hudi_read, rows

COLS = ["id", "value"]
N_IDS = 20


def _batch(k: int) -> tuple[pa.Table, dict[str, float]]:
    """Batch k upserts three ids (id < 10 in one partition, the rest in another) to value k."""
    ids = [(3 * k + j) % N_IDS for j in range(3)]
    t = pa.table(
        {
            "id": [str(i) for i in ids],
            "date": ["2024-01-01" if i < 10 else "2024-01-02" for i in ids],
            "ts": pa.array([k] * 3, pa.int64()),
            "value": [float(k)] * 3,
        }
    )
    return t, {str(i): float(k) for i in ids}


def _model_rows(state: dict[str, float]) -> list[tuple]:
    return sorted(state.items(), key=repr)


def test_200_commits_keep_only_what_the_retained_snapshots_need(trips_table, table_path, zk_lock, cleaners):
    cfg = writer_config(zk_lock(), "ingest")
    cleaner = cleaners(table_path, zk_lock(), retain_commits=10, archive_keep_min=20, archive_keep_max=30)
    state: dict[str, float] = {}
    as_of_model: dict[str, list[tuple]] = {}
    totals = {"old": 0, "archived": 0}
    started = time.monotonic()
    for k in range(200):
        batch, changes = _batch(k)
        r = mw.write(batch, table_path, cfg)
        state.update(changes)
        as_of_model[r.instant.requested_time] = _model_rows(state)
        if k % 20 == 19:
            report = cleaner.run_once()
            assert report.errors == [] and report.rolled_back == []
            totals["old"] += report.old_versions_deleted
            totals["archived"] += report.archived
    elapsed = time.monotonic() - started
    tl = trips_table.timeline()
    writes = tl.completed_writes()
    retained = [i.requested_time for i in writes[-10:]]

    # storage holds exactly the slices of the retained snapshots (one writer: nothing else is needed)
    needed = set()
    for x in retained:
        needed |= {f.path for f in trips_table.snapshot(as_of=x).files()}
    on_disk = {f.path for f in list_data_files(trips_table.storage)}
    assert on_disk == needed, f"extra: {sorted(on_disk - needed)[:3]}, missing: {sorted(needed - on_disk)[:3]}"
    assert totals["old"] > 150, totals

    # the active timeline stays bounded; nothing pending; archived instants are in history
    assert len(tl.completed()) <= 30
    assert tl.pending() == []
    history = archive.load_history(trips_table)
    assert len(history) == totals["archived"] > 150
    assert max(a.requested_time for a in history) < tl.earliest_time()
    archived_commit = next(a for a in history if a.action == inst.COMMIT)
    assert archived_commit.commit_metadata().all_stats(), "archived commits keep their write stats"

    # the process-wide cache of parsed instant metadata follows the active timeline: it keeps no
    # archived instant (a long-lived writer's memory stays flat), checked against a plain listing
    listed = set(os.listdir(os.path.join(table_path, trips_table.config.timeline_dir)))
    cached = {path.rsplit("/", 1)[-1] for uri, path, _, _ in tlmod._CACHE._items if uri == trips_table.storage.uri}
    assert cached and cached <= listed, f"archived instants still cached: {sorted(cached - listed)[:3]}"

    # latest and time travel to every retained commit: our reader == hudi-rs == the model
    assert rows(trips_table.read(), COLS) == rows(hudi_read(table_path), COLS) == _model_rows(state)
    for x in (retained[0], retained[4], retained[-1]):
        assert rows(trips_table.read(as_of=x), COLS) == as_of_model[x]
        assert rows(hudi_read(table_path, as_of=x), COLS) == as_of_model[x]
    print(f"200 commits + 10 cleaner runs in {elapsed:.1f}s")


def test_old_slices_a_pending_writer_may_read_are_kept(trips_table, table_path, zk_lock, cleaners):
    """A writer in flight merges the slices of the snapshot it began from: retention keeps them."""
    cfg = writer_config(zk_lock(), "ingest")
    for k in range(3):
        mw.write(trips([1], ts=k, value=k), table_path, cfg)
    base_slice = {f.path for f in trips_table.snapshot().files()}
    hb = HeartbeatClient(trips_table.storage, writer_id="slow", interval_s=HB, tolerable_misses=MISSES)
    lock = zk_lock().for_table(trips_table.table_id, trips_table.storage)
    txn = Transaction(trips_table, lock, writer_id="slow", heartbeat=hb)
    try:
        txn.begin()
        for k in range(3, 15):
            mw.write(trips([1], ts=k, value=k), table_path, cfg)
        report = cleaners(table_path, zk_lock(), retain_commits=3).run_once()
        on_disk = {f.path for f in list_data_files(trips_table.storage)}
        assert base_slice <= on_disk, "the pending writer's base slice was deleted"
        assert report.old_versions_deleted == 2, "only the slices older than the pending writer's base go"
    finally:
        txn.abort()
        hb.close()
        lock.close()
    report = cleaners(table_path, zk_lock(), retain_commits=3).run_once()
    assert report.old_versions_deleted == 10
    assert rows(trips_table.read(), COLS) == rows(hudi_read(table_path), COLS) == [("1", 14.0)]


def test_archival_keeps_every_streaming_writers_checkpoint_without_pinning_old_commits(
    trips_table, table_path, zk_lock, cleaners
):
    from multiwriter.transaction import last_checkpoint

    quiet, busy = writer_config(zk_lock(), "quiet"), writer_config(zk_lock(), "busy")
    mw.write(trips([0]), table_path, quiet, batch_id=7)
    for k in range(40):
        mw.write(trips([1 + k % 3], ts=k), table_path, busy, batch_id=k)
    cleaner = cleaners(table_path, zk_lock(), retain_commits=5, archive_keep_min=10, archive_keep_max=20)
    report = cleaner.run_once()
    # the newest commit carries the quiet writer's checkpoint forward: its old commit does not pin archival
    assert report.archived > 0 and len(trips_table.timeline().completed()) <= 20
    assert last_checkpoint(trips_table, "quiet") == 7 and last_checkpoint(trips_table, "busy") == 39
    assert mw.write(trips([0]), table_path, quiet, batch_id=7).skipped
    mw.write(trips([0]), table_path, quiet, batch_id=8)
    cleaner.run_once()
    assert len(trips_table.timeline().completed()) <= 20
    assert last_checkpoint(trips_table, "quiet") == 8 and last_checkpoint(trips_table, "busy") == 39
    assert mw.write(trips([5]), table_path, busy, batch_id=39).skipped, "the sink still finds its checkpoint"
    assert rows(trips_table.read(), COLS) == rows(hudi_read(table_path), COLS)


def test_nothing_to_clean_records_no_clean_instant(trips_table, table_path, zk_lock, cleaners):
    cfg = writer_config(zk_lock(), "ingest")
    for k in range(4):
        mw.write(trips([k]), table_path, cfg)  # inserts only: one slice per file group
    report = cleaners(table_path, zk_lock(), retain_commits=2).run_once()
    assert report.old_versions_deleted == 0 and report.clean_instants == []
    assert trips_table.timeline().completed(frozenset({inst.CLEAN})) == []


# -- archival decisions on hand-made timelines -------------------------------------------------


def _times(n: int) -> str:
    """The n-th synthetic instant time, 10 ms apart."""
    ms = 10 * n
    return f"2024010100{ms // 60000:02d}{(ms // 1000) % 60:02d}{ms % 1000:03d}"


def _commit(table, req: int, done: int | None, checkpoint: dict | None = None) -> None:
    extra = {CHECKPOINT_KEY: json.dumps(checkpoint)} if checkpoint else {}
    tlmod.create_requested(table.storage, table.config, _times(req))
    if done is not None:
        meta = CommitMetadata({}, extra).to_bytes()
        tlmod.create_completed(table.storage, table.config, _times(req), _times(done), data=meta)


def _choose(table, **kw):
    kw = {"keep_min": 20, "keep_max": 30, "retain_commits": 1, **kw}
    return archive.choose(table.timeline(), **kw)


def test_archival_stops_at_the_oldest_pending_instant(trips_table):
    for n in range(40):
        _commit(trips_table, 3 * n, 3 * n + 1 if n != 10 else None)
    chosen, rule = _choose(trips_table)
    assert [i.requested_time for i in chosen] == [_times(3 * n) for n in range(10)]
    assert rule == "oldest pending instant"


def test_archival_keeps_each_writers_newest_checkpoint_commit(trips_table):
    for n in range(40):
        ck = {"sink-a": str(n)} if n in (3, 5) else ({"sink-b": "7"} if n == 30 else None)
        _commit(trips_table, 3 * n, 3 * n + 1, ck)
    chosen, rule = _choose(trips_table)
    assert [i.requested_time for i in chosen] == [_times(3 * n) for n in range(5)]
    assert rule == "a writer's newest checkpoint commit"


def test_archival_is_a_prefix_in_completion_order_too(trips_table):
    """An early instant that completed late holds archival back until it can go with its peers."""
    for n in range(40):
        _commit(trips_table, 3 * n, 3 * n + 1 if n else 3 * 29 + 2)
    chosen, rule = _choose(trips_table)
    assert chosen == [] and rule == "completion order"
    for n in range(40, 52):
        _commit(trips_table, 3 * n, 3 * n + 1)
    chosen, _ = _choose(trips_table)
    assert [i.requested_time for i in chosen] == [_times(3 * n) for n in range(32)]


def test_an_interrupted_archival_is_finished_without_archiving_twice(trips_table, zk_lock, cleaners):
    for n in range(40):
        _commit(trips_table, 3 * n, 3 * n + 1)
    cleaner = cleaners(trips_table.path, zk_lock(), retain_commits=1)
    ctx = cleaner._context()
    tl = trips_table.timeline()
    chosen, _ = _choose(trips_table)
    lsm.append(trips_table.storage, trips_table.config.history_dir, [archive.lsm_record(tl, i) for i in chosen])
    for i in chosen[:3]:  # the crash: only three instants' files were removed
        for f in [x for x in tl.instants if x.requested_time == i.requested_time]:
            trips_table.storage.delete(tl.path_of(f))
    result = archive.archive(ctx, keep_min=20, keep_max=30, retain_commits=1)
    assert result.finished == len(chosen) - 3 and result.archived == 0
    history = archive.load_history(trips_table)
    assert [a.requested_time for a in history] == [i.requested_time for i in chosen]
    assert trips_table.timeline().earliest_time() == _times(3 * 20)
    assert len(trips_table.timeline().completed()) == 20


def test_archival_first_deletes_leftovers_it_would_make_look_committed(trips_table, table_path, zk_lock, cleaners):
    """A file of no completed commit (here: a zombie's file written after its rollback) is
    invisible while its time is on the active timeline, and would look committed once archival
    moved the earliest instant past it: archival deletes it first."""
    from multiwriter.format import layout

    cfg = writer_config(zk_lock(), "ingest")
    mw.write(trips([1, 2], value=0), table_path, cfg)
    src = trips_table.snapshot().files()[0]
    from multiwriter.instant_time import next_after

    zombie_time = next_after(trips_table.timeline().max_time())
    name = layout.DataFileName(src.file_id, layout.write_token(9), zombie_time).name
    zombie = layout.data_file_path(src.partition, name)
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    data = pq.read_table(trips_table.storage.abs(src.path))
    data = data.set_column(data.schema.get_field_index("value"), "value", pc.add(data["value"], 999.0))
    pq.write_table(data, trips_table.storage.abs(zombie))
    for k in range(1, 40):
        mw.write(trips([100 + k], value=k), table_path, cfg)
    assert rows(hudi_read(table_path), COLS) == rows(trips_table.read(), COLS)
    report = cleaners(table_path, zk_lock(), retain_commits=5, archive_keep_min=10, archive_keep_max=20).run_once()
    assert report.archived > 0 and trips_table.timeline().earliest_time() > zombie_time
    assert report.uncommitted_deleted == 1 and not trips_table.storage.exists(zombie)
    expected = sorted([("1", 0.0), ("2", 0.0)] + [(str(100 + k), float(k)) for k in range(1, 40)], key=repr)
    assert rows(trips_table.read(), COLS) == rows(hudi_read(table_path), COLS) == expected
