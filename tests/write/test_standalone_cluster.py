"""The executor path on a multi-process Spark: a standalone master and worker on 127.0.0.1."""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

import multiwriter as mw
from multiwriter.zookeeper_local import free_port
from tests.oracle import hudi_read, rows

ROOT = Path(__file__).resolve().parents[2]


def spark_class() -> str:
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    return str(Path(list(spec.submodule_search_locations)[0]) / "bin" / "spark-class")


def wait_http(url: str, text: str, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if text in urllib.request.urlopen(url, timeout=2).read().decode(errors="replace"):
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{url} never showed {text!r}")


def cluster_env(tmp_path: Path) -> dict[str, str]:
    """Environment of the cluster processes and the job's driver."""
    return dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
                SPARK_LOG_DIR=str(tmp_path / "logs"), SPARK_WORKER_DIR=str(tmp_path / "work"),
                # executors import the package under test, not whichever copy the interpreter has installed
                PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


@contextlib.contextmanager
def start_standalone_cluster(tmp_path: Path, env: dict[str, str]) -> Iterator[str]:
    """A master and one single-core worker; yields the master URL, stops both on exit (the
    session fixture ``standalone_cluster`` in tests/conftest.py)."""
    port, ui, wui = free_port(), free_port(), free_port()
    master_url = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen] = []
    with open(tmp_path / "cluster.log", "w") as logs:
        try:
            procs.append(subprocess.Popen([spark_class(), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                           "--port", str(port), "--webui-port", str(ui)], env=env, stdout=logs, stderr=logs))
            wait_http(f"http://127.0.0.1:{ui}/json/", '"status" : "ALIVE"')
            procs.append(subprocess.Popen([spark_class(), "org.apache.spark.deploy.worker.Worker", master_url,
                                           "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
                                           "--webui-port", str(wui), "--work-dir", str(tmp_path / "work")],
                                          env=env, stdout=logs, stderr=logs))
            wait_http(f"http://127.0.0.1:{ui}/json/", '"aliveworkers" : 1')
            yield master_url
        finally:
            for p in reversed(procs):
                p.terminate()
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


def run_job(module: str, env: dict[str, str], *args: str) -> dict:
    """Run a job script's driver against the cluster; its last JSON line of stdout."""
    out = subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=240)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    assert lines, out.stderr[-3000:]
    return json.loads(lines[-1])


@pytest.mark.slow
def test_upsert_through_a_standalone_cluster(standalone_cluster, trips_table, table_path):
    master_url, env, work = standalone_cluster
    res = run_job("tests.write.cluster_job", env, master_url, table_path)
    assert res["executors"] >= 1, "the job ran on the worker's executor process"
    assert res["inserts"] == [100, 50] and res["updates"] == [0, 50]
    t = mw.Table.open(table_path)
    got = rows(t.read(), ["id", "value"])
    assert len(got) == 150 and dict(got)["50"] == 2.0 and dict(got)["49"] == 1.0
    assert rows(hudi_read(table_path), ["id", "value"]) == got
    assert (work / res["app_id"]).is_dir(), "the worker ran the application"
