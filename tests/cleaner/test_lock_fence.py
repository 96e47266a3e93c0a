"""The companion job's completions are fenced on the table lock, as a writer's commit is.

A cleaner that lost its lock (a ZooKeeper session gone, a storage lease run out while it was
paused) must not complete a clean, a rollback or a rewrite: another holder may be deciding at the
same time, and a Hudi JVM writer does not read our decision log. The lock here reports itself lost
the way the real locks do (``check`` raises ``LockLostError``, ``is_held`` is False): what is under
test is the cleaner's control flow, not a lock.
"""
from __future__ import annotations

import time

import numpy as np
import pyarrow as pa

import multiwriter as mw
from multiwriter.errors import LockLostError
from multiwriter.format import instant as inst
from multiwriter.lock.in_process import InProcessLock
from tests.oracle import hudi_read

SCHEMA = pa.schema([("id", pa.string()), ("date", pa.string()), ("ts", pa.int64())])


class _Losable:
    """A table lock that can be told it was lost."""

    def __init__(self, inner, provider) -> None:
        self.inner, self.provider = inner, provider
        self.table_id = inner.table_id

    def acquire(self, timeout_s=None, holder=None, **kw) -> None:
        self.inner.acquire(timeout_s, holder, **kw)

    def release(self) -> None:
        self.inner.release()

    def is_held(self) -> bool:
        return not self.provider.lost and self.inner.is_held()

    def check(self) -> None:
        if self.provider.lost:
            raise LockLostError(f"the lock of table {self.table_id} was lost (injected)")
        self.inner.check()

    def close(self) -> None:
        self.inner.close()


class _LosableLock(InProcessLock):
    lost = False

    def for_table(self, table_id, storage=None):
        return _Losable(super().for_table(table_id, storage), self)


def _rows(ids: np.ndarray, ts: int) -> pa.Table:
    return pa.table({"id": [f"k{i:05d}" for i in ids], "date": ["2024-01-01"] * len(ids),
                     "ts": np.full(len(ids), ts, np.int64)}, schema=SCHEMA)


def test_a_cleaner_that_lost_its_lock_completes_no_clean(tmp_path):
    uri = str(tmp_path / "t")
    lock = _LosableLock()
    mw.Table.create(uri, name="t", schema=SCHEMA, record_key="id", partition_by=["date"], ordering_field="ts",
                    metadata=True)
    cfg = mw.WriterConfig(writer_id="w", executor="driver", lock=lock)
    for ts in range(4):  # four versions of the same file group: the clean has old ones to delete
        mw.write(_rows(np.arange(50), ts), uri, cfg)
    lock.lost = True
    beats = {"heartbeat_interval_s": 1.0, "heartbeat_tolerable_misses": 1}  # the first run's clean is taken over soon
    with mw.Cleaner(uri, lock=lock, retain_commits=1, clustering=None, **beats) as cleaner:
        report = cleaner.run_once(raise_errors=False)
    assert any("lost" in e for e in report.errors), report.errors
    cleans = [i for i in mw.Table.open(uri).timeline().instants if i.action == inst.CLEAN]
    assert cleans and not any(i.is_completed for i in cleans), cleans
    lock.lost = False
    with mw.Cleaner(uri, lock=lock, retain_commits=1, clustering=None, **beats) as cleaner:
        for _ in range(20):  # once the first run's heartbeat for its clean has lapsed, the clean is finished
            cleaner.run_once()
            if all(i.is_completed for i in mw.Table.open(uri).timeline().latest_states() if i.action == inst.CLEAN):
                break
            time.sleep(0.3)
    cleans = [i for i in mw.Table.open(uri).timeline().latest_states() if i.action == inst.CLEAN]
    assert cleans and all(i.is_completed for i in cleans), cleans
    want = sorted((f"k{i:05d}", 3) for i in range(50))
    got = mw.Table.open(uri).read(columns=["id", "ts"])
    assert sorted(zip(got["id"].to_pylist(), got["ts"].to_pylist(), strict=True)) == want
    theirs = hudi_read(uri)
    assert sorted(zip(theirs["id"].to_pylist(), theirs["ts"].to_pylist(), strict=True)) == want
