"""``df.writeStream.format("multiwriter")``: one commit per micro-batch, exactly once across
restarts, nothing left by a failed micro-batch; checked against hudi-rs and pyarrow."""
from __future__ import annotations

import os
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import multiwriter as mw
from multiwriter import checkpoint
from multiwriter.spark import staging
from tests.conftest import trips
from tests.oracle import hudi_read, rows
from tests.spark.conftest import trips_write_options

COLS = ["id", "date", "ts", "value"]
FMT = "multiwriter"
DDL = "id string, date string, ts long, value double"


def _opts(zk_server, zk_base, writer_id="stream-a"):
    return trips_write_options(zk_server, zk_base, **{
        "hoodie.datasource.write.streaming.checkpoint.identifier": writer_id,
        "hoodie.client.heartbeat.interval_in_ms": "1000"})


def _add(src, name: str, table) -> None:
    os.makedirs(src, exist_ok=True)
    pq.write_table(table, os.path.join(src, f"{name}.parquet"))


def _stream(sp, src: str, path: str, ck: str, opts: dict):
    return (sp.readStream.schema(DDL).parquet(str(src)).writeStream.format(FMT).options(**opts)
            .option("checkpointLocation", ck).trigger(availableNow=True).start(path))


def _run(sp, src, path, ck, opts) -> None:
    q = _stream(sp, src, path, ck, opts)
    q.awaitTermination(180)
    assert q.exception() is None


def _commits(path: str) -> list:
    return mw.Table.open(path).timeline().completed_writes()


def _ours(path: str) -> list[tuple]:
    return rows(mw.Table.open(path).read(), COLS)


def _files_outside_hoodie(path: str) -> list[str]:
    out = []
    for root, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if d != ".hoodie"]
        out += [os.path.join(root, f) for f in files if not f.startswith(".hoodie_partition")]
    return out


def _staged(path: str) -> list[str]:
    root = os.path.join(path, staging.STAGING_ROOT)
    return [os.path.join(r, f) for r, _, fs in os.walk(root) for f in fs]


def test_micro_batches_commit_once_and_restarts_replay_nothing(sp, tmp_path, zk_server, zk_base):
    src, path, ck = tmp_path / "src", str(tmp_path / "t"), str(tmp_path / "ck")
    opts = _opts(zk_server, zk_base)
    _add(src, "a", trips(range(4)))
    _add(src, "b", trips(range(2, 6), date="2024-01-02", ts=2, value=2.0))
    _run(sp, src, path, ck, opts)
    assert len(_commits(path)) == 1  # availableNow: both files in one micro-batch
    assert rows(hudi_read(path), COLS) == _ours(path) == sorted(
        [(str(i), "2024-01-01", 1, 1.0) for i in range(4)] + [(str(i), "2024-01-02", 2, 2.0) for i in range(2, 6)], key=repr)
    # a restart with the same checkpoint and a new file: one more commit, with only that file
    _add(src, "c", trips([0], ts=3, value=3.0))
    _run(sp, src, path, ck, opts)
    (c1, c2) = _commits(path)
    assert checkpoint.last(mw.Table.open(path).timeline(), "stream-a") == 1
    assert rows(hudi_read(path), COLS) == _ours(path)
    assert (("0", "2024-01-01", 3, 3.0)) in _ours(path)
    # nothing new: no commit
    _run(sp, src, path, ck, opts)
    assert len(_commits(path)) == 2
    # Spark crashed after our commit of batch 1 but before its own commit log: it replays the
    # batch, which commits nothing (the writer id's checkpoint already holds batch 1)
    for name in ("1", ".1.crc"):
        os.remove(os.path.join(ck, "commits", name))
    _run(sp, src, path, ck, opts)
    assert len(_commits(path)) == 2 and os.path.exists(os.path.join(ck, "commits", "1"))
    assert _staged(path) == []


def test_a_failing_micro_batch_leaves_no_files(sp, tmp_path, zk_server, zk_base):
    src, path, ck = tmp_path / "src", str(tmp_path / "t"), str(tmp_path / "ck")
    opts = _opts(zk_server, zk_base)
    _add(src, "a", trips(range(6)))
    env = sp.sparkContext.environment
    env["MULTIWRITER_FAULTS"] = "after-data-files=error"  # in the process that commits
    mw.register(sp)  # the data source's workers take the environment as of registration
    try:
        q = _stream(sp, src, path, ck, opts)
        with pytest.raises(Exception, match="injected fault at after-data-files"):
            q.awaitTermination(180)
    finally:
        del env["MULTIWRITER_FAULTS"]
        mw.register(sp)
    assert _commits(path) == []
    assert _files_outside_hoodie(path) == []  # the attempt's data files were deleted
    assert _staged(path) == []  # and the staged rows
    assert hudi_read(path).num_rows == 0
    # the restarted query replays the batch and commits it
    _run(sp, src, path, ck, opts)
    assert rows(hudi_read(path), COLS) == [(str(i), "2024-01-01", 1, 1.0) for i in range(6)]


def test_two_streams_with_their_own_ids_share_a_table_under_zookeeper(sp, tmp_path, zk_server, zk_base):
    path = str(tmp_path / "t")
    base = _opts(zk_server, zk_base, "seed")
    sp.createDataFrame(trips(range(10)).to_pandas()).write.format(FMT).options(**base).mode("append").save(path)
    # both streams update keys of the one file group the seed wrote: they conflict and retry
    a_src, b_src = tmp_path / "a", tmp_path / "b"
    _add(a_src, "a", trips(range(5), ts=2, value=2.0))
    _add(b_src, "b", trips(range(5, 10), ts=3, value=3.0))
    _add(b_src, "b2", trips(range(20, 23), date="2024-01-02", ts=3, value=3.0))
    qa = _stream(sp, a_src, path, str(tmp_path / "cka"), _opts(zk_server, zk_base, "stream-a"))
    qb = _stream(sp, b_src, path, str(tmp_path / "ckb"), _opts(zk_server, zk_base, "stream-b"))
    for q in (qa, qb):
        q.awaitTermination(180)
        assert q.exception() is None
    tl = mw.Table.open(path).timeline()
    assert len(tl.completed_writes()) == 3
    assert (checkpoint.last(tl, "stream-a"), checkpoint.last(tl, "stream-b")) == (0, 0)
    expect = ([(str(i), "2024-01-01", 2, 2.0) for i in range(5)] + [(str(i), "2024-01-01", 3, 3.0) for i in range(5, 10)]
              + [(str(i), "2024-01-02", 3, 3.0) for i in range(20, 23)])
    assert rows(hudi_read(path), COLS) == _ours(path) == sorted(expect, key=repr)


def _split_stream(sp, src, path, ck, opts, n=2):
    """The stream with its rows spread over ``n`` Spark tasks by ``ts`` (each task writes its own files)."""
    df = sp.readStream.schema(DDL).parquet(str(src)).repartition(n, "ts")
    return df.writeStream.format(FMT).options(**opts).option("checkpointLocation", ck).trigger(availableNow=True).start(path)


def _spark_partition_of(sp, ts_values, n=2) -> dict[int, int]:
    """Which of ``n`` hash partitions Spark puts each ``ts`` in (as ``repartition(n, "ts")`` does)."""
    df = sp.createDataFrame([(t,) for t in ts_values], "ts long")
    return {r["ts"]: r["p"] for r in df.selectExpr("ts", f"pmod(hash(ts), {n}) as p").collect()}


def _two_ts_in_different_tasks(sp) -> tuple[int, int]:
    where = _spark_partition_of(sp, range(1, 20))
    first = next(t for t in where if where[t] == 0)
    return first, next(t for t in where if where[t] == 1)


def _write_tokens(path: str) -> dict[str, list[str]]:
    """Per completed commit, the write tokens (``<spark partition>-<stage>-<task attempt>``) of its files."""
    tl = mw.Table.open(path).timeline()
    out = {}
    for c in tl.completed_writes():
        stats = [s for ss in tl.commit_metadata(c).partition_to_write_stats.values() for s in ss]
        out[c.requested_time] = sorted(os.path.basename(s.path).split("_")[1] for s in stats)
    return out


def test_executors_write_the_data_files_of_each_task(sp, tmp_path, zk_server, zk_base):
    src, path, ck = tmp_path / "src", str(tmp_path / "t"), str(tmp_path / "ck")
    opts = _opts(zk_server, zk_base)
    a, b = _two_ts_in_different_tasks(sp)
    _add(src, "a", pa.concat_tables([trips(range(3), ts=a, value=1.0), trips(range(3, 6), date="2024-01-02", ts=b, value=2.0)]))
    q = _split_stream(sp, src, path, ck, opts)
    q.awaitTermination(180)
    assert q.exception() is None
    (tokens,) = _write_tokens(path).values()
    # one file per task and partition, named by the Spark task that wrote it (Hudi's write token):
    # two tasks of one stage, each with its own attempt id
    parts = [t.split("-") for t in tokens]
    assert sorted(p[0] for p in parts) == ["0", "1"] and len({p[1] for p in parts}) == 1 and len({p[2] for p in parts}) == 2
    assert rows(hudi_read(path), COLS) == _ours(path) == sorted(
        [(str(i), "2024-01-01", a, 1.0) for i in range(3)] + [(str(i), "2024-01-02", b, 2.0) for i in range(3, 6)], key=repr)
    assert _staged(path) == [] and not mw.Table.open(path).timeline().pending()
    # the process that began the instant stops beating it once it completed: no heartbeat is left
    hb_dir = os.path.join(path, ".hoodie", ".heartbeat")
    deadline = time.monotonic() + 30
    while os.listdir(hb_dir) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert os.listdir(hb_dir) == []


def test_tasks_updating_one_file_group_commit_one_merged_slice(sp, tmp_path, zk_server, zk_base):
    """The input is not partitioned by key: two tasks rewrite the seed's one file group, and two
    tasks insert one new key. The micro-batch is committed once, merged, with no duplicate."""
    src, path, ck = tmp_path / "src", str(tmp_path / "t"), str(tmp_path / "ck")
    opts = _opts(zk_server, zk_base)
    sp.createDataFrame(trips(range(6)).to_pandas()).write.format(FMT).options(**opts).mode("append").save(path)
    a, b = sorted(_two_ts_in_different_tasks(sp))
    _add(src, "a", pa.concat_tables([trips(range(3), ts=a, value=2.0), trips(["new"], ts=a, value=2.0)]))
    _add(src, "b", pa.concat_tables([trips(range(3, 6), ts=b, value=3.0), trips(["new"], ts=b, value=3.0)]))
    q = _split_stream(sp, src, path, ck, opts)
    q.awaitTermination(180)
    assert q.exception() is None
    expect = sorted([(str(i), "2024-01-01", a, 2.0) for i in range(3)] + [(str(i), "2024-01-01", b, 3.0) for i in range(3, 6)]
                    + [("new", "2024-01-01", b, 3.0)], key=repr)  # the higher ordering value wins
    assert rows(hudi_read(path), COLS) == _ours(path) == expect
    tl = mw.Table.open(path).timeline()
    assert len(tl.completed_writes()) == 2 and not tl.pending()
    # the tasks' own attempt was rolled back: only the seed's and the commit's files are left
    live = {os.path.basename(s.path) for c in tl.completed_writes() for ss in tl.commit_metadata(c).partition_to_write_stats.values()
            for s in ss}
    assert {os.path.basename(f) for f in _files_outside_hoodie(path)} == live
    assert checkpoint.last(tl, "stream-a") == 0 and _staged(path) == []


def test_a_query_with_a_fresh_checkpoint_under_the_same_writer_id_is_refused(sp, tmp_path, zk_server, zk_base):
    src, path = tmp_path / "src", str(tmp_path / "t")
    opts = _opts(zk_server, zk_base)
    _add(src, "a", trips(range(3)))
    _run(sp, src, path, str(tmp_path / "ck1"), opts)
    before = _ours(path)
    # another query (its own checkpoint location, batch ids from 0 again) under the same writer id:
    # its batch 0 would pass for the first query's batch 0 and be skipped
    other = tmp_path / "other"
    _add(other, "b", trips(range(10, 13)))
    q = _stream(sp, other, path, str(tmp_path / "ck2"), opts)
    with pytest.raises(Exception, match="CheckpointResetError.*on_checkpoint_reset"):
        q.awaitTermination(180)
    assert _ours(path) == before == rows(hudi_read(path), COLS)
    tl = mw.Table.open(path).timeline()
    assert len(tl.completed_writes()) == 1 and not tl.pending()  # the refused micro-batch's instant rolled back
    # the first query carries on under its id
    _add(src, "c", trips([7]))
    _run(sp, src, path, str(tmp_path / "ck1"), opts)
    assert ("7", "2024-01-01", 1, 1.0) in _ours(path)
    # accepted: the new query's batches land from 0, and its own replay is skipped
    accept = {**opts, "multiwriter.on.checkpoint.reset": "continue"}
    _run(sp, other, path, str(tmp_path / "ck2"), accept)
    assert {r[0] for r in _ours(path)} == {"0", "1", "2", "7", "10", "11", "12"}
    assert checkpoint.last(mw.Table.open(path).timeline(), "stream-a") == 0
    for name in ("0", ".0.crc"):
        (tmp_path / "ck2" / "commits" / name).unlink(missing_ok=True)
    _run(sp, other, path, str(tmp_path / "ck2"), accept)
    assert len(_commits(path)) == 3 and _ours(path) == rows(hudi_read(path), COLS)


def test_option_errors_stop_the_query_before_anything_is_written(sp, tmp_path, zk_server, zk_base):
    src, path = tmp_path / "src", str(tmp_path / "t")
    _add(src, "a", trips(range(2)))
    opts = {k: v for k, v in _opts(zk_server, zk_base).items()
            if k != "hoodie.datasource.write.streaming.checkpoint.identifier"}
    opts["hoodie.datasource.write.recordkey.feild"] = "id"
    q = _stream(sp, src, path, str(tmp_path / "ck"), opts)
    with pytest.raises(Exception, match="ConfigError") as e:
        q.awaitTermination(120)
    assert "hoodie.datasource.write.recordkey.feild" in str(e.value)
    assert not os.path.exists(path)
    # the writer id is required: it is what makes a replayed micro-batch commit nothing
    del opts["hoodie.datasource.write.recordkey.feild"]
    q = _stream(sp, src, path, str(tmp_path / "ck2"), opts)
    with pytest.raises(Exception, match="hoodie.datasource.write.streaming.checkpoint.identifier"):
        q.awaitTermination(120)
    assert not os.path.exists(path)


def test_staging_paths_come_from_validated_parts(tmp_path):
    import pyarrow as pa

    from multiwriter.errors import ConfigError
    from multiwriter.storage import Storage

    assert staging.batch_dir("ingest-1", 7) == ".hoodie/.temp/streaming/ingest-1/7"
    odd = staging.writer_segment("../x/y")
    assert "/" not in odd and not odd.startswith(".")
    with pytest.raises(ConfigError):
        staging.batch_dir("w", -1)
    storage = Storage(str(tmp_path))
    f = staging.stage(storage, "w", 3, iter(trips(range(3)).to_batches()))
    assert f is not None and f.rows == 3 and f.path.startswith(staging.batch_dir("w", 3) + "/")
    assert staging.stage(storage, "w", 3, iter([])) is None
    assert staging.read(storage, "w", 3, [f], trips([]).schema).num_rows == 3
    with pytest.raises(ConfigError, match="not in the staging directory"):  # another batch's file
        staging.read(storage, "w", 4, [f], pa.schema([]))
    staging.discard(storage, "w", 3)
    assert not (tmp_path / staging.batch_dir("w", 3)).exists()


class _Task:
    """What the writer reads of Spark's TaskContext, for a task run outside Spark."""

    def __init__(self, batch_id: int) -> None:
        self.batch_id = batch_id

    def getLocalProperty(self, key: str) -> str | None:  # noqa: N802 -- Spark's name
        return str(self.batch_id) if key == "streaming.sql.batchId" else None

    def partitionId(self) -> int:  # noqa: N802
        return 0

    def stageId(self) -> int:  # noqa: N802
        return 1

    def taskAttemptId(self) -> int:  # noqa: N802
        return 7


def _in_process_batch(opts: dict, batch: pa.Table, batch_id: int, monkeypatch):
    """One micro-batch as Spark runs it, in this process: a writer begins it when pickled for
    the task, the task writes, a writer built anew commits the task's message."""
    import pickle

    from pyspark import TaskContext
    from pyspark.sql.pandas.types import from_arrow_schema

    from multiwriter.spark.stream_write import MultiWriterStreamWriter

    task = pickle.loads(pickle.dumps(MultiWriterStreamWriter(opts, from_arrow_schema(batch.schema))))
    monkeypatch.setattr(TaskContext, "get", classmethod(lambda cls: _Task(batch_id)))
    message = task.write(iter(batch.to_batches(max_chunksize=5000)))
    return MultiWriterStreamWriter(opts, from_arrow_schema(batch.schema)), message


def test_a_commit_that_failed_leaves_the_next_micro_batches_committing(tmp_path, zk_server, zk_base, monkeypatch):
    """The committing process keeps its writer from one micro-batch to the next; a commit that
    fails (here at a fault point) must not hand a broken writer (a held lock, a beating
    heartbeat) to the micro-batches after it."""
    from multiwriter import faults

    path = str(tmp_path / "t")
    opts = {**_opts(zk_server, zk_base), "path": path, "checkpointLocation": str(tmp_path / "ck")}
    for b in range(2):
        committer, message = _in_process_batch(opts, trips(range(b * 10, b * 10 + 10), ts=b), b, monkeypatch)
        committer.commit([message], b)
    committer, message = _in_process_batch(opts, trips(range(20, 30), ts=2), 2, monkeypatch)
    faults.configure("after-data-files=error")
    try:
        with pytest.raises(Exception, match="injected fault at after-data-files"):
            committer.commit([message], 2)
    finally:
        faults.configure(None)
    committer.abort([message], 2)  # as Spark does after a failed commit
    assert not mw.Table.open(path).timeline().pending()
    for b in (2, 3):  # the replayed micro-batch, then the next one
        committer, message = _in_process_batch(opts, trips(range(b * 10, b * 10 + 10), ts=b), b, monkeypatch)
        committer.commit([message], b)
    assert rows(hudi_read(path), COLS) == _ours(path) == sorted(
        [(str(i), "2024-01-01", i // 10, 1.0) for i in range(40)], key=repr)
    assert checkpoint.last(mw.Table.open(path).timeline(), "stream-a") == 3
    assert _staged(path) == [] and not mw.Table.open(path).timeline().pending()


def test_a_task_message_carries_each_new_key_once(tmp_path, zk_server, zk_base, monkeypatch):
    """The commit message a task hands Spark holds each partition's new keys, not the whole
    batch's keys once per partition (Spark ships it to the driver and the committing process)."""
    import pickle

    path = str(tmp_path / "t")
    opts = {**_opts(zk_server, zk_base), "path": path, "checkpointLocation": str(tmp_path / "ck")}
    days = [f"2024-01-{d:02d}" for d in range(1, 21)]
    batch = pa.concat_tables([trips(range(d * 1000, d * 1000 + 1000), date=day) for d, day in enumerate(days)])
    committer, message = _in_process_batch(opts, batch, 0, monkeypatch)
    keys = pa.concat_arrays([k for k in message.inserted.values()])
    assert sorted(keys.to_pylist()) == sorted(batch.column("id").to_pylist())
    own_bytes = batch.column("id").nbytes  # the batch's keys, once
    assert len(pickle.dumps(message)) < 2 * own_bytes + 20_000
    committer.commit([message], 0)
    assert rows(hudi_read(path), COLS) == _ours(path) == rows(batch, COLS)
    assert _staged(path) == [] and not mw.Table.open(path).timeline().pending()


def test_a_task_knows_the_footers_of_the_files_its_process_wrote(tmp_path, zk_server, zk_base, monkeypatch):
    """Spark reuses a task's Python worker for the next micro-batch: the files a task wrote are
    found in the process's footer cache then, not read back from storage."""
    from multiwriter.write import index

    path = str(tmp_path / "t")
    opts = {**_opts(zk_server, zk_base), "path": path, "checkpointLocation": str(tmp_path / "ck")}
    committer, message = _in_process_batch(opts, trips(range(10)), 0, monkeypatch)
    committer.commit([message], 0)
    read: list[str] = []
    real = index.read_footer
    monkeypatch.setattr(index, "read_footer", lambda storage, p: read.append(p) or real(storage, p))
    committer, message = _in_process_batch(opts, trips(range(5, 15), ts=2, value=2.0), 1, monkeypatch)
    committer.commit([message], 1)
    assert read == []
    assert rows(hudi_read(path), COLS) == _ours(path) == sorted(
        [(str(i), "2024-01-01", 1, 1.0) for i in range(5)] + [(str(i), "2024-01-01", 2, 2.0) for i in range(5, 15)], key=repr)


class _LateAttempt(_Task):
    """A second attempt of the same task (Spark reran it; the first one resumes late)."""

    def taskAttemptId(self) -> int:  # noqa: N802
        return 8


@pytest.mark.parametrize("extra", [{}, {"hoodie.datasource.write.table.type": "MERGE_ON_READ", "hoodie.index.type": "BUCKET",
                                        "hoodie.bucket.index.num.buckets": "4"}], ids=["cow", "mor-bucket"])
def test_a_task_attempt_that_resumes_after_the_micro_batch_committed_publishes_nothing(
        tmp_path, zk_server, zk_base, monkeypatch, extra):
    """Two attempts of one task carry the same begun instant; the rerun's message commits while
    the other attempt is past its pre-write checks, about to write its first data file. It
    must publish nothing: no second copy of a row in hudi-rs or our reader, one file per group
    and instant, nothing staged left."""
    import pickle
    import threading

    from pyspark import TaskContext
    from pyspark.sql.pandas.types import from_arrow_schema

    from multiwriter.errors import MultiWriterError
    from multiwriter.spark.stream_write import MultiWriterStreamWriter
    from multiwriter.format import layout
    from multiwriter.format.log_file import parse_log_file
    from multiwriter.write import merge

    path = str(tmp_path / "t")
    opts = {**_opts(zk_server, zk_base), **extra, "path": path, "checkpointLocation": str(tmp_path / "ck")}
    batch = trips(range(40), value=1.0)
    schema = from_arrow_schema(batch.schema)
    shipped = pickle.dumps(MultiWriterStreamWriter(opts, schema))  # begins the micro-batch's instant
    monkeypatch.setattr(TaskContext, "get", classmethod(lambda cls: _Task(0)))
    rerun = pickle.loads(shipped).write(iter(batch.to_batches(max_chunksize=7)))
    assert rerun.stats, "the rerun attempt wrote the data files"

    committer = MultiWriterStreamWriter(opts, schema)
    original, once = merge._write_parquet, threading.Lock()
    committed: list[str] = []

    def commit_first(storage, rel, *args, **kwargs):
        with once:
            if not committed:
                committer.commit([rerun], 0)
                committed.append(rel)
        return original(storage, rel, *args, **kwargs)

    monkeypatch.setattr(merge, "_write_parquet", commit_first)
    monkeypatch.setattr(TaskContext, "get", classmethod(lambda cls: _LateAttempt(0)))
    late = pickle.loads(shipped)
    try:  # the rows arrive in another order: the late attempt names the same new file groups
        result = late.write(iter(batch.take(pa.array(range(39, -1, -1))).to_batches(max_chunksize=7)))
    except MultiWriterError as e:
        result = e
    assert committed, "the micro-batch committed while the late attempt was writing"
    assert isinstance(result, MultiWriterError) or not result.stats, result
    assert _staged(path) == [], "the late attempt's staged rows are gone too"

    expected = sorted([(str(i), "2024-01-01", 1, 1.0) for i in range(40)], key=repr)
    assert rows(hudi_read(path), COLS) == _ours(path) == expected
    names = [f.rsplit("/", 1)[-1] for f in _files_outside_hoodie(path)]
    parsed = [layout.parse_data_file(n) or parse_log_file(n) for n in names if n != ".hoodie_partition_metadata"]
    groups = [(p.file_id, p.instant_time, type(p).__name__) for p in parsed]
    assert len(groups) == len(set(groups)), f"a second file of a group and instant: {names}"
    staged_dir = os.path.join(path, ".hoodie", ".temp")
    assert not [f for _, _, fs in os.walk(staged_dir) for f in fs if f.endswith(".parquet")], "nothing staged is left"


def test_a_micro_batch_aborted_before_any_task_reported_is_rolled_back_and_no_longer_beaten(
        tmp_path, zk_server, zk_base, monkeypatch):
    """Spark may abort a micro-batch before a task reported (maxFailures reached): the abort must
    roll the instant back itself, so the process that began it stops beating it and no pending
    instant waits for the cleaner (which would never judge a beaten instant dead)."""
    import pickle

    from pyspark.sql.pandas.types import from_arrow_schema

    from multiwriter.spark.stream_write import MultiWriterStreamWriter
    from multiwriter.format import layout

    path = str(tmp_path / "t")
    opts = {**_opts(zk_server, zk_base), "path": path, "checkpointLocation": str(tmp_path / "ck")}
    schema = from_arrow_schema(trips([0]).schema)
    pickle.dumps(MultiWriterStreamWriter(opts, schema))  # begins the micro-batch's instant, beaten from here
    [pending] = mw.Table.open(path).timeline().pending()
    beat = os.path.join(path, layout.heartbeat_path(pending.requested_time))
    assert os.path.exists(beat)

    MultiWriterStreamWriter(opts, schema).abort([None, None], 0)  # no task reported
    assert mw.Table.open(path).timeline().pending() == []
    deadline = time.time() + 10
    while os.path.exists(beat) and time.time() < deadline:
        time.sleep(0.1)
    assert not os.path.exists(beat), "the beginning process stopped beating the aborted instant"
    time.sleep(2.5)  # more than two beat intervals: nothing writes it again
    assert not os.path.exists(beat)
    assert _files_outside_hoodie(path) == [] and _staged(path) == []


MOR_BUCKETS = {"hoodie.datasource.write.table.type": "MERGE_ON_READ", "hoodie.index.type": "BUCKET",
               "hoodie.bucket.index.num.buckets": "2"}


def _log_tokens(path: str) -> list[str]:
    """The write tokens of the last commit's files (``.<file id>_<instant>.log.<version>_<token>``)."""
    tl = mw.Table.open(path).timeline()
    stats = [s for ss in tl.commit_metadata(tl.completed_writes()[-1]).partition_to_write_stats.values() for s in ss]
    return sorted(os.path.basename(s.path).rsplit("_", 1)[1] for s in stats)


def test_tasks_appending_other_keys_to_one_bucket_commit_their_own_log_files(sp, tmp_path, zk_server, zk_base):
    """Merge-on-Read buckets: two tasks each append the log file of both buckets (their keys
    are not partitioned by bucket) with keys of their own: the commit is the tasks' files, each
    named by its task, never redone on the driver. A key in both tasks still goes through the
    driver path (which of two log files of one instant wins would be left to their names)."""
    src, path, ck = tmp_path / "src", str(tmp_path / "t"), str(tmp_path / "ck")
    opts = _opts(zk_server, zk_base) | MOR_BUCKETS
    sp.createDataFrame(trips(range(40)).to_pandas()).write.format(FMT).options(**opts).mode("append").save(path)
    a, b = sorted(_two_ts_in_different_tasks(sp))
    _add(src, "a", trips(range(0, 20), ts=a, value=2.0))
    _add(src, "b", trips(range(20, 40), ts=b, value=3.0))
    q = _split_stream(sp, src, path, ck, opts)
    q.awaitTermination(180)
    assert q.exception() is None
    tokens = _log_tokens(path)
    parts = [t.split("-") for t in tokens]
    # four log files, two per bucket, each named by the Spark task that wrote it (never the driver path's i-0-0)
    assert len(tokens) == 4 and sorted(p[0] for p in parts) == ["0", "0", "1", "1"]
    assert len({p[2] for p in parts}) == 2 and all(p[1:] != ["0", "0"] for p in parts)
    assert len([f for f in _files_outside_hoodie(path) if ".log." in f]) == 4
    expect = sorted([(str(i), "2024-01-01", a, 2.0) for i in range(20)] + [(str(i), "2024-01-01", b, 3.0) for i in range(20, 40)],
                    key=repr)
    assert rows(hudi_read(path), COLS) == _ours(path) == expect
    # keys in both tasks: redone through the driver path (the driver path's tokens)
    where = _spark_partition_of(sp, range(100, 140))
    c = next(t for t in where if where[t] == 0)
    d = next(t for t in where if where[t] == 1)
    _add(src, "c", trips(range(0, 3), ts=c, value=4.0))
    _add(src, "d", trips(range(0, 3), ts=d, value=5.0))
    q = _split_stream(sp, src, path, ck, opts)
    q.awaitTermination(180)
    assert q.exception() is None
    assert all(t.split("-")[1:] == ["0", "0"] for t in _log_tokens(path))
    got = {r[0]: r[3] for r in _ours(path)}
    assert {k: got[k] for k in ("0", "1", "2")} == {k: 5.0 if d > c else 4.0 for k in ("0", "1", "2")}
    assert rows(hudi_read(path), COLS) == _ours(path)


def test_a_stream_into_a_table_with_virtual_keys_writes_no_meta_values(sp, tmp_path, zk_server, zk_base):
    """``hoodie.populate.meta.fields=false``: the stream's commits update rows found by their key
    fields, and the files hold no meta values (hudi-rs reads the same rows)."""
    src, path, ck = tmp_path / "src", str(tmp_path / "t"), str(tmp_path / "ck")
    opts = {**_opts(zk_server, zk_base), "hoodie.populate.meta.fields": "false"}
    _add(src, "a", trips(range(4)))
    _run(sp, src, path, ck, opts)
    _add(src, "b", trips(range(2, 6), ts=2, value=2.0))
    _run(sp, src, path, ck, opts)
    assert len(_commits(path)) == 2 and mw.Table.open(path).config.virtual_keys
    want = sorted([(str(i), "2024-01-01", 1, 1.0) for i in range(2)]
                  + [(str(i), "2024-01-01", 2, 2.0) for i in range(2, 6)], key=repr)
    assert rows(hudi_read(path), COLS) == _ours(path) == want
    for f in mw.Table.open(path).snapshot().files():
        t = pq.read_table(os.path.join(path, f.path), columns=["_hoodie_commit_time", "_hoodie_record_key"])
        assert t.column(0).null_count == t.column(1).null_count == t.num_rows
