"""Plan: route tagged records to file groups.

Updates and deletes go to the file group that holds their key. New keys go to NEW file groups,
sized by the target file size: by default inserts never go into an existing file group, so
writers that only insert never conflict (at the cost of more, smaller files until a future
clustering service merges them).
"""
from __future__ import annotations

import math
import zlib
import threading
from collections.abc import Callable
from concurrent.futures import Future, wait
from dataclasses import dataclass, field

import numpy as np

import pyarrow as pa
import pyarrow.compute as pc

from ..format import layout
from ..table.metadata import CommitMetadata, WriteStat
from ..table.snapshot import FileSlice, Snapshot
from ..table.timeline import Timeline
from ..threads import ProcessPool
from . import bloom
from .index import FILE_ID, KeyIndex, integral_key, tag_buckets, untagged
from .columns import constant
from . import global_keys
from .records import KEY, OP, OP_DELETE, PARTITION


@dataclass(frozen=True)
class FileGroupTask:
    """One file group to (re)write in this instant."""

    partition: str
    file_id: str
    task_index: int
    old_file: str | None = None  # name of the base file being replaced ("" for a log-only group)
    prev_commit: str | None = None
    old_size: int = 0  # bytes of that base file on storage
    #: the log file names of the group's latest slice (Merge-on-Read): a log append on a table
    #: that logs changes names them in its write stat, as Hudi's append handle does
    old_logs: tuple[str, ...] = ()

    @property
    def is_new(self) -> bool:
        return self.old_file is None


@dataclass
class Plan:
    """The tasks of one attempt and the rows each writes. ``rows`` stays in batch order; ``order``
    lists row numbers grouped by task (stably: a group keeps the batch's order) and ``bounds``
    each task's range in it. :meth:`gather` reorders the rows once, in a few large parts side by
    side (one gather per task costs twice the CPU); until then each task gathers its own rows."""

    tasks: list[FileGroupTask]
    rows: pa.Table  # prepared rows, in batch order (their bloom hashes are added on first use)
    order: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    bounds: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)  # (partition, file id) -> range in order
    grouped: pa.Table | None = None  # ``rows`` in ``order``, once gathered
    pending_hashes: Callable[[], np.ndarray] | None = None  # the rows' hashes, being computed (:func:`bloom.start_hashes`)
    has_deletes: bool = True  # False: no row deletes (each merge then skips looking for deletes)
    twins: dict[str, str] = field(default_factory=dict)  # column -> a column of ``rows`` with the very same values
    partition_column: str | None = None  # a column of ``rows`` whose value is each row's partition path
    #: per partition, rows of new keys routed into a group the batch rewrites anyway (:func:`make_plan`)
    filled: dict[str, np.ndarray] = field(default_factory=dict)
    bloom_hashes: bool = True  # False: virtual keys, no bloom filter written (the rows need no hashes)
    _row_bytes: int | None = field(default=None, repr=False)  # bytes per row of ``rows`` (:meth:`weight`)
    _pieces: list[Future] | None = field(default=None, repr=False)  # a gather under way (:meth:`gather` with ``submit``)
    _hashing: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _grouping: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def hashed_rows(self) -> pa.Table:
        """``rows`` with their bloom hashes (each file's filter takes them modulo its bits).
        Added here, not when planning, so an insert's hashes are computed while its instant
        begins and its plan is written. Safe from several threads (the pieces of a gather)."""
        with self._hashing:
            if self.bloom_hashes and self.rows.schema.get_field_index(bloom.HASHES) < 0:
                self.rows = bloom.with_hashes(self.rows, KEY, self.pending_hashes)
                self.pending_hashes = None
            return self.rows

    def inserted_keys(self) -> dict[str, pa.Array]:
        """Per partition, the keys this plan inserts as new (for the same-new-key conflict check)."""
        idx: dict[str, list[np.ndarray]] = {p: [rows] for p, rows in self.filled.items()}
        for t in self.tasks:
            if t.is_new:
                idx.setdefault(t.partition, []).append(self._indices(t))
        if not idx:
            return {}
        per_part = [np.concatenate(ix) for ix in idx.values()]
        keys = self.rows.column(KEY).take(pa.array(np.concatenate(per_part))).combine_chunks()  # one gather
        starts = np.cumsum([0] + [len(ix) for ix in per_part]).tolist()
        return {p: keys.slice(lo, hi - lo) for p, lo, hi in zip(idx, starts, starts[1:], strict=False)}

    def row_count(self, task: FileGroupTask) -> int:
        lo, hi = self.bounds.get((task.partition, task.file_id), (0, 0))
        return hi - lo

    def weight(self, task: FileGroupTask) -> int:
        """Roughly the memory a task's merge holds: its old base file as stored plus its rows.
        The bytes per row are measured once (``Table.nbytes`` walks every buffer of every chunk:
        ~0.5 ms for an insert batch, and the dispatch asks for each task's weight many times)."""
        if self._row_bytes is None:
            self._row_bytes = self.rows.nbytes // max(self.rows.num_rows, 1)
        return task.old_size + self.row_count(task) * self._row_bytes

    def gather(self, parts: int = 1, submit: Callable[..., Future] | None = None) -> None:
        """Reorder the rows by task, in ``parts`` pieces. With ``submit`` (a pool's submit) the
        pieces run there and this returns at once: the writer goes on writing its inflight file
        and markers while the rows (and their hashes) are gathered, and :meth:`rows_for` waits.
        A piece never waits on the pool, so merges queued behind it cannot starve it."""
        if self.grouped is not None or self._pieces is not None or len(self.order) == 0:
            return
        pieces = [ix for ix in np.array_split(self.order, max(1, min(parts, len(self.order) // 10_000 or 1))) if len(ix)]
        if submit is None:
            self.grouped = _joined([self._take(ix) for ix in pieces])
            return
        self._pieces = [submit(self._take, ix) for ix in pieces]

    def _take(self, ix: np.ndarray) -> pa.Table:
        """Gather the rows at ``ix``, leaving out the columns :meth:`rows_for` rebuilds for free:
        twins of another column, and the partition column (one value per task)."""
        rows = self.hashed_rows()
        skip = set(self.twins) | ({self.partition_column} if self.partition_column else set())
        if skip:
            rows = rows.select([n for n in rows.schema.names if n not in skip])
        return rows.take(pa.array(ix))

    def _gathered(self) -> pa.Table | None:
        """The rows in task order once a gather ran (waiting for its pieces), else None."""
        if self.grouped is None and self._pieces is not None:
            with self._grouping:
                if self.grouped is None:
                    self.grouped = _joined([f.result() for f in self._pieces])
        return self.grouped

    def rows_for(self, task: FileGroupTask) -> pa.Table:
        grouped = self._gathered()
        if grouped is not None:
            lo, hi = self.bounds.get((task.partition, task.file_id), (0, 0))
            return self._completed(grouped.slice(lo, hi - lo), task)
        ix = self._indices(task)
        rows = self.hashed_rows()
        if len(ix) and ix[-1] - ix[0] == len(ix) - 1:  # ascending, so a run: no copy
            return rows.slice(int(ix[0]), len(ix))
        return rows.take(pa.array(ix))

    def _completed(self, part: pa.Table, task: FileGroupTask) -> pa.Table:
        """A gathered task's rows with the columns :meth:`_take` left out, in ``rows``' order:
        twins share their column's buffers, the partition column is the task's partition path
        as a one-entry dictionary (the merge writes it as a constant)."""
        if not self.twins and self.partition_column is None:
            return part
        cols = []
        for name in self.rows.schema.names:
            if name in self.twins:
                cols.append(part.column(self.twins[name]))
            elif name == self.partition_column:
                cols.append(constant(task.partition, part.num_rows))
            else:
                cols.append(part.column(name))
        return pa.Table.from_arrays(cols, names=self.rows.schema.names)

    def _indices(self, task: FileGroupTask) -> np.ndarray:
        lo, hi = self.bounds.get((task.partition, task.file_id), (0, 0))
        return self.order[lo:hi]


def _joined(tables: list[pa.Table]) -> pa.Table:
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables)


def insert_buckets(n_rows: int, row_bytes: float, target_file_size: int) -> int:
    return max(1, math.ceil(n_rows * max(row_bytes, 1.0) / target_file_size))


def bucket_of(key: str, buckets: int) -> int:
    return zlib.crc32(key.encode()) % buckets if buckets > 1 else 0


def make_plan(tagged: pa.Table, snapshot: Snapshot, *, target_file_size: int,
              hashes: Callable[[], np.ndarray] | None = None, small_file_limit: int = 0) -> Plan:
    """Route every row to a file group: its key's group when tagged, else a new group of its
    partition (several when the partition's new rows exceed the target file size, chosen by a
    stable hash of the key). Deletes of keys that do not exist have nothing to do.
    ``small_file_limit`` (Copy-on-Write upserts): a partition's new keys go instead into the
    smallest group of that partition the batch rewrites anyway, when it is below the limit and
    they fit under the target size: an upsert stream into recent partitions then keeps a file
    per partition rather than adding one per batch until clustering.

    Groups are found on integer codes (partition x slot), sorted by a stable radix sort when
    the codes are small, not on strings. ``hashes``: the rows' bloom hashes, still being
    computed (:meth:`Plan.hashed_rows` waits for them)."""
    n = tagged.num_rows
    parts = tagged.column(PARTITION).combine_chunks().dictionary_encode()
    pcodes = parts.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    pnames: list[str] = parts.dictionary.to_pylist()
    fids = tagged.column(FILE_ID).combine_chunks()
    if fids.null_count == n:  # nothing tagged (inserts, or no existing group holds a key)
        fcodes, fnames = np.full(n, -1, np.int64), []
    else:
        fenc = fids.dictionary_encode()
        fcodes = pc.fill_null(fenc.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64)
        fnames = fenc.dictionary.to_pylist()
    is_new = fcodes < 0
    keep = None
    has_deletes = n > 0 and pc.max(tagged.column(OP)).as_py() == OP_DELETE
    if has_deletes:
        is_delete = pc.equal(tagged.column(OP), OP_DELETE).to_numpy(zero_copy_only=False)
        dropped = is_new & is_delete
        if dropped.any():
            keep = ~dropped
            is_new &= keep
    filled: dict[str, np.ndarray] = {}
    if small_file_limit and is_new.any() and not is_new.all():
        is_new, fcodes, filled = _fill_rewritten(tagged, snapshot, pcodes, pnames, fcodes, fnames, is_new,
                                                 keep, small_file_limit, target_file_size)
    new_ids, slot = _new_groups(tagged, pcodes, is_new, len(pnames), target_file_size)
    slot[~is_new] = fcodes[~is_new]
    width = len(fnames) + max((len(ids) for ids in new_ids.values()), default=0)
    slot[is_new] += len(fnames)
    code = pcodes * max(width, 1) + slot
    rows_idx = np.flatnonzero(keep) if keep is not None else None
    if rows_idx is not None:
        code = code[rows_idx]
    # numpy's stable sort of 8/16-bit integers is a radix sort: several times faster
    small = len(pnames) * max(width, 1) <= np.iinfo(np.uint16).max
    order = np.argsort(code.astype(np.uint16) if small else code, kind="stable")
    sorted_code = code[order]
    if rows_idx is not None:
        order = rows_idx[order]
    rows = tagged.drop_columns([PARTITION, FILE_ID])
    if len(order) == 0:
        return Plan([], rows, order, {}, has_deletes=has_deletes)
    key_twin = _twin(rows, KEY)
    partition_twin = _twin(tagged, PARTITION, among=[n for n in rows.schema.names if n not in _INTERNAL])
    starts = np.flatnonzero(np.r_[True, sorted_code[1:] != sorted_code[:-1]])
    ends = np.r_[starts[1:], len(sorted_code)]
    bounds: dict[tuple[str, str], tuple[int, int]] = {}
    nf, w = len(fnames), max(width, 1)
    for lo, hi in zip(starts.tolist(), ends.tolist(), strict=True):
        c = int(sorted_code[lo])
        p, s = divmod(c, w)
        fid = fnames[s] if s < nf else new_ids[p][s - nf]
        bounds[(pnames[p], fid)] = (lo, hi)
    tasks = []
    for i, (p, f) in enumerate(sorted(bounds)):
        old = snapshot.slices.get((p, f))
        tasks.append(FileGroupTask(p, f, i, old.name if old else None, old.instant_time if old else None,
                                   old.size if old else 0, tuple(lf.name for lf in old.logs) if old else ()))
    return Plan(tasks, rows, order, bounds, pending_hashes=hashes, has_deletes=has_deletes,
                twins={KEY: key_twin} if key_twin else {}, partition_column=partition_twin, filled=filled)


def _fill_rewritten(tagged: pa.Table, snapshot: Snapshot, pcodes: np.ndarray, pnames: list[str], fcodes: np.ndarray,
                    fnames: list[str], is_new: np.ndarray, keep: np.ndarray | None, small_file_limit: int,
                    target_file_size: int) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Route each partition's new keys into the smallest group there that the batch rewrites
    (it holds keys the batch updates), if that group is below ``small_file_limit`` and the new
    rows fit under ``target_file_size``. Returns ``is_new`` and ``fcodes`` updated, and per
    partition the rows so routed (still inserts, for the same-new-key check)."""
    live = keep if keep is not None else np.ones(len(pcodes), bool)
    touched = np.flatnonzero(~is_new & live)
    if len(touched) == 0:
        return is_new, fcodes, {}
    width = max(len(fnames), 1)
    pairs = np.unique(pcodes[touched] * width + fcodes[touched])  # the rewritten groups, once each
    host: dict[int, tuple[int, int]] = {}  # partition code -> (size, file code) of its smallest rewritten group
    for p, f in (divmod(int(c), width) for c in pairs.tolist()):
        fs = snapshot.slices.get((pnames[p], fnames[f]))
        if fs is not None and fs.size < small_file_limit and (p not in host or (fs.size, f) < host[p]):
            host[p] = (fs.size, f)
    if not host:
        return is_new, fcodes, {}
    sized = tagged.drop_columns([bloom.HASHES]) if tagged.schema.get_field_index(bloom.HASHES) >= 0 else tagged
    row_bytes = sized.nbytes / max(tagged.num_rows, 1)
    counts = np.bincount(pcodes[is_new], minlength=len(pnames))
    is_new, fcodes = is_new.copy(), fcodes.copy()
    filled: dict[str, np.ndarray] = {}
    for p, (size, f) in host.items():
        if counts[p] == 0 or size + counts[p] * row_bytes > target_file_size:
            continue
        rows = np.flatnonzero(is_new & (pcodes == p))
        fcodes[rows] = f
        is_new[rows] = False
        filled[pnames[p]] = rows
    return is_new, fcodes, filled


_INTERNAL = frozenset({KEY, OP, PARTITION, FILE_ID, bloom.HASHES})


def _twin(t: pa.Table, name: str, among: list[str] | None = None) -> str | None:
    """A data column of ``t`` that is the very same array as column ``name`` (same type,
    offset, length and buffers, so the same values): a record key or partition path that is a
    column's own value (:func:`records.record_keys` keeps its buffers). None when there is none."""
    sig = _signature(t.column(name))
    if sig is None:
        return None
    for other in among if among is not None else [n for n in t.schema.names if n not in _INTERNAL]:
        if _signature(t.column(other)) == sig:
            return other
    return None


def _signature(col: pa.ChunkedArray) -> tuple | None:
    if col.num_chunks != 1:
        return None
    a = col.chunk(0)
    return (a.type, a.offset, len(a), tuple(b.address if b is not None else None for b in a.buffers()))


def _new_groups(tagged: pa.Table, pcodes: np.ndarray, is_new: np.ndarray, n_parts: int,
                target_file_size: int) -> tuple[dict[int, list[str]], np.ndarray]:
    """New file ids per partition code, and each new row's bucket among its partition's ids."""
    counts = np.bincount(pcodes[is_new], minlength=n_parts)
    sized = tagged.drop_columns([bloom.HASHES]) if tagged.schema.get_field_index(bloom.HASHES) >= 0 else tagged
    row_bytes = sized.nbytes / max(tagged.num_rows, 1)  # the hashes are never written
    new_ids: dict[int, list[str]] = {}
    slot = np.zeros(len(pcodes), np.int64)
    multi: dict[int, int] = {}
    for p in np.flatnonzero(counts).tolist():
        k = insert_buckets(int(counts[p]), row_bytes, target_file_size)
        new_ids[p] = [layout.new_file_id() for _ in range(k)]
        if k > 1:
            multi[p] = k
    if multi:  # large inserts: spread keys over buckets by a stable hash
        rows = np.flatnonzero(is_new & np.isin(pcodes, list(multi)))
        keys = tagged.column(KEY).take(pa.array(rows)).to_pylist()
        slot[rows] = [bucket_of(k, multi[p]) for k, p in zip(keys, pcodes[rows].tolist(), strict=True)]
    return new_ids, slot


#: Hudi's ``operationType`` of a commit, by our operation name
OPERATION_TYPES = {"upsert": "UPSERT", "insert": "INSERT", "delete": "DELETE", "insert_overwrite_table": "INSERT_OVERWRITE_TABLE"}


def planned_metadata(tasks: list[FileGroupTask], operation: str) -> CommitMetadata:
    """The ``<T>.inflight`` content: the file groups this attempt will write (Hudi's workload
    profile), so a conflict check sees a pending writer's groups before it completes."""
    p2s: dict[str, list[WriteStat]] = {}
    for t in tasks:
        p2s.setdefault(t.partition, []).append(
            WriteStat(file_id=t.file_id, path="", partition_path=t.partition, prev_commit=t.prev_commit or "null"))
    return CommitMetadata(p2s, {}, OPERATION_TYPES[operation])


def plan_batch(prepared: pa.Table, base: Timeline, index: KeyIndex, operation: str, target_file_size: int,
               hashes: Callable[[], np.ndarray] | None = None, small_file_limit: int = 0,
               confirm_keys: bool = True, on_found: Callable[[FileSlice], None] | None = None,
               update_partition_path: bool = False) -> Plan:
    """Tag a prepared batch against the base's latest slices and route it to file groups
    (``insert``: no lookup against the table, as in Hudi; a bucket-indexed table routes every
    record by its key's bucket, inserts too; ``hashes``: its keys' bloom hashes, still being
    computed; ``small_file_limit``: a Copy-on-Write upsert's new keys may join the groups it
    rewrites, see :func:`make_plan`). Also what a streaming write's tasks run.
    ``confirm_keys=False`` (Copy-on-Write, whose merges report the keys they insert): a key
    only one file may hold goes to that file's group unread, see :meth:`KeyIndex.tag`; the
    plan's :meth:`~Plan.inserted_keys` then misses such keys that were new after all.
    ``on_found``: see :meth:`KeyIndex.tag`. On a table that keeps the record index, a key
    stored in another partition is routed first (:mod:`.global_keys`, by
    ``update_partition_path``)."""
    config = base.config
    found = None  # the record index's answer, when the table keeps one: then it is the index
    snap = None
    if operation != "insert":
        found, snap = _looked_up(index, base, prepared)
        routed = global_keys.route(index.storage, base, prepared, update_partition_path=update_partition_path,
                                   found=found)
        if routed is not prepared:
            prepared, hashes, snap = routed, None, None  # the routed rows may name other partitions
    if config.virtual_keys:  # no bloom filter to probe nor to write: no hashes
        plan = _plan_batch(prepared, base, index, operation, target_file_size, None, small_file_limit, confirm_keys,
                           on_found, found, snap)
        plan.bloom_hashes = False
        return plan
    return _plan_batch(prepared, base, index, operation, target_file_size, hashes, small_file_limit, confirm_keys,
                       on_found, found, snap)


#: the record index's lookups that run beside the batch's snapshot (one per writer at a time)
_LOOKUPS = ProcessPool("mw-index-lookup", 4)


def _looked_up(index: KeyIndex, base: Timeline, prepared: pa.Table) -> tuple[dict | None, Snapshot | None]:
    """The record index's answer for the batch (None when the table keeps none) and, on an
    object store, the batch's snapshot, listed while the index is looked up (the two wait on
    their listings side by side, not one after the other). Both read the table as of ``base``
    or later, as each did alone."""
    if not index.storage.is_s3 or not global_keys.keeps_record_index(index.storage, base):
        return global_keys.lookup(index.storage, base, prepared), None
    looking = _LOOKUPS.get().submit(global_keys.lookup, index.storage, base, prepared)
    try:
        snap = index.snapshot(base, prepared)
    finally:
        wait([looking])  # never left running after the batch fails
    return looking.result(), snap


def _plan_batch(prepared: pa.Table, base: Timeline, index: KeyIndex, operation: str, target_file_size: int,
                hashes: Callable[[], np.ndarray] | None, small_file_limit: int, confirm_keys: bool,
                on_found: Callable[[FileSlice], None] | None, found: dict | None = None,
                snap: Snapshot | None = None) -> Plan:
    """``snap``: the batch's snapshot, when the caller listed it already."""
    config = base.config
    if config.bucket_index:
        snap = snap or index.snapshot(base, prepared)
        return make_plan(tag_buckets(snap, prepared, config), snap, target_file_size=target_file_size, hashes=hashes)
    if operation == "insert":
        return make_plan(untagged(prepared), Snapshot({}, base, None), target_file_size=target_file_size, hashes=hashes)
    if not config.virtual_keys:
        prepared = bloom.with_hashes(prepared, KEY, hashes)  # once per batch: the index and the files' filters use them
    snap = snap or index.snapshot(base, prepared)
    # a log append does not match keys against the base; without a bloom filter or key range
    # every file is a candidate, so keys are read (Hudi's simple index) rather than files rewritten
    confirm = confirm_keys or config.merge_on_read or config.virtual_keys
    if found is not None:
        tagged = global_keys.tag(snap, prepared, found, on_found)
    else:
        tagged = index.tag(snap, prepared, integral_key(prepared, config.record_key), confirm=confirm,
                           on_found=on_found)
    return make_plan(tagged, snap,
                     target_file_size=target_file_size, small_file_limit=0 if config.merge_on_read else small_file_limit)
