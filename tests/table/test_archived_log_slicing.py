"""A deltacommit that completed after a compaction was planned: its log file belongs to the
compacted slice by its completion time, through archival (which keeps such a deltacommit while
its log file is on storage) and the next compaction: neither a read nor compaction drops its
rows, for us or for hudi-rs."""
from __future__ import annotations

import threading

import multiwriter as mw
from multiwriter import faults
from tests.conftest import trips, wait_hanging
from tests.oracle import hudi_read, rows

COLS = ["id", "ts", "value"]


def _cfg(w: str) -> mw.WriterConfig:
    return mw.WriterConfig(writer_id=w, lock=mw.InProcessLock(), heartbeat_interval_s=5.0)


def test_a_straggler_across_a_compaction_keeps_its_slice(mor_table, table_path, tmp_path, monkeypatch):
    lock = mw.InProcessLock()
    mw.write(trips(range(8), ts=1, value=1.0), table_path, _cfg("seed"))
    mw.write(trips(range(8), ts=2, value=2.0), table_path, _cfg("seed"))  # logs to compact
    monkeypatch.setenv("MULTIWRITER_FAULT_DIR", str(tmp_path))
    faults.configure("after-data-files=hang")
    box = {}
    straggler = threading.Thread(target=lambda: box.setdefault(
        "r", mw.write(trips(range(4), ts=9, value=9.0), table_path, _cfg("straggler"))))
    compact = mw.Cleaner(table_path, lock=lock, compaction=mw.CompactionConfig(delta_commits=1), clustering=None)
    try:
        straggler.start()
        assert wait_hanging(tmp_path, straggler)
        first = compact.run_once()  # planned and completed while the straggler's files wait
        assert first.compaction_instants
    finally:
        (tmp_path / "after-data-files.release").touch()
        straggler.join(30)
        faults.configure(None)
    late = box["r"].instant
    assert late.requested_time < first.compaction_instants[0] < late.completion_time
    for n in range(8):  # ask archival to move the straggler's deltacommit out of the active timeline
        mw.write(trips([100 + n], ts=3, value=3.0), table_path, _cfg("other"))
    mw.Cleaner(table_path, lock=lock, compaction=None, clustering=None, retain_commits=20,
               archive_keep_min=2, archive_keep_max=3).run_once()
    t = mw.Table.open(table_path)
    expect = {str(i): 9.0 if i < 4 else 2.0 for i in range(8)} | {str(100 + n): 3.0 for n in range(8)}
    assert dict(rows(t.read(), ["id", "value"])) == expect
    assert rows(t.read(), COLS) == rows(hudi_read(table_path), COLS)
    compact.run_once()  # the next compaction merges the straggler's log into the new base
    t = mw.Table.open(table_path)
    assert dict(rows(t.read(), ["id", "value"])) == expect
    assert rows(t.read(), COLS) == rows(hudi_read(table_path), COLS)
    compact.close()
