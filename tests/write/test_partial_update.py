"""Partial updates (``WriterConfig(partial_update=True)``), Copy-on-Write and Merge-on-Read (before
and after compaction): an update lacking a column keeps the stored value of that column, an
insert lacking it writes null; hudi-rs and literal values are the oracles."""
from __future__ import annotations

import pyarrow as pa
import pytest

import multiwriter as mw
from multiwriter.errors import SchemaMismatchError
from multiwriter.table.files import list_files
from multiwriter.format.log_file import read_log_blocks
from tests.oracle import hudi_read, rows
from tests.conftest import compact_slices as _compact

SCHEMA = pa.schema([("id", pa.string()), ("p", pa.string()), ("ts", pa.int64()), ("v", pa.string()), ("n", pa.int64())])


def _cfg(**kw) -> mw.WriterConfig:
    return mw.WriterConfig(lock=mw.InProcessLock(), writer_id="w", **kw)


def test_update_lacking_a_column_keeps_its_stored_value(table_path):
    mw.Table.create(table_path, name="t", schema=SCHEMA, record_key="id", partition_by=["p"], ordering_field="ts")
    mw.write(pa.Table.from_pylist([{"id": "e", "p": "a", "ts": 1, "v": "v1", "n": 7},
                                   {"id": "f", "p": "a", "ts": 1, "v": "v1", "n": 8}], schema=SCHEMA), table_path, _cfg())
    partial = pa.table({"id": ["e", "g"], "p": ["a", "a"], "ts": [2, 2], "v": ["v2", "v2"]})
    with pytest.raises(SchemaMismatchError, match=r"\['n'\]"):  # the default refuses it
        mw.write(partial, table_path, _cfg())
    mw.write(partial, table_path, _cfg(partial_update=True))
    want = [("e", "v2", 7), ("f", "v1", 8), ("g", "v2", None)]
    assert rows(hudi_read(table_path), ["id", "v", "n"]) == want
    assert rows(mw.Table.open(table_path).read(), ["id", "v", "n"]) == want
    # an older version (lower ordering value) still loses, and keeps nothing of its own
    mw.write(pa.table({"id": ["e"], "p": ["a"], "ts": [1], "n": [99]}), table_path, _cfg(partial_update=True))
    assert rows(hudi_read(table_path), ["id", "v", "n"]) == want


def _mor(path: str, **kw) -> mw.Table:
    return mw.Table.create(path, name="t", schema=SCHEMA, record_key="id", partition_by=["p"], ordering_field="ts",
                           table_type="MERGE_ON_READ", **kw)


def _agreed(path: str) -> list[tuple]:
    """Our read of (id, ts, v, n), asserted equal to hudi-rs's."""
    ours = rows(mw.Table.open(path).read(), ["id", "ts", "v", "n"])
    assert ours == rows(hudi_read(path), ["id", "ts", "v", "n"]), "hudi-rs reads the table as we do"
    return ours


def _log_blocks(path: str) -> list:
    t = mw.Table.open(path)
    _, logs = list_files(t.storage)
    return [b for lf in sorted(logs, key=lambda lf: lf.instant_time) for b in read_log_blocks(t.storage.read_bytes(lf.path)) if b.kind == "data"]


def test_merge_on_read_partial_updates_agree_before_and_after_compaction(table_path):
    _mor(table_path)
    first = mw.write(pa.Table.from_pylist([{"id": "e", "p": "a", "ts": 1, "v": "v1", "n": 7},
                                           {"id": "f", "p": "a", "ts": 1, "v": "v1", "n": 8}], schema=SCHEMA),
                     table_path, _cfg())
    mw.write(pa.table({"id": ["e"], "p": ["a"], "ts": [2], "v": ["v2"]}), table_path, _cfg(partial_update=True))
    (block,) = _log_blocks(table_path)
    assert block.is_partial and "n" not in block.records.column_names, "the log block carries the sent columns only"
    assert _agreed(table_path) == [("e", 2, "v2", 7), ("f", 1, "v1", 8)]
    t = mw.Table.open(table_path)
    assert rows(t.read_incremental(first.instant.completion_time, None), ["id", "ts", "v", "n"]) == [("e", 2, "v2", 7)]
    assert rows(t.read(columns=["id", "n"]), ["id", "n"]) == [("e", 7), ("f", 8)], "a projection merges alike"
    # a second partial update of another column keeps the first one's, an older one (lower ts) changes nothing
    mw.write(pa.table({"id": ["e", "f"], "p": ["a", "a"], "ts": [3, 0], "n": [70, 80]}), table_path,
             _cfg(partial_update=True))
    want = [("e", 3, "v2", 70), ("f", 1, "v1", 8)]
    assert _agreed(table_path) == want
    _compact(table_path)
    assert _agreed(table_path) == want, "compaction keeps what every reader returned"
    mw.write(pa.table({"id": ["f"], "p": ["a"], "ts": [4], "v": ["v4"]}), table_path, _cfg(partial_update=True))
    assert _agreed(table_path) == [("e", 3, "v2", 70), ("f", 4, "v4", 8)], "a partial update over the compacted base"


def test_merge_on_read_partial_update_of_a_new_key_inserts_nulls(table_path):
    _mor(table_path, num_buckets=2)
    mw.write(pa.Table.from_pylist([{"id": str(i), "p": "a", "ts": 1, "v": "v1", "n": i} for i in range(6)], schema=SCHEMA),
             table_path, _cfg())
    # keys 0 and 9: one stored, one new, both into existing buckets (log files)
    mw.write(pa.table({"id": ["0", "9"], "p": ["a", "a"], "ts": [2, 2], "v": ["v2", "new"]}), table_path,
             _cfg(partial_update=True))
    assert all(b.is_partial for b in _log_blocks(table_path))
    got = _agreed(table_path)
    assert got[0] == ("0", 2, "v2", 0) and got[-1] == ("9", 2, "new", None)
    _compact(table_path)
    assert _agreed(table_path) == got


def test_full_records_after_a_partial_update_are_not_partial(table_path):
    """A writer that omits a column without partial_update (allow_missing_columns) writes full
    records: the omitted column reads null, after a partial update as before."""
    _mor(table_path)
    mw.write(pa.Table.from_pylist([{"id": "e", "p": "a", "ts": 1, "v": "v1", "n": 7}], schema=SCHEMA), table_path, _cfg())
    mw.write(pa.table({"id": ["e"], "p": ["a"], "ts": [2], "v": ["v2"]}), table_path, _cfg(partial_update=True))
    mw.write(pa.table({"id": ["e"], "p": ["a"], "ts": [3], "v": ["v3"]}), table_path, _cfg(allow_missing_columns=True))
    assert [b.is_partial for b in _log_blocks(table_path)] == [True, False]
    want = [("e", 3, "v3", None)]
    assert rows(mw.Table.open(table_path).read(), ["id", "ts", "v", "n"]) == want
    assert rows(hudi_read(table_path), ["id", "ts", "v", "n"]) == want
    _compact(table_path)
    assert _agreed(table_path) == want


@pytest.mark.parametrize("case", ["delete", "out_of_order", "late_full"])
def test_merge_on_read_partial_updates_out_of_order_as_hudi_rs_merges_them(table_path, case):
    """Orderings where the logs fold before the base row joins (hudi-rs's and Hudi's rule):
    a delete clears what the logs set, so the base row fills the omitted columns; a partial
    update older than the base still sets its column when a newer one lets the logs win; a
    full version that loses to a partial one fills the winner's missing columns (Hudi's
    ``PartialUpdateBufferedRecordMerger``; hudi-rs differs until compaction). Every reader agrees
    after compaction, and before it where hudi-rs merges as Hudi does."""
    _mor(table_path)
    first = {"delete": 1, "out_of_order": 5, "late_full": 1}[case]
    mw.write(pa.Table.from_pylist([{"id": "e", "p": "a", "ts": first, "v": "v0", "n": 7}], schema=SCHEMA), table_path, _cfg())
    if case == "delete":
        mw.write(pa.table({"id": ["e"], "p": ["a"], "ts": [2]}), table_path, _cfg(operation="delete"))
        mw.write(pa.table({"id": ["e"], "p": ["a"], "ts": [3], "v": ["v3"]}), table_path, _cfg(partial_update=True))
        want = [("e", 3, "v3", 7)]
    elif case == "out_of_order":
        mw.write(pa.table({"id": ["e"], "p": ["a"], "ts": [3], "v": ["v3"]}), table_path, _cfg(partial_update=True))
        mw.write(pa.table({"id": ["e"], "p": ["a"], "ts": [6], "n": [60]}), table_path, _cfg(partial_update=True))
        want = [("e", 6, "v3", 60)]
    else:
        mw.write(pa.table({"id": ["e"], "p": ["a"], "ts": [5], "v": ["v5"]}), table_path, _cfg(partial_update=True))
        mw.write(pa.Table.from_pylist([{"id": "e", "p": "a", "ts": 3, "v": "v3", "n": 30}], schema=SCHEMA), table_path, _cfg())
        # Hudi's PartialUpdateBufferedRecordMerger fills the winner's missing n from the version it
        # beats, the later full one (30); hudi-rs takes n only from versions that led when they
        # came, so it reads the base's 7 until a compaction writes Hudi's row (docs/merge-settings.md)
        want = [("e", 5, "v5", 30)]
        assert rows(mw.Table.open(table_path).read(), ["id", "ts", "v", "n"]) == want
        assert rows(hudi_read(table_path), ["id", "ts", "v", "n"]) == [("e", 5, "v5", 7)]
        _compact(table_path)
        assert _agreed(table_path) == want
        return
    assert _agreed(table_path) == want
    _compact(table_path)
    assert _agreed(table_path) == want


def test_two_non_blocking_writers_updating_different_columns_of_one_key_both_land(table_path, tmp_path, monkeypatch):
    """Bucket index, non-blocking concurrency: writer a (v) writes its log file and holds it while
    writer b (n) commits; a then commits too. Both columns keep their update."""
    import threading

    from multiwriter import faults
    from tests.conftest import wait_hanging

    _mor(table_path, num_buckets=2)
    mw.write(pa.Table.from_pylist([{"id": "e", "p": "a", "ts": 1, "v": "v1", "n": 7},
                                   {"id": "f", "p": "a", "ts": 1, "v": "v1", "n": 8}], schema=SCHEMA), table_path, _cfg())
    monkeypatch.setenv("MULTIWRITER_FAULT_DIR", str(tmp_path))
    faults.configure("after-data-files=hang")
    box: dict = {}

    def slow() -> None:
        try:
            box["a"] = mw.write(pa.table({"id": ["e", "g"], "p": ["a", "a"], "ts": [2, 2], "v": ["va", "ga"]}), table_path,
                                mw.WriterConfig(lock=mw.InProcessLock(), writer_id="a", partial_update=True,
                                                heartbeat_interval_s=5.0))
        except Exception as e:  # noqa: BLE001 - reported below
            box["error"] = e

    a = threading.Thread(target=slow)
    try:
        a.start()
        assert wait_hanging(tmp_path, a)
        faults.configure(None)
        b = mw.write(pa.table({"id": ["e", "g"], "p": ["a", "a"], "ts": [3, 3], "n": [70, 90]}), table_path,
                     mw.WriterConfig(lock=mw.InProcessLock(), writer_id="b", partial_update=True))
    finally:
        (tmp_path / "after-data-files.release").touch()
        a.join(30)
        faults.configure(None)
    assert "error" not in box, box
    assert box["a"].attempts == 1 and b.attempts == 1 and box["a"].conflicts == 0, "no conflict, no retry"
    assert box["a"].instant.requested_time < b.instant.requested_time < b.instant.completion_time < \
        box["a"].instant.completion_time, "the two commits overlap"
    want = [("e", 3, "va", 70), ("f", 1, "v1", 8), ("g", 3, "ga", 90)]
    assert _agreed(table_path) == want
    _compact(table_path)
    assert _agreed(table_path) == want


def test_a_partial_writer_losing_the_race_to_create_a_bucket_keeps_the_other_writers_columns(table_path, tmp_path,
                                                                                             monkeypatch):
    """Non-blocking: writer a (partial, v only) writes a new bucket's base file and holds it while
    writer b creates that bucket with full records; a's file becomes a log file of b's group,
    still a partial update: n keeps b's value."""
    import threading

    from multiwriter import faults
    from tests.conftest import wait_hanging

    _mor(table_path, num_buckets=1)
    monkeypatch.setenv("MULTIWRITER_FAULT_DIR", str(tmp_path))
    faults.configure("after-data-files=hang")
    box: dict = {}

    def slow() -> None:
        try:
            box["a"] = mw.write(pa.table({"id": ["e"], "p": ["a"], "ts": [5], "v": ["va"]}), table_path,
                                mw.WriterConfig(lock=mw.InProcessLock(), writer_id="a", partial_update=True,
                                                heartbeat_interval_s=5.0))
        except Exception as e:  # noqa: BLE001 - reported below
            box["error"] = e

    a = threading.Thread(target=slow)
    try:
        a.start()
        assert wait_hanging(tmp_path, a)
        faults.configure(None)
        mw.write(pa.Table.from_pylist([{"id": "e", "p": "a", "ts": 3, "v": "vb", "n": 30}], schema=SCHEMA), table_path,
                 mw.WriterConfig(lock=mw.InProcessLock(), writer_id="b"))
    finally:
        (tmp_path / "after-data-files.release").touch()
        a.join(30)
        faults.configure(None)
    assert "error" not in box, box
    assert [b.is_partial for b in _log_blocks(table_path)] == [True], "a's rows became a partial log block"
    assert _agreed(table_path) == [("e", 5, "va", 30)]
    _compact(table_path)
    assert _agreed(table_path) == [("e", 5, "va", 30)]


def test_merge_on_read_partial_update_from_a_spark_dataframe(spark, table_path):
    """The executor path writes the same partial log blocks as the driver path."""
    _mor(table_path, num_buckets=2)
    mw.write(pa.Table.from_pylist([{"id": str(i), "p": "a", "ts": 1, "v": "v1", "n": i} for i in range(4)], schema=SCHEMA),
             table_path, _cfg())
    df = spark.createDataFrame(pa.table({"id": ["1", "7"], "p": ["a", "a"], "ts": [2, 2], "v": ["v2", "new"]}).to_pandas())
    mw.write(df, table_path, _cfg(partial_update=True))
    assert _log_blocks(table_path) and all(b.is_partial for b in _log_blocks(table_path))
    want = [("0", 1, "v1", 0), ("1", 2, "v2", 1), ("2", 1, "v1", 2), ("3", 1, "v1", 3), ("7", 2, "new", None)]
    assert _agreed(table_path) == want
