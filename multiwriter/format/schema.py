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
import pyarrow.compute as pc

from ..errors import SchemaMismatchError, TableFormatError
from . import names

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
    """A nullable field is Avro's ``["null", T]`` with default null; a non-nullable one is plain
    ``T``, as Hudi records a NOT NULL column, so the table schema keeps the constraint."""
    t = _type(f.type, f.name, ns)
    d: dict[str, Any] = {"name": f.name, "type": ["null", t], "default": None} if f.nullable else {"name": f.name, "type": t}
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


def inline_named_types(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with every reference to a named record, enum or fixed type replaced by its
    definition. Avro writes a named type once and refers to it by (full) name afterwards, as in
    a CDC block's schema, whose ``before`` and ``after`` images share the table's record type."""
    named: dict[str, Any] = {}

    def walk(t: Any, ns: str | None) -> Any:
        if isinstance(t, list):
            return [walk(b, ns) for b in t]
        if isinstance(t, str):
            return named.get(t) or named.get(f"{ns}.{t}") or t
        if not isinstance(t, dict):
            return t
        own_ns = t.get("namespace", ns)
        out = dict(t)
        if "name" in t and t.get("type") in ("record", "enum", "fixed"):
            full = t["name"] if "." in t["name"] or not own_ns else f"{own_ns}.{t['name']}"
            named[full] = named[t["name"]] = out
        if t.get("type") == "record":
            out["fields"] = [{**f, "type": walk(f["type"], own_ns)} for f in t.get("fields", [])]
        for key in ("items", "values"):
            if key in t:
                out[key] = walk(t[key], own_ns)
        return out

    return walk(schema, schema.get("namespace"))


def _afield(f: dict[str, Any]) -> pa.Field:
    hint = f.get("arrowType")
    nullable = _nullable(f["type"])
    if hint in _PRIMS:
        return pa.field(f["name"], _PRIMS[hint][0], nullable=nullable)
    return pa.field(f["name"], _atype(f["type"]), nullable=nullable)


def _nullable(t: Any) -> bool:
    return t == "null" or (isinstance(t, list) and "null" in t)


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

    New columns are appended as nullable, fields new inside a struct (also inside lists and
    maps) are appended to that struct, and a column whose batch type holds every value of the
    table type (:func:`widens`) takes the wider type: all three are schema evolution, so no value
    a batch sends is dropped by a cast. With ``allow_missing`` a batch may omit nullable table
    columns (and struct fields) outside ``required``; any other missing or retyped column raises
    :class:`SchemaMismatchError` before anything is written.
    """
    table, batch = data_schema(table), data_schema(batch)
    where = f" (instant {instant})" if instant else ""
    fields: list[pa.Field] = []
    retyped: list[str] = []
    missing: list[str] = [f.name for f in table if batch.get_field_index(f.name) < 0]
    for f in table:
        i = batch.get_field_index(f.name)
        if i < 0:
            fields.append(f)
            continue
        bt = batch.field(i).type
        t = evolve_type(f.type, bt, f.name, missing)
        if t is None:
            retyped.append(f"{f.name}: table {f.type} vs batch {bt}")
        else:
            fields.append(pa.field(f.name, t, nullable=f.nullable))
    _check_missing(table, missing, where, set(required), allow_missing)
    if retyped:
        raise SchemaMismatchError(
            f"batch{where} changes column types: {'; '.join(retyped)}; a column may only widen "
            "losslessly (e.g. int32 -> int64, float -> double) or gain struct fields"
        )
    added = [pa.field(f.name, f.type, nullable=True) for f in batch if table.get_field_index(f.name) < 0]
    names.check(error=SchemaMismatchError, where=f"batch{where}", columns=[f.name for f in added])
    bad = invalid_avro_names(pa.schema(added))
    if bad:
        raise SchemaMismatchError(
            f"batch{where} adds columns {bad} whose names are not Avro names (letters, digits and _, not "
            "starting with a digit): Hudi's JVM readers could no longer parse the table schema; rename them"
        )
    return pa.schema(fields + added)


def missing_columns(table: pa.Schema, batch: pa.Schema) -> list[str]:
    """The columns (and dotted struct fields) of ``table`` that ``batch`` lacks."""
    table, batch = data_schema(table), data_schema(batch)
    missing = [f.name for f in table if batch.get_field_index(f.name) < 0]
    for f in table:
        i = batch.get_field_index(f.name)
        if i >= 0:
            evolve_type(f.type, batch.field(i).type, f.name, missing)
    return missing


def _check_missing(table: pa.Schema, missing: list[str], where: str, required: set[str], allow_missing: bool) -> None:
    """Hudi's default (``hoodie.write.set.null.for.missing.columns=false``): a batch lacking table
    columns is refused, since writing them as null would blank values another writer sent."""
    if not missing:
        return
    if not allow_missing:
        raise SchemaMismatchError(
            f"batch{where} lacks table columns {missing}; send every column (nulls are fine), or set "
            "WriterConfig(allow_missing_columns=True) (hoodie.write.set.null.for.missing.columns=true) to write "
            "omitted nullable columns as null"
        )
    top = {f.name: f for f in table}
    needed = [m for m in missing if m in required or (m in top and not top[m].nullable)]
    if needed:
        raise SchemaMismatchError(
            f"batch{where} lacks required columns {needed} (record key, partition and ordering fields "
            "and non-nullable columns must be sent; other columns may be omitted)"
        )


def evolve_type(table: pa.DataType, batch: pa.DataType, path: str, missing: list[str]) -> pa.DataType | None:
    """The type a column takes when ``batch`` values are written into a ``table`` column, or
    None when the batch contradicts it. Fields a batch struct adds are appended (nullable);
    struct fields it lacks are appended to ``missing`` by dotted path; a primitive keeps the
    table type when the batch is narrower and takes the batch type when it widens the table's."""
    if pa.types.is_struct(table) and pa.types.is_struct(batch):
        return _evolve_struct(table, batch, path, missing)
    if _is_list(table) and _is_list(batch):
        item = evolve_type(table.value_type, batch.value_type, f"{path}.element", missing)
        return None if item is None else _relist(table, item)
    if pa.types.is_map(table) and pa.types.is_map(batch):
        if not (_same_type(table.key_type, batch.key_type) or widens(table.key_type, batch.key_type)):
            return None
        item = evolve_type(table.item_type, batch.item_type, f"{path}.value", missing)
        return None if item is None else pa.map_(table.key_type, item)
    if _nested(table) or _nested(batch):
        return None
    if _same_type(table, batch):
        return table
    return batch if widens(table, batch) else None


def _evolve_struct(table: pa.StructType, batch: pa.StructType, path: str, missing: list[str]) -> pa.DataType | None:
    fields: list[pa.Field] = []
    for f in table:
        i = batch.get_field_index(f.name)
        if i < 0:
            missing.append(f"{path}.{f.name}")
            fields.append(f)
            continue
        t = evolve_type(f.type, batch.field(i).type, f"{path}.{f.name}", missing)
        if t is None:
            return None
        fields.append(pa.field(f.name, t, nullable=f.nullable))
    fields += [pa.field(f.name, f.type, nullable=True) for f in batch if table.get_field_index(f.name) < 0]
    return pa.struct(fields)


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t)


def _relist(like: pa.DataType, item: pa.DataType) -> pa.DataType:
    field = pa.field(like.value_field.name, item, nullable=like.value_field.nullable)
    return pa.large_list(field) if pa.types.is_large_list(like) else pa.list_(field)


def _nested(t: pa.DataType) -> bool:
    return pa.types.is_struct(t) or _is_list(t) or pa.types.is_map(t)


def widens(old: pa.DataType, new: pa.DataType) -> bool:
    """True when ``new`` holds every value of ``old`` exactly (equal types included).

    These are the only type changes schema evolution makes: files written with ``old`` stay
    readable as ``new`` without a rewrite, so no writer's data is lost or altered. A struct
    widens when it keeps every field (each the same or wider) and perhaps adds some.
    """
    if old == new or _same_repr(old, new):
        return True
    if pa.types.is_struct(old) and pa.types.is_struct(new):
        return all(new.get_field_index(f.name) >= 0 and widens(f.type, new.field(new.get_field_index(f.name)).type)
                   for f in old)
    if _is_list(old) and _is_list(new):
        return widens(old.value_type, new.value_type)
    if pa.types.is_map(old) and pa.types.is_map(new):
        return widens(old.key_type, new.key_type) and widens(old.item_type, new.item_type)
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
    """Primitive batch types written into table type ``a`` as they are: what Avro cannot tell
    apart, and narrower numbers (cast checked value by value when the batch is prepared)."""
    if a == b or _same_repr(a, b):
        return True
    if pa.types.is_timestamp(a) and pa.types.is_timestamp(b):
        return True
    if pa.types.is_integer(a) and pa.types.is_integer(b):
        return pa.types.is_signed_integer(a) and a.bit_width >= b.bit_width
    if pa.types.is_floating(a) and pa.types.is_floating(b):
        return a.bit_width >= b.bit_width
    return False


def cast_column(col: pa.Array | pa.ChunkedArray, target: pa.DataType) -> pa.Array | pa.ChunkedArray:
    """``col`` as ``target`` the way Hudi's readers widen stored values: float -> double goes
    through the float's shortest decimal text (Hudi's Java ``Double.valueOf(Float.toString(f))``:
    ``0.7f`` reads as ``0.7``, not ``0.699999988079071``), also inside structs, lists and maps;
    every other change is Arrow's safe cast (raising on a value that does not fit). Reads of old
    files, merges and compaction all cast through here, so no two of them show a value differently.
    """
    if col.type == target:
        return col
    if not _widens_float(col.type, target):
        return col.cast(target)
    if isinstance(col, pa.ChunkedArray):
        return pa.chunked_array([cast_column(c, target) for c in col.chunks], target)
    t = col.type
    if pa.types.is_floating(t):
        return pc.cast(pc.cast(col, pa.string()), target)
    if col.offset:  # rebuilt at offset 0: Arrow builds nested arrays from offsets only there
        col = col.take(pa.array(range(len(col)), pa.int64()))
    mask = pc.is_null(col) if col.null_count else None
    if pa.types.is_struct(t):
        children = dict(zip([f.name for f in t], col.flatten(), strict=True))
        arrays = [cast_column(children[f.name], f.type) if f.name in children else pa.nulls(len(col), f.type)
                  for f in target]
        return pa.StructArray.from_arrays(arrays, fields=list(target), mask=mask)
    if pa.types.is_map(t):
        return pa.MapArray.from_arrays(col.offsets, col.keys.cast(target.key_type), cast_column(col.items, target.item_type),
                                       type=target, mask=mask)
    values = cast_column(col.values, target.value_type)
    cls = pa.LargeListArray if pa.types.is_large_list(target) else pa.ListArray
    return cls.from_arrays(col.offsets, values, type=target, mask=mask)


def _widens_float(t: pa.DataType, target: pa.DataType) -> bool:
    """Whether casting ``t`` to ``target`` widens a float to a double somewhere."""
    if pa.types.is_floating(t) and pa.types.is_floating(target):
        return t.bit_width < 64 and target.bit_width == 64
    if pa.types.is_struct(t) and pa.types.is_struct(target):
        return any(t.get_field_index(f.name) >= 0 and _widens_float(t.field(t.get_field_index(f.name)).type, f.type)
                   for f in target)
    if pa.types.is_map(t) and pa.types.is_map(target):
        return _widens_float(t.item_type, target.item_type)
    if _is_list(t) and _is_list(target):
        return _widens_float(t.value_type, target.value_type)
    return False


def has_double(schema: pa.Schema) -> bool:
    """Whether some column (or nested field) is a double: only then can a file hold floats
    that a read must widen (:func:`stored_float_types`)."""
    def double(t: pa.DataType) -> bool:
        if pa.types.is_float64(t):
            return True
        if pa.types.is_struct(t):
            return any(double(f.type) for f in t)
        if _is_list(t):
            return double(t.value_type)
        return pa.types.is_map(t) and double(t.item_type)
    return any(double(f.type) for f in schema)


def stored_float_types(physical: pa.Schema, schema: pa.Schema) -> dict[str, pa.DataType]:
    """The columns of a file (``physical``) to read as stored and then widen with
    :func:`cast_column`, because a float in them became a double in ``schema``."""
    out = {}
    for f in schema:
        i = physical.get_field_index(f.name)
        if i >= 0 and _widens_float(physical.field(i).type, f.type):
            out[f.name] = physical.field(i).type
    return out
