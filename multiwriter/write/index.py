"""The index: which existing file group holds each incoming key (Hudi's bloom index, in-process).

Per partition the batch touches, the candidate files of a key are the latest slices whose key
range (``hoodie_min/max_record_key`` in the footer) covers it and whose footer bloom filter says
it may be there; only candidates' key columns are read, to confirm (a Copy-on-Write writer
skips that for a key only one file may hold: its merge matches the key against that file's rows
anyway, and reports it as inserted when it was new after all). When the record key is one
integral field, the range is the key column's own typed statistics instead: as strings "10" <
"9", so the footer's string range of auto-increment ids spans almost every key and prunes
nothing, while the typed range of a block of ids is that block. Base files are immutable
(a name carries its instant, and an instant is never reused), so what a footer says is cached
per table and path in one process-wide :class:`FooterCache`: a long-lived writer (a streaming
sink) and one-off ``mw.write`` calls alike read the footers of the files that are new since the
last batch, not of every file in the partition.
"""
from __future__ import annotations

import dataclasses
import functools
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..storage import Storage
from ..table import bucket, metadata_files
from ..format import bounds
from ..table.properties import TableConfig
from ..table.record_keys import read_stored_keys
from ..table.snapshot import FileSlice, Snapshot
from ..table.timeline import Timeline
from . import bloom
from .records import KEY, PARTITION
from ..threads import renew_in_child

FILE_ID = "_mw_file_id"
MIN_KEY = b"hoodie_min_record_key"
MAX_KEY = b"hoodie_max_record_key"


#: an integral key column's values (aligned with the keys) with their min and max
TypedKeys = tuple[np.ndarray, int, int]


@dataclass(frozen=True)
class FooterKeys:
    """What one base file's footer says about its keys."""

    min_key: str | None
    max_key: str | None
    bloom: bloom.DynamicBloomFilter | None
    num_rows: int
    #: (min, max) of an integral record-key column by value (its Parquet statistics), if known
    typed: tuple[int, int] | None = None

    @property
    def nbytes(self) -> int:
        return 256 + (sum(r.nbytes for r in self.bloom.rows) if self.bloom else 0)

    def may_hold(self, keys: pa.Array | PartitionKeys, lo: str | None = None, hi: str | None = None,
                 hashes: np.ndarray | None = None, rows: np.ndarray | None = None,
                 typed: TypedKeys | None = None) -> np.ndarray | bool:
        """Per key (or False for all): might this file hold it? ``lo``/``hi``: the keys' range
        (found when needed); ``hashes``: the bloom hashes of the batch's keys when it has them
        (then no key is hashed again per file); ``rows``: the rows of ``hashes`` that ``keys``
        are (all when None), so only keys in this file's key range have their hashes gathered;
        ``typed``: the keys as integers with their min and max, compared with the file's typed
        range when it has one."""
        part = keys if isinstance(keys, PartitionKeys) else PartitionKeys(keys, bounds=(lo, hi) if lo is not None else None)
        if self.num_rows == 0:
            return False
        if typed is not None and self.typed is not None:
            tlo, thi = self.typed
            if thi < typed[1] or tlo > typed[2]:
                return False
            mask = (typed[0] >= tlo) & (typed[0] <= thi)
        elif self.min_key is not None and self.max_key is not None:
            lo, hi = part.bounds
            if self.max_key < lo or self.min_key > hi:
                return False
            in_range = pc.and_(pc.greater_equal(part.strings, self.min_key), pc.less_equal(part.strings, self.max_key))
            mask = in_range.to_numpy(zero_copy_only=False)
        else:
            mask = np.ones(len(part), dtype=bool)
        if self.bloom is not None and mask.any():
            idx = np.flatnonzero(mask)
            if hashes is not None and hashes.shape[1] == self.bloom.hashes:
                mask[idx] = self.bloom.might_contain_hashes(hashes[idx if rows is None else rows[idx]])
            else:
                mask[idx] = self.bloom.might_contain(part.strings.take(pa.array(idx)))
        return mask


class PartitionKeys:
    """One partition's keys of a batch (``rows`` of the batch's ``keys``). Their strings (a
    gather) and string range are built only when a file needs them: a file with a typed key
    range, tested with the batch's bloom hashes, needs neither."""

    def __init__(self, keys: pa.Array, rows: np.ndarray | None = None, *, bounds: tuple[str, str] | None = None) -> None:
        self._keys = keys
        self._rows = rows
        if bounds is not None:
            self.bounds = bounds

    def __len__(self) -> int:
        return len(self._rows) if self._rows is not None else len(self._keys)

    @functools.cached_property
    def strings(self) -> pa.Array:
        return self._keys if self._rows is None else self._keys.take(pa.array(self._rows))

    @functools.cached_property
    def bounds(self) -> tuple[str, str]:
        mm = pc.min_max(self.strings)
        return mm["min"].as_py(), mm["max"].as_py()


def read_footer(storage: Storage, path: str, key_column: str | None = None) -> FooterKeys:
    """``key_column``: a one-field integral record key whose typed range to take from the
    column's statistics."""
    with storage.fs.open_input_file(storage.abs(path)) as f:
        meta = pq.read_metadata(f)
    md = meta.metadata or {}
    lo, hi = md.get(MIN_KEY), md.get(MAX_KEY)
    return FooterKeys(lo.decode() if lo is not None else None, hi.decode() if hi is not None else None,
                      bloom.from_footer(md), meta.num_rows, typed_range(meta, key_column) if key_column else None)


def typed_range(meta: pq.FileMetaData, column: str) -> tuple[int, int] | None:
    """(min, max) of an integral top-level column over every row group, from its statistics;
    None when a row group has none (a file that cannot be pruned this way is probed instead)."""
    names = [meta.schema.column(i).path for i in range(meta.num_columns)]
    if column not in names:
        return None
    j = names.index(column)
    lo = hi = None
    for g in range(meta.num_row_groups):
        col = meta.row_group(g).column(j)
        st = col.statistics
        if col.num_values == 0:
            continue
        if st is None or not st.has_min_max or not isinstance(st.min, int) or not isinstance(st.max, int):
            return None
        lo = st.min if lo is None else min(lo, st.min)
        hi = st.max if hi is None else max(hi, st.max)
    return (lo, hi) if lo is not None else None


def with_typed_range(f: FooterKeys, rows: pa.Table, column: str) -> FooterKeys:
    """``f`` with the typed range of ``column`` in ``rows`` (a file just written, whose footer is
    cached without reading it back) when that column is integral."""
    i = rows.schema.get_field_index(column)
    if i < 0 or not pa.types.is_integer(rows.schema.field(i).type) or rows.num_rows == 0:
        return f
    mm = pc.min_max(rows.column(i))
    lo, hi = mm["min"].as_py(), mm["max"].as_py()
    return f if lo is None else dataclasses.replace(f, typed=(lo, hi))


def integral_key(prepared: pa.Table, record_key: tuple[str, ...] | list[str]) -> str | None:
    """The record key's one field when it is an integral column of the batch, else None."""
    if len(record_key) != 1 or prepared.schema.get_field_index(record_key[0]) < 0:
        return None
    return record_key[0] if pa.types.is_integer(prepared.schema.field(record_key[0]).type) else None


def typed_keys(values: np.ndarray) -> TypedKeys:
    return (values, int(values.min()), int(values.max())) if len(values) else (values, 0, -1)


def key_range(storage: Storage, fs: FileSlice) -> tuple[str, str] | None:
    f = read_footer(storage, fs.path)
    return (f.min_key, f.max_key) if f.min_key is not None and f.max_key is not None else None


def read_keys(storage: Storage, fs: FileSlice, config: TableConfig | None = None) -> pa.Array:
    """The record keys of a slice's base file (``config``: the table's, when it may have
    virtual keys: then computed from the key fields)."""
    with storage.fs.open_input_file(storage.abs(fs.path)) as f:
        pf = bounds.open_parquet(f, fs.path)
        if config is not None:
            return read_stored_keys(pf, config)
        t = pf.read(columns=["_hoodie_record_key"])
    return t.column(0).combine_chunks().cast(pa.string())


def existing_keys(storage: Storage, files: list[FileSlice], lo: str, hi: str) -> tuple[pa.Array, pa.Array]:
    """(keys, file_ids) of the given slices whose key range overlaps [lo, hi]."""
    keys, ids = [], []
    for fs in files:
        rng = key_range(storage, fs)
        if rng is not None and (rng[1] < lo or rng[0] > hi):
            continue
        k = read_keys(storage, fs)
        keys.append(k)
        ids.append(pa.repeat(pa.scalar(fs.file_id, pa.string()), len(k)))
    if not keys:
        return pa.array([], pa.string()), pa.array([], pa.string())
    return pa.concat_arrays(keys), pa.concat_arrays(ids)


def untagged(prepared: pa.Table) -> pa.Table:
    """Every record new (``operation="insert"``: no lookup against the table, as in Hudi)."""
    return prepared.append_column(FILE_ID, pa.nulls(prepared.num_rows, pa.string()))


class FooterCache:
    """Footers by (table URI, path), least recently used dropped first beyond ``max_bytes``;
    shared by the writers of a process (merge threads add to it concurrently)."""

    def __init__(self, max_bytes: int = 256 << 20) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[tuple[str, str], FooterKeys] = OrderedDict()
        self._bytes = 0
        self._mu = threading.Lock()
        renew_in_child(self)

    def get(self, key: tuple[str, str]) -> FooterKeys | None:
        with self._mu:
            f = self._items.get(key)
            if f is not None:
                self._items.move_to_end(key)
            return f

    def put(self, key: tuple[str, str], f: FooterKeys) -> None:
        with self._mu:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old.nbytes
            self._items[key] = f
            self._bytes += f.nbytes
            while self._bytes > self.max_bytes and len(self._items) > 1:
                _, gone = self._items.popitem(last=False)
                self._bytes -= gone.nbytes

    def forget(self, uri: str, partitions: set[str], live: set[str]) -> None:
        """Drop footers of ``uri``'s files in ``partitions`` that are no longer latest slices."""
        with self._mu:
            stale = [k for k in self._items if k[0] == uri and k[1].rpartition("/")[0] in partitions and k[1] not in live]
            for k in stale:
                self._bytes -= self._items.pop(k).nbytes

    def keys(self) -> list[tuple[str, str]]:
        with self._mu:
            return list(self._items)

    def discard(self, key: tuple[str, str]) -> None:
        with self._mu:
            f = self._items.pop(key, None)
            if f is not None:
                self._bytes -= f.nbytes

    def clear(self) -> None:
        with self._mu:
            self._items.clear()
            self._bytes = 0

    def __len__(self) -> int:
        return len(self._items)


#: the footers every writer of this process shares
SHARED_FOOTERS = FooterCache()


def listable_partitions(storage: Storage, config: TableConfig, parts: list[str]) -> list[str]:
    """``parts`` that a snapshot may list: all of them when the metadata table lists the files
    (a new partition just has none there), else those that exist on storage (an object store
    then costs a request or two per partition)."""
    if metadata_files.enabled(config):
        return list(parts)
    return [p for p in parts if p == "" or storage.is_dir(p)]


class KeyIndex:
    """The index of one writer: footers come from (and go to) a :class:`FooterCache`."""

    def __init__(self, storage: Storage, *, cache: FooterCache | None = None,
                 keep_keys: bool = False) -> None:
        """``keep_keys``: keep the key columns read to confirm candidates, for an index that tags
        one batch in several parts (each part would otherwise read the same files again)."""
        self.storage = storage
        self.cache = cache if cache is not None else SHARED_FOOTERS
        self.kept_keys: dict[str, pa.Array] | None = {} if keep_keys else None
        self.config: TableConfig | None = None  # the table's, as of the last snapshot tagged against
        self.footer_reads = 0  # footers read from storage (cache misses), for tests and metrics
        self.key_reads = 0  # key columns read to confirm candidates

    def snapshot(self, timeline: Timeline, prepared: pa.Table) -> Snapshot:
        """The latest slices of the partitions the batch touches. Storage is asked which of them
        exist only when it is listed: the metadata table lists no file of a new partition, and on
        an object store each check costs requests that grow with the partitions touched."""
        parts = sorted(pc.unique(prepared.column(PARTITION)).to_pylist())
        return Snapshot.build(self.storage, timeline, partitions=listable_partitions(self.storage, timeline.config, parts))

    def footer(self, fs: FileSlice, key_column: str | None = None) -> FooterKeys:
        key = (self.storage.uri, fs.path)
        f = self.cache.get(key)
        if f is not None:
            return f
        f = read_footer(self.storage, fs.path, key_column)
        self.footer_reads += 1
        self.cache.put(key, f)
        return f

    def remember_written(self, path: str, f: FooterKeys) -> None:
        """A file this process just wrote: no need to read its footer back."""
        self.cache.put((self.storage.uri, path), f)

    def forget_except(self, live: set[str], partitions: set[str]) -> None:
        """Drop cached footers of files in ``partitions`` that are no longer latest slices."""
        self.cache.forget(self.storage.uri, partitions, live)

    def tag(self, snapshot: Snapshot, prepared: pa.Table, key_column: str | None = None, *,
            confirm: bool = True, on_found: Callable[[FileSlice], None] | None = None) -> pa.Table:
        """Add ``_mw_file_id``: the existing file group of each record's key, null for new keys.
        ``key_column``: the batch's column that is the whole record key, when it is integral
        (:func:`integral_key`): files are then pruned by its typed range. ``confirm=False``: a
        key that only one file of its partition may hold (by key range and bloom filter) is
        tagged with that file's group without reading the file's keys; only keys that several
        files may hold are confirmed. A key so tagged may be new (a bloom false positive): it
        then joins that group as an insert, which the caller must learn from the merge (a
        Copy-on-Write merge matches every key against the old file anyway). ``on_found`` hears
        each slice found to hold batch keys, as soon as it is found (its merge may start reading
        the file while the rest of the batch is tagged)."""
        n = prepared.num_rows
        self.config = snapshot.timeline.config  # virtual keys: stored keys come from the key fields
        out = np.full(n, -1, dtype=np.int64)
        names: list[str] = []
        parts = prepared.column(PARTITION).combine_chunks()
        keys = prepared.column(KEY).combine_chunks()
        by_part: dict[str, list[FileSlice]] = {}
        for fs in snapshot.slices.values():
            if fs.has_base:  # a log-only slice has no footer (its groups are buckets: tag_buckets)
                by_part.setdefault(fs.partition, []).append(fs)
        hashes = bloom.hashes_of(prepared)
        ints = None
        if key_column is not None:
            col = prepared.column(key_column)
            ints = (col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col).to_numpy(zero_copy_only=False)
        encoded = parts.dictionary_encode()
        codes = encoded.indices.to_numpy(zero_copy_only=False)
        names_p = encoded.dictionary.to_pylist()
        # rows grouped by partition in one stable sort (a radix sort for few partitions)
        order = np.argsort(codes.astype(np.uint16) if len(names_p) <= 1 << 16 else codes, kind="stable")
        ends = np.cumsum(np.bincount(codes, minlength=len(names_p))).tolist()
        for code, p in enumerate(names_p):
            files = by_part.get(p)
            if not files:
                continue
            rows = order[(ends[code - 1] if code else 0):ends[code]]
            pk = PartitionKeys(keys, rows)
            typed = typed_keys(ints[rows].astype(np.int64, copy=False)) if ints is not None else None
            for fid_no, found in self._lookup(files, pk, hashes, rows, typed, key_column, confirm=confirm,
                                              on_found=on_found):
                names.append(fid_no)
                out[rows[found]] = len(names) - 1
        self.forget_except({fs.path for fs in snapshot.slices.values()}, set(by_part))
        fids = pa.array(names, pa.string()).take(pa.array(out, mask=out < 0)) if names else pa.nulls(n, pa.string())
        return prepared.append_column(FILE_ID, fids)

    def _lookup(self, files: list[FileSlice], keys: pa.Array | PartitionKeys, hashes: np.ndarray | None = None,
                rows: np.ndarray | None = None, typed: TypedKeys | None = None,
                key_column: str | None = None, *, confirm: bool = True,
                on_found: Callable[[FileSlice], None] | None = None) -> list[tuple[str, np.ndarray]]:
        """Per file holding some of ``keys``: (file id, positions in ``keys`` it holds);
        ``hashes[rows]`` are the keys' bloom hashes; ``typed``: the keys as integers.
        ``confirm=False``: see :meth:`tag`."""
        part = keys if isinstance(keys, PartitionKeys) else PartitionKeys(keys)
        maybes: list[tuple[FileSlice, np.ndarray]] = []
        for fs in sorted(files, key=lambda f: f.file_id):
            maybe = self.footer(fs, key_column).may_hold(part, hashes=hashes, rows=rows, typed=typed)
            if maybe is False or not np.any(maybe):
                continue
            maybes.append((fs, maybe))
        # keys more than one file may hold are confirmed by reading keys (all keys, with confirm)
        several = np.sum([m for _, m in maybes], axis=0) > 1 if len(maybes) > 1 else None
        out = []
        for fs, maybe in maybes:
            if confirm:
                check = maybe
            else:
                check = maybe & several if several is not None else np.zeros_like(maybe)
            held = np.flatnonzero(maybe & ~check)  # sole candidates, not read
            if check.any():
                cand = np.flatnonzero(check)
                self.key_reads += 1
                held = np.union1d(held, cand[_held(part.strings.take(pa.array(cand)), self._stored_keys(fs))])
            if len(held):
                out.append((fs.file_id, held))
                if on_found is not None:
                    on_found(fs)
        return out


    def _stored_keys(self, fs: FileSlice) -> pa.Array:
        if self.kept_keys is None:
            return read_keys(self.storage, fs, self.config)
        if fs.path not in self.kept_keys:
            self.kept_keys[fs.path] = read_keys(self.storage, fs, self.config)
        return self.kept_keys[fs.path]


def _held(candidates: pa.Array, stored: pa.Array) -> np.ndarray:
    """Per candidate key: is it among the file's ``stored`` keys? The hash set is built over the
    smaller side (a file usually holds many more keys than the batch has candidates for it)."""
    if len(stored) > len(candidates):
        stored = stored.filter(pc.is_in(stored, value_set=candidates))
    return pc.is_in(candidates, value_set=stored).to_numpy(zero_copy_only=False)


def tag(storage: Storage, snapshot: Snapshot, prepared: pa.Table, key_column: str | None = None) -> pa.Table:
    """One-off lookup (no cache kept): see :meth:`KeyIndex.tag`."""
    return KeyIndex(storage).tag(snapshot, prepared, key_column)


def tag_buckets(snapshot: Snapshot, prepared: pa.Table, config: TableConfig) -> pa.Table:
    """The bucket index (Merge-on-Read): add ``_mw_file_id`` from each key's hash alone, no
    lookup. A bucket's group is the one its partition already has, else the fixed id Hudi's
    non-blocking writers give a bucket, so that writers creating one bucket at once name the
    same group."""
    assert config.num_buckets is not None
    buckets = bucket.bucket_ids(prepared.column(KEY), config.num_buckets, config.bucket_hash_fields, config.record_key)
    existing: dict[tuple[str, int], str] = {}
    for (partition, file_id) in snapshot.slices:
        b = bucket.bucket_of_file_id(file_id)
        if b is not None:
            existing.setdefault((partition, b), file_id)
    parts = prepared.column(PARTITION).combine_chunks().dictionary_encode()
    pnames = parts.dictionary.to_pylist()
    codes = parts.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    pairs = codes * config.num_buckets + buckets.astype(np.int64)
    uniq, inverse = np.unique(pairs, return_inverse=True)
    names = [existing.get((pnames[int(u) // config.num_buckets], int(u) % config.num_buckets))
             or bucket.new_file_id(int(u) % config.num_buckets, fixed=True) for u in uniq.tolist()]
    return prepared.append_column(FILE_ID, pa.array(names, pa.string()).take(pa.array(inverse)))
