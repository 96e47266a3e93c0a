"""Data skipping from column stats (:mod:`multiwriter.table.skipping`): pure logic, no table.

Oracles: pyarrow's own filtering of a file's rows (``pq.filters_to_expression``, as
``Table.read`` filters), the stats Hudi computes from those rows' Parquet footer
(:func:`~multiwriter.format.column_stats.parquet_stats`), and literal cases."""
from __future__ import annotations

import datetime as dt
import decimal
import io
import types

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from multiwriter.format import column_stats as cs
from multiwriter.format.column_stats import ColumnStats, ValueType
from multiwriter.format.schema import cast_column
from multiwriter.table import skipping
from multiwriter.table.files import FileSlice, LogFile
from multiwriter.table.skipping import Filter, Term, from_dnf, may_match, prune, spark_filter

D = decimal.Decimal
UTC = dt.timezone.utc
NAN = float("nan")


def s(lo, hi, nulls=0, count=10, column="x", **kw) -> ColumnStats:
    return ColumnStats("f.parquet", column, lo, hi, nulls, count, **kw)


def arrow(op, value) -> Term:
    f = from_dnf([("x", op, value)])
    assert f is not None
    return f.any_of[0][0]


def may(stats, op, value, field_type=None) -> bool:
    return may_match(stats, arrow(op, value), field_type)


# -- every op on integers -----------------------------------------------------------------
@pytest.mark.parametrize(("op", "value", "expected"), [
    ("=", 15, True), ("=", 10, True), ("==", 20, True), ("=", 9, False), ("=", 21, False),
    ("<", 11, True), ("<", 10, False), ("<=", 10, True), ("<=", 9, False),
    (">", 19, True), (">", 20, False), (">=", 20, True), (">=", 21, False),
    ("!=", 15, True), ("in", [1, 15], True), ("in", [1, 25], False), ("in", [], False),
    ("not in", [10, 20], True), ("not in", [], True),
])
def test_integer_ops_against_a_range(op, value, expected):
    assert may(s(10, 20), op, value) is expected


@pytest.mark.parametrize(("op", "value", "expected"), [
    ("!=", 7, False), ("!=", 8, True), ("not in", [7], False), ("not in", [1, 7], False), ("not in", [8], True),
    ("=", 7, True), ("<", 7, False), (">", 7, False), ("<=", 7, True), (">=", 7, True),
])
def test_a_single_valued_file(op, value, expected):
    assert may(s(7, 7), op, value) is expected


def test_not_equal_keeps_a_file_with_other_values_or_nulls_that_may_match():
    assert may(s(7, 7, nulls=3), "!=", 7) is False  # nulls never satisfy !=
    assert may(s(7, 8), "!=", 7) is True
    assert may(s(7, 7, nulls=3), "not in", [7]) is True  # pyarrow: a null is "not in" a set without None
    assert may(s(7, 7, nulls=3), "not in", [7, None]) is False
    assert may(s(7, 7, nulls=0), "not in", [7]) is False


# -- nulls ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("op", "value"), [("=", 1), ("!=", 1), ("<", 1), ("<=", 1), (">", 1), (">=", 1),
                                           ("in", [1, 2]), ("not in", [1, None])])
def test_an_all_null_file_matches_no_comparison(op, value):
    assert may(s(None, None, nulls=10, count=10), op, value) is False


def test_null_rows_and_pyarrows_set_tests():
    all_null = s(None, None, nulls=10, count=10)
    assert may(all_null, "in", [1, None]) is True  # is_in takes nulls when None is in the set
    assert may(all_null, "not in", [1]) is True  # and `not in` a set without None takes them too
    assert may(s(1, 2, nulls=0), "in", [5, None]) is False  # no null rows, and 5 is outside
    assert may(s(1, 2, nulls=1), "in", [5, None]) is True
    assert may(s(1, 2, nulls=-1), "in", [5, None]) is True  # an unknown null count: maybe nulls
    assert may(s(1, 2, nulls=-1, count=-1), "=", 5) is False  # bounds still bound the non-null values


def test_notnull():
    assert may_match(s(None, None, nulls=4, count=4), Term("x", "notnull")) is False
    assert may_match(s(1, 1, nulls=3, count=4), Term("x", "notnull")) is True
    assert may_match(s(None, None, nulls=-1, count=4), Term("x", "notnull")) is True


def test_no_rows_match_nothing():
    assert may(s(None, None, nulls=0, count=0), "not in", [1]) is False


def test_a_comparison_with_none_keeps_the_file():
    assert may(s(1, 2), "=", None) is True


# -- what proves nothing ----------------------------------------------------------------------
def test_missing_deleted_or_partial_stats_keep_the_file():
    assert may_match(None, Term("x", "=", 1)) is True
    assert may(s(None, None, -1, -1, is_deleted=True), "=", 1) is True
    assert may(s(None, None, nulls=2, count=10), "=", 1) is True  # values without bounds
    assert may(s(None, 5, nulls=0, count=10), "=", 100) is True
    assert may(s(1, 2, nulls=12, count=10), "=", 5) is True  # counts that contradict
    assert may_match(s(1, 2), Term("x", "keep")) is True
    assert skipping.file_may_match(from_dnf([("y", "=", 100)]), {"x": s(1, 2)}) is True  # column not indexed


def test_meta_columns_without_parquet_statistics_are_not_all_null():
    # multiwriter writes no statistics for these, and Hudi then counts every value null
    for c in skipping.UNPROVEN_NULLS:
        st_ = s(None, None, nulls=10, count=10, column=c)
        assert may_match(st_, Term(c, "=", "k1")) is True
        assert may_match(st_, Term(c, "notnull")) is True
    assert may_match(s(None, None, nulls=10, count=10, column="_hoodie_commit_time"),
                     Term("_hoodie_commit_time", "=", "1")) is False


@pytest.mark.parametrize(("lo", "hi", "value"), [
    ("a", "b", 1), (1, 2, "1"), (b"a", b"b", "a"), ("a", "b", b"a"), (True, True, 1), (1, 1, True),
    (dt.date(2024, 1, 1), dt.date(2024, 1, 2), dt.datetime(2024, 1, 1)),
    (dt.datetime(2024, 1, 1), dt.datetime(2024, 1, 2), dt.datetime(2023, 1, 1, tzinfo=UTC)),
    (dt.datetime(2024, 1, 1, tzinfo=UTC), dt.datetime(2024, 1, 2, tzinfo=UTC), dt.datetime(2023, 1, 1)),
    (1, 2, object()), (1, 2, D("NaN")),
])
def test_values_of_another_kind_keep_the_file(lo, hi, value):
    for op in ("=", "<", ">", "!=", "in"):
        assert may(s(lo, hi), op, [value] if op == "in" else value) is True


# -- types ----------------------------------------------------------------------------------
def test_strings_by_code_point():
    assert may(s("apple", "banana"), "=", "cherry") is False
    assert may(s("apple", "banana"), "=", "b") is True
    assert may(s("apple", "banana"), "<", "apple") is False
    assert may(s("apple", "banana"), ">", "banana") is False
    assert may(s("a", "z"), "<", "a") is False
    assert may(s("é", "é"), ">", "z") is True  # U+00E9 is above "z"
    assert may(s("a", "é"), "=", "\U0001F600") is False  # an emoji is above every bound


def test_string_bounds_where_java_and_code_point_orders_disagree_are_not_used():
    # two row groups: Hudi merges their bounds by UTF-16 code units, where U+10000 sorts below U+E000
    rg1, rg2 = s("\ue000", "\ue000", count=1), s("\U00010000", "\U00010000", count=1)
    merged = cs.merge_ranges(rg1, rg2)
    assert merged.min == "\U00010000"  # not the code-point minimum
    assert may(merged, "=", "\ue000") is True
    assert may(merged, "<", "\U00010000") is True
    assert may(s("a\U00010000", "b"), "=", "a") is True  # that min may be too high: open below
    assert may(s("a\U00010000", "b"), "=", "c") is False  # the max still holds
    assert may(s("a", "b\ue000"), "=", "c") is True
    assert may(s("a", "b"), "=", "\U00010000") is False  # the value may hold anything
    assert may(s("a", "b"), "=", "\ud800") is True  # a lone surrogate: pyarrow cannot take it


def test_bytes_bounds_where_signed_and_unsigned_orders_disagree_are_not_used():
    assert may(s(b"a", b"\x90"), "=", b"\x91") is False
    assert may(s(b"b", b"c"), "=", b"a") is False  # a min without a high byte holds
    assert may(s(b"b", b"c"), "=", b"d") is True  # a max without one may hide a value above it
    assert may(s(b"b", b"c"), ">", b"c") is True
    assert may(s(b"b", b"c"), "<", b"b") is False
    # Java's ByteBuffer order is signed: merged, b"\x80" (-128) is below b"", b"\x00" the max
    merged = cs.merge_ranges(s(b"", b"\x00", count=2), s(b"\x80", b"\x80", count=1))
    assert (merged.min, merged.max) == (b"", b"\x00")
    assert may(merged, "=", b"\x80") is True
    merged = cs.merge_ranges(s(b"\x01", b"\x01", count=1), s(b"\xff", b"\xff", count=1))
    assert merged.min == b"\xff"
    assert may(merged, "=", b"\x01") is True


def test_floats_and_nan():
    assert may(s(1.0, 2.0), "=", 3.0) is False
    assert may(s(1.0, 2.0), ">", 2.0) is False
    assert may(s(1.0, 2.0), "=", NAN) is True
    assert may(s(NAN, 2.0), "=", 3.0) is True
    assert may(s(1.0, NAN), "=", 3.0) is True
    assert may(s(1.0, 1.0), "!=", 1.0) is True  # a NaN row (outside min and max) is != 1.0
    assert may(s(1.0, 1.0), "not in", [1.0]) is True
    assert may(s(-0.0, 0.0), "<", 0.0) is False
    assert may(s(float("-inf"), float("inf")), "=", 0.0) is True


def test_spark_orders_nan_above_every_number():
    (gt,) = spark_filter([("x", ">", 2.0)]).any_of[0]
    assert may_match(s(1.0, 2.0), gt) is True
    assert may_match(s(1.0, 2.0), Term("x", ">=", 3, nan_largest=True)) is True
    assert may_match(s(1, 2), Term("x", ">", 3, nan_largest=True)) is False  # an int file holds no NaN
    assert may_match(s(1.0, 2.0), Term("x", "<", 1.0, nan_largest=True)) is False
    assert may_match(s(1.0, 2.0), Term("x", "=", 3.0, nan_largest=True)) is False
    assert may_match(s(1.0, 2.0), Term("x", ">", 3.0, nan_largest=False)) is False


def test_float32_stats_are_widened_as_a_reader_widens_the_values():
    f32 = float(pa.scalar(0.7, pa.float32()).as_py())
    assert f32 != 0.7
    read = cast_column(pa.array([0.7], pa.float32()), pa.float64())[0].as_py()
    assert read == 0.7  # what a reader of the table (double now) sees
    for st_ in (s(f32, f32, wrapper="FloatWrapper"), s(f32, f32, wrapper="FloatWrapper", value_type=ValueType.FLOAT)):
        assert may(st_, "=", 0.7) is True
        assert may(st_, "<=", 0.6999999) is True
        assert may(st_, "=", 0.8) is False
        assert may(st_, "<", 0.5) is False
    assert may(s(f32, f32), "=", 0.7) is False  # a double's stats are exact


def test_numbers_of_different_kinds_compare_as_doubles():
    big = 2**53 + 1
    assert may(s(big, big), "=", float(2**53)) is True  # pyarrow casts the int to double: equal
    assert may(s(float(2**53), float(2**53)), "=", big) is True
    assert may(s(float(2**53), float(2**53)), "in", [big]) is True
    assert may(s(1, 2), "<", 1.0) is True  # rounded: a bound equal to the value proves nothing
    assert may(s(1, 2), "<", 0.5) is False
    assert may(s(1, 2), "=", 2.5) is False
    assert may(s(1, 1), "!=", 1.0) is True
    assert may(s(10**400, 10**400), "=", 1.0) is True  # no double: undecided
    tiny = D("0.1000000000000000000001")
    assert may(s(tiny, tiny), "=", 0.1) is True  # pyarrow: decimal cast to double equals 0.1
    assert may(s(D("1.00"), D("2.00")), "=", 3.5) is False
    assert may(s(D("1.00"), D("2.00")), "=", D("2.000")) is True
    assert may(s(D("1.00"), D("2.00")), "=", D("2.01")) is False
    assert may(s(D("1.00"), D("2.00")), ">", 3) is False
    assert may(s(D("1.00"), D("2.00")), ">", 2) is True  # an int and a decimal: rounded too
    assert may(s(D("1.5"), D("1.5")), "!=", D("1.50")) is False
    assert may(s(1, 2), "=", D("1.5")) is True


def test_booleans():
    assert may(s(False, False), "=", True) is False
    assert may(s(False, True), "=", True) is True
    assert may(s(True, True), "!=", True) is False
    assert may(s(False, False), ">", False) is False


def test_dates_times_and_timestamps():
    d = dt.date
    assert may(s(d(2024, 1, 1), d(2024, 1, 31)), "=", d(2024, 2, 1)) is False
    assert may(s(d(2024, 1, 1), d(2024, 1, 31)), ">=", d(2024, 1, 31)) is True
    assert may(s(dt.time(1), dt.time(2)), ">", dt.time(2)) is False
    lo, hi = dt.datetime(2024, 1, 1, tzinfo=UTC), dt.datetime(2024, 1, 2, tzinfo=UTC)
    assert may(s(lo, hi), ">", hi) is False
    plus2 = dt.timezone(dt.timedelta(hours=2))
    assert may(s(lo, hi), "=", dt.datetime(2024, 1, 2, 2, tzinfo=plus2)) is True  # the same instant as hi
    assert may(s(lo, hi), "=", dt.datetime(2024, 1, 2, 3, tzinfo=plus2)) is False
    naive = s(dt.datetime(2024, 1, 1), dt.datetime(2024, 1, 2))
    assert may(naive, "<", dt.datetime(2024, 1, 1)) is False
    assert may(naive, "<", dt.datetime(2024, 1, 1, tzinfo=UTC)) is True


def test_the_schema_refuses_stats_of_another_kind():
    ts = pa.timestamp("us", "UTC")
    # a table version 8 timestamp's stats are the raw longs of the file: not the column's values
    assert may(s(1_000, 2_000), "=", 5, ts) is True
    assert may(s(1_000, 2_000), "=", 5) is False  # without the schema they look like numbers
    assert may(s(1, 2), "=", 5, pa.int32()) is False
    assert may(s(1, 2), "=", 5, pa.float64()) is True
    assert may(s(D(1), D(2)), "=", 5, pa.decimal128(5, 1)) is False
    assert may(s("a", "b"), "=", "c", pa.large_string()) is False
    assert may(s(b"a", b"b"), "<", b"a", pa.binary(1)) is False
    assert may(s(1, 2), "=", 5, pa.list_(pa.int32())) is True
    # table version 8 keeps an unsigned column's raw signed ints: 2**64 - 1 reads -1
    assert may(s(-(2**63), -1), "=", 2**64 - 1, pa.uint64()) is True
    assert may(s(1, 7), "=", 200, pa.uint32()) is True
    assert may(s(1, 7), "=", 200, pa.uint16()) is False
    assert may(s(1, -1), "=", 2**64 - 1) is True  # a min above the max bounds nothing


# -- filters ----------------------------------------------------------------------------------
def test_from_dnf_shapes():
    flat = from_dnf([("x", "=", 1), ("y", "in", {2, None})])
    assert flat == Filter(((Term("x", "=", 1), Term("y", "in", (2,), nulls_match=True)),))
    nested = from_dnf([[("x", "==", 1)], [("y", "not in", (2,))]])
    assert nested == Filter(((Term("x", "=", 1),), (Term("y", "not in", (2,), nulls_match=True),)))
    assert from_dnf(None) is None
    assert from_dnf([]) is None
    assert from_dnf(pc.field("x") == 1) is None  # an expression cannot be inspected
    assert from_dnf([("x", "~", 1)]) is None  # pyarrow refuses it: the read says so
    assert from_dnf([("x", "=")]) is None
    assert from_dnf([[("x", "=", 1)], []]) is None
    assert from_dnf([("x", "in", pa.array([1]))]) == Filter(((Term("x", "keep"),),))
    import numpy as np

    assert from_dnf([("x", "=", np.int64(3))]).any_of[0][0].value == 3
    assert type(from_dnf([("x", "=", np.float32(3))]).any_of[0][0].value) is float


def test_spark_filter():
    f = spark_filter([("x", "in", (1, None)), ("y", "notnull", None), ("z", "like", "a%")])
    assert f == Filter(((Term("x", "in", (1,), nan_largest=True), Term("y", "notnull", None, nan_largest=True),
                         Term("z", "keep")),))
    assert spark_filter([]) is None
    # nulls in a Spark IN list match nothing
    assert may_match(s(None, None, nulls=3, count=3), f.any_of[0][0]) is False


def test_and_or():
    stats = {"x": s(1, 10), "y": s("a", "c", column="y")}
    fm = skipping.file_may_match
    assert fm(from_dnf([("x", "=", 5), ("y", "=", "b")]), stats) is True
    assert fm(from_dnf([("x", "=", 5), ("y", "=", "z")]), stats) is False  # one term rules the AND out
    assert fm(from_dnf([[("x", "=", 50)], [("y", "=", "b")]]), stats) is True  # one disjunct may match
    assert fm(from_dnf([[("x", "=", 50)], [("y", "=", "z")]]), stats) is False
    assert fm(from_dnf([[("x", "=", 50)], [("nope", "=", 1)]]), stats) is True
    assert fm(from_dnf([("x", "=", 50)]), None) is True


# -- slices and partitions ------------------------------------------------------------------
P = "2024/01/01"
BASE = "f1_0-1-0_20240101000000000.parquet"
LOG1, LOG2 = ".f1_20240101000000000.log.1_0-1-0", ".f1_20240101000000000.log.2_0-1-0"


def _slice(base: str = BASE, logs: tuple[str, ...] = (), partition: str = P) -> FileSlice:
    return FileSlice(partition, "f1", "20240101000000000", base,
                     logs=tuple(LogFile(partition, "f1", "20240101000000000", i + 1, n) for i, n in enumerate(logs)))


def _file(x, y=("a", "b")) -> dict[str, ColumnStats]:
    return {"x": s(*x), "y": s(*y, column="y")}


def test_a_slice_is_skipped_only_when_every_file_is_ruled_out():
    f = from_dnf([("x", "=", 50)])
    stats = {(P, BASE): _file((1, 10)), (P, LOG1): _file((20, 30)), (P, LOG2): _file((40, 60))}
    assert skipping.slice_may_match(f, _slice(logs=(LOG1,)), stats) is False
    assert skipping.slice_may_match(f, _slice(logs=(LOG1, LOG2)), stats) is True
    assert skipping.slice_may_match(f, _slice(logs=(".f1_20240101000000000.log.9_0-1-0",)), stats) is True  # no stats
    assert skipping.slice_may_match(f, _slice(base="", logs=(LOG1,)), stats) is False  # log-only slice
    assert skipping.slice_may_match(f, _slice(base="f2_0-1-0_20240101000000000.parquet"), stats) is True
    assert skipping.slice_may_match(f, _slice(), None) is True


def test_a_partial_update_may_merge_columns_of_several_files():
    # base: x=1, y="z"; a partial update in the log sets y="a" only: the merged row is x=1, y="a"
    stats = {(P, BASE): _file((1, 1), ("z", "z")), (P, LOG1): _file((None, None, 1, 1), ("a", "a"))}
    f = from_dnf([("x", "=", 1), ("y", "=", "a")])
    assert skipping.file_may_match(f, stats[(P, BASE)]) is False
    assert skipping.file_may_match(f, stats[(P, LOG1)]) is False
    assert skipping.slice_may_match(f, _slice(logs=(LOG1,)), stats) is True
    assert skipping.slice_may_match(from_dnf([("x", "=", 2), ("y", "=", "a")]), _slice(logs=(LOG1,)), stats) is False


def test_a_merge_may_leave_nulls_no_file_holds():
    # a partial update inserting a key writes null in the columns it omits
    stats = {(P, BASE): _file((1, 1)), (P, LOG1): _file((2, 2))}
    f = from_dnf([("x", "in", [5, None])])
    assert skipping.slice_may_match(f, _slice(), stats) is False
    assert skipping.slice_may_match(f, _slice(logs=(LOG1,)), stats) is True
    assert skipping.slice_may_match(from_dnf([("x", "in", [5])]), _slice(logs=(LOG1,)), stats) is False


def test_prune_counts_and_partitions():
    a, b, c = _slice(partition="p=a"), _slice(partition="p=b"), _slice(partition="p=c")
    cstats = {("p=a", BASE): _file((1, 10)), ("p=b", BASE): _file((11, 20))}
    pstats = {"p=a": _file((1, 10)), "p=b": _file((11, 20)), "p=c": _file((21, 30))}
    f = from_dnf([("x", ">", 10)])
    out = prune([a, b, c], f, column_stats=cstats)
    assert out.kept == (b, c) and out.skipped == (a,) and out.partitions_skipped == ()
    assert (out.slices_kept, out.slices_skipped) == (2, 1)
    out = prune([a, b, c], from_dnf([("x", ">", 20)]), column_stats=cstats, partition_stats=pstats)
    assert out.kept == (c,) and out.skipped == (a, b) and out.partitions_skipped == ("p=a", "p=b")
    assert prune([a, b, c], None, column_stats=cstats).kept == (a, b, c)
    assert prune([a, b, c], f).kept == (a, b, c)
    schema = pa.schema([("x", pa.int64())])
    assert prune([a, b, c], f, column_stats=cstats, schema=schema).kept == (b, c)
    # a column the table does not have: nothing skipped, the read reports it
    f2 = from_dnf([("x", ">", 10), ("nope", "=", 1)])
    assert prune([a, b, c], f2, column_stats=cstats, schema=schema).kept == (a, b, c)


def test_partition_null_counts_may_leave_out_files_without_the_column():
    # older files without column x read null there, and add nothing to the partition's stats of x
    pstats = {"x": s(1, 10, nulls=0, count=10)}
    assert skipping.partition_may_match(from_dnf([("x", "not in", [5])]), pstats) is True
    assert skipping.partition_may_match(from_dnf([("x", "in", [50, None])]), pstats) is True
    assert skipping.partition_may_match(from_dnf([("x", "in", [50])]), pstats) is False
    assert skipping.file_may_match(from_dnf([("x", "in", [50, None])]), pstats) is False


def test_the_non_partitioned_table_is_keyed_either_way():
    sl = _slice(partition="")
    f = from_dnf([("x", "=", 50)])
    for key in ("", "."):
        assert prune([sl], f, column_stats={(key, BASE): _file((1, 2))}).kept == ()
        assert prune([sl], f, partition_stats={key: _file((1, 2))}).partitions_skipped == ("",)


# -- against the data ------------------------------------------------------------------------
def _parquet(t: pa.Table, row_group_size: int) -> pq.FileMetaData:
    buf = io.BytesIO()
    pq.write_table(t, buf, row_group_size=row_group_size)
    buf.seek(0)
    return pq.ParquetFile(buf).metadata


def file_stats(t: pa.Table, *, version: int = 2, row_group_size: int = 1_000) -> dict[str, ColumnStats]:
    """The column stats Hudi writes for ``t`` stored as one Parquet file."""
    return {c.column: c for c in cs.parquet_stats(_parquet(t, row_group_size), "f.parquet", version=version)}


def test_disjoint_files_are_skipped_and_the_right_one_kept():
    files = [pa.table({"x": pa.array(range(i * 10, i * 10 + 10), pa.int64()), "s": [f"k{i}{j}" for j in range(10)]})
             for i in range(4)]
    cstats = {(P, f"f{i}.parquet"): file_stats(t) for i, t in enumerate(files)}
    slices = [FileSlice(P, f"f{i}", "1", f"f{i}.parquet") for i in range(4)]
    out = prune(slices, from_dnf([("x", "=", 25)]), column_stats=cstats, schema=files[0].schema)
    assert [fs.name for fs in out.kept] == ["f2.parquet"]
    out = prune(slices, from_dnf([[("x", "<", 5)], [("s", "=", "k31")]]), column_stats=cstats, schema=files[0].schema)
    assert [fs.name for fs in out.kept] == ["f0.parquet", "f3.parquet"]


def test_unsigned_stats_of_table_version_8_are_not_used():
    t = pa.table({"x": pa.array([2**63, 2**64 - 1], pa.uint64())})
    stats = file_stats(t, version=1)
    assert (stats["x"].min, stats["x"].max) == (-(2**63), -1)  # the raw signed INT64
    assert skipping.file_may_match(from_dnf([("x", "=", 2**64 - 1)]), stats, t.schema) is True


def test_row_groups_without_bounds_leave_the_file_unbounded():
    """pyarrow drops the min and max of values over 4 KiB; merged by Hudi's rule alone, the other
    row groups' range would be the file's, and a reader would skip the file holding the long
    value. The stats our writers record give that column no range (a tombstone): kept."""
    import io

    import pyarrow.parquet as pq

    from multiwriter.format import column_stats as cs
    from multiwriter.table import metadata_stats

    buf = io.BytesIO()
    pq.write_table(pa.table({"x": ["a" * 5000, "b"]}), buf, row_group_size=1)
    meta = pq.ParquetFile(io.BytesIO(buf.getvalue())).metadata
    hudis = {s.column: s for s in cs.parquet_stats(meta, "f.parquet")}
    assert may_match(hudis["x"], Term("x", "=", "a" * 5000)) is False, "Hudi's rule alone: too narrow"
    ours = {s.column: s for s in metadata_stats.footer_stats(meta, "p/f.parquet", 2)}
    assert ours["x"].is_deleted and ours["x"].min is None
    assert may_match(ours["x"], Term("x", "=", "a" * 5000)) is True


# -- property: pruning never drops a file holding a matching row ------------------------------
_TEXT = st.text(st.sampled_from("ab\u00e9z\ue000\uffff\U00010000"), max_size=3)
_TYPES = {
    "int": (pa.int64(), st.one_of(st.integers(-20, 20), st.sampled_from([2**53, 2**53 + 1, -(2**63), 2**63 - 1]))),
    "float": (pa.float64(), st.floats(width=64) | st.sampled_from([0.0, -0.0, 1.5])),
    "float32": (pa.float32(), st.floats(width=32)),
    "str": (pa.string(), _TEXT),
    "bytes": (pa.binary(), st.binary(max_size=3)),
    "date": (pa.date32(), st.dates(dt.date(1960, 1, 1), dt.date(2040, 1, 1))),
    "ts": (pa.timestamp("us", "UTC"), st.datetimes(dt.datetime(1960, 1, 1), dt.datetime(2040, 1, 1), timezones=st.just(UTC))),
    "naive": (pa.timestamp("us"), st.datetimes(dt.datetime(1960, 1, 1), dt.datetime(2040, 1, 1))),
    "decimal": (pa.decimal128(10, 2), st.decimals(-10**6, 10**6, places=2, allow_nan=False, allow_infinity=False)),
    "bool": (pa.bool_(), st.booleans()),
    "u64": (pa.uint64(), st.integers(0, 2**64 - 1) | st.sampled_from([0, 1, 2**63, 2**64 - 1])),
}
#: values of other kinds a filter may hold for a column (pyarrow casts some, refuses others)
_OTHERS = {"int": ["float", "decimal"], "float": ["int", "decimal"], "float32": ["int"], "decimal": ["int", "float"],
           "str": ["bytes"], "bytes": ["str"], "ts": ["naive"], "naive": ["ts"], "date": ["naive"], "bool": ["int"],
           "u64": ["int"]}
_OPS = ["=", "==", "!=", "<", "<=", ">", ">=", "in", "not in"]


@st.composite
def _case(draw):
    kinds = {c: draw(st.sampled_from(sorted(_TYPES))) for c in ("a", "b")}
    n = draw(st.integers(1, 24))
    cols = {c: draw(st.lists(st.none() | _TYPES[k][1], min_size=n, max_size=n)) for c, k in kinds.items()}
    # stored float32 read as double (a widened column), or as float32
    widened = kinds["a"] == "float32" and draw(st.booleans())
    cuts = sorted(draw(st.lists(st.integers(1, max(1, n - 1)), max_size=3, unique=True))) if n > 1 else []

    def value(c):
        k = kinds[c]
        present = [v for v in cols[c] if v is not None]
        pick = draw(st.integers(0, 3))
        if pick == 0 and present:
            return draw(st.sampled_from(present))
        if pick == 1:
            return draw(_TYPES[draw(st.sampled_from(_OTHERS.get(k, [k])))][1])
        return draw(_TYPES[k][1])

    def term():
        c = draw(st.sampled_from(["a", "b"]))
        op = draw(st.sampled_from(_OPS))
        if op in ("in", "not in"):
            vals = [value(c) for _ in range(draw(st.integers(0, 3)))] + ([None] if draw(st.booleans()) else [])
            return (c, op, vals)
        return (c, op, value(c))

    dnf = [[term() for _ in range(draw(st.integers(1, 2)))] for _ in range(draw(st.integers(1, 2)))]
    return kinds, cols, widened, cuts, dnf, draw(st.sampled_from([1, 2])), draw(st.integers(1, 6)), draw(st.randoms())


def _matches(t: pa.Table, dnf) -> int | None:
    """pyarrow's count of ``t``'s rows matching ``dnf`` (as ``Table.read`` filters); None when
    pyarrow refuses the filter."""
    try:
        return t.filter(pq.filters_to_expression(dnf)).num_rows
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        return None


def _stats_or_none(t: pa.Table, version: int, row_group_size: int) -> dict[str, ColumnStats] | None:
    """None where Hudi writes no stats for the file (a version 2 index refuses an unsigned int)."""
    try:
        return file_stats(t, version=version, row_group_size=row_group_size)
    except cs.StatsFormatError:
        return None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(_case())
def test_pruning_never_drops_a_file_with_a_matching_row(case):
    kinds, cols, widened, cuts, dnf, version, rg, rnd = case
    stored = pa.table({c: pa.array(v, _TYPES[kinds[c]][0]) for c, v in cols.items()})
    schema = pa.schema([("a", pa.float64()) if widened else stored.schema.field("a"), stored.schema.field("b")])
    f = from_dnf(dnf)
    assert f is not None
    bounds = [0, *cuts, stored.num_rows]
    parts = [stored.slice(lo, hi - lo) for lo, hi in zip(bounds, bounds[1:], strict=False) if hi > lo]
    read = [pa.Table.from_arrays([cast_column(p.column(c), schema.field(c).type) for c in ("a", "b")], schema=schema)
            for p in parts]
    stats = [_stats_or_none(p, version, rg) for p in parts]
    counts = [_matches(t, dnf) for t in read]
    assume(any(c is not None for c in counts))
    for t, st_, count in zip(read, stats, counts, strict=True):
        if count:
            assert skipping.file_may_match(f, st_, schema), (t.to_pydict(), st_, dnf)
    # the files as one slice (a base and its logs)
    names = [f"f{i}.parquet" for i in range(len(parts))]
    fs = FileSlice(P, "f0", "1", names[0], logs=tuple(LogFile(P, "f0", "1", i, n) for i, n in enumerate(names[1:], 1)))
    cstats = {(P, n): st_ for n, st_ in zip(names, stats, strict=True)}
    if any(counts):
        assert skipping.slice_may_match(f, fs, cstats, schema)
    # with logs, a merge taking each column of a row from any file (partial updates), or null
    merged = {c: [] for c in ("a", "b")}
    for _ in range(8 if fs.logs else 0):
        for c in ("a", "b"):
            src = rnd.choice(read)
            merged[c].append(src.column(c)[rnd.randrange(src.num_rows)].as_py() if rnd.random() < 0.9 else None)
    if fs.logs and _matches(pa.table({c: pa.array(v, schema.field(c).type) for c, v in merged.items()}, schema=schema),
                            dnf):
        assert skipping.slice_may_match(f, fs, cstats, schema), (merged, dnf)
    # the partition's stats: the files' stats merged (Hudi's partition_stats)
    pstats = {p.column: p for p in cs.partition_stats(P, [x for st_ in stats for x in (st_ or {}).values()])}
    if any(counts):
        assert skipping.partition_may_match(f, pstats, schema)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-1000, 1000), min_size=2, max_size=40, unique=True), st.integers(1, 4), st.data())
def test_pruning_skips_every_file_whose_range_excludes_the_value(values, nfiles, data):
    values = sorted(values)
    k = max(1, len(values) // nfiles)
    parts = [values[i:i + k] for i in range(0, len(values), k)]
    target = data.draw(st.sampled_from(values))
    slices = [FileSlice(P, f"f{i}", "1", f"f{i}.parquet") for i in range(len(parts))]
    cstats = {(P, f"f{i}.parquet"): file_stats(pa.table({"x": pa.array(p, pa.int64())})) for i, p in enumerate(parts)}
    out = prune(slices, from_dnf([("x", "=", target)]), column_stats=cstats)
    assert [fs.name for fs in out.kept] == [f"f{i}.parquet" for i, p in enumerate(parts) if p[0] <= target <= p[-1]]
    assert out.slices_skipped == len(parts) - 1


_SPARK_FLOATS = st.sampled_from([NAN, -0.0, 0.0, 1.0, -1.0, 2.5, float("inf")]) | st.floats(width=64)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.none() | _SPARK_FLOATS, min_size=1, max_size=12),
       st.sampled_from(["=", "<", "<=", ">", ">=", "in"]), _SPARK_FLOATS | st.integers(-3, 3))
@example([1.0, NAN], ">", 2.0)
def test_spark_semantics_on_floats(values, op, value):
    """Spark's order (NaN above every number, equal to itself; nulls never match), computed here."""
    def holds(x):
        if x is None:
            return False
        xk, vk = (math_key(x), math_key(value))
        return {"=": xk == vk, "<": xk < vk, "<=": xk <= vk, ">": xk > vk, ">=": xk >= vk, "in": xk == vk}[op]

    stats = file_stats(pa.table({"x": pa.array(values, pa.float64())}))
    term = spark_filter([("x", op, (value,) if op == "in" else value)]).any_of[0][0]
    if any(holds(x) for x in values):
        assert may_match(stats["x"], term, pa.float64())


def math_key(x: float) -> tuple[int, float]:
    """Spark's float order as a sort key: NaN last, -0.0 == 0.0."""
    x = float(x)
    return (1, 0.0) if x != x else (0, x + 0.0)


# -- Table.prune: which stats it reads, and when it trusts partition stats ----------------------
class _Timeline:
    def __init__(self, instants=(), pending=()):
        self.instants = list(instants)
        self._pending = list(pending)

    def pending(self):
        return self._pending


def _table_with(monkeypatch, *, column_stats=None, partition_stats=None, listed=()):
    """A Table over no storage whose metadata table gives these stats; calls recorded."""
    from multiwriter.table import metadata_files
    from multiwriter.table import table as table_mod

    calls = []
    if column_stats is not None:
        monkeypatch.setattr(metadata_files, "column_stats_of",
                            lambda storage, config, partitions=None: calls.append(("column", partitions)) or column_stats,
                            raising=False)
    else:
        monkeypatch.setattr(metadata_files, "column_stats_of", lambda storage, config, partitions=None: None)
    if partition_stats is not None:
        monkeypatch.setattr(metadata_files, "partition_stats_of",
                            lambda storage, config, partitions=None: calls.append(("partition", partitions))
                            or partition_stats, raising=False)
    else:
        monkeypatch.setattr(metadata_files, "partition_stats_of", lambda storage, config, partitions=None: None)
    monkeypatch.setattr(table_mod, "list_instants", lambda storage, config: calls.append(("listing",)) or list(listed))
    return table_mod.Table(types.SimpleNamespace(uri="/t"), object()), calls


def test_table_prune_without_the_stats_readers_keeps_everything(monkeypatch):
    table, calls = _table_with(monkeypatch)
    sl = [_slice(partition="p=a")]
    out = table.prune(sl, from_dnf([("x", "=", 50)]), pa.schema([("x", pa.int64())]), timeline=_Timeline(), latest=True)
    assert out.kept == tuple(sl) and calls == []


def test_table_prune_reads_column_stats_once(monkeypatch):
    a, b = _slice(partition="p=a"), _slice(partition="p=b")
    table, calls = _table_with(monkeypatch, column_stats={("p=a", BASE): _file((1, 10)), ("p=b", BASE): _file((40, 60))})
    schema = pa.schema([("x", pa.int64())])
    out = table.prune([a, b], from_dnf([("x", "=", 50)]), schema, timeline=_Timeline(), latest=True)
    assert out.kept == (b,) and out.skipped == (a,)
    assert calls == [("column", None)]
    calls.clear()
    assert table.prune([a, b], None, schema, timeline=_Timeline()).kept == (a, b) and calls == []


def test_table_prune_trusts_partition_stats_of_a_settled_latest_snapshot_only(monkeypatch):
    a, b = _slice(partition="p=a"), _slice(partition="p=b")
    pstats = {"p=a": _file((1, 10)), "p=b": _file((40, 60))}
    cstats = {("p=a", BASE): _file((1, 10)), ("p=b", BASE): _file((40, 60))}
    schema = pa.schema([("x", pa.int64())])
    f = from_dnf([("x", "=", 50)])
    table, calls = _table_with(monkeypatch, partition_stats=pstats, listed=["i1"])
    out = table.prune([a, b], f, schema, timeline=_Timeline(["i1"]), latest=True)
    assert out.kept == (b,) and out.partitions_skipped == ("p=a",)
    assert calls == [("partition", None), ("listing",)]
    # with column stats too: those of the partitions left only
    table, calls = _table_with(monkeypatch, column_stats=cstats, partition_stats=pstats, listed=["i1"])
    assert table.prune([a, b], f, schema, timeline=_Timeline(["i1"]), latest=True).kept == (b,)
    assert calls == [("partition", None), ("listing",), ("column", ["p=b"])]
    # an instant begun since the snapshot's timeline, or one pending on it: partition stats may
    # already describe slices the snapshot does not read
    for tl, listed in ((_Timeline(["i1"]), ["i1", "i2"]), (_Timeline(["i1"], pending=["i1"]), ["i1"])):
        table, calls = _table_with(monkeypatch, partition_stats=pstats, listed=listed)
        assert table.prune([a, b], f, schema, timeline=tl, latest=True).kept == (a, b)
    # not the latest snapshot (as of, incremental): never
    table, calls = _table_with(monkeypatch, partition_stats=pstats, listed=["i1"])
    assert table.prune([a, b], f, schema, timeline=_Timeline(["i1"]), latest=False).kept == (a, b)
    assert calls == []
