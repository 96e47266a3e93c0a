"""Run one benchmark function in a fresh process with its own SparkSession.

For figures that depend on how the process was started (its environment, e.g. the allocator
pyarrow uses, which is chosen when pyarrow first allocates) and on nothing that ran in it
before: a section measuring a long-lived driver's memory runs in a driver started the way
docs/reliability.md ("Long-running drivers") says to start one.

    python -m benchmarks.child MODULE.FUNCTION SIZES_JSON WORK_DIR OUT_JSON
"""
from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_in_child(function: str, size: dict, work: Path, env: dict[str, str]) -> dict:
    """``function`` ("benchmarks.module.name") run in a child process with ``env`` added."""
    work.mkdir(parents=True, exist_ok=True)
    out = work / "child-result.json"
    subprocess.run([sys.executable, "-m", "benchmarks.child", function, json.dumps(size), str(work), str(out)],
                   check=True, cwd=ROOT, env={**os.environ, **env})
    return json.loads(out.read_text())


def main(argv: list[str]) -> int:
    function, size, work, out = argv
    from .session import spark_session

    module, name = function.rsplit(".", 1)
    fn = getattr(importlib.import_module(module), name)
    spark = spark_session()
    try:
        result = fn(json.loads(size), Path(work), spark)
    finally:
        spark.stop()
    Path(out).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
