"""Record index entries (``HoodieMetadataRecord`` values of the record_index partition) read
straight from their Avro bytes by code compiled once per schema.

A lookup decodes an entry per key it finds, a compaction every entry of a file group.
fastavro interprets the whole record schema for each one and builds a dict per record; the
compiled decoder skips the fields before and after ``recordIndexMetadata`` (nulls, the empty
key, the file name) and reads ``HoodieRecordIndexInfo``'s fields as the schema orders them.

It follows the schema the file declares (Hudi's whole ``HoodieMetadataRecord``, or ours): its
field order and its branch indexes. :meth:`RecordIndexDecoder.compile` returns None for a schema
it does not recognise, and :meth:`RecordIndexDecoder.read` raises :class:`Unsupported` for bytes
it does not expect (a branch other than null or a primitive before the entry, a null entry,
truncated bytes, an overlong number, a string that is not UTF-8): the caller decodes those with
fastavro, which reads them or says why not. What it reads is what fastavro reads.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .avro_encoder import RECORD_INDEX_FIELD, RECORD_INDEX_FIELDS, RECORD_INDEX_TYPES, Compiled, Unsupported

#: reads one value at a position of the bytes: (value, next position)
Reader = Callable[[bytes, int], tuple[Any, int]]

#: what a reader raises on bytes that end early or do not fit (beside :class:`Unsupported`)
_BYTE_ERRORS = (IndexError, UnicodeDecodeError)
#: ``HoodieRecordIndexInfo``'s values when the schema lacks a field (fastavro leaves it out of
#: the record, and a reader takes None, or encoding 0 for ``fileIdEncoding``)
_ABSENT = tuple(0 if name == "fileIdEncoding" else None for name in RECORD_INDEX_FIELDS)
_INDEX = {name: i for i, name in enumerate(RECORD_INDEX_FIELDS)}


# -- primitives --------------------------------------------------------------------------------
def read_long(data: bytes, pos: int) -> tuple[int, int]:
    """Avro's zig-zag varint at ``pos``; Unsupported for one of more than ten bytes or 64 bits,
    IndexError for one cut short."""
    b = data[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    n, shift = b & 0x7F, 7
    while True:
        pos += 1
        b = data[pos]
        n |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > 63:
            raise Unsupported("an overlong number")
    if n >> 64:
        raise Unsupported("a number beyond 64 bits")
    return (n >> 1) ^ -(n & 1), pos + 1


def _read_null(data: bytes, pos: int) -> tuple[None, int]:
    return None, pos


def _read_bytes(data: bytes, pos: int) -> tuple[bytes, int]:
    n, pos = read_long(data, pos)
    end = pos + n
    if n < 0 or end > len(data):
        raise Unsupported("a length beyond the bytes")
    return data[pos:end], end


def _read_string(data: bytes, pos: int) -> tuple[str, int]:
    b, pos = _read_bytes(data, pos)
    return b.decode("utf-8"), pos


_READERS: dict[str, Reader] = {"null": _read_null, "int": read_long, "long": read_long, "string": _read_string,
                               "bytes": _read_bytes}


# -- compiling ---------------------------------------------------------------------------------
def _kind(schema: Any) -> str | None:
    """The primitive type of ``schema`` without a logical type (a name, or a dict whose ``type`` is
    one), None for any other schema."""
    if isinstance(schema, dict) and "logicalType" not in schema:
        schema = schema.get("type")
    return schema if isinstance(schema, str) and schema in _READERS else None


def _union(branches: list[Reader | None]) -> Reader:
    """A union's reader: its branch index, then that branch; a branch without a reader (a record,
    a map, another type) is left to fastavro."""
    def union(data: bytes, pos: int) -> tuple[Any, int]:
        i = data[pos]  # a one-byte index, 0 to 63, but for a union of more branches
        if i < 0x80:
            i, pos = (i >> 1) ^ -(i & 1), pos + 1
        else:
            i, pos = read_long(data, pos)
        read = branches[i] if 0 <= i < len(branches) else None
        if read is None:
            raise Unsupported(f"union branch {i}")
        return read(data, pos)
    return union


def _field_reader(schema: Any) -> Reader:
    """The reader of a field around the entry: a primitive, or a union of primitives and of other
    types whose values it leaves to fastavro."""
    if isinstance(schema, list):
        return _union([_READERS[k] if (k := _kind(b)) else None for b in schema])
    kind = _kind(schema)
    if kind is None:
        raise Unsupported(f"a field of type {schema!r}")
    return _READERS[kind]


def _info_reader(name: str, schema: Any) -> Reader:
    """The reader of a ``HoodieRecordIndexInfo`` field: its type, or the union of null and it."""
    want = RECORD_INDEX_TYPES.get(name)
    if want is None:
        raise Unsupported(f"HoodieRecordIndexInfo field {name!r} is not one this decoder reads")
    branches = schema if isinstance(schema, list) else [schema]
    kinds = [_kind(b) for b in branches]
    if not 1 <= len(kinds) <= 2 or want not in kinds or any(k not in (want, "null") for k in kinds):
        raise Unsupported(f"HoodieRecordIndexInfo field {name!r} is not a {want} or null")
    if not isinstance(schema, list):
        return _READERS[want]
    return _union([_READERS[k] for k in kinds])


def _info_record(schema: Any) -> tuple[int, list[tuple[int, Reader]]]:
    """(branch index, readers by value position) of ``recordIndexMetadata``: the union of null and
    ``HoodieRecordIndexInfo`` (or that record alone, branch -1)."""
    branch, record = -1, schema
    if isinstance(schema, list):
        records = [(i, b) for i, b in enumerate(schema) if isinstance(b, dict) and b.get("type") == "record"]
        if len(records) != 1 or any(b != "null" for b in schema if isinstance(b, str)):
            raise Unsupported(f"{RECORD_INDEX_FIELD} is not a union of null and one record")
        branch, record = records[0]
    if not isinstance(record, dict) or record.get("type") != "record":
        raise Unsupported(f"{RECORD_INDEX_FIELD} holds no record")
    return branch, [(_INDEX[f["name"]], _info_reader(f["name"], f["type"])) for f in record["fields"]]


class RecordIndexDecoder(Compiled):
    """Reads the record type and ``HoodieRecordIndexInfo`` of ``HoodieMetadataRecord`` values in
    one schema."""

    def __init__(self, head: list[tuple[str, Reader]], branch: int, steps: list[tuple[int, Reader]],
                 tail: list[Reader]) -> None:
        self._head, self._branch, self._steps, self._tail = head, branch, steps, tail
        #: the bytes of the fields before the entry last read, and the record type they hold:
        #: the values of a file share them (nulls, the empty key, the type, the file's name)
        self._last_head: tuple[bytes, Any] | None = None

    @classmethod
    def _compile(cls, schema: Mapping[str, Any]) -> RecordIndexDecoder:
        if schema.get("type") != "record":
            raise Unsupported("not a record schema")
        head: list[tuple[str, Reader]] = []
        tail: list[Reader] = []
        found: tuple[int, list[tuple[int, Reader]]] | None = None
        for f in schema["fields"]:
            if f["name"] == RECORD_INDEX_FIELD:
                found = _info_record(f["type"])
            elif found is None:
                head.append((f["name"], _field_reader(f["type"])))
            else:
                tail.append(_field_reader(f["type"]))
        if found is None or "type" not in dict(head):
            raise Unsupported(f"no {RECORD_INDEX_FIELD} field, or no type before it")
        return cls(head, found[0], found[1], tail)

    def read(self, data: bytes) -> tuple[Any, tuple]:
        """(record type, ``HoodieRecordIndexInfo``'s values in
        :data:`~.avro_encoder.RECORD_INDEX_FIELDS` order) of one value."""
        try:
            return self._read(data)
        except _BYTE_ERRORS as e:
            raise Unsupported(f"{type(e).__name__}: {e}") from e

    def _read(self, data: bytes) -> tuple[Any, tuple]:
        last = self._last_head
        if last is not None and data.startswith(last[0]):  # the same bytes read as the same values
            pos, record_type = len(last[0]), last[1]
        else:
            pos, record_type = self._read_head(data)
            self._last_head = (data[:pos], record_type)
        if self._branch >= 0:
            branch, pos = read_long(data, pos)
            if branch != self._branch:
                raise Unsupported(f"{RECORD_INDEX_FIELD} branch {branch}")
        values = list(_ABSENT)
        for i, read in self._steps:
            values[i], pos = read(data, pos)
        for read in self._tail:
            _, pos = read(data, pos)
        return record_type, tuple(values)

    def _read_head(self, data: bytes) -> tuple[int, Any]:
        """(position after, record type) of the fields before the entry."""
        pos = 0
        record_type = None
        for name, read in self._head:
            value, pos = read(data, pos)
            if name == "type":
                record_type = value
        return pos, record_type
