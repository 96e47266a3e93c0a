"""The merge rule of a Merge-on-Read file slice: which version of each record survives.

Snapshot reads and compaction both call :func:`merge`, so a compacted base file holds exactly
the rows a snapshot read of the slice returned before it.

A file slice is one partition, so the record key alone identifies a record. Every version is a
*candidate* with a place in the slice's history: sources are taken by rank (the base file is
-1, then the log files in the order of :func:`log_order`: by their deltacommit's *requested*
time, as Hudi's JVM reader and compactor scan them, ``HoodieLogFile.getLogFileComparator``), and
within a source its records come before its deletes. Then, per key (Hudi's
``BufferedRecordMergerFactory.EventTimeRecordMerger`` / ``CommitTimeRecordMerger``):

- **event time** (an ordering field): the highest ordering value wins, equal values go to the
  later place (``shouldKeepNewerRecord``: newer ``>=`` older). A null ordering value of a record
  is Hudi's default, ``Integer`` 0 (``RecordContext.getOrderingValue``): for an ``int`` ordering
  field it is 0, for other types (where Hudi's comparison would fail) it ranks below every
  value. A delete with an ordering value competes like a record. A *plain* delete replaces
  every earlier log version of the key and absorbs the deletes right after it; the first
  record after it replaces it, and from there versions compete by ordering value, the base row
  too (Hudi folds the logs, then merges their survivor with the base row: ``finalMerge``); with
  no record after it, the key is deleted. A delete is plain when its ordering
  value is null or the ``Integer`` 0 (``OrderingValues.isDefault``; a ``Long`` 0 is a value), or
  when its value's Java class differs from the ordering field's (``deltaMergeDeleteRecord``
  keeps an older version only for ``OrderingValues.isSameClass`` values). With several ordering
  fields records compare field by field (``ArrayComparable.compareTo``) and a delete competes
  only with an ``ArrayComparable`` of its own (Hudi 1.1's ``ArrayWrapper``) whose fields are of
  the fields' classes (``ArrayComparable.isValueSameClass``); any other delete is plain.
- **commit time** (no ordering field): the latest place wins, deletes included.

A winning delete removes the key. Partial updates (log blocks marked ``IS_PARTIAL``, holding
only the columns a writer sent) change which columns a winning log version takes from where,
never who wins: the logs fold in place order, each new running winner overlaying the columns
it carries, and the base row fills the rest (:func:`merge`), as hudi-rs merges them.

The whole rule runs on arrays: the logs' keys are dictionary
encoded, the base keys are looked up in that dictionary once (one hash probe per base row; for
integer keys a base file stores sorted, a binary search per log key instead), and
only the versions of keys the logs touch compete, as integers (no sort of the rows). So a large
base file with small logs costs at most one copy of the base rows, and none of a column whose
winning values equal the base values they replace.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import TableFormatError
from ..format.log_file import DELETE_ORDERING_VALUES, avro_time_unit
from .merge_config import MergeConfig
from ..format.schema import META_COLUMNS, cast_column

RECORD_KEY = META_COLUMNS[2]  # _hoodie_record_key
BASE_RANK = -1

#: the columns of a source's deletes
DELETE_KEY = "record_key"
DELETE_PARTITION = "partition_path"
DELETE_ORDERING = "ordering_value"
#: several ordering fields: a delete's ``ArrayWrapper`` value, a struct of one child per field
DELETE_ORDERINGS = DELETE_ORDERING_VALUES

_CAST_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError)

#: ``map`` or a thread pool's: how work that releases the GIL is spread
Mapper = Callable[[Callable[[Any], Any], Iterable[Any]], Iterable[Any]]


@dataclass(frozen=True)
class Versions:
    """One source of record versions in a file slice: the base file (rank -1) or one log file's blocks."""

    rank: int  # place in the slice's history (:func:`log_order` of its log file); base file = -1
    records: pa.Table | None  # full rows: Hudi's 5 meta columns + data columns
    deletes: pa.Table | None = None  # columns record_key (string), partition_path (string), ordering_value (nullable)
    #: partial updates (a block marked ``IS_PARTIAL``): the columns the records carry; every other
    #: column keeps an earlier version's value (:func:`merge`). None: full records (a column they
    #: lack, added by schema evolution since, is null)
    carries: frozenset[str] | None = None


def log_order(log: Any) -> tuple[str, int, str]:
    """Where a log file's versions fall in its slice's history (its merge rank sorts by this):
    its deltacommit's requested time, then its version, then its name (write token), as Hudi's
    JVM reader and compactor order a slice's logs (``HoodieLogFile.getLogFileComparator``). Not
    completion order: two writers with equal ordering values then yield the version of the one
    that *requested* later, whoever reads or compacts."""
    return (log.instant_time, log.version, log.name)


def merge(sources: Sequence[Versions], *, schema: pa.Schema, config: MergeConfig | None = None,
          ordering_field: str | None = None, key: str = RECORD_KEY) -> pa.Table:
    """Surviving rows, one per record key, in ``schema`` (the file schema: meta columns + data
    columns, or some of them). Columns a source lacks (added later by schema evolution) are
    null; columns stored in another order or a narrower type are reordered and cast.
    ``config``: the table's merge (:class:`~.merge_config.MergeConfig`; rules: the module
    docstring); without one, ``ordering_field`` None is commit-time merging, else event-time
    merging on that column.
    ``key``: the column of ``schema`` holding each record's key (Hudi's meta column by default;
    a column that always equals it may stand in, see :func:`~.merged_slice.key_column`).

    Partial updates (sources with ``carries``): the winner is chosen as above. When it is a log
    version, its columns are those of the logs' versions folded in place order, as hudi-rs
    merges them: a version that beats every earlier log version of its key (a new running
    winner) overlays the columns it carries; a delete that does so clears them; the first
    record after a plain delete starts afresh. A column no log version set since the last such
    delete keeps the base row's value (null when the key is new to the slice).

    Each surviving row is returned exactly as stored. Row order: each key at its first
    appearance in the slice, i.e. the base file's rows in base order (an updated row stays at
    its base position), then keys new to the slice in the order they first appear in the logs
    (by rank, then position). Base rows of keys that no log touches pass through as stored
    (the base file is assumed to hold each key once).

    Raises :class:`TableFormatError` when an ordering field is not in ``schema`` or a source's
    ordering values cannot be compared with the ordering column.
    """
    cfg = _config(config, ordering_field)
    ordering = _ordering_fields(schema, cfg)
    base_rows, logs = _split(sources, schema)
    if not logs:
        return base_rows if base_rows is not None else schema.empty_table()
    if schema.get_field_index(key) < 0:
        raise TableFormatError(f"record key column {key!r} is not a column of the file schema")
    return _merge_logs(base_rows, logs, ordering, schema, key, cfg.ignore_defaults)


def _config(config: MergeConfig | None, ordering_field: str | None) -> MergeConfig:
    """The merge asked for: ``config``, else event time on ``ordering_field`` (commit time without one)."""
    return config if config is not None else MergeConfig.event_time(ordering_field)


@dataclass
class Prepared:
    """One slice's share of a merge of many slices (:func:`prepare`): its merged rows when they
    need no shared work (no log versions, or partial updates), else its candidates."""

    done: pa.Table | None = None
    collected: _Collected | None = None


def prepare(sources: Sequence[Versions], *, schema: pa.Schema, config: MergeConfig | None = None,
            ordering_field: str | None = None, key: str = RECORD_KEY) -> Prepared:
    """The per-slice part of :func:`merge_prepared` (slices may be prepared side by side): the
    slice's rows read and its candidates keyed, its winners not yet chosen."""
    cfg = _config(config, ordering_field)
    ordering = _ordering_fields(schema, cfg)
    base, logs = _split(sources, schema)
    if not logs:
        return Prepared(done=base if base is not None else schema.empty_table())
    if schema.get_field_index(key) < 0:
        raise TableFormatError(f"record key column {key!r} is not a column of the file schema")
    if cfg.ignore_defaults or any(s.carries is not None for s in logs):
        return Prepared(done=_merge_logs(base, logs, ordering, schema, key, cfg.ignore_defaults))
    return Prepared(collected=_collect(base, logs, ordering, schema, key))


def merge_prepared(parts: Sequence[Prepared], *, schema: pa.Schema, config: MergeConfig | None = None,
                   ordering_field: str | None = None, key: str = RECORD_KEY, map_: Mapper = map) -> pa.Table:
    """The rows of many slices (:func:`prepare` of each), each slice's as :func:`merge` returns
    them, one slice after another. The winners of every slice are chosen at once (each key
    qualified by its slice), and each column is assembled once for all of them: the work per
    slice that stays is reading and keying its rows. ``map_``: how the columns are assembled
    (a thread pool's ``map`` assembles them side by side)."""
    ordering = _ordering_fields(schema, _config(config, ordering_field))
    pending = [p.collected for p in parts if p.collected is not None]
    if len(pending) == 1:
        c = pending[0]
        winners, first_seq, _ = _winners(c.cands, c.codes, c.n_keys, ordering, c.n_base)
        merged = [_assemble(c.stored, schema, key, c.n_base, c.at, winners, first_seq)]
    else:
        merged = _merge_many(pending, ordering, schema, key, map_) if pending else []
    out, it = [], iter(merged)
    for p in parts:
        out.append(p.done if p.done is not None else next(it))
    if not out:
        return schema.empty_table()
    return out[0] if len(out) == 1 else pa.concat_tables(out)


def _split(sources: Sequence[Versions], schema: pa.Schema) -> tuple[pa.Table | None, list[Versions]]:
    """The base rows (aligned with ``schema``; None without a base file) and the sources that hold versions."""
    ordered = sorted(sources, key=lambda s: s.rank)  # stable: equal ranks keep the caller's order
    base: Versions | None = None
    if ordered and ordered[0].rank == BASE_RANK and _rows(ordered[0].deletes) == 0:
        base, ordered = ordered[0], ordered[1:]
    base_rows = align(base.records, schema) if base is not None and base.records is not None else None
    return base_rows, [s for s in ordered if _rows(s.records) or _rows(s.deletes)]


def align(t: pa.Table, schema: pa.Schema) -> pa.Table:
    """``t`` with the columns of ``schema``, in its order and types; missing columns are null."""
    if t.schema.equals(schema, check_metadata=False):
        return t if t.schema.equals(schema, check_metadata=True) else t.replace_schema_metadata(schema.metadata)
    cols = []
    for f in schema:
        if t.schema.get_field_index(f.name) < 0:
            cols.append(pa.nulls(t.num_rows, f.type))
            continue
        try:
            cols.append(cast_column(t.column(f.name), f.type))
        except _CAST_ERRORS as e:
            raise TableFormatError(f"column {f.name!r} ({t.schema.field(f.name).type}) cannot be read as {f.type}: {e}") from e
    return pa.Table.from_arrays(cols, schema=schema)


@dataclass
class _Candidates:
    """The versions that compete, in history order (their ``seq`` ascends): parallel columns."""

    keys: list[pa.Array | pa.ChunkedArray]
    ordering: list[tuple[pa.Array | pa.ChunkedArray, ...]]  # per source, one array per ordering field
    seq: list[np.ndarray]  # place in the slice's history (base rows: their base position)
    row: list[np.ndarray]  # the record's row in the stored rows; -1 for a delete
    plain: list[np.ndarray]  # a delete without an ordering value
    pattern: list[np.ndarray]  # index of the columns it carries in ``carried`` (0: every column)
    carried: list[frozenset[str] | None]  # the column sets of partial sources; [0] is None (all)

    def add(self, keys, ordering, seq: np.ndarray, row: np.ndarray, plain: np.ndarray, pattern: int = 0) -> None:
        self.keys.append(keys)
        self.ordering.append(ordering)
        self.seq.append(seq)
        self.row.append(row)
        self.plain.append(plain)
        self.pattern.append(np.full(len(seq), pattern, np.int32))

    def pattern_of(self, carries: frozenset[str] | None) -> int:
        if carries is None:
            return 0
        if carries not in self.carried:
            self.carried.append(carries)
        return self.carried.index(carries)


@dataclass
class _Collected:
    """One slice's merge up to its winners: the rows the output is taken from (``stored``: the
    base, then each log's records) and the candidates, each key as an integer (``codes``,
    0..n_keys-1; the touched base rows' candidates first)."""

    stored: list[pa.Table]
    cands: _Candidates
    codes: np.ndarray
    n_keys: int
    at: np.ndarray  # the base positions the logs touch
    n_base: int
    n_places: int  # places of the logs' versions: n_base .. n_places-1
    logs_from: int  # where the logs' records begin in ``stored`` (1 after a base file)


def _merge_logs(base: pa.Table | None, logs: list[Versions], ordering: tuple[pa.Field, ...], schema: pa.Schema,
                key: str, ignore_defaults: bool = False) -> pa.Table:
    """:func:`merge` when some log holds rows: the candidates are every log version plus the
    base rows of the keys the logs touch (:func:`_collect`)."""
    c = _collect(base, logs, ordering, schema, key)
    winners, first_seq, kept = _winners(c.cands, c.codes, c.n_keys, ordering, c.n_base)
    filled: list[tuple[list[str], np.ndarray]] = []
    if (len(c.cands.carried) > 1 or ignore_defaults) and len(winners):
        filled = _filled_columns(c.cands, c.codes, schema, kept, c.n_base, c.stored if ignore_defaults else None, key)
    return _assemble(c.stored, schema, key, c.n_base, c.at, winners, first_seq, filled)


def _collect(base: pa.Table | None, logs: list[Versions], ordering: tuple[pa.Field, ...], schema: pa.Schema,
             key: str) -> _Collected:
    """The candidates of one slice whose logs hold versions: every log version plus the base
    rows of the keys the logs touch."""
    n_base = base.num_rows if base is not None else 0
    key_type = schema.field(key).type
    stored = [base] if base is not None else []
    cands = _Candidates([], [], [], [], [], [], [None])
    seq0 = row0 = n_base
    for s in logs:
        if _rows(s.records):
            t = align(s.records, schema)
            stored.append(t)
            n = t.num_rows
            cands.add(t.column(key), _ordering_of(t, ordering), np.arange(seq0, seq0 + n),
                      np.arange(row0, row0 + n), np.zeros(n, bool), cands.pattern_of(s.carries))
            seq0, row0 = seq0 + n, row0 + n
        if _rows(s.deletes):
            d = s.deletes
            n = d.num_rows
            values, plain = _delete_ordering(d, ordering)
            cands.add(_delete_keys(d, key_type), values, np.arange(seq0, seq0 + n), np.full(n, -1), plain)
            seq0 += n
    # one hash pass over the logs' keys, one lookup of the base keys in them: the base rows the
    # logs touch and every candidate's key as a small integer (its index in the logs' keys)
    encoded = pc.dictionary_encode(_concat(cands.keys, key_type))
    codes = [_numpy(encoded.indices)]
    at = np.zeros(0, np.int64)
    if n_base:
        at, base_codes = touched(base.column(key), encoded.dictionary)
        codes.insert(0, base_codes)
        cands.ordering.insert(0, tuple(base.column(f.name).take(pa.array(at)) for f in ordering))
        cands.seq.insert(0, at)
        cands.row.insert(0, at)
        cands.plain.insert(0, np.zeros(len(at), bool))
        cands.pattern.insert(0, np.zeros(len(at), np.int32))
    return _Collected(stored, cands, np.concatenate(codes), len(encoded.dictionary), at, n_base, seq0,
                      int(base is not None))


def _merge_many(cs: list[_Collected], ordering: tuple[pa.Field, ...], schema: pa.Schema, key: str,
                map_: Mapper = map) -> list[pa.Table]:
    """:func:`merge_prepared` of slices without partial updates: their candidates as one set
    (places, rows and key codes shifted past those of the slices before, so equal keys of two
    slices stay two keys), one choice of winners and one assembly, cut back into slices."""
    offsets = _Offsets.of(cs)
    front: list[tuple] = []  # the touched base rows' candidates, then the logs' ones: places ascend
    back: list[tuple] = []
    for i, c in enumerate(cs):
        seq, row = np.concatenate(c.cands.seq), np.concatenate(c.cands.row)
        in_base = seq < c.n_base
        seq = np.where(in_base, seq + offsets.base[i], seq - c.n_base + offsets.place[i])
        row = np.where(row < 0, -1, np.where(row < c.n_base, row + offsets.base[i], row - c.n_base + offsets.row[i]))
        codes, plain = c.codes + offsets.key[i], np.concatenate(c.cands.plain)
        k = len(c.at)
        ords = c.cands.ordering
        front.append((seq[:k], row[:k], plain[:k], codes[:k], ords[:1] if c.n_base else []))
        back.append((seq[k:], row[k:], plain[k:], codes[k:], ords[1:] if c.n_base else ords))
    parts = front + back
    cands = _Candidates([], [o for p in parts for o in p[4]], [np.concatenate([p[0] for p in parts])],
                        [np.concatenate([p[1] for p in parts])], [np.concatenate([p[2] for p in parts])], [], [None])
    codes = np.concatenate([p[3] for p in parts])
    n_base = int(offsets.base[-1])
    win_rows, win_places, _ = _winners(cands, codes, int(offsets.key[-1]), ordering, n_base)
    bases = [c.stored[0] for c in cs if c.logs_from]
    logs = [t for c in cs for t in c.stored[c.logs_from:]]
    touched_at = np.concatenate([c.at + offsets.base[i] for i, c in enumerate(cs)])
    out, ends = _assemble_many(bases, logs, schema, key, offsets, touched_at, win_rows, win_places, map_)
    starts = np.concatenate([[0], ends[:-1]])
    return [out.slice(int(a), int(b - a)) for a, b in zip(starts, ends, strict=True)]


@dataclass(frozen=True)
class _Offsets:
    """Where each slice's base rows, log places, log rows and keys begin in a merge of many
    slices (:func:`_merge_many`); one more entry, the end, than slices."""

    base: np.ndarray
    place: np.ndarray
    row: np.ndarray
    key: np.ndarray

    @classmethod
    def of(cls, cs: list[_Collected]) -> _Offsets:
        def starts(sizes: list[int], first: int = 0) -> np.ndarray:
            return first + np.concatenate([[0], np.cumsum(np.asarray(sizes, np.int64))]).astype(np.int64)

        base = starts([c.n_base for c in cs])
        n = int(base[-1])
        return cls(base, starts([c.n_places - c.n_base for c in cs], n),
                   starts([sum(t.num_rows for t in c.stored[c.logs_from:]) for c in cs], n),
                   starts([c.n_keys for c in cs]))


def _assemble_many(bases: list[pa.Table], logs: list[pa.Table], schema: pa.Schema, key: str, offsets: _Offsets,
                   touched: np.ndarray, win_rows: np.ndarray, win_places: np.ndarray, map_: Mapper = map
                   ) -> tuple[pa.Table, np.ndarray]:
    """:func:`_assemble_rows` of many slices' winners at once, each slice's keys new to it
    after its own base rows; also where each slice's rows end in the output."""
    n_base = int(offsets.base[-1])
    in_base = int(np.searchsorted(win_places, n_base))
    replaced, replacing = win_places[:in_base], win_rows[:in_base]
    new = win_rows[in_base:]
    new_slice = np.searchsorted(offsets.place, win_places[in_base:], "right") - 1
    dropped = np.setdiff1d(touched, replaced, assume_unique=True)  # base rows a winning delete removes
    base_ends = offsets.base[1:] - np.searchsorted(dropped, offsets.base[1:])  # kept base rows to each slice's end
    new_counts = np.bincount(new_slice, minlength=len(offsets.base) - 1)
    ends = base_ends + np.cumsum(new_counts)

    base = pa.concat_tables(bases) if bases else None
    if base is None and not logs:  # deletes alone
        return schema.empty_table(), ends
    logged_rows = (pa.concat_tables(logs) if logs else base.schema.empty_table()).combine_chunks()
    all_stay = n_base and len(touched) == in_base  # else no base rows, or a delete won over some
    changed = replacing != replaced
    rows = _Replacement(replaced[changed], replacing[changed] - n_base, new - n_base)
    by = pa.array(rows.by)

    def kind(name: str) -> str:
        if not all_stay:
            return "take"
        kept, logged = base.column(name), logged_rows.column(name).chunk(0)
        if name != key and _scatterable(kept, logged_rows.column(name)):
            return "scatter"
        if name == key or (_exact(kept.type) and _take_ascending(kept, rows.at).equals(logged.take(by))):
            return "kept"
        return "take"

    orders: list[list[np.ndarray]] = []
    lock = threading.Lock()

    def local_orders() -> list[np.ndarray]:  # worked out once, by the first column that needs them
        with lock:
            if not orders:
                orders.append(_local_orders(offsets, touched, replaced, replacing, new, new_counts))
            return orders[0]

    def column(name: str) -> pa.ChunkedArray:
        how = kind(name)
        kept = base.column(name) if base is not None else None
        logged = logged_rows.column(name).chunk(0)
        if how == "take":
            return _taken(kept, logged, local_orders(), offsets)
        col = _replaced_chunks(kept, logged, rows) if how == "scatter" else kept
        return _interleaved(col, logged.take(pa.array(rows.new)), offsets.base, new_counts) if len(new) else col

    cols = list(map_(column, schema.names))  # columns side by side: takes and copies release the GIL
    return pa.Table.from_arrays(cols, schema=(base if base is not None else logged_rows).schema), ends


def _local_orders(offsets: _Offsets, touched: np.ndarray, replaced: np.ndarray, replacing: np.ndarray,
                  new: np.ndarray, new_counts: np.ndarray) -> list[np.ndarray]:
    """Per slice, the row of its own base rows, then its own log rows, that each of its output
    rows takes (:func:`_take_index` of the slice alone): no array as long as every slice's rows."""
    n_base = int(offsets.base[-1])
    t_cut, r_cut = np.searchsorted(touched, offsets.base), np.searchsorted(replaced, offsets.base)
    n_cut = np.concatenate([[0], np.cumsum(new_counts)])
    out = []
    for s in range(len(offsets.base) - 1):
        b0, n_s, r0 = int(offsets.base[s]), int(offsets.base[s + 1] - offsets.base[s]), int(offsets.row[s])

        def local(rows: np.ndarray, b0: int = b0, n_s: int = n_s, r0: int = r0) -> np.ndarray:
            return np.where(rows < n_base, rows - b0, rows - r0 + n_s)

        rep = replaced[r_cut[s]:r_cut[s + 1]] - b0
        wins = np.concatenate([local(replacing[r_cut[s]:r_cut[s + 1]]), local(new[n_cut[s]:n_cut[s + 1]])])
        out.append(_take_index(n_s, touched[t_cut[s]:t_cut[s + 1]] - b0, rep, wins, len(rep)))
    return out


def _taken(kept: pa.ChunkedArray | None, logged: pa.Array, orders: list[np.ndarray], offsets: _Offsets
           ) -> pa.ChunkedArray:
    """A column taken row by row, slice by slice from that slice's own base and log rows
    (``orders``: :func:`_local_orders`): small takes stay in the cache, where one take over
    every slice's rows joined would not."""
    n_base, out = int(offsets.base[-1]), []
    for s, idx in enumerate(orders):
        if not len(idx):
            continue
        b0, b1, r0, r1 = (int(x) for x in (offsets.base[s], offsets.base[s + 1], offsets.row[s], offsets.row[s + 1]))
        chunks = kept.slice(b0, b1 - b0).chunks if kept is not None else []
        out.append(_joined([*chunks, logged.slice(r0 - n_base, r1 - r0)], logged.type).take(pa.array(idx)))
    return pa.chunked_array(out, logged.type)


def _replaced_chunks(kept: pa.ChunkedArray, logged: pa.Array, rows: _Replacement) -> pa.ChunkedArray:
    """:func:`_replaced` chunk by chunk of ``kept`` (each slice's base rows): small copies stay in the cache."""
    starts = np.concatenate([[0], np.cumsum([len(c) for c in kept.chunks])])
    cuts = np.searchsorted(rows.at, starts)
    out = []
    for c, s, a, b in zip(kept.chunks, starts.tolist(), cuts.tolist(), cuts[1:].tolist(), strict=False):
        part = _Replacement(rows.at[a:b] - s, rows.by[a:b], rows.new[:0])
        out += _replaced(pa.chunked_array([c], c.type), logged, part).chunks if b > a else [c]
    return pa.chunked_array(out, kept.type)


def _take_ascending(col: pa.ChunkedArray, idx: np.ndarray) -> pa.Array:
    """``col.take(idx)`` for ascending ``idx``, chunk by chunk: a take from a column of many
    chunks would join them first (a copy of every row)."""
    if col.num_chunks == 1:
        return col.chunks[0].take(pa.array(idx))
    starts = np.concatenate([[0], np.cumsum([len(c) for c in col.chunks])])
    cuts = np.searchsorted(idx, starts)
    parts = [c.take(pa.array(idx[a:b] - s)) for c, s, a, b in zip(col.chunks, starts, cuts, cuts[1:], strict=False) if b > a]
    return pa.concat_arrays(parts) if parts else pa.array([], col.type)


def _interleaved(col: pa.ChunkedArray, new: pa.ChunkedArray | pa.Array, base_starts: np.ndarray,
                 new_counts: np.ndarray) -> pa.ChunkedArray:
    """``col`` (every slice's base rows) with each slice's new values after its own rows."""
    chunks: list[pa.Array] = []
    done = 0
    for s, k in enumerate(new_counts.tolist()):
        a, b = int(base_starts[s]), int(base_starts[s + 1])
        chunks += col.slice(a, b - a).chunks
        if k:
            chunks += new.slice(done, k).chunks if isinstance(new, pa.ChunkedArray) else [new.slice(done, k)]
            done += k
    return pa.chunked_array(chunks, col.type)


def touched(keys: pa.ChunkedArray | pa.Array, dictionary: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The positions of ``keys`` (the base rows' keys) that hold a key of ``dictionary`` (the
    logs' distinct keys), ascending, and the index in ``dictionary`` of each one's key."""
    found = _touched_sorted(keys, dictionary)
    if found is not None:
        return found
    codes = _numpy(pc.fill_null(pc.index_in(keys, value_set=dictionary), -1))
    at = np.flatnonzero(codes >= 0)
    return at, codes[at]


def _touched_sorted(keys: pa.ChunkedArray | pa.Array, dictionary: pa.Array) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`touched` of keys without nulls stored in ascending order (a base file written
    sorted by key): a binary search for each of the logs' few keys, where a hash probe of every
    base key costs more than the rest of a small merge. Integer keys, and string keys of one
    length (compared as fixed-width bytes, no copy: ``k000000123``, UUIDs). None for others."""
    if keys.null_count or dictionary.null_count:
        return None
    if pa.types.is_integer(keys.type):
        base, wanted, codes = _numpy(keys), dictionary.to_numpy(), None
    else:
        base = _fixed_width(keys)
        if base is None:
            return None
        wanted, codes = _of_width(dictionary, base.dtype.itemsize)
    if len(base) > 1 and not (base[1:] >= base[:-1]).all():
        return None
    lo, hi = np.searchsorted(base, wanted, "left"), np.searchsorted(base, wanted, "right")
    n = hi - lo  # how many base rows hold each key (one, when the base holds each key once)
    starts = np.cumsum(n) - n
    at = np.repeat(lo, n) + np.arange(int(n.sum())) - np.repeat(starts, n)
    code = np.repeat(np.arange(len(wanted)) if codes is None else codes, n)
    order = np.argsort(at, kind="stable")
    return at[order], code[order]


def _fixed_width(keys: pa.ChunkedArray | pa.Array) -> np.ndarray | None:
    """String keys that all have one length (in bytes) as a numpy ``S<width>`` view of their
    data, which sorts and compares as the bytes do; None for other keys."""
    if not pa.types.is_string(keys.type) or not len(keys):
        return None
    a = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
    offsets = np.frombuffer(a.buffers()[1], np.int32, len(a) + 1, a.offset * 4)
    width = int(offsets[1] - offsets[0])
    if width == 0 or int(offsets[-1] - offsets[0]) != width * len(a) or not (np.diff(offsets) == width).all():
        return None
    return np.frombuffer(a.buffers()[2], f"S{width}", len(a), int(offsets[0]))


def _of_width(dictionary: pa.Array, width: int) -> tuple[np.ndarray, np.ndarray]:
    """The values of ``dictionary`` (strings) that are ``width`` bytes long, as ``S<width>``,
    and their indices; no other value can equal a key of that width."""
    lengths = _numpy(pc.binary_length(dictionary))
    codes = np.flatnonzero(lengths == width)
    same = dictionary.take(pa.array(codes)) if len(codes) < len(dictionary) else dictionary
    view = _fixed_width(same) if len(same) else None
    return (view if view is not None else np.zeros(0, f"S{width}")), codes


@dataclass
class _Kept:
    """What :func:`_filled_columns` needs of :func:`_winners`' work: the candidates' packed
    (score, place), and which keys survive in what order with which winning row."""

    packed: np.ndarray  # per candidate (score + 1) * span + place; -1 where it does not compete
    seq: np.ndarray
    row: np.ndarray
    keys: np.ndarray  # the surviving keys' codes, in output order
    win_rows: np.ndarray  # their winning rows, alike


def _winners(cands: _Candidates, codes: np.ndarray, n_keys: int, ordering: tuple[pa.Field, ...], n_base: int = 0
             ) -> tuple[np.ndarray, np.ndarray, _Kept]:
    """(stored row of each surviving key's winning record, the place of that key's first
    version), ordered by that first place; keys whose winner is a delete are left out.

    ``codes``: each candidate's key as 0..n_keys-1. No sort of the candidates: each one's
    (score, place) packs into one integer, and a key's winner is its maximum."""
    seq = np.concatenate(cands.seq)  # ascending: candidates come in history order
    row = np.concatenate(cands.row)
    first_seq = np.full(n_keys, np.iinfo(np.int64).max)
    np.minimum.at(first_seq, codes, seq)  # before any candidate is dropped
    alive = np.ones(len(seq), bool)
    if not ordering:
        score = np.zeros(len(seq), np.int64)
    else:
        plain = np.concatenate(cands.plain)
        score = _combined_scores([_scores(_concat([o[i] for o in cands.ordering], f.type), plain)
                                  for i, f in enumerate(ordering)], plain)
        alive = _after_plain_deletes(codes, seq, row, plain, n_keys, n_base)
    span = int(seq[-1]) + 1
    packed = (score + 1) * span + seq  # scores and places stay far below 2**31, so no overflow
    packed[~alive] = -1
    best = np.full(n_keys, -1, np.int64)
    np.maximum.at(best, codes, packed)
    win_row = row[np.searchsorted(seq, best % span)]
    kept = win_row >= 0  # a winning delete removes the key
    places = first_seq[kept]
    order = np.argsort(places)
    win_rows = win_row[kept][order]
    return win_rows, places[order], _Kept(packed, seq, row, np.flatnonzero(kept)[order], win_rows)


def _filled_columns(cands: _Candidates, codes: np.ndarray, schema: pa.Schema, kept: _Kept, n_base: int,
                    stored: list[pa.Table] | None, key: str) -> list[tuple[list[str], np.ndarray]]:
    """Partial merges: for each column, the stored row each surviving key takes it from (aligned
    with the winners; -1: null), as Hudi folds a key's versions pairwise, the winner of each pair
    taking the columns it lacks from the loser (``PartialUpdateBufferedRecordMerger``: a block
    marked ``IS_PARTIAL`` lacks the columns it does not carry; ``PartialUpdateHandler
    .reconcileDefaultValues`` under ``IGNORE_DEFAULTS``: a null value, the Avro default of our
    nullable columns, when ``stored`` is given). A delete on either side leaves the winner as it
    is. So each key's result is the first version, in this order, that has the column:

    - the base row, when it beats the logs' result (``finalMerge``),
    - the logs' running winners since their last winning delete, latest first (each one that
      beats the fold so far goes before it),
    - the logs' other records after the first of those, in log order (each one that loses to the
      fold goes after it),
    - the base row, when the logs' result beats it.

    Vectorized: the running winners come from a running maximum of the candidates' packed
    (score, place) per key, each candidate gets a priority, and per column each key takes the
    candidate of least priority among those that have it."""
    packed, seq, row = kept.packed, kept.seq, kept.row
    n_keys = int(codes.max()) + 1
    span = int(seq[-1]) + 1
    logs = np.flatnonzero((seq >= n_base) & (packed >= 0))
    logs = logs[np.lexsort((seq[logs], codes[logs]))]  # by key, then place
    code, lseq, is_del = codes[logs], seq[logs], row[logs] < 0
    rank = np.empty(len(logs), np.int64)  # packed values ranked: small enough to shift keys apart
    rank[np.argsort(packed[logs], kind="stable")] = np.arange(len(logs))
    shifted = code.astype(np.int64) * (len(logs) + 1) + rank  # one running maximum over every key
    before = np.concatenate([[-1], np.maximum.accumulate(shifted)[:-1]])
    leads = shifted > before  # a new running winner of its key (a key's first log version too)
    cleared = np.full(n_keys, -1, np.int64)
    np.maximum.at(cleared, code[leads & is_del], lseq[leads & is_del])
    led = leads & ~is_del & (lseq > cleared[code])
    none = np.iinfo(np.int64).max
    first_led = np.full(n_keys, none)
    np.minimum.at(first_led, code[led], lseq[led])
    trailing = ~leads & ~is_del & (lseq > first_led[code])
    # priorities: 0 the base row when it wins, then span.. the running winners latest first,
    # 2*span.. the losing records in log order, 3*span the base row when the logs win
    base_wins = np.zeros(n_keys, bool)
    base_wins[kept.keys] = kept.win_rows < n_base
    prio = np.full(len(seq), -1, np.int64)
    prio[logs[led]] = span + (span - 1 - lseq[led])
    prio[logs[trailing]] = 2 * span + lseq[trailing]
    in_base = np.flatnonzero((seq < n_base) & (packed >= 0))
    prio[in_base] = np.where(base_wins[codes[in_base]], 0, 3 * span)
    logs_deleted = (cleared >= 0) & (first_led == none)  # the fold ends on a winning delete
    drop = (prio > 0) & (seq >= n_base) & logs_deleted[codes]  # the base row won alone over a deleted fold
    prio[drop] = -1
    member = np.flatnonzero(prio >= 0)
    pattern = np.concatenate(cands.pattern)
    rows = pa.concat_tables(stored) if stored is not None else None
    n_cand = len(seq)
    out = []
    for name in schema.names:
        if name == key:
            continue
        carriers = np.array([c is None or name in c for c in cands.carried])
        has = carriers[pattern[member]]
        if rows is not None and rows.column(name).null_count:
            has &= ~_bool(rows.column(name).take(pa.array(row[member])).is_null())
        if has.all():  # the first member, the winner, has it
            continue
        chosen = np.full(n_keys, none)
        np.minimum.at(chosen, codes[member[has]], prio[member[has]] * n_cand + member[has])
        pick = chosen[kept.keys]
        out.append(([name], np.where(pick < none, row[pick % n_cand], kept.win_rows)))
    return out


def ordering_scores(columns: Sequence[pa.Array | pa.ChunkedArray]) -> np.ndarray:
    """Each row's ordering value (``columns``: one per ordering field, rows aligned) as an
    integer that sorts as the merge compares them (Hudi's ``ArrayComparable.compareTo`` for
    several fields, a null field value as :func:`merge` takes it): for writers, which keep one
    version of a key within a batch and drop an incoming row older than the stored one by the
    same comparison as reads and compaction."""
    n = len(columns[0]) if columns else 0
    plain = np.zeros(n, bool)
    one = [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in columns]
    return _combined_scores([_scores(c, plain) for c in one], plain)


def _scores(values: pa.Array, plain: np.ndarray) -> np.ndarray:
    """Each candidate's ordering value as an integer that sorts alike: a dense rank (from 1),
    0 for a null value, -1 for a plain delete (below everything, so it wins only alone). A null
    of an ``int`` column is Hudi's default ``Integer`` 0 and ranks as 0."""
    if java_class(values.type) == "Integer" and values.null_count:
        values = pc.fill_null(values, pa.scalar(0, values.type))
    try:
        ranks = pc.rank(values, sort_keys="ascending", tiebreaker="dense")
    except _CAST_ERRORS as e:
        raise TableFormatError(f"ordering values of type {values.type} cannot be compared: {e}") from e
    score = _numpy(ranks).astype(np.int64)
    score[_is_null(values)] = 0
    score[plain] = -1
    return score


def _combined_scores(scores: list[np.ndarray], plain: np.ndarray) -> np.ndarray:
    """Several ordering fields' scores (:func:`_scores`) as one that sorts alike: compared field
    by field, the first difference deciding (Hudi's ``ArrayComparable.compareTo``); a dense rank
    of the tuples, -1 for a plain delete."""
    if len(scores) == 1:
        return scores[0]
    tuples = np.stack(scores, axis=1)
    _, inverse = np.unique(tuples, axis=0, return_inverse=True)  # rows of the tuples in ascending order
    score = inverse.reshape(-1).astype(np.int64)
    score[plain] = -1
    return score


def _after_plain_deletes(codes: np.ndarray, seq: np.ndarray, row: np.ndarray, plain: np.ndarray, n_keys: int,
                         n_base: int) -> np.ndarray:
    """Which candidates compete, as Hudi's JVM folds a key's log versions in order and then
    merges the survivor with the base row (``EventTimeRecordMerger``): a plain delete replaces
    what came before it in the logs and absorbs the deletes right after it
    (``deltaMergeDeleteRecord``); the first record after it replaces it (``shouldKeepNewerRecord``:
    a commit-time delete always yields), and from there versions compete by ordering value, the
    base row too (``finalMerge`` compares it with the logs' survivor, whatever plain delete came
    between). A key with no record after its last plain delete ends deleted. Base rows are the
    candidates placed before ``n_base``; deletes have ``row`` -1."""
    if not plain.any():
        return np.ones(len(codes), bool)
    cut = np.full(n_keys, -1, np.int64)
    np.maximum.at(cut, codes[plain], seq[plain])
    key_cut = cut[codes]
    record_after = (row >= 0) & (key_cut >= 0) & (seq > key_cut)
    none = np.iinfo(np.int64).max
    first = np.full(n_keys, none)
    np.minimum.at(first, codes[record_after], seq[record_after])
    key_first = first[codes]
    resumed = key_first < none
    return (key_cut < 0) | (resumed & ((seq < n_base) | (seq >= key_first))) | (~resumed & (seq == key_cut))


def _assemble(stored: list[pa.Table], schema: pa.Schema, key: str, n_base: int, touched: np.ndarray,
              win_rows: np.ndarray, win_places: np.ndarray,
              filled: list[tuple[list[str], np.ndarray]] | None = None) -> pa.Table:
    """The output rows: untouched base rows and the winners, each at its key's first place.

    A key in the base file has its base position as first place, so the base rows keep their
    positions (a touched one replaced by its key's winner, or dropped when a delete won) and the
    keys new to the slice follow, by first place. ``touched``: the base positions the logs touch.
    ``filled``: columns whose winners' values come from other rows (:func:`_filled_columns`)."""
    out = _assemble_rows(stored, schema, key, n_base, touched, win_rows, win_places)
    if not filled or not out.num_rows:
        return out
    rows = pa.concat_tables(stored)
    in_base = int(np.searchsorted(win_places, n_base))
    for names, from_rows in filled:
        idx = _take_index(n_base, touched, win_places[:in_base], from_rows, in_base)
        at = pa.array(idx, mask=idx < 0)
        for name in names:
            i = out.schema.get_field_index(name)
            out = out.set_column(i, out.schema.field(i), rows.column(name).take(at))
    return out


def _take_index(n_base: int, touched: np.ndarray, replaced: np.ndarray, win_rows: np.ndarray, in_base: int
                ) -> np.ndarray:
    """The stored row of each output row (see :func:`_assemble_rows`), -1 where ``win_rows`` is."""
    take = np.arange(n_base)
    take[replaced] = win_rows[:in_base]
    if len(touched) > in_base:  # a delete won over some base rows: drop them
        keep = np.ones(n_base, bool)
        keep[touched] = False
        keep[replaced] = True
        take = take[keep]
    return np.concatenate([take, win_rows[in_base:]])


def _assemble_rows(stored: list[pa.Table], schema: pa.Schema, key: str, n_base: int, touched: np.ndarray,
                   win_rows: np.ndarray, win_places: np.ndarray) -> pa.Table:
    """:func:`_assemble` of whole winning rows."""
    in_base = int(np.searchsorted(win_places, n_base))  # win_places ascend
    replaced, replacing = win_places[:in_base], win_rows[:in_base]
    if in_base == len(touched) == len(win_rows) and np.array_equal(replaced, replacing):
        return stored[0] if n_base else schema.empty_table()  # the logs changed nothing
    take = _take_index(n_base, touched, replaced, win_rows, in_base)
    if not len(take):
        return schema.empty_table()
    if not n_base or len(touched) > in_base:
        return _take_rows(stored, schema, pa.array(take))
    # every base row stays: a column whose replacing values equal the values they replace (the
    # key always; often the partition path and columns an update does not change) is the base's
    # as stored followed by the new keys' values, no copy of its (string) values. Small takes
    # read the logs' rows alone (a take from many chunks first joins them)
    logs = pa.concat_tables(stored[1:]).combine_chunks()
    changed = replacing != replaced  # else the base row itself won
    rows = _Replacement(replaced[changed], replacing[changed] - n_base, win_rows[in_base:] - n_base)
    at, by = pa.array(rows.at), pa.array(rows.by)
    new, everything = pa.array(rows.new), pa.array(take)
    cols = []
    for name in schema.names:
        kept, logged = stored[0].column(name), logs.column(name)
        if name != key and _scatterable(kept, logged):
            cols.append(_scattered(kept, _joined(logged.chunks, kept.type), rows))
        elif name == key or (_exact(kept.type) and kept.take(at).equals(logged.take(by))):
            cols.append(pa.chunked_array(kept.chunks + (logged.take(new).chunks if len(new) else []), kept.type))
        else:
            cols.append(_joined(kept.chunks + logged.chunks, kept.type).take(everything))
    return pa.Table.from_arrays(cols, schema=stored[0].schema)


@dataclass(frozen=True)
class _Replacement:
    """How the logs change a slice whose base rows all stay: base rows ``at`` take log rows
    ``by``; the keys new to the slice, log rows ``new``, follow the base rows."""

    at: np.ndarray
    by: np.ndarray
    new: np.ndarray


def _scatterable(kept: pa.ChunkedArray, logged: pa.ChunkedArray) -> bool:
    """Whether :func:`_scattered` may assemble a column: numbers without nulls."""
    t = kept.type
    return ((pa.types.is_integer(t) or t in (pa.float32(), pa.float64())) and logged.type == t
            and kept.num_chunks > 0 and not kept.null_count and not logged.null_count)


def _scattered(kept: pa.ChunkedArray, logged: pa.Array, rows: _Replacement) -> pa.ChunkedArray:
    """A column of numbers without nulls assembled in numpy: the base values as stored when the
    replacing values are identical to them (compared by their bits: a 0.0 does not stand in for
    a -0.0), else one copy of them with the replacing values written over; the new keys' values
    after them. A take over the base and log chunks joined would copy and gather every row."""
    tail = [pa.array(logged.to_numpy()[rows.new], kept.type)] if len(rows.new) else []
    return pa.chunked_array(_replaced(kept, logged, rows).chunks + tail, kept.type)


def _replaced(kept: pa.ChunkedArray, logged: pa.Array, rows: _Replacement) -> pa.ChunkedArray:
    """:func:`_scattered` without the new keys' values."""
    from_logs = logged.to_numpy()
    one = kept.num_chunks == 1
    base = kept.chunks[0].to_numpy() if one else np.concatenate([c.to_numpy() for c in kept.chunks])
    bits = np.dtype(f"u{base.dtype.itemsize}")
    if np.array_equal(base[rows.at].view(bits), from_logs[rows.by].view(bits)):
        return kept
    values = base.copy() if one else base  # chunks joined are a copy already
    values[rows.at] = from_logs[rows.by]
    return pa.chunked_array([pa.array(values, kept.type)], kept.type)


def _take_rows(stored: list[pa.Table], schema: pa.Schema, idx: pa.Array) -> pa.Table:
    """Rows ``idx`` of the stored tables one after another, each column joined before the take."""
    cols = [_joined([c for t in stored for c in t.column(name).chunks], f.type).take(idx)
            for name, f in zip(schema.names, schema, strict=True)]
    return pa.Table.from_arrays(cols, schema=stored[0].schema)


def _joined(chunks: list[pa.Array], type_: pa.DataType) -> pa.Array:
    return chunks[0] if len(chunks) == 1 else pa.concat_arrays(chunks) if chunks else pa.array([], type_)


def _exact(t: pa.DataType) -> bool:
    """Whether equal values of type ``t`` are identical (not floats: 0.0 equals -0.0), so a
    column may keep a stored value in place of an equal one."""
    return (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t) or pa.types.is_integer(t) or pa.types.is_boolean(t)
            or pa.types.is_temporal(t) or pa.types.is_decimal(t))


def _ordering_fields(schema: pa.Schema, config: MergeConfig) -> tuple[pa.Field, ...]:
    """The columns of ``schema`` the merge orders by (none: commit-time merging)."""
    out = []
    for name in config.ordering_fields:
        i = schema.get_field_index(name)
        if i < 0:
            raise TableFormatError(f"ordering field {name!r} is not a column of the file schema")
        out.append(schema.field(i))
    return tuple(out)


def _ordering_of(t: pa.Table, ordering: tuple[pa.Field, ...]) -> tuple[pa.ChunkedArray, ...]:
    return tuple(t.column(f.name) for f in ordering)


def _delete_ordering(d: pa.Table, ordering: tuple[pa.Field, ...]) -> tuple[tuple[pa.Array, ...], np.ndarray]:
    """A delete block's ordering values, one array per ordering field (none for commit-time
    merging), and which deletes are plain. One field: the single values (:func:`_delete_values`).
    Several fields: Hudi compares ``ArrayComparable`` values, so only a delete carrying one
    (an ``ArrayWrapper``, :func:`_delete_arrays`) competes; a single value or the default is
    never of its class (``OrderingValues.isSameClass``), so such a delete is plain."""
    n = d.num_rows
    if len(ordering) > 1:
        return _delete_arrays(d, ordering)
    if ordering:
        values = _delete_values(d, ordering[0])
        return (values,), _is_null(values)
    return (), np.zeros(n, bool)


def _delete_arrays(d: pa.Table, ordering: tuple[pa.Field, ...]) -> tuple[tuple[pa.Array, ...], np.ndarray]:
    """The ``ArrayWrapper`` ordering values of a delete block (column ``ordering_values``, one
    child per field in field order) on a table of several ordering fields, and which deletes
    are plain: those without one, and all of them when a child's Java class differs from its
    field's (``EventTimeRecordMerger.deltaMergeDeleteRecord`` keeps an older version only for
    ``OrderingValues.isSameClass`` values, ``ArrayComparable.isValueSameClass`` comparing the
    classes field by field). No value is the default here (``OrderingValues.isDefault`` holds
    for the ``Integer`` 0 alone), so an ``Integer`` 0 field competes as 0.

    Raises :class:`TableFormatError` for a value of another count of fields than the table's,
    or with a null field (Hudi's comparison fails on both: ``ArrayComparable.compareTo``,
    ``isValueSameClass`` calls ``getClass`` on each field)."""
    n = d.num_rows
    plain_all = (tuple(pa.nulls(n, f.type) for f in ordering), np.ones(n, bool))
    if d.schema.get_field_index(DELETE_ORDERING_VALUES) < 0:
        return plain_all
    arrays = d.column(DELETE_ORDERING_VALUES).combine_chunks()
    if not pa.types.is_struct(arrays.type):
        raise TableFormatError(f"delete ordering values ({arrays.type}) are not one value per ordering field")
    names = [f.name for f in ordering]
    if arrays.type.num_fields != len(ordering):
        raise TableFormatError(f"a delete's ordering value holds {arrays.type.num_fields} fields, the table orders by "
                               f"{len(ordering)} ({names}): Hudi cannot compare them")
    has = _bool(arrays.is_valid())
    children = [arrays.field(i) for i in range(len(ordering))]
    if any(_bool(c.is_null())[has].any() for c in children):
        raise TableFormatError(f"a delete's ordering value on {names} has a null field, which Hudi's "
                               "ArrayComparable cannot compare (it fails with a NullPointerException)")
    if not has.any() or any(java_class(c.type) != java_class(f.type) for c, f in zip(children, ordering, strict=True)):
        return plain_all
    plain = ~has
    mask = pa.array(plain)
    values = tuple(pc.if_else(mask, pa.scalar(None, f.type), _as_ordering_type(c, f))
                   for c, f in zip(children, ordering, strict=True))
    return values, plain


def _delete_values(d: pa.Table, ordering: pa.Field) -> pa.Array:
    """A delete block's ordering values in the ordering column's type, null for a plain delete
    (see the module docstring: no value, ``Integer`` 0, or a value of another Java class than
    the ordering field's); safe cast: values that do not fit raise rather than wrap."""
    if d.schema.get_field_index(DELETE_ORDERING) < 0:
        return pa.nulls(d.num_rows, ordering.type)
    values = plain_defaults(d.column(DELETE_ORDERING).combine_chunks())
    if values.null_count == len(values) or java_class(values.type) != java_class(ordering.type):
        return pa.nulls(d.num_rows, ordering.type)
    return _as_ordering_type(values, ordering)


def _as_ordering_type(values: pa.Array, ordering: pa.Field) -> pa.Array:
    """Delete ordering values of the ordering field's Java class in the field's Arrow type (a
    timestamp's Avro long as that timestamp); safe cast: values that do not fit raise rather than wrap."""
    if values.type == ordering.type:
        return values
    try:
        if pa.types.is_timestamp(ordering.type) and pa.types.is_integer(values.type):  # the Avro long
            values = pc.cast(values, pa.timestamp(avro_time_unit(ordering.type), tz=ordering.type.tz))
        return pc.cast(values, ordering.type, safe=True)
    except _CAST_ERRORS as e:
        raise TableFormatError(
            f"delete ordering values ({values.type}) cannot be compared with ordering field "
            f"{ordering.name!r} ({ordering.type}): {e}"
        ) from e


def array_ordering(columns: Sequence[pa.Array | pa.ChunkedArray]) -> pa.StructArray:
    """Several ordering fields' values (one column per field, in field order) as the deletes'
    ``ordering_values`` column: Hudi's ``ArrayComparable`` of a record (``OrderingValues.create``),
    which a delete block holds as an ``ArrayWrapper``. A row with a null field gets none (null:
    a plain delete), since Hudi's comparison fails on a null field (:func:`_delete_arrays`)."""
    one = [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in columns]
    missing = np.zeros(len(one[0]) if one else 0, bool)
    for c in one:
        missing |= _is_null(c)
    return pa.StructArray.from_arrays(one, names=[str(i) for i in range(len(one))], mask=pa.array(missing))


def plain_defaults(values: pa.Array) -> pa.Array:
    """Delete ordering values with Hudi's default, the ``Integer`` 0 (an Avro ``int``, as a delete
    without an ordering value carries it), as null: such a delete is plain, it removes every
    older version whatever its ordering value (``OrderingValues.isDefault``). A ``long`` 0 is
    an ordering value like any other."""
    if values.type not in (pa.int8(), pa.int16(), pa.int32()):  # an IntWrapper (a date is a LocalDate)
        return values
    zero = pc.equal(values, pa.scalar(0, values.type))
    return pc.if_else(zero, pa.scalar(None, values.type), values)


#: the Java class Hudi's JVM reader holds an ordering value of each Arrow type in: ``Integer``
#: for an Avro ``int`` (Spark's byte, short and int columns alike, and a date's days), ``Long``
#: for an Avro ``long`` (a timestamp's micros or millis). Delete values decoded from the
#: ``DateWrapper`` / ``TimestampMicrosWrapper`` this package wrote before Hudi 1.1's wrappers
#: count alike: they compare as dates and timestamps, as hudi-rs compares them.
_JAVA_CLASSES: tuple[tuple[Any, str], ...] = (
    (pa.types.is_boolean, "Boolean"),
    (lambda t: t in (pa.int8(), pa.int16(), pa.int32(), pa.uint8(), pa.uint16(), pa.date32(), pa.date64())
     or pa.types.is_time32(t), "Integer"),
    (lambda t: t in (pa.int64(), pa.uint32()) or pa.types.is_timestamp(t) or pa.types.is_time64(t), "Long"),
    (lambda t: t == pa.float32(), "Float"),
    (lambda t: t == pa.float64(), "Double"),
    (lambda t: pa.types.is_string(t) or pa.types.is_large_string(t), "String"),
    (lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t), "Bytes"),
    (pa.types.is_decimal, "Decimal"),
)


def java_class(t: pa.DataType) -> str:
    """The Java class of an ordering value of Arrow type ``t`` (see ``_JAVA_CLASSES``); for an
    unknown type, the type's own name."""
    for test, name in _JAVA_CLASSES:
        if test(t):
            return name
    return str(t)


def _delete_keys(d: pa.Table, key_type: pa.DataType) -> pa.ChunkedArray:
    """A delete block's record keys in the type of the key column (an integer key field's keys
    are its values' text)."""
    keys = d.column(DELETE_KEY)
    if keys.type == key_type:
        return keys
    try:
        return keys.cast(key_type)
    except _CAST_ERRORS as e:
        raise TableFormatError(f"delete record keys cannot be read as the key column's {key_type}: {e}") from e


def _numpy(a: pa.Array | pa.ChunkedArray) -> np.ndarray:
    if isinstance(a, pa.ChunkedArray):
        a = a.combine_chunks()
    return a.to_numpy(zero_copy_only=False)


def _concat(parts: list, type_: pa.DataType) -> pa.Array:
    chunks = [c for p in parts for c in (p.chunks if isinstance(p, pa.ChunkedArray) else [p])]
    return pa.chunked_array(chunks, type_).combine_chunks()


def _is_null(values: pa.Array) -> np.ndarray:
    return _bool(values.is_null())


def _bool(mask: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return _numpy(mask).astype(bool)


def _rows(t: pa.Table | None) -> int:
    return t.num_rows if t is not None else 0
