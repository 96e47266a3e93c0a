"""Data skipping: which file slices (and partitions) a filter can skip because their column stats
(the metadata table's ``column_stats`` and ``partition_stats``, :mod:`..format.column_stats`)
prove that no row of them matches.

Skipping only ever saves reads: every answer here is "may match" unless the stats prove the
opposite, and the reader filters the rows it reads anyway. So whatever this module cannot decide
keeps the file: missing or deleted stats, a column the stats do not have, no min or max while
non-null values exist, values of another kind than the filter's (a string against a number, a
naive against a zone-aware timestamp), NaN, a compute expression (it cannot be inspected).

Semantics, as the readers evaluate filters:

- Nulls satisfy no comparison (pyarrow and Spark alike), except in pyarrow's set tests: ``in`` a
  set holding None takes null rows, ``not in`` a set without None takes them too
  (``~field.isin(values)`` is true for a null). A file whose column is all null (null count ==
  value count) matches no comparison.
- NaN is left out of Parquet's min and max: under pyarrow (IEEE) NaN fails ``=``, ``<``, ``>``
  ... but satisfies ``!=`` and ``not in``; under Spark NaN is above every number, so ``>`` and
  ``>=`` may match it. Those tests never skip on a float column.
- Numbers of different kinds (int, decimal, float: an int column against a float value) may be
  compared by pyarrow after a cast to double, which rounds: they are compared as doubles here,
  and a file is skipped only when even the rounded bounds lie strictly outside.
- A float column's stats from a FLOAT (32-bit) file are widened by a few float ulps: a reader
  widens such a value to double through its decimal text (:func:`~..format.schema.cast_column`),
  which may move it by half an ulp.
- Strings compare by code point (UTF-8 byte order, as Parquet and both readers order them). The
  stats of a file of several row groups, and every merged record, take min and max by Java's
  order (UTF-16 code units for strings, signed bytes for binary: :func:`~..format.column_stats.merge_ranges`),
  which disagrees with code point order only for strings holding a character at or above U+E000
  and bytes at or above 0x80: a bound that order may have picked wrongly is not used
  (:func:`_reliable`; the file is then open on that side).
- Multiwriter writes no Parquet statistics for some meta columns, and Hudi then counts their
  values null: "all null" proves nothing about those (:data:`UNPROVEN_NULLS`).
- A file slice with log files (Merge-on-Read) merges its versions, and a partial update takes
  columns from several files: the slice is skipped only when one term of each conjunction rules
  out its base file and every log file alike (the merged row's value of that column comes from
  one of them, or is null: a term null rows satisfy never rules such a slice out).
"""
from __future__ import annotations

import datetime as _dt
import decimal
import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ..format.column_stats import NON_PARTITIONED, ColumnStats, ValueType
from .files import FileSlice

__all__ = [
    "Filter", "Pruned", "Term", "file_may_match", "from_dnf", "may_match", "partition_may_match",
    "partitions_ruled_out", "prune", "slice_may_match", "spark_filter",
]

#: the comparisons a term makes; ``keep`` is one this module cannot decide (it never skips)
OPS = frozenset({"=", "!=", "<", "<=", ">", ">=", "in", "not in", "notnull", "keep"})
_ARROW_OPS = {"=": "=", "==": "=", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">=", "in": "in",
              "not in": "not in"}
_SPARK_OPS = frozenset({"=", "<", "<=", ">", ">=", "in", "notnull"})
_NUMBERS = frozenset({"int", "float", "decimal"})
#: columns whose "all null" stats prove nothing: multiwriter's writer writes no Parquet
#: statistics for these meta columns (``write/merge.py``: unique per row or one value per file),
#: and Hudi's stats of a column chunk without statistics count every value as null
#: (``ParquetUtils.readColumnStatsFromMetadata``, :func:`~..format.column_stats.parquet_stats`)
UNPROVEN_NULLS = frozenset({"_hoodie_record_key", "_hoodie_commit_seqno", "_hoodie_partition_path",
                            "_hoodie_file_name"})

#: column stats as the metadata table gives them: (partition path, file name) -> column -> stats
ColumnStatsMap = Mapping[tuple[str, str], Mapping[str, ColumnStats]]
#: partition stats: partition path -> column -> stats
PartitionStatsMap = Mapping[str, Mapping[str, ColumnStats]]


@dataclass(frozen=True)
class Term:
    """One test on a column: ``column op value``. ``value`` is a tuple for ``in`` / ``not in``
    (None left out: see ``nulls_match``).

    ``nulls_match``: null rows satisfy the term (pyarrow's ``in`` a set holding None, ``not in``
    a set without it). ``nan_largest``: Spark's float order, where NaN is above every number."""

    column: str
    op: str
    value: Any = None
    nulls_match: bool = False
    nan_largest: bool = False


@dataclass(frozen=True)
class Filter:
    """A filter in disjunctive normal form: a row matches when it satisfies every term of one
    of the conjunctions."""

    any_of: tuple[tuple[Term, ...], ...]

    @property
    def columns(self) -> frozenset[str]:
        return frozenset(t.column for conj in self.any_of for t in conj)


@dataclass(frozen=True)
class Pruned:
    """What :func:`prune` kept and skipped. ``partitions_skipped``: partitions their partition
    stats ruled out (their slices are among ``skipped``)."""

    kept: tuple[FileSlice, ...]
    skipped: tuple[FileSlice, ...] = ()
    partitions_skipped: tuple[str, ...] = ()

    @property
    def slices_kept(self) -> int:
        return len(self.kept)

    @property
    def slices_skipped(self) -> int:
        return len(self.skipped)


# -- filters ----------------------------------------------------------------------------------
def from_dnf(filters: Any) -> Filter | None:
    """A pyarrow DNF filter (``[(col, op, value), ...]`` or a list of such lists) as a
    :class:`Filter`; None for what cannot be inspected or is malformed (a compute expression, an
    unknown operator: nothing is skipped, and the read reports a malformed filter itself)."""
    if not isinstance(filters, (list, tuple)) or not filters:
        return None
    first = filters[0]
    if not isinstance(first, (list, tuple)) or not first:
        return None
    conjunctions = [filters] if isinstance(first[0], str) else filters  # as pyarrow's _check_filters
    out = []
    for conj in conjunctions:
        if not isinstance(conj, (list, tuple)) or not conj:
            return None
        terms = [_arrow_term(t) for t in conj]
        if any(t is None for t in terms):
            return None
        out.append(tuple(t for t in terms if t is not None))
    return Filter(tuple(out))


def _arrow_term(term: Any) -> Term | None:
    if not isinstance(term, (list, tuple)) or len(term) != 3:
        return None
    column, op, value = term
    if not isinstance(column, str) or not isinstance(op, str) or op not in _ARROW_OPS:
        return None
    op = _ARROW_OPS[op]
    if op not in ("in", "not in"):
        return Term(column, op, _plain(value))
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple, set, frozenset)):
        return Term(column, "keep")  # pyarrow takes arrays too: not decided here
    values = [_plain(v) for v in value]
    has_null = any(v is None for v in values)
    members = tuple(v for v in values if v is not None)
    # pyarrow's is_in matches a null row exactly when None is in the set; `not in` negates that
    return Term(column, op, members, nulls_match=has_null if op == "in" else not has_null)


def spark_filter(predicates: Iterable[tuple[str, str, Any]]) -> Filter | None:
    """The conjunction of a Spark scan's pushed predicates, ``(column, op, value)`` with the
    ops of :class:`multiwriter.spark.scan.Predicate` (``=``, ``<``, ``<=``, ``>``, ``>=``,
    ``in``, ``notnull``), under Spark's semantics (nulls in an ``in`` list match nothing, NaN
    is the largest float); None when there is none."""
    terms = []
    for column, op, value in predicates:
        if not isinstance(column, str) or op not in _SPARK_OPS:
            terms.append(Term(str(column), "keep"))
        elif op == "in":
            terms.append(Term(column, "in", tuple(_plain(v) for v in value if v is not None), nan_largest=True))
        else:
            terms.append(Term(column, op, _plain(value), nan_largest=True))
    return Filter((tuple(terms),)) if terms else None


def _plain(v: Any) -> Any:
    """NumPy's numbers as Python's (other values as they are: an unknown kind keeps the file)."""
    if isinstance(v, (bool, int, float)):
        return v
    if isinstance(v, numbers.Integral):
        return int(v)
    if isinstance(v, numbers.Real) and not isinstance(v, decimal.Decimal):
        return float(v)
    return v


# -- one file's stats against one term ---------------------------------------------------------
def may_match(stats: ColumnStats | None, term: Term, field_type: pa.DataType | None = None, *,
              nulls_exact: bool = True) -> bool:
    """May a file (or partition) whose column ``term.column`` has ``stats`` hold a row
    satisfying ``term``? True unless the stats prove otherwise. ``field_type``: the column's
    type in the table schema, when known (stats of another kind are then not used).
    ``nulls_exact=False``: the stats may not count every null (a partition's stats merge only
    the files that have the column: rows of older files without it are null)."""
    if term.op not in OPS or term.op == "keep" or stats is None or stats.is_deleted:
        return True
    nulls, count = _count(stats.null_count), _count(stats.value_count)
    if term.nulls_match and (nulls != 0 or not nulls_exact):
        return True
    if count == 0:
        return False  # no rows at all
    non_null = count - nulls if count is not None and nulls is not None else None
    if non_null is not None and non_null < 0:
        return True  # counts that contradict each other prove nothing
    if non_null == 0 and term.column in UNPROVEN_NULLS:
        non_null = None
    if term.op == "notnull":
        return non_null != 0
    if non_null == 0:
        return False  # all null: no comparison holds
    return _values_may_match(stats, term, field_type)


def _count(n: int | None) -> int | None:
    """A count the stats know (Hudi writes -1 for an unknown one)."""
    return n if isinstance(n, int) and n >= 0 else None


def _values_may_match(stats: ColumnStats, term: Term, field_type: pa.DataType | None) -> bool:
    """The non-null values of the file lie in [min, max]: may one of them satisfy ``term``?"""
    lo, hi = stats.min, stats.max
    if lo is None or hi is None:
        return True
    kinds = {_kind(lo), _kind(hi)}
    if None in kinds or len(kinds) > 1 and not kinds <= _NUMBERS:
        return True
    if field_type is not None and not kinds <= _expected_kinds(field_type):
        return True
    if any(isinstance(x, float) and math.isnan(x) for x in (lo, hi)) or _above(lo, hi):
        return True  # NaN, or a min above the max: no bounds
    # a bound Java's order may have picked wrongly is no bound (None: open on that side)
    lo, hi = (lo if _reliable(lo, upper=False) else None), (hi if _reliable(hi, upper=True) else None)
    if lo is None and hi is None:
        return True
    floats = "float" in kinds or field_type is not None and pa.types.is_floating(field_type)
    values = term.value if term.op in ("in", "not in") else (term.value,)
    vkinds = {_kind(v) for v in values}
    if None in vkinds or not all(_usable_value(v) for v in values):
        return True
    floats = floats or "float" in vkinds
    everything = kinds | vkinds
    if len(everything) > 1 and not everything <= _NUMBERS:
        return True  # a string against a number, a date against a timestamp, naive against aware
    if term.op in ("!=", "not in"):
        # NaN rows satisfy both, and Parquet leaves NaN out of min and max
        return floats or len(everything) > 1 or _float32(stats) or not _all_in(lo, hi, values)
    if term.nan_largest and floats and term.op in (">", ">="):
        return True  # Spark: a NaN row (not in min and max) is above every value
    loose = len(everything) > 1  # numbers of several kinds: compared as doubles, rounded
    try:
        if loose:
            lo, hi, values = _double(lo), _double(hi), tuple(float(v) for v in values)
        if _float32(stats):
            lo, hi, loose = _widen32(lo, -1), _widen32(hi, 1), True
        if any(isinstance(v, float) and math.isnan(v) for v in values):
            return True
        return _compare(term.op, lo, hi, values, loose)
    except (TypeError, ValueError, OverflowError, ArithmeticError):
        return True  # values Python cannot compare or convert: not decided here


def _above(lo: Any, hi: Any) -> bool:
    try:
        return bool(lo > hi)
    except (TypeError, ValueError, ArithmeticError):
        return True


def _double(v: Any) -> float | None:
    return None if v is None else float(v)


def _compare(op: str, lo: Any, hi: Any, values: tuple[Any, ...], loose: bool) -> bool:
    """May a value in [lo, hi] (None: open on that side) satisfy ``op`` against ``values``?
    ``loose``: the bounds and values are rounded, so a bound equal to the value proves nothing."""
    if op in ("=", "in"):
        return any((lo is None or lo <= v) and (hi is None or v <= hi) for v in values)
    v = values[0]
    if op in ("<", "<="):
        if lo is None:
            return True
        return lo <= v if op == "<=" or loose else lo < v
    if op in (">", ">="):
        if hi is None:
            return True
        return hi >= v if op == ">=" or loose else hi > v
    return True


def _all_in(lo: Any, hi: Any, values: tuple[Any, ...]) -> bool:
    """Is every value in [lo, hi] one of ``values`` (min == max, and that value is listed)?"""
    try:
        return bool(lo is not None and lo == hi and any(lo == v for v in values))
    except (TypeError, ValueError, ArithmeticError):
        return False


def _kind(v: Any) -> str | None:
    """Which values ``v`` orders with (None: not one this module compares)."""
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, decimal.Decimal):
        return "decimal" if v.is_finite() else None
    if isinstance(v, str):
        return "str"
    if isinstance(v, bytes):
        return "bytes"
    if isinstance(v, _dt.datetime):
        return "aware" if v.utcoffset() is not None else "naive"
    if isinstance(v, _dt.date):
        return "date"
    if isinstance(v, _dt.time):
        return "time" if v.tzinfo is None else None
    return None


def _expected_kinds(t: pa.DataType) -> frozenset[str]:
    """The kinds of stats a column of Arrow type ``t`` may be compared through (a table version
    8 timestamp's stats are raw longs: not comparable with its values)."""
    if pa.types.is_boolean(t):
        return frozenset({"bool"})
    if pa.types.is_unsigned_integer(t) and t.bit_width >= 32:
        return frozenset()  # table version 8 keeps the raw signed INT32 / INT64: 2**64 - 1 reads -1
    if pa.types.is_integer(t):
        return frozenset({"int"})
    if pa.types.is_floating(t):
        return frozenset({"float"})
    if pa.types.is_decimal(t):
        return frozenset({"decimal"})
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return frozenset({"str"})
    if (pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)
            or pa.types.is_binary_view(t)):
        return frozenset({"bytes"})
    if pa.types.is_date(t):
        return frozenset({"date"})
    if pa.types.is_timestamp(t):
        return frozenset({"aware" if t.tz is not None else "naive"})
    if pa.types.is_time(t):
        return frozenset({"time"})
    return frozenset()


def _reliable(v: Any, *, upper: bool) -> bool:
    """Is ``v``, a min (or with ``upper`` a max) that Java's order may have picked among row
    groups or files, a bound in the readers' order too? Strings: Java orders UTF-16 code units,
    which disagree with code points between U+E000..U+FFFF and the supplementary planes; a
    wrongly picked bound holds one of those characters itself. Bytes: Java orders them signed;
    a wrongly picked min holds a byte >= 0x80, a wrongly picked max a byte below 0x80 where a
    value above it has one >= 0x80."""
    if isinstance(v, str):
        return all(ord(c) < 0xD800 for c in v)
    if isinstance(v, bytes):
        return all(b >= 0x80 for b in v) if upper else all(b < 0x80 for b in v)
    return True


def _usable_value(v: Any) -> bool:
    if isinstance(v, str):
        return not any(0xD800 <= ord(c) <= 0xDFFF for c in v)  # no UTF-8 form: the read fails
    return not (isinstance(v, float) and math.isnan(v))


def _float32(stats: ColumnStats) -> bool:
    """Stats of a 32-bit float column (read widened to double through its decimal text)."""
    return stats.value_type is ValueType.FLOAT or stats.wrapper == "FloatWrapper"


def _widen32(x: float | None, direction: int) -> float | None:
    """``x`` moved outwards by more than one 32-bit float ulp (at most |x| * 2**-23 for a
    normal float, 2**-149 below)."""
    if x is None or math.isinf(x):
        return x
    return x + direction * (abs(x) * 2.0**-21 + 2.0**-148)


# -- files, slices, partitions -----------------------------------------------------------------
def _group_may_match(f: Filter, files: Sequence[Mapping[str, ColumnStats] | None],
                     types: Mapping[str, pa.DataType], *, nulls_exact: bool = True) -> bool:
    """May the rows merged from ``files`` (each one's stats by column, None for a file without
    stats) match ``f``? A conjunction is ruled out only by one term that rules out every file."""
    if not files:
        return True
    for conj in f.any_of:
        if not any(all(not may_match(None if s is None else s.get(t.column), t, types.get(t.column),
                                     nulls_exact=nulls_exact) for s in files)
                   for t in conj):
            return True
    return False


def _types(schema: pa.Schema | None, f: Filter) -> dict[str, pa.DataType]:
    if schema is None:
        return {}
    return {c: schema.field(c).type for c in f.columns if schema.get_field_index(c) >= 0}


def file_may_match(f: Filter, stats: Mapping[str, ColumnStats] | None, schema: pa.Schema | None = None) -> bool:
    """May a file whose column stats are ``stats`` (None: none known) hold a row matching ``f``?"""
    return _group_may_match(f, [stats], _types(schema, f))


def partition_may_match(f: Filter, stats: Mapping[str, ColumnStats] | None, schema: pa.Schema | None = None) -> bool:
    """May a partition whose partition stats are ``stats`` hold a row matching ``f``? Their
    null counts leave out the files written before a column was added (whose rows read null
    there): a term null rows satisfy never rules a partition out."""
    return _group_may_match(f, [stats], _types(schema, f), nulls_exact=False)


def slice_may_match(f: Filter, fs: FileSlice, column_stats: ColumnStatsMap | None,
                    schema: pa.Schema | None = None) -> bool:
    """May the file slice ``fs`` (its base file and log files merged) hold a row matching ``f``?
    Any file of it without stats keeps it."""
    return _slice_may_match(f, fs, column_stats, _types(schema, f))


def _slice_may_match(f: Filter, fs: FileSlice, column_stats: ColumnStatsMap, types: Mapping[str, pa.DataType]) -> bool:
    # a merge may leave a column null where no file holds a null (a partial update's insert
    # writes null in the columns it omits): null counts decide nothing once logs merge
    return _group_may_match(f, _slice_stats(fs, column_stats), types, nulls_exact=not fs.logs)


def _slice_stats(fs: FileSlice, column_stats: ColumnStatsMap | None) -> list[Mapping[str, ColumnStats] | None]:
    names = ([fs.name] if fs.has_base else []) + [lf.name for lf in fs.logs]
    if column_stats is None:
        return [None] * len(names)
    return [_lookup(column_stats, fs.partition, n) for n in names]


def _lookup(column_stats: ColumnStatsMap, partition: str, name: str) -> Mapping[str, ColumnStats] | None:
    """A file's stats; the non-partitioned table's partition may be keyed ``""`` or ``"."``
    (Hudi's identifier of it)."""
    found = column_stats.get((partition, name))
    if found is None and partition in ("", NON_PARTITIONED):
        found = column_stats.get((NON_PARTITIONED if partition == "" else "", name))
    return found


def _partition_lookup(partition_stats: PartitionStatsMap, partition: str) -> Mapping[str, ColumnStats] | None:
    found = partition_stats.get(partition)
    if found is None and partition in ("", NON_PARTITIONED):
        found = partition_stats.get(NON_PARTITIONED if partition == "" else "")
    return found


def partitions_ruled_out(f: Filter, partitions: Iterable[str], partition_stats: PartitionStatsMap | None,
                         schema: pa.Schema | None = None) -> set[str]:
    """The partitions among ``partitions`` whose partition stats prove no row matches ``f``."""
    if partition_stats is None or not _known_columns(f, schema):
        return set()
    return {p for p in partitions if not partition_may_match(f, _partition_lookup(partition_stats, p), schema)}


def _known_columns(f: Filter, schema: pa.Schema | None) -> bool:
    """Does the schema have every column ``f`` names? (Else nothing is skipped: the read reports
    the unknown column, as it does without stats.)"""
    return schema is None or all(schema.get_field_index(c) >= 0 for c in f.columns)


def prune(slices: Sequence[FileSlice], f: Filter | None, *, column_stats: ColumnStatsMap | None = None,
          partition_stats: PartitionStatsMap | None = None, schema: pa.Schema | None = None) -> Pruned:
    """The slices that may hold a row matching ``f``, in their order: partitions their
    partition stats rule out go first, then slices their files' column stats rule out. Without
    a filter, or stats, every slice is kept."""
    if f is None or not _known_columns(f, schema):
        return Pruned(tuple(slices))
    out_parts = partitions_ruled_out(f, sorted({s.partition for s in slices}), partition_stats, schema)
    types = _types(schema, f)
    kept: list[FileSlice] = []
    skipped: list[FileSlice] = []
    for s in slices:
        out = s.partition in out_parts or (
            column_stats is not None and not _slice_may_match(f, s, column_stats, types))
        (skipped if out else kept).append(s)
    return Pruned(tuple(kept), tuple(skipped), tuple(sorted(out_parts)))
