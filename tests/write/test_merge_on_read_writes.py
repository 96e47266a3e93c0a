"""Writes to Merge-on-Read tables: log files beside base files, deltacommits, the bucket index;
every table is read by hudi-rs and by our reader alike."""
from __future__ import annotations

import pyarrow as pa
import pytest

import multiwriter as mw
from multiwriter.table import bucket
from multiwriter.table.files import list_files
from multiwriter.table.properties import parse
from tests.conftest import trips
from tests.oracle import hudi_read, rows

COLS = ["id", "date", "ts", "value"]


def _cfg(writer="w", **kw):
    return mw.WriterConfig(writer_id=writer, lock=mw.InProcessLock(), **kw)


def _same_as_hudi_rs(path: str) -> list[tuple]:
    ours = rows(mw.Table.open(path).read(), COLS)
    assert ours == rows(hudi_read(path), COLS)
    return ours


def test_properties_record_the_table_type_and_bucket_index(mor_table, table_path):
    props = parse(open(f"{table_path}/.hoodie/hoodie.properties").read())
    assert props["hoodie.table.type"] == "MERGE_ON_READ"
    assert props["hoodie.index.type"] == "BUCKET" and props["hoodie.bucket.index.num.buckets"] == "4"
    assert props["hoodie.bucket.index.hash.field"] == "id"
    t = mw.Table.open(table_path)
    assert t.config.merge_on_read and t.config.num_buckets == 4


def test_first_write_makes_base_files_then_updates_append_log_files(mor_table, table_path):
    r = mw.write(trips(range(20), ts=1, value=1.0), table_path, _cfg())
    assert r.instant.action == "deltacommit"
    bases, logs = list_files(mor_table.storage)
    assert logs == [] and len(bases) == len({bucket.bucket_id(str(i), 4) for i in range(20)})
    assert all(bucket.bucket_of_file_id(b.file_id) is not None for b in bases)
    before = {b.path: open(f"{table_path}/{b.path}", "rb").read() for b in bases}
    r2 = mw.write(trips(range(5), ts=2, value=2.0), table_path, _cfg())
    bases2, logs2 = list_files(mor_table.storage)
    assert {b.path: open(f"{table_path}/{b.path}", "rb").read() for b in bases2} == before, "base files untouched"
    assert len(logs2) == len({bucket.bucket_id(str(i), 4) for i in range(5)})
    meta = mor_table.timeline().commit_metadata(r2.instant)
    assert all(s.is_log and s.log_files == (s.path.rsplit("/", 1)[-1],) and s.prev_commit == r2.instant.requested_time
               for s in meta.all_stats())
    got = dict(rows(mw.Table.open(table_path).read(), ["id", "value"]))
    assert got == {str(i): (2.0 if i < 5 else 1.0) for i in range(20)}
    _same_as_hudi_rs(table_path)


def test_event_time_wins_over_commit_order(mor_table, table_path):
    mw.write(trips(range(6), ts=5, value=5.0), table_path, _cfg())
    mw.write(trips(range(3), ts=9, value=9.0), table_path, _cfg())
    mw.write(trips(range(6), ts=7, value=7.0), table_path, _cfg())  # late data: older event time for 0-2
    got = dict(rows(mw.Table.open(table_path).read(), ["id", "value"]))
    assert got == {"0": 9.0, "1": 9.0, "2": 9.0, "3": 7.0, "4": 7.0, "5": 7.0}
    _same_as_hudi_rs(table_path)


def test_deletes_go_to_delete_blocks(mor_table, table_path):
    mw.write(trips(range(8), ts=1), table_path, _cfg())
    mw.write(trips([1, 2, 3], ts=2), table_path, _cfg(operation="delete"))
    got = _same_as_hudi_rs(table_path)
    assert sorted(r[0] for r in got) == ["0", "4", "5", "6", "7"]
    mw.write(trips([2], ts=3, value=3.0), table_path, _cfg())  # re-inserted after its delete
    got = dict(rows(mw.Table.open(table_path).read(), ["id", "value"]))
    assert got["2"] == 3.0 and "1" not in got
    _same_as_hudi_rs(table_path)


def test_as_of_reads_each_deltacommit_as_hudi_rs(mor_table, table_path):
    times = []
    for n in range(4):
        times.append(mw.write(trips(range(n, n + 4), ts=n, value=float(n)), table_path, _cfg()).instant.requested_time)
    t = mw.Table.open(table_path)
    for at in times:
        assert rows(t.read(as_of=at), COLS) == rows(hudi_read(table_path, as_of=at), COLS)


def test_insert_operation_routes_by_bucket_too(mor_table, table_path):
    mw.write(trips(range(4), ts=1), table_path, _cfg())
    mw.write(trips(range(4), ts=2, value=2.0), table_path, _cfg(operation="insert"))
    got = _same_as_hudi_rs(table_path)
    assert len(got) == 4 and {r[3] for r in got} == {2.0}, "one version per key: the bucket holds it"


def test_non_blocking_is_the_default_and_refused_on_copy_on_write(trips_table, table_path, tmp_path):
    with pytest.raises(mw.errors.ConfigError, match="MERGE_ON_READ"):
        mw.write(trips(range(2)), table_path, _cfg(concurrency="non_blocking"))
    mor = str(tmp_path / "mor")
    mw.Table.create(mor, name="m", schema=trips(range(1)).schema, record_key="id", partition_by=["date"],
                    ordering_field="ts", table_type="MERGE_ON_READ")
    with pytest.raises(mw.errors.ConfigError, match="bucket index"):
        mw.write(trips(range(2)), mor, _cfg(concurrency="non_blocking"))
    from multiwriter.write.writer import Writer

    t = mw.Table.create(str(tmp_path / "b"), name="b", schema=trips(range(1)).schema, record_key="id",
                        partition_by=["date"], ordering_field="ts", table_type="MERGE_ON_READ", num_buckets=2)
    w = Writer(t, _cfg())
    assert w.non_blocking
    w.close()


def test_options_map_hudi_keys_onto_the_table_type():
    from multiwriter.config import table_settings_from_options

    s = table_settings_from_options({"hoodie.table.name": "t", "hoodie.datasource.write.recordkey.field": "id",
                                     "hoodie.table.type": "merge_on_read", "hoodie.index.type": "BUCKET",
                                     "hoodie.bucket.index.num.buckets": "8"})
    assert s["table_type"] == "MERGE_ON_READ" and s["num_buckets"] == 8
    cfg = mw.WriterConfig.from_options({"hoodie.write.concurrency.mode": "NON_BLOCKING_CONCURRENCY_CONTROL"},
                                       lock=mw.InProcessLock())
    assert cfg.concurrency == "non_blocking"
    assert pa is not None


def test_read_optimized_reads_base_files_only(mor_table, table_path):
    mw.write(trips(range(6), ts=1, value=1.0), table_path, _cfg())
    mw.write(trips(range(3), ts=2, value=2.0), table_path, _cfg())
    t = mw.Table.open(table_path)
    ro = rows(t.read(read_optimized=True), COLS)
    assert ro == rows(hudi_read(table_path, read_optimized=True), COLS)
    assert {r[3] for r in ro} == {1.0}, "the updates live in log files, not read here"
    assert {r[3] for r in rows(t.read(), COLS)} == {1.0, 2.0}


def test_incremental_follows_completion_order_across_out_of_order_commits(mor_table, table_path, tmp_path, monkeypatch):
    """A long write requested first and completed last is read in the range it completed in: a
    consumer that stopped at an earlier commit's completion time does not skip it."""
    import threading

    from multiwriter import faults
    from tests.conftest import wait_hanging

    mw.write(trips(range(8), ts=1, value=1.0), table_path, _cfg("seed"))
    first = mw.Table.open(table_path).timeline().completed_writes()[-1].completion_time
    monkeypatch.setenv("MULTIWRITER_FAULT_DIR", str(tmp_path))
    faults.configure("after-data-files=hang")
    box = {}
    backfill = threading.Thread(target=lambda: box.setdefault(
        "r", mw.write(trips(range(4), ts=5, value=5.0), table_path, _cfg("backfill", heartbeat_interval_s=5.0))))
    try:
        backfill.start()
        assert wait_hanging(tmp_path, backfill)
        stream = mw.write(trips(range(4, 8), ts=6, value=6.0), table_path, _cfg("stream"))
    finally:
        (tmp_path / "after-data-files.release").touch()
        backfill.join(30)
        faults.configure(None)
    back = box["r"].instant
    assert back.requested_time < stream.instant.requested_time and box["r"].attempts == 1
    checkpoint = stream.instant.completion_time
    assert back.completion_time > checkpoint
    t = mw.Table.open(table_path)
    upto = dict(rows(t.read_incremental(first, checkpoint), ["id", "value"]))
    after = dict(rows(t.read_incremental(checkpoint, None), ["id", "value"]))
    assert upto == {str(i): 6.0 for i in range(4, 8)}
    assert after == {str(i): 5.0 for i in range(4)}, "the backfill is delivered after the checkpoint"
    assert dict(rows(t.read_incremental(None, None), ["id", "value"])) == dict(rows(t.read(), ["id", "value"]))
    _same_as_hudi_rs(table_path)


def test_two_writers_creating_one_bucket_both_land_without_a_retry(mor_table, table_path, tmp_path, monkeypatch):
    """Both insert the same new keys into empty buckets: the later committer finds the bucket's
    base file made meanwhile and turns its own into a log file of that group (same instant)."""
    _racing(tmp_path, monkeypatch,
            lambda: mw.write(trips(range(6), ts=9, value=9.0), table_path, _cfg("a", heartbeat_interval_s=5.0)),
            lambda: mw.write(trips(range(6), ts=3, value=3.0), table_path, _cfg("b")))
    bases, logs = list_files(mw.Table.open(table_path).storage)
    assert len({b.file_id for b in bases}) == len(bases), "one base file per bucket"
    assert logs, "the later committer's rows are a log file"
    got = _same_as_hudi_rs(table_path)
    assert {(r[0], r[3]) for r in got} == {(str(i), 9.0) for i in range(6)}, "one version per key: the highest ts"


def _racing(tmp_path, monkeypatch, slow_write, fast_write) -> None:
    """``slow_write`` holds its written files (before its commit) while ``fast_write`` commits."""
    import threading

    from multiwriter import faults
    from tests.conftest import wait_hanging

    monkeypatch.setenv("MULTIWRITER_FAULT_DIR", str(tmp_path))
    faults.configure("after-data-files=hang")
    box: dict = {}
    def run() -> None:
        try:
            box["r"] = slow_write()
        except Exception as e:  # noqa: BLE001 - reported below
            box["error"] = e

    slow = threading.Thread(target=run)
    try:
        slow.start()
        assert wait_hanging(tmp_path, slow)
        faults.configure(None)
        fast = fast_write()
    finally:
        (tmp_path / "after-data-files.release").touch()
        slow.join(30)
        faults.configure(None)
    assert "error" not in box, box
    assert fast.attempts == 1 and box["r"].attempts == 1 and box["r"].conflicts == 0


def test_a_delete_racing_the_creation_of_its_bucket_wins_by_event_time(mor_table, table_path, tmp_path, monkeypatch):
    """The deletes (ts 9) see no file group in their buckets; meanwhile another writer creates
    those groups with older versions (ts 3). The deletes still reach the groups (a delete block
    the new base's slice merges) and win by event time."""
    mw.write(trips([100], ts=1), table_path, _cfg("seed"))
    _racing(tmp_path, monkeypatch,
            lambda: mw.write(trips(range(6), ts=9), table_path, _cfg("d", operation="delete", heartbeat_interval_s=5.0)),
            lambda: mw.write(trips(range(6), ts=3, value=3.0), table_path, _cfg("u")))
    got = _same_as_hudi_rs(table_path)
    assert [r[0] for r in got] == ["100"], got


def test_a_newer_upsert_racing_an_older_delete_of_a_new_bucket_is_kept(mor_table, table_path, tmp_path, monkeypatch):
    """The other way round: the upsert (ts 10) is in flight while deletes (ts 9) of the same
    keys, in buckets without a file group, commit first. The upsert's base file stays readable
    and its newer versions win."""
    mw.write(trips([100], ts=1), table_path, _cfg("seed"))
    _racing(tmp_path, monkeypatch,
            lambda: mw.write(trips(range(6), ts=10, value=10.0), table_path, _cfg("u", heartbeat_interval_s=5.0)),
            lambda: mw.write(trips(range(6), ts=9), table_path, _cfg("d", operation="delete")))
    got = _same_as_hudi_rs(table_path)
    assert {(r[0], r[3]) for r in got} == {("100", 1.0)} | {(str(i), 10.0) for i in range(6)}, got


def test_upserts_after_an_overwrite_land_in_live_bucket_groups_through_compaction_and_cleaning(mor_table, table_path):
    """insert_overwrite_table on a bucket table keeps every bucket's group live (its own fixed
    file id): upserts after it, of the overwrite's keys and of new keys in every bucket of
    every partition, stay visible to hudi-rs and to our reader, also once the companion job
    compacted and cleaned. The model is the acknowledged writes."""
    lock = mw.InProcessLock()
    model: dict[tuple[str, str], float] = {}

    def write(data: pa.Table, **kw) -> None:
        mw.write(data, table_path, mw.WriterConfig(writer_id="w", lock=lock, **kw))
        if kw.get("operation") == "insert_overwrite_table":
            model.clear()
        model.update({(i, d): v for i, d, v in rows(data, ["id", "date", "value"])})

    def check() -> None:
        expected = sorted(((i, d, v) for (i, d), v in model.items()), key=repr)
        assert rows(mw.Table.open(table_path).read(), ["id", "date", "value"]) == expected
        assert rows(hudi_read(table_path), ["id", "date", "value"]) == expected

    for date in ("2024-01-01", "2024-01-02"):
        write(trips(range(20), date=date, ts=1, value=1.0))
    before = set(mw.Table.open(table_path).snapshot().slices)
    write(trips([0, 1], ts=2, value=2.0), operation="insert_overwrite_table")
    t = mw.Table.open(table_path)
    meta = t.timeline().commit_metadata(t.timeline().last_completed_write())
    assert meta.operation_type == "INSERT_OVERWRITE_TABLE" and not meta.partition_to_replace_file_ids
    assert {(s.partition_path, s.file_id) for s in meta.all_stats()} == before, "every bucket group gets a new slice"
    assert all(bucket.is_fixed_file_id(f) for _, f in before)
    check()
    write(trips([2], ts=3, value=3.0))  # the repro: one new key after an overwrite of two
    check()
    for date in ("2024-01-01", "2024-01-02"):  # every bucket of every partition, the overwritten keys too
        write(trips(range(30), date=date, ts=4, value=4.0))
    assert {bucket.bucket_id(str(k), 4) for k in range(30)} == set(range(4))
    check()
    with mw.Cleaner(table_path, lock=lock, retain_commits=1, compaction=mw.CompactionConfig(delta_commits=1)) as c:
        assert c.run_once().old_versions_deleted > 0
    check()
    write(trips([1, 40], ts=5, value=5.0))
    with mw.Cleaner(table_path, lock=lock, retain_commits=1, compaction=mw.CompactionConfig(delta_commits=1)) as c:
        c.run_once()
    check()
