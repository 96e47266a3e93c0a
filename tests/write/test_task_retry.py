"""Spark task retries on the executor path: a task that fails after writing its base file is
retried under another write token, so two files exist for one (file id, instant). Before
completing, the writer deletes every file its markers name that its write stats do not, so
readers never pick the failed attempt's file by listing order."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

import multiwriter as mw
from tests.oracle import hudi_read, rows

ROOT = Path(__file__).resolve().parents[2]


def _base_files(root: str) -> list[str]:
    """Every base file under the table root, by a plain directory walk."""
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if not x.startswith(".")]
        out += [os.path.relpath(os.path.join(d, f), root) for f in files if f.endswith(".parquet")]
    return sorted(out)


def test_a_retried_task_leaves_one_base_file_per_file_group_and_instant(tmp_path, trips_table, table_path):
    hook_dir = tmp_path / "injected"
    hook_dir.mkdir()
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               MULTIWRITER_RETRY_HOOK_DIR=str(hook_dir),
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    env.pop("MULTIWRITER_FAULTS", None)
    out = subprocess.run([sys.executable, "-m", "tests.write.retry_job", table_path, "100"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=240)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    assert lines, out.stderr[-3000:]
    res = json.loads(lines[-1])
    assert res["inserts"] == [100] and res["updates"] == [0]
    failed_attempts = [p.read_text() for p in hook_dir.iterdir()]
    assert len(failed_attempts) >= len(res["instants"]), "a merge task of each write failed after its write"

    files = _base_files(table_path)
    per_group = Counter((name.rsplit("/", 1)[-1].split("_")[0], name.rsplit("_", 1)[-1]) for name in files)
    assert per_group and all(n == 1 for n in per_group.values()), f"duplicate base files: {files}"
    assert not set(failed_attempts) & set(files), "the failed attempts' files are gone"

    expected = sorted([(str(i), 1.0) for i in range(100)], key=repr)
    assert rows(hudi_read(table_path), ["id", "value"]) == expected
    assert rows(mw.Table.open(table_path).read(), ["id", "value"]) == expected
    named = {n for f in files for n in pq.read_table(os.path.join(table_path, f), columns=["_hoodie_file_name"])
             .column(0).to_pylist()}
    assert named <= {f.rsplit("/", 1)[-1] for f in files}, "every row names a file that exists"
