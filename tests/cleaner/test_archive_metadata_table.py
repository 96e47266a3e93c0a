"""Archival held behind the metadata table's compaction, as Hudi's archiver holds it: nothing is
archived before the files partition's first compaction, and no instant that completed at or
after its newest one. The oracle for the compaction time is the metadata timeline as the
directory lists it; hudi-rs reads the archived table as we do."""

from __future__ import annotations

import os

import multiwriter as mw
from multiwriter.cleaner import archive
from multiwriter.table import metadata_files as mf
from tests.cleaner.test_retention_archive import _commit, _times
from tests.conftest import TRIPS_SCHEMA, trips
from tests.oracle import hudi_read, rows


def _choose(table):
    return archive.choose(table.timeline(), keep_min=1, keep_max=3, retain_commits=0)


def _compactions(path: str) -> list[str]:
    """Requested times of the completed compactions on the metadata timeline (its files)."""
    tl = os.path.join(path, ".hoodie", "metadata", ".hoodie", "timeline")
    return sorted(n.split("_", 1)[0] for n in os.listdir(tl) if n.endswith(".commit"))


def _writes(path: str, n: int) -> None:
    cfg = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock(), executor="driver")
    for k in range(n):
        mw.write(trips([k], ts=k), path, cfg)


def test_nothing_is_archived_before_the_files_partition_first_compacts(trips_table, table_path):
    _writes(table_path, 6)
    assert _compactions(table_path) == []
    chosen, rule = _choose(trips_table)
    assert chosen == [] and rule == "the metadata table's newest compaction"


def test_the_same_timeline_without_a_metadata_table_archives(tmp_path):
    t = mw.Table.create(str(tmp_path / "plain"), name="trips", schema=TRIPS_SCHEMA, record_key="id",
                        partition_by=["date"], ordering_field="ts", metadata=False)
    for n in range(6):
        _commit(t, 3 * n, 3 * n + 1)
    chosen, rule = _choose(t)
    assert [i.requested_time for i in chosen] == [_times(3 * n) for n in range(5)] and rule == "keep_min"


def test_instants_completed_at_or_after_the_newest_compaction_stay(trips_table, table_path):
    _writes(table_path, 25)
    done = _compactions(table_path)
    assert len(done) >= 2, "the files partition compacted every few deltacommits"
    latest = done[-1]
    assert mf.latest_compaction_time(trips_table.storage, trips_table.config) == latest
    writes = trips_table.timeline().completed()
    kept = [i for i in writes if i.completion_time >= latest]
    assert kept and kept[-1] == writes[-1] and kept[0] != writes[0]
    chosen, rule = _choose(trips_table)
    assert chosen == writes[:writes.index(kept[0])]
    assert rule == "the metadata table's newest compaction"


def test_writes_with_the_cleaner_archive_only_behind_compactions_and_hudi_rs_agrees(table_path, trips_table):
    lock = mw.InProcessLock()
    cfg = mw.WriterConfig(writer_id="w", lock=lock, executor="driver")
    archived = 0
    with mw.Cleaner(table_path, lock=lock, heartbeat_interval_s=1.0, heartbeat_tolerable_misses=1, retain_commits=1,
                    archive_keep_min=1, archive_keep_max=2, clustering=None, compaction=None) as cleaner:
        for k in range(24):
            mw.write(trips([k % 5, 5 + k], ts=k, value=float(k)), table_path, cfg)
            report = cleaner.run_once()
            assert not report.errors, report.errors
            archived += report.archived
            done = _compactions(table_path)
            active = mw.Table.open(table_path).timeline().completed()
            if not done:
                assert report.archived == 0
            else:
                # every instant that completed at or after the newest compaction is still active
                history = {a.requested_time for a in archive.load_history(trips_table)}
                assert all((a.completion_time or "") < done[-1] for a in archive.load_history(trips_table))
                assert not history & {i.requested_time for i in active}
    assert archived > 0
    cols = ["id", "ts", "value"]
    ours = rows(mw.Table.open(table_path).read(), cols)
    assert ours == rows(hudi_read(table_path), cols)
    assert len(ours) == 29


def test_the_cleaner_compacts_the_files_partition_when_archival_waits_for_it(table_path, trips_table):
    _writes(table_path, 6)
    assert _compactions(table_path) == []
    lock = mw.InProcessLock()
    with mw.Cleaner(table_path, lock=lock, heartbeat_interval_s=1.0, heartbeat_tolerable_misses=1, retain_commits=1,
                    archive_keep_min=1, archive_keep_max=2, clustering=None, compaction=None) as cleaner:
        report = cleaner.run_once()
    assert not report.errors and report.archived >= 4
    (done,) = _compactions(table_path)
    newest = max(i.completion_time for i in mw.Table.open(table_path).timeline().completed())
    assert done > newest, "timed after every completion, so later actions' logs open the new slice"
    assert mf.uncompacted_instants(trips_table.storage, trips_table.config) == set()
    cfg = mw.WriterConfig(writer_id="w2", lock=lock, executor="driver")
    mw.write(trips([100], ts=9), table_path, cfg)
    cols = ["id", "ts", "value"]
    ours = rows(mw.Table.open(table_path).read(), cols)
    assert ours == rows(hudi_read(table_path), cols) and len(ours) == 7


def test_the_cleaners_compaction_stays_below_a_pending_instant_whose_deltacommit_is_there(table_path, trips_table,
                                                                                           monkeypatch):
    """A crash after the metadata deltacommit leaves a data instant pending whose log is in the
    files partition: the cleaner's compaction is timed just before that instant (as Hudi's
    ``compactIfNecessary``) and merges only the logs before it; its log stays in the open slice,
    where rolling it back stays possible, and both readers agree."""
    from multiwriter import faults
    from multiwriter.transaction import Transaction

    _writes(table_path, 2)
    monkeypatch.setattr(Transaction, "abort", lambda self: self.stop_heartbeat() or [])  # it dies: no abort
    faults.configure("after-metadata-table=error")
    try:
        try:
            mw.write(trips([50], ts=5), table_path, mw.WriterConfig(writer_id="w", lock=mw.InProcessLock()))
        except faults.InjectedFault:
            pass
    finally:
        faults.configure(None)
    monkeypatch.undo()
    t = mw.Table.open(table_path)
    (pending,) = [i.requested_time for i in t.timeline().pending()]
    newest = max(i.completion_time for i in t.timeline().completed())
    assert mf.compact_open_slice(t.storage, t.config, newest)
    assert _compactions(table_path) == [mf._before(pending)]
    assert mf.uncompacted_instants(t.storage, t.config) == {pending}
    assert not mf.compact_open_slice(t.storage, t.config, newest), "nothing before it left to compact"
    cols = ["id", "ts", "value"]
    ours = rows(mw.Table.open(table_path).read(), cols)
    assert ours == rows(hudi_read(table_path), cols) and len(ours) == 2
