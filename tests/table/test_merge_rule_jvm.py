"""Hudi's JVM merge rules where they are easy to get wrong, as literal cases: each names the
Hudi class and method whose rule it follows (hudi-rs is not the oracle here: it reads no
log-only group and orders some of these cases otherwise). Then the same rules end to end, on
tables whose deltacommits interleave as two JVM writers leave them, before and after our
compaction."""
from __future__ import annotations

import pyarrow as pa
import pytest

import multiwriter as mw
from multiwriter.table.files import LogFile
from multiwriter.table.merge_rule import Versions, log_order, merge
from tests.conftest import trips
from tests.oracle import hudi_read, rows
from tests.table.jvm_style import at, bucket_group, deltacommit, keys_in_bucket
from tests.table.test_merge_rule import SCHEMA, dels, recs
from tests.conftest import compact_slices as _compact

INT32 = pa.int32()
SCHEMA32 = pa.schema([f.with_type(INT32) if f.name == "ts" else f for f in SCHEMA])


def _logs_by_requested(*logs: LogFile) -> list[LogFile]:
    return sorted(logs, key=log_order)


def _out(sources, ordering: str | None = "ts", schema: pa.Schema = SCHEMA) -> list[tuple]:
    t = merge(sources, ordering_field=ordering, schema=schema)
    d = t.to_pydict()
    return list(zip(d["_hoodie_record_key"], d["ts"], d["val"], strict=True))


# -- ties: the later *requested* deltacommit wins (HoodieLogFile.getLogFileComparator orders a
# slice's logs by delta commit time; EventTimeRecordMerger.shouldKeepNewerRecord keeps the newer
# on >=) -----------------------------------------------------------------------------------------

A = LogFile("p1", "f1", at(1), 1, f".f1_{at(1)}.log.1_0-1-0")  # requested first, completed last
B = LogFile("p1", "f1", at(2), 1, f".f1_{at(2)}.log.1_0-1-0")  # requested second, completed first


def test_log_order_is_requested_time_then_version_then_token():
    assert _logs_by_requested(B, A) == [A, B]
    a2 = LogFile("p1", "f1", at(1), 2, f".f1_{at(1)}.log.2_0-1-0")
    assert _logs_by_requested(a2, B, A) == [A, a2, B]


def test_equal_ordering_values_from_two_writers_go_to_the_later_requested_one():
    """Writers A and B both wrote k with ts=7; A requested first and completed last: Hudi
    returns B (whatever the completion order)."""
    versions = {A: recs(at(1), ("k", 7, "A")), B: recs(at(2), ("k", 7, "B"))}
    ranked = [Versions(r, versions[lf]) for r, lf in enumerate(_logs_by_requested(B, A))]
    assert _out(ranked) == [("k", 7, "B")]


def test_commit_time_ordering_takes_the_later_requested_writer():
    """No ordering field: CommitTimeRecordMerger.deltaMerge always keeps the newer record, in
    log order (requested time)."""
    versions = {A: recs(at(1), ("k", 9, "A")), B: recs(at(2), ("k", 1, "B"))}
    ranked = [Versions(r, versions[lf]) for r, lf in enumerate(_logs_by_requested(B, A))]
    assert _out(ranked, ordering=None) == [("k", 1, "B")]


def test_a_plain_delete_falls_in_requested_order():
    """A (requested 1, completed last) wrote k ts=9; B (requested 2) deleted k plainly: in log
    order the delete comes after A's record and wins (BufferedRecord.isCommitTimeOrderingDelete),
    though B completed first."""
    versions = {A: Versions(0, recs(at(1), ("k", 9, "A"))), B: Versions(0, None, dels(("k", None)))}
    ranked = [Versions(r, versions[lf].records, versions[lf].deletes) for r, lf in enumerate(_logs_by_requested(B, A))]
    assert _out(ranked) == []


# -- deletes and nulls (OrderingValues / BufferedRecordMergerFactory) -----------------------------

BASE = Versions(-1, recs("100", ("k", 5, "a")))
BASE32 = Versions(-1, recs("100", ("k", 5, "a"), ts_type=INT32))


@pytest.mark.parametrize(("case", "base", "delete", "schema", "expected"), [
    # OrderingValues.isDefault: only the Integer 0 is the default; a Long 0 is a value, lower than 5
    ("long 0 on a long field is a value", BASE, dels(("k", 0)), SCHEMA, [("k", 5, "a")]),
    ("int 0 on a long field is plain", BASE, dels(("k", 0), ordering_type=INT32), SCHEMA, []),
    ("int 0 on an int field is plain", BASE32, dels(("k", 0), ordering_type=INT32), SCHEMA32, []),
    ("null is plain (RecordContext.getOrderingValue(DeleteRecord))", BASE, dels(("k", None)), SCHEMA, []),
    # deltaMergeDeleteRecord keeps the older version only for OrderingValues.isSameClass values
    ("int 3 on a long field: another class, the delete wins", BASE, dels(("k", 3), ordering_type=INT32), SCHEMA, []),
    ("string '3' on a long field: another class", BASE, dels(("k", "3"), ordering_type=pa.string()), SCHEMA, []),
    ("long 4 < 5: the older record stays", BASE, dels(("k", 4)), SCHEMA, [("k", 5, "a")]),
    ("long 5 = 5: the delete wins (older kept only when greater)", BASE, dels(("k", 5)), SCHEMA, []),
    ("int 4 < 5 on an int field: the older stays", BASE32, dels(("k", 4), ordering_type=INT32), SCHEMA32,
     [("k", 5, "a")]),
])
def test_delete_rules(case, base, delete, schema, expected):
    assert _out([base, Versions(0, None, delete)], schema=schema) == expected, case


def test_a_later_record_replaces_a_delete_of_another_class_then_meets_the_base_row():
    """Such a delete is taken as plain: the next record replaces it in the logs, and the base
    row then competes with that record (finalMerge)."""
    logs = [Versions(0, None, dels(("k", 99), ordering_type=INT32)), Versions(1, recs("300", ("k", 1, "B")))]
    assert _out(logs) == [("k", 1, "B")]
    assert _out([BASE, *logs]) == [("k", 5, "a")]
    assert _out([BASE, logs[0], Versions(1, recs("300", ("k", 6, "B")))]) == [("k", 6, "B")]


@pytest.mark.parametrize(("case", "older", "newer_ts", "winner"), [
    # RecordContext.getOrderingValue: a null field value is OrderingValues.getDefault(), Integer 0
    ("null (0) > -1 on an int field", -1, None, "B"),
    ("null (0) = 0 on an int field: the later wins", 0, None, "B"),
    ("null (0) < 1 on an int field", 1, None, "A"),
])
def test_null_ordering_value_of_an_int_field_is_zero(case, older, newer_ts, winner):
    sources = [Versions(0, recs("200", ("k", older, "A"), ts_type=INT32)),
               Versions(1, recs("300", ("k", newer_ts, "B"), ts_type=INT32))]
    assert _out(sources, schema=SCHEMA32)[0][2] == winner, case


# -- end to end: JVM-style deltacommits, then our compaction ---------------------------------------

K = keys_in_bucket(3, 1)[0]
GROUP = bucket_group(3)


def _values(path: str) -> dict[str, float]:
    return dict(rows(mw.Table.open(path).read(), ["id", "value"]))


@pytest.mark.parametrize("a_completes_last", [True, False])
def test_two_writers_with_equal_ordering_values_before_and_after_compaction(mor_table, table_path,
                                                                             a_completes_last):
    """A requested at 1, B at 2, both k with ts=7: B's version, whoever completes first, before
    our compaction and after it (and hudi-rs agrees once the group has a base file)."""
    deltacommit(mor_table, at(1), at(6) if a_completes_last else at(3), GROUP, upserts=[(K, 7, 1.0)])
    deltacommit(mor_table, at(2), at(4) if a_completes_last else at(5), GROUP, upserts=[(K, 7, 2.0)])
    assert _values(table_path) == {K: 2.0}
    _compact(table_path)
    assert _values(table_path) == {K: 2.0}
    assert rows(mw.Table.open(table_path).read(), ["id", "value"]) == rows(hudi_read(table_path), ["id", "value"])


def test_equal_ordering_over_a_base_file_goes_to_the_later_requested_log(mor_table, table_path):
    mw.write(trips([K], ts=1, value=0.0), table_path, mw.WriterConfig(writer_id="w", lock=mw.InProcessLock()))
    gid = mw.Table.open(table_path).snapshot().files()[0].file_id
    t0 = mw.Table.open(table_path).timeline().completed_writes()[-1].completion_time
    later = [f"{int(t0) + n:017d}" for n in range(1, 5)]
    deltacommit(mor_table, later[0], later[3], gid, upserts=[(K, 7, 1.0)])  # A: requested first, completed last
    deltacommit(mor_table, later[1], later[2], gid, upserts=[(K, 7, 2.0)])  # B
    assert _values(table_path) == {K: 2.0}
    _compact(table_path)
    assert _values(table_path) == {K: 2.0}
    assert rows(mw.Table.open(table_path).read(), ["id", "value"]) == rows(hudi_read(table_path), ["id", "value"])


def test_a_long_zero_delete_from_a_jvm_writer_is_a_value_before_and_after_compaction(mor_table, table_path):
    deltacommit(mor_table, at(1), at(2), GROUP, upserts=[(K, 5, 1.0)])
    d = pa.table({"record_key": [K], "partition_path": ["2024-01-01"], "ordering_value": pa.array([0], pa.int64())})
    deltacommit(mor_table, at(3), at(4), GROUP, deletes=d)
    assert _values(table_path) == {K: 1.0}  # Long 0 < 5: the record stays
    _compact(table_path)
    assert _values(table_path) == {K: 1.0}


# -- date and timestamp ordering fields: Hudi 1.1's wrappers -------------------------------------


@pytest.mark.parametrize(("typ", "value"), [
    (pa.timestamp("us", tz="UTC"), lambda n: n * 1_000_000),
    (pa.timestamp("ms", tz="UTC"), lambda n: n * 1000),
    (pa.date32(), lambda n: n),
])
def test_deletes_on_date_and_timestamp_ordering_fields_carry_int_and_long_wrappers(tmp_path, typ, value):
    """Hudi 1.1's Spark writers wrap these ordering values as IntWrapper / LongWrapper of the
    column's Avro int / long, which its merger compares with the column's values (a DateWrapper
    or TimestampMicrosWrapper unwraps to a LocalDate / Instant it cannot compare): our deletes
    carry those, and still lose to a newer record and win over an older one (hudi-rs agrees)."""
    from multiwriter.table.files import list_files
    from multiwriter.format.log_file import read_log_blocks

    path = str(tmp_path / "t")
    schema = pa.schema([("id", pa.string()), ("date", pa.string()), ("ts", typ), ("value", pa.float64())])
    mw.Table.create(path, name="t", schema=schema, record_key="id", partition_by=["date"], ordering_field="ts",
                    table_type="MERGE_ON_READ", num_buckets=1)

    def batch(ids, n):
        return pa.table({"id": [str(i) for i in ids], "date": ["d"] * len(ids),
                         "ts": pa.array([value(n)] * len(ids), pa.int64() if pa.types.is_timestamp(typ)
                                        else pa.int32()).cast(typ), "value": [1.0] * len(ids)})

    def cfg(**kw):
        return mw.WriterConfig(writer_id="w", lock=mw.InProcessLock(), **kw)

    mw.write(batch([1, 2, 3], 10), path, cfg())
    mw.write(batch([1], 20), path, cfg(operation="delete"))  # newer: deletes 1
    mw.write(batch([2], 5), path, cfg(operation="delete"))  # older: 2 stays
    t = mw.Table.open(path)
    _, logs = list_files(t.storage)
    wrapped = {b.records.column("ordering_value").type for lf in logs
               for b in read_log_blocks(t.storage.read_bytes(lf.path)) if b.kind == "delete"}
    assert wrapped == {pa.int64() if pa.types.is_timestamp(typ) else pa.int32()}
    assert sorted(t.read().column("id").to_pylist()) == ["2", "3"]
    assert sorted(hudi_read(path).column("id").to_pylist()) == ["2", "3"]


def test_date_and_timestamp_delete_values_literal_cases():
    """A date is an Integer of days and a timestamp a Long to Hudi's merger: an IntWrapper(0) on
    a date field is the default (plain); a LongWrapper compares as the column's Avro long; a
    TimestampMicrosWrapper this package wrote before compares as a timestamp (as hudi-rs does)."""
    ts_us = pa.timestamp("us", tz="UTC")
    schema_ts = pa.schema([f.with_type(ts_us) if f.name == "ts" else f for f in SCHEMA])
    base_ts = Versions(-1, recs("100", ("k", 5_000_000, "a"), ts_type=pa.int64()).set_column(
        5, "ts", pa.array([5_000_000], pa.int64()).cast(ts_us)))
    assert _out([base_ts, Versions(0, None, dels(("k", 4_000_000)))], schema=schema_ts)[0][2] == "a"  # Long 4s < 5s
    assert _out([base_ts, Versions(0, None, dels(("k", 6_000_000)))], schema=schema_ts) == []
    old = dels(("k", 4_000_000), ordering_type=pa.int64()).set_column(
        2, "ordering_value", pa.array([4_000_000], pa.int64()).cast(ts_us))
    assert _out([base_ts, Versions(0, None, old)], schema=schema_ts)[0][2] == "a"
    schema_d = pa.schema([f.with_type(pa.date32()) if f.name == "ts" else f for f in SCHEMA])
    base_d = Versions(-1, recs("100", ("k", 5, "a"), ts_type=INT32).set_column(
        5, "ts", pa.array([5], INT32).cast(pa.date32())))
    assert _out([base_d, Versions(0, None, dels(("k", 0), ordering_type=INT32))], schema=schema_d) == []  # default
    assert _out([base_d, Versions(0, None, dels(("k", 4), ordering_type=INT32))], schema=schema_d)[0][2] == "a"
