"""Non-blocking concurrency on Merge-on-Read tables, across OS processes against a real
ZooKeeper: overlapping writers never conflict, and the table equals the event-time model (per
key the acknowledged version with the highest ordering value, ties to the later completion),
read alike by hudi-rs and by us."""
from __future__ import annotations

import random

import multiwriter as mw
from tests.conftest import trips
from tests.oracle import hudi_read, rows
from tests.test_concurrency import base_args, result, spawn

COLS = ["id", "ts", "value"]


def event_time_model(commits: list[dict], seed: dict[str, tuple[int, float]] | None = None) -> dict[str, tuple[int, float]]:
    """Per key (ts, value) of the winning version: highest ts, ties to the later completion."""
    best: dict[str, tuple[int, str, float]] = {k: (ts, "", v) for k, (ts, v) in (seed or {}).items()}
    for c in commits:
        for key, ts, value in c["rows"]:
            cand = (ts, c["completion"], float(value))
            cur = best.get(str(key))
            if cur is None or (cand[0], cand[1]) > (cur[0], cur[1]):
                best[str(key)] = cand
    return {k: (ts, v) for k, (ts, _, v) in best.items()}


def _table(path: str) -> dict[str, tuple[int, float]]:
    ours = rows(mw.Table.open(path).read(), COLS)
    assert ours == rows(hudi_read(path), COLS), "hudi-rs reads the table as we do"
    return {k: (ts, v) for k, ts, v in ours}


def test_backfill_beside_a_frequent_stream_lands_on_its_first_attempt(zk_server, zk_base, mor_table, table_path):
    keys = list(range(400))
    mw.write(trips(keys, ts=0, value=0.0), table_path, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="seed"))
    rng = random.Random(7)
    stream = [[[k, 1000 + n, 1000 + n] for k in rng.sample(keys, 40)] for n in range(12)]
    # the backfill rewrites every key: older event times for some keys, newer for others
    backfill = [[[k, rng.choice([500, 2000]), 5 + k] for k in keys]]
    b = spawn("upserts", base_args(zk_server, zk_base, table_path, writer="backfill", batches=backfill, hold_s=2.5))
    s = spawn("upserts", base_args(zk_server, zk_base, table_path, writer="stream", batches=stream, pause_s=0.1))
    rb, rs = result(b), result(s)
    assert rb["ok"] and rs["ok"], (rb, rs)
    (back,) = rb["commits"]
    assert back["attempts"] == 1 and back["conflicts"] == 0, "the backfill lands on its first attempt"
    assert all(c["attempts"] == 1 and c["conflicts"] == 0 for c in rs["commits"]), "the stream never retries"
    overtaken = [c for c in rs["commits"] if back["instant"] < c["instant"] < back["completion"] and c["completion"] < back["completion"]]
    assert overtaken, "stream commits began after the backfill and completed before it"
    model = event_time_model(rb["commits"] + rs["commits"], {str(k): (0, 0.0) for k in keys})
    assert _table(table_path) == model


def test_same_new_keys_from_two_processes_keep_one_version(zk_server, zk_base, mor_table, table_path):
    batch_a = [[[k, 10, 1.0] for k in range(30)]]
    batch_b = [[[k, 20 if k % 2 else 5, 2.0] for k in range(30)]]
    pa_ = spawn("upserts", base_args(zk_server, zk_base, table_path, writer="a", batches=batch_a, hold_s=1.0))
    pb = spawn("upserts", base_args(zk_server, zk_base, table_path, writer="b", batches=batch_b, hold_s=1.0))
    ra, rb = result(pa_), result(pb)
    assert ra["ok"] and rb["ok"], (ra, rb)
    assert all(c["attempts"] == 1 for c in ra["commits"] + rb["commits"])
    got = _table(table_path)
    assert len(got) == 30, "the bucket index keeps one version per key"
    assert got == event_time_model(ra["commits"] + rb["commits"])


def test_a_writer_spanning_a_compaction_lands_in_the_next_slice(zk_server, zk_base, mor_table, table_path):
    """The backfill process writes its log files, the companion job plans and completes a
    compaction meanwhile, then the backfill commits: its changes are read on top of the compacted
    base (before and after the next compaction), never lost, never conflicting."""
    import time

    keys = list(range(60))
    seed = mw.WriterConfig(lock=mw.InProcessLock(), writer_id="seed")
    mw.write(trips(keys, ts=0, value=0.0), table_path, seed)
    stream = [[[k, 100 + n, 100 + n] for k in keys[n * 10:n * 10 + 20]] for n in range(3)]
    backfill = [[[k, 50 if k % 2 else 500, 7] for k in keys]]
    lock = mw.ZooKeeperLock(connect=zk_server.connect, base_path=zk_base)
    cleaner = mw.Cleaner(table_path, lock=lock, compaction=mw.CompactionConfig(delta_commits=1), clustering=None)
    try:
        s = spawn("upserts", base_args(zk_server, zk_base, table_path, writer="stream", batches=stream))
        rs = result(s)
        b = spawn("upserts", base_args(zk_server, zk_base, table_path, writer="backfill", batches=backfill, hold_s=4.0))
        deadline = time.monotonic() + 60
        while not mw.Table.open(table_path).timeline().pending() and time.monotonic() < deadline:
            time.sleep(0.05)  # until the backfill has begun: then its log files are being written
        compacted = cleaner.run_once().compaction_instants
        rb = result(b)
        assert rb["ok"] and rs["ok"], (rb, rs)
        (back,) = rb["commits"]
        assert compacted and back["instant"] < compacted[0] < back["completion"], "the compaction ran inside the backfill"
        assert back["attempts"] == 1 and back["conflicts"] == 0
        model = event_time_model(rs["commits"] + rb["commits"], {str(k): (0, 0.0) for k in keys})
        assert _table(table_path) == model
        assert cleaner.run_once().compaction_instants, "the next compaction takes the backfill's logs"
        assert _table(table_path) == model
    finally:
        cleaner.close()
        lock.close()
