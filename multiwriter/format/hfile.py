"""HFile (version 3), the base-file format of Hudi's metadata table: read and write.

Only what Hudi uses: sorted UTF-8 keys with byte values in data blocks (GZ or no compression),
one root data index level, meta blocks (Hudi's bloom filter goes there), a file info map and
the fixed 4 KB Protobuf trailer. The layout follows ``hudi-io/hfile_format.md`` of Apache Hudi;
hudi-rs reads the files with a reader of its own, which is how the tests check ours.

A cell's key is the KeyValue key HBase readers expect: a 2-byte key length, the key, a
0-length column family, the ``Long.MAX_VALUE`` timestamp and the ``Put`` type; values carry a
zero MVCC byte. Blocks carry no checksum (type NULL) but reserve one 4-byte slot per 16 KB
chunk, as Hudi's writer does.
"""
from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np

from ..errors import TableFormatError
from . import bounds

DATA = b"DATABLK*"
META = b"METABLKc"
ROOT_INDEX = b"IDXROOT2"
LEAF_INDEX = b"IDXLEAF2"
INTERMEDIATE_INDEX = b"IDXINTE2"
FILE_INFO = b"FILEINF2"
TRAILER = b'TRABLK"$'

HEADER = struct.Struct(">8siiqBii")  # magic, on-disk size, uncompressed size, previous offset, checksum type, ...
TRAILER_SIZE = 4096
BYTES_PER_CHECKSUM = 16384
CODEC_GZ, CODEC_NONE = 1, 2
COMPARATOR = "org.apache.hudi.io.storage.HoodieHBaseKVComparator"
_KEY_TAIL = b"\x00" + struct.pack(">q", 2**63 - 1) + b"\x04"  # family length 0, LATEST timestamp, Put
#: a data block is closed once it holds this many bytes (Hudi's default block size)
BLOCK_SIZE = 64 * 1024
_MAX_CELLS = 50_000_000
#: the most cells an HFile may declare per byte it takes on disk (a cell is over 20 bytes before
#: gzip, and its keys are distinct and sorted: gzip does not shrink it below a few bytes)
_CELLS_PER_BYTE = 16


# -- Protobuf (only the wire types the trailer and file info use) ------------------------------
def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _read_varint(buf: bytes, i: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        if i >= len(buf) or shift > 63:
            raise TableFormatError("HFile: truncated Protobuf varint")
        b = buf[i]
        n |= (b & 0x7F) << shift
        i += 1
        if not b & 0x80:
            return n, i
        shift += 7


def _pb_fields(buf: bytes) -> Iterator[tuple[int, int | bytes]]:
    i = 0
    while i < len(buf):
        tag, i = _read_varint(buf, i)
        num, wire = tag >> 3, tag & 7
        if wire == 0:
            v, i = _read_varint(buf, i)
            yield num, v
        elif wire == 2:
            n, i = _read_varint(buf, i)
            if i + n > len(buf):
                raise TableFormatError("HFile: truncated Protobuf field")
            yield num, buf[i:i + n]
            i += n
        else:
            raise TableFormatError(f"HFile: unexpected Protobuf wire type {wire}")


def _pb_int(num: int, v: int) -> bytes:
    return _varint(num << 3) + _varint(v)


def _pb_bytes(num: int, v: bytes) -> bytes:
    return _varint(num << 3 | 2) + _varint(len(v)) + v


# -- Hadoop WritableUtils VInt (block index key lengths) -----------------------------------------
def _write_vint(n: int) -> bytes:
    if -112 <= n <= 127:
        return struct.pack(">b", n)
    length, m = -112, n
    if n < 0:
        m, length = ~n, -120
    raw = m.to_bytes((m.bit_length() + 7) // 8, "big")
    return struct.pack(">b", length - len(raw)) + raw


def _read_vint(buf: bytes, i: int) -> tuple[int, int]:
    first = struct.unpack_from(">b", buf, i)[0]
    i += 1
    if first >= -112:
        return first, i
    negative = first < -120
    size = (-120 - first) if negative else (-112 - first)  # bytes after this one
    if i + size > len(buf):
        raise TableFormatError("HFile: truncated block index")
    v = int.from_bytes(buf[i:i + size], "big")
    return (~v if negative else v), i + size


# -- cells -------------------------------------------------------------------------------------
def _cell_key(key: bytes) -> bytes:
    return struct.pack(">h", len(key)) + key + _KEY_TAIL


def _index_key(key: bytes) -> bytes:
    """A key as the root index and ``hfile.LASTKEY`` hold it in Hudi's files: its 2-byte length
    and the key, without the KeyValue tail (family, timestamp, type) the cells carry."""
    return struct.pack(">h", len(key)) + key


def _user_key(cell_key: bytes) -> bytes:
    (n,) = struct.unpack_from(">h", cell_key, 0)
    return cell_key[2:2 + n]


@dataclass
class HFile:
    """The cells (key -> value, keys sorted) and meta blocks of one HFile."""

    cells: list[tuple[bytes, bytes]] = field(default_factory=list)
    meta: dict[str, bytes] = field(default_factory=dict)
    file_info: dict[bytes, bytes] = field(default_factory=dict)

    def get(self, key: str | bytes) -> bytes | None:
        k = key.encode() if isinstance(key, str) else key
        for ck, v in self.cells:
            if ck == k:
                return v
        return None


# -- writing -----------------------------------------------------------------------------------
def write(cells: Iterable[tuple[str | bytes, bytes]], *, meta: dict[str, bytes] | None = None,
          file_info: dict[bytes, bytes] | None = None, compress: bool = True, created_ms: int = 0) -> bytes:
    """The bytes of an HFile holding ``cells`` (unique keys, sorted here), ``meta`` blocks and
    ``file_info`` entries beside HFile's own (Hudi keeps the values' Avro schema there)."""
    items = [((k.encode() if isinstance(k, str) else k), v) for k, v in cells]
    if not _strictly_increasing(items):  # callers mostly hand them sorted: then no sort
        items.sort()
        for a, b in zip(items, items[1:], strict=False):
            if a[0] == b[0]:
                raise ValueError(f"HFile: key {a[0]!r} given twice")
    codec = CODEC_GZ if compress else CODEC_NONE
    out = bytearray()
    prev = {DATA: -1, META: -1}
    data_index: list[tuple[int, int, bytes]] = []

    def block(magic: bytes, payload: bytes, *, compressed: bool) -> int:
        body = _gzip(payload) if compressed else payload
        at = len(out)
        n_checksums = -(-(HEADER.size + len(body) + 4) // BYTES_PER_CHECKSUM)
        on_disk = len(body) + 4 * n_checksums
        out.extend(HEADER.pack(magic, on_disk, len(payload), prev.get(magic, -1), 0, BYTES_PER_CHECKSUM,
                               HEADER.size + len(body)))
        out.extend(body)
        out.extend(b"\x00" * (4 * n_checksums))
        if magic in prev:
            prev[magic] = at
        return at

    first_data = len(out)
    last_data = first_data
    data_bytes = 0
    # the user keys' and values' bytes, as HFileInfo's AVG_KEY_LEN and AVG_VALUE_LEN count them
    key_bytes, value_bytes = sum(len(k) for k, _ in items), sum(len(v) for _, v in items)
    for first, payload in _data_blocks(items):
        data_bytes += len(payload)
        last_data = at = block(DATA, payload, compressed=compress)
        data_index.append((at, len(out) - at, _index_key(first)))
    meta_index: list[tuple[int, int, bytes]] = []
    for name in sorted(meta or {}):
        at = block(META, (meta or {})[name], compressed=compress)
        meta_index.append((at, len(out) - at, name.encode()))
    load_on_open = len(out)
    root = b"".join(struct.pack(">qi", off, size) + _write_vint(len(key)) + key for off, size, key in data_index)
    block(ROOT_INDEX, root, compressed=compress)
    metas = b"".join(struct.pack(">qi", off, size) + _write_vint(len(key)) + key for off, size, key in meta_index)
    block(ROOT_INDEX, metas, compressed=compress)
    n = len(items)
    info = {
        b"hfile.LASTKEY": _index_key(items[-1][0]) if items else b"",
        b"hfile.AVG_KEY_LEN": struct.pack(">i", key_bytes // n if n else 0),
        b"hfile.AVG_VALUE_LEN": struct.pack(">i", value_bytes // n if n else 0),
        b"hfile.CREATE_TIME_TS": struct.pack(">q", created_ms),
        b"KEY_VALUE_VERSION": struct.pack(">i", 1),
        b"MAX_MEMSTORE_TS_KEY": struct.pack(">q", 0),
    }
    if not items:
        del info[b"hfile.LASTKEY"]
    info = {**(file_info or {}), **info}
    proto = b"".join(_pb_bytes(1, _pb_bytes(1, k) + _pb_bytes(2, v)) for k, v in info.items())
    file_info_at = block(FILE_INFO, b"PBUF" + _varint(len(proto)) + proto, compressed=compress)
    # as Hudi's HFileWriterImpl fills the trailer: field 3 (uncompressed_data_index_size) holds the
    # data blocks' uncompressed bytes, field 4 (total_uncompressed_bytes) is left out, and
    # field 10 is the offset of the last data block (where a reader seeks for the last key)
    trailer = b"".join([
        _pb_int(1, file_info_at), _pb_int(2, load_on_open), _pb_int(3, data_bytes),
        _pb_int(5, len(data_index)), _pb_int(6, len(meta_index)),
        _pb_int(7, n), _pb_int(8, 1), _pb_int(9, first_data), _pb_int(10, last_data),
        _pb_bytes(11, COMPARATOR.encode()), _pb_int(12, codec),
    ])
    body = TRAILER + _varint(len(trailer)) + trailer
    out.extend(body + b"\x00" * (TRAILER_SIZE - len(body) - 4) + struct.pack(">I", 3))
    return bytes(out)


def _strictly_increasing(items: list[tuple[bytes, bytes]]) -> bool:
    return all(a[0] < b[0] for a, b in zip(items, items[1:], strict=False))


#: a cell's head: its key's and value's lengths, then the row length that starts its key
_CELL_HEAD = struct.Struct(">iih")


def _cell(key: bytes, value: bytes, _head=_CELL_HEAD.pack, _extra: int = 2 + len(_KEY_TAIL)) -> bytes:
    """One KeyValue cell of a data block (its key :func:`_cell_key`'s), followed by its memstore
    timestamp, a zero vint."""
    return b"".join((_head(len(key) + _extra, len(value), len(key)), key, _KEY_TAIL, value, b"\x00"))


def _data_blocks(items: list[tuple[bytes, bytes]]) -> Iterator[tuple[bytes, bytes]]:
    """(first key, payload) of each data block: cells until a block reaches :data:`BLOCK_SIZE`."""
    cells: list[bytes] = []
    size, first = 0, b""
    for k, v in items:
        if not cells:
            first = k
        cell = _cell(k, v)
        cells.append(cell)
        size += len(cell)
        if size >= BLOCK_SIZE:
            yield first, b"".join(cells)
            cells, size = [], 0
    if cells:
        yield first, b"".join(cells)


def _gzip(data: bytes) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, 31)
    return c.compress(data) + c.flush()


# -- reading -----------------------------------------------------------------------------------
def read(data: bytes, *, source: str = "HFile") -> HFile:
    """Every cell and meta block of an HFile Hudi or we wrote; TableFormatError when damaged."""
    try:
        return _read(data, source)
    except TableFormatError:
        raise
    except (struct.error, zlib.error, ValueError, IndexError, OverflowError) as e:
        raise TableFormatError(f"{source}: not a readable HFile ({e})") from e


def _read(data: bytes, source: str) -> HFile:
    if len(data) < TRAILER_SIZE or data[-TRAILER_SIZE:-TRAILER_SIZE + 8] != TRAILER:
        raise TableFormatError(f"{source}: no HFile trailer")
    if data[-1] != 3:
        raise TableFormatError(f"{source}: HFile major version {data[-1]}, only 3 is read")
    t = data[-TRAILER_SIZE + 8:]
    n, i = _read_varint(t, 0)
    trailer = {k: v for k, v in _pb_fields(t[i:i + n])}
    codec = int(trailer.get(12, CODEC_NONE))
    if codec not in (CODEC_GZ, CODEC_NONE):
        raise TableFormatError(f"{source}: HFile compression codec {codec} is not supported (GZ or none)")
    if int(trailer.get(8, 1)) != 1:
        raise TableFormatError(f"{source}: a multi-level HFile block index is not supported")
    declared = int(trailer.get(7, 0))
    if declared > min(_MAX_CELLS, max(1000, _CELLS_PER_BYTE * len(data))):
        raise TableFormatError(f"{source}: HFile of {len(data)} bytes declares {declared} cells")
    out = HFile()
    budget = _Budget(bounds.file_budget(len(data)), source)
    pos = int(trailer.get(2, 0))
    root, pos = _block(data, pos, codec, source, budget)
    metas, pos = _block(data, pos, codec, source, budget)
    info, _ = _block(data, int(trailer.get(1, pos)), codec, source, budget)
    out.file_info = _file_info(info[1], source)
    last: bytes | None = None
    data_blocks = list(_distinct(_index(root[1], int(trailer.get(5, 0))), data, source, "data"))
    meta_index = _index(metas[1], int(trailer.get(6, 0)))
    meta_blocks = list(_distinct(meta_index, data, source, "meta"))  # both indexes checked before a block inflates
    for off in data_blocks:
        (magic, payload), _ = _block(data, off, codec, source, budget)
        if magic != DATA:
            raise TableFormatError(f"{source}: index points at a {magic!r} block, not data")
        for key, value in _cells(payload, source):
            if last is not None and key <= last:
                raise TableFormatError(f"{source}: HFile keys out of order or repeated at {key[:64]!r}")
            last = key
            out.cells.append((key, value))
            if trailer.get(7) is not None and len(out.cells) > declared:
                raise TableFormatError(f"{source}: HFile holds more cells than the {declared} its trailer declares")
    for off, (_o, _size, key) in zip(meta_blocks, meta_index, strict=True):
        (_magic, payload), _ = _block(data, off, codec, source, budget)
        out.meta[key.decode("utf-8", "replace")] = payload
    return out


class _Budget:
    """The bytes one HFile's blocks may inflate to, all of them together."""

    def __init__(self, left: int, source: str) -> None:
        self.left, self.source, self.total = left, source, left

    def take(self, n: int, at: int) -> None:
        self.left -= n
        if self.left < 0:
            raise TableFormatError(f"{self.source}: HFile blocks inflate past {self.total} bytes at the block at {at}, "
                                   f"over the file's budget ({bounds.EXPANSION_ENV} times its size); "
                                   "refusing a decompression bomb")


def _distinct(index: list[tuple[int, int, bytes]], data: bytes, source: str, what: str) -> Iterator[int]:
    """The offsets of an index's blocks, each past the end of the one before: an index naming one
    block twice (or blocks overlapping) would inflate the same bytes again and again."""
    end = 0
    for off, _size, _key in index:
        if off < end or off + HEADER.size > len(data):
            raise TableFormatError(f"{source}: HFile {what} index names a block at {off}, "
                                   f"inside or before the previous one (ending at {end}) or past the file")
        on_disk = HEADER.unpack_from(data, off)[1]
        end = off + HEADER.size + max(on_disk, 0)
        yield off


def _block(data: bytes, at: int, codec: int, source: str, budget: _Budget | None = None) -> tuple[tuple[bytes, bytes], int]:
    magic, on_disk, raw_size, _prev, _ctype, per_checksum, with_header = HEADER.unpack_from(data, at)
    if on_disk < 0 or raw_size < 0 or at + HEADER.size + on_disk > len(data) or with_header < HEADER.size:
        raise TableFormatError(f"{source}: HFile block at {at} runs past the file")
    body = data[at + HEADER.size:at + with_header]
    limit = bounds.max_hfile_block_bytes()
    if raw_size > limit:
        raise TableFormatError(f"{source}: HFile block at {at} declares {raw_size} bytes, over the {limit} a block "
                               f"may take ({bounds.HFILE_BLOCK_ENV}); refusing a decompression bomb")
    if codec == CODEC_GZ and raw_size > bounds.deflate_bound(len(body)):
        raise TableFormatError(f"{source}: HFile block at {at} declares {raw_size} bytes from {len(body)} gzip bytes, "
                               "more than gzip can inflate to")
    if budget is not None:
        budget.take(raw_size, at)
    if codec == CODEC_GZ:  # every block, index and file info included, as hudi-rs reads them
        payload = zlib.decompressobj(31).decompress(body, raw_size + 1)
    else:
        payload = body[:raw_size]
    if len(payload) != raw_size:
        raise TableFormatError(f"{source}: HFile block at {at} is {len(payload)} bytes, its header says {raw_size}")
    return (magic, payload), at + HEADER.size + on_disk


def _index(payload: bytes, count: int) -> list[tuple[int, int, bytes]]:
    out, i = [], 0
    for _ in range(count):
        off, size = struct.unpack_from(">qi", payload, i)
        n, i = _read_vint(payload, i + 12)
        out.append((off, size, payload[i:i + n]))
        i += n
    return out


def _cells(payload: bytes, source: str) -> Iterator[tuple[bytes, bytes]]:
    i = 0
    while i < len(payload):
        klen, vlen = struct.unpack_from(">ii", payload, i)
        if klen < 0 or vlen < 0 or i + 8 + klen + vlen > len(payload):
            raise TableFormatError(f"{source}: damaged HFile cell at {i}")
        key = payload[i + 8:i + 8 + klen]
        yield _user_key(key), payload[i + 8 + klen:i + 8 + klen + vlen]
        _mvcc, i = _read_vint(payload, i + 8 + klen + vlen)  # always zero in Hudi's files


def _file_info(payload: bytes, source: str) -> dict[bytes, bytes]:
    if payload[:4] != b"PBUF":
        raise TableFormatError(f"{source}: HFile file info is not Protobuf")
    n, i = _read_varint(payload, 4)
    out = {}
    for num, entry in _pb_fields(payload[i:i + n]):
        if num == 1 and isinstance(entry, bytes):
            pair = dict(_pb_fields(entry))
            out[bytes(pair.get(1, b""))] = bytes(pair.get(2, b""))
    return out


# -- Hudi's bloom filter meta block ----------------------------------------------------------------
#: the meta block and file-info entry Hudi's HFile writer adds for the keys' bloom filter
BLOOM_META_BLOCK = "bloomFilter"
BLOOM_TYPE_KEY = b"bloomFilterTypeCode"
BLOOM_TYPE = b"DYNAMIC_V0"
#: the metadata table's bloom filter settings (``hoodie.metadata.bloom.filter.num.entries``,
#: ``...fpp``, ``...dynamic.max.entries``): each row of the dynamic filter holds 10,000 keys
BLOOM_ENTRIES, BLOOM_FPP, BLOOM_MAX_ENTRIES = 10_000, 1e-9, 100_000
_MURMUR_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def _bloom_shape(entries: int, fpp: float) -> tuple[int, int]:
    """(bits per row, hash functions) for ``entries`` keys at false-positive rate ``fpp``."""
    import math

    bits = math.ceil(entries * -math.log(fpp) / (math.log(2) ** 2))
    return bits, math.ceil(bits * math.log(2) / entries)


def _s32(n: int) -> int:
    n &= _MASK
    return n - (1 << 32) if n & 0x80000000 else n


def _murmur(data: bytes, seed: int) -> int:
    """Hadoop's ``MurmurHash.hash(bytes, seed)`` (the hash of ``hashType`` 1), as a signed int."""
    m = _MURMUR_M
    length = len(data)
    h = (seed ^ length) & _MASK
    n4 = length >> 2
    for i in range(n4):
        k = int.from_bytes(data[4 * i:4 * i + 4], "little")
        k = (k * m) & _MASK
        k ^= k >> 24
        k = (k * m) & _MASK
        h = ((h * m) & _MASK) ^ k
    left = length - 4 * n4
    if left:
        # Hadoop's tail, counted from the end: the last byte unshifted, the one before it << 8,
        # the one before that << 16 (Java bytes, sign-extended before the shift)
        signed = [b - 256 if b > 127 else b for b in data[-left:]]
        for i, b in enumerate(reversed(signed)):
            h ^= (b << (8 * i)) & _MASK
        h = (h * m) & _MASK
    h ^= h >> 13
    h = (h * m) & _MASK
    h ^= h >> 15
    return _s32(h)


def _positions(key: bytes, nb_hash: int, bits: int) -> list[int]:
    out, seed = [], 0
    for _ in range(nb_hash):
        seed = _murmur(key, seed)
        r = abs(seed) % bits  # Java's abs(seed % bits): the same for a truncating remainder
        out.append(r)
    return out


def _positions_many(keys: list[bytes], nb_hash: int, bits: int) -> np.ndarray:
    """:func:`_positions` of many keys at once, one row of ``nb_hash`` bit positions per key:
    the keys of one length hashed side by side in numpy (a base file of the metadata table
    holds tens of thousands of keys, 30 hashes each)."""
    out = np.zeros((len(keys), nb_hash), dtype=np.int64)
    by_len: dict[int, list[int]] = {}
    for i, k in enumerate(keys):
        by_len.setdefault(len(k), []).append(i)
    m, mask = np.uint64(_MURMUR_M), np.uint64(_MASK)
    for length, idx in by_len.items():
        n4, left = length >> 2, length & 3
        raw = np.frombuffer(b"".join(keys[i] for i in idx), dtype=np.uint8).reshape(len(idx), length)
        blocks = raw[:, :4 * n4].copy().view("<u4").astype(np.uint64) if n4 else None
        tail = raw[:, 4 * n4:].astype(np.int8).astype(np.int64) if left else None
        seeds = np.zeros(len(idx), dtype=np.uint64)
        rows = np.array(idx, dtype=np.int64)
        for r in range(nb_hash):
            h = (seeds ^ np.uint64(length)) & mask
            for b in range(n4):
                k = (blocks[:, b] * m) & mask
                k ^= k >> np.uint64(24)
                k = (k * m) & mask
                h = ((h * m) & mask) ^ k
            if left:
                for i in range(left):  # from the last byte: unshifted, then << 8, << 16
                    h ^= (tail[:, left - 1 - i] << (8 * i)).astype(np.uint64) & mask
                h = (h * m) & mask
            h ^= h >> np.uint64(13)
            h = (h * m) & mask
            h ^= h >> np.uint64(15)
            signed = h.astype(np.int64)
            signed = np.where(signed >= 1 << 31, signed - (1 << 32), signed)
            out[rows, r] = np.abs(signed) % bits
            seeds = h
    return out


def _bloom_rows(n: int, entries: int, max_entries: int) -> tuple[np.ndarray, int, int]:
    """(row of each of ``n`` keys, rows, the filter's count) as Hudi's ``DYNAMIC_V0`` filter
    takes keys: ``entries`` keys a row, a new row while the rows hold fewer than
    ``max_entries``; past that the first key over goes to row 0 and the next ones to the rows
    in turn, from row 0 again."""
    rows = max(1, -(-max_entries // entries)) if n > entries else 1
    rows = min(rows, max(1, -(-n // entries)))
    i = np.arange(n, dtype=np.int64)
    full = rows * entries
    if n <= full:
        return i // entries, rows, n - (rows - 1) * entries
    after = i - full - 1
    row = np.where(i < full, i // entries, np.where(after < 0, 0, np.maximum(after, 0) % rows))
    return row, rows, n - (rows - 1) * entries


def bloom_filter(keys: Iterable[str | bytes], *, entries: int = BLOOM_ENTRIES, fpp: float = BLOOM_FPP,
                 max_entries: int = BLOOM_MAX_ENTRIES) -> bytes:
    """The ``bloomFilter`` meta block Hudi writes beside an HFile's cells: its ``DYNAMIC_V0``
    bloom filter of ``keys`` (rows of ``entries`` keys, a new row whenever the last is full, up
    to ``max_entries`` keys; past that the rows take keys in turn), in Hadoop's ``Writable``
    layout, Base64 as Hudi's ``serializeToString`` gives it."""
    import base64

    bits, nb_hash = _bloom_shape(entries, fpp)
    nbytes = (bits + 7) // 8
    encoded = [key.encode() if isinstance(key, str) else key for key in keys]
    positions = _positions_many(encoded, nb_hash, bits)
    row_of, n_rows, count = _bloom_rows(len(encoded), entries, max_entries)
    # a bit per position, row by row, packed as Hadoop's BitSet lays out its bytes (bit i of a
    # byte is position 8 x byte + i)
    bitset = np.zeros((n_rows, nbytes * 8), dtype=bool)
    if len(encoded):
        bitset[np.repeat(row_of, nb_hash), positions.reshape(-1)] = True
    vectors = np.packbits(bitset, axis=1, bitorder="little")
    head = struct.pack(">iibi", -1, nb_hash, 1, bits)  # Filter: version, hashes, MURMUR_HASH, vector size
    out = head + struct.pack(">iii", entries, count, n_rows) + b"".join(head + v.tobytes() for v in vectors)
    return base64.b64encode(out)
