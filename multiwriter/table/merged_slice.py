"""Reading a Merge-on-Read file slice: its base file with its log files merged over it by the
table's merge rule (:mod:`.merge_rule`). Snapshot reads, incremental reads and compaction all
read slices through here, so they cannot disagree on which version of a record is current.
"""
from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..storage import Storage
from ..format import bounds
from . import bootstrap_slice
from .delete_markers import DeleteMarkers
from .files import FileSlice, LogFile
from ..format.log_file import LogBlock, read_log_blocks
from .log_rollbacks import surviving_blocks
from .merge_config import MergeConfig
from .merge_rule import merge as merge_rows
from .merge_rule import (
    DELETE_KEY,
    DELETE_ORDERING,
    DELETE_ORDERINGS,
    DELETE_PARTITION,
    RECORD_KEY,
    Mapper,
    Prepared,
    Versions,
    array_ordering,
    log_order,
    merge_prepared,
    plain_defaults,
    prepare,
)
from .properties import TableConfig
from ..format.schema import META_COLUMNS, cast_column

PARTITION_PATH = META_COLUMNS[3]  # _hoodie_partition_path


def key_column(config: TableConfig, schema: pa.Schema) -> str:
    """The column a merge takes each record's key from: the record key field itself when the
    table's key generator makes Hudi's record key that field's value (one key field, Hudi's
    simple key generator) and equal keys are equal values: a string field, or an integer one
    (its key is the integer's decimal text, which names one integer). A read that returns that
    field then neither reads the key twice nor hashes text; else Hudi's ``_hoodie_record_key``
    meta column."""
    if len(config.record_key) != 1 or not _simple_key_generator(config):
        return RECORD_KEY
    (name,) = config.record_key
    i = schema.get_field_index(name)
    if i < 0 or not _key_type(schema.field(i).type):
        return RECORD_KEY
    return name


def _key_type(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_integer(t)


def merge_config(merge: MergeConfig | str | None) -> MergeConfig:
    """The merge a caller asks for: a :class:`MergeConfig` as is; a bare ordering field (or None)
    as event time on it (commit time without one), what such callers meant before."""
    return merge if isinstance(merge, MergeConfig) else MergeConfig.event_time(merge)


def merge_schema(schema: pa.Schema, columns: Collection[str] | None, merge: MergeConfig | str | None,
                 key: str = RECORD_KEY) -> pa.Schema:
    """The columns a merge of a slice reads to return ``columns`` of ``schema`` (all by default):
    those plus the key column and every ordering field, which decide the winners; in
    ``schema``'s order. Every other column is neither read nor merged."""
    if columns is None:
        return schema
    keep = {*columns, key, *merge_config(merge).ordering_fields}
    return pa.schema([f for f in schema if f.name in keep], metadata=schema.metadata)


def read_base(storage: Storage, fs: FileSlice, schema: pa.Schema, threads: bool = True) -> pa.Table:
    """The base file's rows in ``schema`` (columns added since it was written read as null);
    only the columns of ``schema`` are read. ``threads``: decode its columns on Arrow's threads
    (no gain when slices are already read side by side, one per core). A skeleton base file
    (a METADATA_ONLY bootstrap's) reads with its source file's rows (:mod:`.bootstrap_slice`)."""
    if bootstrap_slice.is_skeleton(fs):
        return bootstrap_slice.read_rows(storage, fs, schema, threads)
    with storage.fs.open_input_file(storage.abs(fs.path)) as f:
        pf = bounds.open_parquet(f, fs.path, columns=schema.names)
        wanted = set(schema.names)
        stored = pf.schema_arrow.names
        cols = None if wanted.issuperset(stored) else [n for n in stored if n in wanted]
        t = pf.read(columns=cols, use_threads=threads)
    return _aligned(t, schema)


def read_log(storage: Storage, lf: LogFile, rank: int, schema: pa.Schema) -> list[Versions]:
    """One log file's record and delete blocks as sources of versions, all of rank ``rank``
    (:func:`log_versions`; its rollback blocks applied, :mod:`.log_rollbacks`)."""
    (blocks,) = surviving_blocks([(lf.path, _blocks(storage, lf, schema))])
    return log_versions(blocks, rank, schema)


def _blocks(storage: Storage, lf: LogFile, schema: pa.Schema) -> list[LogBlock]:
    return read_log_blocks(storage.read_bytes(lf.path), source=lf.path, columns=schema.names)


def log_versions(blocks: Sequence[LogBlock], rank: int, schema: pa.Schema) -> list[Versions]:
    """A log file's record and delete blocks as sources of versions, all of rank ``rank``, in
    block order (Parquet data blocks decode only the columns of ``schema``): Hudi's reader
    applies a file's blocks one after another (``BaseHoodieLogRecordReader``), so a delete block
    before a data block deletes only what came before it. Consecutive blocks of one kind (data
    blocks alike in being partial updates, ``IS_PARTIAL``, and in the columns they carry) form
    one source. Corrupt and command blocks are skipped: rollback blocks were applied before
    (:func:`~.log_rollbacks.surviving_blocks`), and a torn append is skipped as Hudi's reader
    skips it."""
    runs: list[tuple[str, frozenset[str] | None, list[pa.Table]]] = []
    for b in blocks:
        if b.records is None or b.kind not in ("data", "delete") or (b.kind == "delete" and not b.records.num_rows):
            continue
        kind = b.kind
        carries = _carried(b) if kind == "data" else None
        if not runs or runs[-1][:2] != (kind, carries):
            runs.append((kind, carries, []))
        runs[-1][2].append(_aligned(b.records, schema) if kind == "data" else _plain_zero(b.records))
    out = []
    for kind, carries, tables in runs:
        if kind == "data":
            out.append(Versions(rank, pa.concat_tables(tables), carries=carries))
        else:
            out.append(Versions(rank, None, pa.concat_tables(tables, promote_options="permissive")))
    return out or [Versions(rank, None)]


def _carried(block: LogBlock) -> frozenset[str] | None:
    """The columns a partial-update data block carries (its schema's fields), None for a block
    of full records (a column its schema lacks reads as null)."""
    if not block.is_partial:
        return None
    schema = block.schema
    if not schema:
        return None
    return frozenset(f["name"] for f in schema.get("fields", ()))


def read_slice(storage: Storage, fs: FileSlice, schema: pa.Schema, merge: MergeConfig | str | None,
               logs: Sequence[LogFile] | None = None, columns: Collection[str] | None = None,
               key: str = RECORD_KEY, threads: bool = True, markers: DeleteMarkers | None = None) -> pa.Table:
    """The current rows of one file slice in ``schema``: the base file when it has no logs,
    else base and logs merged (``logs``: a subset of the slice's; all of them by default; they
    merge in :func:`~.merge_rule.log_order` whatever their order here). A log-only slice (no
    base file, as Hudi's non-blocking writers start a bucket) merges its logs alone.
    ``merge``: the table's merge (:class:`MergeConfig`; a bare ordering field: :func:`merge_config`).
    ``columns``: read and merge only these (plus ``key`` and the ordering fields: the rows come
    in :func:`merge_schema`); ``key``: the column holding the record key (:func:`key_column`).
    The same rows win either way. ``threads``: as :func:`read_base`. ``markers``: the table's
    delete markers (:class:`~.delete_markers.DeleteMarkers`; the built-in columns by default):
    a log record they flag is a delete (:func:`_flagged_as_deletes`)."""
    config = merge_config(merge)
    flags = _flag_columns(schema, markers, _delete_ordering_fields(config))
    schema = merge_schema(schema, columns, config, key)
    sources = _sources(storage, fs, schema, logs, threads, flags, key)
    if isinstance(sources, pa.Table):
        return sources
    return merge_rows(sources, config=config, schema=schema, key=key)


def read_merged_slices(storage: Storage, slices: Sequence[FileSlice], schema: pa.Schema, merge: MergeConfig | str | None,
                columns: Collection[str] | None = None, key: str = RECORD_KEY,
                map_: Mapper = map, markers: DeleteMarkers | None = None) -> pa.Table:
    """:func:`read_slice` of each slice (all their logs), the rows one slice after another.
    Each slice is read and keyed by ``map_`` (a thread pool's ``map`` reads them side by
    side); the winners of all of them are then chosen at once
    (:func:`~.merge_rule.merge_prepared`), so the fixed cost of a merge is paid once, not per slice."""
    config = merge_config(merge)
    flags = _flag_columns(schema, markers, _delete_ordering_fields(config))
    schema = merge_schema(schema, columns, config, key)

    def one(fs: FileSlice) -> Prepared:
        sources = _sources(storage, fs, schema, None, False, flags, key)
        if isinstance(sources, pa.Table):
            return Prepared(done=sources)
        return prepare(sources, config=config, schema=schema, key=key)

    return merge_prepared(list(map_(one, slices)), config=config, schema=schema, key=key, map_=map_)


def _sources(storage: Storage, fs: FileSlice, schema: pa.Schema, logs: Sequence[LogFile] | None,
             threads: bool, flags: _Flags | None = None, key: str = RECORD_KEY) -> list[Versions] | pa.Table:
    """The slice's base rows and its logs' versions (``logs``: all of the slice's by default),
    or the base rows alone as a table when there are no logs. ``flags``: the table's delete
    markers, when its schema has their columns: the log records they flag become deletes
    (:func:`_flagged_as_deletes`). A base file's rows are taken as they are, flagged or not,
    as Hudi's reader takes them (``FileGroupRecordBuffer.hasNextBaseRecord``)."""
    use = sorted(fs.logs if logs is None else logs, key=log_order)
    base = read_base(storage, fs, schema, threads) if fs.has_base else schema.empty_table()
    if not use:
        return base
    sources = [Versions(rank=-1, records=base)] if fs.has_base else []
    read_as = flags.widened(schema) if flags is not None else schema
    # rollback blocks drop blocks of the slice's earlier log files too: every log's blocks first
    kept = surviving_blocks([(lf.path, _blocks(storage, lf, read_as)) for lf in use])
    for rank, blocks in enumerate(kept):
        versions = log_versions(blocks, rank, read_as)
        sources += _flagged_as_deletes(versions, flags, key) if flags is not None else versions
    return sources


@dataclass(frozen=True)
class _Flags:
    """The delete markers of a read and the marker columns it reads beside the merged ones."""

    markers: DeleteMarkers
    columns: tuple[pa.Field, ...]
    ordering_fields: tuple[str, ...]

    def widened(self, schema: pa.Schema) -> pa.Schema:
        extra = [f for f in self.columns if schema.get_field_index(f.name) < 0]
        return pa.schema(list(schema) + extra, metadata=schema.metadata) if extra else schema


def _delete_ordering_fields(config: MergeConfig) -> tuple[str, ...]:
    """The fields whose values a flagged record's delete carries: the ordering fields of an
    event-time merge (several: as an ``ArrayComparable``, Hudi's ``OrderingValues.create``); by
    commit time ordering values decide nothing."""
    return config.ordering_fields


def _flag_columns(schema: pa.Schema, markers: DeleteMarkers | None, ordering_fields: tuple[str, ...]) -> _Flags | None:
    """The marker columns of the table schema ``schema`` (None when it has none: nothing to check)."""
    markers = markers if markers is not None else DeleteMarkers()
    names = markers.columns(schema)
    if not names:
        return None
    return _Flags(markers, tuple(schema.field(n) for n in names), ordering_fields)


def _flagged_as_deletes(versions: list[Versions], flags: _Flags, key: str) -> list[Versions]:
    """One log file's versions with the records a delete marker flags turned into deletes that
    carry their ordering value, each at its record's place: the records before and after it stay
    sources of their own, in block order, and delete blocks keep their places. Hudi's
    reader merges such a record as a delete (``RecordContext.isDeleteRecord``,
    ``BufferedRecord.isCommitTimeOrderingDelete``: with the default ordering value it is a plain
    delete, as :func:`~.merge_rule.plain_defaults` reads it)."""
    out: list[Versions] = []
    for v in versions:
        mask = flags.markers.deleted(v.records) if v.records is not None and v.records.num_rows else None
        if mask is None or mask.true_count == 0:
            out.append(v)
            continue
        flagged = mask.to_numpy(zero_copy_only=False)
        cuts = np.flatnonzero(np.r_[True, flagged[1:] != flagged[:-1]])
        ends = np.r_[cuts[1:], len(flagged)]
        for lo, hi in zip(cuts.tolist(), ends.tolist(), strict=True):
            run = v.records.slice(lo, hi - lo)
            if flagged[lo]:
                out.append(Versions(v.rank, None, _as_deletes(run, flags.ordering_fields, key)))
            else:
                out.append(Versions(v.rank, run, carries=v.carries))
        if v.deletes is not None:
            out.append(Versions(v.rank, None, v.deletes))
    return out


def _as_deletes(rows: pa.Table, ordering: tuple[str, ...], key: str) -> pa.Table:
    """Flagged records as a source's deletes: key, partition path, ordering value (the record's,
    the ``Integer`` 0 read as none; several fields: their values as an ``ArrayComparable``,
    :func:`~.merge_rule.array_ordering`)."""
    n = rows.num_rows
    part = rows.column(PARTITION_PATH) if rows.schema.get_field_index(PARTITION_PATH) >= 0 else pa.nulls(n, pa.string())
    cols = {DELETE_KEY: rows.column(key), DELETE_PARTITION: part}
    if not ordering or any(rows.schema.get_field_index(f) < 0 for f in ordering):
        return pa.table(cols)
    if len(ordering) > 1:
        cols[DELETE_ORDERINGS] = array_ordering([rows.column(f) for f in ordering])
    else:
        cols[DELETE_ORDERING] = plain_defaults(rows.column(ordering[0]).combine_chunks())
    return pa.table(cols)


def _plain_zero(deletes: pa.Table) -> pa.Table:
    """A delete block's ``Integer`` 0 ordering values as null (plain deletes, see
    :func:`~.merge_rule.plain_defaults`), before blocks of several types are concatenated."""
    i = deletes.schema.get_field_index(DELETE_ORDERING)
    if i < 0:
        return deletes
    return deletes.set_column(i, DELETE_ORDERING, plain_defaults(deletes.column(i).combine_chunks()))


def _simple_key_generator(config: TableConfig) -> bool:
    raw = config.raw
    kind = raw.get("hoodie.table.keygenerator.type")
    cls = raw.get("hoodie.table.keygenerator.class") or raw.get("hoodie.datasource.write.keygenerator.class")
    if kind is not None and kind.upper() != "SIMPLE":
        return False
    if cls is not None and cls.rsplit(".", 1)[-1] not in ("SimpleKeyGenerator", "SimpleAvroKeyGenerator"):
        return False
    return kind is not None or cls is not None


def _aligned(t: pa.Table, schema: pa.Schema) -> pa.Table:
    """``t`` in ``schema``'s column order and types; missing columns as nulls."""
    if t.schema.equals(schema, check_metadata=False):
        return t
    cols = []
    for f in schema:
        i = t.schema.get_field_index(f.name)
        cols.append(cast_column(t.column(i), f.type) if i >= 0 else pa.nulls(t.num_rows, f.type))
    return pa.Table.from_arrays(cols, schema=schema)
