"""``writeStream.format("multiwriter")`` on a multi-process Spark: a standalone master and worker
on 127.0.0.1, the micro-batch's tasks staged by the worker's executor, committed by the driver."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import multiwriter as mw
from multiwriter import checkpoint
from tests.conftest import trips
from tests.oracle import hudi_read, rows
from tests.write.test_standalone_cluster import run_job

COLS = ["id", "date", "ts", "value"]


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
    assert rows(hudi_read(path, as_of=c1.requested_time), COLS) == sorted(first, key=repr)
    # the second run committed only the new file's rows
    new = _expect([5, 40], ts=3, value=3.0)
    assert rows(_hudi_incremental(path, c1.completion_time), COLS) == sorted(new, key=repr)
    expect = [r for r in first if r[0] != "5"] + new
    assert rows(hudi_read(path), COLS) == rows(mw.Table.open(path).read(), COLS) == sorted(expect, key=repr)
