"""The commit point: once ``<T>_<C>.commit`` exists nothing may delete that instant's files, and a
commit whose outcome is unknown is settled by re-reading the timeline, never by guessing.

The oracles are hudi-rs (an independent reader) and plain directory listings / pyarrow reads of
the completed instant's files."""
from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

import multiwriter as mw
from multiwriter import faults
from multiwriter.table import timeline as tlmod
from tests.conftest import trips
from tests.oracle import hudi_read, rows


def cfg(**kw) -> mw.WriterConfig:
    return mw.WriterConfig(writer_id="w", lock=mw.InProcessLock(), heartbeat_interval_s=1.0, **kw)


def completed_commit_files(path: str) -> list[Path]:
    """Every data file named by a completed commit, read straight from the Avro metadata."""
    import fastavro

    out = []
    for f in sorted(Path(path, ".hoodie", "timeline").glob("*_*.commit")):
        with open(f, "rb") as fh:
            rec = next(iter(fastavro.reader(fh)))
        for stats in (rec.get("partitionToWriteStats") or {}).values():
            out += [Path(path, s["path"]) for s in stats if s.get("path")]
    return out


def hudi_values(path: str) -> dict[str, float]:
    return dict(rows(hudi_read(path), ["id", "value"]))


def leftovers(path: str) -> tuple[list[Path], list[Path]]:
    return list(Path(path, ".hoodie", ".heartbeat").glob("*")), list(Path(path, ".hoodie", ".temp").glob("*"))


def test_error_after_the_completed_instant_keeps_its_files(trips_table, table_path):
    mw.write(trips([1, 2], value=1), table_path, cfg(), batch_id=0)
    faults.configure("after-complete=error")
    try:
        with pytest.raises(faults.InjectedFault):
            mw.write(trips([1], ts=2, value=2), table_path, cfg(), batch_id=1)
    finally:
        faults.configure(None)
    files = completed_commit_files(table_path)
    assert files and all(f.exists() for f in files), "a completed commit names a deleted file"
    assert hudi_values(table_path) == {"1": 2.0, "2": 1.0}
    assert leftovers(table_path) == ([], []), "heartbeat or markers of the committed instant left behind"
    again = mw.write(trips([1], ts=2, value=2), table_path, cfg(), batch_id=1)
    assert again.skipped, "the replayed batch is already committed"
    assert hudi_values(table_path) == {"1": 2.0, "2": 1.0}


class _ReleaseFails:
    """A table lock whose second release (the one after the commit) raises after really
    releasing (a flaky lock service)."""

    def __init__(self, inner):
        self.inner = inner
        self.releases = 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def release(self):
        self.inner.release()
        self.releases += 1
        if self.releases == 2:
            raise mw.errors.LockError("lock service answered with an error on release")


def test_a_failing_unlock_after_the_commit_point_does_not_undo_the_commit(trips_table, table_path):
    w = mw.Writer(mw.Table.open(table_path), cfg())
    w.lock = _ReleaseFails(w.lock)
    try:
        r = w.write(trips([5, 6], value=3), batch_id=7)
    finally:
        w.close()
    assert w.lock.releases == 2
    assert r.instant is not None and r.instant.is_completed
    assert all(f.exists() for f in completed_commit_files(table_path))
    assert hudi_values(table_path) == {"5": 3.0, "6": 3.0}
    assert leftovers(table_path) == ([], [])


def _flaky_completion(monkeypatch, *, lands: bool):
    """``create_completed`` raises an OSError after (lands=True) or instead of (lands=False)
    writing the file, and the existence probe fails too: the outcome is unknown to the writer."""
    real = tlmod.create_completed
    calls = {"n": 0}

    def flaky(storage, config, t, completion, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            if lands:
                real(storage, config, t, completion, *args, **kwargs)
            raise OSError("connection reset while writing the completed instant")
        return real(storage, config, t, completion, *args, **kwargs)

    monkeypatch.setattr(tlmod, "create_completed", flaky)
    from multiwriter.storage import Storage

    real_exists = Storage.exists

    def exists(self, rel):
        if rel.endswith(".commit") and "_" in rel.rsplit("/", 1)[-1] and calls["n"] == 1:
            raise OSError("storage unreachable")
        return real_exists(self, rel)

    monkeypatch.setattr(Storage, "exists", exists)
    return calls


def test_unknown_commit_state_that_landed_is_reported_committed(trips_table, table_path, monkeypatch):
    calls = _flaky_completion(monkeypatch, lands=True)
    w = mw.Writer(mw.Table.open(table_path), cfg())
    try:
        r = w.write(trips([1, 2, 3], value=4), batch_id=0)
    finally:
        w.close()
    assert calls["n"] == 1, "a landed commit is not attempted again"
    assert r.instant is not None and r.instant.is_completed and r.attempts == 1
    assert len(list(Path(table_path, ".hoodie", "timeline").glob("*_*.commit"))) == 1
    assert hudi_values(table_path) == {"1": 4.0, "2": 4.0, "3": 4.0}
    assert leftovers(table_path) == ([], []), "the heartbeat of a settled instant keeps beating"


def test_unknown_commit_state_that_did_not_land_is_undone_and_retried(trips_table, table_path, monkeypatch):
    calls = _flaky_completion(monkeypatch, lands=False)
    w = mw.Writer(mw.Table.open(table_path), cfg(retry_backoff_s=0.0))
    try:
        r = w.write(trips([1, 2], value=5), batch_id=0)
    finally:
        w.close()
    assert calls["n"] == 2 and r.attempts == 2
    commits = list(Path(table_path, ".hoodie", "timeline").glob("*_*.commit"))
    assert len(commits) == 1
    data = [p for p in Path(table_path).rglob("*.parquet")]
    assert sorted(data) == sorted(completed_commit_files(table_path)), "the first attempt's files were not deleted"
    assert hudi_values(table_path) == {"1": 5.0, "2": 5.0}
    for f in data:
        assert pq.read_table(f).num_rows > 0
    assert leftovers(table_path) == ([], [])


def test_abort_refuses_a_committed_transaction(trips_table, table_path):
    from multiwriter.heartbeat.client import HeartbeatClient
    from multiwriter.table.metadata import CommitMetadata
    from multiwriter.transaction import Transaction

    table = mw.Table.open(table_path)
    lock = mw.InProcessLock().for_table(table.table_id, table.storage)
    hb = HeartbeatClient(table.storage, writer_id="w", interval_s=1.0, tolerable_misses=2)
    try:
        txn = Transaction(table, lock, writer_id="w", heartbeat=hb)
        txn.begin()
        txn.commit(CommitMetadata({}, {}, "UPSERT"))
        assert txn.abort() == []
        assert table.timeline().last_completed_write() is not None
    finally:
        hb.close()
        lock.close()
