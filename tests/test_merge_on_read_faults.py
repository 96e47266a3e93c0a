"""The fault points Merge-on-Read adds: a writer killed between two of its log appends, and a
cleaner killed right after planning a compaction; the next cleaner run recovers both, nothing
lost, nothing uncommitted visible, read alike by hudi-rs."""
from __future__ import annotations

import os
import subprocess
import sys

import multiwriter as mw
from multiwriter.format import instant as inst
from tests.conftest import trips
from tests.oracle import hudi_read, rows
from tests.test_concurrency import ROOT, base_args, result, spawn
from tests.test_faults import invariants


def _values(path: str) -> dict[str, float]:
    got = rows(mw.Table.open(path).read(), ["id", "value"])
    assert got == rows(hudi_read(path), ["id", "value"])
    return dict(got)


def test_writer_killed_between_log_appends_is_rolled_back(zk_server, zk_base, mor_table, table_path):
    mw.write(trips(range(20), value=1.0), table_path, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="seed"))
    args = base_args(zk_server, zk_base, table_path, writer="w", ids=list(range(20)), value=2, batch_id=0)
    p = spawn("write", args, {"MULTIWRITER_FAULTS": "mid-log-append=crash@2"})  # after its second log file
    p.communicate(timeout=120)
    assert p.returncode == 137
    t = mw.Table.open(table_path)
    (pending,) = t.timeline().pending()
    assert sum(1 for lf in t.snapshot().files() for lf in lf.logs) == 0, "its log files are not visible"
    assert _values(table_path) == {str(k): 1.0 for k in range(20)}
    assert result(spawn("clean", dict(zk=zk_server.connect, base=zk_base, path=table_path)))["ok"]
    invariants(table_path)
    assert _values(table_path) == {str(k): 1.0 for k in range(20)}
    again = result(spawn("write", args))
    assert again["ok"] and not again["skipped"]
    assert _values(table_path) == {str(k): 2.0 for k in range(20)}
    invariants(table_path)


def test_cleaner_killed_after_planning_a_compaction_finishes_it_next_run(mor_table, table_path):
    lock = mw.FileSystemLock()
    cfg = mw.WriterConfig(lock=lock, writer_id="w")
    for n in range(3):
        mw.write(trips(range(n, 10), ts=n + 1, value=float(n + 1)), table_path, cfg)
    before = _values(table_path)
    script = (
        "import multiwriter as mw\n"
        f"c = mw.Cleaner({table_path!r}, lock=mw.FileSystemLock(), heartbeat_interval_s=1.0, heartbeat_tolerable_misses=2,"
        " clustering=None, compaction=mw.CompactionConfig(delta_commits=2))\n"
        "c.run_once()\n"
    )
    env = dict(os.environ, MULTIWRITER_FAULTS="compaction-after-plan=crash", PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-c", script], env=env, cwd=str(ROOT), capture_output=True, text=True, timeout=60)
    assert p.returncode == 137, p.stderr
    table = mw.Table.open(table_path)
    (pending,) = table.timeline().pending(frozenset({inst.COMPACTION}))
    assert _values(table_path) == before
    mw.write(trips([0], ts=9, value=9.0), table_path, cfg)  # writers never wait for a compaction
    before["0"] = 9.0
    report = mw.Cleaner(table_path, lock=lock, heartbeat_interval_s=1.0, heartbeat_tolerable_misses=2, clustering=None,
                        compaction=mw.CompactionConfig(delta_commits=2)).run_once()
    assert pending.requested_time in report.compaction_instants and report.errors == []
    assert table.timeline().find(pending.requested_time).is_completed
    assert _values(table_path) == before
    invariants(table_path)
