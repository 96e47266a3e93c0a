"""Merge-on-Read sections: upsert cost as the table grows, the foreachBatch sink on a CDC
stream, snapshot reads before and after compaction, and a long run with compaction.

Every table here has 8 date partitions and Hudi's bucket index; a batch upserts random
existing keys (no key twice in a batch), each batch with a higher ordering value than the one
before, so the expected table is the initial rows with each batch's rows written over them.
That expectation is kept as numpy arrays indexed by key number (:class:`Model`), and every
table read is checked against it: row count, distinct keys, sum of ``ts`` and sum of
``amount``. Systems are interleaved batch by batch in one process, who goes first rotating.
"""
from __future__ import annotations

import statistics
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import multiwriter as mw

from . import data
from .goals import _interleave, read_ratio
from .peers import DeltaLake, reset
from .stream import Query, publish, stage

PARTS = 8
DAYS = data.DAYS[:PARTS]
SHAPES = {"string keys": "string", "int64 keys": "int64"}


def schema(keys: str = "string") -> pa.Schema:
    kt = pa.string() if keys == "string" else pa.int64()
    return pa.schema([("id", kt), ("date", pa.string()), ("ts", pa.int64()), ("user", pa.string()),
                      ("amount", pa.float64())])


def key_array(idx: np.ndarray, keys: str = "string") -> pa.Array:
    """Key number ``i`` as ``k000000123`` (string keys) or as ``i + 1`` (auto-increment int64)."""
    if keys == "int64":
        return pa.array(idx.astype(np.int64) + 1)
    digits = pc.utf8_lpad(pc.cast(pa.array(idx.astype(np.int64)), pa.string()), 9, "0")
    return pc.binary_join_element_wise("k", digits, "")


def rows(idx: np.ndarray, ts: np.ndarray | int, amount: np.ndarray, keys: str = "string") -> pa.Table:
    n = len(idx)
    ts_arr = np.full(n, ts, dtype=np.int64) if np.isscalar(ts) else np.asarray(ts, dtype=np.int64)
    user = pc.binary_join_element_wise("u", pc.cast(pa.array((idx * 7919) % 10_000), pa.string()), "")
    return pa.table({"id": key_array(idx, keys), "date": pa.array(np.array(DAYS)[idx % PARTS]),
                     "ts": pa.array(ts_arr), "user": user, "amount": pa.array(amount)}, schema=schema(keys))


class Model:
    """The expected table: per key number its ``ts`` and ``amount``."""

    def __init__(self, n: int, seed: int = 1) -> None:
        self.n = n
        self.ts = np.zeros(n, dtype=np.int64)
        self.amount = np.random.default_rng(seed).random(n) * 100

    def initial(self, keys: str = "string") -> pa.Table:
        return rows(np.arange(self.n), self.ts, self.amount, keys)

    def batch(self, b: int, size: int, keys: str = "string", seed: int = 1000) -> pa.Table:
        """Batch ``b``: ``size`` distinct random existing keys, ``ts = b + 1``; applied to the model."""
        rng = np.random.default_rng(seed + b)
        idx = np.sort(rng.choice(self.n, size, replace=False))
        amount = rng.random(size) * 100
        ts = b + 1
        newer = ts >= self.ts[idx]
        self.ts[idx[newer]] = ts
        self.amount[idx[newer]] = amount[newer]
        return rows(idx, ts, amount, keys)

    def checksum(self) -> tuple[int, int, int, float]:
        return self.n, self.n, int(self.ts.sum()), float(self.amount.sum())


def checksum(t: pa.Table) -> tuple[int, int, int, float]:
    """(rows, distinct keys, sum of ts, sum of amount)."""
    return (t.num_rows, pc.count_distinct(t["id"]).as_py(), pc.sum(t["ts"]).as_py() or 0,
            pc.sum(t["amount"]).as_py() or 0.0)


def check(name: str, got: tuple, want: tuple) -> None:
    """Counts and the sum of ts exact, the sum of amount to 1e-9 relative (summation order differs)."""
    ok = got[:3] == want[:3] and abs(got[3] - want[3]) <= 1e-9 * max(1.0, abs(want[3]))
    if not ok:
        raise AssertionError(f"{name}: rows/keys/checksum {got} != expected {want}")


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def _rotate(names: list[str], i: int) -> list[str]:
    k = i % len(names)
    return names[k:] + names[:k]


class MorTable:
    """One Merge-on-Read table with the bucket index and one long-lived writer (as a stream has)."""

    def __init__(self, path: Path, buckets: int, keys: str = "string", lock=None, writer_id: str = "bench-mor") -> None:
        self.path = str(path)
        self.lock = lock or mw.InProcessLock()
        mw.Table.create(self.path, name="bench_mor", schema=schema(keys), record_key="id", partition_by=["date"],
                        ordering_field="ts", table_type="MERGE_ON_READ", num_buckets=buckets)
        self.cfg = mw.WriterConfig(writer_id=writer_id, lock=self.lock, executor="driver", driver_max_rows=50_000_000)
        self.writer = mw.Writer(mw.Table.open(self.path), self.cfg)
        self.last = None

    def upsert(self, t: pa.Table) -> None:
        self.last = self.writer.write(t)

    load = upsert

    def read(self, **kw) -> pa.Table:
        return mw.Table.open(self.path).read(columns=["id", "ts", "amount"], **kw)

    def close(self) -> None:
        self.writer.close()


def delta_commits_per_group(path: str) -> dict:
    """Per live file slice, the delta commits whose log files it still merges (not yet compacted)."""
    files = mw.Table.open(path).snapshot().files()
    counts = [len({lf.instant_time for lf in f.logs}) for f in files]
    return {"max": max(counts, default=0), "mean": sum(counts) / len(counts) if counts else 0.0, "groups": len(counts)}


# -- 1. upsert cost as the table grows ---------------------------------------------------------


def upsert_scaling(size: dict, work: Path, spark) -> dict:
    """A ``mor_batch_rows`` upsert of random existing keys into a Merge-on-Read table (bucket
    index, 8 partitions) of each size in ``mor_upsert_table_rows``, interleaved with deltalake's
    merge of the same batches into a Delta table of the same rows; string and int64 keys."""
    sizes, batch, k = size["mor_upsert_table_rows"], size["mor_batch_rows"], size["mor_upsert_batches"]
    buckets = size["mor_buckets"]
    out: dict = {"table_rows": sizes, "batch_rows": batch, "batches": k, "partitions": PARTS, "buckets": buckets,
                 "shapes": {}}
    for shape, keys in SHAPES.items():
        per: dict = {}
        for n in sizes:
            reset(work)
            model = Model(n)
            init = model.initial(keys)
            ours, delta = MorTable(work / "mor", buckets, keys), DeltaLake(work)
            ours.load(init)
            delta.load(init)
            del init
            todo = [model.batch(b, batch, keys) for b in range(k)]
            times = _interleave({"multiwriter MOR": ours, "deltalake merge": delta}, todo, "upsert")
            ours.close()
            want = model.checksum()
            check(f"MOR {shape} {n}", checksum(ours.read()), want)
            check(f"deltalake {shape} {n}", checksum(delta.read()), want)
            per[str(n)] = {"mor_median_s": _median(times["multiwriter MOR"]), "mor_all_s": times["multiwriter MOR"],
                           "deltalake_median_s": _median(times["deltalake merge"]),
                           "deltalake_all_s": times["deltalake merge"],
                           "log_files_per_upsert": ours.last.files_written if ours.last else None}
            print(f"   {shape} {n:,} rows: MOR {per[str(n)]['mor_median_s']:.3f} s, "
                  f"deltalake {per[str(n)]['deltalake_median_s']:.3f} s", flush=True)
        out["shapes"][shape] = per
    reset(work)
    return out


# -- 2. the foreachBatch sink on a CDC stream --------------------------------------------------


def foreach_batch(size: dict, work: Path, spark) -> dict:
    """Micro-batches of random-key upserts (a CDC stream) from a parquet directory source: our
    sink on a Merge-on-Read table vs deltalake's merge in foreachBatch, the two queries taking
    turns on each new source file (as the ``stream`` section does)."""
    from .streaming import _take_turns

    n, batch, k = size["mor_stream_table_rows"], size["mor_batch_rows"], size["mor_stream_batches"]
    reset(work)
    model = Model(n)
    init = model.initial()
    ours, delta = MorTable(work / "mor", size["mor_buckets"]), DeltaLake(work)
    ours.load(init)
    ours.close()
    delta.load(init)
    del init
    batches = [model.batch(b, batch) for b in range(k)]
    sink = mw.MultiWriterSink(ours.path, mw.WriterConfig(writer_id="bench-mor-stream", lock=mw.InProcessLock()))
    times: dict[str, list[float]] = {"multiwriter sink (MOR)": [], "deltalake merge": [], "toArrow": []}

    def ours_fn(df, bid: int) -> None:
        t0 = time.perf_counter()
        sink(df, bid)
        times["multiwriter sink (MOR)"].append(time.perf_counter() - t0)

    def delta_fn(df, bid: int) -> None:
        t0 = time.perf_counter()
        t = df.toArrow()
        t1 = time.perf_counter()
        delta.upsert(t)
        times["deltalake merge"].append(time.perf_counter() - t0)
        times["toArrow"].append(t1 - t0)

    files = stage(batches, work / "staging")
    src = work / "source"
    queries = {"multiwriter sink (MOR)": Query(spark, src, schema(), work / "ck-mw", ours_fn, "bench_mor_sink"),
               "deltalake merge": Query(spark, src, schema(), work / "ck-delta", delta_fn, "bench_mor_delta_merge")}
    try:
        _take_turns(queries, files, src)
    finally:
        sink.close()
    want = model.checksum()
    for name, read in (("multiwriter sink (MOR)", ours.read), ("deltalake merge", delta.read)):
        if len(times[name]) != k:
            raise AssertionError(f"{name}: {len(times[name])} micro-batches, expected {k}")
        check(name, checksum(read()), want)
    out: dict = {"table_rows": n, "batch_rows": batch, "batches": k, "buckets": size["mor_buckets"], "systems": {}}
    for name, q in queries.items():
        out["systems"][name] = {"median_s": _median(times[name]), "all_s": times[name],
                                "trigger_median_s": _median(q.trigger_ms()) / 1000}
    out["systems"]["spark toArrow alone (inside the deltalake function)"] = {
        "median_s": _median(times["toArrow"]), "all_s": times["toArrow"]}
    out["ratios_per_micro_batch"] = [a / b for a, b in zip(times["multiwriter sink (MOR)"], times["deltalake merge"],
                                                          strict=True)]
    return out


# -- 3. snapshot reads with uncompacted delta commits vs after compaction ------------------------


#: the columns of the "a few columns" reads
FEW = ["id", "ts", "amount"]


def hudi_rs_read(path: str, columns: list[str] | None = None) -> pa.Table:
    """hudi-rs's snapshot read of the table (its Merge-on-Read merge of the same slices)."""
    from hudi import HudiReadOptions, HudiTableBuilder

    table = HudiTableBuilder.from_base_uri(path).build()
    batches = table.read(HudiReadOptions(projection=columns) if columns is not None else None)
    return pa.Table.from_batches(batches) if batches else pa.table({})


def read(size: dict, work: Path, spark) -> dict:
    """:func:`read_shape` for string keys and for int64 keys."""
    shapes = {shape: read_shape(size, work, keys) for shape, keys in SHAPES.items()}
    first = next(iter(shapes.values()))
    return {**{k: v for k, v in first.items() if k != "readers"}, "shapes": shapes}


def read_shape(size: dict, work: Path, keys: str = "string") -> dict:
    """Two tables written alike (the initial rows, then ``mor_read_delta_commits`` upserts); the
    second is compacted by the companion cleaner (``mw.Cleaner(compaction=CompactionConfig(...))``).
    ``Table.read()`` of each, of all columns and of a few (``FEW``), and hudi-rs's snapshot read
    of each, interleaved (who goes first rotating), every read checked against the model; beside
    them the same rows written in one commit and the read-optimized read (base files only) of
    the uncompacted table."""
    n, batch, commits = size["mor_read_table_rows"], size["mor_batch_rows"], size["mor_read_delta_commits"]
    buckets = size["mor_buckets"]
    reset(work)
    model = Model(n)
    init = model.initial(keys)
    lock = mw.InProcessLock()
    tables = {"uncompacted": MorTable(work / "uncompacted", buckets, keys, lock=lock),
              "compacted": MorTable(work / "compacted", buckets, keys, lock=lock)}
    for t in tables.values():
        t.load(init)
    for b in range(commits):
        up = model.batch(b, batch, keys)
        for t in tables.values():
            t.upsert(up)
    for t in tables.values():
        t.close()
    before = delta_commits_per_group(tables["compacted"].path)
    t0 = time.perf_counter()
    cleaner = mw.Cleaner(tables["compacted"].path, lock=lock, compaction=mw.CompactionConfig(delta_commits=1))
    try:
        rep = cleaner.run_once()
    finally:
        cleaner.close()
    compact_s = time.perf_counter() - t0
    if not rep.compaction_instants:
        raise AssertionError(f"the cleaner did not compact: {rep}")
    after = delta_commits_per_group(tables["compacted"].path)
    if after["max"] != 0:
        raise AssertionError(f"log files left after compaction: {after}")
    once = MorTable(work / "once", buckets, keys, lock=lock)
    once.load(model.initial(keys))
    once.close()
    want = model.checksum()
    unc, comp = tables["uncompacted"].path, tables["compacted"].path
    readers = {}
    for cols, label in ((None, "all columns"), (FEW, "a few columns")):
        readers[f"{commits} uncompacted delta commits, {label}"] = _ours(unc, cols)
        readers[f"after compaction (the cleaner's), {label}"] = _ours(comp, cols)
        readers[f"hudi-rs, {commits} uncompacted delta commits, {label}"] = _theirs(unc, cols)
        readers[f"hudi-rs, after compaction, {label}"] = _theirs(comp, cols)
    readers["same rows written in one commit, a few columns"] = _ours(once.path, FEW)
    times: dict[str, list[float]] = {k: [] for k in readers}
    ro: list[float] = []
    for i in range(size["mor_read_reps"]):
        for name in _rotate(list(readers), i):
            t0 = time.perf_counter()
            got = readers[name]()
            times[name].append(time.perf_counter() - t0)
            check(name, checksum(got), want)
        t0 = time.perf_counter()
        got = tables["uncompacted"].read(read_optimized=True)
        ro.append(time.perf_counter() - t0)
        if got.num_rows != n:
            raise AssertionError(f"read-optimized read: {got.num_rows} rows, expected {n}")
    out = {k: {"median_s": _median(v), "min_s": min(v), "all_s": v} for k, v in times.items()}
    out["read-optimized (uncompacted table, base files only), a few columns"] = {"median_s": _median(ro),
                                                                                  "min_s": min(ro), "all_s": ro}
    ratios = ", ".join(f"{label} {read_ratio(out, commits, label):.2f}" for label in ("all columns", "a few columns"))
    print(f"   {keys} keys, uncompacted / compacted: {ratios}", flush=True)
    return {"table_rows": n, "batch_rows": batch, "delta_commits": commits, "buckets": buckets, "few_columns": FEW,
            "compacted_by": "mw.Cleaner(compaction=mw.CompactionConfig(delta_commits=1)).run_once()",
            "compaction_s": compact_s, "compacted_file_groups": rep.compacted_file_groups,
            "compacted_log_files": rep.compacted_log_files, "delta_commits_per_group_before": before,
            "readers": out}


def _ours(path: str, columns: list[str] | None):
    return lambda: mw.Table.open(path).read(columns=columns)


def _theirs(path: str, columns: list[str] | None):
    return lambda: hudi_rs_read(path, columns)


# -- 4. long run with compaction -----------------------------------------------------------------


def long_run(size: dict, work: Path, spark) -> dict:
    """N micro-batches of random-key upserts through one streaming query and one long-lived
    ``MultiWriterSink`` on a Merge-on-Read table; the companion cleaner with compaction runs
    every ``mor_compact_every`` batches from the same foreachBatch function, outside the timed
    sink call. Delta commits per file group are sampled before and after every cleaner run and
    every ``mor_long_run_sample_every`` batches."""
    n, batch, k = size["mor_long_run_table_rows"], size["mor_batch_rows"], size["mor_long_run_batches"]
    every, dc, sample_every = size["mor_compact_every"], size["mor_delta_commits"], size["mor_long_run_sample_every"]
    reset(work)
    model = Model(n)
    lock = mw.InProcessLock()
    ours = MorTable(work / "mor", size["mor_buckets"], lock=lock)
    ours.load(model.initial())
    ours.close()
    batches = [model.batch(b, batch) for b in range(k)]
    sink = mw.MultiWriterSink(ours.path, mw.WriterConfig(writer_id="bench-mor-long-run", lock=lock))
    cleaner = mw.Cleaner(ours.path, lock=lock, compaction=mw.CompactionConfig(delta_commits=dc))
    lat: list[float] = []
    maint: list[dict] = []
    samples: list[dict] = []

    def sample(b: int, when: str) -> None:
        samples.append({"batch": b, "when": when, **delta_commits_per_group(ours.path)})

    def fn(df, bid: int) -> None:
        t0 = time.perf_counter()
        sink(df, bid)
        lat.append(time.perf_counter() - t0)
        done = bid + 1
        if done % every == 0:
            sample(done, "before cleaner")
            t0 = time.perf_counter()
            r = cleaner.run_once()
            maint.append({"batch": done, "cleaner_s": time.perf_counter() - t0,
                          "compactions": len(r.compaction_instants), "compacted_file_groups": r.compacted_file_groups,
                          "compacted_log_files": r.compacted_log_files, "errors": r.errors})
            sample(done, "after cleaner")
        elif done % sample_every == 0:
            sample(done, "between")

    src = work / "source"
    publish(stage(batches, work / "staging"), src)
    q = Query(spark, src, schema(), work / "ck", fn, "bench_mor_long_run")
    try:
        wall = q.drain()
    finally:
        sink.close()
        cleaner.close()
    if len(lat) != k:
        raise AssertionError(f"MOR long run: {len(lat)} micro-batches, expected {k}")
    check("MOR long run", checksum(ours.read()), model.checksum())
    start, end = lat[20:70], lat[-50:]
    return {"batches": k, "table_rows": n, "batch_rows": batch, "buckets": size["mor_buckets"], "partitions": PARTS,
            "compact_every": every, "delta_commits": dc, "wall_s": wall, "latency_s": lat, "maintenance": maint,
            "samples": samples, "delta_commits_per_group_max": max((s["max"] for s in samples), default=0),
            "compactions": sum(m["compactions"] for m in maint),
            "start_median_s": _median(start), "end_median_s": _median(end),
            "samples_by_kind": dict(Counter(s["when"] for s in samples))}
