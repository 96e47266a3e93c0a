"""The notebooks execute without error (so they never rot); outputs stay stripped in git."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


def test_notebooks_exist():
    assert [p.name for p in NOTEBOOKS] == ["01_two_writers.ipynb", "02_failed_writer_and_cleaner.ipynb", "03_metrics.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_outputs_are_stripped(path):
    nb = json.loads(path.read_text())
    assert all(not c.get("outputs") and not c.get("execution_count") for c in nb["cells"] if c["cell_type"] == "code")


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes(path, tmp_path):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    client = NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
