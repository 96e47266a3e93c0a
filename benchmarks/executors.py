"""A large upsert on Spark executors against the driver path (issue 50): the driver's Python RSS
growth and the time of one batch, each measured in a fresh process (so nothing that ran
before is in its memory), and a much larger batch with a small driver JVM (``exec_big_driver_memory``).

The table (``exec_table_rows``, driver path) is built in the same child; the batch
(:func:`data.wide_upsert_batch`: 10% updates over every partition, 90% new keys) reaches the
executor path as ``spark.createDataFrame`` of the Arrow table, which Spark cannot size (so it
goes to tasks by table partition without a one-task attempt), and the driver path as the Arrow
table.
The much larger batch is read from Parquet files (``spark.read.parquet``): a batch built in the
driver would not fit a 1 GB driver JVM whatever the write does with it. Each child checks the
table's row count afterwards; a Spark child writes a small batch first (the JVM's warm-up is
not the write's).

    python -m benchmarks.executors child PATH ROWS TABLE_ROWS DRIVER_MEMORY WORK OUT   (one measurement)

PATH: ``driver``, ``spark`` (createDataFrame) or ``spark-parquet``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def large_batch(size: dict, work: Path, spark) -> dict:
    """The section: driver path and executor path on ``exec_batch_rows``, then the executor path
    on ``exec_big_batch_rows`` with ``spark.driver.memory=exec_big_driver_memory``."""
    del spark  # every measurement runs in a child of its own
    table, rows = size["exec_table_rows"], size["exec_batch_rows"]
    out: dict = {"table_rows": table, "batch_rows": rows}
    for path in ("driver", "spark"):
        out[path] = _child(path, rows, table, "4g", work / f"exec-{path}")
    out["big"] = _child("spark-parquet", size["exec_big_batch_rows"], table, size["exec_big_driver_memory"], work / "exec-big")
    out["big"]["driver_memory"] = size["exec_big_driver_memory"]
    out["big_batch_rows"] = size["exec_big_batch_rows"]
    out["time_ratio"] = out["spark"]["seconds"] / out["driver"]["seconds"]
    return out


def _child(path: str, rows: int, table_rows: int, driver_memory: str, work: Path) -> dict:
    return run_child("benchmarks.executors", [path, str(rows), str(table_rows), driver_memory], work)


def run_child(module: str, args: list[str], work: Path) -> dict:
    """``python -m MODULE child ARGS... WORK OUT`` in a fresh process: the JSON it wrote to OUT,
    or ``failed`` with the tail of its stderr."""
    work.mkdir(parents=True, exist_ok=True)
    res = work / "result.json"
    cmd = [sys.executable, "-m", module, "child", *args, str(work), str(res)]
    done = subprocess.run(cmd, cwd=ROOT, env=dict(os.environ), capture_output=True, text=True)
    if done.returncode != 0:
        return {"failed": True, "returncode": done.returncode, "stderr_tail": done.stderr[-2000:]}
    return json.loads(res.read_text())


class _Peak:
    """This process's RSS (or process ``pid``'s), sampled every 20 ms on a thread: the most seen
    since :meth:`start`."""

    def __init__(self, pid: int | None = None) -> None:
        import psutil

        self.proc = psutil.Process(pid)
        self.base = self.peak = self.proc.memory_info().rss
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(0.02):
            self.peak = max(self.peak, self.proc.memory_info().rss)

    def __enter__(self) -> _Peak:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        self.peak = max(self.peak, self.proc.memory_info().rss)


def child(path: str, rows: int, table_rows: int, driver_memory: str, work: str, out: str) -> None:
    """One measurement in this (fresh) process: build the table, write the batch, check it."""
    import gc
    import shutil

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    import multiwriter as mw
    from benchmarks import data

    target = os.path.join(work, "table")
    shutil.rmtree(target, ignore_errors=True)
    mw.Table.create(target, name="bench", schema=data.SCHEMA, record_key="id", partition_by=["date"], ordering_field="ts")
    cfg = mw.WriterConfig(writer_id="bench", executor="driver", lock=mw.InProcessLock())
    mw.write(data.initial(table_rows), target, cfg)
    batch = data.wide_upsert_batch(table_rows, rows, 0)
    new = rows - int(rows * 0.1)
    spark = None
    if path.startswith("spark"):
        from pyspark.sql import SparkSession

        spark = (SparkSession.builder.master("local[2]").appName("multiwriter-bench-executors")
                 .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
                 .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", "4").config("spark.driver.memory", driver_memory).getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        if path == "spark-parquet":
            import pyarrow.parquet as pq

            src = os.path.join(work, "batch")
            shutil.rmtree(src, ignore_errors=True)
            os.makedirs(src)
            step = 1_000_000
            for i in range(0, rows, step):
                pq.write_table(batch.slice(i, step), os.path.join(src, f"part-{i // step:04d}.parquet"))
            del batch
            payload = spark.read.parquet(src)
        else:
            payload = spark.createDataFrame(batch)
            del batch
        cfg = mw.WriterConfig(writer_id="bench", executor="spark", lock=mw.InProcessLock())
    else:
        payload = batch
    if spark is not None:  # a warm session, as a long-lived driver's: Spark's first jobs pay its JVM's warm-up
        warm = os.path.join(work, "warm-up")
        shutil.rmtree(warm, ignore_errors=True)
        mw.Table.create(warm, name="warm", schema=data.SCHEMA, record_key="id", partition_by=["date"], ordering_field="ts")
        mw.write(spark.createDataFrame(data.initial(1000)), warm, cfg)
    gc.collect()
    with _Peak() as peak:
        t0 = time.perf_counter()
        mw.write(payload, target, cfg)
        seconds = time.perf_counter() - t0
    got = mw.Table.open(target).read(columns=["id"]).num_rows
    if spark is not None:
        spark.stop()
    if got != table_rows + new:
        raise AssertionError(f"{got} rows after the upsert, expected {table_rows + new}")
    Path(out).write_text(json.dumps({"seconds": seconds, "rss_base_mib": peak.base / 2**20,
                                     "rss_growth_mib": (peak.peak - peak.base) / 2**20, "rows_after": got}))


def render(r: dict) -> list[str]:
    lines = [f"## A large upsert on Spark executors (issue 50: {r['batch_rows']:,}-row batch, 10% updates over every "
             f"partition, into {r['table_rows']:,} rows; each run in a fresh process, 2 cores)", "",
             "Driver RSS growth: the driver's Python process, its peak during the write over its size just before "
             "(the batch already built; the JVM's memory is not in it).", "",
             "| path | batch rows | driver JVM memory | seconds | driver RSS growth MiB |", "| --- | ---: | --- | ---: | ---: |"]
    for name, label, rows, mem in (("driver", "driver path", r["batch_rows"], "-"), ("spark", "executors", r["batch_rows"], "4g"),
                                   ("big", "executors (Parquet input)", r["big_batch_rows"], r["big"].get("driver_memory", "?"))):
        v = r[name]
        n = f"{rows:,}"
        if v.get("failed"):
            lines.append(f"| {label} | {n} | {mem} | failed | - |")
        else:
            lines.append(f"| {label} | {n} | {mem} | {v['seconds']:.1f} | {v['rss_growth_mib']:.0f} |")
    if "time_ratio" in r:
        lines += ["", f"Executors / driver path time: {r['time_ratio']:.2f}x (goal <= 1.2x; driver RSS growth goal <= 200 MB)."]
    return lines + [""]


if __name__ == "__main__":
    if len(sys.argv) == 8 and sys.argv[1] == "child":
        a = sys.argv[2:]
        child(a[0], int(a[1]), int(a[2]), a[3], a[4], a[5])
        sys.exit(0)
    sys.exit(__doc__)
