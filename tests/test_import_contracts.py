"""The import contracts `make lint` checks (pyproject.toml, `lint-imports`): kept by the tree as it
is, broken by each kind of violation put into a copy of it."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")

pytestmark = pytest.mark.skipif(not LINT.exists(), reason="import-linter is not installed (pip install -e '.[test]')")


def _lint(root: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([str(LINT), "--no-cache"], cwd=root, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture()
def copy(tmp_path: Path) -> Path:
    for name in ("multiwriter", "benchmarks", "tools", "testbed"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__", "results"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _append(path: Path, line: str) -> None:
    path.write_text(path.read_text() + f"\n\ndef _violation():\n    {line}\n")


def test_the_tree_keeps_every_contract():
    r = _lint(ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "5 kept, 0 broken" in r.stdout


def test_broken_by_an_upward_import_by_pyspark_outside_the_adapters_and_by_a_cycle(copy: Path):
    # the table layer reaching up into the Spark layer (what Table.to_spark once did)
    _append(copy / "multiwriter/table/table.py", "from ..spark import register  # noqa: F401")
    # pyspark in the table layer
    _append(copy / "multiwriter/table/snapshot.py", "import pyspark  # noqa: F401")
    # archive and orphans importing each other again
    _append(copy / "multiwriter/cleaner/archive.py", "from .orphans import archived_times  # noqa: F401")
    r = _lint(copy)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "1 kept, 4 broken" in out  # the write stages too: table -> spark -> write reaches back
    assert "multiwriter.table.table -> multiwriter.spark" in out
    assert "multiwriter.table.snapshot" in out and "pyspark" in out
    assert "No cycles are allowed in multiwriter.cleaner" in out and ".orphans -> .archive" in out


def test_a_module_on_no_floor_breaks_the_layers(copy: Path):
    (copy / "multiwriter/newcomer.py").write_text('"""A module nobody placed on a floor."""\n')
    r = _lint(copy)
    assert r.returncode == 1 and "multiwriter.newcomer" in r.stdout, r.stdout + r.stderr


def test_broken_by_an_arrow_back_up_between_the_repositorys_packages(copy: Path):
    # the benchmarks reaching up into the repository tooling (what importing tools.moto_s3 was),
    # and the local S3 server reaching up into the benchmarks
    _append(copy / "benchmarks/s3_cost.py", "import tools.execute_notebooks  # noqa: F401")
    _append(copy / "testbed/moto_s3.py", "from benchmarks import data  # noqa: F401")
    r = _lint(copy)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "4 kept, 1 broken" in out
    assert "benchmarks.s3_cost -> tools.execute_notebooks" in out
    assert "testbed.moto_s3 -> benchmarks.data" in out


def test_broken_by_a_table_module_below_the_format_and_a_write_stage_reaching_back(copy: Path):
    # the bytes reaching up into what they mean, and tagging reaching into the writes it feeds
    _append(copy / "multiwriter/format/log_file.py", "from ..table import merge_rule  # noqa: F401")
    _append(copy / "multiwriter/write/index.py", "from . import merge  # noqa: F401")
    r = _lint(copy)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "multiwriter.format.log_file -> multiwriter.table.merge_rule" in out
    assert "multiwriter.write.index -> multiwriter.write.merge" in out
