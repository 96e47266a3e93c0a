"""Hudi's record index: the bytes of the metadata table's ``record_index`` partition, read and
written (Hudi 1.0 and 1.1, table versions 8 and 9: the same format in both).

The format, as Hudi's sources define it and the Spark-written fixtures show it:

* **Partition and file groups.** The partition is ``record_index``
  (``MetadataPartitionType.RECORD_INDEX``, record type 5, file id prefix ``record-index-``). It
  holds a fixed number of file groups, chosen when the index is initialized (at least
  ``hoodie.metadata.record.index.min.filegroup.count``, 10, ``HoodieMetadataConfig``) and never
  changed after; readers take the number of file groups listed. File group ``i`` is
  ``record-index-<i, 4 digits>-0`` (``HoodieTableMetadataUtil.getFileIDForFileGroup``); its base
  files are ``<fileId>_<writeToken>_<instant>.hfile`` and its log files
  ``.<fileId>_<instant>.log.<version>_<writeToken>``, as in every metadata-table partition.
* **Which file group holds a key.** ``HoodieTableMetadataUtil.mapRecordKeyToFileGroupIndex``: the
  key's Java ``String.hashCode`` (over UTF-16 code units, 32-bit wrap-around), then
  ``abs(abs(h) % n)`` with Java's ``Math.abs`` and ``%`` (``abs(MIN_VALUE)`` stays negative; the
  remainder takes the dividend's sign). ``MetadataPartitionType.getFileGroupMappingFunction``
  uses it for the record index in 1.1 as in 1.0 (only the secondary index's version 2 differs).
* **One entry.** An HFile cell whose key is the record key and whose value is a
  ``HoodieMetadataRecord`` (``HoodieMetadata.avsc``) with ``type`` 5 and ``recordIndexMetadata``
  a ``HoodieRecordIndexInfo``: ``partitionName``, ``fileIdHighBits``, ``fileIdLowBits``,
  ``fileIndex``, ``fileId``, ``instantTime``, ``fileIdEncoding`` and ``position`` (all nullable
  but ``fileIdEncoding``, an int defaulting to 0); the fixtures of Hudi 1.0 and 1.1 both carry
  all eight fields. The record's ``key`` field is written empty: the HFile key carries it
  (``HoodieRecord.truncateRecordKey``, which the HFile writers call). Cells of a compacted base
  file carry that file's name in ``_hoodie_file_name``; the other meta fields stay null.
  Bytes are Avro binary in the schema the file declares (the HFile's ``schema`` file-info
  entry, or a log block's SCHEMA header): readers resolve it against their own.
* **The file id** (``HoodieMetadataPayload.createRecordIndexUpdate``). Encoding 0 (Hudi's
  default, ``HoodieWriteConfig.getWritesFileIdEncoding``): a ``<UUID>-<N>`` id is stored as the
  UUID's most and least significant 64 bits (signed longs) and ``fileIndex`` N, with ``fileId``
  the empty string; a bare 36-character UUID stores ``fileIndex`` -1
  (``RECORD_INDEX_MISSING_FILEINDEX_FALLBACK``). Encoding 1: ``fileId`` holds the id as is and
  the bits and index are -1. ``HoodieTableMetadataUtil.getLocationFromRecordIndexInfo`` reads it
  back: encoding 0 rebuilds ``new UUID(high, low).toString()`` plus ``-<fileIndex>`` unless it
  is -1; any other encoding takes ``fileId``.
* **The instant time** is a long: the epoch milliseconds of the instant time (the commit that
  wrote the record's file) read as a local date-time in the writer's timeline zone
  (``HoodieInstantTimeGenerator.parseDateFromInstantTime``: ``hoodie.table.timeline.timezone``,
  LOCAL by default, i.e. the JVM's zone; a 14-digit time gets ``999`` milliseconds, a longer one
  is cut to 17 digits). Readers format it back in their JVM's zone
  (``HoodieInstantTimeGenerator.formatDate``). The 1.1 fixture was written in UTC-6, the 1.0 one
  in UTC; this project's instant times are UTC, so ``zone`` defaults to UTC.
* **Position** is null in every entry Hudi 1.0 and 1.1 write (``createRecordIndexUpdate``).
* **Deletes** (``HoodieMetadataPayload.createRecordIndexDelete``) are empty payloads keyed by the
  record key in the ``record_index`` partition: in a log file, a delete block (content version
  3) of ``(key, "record_index", IntWrapper 0)`` entries, after the deltacommit's HFile data
  block when it has both (``HoodieAppendHandle``); a compaction drops the key. Newer entries
  replace older ones whole (``MetadataPartitionType.combineMetadataPayloads``' default).
* **Files.** A log file's HFile data block holds only the ``schema`` file-info entry; a base
  HFile also holds ``minRecordKey``/``maxRecordKey`` and the keys' bloom filter, as in the
  ``files`` partition (:mod:`.hfile`). Each file group starts with an empty delete block at the
  partition's initialization time (``HoodieBackedTableMetadataWriter.initializeFileGroups``).

Cells are written and read by code compiled once per record schema (:mod:`.avro_encoder`,
:mod:`.avro_decoder`), each distinct location once per call; fastavro, their reference, writes
and reads what they do not know.

Pure functions from bytes to values and back; what the index means for a table (which slice is
live, how deltacommits merge) is :mod:`multiwriter.table`'s. Hudi's newer "partitioned" record
index (``EmptyHoodieRecordPayloadWithPartition``) is not in 1.0 or 1.1 and not handled here.
"""
from __future__ import annotations

import copy
import datetime as _dt
import functools
import io
import json
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa

from ..errors import TableFormatError
from . import avro, hfile
from .avro_decoder import RecordIndexDecoder
from .avro_encoder import RECORD_INDEX_FIELD, RECORD_INDEX_FIELDS, Frame, RecordIndexEncoder, Unsupported
from .log_file import CORRUPT, BlockType, HeaderKey, encode_block, encode_delete_block, read_log_blocks

PARTITION = "record_index"
FILE_ID_PREFIX = "record-index-"
#: ``HoodieMetadataRecord.type`` of a record-index entry
RECORD_TYPE = 5
ENCODING_UUID, ENCODING_RAW = 0, 1
#: ``fileIndex`` of a UUID file id without a ``-N`` suffix
MISSING_FILE_INDEX = -1
#: the fewest file groups Hudi gives a record index (its default minimum)
MIN_FILE_GROUPS = 10
UTC = _dt.timezone.utc

#: ``HoodieRecordIndexInfo``, the record-index branch of ``HoodieMetadataRecord.recordIndexMetadata``
RECORD_INDEX_INFO: dict[str, Any] = {
    "type": "record", "name": "HoodieRecordIndexInfo", "namespace": "org.apache.hudi.avro.model",
    "fields": [
        {"name": "partitionName", "type": ["null", "string"], "default": None},
        {"name": "fileIdHighBits", "type": ["null", "long"], "default": None},
        {"name": "fileIdLowBits", "type": ["null", "long"], "default": None},
        {"name": "fileIndex", "type": ["null", "int"], "default": None},
        {"name": "fileId", "type": ["null", "string"], "default": None},
        {"name": "instantTime", "type": ["null", "long"], "default": None},
        {"name": "fileIdEncoding", "type": "int", "default": 0},
        {"name": "position", "type": ["null", "long"], "default": None},
    ],
}
_FIELD = RECORD_INDEX_FIELD

_INT_MASK = (1 << 32) - 1
_U64 = (1 << 64) - 1
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_INDEX = re.compile(r"0|[1-9][0-9]{0,9}")  # a suffix Integer.toString gives back as written
_GROUP = re.compile(re.escape(FILE_ID_PREFIX) + r"(\d{4,})-0")
_BASE = re.compile(r"(?P<fid>" + re.escape(FILE_ID_PREFIX) + r"\d{4,}-0)_(?P<token>\d+-\d+-\d+)_(?P<t>\d{17}|\d{14})\.hfile")
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=UTC)
_MS = _dt.timedelta(milliseconds=1)


# -- file groups --------------------------------------------------------------------------------
def file_group_indexes(keys: pa.Array | pa.ChunkedArray, num_file_groups: int) -> np.ndarray:
    """:func:`file_group_index` of many keys at once: the Java hash over each key's UTF-16
    units, folded a character position at a time over all keys (ASCII keys; any other key
    takes the per-key path)."""
    if num_file_groups <= 0:
        raise ValueError(f"a record index has at least one file group, not {num_file_groups}")
    arr = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
    arr = arr.cast(pa.large_string())
    n = len(arr)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.null_count:
        raise ValueError("a record key is null")
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset:arr.offset + n + 1]
    data = np.frombuffer(arr.buffers()[2], dtype=np.uint8) if arr.buffers()[2] is not None else np.zeros(0, np.uint8)
    lengths = offsets[1:] - offsets[:-1]
    h = np.zeros(n, dtype=np.uint32)
    ascii_ok = not bool((data[offsets[0]:offsets[-1]] & 0x80).any())
    if ascii_ok:
        for i in range(int(lengths.max(initial=0))):
            live = lengths > i
            c = np.zeros(n, dtype=np.uint32)
            c[live] = data[offsets[:-1][live] + i]
            h = np.where(live, h * np.uint32(31) + c, h)
        signed = h.astype(np.int64)
        signed[signed >= 1 << 31] -= 1 << 32
        return np.abs(signed) % num_file_groups
    return np.array([file_group_index(k, num_file_groups) for k in arr.to_pylist()], dtype=np.int64)


def file_group_index(record_key: str, num_file_groups: int) -> int:
    """The file group (0 .. n-1) holding ``record_key`` when the index has ``num_file_groups``
    (``HoodieTableMetadataUtil.mapRecordKeyToFileGroupIndex``)."""
    if num_file_groups <= 0:
        raise ValueError(f"a record index has at least one file group, not {num_file_groups}")
    units = record_key.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & _INT_MASK
    if h & 0x80000000:
        h -= 1 << 32
    # Java: Math.abs(Math.abs(h) % n). Math.abs(MIN_VALUE) stays MIN_VALUE and % keeps the
    # dividend's sign, so the outer abs makes it |MIN_VALUE| mod n: Python's abs(h) % n, always
    return abs(h) % num_file_groups


def file_group_id(index: int) -> str:
    """The id of file group ``index`` (``HoodieTableMetadataUtil.getFileIDForFileGroup``)."""
    if index < 0:
        raise ValueError(f"file group index {index} is negative")
    return f"{FILE_ID_PREFIX}{index:04d}-0"


def file_group_of(file_id: str) -> int | None:
    """The index of a record-index file group id, None for any other id."""
    m = _GROUP.fullmatch(file_id)
    return int(m.group(1)) if m else None


def base_file_name(file_id: str, write_token: str, instant_time: str) -> str:
    """A base HFile's name: ``<fileId>_<writeToken>_<instant>.hfile``."""
    return f"{file_id}_{write_token}_{instant_time}.hfile"


@dataclass(frozen=True)
class BaseFileName:
    file_id: str
    write_token: str
    instant_time: str

    @property
    def group(self) -> int:
        return int(self.file_id[len(FILE_ID_PREFIX):-2])


def parse_base_file_name(name: str) -> BaseFileName | None:
    """The parts of a record-index base file name, None for any other name (log file names:
    :func:`.log_file.parse_log_file`)."""
    m = _BASE.fullmatch(name)
    return BaseFileName(m["fid"], m["token"], m["t"]) if m else None


# -- file ids and instant times -----------------------------------------------------------------
@dataclass(frozen=True)
class FileIdParts:
    """A file id as ``HoodieRecordIndexInfo`` stores it (see the module notes)."""

    encoding: int
    high_bits: int | None
    low_bits: int | None
    file_index: int | None
    raw: str | None


def _signed64(n: int) -> int:
    return n - (1 << 64) if n >> 63 else n


def encode_file_id(file_id: str) -> FileIdParts:
    """Encoding 0 for an id that reads back exactly from its bits (a lower-case UUID, bare or
    with a ``-N`` suffix of a decimal int without leading zeros), else encoding 1 (the raw
    string), so that :func:`decode_file_id` always gives ``file_id`` back. Hudi's writer uses its
    configured encoding, 0 unless set, and fails on an id that is no UUID under it."""
    index: int | None = MISSING_FILE_INDEX
    head = file_id
    if len(file_id) != 36:
        head, _, tail = file_id.rpartition("-")
        index = int(tail) if _INDEX.fullmatch(tail) and int(tail) < 2**31 else None
    if index is not None and _UUID.fullmatch(head):
        n = uuid.UUID(head).int
        return FileIdParts(ENCODING_UUID, _signed64(n >> 64), _signed64(n & _U64), index, "")
    return FileIdParts(ENCODING_RAW, -1, -1, -1, file_id)


def decode_file_id(parts: FileIdParts, *, source: str = "record index") -> str:
    """The file id ``parts`` stand for (``HoodieTableMetadataUtil.getLocationFromRecordIndexInfo``)."""
    if parts.encoding != ENCODING_UUID:
        if parts.raw is None:
            raise TableFormatError(f"{source}: a raw-encoded file id (encoding {parts.encoding}) without fileId")
        return parts.raw
    if parts.high_bits is None or parts.low_bits is None or parts.file_index is None:
        raise TableFormatError(f"{source}: a UUID-encoded file id lacks its bits or index ({parts})")
    text = str(uuid.UUID(int=((parts.high_bits & _U64) << 64) | (parts.low_bits & _U64)))
    return text if parts.file_index == MISSING_FILE_INDEX else f"{text}-{parts.file_index}"


def instant_millis(instant_time: str, zone: _dt.tzinfo = UTC) -> int:
    """The ``instantTime`` long of an instant time read in ``zone``
    (``HoodieInstantTimeGenerator.parseDateFromInstantTime``)."""
    t = instant_time + "999" if len(instant_time) == 14 else instant_time[:17]
    if len(t) != 17 or not t.isdigit():
        raise ValueError(f"not an instant time: {instant_time!r}")
    d = _dt.datetime.strptime(t[:14], "%Y%m%d%H%M%S").replace(tzinfo=zone)  # raises on month 00 as Java does
    return (d - _EPOCH) // _MS + int(t[14:])


def instant_of_millis(millis: int, zone: _dt.tzinfo = UTC) -> str:
    """The 17-digit instant time of an ``instantTime`` long, formatted in ``zone``
    (``HoodieInstantTimeGenerator.formatDate``)."""
    try:
        d = (_EPOCH + millis * _MS).astimezone(zone)
    except OverflowError as e:
        raise TableFormatError(f"record index instant {millis} ms is out of range") from e
    if not 1 <= d.year <= 9999:
        raise TableFormatError(f"record index instant {millis} ms is out of range")
    return d.strftime("%Y%m%d%H%M%S") + f"{d.microsecond // 1000:03d}"


# -- values -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Location:
    """Where the record index puts a key: data partition, file group and the instant of the
    write that placed it there; ``position`` is null in what Hudi 1.0 and 1.1 write."""

    partition: str
    file_id: str
    instant_time: str
    position: int | None = None


@dataclass
class Changes:
    """What one HFile or log block says: keys placed (``updates``) and keys deleted."""

    instant_time: str | None = None
    updates: dict[str, Location] = field(default_factory=dict)
    deletes: list[str] = field(default_factory=list)


# -- schema -------------------------------------------------------------------------------------
def with_record_index(schema: Mapping[str, Any] | str) -> dict[str, Any]:
    """``schema`` (a ``HoodieMetadataRecord`` schema, as a dict or JSON) with
    :data:`RECORD_INDEX_INFO` as the non-null branch of ``recordIndexMetadata``: the files
    partition's schema, which keeps only the null branch there, extended; a schema that already
    has the branch (Hudi's whole one) is returned unchanged."""
    out = copy.deepcopy(json.loads(schema) if isinstance(schema, str) else dict(schema))
    for f in out.get("fields", []):
        if f.get("name") == _FIELD:
            branches = f["type"] if isinstance(f["type"], list) else [f["type"]]
            if not any(isinstance(b, dict) and b.get("name") == RECORD_INDEX_INFO["name"] for b in branches):
                f["type"] = ["null", copy.deepcopy(RECORD_INDEX_INFO)]
                f["default"] = None
            return out
    raise ValueError(f"not a HoodieMetadataRecord schema: no {_FIELD} field")


@dataclass(frozen=True)
class _Codec:
    """A record schema as fastavro parsed it, and the encoder and decoder compiled for it (None:
    fastavro writes or reads every value)."""

    parsed: Any
    encoder: RecordIndexEncoder | None
    decoder: RecordIndexDecoder | None

    def frame(self, file_name: str | None) -> Frame | None:
        """The compiled encoder's bytes around each entry of a call, None when fastavro writes it."""
        if self.encoder is None:
            return None
        try:
            return self.encoder.frame(RECORD_TYPE, file_name)
        except Unsupported:
            return None


_CODECS: dict[str, _Codec] = {}


def _codec(schema_json: str, source: str) -> _Codec:
    """The codec of a record schema's JSON, parsed and compiled once per schema."""
    codec = _CODECS.get(schema_json)
    if codec is None:
        try:
            parsed = fastavro.parse_schema(json.loads(schema_json))
            avro.check_schema(parsed)
        except (ValueError, TypeError, KeyError) as e:
            raise TableFormatError(f"{source}: no readable record index schema ({e})") from e
        codec = _Codec(parsed, RecordIndexEncoder.compile(parsed), RecordIndexDecoder.compile(parsed))
        if len(_CODECS) < 64:
            _CODECS[schema_json] = codec
    return codec


def _schema_json(schema: Mapping[str, Any] | str) -> str:
    return schema if isinstance(schema, str) else json.dumps(schema, separators=(",", ":"))


# -- encoding -----------------------------------------------------------------------------------
def encode_cells(entries: Mapping[str, Location], schema: Mapping[str, Any] | str, *, zone: _dt.tzinfo = UTC,
                 file_name: str | None = None) -> list[tuple[str, bytes]]:
    """One HFile cell per key (sorted): the ``HoodieMetadataRecord`` of its location in
    ``schema`` (which must have the record-index branch: :func:`with_record_index`).
    ``file_name``: a base file's own name, written in ``_hoodie_file_name`` as Hudi's compaction
    does. The encoder compiled for the schema writes each distinct location once (a table has
    few partitions, file ids and instants); fastavro writes a schema or a value it does not
    know."""
    codec = _codec(_schema_json(schema), "record index schema")
    frame = codec.frame(file_name)
    written: dict[tuple, bytes] = {}
    out = []
    for key in sorted(entries):
        loc = entries[key]
        same = _same_bytes_key(loc)
        data = written.get(same) if same is not None else None
        if data is None:
            data = _encode_entry(codec, frame, key, loc, zone, file_name, cached=same is not None)
            if same is not None:
                written[same] = data
        out.append((key, data))
    return out


def _same_bytes_key(loc: Location) -> tuple | None:
    """A key equal for exactly the locations written as the same bytes; None for values of other
    types (``True == 1``, yet fastavro may write them differently or refuse one)."""
    if type(loc.partition) is str and type(loc.file_id) is str and type(loc.instant_time) is str and (
            loc.position is None or type(loc.position) is int):
        return loc.partition, loc.file_id, loc.instant_time, loc.position
    return None


def _encode_entry(codec: _Codec, frame: Frame | None, key: str, loc: Location, zone: _dt.tzinfo,
                  file_name: str | None, *, cached: bool) -> bytes:
    """One entry's value: by the compiled encoder, or fastavro for a value it does not expect.
    ``cached``: the location's parts are strings, so the conversions' caches take them."""
    parts = _cached_file_id(loc.file_id) if cached else encode_file_id(loc.file_id)
    millis = _cached_millis(loc.instant_time, zone) if cached else instant_millis(loc.instant_time, zone)
    values = (loc.partition, parts.high_bits, parts.low_bits, parts.file_index, parts.raw, millis, parts.encoding,
              loc.position)
    if frame is not None and codec.encoder is not None:
        try:
            return codec.encoder.encode(frame, values)
        except Unsupported:
            pass
    return _fastavro_value(codec.parsed, key, loc, values, file_name)


def _fastavro_value(parsed: Any, key: str, loc: Location, values: tuple, file_name: str | None) -> bytes:
    """One entry's value by fastavro (``values`` in :data:`.avro_encoder.RECORD_INDEX_FIELDS`
    order): the compiled encoder's reference."""
    value: dict[str, Any] = dict.fromkeys(f["name"] for f in parsed["fields"])
    if file_name is not None and "_hoodie_file_name" in value:
        value["_hoodie_file_name"] = file_name
    value.update({"key": "", "type": RECORD_TYPE, _FIELD: dict(zip(RECORD_INDEX_FIELDS, values, strict=True))})
    buf = io.BytesIO()
    try:
        fastavro.schemaless_writer(buf, parsed, value)
    except (ValueError, TypeError, OverflowError) as e:
        raise ValueError(f"record index entry {key!r}: {loc} does not fit the schema ({e})") from e
    return buf.getvalue()


def _fastavro_cells(entries: Mapping[str, Location], schema: Mapping[str, Any] | str, *, zone: _dt.tzinfo = UTC,
                    file_name: str | None = None) -> list[tuple[str, bytes]]:
    """:func:`encode_cells` by fastavro alone, an entry at a time (the compiled encoder's
    reference)."""
    parsed = _codec(_schema_json(schema), "record index schema").parsed
    out = []
    for key in sorted(entries):
        loc = entries[key]
        parts = encode_file_id(loc.file_id)
        values = (loc.partition, parts.high_bits, parts.low_bits, parts.file_index, parts.raw,
                  instant_millis(loc.instant_time, zone), parts.encoding, loc.position)
        out.append((key, _fastavro_value(parsed, key, loc, values, file_name)))
    return out


@functools.lru_cache(maxsize=4096)
def _cached_file_id(file_id: str) -> FileIdParts:
    return encode_file_id(file_id)


@functools.lru_cache(maxsize=4096)
def _cached_millis(instant_time: str, zone: _dt.tzinfo) -> int:
    return instant_millis(instant_time, zone)


def encode_hfile(entries: Mapping[str, Location], schema: Mapping[str, Any] | str, *, zone: _dt.tzinfo = UTC,
                 base_file_name: str | None = None, created_ms: int = 0) -> bytes:
    """An HFile of ``entries``: a log block's (the ``schema`` file-info entry only), or with
    ``base_file_name`` that base file's (also the key range and the keys' bloom filter)."""
    text = _schema_json(schema)
    return cells_hfile(encode_cells(entries, text, zone=zone, file_name=base_file_name), text,
                       base_file_name=base_file_name, created_ms=created_ms)


def cells_hfile(cells: list[tuple[str, bytes]], schema_json: str, *, base_file_name: str | None = None,
                created_ms: int = 0) -> bytes:
    """An HFile of encoded ``cells`` (sorted by key, each key once) written in ``schema_json``:
    a compaction carries the cells of keys it did not change as they are."""
    text = schema_json
    info = {b"schema": text.encode()}
    meta = None
    if base_file_name is not None:
        keys = [k for k, _ in cells]
        if keys:
            info[b"minRecordKey"], info[b"maxRecordKey"] = keys[0].encode(), keys[-1].encode()
        info[hfile.BLOOM_TYPE_KEY] = hfile.BLOOM_TYPE
        meta = {hfile.BLOOM_META_BLOCK: hfile.bloom_filter(keys)}
    return hfile.write(cells, meta=meta, file_info=info, created_ms=created_ms)


def encode_log_file(instant_time: str, entries: Mapping[str, Location], deletes: Iterable[str],
                    schema: Mapping[str, Any] | str, *, zone: _dt.tzinfo = UTC, created_ms: int = 0) -> bytes:
    """One deltacommit's log file content for one file group: an HFile data block of
    ``entries`` (when there are any), then a delete block of ``deletes`` (when there are any),
    both with the instant and the record schema in their header (``HoodieAppendHandle``'s
    ``appendDataAndDeleteBlocks``; the delete block's schema is the same record schema as
    :func:`.log_file.encode_delete_block` renders it, which no reader of deletes uses)."""
    text = _schema_json(schema)
    return cells_log_file(instant_time, encode_cells(entries, text, zone=zone), deletes, text, created_ms=created_ms)


def cells_log_file(instant_time: str, cells: list[tuple[str, bytes]], deletes: Iterable[str], schema_json: str, *,
                   created_ms: int = 0) -> bytes:
    """:func:`encode_log_file` of entries already encoded (``cells``, sorted by key): a writer
    keeping what it wrote need not read the log back."""
    gone = sorted(set(deletes))
    both = set(gone) & {k for k, _ in cells}
    if both:
        raise ValueError(f"keys both placed and deleted: {sorted(both)[:5]}")
    text = schema_json
    out = b""
    if cells:
        out += encode_block(BlockType.HFILE_DATA, {HeaderKey.INSTANT_TIME: instant_time, HeaderKey.SCHEMA: text},
                            cells_hfile(cells, text, created_ms=created_ms))
    if gone:
        table = pa.table({"record_key": gone, "partition_path": [PARTITION] * len(gone)})
        out += encode_delete_block(table, instant_time=instant_time, schema=json.loads(text))
    return out


# -- decoding -----------------------------------------------------------------------------------
def decode_cells(cells: Iterable[tuple[bytes, bytes]], schema: Mapping[str, Any] | str, *,
                 source: str = "record index", zone: _dt.tzinfo = UTC) -> dict[str, Location]:
    """Record key -> location of HFile cells written in ``schema``. The decoder compiled for the
    schema reads each distinct value once (keys sharing a location share its bytes, and the
    :class:`Location`); fastavro reads a schema or bytes it does not know."""
    codec = _codec(_schema_json(schema), source)
    read: dict[bytes, Location] = {}
    out: dict[str, Location] = {}
    for k, v in cells:
        try:
            key = k.decode("utf-8")
        except UnicodeDecodeError as e:
            raise TableFormatError(f"{source}: record index key {k[:64]!r} is not UTF-8") from e
        if type(v) is not bytes:
            v = bytes(v)
        loc = read.get(v)
        if loc is None:
            loc = read[v] = _decode_entry(codec, key, v, source, zone)
        out[key] = loc
    return out


def _decode_entry(codec: _Codec, key: str, value: bytes, source: str, zone: _dt.tzinfo) -> Location:
    """One entry's location: by the compiled decoder, or fastavro for bytes it does not expect or
    an entry it does not take (which fastavro's path reads, or says what is wrong with)."""
    if codec.decoder is not None:
        try:
            record_type, values = codec.decoder.read(value)
        except Unsupported:
            pass
        else:
            loc = _compiled_location(record_type, values, zone)
            if loc is not None:
                return loc
    return _fastavro_location(codec.parsed, key, value, source, zone)


def _compiled_location(record_type: Any, values: tuple, zone: _dt.tzinfo) -> Location | None:
    """The location of a record the compiled decoder read (its values in
    :data:`.avro_encoder.RECORD_INDEX_FIELDS` order), None when :func:`_location` would refuse it."""
    partition, high, low, index, raw, millis, encoding, position = values
    if record_type != RECORD_TYPE or partition is None or millis is None:
        return None
    if encoding != ENCODING_UUID:
        file_id = raw
    elif high is None or low is None or index is None:
        return None
    else:
        file_id = _cached_uuid_file_id(high, low, index)
    if file_id is None:
        return None
    try:
        instant = _cached_instant(millis, zone)
    except TableFormatError:
        return None
    return Location(partition, file_id, instant, position)


@functools.lru_cache(maxsize=4096)
def _cached_uuid_file_id(high_bits: int, low_bits: int, file_index: int) -> str:
    return decode_file_id(FileIdParts(ENCODING_UUID, high_bits, low_bits, file_index, ""))


@functools.lru_cache(maxsize=4096)
def _cached_instant(millis: int, zone: _dt.tzinfo) -> str:
    return instant_of_millis(millis, zone)


def _fastavro_location(parsed: Any, key: str, value: bytes, source: str, zone: _dt.tzinfo) -> Location:
    """One entry's location by fastavro: the compiled decoder's reference."""
    try:
        rec = fastavro.schemaless_reader(io.BytesIO(value), parsed)
    except Exception as e:  # fastavro raises many types for bytes that do not fit the schema
        raise TableFormatError(f"{source}: record index entry {key!r} does not decode ({e})") from e
    return _location(key, rec, source, zone)


def _fastavro_decode_cells(cells: Iterable[tuple[bytes, bytes]], schema: Mapping[str, Any] | str, *,
                           source: str = "record index", zone: _dt.tzinfo = UTC) -> dict[str, Location]:
    """:func:`decode_cells` by fastavro alone, a cell at a time (the compiled decoder's reference)."""
    parsed = _codec(_schema_json(schema), source).parsed
    return {k.decode("utf-8"): _fastavro_location(parsed, k.decode("utf-8"), v, source, zone) for k, v in cells}


def _location(key: str, rec: Any, source: str, zone: _dt.tzinfo) -> Location:
    where = f"{source}: record index entry {key!r}"
    info = rec.get(_FIELD) if isinstance(rec, dict) else None
    if not isinstance(rec, dict) or rec.get("type") != RECORD_TYPE or not isinstance(info, dict):
        kind = rec.get("type") if isinstance(rec, dict) else None
        raise TableFormatError(f"{where} is a metadata record of type {kind}, not a record index entry ({RECORD_TYPE})")
    if info.get("partitionName") is None or info.get("instantTime") is None:
        raise TableFormatError(f"{where} lacks its partition or instant time")
    parts = FileIdParts(info.get("fileIdEncoding", ENCODING_UUID), info.get("fileIdHighBits"),
                        info.get("fileIdLowBits"), info.get("fileIndex"), info.get("fileId"))
    return Location(info["partitionName"], decode_file_id(parts, source=where),
                    instant_of_millis(info["instantTime"], zone), info.get("position"))


def decode_hfile(data: bytes, *, source: str = "record index HFile", zone: _dt.tzinfo = UTC) -> dict[str, Location]:
    """Record key -> location of a record-index HFile (a base file, or a log block's content)."""
    h = hfile.read(data, source=source)
    schema = h.file_info.get(b"schema")
    if schema is None:
        raise TableFormatError(f"{source}: record index HFile without a schema")
    return decode_cells(h.cells, schema.decode("utf-8", "replace"), source=source, zone=zone)


def decode_log_file(data: bytes, *, source: str = "record index log file", zone: _dt.tzinfo = UTC) -> list[Changes]:
    """What each block of a record-index log file says, in file order: an HFile data block's
    entries, a delete block's keys. A torn block is skipped, as Hudi's reader skips it; any
    other block kind is no record-index content."""
    out = []
    for b in read_log_blocks(data, source=source):
        where = f"{source}: block at offset {b.offset}"
        if b.kind == CORRUPT:
            continue
        if b.block_type == BlockType.HFILE_DATA and b.content is not None:
            out.append(Changes(b.instant_time, decode_hfile(b.content, source=where, zone=zone)))
        elif b.block_type == BlockType.DELETE:
            keys = b.records.column("record_key").to_pylist() if b.records is not None else []
            out.append(Changes(b.instant_time, deletes=[k for k in keys if k is not None]))
        else:
            raise TableFormatError(f"{where} is a {b.kind} block, not record index content")
    return out
