"""Writers frozen past their fence beside the lock holder, on S3, with the metadata table's files
partition due to compact: what the holder and the thawed writer write there keeps every
committed write in the slice readers take.

- One thaws while the holder waits for its listing of the decision log (moto holds it): it
  writes its deltacommit and decides. The holder lists the metadata table only once the decision
  log's listing is in, so it builds on the thawed writer's deltacommit; listed beside the
  decision log, as the lock was taken, its compaction left that deltacommit out.
- One thaws after the holder committed: it loses its decision, and compacts nothing (the files
  partition is compacted only after the decision). Compacting before its deltacommit, from its
  listing of before the freeze and at a time issued after the holder's commit, it left the
  holder's log in no slice a reader takes. Copy-on-Write version 8, and Merge-on-Read version 9
  read again after the data's compaction.
- One freezes inside the compaction that follows its decision: its commit is visible, the holder
  commits and the companion job cleans meanwhile, and once thawed it completes a compaction that
  is never the newest; the newest base keeps its file.

Real processes, real ZooKeeper, moto's S3 (writes serialized); the oracles are hudi-rs, which
lists the table's files from the metadata table, and the rows the writers were told were
committed."""
from __future__ import annotations

import os
import signal
import time

import pytest

import multiwriter as mw
from multiwriter.table import metadata_files
from tests.conftest import TRIPS_SCHEMA, compact_slices, trips
from tests.oracle import hudi_read, rows, s3_storage_options
from tests.test_concurrency import result, spawn
from tests.test_frozen_commit import _wait_for

LEASE_S = 2.5  # the frozen writer's ZooKeeper session


@pytest.fixture()
def held_s3():
    """moto's S3, its writes serialized, a LIST of a chosen prefix held on request."""
    from testbed.moto_s3 import HeldLists, MotoS3, SerializedWrites

    with MotoS3(prefix="mwheld", wrap=lambda app: HeldLists(SerializedWrites(app))) as s3:
        yield s3


def _create(uri: str, kind: str = "cow", version: int = 8) -> None:
    mor = dict(table_type="MERGE_ON_READ", num_buckets=2) if kind == "mor" else {}
    mw.Table.create(uri, name="trips", schema=TRIPS_SCHEMA, record_key="id", partition_by=["date"],
                    ordering_field="ts", metadata=True, table_version=version, **mor)


def _read_by_both(uri: str) -> dict[str, float]:
    """The rows as hudi-rs reads them (it lists files from the metadata table), checked equal to ours."""
    theirs = dict(rows(hudi_read(uri, storage_options=s3_storage_options(uri)), ["id", "value"]))
    assert dict(rows(mw.Table.open(uri).read(), ["id", "value"])) == theirs, "hudi-rs and our reader disagree"
    return theirs


def _seed_until_a_compaction_is_due(uri: str) -> dict[str, float]:
    """Writes until the next deltacommit compacts the metadata table's files partition."""
    cfg = mw.WriterConfig(lock=mw.InProcessLock(), writer_id="seed", executor="driver")
    want: dict[str, float] = {}
    for k in range(3 * metadata_files.MAX_DELTA_COMMITS):
        mw.write(trips([f"s{k}"], ts=1, value=float(k)), uri, cfg)
        want[f"s{k}"] = float(k)
        table = mw.Table.open(uri)
        if metadata_files.MetadataTable(table.storage, table.config).open_deltacommits() >= \
                metadata_files.MAX_DELTA_COMMITS:
            return want
    raise AssertionError("the metadata table never came due for a compaction")


def test_a_decision_made_while_the_lock_holder_listed_is_in_what_it_builds_on(zk_server, zk_base, held_s3, tmp_path):
    bucket_uri = held_s3.bucket()
    uri = bucket_uri + "/t"
    _create(uri)
    want = _seed_until_a_compaction_is_due(uri)
    args = dict(zk=zk_server.connect, base=zk_base, path=uri, hb=1.0, misses=2)
    thawed_dir, holder_dir = tmp_path / "thawed", tmp_path / "holder"
    thawed_dir.mkdir()
    holder_dir.mkdir()
    thawed = spawn("write", dict(args, writer="thawed", ids=["t1"], date="2024-02-01", ts=9, value=9.0,
                                 session_timeout_s=LEASE_S),
                   {"MULTIWRITER_FAULTS": "before-completed-file=hang", "MULTIWRITER_FAULT_DIR": str(thawed_dir)})
    holder = None
    try:
        _wait_for(thawed_dir / "before-completed-file.hanging", thawed)  # past its fence
        os.kill(thawed.pid, signal.SIGSTOP)
        time.sleep(LEASE_S + 1.5)  # its session and heartbeat lapse
        holder = spawn("write", dict(args, writer="holder", ids=["h1"], date="2024-03-01", ts=10, value=5.0),
                       {"MULTIWRITER_FAULTS": "after-lock-acquired=hang", "MULTIWRITER_FAULT_DIR": str(holder_dir)})
        _wait_for(holder_dir / "after-lock-acquired.hanging", holder)  # the lock is the holder's
        answered_before = len(held_s3.app.answered)
        held_s3.app.hold_next(bucket_uri.removeprefix("s3://"), "t/.hoodie/.decisions/")
        (holder_dir / "after-lock-acquired.release").touch()
        assert held_s3.app.holding.wait(timeout=60), "the holder never listed the decision log"
        # a listing of the metadata table sent beside the held one would be answered now (the
        # holder sends none until the held one is in): give it time to be, so it would be stale
        mdt_timeline = (f"/{bucket_uri.removeprefix('s3://')}", "t/.hoodie/metadata/.hoodie/timeline/")
        deadline = time.monotonic() + 3.0
        while mdt_timeline not in held_s3.app.answered[answered_before:] and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(thawed.pid, signal.SIGCONT)
        (thawed_dir / "before-completed-file.release").touch()
        r_thawed = result(thawed)
        assert r_thawed["ok"], r_thawed  # nobody had decided since its look at the log: it lands
    finally:
        if thawed.poll() is None:
            os.kill(thawed.pid, signal.SIGCONT)
        (thawed_dir / "before-completed-file.release").touch()
        held_s3.app.release()
    r_holder = result(holder)
    assert r_holder["ok"], r_holder
    want.update({"t1": 9.0, "h1": 5.0})
    assert _read_by_both(uri) == want, "hudi-rs, listing files from the metadata table, misses a committed write"


@pytest.mark.parametrize("kind,version", [("cow", 8), ("mor", 9)])
def test_a_thawed_writer_that_loses_its_decision_compacts_nothing(zk_server, zk_base, held_s3, tmp_path, kind, version):
    """Frozen past its fence with the files partition due to compact, a writer thaws after the
    lock holder committed (and compacted): its own compaction, from its listing of before the
    freeze and timed after the holder's commit, would leave the holder's log out of the newest
    slice, and its lost decision would not take that compaction back."""
    uri = held_s3.bucket() + "/t"
    _create(uri, kind, version)
    want = _seed_until_a_compaction_is_due(uri)
    args = dict(zk=zk_server.connect, base=zk_base, path=uri, hb=1.0, misses=2)
    thawed = spawn("write", dict(args, writer="thawed", ids=["t1"], date="2024-02-01", ts=9, value=9.0,
                                 session_timeout_s=LEASE_S),
                   {"MULTIWRITER_FAULTS": "before-completed-file=hang", "MULTIWRITER_FAULT_DIR": str(tmp_path)})
    try:
        _wait_for(tmp_path / "before-completed-file.hanging", thawed)  # past its fence
        os.kill(thawed.pid, signal.SIGSTOP)
        time.sleep(LEASE_S + 1.5)  # its session and heartbeat lapse
        r_holder = result(spawn("write", dict(args, writer="holder", ids=["s0", "h1"], ts=10, value=5.0)))
        assert r_holder["ok"], r_holder
    finally:
        if thawed.poll() is None:
            os.kill(thawed.pid, signal.SIGCONT)
        (tmp_path / "before-completed-file.release").touch()
    r_thawed = result(thawed)
    assert not r_thawed["ok"] and r_thawed["error"] == "CommitDecisionLostError", r_thawed
    want.update({"s0": 5.0, "h1": 5.0})  # an update (a log file on Merge-on-Read) and an insert
    assert _read_by_both(uri) == want, "hudi-rs, listing files from the metadata table, misses a committed write"
    if kind == "mor":
        compact_slices(uri)
        assert _read_by_both(uri) == want


def test_a_writer_frozen_inside_its_compaction_after_its_decision_lands_and_breaks_no_read(
        zk_server, zk_base, held_s3, tmp_path):
    """Frozen (SIGSTOP past its session and heartbeat bound) inside the compaction of the files
    partition that follows its decision: its commit is visible; another writer commits (and
    compacts, undoing the frozen one's older plan), the companion job cleans, readers read; the
    thawed writer completes its compaction, which is then never the newest. Merge-on-Read,
    version 9; hudi-rs reads every committed row before and after the data's compaction."""
    uri = held_s3.bucket() + "/t"
    _create(uri, "mor", 9)
    want = _seed_until_a_compaction_is_due(uri)
    args = dict(zk=zk_server.connect, base=zk_base, path=uri, hb=1.0, misses=2)
    point = "mid-metadata-compaction"
    frozen = spawn("write", dict(args, writer="frozen", ids=["f1"], date="2024-02-01", ts=9, value=9.0,
                                 session_timeout_s=LEASE_S),
                   {"MULTIWRITER_FAULTS": f"{point}=hang", "MULTIWRITER_FAULT_DIR": str(tmp_path)})
    try:
        _wait_for(tmp_path / f"{point}.hanging", frozen)  # decided, its completed file written
        os.kill(frozen.pid, signal.SIGSTOP)
        time.sleep(LEASE_S + 1.5)  # its session and heartbeat lapse
        want["f1"] = 9.0
        assert _read_by_both(uri) == want, "a decided commit is visible while its writer is frozen"
        r_holder = result(spawn("write", dict(args, writer="holder", ids=["s0", "h1"], ts=10, value=5.0)))
        assert r_holder["ok"], r_holder
        job = result(spawn("clean", dict(args, retain=1, runs=2)))
        assert job["ok"], job
        want.update({"s0": 5.0, "h1": 5.0})  # an update (a log file) and an insert
        assert _read_by_both(uri) == want
    finally:
        if frozen.poll() is None:
            os.kill(frozen.pid, signal.SIGCONT)
        (tmp_path / f"{point}.release").touch()
    r_frozen = result(frozen)
    assert r_frozen["ok"], r_frozen  # decided before the freeze: it landed
    assert _read_by_both(uri) == want
    table = mw.Table.open(uri)
    base, _, _ = metadata_files.MetadataTable(table.storage, table.config).latest_slice()
    assert base is not None and table.storage.exists(f".hoodie/metadata/files/{base}"), "the newest base has its file"
    # the companion job compacted the data's slices above; one more update, read before and after
    mw.write(trips(["s1"], ts=11, value=6.0), uri, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="seed"))
    want["s1"] = 6.0
    assert _read_by_both(uri) == want
    compact_slices(uri)
    assert _read_by_both(uri) == want
