"""Delete markers: a row flagged by ``_hoodie_is_deleted``, the ``_hoodie_operation`` meta column
(``D``, ``-U``) or the table's custom marker (``hoodie.payload.delete.field`` / ``.marker``) is a
delete of its key on every write path, and reads and compaction merge flagged log records as
deletes. Each expectation is Hudi's:

- ``RecordContext.isDeleteRecord`` (built-in flag, operation, custom marker; ``DeleteContext``
  reads the custom marker and refuses half of one);
- Copy-on-Write and inserts: the merge handle drops a delete that wins
  (``EventTimeRecordMerger``: the higher ordering value wins, ``shouldKeepNewerRecord``), the
  create handle writes no flagged record;
- Merge-on-Read: the append handle writes a flagged record as a delete block entry carrying its
  ordering value (``DeleteRecord.create(key, orderingVal)``); the file group reader merges log
  records flagged in a data block as deletes (``BufferedRecord.isCommitTimeOrderingDelete``:
  only the default ordering value makes a plain delete) and never checks a base file's rows
  (``FileGroupRecordBuffer.hasNextBaseRecord`` builds the base record with ``isDelete`` false).

Every table is read by our reader and by hudi-rs; Merge-on-Read tables again after compaction.
"""
from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import multiwriter as mw
from multiwriter.errors import SchemaMismatchError, TableFormatError
from multiwriter.format import instant as inst
from multiwriter.table import metadata_files
from multiwriter.table import properties as props
from multiwriter.table import timeline as tlmod
from multiwriter.table.delete_markers import DeleteMarkers
from multiwriter.table.files import list_files
from multiwriter.format.layout import data_file_path
from multiwriter.format.log_file import LogFileName, encode_log_file, with_log_meta_columns
from multiwriter.table.metadata import CommitMetadata, WriteStat
from multiwriter.format.schema import arrow_to_avro_json
from tests.oracle import hudi_read, rows
from tests.conftest import compact_slices as _compact

FLAG = "_hoodie_is_deleted"
SCHEMA = pa.schema([("id", pa.string()), ("ts", pa.int64()), ("v", pa.string()), (FLAG, pa.bool_())])
COW, MOR = "COPY_ON_WRITE", "MERGE_ON_READ"


def _cfg(**kw) -> mw.WriterConfig:
    return mw.WriterConfig(writer_id="w", lock=mw.InProcessLock(), **kw)


def _batch(ids, ts, v, flags, schema: pa.Schema = SCHEMA) -> pa.Table:
    n = len(ids)
    cols = {"id": [str(i) for i in ids], "ts": ts if isinstance(ts, list) else [ts] * n,
            "v": v if isinstance(v, list) else [v] * n}
    last = schema.names[-1]
    cols[last] = flags
    return pa.table(cols, schema=schema)


def _create(path: str, table_type: str, schema: pa.Schema = SCHEMA, **kw) -> mw.Table:
    return mw.Table.create(path, name="t", schema=schema, record_key="id", ordering_field="ts",
                           table_type=table_type, **kw)


def _agreed(path: str) -> list[tuple]:
    """Our read of the table, asserted equal to hudi-rs's."""
    ours = rows(mw.Table.open(path).read(), ["id", "v"])
    assert ours == rows(hudi_read(path), ["id", "v"])
    return ours


def _base_rows(path: str) -> pa.Table:
    bases, _ = list_files(mw.Table.open(path).storage)
    return pa.concat_tables([pq.read_table(f"{path}/{b.path}") for b in bases], promote_options="permissive")


@pytest.mark.parametrize("table_type", [COW, MOR])
def test_a_flagged_upsert_deletes_its_key(tmp_path, table_type):
    """Hudi: ``RecordContext.isDeleteRecord`` (``_hoodie_is_deleted`` true) -> the merge handle
    drops the key (CoW); the append handle writes a delete block entry (MOR)."""
    path = str(tmp_path / "t")
    _create(path, table_type)
    mw.write(_batch([1, 2, 3], 1, "a", [False, False, None]), path, _cfg())
    r = mw.write(_batch([2], 2, "x", [True]), path, _cfg())
    assert r.num_deletes == 1 and r.num_updates == 0
    assert _agreed(path) == [("1", "a"), ("3", "a")]
    if table_type == MOR:
        _compact(path)
        assert _agreed(path) == [("1", "a"), ("3", "a")]
    assert not any(_base_rows(path).column(FLAG).fill_null(False).to_pylist()), "no base file holds a flagged row"


@pytest.mark.parametrize("table_type", [COW, MOR])
def test_a_flagged_row_with_a_lower_ordering_value_loses_to_the_stored_row(tmp_path, table_type):
    """Hudi: a delete carrying an ordering value competes like a record
    (``EventTimeRecordMerger``: the stored ts 5 beats the delete's ts 3); a flagged row of a key
    the table lacks writes nothing (``HoodieCreateHandle`` skips deletes)."""
    path = str(tmp_path / "t")
    _create(path, table_type)
    mw.write(_batch([1, 2], 5, "a", [False, False]), path, _cfg())
    mw.write(_batch([1, 2, 9], [3, 5, 1], "x", [True, True, True]), path, _cfg())
    assert _agreed(path) == [("1", "a")], "1 kept (3 < 5), 2 deleted (5 >= 5), 9 never written"
    if table_type == MOR:
        _compact(path)
        assert _agreed(path) == [("1", "a")]


def test_inserts_and_a_batch_repeating_a_key_keep_hudis_precombine(tmp_path):
    """Within a batch the higher ordering value wins before the flag is looked at
    (``HoodieWriteHelper.deduplicateRecords``): key 1's flagged ts 2 beats its ts 1, key 2's
    ts 3 beats its flagged ts 2. An insert writes no flagged record."""
    path = str(tmp_path / "t")
    _create(path, COW)
    mw.write(_batch([1, 1, 2, 2, 3], [1, 2, 3, 2, 1], ["a", "b", "c", "d", "e"], [False, True, False, True, True]),
             path, _cfg(operation="insert"))
    assert _agreed(path) == [("2", "c")]


@pytest.mark.parametrize("table_type", [COW, MOR])
def test_the_operation_meta_column_and_a_custom_marker_delete_too(tmp_path, table_type):
    """Hudi: ``_hoodie_operation`` D or -U (``HoodieOperation.isDelete`` / ``isUpdateBefore``) and
    the custom marker recorded as Hudi 1.1 records it
    (``hoodie.record.merge.property.hoodie.payload.delete.field`` / ``.marker``), compared with
    the value's ``toString``."""
    schema = pa.schema([("id", pa.string()), ("ts", pa.int64()), ("v", pa.string()), ("_hoodie_operation", pa.string()),
                        ("kind", pa.int32())])
    path = str(tmp_path / "t")
    t = _create(path, table_type, schema=schema, table_version=9)
    props.modify(t.storage, lambda d: {**d, "hoodie.record.merge.property.hoodie.payload.delete.field": "kind",
                                       "hoodie.record.merge.property.hoodie.payload.delete.marker": "7"})

    def batch(ids, ops, kinds):
        return pa.table({"id": [str(i) for i in ids], "ts": [2] * len(ids), "v": ["x"] * len(ids), "_hoodie_operation": ops,
                         "kind": kinds}, schema=schema)

    mw.write(batch(range(6), ["I"] * 6, [0] * 6), path, _cfg())
    mw.write(batch([1, 2, 3, 4], ["D", "-U", "U", None], [0, 0, 7, None]), path, _cfg())
    assert [r[0] for r in _agreed(path)] == ["0", "4", "5"]
    if table_type == MOR:
        _compact(path)
        assert [r[0] for r in _agreed(path)] == ["0", "4", "5"]


def test_half_a_custom_marker_and_a_non_boolean_flag_are_refused(tmp_path):
    """Hudi: ``DeleteContext`` throws when only one of the delete field and marker is set; the
    flag is read as a boolean (``castToBoolean``). Nothing is written either way."""
    path = str(tmp_path / "t")
    t = _create(path, COW)
    props.modify(t.storage, lambda d: {**d, "hoodie.payload.delete.field": "v"})
    with pytest.raises(TableFormatError, match="hoodie.payload.delete.marker"):
        mw.write(_batch([1], 1, "a", [False]), path, _cfg())
    with pytest.raises(TableFormatError, match="hoodie.payload.delete.marker"):
        DeleteMarkers.of(mw.Table.open(path).config)
    other = str(tmp_path / "u")
    schema = pa.schema([("id", pa.string()), ("ts", pa.int64()), ("v", pa.string()), (FLAG, pa.string())])
    _create(other, COW, schema=schema)
    with pytest.raises(SchemaMismatchError, match=FLAG):
        mw.write(_batch([1], 1, "a", ["true"], schema=schema), other, _cfg())
    assert mw.Table.open(other).timeline().completed_writes() == []


# -- reading what a JVM writer left ----------------------------------------------------------------
def _plus_ms(t: str, ms: int) -> str:
    """Instant time ``t`` plus ``ms`` milliseconds, as a valid time (not digits plus a number)."""
    d = dt.datetime.strptime(t, "%Y%m%d%H%M%S%f") + dt.timedelta(milliseconds=ms)
    return d.strftime("%Y%m%d%H%M%S%f")[:-3]


def _jvm_log(table: mw.Table, file_id: str, requested: str, completed: str, data: pa.Table, partition: str = "") -> None:
    """A deltacommit whose log file holds ``data`` as a data block, flagged rows and all (as
    Hudi before 1.0 or a Flink changelog writer leaves them), recorded in the metadata table."""
    storage, config = table.storage, table.config
    records = with_log_meta_columns(data, record_keys=data.column("id"), partition_path=partition, file_id=file_id,
                                    instant_time=requested)
    name = LogFileName(file_id, requested, 1, "1-0-1").name
    rel = data_file_path(partition, name)
    schema = json.loads(arrow_to_avro_json(SCHEMA, "t_record"))
    storage.write_bytes(rel, encode_log_file(instant_time=requested, schema=schema, records=records))
    tlmod.create_requested(storage, config, requested, inst.DELTA_COMMIT)
    tlmod.create_inflight(storage, config, requested, inst.DELTA_COMMIT)
    stat = WriteStat(file_id=file_id, path=rel, partition_path=partition, prev_commit=requested,
                     num_writes=data.num_rows, log_version=1, log_files=(name,))
    meta = CommitMetadata({partition: [stat]}, {"schema": arrow_to_avro_json(SCHEMA, "t")}, "UPSERT")
    # into the metadata table before the completed file, as Hudi's writer does: hudi-rs lists files from it
    metadata_files.on_completed(storage, config, requested, completed, inst.DELTA_COMMIT, meta.to_bytes(), meta)
    tlmod.create_completed(storage, config, requested, completed, inst.DELTA_COMMIT, data=meta.to_bytes())


def test_flagged_records_in_a_jvm_log_block_merge_as_deletes_at_their_place(tmp_path):
    """Hudi's file group reader: a flagged log record is a delete carrying its ordering value
    (``BufferedRecord.forRecordWithContext`` with ``isDelete``); 1 is deleted (ts 2 >= 1), 3
    stays (its flagged ts 0 is a ``Long``, a real value below the base's 1: ``finalMerge``
    keeps the base row), 4's later record in the same block beats its flagged one (place
    order, equal ts), 5 exists only as a flagged record: nothing. Compaction writes the same
    rows and no flagged row into the base."""
    path = str(tmp_path / "t")
    t = _create(path, MOR)
    r = mw.write(_batch([1, 2, 3], 1, "a", [False] * 3), path, _cfg())
    (base,) = list_files(t.storage)[0]
    # requested after our commit completed, as a later JVM writer's is, however long ours took
    later = _plus_ms(r.instant.completion_time, 1)
    _jvm_log(t, base.file_id, later, _plus_ms(later, 1),
             _batch([1, 2, 3, 4, 4, 5], [2, 2, 0, 3, 3, 1], ["x", "y", "z", "p", "q", "r"],
                    [True, False, True, True, False, True]))
    assert _agreed(path) == [("2", "y"), ("3", "a"), ("4", "q")]
    _compact(path)
    assert _agreed(path) == [("2", "y"), ("3", "a"), ("4", "q")]
    assert not any(_base_rows(path).column(FLAG).fill_null(False).to_pylist())


def test_a_flagged_row_in_a_base_file_stays_visible_as_hudi_reads_it(tmp_path):
    """Hudi never checks a base file's rows for delete markers
    (``FileGroupRecordBuffer.hasNextBaseRecord``): rows that a custom marker set later flags
    stay, on both table types, until a write of their key."""
    schema = pa.schema([("id", pa.string()), ("ts", pa.int64()), ("v", pa.string()), ("op", pa.string())])
    for table_type in (COW, MOR):
        path = str(tmp_path / table_type)
        t = _create(path, table_type, schema=schema, table_version=9)
        mw.write(_batch([1, 2], 1, "a", ["D", "I"], schema=schema), path, _cfg())
        props.modify(t.storage, lambda d: {**d, "hoodie.record.merge.property.hoodie.payload.delete.field": "op",
                                           "hoodie.record.merge.property.hoodie.payload.delete.marker": "D"})
        assert _agreed(path) == [("1", "a"), ("2", "a")]


# -- the Spark path --------------------------------------------------------------------------------
@pytest.mark.parametrize("table_type", [COW, MOR])
def test_the_spark_path_deletes_flagged_keys(spark, tmp_path, table_type, monkeypatch):
    """The executors' path (one task, and spread over tasks with the tagging on executors)
    writes what the driver path writes: a flagged key is deleted, a flagged new key is not
    written (no empty file group)."""
    from multiwriter.write import spark as spark_path

    path = str(tmp_path / "t")
    _create(path, table_type)
    spark_schema = SCHEMA
    first = spark.createDataFrame(_batch([1, 2, 3, 4], 1, "a", [False] * 4).to_pandas())
    mw.write(first, path, _cfg(executor="spark"))
    monkeypatch.setattr(spark_path, "ONE_TASK_MAX_ROWS", 0)
    monkeypatch.setattr(spark_path, "TASKS_BY_PARTITION", False)
    second = spark.createDataFrame(_batch([2, 3, 8], [2, 0, 2], "x", [True, True, True], spark_schema).to_pandas())
    mw.write(second, path, _cfg(executor="spark"))
    assert _agreed(path) == [("1", "a"), ("3", "a"), ("4", "a")]
    bases, logs = list_files(mw.Table.open(path).storage)
    assert all(pq.read_metadata(f"{path}/{b.path}").num_rows for b in bases), "no empty base file"
