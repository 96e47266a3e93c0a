"""Sections that go through real Spark streaming queries, the long-run section, memory, and the
data source read. Every section interleaves its systems micro-batch by micro-batch in one
process and checks row counts and a checksum of every result against the expected values."""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import multiwriter as mw

from . import data
from .goals import checksum, expected_upserts
from .peers import DeltaLake, Multiwriter, reset
from .stream import Query, publish, stage

ROOT = Path(__file__).resolve().parents[1]


def _check(name: str, got: tuple, want: tuple) -> None:
    """Rows and the sum of ts exact, the sum of amount to 1e-9 relative (summation order differs)."""
    ok = got[0] == want[0] and got[1] == want[1] and abs(got[2] - want[2]) <= 1e-9 * max(1.0, abs(want[2]))
    if not ok:
        raise AssertionError(f"{name}: rows/checksum {got} != expected {want}")


def _rotate(names: list[str], i: int) -> list[str]:
    k = i % len(names)
    return names[k:] + names[:k]


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


# -- 1. foreachBatch streaming upsert ------------------------------------------------------------


def foreach_batch(size: dict, work: Path, spark) -> dict:
    """Micro-batches of a parquet directory source upserted into a base table: our sink vs
    deltalake's merge in foreachBatch. Both queries take turns on each new source file."""
    n, rows, k = size["stream_table_rows"], size["stream_batch_rows"], size["stream_batches"]
    reset(work)
    ours, delta = Multiwriter(work, "driver"), DeltaLake(work)
    return _foreach_batch(spark, work, ours, delta, data.initial(n), [data.upsert_batch(n, rows, b) for b in range(k)],
                          data.SCHEMA, "bench")


def foreach_batch_event(size: dict, work: Path, spark) -> dict:
    """:func:`foreach_batch` on the event workload (int64 keys, the 5 newest days); deltalake
    merges with ``streamed_exec=False``."""
    n, rows, k = size["stream_table_rows"], size["stream_batch_rows"], size["stream_batches"]
    reset(work)
    ours, delta = Multiwriter(work, "driver", schema=data.EVENT_SCHEMA), DeltaLake(work, streamed_exec=False)
    return _foreach_batch(spark, work, ours, delta, data.event_initial(n),
                          [data.event_upsert_batch(n, rows, b) for b in range(k)], data.EVENT_SCHEMA, "bench_event")


def _foreach_batch(spark, work: Path, ours: Multiwriter, delta: DeltaLake, init: pa.Table, batches: list[pa.Table],
                   schema: pa.Schema, prefix: str) -> dict:
    """The two queries over one source, each batch timed inside its foreachBatch function."""
    k = len(batches)
    ours.load(init)
    delta.load(init)
    sink = mw.MultiWriterSink(ours.path, mw.WriterConfig(writer_id=f"{prefix}-stream", lock=mw.InProcessLock()))
    times: dict[str, list[float]] = {"multiwriter sink": [], "deltalake merge": [], "toArrow": []}

    def ours_fn(df, bid: int) -> None:
        t0 = time.perf_counter()
        sink(df, bid)
        times["multiwriter sink"].append(time.perf_counter() - t0)

    def delta_fn(df, bid: int) -> None:
        t0 = time.perf_counter()
        t = df.toArrow()
        t1 = time.perf_counter()
        delta.upsert(t)
        times["deltalake merge"].append(time.perf_counter() - t0)
        times["toArrow"].append(t1 - t0)

    files = stage(batches, work / "staging")
    src = work / "source"
    queries = {"multiwriter sink": Query(spark, src, schema, work / "ck-mw", ours_fn, f"{prefix}_mw_sink"),
               "deltalake merge": Query(spark, src, schema, work / "ck-delta", delta_fn, f"{prefix}_delta_merge")}
    try:
        _take_turns(queries, files, src)
    finally:
        sink.close()
    want = expected_upserts(init, batches)
    for name, peer in (("multiwriter sink", ours), ("deltalake merge", delta)):
        if len(times[name]) != k:
            raise AssertionError(f"{name}: {len(times[name])} micro-batches, expected {k}")
        _check(name, checksum(peer.read()), want)
    out = {name: {"median_s": _median(times[name]), "all_s": times[name],
                  "trigger_median_s": _median(q.trigger_ms()) / 1000} for name, q in queries.items()}
    out["spark toArrow alone (inside the deltalake function)"] = {"median_s": _median(times["toArrow"]),
                                                                 "all_s": times["toArrow"]}
    return out


# -- 2. long run: one long-lived sink, the companion cleaner every 50 batches ------------------


def _long_batch(b: int, rows: int, parts: int) -> pa.Table:
    ids = 70_000_000 + b * rows + np.arange(rows)
    return data.rows(ids, np.array(data.DAYS[:parts])[ids % parts], ts=1, seed=400 + b)


def _files_per_partition_mw(path: str) -> dict[str, int]:
    return dict(Counter(f.partition for f in mw.Table.open(path).snapshot().files()))


def _files_per_partition_delta(path: str) -> dict[str, int]:
    from deltalake import DeltaTable

    adds = DeltaTable(path).get_add_actions(flatten=True)
    return dict(Counter(adds.column("partition.date").to_pylist()))


def long_run(size: dict, work: Path, spark) -> dict:
    """N micro-batches of 500 new rows over 5 partitions through one streaming query and one
    long-lived ``MultiWriterSink``; ``mw.Cleaner`` (clustering on) runs every 50 batches from
    the same foreachBatch function, outside the timed sink call. deltalake beside it as a
    reference: append per batch, ``optimize.compact()`` every 50."""
    n, rows, parts = size["long_run_batches"], 500, 5
    reset(work)
    batches = [_long_batch(b, rows, parts) for b in range(n)]
    return _long_run(size, work, spark, batches, data.SCHEMA, "bench_long_run")


def long_run_event(size: dict, work: Path, spark) -> dict:
    """:func:`long_run` on the event workload: 500 new increasing int64 ids per micro-batch,
    interleaved over the 5 newest days (every batch's keys above every key in the table)."""
    n = size["long_run_batches"]
    reset(work)
    batches = [data.event_stream_batch(b, 500) for b in range(n)]
    return _long_run(size, work, spark, batches, data.EVENT_SCHEMA, "bench_long_run_event")


def flatness(lat: list[float], every: int, window: int = 100) -> dict:
    """Statistics of one system's per-batch times that background noise cannot fake: the 25th
    percentile per ``window`` batches and a least-squares line through them, leaving out the
    batch right after each companion run (every ``every`` batches, untimed, but it changes what
    the next batch finds). ``early``: batches 10-49, ``near_400``: 351-399 (the first batches
    between two companion runs, as "batch ~20" and "batch ~400"); ``trend``: the fitted value at
    the last window over the one at batches 100-199."""
    xs = np.arange(len(lat))
    keep = (xs % every != 0) | (xs == 0)

    def p25(a: int, b: int) -> float | None:
        sel = np.asarray(lat)[(xs >= a) & (xs < b) & keep]
        return float(np.percentile(sel, 25)) if len(sel) else None

    windows = [{"from": a, "to": min(a + window, len(lat)), "p25_s": p25(a, a + window)}
               for a in range(0, len(lat) - window + 1, window)]
    out: dict = {"window": window, "windows": windows, "early_p25_s": p25(10, 50), "near_400_p25_s": p25(351, 400)}
    if out["early_p25_s"] and out["near_400_p25_s"]:
        out["near_400_over_early"] = out["near_400_p25_s"] / out["early_p25_s"]
    fit = [w for w in windows[1:] if w["p25_s"] is not None]
    if len(fit) >= 2:
        centers = np.array([(w["from"] + w["to"]) / 2 for w in fit])
        slope, icept = np.polyfit(centers, [w["p25_s"] for w in fit], 1)
        first, last = icept + slope * centers[0], icept + slope * centers[-1]
        out.update({"trend_slope_s_per_batch": float(slope), "trend_first_s": float(first), "trend_last_s": float(last),
                    "trend_last_over_first": float(last / first) if first > 0 else None})
    return out


def _long_run(size: dict, work: Path, spark, batches: list[pa.Table], schema: pa.Schema, query_name: str) -> dict:
    """One long-lived sink and cleaner over ``batches``, deltalake appending beside it."""
    from deltalake import DeltaTable

    n, every, sample_every = len(batches), size["long_run_clean_every"], size["long_run_sample_every"]
    rows, parts = batches[0].num_rows, len(pc.unique(pa.concat_tables(batches)["date"]))
    ours, delta = Multiwriter(work, "driver", schema=schema), DeltaLake(work)
    lock = mw.InProcessLock()
    sink = mw.MultiWriterSink(ours.path, mw.WriterConfig(writer_id="bench-long-run", lock=lock))
    cleaner = mw.Cleaner(ours.path, lock=lock)
    lat: dict[str, list[float]] = {"multiwriter sink": [], "deltalake append": []}
    maint: list[dict] = []
    files: list[dict] = []

    def sample(b: int, when: str) -> None:
        m, d = _files_per_partition_mw(ours.path), _files_per_partition_delta(delta.path)
        files.append({"batch": b, "when": when, "multiwriter_max": max(m.values()), "multiwriter_total": sum(m.values()),
                      "deltalake_max": max(d.values()), "deltalake_total": sum(d.values())})

    def run_ours(df, bid: int) -> None:
        sink(df, bid)

    def run_delta(df, bid: int) -> None:
        delta.append(df.toArrow())

    systems = {"multiwriter sink": run_ours, "deltalake append": run_delta}

    def fn(df, bid: int) -> None:
        for name in _rotate(list(systems), bid):
            t0 = time.perf_counter()
            systems[name](df, bid)
            lat[name].append(time.perf_counter() - t0)
        done = bid + 1
        if done % every == 0:
            sample(done, "before maintenance")
            t0 = time.perf_counter()
            r = cleaner.run_once()
            t1 = time.perf_counter()
            DeltaTable(delta.path).optimize.compact()
            t2 = time.perf_counter()
            maint.append({"batch": done, "cleaner_s": t1 - t0, "clustered_file_groups": r.clustered_file_groups,
                          "deltalake_compact_s": t2 - t1})
            sample(done, "after maintenance")
        elif done % sample_every == 0:
            sample(done, "between")

    src = work / "source"
    publish(stage(batches, work / "staging"), src)
    q = Query(spark, src, schema, work / "ck", fn, query_name)
    try:
        wall = q.drain()
    finally:
        sink.close()
        cleaner.close()
    for name, v in lat.items():
        if len(v) != n:
            raise AssertionError(f"{name}: {len(v)} micro-batches, expected {n}")
    everything = pa.concat_tables(batches)
    want = checksum(everything)
    once = Multiwriter(work / "once", "driver", schema=schema)
    once.load(everything)
    readers = {"multiwriter (after the run)": ours.read, "multiwriter (same rows written at once)": once.read,
               "deltalake (after the run)": delta.read}
    reads: dict[str, list[float]] = {k: [] for k in readers}
    for i in range(size["read_reps"]):
        for name in _rotate(list(readers), i):
            t0 = time.perf_counter()
            got = readers[name]()
            reads[name].append(time.perf_counter() - t0)
            _check(name, checksum(got), want)
    start = lat["multiwriter sink"][20:70]
    end = lat["multiwriter sink"][-50:]
    last = files[-1]
    before_last = [f for f in files if f["when"] == "before maintenance"]
    return {
        "batches": n, "rows_per_batch": rows, "partitions": parts, "clean_every": every, "wall_s": wall,
        "mode": "foreachBatch of one streaming query (availableNow, maxFilesPerTrigger=1)",
        "latency_s": lat, "maintenance": maint, "files": files,
        "start_median_s": _median(start), "end_median_s": _median(end),
        "deltalake_start_median_s": _median(lat["deltalake append"][20:70]),
        "deltalake_end_median_s": _median(lat["deltalake append"][-50:]),
        "files_per_partition_end": last["multiwriter_max"],
        "files_per_partition_before_last_cleaner": before_last[-1]["multiwriter_max"] if before_last else None,
        "reads": {k: {"median_s": _median(v), "all_s": v} for k, v in reads.items()},
        "flatness": {k: flatness(v, every) for k, v in lat.items()},
    }


# -- 3. memory ---------------------------------------------------------------------------------


def _jvm(proc):
    kids = [c for c in proc.children(recursive=True) if "java" in c.name()]
    return kids[0] if kids else None


#: how a long-lived driver is started (docs/reliability.md, "Long-running drivers")
DRIVER_ENV = {"ARROW_DEFAULT_MEMORY_POOL": "system", "MALLOC_MMAP_THRESHOLD_": "131072"}


def memory_stream(size: dict, work: Path, spark) -> dict:
    """:func:`memory_stream_here` in a fresh driver process started with :data:`DRIVER_ENV`
    (pyarrow picks its allocator once per process), so no earlier section's heap counts."""
    from .child import run_in_child

    result = run_in_child("benchmarks.streaming.memory_stream_here", size, work, DRIVER_ENV)
    return {**result, "driver_env": DRIVER_ENV}


def memory_stream_here(size: dict, work: Path, spark) -> dict:
    """Driver RSS sampled every 10 micro-batches of one running streaming query whose
    foreachBatch is the sink (200 new rows into 5 partitions per batch), with the companion
    cleaner run every 50 batches as a deployment runs it (so the file count stays bounded and
    what grows is the driver's own state, not the table)."""
    import psutil

    n, rows, parts, every = size["memory_stream_batches"], 200, 5, size["long_run_clean_every"]
    reset(work)
    batches = [_long_batch(b, rows, parts) for b in range(n)]
    ours = Multiwriter(work, "driver")
    lock = mw.InProcessLock()
    sink = mw.MultiWriterSink(ours.path, mw.WriterConfig(writer_id="bench-memory", lock=lock))
    cleaner = mw.Cleaner(ours.path, lock=lock)
    proc = psutil.Process()
    jvm = _jvm(proc)
    samples: list[dict] = []
    lat: list[float] = []

    def fn(df, bid: int) -> None:
        t0 = time.perf_counter()
        sink(df, bid)
        lat.append(time.perf_counter() - t0)
        if (bid + 1) % every == 0:
            cleaner.run_once()
        if bid % 10 == 0 or bid == n - 1:
            samples.append({"batch": bid, "python_mib": proc.memory_info().rss / 2**20,
                            "jvm_mib": jvm.memory_info().rss / 2**20 if jvm else None})

    src = work / "source"
    publish(stage(batches, work / "staging"), src)
    try:
        wall = Query(spark, src, data.SCHEMA, work / "ck", fn, "bench_memory").drain()
    finally:
        sink.close()
        cleaner.close()
    if len(lat) != n:
        raise AssertionError(f"memory: {len(lat)} micro-batches, expected {n}")
    _check("memory", checksum(ours.read()), checksum(pa.concat_tables(batches)))
    start = [s["python_mib"] for s in samples if 100 <= s["batch"] < 150]
    end = [s["python_mib"] for s in samples if s["batch"] >= n - 50]
    growth = _median(end) / _median(start) - 1 if start else float("nan")
    return {"batches": n, "wall_s": wall, "samples": samples, "latency_s": lat, "rss_mib_at_100": _median(start),
            "rss_mib_at_end": _median(end), "growth": growth}


# The peak is VmHWM of /proc/self/status: getrusage's ru_maxrss survives fork and exec on Linux,
# so a child of the (large) benchmark process would report the parent's peak.
PEAK = """
import json, sys, time
import pyarrow.parquet as pq
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
system, path, batch = sys.argv[1], sys.argv[2], sys.argv[3]
t = pq.read_table(batch)
if system == "multiwriter":
    import multiwriter as mw
    cfg = mw.WriterConfig(writer_id="bench-peak", executor="driver", driver_max_rows=10_000_000, lock=mw.InProcessLock())
    run = lambda: mw.write(t, path, cfg)
else:
    from deltalake import DeltaTable
    run = lambda: (DeltaTable(path).merge(t, predicate="s.id = t.id AND s.date = t.date", source_alias="s", target_alias="t")
                   .when_matched_update_all().when_not_matched_insert_all().execute())
before = hwm()
t0 = time.perf_counter()
run()
print(json.dumps({"peak_mib": hwm(), "before_mib": before,
                  "seconds": time.perf_counter() - t0}))
"""


def peak_rss(size: dict, work: Path, spark) -> dict:
    """Peak RSS of one upsert of ``peak_batch_rows`` rows into ``peak_table_rows``, each system
    in its own fresh process reading the same batch from one parquet file."""
    import pyarrow.parquet as pq

    n, rows = size["peak_table_rows"], size["peak_batch_rows"]
    reset(work)
    init = data.initial(n)
    batch = data.wide_upsert_batch(n, rows, 0)
    ours, delta = Multiwriter(work, "driver"), DeltaLake(work)
    ours.load(init)
    delta.load(init)
    pq.write_table(batch, work / "batch.parquet")
    del init
    out = {}
    for name, path in (("multiwriter", ours.path), ("deltalake merge", delta.path)):
        r = subprocess.run([sys.executable, "-c", PEAK, name, path, str(work / "batch.parquet")], cwd=ROOT,
                           capture_output=True, text=True, check=True)
        out[name] = json.loads(r.stdout.strip().splitlines()[-1])
    want = expected_upserts(data.initial(n), [batch])
    _check("multiwriter", checksum(ours.read()), want)
    _check("deltalake merge", checksum(delta.read()), want)
    return out


# -- 4. the data source read ------------------------------------------------------------------


def source_read(size: dict, work: Path, spark) -> dict:
    """``spark.read.format("multiwriter")`` vs ``spark.read.parquet`` of the snapshot's live
    files, count and checksum in one aggregation, interleaved."""
    from pyspark.sql import functions as F

    n, rows, k = size["read_table_rows"], size["read_batch_rows"], size["read_upserts"]
    reset(work)
    init = data.initial(n)
    batches = [data.upsert_batch(n, rows, b) for b in range(k)]
    ours = Multiwriter(work, "driver")
    ours.load(init)
    for b in batches:
        ours.upsert(b)
    want = expected_upserts(init, batches)
    del init
    mw.register(spark)
    t = mw.Table.open(ours.path)
    files = [t.storage.uri_of(f.path) for f in t.snapshot().files()]

    def agg(df) -> tuple:
        r = df.agg(F.count("*"), F.sum("ts"), F.sum("amount")).collect()[0]
        return int(r[0]), int(r[1]), float(r[2])

    readers = {"spark.read.format(multiwriter)": lambda: spark.read.format("multiwriter").load(ours.path),
               "spark.read.parquet (same live files)": lambda: spark.read.parquet(*files),
               "format(multiwriter) naming its columns (.schema)":
                   lambda: spark.read.format("multiwriter").schema("ts long, amount double").load(ours.path)}
    times: dict[str, list[float]] = {k: [] for k in readers}
    for name, make in readers.items():  # warm-up: Python workers, JIT
        _check(name, agg(make()), want)
    for i in range(size["read_reps"]):
        for name in _rotate(list(readers), i):
            t0 = time.perf_counter()
            got = agg(readers[name]())
            times[name].append(time.perf_counter() - t0)
            _check(name, got, want)
    out = {k: {"median_s": _median(v), "all_s": v} for k, v in times.items()}
    out["rows"] = want[0]
    out["files"] = len(files)
    return out


# -- 5. the data source's streaming write vs the foreachBatch sink -------------------------------


def stream_write(size: dict, work: Path, spark) -> dict:
    """``writeStream.format("multiwriter")`` vs ``foreachBatch(MultiWriterSink)`` on the same
    parquet source, micro-batches of upserts into a base table each (one ZooKeeper lock for
    both, as in production). Per micro-batch: Spark's own trigger duration of each query (the
    data source's work happens inside Spark's write, so the foreachBatch body alone would
    flatter the sink)."""
    n, rows, k = size["stream_table_rows"], size["stream_batch_rows"], size["stream_batches"]
    reset(work)
    init = data.initial(n)
    batches = [data.upsert_batch(n, rows, b) for b in range(k)]
    with mw.LocalZooKeeper(port=0) as zk:
        lock = mw.ZooKeeperLock(zk.connect, base_path="/bench-locks")
        paths = {"foreachBatch sink": str(work / "sink"), "writeStream.format(multiwriter)": str(work / "ds")}
        for name, path in paths.items():
            mw.Table.create(path, name=f"bench_{'sink' if 'sink' in name else 'ds'}", schema=data.SCHEMA,
                            record_key="id", partition_by=["date"], ordering_field="ts", lock=lock)
            mw.write(init, path, mw.WriterConfig(writer_id="load", lock=lock))
        mw.register(spark)
        sink = mw.MultiWriterSink(paths["foreachBatch sink"], mw.WriterConfig(writer_id="bench-sink", lock=lock))
        host, port = zk.connect.rsplit(":", 1)
        ds_opts = {"hoodie.table.name": "bench_ds", "hoodie.datasource.write.recordkey.field": "id",
                   "hoodie.datasource.write.partitionpath.field": "date", "hoodie.datasource.write.precombine.field": "ts",
                   "hoodie.datasource.write.streaming.checkpoint.identifier": "bench-ds",
                   "hoodie.write.lock.zookeeper.url": host, "hoodie.write.lock.zookeeper.port": port,
                   "hoodie.write.lock.zookeeper.base_path": "/bench-locks"}
        files = stage(batches, work / "staging")
        src = work / "source"
        sink_q = Query(spark, src, data.SCHEMA, work / "ck-sink", sink, "bench_sink_write")
        ds_q = _DataSourceQuery(spark, src, paths["writeStream.format(multiwriter)"], ds_opts, work / "ck-ds")
        queries = {"foreachBatch sink": sink_q, "writeStream.format(multiwriter)": ds_q}
        try:
            _take_turns(queries, files, src)
        finally:
            sink.close()
            lock.close()  # this process's ZooKeeper session ends before the server stops
        want = expected_upserts(init, batches)
        out = {}
        for name, path in paths.items():
            got = mw.Table.open(path).read(columns=["id", "ts", "amount"])
            _check(name, checksum(got), want)
            trig = [t / 1000 for t in queries[name].trigger_ms()]
            if len(trig) != k:
                raise AssertionError(f"{name}: {len(trig)} micro-batches, expected {k}")
            out[name] = {"median_s": _median(trig), "all_s": trig, "parts_median_ms": _parts(queries[name].progress)}
        return out


def _parts(progress: list[dict]) -> dict[str, float]:
    """The median of each of Spark's ``durationMs`` parts (addBatch, queryPlanning, walCommit, ...)."""
    keys = sorted({k for p in progress for k in p["durationMs"]})
    return {k: _median([float(p["durationMs"][k]) for p in progress if k in p["durationMs"]]) for k in keys}


def _take_turns(queries: dict, files: list, src: Path) -> None:
    """Publish one file at a time; every query drains it, who goes first rotating per file."""
    for b, f in enumerate(files):
        publish([f], src)
        for name in _rotate(list(queries), b):
            queries[name].drain()


class _DataSourceQuery(Query):
    """A ``writeStream.format("multiwriter")`` query over the same source (same drain rule)."""

    def __init__(self, spark, source: Path, table: str, options: dict, checkpoint: Path) -> None:
        super().__init__(spark, source, data.SCHEMA, checkpoint, lambda df, i: None, "bench_ds_write")
        self.table, self.options = table, options

    def start(self, writer):
        return writer.format("multiwriter").options(**self.options).start(self.table)
