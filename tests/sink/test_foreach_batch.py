"""The foreachBatch sink with real Spark streaming queries and a real ZooKeeper."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import multiwriter as mw
from multiwriter.transaction import CHECKPOINT_KEY
from tests.conftest import TRIPS_SCHEMA, trips
from tests.oracle import hudi_read, rows

SPARK_SCHEMA = "id STRING, date STRING, ts LONG, value DOUBLE"


def zk_config(zk_server, zk_base, writer_id, **kw):
    return mw.WriterConfig(writer_id=writer_id, lock=mw.ZooKeeperLock(connect=zk_server.connect, base_path=zk_base),
                           heartbeat_interval_s=1.0, retry_backoff_s=0.05, **kw)


def write_json(dirpath: Path, n: int, records: list[dict]) -> None:
    dirpath.mkdir(parents=True, exist_ok=True)
    tmp = dirpath / f".{n:04d}.tmp"
    tmp.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    final = dirpath / f"batch-{n:04d}.json"
    tmp.rename(final)
    os.utime(final, (1_700_000_000 + n, 1_700_000_000 + n))  # the file source orders by mtime: batch id == n


def run_available(spark, src: Path, sink, ck: Path):
    q = (spark.readStream.schema(SPARK_SCHEMA).option("maxFilesPerTrigger", 1).json(str(src))
         .writeStream.foreachBatch(sink).option("checkpointLocation", str(ck)).trigger(availableNow=True).start())
    return q


def test_streaming_query_commits_one_instant_per_batch_and_restarts_exactly_once(spark, zk_server, zk_base, trips_table, table_path, tmp_path):
    src, ck = tmp_path / "src", tmp_path / "ck"
    for n in range(3):
        write_json(src, n, [{"id": f"k{n * 10 + i}", "date": "2024-01-01", "ts": n, "value": float(n)} for i in range(10)])
    sink = mw.MultiWriterSink(table_path, zk_config(zk_server, zk_base, "ingest"))
    run_available(spark, src, sink, ck).awaitTermination(120)
    sink.close()
    t = mw.Table.open(table_path)
    assert len(t.timeline().completed_writes()) == 3
    # more input, then the same query restarted from its checkpoint
    for n in range(3, 5):
        write_json(src, n, [{"id": f"k{i}", "date": "2024-01-01", "ts": n, "value": float(n)} for i in range(5)])
    sink2 = mw.MultiWriterSink(table_path, zk_config(zk_server, zk_base, "ingest"))
    run_available(spark, src, sink2, ck).awaitTermination(120)
    sink2.close()
    tl = t.timeline()
    assert len(tl.completed_writes()) == 5, "one instant per micro-batch, none lost or repeated"
    cps = [json.loads(tl.commit_metadata(i).extra_metadata[CHECKPOINT_KEY])["ingest"] for i in tl.completed_writes()]
    assert cps == ["0", "1", "2", "3", "4"]
    got = t.read()
    assert got.num_rows == 30
    assert rows(got, ["id", "value"]) == rows(hudi_read(table_path), ["id", "value"])
    assert dict(rows(got, ["id", "value"]))["k0"] == 4.0


def test_replayed_batch_id_commits_once(spark, zk_server, zk_base, trips_table, table_path):
    df = spark.createDataFrame(trips(range(5)).to_pandas())
    sink = mw.MultiWriterSink(table_path, zk_config(zk_server, zk_base, "w"))
    first = sink(df, 7)
    second = sink(df, 7)
    sink.close()
    assert first.instant is not None and not first.skipped
    assert second.skipped and second.instant is None
    # a fresh sink (a restarted driver, empty cache) finds the checkpoint on the timeline
    again = mw.MultiWriterSink(table_path, zk_config(zk_server, zk_base, "w"))
    assert again(df, 7).skipped and again(df, 6).skipped
    assert again(df, 8).instant is not None
    again.close()
    assert len(mw.Table.open(table_path).timeline().completed_writes()) == 2


def test_empty_batch_commits_nothing(spark, zk_server, zk_base, trips_table, table_path):
    sink = mw.MultiWriterSink(table_path, zk_config(zk_server, zk_base, "w"))
    empty = spark.createDataFrame([], SPARK_SCHEMA)
    r = sink(empty, 0)
    sink.close()
    assert r.instant is None and not r.skipped
    assert mw.Table.open(table_path).timeline().instants == []


def test_second_query_with_same_writer_id_fails_fast(zk_server, zk_base, trips_table, table_path):
    first = mw.MultiWriterSink(table_path, zk_config(zk_server, zk_base, "dup"))
    try:
        with pytest.raises(mw.errors.ConfigError, match="dup"):
            mw.MultiWriterSink(table_path, zk_config(zk_server, zk_base, "dup"))
    finally:
        first.close()
    mw.MultiWriterSink(table_path, zk_config(zk_server, zk_base, "dup")).close()  # free again after close


def test_sink_creates_table_on_first_batch(spark, zk_server, zk_base, tmp_path):
    path = str(tmp_path / "new")
    sink = mw.MultiWriterSink(path, zk_config(zk_server, zk_base, "w"),
                              table=dict(name="fresh", schema=TRIPS_SCHEMA, record_key="id", partition_by=["date"]))
    sink(spark.createDataFrame(trips(range(3)).to_pandas()), 0)
    sink.close()
    assert mw.Table.open(path).read().num_rows == 3


def test_two_queries_overlapping_keys_all_batches_exactly_once(spark, zk_server, zk_base, trips_table, table_path, tmp_path):
    keys = [f"k{i}" for i in range(40)]
    mw.write(trips(keys, ts=0, value=-1), table_path, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="seed"))
    batches = {}
    for w in ("a", "b"):
        for n in range(4):
            recs = [{"id": k, "date": "2024-01-01", "ts": 1, "value": float(hash((w, n, k)) % 1000)} for k in keys[n * 5:n * 5 + 20]]
            batches[(w, n)] = recs
            write_json(tmp_path / f"src-{w}", n, recs)
    sinks = {w: mw.MultiWriterSink(table_path, zk_config(zk_server, zk_base, f"writer-{w}", max_conflict_retries=20)) for w in "ab"}
    qs = [run_available(spark, tmp_path / f"src-{w}", sinks[w], tmp_path / f"ck-{w}") for w in "ab"]
    for q in qs:
        q.awaitTermination(180)
        assert q.exception() is None
    for s in sinks.values():
        s.close()
    t = mw.Table.open(table_path)
    tl = t.timeline()
    applied = []
    for i in tl.completed_writes():
        extra = tl.commit_metadata(i).extra_metadata
        cp, wid = extra.get(CHECKPOINT_KEY), extra.get("multiwriter.writer_id")
        if cp and wid != "seed":  # every commit carries all writers' checkpoints; its own is its writer's
            applied.append((wid[-1], int(json.loads(cp)[wid])))
    assert sorted(applied) == sorted(batches), "every batch committed exactly once"
    model = {k: -1.0 for k in keys}
    for key in applied:  # completion order
        for r in batches[key]:
            model[r["id"]] = r["value"]
    assert dict(rows(t.read(), ["id", "value"])) == model
    assert rows(hudi_read(table_path), ["id", "value"]) == sorted(model.items(), key=repr)


# -- a query redeployed with a fresh checkpoint (same writer id) -------------------------------


def _run_to_end(spark, src: Path, sink, ck: Path):
    """Run the query over what ``src`` holds; its failure is read from ``q.exception()``."""
    from pyspark.errors import StreamingQueryException

    q = run_available(spark, src, sink, ck)
    try:
        q.awaitTermination(120)
    except StreamingQueryException:
        pass
    q.stop()
    return q


def _batches(src: Path, first: int, count: int, tag: str) -> None:
    for n in range(first, first + count):
        write_json(src, n, [{"id": f"{tag}{n}-{i}", "date": "2024-01-01", "ts": n, "value": float(n)} for i in range(4)])


def test_fresh_checkpoint_under_same_writer_id_fails_and_writes_nothing(spark, zk_server, zk_base, trips_table, table_path, tmp_path):
    _batches(tmp_path / "src", 0, 3, "old")
    sink = mw.MultiWriterSink(table_path, zk_config(zk_server, zk_base, "ingest"))
    assert _run_to_end(spark, tmp_path / "src", sink, tmp_path / "ck").exception() is None
    sink.close()
    before = rows(hudi_read(table_path), ["id", "value"])
    assert len(before) == 12
    # the redeployed query: new checkpoint location, new input, Spark numbers its batches from 0
    _batches(tmp_path / "src2", 0, 2, "new")
    sink2 = mw.MultiWriterSink(table_path, zk_config(zk_server, zk_base, "ingest"))
    q = _run_to_end(spark, tmp_path / "src2", sink2, tmp_path / "ck2")
    sink2.close()
    err = q.exception()
    assert err is not None, "a checkpoint reset must not pass silently"
    text = str(err)
    assert "CheckpointResetError" in text and "ingest" in text and "on_checkpoint_reset" in text
    assert rows(hudi_read(table_path), ["id", "value"]) == before, "nothing of the reset query's batch is written"
    assert len(mw.Table.open(table_path).timeline().completed_writes()) == 3


def test_continue_on_reset_lands_the_new_query_and_skips_its_own_replays(spark, zk_server, zk_base, trips_table, table_path, tmp_path):
    _batches(tmp_path / "src", 0, 3, "old")
    sink = mw.MultiWriterSink(table_path, zk_config(zk_server, zk_base, "ingest"))
    assert _run_to_end(spark, tmp_path / "src", sink, tmp_path / "ck").exception() is None
    sink.close()
    _batches(tmp_path / "src2", 0, 2, "new")
    cfg = zk_config(zk_server, zk_base, "ingest", on_checkpoint_reset="continue")
    sink2 = mw.MultiWriterSink(table_path, cfg)
    assert _run_to_end(spark, tmp_path / "src2", sink2, tmp_path / "ck2").exception() is None
    sink2.close()
    got = rows(hudi_read(table_path), ["id", "value"])
    assert len(got) == 20 and sum(1 for k, _ in got if k.startswith("new")) == 8
    # Spark replays the new query's last batch (its commit log entry lost): skipped, not written twice
    for name in ("1", ".1.crc"):
        (tmp_path / "ck2" / "commits" / name).unlink(missing_ok=True)
    sink3 = mw.MultiWriterSink(table_path, cfg)
    assert _run_to_end(spark, tmp_path / "src2", sink3, tmp_path / "ck2").exception() is None
    assert sink3.results and all(r.skipped for r in sink3.results)
    sink3.close()
    tl = mw.Table.open(table_path).timeline()
    assert len(tl.completed_writes()) == 5
    assert rows(hudi_read(table_path), ["id", "value"]) == got


def test_restart_after_crash_mid_batch_commits_each_batch_once(spark, zk_server, zk_base, trips_table, table_path, tmp_path):
    """Same checkpoint, same query id: the batch that crashed is redone once, none is reset."""
    _batches(tmp_path / "src", 0, 3, "k")
    crashed = {"done": False}
    inner = mw.MultiWriterSink(table_path, zk_config(zk_server, zk_base, "ingest"))

    def crash_after_commit(df, batch_id):
        inner(df, batch_id)
        if batch_id == 1 and not crashed["done"]:
            crashed["done"] = True
            raise RuntimeError("driver died after the commit, before Spark's own commit log")

    q = _run_to_end(spark, tmp_path / "src", crash_after_commit, tmp_path / "ck")
    assert q.exception() is not None
    inner.close()
    sink = mw.MultiWriterSink(table_path, zk_config(zk_server, zk_base, "ingest"))
    assert _run_to_end(spark, tmp_path / "src", sink, tmp_path / "ck").exception() is None
    sink.close()
    assert [r.skipped for r in sink.results] == [True, False]  # batch 1 replayed (skipped), then batch 2
    tl = mw.Table.open(table_path).timeline()
    assert len(tl.completed_writes()) == 3
    assert len(rows(hudi_read(table_path), ["id", "value"])) == 12


def test_other_writer_ids_are_unaffected_by_a_reset(spark, zk_server, zk_base, trips_table, table_path, tmp_path):
    _batches(tmp_path / "a", 0, 2, "a")
    _batches(tmp_path / "b", 0, 2, "b")
    for w in "ab":
        s = mw.MultiWriterSink(table_path, zk_config(zk_server, zk_base, f"writer-{w}", max_conflict_retries=10))
        assert _run_to_end(spark, tmp_path / w, s, tmp_path / f"ck-{w}").exception() is None
        s.close()
    assert len(rows(hudi_read(table_path), ["id", "value"])) == 16


def test_write_with_query_id_follows_the_same_rule(zk_server, zk_base, trips_table, table_path):
    cfg = zk_config(zk_server, zk_base, "batch-job")
    assert not mw.write(trips(range(3)), table_path, cfg, batch_id=0, query_id="run-1").skipped
    assert mw.write(trips(range(3)), table_path, cfg, batch_id=0, query_id="run-1").skipped
    with pytest.raises(mw.errors.CheckpointResetError, match="run-1.*run-2|run-2.*run-1"):
        mw.write(trips(range(3, 6)), table_path, cfg, batch_id=0, query_id="run-2")
    assert mw.Table.open(table_path).read().num_rows == 3
    cont = zk_config(zk_server, zk_base, "batch-job", on_checkpoint_reset="continue")
    assert not mw.write(trips(range(3, 6)), table_path, cont, batch_id=0, query_id="run-2").skipped
    assert mw.write(trips(range(3, 6)), table_path, cont, batch_id=0, query_id="run-2").skipped
    assert rows(hudi_read(table_path), ["id"]) == rows(mw.Table.open(table_path).read(), ["id"])
    assert mw.Table.open(table_path).read().num_rows == 6


@pytest.mark.parametrize("executor", ["auto", "driver", "spark"])
def test_a_micro_batch_is_not_turned_into_an_rdd_before_it_is_collected(spark, trips_table, table_path, tmp_path,
                                                                       monkeypatch, executor):
    """Reading ``DataFrame.rdd`` plans and compiles the micro-batch's query into an RDD of pickled
    rows: the sink must take the batch as Arrow (or hand it to its Spark job) without it, so
    the batch is planned and compiled once. Every row lands, as hudi-rs reads them."""
    from pyspark.sql.classic.dataframe import DataFrame  # what foreachBatch is given (pyspark.sql.DataFrame is its API)

    src, ck = tmp_path / "src", tmp_path / "ck"
    for n in range(2):
        write_json(src, n, [{"id": f"k{n * 10 + i}", "date": "2024-01-01", "ts": n, "value": float(n)} for i in range(10)])
    touched: list[int] = []
    rdd = DataFrame.rdd
    monkeypatch.setattr(DataFrame, "rdd", property(lambda df: touched.append(1) or rdd.__get__(df, DataFrame)))
    sink = mw.MultiWriterSink(table_path, mw.WriterConfig(writer_id="ingest", lock=mw.InProcessLock(), executor=executor))
    run_available(spark, src, sink, ck).awaitTermination(120)
    sink.close()
    assert touched == []
    assert [r.batch_id for r in sink.results] == [0, 1] and all(r.instant is not None for r in sink.results)
    assert rows(hudi_read(table_path), ["id", "ts"]) == sorted([(f"k{n * 10 + i}", n) for n in range(2) for i in range(10)],
                                                               key=repr)
