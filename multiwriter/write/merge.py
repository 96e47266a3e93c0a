"""Copy-on-write merge of one file group (pure pyarrow; the driver and Spark executors both
call :func:`merge_file_group`, so both paths write the same rows).

A marker is created before the data file, so a failed attempt's files can always be found and
deleted. Right before the marker, the task checks that its instant is still alive (so a dead
writer wastes no work), and every data file is written under a staged name and published only
after that check passed again (:func:`write_checked`, :mod:`.guard`): a writer paused past its
heartbeat bound, or a task attempt that outlived its instant's commit, makes nothing visible.
On the driver, whose markers go into one list before the merges start, the check before that
list stands for the one before each file: what makes a file visible is the check before its
publication, which every file still passes.
Untouched rows keep their commit time and sequence number.
"""
from __future__ import annotations

import base64
import dataclasses
import functools
import json
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .. import markers
from ..heartbeat.client import beating_client
from ..storage import FileExists, Storage
from ..table.merge_config import MergeConfig
from ..table.merge_rule import ordering_scores
from ..format import layout
from ..format import bounds
from ..table.properties import TableConfig
from ..table.record_keys import RECORD_KEY, stored_keys
from ..table.delete_markers import DeleteMarkers
from ..table.merge_rule import plain_defaults
from ..table import bootstrap_slice, metadata_record_index, metadata_stats
from ..table.metadata import WriteStat
from ..format import cdc_log
from ..format.schema import META_COLUMNS, arrow_to_avro_json, cast_column, data_schema, with_meta
from ..table.cdc import cdc_enabled, supplemental_mode
from . import bloom, changes, guard
from .columns import Prefixes, constant, constant_value
from .index import SHARED_FOOTERS, FooterKeys, with_typed_range
from .plan import FileGroupTask
from .records import KEY, OP, OP_DELETE, dedupe

T = TypeVar("T")
MIN_KEY = "hoodie_min_record_key"
MAX_KEY = "hoodie_max_record_key"


@dataclass(frozen=True)
class MergeContext:
    """What every task of one instant needs; small and plain so it ships to executors."""

    table_uri: str
    instant_time: str
    schema_ipc: bytes  # the (evolved) data schema, Arrow IPC-serialized
    ordering_field: str | None
    partition_depth: int
    heartbeat_bound_s: float | None = None  # the writer's heartbeat expiry bound (pre-write check)
    pending_files: tuple[str, ...] = ()  # requested/inflight files of the instant (pre-write check)
    unique_columns: tuple[str, ...] = ()  # data columns unique within a file (a one-field record key)
    plain_columns: tuple[str, ...] = ()  # data columns whose values rarely repeat: no dictionary (:func:`with_encodings`)
    markers_listed: bool = False  # every file's marker is already in the instant's marker list (:func:`markers.create_all`)
    log_append: bool = False  # Merge-on-Read: groups with a base file get a log file (:mod:`.log_append`)
    keep_columns: tuple[str, ...] = ()  # partial update: data columns the batch omits; an update keeps their stored values
    #: the table's config when it has virtual keys (:attr:`TableConfig.virtual_keys`): files get
    #: null meta columns and no bloom filter, stored rows' keys are computed from their key fields
    virtual_keys: TableConfig | None = None
    #: the table's merge (:class:`~multiwriter.table.merge_config.MergeConfig`) where slices are
    #: merged (compaction); None: event time on ``ordering_field``
    merge_config: MergeConfig | None = None
    #: the table's delete markers: a compaction reading log records they flag merges them as deletes
    delete_markers: DeleteMarkers = DeleteMarkers()
    #: every ordering field when the merge names several (compared field by field, Hudi's
    #: ``ArrayComparable``); empty when ``ordering_field`` alone (or none) orders
    ordering_fields: tuple[str, ...] = ()
    #: ``hoodie.table.cdc.enabled``: the table's supplemental logging mode, and its Avro record
    #: schema (JSON) for the CDC records' images; None: merges write no CDC log (:mod:`.changes`)
    cdc_mode: str | None = None
    cdc_table_schema: str = ""
    #: the column-stats index version when the table keeps column stats: each file's footer
    #: stats are handed to its commit's metadata update (:mod:`~multiwriter.table.metadata_stats`)
    stats_version: int | None = None
    #: the table keeps the record index: hand each file's inserted and deleted keys over to it
    record_index: bool = False

    @property
    def ordering(self) -> tuple[str, ...]:
        """The fields a version is ordered by (none: commit time)."""
        return self.ordering_fields or ((self.ordering_field,) if self.ordering_field else ())

    @property
    def data_schema(self) -> pa.Schema:
        return _schemas(self.schema_ipc)[0]

    @property
    def file_schema(self) -> pa.Schema:
        """The schema of the files written: meta columns, then the data columns."""
        return _schemas(self.schema_ipc)[1]


@functools.lru_cache(maxsize=32)
def _schemas(schema_ipc: bytes) -> tuple[pa.Schema, pa.Schema]:
    """(data schema, file schema) of a serialized schema, decoded once per schema, not per file."""
    data = pa.ipc.read_schema(pa.py_buffer(schema_ipc))
    return data, with_meta(data)


def context(
    table_uri: str, instant_time: str, schema: pa.Schema, ordering_field: str | None, depth: int,
    record_key: tuple[str, ...] = (), *, log_append: bool = False, config: TableConfig | None = None,
) -> MergeContext:
    """``record_key``: the table's key fields; a single one is unique within each file.
    ``log_append``: the table is Merge-on-Read. ``config``: the table's, whose virtual keys
    the files follow and whose merge decides whether a stored row newer by ``ordering_field``
    stays (not on a table merged by commit time, whatever ordering field it names:
    :class:`~multiwriter.table.merge_config.MergeConfig`)."""
    several: tuple[str, ...] = ()
    cdc_mode, cdc_table_schema = None, ""
    if config is not None:
        merge = MergeConfig.from_table_config(config)
        ordering_field = merge.ordering_field
        several = merge.ordering_fields if len(merge.ordering_fields) > 1 else ()
        if cdc_enabled(config):
            cdc_mode, cdc_table_schema = supplemental_mode(config), arrow_to_avro_json(data_schema(schema), config.name)
    return MergeContext(table_uri, instant_time, data_schema(schema).serialize().to_pybytes(), ordering_field, depth,
                        unique_columns=tuple(record_key) if len(record_key) == 1 else (), log_append=log_append,
                        virtual_keys=config if config is not None and config.virtual_keys else None,
                        ordering_fields=several, cdc_mode=cdc_mode, cdc_table_schema=cdc_table_schema,
                        stats_version=metadata_stats.index_version_of(config) if config is not None else None,
                        record_index=config is not None and metadata_record_index.kept_by(config))


def armed(ctx: MergeContext, config: TableConfig) -> MergeContext:
    """``ctx`` with what the pre-write check needs where no heartbeat client is at hand (Spark
    executors): the bound of the client beating the instant in this process, and the instant's
    pending timeline files."""
    client = beating_client(ctx.instant_time)
    bound = client.bound_s if client is not None else ctx.heartbeat_bound_s
    return dataclasses.replace(
        ctx, heartbeat_bound_s=bound, pending_files=ctx.pending_files or guard.pending_files(config, ctx.instant_time)
    )


def check_alive(storage: Storage, ctx: MergeContext, what: str) -> None:
    """The pre-write check of :mod:`.guard` for one file of this instant."""
    guard.check_alive(storage, ctx.instant_time, ctx.heartbeat_bound_s, ctx.pending_files, what)


def write_checked(storage: Storage, ctx: MergeContext, rel: str, write: Callable[[str], T]) -> T:
    """Every data file of an instant is written through here: ``write(path)`` writes it under a
    staged path, and it is published as ``rel`` only when the instant is still alive
    (:func:`.guard.write_checked`)."""
    return guard.write_checked(storage, ctx.instant_time, ctx.heartbeat_bound_s, ctx.pending_files, rel, write)


def align(t: pa.Table, schema: pa.Schema, *, keep_dictionaries: bool = False) -> pa.Table:
    """Reorder/cast columns to ``schema``; columns the file lacks (schema evolution) are null.
    ``keep_dictionaries``: a dictionary column of ``schema``'s value type stays one (the
    result's schema then says so), for a merge that writes it back as such."""
    if t.schema.names == schema.names and all(a.type == b.type for a, b in zip(t.schema, schema, strict=True)):
        return t.replace_schema_metadata(schema.metadata) if t.schema.metadata != schema.metadata else t
    cols, fields = [], []
    for f in schema:
        i = t.schema.get_field_index(f.name)
        col = t.column(i) if i >= 0 else None
        if col is not None and keep_dictionaries and pa.types.is_dictionary(col.type) and col.type.value_type == f.type:
            fields.append(f.with_type(col.type))
            cols.append(col)
            continue
        fields.append(f)
        cols.append(cast_column(col, f.type) if col is not None else pa.nulls(t.num_rows, f.type))
    return pa.Table.from_arrays(cols, schema=pa.schema(fields, metadata=schema.metadata))


def merge_file_group(
    storage: Storage, ctx: MergeContext, task: FileGroupTask, incoming: pa.Table, write_token: str,
    *, deduped: bool = False, on_footer: Callable[[str, FooterKeys], None] | None = None, may_delete: bool = True,
    on_inserted: Callable[[str, pa.Array], None] | None = None, old_read: Future | None = None,
) -> WriteStat:
    """Write the new base file of one file group: its old rows, minus deleted and replaced keys,
    plus the incoming rows. ``deduped``: the caller already kept one row per key. ``on_footer``
    hears what the new file's footer says (a long-lived index then need not read it back).
    ``may_delete``: False when the caller knows ``incoming`` deletes nothing. ``on_inserted``
    hears (partition, keys) of the keys new to the group (the same-new-key conflict check).
    ``old_read``: :func:`read_old_file` of the old base file, already started."""
    started = time.monotonic()
    t = ctx.instant_time
    full = ctx.file_schema
    name = layout.DataFileName(task.file_id, write_token, t).name
    rel = layout.data_file_path(task.partition, name)
    if not ctx.markers_listed:
        check_alive(storage, ctx, f"the marker of {rel}")
        markers.create(storage, t, task.partition, name)
    ensure_partition_metadata(storage, task.partition, t, ctx.partition_depth)

    if not deduped and incoming.num_rows > 1:
        incoming = dedupe(incoming, ctx.ordering)
    upserts, deletes = split_deletes(incoming) if may_delete else (incoming, None)
    old, old_md = _read_old(storage, task, full, old_read, plain=ctx.ordering + ctx.unique_columns)
    virtual = ctx.virtual_keys is not None
    if virtual and old is not None:  # no key stored: computed from the key fields, as Hudi's simple index does
        old = old.set_column(full.get_field_index(RECORD_KEY), RECORD_KEY, stored_keys(old, ctx.virtual_keys))
    n_update = n_delete = 0
    old_keys = None
    keys_filter = None
    cdc: pa.Table | None = None  # an existing group's changes, when the table logs them (Hudi's merge handle)
    if old is not None and old.num_rows:
        old_col, new_col = _match_columns(ctx, old, upserts)
        pos = _positions_in_old(old.column(old_col), upserts.column(new_col))
        upserts, pos = _drop_stale(upserts, pos, old, ctx.ordering)
        if ctx.keep_columns:
            upserts = keep_stored(upserts, pos, old, ctx.keep_columns)
        drop = np.zeros(old.num_rows, dtype=bool)
        drop[pos[pos >= 0]] = True
        n_update = int(np.count_nonzero(pos >= 0))
        deleted_mask = np.zeros(old.num_rows, dtype=bool)
        if deletes is not None:
            old_keys = old.column("_hoodie_record_key").combine_chunks()
            deletes = outranked_deletes_dropped(deletes, old_keys, old, ctx.ordering_field)
            removed = pc.is_in(old_keys, value_set=deletes.column(KEY).combine_chunks()).to_numpy(zero_copy_only=False)
            deleted_mask = removed & ~drop
            n_delete = int(np.count_nonzero(deleted_mask))
            drop |= removed
        kept = old.filter(pa.array(~drop)) if n_update or n_delete else old
        inserted = upserts.filter(pa.array(pos < 0)) if n_update else upserts
        keys_filter = None if virtual else _grown_filter(old_md, inserted, _cached_filter(storage, task))
        if ctx.cdc_mode is not None:
            cdc = _changes(ctx, old, upserts, pos, deleted_mask)
    else:
        kept = None  # a new file (no empty table built: that costs more than the rest of the meta columns)
        inserted = upserts
    if old is not None and ctx.cdc_mode is not None and cdc is None:  # a stored group without rows
        cdc = _changes(ctx, old, upserts, np.full(upserts.num_rows, -1), np.zeros(old.num_rows, dtype=bool))
    if on_inserted is not None and inserted.num_rows:
        on_inserted(task.partition, inserted.column(KEY).combine_chunks())
    if ctx.record_index:
        gone = old_keys.filter(pa.array(deleted_mask)) if old_keys is not None and n_delete else None
        metadata_record_index.remember_keys(storage, rel, inserted.column(KEY).combine_chunks(), gone)
    has_kept = kept is not None and kept.num_rows > 0
    fresh, constants = new_rows(upserts, full, t, task, name, time_is_constant=not has_kept,
                                dictionaries=_dictionary_names(kept) if has_kept else frozenset(), virtual=virtual)
    n_insert = fresh.num_rows - n_update
    # kept rows first, in their stored order, then the incoming ones: no sort (readers and the
    # index need none; the key range and bloom filter go to the footer; clustering sorts)
    out = joined_dictionaries(pa.concat_tables([kept, fresh])) if has_kept else fresh
    if keys_filter is None and not virtual:  # a new file group, or an old file without a filter we can grow
        keys_filter = bloom.DynamicBloomFilter.for_keys(out.num_rows)
        if has_kept:
            keys_filter.add(kept.column("_hoodie_record_key"))
        keys_filter.add_rows(upserts, KEY)
    if not ctx.markers_listed:  # listed: the check before the instant's markers was moments ago
        check_alive(storage, ctx, rel)
    plain = ctx.unique_columns + ctx.plain_columns
    size, footer = write_checked(storage, ctx, rel,
                                 lambda path: _write_parquet(storage, path, out, keys_filter, plain, constants=constants,
                                                             stats=(rel, ctx.stats_version),
                                                             virtual=virtual))
    if on_footer is not None:  # cached for the index: with the key's typed range when it is integral
        on_footer(rel, with_typed_range(footer, out, ctx.unique_columns[0]) if len(ctx.unique_columns) == 1 else footer)
    cdc_files, cdc_sizes = _write_changes(storage, ctx, task, write_token, cdc) if cdc is not None else ((), ())
    return WriteStat(
        file_id=task.file_id,
        path=rel,
        partition_path=task.partition,
        prev_commit=task.prev_commit or "null",
        num_writes=out.num_rows,
        num_inserts=n_insert,
        num_update_writes=n_update,
        num_deletes=n_delete,
        total_write_bytes=size,
        file_size=size,
        prev_base_file=task.old_file,
        create_time_ms=int((time.monotonic() - started) * 1000),
        cdc_files=cdc_files,
        cdc_sizes=cdc_sizes,
    )


def cdc_file_name(ctx: MergeContext, task: FileGroupTask, write_token: str) -> str | None:
    """The name of the CDC log file the merge of ``task`` writes, or None when it writes none:
    the table logs no changes, or the group is new (Hudi's create handle logs none)."""
    if ctx.cdc_mode is None or task.old_file is None:
        return None
    return cdc_log.cdc_log_name(task.file_id, ctx.instant_time, write_token)


def _changes(ctx: MergeContext, old: pa.Table, upserts: pa.Table, pos: np.ndarray, deleted: np.ndarray) -> pa.Table:
    """The CDC records of a merge: ``pos`` places each upsert in ``old`` (-1: a new key),
    ``deleted`` flags the stored rows a delete removed."""
    assert ctx.cdc_mode is not None
    upd = pos >= 0
    new_upd, new_ins = upserts.filter(pa.array(upd)), upserts.filter(pa.array(~upd))
    gone = old.filter(pa.array(deleted))
    return changes.merge_changes(
        ctx.cdc_mode, ctx.instant_time, ctx.data_schema,
        updated=(new_upd.column(KEY).combine_chunks(), old.take(pa.array(pos[upd])), new_upd),
        deleted=(gone.column(RECORD_KEY).combine_chunks(), gone),
        inserted=(new_ins.column(KEY).combine_chunks(), new_ins))


def _write_changes(storage: Storage, ctx: MergeContext, task: FileGroupTask, write_token: str,
                   records: pa.Table) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """Write a merge's CDC log file beside its base file (marked and published as data files
    are) and return its ``cdcStats`` entry: path from the table root, size."""
    name = cdc_file_name(ctx, task, write_token)
    assert name is not None and ctx.cdc_mode is not None
    rel = layout.data_file_path(task.partition, name)
    if not ctx.markers_listed:
        check_alive(storage, ctx, f"the marker of {rel}")
        markers.create(storage, ctx.instant_time, task.partition, name)
    data = cdc_log.encode_cdc_block(records, ctx.cdc_mode, json.loads(ctx.cdc_table_schema),
                                    instant_time=ctx.instant_time)
    write_checked(storage, ctx, rel, lambda path: storage.write_bytes(path, data))
    return (rel,), (len(data),)


def outranked_deletes_dropped(deletes: pa.Table, old_keys: pa.Array, old: pa.Table, ordering: str | None) -> pa.Table:
    """The deletes that remove their stored row. Event-time ordering: a delete that carries an
    ordering value (a row flagged by a delete marker, or a delete batch that sends the ordering
    field) removes a stored row only when its value is not below the stored one, as Hudi's
    merge handle lets the higher ordering value win (``EventTimeRecordMerger``); a plain delete
    (no value, or the ``Integer`` 0: ``BufferedRecord.isCommitTimeOrderingDelete``) always
    does, as a Merge-on-Read read of the same delete decides (:mod:`~..table.merge_rule`)."""
    if not ordering or deletes.num_rows == 0 or deletes.schema.get_field_index(ordering) < 0:
        return deletes
    values = plain_defaults(deletes.column(ordering).combine_chunks())
    if values.null_count == len(values):
        return deletes
    at = pc.index_in(deletes.column(KEY).combine_chunks(), value_set=old_keys)
    stored = old.column(ordering).combine_chunks()
    if pa.types.is_dictionary(stored.type):
        stored = stored.cast(stored.type.value_type)
    outranked = pc.less(values, stored.take(at))  # null (plain, or no stored row): not outranked
    keep = pc.invert(pc.fill_null(outranked, False))
    return deletes if keep.false_count == 0 else deletes.filter(keep)


def split_deletes(incoming: pa.Table) -> tuple[pa.Table, pa.Table | None]:
    """(upserts, deletes or None when the batch deletes nothing)."""
    if incoming.num_rows == 0 or pc.max(incoming.column(OP)).as_py() != OP_DELETE:  # one pass, no mask
        return incoming, None
    is_delete = pc.equal(incoming.column(OP), OP_DELETE)
    return incoming.filter(pc.invert(is_delete)), incoming.filter(is_delete)


def _read_old(storage: Storage, task: FileGroupTask, full: pa.Schema, started: Future | None = None,
              plain: tuple[str, ...] = ()) -> tuple[pa.Table | None, dict]:
    """The old base file's rows (aligned to ``full``, string columns stored with a dictionary
    kept as dictionaries except ``plain``, the columns rows are matched and ordered by) and its
    footer metadata; ``started``: that read, already under way."""
    if task.old_file is None:
        return None, {}
    t, md = started.result() if started is not None else read_old_file(
        storage, layout.data_file_path(task.partition, task.old_file))
    decode = [n for n in plain if n and t.schema.get_field_index(n) >= 0 and pa.types.is_dictionary(t.schema.field(n).type)]
    for n in decode:
        i = t.schema.get_field_index(n)
        t = t.set_column(i, n, t.column(i).cast(t.schema.field(i).type.value_type))
    return align(t, full, keep_dictionaries=True), md


def read_old_file(storage: Storage, rel: str) -> tuple[pa.Table, dict]:
    """A base file's rows as stored and its footer metadata, for a merge that rewrites it. The
    path meta columns are not read: the new file writes its own path into them as constants.
    String columns stored dictionary-encoded (the commit time, a partition column) are read as
    dictionaries: decoding them to one string per row, and hashing those strings again to write
    them back as a dictionary, costs a fifth of reading and rewriting a file. A skeleton base
    file (a METADATA_ONLY bootstrap's) gives its rows stitched with its source file's, so the
    group's new base file is a normal one (:mod:`~multiwriter.table.bootstrap_slice`)."""
    if bootstrap_slice.is_skeleton_file(rel):
        t, md = bootstrap_slice.read_file(storage, rel)
        return t.drop_columns([n for n in _PATH_META if n in t.column_names]), md
    with storage.fs.open_input_file(storage.abs(rel)) as f:
        pf = bounds.open_parquet(f, rel)
        names = [n for n in pf.schema_arrow.names if n not in _PATH_META]
        dictionaries = _dictionary_encoded(pf.metadata, pf.schema_arrow, [n for n in names if n not in _UNIQUE_META])
        if dictionaries:
            pf = pq.ParquetFile(f, metadata=pf.metadata, read_dictionary=dictionaries)
        t = pf.read(columns=names)
        md = dict(pf.metadata.metadata or {})
    return t, md


def _dictionary_encoded(meta: pq.FileMetaData, schema: pa.Schema, names: list[str]) -> list[str]:
    """The top-level string columns among ``names`` that every row group stores with a dictionary."""
    strings = {n for n in names if pa.types.is_string(schema.field(n).type)}
    if not strings or meta.num_row_groups == 0:
        return []
    out = []
    for j in range(meta.num_columns):
        col = meta.row_group(0).column(j)
        if col.path_in_schema in strings and all(
                _DICTIONARY_PAGES & set(meta.row_group(g).column(j).encodings) for g in range(meta.num_row_groups)):
            out.append(col.path_in_schema)
    return out


_DICTIONARY_PAGES = frozenset({"RLE_DICTIONARY", "PLAIN_DICTIONARY"})


def _dictionary_names(t: pa.Table) -> frozenset[str]:
    return frozenset(f.name for f in t.schema if pa.types.is_dictionary(f.type))


#: a dictionary column of a rewritten file loses the values no row uses once it holds more than this
COMPACT_DICTIONARY = 64


def joined_dictionaries(t: pa.Table) -> pa.Table:
    """``t`` (old rows then new ones) with one dictionary per dictionary column: the Parquet
    writer falls back to plain encoding for the rest of a column when the dictionary changes
    between chunks. A dictionary grown past :data:`COMPACT_DICTIONARY` values keeps only those its
    rows use: the writer stores the whole dictionary, so values of rows long replaced (commit
    times) would otherwise be read back and carried into every later rewrite of the file."""
    if not any(pa.types.is_dictionary(f.type) for f in t.schema):
        return t
    t = t.unify_dictionaries()
    for i, f in enumerate(t.schema):
        col = t.column(i)
        if pa.types.is_dictionary(f.type) and col.num_chunks and len(col.chunk(0).dictionary) > COMPACT_DICTIONARY:
            compact = _used_only(col)
            if compact is not col:
                t = t.set_column(i, f, compact)
    return t


def _used_only(col: pa.ChunkedArray) -> pa.ChunkedArray:
    """A dictionary column (one dictionary over its chunks) without the entries no row uses."""
    if col.num_chunks == 0:
        return col
    dictionary = col.chunk(0).dictionary
    used = np.zeros(len(dictionary), dtype=bool)
    for c in col.chunks:
        ix = c.indices.drop_null().to_numpy(zero_copy_only=False)
        used |= np.bincount(ix, minlength=len(dictionary)) > 0
    if used.all():
        return col
    remap = np.cumsum(used, dtype=np.int64) - 1
    kept_values = dictionary.filter(pa.array(used))
    chunks = []
    for c in col.chunks:
        ix = pc.fill_null(c.indices, 0).to_numpy(zero_copy_only=False)
        indices = pa.array(remap[ix].astype(ix.dtype), mask=c.indices.is_null().to_numpy(zero_copy_only=False) if c.null_count else None)
        chunks.append(pa.DictionaryArray.from_arrays(indices, kept_values))
    return pa.chunked_array(chunks, col.type)


def _match_columns(ctx: MergeContext, old: pa.Table, upserts: pa.Table) -> tuple[str, str]:
    """The columns (of ``old``, of ``upserts``) rows are matched by: a one-field integral record key
    itself when both sides have it (a key generator maps one field's values to keys one to one,
    so equal values are equal keys, and integers hash faster than their strings), else the
    record key strings."""
    if len(ctx.unique_columns) == 1:
        (name,) = ctx.unique_columns
        i, j = old.schema.get_field_index(name), upserts.schema.get_field_index(name)
        if (i >= 0 and j >= 0 and pa.types.is_integer(old.schema.field(i).type)
                and old.schema.field(i).type == upserts.schema.field(j).type and old.column(i).null_count == 0):
            return name, name
    return "_hoodie_record_key", KEY


def _positions_in_old(old_values: pa.ChunkedArray, incoming: pa.ChunkedArray) -> np.ndarray:
    """Each incoming row's row in the old file, -1 when its key is new to the group. One hash
    table, over the incoming side (a batch holds fewer of a group's keys than the file does),
    probed with the old values; incoming keys are unique (deduplicated)."""
    hit = pc.index_in(old_values, value_set=incoming.combine_chunks()).to_numpy(zero_copy_only=False)
    pos = np.full(len(incoming), -1, dtype=np.int64)
    found = np.flatnonzero(~np.isnan(hit)) if hit.dtype.kind == "f" else np.flatnonzero(hit >= 0)
    pos[hit[found].astype(np.int64)] = found
    return pos


def _cached_filter(storage: Storage, task: FileGroupTask) -> bloom.DynamicBloomFilter | None:
    """The old base file's bloom filter from the process's footer cache, if there."""
    if task.old_file is None:
        return None
    f = SHARED_FOOTERS.get((storage.uri, layout.data_file_path(task.partition, task.old_file)))
    return f.bloom if f is not None else None


def _grown_filter(old_md: dict, new_keys: pa.Table, cached: bloom.DynamicBloomFilter | None = None,
                  ) -> bloom.DynamicBloomFilter | None:
    """The old file's bloom filter plus the rows' keys (those new to the file group), or None
    (no usable old filter: the caller builds one over every key). Keys deleted since stay in it:
    a bloom filter may answer "maybe" for an absent key, never "no" for a present one.
    ``cached``: the old file's filter as this process already holds it (the index's footer
    cache), copied instead of decoded from ``old_md``."""
    f = cached.copy() if cached is not None else bloom.from_footer(old_md)
    if f is None:
        return None
    if new_keys.num_rows:
        f.add_rows(new_keys, KEY)
    return f


def keep_stored(upserts: pa.Table, pos: np.ndarray, old: pa.Table, columns: tuple[str, ...]) -> pa.Table:
    """Partial update: in each of ``columns`` (which the batch omitted), an update (``pos`` >= 0:
    its row in ``old``) takes the stored value; an insert keeps null."""
    found = pos >= 0
    if not found.any():
        return upserts
    rows = pa.array(np.where(found, pos, 0))
    mask = pa.array(found)
    for c in columns:
        i = upserts.schema.get_field_index(c)
        stored = old.column(c).take(rows)
        if pa.types.is_dictionary(stored.type):
            stored = stored.cast(stored.type.value_type)
        upserts = upserts.set_column(i, upserts.schema.field(i), pc.if_else(mask, stored, upserts.column(i)))
    return upserts


def _drop_stale(upserts: pa.Table, pos: np.ndarray, old: pa.Table, ordering: tuple[str, ...]
                ) -> tuple[pa.Table, np.ndarray]:
    """Event-time ordering: an incoming row older than the stored one does not replace it
    (equal values: the incoming row, ``EventTimeRecordMerger.shouldKeepNewerRecord``). Several
    ordering fields compare field by field, as the merge rule does (:func:`_not_older`).
    ``pos``: each incoming row's row in ``old`` (-1 when new); filtered alike."""
    if not ordering or upserts.num_rows == 0 or not (pos >= 0).any():
        return upserts, pos
    if len(ordering) > 1:
        newer = pa.array(_not_older(upserts, pos, old, ordering))
    else:
        stored = old.column(ordering[0]).combine_chunks().take(pa.array(pos, mask=pos < 0))
        newer = pc.fill_null(pc.greater_equal(upserts.column(ordering[0]).combine_chunks(), stored), True)
    if newer.false_count == 0:
        return upserts, pos
    return upserts.filter(newer), pos[newer.to_numpy(zero_copy_only=False)]


def _not_older(upserts: pa.Table, pos: np.ndarray, old: pa.Table, ordering: tuple[str, ...]) -> np.ndarray:
    """Whether each incoming row's ordering values are not below its stored row's (a new row's
    are), compared as :func:`~multiwriter.table.merge_rule.ordering_scores` compares them."""
    matched = np.flatnonzero(pos >= 0)
    mine, theirs = pa.array(matched), pa.array(pos[matched])
    cols = [pa.concat_arrays([upserts.column(f).combine_chunks().take(mine),
                              cast_column(old.column(f), upserts.schema.field(f).type).combine_chunks().take(theirs)])
            for f in ordering]
    score = ordering_scores(cols)
    out = np.ones(upserts.num_rows, bool)
    out[matched] = score[:len(matched)] >= score[len(matched):]
    return out


#: "0".."n-1" as strings (for sequence numbers): casting integers to strings per file costs
#: more than the rest of a file's meta columns
row_numbers = Prefixes(lambda size: pa.array(np.arange(size).astype(str), pa.string()))


def sequence_numbers(prefix: str, n: int) -> pa.Array:
    """Hudi's ``_hoodie_commit_seqno`` values ``<prefix>_0`` .. ``<prefix>_<n-1>``: one Arrow
    kernel writes the prefix over the blanks of a cached template (``"<blanks>_0"``, ...). The
    kernel runs without the GIL, so the merge threads build these side by side."""
    if n == 0:
        return row_numbers(0)
    width = len(prefix.encode())
    if n > _TEMPLATE_ROWS:  # a template that large would stay in memory: join the strings instead
        return pc.binary_join_element_wise(pa.scalar(prefix), row_numbers(n), "_")
    templates = _seqno_templates.get(width)
    if templates is None:
        templates = _seqno_templates.setdefault(width, Prefixes(functools.partial(_seqno_template, width)))
    return pc.binary_replace_slice(templates(n), 0, width, prefix)


#: the most rows a sequence-number template holds (about 7 MB per prefix length)
_TEMPLATE_ROWS = 1 << 18
_seqno_templates: dict[int, Prefixes] = {}


def _seqno_template(width: int, size: int) -> pa.Array:
    return pc.binary_join_element_wise(" " * width, row_numbers(min(size, _TEMPLATE_ROWS)), "_")


def new_rows(upserts: pa.Table, full: pa.Schema, t: str, task: FileGroupTask, name: str, *,
              time_is_constant: bool = False, dictionaries: frozenset[str] = frozenset(),
              virtual: bool = False) -> tuple[pa.Table, dict[str, str]]:
    """Incoming rows with their meta columns, and the string columns that hold one value over
    the whole file, which :func:`_write_parquet` writes as such (``constants``): the partition
    path and file name; the commit time when no old row is kept (``time_is_constant``); and a
    data column the plan handed over as a constant (the partition column, whose value is the
    partition path), unless old rows are kept beside it. ``dictionaries``: string columns to
    give as dictionaries, as the kept old rows hold them (:func:`read_old_file`). ``virtual``:
    virtual keys, meta columns without values."""
    n = upserts.num_rows
    constants = {} if virtual else {"_hoodie_partition_path": task.partition, "_hoodie_file_name": name}
    if time_is_constant and not virtual:
        constants["_hoodie_commit_time"] = t
    if dictionaries:
        full = pa.schema([f.with_type(pa.dictionary(pa.int32(), f.type)) if f.name in dictionaries else f for f in full],
                         metadata=full.metadata)
    if n == 0:
        return full.empty_table(), constants
    if virtual:
        meta = {c: pa.nulls(n, full.field(c).type) for c in META_COLUMNS}
    else:
        meta = _meta_values(upserts, t, task, n, time_is_constant=time_is_constant, dictionaries=dictionaries)
    cols = [meta[c] for c in META_COLUMNS]
    for c in _data_names(full):
        col = upserts.column(c)
        target = full.field(c).type
        if c in dictionaries:
            if col.type != target:
                col = pc.dictionary_encode(col if col.type == target.value_type else cast_column(col, target.value_type))
        elif pa.types.is_dictionary(col.type):
            value = constant_value(col) if time_is_constant and pa.types.is_string(target) else None
            if value is not None:
                constants[c] = value
            col = pa.nulls(n, target) if value is not None else col if col.type == target else col.cast(target)
        cols.append(col)
    return pa.Table.from_arrays(cols, schema=full), constants


def _meta_values(upserts: pa.Table, t: str, task: FileGroupTask, n: int, *, time_is_constant: bool,
                 dictionaries: frozenset[str]) -> dict[str, pa.Array]:
    """The meta columns of ``n`` incoming rows (the partition path and file name are written as
    constants by :func:`_write_parquet`, and so is the commit time when ``time_is_constant``)."""
    if "_hoodie_commit_time" in dictionaries:
        commit_time: pa.Array = constant(t, n)
    else:
        commit_time = pa.nulls(n, pa.string()) if time_is_constant else pa.repeat(pa.scalar(t, pa.string()), n)
    return {
        "_hoodie_commit_time": commit_time,
        "_hoodie_commit_seqno": sequence_numbers(f"{t}_{task.task_index}", n),
        "_hoodie_record_key": upserts.column(KEY),
        "_hoodie_partition_path": pa.nulls(n, pa.string()),
        "_hoodie_file_name": pa.nulls(n, pa.string()),
    }


def _data_names(full: pa.Schema) -> list[str]:
    """The data columns of a file schema: its names after the meta columns (no Field objects
    built per column, as iterating the schema would)."""
    return full.names[len(META_COLUMNS):]


_KEY_FOOTER = frozenset({MIN_KEY.encode(), MAX_KEY.encode(), bloom.FOOTER_KEY, bloom.TYPE_CODE_KEY})

#: meta columns whose values are unique per row: dictionary encoding and min/max statistics
#: only cost time there (the footer carries the key range as Hudi's own entries)
_UNIQUE_META = frozenset({"_hoodie_record_key", "_hoodie_commit_seqno"})
_ARROW_SCHEMA = b"ARROW:schema"


#: meta columns that hold one value per file (the file's own path): no min/max statistics, since
#: a reader that filters on them already knows the answer from the path
_PATH_META = frozenset({"_hoodie_partition_path", "_hoodie_file_name"})

#: rows looked at to decide whether a column's values repeat enough for a dictionary
_DICTIONARY_SAMPLE = 1024


def with_encodings(ctx: MergeContext, rows: pa.Table) -> MergeContext:
    """``ctx`` with the data columns that are written without a dictionary, judged once per
    batch on its first rows (not once per file: the judging costs as much as it saves there)."""
    return dataclasses.replace(ctx, plain_columns=plain_columns(rows, [f.name for f in ctx.data_schema
                                                                      if f.name not in ctx.unique_columns]))


def plain_columns(rows: pa.Table, names: list[str]) -> tuple[str, ...]:
    """Those of ``names`` (columns of ``rows``) whose first rows show that a dictionary would
    not make them smaller."""
    return tuple(n for n in names if rows.schema.get_field_index(n) >= 0 and not _dictionary_pays(rows.column(n)))


def _dictionary_pays(col: pa.ChunkedArray) -> bool:
    """Whether dictionary encoding makes this column chunk smaller, judged on its first rows:
    the dictionary plus bit-packed indices against the plain values. Hudi's Parquet writer
    (parquet-mr) drops a dictionary that does not compress; pyarrow keeps it, at the cost of
    hashing every value, so the choice is made here. Nested columns keep the default."""
    t = col.type
    if not (pa.types.is_primitive(t) or pa.types.is_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_string(t) or pa.types.is_large_binary(t)):
        return True
    sample = col.slice(0, _DICTIONARY_SAMPLE)
    n = len(sample) - sample.null_count
    if n < 2:
        return True
    distinct = pc.count_distinct(sample).as_py()
    if pa.types.is_primitive(t):
        width = max(t.bit_width // 8, 1)
        value_bytes = n * width
    else:  # plain encoding stores a 4-byte length before each value
        value_bytes = (pc.sum(pc.binary_length(sample)).as_py() or 0) + 4 * n
    index_bytes = n * max(distinct - 1, 1).bit_length() / 8
    return index_bytes + value_bytes * distinct / n < value_bytes


@functools.lru_cache(maxsize=32)
def _leaf_paths(schema_ipc: bytes) -> tuple[tuple[str, str], ...]:
    """(column, Parquet leaf path) of every leaf of a serialized schema's columns: pyarrow's
    per-column writer options name leaves (``s.x``, ``l.list.element``), so a nested column is
    named by its leaves. Found once per schema by converting each column alone."""
    out = []
    for f in pa.ipc.read_schema(pa.py_buffer(schema_ipc)):
        buf = pa.BufferOutputStream()
        pq.write_table(pa.schema([f]).empty_table(), buf)
        ps = pq.ParquetFile(pa.BufferReader(buf.getvalue())).schema
        out += [(f.name, ps.column(i).path) for i in range(len(ps))]
    return tuple(out)


#: bytes buffered before a data file's stream writes through
_WRITE_BUFFER = 1 << 20
#: values the Parquet writer encodes per step (pyarrow's 1,024 costs about 4 % more on
#: small files; pages may overshoot their 1 MB target by one step)
_WRITE_BATCH = 8192


def _write_parquet(
    storage: Storage, rel: str, out: pa.Table, keys_filter: bloom.DynamicBloomFilter | None, plain: tuple[str, ...] = (),
    constants: dict[str, str] | None = None, *, virtual: bool = False,
    stats: tuple[str, int | None] = ("", None),
) -> tuple[int, FooterKeys]:
    """Write ``out`` with Hudi's footer entries: key range and bloom filter of the keys. They go
    into the footer only, not into the Arrow schema pyarrow also stores there (twice the bytes).
    Columns whose values rarely repeat (the key columns, ``plain``) are not dictionary-encoded:
    a dictionary of distinct values only costs time and bytes. ``constants``: string columns
    with one value over the whole file, written from a one-entry dictionary; the stored Arrow
    schema is the plain one, so every reader sees them as strings. ``virtual``: virtual keys,
    as Hudi writes them: the meta columns null, no key range nor bloom filter in the footer.
    ``stats``: (the file's published path, column-stats index version or None): its footer's
    column stats are kept for its commit's metadata update, which then reads no footer."""
    if virtual:
        out = _without_meta_values(out)
        constants = {c: v for c, v in (constants or {}).items() if c not in META_COLUMNS}
    keys = out.column("_hoodie_record_key")
    fmt = _file_format(_decoded(out.schema).serialize().to_pybytes(), plain)
    out = out.replace_schema_metadata(fmt.schema.metadata)
    for column, value in (constants or {}).items():
        out = out.set_column(out.schema.get_field_index(column), column, constant(value, out.num_rows))
    footer: dict[bytes, bytes] = {_ARROW_SCHEMA: fmt.schema_b64}
    lo = hi = None
    if out.num_rows and not virtual:
        mm = pc.min_max(keys)
        lo, hi = mm["min"].as_py(), mm["max"].as_py()
        footer[MIN_KEY.encode()] = lo.encode()
        footer[MAX_KEY.encode()] = hi.encode()
    if keys_filter is not None:
        footer.update(bloom.footer_entries(keys_filter))
    # buffered: the Parquet writer's many small writes (and its position queries) become a few syscalls
    with storage.open_output(rel, buffer_size=_WRITE_BUFFER) as f:
        with pq.ParquetWriter(f, out.schema, compression="snappy", use_dictionary=fmt.dictionary,
                              write_statistics=fmt.statistics, store_schema=False, write_batch_size=_WRITE_BATCH) as w:
            w.write_table(out)
            w.add_key_value_metadata(footer)
        size = f.tell()  # the whole file went through this stream: its size, without a stat
    if stats[1] is not None:
        metadata_stats.remember_footer(storage, stats[0], w.writer.metadata, stats[1])
    return size, FooterKeys(lo, hi, keys_filter, out.num_rows)


def _decoded(schema: pa.Schema) -> pa.Schema:
    """``schema`` with dictionary columns as their values' type: what the file stores and
    readers see."""
    if not any(pa.types.is_dictionary(f.type) for f in schema):
        return schema
    return pa.schema([f.with_type(f.type.value_type) if pa.types.is_dictionary(f.type) else f for f in schema],
                     metadata=schema.metadata)


def _without_meta_values(out: pa.Table) -> pa.Table:
    """``out`` with null meta columns (virtual keys)."""
    for i in range(len(META_COLUMNS)):
        if out.column(i).null_count != out.num_rows:
            out = out.set_column(i, out.schema.field(i), pa.nulls(out.num_rows, out.schema.field(i).type))
    return out


@dataclass(frozen=True)
class _FileFormat:
    """What every file written with one schema shares: the schema readers see (without Hudi's
    footer entries), Base64 of its IPC form for the footer, and the Parquet leaves that get a
    dictionary and statistics. Worked out once per schema, not once per file."""

    schema: pa.Schema
    schema_b64: bytes
    dictionary: list[str]
    statistics: list[str]


@functools.lru_cache(maxsize=64)
def _file_format(schema_ipc: bytes, plain: tuple[str, ...]) -> _FileFormat:
    """Keyed by the IPC bytes: exact (schemas that differ only in metadata compare equal)."""
    schema = pa.ipc.read_schema(pa.py_buffer(schema_ipc))
    md = {k: v for k, v in (schema.metadata or {}).items() if k not in _KEY_FOOTER}
    stored = schema.with_metadata(md) if md else schema.remove_metadata()
    ipc = stored.serialize().to_pybytes()
    leaves = _leaf_paths(ipc)
    return _FileFormat(
        stored, base64.b64encode(ipc),
        [path for column, path in leaves if column not in _UNIQUE_META and column not in plain],
        [path for column, path in leaves if column not in _UNIQUE_META and column not in _PATH_META],
    )


#: partition metadata files this process saw or created on object stores (never deleted: a
#: partition keeps its file), so each write does not ask again (a request per partition)
_PARTITION_METADATA_SEEN: set[str] = set()


def ensure_partition_metadata(storage: Storage, partition: str, t: str, depth: int) -> None:
    rel = layout.data_file_path(partition, layout.PARTITION_METADATA)
    remote = storage.is_s3
    if remote and storage.uri_of(rel) in _PARTITION_METADATA_SEEN:
        return
    if remote:  # one conditional PUT: created, or there already
        try:
            storage.put_if_absent(rel, layout.partition_metadata_bytes(t, depth))
        except FileExists:
            pass
        _PARTITION_METADATA_SEEN.add(storage.uri_of(rel))
        return
    if storage.exists(rel):
        return
    try:
        storage.put_if_absent(rel, layout.partition_metadata_bytes(t, depth))
    except FileExists:
        pass


def write_moved_rows(
    storage: Storage, ctx: MergeContext, partition: str, file_id: str, write_token: str, rows: pa.Table
) -> WriteStat:
    """Write rows that a table service moves into a new file group (clustering): marker first,
    the pre-write check, rows sorted by record key. Meta columns are kept as they are (commit
    time and sequence number stay the rows' own, so incremental readers do not see them as new)
    except ``_hoodie_file_name``, which names the new file. With virtual keys the rows stay as
    they are, in their order (Hudi sorts no rows without meta fields) and without meta values."""
    started = time.monotonic()
    name = layout.DataFileName(file_id, write_token, ctx.instant_time).name
    rel = layout.data_file_path(partition, name)
    check_alive(storage, ctx, f"the marker of {rel}")
    markers.create(storage, ctx.instant_time, partition, name)
    ensure_partition_metadata(storage, partition, ctx.instant_time, ctx.partition_depth)
    full = ctx.file_schema
    out = align(rows, full)
    virtual = ctx.virtual_keys is not None
    if out.num_rows > 1 and not virtual:
        out = out.take(pc.sort_indices(out, sort_keys=[("_hoodie_record_key", "ascending")]))
    check_alive(storage, ctx, rel)
    keys_filter = None if virtual else bloom.DynamicBloomFilter.for_keys(out.num_rows)
    if out.num_rows and keys_filter is not None:
        keys_filter.add(out.column("_hoodie_record_key"))
    out = out.combine_chunks()
    size, _footer = write_checked(storage, ctx, rel, lambda path: _write_parquet(
        storage, path, out, keys_filter, constants={"_hoodie_file_name": name}, virtual=virtual,
        stats=(rel, ctx.stats_version)))
    return WriteStat(
        file_id=file_id,
        path=rel,
        partition_path=partition,
        num_writes=out.num_rows,
        num_inserts=out.num_rows,
        total_write_bytes=size,
        file_size=size,
        create_time_ms=int((time.monotonic() - started) * 1000),
    )
