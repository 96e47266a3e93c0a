"""Begin ahead (``WriterConfig.begin_ahead_s``): each commit begins the writer's next instant in
its own lock hold, so a writer fed back to back takes the lock once per batch, not twice.

The tables it writes equal those written without it (our reader and hudi-rs); the instant begun
ahead is an ordinary pending instant until the next batch takes it: given back when the writer
idles or closes, rolled back by the companion job when its writer froze past its heartbeat (the
thawed writer gives it back and lands its batch once, under a new instant), and never begun by a
writer whose batches need instants of their own (an overwrite's replacecommit).

The frozen writer runs as ``python -m tests.test_begin_ahead '<json>'``.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import multiwriter as mw
from multiwriter.errors import ConfigError
from multiwriter.format import instant as inst
from multiwriter.transaction import last_checkpoint
from tests.conftest import trips
from tests.oracle import hudi_read, rows
from tests.test_zombie_writer import _wait_stopped

ROOT = Path(__file__).resolve().parents[1]
HB, MISSES = 1.0, 1


class CountingLock(mw.InProcessLock):
    """The in-process lock, counting acquires (a lock round each)."""

    def __init__(self) -> None:
        super().__init__()
        self.acquires = 0

    def for_table(self, table_id, storage=None):
        lock = super().for_table(table_id, storage)
        inner = lock.acquire

        def acquire(*a, **kw):
            self.acquires += 1
            return inner(*a, **kw)

        lock.acquire = acquire
        return lock


def _pending(path: str) -> list[str]:
    return sorted(i.requested_time for i in mw.Table.open(path).timeline().pending())


def _heartbeats(path: str) -> list[str]:
    d = Path(path, ".hoodie", ".heartbeat")
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


def _create(path: str) -> None:
    from tests.conftest import TRIPS_SCHEMA

    mw.Table.create(path, name="trips", schema=TRIPS_SCHEMA, record_key="id", partition_by=["date"],
                    ordering_field="ts")


def test_one_lock_round_per_batch_and_the_same_table(tmp_path):
    batches = [trips(range(6 * b, 6 * b + 6), ts=b, value=float(b)) for b in range(6)]  # appends
    out = {}
    for ahead in (0.0, 30.0):
        path = str(tmp_path / f"t{ahead}")
        _create(path)
        lock = CountingLock()
        w = mw.Writer(mw.Table.open(path), mw.WriterConfig(writer_id="w", lock=lock, executor="driver",
                                                           begin_ahead_s=ahead))
        done = []
        try:
            for b, batch in enumerate(batches):
                r = w.write(batch, batch_id=b)
                done.append(r.instant)
                pending = _pending(path)
                if ahead:  # the next instant, begun in this commit's hold, waits for the next batch
                    assert len(pending) == 1 and pending[0] > r.instant.completion_time, (pending, r.instant)
                    assert pending[0] in _heartbeats(path)
                else:
                    assert pending == []
            if ahead:  # each batch took the instant its predecessor's commit began
                assert all(a.completion_time < b.requested_time for a, b in zip(done, done[1:], strict=False))
        finally:
            w.close()
        assert _pending(path) == [] and _heartbeats(path) == [], "close gave the last one back"
        out[ahead] = (lock.acquires, rows(mw.Table.open(path).read(), ["id", "ts", "value"]),
                      rows(hudi_read(path), ["id", "ts", "value"]))
    assert out[0.0][0] == 2 * len(batches)
    assert out[30.0][0] == len(batches) + 1
    assert out[30.0][1] == out[0.0][1] == out[30.0][2]
    assert len(out[30.0][1]) == 36


def test_a_commit_that_rewrote_file_groups_begins_nothing_ahead(tmp_path):
    """Its next batch would begin before the retry of a writer that lost a race on those groups,
    and win the next race too, and the next (two processes upserting one file group: 144 against
    471 commits in 15 s, one writer idle for 12 s)."""
    path = str(tmp_path / "t")
    _create(path)
    w = mw.Writer(mw.Table.open(path), mw.WriterConfig(writer_id="w", lock=CountingLock(), executor="driver",
                                                       begin_ahead_s=30.0))
    try:
        w.write(trips(range(3)))
        assert len(_pending(path)) == 1  # an append: the next instant waits
        w.write(trips(range(3), value=2.0))  # takes it, rewrites the group of keys 0-2
        assert _pending(path) == []
        w.write(trips(range(3, 6)))  # begun as usual; an append again
        assert len(_pending(path)) == 1
    finally:
        w.close()


def test_an_idle_writer_gives_its_instant_back(tmp_path):
    path = str(tmp_path / "t")
    _create(path)
    lock = CountingLock()
    w = mw.Writer(mw.Table.open(path), mw.WriterConfig(writer_id="w", lock=lock, executor="driver",
                                                       begin_ahead_s=0.3))
    try:
        w.write(trips(range(3)))
        [ahead] = _pending(path)
        deadline = time.monotonic() + 10
        while _pending(path) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _pending(path) == [] and ahead not in _heartbeats(path), "given back after 0.3 s idle"
        before = lock.acquires
        r = w.write(trips(range(3, 6)))
        assert r.instant.requested_time != ahead
        assert lock.acquires - before == 2, "begun on its own: a lock round to begin, one to commit"
    finally:
        w.close()
    assert sorted(x for (x,) in rows(mw.Table.open(path).read(), ["id"])) == [str(i) for i in range(6)]


def test_replays_and_empty_batches_keep_the_instant_for_the_next_batch(tmp_path):
    path = str(tmp_path / "t")
    _create(path)
    w = mw.Writer(mw.Table.open(path), mw.WriterConfig(writer_id="w", lock=CountingLock(), executor="driver",
                                                       begin_ahead_s=30.0))
    try:
        w.write(trips([1]), batch_id=0)
        [ahead] = _pending(path)
        assert w.write(trips([2]), batch_id=0).skipped  # a replay: no instant used
        assert w.write(trips([])[:0], batch_id=1).instant is None  # nothing to write
        assert _pending(path) == [ahead]
        r = w.write(trips([3]), batch_id=2)
        assert r.instant.requested_time == ahead
    finally:
        w.close()
    tl = mw.Table.open(path).timeline()
    assert len(tl.completed_writes()) == 2
    assert last_checkpoint(mw.Table.open(path), "w") == 2


def test_an_overwrite_writer_begins_nothing_ahead(tmp_path):
    path = str(tmp_path / "t")
    _create(path)
    w = mw.Writer(mw.Table.open(path), mw.WriterConfig(writer_id="w", lock=CountingLock(), executor="driver",
                                                       operation="insert_overwrite_table", begin_ahead_s=30.0))
    try:
        w.write(trips(range(3)))
        assert _pending(path) == []
    finally:
        w.close()


def test_two_writers_beginning_ahead_on_one_file_group(tmp_path):
    """Both append keys of their own (beginning ahead) and, every other batch, upsert every key
    of one file group: every batch lands once, the rows are those of the commits completed
    last, and nothing stays pending."""
    path = str(tmp_path / "t")
    _create(path)
    keys = list(range(20))
    mw.write(trips(keys, ts=1, value=0.0), path, mw.WriterConfig(writer_id="seed", lock=mw.InProcessLock()))
    errors: list[BaseException] = []

    def run(writer: str, base: int) -> None:
        cfg = mw.WriterConfig(writer_id=writer, lock=mw.InProcessLock(), executor="driver", begin_ahead_s=30.0,
                              max_conflict_retries=50, retry_backoff_s=0.001, retry_backoff_max_s=0.02)
        w = mw.Writer(mw.Table.open(path), cfg)
        try:
            for b in range(8):
                batch = trips(keys, ts=1, value=float(base + b)) if b % 2 else trips([f"{writer}{b}"], value=float(b))
                w.write(batch, batch_id=b)
        except BaseException as e:  # noqa: BLE001 -- reported by the test
            errors.append(e)
        finally:
            w.close()

    threads = [threading.Thread(target=run, args=(w, base)) for w, base in (("a", 100), ("b", 200))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    t = mw.Table.open(path)
    tl = t.timeline()
    assert _pending(path) == []
    from multiwriter.transaction import CHECKPOINT_KEY, WRITER_KEY

    landed: dict[tuple[str, int], int] = {}
    for i in tl.completed_writes():
        meta = tl.commit_metadata(i).extra_metadata
        w = meta.get(WRITER_KEY)
        if w in ("a", "b"):
            key = (w, int(json.loads(meta[CHECKPOINT_KEY])[w]))
            landed[key] = landed.get(key, 0) + 1
    assert landed == {(w, b): 1 for w in ("a", "b") for b in range(8)}
    updates = [m for m in (tl.commit_metadata(i).extra_metadata for i in tl.completed_writes())
               if m.get(WRITER_KEY) in ("a", "b") and int(json.loads(m[CHECKPOINT_KEY])[m[WRITER_KEY]]) % 2]
    last = updates[-1]
    value = {"a": 100, "b": 200}[last[WRITER_KEY]] + int(json.loads(last[CHECKPOINT_KEY])[last[WRITER_KEY]])
    expected = {str(k): float(value) for k in keys} | {f"{w}{b}": float(b) for w in "ab" for b in range(0, 8, 2)}
    assert rows(t.read(), ["id", "value"]) == sorted(expected.items(), key=repr)
    assert rows(hudi_read(path), ["id", "value"]) == rows(t.read(), ["id", "value"])


def test_the_timeline_a_commit_begins_ahead_from_equals_a_fresh_listing(tmp_path):
    path = str(tmp_path / "t")
    _create(path)
    mw.write(trips([1]), path, mw.WriterConfig(writer_id="w", lock=mw.InProcessLock()))
    t = mw.Table.open(path)
    txn = mw.transaction.Transaction(t, mw.InProcessLock().for_table(t.table_id), writer_id="x")
    txn.begin()
    before = t.timeline()
    from multiwriter.table.timeline import forget_cache
    from multiwriter.write.writer import commit_metadata

    meta = commit_metadata([], t.schema(before), t.name, "upsert", None)
    done = txn.commit(meta)
    derived = before.with_completed(done, txn.table.timeline().commit_metadata(done))
    forget_cache()
    fresh = mw.Table.open(path).timeline()
    assert derived.instants == fresh.instants
    assert derived.completed() == fresh.completed() and derived.pending() == fresh.pending()
    assert derived.max_time() == fresh.max_time() and derived.last_completed_write() == done
    with pytest.raises(ValueError):
        fresh.with_completed(done, meta)  # already completed there


def test_the_setting_is_checked_and_read_from_options():
    with pytest.raises(ConfigError, match="begin_ahead_s"):
        mw.WriterConfig(lock=mw.InProcessLock(), begin_ahead_s=-1)
    cfg = mw.WriterConfig.from_options({"multiwriter.begin.ahead.ms": "250"}, lock=mw.InProcessLock())
    assert cfg.begin_ahead_s == 0.25


# -- a writer frozen while it keeps an instant begun ahead ----------------------------------------
def _child(a: dict) -> None:
    lock = mw.ZooKeeperLock(connect=a["zk"], base_path=a["base"])
    cfg = mw.WriterConfig(writer_id="frozen", lock=lock, executor="driver", heartbeat_interval_s=HB,
                          heartbeat_tolerable_misses=MISSES, begin_ahead_s=3600.0, max_conflict_retries=3,
                          retry_backoff_s=0.01)
    w = mw.Writer(mw.Table.open(a["path"]), cfg)
    try:
        w.write(trips([1, 2], value=1.0), batch_id=0)
        print(json.dumps({"ahead": _pending(a["path"])}), flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)
        r = w.write(trips([2, 3], value=2.0), batch_id=1)
        print(json.dumps({"instant": r.instant.requested_time, "attempts": r.attempts}), flush=True)
    finally:
        w.close()
        lock.close()


@pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs POSIX signals")
def test_a_writer_frozen_with_an_instant_begun_ahead_lands_its_next_batch_once(zk_server, zk_base, trips_table,
                                                                               table_path):
    from tests.cleaner.conftest import wait_lapsed

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    env.pop("MULTIWRITER_FAULTS", None)
    p = subprocess.Popen([sys.executable, "-m", "tests.test_begin_ahead",
                          json.dumps({"zk": zk_server.connect, "base": zk_base, "path": table_path})],
                         cwd=str(ROOT), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        assert line.startswith("{"), f"child: {line!r} {p.stderr.read() if p.poll() is not None else ''}"
        [ahead] = json.loads(line)["ahead"]
        _wait_stopped(p.pid)
        wait_lapsed(trips_table, ahead)
        lock = mw.ZooKeeperLock(connect=zk_server.connect, base_path=zk_base)
        try:
            with mw.Cleaner(table_path, lock=lock, heartbeat_interval_s=HB, heartbeat_tolerable_misses=MISSES) as c:
                assert c.run_once().rolled_back == [ahead]
        finally:
            lock.close()
        os.kill(p.pid, signal.SIGCONT)
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-3000:]
        res = json.loads(out.strip().splitlines()[-1])
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert res["instant"] != ahead and res["attempts"] == 1, res  # a fresh instant, at once
    tl = mw.Table.open(table_path).timeline()
    assert tl.find(ahead) is None or not tl.find(ahead).is_completed
    assert not any(i.requested_time == ahead for i in tl.completed(frozenset({inst.COMMIT})))
    assert last_checkpoint(mw.Table.open(table_path), "frozen") == 1
    assert rows(mw.Table.open(table_path).read(), ["id", "value"]) == [("1", 1.0), ("2", 2.0), ("3", 2.0)]
    assert rows(hudi_read(table_path), ["id", "value"]) == [("1", 1.0), ("2", 2.0), ("3", 2.0)]


if __name__ == "__main__":
    _child(json.loads(sys.argv[1]))


@pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs POSIX signals")
def test_a_writer_frozen_in_its_commit_hold_after_beginning_ahead(zk_server, zk_base, tmp_path):
    """Frozen (SIGSTOP, past its ZooKeeper session and heartbeat bound) at ``after-begin-ahead``:
    its commit landed before the freeze and stays; another writer commits and the companion job
    rolls the instant begun ahead back while it is frozen; thawed, it gives nothing more. A
    Merge-on-Read table of version 9 (its writers always begin ahead), read by hudi-rs before and
    after a compaction, with the metadata table on (hudi-rs lists files from it)."""
    from tests.cleaner.conftest import wait_lapsed
    from tests.conftest import TRIPS_SCHEMA, compact_slices
    from tests.test_concurrency import result, spawn

    path = str(tmp_path / "trips")
    mw.Table.create(path, name="trips", schema=TRIPS_SCHEMA, record_key="id", partition_by=["date"],
                    ordering_field="ts", table_type="MERGE_ON_READ", num_buckets=2, table_version=9)
    assert mw.Table.open(path).config.version == 9
    mw.write(trips(range(5), ts=1, value=1.0), path, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="seed"))
    args = dict(zk=zk_server.connect, base=zk_base, path=path, hb=1.0, misses=1)
    gate = tmp_path / "gate"
    gate.mkdir()
    frozen = spawn("write", dict(args, writer="frozen", ids=[1, 7], ts=9, value=9.0, batch_id=0, begin_ahead_s=30.0,
                                 session_timeout_s=2.5),
                   {"MULTIWRITER_FAULTS": "after-begin-ahead=hang", "MULTIWRITER_FAULT_DIR": str(gate)})
    try:
        deadline = time.monotonic() + 60
        while not (gate / "after-begin-ahead.hanging").exists():
            assert frozen.poll() is None and time.monotonic() < deadline, frozen.communicate()
            time.sleep(0.02)
        os.kill(frozen.pid, signal.SIGSTOP)
        _wait_stopped(frozen.pid)
        [ahead] = _pending(path)
        wait_lapsed(mw.Table.open(path), ahead)
        time.sleep(1.5)  # past the session too
        other = result(spawn("write", dict(args, writer="other", ids=[1, 3], ts=10, value=5.0, batch_id=0)))
        assert other["ok"], other
        job = result(spawn("clean", dict(args, retain=1, runs=1)))
        assert job["ok"] and ahead in job["rolled_back"], job
        want = {"0": 1.0, "1": 5.0, "2": 1.0, "3": 5.0, "4": 1.0, "7": 9.0}
        assert rows(mw.Table.open(path).read(), ["id", "value"]) == sorted(want.items(), key=repr)
        assert rows(hudi_read(path), ["id", "value"]) == sorted(want.items(), key=repr)
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
        (gate / "after-begin-ahead.release").touch()
    thawed = result(frozen)
    assert thawed["ok"] and not thawed["skipped"], thawed
    tl = mw.Table.open(path).timeline()
    assert tl.find(ahead) is not None and not tl.find(ahead).is_completed or tl.find(ahead) is None
    assert _pending(path) == [], "the thawed writer gave back what the companion job had not"
    compact_slices(path)
    assert rows(mw.Table.open(path).read(), ["id", "value"]) == sorted(want.items(), key=repr)
    assert rows(hudi_read(path), ["id", "value"]) == sorted(want.items(), key=repr)
    replay = result(spawn("write", dict(args, writer="frozen", ids=[1, 7], ts=9, value=9.0, batch_id=0)))
    assert replay["ok"] and replay["skipped"], replay


def test_an_error_at_after_begin_ahead_keeps_the_commit_and_gives_the_instant_back(tmp_path):
    from multiwriter import faults

    path = str(tmp_path / "t")
    _create(path)
    w = mw.Writer(mw.Table.open(path), mw.WriterConfig(writer_id="w", lock=CountingLock(), executor="driver",
                                                       begin_ahead_s=30.0))
    faults.configure("after-begin-ahead=error")
    try:
        r = w.write(trips(range(3)))
        assert r.instant is not None and r.instant.is_completed
        assert _pending(path) == [] and _heartbeats(path) == []
    finally:
        faults.configure(None)
        w.close()
    assert rows(hudi_read(path), ["id"]) == [(str(k),) for k in range(3)]
