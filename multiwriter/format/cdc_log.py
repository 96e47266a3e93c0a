"""Hudi's CDC log files: their names, their record schemas per logging mode, and their blocks.

A table with ``hoodie.table.cdc.enabled=true`` gets, beside a file group's new slice, a log
file of the changes the commit made to the group (Hudi's ``HoodieCDCLogger``). It is named like
any log file plus Hudi's suffix (``HoodieCDCUtils.CDC_LOGFILE_SUFFIX``)::

    .<fileId>_<instantTime>.log.<version>_<writeToken>.cdc

and holds CDC data blocks (``HoodieCDCDataBlock``: block type 6, ``CDC_DATA_BLOCK``), framed as
any block (:mod:`.log_file`) with the content of an Avro data block it extends
(``HoodieAvroDataBlock``) and two header entries, INSTANT_TIME (the commit) and SCHEMA (the CDC
record schema). That schema depends on ``hoodie.table.cdc.supplemental.logging.mode``
(``HoodieCDCUtils.schemaBySupplementalLoggingMode``):

* ``OP_KEY_ONLY``: ``op`` and ``record_key`` (``CDC_SCHEMA_OP_AND_RECORDKEY``);
* ``DATA_BEFORE``: ``op``, ``record_key`` and ``before``;
* ``DATA_BEFORE_AFTER``: ``op``, ``ts_ms`` (the commit time), ``before`` and ``after``.

Images are the table's data record (meta fields removed: ``HoodieCDCLogger.removeCommitMetadata``),
nullable; every field is a ``["null", T]`` union defaulting to null, in a record named ``CDC`` in
the table schema's namespace (``createCDCSchema``).
"""
from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from ..errors import SchemaMismatchError, TableFormatError
from .log_file import (
    CDC,
    BlockType,
    HeaderKey,
    LogFileName,
    avro_block_content,
    encode_block,
    parse_log_file,
    read_log_blocks,
)
from .schema import META_COLUMNS

#: ``HoodieCDCUtils.CDC_LOGFILE_SUFFIX``
CDC_SUFFIX = ".cdc"
#: ``HoodieCDCSupplementalLoggingMode``
OP_KEY_ONLY, DATA_BEFORE, DATA_BEFORE_AFTER = "OP_KEY_ONLY", "DATA_BEFORE", "DATA_BEFORE_AFTER"
MODES = (OP_KEY_ONLY, DATA_BEFORE, DATA_BEFORE_AFTER)
#: ``HoodieCDCOperation`` values
INSERT_OP, UPDATE_OP, DELETE_OP = "i", "u", "d"
#: column names (``HoodieCDCUtils.CDC_OPERATION_TYPE`` ... ``CDC_RECORD_KEY``)
OP, TS, BEFORE, AFTER, RECORD_KEY = "op", "ts_ms", "before", "after", "record_key"

#: ``CDC_SCHEMA_OP_AND_RECORDKEY``: its fields put string first, as Hudi's literal does
_OP_KEY_SCHEMA: dict[str, Any] = {
    "type": "record", "name": "Record",
    "fields": [{"name": OP, "type": ["string", "null"]}, {"name": RECORD_KEY, "type": ["string", "null"]}],
}


def cdc_log_name(file_id: str, instant_time: str, write_token: str, version: int = 1) -> str:
    """A CDC log file's name: the log file name Hudi would give the group's log, plus ``.cdc``."""
    return LogFileName(file_id, instant_time, version, write_token).name + CDC_SUFFIX


def parse_cdc_log_file(name: str) -> LogFileName | None:
    """The parts of a CDC log file's name, or None for any other name (plain logs included)."""
    if not name.endswith(CDC_SUFFIX):
        return None
    return parse_log_file(name[: -len(CDC_SUFFIX)])


def cdc_record_schema(mode: str, table_schema: Mapping[str, Any]) -> dict[str, Any]:
    """The Avro schema of CDC records in ``mode`` for a table whose Avro record schema is
    ``table_schema`` (meta fields, if any, are dropped from the images)."""
    _check_mode(mode)
    if mode == OP_KEY_ONLY:
        return copy.deepcopy(_OP_KEY_SCHEMA)
    image = {k: v for k, v in table_schema.items() if k != "fields"}
    image["fields"] = [f for f in table_schema.get("fields", []) if f.get("name") not in META_COLUMNS]
    ref = f"{image['namespace']}.{image['name']}" if image.get("namespace") else image["name"]
    fields = [_nullable(OP, "string")]
    if mode == DATA_BEFORE_AFTER:
        fields += [_nullable(TS, "string"), _nullable(BEFORE, image), _nullable(AFTER, ref)]
    else:
        fields += [_nullable(RECORD_KEY, "string"), _nullable(BEFORE, image)]
    out: dict[str, Any] = {"type": "record", "name": "CDC"}
    if table_schema.get("namespace"):
        out["namespace"] = table_schema["namespace"]
    out.update(doc="", fields=fields)
    return out


def _nullable(name: str, t: Any) -> dict[str, Any]:
    return {"name": name, "type": ["null", t], "doc": "", "default": None}


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"CDC supplemental logging mode {mode!r} is not one of {MODES}")


def cdc_columns(mode: str) -> tuple[str, ...]:
    """The columns of CDC records in ``mode``, in schema order."""
    _check_mode(mode)
    return {OP_KEY_ONLY: (OP, RECORD_KEY), DATA_BEFORE: (OP, RECORD_KEY, BEFORE),
            DATA_BEFORE_AFTER: (OP, TS, BEFORE, AFTER)}[mode]


def encode_cdc_block(records: pa.Table, mode: str, table_schema: Mapping[str, Any], *, instant_time: str) -> bytes:
    """One CDC data block of ``records`` (the columns of :func:`cdc_columns`; images as structs
    of the data columns, null where the mode or the operation has none) written by
    ``instant_time``. Hudi writes one block per file group and commit unless it outgrows
    ``hoodie.logfile.data.block.max.size``; one block per file is what we write."""
    schema = cdc_record_schema(mode, table_schema)
    missing = [c for c in cdc_columns(mode) if c not in records.column_names]
    if missing:
        raise SchemaMismatchError(f"CDC records in mode {mode} lack columns {missing}")
    header = {HeaderKey.INSTANT_TIME: instant_time, HeaderKey.SCHEMA: json.dumps(schema, separators=(",", ":"))}
    return encode_block(BlockType.CDC_DATA, header, avro_block_content(records.select(list(cdc_columns(mode))), schema))


def read_cdc_records(data: bytes, *, source: str = "CDC log file") -> pa.Table:
    """The records of every CDC block of a CDC log file's bytes, in file order. A file holding
    another kind of block, or blocks of differing schemas, is refused naming ``source``."""
    tables = []
    for b in read_log_blocks(data, source=source):
        if b.kind != CDC or b.records is None:
            raise TableFormatError(f"{source}: block at offset {b.offset} is a {b.kind} block; a CDC log file "
                                   "holds only CDC data blocks (a torn write? rewrite the commit with Hudi)")
        tables.append(b.records)
    if not tables:
        raise TableFormatError(f"{source}: a CDC log file without blocks")
    try:
        return pa.concat_tables(tables)
    except pa.ArrowInvalid as e:
        raise TableFormatError(f"{source}: CDC blocks of differing schemas ({e})") from e
