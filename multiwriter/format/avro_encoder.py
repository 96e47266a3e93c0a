"""``HoodieMetadataRecord`` values of the column_stats, partition_stats and record_index
partitions, encoded by code compiled once per schema.

A commit that keeps these indexes writes a record per file column and per partition column,
hundreds of them, and a record index entry per record key, up to millions. fastavro interprets
the whole record schema for each one: a dozen top-level fields, unions of wrapper records, a
dict built per record. The compiled encoders write the same bytes in a fraction of the time:
every field around the one record that varies (``ColumnStatsMetadata``,
``recordIndexMetadata``) is a constant of the call (nulls, the empty key, the record type, the
compacted file's name), and that record is written field by field with each union's branch
index and each wrapper's value type resolved once.

They follow the schema the file declares (Hudi's whole ``HoodieMetadataRecord``, or ours): its
field order, its branch indexes, the type of each wrapper's value. :meth:`RecordEncoder.compile`
returns None for a schema it does not recognise (the caller keeps fastavro), and
:meth:`RecordEncoder.encode` raises :class:`Unsupported` for a value it does not expect (the
caller encodes that record with fastavro, which writes or refuses it). Their bytes are
fastavro's ``schemaless_writer``'s, byte for byte.
"""
from __future__ import annotations

import datetime as _dt
import decimal
import struct
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

#: the values :meth:`StatsEncoder.encode` takes, in this order: ``HoodieMetadataColumnStats``'s
#: fields. ``minValue`` / ``maxValue``: None or (wrapper's full name, wrapped value);
#: ``valueType``: None or (type ordinal, additional info)
STATS_FIELDS = ("fileName", "columnName", "minValue", "maxValue", "valueCount", "nullCount", "totalSize",
                "totalUncompressedSize", "isDeleted", "isTightBound", "valueType")
_STATS_INDEX = {name: i for i, name in enumerate(STATS_FIELDS)}
#: the record field holding the column stats, and the top-level fields a stats record sets
STATS_FIELD = "ColumnStatsMetadata"
_KEY, _TYPE, _FILE_NAME = "key", "type", "_hoodie_file_name"

#: the field holding a record index entry, and ``HoodieRecordIndexInfo``'s fields (the values
#: :meth:`RecordIndexEncoder.encode` takes, in this order) with the Avro type of each
RECORD_INDEX_FIELD = "recordIndexMetadata"
RECORD_INDEX_TYPES = {"partitionName": "string", "fileIdHighBits": "long", "fileIdLowBits": "long",
                      "fileIndex": "int", "fileId": "string", "instantTime": "long", "fileIdEncoding": "int",
                      "position": "long"}
RECORD_INDEX_FIELDS = tuple(RECORD_INDEX_TYPES)
_RECORD_INDEX_INDEX = {name: i for i, name in enumerate(RECORD_INDEX_FIELDS)}

Step = Callable[[Any, list], None]
Frame = tuple[bytes, bytes]
_E = TypeVar("_E", bound="Compiled")

_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1
#: what a step raises on a value it was not compiled for (a wrong type, a number out of range)
_VALUE_ERRORS = (TypeError, ValueError, ArithmeticError, AttributeError, LookupError, struct.error)


class Unsupported(Exception):
    """A schema or value the compiled encoder does not write as fastavro would: use fastavro."""


# -- primitives --------------------------------------------------------------------------------
def _zigzag(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


_SMALL = 1 << 13
#: the varints of -8192..8191 (one or two bytes: branch indexes, lengths, most counts)
_ZIGZAG = [_zigzag(n) for n in range(-_SMALL, _SMALL)]


def varint(n: int) -> bytes:
    """Avro's zig-zag varint of a long; ValueError out of a long's range."""
    if -_SMALL <= n < _SMALL:
        return _ZIGZAG[n + _SMALL]
    if not _LONG_MIN <= n <= _LONG_MAX:
        raise ValueError(f"{n} is out of the range of an Avro long")
    return _zigzag(n)


def _long(v: Any, out: list) -> None:
    if type(v) is not int:
        raise TypeError(f"not an int: {v!r}")
    out.append(varint(v))


def _int(v: Any, out: list) -> None:
    if type(v) is not int or not _INT_MIN <= v <= _INT_MAX:
        raise TypeError(f"not an Avro int: {v!r}")
    out.append(varint(v))


def _boolean(v: Any, out: list) -> None:
    if v is True:
        out.append(b"\x01")
    elif v is False:
        out.append(b"\x00")
    else:
        raise TypeError(f"not a bool: {v!r}")


def _string(v: Any, out: list) -> None:
    if type(v) is not str:
        raise TypeError(f"not a str: {v!r}")
    b = v.encode()
    out.append(varint(len(b)))
    out.append(b)


def _bytes(v: Any, out: list) -> None:
    if type(v) is not bytes:
        raise TypeError(f"not bytes: {v!r}")
    out.append(varint(len(v)))
    out.append(v)


_PACK_FLOAT, _PACK_DOUBLE = struct.Struct("<f").pack, struct.Struct("<d").pack


def _float(v: Any, out: list) -> None:
    """A float or an int, as ``float(value)`` packed (fastavro's cast of a record field); a
    double beyond a float's range raises here (OverflowError) and fastavro decides."""
    if type(v) is not float and type(v) is not int:
        raise TypeError(f"not a number: {v!r}")
    out.append(_PACK_FLOAT(float(v)))


def _double(v: Any, out: list) -> None:
    if type(v) is not float and type(v) is not int:
        raise TypeError(f"not a number: {v!r}")
    out.append(_PACK_DOUBLE(float(v)))


def _decimal_bytes(precision: int, scale: int) -> Step:
    """``bytes`` of logical type ``decimal``: a ``Decimal`` as fastavro's
    ``prepare_bytes_decimal`` turns it into bytes (its digits at the schema's scale, in the
    fewest bytes that hold the magnitude and a sign bit), bytes as they are."""
    def step(v: Any, out: list) -> None:
        if isinstance(v, decimal.Decimal):
            sign, digits, exp = v.as_tuple()
            if len(digits) > precision or not isinstance(exp, int) or exp + scale < 0:
                raise ValueError(f"{v} does not fit decimal({precision},{scale})")
            unscaled = int("".join(map(str, digits)) or "0") * 10 ** (exp + scale)
            size = (unscaled.bit_length() + 8) // 8
            v = (-unscaled if sign else unscaled).to_bytes(size, "big", signed=True)
        _bytes(v, out)
    return step


def _time_micros(v: Any, out: list) -> None:
    """``long`` of logical type ``time-micros``: a ``time`` as its microseconds since midnight."""
    if isinstance(v, _dt.time):
        v = ((v.hour * 60 + v.minute) * 60 + v.second) * 1_000_000 + v.microsecond
    _long(v, out)


_PRIMITIVE_STEPS: dict[str, Step] = {"long": _long, "int": _int, "boolean": _boolean, "string": _string,
                                     "bytes": _bytes, "float": _float, "double": _double}


# -- compiling ---------------------------------------------------------------------------------
def _primitive(schema: Any) -> tuple[str, str | None]:
    """(type, logical type) of a primitive schema (a name, or a dict whose ``type`` is one)."""
    if isinstance(schema, str) and schema in (*_PRIMITIVE_STEPS, "null"):
        return schema, None
    if isinstance(schema, dict) and schema.get("type") in (*_PRIMITIVE_STEPS, "null"):
        return schema["type"], schema.get("logicalType")
    raise Unsupported(f"not a primitive: {schema!r}")


def _value_step(schema: Any) -> Step:
    """The step of a primitive schema; the logical types Hudi's wrappers use are converted as
    fastavro converts them, any other is left to fastavro."""
    kind, logical = _primitive(schema)
    if kind == "null":
        raise Unsupported("a null-only value")
    if logical is None:
        return _PRIMITIVE_STEPS[kind]
    if kind == "bytes" and logical == "decimal":
        return _decimal_bytes(int(schema["precision"]), int(schema.get("scale", 0)))
    if kind == "long" and logical == "time-micros":
        return _time_micros
    raise Unsupported(f"logical type {logical} of {kind}")


def _only(*kinds: str) -> Callable[[Any], Step]:
    """A builder of the step of one of the plain primitive ``kinds`` (a top-level field's)."""
    def build(schema: Any) -> Step:
        kind, logical = _primitive(schema)
        if kind not in kinds or logical is not None:
            raise Unsupported(f"{schema!r} is not one of {kinds}")
        return _PRIMITIVE_STEPS[kind]
    return build


def _nullable(schema: Any, build: Callable[[Any], Step]) -> Step:
    """The step of ``T`` or of the union of null and ``T`` (in either order)."""
    if not isinstance(schema, list):
        return build(schema)
    if len(schema) != 2 or "null" not in schema:
        raise Unsupported(f"a union other than null and one type: {schema!r}")
    null = schema.index("null")
    inner = build(schema[1 - null])
    none, tag = varint(null), varint(1 - null)

    def nullable(v: Any, out: list) -> None:
        if v is None:
            out.append(none)
        else:
            out.append(tag)
            inner(v, out)
    return nullable


class _Names:
    """The named types met so far, by full name (fastavro's parse names them all in full), so
    that a union of references (``maxValue``'s) resolves to the records ``minValue`` defined."""

    def __init__(self) -> None:
        self.defined: dict[str, Any] = {}

    def resolve(self, schema: Any) -> Any:
        if isinstance(schema, str) and schema in self.defined:
            return self.defined[schema]
        self.collect(schema)
        return schema

    def collect(self, schema: Any) -> None:
        """Record every named type ``schema`` defines (a field type skipped as a constant may
        define the wrappers a later field refers to)."""
        if isinstance(schema, list):
            for branch in schema:
                self.collect(branch)
        elif isinstance(schema, dict):
            if schema.get("type") in ("record", "error", "enum", "fixed") and "name" in schema:
                self.defined.setdefault(schema["name"], schema)
            for f in schema.get("fields") or []:
                self.collect(f.get("type"))
            for key in ("items", "values"):
                if key in schema:
                    self.collect(schema[key])


def _branch_name(schema: Any) -> str:
    """The name fastavro matches a union value's tuple notation against."""
    if isinstance(schema, dict):
        return schema["name"] if schema.get("type") in ("record", "error", "enum", "fixed") else schema.get("type")
    return schema


def _wrapper_union(schema: Any, names: _Names) -> Step:
    """``minValue`` / ``maxValue``: null, or one of the wrapper records (a record of one field,
    ``value``), by full name. A branch of another shape (``ArrayWrapper``) is left to fastavro."""
    if not isinstance(schema, list):
        raise Unsupported("a wrapper field that is not a union")
    null = varint(schema.index("null")) if "null" in schema else None
    branches: dict[str, tuple[bytes, Step]] = {}
    for i, branch in enumerate(schema):
        resolved = names.resolve(branch)
        if not isinstance(resolved, dict) or resolved.get("type") != "record":
            continue
        fields = resolved.get("fields") or []
        if len(fields) != 1 or fields[0]["name"] != "value":
            continue
        try:
            branches.setdefault(_branch_name(branch), (varint(i), _value_step(fields[0]["type"])))
        except Unsupported:
            continue

    def wrapper(v: Any, out: list) -> None:
        if v is None:
            if null is None:
                raise ValueError("null for a union without null")
            out.append(null)
            return
        name, value = v
        tag, step = branches[name]  # KeyError: a branch left to fastavro
        out.append(tag)
        step(value, out)
    return wrapper


def _value_type(schema: Any, names: _Names) -> Step:
    """``HoodieValueTypeInfo``: ``typeOrdinal`` and ``additionalInfo`` (the value's two items),
    in the order the schema declares them."""
    record = names.resolve(schema)
    if not isinstance(record, dict) or record.get("type") != "record":
        raise Unsupported(f"valueType is not a record: {record!r}")
    fields = record.get("fields") or []
    if sorted(f["name"] for f in fields) != ["additionalInfo", "typeOrdinal"]:
        raise Unsupported("valueType's fields are not typeOrdinal and additionalInfo")
    steps = [(0, _nullable(f["type"], _value_step)) if f["name"] == "typeOrdinal"
             else (1, _nullable(f["type"], _value_step)) for f in fields]

    def value_type(v: Any, out: list) -> None:
        for i, step in steps:
            step(v[i], out)
    return value_type


def _stats_step(name: str, schema: Any, names: _Names) -> Step:
    """The step of a ``HoodieMetadataColumnStats`` field; one this encoder does not know (a
    later release's) leaves the schema to fastavro, which writes its default."""
    if name in ("minValue", "maxValue"):
        return _wrapper_union(schema, names)
    if name == "valueType":
        return _nullable(schema, lambda s: _value_type(s, names))
    if name in _STATS_INDEX:
        step = _nullable(schema, _value_step)
        names.collect(schema)
        return step
    raise Unsupported(f"HoodieMetadataColumnStats field {name!r} is not one this encoder writes")


def _union_record(schema: Any, names: _Names, field: str) -> tuple[bytes, dict[str, Any]]:
    """(branch index bytes, record schema) of a top-level field that is the union of null and
    one record (or that record alone)."""
    tag = b""
    record = schema
    if isinstance(schema, list):
        records = [(i, b) for i, b in enumerate(schema) if isinstance(names.resolve(b), dict)]
        if len(records) != 1:
            raise Unsupported(f"{field} is not a union of null and one record")
        i, record = records[0]
        tag = varint(i)
    record = names.resolve(record)
    if not isinstance(record, dict) or record.get("type") != "record":
        raise Unsupported(f"{field} holds no record")
    return tag, record


def _stats_record(schema: Any, names: _Names) -> tuple[bytes, list[tuple[int, Step]]]:
    """(branch index bytes, steps) of the ``ColumnStatsMetadata`` field: the union of null and
    ``HoodieMetadataColumnStats`` (or that record alone)."""
    tag, record = _union_record(schema, names, STATS_FIELD)
    steps = [(f["name"], _stats_step(f["name"], f["type"], names)) for f in record["fields"]]
    return tag, [(_STATS_INDEX[name], step) for name, step in steps]


def _record_index_record(schema: Any, names: _Names) -> tuple[bytes, list[tuple[int, Step]]]:
    """(branch index bytes, steps) of the ``recordIndexMetadata`` field: the union of null and
    ``HoodieRecordIndexInfo``, whose fields are written in the schema's order; a field this
    encoder does not know (a later release's) leaves the schema to fastavro."""
    tag, record = _union_record(schema, names, RECORD_INDEX_FIELD)
    steps = []
    for f in record["fields"]:
        kind = RECORD_INDEX_TYPES.get(f["name"])
        if kind is None:
            raise Unsupported(f"HoodieRecordIndexInfo field {f['name']!r} is not one this encoder writes")
        steps.append((_RECORD_INDEX_INDEX[f["name"]], _nullable(f["type"], _only(kind))))
    return tag, steps


def _top_step(name: str, schema: Any) -> Step:
    """The step of a top-level field other than the compiled record: the key (empty), the record
    type, the compacted file's name; every other field is null."""
    if name in (_KEY, _FILE_NAME):
        return _nullable(schema, _only("string"))
    if name == _TYPE:
        return _nullable(schema, _only("int", "long"))
    if schema == "null":
        return lambda v, out: None
    if isinstance(schema, list) and "null" in schema:
        null = varint(schema.index("null"))
        return lambda v, out: out.append(null)
    raise Unsupported(f"field {name!r} cannot be null")


class Compiled:
    """Code compiled once per ``HoodieMetadataRecord`` schema (an encoder, a decoder): None for a
    schema it does not know, whose values fastavro then reads or writes."""

    @classmethod
    def compile(cls: type[_E], parsed_schema: Mapping[str, Any]) -> _E | None:
        """The code of ``parsed_schema`` (fastavro's parsed form of a ``HoodieMetadataRecord``
        schema), or None when it is not one this code handles."""
        try:
            return cls._compile(parsed_schema)
        except (Unsupported, KeyError, TypeError, ValueError, AttributeError):
            return None

    @classmethod
    def _compile(cls: type[_E], schema: Mapping[str, Any]) -> _E:
        raise NotImplementedError


class RecordEncoder(Compiled):
    """Encodes ``HoodieMetadataRecord`` values of one kind in one schema: the record of one
    field (:attr:`FIELD`) written by compiled steps, every other field a constant of the call.

    Use: ``frame = enc.frame(record_type, file_name)`` once per record type of a call, then
    ``enc.encode(frame, values)`` per record (``values`` in the order of the subclass's fields)."""

    #: the top-level field whose record varies from value to value
    FIELD = ""

    def __init__(self, head: list[tuple[str, Step]], tag: bytes, steps: list[tuple[int, Step]],
                 tail: list[tuple[str, Step]]) -> None:
        self._head, self._tag, self._steps, self._tail = head, tag, steps, tail

    @classmethod
    def _body(cls, schema: Any, names: _Names) -> tuple[bytes, list[tuple[int, Step]]]:
        """(branch index bytes, steps) of :attr:`FIELD`'s type."""
        raise NotImplementedError

    @classmethod
    def _compile(cls: type[_E], schema: Mapping[str, Any]) -> _E:
        if schema.get("type") != "record":
            raise Unsupported("not a record schema")
        names = _Names()
        head: list[tuple[str, Step]] = []
        tail: list[tuple[str, Step]] = []
        tag, steps = None, None
        for f in schema["fields"]:
            if f["name"] == cls.FIELD:
                tag, steps = cls._body(f["type"], names)
                continue
            (head if steps is None else tail).append((f["name"], _top_step(f["name"], f["type"])))
            names.collect(f["type"])
        if steps is None or tag is None:
            raise Unsupported(f"no {cls.FIELD} field")
        return cls(head, tag, steps, tail)

    def frame(self, record_type: int, file_name: str | None) -> Frame:
        """The bytes before and after :attr:`FIELD`'s record in a record of ``record_type``,
        whose ``_hoodie_file_name`` is ``file_name``."""
        values = {_KEY: "", _TYPE: record_type, _FILE_NAME: file_name}
        before: list[bytes] = []
        after: list[bytes] = []
        try:
            for name, step in self._head:
                step(values.get(name), before)
            for name, step in self._tail:
                step(values.get(name), after)
        except _VALUE_ERRORS as e:
            raise Unsupported(f"record type {record_type!r}, file name {file_name!r}: {e}") from e
        return b"".join(before) + self._tag, b"".join(after)

    def encode(self, frame: Frame, values: tuple) -> bytes:
        """One record: ``frame`` around :attr:`FIELD`'s record of ``values``."""
        out = [frame[0]]
        try:
            for i, step in self._steps:
                step(values[i], out)
        except _VALUE_ERRORS as e:
            raise Unsupported(f"{type(e).__name__}: {e}") from e
        out.append(frame[1])
        return b"".join(out)


class StatsEncoder(RecordEncoder):
    """Column or partition stats records (types 3 and 6): ``values`` in :data:`STATS_FIELDS`
    order."""

    FIELD = STATS_FIELD

    @classmethod
    def _body(cls, schema: Any, names: _Names) -> tuple[bytes, list[tuple[int, Step]]]:
        return _stats_record(schema, names)


class RecordIndexEncoder(RecordEncoder):
    """Record index entries (type 5): ``values`` in :data:`RECORD_INDEX_FIELDS` order."""

    FIELD = RECORD_INDEX_FIELD

    @classmethod
    def _body(cls, schema: Any, names: _Names) -> tuple[bytes, list[tuple[int, Step]]]:
        return _record_index_record(schema, names)
