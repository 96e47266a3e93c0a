"""A data instant that will not complete, and its deltacommit in the metadata table's files
partition (issue 55): rolled back there as Hudi rolls back a metadata-table deltacommit (the
Hudi-written ``mor_v9_nonpartitioned_rollback`` fixture shows the shape: a rollback instant on
the metadata timeline, the deltacommit's log and instant files gone); and the files partition's
compactions timed, as Hudi times them, just before the earliest data instant still pending with
its deltacommit written, whose log stays on top of the new base. Each case runs on through
metadata-table compactions and archival, and hudi-rs, our reader and a plain model agree."""
from __future__ import annotations

import os

import pytest

import multiwriter as mw
from multiwriter import faults, markers
from multiwriter.table import decisions
from multiwriter.format import instant as inst
from multiwriter.table import metadata_files as mf
from multiwriter.table import timeline as tlmod
from tests.table.test_metadata_table import _agreed, _batch, _create, _listing_is_storage, _roll_back_the_failed_write


@pytest.fixture(autouse=True)
def _small_metadata_slices(monkeypatch):
    """The files partition compacted every 4 deltacommits and slices kept for 6 commits: the same
    paths as at Hudi's defaults (10 and 20), reached in fewer writes."""
    monkeypatch.setattr(mf, "MAX_DELTA_COMMITS", 4)
    monkeypatch.setattr(mf, "RETAIN_COMMITS", 6)


class _Killed(BaseException):
    """The process dies here (nothing of the writer's own cleanup runs)."""


def _mdt_timeline(path: str) -> list[str]:
    return sorted(os.listdir(os.path.join(path, ".hoodie", "metadata", ".hoodie", "timeline")))


def _mdt_logs_of(path: str, t: str) -> list[str]:
    return [n for n in os.listdir(os.path.join(path, ".hoodie", "metadata", "files")) if f"_{t}.log." in n]


def _compactions(path: str) -> list[str]:
    return sorted(n.split("_", 1)[0] for n in _mdt_timeline(path) if n.endswith(".commit"))


def _leave_pending_after_its_deltacommit(path: str, ids, ts: int, cfg: mw.WriterConfig) -> tuple[str, str]:
    """A write that dies right after its metadata-table deltacommit, before its own abort: its
    data files are on storage, its instant pending, its deltacommit completed. (requested
    time, action)."""
    from multiwriter.transaction import Transaction

    faults.configure("after-metadata-table=error")
    try:  # the writer dies there: nothing of its own abort runs
        with pytest.MonkeyPatch.context() as mp, pytest.raises(faults.InjectedFault):
            mp.setattr(Transaction, "abort", lambda self: self.stop_heartbeat() or [])
            mw.write(_batch(ids, ts=ts, v=float(ts)), path, cfg)
    finally:
        faults.configure(None)
    (p,) = mw.Table.open(path).timeline().pending()
    assert [n for n in _mdt_timeline(path) if n.startswith(f"{p.requested_time}_") and n.endswith(".deltacommit")]
    return p.requested_time, p.action


def _abort(path: str, t: str, action: str) -> str | None:
    """What ``Transaction.abort`` does, with the metadata table's rollback where it goes: while
    the instant is still pending on the data timeline."""
    table = mw.Table.open(path)
    markers.delete_files(table.storage, t)
    r = mf.rollback_deltacommit(table.storage, table.config, t)
    markers.delete_dir(table.storage, t)
    tlmod.delete_pending(table.storage, table.config, t, action)
    return r


def _cleaner(path: str, lock, kind: str) -> mw.Cleaner:
    return mw.Cleaner(path, lock=lock, heartbeat_interval_s=1.0, heartbeat_tolerable_misses=0, retain_commits=1,
                      archive_keep_min=1, archive_keep_max=2, clustering=None,
                      compaction=mw.CompactionConfig(delta_commits=2) if kind == "mor" else None)


def _run_on(path: str, lock, kind: str, cfg: mw.WriterConfig, expect: dict[str, float], first: int) -> int:
    """Writes and cleaner passes through metadata-table compactions and archival, both readers
    equal to the model after each; the number of instants archived."""
    archived = 0
    with _cleaner(path, lock, kind) as clean:
        for i in range(2 * mf.MAX_DELTA_COMMITS + 4):
            k = first + i
            mw.write(_batch([k, k + 1], ts=k, v=float(k)), path, cfg)
            expect.update({f"k{j:03d}": float(k) for j in (k, k + 1)})
            report = clean.run_once()
            assert not report.errors, report.errors
            archived += report.archived
            assert {r[2]: r[4] for r in _agreed(path)} == expect
    return archived


@pytest.mark.parametrize("kind", ["cow", "mor"])
def test_an_aborted_instant_after_its_deltacommit_is_rolled_back_in_the_metadata_table(kind, tmp_path):
    path = str(tmp_path / "t")
    _create(path, kind)
    lock = mw.InProcessLock()
    cfg = mw.WriterConfig(writer_id="w", lock=lock)
    mw.write(_batch(range(6), ts=1, v=1.0), path, cfg)
    expect = {f"k{i:03d}": 1.0 for i in range(6)}
    t, action = _leave_pending_after_its_deltacommit(path, range(3, 9), 2, cfg)
    assert _mdt_logs_of(path, t)
    r = _abort(path, t, action)
    assert r is not None
    names = _mdt_timeline(path)
    assert [n for n in names if n.startswith(f"{r}_") and n.endswith(".rollback")], "a completed rollback"
    assert not [n for n in names if n.startswith(t)], "the deltacommit's instant files are gone"
    assert not _mdt_logs_of(path, t), "its log is gone"
    table = mw.Table.open(path)
    assert mf.rollback_deltacommit(table.storage, table.config, t) is None, "idempotent"
    assert mf.rollback_deltacommit(table.storage, table.config, "20200101000000000") is None
    assert {r[2]: r[4] for r in _agreed(path)} == expect
    _listing_is_storage(path)
    archived = _run_on(path, lock, kind, cfg, expect, 20)
    tl = mw.Table.open(path).timeline()
    assert archived and min(i.requested_time for i in tl.instants) > t, "archival went past the aborted instant"
    assert len(_compactions(path)) >= 2
    _listing_is_storage(path)


def test_a_rollback_that_died_part_way_is_finished_at_its_own_time(tmp_path):
    path = str(tmp_path / "t")
    _create(path, "cow")
    lock = mw.InProcessLock()
    cfg = mw.WriterConfig(writer_id="w", lock=lock)
    mw.write(_batch(range(6), ts=1, v=1.0), path, cfg)
    t, action = _leave_pending_after_its_deltacommit(path, range(3, 9), 2, cfg)
    table = mw.Table.open(path)
    markers.delete_files(table.storage, t)
    faults.configure("mid-metadata-rollback=error")
    try:
        with pytest.raises(faults.InjectedFault):
            mf.rollback_deltacommit(table.storage, table.config, t)
    finally:
        faults.configure(None)
    (pending_r,) = [n.split(".", 1)[0] for n in _mdt_timeline(path) if n.endswith(".rollback.inflight")]
    assert mf.rollback_deltacommit(table.storage, table.config, t) == pending_r
    assert mf.rollback_deltacommit(table.storage, table.config, t) is None
    tlmod.delete_pending(table.storage, table.config, t, action)
    assert not _mdt_logs_of(path, t) and not [n for n in _mdt_timeline(path) if n.startswith(t)]
    assert {r[2] for r in _agreed(path)} == {f"k{i:03d}" for i in range(6)}
    _listing_is_storage(path)


@pytest.mark.parametrize("kind", ["cow", "mor"])
@pytest.mark.parametrize("then", ["completes", "aborted", "rolled back by the cleaner"])
def test_a_pending_instant_keeps_its_log_on_top_of_the_files_partitions_compaction(kind, then, tmp_path, monkeypatch):
    """A data instant pending with its deltacommit written (its writer died deciding its completion)
    across compactions of the files partition: each is timed just before it and merges only the
    logs before it; its log stays in the open slice, ignored while it is pending, read once it
    completes, and rolled back in the metadata table when it will not complete."""
    path = str(tmp_path / "t")
    _create(path, kind)
    lock = mw.InProcessLock()
    cfg = mw.WriterConfig(writer_id="w", lock=lock, heartbeat_interval_s=1.0, heartbeat_tolerable_misses=0)
    mw.write(_batch(range(6), ts=1, v=1.0), path, cfg)
    expect = {f"k{i:03d}": 1.0 for i in range(6)}
    failed: list[tuple[inst.Instant, bytes]] = []
    real_decide = decisions.DecisionLog.decide

    def dies_deciding_once(self, after, d, **kw):
        if not failed:
            failed.append((d.completed, d.data))
            raise _Killed("the writer died as it decided its completion")
        return real_decide(self, after, d, **kw)

    monkeypatch.setattr(decisions.DecisionLog, "decide", dies_deciding_once)
    with pytest.raises(_Killed):
        mw.write(_batch(range(100, 104), ts=2, v=2.0), path, cfg)
    monkeypatch.setattr(decisions.DecisionLog, "decide", real_decide)
    (done_file, data) = failed[0]
    p = done_file.requested_time
    assert [i.requested_time for i in mw.Table.open(path).timeline().pending()] == [p]
    assert _mdt_logs_of(path, p)
    for i in range(mf.MAX_DELTA_COMMITS + 2):
        mw.write(_batch([20 + i], ts=3 + i, v=3.0), path, cfg)
        expect[f"k{20 + i:03d}"] = 3.0
        assert {r[2]: r[4] for r in _agreed(path)} == expect
    table = mw.Table.open(path)
    assert _compactions(path) == [mf._before(p)], "timed just before the pending instant"
    assert p in mf.uncompacted_instants(table.storage, table.config), "its log is in the open slice"
    if then == "completes":  # a completer that does not use the decision log (Hudi's JVM writer)
        tlmod._create(table.storage, table.config, done_file, data)
        expect.update({f"k{i:03d}": 2.0 for i in range(100, 104)})
    elif then == "aborted":
        assert _abort(path, p, done_file.action) is not None
        assert not _mdt_logs_of(path, p)
    else:
        _roll_back_the_failed_write(path, lock)
    assert not mw.Table.open(path).timeline().pending()
    assert {r[2]: r[4] for r in _agreed(path)} == expect
    _listing_is_storage(path)
    archived = _run_on(path, lock, kind, cfg, expect, 40)
    assert archived and len(_compactions(path)) >= 2
    assert min(i.requested_time for i in mw.Table.open(path).timeline().instants) > p
    _listing_is_storage(path)


def test_a_compaction_killed_after_its_deltacommit_is_resumed_after_more_deltacommits(tmp_path):
    """A Merge-on-Read compaction killed right after its metadata-table deltacommit, resumed once
    enough deltacommits followed for the files partition to compact: the compaction stays below
    it, and the resumed one rolls back its earlier deltacommit before applying again (Hudi's
    ``commitInternal``), so the files partition lists the new base files and not the dead
    attempt's; both readers equal the model through more compactions and archival."""
    import subprocess
    import sys
    import time

    from tests.cleaner.conftest import ROOT

    path = str(tmp_path / "t")
    _create(path, "mor")
    # the killed cleaner dies holding the lock: a short lease lets the writers below take it over
    # in seconds (the default lease is 30 s)
    lock = mw.FileSystemLock(lease_s=4.0)
    cfg = mw.WriterConfig(writer_id="w", lock=lock)
    expect: dict[str, float] = {}
    for n in range(3):
        mw.write(_batch(range(n, 8), ts=n + 1, v=float(n + 1)), path, cfg)
        expect.update({f"k{i:03d}": float(n + 1) for i in range(n, 8)})
    script = (
        "import multiwriter as mw\n"
        f"c = mw.Cleaner({path!r}, lock=mw.FileSystemLock(lease_s=4.0), heartbeat_interval_s=1.0, "
        "heartbeat_tolerable_misses=0, "
        "clustering=None, compaction=mw.CompactionConfig(delta_commits=2))\n"
        "c.run_once()\n"
    )
    env = dict(os.environ, MULTIWRITER_FAULTS="after-metadata-table=crash", PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-c", script], env=env, cwd=str(ROOT), capture_output=True, text=True, timeout=60)
    assert p.returncode == 137, p.stderr
    (pending,) = mw.Table.open(path).timeline().pending(frozenset({inst.COMPACTION}))
    t = pending.requested_time
    first_attempt = set(_mdt_logs_of(path, t))
    assert first_attempt
    for i in range(mf.MAX_DELTA_COMMITS + 1):
        mw.write(_batch([40 + i], ts=10 + i, v=10.0), path, cfg)
        expect[f"k{40 + i:03d}"] = 10.0
    assert _compactions(path) == [mf._before(t)]
    assert {r[2]: r[4] for r in _agreed(path)} == expect
    with mw.Cleaner(path, lock=lock, heartbeat_interval_s=1.0, heartbeat_tolerable_misses=0, clustering=None,
                    compaction=mw.CompactionConfig(delta_commits=2)) as clean:
        for _ in range(40):
            report = clean.run_once()
            if t in report.compaction_instants:
                break
            time.sleep(0.25)
    done = mw.Table.open(path).timeline().find(t)
    assert done is not None and done.is_completed
    assert [n for n in _mdt_timeline(path) if n.endswith(".rollback")], "the earlier deltacommit was rolled back"
    assert len([n for n in _mdt_timeline(path) if n.startswith(f"{t}_") and n.endswith(".deltacommit")]) == 1
    assert {r[2]: r[4] for r in _agreed(path)} == expect
    _listing_is_storage(path)
    archived = _run_on(path, lock, "mor", cfg, expect, 60)
    assert archived and len(_compactions(path)) >= 2
    _listing_is_storage(path)
