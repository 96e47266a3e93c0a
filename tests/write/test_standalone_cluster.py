"""The executor path on a multi-process Spark: a standalone master and worker on 127.0.0.1, for a
batch upsert (`make test-full`) and for ``writeStream.format("multiwriter")`` (the micro-batch's
tasks staged by the worker's executor, committed by the driver; an update and new keys in every
`make test`); both in one file, so one cluster serves them."""
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

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import multiwriter as mw
from multiwriter import checkpoint
from multiwriter.zookeeper_local import free_port
from tests.conftest import trips
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
                # the master's and worker's JVMs, as tests/spark_conf does the drivers' and executors'
                SPARK_DAEMON_JAVA_OPTS="-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
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
@pytest.mark.skipif(os.environ.get("MW_FULL_MATRIX") != "1",
                    reason="a second application on the cluster (~20 s): `make test-full`; the streaming write below "
                           "upserts through the same cluster in every `make test`")
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


# -- a streaming write ------------------------------------------------------------------------------

STREAM_COLS = ["id", "date", "ts", "value"]


def _run_job(master_url: str, env: dict[str, str], *args: str) -> dict:
    res = run_job("tests.spark.cluster_stream_job", env, master_url, *args)
    assert [r["error"] for r in res["runs"]] == [None] * len(res["runs"]), res["runs"]
    return res


def _hudi_incremental(path: str, start: str) -> pa.Table:
    """hudi-rs's incremental read of the commits completed after ``start``."""
    from hudi import HudiQueryType, HudiReadOptions, HudiTableBuilder

    opts = HudiReadOptions().with_query_type(HudiQueryType.Incremental).with_start_timestamp(start)
    return pa.Table.from_batches(HudiTableBuilder.from_base_uri(path).build().read(opts))


def _expect(ids, date="2024-01-01", ts=1, value=1.0) -> list[tuple]:
    return [(str(i), date, ts, float(value)) for i in ids]


@pytest.mark.slow
def test_a_streaming_write_through_a_standalone_cluster(standalone_cluster, tmp_path, zk_server, zk_base):
    master_url, env, work = standalone_cluster
    src, path, ck, incoming = tmp_path / "src", str(tmp_path / "t"), str(tmp_path / "ck"), tmp_path / "incoming"
    for d in (src, incoming / "0", incoming / "1"):
        d.mkdir(parents=True)
    pq.write_table(trips(range(20)), incoming / "0" / "a.parquet")
    pq.write_table(trips(range(20, 30), date="2024-01-02", ts=2, value=2.0), incoming / "0" / "b.parquet")
    # the second run, a new query on the same checkpoint, finds one new file: an update and a new key
    pq.write_table(trips([5, 40], ts=3, value=3.0), incoming / "1" / "c.parquet")
    res = _run_job(master_url, env, str(src), path, ck, zk_server.connect, zk_base, str(incoming))
    assert res["executors"] >= 1, "the tasks ran on the worker's executor process"
    assert [r["batches"] for r in res["runs"]] == [[0], [1]]
    assert (work / res["app_id"]).is_dir(), "the worker ran the application"
    tl = mw.Table.open(path).timeline()
    (c1, _) = tl.completed_writes()
    assert checkpoint.last(tl, "cluster-stream") == 1
    first = _expect(range(20)) + _expect(range(20, 30), "2024-01-02", 2, 2.0)
    assert rows(hudi_read(path, as_of=c1.requested_time), STREAM_COLS) == sorted(first, key=repr)
    # the second run committed only the new file's rows
    new = _expect([5, 40], ts=3, value=3.0)
    assert rows(_hudi_incremental(path, c1.completion_time), STREAM_COLS) == sorted(new, key=repr)
    expect = [r for r in first if r[0] != "5"] + new
    assert rows(hudi_read(path), STREAM_COLS) == rows(mw.Table.open(path).read(), STREAM_COLS) == sorted(expect, key=repr)
