"""Avro container files of one record, encoded by code compiled once per schema.

Commit metadata is encoded on the commit path: the inflight plan before the files are written,
the completed instant under the table lock. fastavro spends about 1 ms on a commit of 30 write
stats (it interprets the schema for every value); the compiled encoder writes the same bytes
in less than half that time. It knows the types the timeline's schemas use (records, nullable unions,
maps, arrays, strings, longs, ints, booleans); :func:`compile_schema` returns None for any other
schema, and the caller then keeps fastavro.
"""
from __future__ import annotations

import functools
import io
import os
from collections.abc import Callable
from typing import Any

import fastavro

Encoder = Callable[[Any, list], None]

_SYNC_SIZE = 16  # the sync marker that closes the header and every block


class Unsupported(Exception):
    """The schema (or a value) needs what this encoder does not do: use fastavro."""


@functools.lru_cache(maxsize=4096)
def zigzag(n: int) -> bytes:
    """Avro's variable-length zig-zag encoding of a long."""
    if not -(1 << 63) <= n < (1 << 63):
        raise Unsupported(f"{n} is out of the range of an Avro long")
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def compile_schema(schema: Any) -> Encoder | None:
    """An encoder of values of ``schema`` into a list of byte strings, or None if unsupported."""
    try:
        return _compile(schema)
    except Unsupported:
        return None


def _compile(schema: Any) -> Encoder:
    if isinstance(schema, str):
        return _primitive(schema)
    if isinstance(schema, list):
        return _union(schema)
    if not isinstance(schema, dict):
        raise Unsupported(repr(schema))
    kind = schema.get("type")
    if kind == "record":
        return _record(schema)
    if kind == "map":
        return _map(_compile(schema["values"]))
    if kind == "array":
        return _array(_compile(schema["items"]))
    if isinstance(kind, str) and not schema.keys() - {"type"}:
        return _primitive(kind)
    raise Unsupported(repr(kind))


def _primitive(name: str) -> Encoder:
    if name == "null":
        return lambda v, out: None
    if name == "boolean":
        return lambda v, out: out.append(b"\x01" if v else b"\x00")
    if name in ("int", "long"):
        return lambda v, out: out.append(zigzag(v))
    if name == "string":
        def string(v: str, out: list) -> None:
            b = v.encode()
            out.append(zigzag(len(b)))
            out.append(b)
        return string
    raise Unsupported(name)


def _branch_name(schema: Any) -> str:
    if isinstance(schema, str):
        return schema
    if schema.get("type") in ("record", "enum", "fixed"):
        return schema["name"]
    return schema["type"]


def _union(branches: list) -> Encoder:
    names = [_branch_name(b) for b in branches]
    if len(names) == 2 and names[0] == "null" and names[1] in _NULLABLE:
        return _NULLABLE[names[1]]
    encoders = [_compile(b) for b in branches]
    null = names.index("null") if "null" in names else None
    others = [i for i, n in enumerate(names) if n != "null"]
    only = others[0] if len(others) == 1 else None
    index = {n: i for i, n in enumerate(names)}

    def union(v: Any, out: list) -> None:
        if isinstance(v, tuple):  # fastavro's tuple notation: (branch name, value)
            name, v = v
            i = index.get(name)
            if i is None:
                raise Unsupported(f"no branch {name!r} in {names}")
        elif v is None:
            if null is None:
                raise Unsupported(f"null for a union without null: {names}")
            i = null
        elif only is not None:
            i = only
        else:
            raise Unsupported(f"untagged value for the union {names}")
        out.append(zigzag(i))
        encoders[i](v, out)
    return union


def _nullable_long(v: Any, out: list) -> None:
    if v is None:
        out.append(b"\x00")
    else:
        out.append(b"\x02" + zigzag(v))


def _nullable_string(v: Any, out: list) -> None:
    if v is None:
        out.append(b"\x00")
    else:
        b = v.encode()
        out.append(b"\x02" + zigzag(len(b)) + b)


#: ``["null", <primitive>]`` unions, the most common fields of the timeline's records: one call
#: per value. A value in tuple notation there is not expected; fastavro takes it (``zigzag`` and
#: ``encode`` raise on a tuple)
_NULLABLE: dict[str, Encoder] = {"long": _nullable_long, "int": _nullable_long, "string": _nullable_string}


def _record(schema: dict) -> Encoder:
    fields = [(f["name"], f.get("default"), _compile(f["type"])) for f in schema["fields"]]

    def record(v: dict, out: list) -> None:
        for name, default, enc in fields:
            enc(v.get(name, default), out)
    return record


def _map(values: Encoder) -> Encoder:
    def mapping(v: dict, out: list) -> None:
        if v:
            out.append(zigzag(len(v)))
            for k, x in v.items():
                b = k.encode()
                out.append(zigzag(len(b)))
                out.append(b)
                values(x, out)
        out.append(b"\x00")
    return mapping


def _array(items: Encoder) -> Encoder:
    def array(v: list, out: list) -> None:
        if v:
            out.append(zigzag(len(v)))
            for x in v:
                items(x, out)
        out.append(b"\x00")
    return array


class ContainerWriter:
    """Writes one-record Avro container files of a schema: fastavro's own header (written once),
    a fresh sync marker per file, then one block holding the compiled encoder's bytes."""

    def __init__(self, head: bytes, encoder: Encoder) -> None:
        self._head = head
        self._encoder = encoder

    @classmethod
    def compile(cls, parsed_schema: Any) -> ContainerWriter | None:
        """A writer of ``parsed_schema`` (fastavro's parsed form), or None when it needs fastavro."""
        encoder = compile_schema(parsed_schema)
        marker = b"\x00" * _SYNC_SIZE
        buf = io.BytesIO()
        fastavro.writer(buf, parsed_schema, [], sync_marker=marker)
        header = buf.getvalue()
        if encoder is None or not header.endswith(marker):
            return None
        return cls(header[:-_SYNC_SIZE], encoder)

    def write(self, record: Any) -> bytes:
        parts: list[bytes] = []
        self._encoder(record, parts)
        body = b"".join(parts)
        sync = os.urandom(_SYNC_SIZE)
        return b"".join([self._head, sync, zigzag(1), zigzag(len(body)), body, sync])


# -- bounded reading ---------------------------------------------------------------------------

#: Codecs a timeline file may use: Hudi and multiwriter write ``null``; ``deflate`` is read with
#: its output bounded. Others are refused rather than decompressed without a bound.
READ_CODECS = ("null", "deflate")
#: The most bytes one decompressed block of a timeline file may hold (the largest commit
#: metadata of a table with a million files is well below it)
MAX_BLOCK_BYTES = 256 << 20


class Unsafe(ValueError):
    """An Avro container that decoding could not bound by its own size (see :func:`check_bounded`)."""


def bounded_reader(data: bytes) -> Any:
    """A fastavro reader of the records of ``data``; :class:`Unsafe` unless decoding them needs
    memory in proportion to the size of ``data``.

    An Avro block or array states its item count up front, and a decoder loops that many times.
    An item that takes no bytes (``null``, a zero-size ``fixed``, a record of those) lets a
    211-byte file declare 2^40 items; every other item consumes at least one byte, so a
    count beyond the bytes left ends at the end of the data. So: no array items, and no records
    of the container itself, that take no bytes; only the ``null`` codec, or ``deflate`` whose
    blocks are decompressed with a bound; block sizes within the file.
    """
    import zlib

    buf = io.BytesIO(data)
    try:
        header = fastavro.reader(buf)
    except Exception as e:  # noqa: BLE001 -- fastavro raises many types for a corrupt header
        raise Unsafe(f"unreadable header ({type(e).__name__}: {e})") from e
    codec = header.codec
    if codec not in READ_CODECS:
        raise Unsafe(f"codec {codec!r} is not one timeline files use (expected one of {READ_CODECS})")
    empty_items: list[Any] = []
    if _zero_width(header.writer_schema, {}, empty_items):
        raise Unsafe("its records take no bytes, so a block could declare any number of them")
    if empty_items:
        raise Unsafe(f"an array of items that take no bytes ({empty_items[0]!r}): not a timeline schema")
    pos = buf.tell()
    while pos < len(data):
        count, pos = _read_long(data, pos)
        size, pos = _read_long(data, pos)
        if count < 0 or size < 0 or size > len(data) - pos:
            raise Unsafe(f"a block of {count} records and {size} bytes at offset {pos} overruns the file")
        block = data[pos:pos + size]
        if codec == "deflate":
            d = zlib.decompressobj(-15)
            try:
                block = d.decompress(block, MAX_BLOCK_BYTES)
            except zlib.error as e:
                raise Unsafe(f"a deflate block at offset {pos} is corrupt ({e})") from e
            if d.unconsumed_tail:
                raise Unsafe(f"a deflate block at offset {pos} inflates past {MAX_BLOCK_BYTES} bytes")
        if count > len(block):
            raise Unsafe(f"a block at offset {pos} declares {count} records in {len(block)} bytes")
        pos += size + _SYNC_SIZE
    return header  # still positioned after the header: the blocks were read from ``data``


def check_schema(schema: Any) -> None:
    """:class:`Unsafe` when values of ``schema`` (a record schema, parsed or not) could make a
    decoder loop without consuming bytes: an array whose items take none lets a few bytes
    declare 2^40 of them. Every value of any other schema takes at least one byte per item, so
    its decoding is bounded by the bytes it is given."""
    bad: list[Any] = []
    if _zero_width(schema, {}, bad):
        raise Unsafe("its records take no bytes, so a count could declare any number of them")
    if bad:
        raise Unsafe(f"an array of items that take no bytes ({bad[0]!r}): a count of 2^40 of them takes a few bytes")


def _read_long(data: bytes, pos: int) -> tuple[int, int]:
    """One zig-zag varint long at ``pos``: (value, next position)."""
    n = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise Unsafe(f"a truncated or overlong number at offset {pos}")
        b = data[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return (n >> 1) ^ -(n & 1), pos


_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


def _zero_width(schema: Any, named: dict[str, Any], bad: list) -> bool:
    """Whether a value of ``schema`` (fastavro's parsed form) takes no bytes; arrays whose items
    take none are appended to ``bad``."""
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return schema == "null"
        return named.get(schema, False) is True
    if isinstance(schema, list):  # a union: the branch index takes a byte
        for branch in schema:
            _zero_width(branch, named, bad)
        return False
    if not isinstance(schema, dict):
        return False
    kind = schema.get("type")
    if kind in ("record", "error"):
        name = schema.get("name")
        if name:
            named.setdefault(name, False)  # a recursive reference is not zero-width (a union is in the way)
        zero = all([_zero_width(f.get("type"), named, bad) for f in schema.get("fields") or []])
        if name:
            named[name] = zero
        return zero
    if kind == "fixed":
        zero = schema.get("size") == 0
        if schema.get("name"):
            named[schema["name"]] = zero
        return zero
    if kind == "array":
        if _zero_width(schema.get("items"), named, bad):
            bad.append(schema.get("items"))
        return False
    if kind == "map":  # each entry has a key of at least one byte
        _zero_width(schema.get("values"), named, bad)
        return False
    if kind == "enum":
        return False
    return _zero_width(kind, named, bad) if isinstance(kind, (str, dict, list)) else False
