"""Hudi log files of Merge-on-Read tables (table version 8): their names and the bytes of their blocks.

A deltacommit writes updates and deletes of a file group into a log file beside the group's base
file instead of rewriting it; readers merge the two. A log file is a sequence of blocks, each
framed so that a reader can skip it or, after a torn write, find the next one:

```
#HUDI#                      magic
long    block size          bytes after this field, up to and including the trailing long
int     log format version  1
int     block type          0 command, 1 delete, 2 corrupt, 3 Avro data, 4 HFile, 5 Parquet, 6 CDC
int     header entries      then per entry: int key ordinal, int length, UTF-8 value
long    content length      then the content
int     footer entries      (Hudi writes none)
long    block length        bytes from the magic up to this field: lets a reader walk backwards
```

All integers are big-endian. Data and delete block contents start with their own version (3):
a data block then holds an int record count and per record an int length and the Avro binary
encoding of the record under the SCHEMA header; a delete block holds an int length and the Avro
binary encoding of a ``HoodieDeleteRecordList``. Both formats are written by Java Hudi and read by
hudi-rs; the fixtures under ``shared/fixtures/hudi-spark-written/mor_v8_*`` show them byte for byte.
"""
from __future__ import annotations

import decimal
import io
import json
import re
import struct
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from functools import lru_cache
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import InvalidRecordError, SchemaMismatchError, TableFormatError
from . import avro, bounds
from .schema import META_COLUMNS, avro_to_arrow, inline_named_types

MAGIC = b"#HUDI#"
#: the log format version after the magic; every Hudi release since 0.5 writes 1
LOG_FORMAT_VERSION = 1
#: the content version of data and delete blocks (Avro records, Avro delete list)
BLOCK_CONTENT_VERSION = 3
#: ``HoodieCommandBlock.HoodieCommandBlockTypeEnum.ROLLBACK_BLOCK``, as the COMMAND_BLOCK_TYPE value
ROLLBACK_COMMAND = "0"


class BlockType(IntEnum):
    """``HoodieLogBlock.HoodieLogBlockType``; the on-disk code is the ordinal."""

    COMMAND = 0
    DELETE = 1
    CORRUPT = 2
    AVRO_DATA = 3
    HFILE_DATA = 4
    PARQUET_DATA = 5
    CDC_DATA = 6


class HeaderKey(IntEnum):
    """``HoodieLogBlock.HeaderMetadataType``; the on-disk key is the ordinal."""

    INSTANT_TIME = 0
    TARGET_INSTANT_TIME = 1
    SCHEMA = 2
    COMMAND_BLOCK_TYPE = 3
    COMPACTED_BLOCK_TIMES = 4
    RECORD_POSITIONS = 5
    BLOCK_IDENTIFIER = 6
    IS_PARTIAL = 7
    BASE_FILE_INSTANT_TIME_OF_RECORD_POSITIONS = 8


# -- names ------------------------------------------------------------------------

_LOG_NAME = re.compile(
    r"\.(?P<file_id>[^_/]+)_(?P<instant>\d{17}|\d{14})\.log\.(?P<version>[1-9]\d*)_(?P<token>\d+-\d+-\d+)"
)
_INSTANT = re.compile(r"\d{17}|\d{14}")  # 14: Hudi's reserved times (a bootstrap's)
_TOKEN = re.compile(r"\d+-\d+-\d+")


@dataclass(frozen=True)
class LogFileName:
    """The parts of ``.<fileId>_<instantTime>.log.<version>_<writeToken>``.

    In table version 8 the instant time is the requested time of the deltacommit that wrote the
    file (not the base file's instant as in version 6), and every deltacommit starts new log
    files at version 1; a higher version only appears when a retried task writes the same file again.
    """

    file_id: str
    instant_time: str
    version: int
    write_token: str

    def __post_init__(self) -> None:
        if not self.file_id or "_" in self.file_id or "/" in self.file_id:
            raise ValueError(f"file id {self.file_id!r} must be non-empty and hold no '_' or '/'")
        if not _INSTANT.fullmatch(self.instant_time):
            raise ValueError(f"instant time {self.instant_time!r} is not 17 (or 14) digits")
        if isinstance(self.version, bool) or not isinstance(self.version, int) or self.version < 1:
            raise ValueError(f"log version {self.version!r} must be an int >= 1")
        if not _TOKEN.fullmatch(self.write_token):
            raise ValueError(f"write token {self.write_token!r} is not <task>-<stage>-<attempt>")

    @property
    def name(self) -> str:
        return f".{self.file_id}_{self.instant_time}.log.{self.version}_{self.write_token}"


@lru_cache(maxsize=1 << 16)
def parse_log_file(name: str) -> LogFileName | None:
    """The parts of a log file name, or None for any other name (base files, ``.cdc`` logs,
    markers, resource forks): listing code calls this on every file of a partition, so the
    answer is remembered."""
    m = _LOG_NAME.fullmatch(name)
    if m is None:
        return None
    return LogFileName(m["file_id"], m["instant"], int(m["version"]), m["token"])


# -- block framing ----------------------------------------------------------------

_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")
#: version, type, header count, content length, footer count, trailing length
_MIN_BLOCK_SIZE = 4 + 4 + 4 + 8 + 4 + 8


def _metadata_bytes(entries: Mapping[HeaderKey, str]) -> bytes:
    parts = [_INT.pack(len(entries))]
    for key in sorted(entries):
        value = entries[key].encode()
        parts += [_INT.pack(int(key)), _INT.pack(len(value)), value]
    return b"".join(parts)


def encode_block(block_type: BlockType, header: Mapping[HeaderKey, str], content: bytes) -> bytes:
    """One framed block. Header entries are written in ordinal order (Java writes a hash map's
    order; readers look entries up by key), and the footer is empty, as Hudi writes it."""
    body = b"".join([
        _INT.pack(LOG_FORMAT_VERSION),
        _INT.pack(int(block_type)),
        _metadata_bytes(header),
        _LONG.pack(len(content)),
        content,
        _metadata_bytes({}),
    ])
    block_size = len(body) + _LONG.size  # the trailing length counts itself
    total = len(MAGIC) + _LONG.size + len(body)  # the block up to its trailing length
    return b"".join([MAGIC, _LONG.pack(block_size), body, _LONG.pack(total)])


# -- Avro schemas -----------------------------------------------------------------

_NS = "org.apache.hudi.avro.model"


def _meta_field(name: str) -> dict[str, Any]:
    return {"name": name, "type": ["null", "string"], "doc": "", "default": None}


def writer_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The schema of log records: Hudi's five meta fields, then the data fields of ``schema``
    (a table's Avro record schema, with or without the meta fields)."""
    fields = [f for f in schema.get("fields", []) if f.get("name") not in META_COLUMNS]
    out = {k: v for k, v in schema.items() if k != "fields"}
    out["fields"] = [_meta_field(c) for c in META_COLUMNS] + fields
    return out


def _wrapper(name: str, value_type: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "namespace": _NS, "fields": [{"name": "value", "type": value_type}]}


#: the decimal wrapper's fixed precision and scale: decimal ordering values are rescaled to it
_DECIMAL_PRECISION = 30
_DECIMAL_SCALE = 15

#: ``orderingVal``'s branches in the order of Hudi's ``HoodieDeleteRecord`` schema (table version 8):
#: the branch index is what goes on disk, so this order is the format
_ORDERING_WRAPPERS: list[tuple[str, Any]] = [
    ("BooleanWrapper", "boolean"),
    ("IntWrapper", "int"),
    ("LongWrapper", "long"),
    ("FloatWrapper", "float"),
    ("DoubleWrapper", "double"),
    ("BytesWrapper", "bytes"),
    ("StringWrapper", "string"),
    ("DateWrapper", "int"),
    ("DecimalWrapper", {"type": "bytes", "logicalType": "decimal", "precision": _DECIMAL_PRECISION, "scale": _DECIMAL_SCALE}),
    ("TimeMicrosWrapper", {"type": "long", "logicalType": "time-micros"}),
    ("TimestampMicrosWrapper", "long"),
]

#: ``ArrayWrapper``, the branch after them (Hudi 1.1, ``HoodieAvroUtils.wrapValueIntoAvro`` of an
#: ``ArrayComparable``: a table with several ordering fields): its ``wrappedValues`` hold one
#: wrapped value per ordering field, in field order, each null or one of the wrappers above
_ARRAY_WRAPPER = "ArrayWrapper"
_ARRAY_WRAPPER_SCHEMA: dict[str, Any] = {
    "type": "record", "name": _ARRAY_WRAPPER, "namespace": _NS,
    "fields": [{"name": "wrappedValues", "type": {
        "type": "array", "items": ["null"] + [f"{_NS}.{n}" for n, _ in _ORDERING_WRAPPERS]}}],
}

DELETE_RECORD_LIST_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "HoodieDeleteRecordList",
    "namespace": _NS,
    "fields": [{
        "name": "deleteRecordList",
        "type": {"type": "array", "items": {
            "type": "record",
            "name": "HoodieDeleteRecord",
            "namespace": _NS,
            "fields": [
                {"name": "recordKey", "type": ["null", "string"], "default": None},
                {"name": "partitionPath", "type": ["null", "string"], "default": None},
                {"name": "orderingVal",
                 "type": ["null"] + [_wrapper(n, t) for n, t in _ORDERING_WRAPPERS] + [_ARRAY_WRAPPER_SCHEMA],
                 "default": None},
            ],
        }},
    }],
}
_DELETE_LIST_PARSED = fastavro.parse_schema(DELETE_RECORD_LIST_SCHEMA)

#: the Arrow type of a decoded ordering value per wrapper
_WRAPPER_ARROW: dict[str, pa.DataType] = {
    "BooleanWrapper": pa.bool_(),
    "IntWrapper": pa.int32(),
    "LongWrapper": pa.int64(),
    "FloatWrapper": pa.float32(),
    "DoubleWrapper": pa.float64(),
    "BytesWrapper": pa.binary(),
    "StringWrapper": pa.string(),
    "DateWrapper": pa.date32(),
    "DecimalWrapper": pa.decimal128(_DECIMAL_PRECISION, _DECIMAL_SCALE),
    "TimeMicrosWrapper": pa.time64("us"),
    "TimestampMicrosWrapper": pa.timestamp("us", tz="UTC"),
}

DELETE_COLUMNS = ("record_key", "partition_path", "ordering_value")
#: a delete block's column of ``ArrayWrapper`` ordering values: a struct of one child per
#: ordering field, in field order (children ``"0"``, ``"1"``, ...); null where the delete
#: carries a single value (in ``ordering_value``) or none
DELETE_ORDERING_VALUES = "ordering_values"


# -- Arrow columns <-> Avro values --------------------------------------------------

_TIME_UNITS = {
    "timestamp-millis": "ms", "local-timestamp-millis": "ms",
    "timestamp-micros": "us", "local-timestamp-micros": "us",
}
_TIME_OF_DAY = {"time-millis": ("ms", pa.time32("ms"), pa.int32()), "time-micros": ("us", pa.time64("us"), pa.int64())}


def _non_null(avro_type: Any) -> Any:
    """The value branch of a ``["null", T]`` union (``T`` itself for a plain type)."""
    if isinstance(avro_type, list):
        branches = [b for b in avro_type if b != "null"]
        return branches[0] if len(branches) == 1 else avro_type
    return avro_type


def _logical(avro_type: Any) -> str | None:
    t = _non_null(avro_type)
    return t.get("logicalType") if isinstance(t, dict) else None


def _column_values(col: pa.ChunkedArray, avro_type: Any, name: str) -> list[Any]:
    """Python values of one column as the Avro encoder takes them. Time-like logical types go as
    integers of the schema's unit (sub-unit precision is truncated: Avro has no finer unit)."""
    logical = _logical(avro_type)
    try:
        if logical in _TIME_UNITS and pa.types.is_timestamp(col.type):
            unit = _TIME_UNITS[logical]
            col = pc.cast(col, pa.timestamp(unit, tz=col.type.tz), safe=False)
            return pc.cast(col, pa.int64()).to_pylist()
        if logical == "date" and pa.types.is_date(col.type):
            return pc.cast(pc.cast(col, pa.date32()), pa.int32()).to_pylist()
        if logical in _TIME_OF_DAY and pa.types.is_time(col.type):
            unit, time_type, int_type = _TIME_OF_DAY[logical]
            return pc.cast(pc.cast(col, time_type, safe=False), int_type).to_pylist()
    except pa.ArrowInvalid as e:
        raise SchemaMismatchError(f"column {name!r}: {col.type} does not convert to Avro {logical} ({e})") from e
    return col.to_pylist()


def _records(table: pa.Table, schema: Mapping[str, Any]) -> list[dict[str, Any]]:
    fields = schema["fields"]
    missing = [f["name"] for f in fields if f["name"] not in table.column_names]
    if missing:
        raise SchemaMismatchError(f"log records lack columns {missing} of their Avro schema "
                                  "(with_log_meta_columns adds the meta columns)")
    names = [f["name"] for f in fields]
    columns = [_column_values(table.column(f["name"]), f["type"], f["name"]) for f in fields]
    return [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)]


def _encoder(parsed: Any) -> Callable[[Any], bytes]:
    """Avro binary encoding of one value: the compiled encoder when the schema allows it
    (records of strings, ints, longs and booleans), fastavro otherwise."""
    compiled = avro.compile_schema(parsed)
    buf = io.BytesIO()

    def with_fastavro(value: Any) -> bytes:
        buf.seek(0)
        buf.truncate()
        fastavro.schemaless_writer(buf, parsed, value)
        return buf.getvalue()

    if compiled is None:
        return with_fastavro

    def with_compiled(value: Any) -> bytes:
        parts: list[bytes] = []
        try:
            compiled(value, parts)
        except (avro.Unsupported, TypeError, AttributeError):
            return with_fastavro(value)  # fastavro encodes it or says why not
        return b"".join(parts)
    return with_compiled


def avro_block_content(records: pa.Table, schema: Mapping[str, Any]) -> bytes:
    """The content of an Avro-encoded block (content version, record count, per record its
    length and Avro binary body) of ``records`` under the full record ``schema``: the layout
    ``HoodieAvroDataBlock`` and its subclass ``HoodieCDCDataBlock`` share."""
    try:
        parsed = fastavro.parse_schema(dict(schema), named_schemas={})
    except (fastavro.schema.SchemaParseException, ValueError, TypeError, KeyError) as e:
        raise SchemaMismatchError(f"not a usable Avro schema for log records ({e})") from e
    return _encode_records(_records(records, schema), parsed)


def _encode_records(records: list[dict[str, Any]], parsed: Any) -> bytes:
    encode = _encoder(parsed)
    parts = [_INT.pack(BLOCK_CONTENT_VERSION), _INT.pack(len(records))]
    for i, record in enumerate(records):
        try:
            body = encode(record)
        except (ValueError, TypeError, OverflowError) as e:
            raise InvalidRecordError(
                f"log record {i} (key {record.get('_hoodie_record_key')!r}) does not fit its Avro schema: {e}"
            ) from e
        parts += [_INT.pack(len(body)), body]
    return b"".join(parts)


# -- encoding -----------------------------------------------------------------------


def encode_data_block(records: pa.Table, schema: Mapping[str, Any], *, instant_time: str, partial: bool = False) -> bytes:
    """An Avro data block (``HoodieAvroDataBlock``) of ``records`` written by ``instant_time``.

    ``records`` holds the five meta columns (see :func:`with_log_meta_columns`) and the data
    columns; ``schema`` is the Avro record schema of the data columns (meta fields optional), e.g.
    from :func:`multiwriter.format.schema.arrow_to_avro`. The header carries INSTANT_TIME and the
    writer schema as SCHEMA, which is what readers decode the records with; ``partial``: the
    records are partial updates (:func:`_data_header`).
    """
    _check_instant(instant_time)
    full = writer_schema(schema)
    try:
        parsed = fastavro.parse_schema(full, named_schemas={})
    except (fastavro.schema.SchemaParseException, ValueError, TypeError, KeyError) as e:
        raise SchemaMismatchError(f"not a usable Avro schema for log records ({e})") from e
    content = _encode_records(_records(records, full), parsed)
    return encode_block(BlockType.AVRO_DATA, _data_header(instant_time, full, partial), content)


def _data_header(instant_time: str, full: Mapping[str, Any], partial: bool) -> dict[HeaderKey, str]:
    """A data block's header. ``partial``: its records carry only the columns of its schema and
    each omitted column keeps an earlier version's value (Hudi's ``IS_PARTIAL`` header, "true",
    as Hudi's partial-update writers mark such blocks); without it a column the schema lacks
    reads as null."""
    header = {HeaderKey.INSTANT_TIME: instant_time, HeaderKey.SCHEMA: _schema_json(full)}
    if partial:
        header[HeaderKey.IS_PARTIAL] = "true"
    return header


def encode_delete_block(
    deletes: pa.Table, *, instant_time: str, schema: Mapping[str, Any] | None = None
) -> bytes:
    """A delete block (``HoodieDeleteBlock``, content version 3) of the keys in ``deletes``.

    ``deletes`` has ``record_key`` and ``partition_path`` columns and optionally
    ``ordering_value``, whose Arrow type picks Hudi's wrapper (int64 -> ``LongWrapper``, string ->
    ``StringWrapper``, date -> ``IntWrapper`` of its days, timestamp -> ``LongWrapper`` of its
    Avro long, as Hudi 1.1 writes them, ...). Without it every delete carries ``IntWrapper(0)``, as Hudi's
    ``DeleteRecord.create(key)`` does: readers treat such a delete as newer than any record
    (natural order). With event-time ordering, a delete carrying a real ordering value only
    removes records whose ordering value is not greater. A null ordering value is written as
    the null branch. Hudi also puts the table schema in a delete block's header: pass it as ``schema``.
    """
    _check_instant(instant_time)
    content = _delete_content(deletes)
    header = {HeaderKey.INSTANT_TIME: instant_time}
    if schema is not None:
        header[HeaderKey.SCHEMA] = _schema_json(writer_schema(schema))
    return encode_block(BlockType.DELETE, header, content)


def encode_rollback_block(*, instant_time: str, target_instant_time: str) -> bytes:
    """A rollback command block: readers drop the blocks of ``target_instant_time`` that precede
    it in the file group. Written by ``instant_time``, the rollback's own instant."""
    _check_instant(instant_time)
    _check_instant(target_instant_time)
    header = {
        HeaderKey.INSTANT_TIME: instant_time,
        HeaderKey.TARGET_INSTANT_TIME: target_instant_time,
        HeaderKey.COMMAND_BLOCK_TYPE: ROLLBACK_COMMAND,
    }
    return encode_block(BlockType.COMMAND, header, b"")


def encode_parquet_data_block(records: pa.Table, schema: Mapping[str, Any], *, instant_time: str,
                              partial: bool = False) -> bytes:
    """A Parquet data block (``HoodieParquetDataBlock``, Hudi's ``hoodie.logfile.data.block.format
    =parquet``): the records as one Parquet file, headers as for an Avro block. Encoded and
    decoded by Arrow, column at a time, where an Avro block costs a Python call per record."""
    _check_instant(instant_time)
    buf = pa.BufferOutputStream()
    pq.write_table(records, buf, compression="snappy")
    header = _data_header(instant_time, writer_schema(schema), partial)
    return encode_block(BlockType.PARQUET_DATA, header, buf.getvalue().to_pybytes())


#: the data block formats a log file can be written in
DATA_BLOCK_FORMATS = ("parquet", "avro")


def encode_log_file(
    *,
    instant_time: str,
    schema: Mapping[str, Any],
    records: pa.Table | None = None,
    deletes: pa.Table | None = None,
    data_format: str = "parquet",
    partial: bool = False,
) -> bytes:
    """The bytes of one deltacommit's log file of one file group: a data block of ``records``
    (updates and inserts; ``data_format`` parquet or avro, both of which Hudi's readers and
    hudi-rs read; ``partial``: partial updates, marked ``IS_PARTIAL``), then a delete block of
    ``deletes``, as Hudi's append handle writes them.
    Empty or absent parts are left out; a file with neither is an error, since an empty log
    file would only make readers open it for nothing."""
    if data_format not in DATA_BLOCK_FORMATS:
        raise ValueError(f"data block format {data_format!r} is not one of {DATA_BLOCK_FORMATS}")
    blocks = []
    if records is not None and records.num_rows:
        encode = encode_parquet_data_block if data_format == "parquet" else encode_data_block
        blocks.append(encode(records, schema, instant_time=instant_time, partial=partial))
    if deletes is not None and deletes.num_rows:
        blocks.append(encode_delete_block(deletes, instant_time=instant_time, schema=schema))
    if not blocks:
        raise InvalidRecordError(f"log file of instant {instant_time}: no records and no deletes to write")
    return b"".join(blocks)


def with_log_meta_columns(
    data: pa.Table,
    *,
    record_keys: pa.Array | pa.ChunkedArray | Iterable[str],
    partition_path: str,
    file_id: str,
    instant_time: str,
    task_partition: int = 0,
    first_seqno: int = 0,
) -> pa.Table:
    """``data`` with the five meta columns in front, filled as Hudi fills them in log records:
    the commit time is the deltacommit's instant, the seqno ``<instant>_<task>_<n>``, and the
    file name is the file group's id (a log record names its group, not a file)."""
    n = data.num_rows
    keys = pa.array(record_keys, pa.string()) if not isinstance(record_keys, (pa.Array, pa.ChunkedArray)) else record_keys
    if len(keys) != n:
        raise InvalidRecordError(f"{len(keys)} record keys for {n} rows")
    if keys.null_count:
        raise InvalidRecordError("a log record has a null record key")
    meta = {
        "_hoodie_commit_time": pa.array([instant_time] * n, pa.string()),
        "_hoodie_commit_seqno": pa.array([f"{instant_time}_{task_partition}_{first_seqno + i}" for i in range(n)],
                                         pa.string()),
        "_hoodie_record_key": pc.cast(keys, pa.string()),
        "_hoodie_partition_path": pa.array([partition_path] * n, pa.string()),
        "_hoodie_file_name": pa.array([file_id] * n, pa.string()),
    }
    rest = [c for c in data.column_names if c not in META_COLUMNS]
    return pa.table({**meta, **{c: data.column(c) for c in rest}})


def _check_instant(instant_time: str) -> None:
    if not isinstance(instant_time, str) or not _INSTANT.fullmatch(instant_time):
        raise ValueError(f"instant time {instant_time!r} is not 17 (or 14) digits")


def _schema_json(schema: Mapping[str, Any]) -> str:
    return json.dumps(schema, separators=(",", ":"))


def _delete_content(deletes: pa.Table) -> bytes:
    for c in DELETE_COLUMNS[:2]:
        if c not in deletes.column_names:
            raise SchemaMismatchError(f"deletes lack the {c!r} column (have {deletes.column_names})")
    keys = deletes.column("record_key").to_pylist()
    if any(k is None for k in keys):
        raise InvalidRecordError("a delete has a null record key")
    partitions = deletes.column("partition_path").to_pylist()
    if "ordering_value" in deletes.column_names:
        ordering = [_wrapped(o) for o in _wrap_ordering(deletes.column("ordering_value"))]
    else:
        ordering = [_wrapped(("IntWrapper", 0))] * len(keys)
    if DELETE_ORDERING_VALUES in deletes.column_names:
        ordering = _with_arrays(ordering, deletes.column(DELETE_ORDERING_VALUES))
    items = [
        {"recordKey": k, "partitionPath": p, "orderingVal": o}
        for k, p, o in zip(keys, partitions, ordering, strict=True)
    ]
    buf = io.BytesIO()
    try:
        fastavro.schemaless_writer(buf, _DELETE_LIST_PARSED, {"deleteRecordList": items})
    except (ValueError, TypeError, OverflowError) as e:
        raise InvalidRecordError(f"deletes do not fit Hudi's delete record schema: {e}") from e
    body = buf.getvalue()
    return _INT.pack(BLOCK_CONTENT_VERSION) + _INT.pack(len(body)) + body


def _wrapped(o: tuple[str, Any] | None) -> tuple[str, dict[str, Any]] | None:
    """(wrapper name, value) as the Avro union branch fastavro writes."""
    return None if o is None else (f"{_NS}.{o[0]}", {"value": o[1]})


def _with_arrays(ordering: list[Any], col: pa.ChunkedArray) -> list[Any]:
    """``ordering`` with the rows where ``col`` (a struct, one child per ordering field in
    field order) is set replaced by an ``ArrayWrapper`` of its children, each wrapped by its
    type (a null child as the null branch), as Hudi 1.1 writes an ``ArrayComparable``
    (``HoodieAvroUtils.wrapValueIntoAvro``)."""
    if not pa.types.is_struct(col.type) or col.type.num_fields == 0:
        raise SchemaMismatchError(f"{DELETE_ORDERING_VALUES} must be a struct of one child per ordering field, "
                                  f"not {col.type}")
    arr = col.combine_chunks()
    children = [[_wrapped(o) for o in _wrap_ordering(pa.chunked_array([arr.field(i)]))]
                for i in range(col.type.num_fields)]
    valid = arr.is_valid().to_pylist()
    return [(f"{_NS}.{_ARRAY_WRAPPER}", {"wrappedValues": [c[r] for c in children]}) if valid[r] else o
            for r, o in enumerate(ordering)]


def avro_time_unit(t: pa.DataType) -> str:
    """The unit a timestamp column's Avro long counts in (``timestamp-millis`` for s and ms,
    ``timestamp-micros`` for us and ns, as :mod:`.schema` maps them)."""
    return "ms" if t.unit in ("s", "ms") else "us"


def _wrap_ordering(col: pa.ChunkedArray) -> list[tuple[str, Any] | None]:
    """(wrapper name, Avro value) per ordering value, the wrapper chosen by the column's type."""
    t = col.type
    if pa.types.is_null(t):
        return [None] * len(col)
    wrapper, values = _ordering_wrapper(col)
    return [None if v is None else (wrapper, v) for v in values]


def _ordering_wrapper(col: pa.ChunkedArray) -> tuple[str, list[Any]]:
    t = col.type
    if pa.types.is_boolean(t):
        return "BooleanWrapper", col.to_pylist()
    if pa.types.is_integer(t):
        small = t.bit_width < 32 or (t.bit_width == 32 and pa.types.is_signed_integer(t))
        if t.bit_width == 64 and pa.types.is_unsigned_integer(t):
            raise SchemaMismatchError("ordering values of type uint64 have no Hudi wrapper")
        return ("IntWrapper" if small else "LongWrapper"), col.to_pylist()
    if pa.types.is_float32(t):
        return "FloatWrapper", col.to_pylist()
    if pa.types.is_floating(t):
        return "DoubleWrapper", pc.cast(col, pa.float64()).to_pylist()
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "StringWrapper", col.to_pylist()
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return "BytesWrapper", col.to_pylist()
    # a date or timestamp as the Avro int / long the column is stored as, in the wrappers Hudi
    # 1.1's Spark writers use for them (its JVM merger compares them with the column's values;
    # a DateWrapper or TimestampMicrosWrapper unwraps to a LocalDate / Instant it cannot compare)
    if pa.types.is_date(t):
        return "IntWrapper", pc.cast(pc.cast(col, pa.date32()), pa.int32()).to_pylist()
    if pa.types.is_timestamp(t):
        stored = pc.cast(col, pa.timestamp(avro_time_unit(t), tz=t.tz), safe=False)
        return "LongWrapper", pc.cast(stored, pa.int64()).to_pylist()
    if pa.types.is_time(t):
        return "TimeMicrosWrapper", pc.cast(pc.cast(col, pa.time64("us")), pa.int64()).to_pylist()
    if pa.types.is_decimal(t):
        return "DecimalWrapper", [None if v is None else _rescale(v) for v in col.to_pylist()]
    raise SchemaMismatchError(f"ordering values of type {t} have no Hudi wrapper")


def _rescale(v: decimal.Decimal) -> decimal.Decimal:
    """``v`` at the decimal wrapper's scale; a value it cannot hold exactly is refused, since a
    rounded ordering value could reorder a delete and an update."""
    try:
        q = v.quantize(decimal.Decimal(1).scaleb(-_DECIMAL_SCALE),
                       context=decimal.Context(prec=_DECIMAL_PRECISION, traps=[decimal.Inexact, decimal.InvalidOperation]))
    except (decimal.Inexact, decimal.InvalidOperation) as e:
        raise InvalidRecordError(
            f"ordering value {v} does not fit decimal({_DECIMAL_PRECISION},{_DECIMAL_SCALE})") from e
    return q


# -- decoding -----------------------------------------------------------------------

DATA = "data"
DELETE = "delete"
COMMAND = "command"
CORRUPT = "corrupt"
HFILE = "hfile"
CDC = "cdc"

_KIND = {
    BlockType.COMMAND: COMMAND,
    BlockType.DELETE: DELETE,
    BlockType.CORRUPT: CORRUPT,
    BlockType.AVRO_DATA: DATA,
    BlockType.HFILE_DATA: HFILE,
    BlockType.PARQUET_DATA: DATA,
    BlockType.CDC_DATA: CDC,
}


@dataclass(frozen=True)
class LogBlock:
    """One block of a log file.

    ``kind`` is one of ``data`` (Avro or Parquet records), ``delete``, ``command`` (a rollback),
    ``hfile`` (metadata-table records, not decoded), ``cdc`` or ``corrupt`` (bytes a reader must
    skip: a torn write or garbage up to the next magic). ``records`` holds a data or CDC block's
    records (schema from the SCHEMA header) or a delete block's (``record_key``, ``partition_path``,
    ``ordering_value``); None otherwise. ``offset`` and ``length`` locate the block in the file.
    """

    kind: str
    header: Mapping[str, str] = field(default_factory=dict)
    records: pa.Table | None = None
    block_type: int | None = None
    offset: int = 0
    length: int = 0
    #: an HFile data block's bytes (a whole HFile: metadata-table records), None for other blocks
    content: bytes | None = field(default=None, repr=False)

    @property
    def instant_time(self) -> str | None:
        return self.header.get(HeaderKey.INSTANT_TIME.name)

    @property
    def target_instant_time(self) -> str | None:
        return self.header.get(HeaderKey.TARGET_INSTANT_TIME.name)

    @property
    def schema(self) -> dict[str, Any] | None:
        text = self.header.get(HeaderKey.SCHEMA.name)
        return json.loads(text) if text else None

    @property
    def is_partial(self) -> bool:
        """A data block of partial updates (``IS_PARTIAL`` "true", read as Java's
        ``Boolean.parseBoolean``): columns its schema lacks keep earlier values."""
        return self.header.get(HeaderKey.IS_PARTIAL.name, "").strip().lower() == "true"

    @property
    def is_rollback(self) -> bool:
        return self.kind == COMMAND and self.header.get(HeaderKey.COMMAND_BLOCK_TYPE.name) == ROLLBACK_COMMAND


#: the on-disk codes of header keys and block types, looked up once per block without the enums' calls
_HEADER_NAMES = {k.value: k.name for k in HeaderKey}
_BLOCK_TYPES = {t.value: t for t in BlockType}


class _Truncated(Exception):
    """A block's framing runs past its end: the block is corrupt, not the file unreadable."""


class _Cursor:
    def __init__(self, data: bytes, pos: int, end: int) -> None:
        self.data, self.pos, self.end = data, pos, end

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > self.end:
            raise _Truncated(f"needs {n} bytes at offset {self.pos}, the block ends at {self.end}")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def read_int(self) -> int:
        return self._unpack(_INT)

    def read_long(self) -> int:
        return self._unpack(_LONG)

    def _unpack(self, fmt: struct.Struct) -> int:
        if self.pos + fmt.size > self.end:
            raise _Truncated(f"needs {fmt.size} bytes at offset {self.pos}, the block ends at {self.end}")
        value = fmt.unpack_from(self.data, self.pos)[0]
        self.pos += fmt.size
        return value


def read_log_blocks(data: bytes, *, source: str = "log file", columns: Collection[str] | None = None) -> list[LogBlock]:
    """Every block of a log file's bytes, in file order.

    ``columns``: when given, Parquet data blocks decode only these of their columns (those a
    block lacks are left out); other blocks decode whole.

    A block whose framing does not hold (its size runs past the end of the file or is not
    followed by the next magic, as after a writer died mid-append) becomes a ``corrupt`` block
    reaching to the next magic, as Hudi's reader does; reading goes on from there. Content that
    is framed correctly but does not decode raises :class:`TableFormatError` naming ``source``.
    """
    data = bytes(data)
    if data and not data.startswith(MAGIC):
        raise TableFormatError(f"{source}: not a Hudi log file (it does not start with {MAGIC!r})")
    blocks: list[LogBlock] = []
    pos = 0
    while pos < len(data):
        end = _framed_end(data, pos)
        block = _read_block(data, pos, end, source, columns) if end is not None else None
        if block is None:
            end = _next_magic(data, pos + len(MAGIC))
            block = LogBlock(CORRUPT, offset=pos, length=end - pos)
        blocks.append(block)
        pos = end
    return blocks


def _framed_end(data: bytes, pos: int) -> int | None:
    """Where the block at ``pos`` ends by its size field, or None when that cannot be right."""
    if len(data) < pos + len(MAGIC) + _LONG.size:
        return None
    size = _LONG.unpack_from(data, pos + len(MAGIC))[0]
    end = pos + len(MAGIC) + _LONG.size + size
    if size < _MIN_BLOCK_SIZE or end > len(data):
        return None
    # the next block's magic must follow; a tail too short to hold one is a torn next block
    if len(data) - end >= len(MAGIC) and not data.startswith(MAGIC, end):
        return None
    if _LONG.unpack_from(data, end - _LONG.size)[0] != end - pos - _LONG.size:
        return None
    return end


def _next_magic(data: bytes, start: int) -> int:
    i = data.find(MAGIC, start)
    return len(data) if i < 0 else i


def _read_block(data: bytes, pos: int, end: int, source: str, columns: Collection[str] | None = None) -> LogBlock | None:
    cur = _Cursor(data, pos + len(MAGIC) + _LONG.size, end - _LONG.size)
    try:
        version = cur.read_int()
        if version != LOG_FORMAT_VERSION:
            raise TableFormatError(f"{source}: block at offset {pos} has log format version {version}; "
                                   f"only version {LOG_FORMAT_VERSION} (every Hudi since 0.5) is readable")
        code = cur.read_int()
        header = _read_metadata(cur)
        content = cur.take(cur.read_long())
        _read_metadata(cur)  # footer: Hudi writes none and defines no keys
    except _Truncated:
        return None
    if cur.pos != cur.end:
        return None
    where = f"{source}: block at offset {pos}"
    if code not in _BLOCK_TYPES:
        raise TableFormatError(f"{where} has unknown block type {code}")
    block_type = _BLOCK_TYPES[code]
    records = _decode_content(code, content, header, where, columns)
    raw = content if code == BlockType.HFILE_DATA else None
    return LogBlock(_KIND[block_type], header, records, block_type, pos, end - pos, raw)


def _read_metadata(cur: _Cursor) -> dict[str, str]:
    out: dict[str, str] = {}
    count = cur.read_int()
    if count < 0:
        raise _Truncated(f"negative entry count {count}")
    for _ in range(count):
        key = cur.read_int()
        value = cur.take(cur.read_int())
        name = _HEADER_NAMES.get(key) or str(key)
        try:
            out[name] = value.decode()
        except UnicodeDecodeError as e:
            raise _Truncated(f"header {name} is not UTF-8") from e
    return out


def _decode_content(code: int, content: bytes, header: Mapping[str, str], where: str,
                    columns: Collection[str] | None = None) -> pa.Table | None:
    if code in (BlockType.AVRO_DATA, BlockType.CDC_DATA):
        return _decode_avro_records(content, header, where)
    if code == BlockType.DELETE:
        return _decode_deletes(content, where)
    if code == BlockType.PARQUET_DATA:
        return _decode_parquet(content, where, columns)
    return None


def _content_version(cur: _Cursor, where: str, what: str) -> int:
    version = cur.read_int()
    if version != BLOCK_CONTENT_VERSION:
        raise TableFormatError(f"{where}: {what} content version {version}; only version "
                               f"{BLOCK_CONTENT_VERSION} (Avro, every Hudi since 0.11) is readable")
    return version


def _decode_avro_records(content: bytes, header: Mapping[str, str], where: str) -> pa.Table:
    text = header.get(HeaderKey.SCHEMA.name)
    if not text:
        raise TableFormatError(f"{where}: data block without a SCHEMA header")
    try:
        schema = json.loads(text)
        arrow_schema = avro_to_arrow(inline_named_types(schema), source=where)
        parsed = fastavro.parse_schema(_raw_time_fields(schema), named_schemas={})
    except (ValueError, TypeError, KeyError, fastavro.schema.SchemaParseException) as e:
        raise TableFormatError(f"{where}: unreadable SCHEMA header ({e})") from e
    try:
        avro.check_schema(parsed)
    except avro.Unsafe as e:
        raise TableFormatError(f"{where}: the SCHEMA header cannot be decoded with bounded memory: {e}") from e
    cur = _Cursor(content, 0, len(content))
    try:
        _content_version(cur, where, "data block")
        count = cur.read_int()
        values = [_decode_record(cur, parsed, where, i) for i in range(count)]
    except _Truncated as e:
        raise TableFormatError(f"{where}: data block content is cut short ({e})") from e
    if cur.pos != len(content):
        raise TableFormatError(f"{where}: {len(content) - cur.pos} bytes after the data block's {count} records")
    return _to_arrow(values, schema, arrow_schema, where)


def _decode_record(cur: _Cursor, parsed: Any, where: str, i: int) -> dict[str, Any]:
    body = cur.take(cur.read_int())
    buf = io.BytesIO(body)
    try:
        record = fastavro.schemaless_reader(buf, parsed, None)
    except Exception as e:  # noqa: BLE001 - fastavro raises many types for bad bytes
        raise TableFormatError(f"{where}: record {i} does not decode with the block's schema "
                               f"({type(e).__name__}: {e})") from e
    if buf.tell() != len(body):
        raise TableFormatError(f"{where}: record {i} is {len(body)} bytes but its schema reads {buf.tell()}")
    return record


_RAW_LOGICAL = {*_TIME_UNITS, "date", *_TIME_OF_DAY}


def _raw_time_fields(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with the logical types of top-level time fields removed, so that their values
    decode as the integers on disk and become Arrow values exactly (no Python datetimes)."""
    def raw(t: Any) -> Any:
        if isinstance(t, list):
            return [raw(b) for b in t]
        if isinstance(t, dict) and t.get("logicalType") in _RAW_LOGICAL:
            return t["type"]
        return t
    out = dict(schema)
    out["fields"] = [{**f, "type": raw(f["type"])} for f in schema["fields"]]
    return out


def _to_arrow(values: list[dict[str, Any]], schema: dict[str, Any], arrow_schema: pa.Schema, where: str) -> pa.Table:
    arrays = []
    for f, af in zip(schema["fields"], arrow_schema, strict=True):
        column = [v.get(f["name"]) for v in values]
        try:
            if _logical(f["type"]) in _TIME_UNITS or _logical(f["type"]) == "date":
                storage = pa.int64() if pa.types.is_timestamp(af.type) else pa.int32()
                arrays.append(pa.array(column, storage).cast(af.type))
            else:
                arrays.append(pa.array(column, af.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as e:
            raise TableFormatError(f"{where}: column {f['name']!r} does not convert to {af.type} ({e})") from e
    return pa.Table.from_arrays(arrays, schema=arrow_schema)


def _decode_deletes(content: bytes, where: str) -> pa.Table:
    cur = _Cursor(content, 0, len(content))
    try:
        version = cur.read_int()
        if version in (1, 2):
            raise TableFormatError(f"{where}: delete block content version {version} is Java-serialized "
                                   "(Hudi before 0.11); rewrite the file group with a compaction")
        if version != BLOCK_CONTENT_VERSION:
            raise TableFormatError(f"{where}: unknown delete block content version {version}")
        body = cur.take(cur.read_int())
    except _Truncated as e:
        raise TableFormatError(f"{where}: delete block content is cut short ({e})") from e
    buf = io.BytesIO(body)
    try:
        decoded = fastavro.schemaless_reader(buf, _DELETE_LIST_PARSED, None, return_record_name=True)
    except Exception as e:  # noqa: BLE001 - fastavro raises many types for bad bytes
        raise TableFormatError(f"{where}: delete records do not decode ({type(e).__name__}: {e})") from e
    items = decoded["deleteRecordList"]
    keys = [d["recordKey"] for d in items]
    partitions = [d["partitionPath"] for d in items]
    wrapped = [d["orderingVal"] for d in items]
    arrays = [w[1]["wrappedValues"] if _is_array_wrapper(w) else None for w in wrapped]
    out = {
        "record_key": pa.array(keys, pa.string()),
        "partition_path": pa.array(partitions, pa.string()),
        "ordering_value": _ordering_column([None if a is not None else w for w, a in zip(wrapped, arrays, strict=True)]),
    }
    if any(a is not None for a in arrays):
        out[DELETE_ORDERING_VALUES] = _array_column(arrays, where)
    return pa.table(out)


def _is_array_wrapper(wrapped: Any) -> bool:
    return wrapped is not None and wrapped[0].rsplit(".", 1)[-1] == _ARRAY_WRAPPER


def _array_column(arrays: list[list[Any] | None], where: str) -> pa.StructArray:
    """``ArrayWrapper`` values as a struct column, one child per position (ordering field),
    each unwrapped as :func:`_ordering_column` does; null for a row without one. Hudi compares
    such values position by position (``ArrayComparable``), so every one must have as many."""
    sizes = {len(a) for a in arrays if a is not None}
    if len(sizes) != 1 or 0 in sizes:
        raise TableFormatError(f"{where}: delete ordering values (ArrayWrapper) of {sorted(sizes)} fields in one "
                               "block; Hudi compares them field by field, so they must all have one, non-zero count")
    (size,) = sizes
    children = [_ordering_column([None if a is None else a[i] for a in arrays]) for i in range(size)]
    mask = pa.array([a is None for a in arrays], pa.bool_())
    return pa.StructArray.from_arrays(children, names=[str(i) for i in range(size)], mask=mask)


def _ordering_column(wrapped: list[Any]) -> pa.Array:
    """Ordering values unwrapped into one typed column; a block mixing wrapper types (Hudi allows
    it) gets a string column of the values' text, since no one Arrow type holds them all."""
    names = {w[0].rsplit(".", 1)[-1] for w in wrapped if w is not None}
    if not names:
        return pa.nulls(len(wrapped))
    values = [None if w is None else w[1]["value"] for w in wrapped]
    if len(names) > 1:
        return pa.array([None if v is None else str(v) for v in values], pa.string())
    (name,) = names
    target = _WRAPPER_ARROW[name]
    if name == "DateWrapper":
        return pa.array(values, pa.int32()).cast(target)
    if name == "TimestampMicrosWrapper":
        return pa.array(values, pa.int64()).cast(target)
    return pa.array(values, target)


def _decode_parquet(content: bytes, where: str, columns: Collection[str] | None = None) -> pa.Table:
    try:  # the plain reader: a log block is small, and every layer above it costs more than the read
        f = pq.ParquetReader()
        f.open(pa.BufferReader(content), pre_buffer=False)
        # its footer, against the block's size and the row group budget, before any page is decoded
        bounds.check_parquet(f.metadata, where, size=len(content), columns=columns)
        if columns is None:
            return f.read_all(use_threads=False)
        wanted = set(columns)
        return f.read_all(column_indices=[i for i, p in enumerate(f.column_paths) if p[0] in wanted],
                          use_threads=False)
    except (MemoryError, pa.ArrowMemoryError) as e:
        raise bounds.out_of_memory(where, e) from e
    except (pa.ArrowInvalid, OSError) as e:
        raise TableFormatError(f"{where}: Parquet data block does not decode ({e})") from e
