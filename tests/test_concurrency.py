"""Optimistic concurrency across OS processes against a real ZooKeeper."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import multiwriter as mw
from tests.conftest import trips
from tests.oracle import hudi_read, rows

ROOT = Path(__file__).resolve().parents[1]


def spawn(cmd: str, args: dict, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.workers", cmd, json.dumps(args)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, **(env or {})),
    )


def result(p: subprocess.Popen, timeout: float = 120) -> dict:
    out, err = p.communicate(timeout=timeout)
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    assert lines, f"worker printed no result; stderr:\n{err[-3000:]}"
    return json.loads(lines[-1])


def base_args(zk_server, zk_base, path, **kw) -> dict:
    return dict(zk=zk_server.connect, base=zk_base, path=path, **kw)


def insert_the_same_new_key_from_two_writers(zk_server, zk_base, table_path: str) -> None:
    """Two writer processes insert one new key (each with a key of its own) at the same moment,
    both holding after their data files: one commits, the other gets ``WriteConflictError``."""
    start = time.time() + 2.0
    hang = {"MULTIWRITER_FAULTS": "after-data-files=hang", "MULTIWRITER_FAULT_HANG_S": "2"}
    procs = [spawn("write", base_args(zk_server, zk_base, table_path, writer=f"n{i}", ids=["same", f"own-{i}"],
                                      value=i, start_at=start), hang) for i in range(2)]
    res = [result(p) for p in procs]
    assert sorted(r["ok"] for r in res) == [False, True], res
    assert [r for r in res if not r["ok"]][0]["error"] == "WriteConflictError"


def test_overlapping_updates_one_wins(zk_server, zk_base, trips_table, table_path):
    mw.write(trips(range(20), ts=1), table_path, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="seed"))
    start = time.time() + 2.0
    hang = {"MULTIWRITER_FAULTS": "after-data-files=hang", "MULTIWRITER_FAULT_HANG_S": "2"}
    procs = [
        spawn("write", base_args(zk_server, zk_base, table_path, writer=f"w{i}", ids=list(range(20)), ts=10 + i,
                                 value=100 + i, start_at=start), hang)
        for i in range(2)
    ]
    res = [result(p) for p in procs]
    winners = [r for r in res if r["ok"]]
    losers = [r for r in res if not r["ok"]]
    assert len(winners) == 1 and len(losers) == 1, res
    assert losers[0]["error"] == "WriteConflictError", losers[0]
    assert winners[0]["instant"] in losers[0]["message"]
    t = mw.Table.open(table_path)
    commits = [i for i in t.timeline().completed_writes()]
    assert len(commits) == 2  # seed + winner
    assert not t.timeline().pending(), "the loser must clean up its own instant"
    win_value = 100 + [i for i, r in enumerate(res) if r["ok"]][0]
    got = rows(t.read(), ["id", "value"])
    assert {v for _, v in got} == {float(win_value)}, "no data of the loser is visible"
    assert got == rows(hudi_read(table_path), ["id", "value"])


def test_eight_disjoint_writers_all_commit(zk_server, zk_base, trips_table, table_path):
    start = time.time() + 3.0
    procs = [
        spawn("write", base_args(zk_server, zk_base, table_path, writer=f"w{i}", ids=[f"{i}-{k}" for k in range(50)],
                                 date=f"2024-01-{i + 1:02d}", start_at=start))
        for i in range(8)
    ]
    res = [result(p) for p in procs]
    assert all(r["ok"] for r in res), [r for r in res if not r["ok"]]
    assert all(r["attempts"] == 1 for r in res), "disjoint writers never conflict"
    t = mw.Table.open(table_path)
    assert len(t.timeline().completed_writes()) == 8
    assert t.read().num_rows == 400 == hudi_read(table_path).num_rows


def test_three_hundred_instants_four_processes_unique_and_increasing(zk_server, zk_base, trips_table, table_path):
    """Four processes issue and complete 75 instants each, contending for the lock the whole
    time: every requested and completion time is distinct and increasing."""
    start = time.time() + 3.0
    procs = [spawn("instants", base_args(zk_server, zk_base, table_path, writer=f"p{i}", n=75, start_at=start))
             for i in range(4)]
    res = [result(p, timeout=300) for p in procs]
    assert all(r["ok"] for r in res), res
    all_inst = [x for r in res for x in r["instants"]]
    assert len(all_inst) == 300
    times = [t for t, _, _ in all_inst] + [c for _, _, c in all_inst]
    assert len(set(times)) == 600, "requested and completion times are all distinct"
    for t, seen, c in all_inst:
        assert len(t) == 17 and t > seen and c > t
    tl = mw.Table.open(table_path).timeline()
    assert len(tl.completed()) == 300


def test_lock_timeout_commits_nothing(zk_server, zk_base, trips_table, table_path):
    holder = mw.ZooKeeperLock(connect=zk_server.connect, base_path=zk_base)
    t = mw.Table.open(table_path)
    held = holder.for_table(t.table_id, t.storage)
    held.acquire(timeout_s=5)
    try:
        cfg = mw.WriterConfig(writer_id="late", lock=mw.ZooKeeperLock(connect=zk_server.connect, base_path=zk_base),
                              lock_timeout_s=0.5, max_conflict_retries=0)
        with pytest.raises(mw.errors.LockAcquireTimeout):
            mw.write(trips(range(3)), table_path, cfg)
    finally:
        held.release()
        holder.close()
    tl = mw.Table.open(table_path).timeline()
    assert tl.completed() == [] and tl.pending() == []
    assert mw.Table.open(table_path).read().num_rows == 0


def wait_for(path: Path, proc, timeout: float = 60.0) -> None:
    """Until ``path`` exists (a fault point announcing its hang), failing fast if ``proc`` died."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, f"the child exited early ({proc.returncode})"
        assert time.monotonic() < deadline, f"{path.name} did not appear within {timeout}s"
        time.sleep(0.02)


def test_session_loss_between_lock_and_commit_raises_lock_lost(tmp_path, trips_table, table_path):
    """The server restarts while the writer holds the commit lock: the fence refuses to commit."""
    signals = tmp_path / "faults"
    signals.mkdir()
    with mw.LocalZooKeeper(port=0) as zk:
        p = spawn("write", dict(zk=zk.connect, base="/lost", path=table_path, writer="w", ids=[1, 2, 3],
                                session_timeout_s=4.0),
                  {"MULTIWRITER_FAULTS": "after-lock-acquired=hang", "MULTIWRITER_FAULT_HANG_S": "120",
                   "MULTIWRITER_FAULT_DIR": str(signals)})
        wait_for(signals / "after-lock-acquired.hanging", p)  # inside the commit's critical section
        zk.stop()
        zk.start()
        (signals / "after-lock-acquired.release").touch()
        r = result(p)
    assert not r["ok"] and r["error"] == "LockLostError", r
    tl = mw.Table.open(table_path).timeline()
    assert tl.completed_writes() == []
    assert mw.Table.open(table_path).read().num_rows == 0
    assert not list((Path(table_path)).glob("2024-01-01/*.parquet")), "the aborted attempt's files are gone"


def test_same_new_key_filled_into_two_rewritten_groups_conflicts(zk_server, zk_base, trips_table, table_path):
    """Small-file handling puts an upsert's new keys into a group it rewrites anyway: two
    writers, each updating its own group, share no file group, yet one new key in both must
    not land twice."""
    lock = mw.InProcessLock()
    for k in range(2):  # two file groups of one partition
        mw.write(trips([f"old-{k}"]), table_path, mw.WriterConfig(writer_id="seed", lock=lock))
    start = time.time() + 2.0
    hang = {"MULTIWRITER_FAULTS": "after-data-files=hang", "MULTIWRITER_FAULT_HANG_S": "2"}
    procs = [spawn("write", base_args(zk_server, zk_base, table_path, writer=f"n{i}", ids=["same", f"old-{i}"],
                                      value=i + 2, ts=2, start_at=start), hang) for i in range(2)]
    res = [result(p) for p in procs]
    assert sorted(r["ok"] for r in res) == [False, True], res
    assert [r for r in res if not r["ok"]][0]["error"] == "WriteConflictError"
    table = mw.Table.open(table_path)
    assert len(table.snapshot().files()) == 2, "the new key joined a rewritten group: no third file"
    got = hudi_read(table_path).column("id").to_pylist()
    assert sorted(got) == sorted(table.read().column("id").to_pylist()) and got.count("same") == 1, got


def test_same_new_key_inserted_by_two_writers_conflicts(zk_server, zk_base, trips_table, table_path):
    """Inserts create new file groups, yet two writers inserting one new key must not both land."""
    insert_the_same_new_key_from_two_writers(zk_server, zk_base, table_path)
    keys = mw.Table.open(table_path).read().column("id").to_pylist()
    assert keys.count("same") == 1
