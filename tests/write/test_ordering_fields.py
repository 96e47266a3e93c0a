"""Writers on a table with several ordering fields (``hoodie.table.ordering.fields=ts,value``,
version 9): in-batch dedupe, the Copy-on-Write merge's stale check and the Merge-on-Read log
append order versions as reads and compaction do, field by field (Hudi's
``ArrayComparable.compareTo``; ``OrderingValues.create`` takes a null field value as the
default ``Integer`` 0). hudi-rs 0.5 refuses tables with several ordering fields, so these are
checked through our reader and compaction."""
from __future__ import annotations

import pyarrow as pa
import pytest

import multiwriter as mw
from multiwriter.table import properties
from multiwriter.format.log_file import read_log_blocks
from multiwriter.write.records import KEY, PARTITION, dedupe
from tests.conftest import TRIPS_SCHEMA, trips
from tests.oracle import hudi_read, rows
from tests.conftest import compact_slices as _compact

SEVERAL = {"hoodie.table.version": "9", "hoodie.table.ordering.fields": "ts,value"}


def _table(path: str, table_type: str = "COPY_ON_WRITE") -> mw.Table:
    extra = {"num_buckets": 1} if table_type == "MERGE_ON_READ" else {}
    t = mw.Table.create(path, name="trips", schema=TRIPS_SCHEMA, record_key="id", partition_by=["date"],
                        ordering_field="ts", table_type=table_type, table_version=9, **extra)
    properties.modify(t.storage, lambda p: {**p, **SEVERAL})
    return mw.Table.open(path)


def _write(path: str, batch: pa.Table, operation: str = "upsert") -> None:
    mw.write(batch, path, mw.WriterConfig(writer_id="w", lock=mw.InProcessLock(), operation=operation))


def _values(path: str) -> list[tuple]:
    return rows(mw.Table.open(path).read(), ["id", "ts", "value"])


def test_the_table_is_writable_and_names_both_fields(table_path):
    t = _table(table_path)
    t.config.check_writable()  # refused before: "orders records by one field only"
    assert t.config.ordering_fields == ("ts", "value")
    assert t.merge_config.ordering_fields == ("ts", "value")


def test_dedupe_compares_field_by_field():
    """One key thrice in a batch: (5, 1.0), (5, 9.0), (4, 99.0): ts ties between the first two,
    value decides: (5, 9.0) (``ArrayComparable.compareTo``: the first field that differs). Equal
    values: the later row, as with one field. A null value is the default ``Integer`` 0, below
    every value of a double field (the merge rule's ranking)."""
    def batch(ts, value):
        n = len(ts)
        return pa.table({"ts": pa.array(ts, pa.int64()), "value": pa.array(value, pa.float64()),
                         "tag": list(range(n)), KEY: ["A"] * n, PARTITION: [""] * n})

    def kept(t: pa.Table) -> list[tuple]:
        return list(zip(*[dedupe(t, ("ts", "value")).column(c).to_pylist() for c in ("ts", "value", "tag")], strict=True))

    assert kept(batch([5, 5, 4], [1.0, 9.0, 99.0])) == [(5, 9.0, 1)]
    assert kept(batch([5, 5], [9.0, 9.0])) == [(5, 9.0, 1)]
    assert kept(batch([5, 5], [1.0, None])) == [(5, 1.0, 0)]


def test_copy_on_write_keeps_the_stored_row_when_the_incoming_one_is_older(table_path):
    """Stored A(5, 9.0); incoming A(5, 1.0) is older on the second field: the stored row stays
    (``EventTimeRecordMerger``: the newer version wins only when ``>=``); B(5, 1.0) over
    stored B(5, 0.5) and C(6, 0.0) over C(5, 9.0) win. hudi-rs 0.5 refuses the table, even
    Copy-on-Write ("Multiple ordering fields ... are not yet supported")."""
    _table(table_path)
    _write(table_path, pa.concat_tables([trips(["A"], ts=5, value=9.0), trips(["B"], ts=5, value=0.5),
                                         trips(["C"], ts=5, value=9.0)]))
    _write(table_path, pa.concat_tables([trips(["A"], ts=5, value=1.0), trips(["B"], ts=5, value=1.0),
                                         trips(["C"], ts=6, value=0.0)]))
    expected = [("A", 5, 9.0), ("B", 5, 1.0), ("C", 6, 0.0)]
    assert _values(table_path) == expected
    with pytest.raises(Exception, match="Multiple ordering fields"):
        hudi_read(table_path)


def _delete_blocks(t: mw.Table) -> list[pa.Table]:
    return [b.records for n in t.storage.list_names("2024-01-01") if ".log." in n
            for b in read_log_blocks(t.storage.read_bytes(f"2024-01-01/{n}")) if b.kind == "delete"]


def test_merge_on_read_orders_logs_and_deletes_by_both_fields(table_path):
    """Base A(5, 9.0), B(1, 1.0), C(5, 9.0); a log with A(5, 1.0): A stays (5, 9.0). Deletes of
    B and C carrying (ts 5, value 1.0) are written as Hudi 1.1 writes them, an ``ArrayWrapper``
    of both values (``HoodieDeleteBlock.serializeV3``, ``HoodieAvroUtils.wrapValueIntoAvro``):
    B (1, 1.0) is older and goes, C (5, 9.0) is newer and stays
    (``EventTimeRecordMerger.deltaMergeDeleteRecord``), through our reader and compaction."""
    t = _table(table_path, "MERGE_ON_READ")
    _write(table_path, pa.concat_tables([trips(["A"], ts=5, value=9.0), trips(["B"], ts=1, value=1.0),
                                         trips(["C"], ts=5, value=9.0)]))
    _write(table_path, trips(["A"], ts=5, value=1.0))
    _write(table_path, trips(["B", "C"], ts=5, value=1.0), operation="delete")
    expected = [("A", 5, 9.0), ("C", 5, 9.0)]
    assert _values(table_path) == expected
    (deletes,) = _delete_blocks(t)
    assert deletes.column("ordering_values").to_pylist() == [{"0": 5, "1": 1.0}] * 2
    _compact(table_path)
    assert _values(table_path) == expected


def test_a_delete_without_every_field_is_plain(table_path):
    """A delete row with a null field is written plain (Hudi's default ``Integer`` 0): Hudi's
    ``ArrayComparable`` cannot compare a null field. It removes B whatever B's values."""
    t = _table(table_path, "MERGE_ON_READ")
    _write(table_path, trips(["B"], ts=9, value=9.0))
    batch = trips(["B"], ts=1)
    _write(table_path, batch.set_column(batch.schema.get_field_index("value"), "value", pa.nulls(1, pa.float64())),
           operation="delete")
    assert _values(table_path) == []
    (deletes,) = _delete_blocks(t)
    assert deletes.column("ordering_value").to_pylist() == [0]
    assert "ordering_values" not in deletes.column_names


def test_a_batch_without_the_second_field_is_refused(table_path):
    _table(table_path)
    with pytest.raises(mw.errors.SchemaMismatchError, match="value"):
        _write(table_path, trips(["A"]).drop_columns(["value"]))
