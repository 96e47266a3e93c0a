"""``python -m benchmarks.run --size small|full [--only upsert,append,...]``.

Runs the workloads in one process on one machine, writes ``benchmarks/results/<timestamp>.json``
(machine, versions, raw timings), prints a table and rewrites ``benchmarks/RESULTS.md``.
Ratios taken in one run are what to compare: absolute times drift on shared machines.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

from . import goals
from .report import render
from .workloads import SIZES, WORKLOADS

HERE = Path(__file__).resolve().parent


def _spark():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    s = (SparkSession.builder.master("local[2]").appName("multiwriter-bench")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.shuffle.partitions", "4").config("spark.driver.memory", "4g").getOrCreate())
    s.sparkContext.setLogLevel("ERROR")
    return s


def _versions() -> dict[str, str]:
    out = {}
    for pkg in ("multiwriter", "pyarrow", "pyspark", "deltalake", "pyiceberg", "hudi", "kazoo"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "missing"
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="benchmarks.run")
    p.add_argument("--size", choices=sorted(SIZES), default="small")
    p.add_argument("--only", default=",".join(WORKLOADS))
    a = p.parse_args(argv)
    size = SIZES[a.size]
    spark = _spark()
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="mw-bench-") as d:
        for name in a.only.split(","):
            t0 = time.perf_counter()
            print(f"== {name} ...", flush=True)
            results[name] = WORKLOADS[name](size, Path(d) / name, spark)
            print(f"   done in {time.perf_counter() - t0:.0f}s", flush=True)
    spark.stop()
    run = {
        "when": dt.datetime.now(dt.timezone.utc).isoformat(), "size": a.size, "sizes": size,
        "machine": {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count()},
        "versions": _versions(), "results": results,
    }
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = HERE / "results" / f"{stamp}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(run, indent=1))
    text = render(run, plots_dir=HERE / "results")
    print(text)
    print("Goals (ratios measured side by side in this run):\n" + goals.ratio_table(results))
    (HERE / "RESULTS.md").write_text(text)
    print(f"raw results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
