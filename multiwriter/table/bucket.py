"""Hudi's simple bucket index: which bucket a record key belongs to, and how bucket file ids look.

A Merge-on-Read table with the simple bucket index has a fixed number of buckets per partition;
bucket ``b`` is one file group whose file id starts with ``b`` as 8 zero-padded digits. Every
writer (ours and Hudi's JVM writer alike) must route a key to the same bucket, so the rule here
is Hudi's, bit for bit:

1. Hash values are taken out of the record key string (``hoodie.bucket.index.hash.field``,
   default: the record key fields). A key that lacks ``,`` or lacks ``:`` is one value, the key
   itself. Otherwise it is read as ``field:value,field:value``: the values of the hash fields,
   in the order the key lists them (a value may itself hold ``:`` or ``,``, resolved the way
   Hudi's parser does); ``__null__`` stands for null and ``__empty__`` for ``""``. If no field
   matched, the whole key is the one value.
2. The values form a Java ``List<String>``; its ``hashCode`` (``h = 31*h + s.hashCode()`` from 1,
   a null counting 0) uses Java's ``String.hashCode`` over UTF-16 code units, in int32.
3. ``bucket = (hash & 0x7fffffff) % num_buckets``.

:func:`bucket_ids` does this for a whole Arrow array with numpy: the UTF-8 bytes are decoded to
UTF-16 code units once, and the hash of any substring comes from one prefix sum (31 is odd, so
it has an inverse modulo 2**32). Keys whose values hold ``:`` or ``,`` take the scalar parser.
"""
from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Iterable, Sequence

import numpy as np
import pyarrow as pa

from ..errors import ConfigError, InvalidRecordError
from ..threads import renew_in_child

HASH_FIELD_OPTION = "hoodie.bucket.index.hash.field"
NUM_BUCKETS_OPTION = "hoodie.bucket.index.num.buckets"
NULL_PLACEHOLDER = "__null__"
EMPTY_PLACEHOLDER = "__empty__"
BUCKET_DIGITS = 8
MAX_BUCKETS = 10**BUCKET_DIGITS  # a file id carries its bucket in 8 digits
FIXED_SUFFIX = "-0000-0000-0000-000000000000"  # file ids shared by all writers of a bucket

_MASK32 = (1 << 32) - 1
_INV31 = pow(31, -1, 1 << 32)
_COLON = ord(":")
_COMMA = ord(",")
_FILE_ID = re.compile(r"([0-9]{8})-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}-[0-9]+")


# ---------------------------------------------------------------------------------------------
# configuration


def validate_num_buckets(num_buckets: object) -> int:
    """``num_buckets`` as an int, or :class:`ConfigError`: buckets are fixed per table, so a bad
    count must stop the writer before any file is named after it."""
    if isinstance(num_buckets, bool) or not isinstance(num_buckets, (int, np.integer)):
        raise ConfigError(f"{NUM_BUCKETS_OPTION} must be a positive integer, got {num_buckets!r}")
    n = int(num_buckets)
    if n < 1:
        raise ConfigError(f"{NUM_BUCKETS_OPTION} must be a positive integer, got {n}")
    if n > MAX_BUCKETS:
        raise ConfigError(f"{NUM_BUCKETS_OPTION} must be at most {MAX_BUCKETS} (file ids hold 8 digits), got {n}")
    return n


def resolve_hash_fields(hash_fields: Sequence[str], key_fields: Sequence[str]) -> tuple[str, ...]:
    """The hash fields to use: ``hash_fields``, or the record key fields when it is empty (Hudi's
    default). They must be record key fields, since the bucket is computed from the key string."""
    keys = tuple(key_fields)
    if not keys:
        raise ConfigError("the bucket index needs record key fields")
    fields = tuple(hash_fields) or keys
    if len(set(fields)) != len(fields):
        raise ConfigError(f"{HASH_FIELD_OPTION} lists a field twice: {','.join(fields)!r}")
    unknown = [f for f in fields if f not in keys]
    if unknown:
        raise ConfigError(
            f"{HASH_FIELD_OPTION} must be a subset of the record key fields {list(keys)}; "
            f"not record key fields: {unknown}"
        )
    return fields


def parse_hash_fields(value: str | None, key_fields: Sequence[str]) -> tuple[str, ...]:
    """``hoodie.bucket.index.hash.field`` as written in options (``"a,b"``), validated."""
    fields = tuple(f.strip() for f in (value or "").split(",") if f.strip())
    return resolve_hash_fields(fields, key_fields)


# ---------------------------------------------------------------------------------------------
# scalar rule (reference and fallback)


def hash_keys(record_key: str, hash_fields: Sequence[str]) -> list[str | None]:
    """The values Hudi hashes for ``record_key`` (step 1 of the module docstring).

    Walks the key with the index rules of Hudi's complex-key parser
    (``KeyGenUtils.extractRecordKeysByFields``): a value runs to the last ``,`` before a later
    ``:`` that has a ``,`` in between, so values holding ``:`` (timestamps) or ``,`` come out
    whole. Raises :class:`InvalidRecordError` for the keys on which that parser never ends (a
    skipped field whose value holds ``:`` with no ``,`` after it): no JVM writer can place them.
    """
    if "," not in record_key or ":" not in record_key:
        return [record_key]
    wanted = set(hash_fields)
    take_all = not wanted or wanted == {""}
    values: list[str | None] = []
    pos, end = 0, len(record_key)
    while pos < end:
        sep = record_key.find(":", pos)
        take = take_all or record_key[pos:sep] in wanted
        nxt = _index_of(record_key, ":", sep + 1)
        if nxt < 0:
            value, pos = record_key[sep + 1:], end
        else:
            comma = _last_index_of(record_key, ",", nxt)
            while comma < sep and (nxt > 0 or not take):
                if nxt < 0:
                    raise InvalidRecordError(
                        f"record key {record_key!r} cannot be bucketed: Hudi's key parser does not end on it"
                    )
                nxt = _index_of(record_key, ":", nxt + 1)
                comma = _last_index_of(record_key, ",", nxt)
            if comma > 0:
                value, pos = record_key[sep + 1:comma], comma + 1
            else:
                value, pos = record_key[sep + 1:], end
        if take:
            values.append(None if value == NULL_PLACEHOLDER else "" if value == EMPTY_PLACEHOLDER else value)
    return values or [record_key]


def _index_of(s: str, sub: str, start: int) -> int:
    """Java's ``String.indexOf(str, from)``."""
    return s.find(sub, max(start, 0))


def _last_index_of(s: str, sub: str, start: int) -> int:
    """Java's ``String.lastIndexOf(str, from)`` for a one-character ``sub``."""
    return s.rfind(sub, 0, start + 1) if start >= 0 else -1


def java_string_hash(s: str | None) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, int32); 0 for null, as List does."""
    if not s:
        return 0
    units = np.frombuffer(s.encode("utf-16-le", "surrogatepass"), dtype="<u2")
    h = 0
    for u in units.tolist():
        h = (31 * h + u) & _MASK32
    return _signed(h)


def java_list_hash(values: Iterable[str | None]) -> int:
    """Java's ``List<String>.hashCode``."""
    h = 1
    for v in values:
        h = (31 * h + java_string_hash(v)) & _MASK32
    return _signed(h)


def _signed(h: int) -> int:
    return h - (1 << 32) if h & 0x80000000 else h


def bucket_id(record_key: str, num_buckets: int, hash_fields: Sequence[str] = (),
              key_fields: Sequence[str] = ()) -> int:
    """The bucket of one record key (``key_fields`` only validates ``hash_fields``)."""
    n = validate_num_buckets(num_buckets)
    fields = resolve_hash_fields(hash_fields, key_fields) if key_fields else tuple(hash_fields)
    return (java_list_hash(hash_keys(record_key, fields)) & 0x7FFFFFFF) % n


# ---------------------------------------------------------------------------------------------
# vectorized rule


def bucket_ids(record_keys: pa.Array | pa.ChunkedArray, num_buckets: int, hash_fields: Sequence[str],
               key_fields: Sequence[str]) -> np.ndarray:
    """The bucket of every record key, as int32, the same as :func:`bucket_id` per key."""
    n = validate_num_buckets(num_buckets)
    fields = resolve_hash_fields(hash_fields, key_fields)
    h = list_hashes(record_keys, fields)
    return ((h.view(np.uint32) & np.uint32(0x7FFFFFFF)) % np.uint32(n)).astype(np.int32)


def list_hashes(record_keys: pa.Array | pa.ChunkedArray, hash_fields: Sequence[str]) -> np.ndarray:
    """Java's ``List.hashCode`` of every key's hash values (int32), before the bucket modulo."""
    if isinstance(record_keys, pa.ChunkedArray):
        parts = [list_hashes(c, hash_fields) for c in record_keys.chunks]
        return np.concatenate(parts) if parts else np.zeros(0, np.int32)
    arr = record_keys
    if pa.types.is_large_string(arr.type) or str(arr.type) == "string_view":
        arr = arr.cast(pa.string())
    if not pa.types.is_string(arr.type):
        raise TypeError(f"record keys must be strings, not {arr.type}")
    if arr.null_count:
        raise InvalidRecordError(f"{arr.null_count} record key(s) are null; the bucket index needs every key")
    if len(arr) == 0:
        return np.zeros(0, np.int32)
    return _Keys(arr).list_hashes(tuple(hash_fields))


class _PowerTables:
    """31**t and 31**-t modulo 2**32, grown on demand to the largest batch seen (8 bytes per
    UTF-16 unit) and shared: a table is never changed once built, only replaced."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        renew_in_child(self)
        self._pow = np.ones(1, np.uint32)
        self._inv = np.ones(1, np.uint32)

    def get(self, size: int) -> tuple[np.ndarray, np.ndarray]:
        pw, inv = self._pow, self._inv
        if len(pw) >= size:
            return pw, inv
        with self._lock:
            if len(self._pow) < size:
                n = max(size, 2 * len(self._pow))
                with np.errstate(over="ignore"):
                    pw = np.cumprod(np.full(n, 31, np.uint32), dtype=np.uint32)
                    inv = np.cumprod(np.full(n, _INV31, np.uint32), dtype=np.uint32)
                self._pow = np.concatenate([np.ones(1, np.uint32), pw[:-1]])
                self._inv = np.concatenate([np.ones(1, np.uint32), inv[:-1]])
            return self._pow, self._inv


_POWERS = _PowerTables()


class _Keys:
    """One string array's bytes, its UTF-16 code units and a prefix sum that hashes any
    substring in O(1): ``hash(u[a:b]) = 31**(b-1) * sum(u[t] * 31**-t for a <= t < b)``."""

    def __init__(self, arr: pa.Array) -> None:
        self.arr = arr
        self._word_view: np.ndarray | None = None
        offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)[arr.offset:arr.offset + len(arr) + 1]
        data_buf = arr.buffers()[2]
        raw = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
        self.data = raw[offsets[0]:offsets[-1]]
        self.offsets = offsets - offsets[0]  # int32: Arrow's own offsets
        units, self.unit_at = _utf16(self.data)
        self.pow, inv = _POWERS.get(len(units) + 1)
        with np.errstate(over="ignore"):
            weighted = units * inv[:len(units)]
        self.prefix = np.zeros(len(units) + 1, np.uint32)
        np.cumsum(weighted, dtype=np.uint32, out=self.prefix[1:])

    def hashes(self, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Java ``String.hashCode`` (as uint32) of the byte ranges ``[start, end)``."""
        a, b = self.unit_at[start], self.unit_at[end]
        with np.errstate(over="ignore"):
            h = self.pow[np.maximum(b - 1, 0)] * (self.prefix[b] - self.prefix[a])
        return np.where(b > a, h, np.uint32(0))

    def list_hashes(self, fields: tuple[str, ...]) -> np.ndarray:
        n = len(self.offsets) - 1
        starts, ends = self.offsets[:-1], self.offsets[1:]
        with np.errstate(over="ignore"):
            out = np.uint32(31) + self.hashes(starts, ends)  # [key]: the usual case
        seps = _Separators(self.data, self.offsets)
        if seps.pairs_key.size:
            self._pairs(out, seps, fields)
        for i in np.flatnonzero(seps.irregular).tolist():
            out[i] = java_list_hash(hash_keys(self.arr[i].as_py(), fields)) & _MASK32
        return out.view(np.int32)[:n]

    def _pairs(self, out: np.ndarray, seps: _Separators, fields: tuple[str, ...]) -> None:
        """Keys of plain ``field:value,...`` pairs: hash the matching values, in key order."""
        key = seps.pairs_key
        take = self._field_matches(seps.field_start, seps.colon, fields)
        value_hash = self._value_hashes(seps.colon + 1, seps.value_end)
        n = len(out)
        m = np.bincount(key[take], minlength=n)  # values per key
        taken = np.concatenate([[0], np.cumsum(take)])
        rank = taken[1:] - taken[seps.first_pair[key]]  # 1-based among the key's values
        exp = (m[key] - rank).clip(0)
        with np.errstate(over="ignore"):
            contrib = np.where(take, value_hash * self.pow[exp], np.uint32(0)).astype(np.uint32)
            acc = np.zeros(len(key) + 1, np.uint32)
            np.cumsum(contrib, dtype=np.uint32, out=acc[1:])
            keys_with = np.flatnonzero(seps.pairs_count)
            first = seps.first_pair[keys_with]
            total = acc[first + seps.pairs_count[keys_with]] - acc[first]
            hashed = self.pow[m[keys_with]] + total
        matched = m[keys_with] > 0
        out[keys_with[matched]] = hashed[matched]

    def _field_matches(self, start: np.ndarray, end: np.ndarray, fields: tuple[str, ...]) -> np.ndarray:
        """Whether each byte range ``[start, end)`` is one of ``fields`` (exact bytes)."""
        if not fields or fields == ("",):
            return np.ones(len(start), bool)
        match = np.zeros(len(start), bool)
        length = end - start
        for f in fields:
            match |= self._equals(start, length, f.encode("utf-8"))
        return match

    def _equals(self, start: np.ndarray, length: np.ndarray, want: bytes) -> np.ndarray:
        """Whether the byte ranges equal ``want``, compared 8 bytes at a time (one gather per word)."""
        ok = length == len(want)
        words = self._words()
        for i in range(0, len(want), 8):
            chunk = want[i:i + 8]
            cand = np.flatnonzero(ok)
            mask = np.uint64((1 << (8 * len(chunk))) - 1)
            got = words[start[cand] + i] & mask
            ok[cand] = got == np.uint64(int.from_bytes(chunk, "little"))
        return ok

    def _words(self) -> np.ndarray:
        """For each byte offset, the 8 bytes from there as a little-endian uint64 (an unaligned,
        overlapping view: no copy beyond 8 bytes of padding)."""
        if self._word_view is None:
            padded = np.concatenate([self.data, np.zeros(8, np.uint8)])
            self._word_view = np.ndarray(shape=(len(self.data) + 1,), dtype="<u8", buffer=padded, strides=(1,))
        return self._word_view

    def _value_hashes(self, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Value hashes, with the null/empty placeholders counting 0 (as null and "" do)."""
        h = self.hashes(start, end)
        for p in (NULL_PLACEHOLDER, EMPTY_PLACEHOLDER):
            cand = np.flatnonzero((end - start == len(p)) & (h == np.uint32(java_string_hash(p) & _MASK32)))
            if cand.size:
                h[cand[self._equals(start[cand], (end - start)[cand], p.encode())]] = 0
        return h


class _Separators:
    """Where each key's ``:`` and ``,`` are. A key with both is *regular* when they alternate
    ``: , : ... :`` (then it splits into pairs exactly as Hudi's parser splits it); other keys
    with both are *irregular* and go to the scalar parser. Both bytes are ASCII, so they never
    occur inside a multi-byte UTF-8 character."""

    def __init__(self, data: np.ndarray, offsets: np.ndarray) -> None:
        n = len(offsets) - 1
        is_sep = (data == _COLON) | (data == _COMMA)
        pos = np.flatnonzero(is_sep)
        colon = data[pos] == _COLON
        seen = np.zeros(len(data) + 1, np.int32)
        np.cumsum(is_sep, out=seen[1:])
        count = seen[offsets[1:]] - seen[offsets[:-1]]
        key = np.repeat(np.arange(n, dtype=np.int32), count)
        colons = np.bincount(key[colon], minlength=n)
        first = np.concatenate([[0], np.cumsum(count)])[:-1]
        rank = np.arange(len(pos)) - first[key]
        wrong = np.bincount(key[colon != (rank % 2 == 0)], minlength=n) > 0
        both = (colons > 0) & (colons < count)
        regular = both & ~wrong & (count % 2 == 1)
        self.irregular = both & ~regular
        sel = np.flatnonzero(regular[key] & colon)  # one entry per pair
        self.pairs_key = key[sel]
        self.colon = pos[sel]
        r = rank[sel]
        last = r == count[self.pairs_key] - 1
        self.field_start = np.where(r == 0, offsets[self.pairs_key], pos[np.maximum(sel - 1, 0)] + 1)
        self.value_end = np.where(last, offsets[self.pairs_key + 1], pos[np.minimum(sel + 1, len(pos) - 1)])
        self.pairs_count = np.bincount(self.pairs_key, minlength=n)
        self.first_pair = np.concatenate([[0], np.cumsum(self.pairs_count)])[:-1]


_UNITS_OF_BYTE = np.array([1] * 0x80 + [0] * 0x40 + [1] * 0x30 + [2] * 0x10, np.int8)  # per UTF-8 byte


def _utf16(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """UTF-16 code units (uint32) of UTF-8 ``data``, and for each byte offset (and the end) the
    matching code-unit offset. Characters beyond U+FFFF become surrogate pairs, as in Java: a
    4-byte character's lead byte counts two units, continuation bytes none."""
    unit_at = np.zeros(data.size + 1, np.int32)
    if data.size == 0 or int(data.max()) < 0x80:
        unit_at[1:] = np.arange(1, data.size + 1, dtype=np.int32)
        return data.astype(np.uint32), unit_at
    try:
        text = data.tobytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidRecordError(f"record keys are not valid UTF-8: {e}") from None
    units = np.frombuffer(text.encode("utf-16-le", "surrogatepass"), "<u2").astype(np.uint32)
    np.cumsum(_UNITS_OF_BYTE[data], out=unit_at[1:])
    return units, unit_at


# ---------------------------------------------------------------------------------------------
# file ids


def bucket_id_str(bucket: int) -> str:
    """A bucket number as Hudi writes it at the start of a file id: 8 digits, zero-padded."""
    if isinstance(bucket, bool) or not isinstance(bucket, (int, np.integer)) or not 0 <= bucket < MAX_BUCKETS:
        raise ValueError(f"a bucket number is an int in [0, {MAX_BUCKETS}), got {bucket!r}")
    return f"{int(bucket):0{BUCKET_DIGITS}d}"


def file_id_prefix(bucket: int, *, fixed: bool = False) -> str:
    """A new file id prefix for ``bucket``: a random UUID whose first 8 characters are the bucket
    number; ``fixed`` gives the one prefix every writer of a bucket shares (non-blocking
    concurrency control), ``<bucket>-0000-0000-0000-000000000000``."""
    if fixed:
        return bucket_id_str(bucket) + FIXED_SUFFIX
    return bucket_id_str(bucket) + str(uuid.uuid4())[BUCKET_DIGITS:]


def new_file_id(bucket: int, *, fixed: bool = False) -> str:
    """A file id for a new file group of ``bucket``: the prefix and ``-0``, as Hudi names it."""
    return f"{file_id_prefix(bucket, fixed=fixed)}-0"


def is_fixed_file_id(file_id: str) -> bool:
    """Is this a bucket's fixed file id (:func:`new_file_id` with ``fixed``), the one every
    writer creating that bucket's group names? Such a group must never be retired: the next
    write of its bucket would create it again, inside the retired group."""
    b = bucket_of_file_id(file_id)
    return b is not None and file_id == new_file_id(b, fixed=True)


def bucket_of_file_id(file_id: str) -> int | None:
    """The bucket a file id belongs to, or None when it is not bucket-shaped (8 digits, the rest
    of a lower-case UUID, ``-<n>``). A random UUID that happens to start with 8 decimal digits
    cannot be told apart; a bucket table has only bucket file ids, so that matters only when
    reading a table of another index type as a bucket table."""
    m = _FILE_ID.fullmatch(file_id)
    return int(m.group(1)) if m else None
