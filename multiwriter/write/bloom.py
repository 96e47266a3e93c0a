"""Hudi's bloom filter of record keys, as every Hudi writer puts it into each base file's footer.

Why our own: the footer filter is what Hudi's bloom index (and ours) reads to skip files that
cannot hold a key, so files we write must carry one that Hudi reads as its own, and files Hudi
wrote must be usable by our index. The format, as Hudi defines it (type ``DYNAMIC_V0``):

* footer keys ``org.apache.hudi.bloomfilter`` (standard Base64 of the serialized filter) and
  ``hoodie_bloom_filter_type_code`` = ``DYNAMIC_V0``;
* the serialized filter (big-endian, Hadoop ``Writable`` layout): int version (-1), int number
  of hash functions, byte hash type (1: Murmur), int bits per row; int keys per row, int keys
  in the last row, int number of rows; then per row the same four header fields and the row's
  bits, ``ceil(bits / 8)`` bytes, bit ``i`` in byte ``i // 8`` at position ``i % 8`` (LSB first);
* bits per row ``ceil(n * -ln(fpp) / ln(2)^2)``, hash functions ``ceil(ln(2) * bits / n)`` for
  n entries per row (Hudi's ``hoodie.index.bloom.num_entries``, 60,000 by default) and fpp =
  1e-9; up to 100,000 entries rows are added, after that keys go round-robin over the rows;
* a key's bit positions: hash_i = murmur2(utf8(key), seed = hash_{i-1}) with hash_0's seed 0,
  position ``abs(hash_i % bits)`` with Java's signed 32-bit remainder. Murmur2 is the 32-bit
  MurmurHash2 whose 1-3 tail bytes are sign-extended (Java bytes are signed).

Files here are written once (copy-on-write), so a new file's filter is sized to the keys it
holds (:meth:`DynamicBloomFilter.for_keys`: between ``MIN_ENTRIES`` and 60,000 entries per row),
the layout a Hudi writer configured with that ``num_entries`` writes; readers take the sizes from
the serialized filter. A 100-row micro-batch file then carries 11 KB of filter, not 323 KB, with
the same false-positive rate.

The hashing is vectorized with numpy over keys of equal length: the per-block mixing does not
depend on the seed, so it is computed once per key, and each of the ~30 chained rounds costs a
handful of array operations.
"""
from __future__ import annotations

import base64
import logging
import math
import os
import struct
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from ..threads import ProcessPool

FOOTER_KEY = b"org.apache.hudi.bloomfilter"
TYPE_CODE_KEY = b"hoodie_bloom_filter_type_code"
DYNAMIC_V0 = b"DYNAMIC_V0"
DEFAULT_ENTRIES = 60_000
DEFAULT_FPP = 1e-9
DEFAULT_MAX_ENTRIES = 100_000
MIN_ENTRIES = 2_000  # rows of sized filters hold at least this many keys (tiny files grow by upserts)
MURMUR_HASH = 1
_VERSION = -1
_M = np.uint32(0x5BD1E995)
_HEADER = struct.Struct(">iibi")

_log = logging.getLogger(__name__)


def bit_size(entries: int, fpp: float) -> int:
    return int(math.ceil(entries * (-math.log(fpp) / (math.log(2) * math.log(2)))))


def num_hashes(bits: int, entries: int) -> int:
    return int(math.ceil(math.log(2) * bits / entries))


@dataclass
class DynamicBloomFilter:
    """Hudi's ``DYNAMIC_V0`` filter: rows of equal-sized bit vectors, kept packed as serialized
    (uint8, LSB first: 2.6 Mbit is 323 KB per row), so a cache of many filters stays small."""

    bits: int
    hashes: int
    per_row: int
    max_entries: int
    rows: list[np.ndarray] = field(default_factory=list)
    in_last_row: int = 0
    _round_robin: int | None = None  # next row once the bound is reached (not serialized, as in Hudi)

    @classmethod
    def new(cls, entries: int = DEFAULT_ENTRIES, fpp: float = DEFAULT_FPP, max_entries: int = DEFAULT_MAX_ENTRIES) -> DynamicBloomFilter:
        b = bit_size(entries, fpp)
        return cls(b, num_hashes(b, entries), entries, max_entries, [_empty_row(b)])

    @classmethod
    def for_keys(cls, n: int, fpp: float = DEFAULT_FPP) -> DynamicBloomFilter:
        """A filter whose first row fits ``n`` keys (``MIN_ENTRIES`` to the default 60,000)."""
        return cls.new(entries=min(max(n, MIN_ENTRIES), DEFAULT_ENTRIES), fpp=fpp)

    # -- adding and testing -------------------------------------------------------------
    def add(self, keys: pa.Array | list[str]) -> None:
        """Add keys in order (the order decides the row of each key once a row is full)."""
        keys = _as_array(keys)
        if len(keys) == 0:
            return
        self._set(key_positions(keys, self.hashes, self.bits))

    def _assign(self, n: int) -> np.ndarray:
        """The row of each of the next ``n`` keys, following Hudi's growth rule: fill the last
        row up to ``per_row`` keys, add a row while ``rows * per_row < max_entries``, then
        (from row 0) go round-robin over the rows."""
        out = np.empty(n, dtype=np.int64)
        i = 0
        while i < n:
            if self._round_robin is not None:
                m = n - i
                out[i:] = (self._round_robin + np.arange(m)) % len(self.rows)
                self._round_robin += m
                self.in_last_row += m
                break
            if self.in_last_row >= self.per_row:
                if len(self.rows) * self.per_row < self.max_entries:
                    self.rows.append(_empty_row(self.bits))
                    self.in_last_row = 0
                else:  # the bound is reached: this key goes to row 0, the next ones round-robin
                    self._round_robin = 0
                    out[i] = 0
                    self.in_last_row += 1
                    i += 1
                continue
            take = min(n - i, self.per_row - self.in_last_row)
            out[i:i + take] = len(self.rows) - 1
            self.in_last_row += take
            i += take
        return out

    def add_rows(self, t: pa.Table, key_column: str) -> None:
        """Add the keys of ``t``'s rows, using their precomputed :data:`HASHES` when there."""
        pos = positions_of(t, self)
        if pos is None:
            self.add(t.column(key_column))
        elif len(pos):
            self._set(pos)

    def _set(self, positions: np.ndarray) -> None:
        row_of = self._assign(len(positions))
        if len(self.rows) == 1:  # every key in the one row: no grouping by row
            self._set_row(0, positions)
            return
        for r in np.unique(row_of).tolist():
            self._set_row(r, positions if len(row_of) and (row_of == r).all() else positions[row_of == r])

    def _set_row(self, r: int, positions: np.ndarray) -> None:
        hit = np.zeros(len(self.rows[r]) * 8, dtype=bool)  # scatter, then pack LSB first
        hit[positions.ravel().astype(np.intp)] = True  # numpy scatters by intp indices twice as fast
        self.rows[r] |= np.packbits(hit, bitorder="little")

    def might_contain(self, keys: pa.Array | list[str]) -> np.ndarray:
        """Per key: False means certainly absent; True means possibly present. Keys are dropped
        from the hashing as soon as a bit is unset in every row, so absent keys cost few rounds."""
        keys = _as_array(keys)
        out = np.zeros(len(keys), dtype=bool)
        for idx, hasher in _by_length(keys):
            if idx is None:
                idx = np.arange(len(keys))
            alive = np.arange(len(idx))
            h = hasher.start()
            row_alive = np.ones((len(self.rows), len(idx)), dtype=bool)
            for _ in range(self.hashes):
                h = hasher.next(h, alive if len(alive) < hasher.n else None)
                pos = _position(h, self.bits)
                byte, shift = pos >> np.uint32(3), (pos & np.uint32(7)).astype(np.uint8)
                keep = np.zeros(len(alive), dtype=bool)
                for r, row in enumerate(self.rows):
                    hit = ((row[byte] >> shift) & 1).astype(bool) & row_alive[r, alive]
                    row_alive[r, alive] = hit
                    keep |= hit
                alive, h = alive[keep], h[keep]
                if len(alive) == 0:
                    break
            out[idx[alive]] = True
        return out

    def might_contain_hashes(self, hashes: np.ndarray) -> np.ndarray:
        """:meth:`might_contain` for keys given by their precomputed (n, hashes) murmur values
        (:func:`key_hashes`), so a batch is hashed once however many files it is tested against."""
        if hashes.shape[1] != self.hashes:
            raise ValueError(f"{hashes.shape[1]} hashes per key given, the filter uses {self.hashes}")
        out = np.zeros(len(hashes), dtype=bool)
        if not len(hashes):
            return out
        pos = _position(hashes, self.bits)
        byte, shift = pos >> np.uint32(3), (pos & np.uint32(7)).astype(np.uint8)
        for row in self.rows:
            out |= (((row[byte] >> shift) & 1) != 0).all(axis=1)
        return out

    # -- (de)serialization ---------------------------------------------------------------
    def to_bytes(self) -> bytes:
        head = _HEADER.pack(_VERSION, self.hashes, MURMUR_HASH, self.bits)
        parts = [head, struct.pack(">iii", self.per_row, self.in_last_row, len(self.rows))]
        for row in self.rows:
            parts.append(head)
            parts.append(row.tobytes())
        return b"".join(parts)

    def serialize(self) -> bytes:
        """The footer value (Base64 text, as bytes)."""
        return base64.b64encode(self.to_bytes())

    @classmethod
    def from_bytes(cls, data: bytes, max_entries: int = DEFAULT_MAX_ENTRIES) -> DynamicBloomFilter:
        version, hashes, hash_type, bits = _HEADER.unpack_from(data, 0)
        if version != _VERSION or hash_type != MURMUR_HASH:
            raise ValueError(f"unsupported bloom filter (version {version}, hash type {hash_type})")
        per_row, in_last, n_rows = struct.unpack_from(">iii", data, _HEADER.size)
        off = _HEADER.size + 12
        nbytes = (bits + 7) // 8
        rows = []
        for _ in range(n_rows):
            off += _HEADER.size
            rows.append(np.frombuffer(data, dtype=np.uint8, count=nbytes, offset=off).copy())
            off += nbytes
        return cls(bits, hashes, per_row, max_entries, rows, in_last)

    @classmethod
    def deserialize(cls, text: bytes | str) -> DynamicBloomFilter:
        return cls.from_bytes(base64.b64decode(text))

    def copy(self) -> DynamicBloomFilter:
        """An independent filter equal to this one as read back from its footer (a cached
        filter is grown into a new file's without decoding the old file's Base64 again)."""
        return DynamicBloomFilter(self.bits, self.hashes, self.per_row, self.max_entries, [r.copy() for r in self.rows],
                                  self.in_last_row)


#: a column of precomputed key hashes (fixed-size list of uint32: the chained murmur values),
#: computed in one pass over a whole batch so that each file's filter, whatever its size, only
#: takes them modulo its bits
HASHES = "_mw_bloom_hashes"
_HASH_COUNT = num_hashes(bit_size(DEFAULT_ENTRIES, DEFAULT_FPP), DEFAULT_ENTRIES)


def with_hashes(t: pa.Table, key_column: str, pending: Callable[[], np.ndarray] | None = None) -> pa.Table:
    """``t`` plus the :data:`HASHES` of its keys (once per batch). ``pending``: those hashes,
    already being computed (:func:`start_hashes` of the same keys)."""
    if t.schema.get_field_index(HASHES) >= 0:
        return t
    if pending is not None:
        h = pending()
    else:
        h = key_hashes(t.column(key_column), _HASH_COUNT) if t.num_rows else np.zeros((0, _HASH_COUNT), np.uint32)
    col = pa.FixedSizeListArray.from_arrays(pa.array(h.ravel(), pa.uint32()), _HASH_COUNT)
    return t.append_column(HASHES, col)


def hashes_of(t: pa.Table) -> np.ndarray | None:
    """The (n, hashes) :data:`HASHES` of ``t``'s rows, or None when it has none."""
    if t.schema.get_field_index(HASHES) < 0:
        return None
    if t.num_rows == 0:
        return np.zeros((0, _HASH_COUNT), np.uint32)
    col = t.column(HASHES)
    if isinstance(col, pa.ChunkedArray):  # combine_chunks copies even a single chunk
        col = col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
    return col.flatten().to_numpy(zero_copy_only=False).reshape(-1, _HASH_COUNT)


def positions_of(t: pa.Table, f: DynamicBloomFilter) -> np.ndarray | None:
    """The bit positions of ``t``'s rows in ``f`` from their precomputed hashes (None when
    there are none, or ``f`` uses another number of hash functions)."""
    h = hashes_of(t) if f.hashes == _HASH_COUNT else None
    return None if h is None else _position(h, f.bits)


def _empty_row(bits: int) -> np.ndarray:
    return np.zeros((bits + 7) // 8, dtype=np.uint8)


def from_footer(md: dict[bytes, bytes] | None) -> DynamicBloomFilter | None:
    """The filter in a Parquet footer's key-value metadata, or None (absent or another type)."""
    if not md or FOOTER_KEY not in md:
        return None
    code = md.get(TYPE_CODE_KEY)
    if code is not None and not code.startswith(b"DYNAMIC"):
        return None  # SIMPLE filters: the index then reads the keys instead
    if code is None:
        return None
    try:
        f = DynamicBloomFilter.deserialize(md[FOOTER_KEY])
    except (ValueError, struct.error):
        return None
    return f if _holds_own_range(f, md) else None


def _holds_own_range(f: DynamicBloomFilter, md: dict[bytes, bytes]) -> bool:
    """Does ``f`` admit the file's own smallest and largest key? Hudi 1.1's Spark writer fills
    its footer filters with hashes we do not reproduce: such a filter denies keys the file holds.
    Trusted, the index would call every stored key new (a second copy on update), and a rewrite
    grown from it would deny the carried-over keys; untrusted, the index falls back to the key
    range and the key column, and a rewrite builds its filter anew over every key."""
    lo, hi = md.get(b"hoodie_min_record_key"), md.get(b"hoodie_max_record_key")
    if lo is None or hi is None:
        return True
    ok = bool(f.might_contain([lo.decode("utf-8", "replace"), hi.decode("utf-8", "replace")]).all())
    if not ok:
        _log.info("a footer bloom filter denies its file's own keys (%s..%s): not used", lo[:40], hi[:40])
    return ok


def footer_entries(f: DynamicBloomFilter) -> dict[bytes, bytes]:
    return {FOOTER_KEY: f.serialize(), TYPE_CODE_KEY: DYNAMIC_V0}


# -- hashing ---------------------------------------------------------------------------


def _as_array(keys: pa.Array | pa.ChunkedArray | list[str]) -> pa.Array:
    if isinstance(keys, list):
        return pa.array(keys, pa.string())
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    return keys.cast(pa.binary())


def key_positions(keys: pa.Array, hashes: int, bits: int) -> np.ndarray:
    """(n, hashes) bit positions (uint32) of UTF-8 ``keys`` (an Arrow string/binary array)."""
    return _position(key_hashes(keys, hashes), bits)


#: batches of at least this many keys are hashed in parts, one per core (numpy releases the GIL)
PARALLEL_MIN_KEYS = 40_000
#: threads that only hash (a task never waits on another): safe to use from any thread
HASH_POOL = ProcessPool("mw-bloom-hash")


def _hash_pool() -> ThreadPoolExecutor:
    return HASH_POOL.get()


def key_hashes(keys: pa.Array | pa.ChunkedArray, hashes: int) -> np.ndarray:
    """(n, hashes) chained murmur values (uint32) of UTF-8 ``keys``: hash i is seeded with hash i-1."""
    return _start(keys, hashes)()


def start_hashes(keys: pa.Array | pa.ChunkedArray) -> Callable[[], np.ndarray]:
    """Start computing the :data:`HASHES` of ``keys`` on the hash threads and return the call
    that waits for them, so a writer can go on (begin its instant, plan) meanwhile. In parts,
    one per core, although the writer's thread runs too: each of the ~360 array operations
    needs the GIL back from that thread, so one part alone took twice its CPU time and the
    merges waited for it."""
    return _start(keys, _HASH_COUNT)


def _start(keys: pa.Array | pa.ChunkedArray, hashes: int, parts: int | None = None) -> Callable[[], np.ndarray]:
    """Hash in ``parts`` pieces side by side (default: one per core, at most 4)."""
    keys = _as_array(keys)
    n, cores = len(keys), os.cpu_count() or 1
    out = np.empty((n, hashes), dtype=np.uint32)
    if n < PARALLEL_MIN_KEYS or (cores < 2 and parts is None):
        done: list[bool] = []

        def here() -> np.ndarray:
            if not done:
                _hash_into(keys, hashes, out)
                done.append(True)
            return out
        return here
    bounds = np.linspace(0, n, (parts or min(cores, 4)) + 1).astype(int).tolist()
    running = [_hash_pool().submit(_hash_into, keys.slice(lo, hi - lo), hashes, out[lo:hi])
               for lo, hi in zip(bounds, bounds[1:], strict=False)]

    def wait() -> np.ndarray:
        for f in running:
            f.result()
        return out
    return wait


def _hash_into(keys: pa.Array, hashes: int, out: np.ndarray) -> None:
    for idx, hasher in _by_length(keys):
        rounds = np.empty((hashes, hasher.n), dtype=np.uint32)  # one contiguous row per round
        scratch = np.empty(hasher.n, dtype=np.uint32)
        seed = hasher.start()
        for i in range(hashes):
            hasher.next_into(seed, rounds[i], scratch)
            seed = rounds[i]
        if idx is None:
            out[:] = rounds.T
        else:
            out[idx] = rounds.T


def _by_length(keys: pa.Array) -> list[tuple[np.ndarray | None, _Murmur]]:
    """Keys grouped by byte length (murmur's block structure depends on it), with their hashers;
    the index array is None when every key has the same length (the common case: no gather)."""
    keys = _as_array(keys)
    if keys.null_count:
        raise ValueError("bloom filter keys must not be null")
    offsets, data = _key_bytes(keys)
    lengths = np.diff(offsets)
    if len(lengths) and lengths.min() == 0:
        raise ValueError("bloom filter keys must not be empty")
    same = _same_length(offsets, data)
    if same is not None:
        return [(None, _Murmur(same))]
    out: list[tuple[np.ndarray | None, _Murmur]] = []
    for length in np.flatnonzero(np.bincount(lengths)).tolist():
        idx = np.flatnonzero(lengths == length)
        out.append((idx, _Murmur(data[offsets[idx][:, None] + np.arange(length)[None, :]])))
    return out


def equal_length_bytes(keys: pa.Array | pa.ChunkedArray) -> np.ndarray | None:
    """The keys' UTF-8 bytes as an (n, length) matrix when every key has the same byte length
    (they lie back to back: a view, no copy), else None."""
    offsets, data = _key_bytes(_as_array(keys))
    return _same_length(offsets, data)


def _key_bytes(keys: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets as int64, value bytes) of a binary array, its slice offset applied."""
    offsets = np.frombuffer(keys.buffers()[1], dtype=np.int32)[keys.offset:keys.offset + len(keys) + 1].astype(np.int64)
    data = np.frombuffer(keys.buffers()[2], dtype=np.uint8) if keys.buffers()[2] is not None else np.zeros(0, np.uint8)
    return offsets, data


def _same_length(offsets: np.ndarray, data: np.ndarray) -> np.ndarray | None:
    lengths = np.diff(offsets)
    if not len(lengths) or lengths.min() != lengths.max():
        return None
    return data[offsets[0]:offsets[-1]].reshape(len(lengths), int(lengths[0]))


def _position(h: np.ndarray, bits: int) -> np.ndarray:
    """Java's ``Math.abs(h % bits)`` for signed 32-bit ``h`` (given as uint32): ``|h| % bits``.
    ``|INT_MIN|`` wraps to itself, 2^31 as uint32, as in Java. The remainder is taken as
    ``a - (a // bits) * bits``: numpy divides by a scalar with a multiply and shift, several
    times faster than its ``%``."""
    a = np.abs(h.view(np.int32)).view(np.uint32)
    d = np.uint32(bits)
    q = a // d
    q *= d
    return a - q


class _Murmur:
    """32-bit MurmurHash2 of equal-length keys (rows of a uint8 matrix) for successive seeds.

    The block mixing and the tail do not depend on the seed: computed once, each round then
    costs two operations per block."""

    def __init__(self, mat: np.ndarray) -> None:
        n, self.length = mat.shape
        nb = self.length // 4
        # each key's whole blocks as little-endian words (one copy of the block bytes)
        words = np.ascontiguousarray(mat[:, :4 * nb]).view("<u4") if nb else np.zeros((n, 0), "<u4")
        with np.errstate(over="ignore"):
            self.blocks = []
            for b in range(nb):
                k = words[:, b].astype(np.uint32)
                k *= _M
                k ^= k >> np.uint32(24)
                k *= _M
                self.blocks.append(k)
            tail = self.length % 4
            self.tail: np.ndarray | None = None
            if tail:  # Java bytes are signed: tail bytes are sign-extended before the shift
                signed = mat[:, self.length - tail:].astype(np.int8).astype(np.int32).view(np.uint32)
                self.tail = np.zeros(n, dtype=np.uint32)
                for j in range(tail):
                    self.tail ^= signed[:, j] << np.uint32(8 * j)
        self.n = n
        # :meth:`next_into` xors the last block and the tail in one step (neither depends on the seed)
        self._last = self.blocks[-1] ^ self.tail if self.blocks and self.tail is not None else None

    def start(self) -> np.ndarray:
        return np.zeros(self.n, dtype=np.uint32)

    def next_into(self, seed: np.ndarray, h: np.ndarray, scratch: np.ndarray) -> None:
        """:meth:`next` for every key, written into ``h`` with ``scratch`` as the one temporary:
        no array is allocated per round (30 rounds of a 100k-key batch allocated 90 arrays of
        400 KB; without them the hashing takes about a tenth less)."""
        with np.errstate(over="ignore"):
            np.bitwise_xor(seed, np.uint32(self.length), out=h)
            if self._last is not None:
                for k in self.blocks[:-1]:
                    h *= _M
                    h ^= k
                h *= _M
                h ^= self._last
                h *= _M
            else:
                for k in self.blocks:
                    h *= _M
                    h ^= k
                if self.tail is not None:
                    h ^= self.tail
                    h *= _M
            np.right_shift(h, np.uint32(13), out=scratch)
            h ^= scratch
            h *= _M
            np.right_shift(h, np.uint32(15), out=scratch)
            h ^= scratch

    def next(self, seed: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """The hashes of the keys (or of ``rows`` of them) with the given seeds."""
        with np.errstate(over="ignore"):
            h = seed ^ np.uint32(self.length)
            for k in self.blocks:
                h *= _M
                h ^= k if rows is None else k[rows]
            if self.tail is not None:
                h ^= self.tail if rows is None else self.tail[rows]
                h *= _M
            h ^= h >> np.uint32(13)
            h *= _M
            h ^= h >> np.uint32(15)
        return h
