"""Deletes on a table with several ordering fields (``hoodie.table.ordering.fields=ts,value``,
version 9). Hudi 1.1 writes such a delete's ordering value, an ``ArrayComparable``, as an
``ArrayWrapper`` (``HoodieDeleteBlock.serializeV3``, ``HoodieAvroUtils.wrapValueIntoAvro``:
``wrappedValues``, one wrapped value per field in field order; the 13th branch of
``HoodieDeleteRecord.orderingVal`` in ``HoodieDeleteRecordList.avsc``). Such a delete competes
by value: ``EventTimeRecordMerger.deltaMergeDeleteRecord`` keeps the older version only when
``OrderingValues.isSameClass`` holds (``ArrayComparable.isValueSameClass``: field by field) and
the older value is greater (``ArrayComparable.compareTo``); equal values go to the delete.
Through our codec, our merge rule, our reader and our compaction; hudi-rs 0.5 refuses such
tables ("Multiple ordering fields ... are not yet supported")."""
from __future__ import annotations

import io
import struct

import fastavro

import pyarrow as pa
import pytest

import multiwriter as mw
from multiwriter.errors import TableFormatError
from multiwriter.format import log_file as lf
from multiwriter.table import properties
from multiwriter.table.merge_config import EVENT_TIME, MergeConfig
from multiwriter.table.merge_rule import Versions, merge
from tests.oracle import hudi_read, rows
from tests.table.jvm_style import at, bucket_group, deltacommit, keys_in_bucket
from multiwriter.format.schema import META_COLUMNS
from tests.conftest import compact_slices as _compact

T1 = "20240101000000000"
K = keys_in_bucket(3, 1)[0]
GROUP = bucket_group(3)
SCHEMA = pa.schema([pa.field(c, pa.string()) for c in META_COLUMNS] + [("ts", pa.int64()), ("value", pa.float64())])
CFG = MergeConfig(EVENT_TIME, ("ts", "value"))


def arrays(*values: tuple | None, types: tuple[pa.DataType, ...] = (pa.int64(), pa.float64())) -> pa.StructArray:
    """``ArrayWrapper`` values (None: a delete without one)."""
    children = [pa.array([None if v is None else v[i] for v in values], t) for i, t in enumerate(types)]
    return pa.StructArray.from_arrays(children, names=[str(i) for i in range(len(types))],
                                      mask=pa.array([v is None for v in values]))


def deletes(keys: list[str], values: pa.StructArray, partition: str = "p1") -> pa.Table:
    return pa.table({"record_key": keys, "partition_path": [partition] * len(keys), lf.DELETE_ORDERING_VALUES: values})


def recs(commit: str, *versions: tuple[str, int, float]) -> pa.Table:
    n = len(versions)
    return pa.table({"_hoodie_commit_time": [commit] * n, "_hoodie_commit_seqno": [f"{commit}_{i}" for i in range(n)],
                     "_hoodie_record_key": [v[0] for v in versions], "_hoodie_partition_path": ["p1"] * n,
                     "_hoodie_file_name": ["f1"] * n, "ts": pa.array([v[1] for v in versions], pa.int64()),
                     "value": pa.array([v[2] for v in versions], pa.float64())})


def merged(*sources: Versions) -> list[tuple]:
    return [(k, ts, v) for k, _, ts, v in out4(merge(sources, config=CFG, schema=SCHEMA))]


def out4(t: pa.Table) -> list[tuple]:
    d = t.to_pydict()
    return list(zip(d["_hoodie_record_key"], d["_hoodie_commit_time"], d["ts"], d["value"], strict=True))


# -- the codec ---------------------------------------------------------------------------------------

def test_an_array_wrapper_delete_has_hudis_bytes_and_round_trips():
    """(ts 5, value 1.0) as Hudi writes it: union branch 12 (``ArrayWrapper``), an array block of
    two items, ``LongWrapper`` (branch 3 of the items' union) 5, ``DoubleWrapper`` (branch 5) 1.0."""
    block = lf.encode_delete_block(deletes(["A"], arrays((5, 1.0))), instant_time=T1)
    ordering_val = bytes([24, 4, 6, 10, 10]) + struct.pack("<d", 1.0) + bytes([0])
    record = bytes([2, 2]) + b"A" + bytes([2, 4]) + b"p1" + ordering_val
    body = bytes([2]) + record + bytes([0])  # the list: one block of one record, then the end
    assert block.endswith(struct.pack(">i", len(body)) + body + struct.pack(">i", 0) + struct.pack(">q", len(block) - 8))
    (read,) = lf.read_log_blocks(block)
    assert read.records.column(lf.DELETE_ORDERING_VALUES).to_pylist() == [{"0": 5, "1": 1.0}]
    assert read.records.column("ordering_value").to_pylist() == [None]


def test_a_block_mixing_array_wrappers_and_single_values_keeps_both():
    values = pa.table({"record_key": ["A", "B", "C"], "partition_path": ["p"] * 3,
                       "ordering_value": pa.array([None, 7, None], pa.int64()),
                       lf.DELETE_ORDERING_VALUES: arrays((5, 1.0), None, (3, None))})
    (read,) = lf.read_log_blocks(lf.encode_delete_block(values, instant_time=T1))
    assert read.records.column(lf.DELETE_ORDERING_VALUES).to_pylist() == [{"0": 5, "1": 1.0}, None, {"0": 3, "1": None}]
    assert read.records.column("ordering_value").to_pylist() == [None, 7, None]


def test_array_wrappers_of_different_lengths_in_one_block_are_refused():
    ns = "org.apache.hudi.avro.model."

    def item(key: str, *longs: int) -> dict:
        values = [(ns + "LongWrapper", {"value": v}) for v in longs]
        return {"recordKey": key, "partitionPath": "p", "orderingVal": (ns + "ArrayWrapper", {"wrappedValues": values})}

    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(lf.DELETE_RECORD_LIST_SCHEMA),
                               {"deleteRecordList": [item("A", 5, 1), item("B", 5)]})
    content = struct.pack(">i", 3) + struct.pack(">i", len(buf.getvalue())) + buf.getvalue()
    block = lf.encode_block(lf.BlockType.DELETE, {lf.HeaderKey.INSTANT_TIME: T1}, content)
    with pytest.raises(TableFormatError, match=r"x\.log.*ArrayWrapper.*\[1, 2\]"):
        lf.read_log_blocks(block, source="x.log")


# -- the merge rule --------------------------------------------------------------------------------

BASE_HIGH = Versions(-1, recs("100", ("A", 5, 9.0)))
BASE_LOW = Versions(-1, recs("100", ("A", 4, 0.0)))
BASE_EQUAL = Versions(-1, recs("100", ("A", 5, 1.0)))
DELETE = Versions(0, None, deletes(["A"], arrays((5, 1.0))))


def test_a_delete_competes_field_by_field_with_the_base_row():
    """Delete (5, 1.0): base A(5, 9.0) stays (ts ties, 9.0 > 1.0: the older is greater);
    A(4, 0.0) and A(5, 1.0) (equal: the delete, newer ``>=`` older) are deleted."""
    assert merged(BASE_HIGH, DELETE) == [("A", 5, 9.0)]
    assert merged(BASE_LOW, DELETE) == []
    assert merged(BASE_EQUAL, DELETE) == []


def test_a_delete_competes_with_earlier_and_later_log_records():
    """log1 A(5, 9.0), log2 delete (5, 1.0): log1's A stays (``deltaMergeDeleteRecord``); then a
    log3 A(5, 0.5) loses to A(5, 9.0) too. log1 A(4, 0.0), log2 delete: A deleted; a log3
    A(5, 0.5) below the delete's (5, 1.0) stays deleted, A(6, 0.0) above it comes back."""
    high = Versions(0, recs("200", ("A", 5, 9.0)))
    low = Versions(0, recs("200", ("A", 4, 0.0)))
    delete = Versions(1, None, deletes(["A"], arrays((5, 1.0))))
    assert merged(high, delete) == [("A", 5, 9.0)]
    assert merged(high, delete, Versions(2, recs("300", ("A", 5, 0.5)))) == [("A", 5, 9.0)]
    assert merged(low, delete) == []
    assert merged(low, delete, Versions(2, recs("300", ("A", 5, 0.5)))) == []
    assert merged(low, delete, Versions(2, recs("300", ("A", 6, 0.0)))) == [("A", 6, 0.0)]


def test_a_delete_whose_fields_are_of_other_classes_is_plain():
    """(``Integer`` 5, 1.0) against a ``long`` ts: ``isValueSameClass`` fails, the delete is plain
    and removes A(5, 9.0); a delete without an ``ArrayWrapper`` (the default ``Integer`` 0) too."""
    other = Versions(0, None, deletes(["A"], arrays((5, 1.0), types=(pa.int32(), pa.float64()))))
    assert merged(BASE_HIGH, other) == []
    single = pa.table({"record_key": ["A"], "partition_path": ["p1"], "ordering_value": pa.array([0], pa.int32())})
    assert merged(BASE_HIGH, Versions(0, None, single)) == []


def test_a_delete_hudi_cannot_compare_is_refused():
    """A null field (``isValueSameClass`` calls ``getClass`` on it) or another count of fields."""
    with pytest.raises(TableFormatError, match="null field"):
        merged(BASE_HIGH, Versions(0, None, deletes(["A"], arrays((5, None)))))
    with pytest.raises(TableFormatError, match="holds 1 fields"):
        merged(BASE_HIGH, Versions(0, None, deletes(["A"], arrays((5,), types=(pa.int64(),)))))


# -- a table: our reader, our compaction, hudi-rs ---------------------------------------------------


def test_jvm_style_array_wrapper_deletes_through_reads_and_compaction(mor_table, table_path):
    """log1 A(5, 9.0), B(4, 0.0); log2 deletes A and B carrying (5, 1.0), as Hudi 1.1 writes
    them: A stays, B is deleted, before and after our compaction. hudi-rs refuses the table."""
    properties.modify(mor_table.storage, lambda p: {**p, "hoodie.table.version": "9",
                                                    "hoodie.table.ordering.fields": "ts,value"})
    b = keys_in_bucket(3, 2)[1]
    deltacommit(mor_table, at(1), at(2), GROUP, upserts=[(K, 5, 9.0), (b, 4, 0.0)])
    deltacommit(mor_table, at(3), at(4), GROUP, deletes=deletes([K, b], arrays((5, 1.0), (5, 1.0)), "2024-01-01"))
    expected = [(K, 5, 9.0)]
    assert rows(mw.Table.open(table_path).read(), ["id", "ts", "value"]) == expected
    _compact(table_path)
    assert rows(mw.Table.open(table_path).read(), ["id", "ts", "value"]) == expected
    with pytest.raises(Exception, match="Multiple ordering fields"):
        hudi_read(table_path)


def test_a_flagged_log_record_carries_both_fields_as_a_delete():
    """A log record a delete marker flags is a delete carrying its ordering value
    (``RecordContext.isDeleteRecord``), here ``OrderingValues.create`` of both fields: flagged
    A(5, 1.0) loses to base A(5, 9.0) and deletes base B(4, 0.0); a flagged row with a null
    field is plain."""
    from multiwriter.table.merged_slice import _as_deletes

    flagged = recs("200", ("A", 5, 1.0), ("B", 5, 1.0), ("C", 5, None))
    d = _as_deletes(flagged, ("ts", "value"), "_hoodie_record_key")
    assert d.column(lf.DELETE_ORDERING_VALUES).to_pylist() == [{"0": 5, "1": 1.0}] * 2 + [None]
    base = Versions(-1, recs("100", ("A", 5, 9.0), ("B", 4, 0.0), ("C", 9, 9.0)))
    assert merged(base, Versions(0, None, d)) == [("A", 5, 9.0)]
