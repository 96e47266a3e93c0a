"""Measure the Spark executor path of an upsert against the driver path and plain Spark.

Builds a table (default 2M rows over 30 day partitions) with the driver path once, then times
the same upsert batch (default 400k rows, 10% updates) through ``executor="spark"``,
``executor="driver"`` and a plain Spark anti-join-and-rewrite (read parquet, left_anti join on
the key, union the batch, write parquet), each on a fresh copy, interleaved in one process so a
busy machine slows all three alike. Prints medians and ratios; checks each result's row count.

    python -m tools.measure_executor [--rows 2000000] [--batch 400000] [--reps 3]

Not part of the test suite (it takes minutes).
"""
from __future__ import annotations

import argparse
import logging
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

import multiwriter as mw
from benchmarks import data


def spark_session(cores: int):
    from pyspark.sql import SparkSession

    s = (SparkSession.builder.master(f"local[{cores}]").appName("measure-executor")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.shuffle.partitions", "4").config("spark.default.parallelism", str(cores))
         .config("spark.sql.execution.arrow.pyspark.enabled", "true")
         .config("spark.sql.session.timeZone", "UTC").config("spark.driver.memory", "4g").getOrCreate())
    s.sparkContext.setLogLevel("ERROR")
    return s


def config(executor: str) -> mw.WriterConfig:
    return mw.WriterConfig(writer_id=f"measure-{executor}", executor=executor, lock=mw.InProcessLock(),
                           driver_max_rows=10_000_000)


def build(root: Path, n: int) -> tuple[str, str]:
    """The Hudi table (driver path) and a plain parquet copy of the same rows (reused when
    ``root`` has them from an earlier run of the same size)."""
    table = str(root / "master-table")
    plain = root / "master-plain"
    done = root / f"built-{n}"
    if done.exists():
        return table, str(plain)
    shutil.rmtree(table, ignore_errors=True)
    shutil.rmtree(plain, ignore_errors=True)
    init = data.initial(n)
    mw.Table.create(table, name="measure", schema=data.SCHEMA, record_key="id", partition_by=["date"], ordering_field="ts")
    mw.write(init, table, config("driver"))
    pq.write_to_dataset(init, str(plain), partition_cols=["date"])
    done.touch()
    return table, str(plain)


def run_writer(spark, master: str, work: Path, batch, executor: str) -> tuple[float, int, dict]:
    path = str(work / f"mw-{executor}")
    shutil.copytree(master, path)
    df = spark.createDataFrame(batch).cache()
    df.count()  # the batch is an input here: materialized before the clock starts
    t0 = time.perf_counter()
    r = mw.write(df, path, config(executor))
    elapsed = time.perf_counter() - t0
    df.unpersist()
    rows = mw.Table.open(path).read(columns=["id"]).num_rows
    shutil.rmtree(path)
    return elapsed, rows, dict(r.phases)


def run_plain(spark, master: str, work: Path, batch) -> tuple[float, int, dict]:
    src = work / "plain-in"
    shutil.copytree(master, src)
    out = str(work / "plain-out")
    df = spark.createDataFrame(batch).cache()
    df.count()
    t0 = time.perf_counter()
    base = spark.read.parquet(str(src))
    kept = base.join(df.select("id"), on="id", how="left_anti")
    kept.unionByName(df).write.partitionBy("date").parquet(out)
    elapsed = time.perf_counter() - t0
    df.unpersist()
    rows = pq.read_table(out, columns=["id"]).num_rows
    shutil.rmtree(src)
    shutil.rmtree(out)
    return elapsed, rows, {}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--batch", type=int, default=400_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--spread", action="store_true", help="spread every executor-path merge by an exchange")
    ap.add_argument("--keep", help="a directory to keep the built table in (and reuse it from)")
    ap.add_argument("--only", default="spark,driver,plain", help="comma-separated subset of spark,driver,plain")
    args = ap.parse_args()
    if args.spread:
        from multiwriter.write import spark as spark_path

        spark_path.ONE_TASK_MAX_ROWS = 0
    logging.basicConfig(format="    %(message)s")
    logging.getLogger("multiwriter.write.spark").setLevel(logging.DEBUG)  # the executor path's phase times
    spark = spark_session(args.cores)
    batch = data.upsert_batch(args.rows, args.batch, 0)
    n_upd = int(args.batch * 0.1)
    expected = args.rows + args.batch - n_upd
    kinds = args.only.split(",")
    times: dict[str, list[float]] = {k: [] for k in kinds}
    with tempfile.TemporaryDirectory(prefix="measure-executor-") as d:
        root = Path(d)
        t0 = time.perf_counter()
        table, plain = build(Path(args.keep) if args.keep else root, args.rows)
        print(f"built {args.rows:,} rows in {time.perf_counter() - t0:.1f}s; batch {args.batch:,} rows, {n_upd:,} updates")
        warm = root / "warm"
        warm.mkdir()
        run_writer(spark, table, warm, data.upsert_batch(args.rows, 1000, 9), "spark")  # JIT, Python workers
        for rep in range(args.reps):
            for kind in kinds:
                work = root / f"{kind}-{rep}"
                work.mkdir()
                if kind == "plain":
                    s, rows, phases = run_plain(spark, plain, work, batch)
                else:
                    s, rows, phases = run_writer(spark, table, work, batch, kind)
                ok = "ok" if rows == expected else f"WRONG (expected {expected:,})"
                detail = " ".join(f"{k}={v:.2f}" for k, v in phases.items())
                print(f"rep {rep} {kind:6s} {s:6.2f}s rows={rows:,} {ok} {detail}", flush=True)
                times[kind].append(s)
    med = {k: statistics.median(v) for k, v in times.items()}
    print("medians: " + ", ".join(f"{k}={v:.2f}s" for k, v in med.items()))
    for other, label in (("driver", "executor/driver"), ("plain", "executor/plain-spark")):
        if "spark" in med and other in med:
            paired = [a / b for a, b in zip(times["spark"], times[other], strict=True)]
            print(f"{label} = {med['spark'] / med[other]:.2f} (of medians); per repetition "
                  + ", ".join(f"{x:.2f}" for x in paired) + f"; median {statistics.median(paired):.2f}")
    spark.stop()


if __name__ == "__main__":
    main()
