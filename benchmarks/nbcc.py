"""Non-blocking writers (Merge-on-Read, bucket index) in separate OS processes under a real
ZooKeeper, beside the same workload on Copy-on-Write with optimistic writers.

Worker processes run ``python -m benchmarks.nbcc <command> '<json>'`` and print one JSON line.
Their batches are a function of (writer, batch number) (:func:`batch`), so the parent rebuilds
the rows of every acknowledged commit and builds the event-time model from them (per key the
highest ``ts``, ties to the later completion); every table is compared with it row by row,
as we read it and, for Merge-on-Read, as hudi-rs reads it, before and after compaction.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

ROOT = Path(__file__).resolve().parents[1]
PARTS = 4
BASE = "/bench-nbcc"
#: ordering values: the seed 0, the stream STREAM_TS + batch, a backfill row OLD or NEW
STREAM_TS, OLD_TS, NEW_TS = 1_000_000, 500, 10**12


# -- batches, rebuilt alike in workers and the parent --------------------------------------------


def _rows(idx: np.ndarray, ts: np.ndarray, amount: np.ndarray, parts: int) -> pa.Table:
    from .mor import DAYS, key_array, schema

    user = pc.binary_join_element_wise("u", pc.cast(pa.array((idx * 7919) % 10_000), pa.string()), "")
    return pa.table({"id": key_array(idx), "date": pa.array(np.array(DAYS)[idx % parts]), "ts": pa.array(ts),
                     "user": user, "amount": pa.array(amount)}, schema=schema())


def batch(kind: str, writer: int, n: int, a: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(key numbers, ts, amount) of batch ``n`` of ``writer``: ``kind`` "seed" (every key, ts 0),
    "backfill" (every key, each OLD_TS or NEW_TS), or "random" (``rows`` distinct random keys,
    ts unique over writers and batches)."""
    keys = a["keys"]
    rng = np.random.default_rng([a.get("seed", 7), writer, n])
    if kind == "seed":
        idx = np.arange(keys)
        return idx, np.zeros(keys, np.int64), rng.random(keys) * 100
    if kind == "backfill":
        idx = np.arange(keys)
        return idx, np.where(rng.random(keys) < 0.5, OLD_TS, NEW_TS).astype(np.int64), rng.random(keys) * 100
    idx = np.sort(rng.choice(keys, a["rows"], replace=False))
    return idx, np.full(len(idx), STREAM_TS + n * 64 + writer, np.int64), rng.random(len(idx)) * 100


class Model:
    """The event-time model over key numbers: per key (ts, completion, amount) of the winner."""

    def __init__(self, keys: int) -> None:
        self.ts = np.full(keys, -1, np.int64)
        self.amount = np.zeros(keys)
        self.completion = np.array([""] * keys, dtype=object)

    def apply(self, idx: np.ndarray, ts: np.ndarray, amount: np.ndarray, completion: str) -> None:
        cur_ts, cur_c = self.ts[idx], self.completion[idx]
        wins = (ts > cur_ts) | ((ts == cur_ts) & (cur_c < completion))
        self.ts[idx[wins]], self.amount[idx[wins]], self.completion[idx[wins]] = ts[wins], amount[wins], completion


def model_of(commits: list[dict], a: dict) -> Model:
    """The model of the acknowledged commits (each {kind, writer, n, completion})."""
    m = Model(a["keys"])
    for c in sorted(commits, key=lambda c: c["completion"]):
        m.apply(*batch(c["kind"], c["writer"], c["n"], a), c["completion"])
    return m


def differences(t: pa.Table, m: Model) -> dict:
    """Rows of ``t`` (id, ts, amount) that differ from the model, by kind; checksums of both."""
    ids = t["id"].to_numpy(zero_copy_only=False)
    order = np.argsort(ids, kind="stable")
    got_idx = np.array([int(s[1:]) for s in ids[order]], dtype=np.int64) if len(ids) else np.zeros(0, np.int64)
    ts, amount = t["ts"].to_numpy()[order], t["amount"].to_numpy()[order]
    n = len(m.ts)
    expected = np.arange(n)
    same_keys = len(got_idx) == n and bool((got_idx == expected).all())
    wrong = int(np.sum((ts != m.ts) | (amount != m.amount))) if same_keys else n
    return {"rows": t.num_rows, "distinct_keys": int(len(np.unique(got_idx))), "keys_match": same_keys,
            "rows_differing": wrong + abs(t.num_rows - n),
            "checksum": [t.num_rows, int(ts.sum()), float(amount.sum())],
            "model_checksum": [n, int(m.ts.sum()), float(m.amount.sum())]}


def hudi_rs_read(path: str) -> pa.Table:
    from hudi import HudiTableBuilder

    batches = HudiTableBuilder.from_base_uri(path).build().read()
    t = pa.Table.from_batches(batches) if batches else pa.table({"id": pa.array([], pa.string()),
                                                                 "ts": pa.array([], pa.int64()),
                                                                 "amount": pa.array([], pa.float64())})
    return t.select(["id", "ts", "amount"])


def _table_checks(path: str, m: Model, hudi_rs: bool) -> dict:
    import multiwriter as mw

    out = {"ours": differences(mw.Table.open(path).read(columns=["id", "ts", "amount"]), m)}
    if hudi_rs:
        out["hudi-rs"] = differences(hudi_rs_read(path), m)
    return out


# -- worker processes ------------------------------------------------------------------------------


def _writer(a: dict):
    import multiwriter as mw

    lock = mw.ZooKeeperLock(connect=a["zk"], base_path=BASE)
    cfg = mw.WriterConfig(writer_id=a["writer_id"], lock=lock, executor="driver", driver_max_rows=50_000_000,
                          max_conflict_retries=a["retries"], retry_backoff_s=0.05, retry_backoff_max_s=0.5,
                          concurrency=a["concurrency"])
    return mw.Writer(mw.Table.open(a["path"]), cfg), lock


def _one(w, kind: str, writer: int, n: int, a: dict) -> dict:
    """One write, timed; what it committed, or that it gave up."""
    from multiwriter.errors import WriteConflictError

    t = _rows(*batch(kind, writer, n, a), a["parts"])
    start = time.time()
    t0 = time.perf_counter()
    try:
        r = w.write(t)
    except WriteConflictError as e:
        attempts = a["retries"] + 1
        return {"kind": kind, "writer": writer, "n": n, "ok": False, "start": start, "end": time.time(),
                "seconds": time.perf_counter() - t0, "attempts": attempts, "conflicts": attempts,
                "error": str(e)[:300]}
    return {"kind": kind, "writer": writer, "n": n, "ok": True, "start": start, "end": time.time(),
            "seconds": time.perf_counter() - t0, "attempts": r.attempts, "conflicts": r.conflicts,
            "completion": r.instant.completion_time, "lock_wait": r.protocol.get("lock_wait"),
            "lock_hold": r.protocol.get("lock_hold")}


def _wait_for(path: Path, timeout_s: float = 600.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.01)


def stream_worker(a: dict) -> dict:
    """``alone`` batches, then signal; batches while the backfill runs; ``after`` more after it."""
    ctl = Path(a["ctl"])
    w, lock = _writer(a)
    out = []
    try:
        for n in range(a["alone"]):
            out.append({**_one(w, "random", 0, n, a), "phase": "alone"})
            time.sleep(a["pause_s"])
        (ctl / "stream-alone-done").touch()
        n = a["alone"]
        while not (ctl / "backfill-done").exists() and n < a["alone"] + a["max_during"]:
            out.append({**_one(w, "random", 0, n, a), "phase": "during"})
            n += 1
            time.sleep(a["pause_s"])
        for _ in range(a["after"]):
            out.append({**_one(w, "random", 0, n, a), "phase": "after"})
            n += 1
            time.sleep(a["pause_s"])
    finally:
        w.close()
        lock.close()
    return {"commits": out}


def backfill_worker(a: dict) -> dict:
    """One backfill write of every key, started once the stream has run alone."""
    ctl = Path(a["ctl"])
    w, lock = _writer(a)
    try:
        if a.get("hold_s"):
            from multiwriter import faults

            real = faults.point

            def hold(name: str) -> None:
                if name == "after-data-files":
                    time.sleep(a["hold_s"])
                real(name)

            faults.point = hold
        _wait_for(ctl / "stream-alone-done")
        r = _one(w, "backfill", 1, 0, a)
    finally:
        (ctl / "backfill-done").touch()
        w.close()
        lock.close()
    return {"commits": [r]}


def scaling_worker(a: dict) -> dict:
    """Random-key upserts until the deadline written in ``ctl/go``."""
    ctl = Path(a["ctl"])
    w, lock = _writer(a)
    out = []
    try:
        (ctl / f"ready-{a['index']}").touch()
        _wait_for(ctl / "go")
        deadline = float((ctl / "go").read_text())
        n = 0
        while time.time() < deadline:
            out.append(_one(w, "random", a["index"], n, a))
            n += 1
    finally:
        w.close()
        lock.close()
    return {"commits": out}


WORKERS = {"stream": stream_worker, "backfill": backfill_worker, "scaling": scaling_worker}


def _spawn(command: str, a: dict) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-m", "benchmarks.nbcc", command, json.dumps(a)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(p: subprocess.Popen, timeout_s: float = 1800.0) -> dict:
    out, err = p.communicate(timeout=timeout_s)
    if p.returncode != 0:
        raise RuntimeError(f"worker failed ({p.returncode}): {err[-3000:]}")
    return json.loads(out.strip().splitlines()[-1])


# -- setup -----------------------------------------------------------------------------------------


def _create(path: str, table_type: str, buckets: int, zk, a: dict) -> None:
    """The table, seeded with every key at ts 0 in one commit."""
    import multiwriter as mw

    from .mor import schema

    kw = {"table_type": "MERGE_ON_READ", "num_buckets": buckets} if table_type == "MERGE_ON_READ" else {}
    mw.Table.create(path, name="bench_nbcc", schema=schema(), record_key="id", partition_by=["date"],
                    ordering_field="ts", **kw)
    lock = mw.ZooKeeperLock(connect=zk.connect, base_path=BASE)
    try:
        mw.write(_rows(*batch("seed", 9, 0, a), a["parts"]), path,
                 mw.WriterConfig(writer_id="seed", lock=lock, executor="driver", driver_max_rows=50_000_000))
    finally:
        lock.close()


def _p(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * q))] if xs else float("nan")


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def _compact(path: str, zk) -> dict:
    import multiwriter as mw

    lock = mw.ZooKeeperLock(connect=zk.connect, base_path=BASE)
    c = mw.Cleaner(path, lock=lock, compaction=mw.CompactionConfig(delta_commits=1))
    try:
        r = c.run_once()
    finally:
        c.close()
        lock.close()
    return {"compaction_instants": r.compaction_instants, "compacted_file_groups": r.compacted_file_groups,
            "compacted_log_files": r.compacted_log_files, "errors": r.errors}


# -- 5. a backfill beside a stream -------------------------------------------------------------------


def _backfill_run(work: Path, zk, table_type: str, size: dict) -> dict:
    from .peers import reset

    reset(work)
    mor = table_type == "MERGE_ON_READ"
    path, ctl = str(work / "table"), work / "ctl"
    ctl.mkdir()
    a = {"keys": size["nbcc_table_rows"], "rows": size["nbcc_stream_rows"], "parts": PARTS, "path": path,
         "zk": zk.connect, "ctl": str(ctl), "seed": 11}
    _create(path, table_type, size["nbcc_buckets"], zk, a)
    common = {**a, "concurrency": "non_blocking" if mor else "optimistic",
              "retries": 0 if mor else size["nbcc_cow_retries"]}
    bf = _spawn("backfill", {**common, "writer_id": "backfill", "hold_s": size["nbcc_backfill_hold_s"]})
    st = _spawn("stream", {**common, "writer_id": "stream", "alone": size["nbcc_alone_batches"],
                           "after": size["nbcc_after_batches"], "pause_s": size["nbcc_stream_pause_s"],
                           "max_during": size["nbcc_max_during_batches"]})
    rs, rb = _result(st), _result(bf)
    stream, (back,) = rs["commits"], rb["commits"]
    during = [c for c in stream if c["end"] > back["start"] and c["start"] < back["end"]]
    alone = [c for c in stream if c["phase"] == "alone"][2:]  # the first two warm the process up
    landed = [c for c in stream + [back] if c["ok"]]
    m = model_of([{"kind": "seed", "writer": 9, "n": 0, "completion": ""}] + landed, a)
    out = {
        "table_type": table_type, "concurrency": common["concurrency"], "max_conflict_retries": common["retries"],
        "backfill_rows": a["keys"], "stream_rows": a["rows"], "partitions": PARTS,
        "backfill": {k: back.get(k) for k in ("ok", "attempts", "conflicts", "seconds", "error")},
        "stream_commits": len(stream), "stream_landed": sum(c["ok"] for c in stream),
        "stream_retries": sum(c["attempts"] - 1 for c in stream if c["ok"]) + sum(c["attempts"] for c in stream
                                                                                if not c["ok"]),
        "stream_conflicts": sum(c["conflicts"] for c in stream), "stream_gave_up": sum(not c["ok"] for c in stream),
        "stream_during_backfill": len(during),
        "latency_alone_s": [c["seconds"] for c in alone], "latency_during_s": [c["seconds"] for c in during],
        "p99_alone_s": _p([c["seconds"] for c in alone], 0.99), "p99_during_s": _p([c["seconds"] for c in during], 0.99),
        "median_alone_s": _median([c["seconds"] for c in alone]),
        "median_during_s": _median([c["seconds"] for c in during]),
        "checks": {"before compaction": _table_checks(path, m, hudi_rs=mor)},
    }
    if mor:
        out["compaction"] = _compact(path, zk)
        if not out["compaction"]["compaction_instants"]:
            raise AssertionError(f"the cleaner did not compact: {out['compaction']}")
        out["checks"]["after compaction"] = _table_checks(path, m, hudi_rs=True)
    out["rows_differing"] = sum(c["rows_differing"] for v in out["checks"].values() for c in v.values())
    if mor and out["rows_differing"]:
        raise AssertionError(f"Merge-on-Read table differs from the event-time model: {out['checks']}")
    return out


def backfill(size: dict, work: Path, spark) -> dict:
    """A stream of ``nbcc_stream_rows``-row upserts into 4 partitions and a backfill of every
    key (``nbcc_table_rows``, the same file groups) in two OS processes under ZooKeeper: on a
    Merge-on-Read table with non-blocking writers, then on Copy-on-Write with optimistic ones."""
    import multiwriter as mw

    with mw.LocalZooKeeper(port=0) as zk:
        out = {"Merge-on-Read, non-blocking": _backfill_run(work / "mor", zk, "MERGE_ON_READ", size),
               "Copy-on-Write, optimistic": _backfill_run(work / "cow", zk, "COPY_ON_WRITE", size)}
    out["backfill_hold_s"] = size["nbcc_backfill_hold_s"]
    return out


# -- 6. 2, 4, 8 writers ------------------------------------------------------------------------------


def _scaling_run(work: Path, zk, table_type: str, k: int, size: dict) -> dict:
    from .peers import reset

    reset(work)
    mor = table_type == "MERGE_ON_READ"
    path, ctl = str(work / "table"), work / "ctl"
    ctl.mkdir()
    a = {"keys": size["nbcc_scaling_table_rows"], "rows": size["nbcc_scaling_batch_rows"], "parts": PARTS,
         "path": path, "zk": zk.connect, "ctl": str(ctl), "seed": 13,
         "concurrency": "non_blocking" if mor else "optimistic", "retries": 0 if mor else size["nbcc_cow_retries"]}
    _create(path, table_type, size["nbcc_buckets"], zk, a)
    ps = [_spawn("scaling", {**a, "index": i, "writer_id": f"w{i}"}) for i in range(k)]
    deadline = time.monotonic() + 300
    while not all((ctl / f"ready-{i}").exists() for i in range(k)):
        dead = [p for p in ps if p.poll() is not None]
        if dead or time.monotonic() > deadline:
            (ctl / "go").write_text(repr(time.time()))  # the others stop at once
            raise RuntimeError(f"{table_type} x{k}: a writer did not start: {_result(dead[0]) if dead else 'timeout'}")
        time.sleep(0.05)
    seconds = size["nbcc_scaling_seconds"]
    t0 = time.time()
    (ctl / "go.tmp").write_text(repr(t0 + seconds))
    os.replace(ctl / "go.tmp", ctl / "go")
    res = [_result(p) for p in ps]
    commits = [c for r in res for c in r["commits"]]
    wall = max([c["end"] for c in commits], default=t0) - t0
    landed = [c for c in commits if c["ok"]]
    m = model_of([{"kind": "seed", "writer": 9, "n": 0, "completion": ""}] + landed, a)
    check = _table_checks(path, m, hudi_rs=False)
    if check["ours"]["rows_differing"]:
        raise AssertionError(f"{table_type} x{k}: the table differs from the event-time model: {check}")
    waits = [c["lock_wait"] for c in landed]
    holds = [c["lock_hold"] for c in landed]
    return {"writers": k, "seconds": wall, "commits": len(landed), "commits_per_s": len(landed) / wall if wall else 0.0,
            "conflicts": sum(c["conflicts"] for c in commits), "gave_up": sum(not c["ok"] for c in commits),
            "retries": sum(c["attempts"] - 1 for c in landed),
            "lock_wait_p50_ms": 1000 * _p(waits, 0.5), "lock_wait_p99_ms": 1000 * _p(waits, 0.99),
            "lock_hold_p50_ms": 1000 * _p(holds, 0.5), "lock_hold_p99_ms": 1000 * _p(holds, 0.99),
            "commit_median_s": _median([c["seconds"] for c in landed]), "rows_differing": check["ours"]["rows_differing"],
            "checksum": check["ours"]["checksum"]}


def scaling(size: dict, work: Path, spark) -> dict:
    """k writer processes upserting random keys of one table for a fixed time, k in
    ``nbcc_scaling_writers``: Merge-on-Read with non-blocking writers, then Copy-on-Write with
    optimistic ones (who goes first alternates per k)."""
    import multiwriter as mw

    out: dict = {"Merge-on-Read, non-blocking": {}, "Copy-on-Write, optimistic": {},
                 "table_rows": size["nbcc_scaling_table_rows"], "batch_rows": size["nbcc_scaling_batch_rows"],
                 "seconds": size["nbcc_scaling_seconds"], "partitions": PARTS, "buckets": size["nbcc_buckets"],
                 "cow_max_conflict_retries": size["nbcc_cow_retries"]}
    runs = {"Merge-on-Read, non-blocking": "MERGE_ON_READ", "Copy-on-Write, optimistic": "COPY_ON_WRITE"}
    with mw.LocalZooKeeper(port=0) as zk:
        for j, k in enumerate(size["nbcc_scaling_writers"]):
            names = list(runs)[j % 2:] + list(runs)[:j % 2]
            for name in names:
                r = _scaling_run(work / f"{runs[name].lower()}-{k}", zk, runs[name], k, size)
                out[name][str(k)] = r
                print(f"   {name} x{k}: {r['commits_per_s']:.1f} commits/s, {r['conflicts']} conflicts", flush=True)
    return out


def main(argv: list[str]) -> int:
    command, a = argv[0], json.loads(argv[1])
    print(json.dumps(WORKERS[command](a)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
