"""Hudi's data-skipping indexes in the metadata table: the bytes of the ``column_stats`` and
``partition_stats`` partitions, read and written.

Both partitions hold ``HoodieMetadataRecord`` values (Avro, ``HoodieMetadata.avsc``) in HFile
cells, as the ``files`` partition does: a base HFile per file group slice, and log files whose
HFile data blocks carry the records of one deltacommit each. Their value is the
``ColumnStatsMetadata`` field, a ``HoodieMetadataColumnStats`` record.

The format, as Hudi 1.0 (table version 8) and 1.1 (table version 9) write it; the class each rule
comes from is named.

- Record types (``MetadataPartitionType``): ``COLUMN_STATS`` is type 3 in partition
  ``column_stats``, file groups ``col-stats-NNNN-0``; ``PARTITION_STATS`` is type 6 in
  ``partition_stats``, file groups ``partition-stats-NNNN-0``. ``HoodieMetadataConfig`` gives them
  2 and 1 file groups by default (``hoodie.metadata.index.column.stats.file.group.count``,
  ``hoodie.metadata.index.partition.stats.file.group.count``).
- Keys (``HoodieMetadataPayload.getColumnStatsIndexKey``,
  ``HoodieTableMetadataUtil.getPartitionStatsIndexKey``): a column-stats key is
  ``ColumnIndexID + PartitionIndexID + FileIndexID`` of (column, partition, file name), a
  partition-stats key ``ColumnIndexID + PartitionIndexID``, each part the standard Base64 (with
  padding) of a hash: ``HashID`` gives columns and partitions XXHash64 with seed ``0xdabadaba``
  (a Java int, so sign-extended to a long), 8 bytes big-endian (``Bytes.toBytes(long)``), and file
  names MD5 (16 bytes). The partition is the relative partition path, ``.`` for a
  non-partitioned table (``getColumnStatsIndexPartitionIdentifier``). Keys are 48 and 24
  characters.
- File group of a key (``HoodieTableMetadataUtil.mapRecordKeyToFileGroupIndex``): Java's
  ``String.hashCode`` over the key, then ``abs(abs(h) % n)``.
- The record's ``key`` field is empty in HFile cells (the cell key is the record key), as in the
  ``files`` partition; ``fileName`` is the data file's name for column stats and the partition
  path for partition stats (``createColumnStatsRecords``, ``createPartitionStatsRecords``).
- Values (``HoodieColumnRangeMetadata``, ``stats.ValueMetadata``, ``stats.ValueType``,
  ``HoodieAvroWrapperUtils``): ``minValue`` / ``maxValue`` are a union of wrapper records
  (``BooleanWrapper`` ... ``LocalDateWrapper``, and ``ArrayWrapper`` in 1.1). Table version 9
  writes index version V2 (``.hoodie/.index_defs/index.json``): ``valueType`` holds
  ``HoodieValueTypeInfo(typeOrdinal, additionalInfo)``, the ordinal of ``ValueType`` (see
  :class:`ValueType`), and the value is the primitive form of that type in a primitive wrapper
  (``ValueType.wrapValue``): a decimal is ``BytesWrapper`` of the unscaled value's minimal
  two's-complement bytes with ``additionalInfo`` ``"precision,scale"``, a date ``IntWrapper`` of
  epoch days, a timestamp ``LongWrapper`` of its unit since the epoch, a UUID ``StringWrapper``.
  Table version 8 (index version V1) writes no ``valueType``; the value's Java class picks the
  wrapper (``wrapValueIntoAvro``): ``DateWrapper`` of epoch days, ``DecimalWrapper`` (bytes,
  decimal(30,15)), ``StringWrapper``, ``BytesWrapper``, ``IntWrapper`` / ``LongWrapper`` (raw
  Parquet ints: a V1 timestamp is a ``LongWrapper``).
- Stats of a Parquet base file (``ParquetUtils.readColumnStatsFromMetadata``): per column chunk
  of each row group, the footer's min and max, the null count (the value count when the chunk's
  statistics are empty), the chunk's value count, total compressed and uncompressed sizes;
  row groups combine with ``HoodieColumnRangeMetadata.merge`` (min of mins, max of maxes, sums).
  V1 converts values with ``convertToNativeJavaType``, V2 by the ``ValueType`` of the column's
  annotation (``LogicalTypeParquetAdapter.getValueTypeFromAnnotation``; other annotations are
  refused, and Hudi then writes no record for the file).
- Columns indexed by default (``HoodieTableMetadataUtil.getColumnsToIndex``): without
  ``hoodie.metadata.index.column.stats.column.list``, the three meta columns
  ``_hoodie_commit_time``, ``_hoodie_partition_path``, ``_hoodie_record_key`` (when the table
  populates meta fields), then the first ``hoodie.metadata.index.column.stats.max.columns.to.index``
  (32) data fields whose type is supported (``isColumnTypeSupported``: no record, array, map or
  enum; a decimal only within decimal(30,15)).
- A deleted file (clean, ``getColumnStatsRecords`` with ``isDeleted``): one record per indexed
  column from ``HoodieColumnRangeMetadata.stub``: no min or max, counts and sizes -1,
  ``isDeleted`` true, ``valueType`` NULL (V2) or absent (V1).
- Partition stats (``convertMetadataToPartitionStatRecords``, ``FileFormatUtils.getColumnRangeInPartition``):
  one record per (partition, column), the merge of the column stats of every file of the
  partition's latest file slices when the column_stats partition is there (``isTightBound``
  true: exact for those files), else of the commit's files only (``isTightBound`` false: only
  widened). That view (``getPartitionLatestFileSlicesIncludingInflight``) still holds the file
  groups a clustering replaces while its replacecommit is inflight, so the stats a clustering
  writes also count the replaced groups until the partition's next write: tight, but wider than
  the live files. A dropped partition gets a tombstone per column.
- Merging two records of one key (``HoodieTableMetadataUtil.mergeColumnStatsRecords``): a
  tombstone on either side, or a newer tight-bound record, replaces the older; otherwise min and
  max widen and counts and sizes add up.

Decoded values are Python values (``str``, ``int``, ``float``, ``bool``, ``bytes``,
``decimal.Decimal``, ``datetime.date``, ``datetime.datetime`` in UTC for instants and naive for
local timestamps, ``datetime.time``, ``uuid.UUID``), as pyarrow gives a Parquet footer's
statistics; nanosecond timestamps stay ints.
"""
from __future__ import annotations

import base64
import datetime as _dt
import decimal
import functools
import hashlib
import io
import json
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import IntEnum
from typing import Any

import fastavro

from ..errors import TableFormatError
from . import avro, avro_encoder, hfile
from .log_file import _NS, _ORDERING_WRAPPERS, _wrapper, BlockType, HeaderKey, encode_block, read_log_blocks

COLUMN_STATS = "column_stats"
PARTITION_STATS = "partition_stats"
#: ``MetadataPartitionType``'s record type and file-group prefix of each partition
RECORD_TYPE = {COLUMN_STATS: 3, PARTITION_STATS: 6}
FILE_ID_PREFIX = {COLUMN_STATS: "col-stats-", PARTITION_STATS: "partition-stats-"}
#: ``HoodieMetadataConfig``'s default file group counts
DEFAULT_FILE_GROUPS = {COLUMN_STATS: 2, PARTITION_STATS: 1}
#: ``hoodie.metadata.index.column.stats.max.columns.to.index``
MAX_COLUMNS = 32
#: the meta columns always indexed (``META_COLS_TO_ALWAYS_INDEX_SCHEMA_MAP``, a sorted map)
ALWAYS_INDEXED = ("_hoodie_commit_time", "_hoodie_partition_path", "_hoodie_record_key")
#: every meta column, with the operation field (``HOODIE_META_COLUMNS_WITH_OPERATION``)
META_COLUMNS = ("_hoodie_commit_time", "_hoodie_commit_seqno", "_hoodie_record_key", "_hoodie_partition_path",
                "_hoodie_file_name", "_hoodie_operation")
#: ``HoodieTableMetadata.NON_PARTITIONED_NAME``
NON_PARTITIONED = "."
#: ``HashID``'s seed: the Java int 0xdabadaba, widened to a long
_HASH_SEED = 0xFFFFFFFF_DABADABA
#: ``DecimalWrapper``'s decimal (``HoodieTableMetadataUtil.DECIMAL_MAX_PRECISION``, ``..._SCALE``)
DECIMAL_PRECISION, DECIMAL_SCALE = 30, 15
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
_EPOCH_DATE = _dt.date(1970, 1, 1)


class StatsFormatError(TableFormatError):
    """A column-stats or partition-stats record, or the Parquet statistics it is built from, that
    Hudi's format does not hold (a damaged cell, a type Hudi cannot index)."""


class ValueType(IntEnum):
    """``org.apache.hudi.stats.ValueType``: ``valueType.typeOrdinal`` is the ordinal."""

    V1 = 0
    NULL = 1
    BOOLEAN = 2
    INT = 3
    LONG = 4
    FLOAT = 5
    DOUBLE = 6
    STRING = 7
    BYTES = 8
    FIXED = 9
    DECIMAL = 10
    UUID = 11
    DATE = 12
    TIME_MILLIS = 13
    TIME_MICROS = 14
    TIMESTAMP_MILLIS = 15
    TIMESTAMP_MICROS = 16
    TIMESTAMP_NANOS = 17
    LOCAL_TIMESTAMP_MILLIS = 18
    LOCAL_TIMESTAMP_MICROS = 19
    LOCAL_TIMESTAMP_NANOS = 20


#: the primitive wrapper each value type is written in (``ValueType``'s ``PrimitiveWrapperType``)
_PRIMITIVE_WRAPPER = {
    ValueType.BOOLEAN: "BooleanWrapper", ValueType.INT: "IntWrapper", ValueType.LONG: "LongWrapper",
    ValueType.FLOAT: "FloatWrapper", ValueType.DOUBLE: "DoubleWrapper", ValueType.STRING: "StringWrapper",
    ValueType.BYTES: "BytesWrapper", ValueType.FIXED: "BytesWrapper", ValueType.DECIMAL: "BytesWrapper",
    ValueType.UUID: "StringWrapper", ValueType.DATE: "IntWrapper", ValueType.TIME_MILLIS: "IntWrapper",
    ValueType.TIME_MICROS: "LongWrapper", ValueType.TIMESTAMP_MILLIS: "LongWrapper",
    ValueType.TIMESTAMP_MICROS: "LongWrapper", ValueType.TIMESTAMP_NANOS: "LongWrapper",
    ValueType.LOCAL_TIMESTAMP_MILLIS: "LongWrapper", ValueType.LOCAL_TIMESTAMP_MICROS: "LongWrapper",
    ValueType.LOCAL_TIMESTAMP_NANOS: "LongWrapper",
}


def index_version(table_version: int) -> int:
    """The column-stats index version a table version writes (``HoodieIndexVersion``): 1 for
    table version 8 and below, 2 for 9."""
    return 2 if table_version >= 9 else 1


# -- keys and file groups ---------------------------------------------------------------------
_M64 = (1 << 64) - 1
_P1, _P2, _P3 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9
_P4, _P5 = 0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M64


def _round(acc: int, lane: int) -> int:
    return (_rotl((acc + lane * _P2) & _M64, 31) * _P1) & _M64


def xxh64(data: bytes, seed: int = 0) -> int:
    """XXHash64 of ``data`` (the algorithm of lz4-java's ``XXHash64`` that ``HashID`` uses), as
    an unsigned 64-bit int."""
    n, i, seed = len(data), 0, seed & _M64
    if n >= 32:
        v = [(seed + _P1 + _P2) & _M64, (seed + _P2) & _M64, seed, (seed - _P1) & _M64]
        while i + 32 <= n:
            for j in range(4):
                v[j] = _round(v[j], int.from_bytes(data[i + 8 * j:i + 8 * j + 8], "little"))
            i += 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M64
        for x in v:
            h = ((h ^ _round(0, x)) * _P1 + _P4) & _M64
    else:
        h = (seed + _P5) & _M64
    h = (h + n) & _M64
    while i + 8 <= n:
        h ^= _round(0, int.from_bytes(data[i:i + 8], "little"))
        h = (_rotl(h, 27) * _P1 + _P4) & _M64
        i += 8
    if i + 4 <= n:
        h ^= (int.from_bytes(data[i:i + 4], "little") * _P1) & _M64
        h = (_rotl(h, 23) * _P2 + _P3) & _M64
        i += 4
    while i < n:
        h ^= (data[i] * _P5) & _M64
        h = (_rotl(h, 11) * _P1) & _M64
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _M64
    h ^= h >> 29
    h = (h * _P3) & _M64
    return h ^ (h >> 32)


@functools.lru_cache(maxsize=4096)
def _id64(name: str) -> str:
    """``ColumnIndexID`` / ``PartitionIndexID.asBase64EncodedString`` (columns and partitions
    recur in every key: hashed once each)."""
    return base64.b64encode(xxh64(name.encode("utf-8"), _HASH_SEED).to_bytes(8, "big")).decode()


def _file_id(file_name: str) -> str:
    """``FileIndexID.asBase64EncodedString``: Base64 of the name's MD5."""
    return base64.b64encode(hashlib.md5(file_name.encode("utf-8"), usedforsecurity=False).digest()).decode()


def partition_identifier(partition: str) -> str:
    """``getColumnStatsIndexPartitionIdentifier``: the partition path, ``.`` for the empty one."""
    return NON_PARTITIONED if partition == "" else partition


def column_stats_key(column: str, partition: str, file_name: str) -> str:
    """The record key of a file's column in ``column_stats`` (``getColumnStatsIndexKey``)."""
    return _id64(column) + _id64(partition_identifier(partition)) + _file_id(file_name)


def partition_stats_key(column: str, partition: str) -> str:
    """The record key of a partition's column in ``partition_stats`` (``getPartitionStatsIndexKey``);
    also the prefix of that partition's column-stats keys of the column."""
    return _id64(column) + _id64(partition_identifier(partition))


def _java_hash(s: str) -> int:
    if s.isascii():  # one UTF-16 unit per character: its code
        h = 0
        for c in s.encode():
            h = (31 * h + c) & 0xFFFFFFFF
    else:
        h = 0
        for unit in _utf16_units(s):
            h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def _utf16_units(s: str) -> Iterator[int]:
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        yield (data[i] << 8) | data[i + 1]


def file_group_index(key: str, file_groups: int) -> int:
    """The file group (0-based) a record key goes to among ``file_groups``
    (``mapRecordKeyToFileGroupIndex``: ``abs(abs(String.hashCode) % n)``; whatever the signs
    Java's remainder takes on the way, that is the hash's magnitude modulo ``n``)."""
    if file_groups < 1:
        raise ValueError(f"file_groups must be at least 1, not {file_groups}")
    return abs(_java_hash(key)) % file_groups


def file_group_id(partition: str, index: int) -> str:
    """The file id of file group ``index`` of a partition (``getFileIDForFileGroup``)."""
    return f"{FILE_ID_PREFIX[partition]}{index:04d}-0"


# -- the records ------------------------------------------------------------------------------
@dataclass(frozen=True)
class ColumnStats:
    """One ``HoodieMetadataColumnStats`` (``HoodieColumnRangeMetadata`` in Hudi's code).

    ``file_name``: the data file's name, or for partition stats the partition path.
    ``wrapper``: the Avro wrapper of ``min`` / ``max`` (``"IntWrapper"``...), None when both are
    None. ``value_type``: the ``ValueType`` of an index version 2 record, None for version 1
    (no ``valueType`` field or a null one). ``decimal``: (precision, scale) of a V2 decimal.
    """

    file_name: str
    column: str
    min: Any = None
    max: Any = None
    null_count: int | None = None
    value_count: int | None = None
    total_size: int | None = None
    total_uncompressed_size: int | None = None
    is_deleted: bool = False
    is_tight_bound: bool = False
    wrapper: str | None = None
    value_type: ValueType | None = None
    decimal: tuple[int, int] | None = None


@dataclass(frozen=True)
class StatsRecord:
    """A record of either partition: its key, record type (3 or 6) and stats."""

    key: str
    record_type: int
    stats: ColumnStats

    @property
    def partition(self) -> str:
        return COLUMN_STATS if self.record_type == RECORD_TYPE[COLUMN_STATS] else PARTITION_STATS


def column_stats_record(partition: str, stats: ColumnStats) -> StatsRecord:
    """The ``column_stats`` record of one file's column (``createColumnStatsRecord``)."""
    return StatsRecord(column_stats_key(stats.column, partition, stats.file_name), RECORD_TYPE[COLUMN_STATS], stats)


def partition_stats_record(stats: ColumnStats) -> StatsRecord:
    """The ``partition_stats`` record of a partition's column (``createPartitionStatsRecords``):
    ``stats.file_name`` is the partition path."""
    return StatsRecord(partition_stats_key(stats.column, stats.file_name), RECORD_TYPE[PARTITION_STATS], stats)


def deleted_file(partition: str, file_name: str, columns: Iterable[str], *, version: int = 2) -> list[StatsRecord]:
    """The tombstones a clean writes for a deleted file, one per indexed column
    (``getColumnStatsRecords`` with ``isDeleted``, ``HoodieColumnRangeMetadata.stub``)."""
    vt = ValueType.NULL if version >= 2 else None
    return [column_stats_record(partition, ColumnStats(file_name, c, None, None, -1, -1, -1, -1, True, False,
                                                       None, vt)) for c in columns]


def deleted_partition(partition: str, columns: Iterable[str], *, version: int = 2) -> list[StatsRecord]:
    """The partition-stats tombstones of a dropped partition (``convertMetadataToPartitionStatRecords``
    for ``DELETE_PARTITION``: a stub of each column, deleted and tight)."""
    vt = ValueType.NULL if version >= 2 else None
    return [StatsRecord(partition_stats_key(c, partition), RECORD_TYPE[PARTITION_STATS],
                        ColumnStats(partition, c, None, None, -1, -1, -1, -1, True, True, None, vt)) for c in columns]


# -- the Avro schema --------------------------------------------------------------------------
def _wrappers(table_version: int) -> list[dict[str, Any]]:
    """The ``minValue`` union's record branches. Their first eleven are the wrappers of
    ``HoodieDeleteRecord.orderingVal`` in the same order (both come from ``HoodieMetadata.avsc``
    and ``HoodieDeleteRecord.avsc`` of the same release); then ``LocalDateWrapper``, and in
    table version 9 ``ArrayWrapper``."""
    out = [_wrapper(n, t) for n, t in _ORDERING_WRAPPERS] + [_wrapper("LocalDateWrapper", "int")]
    if table_version >= 9:
        items = ["null"] + [f"{_NS}.{w['name']}" for w in out]
        out.append({"type": "record", "name": "ArrayWrapper", "namespace": _NS, "fields": [
            {"name": "wrappedValues", "type": ["null", {"type": "array", "items": items}], "default": None}]})
    return out


def stats_schema(table_version: int) -> dict[str, Any]:
    """``HoodieMetadataColumnStats`` as Hudi writes it for ``table_version``: 8 has no
    ``valueType`` nor ``ArrayWrapper``, 9 has both."""
    wrappers = _wrappers(table_version)
    names = [f"{_NS}.{w['name']}" for w in wrappers]
    nullable = {"long": ["null", "long"], "string": ["null", "string"]}
    fields: list[dict[str, Any]] = [
        {"name": "fileName", "type": nullable["string"], "default": None},
        {"name": "columnName", "type": nullable["string"], "default": None},
        {"name": "minValue", "type": ["null", *wrappers], "default": None},
        {"name": "maxValue", "type": ["null", *names], "default": None},
        *({"name": n, "type": nullable["long"], "default": None}
          for n in ("valueCount", "nullCount", "totalSize", "totalUncompressedSize")),
        {"name": "isDeleted", "type": "boolean"},
        {"name": "isTightBound", "type": "boolean", "default": False},
    ]
    if table_version >= 9:
        fields.append({"name": "valueType", "type": ["null", {
            "type": "record", "name": "HoodieValueTypeInfo", "namespace": _NS, "fields": [
                {"name": "typeOrdinal", "type": "int"},
                {"name": "additionalInfo", "type": ["null", "string"], "default": None}]}], "default": None})
    return {"type": "record", "name": "HoodieMetadataColumnStats", "namespace": _NS, "fields": fields}


def record_schema(base: Mapping[str, Any], table_version: int) -> dict[str, Any]:
    """``base`` (a ``HoodieMetadataRecord`` schema whose ``ColumnStatsMetadata`` field may be
    null-only, as the files partition's writer keeps it) with that field typed
    ``["null", HoodieMetadataColumnStats]``: the schema a writer of these partitions declares.
    Every other field is left as it is."""
    fields = []
    found = False
    for f in base["fields"]:
        if f["name"] == "ColumnStatsMetadata":
            f = {**f, "type": ["null", stats_schema(table_version)], "default": None}
            found = True
        fields.append(f)
    if not found:
        raise ValueError("the record schema has no ColumnStatsMetadata field")
    return {**base, "fields": fields}


# -- values -----------------------------------------------------------------------------------
def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _unscaled_bytes(n: int) -> bytes:
    """``BigInteger.toByteArray``: the minimal big-endian two's complement."""
    bits = n.bit_length() if n >= 0 else (~n).bit_length()
    return n.to_bytes(bits // 8 + 1, "big", signed=True)


#: wide enough for every Parquet decimal (decimal256: 76 digits): Python's default context keeps
#: 28 digits and would round a wider one
_EXACT = decimal.Context(prec=100)


def _decimal_of(unscaled: int, scale: int) -> decimal.Decimal:
    return decimal.Decimal(unscaled).scaleb(-scale, context=_EXACT)


def _unscaled(v: decimal.Decimal, scale: int) -> int:
    q = v.scaleb(scale, context=_EXACT)
    if q != q.to_integral_value(context=_EXACT):
        raise StatsFormatError(f"decimal {v} has more than {scale} digits after the point")
    return int(q)


def _micros(t: _dt.datetime) -> int:
    if t.tzinfo is None:
        t = t.replace(tzinfo=_dt.timezone.utc)
    d = t - _EPOCH
    return (d.days * 86_400 + d.seconds) * 1_000_000 + d.microseconds


def _instant(micros: int, *, local: bool) -> _dt.datetime:
    t = _EPOCH + _dt.timedelta(microseconds=micros)
    return t.replace(tzinfo=None) if local else t


def _time_of(micros: int) -> _dt.time:
    s, us = divmod(micros, 1_000_000)
    return _dt.time(s // 3600, s // 60 % 60, s % 60, us)


def _time_micros(t: _dt.time) -> int:
    return ((t.hour * 60 + t.minute) * 60 + t.second) * 1_000_000 + t.microsecond


def _from_v2(v: Any, vt: ValueType, dec: tuple[int, int] | None) -> Any:
    """A V2 value as Hudi reads it back (``ValueType.unwrapValue``, its ``to...`` functions)."""
    if v is None or vt is ValueType.NULL:
        return None
    if vt is ValueType.DECIMAL:
        if dec is None:
            raise StatsFormatError("a DECIMAL value type without its precision and scale")
        return _decimal_of(int.from_bytes(v, "big", signed=True), dec[1])
    if vt is ValueType.DATE:
        return _EPOCH_DATE + _dt.timedelta(days=v)
    if vt is ValueType.UUID:
        return uuid.UUID(v)
    if vt is ValueType.TIME_MILLIS:
        return _time_of(v * 1000)
    if vt is ValueType.TIME_MICROS:
        return _time_of(v)
    if vt in (ValueType.TIMESTAMP_MILLIS, ValueType.LOCAL_TIMESTAMP_MILLIS):
        return _instant(v * 1000, local=vt is ValueType.LOCAL_TIMESTAMP_MILLIS)
    if vt in (ValueType.TIMESTAMP_MICROS, ValueType.LOCAL_TIMESTAMP_MICROS):
        return _instant(v, local=vt is ValueType.LOCAL_TIMESTAMP_MICROS)
    return v  # primitives, and nanosecond timestamps as ints


def _to_v2(v: Any, vt: ValueType, dec: tuple[int, int] | None) -> Any:
    """The primitive a V2 value is written as (``ValueType``'s ``from...`` functions)."""
    if v is None or vt is ValueType.NULL:
        return None
    if vt is ValueType.DECIMAL:
        if dec is None:
            raise StatsFormatError("a DECIMAL value type without its precision and scale")
        return _unscaled_bytes(_unscaled(decimal.Decimal(v), dec[1]))
    if vt is ValueType.DATE:
        return (v - _EPOCH_DATE).days
    if vt is ValueType.UUID:
        return str(v)
    if vt is ValueType.TIME_MILLIS:
        return _time_micros(v) // 1000
    if vt is ValueType.TIME_MICROS:
        return _time_micros(v)
    if vt in (ValueType.TIMESTAMP_MILLIS, ValueType.LOCAL_TIMESTAMP_MILLIS):
        return _micros(v) // 1000
    if vt in (ValueType.TIMESTAMP_MICROS, ValueType.LOCAL_TIMESTAMP_MICROS):
        return _micros(v)
    return v


def _from_v1(v: Any, wrapper: str) -> Any:
    """A V1 value by its wrapper (``unwrapAvroValueWrapper``)."""
    if wrapper in ("DateWrapper", "LocalDateWrapper"):
        return _EPOCH_DATE + _dt.timedelta(days=v)
    if wrapper == "TimestampMicrosWrapper":
        return _instant(v, local=False)
    if wrapper == "ArrayWrapper":
        return tuple(None if w is None else _from_v1(w[1]["value"], _short(w[0])) for w in v or ())
    return v  # DecimalWrapper and TimeMicrosWrapper come decoded by their logical types


def _to_v1(v: Any, wrapper: str) -> Any:
    if wrapper in ("DateWrapper", "LocalDateWrapper"):
        return (v - _EPOCH_DATE).days
    if wrapper == "TimestampMicrosWrapper":
        return _micros(v)
    if wrapper == "DecimalWrapper":  # tryUpcastDecimal: to decimal(30,15) without rounding
        ctx = decimal.Context(prec=DECIMAL_PRECISION, traps=[decimal.Inexact, decimal.InvalidOperation])
        try:
            return decimal.Decimal(v).quantize(decimal.Decimal(1).scaleb(-DECIMAL_SCALE), context=ctx)
        except (decimal.Inexact, decimal.InvalidOperation) as e:
            raise StatsFormatError(f"decimal {v} does not fit decimal({DECIMAL_PRECISION},{DECIMAL_SCALE})") from e
    return v


#: each wrapper's full name, the name its union branch goes by
_WRAPPER_NAMES = {name: f"{_NS}.{name}" for name, _ in (*_ORDERING_WRAPPERS, ("LocalDateWrapper", None))}
#: the value types whose V2 primitive is the value itself (``_to_v2`` leaves them as they are)
_V2_AS_IS = frozenset({ValueType.BOOLEAN, ValueType.INT, ValueType.LONG, ValueType.FLOAT, ValueType.DOUBLE,
                       ValueType.STRING, ValueType.BYTES, ValueType.FIXED, ValueType.TIMESTAMP_NANOS,
                       ValueType.LOCAL_TIMESTAMP_NANOS})


def _wrap(v: Any, s: ColumnStats) -> tuple[str, Any] | None:
    """(wrapper's full name, wrapped value) of a min or max, None for no value."""
    if v is None:
        return None
    if s.value_type is not None:
        name = _PRIMITIVE_WRAPPER.get(s.value_type)
        if name is None:
            raise StatsFormatError(f"column {s.column!r}: value type {s.value_type.name} holds no value")
        return _WRAPPER_NAMES[name], (v if s.value_type in _V2_AS_IS else _to_v2(v, s.value_type, s.decimal))
    if s.wrapper is None:
        raise StatsFormatError(f"column {s.column!r}: a value without its wrapper")
    if s.wrapper == "ArrayWrapper":
        raise StatsFormatError(f"column {s.column!r}: array values are not written")
    return _WRAPPER_NAMES.get(s.wrapper) or f"{_NS}.{s.wrapper}", _to_v1(v, s.wrapper)


# -- encoding ---------------------------------------------------------------------------------
def _stats_values(s: ColumnStats, table_version: int) -> tuple:
    """The ``HoodieMetadataColumnStats`` of ``s`` as the compiled encoder takes it: its fields in
    :data:`avro_encoder.STATS_FIELDS` order, wrappers as (full name, value), ``valueType`` as
    (ordinal, additional info) or None (always None before table version 9)."""
    lo, hi = _wrap(s.min, s), _wrap(s.max, s)
    vt = s.value_type
    if vt is not None:
        if table_version < 9:
            raise StatsFormatError(f"column {s.column!r}: table version {table_version} writes no value type")
        info = f"{s.decimal[0]},{s.decimal[1]}" if vt is ValueType.DECIMAL and s.decimal else None
        vt = (int(vt), info)
    return (s.file_name, s.column, lo, hi, s.value_count, s.null_count, s.total_size, s.total_uncompressed_size,
            s.is_deleted, s.is_tight_bound, vt)


def _avro_stats(s: ColumnStats, table_version: int) -> dict[str, Any]:
    """The ``HoodieMetadataColumnStats`` of ``s`` as fastavro takes it."""
    return _fastavro_form(_stats_values(s, table_version), table_version)


def _fastavro_form(values: tuple, table_version: int) -> dict[str, Any]:
    """:func:`_stats_values` as fastavro takes them: wrappers in tuple notation, ``valueType`` a
    dict, absent before table version 9."""
    out = dict(zip(avro_encoder.STATS_FIELDS, values, strict=True))
    for name in ("minValue", "maxValue"):
        if out[name] is not None:
            out[name] = (out[name][0], {"value": out[name][1]})
    if table_version >= 9:
        vt = out["valueType"]
        out["valueType"] = None if vt is None else {"typeOrdinal": vt[0], "additionalInfo": vt[1]}
    else:
        del out["valueType"]
    return out


def _table_version(schema: Mapping[str, Any]) -> int:
    """9 when the schema's ``HoodieMetadataColumnStats`` has ``valueType``, else 8."""
    for f in schema["fields"]:
        if f["name"] == "ColumnStatsMetadata":
            for branch in f["type"] if isinstance(f["type"], list) else [f["type"]]:
                if isinstance(branch, dict) and branch.get("type") == "record":
                    return 9 if any(g["name"] == "valueType" for g in branch["fields"]) else 8
    raise ValueError("the record schema's ColumnStatsMetadata field holds no HoodieMetadataColumnStats")


def encode_cells(records: Iterable[StatsRecord], schema: Mapping[str, Any], *,
                 file_name: str | None = None) -> list[tuple[str, bytes]]:
    """(key, value) HFile cells of ``records`` in ``schema`` (a full ``HoodieMetadataRecord``
    schema, :func:`record_schema`). ``file_name``: a compacted base's own name, which Hudi's
    compaction puts in each record's ``_hoodie_file_name``. The encoder compiled for the schema
    writes them (:mod:`.avro_encoder`); fastavro writes a schema or a value it does not know."""
    version = _table_version(schema)
    text = json.dumps(schema, separators=(",", ":"))
    compiled = _compiled(text)
    fallback = _FastavroEncoder(text, version, file_name)
    if compiled is None:
        return [(r.key, fallback.encode(r, _stats_values(r.stats, version))) for r in records]
    frames: dict[int, avro_encoder.Frame] = {}
    cells = []
    for r in records:
        values = _stats_values(r.stats, version)
        try:
            frame = frames.get(r.record_type) or frames.setdefault(
                r.record_type, compiled.frame(r.record_type, file_name))
            data = compiled.encode(frame, values)
        except avro_encoder.Unsupported:
            data = fallback.encode(r, values)
        cells.append((r.key, data))
    return cells


class _FastavroEncoder:
    """fastavro's encoding of records in one schema: the reference the compiled encoder writes
    byte for byte, and what writes the schemas and values that encoder does not know. The
    unions' branches are named (fastavro's ``(name, value)`` form), so it tries none of the
    others."""

    def __init__(self, text: str, version: int, file_name: str | None) -> None:
        self._parsed = _parsed_schema(text)
        self._stats_name, self._type_name = _branch_names(text)
        self._version = version
        self._frame: dict[str, Any] = dict.fromkeys(f["name"] for f in self._parsed["fields"])
        if file_name is not None and "_hoodie_file_name" in self._frame:
            self._frame["_hoodie_file_name"] = file_name
        self._frame["key"] = ""
        self._buf = io.BytesIO()

    def encode(self, r: StatsRecord, values: tuple) -> bytes:
        """The value of ``r`` (``values``: its :func:`_stats_values`)."""
        stats = _fastavro_form(values, self._version)
        if self._type_name and stats.get("valueType") is not None:
            stats["valueType"] = (self._type_name, stats["valueType"])
        value = {**self._frame, "type": r.record_type,
                 "ColumnStatsMetadata": (self._stats_name, stats) if self._stats_name else stats}
        buf = self._buf
        buf.seek(0)
        buf.truncate()
        try:
            fastavro.schemaless_writer(buf, self._parsed, value)
        except (ValueError, TypeError, OverflowError) as e:
            raise StatsFormatError(f"record {r.key}: column {r.stats.column!r} does not encode ({e})") from e
        return buf.getvalue()


def _fastavro_cells(records: Iterable[StatsRecord], schema: Mapping[str, Any], *,
                    file_name: str | None = None) -> list[tuple[str, bytes]]:
    """:func:`encode_cells` by fastavro alone (the compiled encoder's reference)."""
    version = _table_version(schema)
    enc = _FastavroEncoder(json.dumps(schema, separators=(",", ":")), version, file_name)
    return [(r.key, enc.encode(r, _stats_values(r.stats, version))) for r in records]


@functools.lru_cache(maxsize=32)
def _compiled(text: str) -> avro_encoder.StatsEncoder | None:
    """The compiled encoder of a record schema, once per schema (None: fastavro writes it)."""
    return avro_encoder.StatsEncoder.compile(_parsed_schema(text))


@functools.lru_cache(maxsize=32)
def _branch_names(text: str) -> tuple[str | None, str | None]:
    """The full names of the column-stats record and of its value-type record in a record
    schema's unions (None when the schema does not name them)."""
    stats = vtype = None
    for f in _parsed_schema(text)["fields"]:
        if f["name"] != "ColumnStatsMetadata":
            continue
        for branch in f["type"] if isinstance(f["type"], list) else [f["type"]]:
            if isinstance(branch, dict) and branch.get("type") == "record":
                stats = branch.get("name")
                for g in branch.get("fields", []):
                    if g["name"] == "valueType":
                        for b in g["type"] if isinstance(g["type"], list) else [g["type"]]:
                            if isinstance(b, dict) and b.get("type") == "record":
                                vtype = b.get("name")
    return stats, vtype


@functools.lru_cache(maxsize=32)
def _parsed_schema(text: str) -> Any:
    """fastavro's parse of a record schema, once per schema (each log block would parse it)."""
    return fastavro.parse_schema(json.loads(text))


def encode_hfile(records: Iterable[StatsRecord], schema: Mapping[str, Any], *, base: bool = False,
                 file_name: str | None = None, created_ms: int = 0) -> bytes:
    """An HFile of ``records`` as Hudi's metadata writer lays it out: the schema and the min and
    max record keys in its file info, and with ``base`` the keys' bloom filter meta block
    (``HoodieAvroHFileWriter``)."""
    return cells_hfile(encode_cells(records, schema, file_name=file_name), schema, base=base, created_ms=created_ms)


def cells_hfile(cells: list[tuple[str, bytes]], schema: Mapping[str, Any], *, base: bool = False,
                created_ms: int = 0) -> bytes:
    """:func:`encode_hfile` of cells already encoded in ``schema`` (a compaction carries the
    cells no log changed over as they are)."""
    keys = sorted(k for k, _ in cells)
    info = {b"schema": json.dumps(schema, separators=(",", ":")).encode()}
    if keys:
        info[b"minRecordKey"], info[b"maxRecordKey"] = keys[0].encode(), keys[-1].encode()
    meta = None
    if base:
        info[hfile.BLOOM_TYPE_KEY] = hfile.BLOOM_TYPE
        meta = {hfile.BLOOM_META_BLOCK: hfile.bloom_filter(keys)}
    return hfile.write(cells, meta=meta, file_info=info, created_ms=created_ms)


def encode_log_block(records: Iterable[StatsRecord], schema: Mapping[str, Any], instant_time: str) -> bytes:
    """A log block (``HoodieHFileDataBlock``) holding ``records`` for a deltacommit at
    ``instant_time``; its SCHEMA header is ``schema``."""
    text = json.dumps(schema, separators=(",", ":"))
    return encode_block(BlockType.HFILE_DATA, {HeaderKey.INSTANT_TIME: instant_time, HeaderKey.SCHEMA: text},
                        encode_hfile(records, schema))


# -- decoding ---------------------------------------------------------------------------------
def decode_stats(rec: Mapping[str, Any], source: str = "record") -> ColumnStats:
    """A decoded ``HoodieMetadataColumnStats`` (fastavro's dict, read with
    ``return_record_name=True``) as :class:`ColumnStats`."""
    try:
        vti = rec.get("valueType")
        vt = dec = None
        if vti is not None:
            vt = ValueType(int(vti["typeOrdinal"]))
            if vt is ValueType.V1:
                vt = None  # "V1 should never be persisted" (ValueMetadata.V1EmptyMetadata)
            elif vt is ValueType.DECIMAL:
                info = vti.get("additionalInfo")
                if not info:
                    raise StatsFormatError(f"{source}: a DECIMAL value type without its precision and scale")
                p, _, sc = str(info).partition(",")
                dec = (int(p), int(sc))
        values, wrapper = [], None
        for name in ("minValue", "maxValue"):
            w = rec.get(name)
            if w is None:
                values.append(None)
                continue
            if not (isinstance(w, tuple) and len(w) == 2):
                raise StatsFormatError(f"{source}: {name} is no wrapper record")
            wrapper = _short(w[0])
            inner = w[1].get("wrappedValues") if wrapper == "ArrayWrapper" else w[1].get("value")
            values.append(_from_v2(inner, vt, dec) if vt is not None else _from_v1(inner, wrapper))
        return ColumnStats(
            file_name=rec.get("fileName") or "", column=rec.get("columnName") or "", min=values[0], max=values[1],
            null_count=rec.get("nullCount"), value_count=rec.get("valueCount"), total_size=rec.get("totalSize"),
            total_uncompressed_size=rec.get("totalUncompressedSize"), is_deleted=bool(rec.get("isDeleted")),
            is_tight_bound=bool(rec.get("isTightBound")), wrapper=wrapper, value_type=vt, decimal=dec)
    except StatsFormatError:
        raise
    except (ValueError, TypeError, KeyError, OverflowError, decimal.InvalidOperation) as e:
        raise StatsFormatError(f"{source}: column stats do not decode ({type(e).__name__}: {e})") from e


def decode_cells(cells: Iterable[tuple[bytes, bytes]], schema_json: bytes | str, *,
                 source: str = "HFile") -> list[StatsRecord]:
    """The column-stats and partition-stats records among HFile ``cells``, whose values are in
    ``schema_json`` (the HFile's ``schema`` file info, or a log block's SCHEMA header). Cells of
    other record types are skipped; an empty value (a deleted key) too."""
    try:
        schema = fastavro.parse_schema(json.loads(schema_json))
        avro.check_schema(schema)
    except (ValueError, TypeError, KeyError, avro.Unsafe) as e:
        raise StatsFormatError(f"{source}: metadata HFile without a readable Avro schema ({e})") from e
    wanted = set(RECORD_TYPE.values())
    out = []
    for k, v in cells:
        if not v:
            continue
        key = k.decode("utf-8", "replace")
        try:
            rec = fastavro.schemaless_reader(io.BytesIO(v), schema, return_record_name=True,
                                             return_record_name_override=True)
        except Exception as e:  # noqa: BLE001 -- fastavro raises many types for bytes that do not fit the schema
            raise StatsFormatError(f"{source}: metadata record {key!r} does not decode ({e})") from e
        if not isinstance(rec, dict) or rec.get("type") not in wanted:
            continue
        stats = rec.get("ColumnStatsMetadata")
        if stats is None:
            raise StatsFormatError(f"{source}: record {key!r} of type {rec.get('type')} has no ColumnStatsMetadata")
        out.append(StatsRecord(key, int(rec["type"]), decode_stats(stats, f"{source}: record {key!r}")))
    return out


def decode_hfile(data: bytes, *, source: str = "HFile") -> list[StatsRecord]:
    """The records of a base HFile (or of a log block's HFile) of either partition."""
    h = hfile.read(data, source=source)
    schema = h.file_info.get(b"schema")
    if schema is None:
        raise StatsFormatError(f"{source}: metadata HFile without a schema in its file info")
    return decode_cells(h.cells, schema, source=source)


def decode_log_file(data: bytes, *, source: str = "log file") -> list[tuple[str | None, list[StatsRecord]]]:
    """(instant time, records) of each HFile data block of a log file, in file order; other
    blocks (the empty delete block that opens a file group, a rollback command) hold none."""
    out = []
    for b in read_log_blocks(data, source=source):
        if b.content is None or b.block_type != BlockType.HFILE_DATA:
            continue
        h = hfile.read(b.content, source=f"{source} (block at {b.offset})")
        schema = h.file_info.get(b"schema") or b.header.get(HeaderKey.SCHEMA.name)
        if schema is None:
            raise StatsFormatError(f"{source}: HFile block at {b.offset} has no schema")
        out.append((b.instant_time, decode_cells(h.cells, schema, source=f"{source} (block at {b.offset})")))
    return out


# -- merging ----------------------------------------------------------------------------------
def _order_key(v: Any) -> Any:
    """Java's ``compareTo`` order of a value: ``String`` by UTF-16 code units, ``ByteBuffer`` by
    signed bytes; the rest as Python orders them."""
    if isinstance(v, str):
        return v.encode("utf-16-be", "surrogatepass")
    if isinstance(v, (bytes, bytearray)):
        return bytes(b ^ 0x80 for b in v)
    return v


def _min(a: Any, b: Any) -> Any:
    if a is None or b is None:
        return b if a is None else a
    return b if _order_key(b) < _order_key(a) else a


def _max(a: Any, b: Any) -> Any:
    if a is None or b is None:
        return b if a is None else a
    return b if _order_key(b) > _order_key(a) else a


def _add(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a + b


def merge_ranges(left: ColumnStats, right: ColumnStats) -> ColumnStats:
    """``HoodieColumnRangeMetadata.merge``: min of mins, max of maxes, counts and sizes summed;
    ``left`` names the result."""
    if left.column != right.column:
        raise ValueError(f"cannot merge stats of columns {left.column!r} and {right.column!r}")
    return replace(left, min=_min(left.min, right.min), max=_max(left.max, right.max),
                   null_count=_add(left.null_count, right.null_count),
                   value_count=_add(left.value_count, right.value_count),
                   total_size=_add(left.total_size, right.total_size),
                   total_uncompressed_size=_add(left.total_uncompressed_size, right.total_uncompressed_size),
                   wrapper=left.wrapper or right.wrapper)


def merge_records(older: ColumnStats, newer: ColumnStats) -> ColumnStats:
    """Two versions of one key, as a reader of the metadata table combines them
    (``mergeColumnStatsRecords``)."""
    if newer.is_deleted or older.is_deleted or newer.is_tight_bound:
        return newer
    merged = merge_ranges(older, newer)
    return replace(merged, file_name=newer.file_name, is_deleted=False, is_tight_bound=newer.is_tight_bound)


def partition_stats(partition: str, files: Iterable[ColumnStats], *, tight: bool = True) -> list[ColumnStats]:
    """The partition-stats values of ``partition`` from the column stats of its files (one
    per column; ``getColumnRangeInPartition``); ``tight`` when ``files`` are all the files of
    the partition's latest slices (Hudi's case when the column_stats partition exists)."""
    by_column: dict[str, list[ColumnStats]] = {}
    for s in files:
        if not s.is_deleted:
            by_column.setdefault(s.column, []).append(s)
    return [replace(_merged(group), file_name=partition, is_tight_bound=tight) for group in by_column.values()]


def _merged(group: list[ColumnStats]) -> ColumnStats:
    """:func:`merge_ranges` over a whole group at once (one pass, one record built)."""
    first = group[0]
    if len(group) == 1:
        return first
    lows = [s.min for s in group if s.min is not None]
    highs = [s.max for s in group if s.max is not None]

    def total(field: str) -> int | None:
        values = [getattr(s, field) for s in group]
        return None if any(v is None for v in values) else sum(values)

    return replace(first, min=min(lows, key=_order_key) if lows else None,
                   max=max(highs, key=_order_key) if highs else None,
                   null_count=total("null_count"), value_count=total("value_count"), total_size=total("total_size"),
                   total_uncompressed_size=total("total_uncompressed_size"),
                   wrapper=next((s.wrapper for s in group if s.wrapper), None))


def latest(records: Iterable[StatsRecord]) -> dict[str, ColumnStats]:
    """Each key's value once ``records`` (oldest first: a slice's base, then its log blocks in
    order) are merged (:func:`merge_records`)."""
    out: dict[str, ColumnStats] = {}
    for r in records:
        out[r.key] = merge_records(out[r.key], r.stats) if r.key in out else r.stats
    return out


# -- Parquet footers --------------------------------------------------------------------------
def _logical(col: Any) -> dict[str, Any]:
    lt = col.logical_type
    if lt is None or lt.type == "None":
        return {}
    try:
        out = json.loads(lt.to_json())
    except (ValueError, AttributeError):
        out = {"Type": lt.type}
    return {} if out.get("Type") in (None, "None") else out


def _value_type(col: Any) -> tuple[ValueType, tuple[int, int] | None]:
    """``ValueType.fromParquetPrimitiveType`` of a Parquet leaf column (pyarrow's ``ColumnSchema``)."""
    lt = _logical(col)
    kind = lt.get("Type")
    if kind:
        if kind == "String":
            return ValueType.STRING, None
        if kind == "Decimal":
            return ValueType.DECIMAL, (int(col.precision), int(col.scale))
        if kind == "Date":
            return ValueType.DATE, None
        if kind == "UUID":
            return ValueType.UUID, None
        unit = str(lt.get("timeUnit", ""))
        if kind == "Time" and unit in ("milliseconds", "microseconds"):
            return (ValueType.TIME_MILLIS if unit == "milliseconds" else ValueType.TIME_MICROS), None
        if kind == "Timestamp" and unit in ("milliseconds", "microseconds", "nanoseconds"):
            utc = bool(lt.get("isAdjustedToUTC"))
            table = {"milliseconds": (ValueType.TIMESTAMP_MILLIS, ValueType.LOCAL_TIMESTAMP_MILLIS),
                     "microseconds": (ValueType.TIMESTAMP_MICROS, ValueType.LOCAL_TIMESTAMP_MICROS),
                     "nanoseconds": (ValueType.TIMESTAMP_NANOS, ValueType.LOCAL_TIMESTAMP_NANOS)}[unit]
            return table[0 if utc else 1], None
        raise StatsFormatError(f"column {col.path!r}: Parquet annotation {kind} has no column-stats value type "
                               "(LogicalTypeParquetAdapter refuses it)")
    physical = {"INT64": ValueType.LONG, "INT32": ValueType.INT, "BOOLEAN": ValueType.BOOLEAN,
                "BYTE_ARRAY": ValueType.BYTES, "FLOAT": ValueType.FLOAT, "DOUBLE": ValueType.DOUBLE,
                "FIXED_LEN_BYTE_ARRAY": ValueType.FIXED}.get(col.physical_type)
    if physical is None:
        raise StatsFormatError(f"column {col.path!r}: Parquet type {col.physical_type} has no column-stats value type")
    return physical, None


def _v2_value(raw: Any, vt: ValueType, dec: tuple[int, int] | None) -> Any:
    """A footer's raw statistic as Hudi holds it in memory (``ValueType``'s ``castTo...``)."""
    if raw is None:
        return None
    if vt is ValueType.STRING:
        return raw.decode("utf-8") if isinstance(raw, (bytes, bytearray)) else str(raw)
    if vt is ValueType.DECIMAL:
        unscaled = int.from_bytes(raw, "big", signed=True) if isinstance(raw, (bytes, bytearray)) else int(raw)
        return _decimal_of(unscaled, dec[1] if dec else 0)
    if vt is ValueType.UUID:
        return uuid.UUID(bytes=bytes(raw))
    if vt in (ValueType.BYTES, ValueType.FIXED):
        return bytes(raw)
    return _from_v2(raw, vt, dec)


def _v1_value(raw: Any, col: Any) -> tuple[Any, str]:
    """``ParquetUtils.convertToNativeJavaType`` and the wrapper ``wrapValueIntoAvro`` picks."""
    kind = _logical(col).get("Type")
    if kind == "Decimal":
        unscaled = int.from_bytes(raw, "big", signed=True) if isinstance(raw, (bytes, bytearray)) else int(raw)
        return _decimal_of(unscaled, int(col.scale)), "DecimalWrapper"
    if kind == "Date":
        return _EPOCH_DATE + _dt.timedelta(days=int(raw)), "DateWrapper"
    if kind == "String":
        return bytes(raw).decode("utf-8"), "StringWrapper"
    wrapper = {"BYTE_ARRAY": "BytesWrapper", "INT32": "IntWrapper", "INT64": "LongWrapper",
               "BOOLEAN": "BooleanWrapper", "FLOAT": "FloatWrapper", "DOUBLE": "DoubleWrapper"}.get(col.physical_type)
    if wrapper is None:
        raise StatsFormatError(f"column {col.path!r}: Parquet type {col.physical_type} has no V1 column-stats wrapper")
    return (bytes(raw) if wrapper == "BytesWrapper" else raw), wrapper


def parquet_stats(metadata: Any, file_name: str, columns: Sequence[str] | None = None, *,
                  version: int = 2) -> list[ColumnStats]:
    """The column stats Hudi writes for a Parquet base file, from its footer (pyarrow's
    ``FileMetaData``): one per leaf column named in ``columns`` (dotted paths; all when None)
    that the file has, in the file's column order (``ParquetUtils.readColumnStatsFromMetadata``).
    ``version``: the index version (:func:`index_version`)."""
    wanted = None if columns is None else set(columns)
    schema = metadata.schema
    out: dict[str, ColumnStats] = {}
    for i in range(metadata.num_columns):
        col = schema.column(i)
        if wanted is not None and col.path not in wanted:
            continue
        vt, dec = _value_type(col) if version >= 2 else (None, None)
        wrapper = _PRIMITIVE_WRAPPER.get(vt) if vt is not None else None
        for g in range(metadata.num_row_groups):
            chunk = metadata.row_group(g).column(i)
            st = chunk.statistics
            lo = hi = None
            if st is not None and st.has_min_max:
                if vt is not None:
                    lo, hi = _v2_value(st.min_raw, vt, dec), _v2_value(st.max_raw, vt, dec)
                else:
                    (lo, wrapper), (hi, _) = _v1_value(st.min_raw, col), _v1_value(st.max_raw, col)
            # "In case when column contains only nulls Parquet won't be creating stats": nulls are
            # the value count then
            empty = st is None or (not st.has_min_max and not st.has_null_count)
            nulls = chunk.num_values if empty else (st.null_count if st.has_null_count else -1)
            s = ColumnStats(file_name, col.path, lo, hi, nulls, chunk.num_values, chunk.total_compressed_size,
                            chunk.total_uncompressed_size, wrapper=wrapper, value_type=vt, decimal=dec)
            out[col.path] = merge_ranges(out[col.path], s) if col.path in out else s
    return list(out.values())


def _supported(avro_type: Any) -> bool:
    """``isColumnTypeSupported`` (Avro records): no record, array, map or enum; a decimal within
    decimal(30,15)."""
    t = avro_type
    if isinstance(t, list):
        branches = [b for b in t if b != "null"]
        t = branches[0] if len(branches) == 1 else {"type": "union"}
    if isinstance(t, dict):
        if t.get("logicalType") == "decimal":
            p, s = int(t.get("precision", 0)), int(t.get("scale", 0))
            if p + (DECIMAL_SCALE - s) > DECIMAL_PRECISION or s > DECIMAL_SCALE:
                return False
        kind = t.get("type")
    else:
        kind = t
    return kind not in ("record", "array", "map", "enum", "union")


def columns_to_index(schema: Mapping[str, Any], *, column_list: Sequence[str] | None = None,
                     max_columns: int = MAX_COLUMNS, meta_fields: bool = True) -> list[str]:
    """The columns Hudi indexes for a table of Avro record ``schema`` (``getColumnsToIndex``):
    the meta columns first (when the table populates them), then ``column_list``
    (``hoodie.metadata.index.column.stats.column.list``) or else the first ``max_columns``
    supported data fields."""
    fields = [f for f in schema.get("fields", []) if f["name"] not in META_COLUMNS]
    if column_list:
        types = {f["name"]: f["type"] for f in fields}
        chosen = [c for c in column_list if c not in ALWAYS_INDEXED and (c not in types or _supported(types[c]))]
    else:
        chosen = [f["name"] for f in fields if _supported(f["type"])][:max_columns]
    return ([*ALWAYS_INDEXED] if meta_fields else []) + chosen
