"""A large FULL_RECORD bootstrap on a standalone Spark cluster with a small driver (issue 61).

Per key shape (string keys ``k000000001``, int64 keys), a fresh process writes a Parquet source
of ``bootstrap_rows`` rows (hive-style ``date=...`` folders, ``bootstrap_partitions`` of them,
``bootstrap_files_per_partition`` files each, the date only in the folder name), starts a
standalone master and one worker on 127.0.0.1 (``tests/write/test_standalone_cluster.py``),
and runs ``mw.bootstrap(..., spark=spark)`` from a SparkSession on that master with
``spark.driver.memory=bootstrap_driver_memory``. It reports the seconds, the files written,
and the driver's peak RSS during the bootstrap: its Python process and its JVM, each sampled
every 20 ms. A small bootstrap runs first (the JVM's warm-up is not the measured one's).
The table is checked afterwards: its row count and ``sum(ts)`` (each source file has its own
``ts``) read by multiwriter and by hudi-rs equal the source's, read by pyarrow.

    python -m benchmarks.bootstrap child KEYS ROWS PARTITIONS FILES_PER_PARTITION DRIVER_MEMORY WORK OUT
"""
from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

from .executors import _Peak, run_child

KEYS = ("string", "int64")


def bootstrap(size: dict, work: Path, spark) -> dict:
    """The section: one child per key shape."""
    del spark  # every measurement runs in a child of its own, on a cluster of its own
    rows, parts, files, mem = (size["bootstrap_rows"], size["bootstrap_partitions"],
                               size["bootstrap_files_per_partition"], size["bootstrap_driver_memory"])
    out: dict = {"rows": rows, "partitions": parts, "files_per_partition": files, "driver_memory": mem, "keys": {}}
    for keys in size.get("bootstrap_keys", KEYS):
        out["keys"][keys] = run_child("benchmarks.bootstrap", [keys, str(rows), str(parts), str(files), mem],
                                      work / f"bootstrap-{keys}")
    return out


def days(n: int) -> list[str]:
    return [(dt.date(2024, 1, 1) + dt.timedelta(days=i)).isoformat() for i in range(n)]


def write_source(root: Path, keys: str, rows: int, partitions: int, files_per_partition: int) -> int:
    """The source: ``rows`` rows over ``partitions`` hive-style folders of ``files_per_partition``
    files each, ids contiguous per file; file ``i`` (in write order) has ``ts = i + 1``. The date
    column is left out of the files (the folder names it). Returns the number of files."""
    import pyarrow.parquet as pq

    from . import data

    make = data.rows if keys == "string" else data.event_rows
    n_files = partitions * files_per_partition
    bounds = np.linspace(0, rows, n_files + 1).astype(np.int64)
    names = days(partitions)
    for i in range(n_files):
        day = names[i // files_per_partition]
        ids = np.arange(bounds[i], bounds[i + 1], dtype=np.int64)
        t = make(ids, np.array([day] * len(ids)), i + 1, seed=i).drop_columns(["date"])
        folder = root / f"date={day}"
        folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(t, folder / f"part-{i % files_per_partition:04d}.parquet")
    return n_files


def _sums(batches) -> tuple[int, int]:
    """(rows, sum of ts) over record batches, one at a time."""
    import pyarrow.compute as pc

    n = total = 0
    for b in batches:
        n += b.num_rows
        total += pc.sum(b.column(b.schema.get_field_index("ts"))).as_py() or 0
    return n, total


def source_sums(root: Path) -> tuple[int, int]:
    import pyarrow.dataset as ds

    return _sums(ds.dataset(str(root), format="parquet", partitioning="hive").to_batches(columns=["ts"]))


def hudi_rs_sums(path: str) -> tuple[int, int]:
    from hudi import HudiTableBuilder

    return _sums(HudiTableBuilder.from_base_uri(path).build().read())


def _session(master: str, driver_memory: str):
    from pyspark.sql import SparkSession

    s = (SparkSession.builder.master(master).appName("multiwriter-bench-bootstrap")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.shuffle.partitions", "8").config("spark.driver.memory", driver_memory).getOrCreate())
    s.sparkContext.setLogLevel("ERROR")
    return s


def child(keys: str, rows: int, partitions: int, files_per_partition: int, driver_memory: str, work: str, out: str) -> None:
    """One measurement in this (fresh) process: source, cluster, warm-up, bootstrap, checks."""
    import gc

    from tests.write.test_standalone_cluster import cluster_env, start_standalone_cluster

    import multiwriter as mw

    home = Path(work)
    for d in ("source", "warm-source", "table", "warm-table", "cluster"):
        shutil.rmtree(home / d, ignore_errors=True)
    (home / "cluster").mkdir(parents=True)
    t0 = time.perf_counter()
    n_files = write_source(home / "source", keys, rows, partitions, files_per_partition)
    write_source(home / "warm-source", keys, 1000, 2, 1)
    want = source_sums(home / "source")
    source_s = time.perf_counter() - t0
    env = cluster_env(home / "cluster")
    os.environ.update(env)  # the driver JVM and its executors import the package under test
    common = dict(record_key="id", partition_by=["date"], ordering_field="ts", lock=mw.InProcessLock())
    with start_standalone_cluster(home / "cluster", env) as master:
        spark = _session(master, driver_memory)
        sc = spark.sparkContext
        jvm_pid = sc._gateway.proc.pid
        mw.bootstrap(str(home / "warm-source"), str(home / "warm-table"), name="warm", spark=spark, **common)
        executors = sc._jsc.sc().getExecutorMemoryStatus().size() - 1  # without the driver's block manager
        heap_max = sc._jvm.java.lang.Runtime.getRuntime().maxMemory()
        gc.collect()
        with _Peak() as py, _Peak(jvm_pid) as jvm:
            t1 = time.perf_counter()
            result = mw.bootstrap(str(home / "source"), str(home / "table"), name="bench", spark=spark, **common)
            seconds = time.perf_counter() - t1
        spark.stop()
    table = str(home / "table")
    ours = _sums(mw.Table.open(table).read(columns=["ts"]).to_batches())
    theirs = hudi_rs_sums(table)
    if not want == ours == theirs:
        raise AssertionError(f"(rows, sum ts): source {want}, multiwriter {ours}, hudi-rs {theirs}")
    Path(out).write_text(json.dumps({
        "seconds": seconds, "rows": result.num_inserts, "files_written": result.files_written, "source_files": n_files,
        "source_s": source_s, "executors": executors, "driver_heap_max_mib": heap_max / 2**20,
        "python_rss_base_mib": py.base / 2**20, "python_rss_peak_mib": py.peak / 2**20,
        "jvm_rss_base_mib": jvm.base / 2**20, "jvm_rss_peak_mib": jvm.peak / 2**20,
        "checked": {"rows": want[0], "sum_ts": want[1], "multiwriter": list(ours), "hudi_rs": list(theirs)}}))


LABELS = {"string": "string keys", "int64": "int64 keys"}


def render(r: dict) -> list[str]:
    lines = [f"## A FULL_RECORD bootstrap on a standalone Spark cluster with a {r['driver_memory']} driver (issue 61: "
             f"{r['rows']:,} rows from {r['partitions'] * r['files_per_partition']} Parquet files in {r['partitions']} "
             f"hive-style partitions; each key shape in a fresh process)", "",
             "`mw.bootstrap(source, table, spark=spark)` with a SparkSession on a standalone master and one single-core "
             "worker on 127.0.0.1 (1 GB executor), `spark.driver.memory` as named. Driver peak RSS: the driver's Python "
             "process and its JVM during the bootstrap, sampled every 20 ms. Checked: rows and `sum(ts)` read by "
             "multiwriter and by hudi-rs equal the source's (pyarrow).", "",
             "| keys | rows | seconds | rows/s | files written | driver JVM max heap MiB | driver JVM peak RSS MiB (before) | "
             "driver Python peak RSS MiB (before) | checked |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | :---: |"]
    for keys, v in r["keys"].items():
        label = LABELS.get(keys, keys)
        if v.get("failed"):
            lines.append(f"| {label} | {r['rows']:,} | failed | | | | | | |")
            continue
        lines.append(f"| {label} | {v['rows']:,} | {v['seconds']:.1f} | {v['rows'] / v['seconds']:,.0f} | "
                     f"{v['files_written']} | {v['driver_heap_max_mib']:.0f} | {v['jvm_rss_peak_mib']:.0f} ({v['jvm_rss_base_mib']:.0f}) | "
                     f"{v['python_rss_peak_mib']:.0f} ({v['python_rss_base_mib']:.0f}) | yes |")
    return lines + [""]


if __name__ == "__main__":
    if len(sys.argv) == 9 and sys.argv[1] == "child":
        a = sys.argv[2:]
        child(a[0], int(a[1]), int(a[2]), int(a[3]), a[4], a[5], a[6])
        sys.exit(0)
    sys.exit(__doc__)
