"""What an upsert costs on S3 does not grow with the table (issue 57).

moto's S3 server behind :class:`testbed.moto_s3.CountingLatency` (no added latency here): the
requests of one upsert into two partitions are counted by the server itself, per bucket. They
must not grow with the partitions the upsert does not touch, nor with the number of commits the
table has seen; and every request of an upsert is accounted for by kind (no directory markers,
single PUTs for small objects).
"""
from __future__ import annotations

import os
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

import multiwriter as mw

pytestmark = pytest.mark.timeout(600)

SCHEMA = pa.schema([("id", pa.string()), ("date", pa.string()), ("ts", pa.int64()), ("v", pa.float64())])
DAYS = [f"2024-01-{d:02d}" for d in range(1, 29)]


@pytest.fixture(scope="module")
def s3():
    from testbed.moto_s3 import CountingLatency, MotoS3, SerializedWrites

    holder = {}

    def wrap(app):
        holder["counter"] = CountingLatency(SerializedWrites(app), 0.0, log=True)
        return holder["counter"]

    with MotoS3(prefix="mwreq", wrap=wrap) as server:
        server.counter = holder["counter"]
        yield server


def _rows(ids: np.ndarray, days: list[str], ts: int) -> pa.Table:
    return pa.table({"id": [f"k{i:08d}" for i in ids], "date": [days[i % len(days)] for i in ids],
                     "ts": np.full(len(ids), ts, np.int64), "v": ids.astype(np.float64) * ts}, schema=SCHEMA)


def _table(s3, partitions: int, table_type: str = "COPY_ON_WRITE") -> tuple[str, str, mw.WriterConfig]:
    uri = s3.bucket()
    bucket = uri.removeprefix("s3://")
    uri += "/t"
    extra = {"num_buckets": 2} if table_type == "MERGE_ON_READ" else {}
    mw.Table.create(uri, name="t", schema=SCHEMA, record_key="id", partition_by=["date"], ordering_field="ts",
                    metadata=True, table_type=table_type, **extra)
    cfg = mw.WriterConfig(writer_id="w", executor="driver", lock=mw.InProcessLock())
    ids = np.arange(partitions * 20)
    mw.write(_rows(ids, DAYS[:partitions], 0), uri, cfg)
    return uri, bucket, cfg


def _upsert_cost(s3, uri: str, bucket: str, cfg: mw.WriterConfig, ts: int) -> Counter:
    """The requests of one upsert into the first two partitions: 10 updates (in the first), 10
    new keys."""
    upd = np.arange(0, 60, 6)  # keys of the first partition in every table (and here too)
    new = 1_000_000 + ts * 100 + np.arange(10)
    batch = pa.concat_tables([_rows(upd, DAYS[:1], ts), _rows(new, DAYS[:2], ts)])
    s3.counter.take()
    mw.write(batch, uri, cfg)
    mine = [k for k, _, path in s3.counter.requests if path.startswith(f"/{bucket}/") or path == f"/{bucket}"]
    markers = [path for _, method, path in s3.counter.requests if method == "PUT" and path.endswith("/")]
    assert not markers, f"directory-marker objects written: {markers}"
    s3.counter.take()
    return Counter(mine)


def _total(c: Counter) -> int:
    return sum(c.values())


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_upsert_requests_do_not_grow_with_untouched_partitions(s3, table_type):
    small = _table(s3, 2, table_type)
    large = _table(s3, 24, table_type)
    for ts in (1, 2):  # the second upsert of each is compared: both tables past their first
        few = _upsert_cost(s3, *small, ts=ts)
        many = _upsert_cost(s3, *large, ts=ts)
    assert _total(many) <= _total(few), f"2 partitions: {dict(few)}; 24 partitions: {dict(many)}"
    assert many["LIST"] <= few["LIST"]
    assert many["MULTIPART"] == 0


#: ``make test`` ages a Copy-on-Write table; ``MW_FULL_MATRIX=1`` (``make test-full``) a Merge-on-Read one too
AGED = ["COPY_ON_WRITE"] + (["MERGE_ON_READ"] if os.environ.get("MW_FULL_MATRIX") == "1" else [])


@pytest.mark.parametrize("table_type", AGED)
def test_upsert_requests_do_not_grow_with_the_tables_age(s3, table_type):
    uri, bucket, cfg = _table(s3, 3, table_type)
    costs = [_total(_upsert_cost(s3, uri, bucket, cfg, ts)) for ts in range(1, 19)]
    # the median of four upserts: a periodic step (the decision log's pruning, the metadata
    # table's compaction) may fall in either window
    young, old = sorted(costs[2:6]), sorted(costs[-4:])
    assert old[1] <= young[1], f"requests per upsert over the table's life: {costs}"
    got = mw.Table.open(uri).read(columns=["id"]).num_rows
    assert got == 60 + 18 * 10


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_listings_do_not_grow_with_the_files_an_upsert_writes(s3, table_type):
    """An upsert into 12 partitions lists no more than one into 1: the instant's own timeline
    files are listed once per write, not once per data file (the in-process heartbeat check
    covers the rest), and a long-lived writer lists the timeline once per batch."""
    uri, bucket, _ = _table(s3, 12, table_type)
    w = mw.Writer(mw.Table.open(uri), mw.WriterConfig(writer_id="long", executor="driver", lock=mw.InProcessLock()))
    try:
        lists = {}
        for ts, parts in ((1, 1), (2, 12), (3, 1), (4, 12)):
            batch = _rows(np.arange(parts) + 1_000_000 * ts, DAYS[:parts], ts)
            s3.counter.take()
            r = w.write(batch)
            t = r.instant.requested_time
            listed = [path for kind, _, path in s3.counter.requests if kind == "LIST" and f"/{bucket}" in path]
            lists[(ts, parts)] = listed
            own = [p for p in listed if f"timeline%2F{t}" in p]
            assert len(own) == 1, f"{table_type}, {parts} partitions: the instant's files listed {len(own)} times"
            if ts > 1:  # the first batch also loads the schema the batch is prepared against
                # begin, commit, and on Copy-on-Write the new keys' check outside the lock (its key
                # reads never hold the lock; buckets of non-blocking writers need no such check)
                want = 3 if table_type == "COPY_ON_WRITE" else 2
                assert sum("prefix=t%2F.hoodie%2Ftimeline%2F&" in p for p in listed) == want, "\n".join(listed)
        assert len(lists[(4, 12)]) == len(lists[(3, 1)]), lists
    finally:
        w.close()


def _list_rounds(spans: list[tuple[float, float, str, str]], bucket: str) -> list[list[str]]:
    """The table's LISTs grouped into rounds: a round is a run of listings that waited side by
    side (each overlaps another of the round), so one after another they are separate rounds."""
    lists = sorted((a, b, p) for a, b, kind, p in spans if kind == "LIST" and f"/{bucket}" in p)
    rounds: list[list[str]] = []
    end = float("-inf")
    for a, b, p in lists:
        if a >= end:
            rounds.append([])
        rounds[-1].append(p)
        end = max(end, b)
    return rounds


def test_an_upsert_with_every_index_waits_on_one_listing_round_more_than_the_files_partition(s3):
    """Keeping the record index and the column and partition stats lists their partitions,
    but beside the metadata timeline: at most one round of listings more than an upsert into a
    table whose metadata table keeps the files partition alone (the record index's lookup,
    before the lock), however many index partitions there are. Under the lock the metadata
    table's listings go out once the decision log's is in, beside the data timeline's. LISTs answer 0.3 s
    late here, so listings sent one after another never overlap, and listings sent together
    overlap even on a loaded machine."""
    tables = {}
    for name, kept in (("files", {}), ("indexes", {"column_stats": True, "record_index": True})):
        uri = s3.bucket()
        bucket = uri.removeprefix("s3://")
        uri += "/t"
        mw.Table.create(uri, name="t", schema=SCHEMA, record_key="id", partition_by=["date"], ordering_field="ts",
                        metadata=True, **kept)
        cfg = mw.WriterConfig(writer_id="w", executor="driver", lock=mw.InProcessLock())
        mw.write(_rows(np.arange(60), DAYS[:3], 0), uri, cfg)
        tables[name] = (uri, bucket, cfg)
    rounds = {}
    s3.counter.list_latency_s = 0.3
    try:
        for name, (uri, bucket, cfg) in tables.items():
            batch = pa.concat_tables([_rows(np.arange(0, 60, 6), DAYS[:3], 1), _rows(1_000 + np.arange(10), DAYS[:3], 1)])
            s3.counter.take()
            mw.write(batch, uri, cfg)
            rounds[name] = _list_rounds(s3.counter.spans, bucket)
    finally:
        s3.counter.list_latency_s = None
        s3.counter.take()
    shown = {k: "\n".join(" | ".join(p.split("prefix=", 1)[-1].split("&", 1)[0] for p in r) for r in v)
             for k, v in rounds.items()}
    assert len(rounds["indexes"]) <= len(rounds["files"]) + 1, f"files only:\n{shown['files']}\nevery index:\n{shown['indexes']}"
    for name, rs in rounds.items():
        # under the lock (from the decision log's first listing) the metadata table is listed
        # once, beside the data timeline: no round of its own while the lock is held. Not
        # beside the decision log: sent before its answer, the listing could miss the
        # deltacommit of the decision it shows (tests/model/metadata_read_ahead.py)
        held = next(i for i, r in enumerate(rs) if any("decisions" in p for p in r))
        assert not any("metadata%2F" in p for p in rs[held]), shown[name]
        assert any("metadata%2F.hoodie%2Ftimeline" in p for p in rs[held + 1]), shown[name]
        assert any("t%2F.hoodie%2Ftimeline%2F&" in p for p in rs[held + 1]), shown[name]
        assert not [r for r in rs[held + 2:] if any("metadata%2F" in p for p in r)], shown[name]
    for name, (uri, _, _) in tables.items():
        assert mw.Table.open(uri).read(columns=["id"]).num_rows == 70, name


def test_a_companion_job_run_walks_the_store_once(s3):
    """The clean plans from the metadata table's listing; the failed-write sweep walks the table
    and the orphan scan takes the same walk: one recursive listing per run however many steps
    look at the files (on a large table each is a request per thousand files)."""
    uri, bucket, cfg = _table(s3, 3)
    for ts in (1, 2, 3):
        _upsert_cost(s3, uri, bucket, cfg, ts)
    s3.counter.take()
    with mw.Cleaner(uri, lock=cfg.lock, retain_commits=1) as cleaner:
        report = cleaner.run_once()
    assert report.old_versions_deleted > 0, "the clean ran"
    walks = [p for kind, _, p in s3.counter.requests
             if kind == "LIST" and p.startswith(f"/{bucket}?") and "prefix=t%2F&" in p and "delimiter" not in p]
    assert len(walks) == 1, walks
    assert mw.Table.open(uri).read(columns=["id"]).num_rows == 3 * 20 + 3 * 10


def test_a_clean_deletes_its_files_in_batches(s3):
    """Retention deletes the old versions it planned with batch deletes (one request per 1,000
    files, the plan split once for the half-way fault point), not a request per file, and the
    files left are exactly the live ones: the clean deleted its own and nothing else."""
    uri, bucket, cfg = _table(s3, 3)
    for ts in (1, 2, 3):
        _upsert_cost(s3, uri, bucket, cfg, ts)
    s3.counter.take()
    with mw.Cleaner(uri, lock=cfg.lock, retain_commits=1, clustering=None) as cleaner:  # retention's deletes alone
        report = cleaner.run_once()
    assert report.old_versions_deleted >= 3, report
    requests = list(s3.counter.requests)
    single = [p for kind, method, p in requests if kind == "DELETE" and method == "DELETE" and "/.hoodie/" not in p]
    batches = [p for kind, method, p in requests if kind == "DELETE" and method == "POST"]
    assert not single, single
    assert 1 <= len(batches) <= 2, batches
    keys = [o["Key"] for page in s3.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="t/")
            for o in page.get("Contents", [])]
    left = {k.removeprefix("t/") for k in keys if k.endswith(".parquet") and "/.hoodie/" not in k}
    assert left == {f.path for f in mw.Table.open(uri).snapshot().files()}
    assert mw.Table.open(uri).read(columns=["id"]).num_rows == 3 * 20 + 3 * 10


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_a_driver_write_never_lists_its_own_markers(s3, table_type):
    """A driver write marks its files in one list it writes itself, so its commit reads that
    list from memory and deletes the marker objects by name: the marker directory is never
    listed, and none of it is left behind (the store's own listing says so)."""
    uri, bucket, cfg = _table(s3, 3, table_type)
    s3.counter.take()
    upd = np.arange(0, 30, 3)
    r = mw.write(pa.concat_tables([_rows(upd, DAYS[:3], 1), _rows(np.arange(500, 510), DAYS[:3], 1)]), uri, cfg)
    t = r.instant.requested_time
    requests = list(s3.counter.requests)
    s3.counter.take()
    temp = f"t/.hoodie/.temp/{t}/"
    put = [p for kind, method, p in requests if method == "PUT" and f"/{temp}MARKERS" in p]
    assert len(put) == 2, f"the type file and one marker list: {put}"
    listed = [p for kind, _, p in requests if kind == "LIST" and ".temp" in p]
    assert not listed, listed
    left = s3.client.list_objects_v2(Bucket=bucket, Prefix=temp).get("KeyCount", 0)
    assert left == 0, f"{left} objects left under {temp}"
    _same_rows_as_hudi_rs(uri, 3 * 20 + 10)
    if table_type == "MERGE_ON_READ":  # and after the log files are compacted
        with mw.Cleaner(uri, lock=cfg.lock, compaction=mw.CompactionConfig(delta_commits=1)) as cleaner:
            assert cleaner.compact_once().compaction_instants
        _same_rows_as_hudi_rs(uri, 3 * 20 + 10)


def _same_rows_as_hudi_rs(uri: str, n: int) -> None:
    """Our reader and hudi-rs (listing files from the metadata table) read the same ``n`` rows."""
    from tests.oracle import hudi_read, rows, s3_storage_options

    ours = mw.Table.open(uri).read(columns=["id", "ts", "v"])
    theirs = hudi_read(uri, storage_options=s3_storage_options(uri))
    assert ours.num_rows == n and rows(theirs, ["id", "ts", "v"]) == rows(ours, ["id", "ts", "v"])


def test_an_archival_reads_its_history_once_and_keeps_a_suffix_active(s3):
    """Archival reads the history's snapshot number and manifest once under the lock, however
    often its steps (append, compaction, the trust check) look at them; it deletes the
    archived instants' requested and inflight files in one batch and their completed files one
    by one. What it leaves active (the store's own listing) is a suffix of the timeline, and
    hudi-rs reads every row through the archived history."""
    from tests.oracle import hudi_read, s3_storage_options

    uri, bucket, cfg = _table(s3, 2)
    for ts in range(1, 9):
        _upsert_cost(s3, uri, bucket, cfg, ts)
    s3.counter.take()
    with mw.Cleaner(uri, lock=cfg.lock, retain_commits=2, archive_keep_min=3, archive_keep_max=4,
                    clustering=None) as cleaner:
        report = cleaner.run_once()
    requests = list(s3.counter.requests)
    assert report.archived >= 3, report
    version_reads = [p for _, m, p in requests if m == "GET" and p.endswith("/timeline/history/_version_")]
    # once by each step that reads the history: the plan checks, archival, the failed-write sweep
    assert len(version_reads) <= 3, version_reads
    timeline = f"/{bucket}/t/.hoodie/timeline/"
    single = [p for kind, m, p in requests if m == "DELETE" and p.startswith(timeline) and "/history/" not in p]
    assert len(single) == report.archived and all(p.endswith(".commit") for p in single), single
    names = [o["Key"].rsplit("/", 1)[-1] for o in
             s3.client.list_objects_v2(Bucket=bucket, Prefix="t/.hoodie/timeline/", Delimiter="/").get("Contents", [])]
    completed = sorted(n.split("_")[0] for n in names if "_" in n.split(".")[0])
    left = sorted({n.split(".")[0].split("_")[0] for n in names})
    assert left == completed and len(completed) >= 3, names
    archived = [p.rsplit("/", 1)[-1].split("_")[0] for p in single]
    assert max(archived) < completed[0], (archived, completed)
    expected = 2 * 20 + 3 + 8 * 10  # the first upsert's "updates" of keys 42, 48 and 54 are new there
    assert mw.Table.open(uri).read(columns=["id"]).num_rows == expected
    assert hudi_read(uri, storage_options=s3_storage_options(uri)).num_rows == expected


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_a_writer_never_reads_back_the_commit_it_wrote(s3, table_type):
    """A completed instant file is written once and never changes, so the process that wrote
    it keeps its bytes: a long-lived writer's next batch does not fetch the commit of its last
    one (one GET per micro-batch of a stream), while a commit of another process is read."""
    uri, bucket, _ = _table(s3, 2, table_type)
    w = mw.Writer(mw.Table.open(uri), mw.WriterConfig(writer_id="long", executor="driver", lock=mw.InProcessLock()))
    try:
        done = []
        for ts in (1, 2, 3):
            s3.counter.take()
            done.append(w.write(_rows(np.arange(4) + 1_000_000 * ts, DAYS[:2], ts)).instant)
            got = [p for _, m, p in s3.counter.requests if m == "GET" and "/.hoodie/timeline/" in p]
            if ts > 1:
                prev = done[-2]
                assert not [p for p in got if f"/{prev.requested_time}_" in p], got
    finally:
        w.close()
    _same_rows_as_hudi_rs(uri, 2 * 20 + 12)
    if table_type == "MERGE_ON_READ":
        with mw.Cleaner(uri, lock=mw.InProcessLock(), compaction=mw.CompactionConfig(delta_commits=1)) as cleaner:
            assert cleaner.compact_once().compaction_instants
        _same_rows_as_hudi_rs(uri, 2 * 20 + 12)


class _MarkedLock:
    """A table lock that writes LOCK/UNLOCK into the request log, so a test can tell the
    requests sent under a lock hold from those between holds."""

    def __init__(self, inner, counter) -> None:
        self.inner, self.counter = inner, counter

    def acquire(self, timeout_s=None, holder=None, **kw) -> None:
        self.inner.acquire(timeout_s, holder, **kw)
        self.counter.requests.append(("LOCK", "", ""))

    def release(self) -> None:
        if self.inner.is_held():
            self.counter.requests.append(("UNLOCK", "", ""))
        self.inner.release()

    def __getattr__(self, name):
        return getattr(self.inner, name)


class _MarkingProvider(mw.InProcessLock):
    def __init__(self, counter) -> None:
        super().__init__()
        self.counter = counter

    def for_table(self, table_id, storage):
        return _MarkedLock(super().for_table(table_id, storage), self.counter)


def test_a_companion_job_run_lists_each_folder_once_between_lock_holds(s3):
    """Between its lock holds a companion run plans and reports on one listing of each folder
    (every action is decided again under the lock, on listings read there); the marker,
    heartbeat and quarantine folders come from the run's walk of the table; what the run wrote
    itself (its clean's metadata-table log, merged by archival's compaction of the metadata
    table; the history batch and manifest archival wrote) is never read back; a commit
    decision is read in one request (no HEAD before its GET). Both readers read every row. A
    run after it, with nothing due, takes no lock."""
    uri, bucket, cfg = _table(s3, 2)
    for ts in range(1, 9):
        _upsert_cost(s3, uri, bucket, cfg, ts)
    cleaner = mw.Cleaner(uri, lock=_MarkingProvider(s3.counter), retain_commits=2, archive_keep_min=3,
                         archive_keep_max=4, clustering=None)
    s3.counter.take()
    report = cleaner.run_once()
    requests = list(s3.counter.requests)
    s3.counter.take()
    assert report.archived >= 3 and report.old_versions_deleted > 0 and not report.errors, report
    assert sum(1 for kind, _, _ in requests if kind == "LOCK") >= 2, "the clean's hold and archival's"
    held, seen = False, set()
    for kind, _, path in requests:
        if kind in ("LOCK", "UNLOCK"):
            held, seen = kind == "LOCK", set()
        elif kind == "LIST" and not held and "delimiter" in path:
            assert path not in seen, f"listed twice between lock holds: {path}"
            seen.add(path)
    for folder in (".temp", ".heartbeat", ".quarantine"):
        listed = [p for kind, _, p in requests if kind == "LIST" and f"%2F{folder}%2F" in p]
        assert not listed, listed
    put = {p for kind, _, p in requests if kind == "PUT"}
    read_back = [p for kind, _, p in requests if kind == "GET" and p in put
                 and ("/metadata/files/" in p or ("/timeline/history/" in p and not p.endswith("_version_")))]
    assert not read_back, read_back
    assert not [p for kind, _, p in requests if kind == "HEAD" and "/.decisions/" in p]
    _same_rows_as_hudi_rs(uri, 2 * 20 + 3 + 8 * 10)
    # a run with nothing due takes no lock: a companion job's trigger costs the writers nothing
    try:  # its next run, with nothing due (a cleaner's first run takes the lock once, to know it can)
        report = cleaner.run_once()
        idle = list(s3.counter.requests)
    finally:
        cleaner.close()
    assert not report.errors and not report.archived and not report.old_versions_deleted, report
    assert not [kind for kind, _, _ in idle if kind == "LOCK"], "a run with nothing due took the lock"
