"""The completion step is one fenced step: a writer frozen inside its commit while its ZooKeeper
session expired, beside a writer whose clock runs 30 s ahead and a consumer that read up to that
writer's commit, never completes below the consumer's offset. Real processes, real ZooKeeper,
a clock shifted in the child's Python (tests/faketime.py); the oracle is the consumer's model against the snapshot."""
from __future__ import annotations

import os
import signal
import time

import pytest

import multiwriter as mw
from multiwriter.instant_time import format_time
from tests.conftest import trips
from tests.faketime import python_clock_env
from tests.oracle import rows
from tests.test_concurrency import result, spawn

SESSION_S = 4.0  # the frozen writer's ZooKeeper session timeout


def _wait_for(path, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.05)


def _consume(path: str, offset: str | None, state: dict[str, float]) -> str | None:
    batch = mw.Table.open(path).read_incremental_batch(offset)
    state.update(dict(rows(batch.rows, ["id", "value"])))
    return batch.end


@pytest.mark.parametrize("point", ["before-complete", "before-completed-file"])
def test_a_writer_frozen_in_its_completion_step_never_lands_below_a_consumers_offset(
        zk_server, zk_base, trips_table, table_path, tmp_path, point):
    """Frozen at ``before-complete`` (after the conflict check) the thawed writer is refused by
    the fence right before its decision; frozen at ``before-completed-file`` (after that fence
    and the fresh listing) it finds its decision taken by the other writer's commit and never
    writes its completed file. Either way its rows never land unseen by the consumer."""
    mw.write(trips(range(5), ts=1, value=1.0), table_path, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="seed"))
    args = dict(zk=zk_server.connect, base=zk_base, path=table_path, hb=1.0, misses=2)
    frozen = spawn("write", dict(args, writer="frozen", ids=[1, 2], ts=9, value=9.0, session_timeout_s=SESSION_S),
                   {"MULTIWRITER_FAULTS": f"{point}=hang", "MULTIWRITER_FAULT_DIR": str(tmp_path)})
    try:
        _wait_for(tmp_path / f"{point}.hanging")
        os.kill(frozen.pid, signal.SIGSTOP)  # its session and heartbeat lapse while it holds the lock
        fast = spawn("write", dict(args, writer="fast", ids=[3], ts=5, value=5.0), python_clock_env(30.0))
        r_fast = result(fast)
        assert r_fast["ok"], r_fast
        state: dict[str, float] = {}
        offset = _consume(table_path, None, state)
        assert offset == r_fast["completion"] and offset > format_time(time.time() + 10), "the fast clock is 30 s ahead"
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
        (tmp_path / f"{point}.release").touch()
    r_frozen = result(frozen)
    assert not r_frozen["ok"] and r_frozen["error"] in ("LockLostError", "HeartbeatExpiredError", "CommitDecisionLostError"), r_frozen
    tl = mw.Table.open(table_path).timeline()
    assert not tl.pending(), "the refused attempt was undone"
    assert [w.completion_time for w in tl.completed_writes()][-1] == offset, "nothing completed after the offset"
    offset = _consume(table_path, offset, state)
    snapshot = dict(rows(mw.Table.open(table_path).read(), ["id", "value"]))
    assert snapshot == {"0": 1.0, "1": 1.0, "2": 1.0, "3": 5.0, "4": 1.0}
    assert state == snapshot, "every committed row reached the consumer"
