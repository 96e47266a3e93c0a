"""The commit point: once a commit is decided (its decision object created, then ``<T>_<C>.commit``)
nothing may delete that instant's files, and a commit whose outcome is unknown is settled by
re-reading the decision log and the timeline, never by guessing.

The oracles are hudi-rs (an independent reader) and plain directory listings / pyarrow reads of
the completed instant's files."""
from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

import multiwriter as mw
from multiwriter import faults
from tests.conftest import trips
from tests.oracle import hudi_read, rows


def cfg(**kw) -> mw.WriterConfig:
    return mw.WriterConfig(**{"writer_id": "w", "lock": mw.InProcessLock(), "heartbeat_interval_s": 1.0, **kw})


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
    """The commit decision (the one create that decides a commit) ends without an answer after
    (lands=True) or instead of (lands=False) creating the decision, and reading it back fails
    too: the outcome is unknown to the writer."""
    from multiwriter.errors import CommitStateUnknownError
    from multiwriter.storage import Storage

    real = Storage.create_exclusive
    calls = {"n": 0}

    def flaky(self, rel, data):
        calls["n"] += 1
        if calls["n"] == 1:
            if lands:
                real(self, rel, data)
            raise CommitStateUnknownError(f"creating {rel}: connection reset, and reading it back failed")
        return real(self, rel, data)

    monkeypatch.setattr(Storage, "create_exclusive", flaky)
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


def test_a_decided_commit_whose_completed_file_failed_is_rolled_forward(trips_table, table_path, monkeypatch):
    """The completed file cannot be written after the decision: the commit is still final (the
    writer reports it committed), and the next completer writes the file from the decision."""
    from multiwriter.storage import Storage

    real = Storage.put_if_absent
    failed: list[str] = []

    def failing(self, rel, data, **kw):
        if rel.endswith(".commit") and "_" in rel.rsplit("/", 1)[-1] and not failed:
            failed.append(rel)
            raise OSError("storage unreachable")
        return real(self, rel, data, **kw)

    monkeypatch.setattr(Storage, "put_if_absent", failing)
    r = mw.write(trips([1, 2], value=6), table_path, cfg(), batch_id=0)
    monkeypatch.setattr(Storage, "put_if_absent", real)
    assert failed and r.instant is not None and r.instant.is_completed
    assert not Path(table_path, failed[0]).exists(), "the completed file really was not written"
    again = mw.write(trips([1, 2], value=6), table_path, cfg(), batch_id=0)
    assert again.skipped, "the decided batch counts as committed for its replay too"
    mw.write(trips([3], value=7), table_path, cfg(), batch_id=1)
    assert Path(table_path, failed[0]).exists(), "the next writer rolled the decided commit forward"
    assert hudi_values(table_path) == {"1": 6.0, "2": 6.0, "3": 7.0}


def own_commits_of_batch(path: str, writer: str, batch: int) -> list[str]:
    """The completed commits that wrote ``writer``'s ``batch``, read straight from the Avro commit
    files: each commit names its writer and carries every writer's checkpoint."""
    import json

    import fastavro

    out = []
    for f in sorted(Path(path, ".hoodie", "timeline").glob("*_*.commit")):
        with open(f, "rb") as fh:
            extra = next(iter(fastavro.reader(fh))).get("extraMetadata") or {}
        if extra.get("multiwriter.writer_id") == writer and \
                json.loads(extra.get("_hudi_streaming_sink_checkpoint", "{}")).get(writer) == str(batch):
            out.append(f.name)
    return out


def test_a_replay_whose_base_is_newer_than_its_rolled_forward_batch_is_skipped(trips_table, table_path, monkeypatch):
    """A writer decides batch 1 and dies before its completed file. Restarted, it looks up its
    checkpoint while the decision is not yet rolled forward (batch 0). Another writer then commits:
    it rolls batch 1 forward and becomes the newest commit, so the replay of batch 1 begins on a
    base that completed after batch 1. The replay must be skipped, not committed a second time
    (the seeded chaos round 10914103 found this: a batch committed twice)."""
    from multiwriter.storage import Storage

    mw.write(trips([1], value=1), table_path, cfg(), batch_id=0)
    real = Storage.put_if_absent

    def failing(self, rel, data, **kw):
        if rel.endswith(".commit") and "_" in rel.rsplit("/", 1)[-1]:
            raise OSError("the writer died here")
        return real(self, rel, data, **kw)

    monkeypatch.setattr(Storage, "put_if_absent", failing)
    mw.write(trips([1, 2], value=2), table_path, cfg(), batch_id=1)  # decided; no completed file
    monkeypatch.setattr(Storage, "put_if_absent", real)
    assert own_commits_of_batch(table_path, "w", 1) == []
    restarted = mw.Writer(mw.Table.open(table_path), cfg())
    assert restarted.last_checkpoint() == 0  # its first look: the decision is not rolled forward yet
    mw.write(trips([5], value=5), table_path, cfg(writer_id="x"), batch_id=0)  # rolls batch 1 forward
    assert len(own_commits_of_batch(table_path, "w", 1)) == 1
    again = restarted.write(trips([1, 2], value=2), batch_id=1)
    assert again.skipped and again.instant is None
    assert len(own_commits_of_batch(table_path, "w", 1)) == 1, "batch 1 was committed twice"
    assert hudi_values(table_path) == {"1": 2.0, "2": 2.0, "5": 5.0}
