"""On S3, independent requests go out side by side (bounded), at the same request count.

moto's S3 server behind :class:`testbed.moto_s3.CountingLatency` with a high added latency while
an operation is measured, and a middleware that records how many requests are in flight at once:
a Merge-on-Read snapshot read fetches its files ahead, side by side; an upsert uploads its log
files side by side; neither sends more requests than it did one after another. A failed upload
fails the write with a typed error and commits nothing. ``Storage.delete_many`` sends one batch
request per 1,000 files and names the files it could not delete.
"""
from __future__ import annotations

import contextlib
import threading
from collections import Counter
from contextlib import contextmanager
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import multiwriter as mw
from multiwriter import s3_store
from multiwriter.errors import DeleteError, UnsafePathError, UploadError
from multiwriter.storage import Storage
from multiwriter.write import executor

pytestmark = pytest.mark.timeout(600)

SCHEMA = pa.schema([("id", pa.string()), ("date", pa.string()), ("ts", pa.int64()), ("v", pa.float64())])
DAYS = ["2024-01-01", "2024-01-02"]
BUCKETS = 4
#: the latency added to each request while an operation is measured
LATENCY_S = 0.1


class InFlight:
    """A WSGI middleware: the most requests of each kind in flight at once since :meth:`reset`,
    and PUTs refused (403) while their path contains :attr:`refuse`."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.mu = threading.Lock()
        self.now: Counter[str] = Counter()
        self.most: Counter[str] = Counter()
        self.refuse: str | None = None

    def reset(self) -> None:
        with self.mu:
            self.most = Counter()

    def __call__(self, environ: dict, start_response: Any) -> Any:
        method, path = environ.get("REQUEST_METHOD", ""), environ.get("PATH_INFO", "")
        if method == "PUT" and self.refuse and self.refuse in path:
            start_response("403 Forbidden", [("Content-Type", "application/xml")])
            return [b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>AccessDenied</Code>"
                    b"<Message>refused by the test</Message></Error>"]
        with self.mu:
            self.now[method] += 1
            self.most[method] = max(self.most[method], self.now[method])
        try:
            return list(self.app(environ, start_response))
        finally:
            with self.mu:
                self.now[method] -= 1


@pytest.fixture(scope="module")
def s3():
    from testbed.moto_s3 import CountingLatency, MotoS3

    holder = {}

    def wrap(app):
        holder["counter"] = CountingLatency(app, 0.0)
        holder["flight"] = InFlight(holder["counter"])
        return holder["flight"]

    with MotoS3(prefix="mwconc", wrap=wrap) as server:
        server.counter, server.flight = holder["counter"], holder["flight"]
        yield server


@contextmanager
def measured(s3, latency_s: float = LATENCY_S):
    """The block's requests by kind (a Counter filled at the end), each answered ``latency_s`` late."""
    counts: Counter[str] = Counter()
    s3.counter.take()
    s3.flight.reset()
    s3.counter.latency_s = latency_s
    try:
        yield counts
    finally:
        s3.counter.latency_s = 0.0
        counts.update(s3.counter.take())


def _rows(ids: np.ndarray, ts: int) -> pa.Table:
    return pa.table({"id": [f"k{i:08d}" for i in ids], "date": [DAYS[i % len(DAYS)] for i in ids],
                     "ts": np.full(len(ids), ts, np.int64), "v": ids.astype(np.float64) * ts}, schema=SCHEMA)


def _table(s3, upserts: int = 2) -> tuple[str, mw.Writer]:
    """A Merge-on-Read table of 2 partitions x 4 buckets: a base file per group, then ``upserts``
    upserts touching every group (a log file each)."""
    uri = s3.bucket() + "/t"
    mw.Table.create(uri, name="t", schema=SCHEMA, record_key="id", partition_by=["date"], ordering_field="ts",
                    table_type="MERGE_ON_READ", num_buckets=BUCKETS)
    w = mw.Writer(mw.Table.open(uri), mw.WriterConfig(writer_id="w", executor="driver", lock=mw.InProcessLock()))
    w.write(_rows(np.arange(400), 0))
    for ts in range(1, upserts + 1):
        w.write(_rows(np.arange(0, 400, 3), ts))
    return uri, w


def _forget_cache() -> None:
    """Drop the Parquet objects this process keeps after a read: each read measured here pays
    for its own."""
    with s3_store.S3Handler._mu:
        s3_store.S3Handler._recent.clear()
        s3_store.S3Handler._recent_bytes = 0


def _data_files(table: mw.Table) -> int:
    return sum(1 + len(f.logs) for f in table.snapshot().files())


@contextmanager
def _one_after_another():
    """Reads and publishes as before: no read ahead, each publish sent by its writer."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Storage, "read_ahead", lambda self, files: contextlib.nullcontext())
        mp.setattr(Storage, "publishing_together", lambda self: contextlib.nullcontext(_Direct()))
        yield


class _Direct:
    def run(self, fn, *args, **kwargs):
        return fn(*args, **kwargs)


def test_a_merge_on_read_snapshot_read_fetches_its_files_side_by_side(s3):
    uri, w = _table(s3)
    w.close()
    files = _data_files(mw.Table.open(uri))
    assert files == 2 * BUCKETS * 3
    _forget_cache()
    with measured(s3) as together:
        got = mw.Table.open(uri).read()
    most = s3.flight.most["GET"]
    assert most >= 8, f"at most {most} GETs in flight while reading {files} files"
    _forget_cache()
    with _one_after_another(), measured(s3, 0.0) as before:
        want = mw.Table.open(uri).read()
    assert got.sort_by("id").equals(want.sort_by("id"))
    assert together == before, f"requests grew: {dict(together)} vs {dict(before)}"
    assert together["GET"] >= files


def test_an_incremental_read_and_a_copy_on_write_read_fetch_side_by_side(s3):
    uri, w = _table(s3)
    try:
        t = mw.Table.open(uri)
        tl = t.timeline()
        start = tl.completed_writes()[0].completion_time
        _forget_cache()
        with measured(s3) as together:
            got = t.read_incremental(start)
        assert s3.flight.most["GET"] >= 8, s3.flight.most
        _forget_cache()
        with _one_after_another(), measured(s3, 0.0) as before:
            want = t.read_incremental(start)
        assert got.sort_by("id").equals(want.sort_by("id"))
        assert together == before
    finally:
        w.close()
    cow = s3.bucket() + "/cow"
    mw.Table.create(cow, name="c", schema=SCHEMA, record_key="id", partition_by=["date"], ordering_field="ts")
    cfg = mw.WriterConfig(writer_id="c", executor="driver", lock=mw.InProcessLock(), target_file_size_bytes=4096)
    mw.write(_rows(np.arange(2000), 0), cow, cfg)
    files = len(mw.Table.open(cow).snapshot().files())
    assert files >= 8, files
    _forget_cache()
    with measured(s3) as together:
        got = mw.Table.open(cow).read()
    assert s3.flight.most["GET"] >= 8, s3.flight.most
    _forget_cache()
    with _one_after_another(), measured(s3, 0.0) as before:
        want = mw.Table.open(cow).read()
    assert got.sort_by("id").equals(want.sort_by("id")) and got.num_rows == 2000
    assert together == before


def test_a_read_ahead_holds_at_most_its_budget(s3, monkeypatch):
    """A budget below one file: one file fetched ahead at a time, the rows and requests the same."""
    uri, w = _table(s3, upserts=1)
    w.close()
    mw.Table.open(uri).snapshot()  # the timeline and the listing, kept by this process for both reads
    _forget_cache()
    with measured(s3, 0.0) as alone:
        want = mw.Table.open(uri).read()
    monkeypatch.setattr(s3_store, "READ_AHEAD_BYTES", 1)
    held: list[int] = []
    pump = s3_store._ReadAhead.pump

    def watched(self):
        pump(self)
        held.append(len([f for f, _ in self.fetches.values() if not f.done()]))

    monkeypatch.setattr(s3_store._ReadAhead, "pump", watched)
    _forget_cache()
    with measured(s3, 0.0) as small:
        got = mw.Table.open(uri).read()
    assert got.sort_by("id").equals(want.sort_by("id"))
    assert small == alone
    assert held and max(held) <= 1, held


def test_an_upsert_uploads_its_log_files_side_by_side(s3, monkeypatch):
    """The same upsert into two tables of the same history: side by side, then one after another.
    One merge at a time (as when a plan has more file groups than the merge pool has threads):
    the uploads still overlap."""
    monkeypatch.setattr(executor, "MAX_PARALLEL_MERGES", 1)
    (uri, w), (other, w_other) = _table(s3, upserts=1), _table(s3, upserts=1)
    batch = _rows(np.arange(0, 400, 5), 7)
    try:
        with measured(s3) as together:
            r = w.write(batch)
        logs = [s for s in mw.Table.open(uri).commit_metadata(r.instant.requested_time).all_stats() if s.is_log]
        assert len(logs) == 2 * BUCKETS
        most = s3.flight.most["PUT"]
        assert most >= 4, f"at most {most} PUTs in flight for {len(logs)} log files"
        with _one_after_another(), measured(s3, 0.0) as before:
            w_other.write(batch)
        assert together == before, f"requests grew: {dict(together)} vs {dict(before)}"
    finally:
        w.close()
        w_other.close()
    for u in (uri, other):
        got = mw.Table.open(u).read(columns=["id", "ts"])
        assert got.num_rows == 400
        assert got.filter(pa.compute.equal(got["id"], "k00000005"))["ts"].to_pylist() == [7]


def test_a_failed_upload_fails_the_write_and_commits_nothing(s3):
    uri, w = _table(s3, upserts=1)
    before = mw.Table.open(uri).read().sort_by("id")
    completed = len(mw.Table.open(uri).timeline().completed_writes())
    s3.flight.refuse = "_1-0-0"  # the log file of one file group (write token of task 1)
    try:
        with pytest.raises(UploadError) as e:
            w.write(_rows(np.arange(0, 400, 7), 9))
    finally:
        s3.flight.refuse = None
        w.close()
    assert len(e.value.paths) == 1 and e.value.paths[0].endswith("_1-0-0"), e.value.paths
    t = mw.Table.open(uri)
    assert len(t.timeline().completed_writes()) == completed
    assert t.read().sort_by("id").equals(before)


def test_delete_many_on_s3_sends_one_request_per_thousand_files(s3):
    storage = Storage(s3.bucket() + "/t")
    rels = [f"p/f{i:05d}" for i in range(2100)]
    client = s3.client
    bucket = storage.root.partition("/")[0]
    for rel in rels[:40]:
        client.put_object(Bucket=bucket, Key=f"t/{rel}", Body=b"x")
    with measured(s3, 0.0) as counts:
        storage.delete_many(rels)  # 2,060 of them were never there: deleted alike
    assert counts["DELETE"] == 3 and sum(counts.values()) == 3, counts
    assert storage.list_names("p") == []
    with pytest.raises(UnsafePathError):
        storage.delete_many(["p/a", "../outside"])


def test_delete_many_on_s3_names_the_files_s3_did_not_delete(s3, monkeypatch):
    storage = Storage(s3.bucket() + "/t")
    real = s3_store.S3Handler.client.fget(storage._s3)

    class Refusing:
        def __getattr__(self, name):
            return getattr(real, name)

        def delete_objects(self, Bucket, Delete):  # noqa: N803 -- boto3's names
            keys = [o["Key"] for o in Delete["Objects"]]
            return {"Deleted": [{"Key": k} for k in keys if not k.endswith("b")],
                    "Errors": [{"Key": k, "Code": "AccessDenied", "Message": "no"} for k in keys if k.endswith("/b")]}

    monkeypatch.setattr(s3_store.S3Handler, "client", property(lambda self: Refusing()))
    with pytest.raises(DeleteError) as e:
        storage.delete_many(["p/a", "p/b", "p/ab"])
    assert set(e.value.paths) == {"p/b", "p/ab"}  # one refused, one left out of the answer
    assert "AccessDenied" in str(e.value)


def test_delete_many_on_a_local_disk(tmp_path):
    storage = Storage(str(tmp_path))
    for name in ("a", "b", "c"):
        storage.write_bytes(f"p/{name}", b"x")
    (tmp_path / "p" / "d").mkdir()
    (tmp_path / "p" / "d" / "inner").write_bytes(b"x")
    with pytest.raises(UnsafePathError):
        storage.delete_many(["p/a", "../outside"])
    assert storage.exists("p/a")
    with pytest.raises(DeleteError) as e:
        storage.delete_many(["p/a", "p/d", "p/gone", "p/c"])
    assert e.value.paths == ("p/d",)
    assert sorted(storage.list_names("p")) == ["b"]
    storage.delete_many(["p/b"])
    assert storage.list_names("p") == []
