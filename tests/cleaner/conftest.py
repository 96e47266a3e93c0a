"""Helpers for the cleaner tests: real ZooKeeper locks, garbage left by failed writers, waits."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import multiwriter as mw
from multiwriter.format import instant as inst
from multiwriter.format import layout
from multiwriter.table.metadata import CommitMetadata, WriteStat, decode_records
from multiwriter.table.files import list_files
from multiwriter.transaction import Transaction

HB = 1.0  # heartbeat interval of every writer and cleaner in these tests
MISSES = 1
BOUND = HB * (MISSES + 1)
ROOT = Path(os.path.abspath(__file__)).parents[2]


@pytest.fixture()
def cleaners():
    """Build cleaners with the test heartbeat settings; all are closed at teardown."""
    made: list = []

    def make(path: str, lock, **kw):
        from multiwriter.cleaner.job import Cleaner

        kw.setdefault("heartbeat_interval_s", HB)
        kw.setdefault("heartbeat_tolerable_misses", MISSES)
        c = Cleaner(path, lock=lock, **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def writer_config(lock, writer_id: str = "w1") -> mw.WriterConfig:
    return mw.WriterConfig(
        writer_id=writer_id,
        lock=lock,
        executor="driver",
        heartbeat_interval_s=HB,
        heartbeat_tolerable_misses=MISSES,
    )


def run_proc(
    command: str,
    args: dict,
    *,
    faults: str | None = None,
    hang_s: float | None = None,
    wait: bool = True,
    timeout: float = 90.0,
):
    """Run ``tests.cleaner.proc`` in a child Python; returns the Popen (waited for if ``wait``)."""
    env = dict(os.environ)
    env.pop("MULTIWRITER_FAULTS", None)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    if faults:
        env["MULTIWRITER_FAULTS"] = faults
    if hang_s is not None:
        env["MULTIWRITER_FAULT_HANG_S"] = str(hang_s)
    p = subprocess.Popen(
        [sys.executable, "-m", "tests.cleaner.proc", command, json.dumps(args)],
        cwd=str(ROOT),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    if wait:
        p.wait(timeout=timeout)
    return p


def fake_failed_write(table: mw.Table, lock_provider, n_files: int = 2) -> tuple[str, list[str]]:
    """What a writer killed after writing its data files leaves: a pending instant (requested +
    inflight), markers and data files named with its instant time, and no heartbeat beating.
    Copies a committed file, so the table needs one commit first. Returns (T, data files)."""
    lock = lock_provider.for_table(table.table_id, table.storage)
    try:
        txn = Transaction(table, lock, writer_id="ghost")
        t = txn.begin().requested_time
    finally:
        lock.close()
    src = table.snapshot().files()[0]
    files = []
    stats = []
    for n in range(n_files):
        fid = layout.new_file_id()
        name = layout.DataFileName(fid, layout.write_token(n), t).name
        rel = layout.data_file_path(src.partition, name)
        table.storage.put_if_absent(layout.marker_path(t, src.partition, name), b"")
        shutil.copyfile(table.storage.abs(src.path), table.storage.abs(rel))
        files.append(rel)
        stats.append(WriteStat(file_id=fid, path="", partition_path=src.partition))
    from multiwriter.table import timeline as tlmod

    tlmod.create_inflight(
        table.storage, table.config, t, inst.COMMIT, CommitMetadata({src.partition: stats}).to_bytes()
    )
    return t, files


def wait_lapsed(table: mw.Table, *times: str, cleaner=None, timeout: float = 15.0) -> None:
    """Watch the heartbeats of ``times`` until each is judged dead: no new beat for its bound on
    the judge's clock. With ``cleaner``, its own judge watches, so its next run acts on what it
    saw (a fresh cleaner's first run would otherwise watch for a bound again)."""
    from multiwriter.heartbeat.judge import HeartbeatJudge

    judge = cleaner.judge if cleaner is not None else HeartbeatJudge(table.storage, interval_s=HB, tolerable_misses=MISSES)
    seen = judge.decide(times, max_wait_s=timeout)
    alive = {t: o.verdict for t, o in seen.items() if not o.lapsed}
    assert not alive, f"heartbeats of {alive} did not lapse within {timeout}s"


def data_files_of(table: mw.Table, t: str) -> list[str]:
    """Base and log files written by instant ``t``."""
    bases, logs = list_files(table.storage)
    return sorted(f.path for f in [*bases, *logs] if f.instant_time == t)


def garbage_of(table: mw.Table, t: str) -> dict:
    """Everything a failed instant can leave behind."""
    tl = table.timeline()
    return {
        "data": data_files_of(table, t),
        "markers": table.storage.exists(layout.marker_dir(t)),
        "heartbeat": table.storage.exists(layout.heartbeat_path(t)),
        "pending": [str(i) for i in tl.instants if i.requested_time == t],
    }


NO_GARBAGE = {"data": [], "markers": False, "heartbeat": False, "pending": []}


def rollbacks(table: mw.Table) -> dict[str, list[dict]]:
    """Completed rollback instants by the instant they rolled back -> decoded metadata records."""
    tl = table.timeline()
    out: dict[str, list[dict]] = {}
    for i in tl.completed(frozenset({inst.ROLLBACK})):
        rec = decode_records(tl.read_bytes(i), source=tl.path_of(i))[0]
        for target in rec["commitsRollback"]:
            out.setdefault(target, []).append({"rollback_time": i.requested_time, **rec})
    return out


def deleted_paths(table: mw.Table, rec: dict) -> set[str]:
    """successDeleteFiles of a rollback metadata record, relative to the table root."""
    root = table.storage.uri_of("").rstrip("/") + "/"
    return {p.removeprefix(root) for pm in rec["partitionMetadata"].values() for p in pm["successDeleteFiles"]}
