"""Decompression bombs, built small: Parquet files of billions of run-length-encoded nulls,
HFiles whose gzip blocks are indexed again and again, Avro schemas of zero-width array items.

The Parquet files are honest (every page holds what its header says; a reader without bounds
would allocate the values), written from scratch with a minimal Thrift compact encoder."""
from __future__ import annotations

import struct
import zlib

import pyarrow as pa

from multiwriter.format import hfile
from multiwriter.format.hfile import _varint  # the same base-128 varint Thrift's compact protocol uses

# -- Thrift compact protocol -------------------------------------------------------------------
I32, I64, BINARY, LIST, STRUCT = 5, 6, 8, 9, 12


def _zigzag(n: int) -> bytes:
    return _varint((n << 1) ^ (n >> 63))


def _value(kind: int, v: object) -> bytes:
    if kind in (I32, I64):
        return _zigzag(int(v))  # type: ignore[arg-type]
    if kind == BINARY:
        b = v.encode() if isinstance(v, str) else bytes(v)  # type: ignore[arg-type]
        return _varint(len(b)) + b
    if kind == STRUCT:
        return struct_(v)  # type: ignore[arg-type]
    if kind == LIST:
        elem, items = v  # type: ignore[misc]
        head = bytes([len(items) << 4 | elem]) if len(items) < 15 else bytes([0xF0 | elem]) + _varint(len(items))
        return head + b"".join(_value(elem, x) for x in items)
    raise ValueError(kind)


def struct_(fields: list[tuple[int, int, object]]) -> bytes:
    """A Thrift struct of (field id, type, value), ids ascending."""
    out, last = bytearray(), 0
    for fid, kind, v in fields:
        out.append((fid - last) << 4 | kind)
        out += _value(kind, v)
        last = fid
    out.append(0)
    return bytes(out)


# -- Parquet -----------------------------------------------------------------------------------
_PHYSICAL = {"INT64": 2, "DOUBLE": 5, "BYTE_ARRAY": 6}


def _physical(t: pa.DataType) -> tuple[int, int | None]:
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return _PHYSICAL["BYTE_ARRAY"], 0  # UTF8
    if pa.types.is_floating(t):
        return _PHYSICAL["DOUBLE"], None
    return _PHYSICAL["INT64"], None


def null_parquet(schema: pa.Schema, *, pages: int = 64, per_page: int = 1 << 30) -> bytes:
    """A Parquet file of ``schema``'s columns (strings, doubles, else int64; all optional) holding
    ``pages * per_page`` rows of nulls in one row group: a few kB on disk, hundreds of GB decoded."""
    levels = _varint(per_page << 1) + b"\x00"  # one RLE run of definition level 0 (null)
    data = struct.pack("<i", len(levels)) + levels
    header = struct_([(1, I32, 0), (2, I32, len(data)), (3, I32, len(data)),
                      (5, STRUCT, [(1, I32, per_page), (2, I32, 0), (3, I32, 3), (4, I32, 3)])])
    page = header + data
    out = bytearray(b"PAR1")
    chunks = []
    rows = pages * per_page
    for f in schema:
        at = len(out)
        out += page * pages
        ptype, _ = _physical(f.type)
        meta = [(1, I32, ptype), (2, LIST, (I32, [0, 3])), (3, LIST, (BINARY, [f.name])), (4, I32, 0),
                (5, I64, rows), (6, I64, len(page) * pages), (7, I64, len(page) * pages), (9, I64, at)]
        chunks.append([(2, I64, at), (3, STRUCT, meta)])
    elements = [[(4, BINARY, "schema"), (5, I32, len(schema))]]
    for f in schema:
        ptype, converted = _physical(f.type)
        e = [(1, I32, ptype), (3, I32, 1), (4, BINARY, f.name)]
        if converted is not None:
            e.append((6, I32, converted))
        elements.append(e)
    group = [(1, LIST, (STRUCT, chunks)), (2, I64, len(out) - 4), (3, I64, rows)]
    footer = struct_([(1, I32, 1), (2, LIST, (STRUCT, elements)), (3, I64, rows), (4, LIST, (STRUCT, [group]))])
    out += footer + struct.pack("<I", len(footer)) + b"PAR1"
    return bytes(out)


# -- HFile -------------------------------------------------------------------------------------
def _hblock(magic: bytes, payload: bytes, raw_size: int | None = None) -> bytes:
    body = _gz(payload)
    return hfile.HEADER.pack(magic, len(body), len(payload) if raw_size is None else raw_size, -1, 0,
                             hfile.BYTES_PER_CHECKSUM, hfile.HEADER.size + len(body)) + body


def hfile_with(cells: dict[bytes, bytes], file_info: dict[bytes, bytes], *, times: int = 1,
               block_bytes: int | None = None) -> bytes:
    """An HFile of ``cells`` (one gzip data block) and ``file_info``; ``block_bytes``: the data
    block is that many zero bytes instead (a gzip bomb), its index entry repeated ``times``."""
    if block_bytes is None:
        payload = b"".join(hfile._cell(k, v) for k, v in sorted(cells.items()))
        data = _hblock(hfile.DATA, payload)
    else:
        c = zlib.compressobj(9, zlib.DEFLATED, 31, 9, zlib.Z_RLE)
        chunk = b"\x00" * (1 << 22)
        body = b"".join(c.compress(chunk) for _ in range(block_bytes // len(chunk))) + c.flush()
        data = hfile.HEADER.pack(hfile.DATA, len(body), block_bytes, -1, 0, hfile.BYTES_PER_CHECKSUM,
                                 hfile.HEADER.size + len(body)) + body
    key = hfile._cell_key(min(cells) if cells else b"k")
    root = b"".join(struct.pack(">qi", 0, len(data)) + hfile._write_vint(len(key)) + key for _ in range(times))
    proto = b"".join(hfile._pb_bytes(1, hfile._pb_bytes(1, k) + hfile._pb_bytes(2, v)) for k, v in file_info.items())
    out = data + _hblock(hfile.ROOT_INDEX, root) + _hblock(hfile.ROOT_INDEX, b"")
    info_at = len(out)
    out += _hblock(hfile.FILE_INFO, b"PBUF" + hfile._varint(len(proto)) + proto)
    trailer = b"".join([
        hfile._pb_int(1, info_at), hfile._pb_int(2, len(data)), hfile._pb_int(3, len(root)),
        hfile._pb_int(4, len(out)), hfile._pb_int(5, times), hfile._pb_int(6, 0),
        hfile._pb_int(7, len(cells)), hfile._pb_int(8, 1), hfile._pb_int(9, 0), hfile._pb_int(10, len(data)),
        hfile._pb_bytes(11, hfile.COMPARATOR.encode()), hfile._pb_int(12, hfile.CODEC_GZ),
    ])
    t = hfile.TRAILER + hfile._varint(len(trailer)) + trailer
    return out + t + b"\x00" * (hfile.TRAILER_SIZE - len(t) - 4) + struct.pack(">I", 3)


def _gz(data: bytes) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, 31)
    return c.compress(data) + c.flush()
