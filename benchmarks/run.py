"""``python -m benchmarks.run --size small|full [--only long_run,stream,...] [--merge]``.

Runs the sections in one process on one machine, writes ``benchmarks/results/<timestamp>.json``
(machine, versions, raw timings), prints a table and rewrites ``benchmarks/RESULTS.md``.
Ratios taken in one run are what to compare: absolute times drift on shared machines.

``--list`` names the sections; ``--set key=value`` overrides one size setting (for a quick try
at a smaller scale); ``--long-run-batches N`` (or ``MW_BENCH_LONG_RUN_BATCHES``) sets the
long-run length; ``--merge`` adds this run's sections to the newest results file of the same
size, so sections run one at a time still give one RESULTS.md.
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
from .session import spark_session as _spark
from .workloads import SIZES, WORKLOADS

HERE = Path(__file__).resolve().parent


def _versions() -> dict[str, str]:
    out = {}
    for pkg in ("multiwriter", "pyarrow", "pyspark", "deltalake", "pyiceberg", "hudi", "kazoo"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "missing"
    return out


def _sizes(a: argparse.Namespace) -> dict:
    size = dict(SIZES[a.size])
    if a.long_run_batches is not None:
        size["long_run_batches"] = a.long_run_batches
    elif os.environ.get("MW_BENCH_LONG_RUN_BATCHES"):
        size["long_run_batches"] = int(os.environ["MW_BENCH_LONG_RUN_BATCHES"])
    for kv in a.set:
        key, _, value = kv.partition("=")
        if key not in size:
            raise SystemExit(f"--set {kv}: unknown size setting {key!r}; known: {', '.join(sorted(size))}")
        size[key] = json.loads(value)
    return size


def _merge(run: dict, results_dir: Path) -> dict:
    """This run's sections on top of the newest earlier results file of the same size."""
    older = sorted(p for p in results_dir.glob("*.json") if json.loads(p.read_text()).get("size") == run["size"])
    if not older:
        return run
    base = json.loads(older[-1].read_text())
    when = base.get("section_when") or {k: base["when"] for k in base["results"]}
    when.update({k: run["when"] for k in run["results"]})
    base["results"].update(run["results"])
    base["sizes"].update(run["sizes"])
    return {**run, "results": base["results"], "sizes": base["sizes"], "section_when": when}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="benchmarks.run")
    p.add_argument("--size", choices=sorted(SIZES), default="small")
    p.add_argument("--only", default=",".join(WORKLOADS), help="comma-separated sections (see --list)")
    p.add_argument("--list", action="store_true", help="print the section names and exit")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override one size setting")
    p.add_argument("--long-run-batches", type=int, default=None)
    p.add_argument("--merge", action="store_true", help="merge into the newest results file of the same size")
    p.add_argument("--out", type=Path, default=None,
                   help="write the JSON, plots and RESULTS.md there instead of benchmarks/ (a trial run)")
    a = p.parse_args(argv)
    if a.list:
        print("\n".join(WORKLOADS))
        return 0
    names = [n for n in a.only.split(",") if n]
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        raise SystemExit(f"unknown sections {unknown}; known: {', '.join(WORKLOADS)}")
    size = _sizes(a)
    spark = _spark()
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="mw-bench-") as d:
        for name in names:
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
    home = a.out or HERE
    results_dir = home / "results"
    results_dir.mkdir(parents=True, exist_ok=True)
    if a.merge:
        run = _merge(run, results_dir)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = results_dir / f"{stamp}.json"
    out.write_text(json.dumps(run, indent=1))
    text = render(run, plots_dir=results_dir)
    print(text)
    print("Goals (ratios measured side by side):\n" + goals.ratio_table(run["results"]))
    (home / "RESULTS.md").write_text(text)
    print(f"raw results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
