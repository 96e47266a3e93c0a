"""``python -m benchmarks.run --size small|full [--only long_run,stream,...] [--note TEXT]``.

Runs the sections in one process on one machine, writes ``benchmarks/results/<timestamp>.json``
(machine, versions, raw timings of this run's sections), prints the tables and updates
``benchmarks/RESULTS.md``: the block of each section run, and its rows of the goals table, are
replaced; every other section's block is left as it was (``benchmarks.results_md``). So the
file holds the latest figure of each section, never a history of runs.
Ratios taken in one run are what to compare: absolute times drift on shared machines.

``--resume PATH`` continues a run that stopped (its finished sections are kept from the partial
JSON written after each one). ``--list`` names the sections; ``--set key=value`` overrides one size setting (for a quick try
at a smaller scale); ``--long-run-batches N`` (or ``MW_BENCH_LONG_RUN_BATCHES``) sets the
long-run length; ``--note`` says under what conditions the figures were taken (``busy machine:
load average 5-27``), shown in each block.
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

from . import goals, results_md
from .report import render_section
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


def goal_rows(run: dict) -> dict[str, str]:
    """The goals table's rows of the sections this run measured, by goal."""
    taken = {k: run.get("section_when", {}).get(k, run["when"])[:10] for k in run["results"]}
    sections = {goal: section for goal, section, _ in goals.GOALS}
    return {goal: results_md.goal_row(goal, sections.get(goal, ""), target, value, taken.get(sections.get(goal), ""),
                                      goal in goals.REPLACED)
            for goal, value, target in goals.ratios(run["results"])}


def write_results_md(run: dict, path: Path, plots_dir: Path) -> str:
    """Update ``path`` with this run's sections (their blocks and goal rows); returns the blocks."""
    blocks = {name: render_section(name, run, plots_dir) for name in run["results"]}
    old = path.read_text() if path.exists() else None
    _, rows, _ = results_md.parse(old) if old else ("", [], {})
    rows = results_md.merge_goal_rows(rows, goal_rows(run), goals.GOALS, set(run["results"]))
    path.write_text(results_md.update(old, WORKLOADS, blocks, rows))
    return "\n".join(blocks.values())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="benchmarks.run")
    p.add_argument("--size", choices=sorted(SIZES), default="small")
    p.add_argument("--only", default=",".join(WORKLOADS), help="comma-separated sections (see --list)")
    p.add_argument("--list", action="store_true", help="print the section names and exit")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override one size setting")
    p.add_argument("--long-run-batches", type=int, default=None)
    p.add_argument("--note", default="", help="the conditions the figures were taken under (shown in each block)")
    p.add_argument("--out", type=Path, default=None,
                   help="write the JSON, plots and RESULTS.md there instead of benchmarks/ (a trial run)")
    p.add_argument("--resume", type=Path, default=None,
                   help="a run's partial JSON: keep its finished sections and run the others")
    a = p.parse_args(argv)
    if a.list:
        print("\n".join(WORKLOADS))
        return 0
    names = [n for n in a.only.split(",") if n]
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        raise SystemExit(f"unknown sections {unknown}; known: {', '.join(WORKLOADS)}")
    size = _sizes(a)
    home = a.out or HERE
    results_dir = home / "results"
    results_dir.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    partial = a.resume or results_dir / f"{stamp}.partial.json"
    results, when = _resumed(a.resume, a.size) if a.resume else ({}, {})
    spark = _spark()
    with tempfile.TemporaryDirectory(prefix="mw-bench-") as d:
        for name in names:
            if name in results:
                print(f"== {name}: kept from {a.resume}", flush=True)
                continue
            t0 = time.perf_counter()
            print(f"== {name} ...", flush=True)
            when[name] = dt.datetime.now(dt.timezone.utc).isoformat()
            results[name] = WORKLOADS[name](size, Path(d) / name, spark)
            print(f"   done in {time.perf_counter() - t0:.0f}s", flush=True)
            # A section that fails later must not cost the ones before it: --resume picks up here.
            partial.write_text(json.dumps({"size": a.size, "results": results, "section_when": when}, indent=1))
    spark.stop()
    run = {
        "when": dt.datetime.now(dt.timezone.utc).isoformat(), "size": a.size, "sizes": size,
        "machine": {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count()},
        "versions": _versions(), "results": results, "section_when": when, **({"note": a.note} if a.note else {}),
    }
    out = results_dir / f"{stamp}.json"
    out.write_text(json.dumps(run, indent=1))
    run["raw"] = out.name
    print(write_results_md(run, home / "RESULTS.md", results_dir))
    print("Goals (ratios measured side by side):\n" + goals.ratio_table(run["results"]))
    print(f"raw results: {out}")
    partial.unlink(missing_ok=True)
    return 0


def _resumed(path: Path, size: str) -> tuple[dict, dict]:
    """The finished sections of an interrupted run, which must have used the same sizes, and
    when each was taken (a finished run's JSON also resumes: drop the sections to take again)."""
    saved = json.loads(path.read_text())
    if saved.get("size") != size:
        raise SystemExit(f"--resume {path}: that run used --size {saved.get('size')}, this one {size}")
    results = dict(saved["results"])
    when = {k: saved.get("section_when", {}).get(k, saved.get("when", "")) for k in results}
    return results, when


if __name__ == "__main__":
    sys.exit(main())
