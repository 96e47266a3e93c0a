"""The workloads. Each takes a size dict and returns plain data (seconds, counts) for the report."""
from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa

import multiwriter as mw
from multiwriter import markers
from multiwriter.storage import Storage

from . import (bootstrap, commit_rate, data, executors, goals, indexes, locks, metadata_table, mor, nbcc, s3_cost,
               streaming)
from .peers import DeltaLake, Iceberg, Multiwriter, NaiveCopyOnWrite, PyArrowHudiFilesLimit, PyArrowLimit, SparkParquetLimit, reset

ROOT = Path(__file__).resolve().parents[1]


def _timed(fn, *a) -> float:
    t0 = time.perf_counter()
    fn(*a)
    return time.perf_counter() - t0


def upsert(size: dict, work: Path, spark) -> dict:
    n, batch, batches = size["table_rows"], size["batch_rows"], size["batches"]
    reset(work)
    init = data.initial(n)
    todo = [data.upsert_batch(n, batch, b) for b in range(batches)]
    peers = {
        "multiwriter (driver)": Multiwriter(work, "driver"),
        "multiwriter (executors)": Multiwriter(work, "spark", spark=spark),
        "deltalake merge": DeltaLake(work),
        "naive pyarrow rewrite": NaiveCopyOnWrite(work),
    }
    for peer in peers.values():
        peer.load(init)
    times = goals._interleave(peers, todo, "upsert")
    want = goals.expected_upserts(init, todo)
    for name, peer in peers.items():
        _check(name, peer.read(), want)
    out: dict = {name: {"median_s": statistics.median(v), "all_s": v} for name, v in times.items()}
    # pyiceberg's upsert is orders of magnitude slower: measured alone on a smaller table and batch.
    reset(work)
    ice = Iceberg(work)
    small_n, small_b = size["iceberg_table_rows"], size["iceberg_batch_rows"]
    small_init = data.initial(small_n)
    ice.load(small_init)
    small = [data.upsert_batch(small_n, small_b, b) for b in range(size["iceberg_batches"])]
    times = [_timed(ice.upsert, b) for b in small]
    _check("pyiceberg upsert", ice.read(), goals.expected_upserts(small_init, small))
    out["pyiceberg upsert"] = {"median_s": statistics.median(times), "all_s": times,
                               "note": f"{small_b:,}-row batches into {small_n:,} rows (scaled down, run alone)"}
    return out


def _check(name: str, got, want: tuple) -> None:
    if goals.checksum(got) != want:
        raise AssertionError(f"{name}: rows/checksum {goals.checksum(got)} != expected {want}")


def append(size: dict, work: Path, spark) -> dict:
    reset(work)
    todo = [data.append_batch(size["batch_rows"], b) for b in range(size["batches"])]
    peers = {
        "multiwriter (driver)": Multiwriter(work, "driver"),
        "multiwriter insert (driver)": Multiwriter(work / "insert", "driver", operation="insert"),
        "deltalake append": DeltaLake(work),
        "pyiceberg append": Iceberg(work),
        "pyarrow write_dataset (limit)": PyArrowLimit(work),
        "pyarrow, same files with Hudi's meta columns (limit)": PyArrowHudiFilesLimit(work),
        "spark createDataFrame + write.parquet (limit)": SparkParquetLimit(work, spark),
    }
    times = goals._interleave(peers, todo, "append")
    want = goals.checksum(pa.concat_tables(todo))
    for name, peer in peers.items():
        _check(name, peer.read(), want)
    return {name: {"median_s": statistics.median(v), "all_s": v} for name, v in times.items()}


def protocol(size: dict, work: Path, spark) -> dict:
    reset(work)
    with mw.LocalZooKeeper(port=0) as zk:
        lock = mw.ZooKeeperLock(connect=zk.connect, base_path="/bench")
        peer = Multiwriter(work, "driver", lock=lock)
        peer.load(data.initial(size["table_rows"]))
        rows = []
        for b in range(size["batches"]):
            peer.upsert(data.upsert_batch(size["table_rows"], size["batch_rows"], b))
            r = peer.last
            rows.append({"total": r.duration_s, **r.protocol})
        lock.close()
    holds = sorted(x["lock_hold"] / 2 for x in rows)  # two holds per commit: begin and commit
    share = statistics.median((x["lock_wait"] + x["lock_hold"] + x["conflict_check"] + x["timeline_io"]) / x["total"] for x in rows)
    return {
        "median_batch_s": statistics.median(x["total"] for x in rows),
        "median_protocol_share": share,
        "lock_hold_p50_ms": 1000 * holds[len(holds) // 2],
        "lock_hold_p99_ms": 1000 * holds[min(len(holds) - 1, int(len(holds) * 0.99))],
        "per_batch": rows,
    }


def _fill(path: str, n: int) -> None:
    from multiwriter.table.metadata import CommitMetadata
    from multiwriter.transaction import Transaction

    from multiwriter.format.schema import arrow_to_avro_json

    t = mw.Table.open(path)
    lock = mw.InProcessLock().for_table(t.table_id, t.storage)
    schema = arrow_to_avro_json(data.SCHEMA, t.name)  # as every real commit carries it
    for _ in range(n):
        txn = Transaction(t, lock, writer_id="filler")
        txn.begin()
        txn.commit(CommitMetadata(extra_metadata={"schema": schema}))


def timeline_growth(size: dict, work: Path, spark) -> dict:
    out: dict = {}
    import numpy as np

    tiny = data.rows(np.arange(100) + 90_000_000, np.array([data.DAYS[0]] * 100), 1, 0)
    for archival in (False, True):
        reset(work)
        peer = Multiwriter(work, "driver")
        have = 0
        for target in size["timeline_sizes"]:
            _fill(peer.path, target - have)
            have = target
            if archival:
                mw.Cleaner(peer.path, lock=mw.InProcessLock(), retain_commits=10).run_once()
            total, commit = [], []
            for _k in range(size["tiny_batches"]):
                total.append(_timed(peer.append, tiny.slice(0, 100)))
                commit.append(peer.last.phases["commit"])
            out[f"{target} instants, archival {'on' if archival else 'off'}"] = {
                "batch_s": statistics.median(total), "commit_phase_s": statistics.median(commit)}
    return out


CONCURRENT = """
import sys, time, json
import pyarrow as pa
import multiwriter as mw
from benchmarks import data
path, zk, i, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
cfg = mw.WriterConfig(writer_id=f"c{i}", lock=mw.ZooKeeperLock(connect=zk, base_path="/bench"), max_conflict_retries=0)
w = mw.Writer(mw.Table.open(path), cfg)
waits, t0 = [], time.perf_counter()
for b in range(n):
    t = data.rows(__import__("numpy").arange(b * 100, b * 100 + 100) + i * 10**7, __import__("numpy").array([data.DAYS[i]] * 100), 1, b)
    r = w.write(t)
    waits.append(r.protocol["lock_wait"])
print(json.dumps({"seconds": time.perf_counter() - t0, "commits": n, "lock_wait": sum(waits) / n}))
"""

DELTA_CONCURRENT = """
import sys, time, json
from deltalake import write_deltalake
from benchmarks import data
import numpy as np
path, i, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
t0, fails = time.perf_counter(), 0
for b in range(n):
    t = data.rows(np.arange(b * 100, b * 100 + 100) + i * 10**7, np.array([data.DAYS[i]] * 100), 1, b)
    for attempt in range(20):
        try:
            write_deltalake(path, t, partition_by=["date"], mode="append")
            break
        except Exception:
            fails += 1
print(json.dumps({"seconds": time.perf_counter() - t0, "commits": n, "retries": fails}))
"""


def _concurrent_mw(work: Path, zk, k: int, n: int, env: dict) -> dict:
    import json

    reset(work)
    Multiwriter(work, "driver")
    path = str(work / "mw-driver")
    t0 = time.perf_counter()
    ps = [subprocess.Popen([sys.executable, "-c", CONCURRENT, path, zk.connect, str(i), str(n)],
                           stdout=subprocess.PIPE, text=True, env=env) for i in range(k)]
    res = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in ps]
    wall = time.perf_counter() - t0
    commits = len(mw.Table.open(path).timeline().completed_writes())
    rows = mw.Table.open(path).read(columns=["id"]).num_rows
    if rows != commits * 100:
        raise AssertionError(f"multiwriter x{k}: {rows} rows after {commits} commits of 100 rows")
    return {"commits_per_s": commits / wall, "conflicts": k * n - commits,
            "mean_lock_wait_s": statistics.mean(r["lock_wait"] for r in res)}


def _concurrent_delta(work: Path, k: int, n: int, env: dict) -> dict:
    import json

    reset(work)
    delta = DeltaLake(work)
    delta.load(data.append_batch(10, 0))
    t0 = time.perf_counter()
    ps = [subprocess.Popen([sys.executable, "-c", DELTA_CONCURRENT, delta.path, str(i), str(n)],
                           stdout=subprocess.PIPE, text=True, env=env) for i in range(k)]
    res = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in ps]
    wall = time.perf_counter() - t0
    rows = delta.count()
    if rows != 10 + k * n * 100:
        raise AssertionError(f"deltalake x{k}: {rows} rows, expected {10 + k * n * 100}")
    return {"commits_per_s": k * n / wall, "retries": sum(r["retries"] for r in res)}


def concurrent(size: dict, work: Path, spark) -> dict:
    """k writer processes on disjoint partitions; per k the two systems run in turn (who goes
    first alternates), every table's row count checked."""
    out: dict = {}
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    n = size["concurrent_batches"]
    with mw.LocalZooKeeper(port=0) as zk:
        for j, k in enumerate((1, 2, 4)):
            runs = {f"multiwriter x{k}": lambda k=k: _concurrent_mw(work, zk, k, n, env),
                    f"deltalake x{k}": lambda k=k: _concurrent_delta(work, k, n, env)}
            names = list(runs)[j % 2:] + list(runs)[:j % 2]
            for name in names:
                out[name] = runs[name]()
            out = {**{key: out[key] for key in out if key not in runs}, **{key: out[key] for key in runs}}
    return out


DOOMED = """
import sys, pyarrow as pa, multiwriter as mw
from benchmarks import data
cfg = mw.WriterConfig(writer_id="doomed", heartbeat_interval_s=1.0, heartbeat_tolerable_misses=2,
                      lock=mw.ZooKeeperLock(connect=sys.argv[2], base_path="/bench"))
mw.write(data.append_batch(1000, 7), sys.argv[1], cfg)
"""


def failure_detection(size: dict, work: Path, spark) -> dict:
    times = []
    env = dict(os.environ, PYTHONPATH=str(ROOT), MULTIWRITER_FAULTS="after-data-files=hang", MULTIWRITER_FAULT_HANG_S="600")
    with mw.LocalZooKeeper(port=0) as zk:
        for _ in range(size["kills"]):
            reset(work)
            Multiwriter(work, "driver")
            path = str(work / "mw-driver")
            p = subprocess.Popen([sys.executable, "-c", DOOMED, path, zk.connect], env=env)
            storage = Storage(path)
            while not any(markers.started_writing(storage, t) for t in markers.instants_with_markers(storage)):
                time.sleep(0.02)
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
            killed = time.perf_counter()
            lock = mw.ZooKeeperLock(connect=zk.connect, base_path="/bench")
            cleaner = mw.Cleaner(path, lock=lock, heartbeat_interval_s=1.0, heartbeat_tolerable_misses=2)
            while not cleaner.run_once().rolled_back:
                time.sleep(1.0)  # the cleaner runs every second
            times.append(time.perf_counter() - killed)
            cleaner.close()
            lock.close()
    return {"median_s": statistics.median(times), "all_s": times, "bound_s": 3.0}


def memory(size: dict, work: Path, spark) -> dict:
    import psutil

    reset(work)
    Multiwriter(work, "driver")
    path = str(work / "mw-driver")
    sink = mw.MultiWriterSink(path, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="mem"))
    proc = psutil.Process()
    rss = []
    df = spark.createDataFrame(data.append_batch(200, 0))
    for b in range(size["micro_batches"]):
        sink(df, b)
        if b % 10 == 0:
            rss.append(proc.memory_info().rss / 2**20)
    sink.close()
    half = len(rss) // 2
    return {"rss_mib_first_half": statistics.mean(rss[:half]), "rss_mib_second_half": statistics.mean(rss[half:]),
            "samples": rss}


# Merge-on-Read and non-blocking writer sections (benchmarks.mor, benchmarks.nbcc): the small size
# uses smaller tables and shorter runs than the full one.
_MOR_NBCC = {
    "mor_upsert_table_rows": {"small": [25_000, 200_000, 800_000], "full": [250_000, 2_000_000, 8_000_000]},
    "mor_batch_rows": {"small": 2000, "full": 2000},
    "mor_upsert_batches": {"small": 5, "full": 10},
    "mor_buckets": {"small": 4, "full": 4},
    "mor_stream_table_rows": {"small": 200_000, "full": 2_000_000},
    "mor_stream_batches": {"small": 8, "full": 20},
    "mor_read_table_rows": {"small": 200_000, "full": 2_000_000},
    "mor_read_delta_commits": {"small": 7, "full": 7},
    "mor_read_reps": {"small": 3, "full": 5},
    "mor_long_run_table_rows": {"small": 100_000, "full": 2_000_000},
    "mor_long_run_batches": {"small": 150, "full": 3000},
    "mor_compact_every": {"small": 5, "full": 5},
    "mor_delta_commits": {"small": 5, "full": 5},
    "mor_long_run_sample_every": {"small": 10, "full": 10},
    "nbcc_table_rows": {"small": 20_000, "full": 200_000},
    "nbcc_stream_rows": {"small": 1000, "full": 1000},
    "nbcc_buckets": {"small": 4, "full": 4},
    "nbcc_alone_batches": {"small": 20, "full": 60},
    "nbcc_after_batches": {"small": 5, "full": 10},
    "nbcc_max_during_batches": {"small": 500, "full": 5000},
    "nbcc_stream_pause_s": {"small": 0.05, "full": 0.05},
    "nbcc_backfill_hold_s": {"small": 0.0, "full": 0.0},
    "nbcc_cow_retries": {"small": 3, "full": 3},
    "nbcc_scaling_writers": {"small": [2, 4, 8], "full": [2, 4, 8]},
    "nbcc_scaling_seconds": {"small": 6, "full": 60},
    "nbcc_scaling_table_rows": {"small": 100_000, "full": 1_000_000},
    "nbcc_scaling_batch_rows": {"small": 1000, "full": 1000},
    "mdt_cow_rows": {"small": 1_000_000, "full": 1_000_000},
    "mdt_cow_batch": {"small": 100_000, "full": 100_000},
    "exec_table_rows": {"small": 1_000_000, "full": 1_000_000},
    "exec_batch_rows": {"small": 3_000_000, "full": 3_000_000},
    "exec_big_batch_rows": {"small": 10_000_000, "full": 10_000_000},
    "exec_big_driver_memory": {"small": "1g", "full": "1g"},
    "bootstrap_rows": {"small": 10_000_000, "full": 10_000_000},
    "bootstrap_partitions": {"small": 30, "full": 30},
    "bootstrap_files_per_partition": {"small": 4, "full": 4},
    "bootstrap_driver_memory": {"small": "1g", "full": "1g"},
    "bootstrap_keys": {"small": ["string", "int64"], "full": ["string", "int64"]},
    "mdt_batches": {"small": 6, "full": 10},
    "mdt_mor_rows": {"small": 200_000, "full": 2_000_000},
    "mdt_mor_batch": {"small": 2000, "full": 2000},
    "mdt_mor_batches": {"small": 20, "full": 30},
    "mdt_list_partitions": {"small": [100, 1000], "full": [100, 1000]},
    "mdt_list_rows_per_partition": {"small": 5, "full": 5},
    "s3_cost_rows": {"small": 20_000, "full": 200_000},
    "s3_cost_partitions": {"small": 5, "full": 20},
    "s3_cost_batch": {"small": 2000, "full": 2000},
    "s3_cost_batches": {"small": 3, "full": 3},
    "s3_cost_buckets": {"small": 4, "full": 4},
    "s3_cost_latency_ms": {"small": 15, "full": 15},
    "s3_cost_slow_latency_ms": {"small": 50, "full": 50},
    "mdt_list_upsert_rows": {"small": 2000, "full": 2000},
    "mdt_list_reps": {"small": 3, "full": 3},
    "mdt_long_run_batches": {"small": 3000, "full": 3000},
    "mdt_long_run_clean_every": {"small": 10, "full": 10},
    "mdt_long_run_rows": {"small": 100, "full": 100},
    "mdt_long_run_partitions": {"small": 5, "full": 5},
    "commit_rate_writers": {"small": [1, 4, 8, 16], "full": [1, 4, 8, 16]},
    "commit_rate_seconds": {"small": 8, "full": 20},
    "stats_rows": {"small": 1_000_000, "full": 4_000_000},
    "stats_batch": {"small": 2000, "full": 2000},
    "stats_batches": {"small": 7, "full": 10},
    "stats_s3_batches": {"small": 5, "full": 7},
    "skip_batches": {"small": 40, "full": 80},
    "skip_batch_rows": {"small": 25_000, "full": 50_000},
    "skip_partitions": {"small": 5, "full": 5},
    "skip_reps": {"small": 3, "full": 5},
    "ri_table_rows": {"small": [250_000, 1_000_000, 4_000_000], "full": [250_000, 1_000_000, 4_000_000]},
    "ri_batch": {"small": 2000, "full": 2000},
    "ri_batches": {"small": 5, "full": 7},
}

SIZES = {
    "small": dict(table_rows=1_000_000, batch_rows=100_000, batches=5, iceberg_table_rows=100_000, iceberg_batch_rows=10_000,
                  iceberg_batches=2, timeline_sizes=[100, 1000], tiny_batches=10, concurrent_batches=15, kills=3,
                  micro_batches=200, stream_table_rows=1_000_000, stream_batch_rows=50_000, stream_batches=10,
                  long_run_batches=3000, long_run_clean_every=50, long_run_sample_every=10, memory_stream_batches=1000,
                  peak_table_rows=1_000_000, peak_batch_rows=1_000_000, read_table_rows=1_000_000, read_batch_rows=100_000,
                  read_upserts=6, read_reps=3, lock_acquisitions=2000, lock_failure_trials=3, **{k: v["small"] for k, v in _MOR_NBCC.items()}),
    "full": dict(table_rows=10_000_000, batch_rows=100_000, batches=10, iceberg_table_rows=1_000_000, iceberg_batch_rows=100_000,
                 iceberg_batches=2, timeline_sizes=[100, 1000, 10_000], tiny_batches=20, concurrent_batches=40, kills=5,
                 micro_batches=1000, stream_table_rows=1_000_000, stream_batch_rows=50_000, stream_batches=10,
                 long_run_batches=3000, long_run_clean_every=50, long_run_sample_every=10, memory_stream_batches=1000,
                 peak_table_rows=1_000_000, peak_batch_rows=1_000_000, read_table_rows=1_000_000, read_batch_rows=100_000,
                 read_upserts=6, read_reps=5, lock_acquisitions=4000, lock_failure_trials=5, **{k: v["full"] for k, v in _MOR_NBCC.items()}),
}


# memory_stream first: it measures the driver's RSS, best in a driver that nothing ran in before.
# The *_event sections (issue 35) run the event workload (benchmarks.data.event_*) at the same
# size settings as their string-key sections.
WORKLOADS = {"memory_stream": streaming.memory_stream, "goal_upsert": goals.upsert,
             "goal_upsert_event": goals.upsert_event, "goal_insert": goals.insert,
             "goal_import": goals.import_time, "stream": streaming.foreach_batch,
             "stream_event": streaming.foreach_batch_event, "source_read": streaming.source_read,
             "stream_write": streaming.stream_write,
             "peak_rss": streaming.peak_rss, "long_run": streaming.long_run, "long_run_event": streaming.long_run_event,
             "upsert": upsert, "append": append, "protocol": protocol, "timeline": timeline_growth,
             "concurrent": concurrent, "failure": failure_detection, "memory": memory,
             "mor_upsert_scaling": mor.upsert_scaling, "mor_foreach_batch": mor.foreach_batch, "mor_read": mor.read,
             "mor_long_run": mor.long_run, "nbcc_backfill": nbcc.backfill, "nbcc_scaling": nbcc.scaling,
             "locks": locks.storage_vs_zookeeper, "metadata_table": metadata_table.cost,
             "metadata_table_listing": metadata_table.listing, "metadata_table_long_run": metadata_table.long_run,
             "executors": executors.large_batch, "bootstrap": bootstrap.bootstrap, "s3_cost": s3_cost.cost,
             "commit_rate": commit_rate.commit_rate, "index_stats_cost": indexes.stats_cost,
             "index_filtered_read": indexes.filtered_read, "index_record": indexes.record_index}
