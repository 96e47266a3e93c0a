"""The metadata table's timeline in the shape Hudi's writer gives it (issue 55, item 4): the
cleaner's rollback of a failed write rolls the write's metadata-table deltacommit back at the
data rollback's own time (Hudi's ``update(HoodieRollbackMetadata, R)``: no deltacommit at R, a
rollback at R, the target's deltacommit gone), as the Hudi-written
``mor_v9_nonpartitioned_rollback`` fixture shows; every other action writes its deltacommit even
with no files; old slices of the files partition stay for slow readers as Hudi's metadata
cleaner keeps them (``KEEP_LATEST_COMMITS``, 20 commits)."""
from __future__ import annotations

import os
import re

import pyarrow as pa
import pytest

import multiwriter as mw
from multiwriter import faults
from multiwriter.table import metadata_files as mf
from tests.oracle import hudi_read, rows, unzip_fixture
from tests.table.test_metadata_table import _agreed, _batch, _create, _listing_is_storage, _roll_back_the_failed_write


def _names(path: str, *sub: str) -> list[str]:
    d = os.path.join(path, ".hoodie", *sub)
    return sorted(n for n in os.listdir(d) if os.path.isfile(os.path.join(d, n)))


def _data_timeline(path: str) -> list[str]:
    return _names(path, "timeline")


def _mdt_timeline(path: str) -> list[str]:
    return _names(path, "metadata", ".hoodie", "timeline")


def _shape(names: list[str], t: str) -> list[str]:
    """The instant files at requested time ``t``, the times replaced by placeholders."""
    return sorted(re.sub(r"\d{17}", "T", n) for n in names if n.startswith(t))


def _completion(names: list[str], t: str, action: str) -> str:
    (n,) = [n for n in names if n.startswith(f"{t}_") and n.endswith(f".{action}")]
    return n.split("_", 1)[1].split(".", 1)[0]


def _rollbacks(names: list[str]) -> list[str]:
    return sorted(n.split("_", 1)[0] for n in names if re.fullmatch(r"\d{17}_\d{17}\.rollback", n))


def _die_after_the_metadata_deltacommit(path: str, table: pa.Table, cfg: mw.WriterConfig) -> str:
    """A write that dies right after its metadata-table deltacommit, nothing of its own abort
    run; its requested time."""
    from multiwriter.transaction import Transaction

    faults.configure("after-metadata-table=error")
    try:
        with pytest.MonkeyPatch.context() as mp, pytest.raises(faults.InjectedFault):
            mp.setattr(Transaction, "abort", lambda self: self.stop_heartbeat() or [])
            mw.write(table, path, cfg)
    finally:
        faults.configure(None)
    (p,) = mw.Table.open(path).timeline().pending()
    return p.requested_time


@pytest.mark.needs_fixtures
def test_the_fixture_continued_through_a_rollback_has_hudis_timeline_shape(tmp_path):
    path = str(unzip_fixture("v9_nonpartitioned_rollback", tmp_path, "mor"))
    hudi_rb = _rollbacks(_data_timeline(path))
    assert len(hudi_rb) == 1
    (r0,) = hudi_rb
    hudi_shape = _shape(_mdt_timeline(path), r0)
    assert hudi_shape == ["T.rollback.inflight", "T.rollback.requested", "T_T.rollback"], "Hudi's: no deltacommit at R"
    t = mw.Table.open(path)
    before = t.read()
    cols = [c for c in before.column_names if not c.startswith("_hoodie")]
    key, order = t.config.record_key[0], t.config.ordering_field
    first = before.select(cols).slice(0, 1).to_pylist()[0]
    lock = mw.InProcessLock()
    cfg = mw.WriterConfig(writer_id="c", lock=lock, heartbeat_interval_s=1.0, heartbeat_tolerable_misses=0)
    schema = before.select(cols).schema
    failed = _die_after_the_metadata_deltacommit(
        path, pa.Table.from_pylist([{**first, key: "LOST-1", order: first[order] + 5}], schema=schema), cfg)
    assert [n for n in _mdt_timeline(path) if n.startswith(f"{failed}_") and n.endswith(".deltacommit")]
    _roll_back_the_failed_write(path, lock)
    data_names, mdt_names = _data_timeline(path), _mdt_timeline(path)
    (r,) = [x for x in _rollbacks(data_names) if x != r0]
    assert _shape(mdt_names, r) == hudi_shape, "the metadata table's rollback at the data rollback's time, as Hudi's"
    assert not [n for n in mdt_names if n.startswith(failed)], "the failed write's deltacommit is gone"
    assert not [n for n in _names(path, "metadata", "files") if f"_{failed}." in n], "and its log"
    assert _completion(mdt_names, r, "rollback") <= _completion(data_names, r, "rollback")
    after = mw.Table.open(path).read()
    assert rows(after, cols) == rows(before, cols) == rows(hudi_read(path), cols)
    assert "LOST-1" not in after.column(key).to_pylist()
    mw.write(pa.Table.from_pylist([{**first, key: "NEW-1"}], schema=schema), path, cfg)
    ours, theirs = mw.Table.open(path).read(), hudi_read(path)
    assert rows(ours, cols) == rows(theirs, cols) and ours.num_rows == before.num_rows + 1
    _listing_is_storage(path)


@pytest.mark.parametrize("kind", ["cow", "mor"])
def test_a_rollback_of_a_write_with_no_deltacommit_writes_nothing_in_the_metadata_table(kind, tmp_path):
    """A write that died before its deltacommit: Hudi's rollback finds no deltacommit of it in the
    metadata table and writes nothing there ("the commit to rollback is not found in MDT")."""
    path = str(tmp_path / "t")
    _create(path, kind)
    lock = mw.InProcessLock()
    cfg = mw.WriterConfig(writer_id="w", lock=lock, heartbeat_interval_s=1.0, heartbeat_tolerable_misses=0)
    mw.write(_batch(range(6), ts=1, v=1.0), path, cfg)
    before_mdt = _mdt_timeline(path)
    faults.configure("before-completed-file=error")
    try:
        with pytest.MonkeyPatch.context() as mp, pytest.raises(faults.InjectedFault):
            from multiwriter.transaction import Transaction

            mp.setattr(Transaction, "abort", lambda self: self.stop_heartbeat() or [])
            mw.write(_batch(range(3, 9), ts=2, v=2.0), path, cfg)
    finally:
        faults.configure(None)
    _roll_back_the_failed_write(path, lock)
    assert _rollbacks(_data_timeline(path))
    assert _mdt_timeline(path) == before_mdt
    assert {r[2]: r[4] for r in _agreed(path)} == {f"k{i:03d}": 1.0 for i in range(6)}
    _listing_is_storage(path)


@pytest.mark.parametrize("kind", ["cow", "mor"])
def test_an_action_with_no_files_writes_its_deltacommit(kind, tmp_path):
    """An empty overwrite (a replace commit with no new file) has its deltacommit, carrying the
    partition-list record Hudi always writes."""
    path = str(tmp_path / "t")
    _create(path, kind)
    cfg = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock())
    mw.write(_batch(range(6), ts=1, v=1.0), path, cfg)
    r = mw.write(_batch([], ts=2, v=2.0), path, mw.WriterConfig(writer_id="w", lock=mw.InProcessLock(),
                                                                 operation="insert_overwrite_table"))
    t = r.instant.requested_time
    assert [n for n in _mdt_timeline(path) if n.startswith(f"{t}_") and n.endswith(".deltacommit")]
    assert _agreed(path) == []
    mw.write(_batch(range(2), ts=3, v=3.0), path, cfg)
    assert {r[2]: r[4] for r in _agreed(path)} == {"k000": 3.0, "k001": 3.0}
    _listing_is_storage(path)


def test_a_clean_with_no_files_writes_its_deltacommit(tmp_path):
    """Hudi writes the deltacommit of every completed action, with no log file when it has no
    record (an empty upsert of the metadata table)."""
    from multiwriter.format import instant as inst
    from multiwriter.table.metadata import encode

    path = str(tmp_path / "t")
    _create(path, "cow")
    mw.write(_batch(range(3), ts=1, v=1.0), path, mw.WriterConfig(writer_id="w", lock=mw.InProcessLock()))
    table = mw.Table.open(path)
    t = "20300101000000000"
    meta = {"startCleanTime": t, "timeTakenInMillis": 1, "totalFilesDeleted": 0, "earliestCommitToRetain": "",
            "lastCompletedCommitTimestamp": "", "partitionMetadata": {}, "version": 2,
            "bootstrapPartitionMetadata": {}}
    mf.on_completed(table.storage, table.config, t, "20300101000000001", inst.CLEAN, encode("clean", meta))
    names = _mdt_timeline(path)
    assert _shape(names, t) == ["T.deltacommit.inflight", "T.deltacommit.requested", "T_T.deltacommit"]
    assert not [n for n in _names(path, "metadata", "files") if f"_{t}." in n], "no log file"
    assert {r[2] for r in _agreed(path)} == {"k000", "k001", "k002"}


def test_old_slices_stay_for_slow_readers_as_hudis_metadata_cleaner_keeps_them(tmp_path):
    """Hudi's metadata cleaner keeps every slice that one of the newest 20 commits of the metadata
    timeline reads (KEEP_LATEST_COMMITS, ``DEFAULT_METADATA_CLEANER_COMMITS_RETAINED``); older
    ones go, so the files partition stays bounded."""
    path = str(tmp_path / "t")
    _create(path, "cow")
    cfg = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock(), operation="insert")
    files_dir = os.path.join(path, ".hoodie", "metadata", "files")
    for i in range(5 * mf.MAX_DELTA_COMMITS + 2):
        mw.write(_batch([i], ts=i, v=float(i)), path, cfg)
        names = _mdt_timeline(path)
        done = sorted(n.split("_", 1)[0] for n in names
                      if re.fullmatch(r"\d{17}_\d{17}\.(deltacommit|commit)", n))
        earliest = done[-mf.RETAIN_COMMITS] if len(done) >= mf.RETAIN_COMMITS else done[0]
        bases = sorted(n[:-len(".hfile")].rsplit("_", 1)[1] for n in os.listdir(files_dir) if n.endswith(".hfile"))
        needed = max(b for b in bases if b <= earliest)
        assert bases[0] == needed or bases[0] == mf.BOOTSTRAP_TIME and needed == mf.BOOTSTRAP_TIME, \
            f"the slice read as of the 20th newest commit ({earliest}) is kept, older ones go: {bases}"
    assert len(bases) >= 3, "more than the previous slice is kept"
    assert sum(n.startswith(".files") for n in os.listdir(files_dir)) <= mf.RETAIN_COMMITS + 2 * mf.MAX_DELTA_COMMITS
    assert len(_agreed(path)) == 5 * mf.MAX_DELTA_COMMITS + 2
    _listing_is_storage(path)
