"""A visible commit is never undone: a writer frozen (SIGSTOP, past its lock session or lease and
its heartbeat bound) at every step of its commit, while another writer commits, the companion
job rolls back, cleans (retaining one commit) and archives, and a consumer reads. When it thaws
it either lands exactly once (it was decided before the freeze: the others rolled it forward)
or leaves nothing visible; nothing the others saw is taken back.

Real processes, real ZooKeeper or the storage lock, both table types. Oracles: hudi-rs, a plain
model of the acknowledged rows, and the consumer's record of what it was delivered."""
from __future__ import annotations

import os
import signal
import time

import pytest

import multiwriter as mw
from tests.conftest import TRIPS_SCHEMA, trips
from tests.oracle import hudi_read, rows, s3_storage_options
from tests.test_concurrency import result, spawn

LEASE_S = 2.5  # the frozen writer's ZooKeeper session, or its storage lock's validity
#: the commit's steps from the lock on, in order; a writer frozen at the last two had decided
STEPS = ["after-lock-acquired", "before-complete", "before-completed-file", "after-metadata-table",
         "after-decision", "after-completed-file"]
DECIDED = {"after-decision", "after-completed-file"}


def _wait_for(path, proc, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"the writer exited before {path.name}: {proc.communicate()}")
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.02)


def _create(path: str, table_type: str) -> None:
    mor = dict(table_type="MERGE_ON_READ", num_buckets=2) if table_type == "mor" else {}
    mw.Table.create(path, name="trips", schema=TRIPS_SCHEMA, record_key="id", partition_by=["date"],
                    ordering_field="ts", **mor)


def _snapshot(path: str) -> dict[str, float]:
    ours = dict(rows(mw.Table.open(path).read(), ["id", "value"]))
    theirs = dict(rows(hudi_read(path, storage_options=s3_storage_options(path)), ["id", "value"]))
    assert ours == theirs, "hudi-rs and our reader disagree"
    return ours


#: ``make test``: every step on Copy-on-Write with ZooKeeper (``before-complete``, right before
#: the fence, is tests/test_completion_fence.py's, beside a consumer and a clock running ahead),
#: and the decision on Merge-on-Read with the storage lock, locally and on S3.
#: ``MW_FULL_MATRIX=1`` (``make test-full``) adds the last steps before the decision and the first
#: after it on Merge-on-Read with the storage lock, the other two pairs right after the decision,
#: and one step on each side of it on S3 for both table types.
CASES = [(step, "cow", "zookeeper", "local") for step in STEPS if step != "before-complete"] + \
    [("after-decision", "mor", "storage", "local"), ("after-decision", "cow", "storage", "s3")]
if os.environ.get("MW_FULL_MATRIX") == "1":
    CASES += [(step, "mor", "storage", "local") for step in ("before-completed-file", "after-metadata-table")] + \
        [("after-decision", "mor", "zookeeper", "local"), ("after-decision", "cow", "storage", "local"),
         ("before-completed-file", "mor", "storage", "s3"), ("after-decision", "mor", "storage", "s3")]


@pytest.fixture()
def where(request, tmp_path):
    """The table's location: a local folder, or a bucket of moto's S3 server (writes serialized)."""
    if request.param == "s3":
        return request.getfixturevalue("s3_server")() + "/trips"
    return str(tmp_path / "trips")


@pytest.mark.parametrize("step,table_type,lock,where", CASES, indirect=["where"])
def test_a_writer_frozen_at_any_step_lands_once_or_leaves_nothing(zk_server, zk_base, where, tmp_path,
                                                                  step, table_type, lock):
    table_path = where
    _create(table_path, table_type)
    mw.write(trips(range(5), ts=1, value=1.0), table_path, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="seed"))
    args = dict(zk=zk_server.connect, base=zk_base, path=table_path, hb=1.0, misses=2, lock=lock,
                validity_s=LEASE_S)
    frozen = spawn("write", dict(args, writer="frozen", ids=[1, 2], ts=9, value=9.0, batch_id=0,
                                 session_timeout_s=LEASE_S),
                   {"MULTIWRITER_FAULTS": f"{step}=hang", "MULTIWRITER_FAULT_DIR": str(tmp_path)})
    try:
        _wait_for(tmp_path / f"{step}.hanging", frozen)
        os.kill(frozen.pid, signal.SIGSTOP)  # its lock and heartbeat lapse while it is frozen
        time.sleep(LEASE_S + 1.5)  # past the lease and the heartbeat bound (1 s x (2 misses + 1))
        other = result(spawn("write", dict(args, writer="other", ids=[1, 3], ts=10, value=5.0, batch_id=0,
                                           retries=3, validity_s=10.0)))
        assert other["ok"], other
        job = result(spawn("clean", dict(args, retain=1, runs=2, validity_s=10.0)))
        assert job["ok"], job
        seen = _snapshot(table_path)
        batch = mw.Table.open(table_path).read_incremental_batch(None)
        delivered = dict(rows(batch.rows, ["id", "value"]))
        offset = batch.end
        visible = {i.requested_time for i in mw.Table.open(table_path).timeline().completed_writes()}
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
        (tmp_path / f"{step}.release").touch()
    thawed = result(frozen)
    decided = step in DECIDED
    if decided:
        assert thawed["ok"], thawed
    else:
        assert not thawed["ok"], f"a writer frozen at {step} before its decision landed: {thawed}"
        assert thawed["error"] in ("LockLostError", "CommitDecisionLostError", "HeartbeatExpiredError", "WriteConflictError",
                                   "InstantRolledBackError"), thawed
    want = {"0": 1.0, "1": 5.0, "2": 9.0 if decided else 1.0, "3": 5.0, "4": 1.0}
    assert seen == want, "what the others saw while the writer was frozen"
    job = result(spawn("clean", dict(args, retain=1, runs=2, validity_s=10.0)))
    assert job["ok"], job
    tl = mw.Table.open(table_path).timeline()
    assert visible <= {i.requested_time for i in tl.completed_writes()}, "a commit others saw was undone"
    assert not tl.pending(), "an attempt was left pending after the companion job"
    assert all(i.completion_time <= offset for i in tl.completed_writes() if i.requested_time in visible)
    assert not [i for i in tl.completed_writes() if i.requested_time not in visible and i.completion_time <= offset], \
        "a commit completed below the consumer's offset"
    later = mw.Table.open(table_path).read_incremental_batch(offset)
    delivered.update(rows(later.rows, ["id", "value"]))
    assert _snapshot(table_path) == want, "the table after the thawed writer and the companion job"
    assert delivered == want, "the consumer got every committed row"
    replay = result(spawn("write", dict(args, writer="frozen", ids=[1, 2], ts=9, value=9.0, batch_id=0,
                                        validity_s=10.0)))
    assert replay["ok"] and replay["skipped"] == decided, "a decided batch is skipped on replay, an undone one is not"
