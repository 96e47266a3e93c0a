"""Arrow <-> Avro schema conversion for ``hoodie.table.create.schema`` and ``extraMetadata.schema``.

Hudi records the table schema as Avro. Avro has fewer integer widths than Arrow, so each field
carries an ``arrowType`` attribute (ignored by other Avro readers) that lets us restore the exact
Arrow type of primitive columns.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from ..errors import SchemaMismatchError, TableFormatError

META_COLUMNS = (
    "_hoodie_commit_time",
    "_hoodie_commit_seqno",
    "_hoodie_record_key",
    "_hoodie_partition_path",
    "_hoodie_file_name",
)
META_SCHEMA = pa.schema([pa.field(c, pa.string(), nullable=True) for c in META_COLUMNS])

_PRIMS: dict[str, tuple[pa.DataType, str]] = {
    "bool": (pa.bool_(), "boolean"),
    "int8": (pa.int8(), "int"),
    "int16": (pa.int16(), "int"),
    "int32": (pa.int32(), "int"),
    "uint8": (pa.uint8(), "int"),
    "uint16": (pa.uint16(), "int"),
    "int64": (pa.int64(), "long"),
    "uint32": (pa.uint32(), "long"),
    "float": (pa.float32(), "float"),
    "double": (pa.float64(), "double"),
    "string": (pa.string(), "string"),
    "large_string": (pa.large_string(), "string"),
    "binary": (pa.binary(), "bytes"),
    "large_binary": (pa.large_binary(), "bytes"),
}


def data_schema(schema: pa.Schema) -> pa.Schema:
    """The schema without Hudi's meta columns."""
    return pa.schema([f for f in schema if f.name not in META_COLUMNS])


def with_meta(schema: pa.Schema) -> pa.Schema:
    return pa.schema(list(META_SCHEMA) + list(data_schema(schema)))


#: an Avro name (Avro 1.11 specification, "Names"): what Hudi's JVM ``Schema.Parser`` accepts
_AVRO_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def invalid_avro_names(schema: pa.Schema) -> list[str]:
    """Column names of ``schema`` (nested struct fields as ``a.b``) that are not Avro names: a
    JVM reader refuses a table schema holding one (``org.apache.avro.SchemaParseException``)."""
    out: list[str] = []

    def visit(f: pa.Field, prefix: str) -> None:
        path = f"{prefix}{f.name}"
        if not _AVRO_NAME.fullmatch(f.name):
            out.append(path)
        t = f.type
        while pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
            t = t.item_type if pa.types.is_map(t) else t.value_type
        if pa.types.is_struct(t):
            for i in range(t.num_fields):
                visit(t.field(i), path + ".")

    for f in schema:
        visit(f, "")
    return out


def arrow_to_avro(schema: pa.Schema, name: str, namespace: str | None = None) -> dict[str, Any]:
    ns = namespace or f"hoodie.{name}"
    rec = f"{name}_record"
    return {
        "type": "record",
        "name": rec,
        "namespace": ns,
        "fields": [_field(f, f"{ns}.{rec}") for f in data_schema(schema)],
    }


def arrow_to_avro_json(schema: pa.Schema, name: str) -> str:
    return json.dumps(arrow_to_avro(schema, name), separators=(",", ":"))


def _field(f: pa.Field, ns: str) -> dict[str, Any]:
    d: dict[str, Any] = {"name": f.name, "type": ["null", _type(f.type, f.name, ns)], "default": None}
    key = _prim_key(f.type)
    if key:
        d["arrowType"] = key
    return d


def _prim_key(t: pa.DataType) -> str | None:
    for k, (pt, _) in _PRIMS.items():
        if t == pt:
            return k
    return None


def _type(t: pa.DataType, name: str, ns: str) -> Any:
    key = _prim_key(t)
    if key:
        return _PRIMS[key][1]
    if pa.types.is_decimal(t):
        return {"type": "fixed", "name": "fixed", "namespace": f"{ns}.{name}", "size": decimal_fixed_size(t.precision),
                "logicalType": "decimal", "precision": t.precision, "scale": t.scale}
    if pa.types.is_date32(t):
        return {"type": "int", "logicalType": "date"}
    if pa.types.is_timestamp(t):
        lt = "timestamp-millis" if t.unit in ("s", "ms") else "timestamp-micros"
        if t.tz is None:
            lt = "local-" + lt
        return {"type": "long", "logicalType": lt}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return {"type": "array", "items": ["null", _type(t.value_type, name, ns)]}
    if pa.types.is_map(t):
        return {"type": "map", "values": ["null", _type(t.item_type, name, ns)]}
    if pa.types.is_struct(t):
        return {"type": "record", "name": name, "namespace": ns,
                "fields": [_field(t.field(i), f"{ns}.{name}") for i in range(t.num_fields)]}
    raise SchemaMismatchError(f"column {name!r}: Arrow type {t} has no Hudi/Avro equivalent")


def decimal_fixed_size(precision: int) -> int:
    """The bytes of the Avro ``fixed`` holding a decimal of ``precision`` digits: the fewest whose
    two's complement holds every such value, as Spark sizes it (``Decimal.minBytesForPrecision``),
    so a JVM reader resolves our schema against Spark's (decimal(10,2): 5 bytes)."""
    n = 1
    while 2 ** (8 * n - 1) < 10**precision:
        n += 1
    return n


def avro_to_arrow(avro: str | dict[str, Any], *, source: str = "schema") -> pa.Schema:
    try:
        doc = json.loads(avro) if isinstance(avro, str) else avro
        return pa.schema([_afield(f) for f in doc["fields"]])
    except (ValueError, KeyError, TypeError) as e:
        raise TableFormatError(f"{source}: unreadable Avro schema ({e})") from e


def _afield(f: dict[str, Any]) -> pa.Field:
    hint = f.get("arrowType")
    if hint in _PRIMS:
        return pa.field(f["name"], _PRIMS[hint][0], nullable=True)
    return pa.field(f["name"], _atype(f["type"]), nullable=True)


def _atype(t: Any) -> pa.DataType:
    if isinstance(t, list):
        non_null = [x for x in t if x != "null"]
        return _atype(non_null[0]) if non_null else pa.null()
    if isinstance(t, str):
        return {"boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(), "float": pa.float32(),
                "double": pa.float64(), "string": pa.string(), "bytes": pa.binary()}[t]
    lt = t.get("logicalType")
    typ = t["type"]
    if lt == "decimal":
        return pa.decimal128(t["precision"], t.get("scale", 0))
    if lt == "date":
        return pa.date32()
    if lt in ("timestamp-micros", "timestamp-millis"):
        return pa.timestamp("us" if lt.endswith("micros") else "ms", tz="UTC")
    if lt in ("local-timestamp-micros", "local-timestamp-millis"):
        return pa.timestamp("us" if lt.endswith("micros") else "ms")
    if typ == "array":
        return pa.list_(_atype(t["items"]))
    if typ == "map":
        return pa.map_(pa.string(), _atype(t["values"]))
    if typ == "record":
        return pa.struct([_afield(f) for f in t["fields"]])
    if typ == "fixed":
        return pa.binary(t["size"])
    return _atype(typ)


def check_compatible(
    table: pa.Schema,
    batch: pa.Schema,
    *,
    instant: str = "",
    required: Iterable[str] = (),
    allow_missing: bool = False,
) -> pa.Schema:
    """Validate a batch against the table schema; return the evolved table schema.

    New columns are appended as nullable and a column whose batch type holds every value of
    the table type (:func:`widens`) takes the wider type: both are schema evolution. With
    ``allow_missing`` a batch may omit nullable table columns outside ``required`` (they are
    written as null); any other missing or retyped column raises
    :class:`SchemaMismatchError` before anything is written.
    """
    table, batch = data_schema(table), data_schema(batch)
    where = f" (instant {instant})" if instant else ""
    _check_missing(table, batch, where, set(required), allow_missing)
    fields: list[pa.Field] = []
    retyped: list[str] = []
    for f in table:
        i = batch.get_field_index(f.name)
        if i < 0:
            fields.append(f)
            continue
        bt = batch.field(i).type
        if _same_type(f.type, bt):
            fields.append(f)
        elif widens(f.type, bt):
            fields.append(pa.field(f.name, bt, nullable=True))
        else:
            retyped.append(f"{f.name}: table {f.type} vs batch {bt}")
    if retyped:
        raise SchemaMismatchError(
            f"batch{where} changes column types: {'; '.join(retyped)}; a column may only widen "
            "losslessly (e.g. int32 -> int64, float -> double)"
        )
    added = [pa.field(f.name, f.type, nullable=True) for f in batch if table.get_field_index(f.name) < 0]
    bad = invalid_avro_names(pa.schema(added))
    if bad:
        raise SchemaMismatchError(
            f"batch{where} adds columns {bad} whose names are not Avro names (letters, digits and _, not "
            "starting with a digit): Hudi's JVM readers could no longer parse the table schema; rename them"
        )
    return pa.schema(fields + added)


def _check_missing(table: pa.Schema, batch: pa.Schema, where: str, required: set[str], allow_missing: bool) -> None:
    missing = [f for f in table if batch.get_field_index(f.name) < 0]
    if not missing:
        return
    if not allow_missing:
        raise SchemaMismatchError(
            f"batch{where} lacks table columns {[f.name for f in missing]}; send every column (nulls are "
            "fine) or set WriterConfig(allow_missing_columns=True) to write omitted columns as null"
        )
    needed = [f.name for f in missing if f.name in required or not f.nullable]
    if needed:
        raise SchemaMismatchError(
            f"batch{where} lacks required columns {needed} (record key, partition and ordering fields "
            "and non-nullable columns must be sent; other columns may be omitted and are written as null)"
        )


def widens(old: pa.DataType, new: pa.DataType) -> bool:
    """True when ``new`` holds every value of ``old`` exactly (equal types included).

    These are the only type changes schema evolution makes: files written with ``old`` stay
    readable as ``new`` without a rewrite, so no writer's data is lost or altered.
    """
    if old == new or _same_repr(old, new):
        return True
    if pa.types.is_integer(old) and pa.types.is_integer(new):
        if pa.types.is_signed_integer(old):
            return pa.types.is_signed_integer(new) and new.bit_width >= old.bit_width
        return new.bit_width > old.bit_width or (pa.types.is_unsigned_integer(new) and new.bit_width == old.bit_width)
    if pa.types.is_floating(old) and pa.types.is_floating(new):
        return new.bit_width >= old.bit_width
    if pa.types.is_decimal(old) and pa.types.is_decimal(new):
        return new.scale >= old.scale and new.precision - new.scale >= old.precision - old.scale
    return False


def _same_repr(a: pa.DataType, b: pa.DataType) -> bool:
    """Arrow types Avro stores alike (string/large_string, binary/large_binary)."""
    strings = (pa.string(), pa.large_string())
    binaries = (pa.binary(), pa.large_binary())
    return (a in strings and b in strings) or (a in binaries and b in binaries)


def _same_type(a: pa.DataType, b: pa.DataType) -> bool:
    if a == b:
        return True
    # Accept what Avro cannot tell apart and casts losslessly into the table type.
    if pa.types.is_timestamp(a) and pa.types.is_timestamp(b):
        return True
    if pa.types.is_string(a) and pa.types.is_large_string(b) or pa.types.is_large_string(a) and pa.types.is_string(b):
        return True
    if pa.types.is_integer(a) and pa.types.is_integer(b):
        return pa.types.is_signed_integer(a) and a.bit_width >= b.bit_width
    if pa.types.is_struct(a) and pa.types.is_struct(b):
        return all(b.get_field_index(a.field(i).name) >= 0 and _same_type(a.field(i).type, b.field(b.get_field_index(a.field(i).name)).type) for i in range(a.num_fields))
    if (pa.types.is_list(a) or pa.types.is_large_list(a)) and (pa.types.is_list(b) or pa.types.is_large_list(b)):
        return _same_type(a.value_type, b.value_type)
    if pa.types.is_map(a) and pa.types.is_map(b):
        return _same_type(a.key_type, b.key_type) and _same_type(a.item_type, b.item_type)
    if pa.types.is_floating(a) and pa.types.is_floating(b):
        return a.bit_width >= b.bit_width
    return False
