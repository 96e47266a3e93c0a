"""Execute the notebooks and publish the executed copies, outputs and plots included.

``make notebooks`` runs this, so a person browsing ``docs/notebooks/`` sees every picture
without running anything; ``tests/test_notebooks.py`` executes the notebooks the same way.

The kernel gets the inline matplotlib backend explicitly: a caller's ``MPLBACKEND=Agg`` (common
on headless machines) would otherwise reach the kernel, and ``plt.show()`` would draw nothing.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ROOT / "notebooks"
PUBLISHED = ROOT / "docs" / "notebooks"
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"


def sources() -> list[Path]:
    return sorted(SOURCES.glob("*.ipynb"))


def kernel_env() -> dict[str, str]:
    env = dict(os.environ, MPLBACKEND=INLINE_BACKEND)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return env


def execute(path: Path, cwd: Path, timeout_s: int = 300) -> nbformat.NotebookNode:
    """Run every cell of ``path`` in a fresh kernel (working directory ``cwd``); return the
    notebook with its outputs. Raises ``nbclient.exceptions.CellExecutionError`` on a failing cell."""
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout_s, kernel_name="python3", record_timing=False,
                            resources={"metadata": {"path": str(cwd)}})
    client.execute(env=kernel_env())
    return nb


def publish(paths: list[Path], out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for path in paths:
        with tempfile.TemporaryDirectory(prefix="mw-nb-run-") as cwd:
            print(f"executing {path} ...", flush=True)
            nb = execute(path, Path(cwd))
        nbformat.write(nb, out_dir / path.name)
        print(f"  wrote {out_dir / path.name}", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("notebooks", nargs="*", type=Path, help="notebooks to run (default: all of notebooks/)")
    p.add_argument("--out", type=Path, default=PUBLISHED, help="directory for the executed copies")
    args = p.parse_args(argv)
    publish([n.resolve() for n in args.notebooks] or sources(), args.out.resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
