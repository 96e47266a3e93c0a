"""``Table``: create/open a Hudi table (Copy-on-Write or Merge-on-Read) and read it (snapshot,
as-of, incremental)."""
from __future__ import annotations

import dataclasses
import hashlib
import logging
import re
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads

from ..errors import ConfigError, TableFormatError, TableNotFoundError
from ..storage import FileExists, Storage
from ..threads import ProcessPool
from . import bucket
from . import properties as props
from .metadata import CommitMetadata
from .properties import PROPERTIES_FILE, TableConfig
from .schema import (META_COLUMNS, META_SCHEMA, arrow_to_avro_json, avro_to_arrow, data_schema, invalid_avro_names,
                     with_meta)
from .files import FileSlice, list_data_files, list_files
from .merge_rule import RECORD_KEY
from .merged_slice import key_column, read_slice
from .snapshot import Snapshot
from .timeline import Timeline
from .view import IncrementalPlan, TimelineView

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

    from ..lock.base import LockProvider

log = logging.getLogger(__name__)
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}\Z")


class Table:
    """A Hudi Copy-on-Write or Merge-on-Read table (reads versions 6 and 8, writes version 8)."""

    def __init__(self, storage: Storage, config: TableConfig) -> None:
        self.storage = storage
        self.config = config

    # -- lifecycle -------------------------------------------------------------
    @classmethod
    def create(
        cls,
        path: str,
        *,
        name: str,
        schema: pa.Schema,
        record_key: str | list[str] | tuple[str, ...],
        partition_by: list[str] | tuple[str, ...] | None = None,
        ordering_field: str | None = None,
        hive_style_partitioning: bool = False,
        lock: LockProvider | None = None,
        table_type: str = "COPY_ON_WRITE",
        num_buckets: int | None = None,
        bucket_hash_fields: list[str] | tuple[str, ...] | None = None,
    ) -> Table:
        """Create the table, or open it when it exists with the same settings (idempotent).

        ``lock``: the lock every writer and cleaner of this table will use; recorded in
        ``hoodie.properties`` so that a writer or cleaner given another lock is refused (two
        locks exclude nothing). Tables created without one accept any lock.

        ``table_type="MERGE_ON_READ"``: writes append log files beside base files and the
        companion job compacts them; ``num_buckets`` gives it Hudi's simple bucket index (a
        key's file group is a hash of ``bucket_hash_fields``, by default the record key), which
        non-blocking writers need.
        """
        keys = (record_key,) if isinstance(record_key, str) else tuple(record_key)
        parts = tuple(partition_by or ())
        _validate_settings(name, schema, keys, parts, ordering_field)
        hash_fields = _validate_layout(table_type, num_buckets, bucket_hash_fields, keys)
        cfg = TableConfig(
            name=name,
            record_key=keys,
            partition_by=parts,
            ordering_field=ordering_field,
            hive_style_partitioning=hive_style_partitioning,
            create_schema=arrow_to_avro_json(schema, name),
            table_type=table_type,
            num_buckets=num_buckets,
            bucket_hash_fields=hash_fields,
        )
        storage = Storage(path)
        recorded = cfg.to_properties()
        if lock is not None:
            recorded.update(lock.table_properties())
        data = props.render(recorded).encode()
        try:
            storage.put_if_absent(PROPERTIES_FILE, data)
        except FileExists:
            existing = cls.open(path)
            if not existing.config.same_settings(cfg):
                raise ConfigError(
                    f"table at {path} exists with other settings ({_describe(existing.config)}); "
                    f"asked for ({_describe(cfg)}): open it instead, or use another path"
                ) from None
            return existing
        storage.makedirs(cfg.timeline_dir)
        storage.makedirs(cfg.history_dir)
        log.info("created table %s at %s", name, path)
        return cls(storage, TableConfig.from_properties(props.parse(data.decode())))

    @classmethod
    def open(cls, path: str) -> Table:
        storage = Storage(path)
        try:
            text = storage.read_bytes(PROPERTIES_FILE).decode("utf-8")
        except FileNotFoundError:
            raise TableNotFoundError(
                f"no Hudi table at {path} ({PROPERTIES_FILE} not found); create it with mw.Table.create"
            ) from None
        except UnicodeDecodeError as e:
            raise TableFormatError(f"{path}/{PROPERTIES_FILE} is not text: {e}") from e
        cfg = TableConfig.from_properties(props.parse(text, source=f"{path}/{PROPERTIES_FILE}"), source=f"{path}/{PROPERTIES_FILE}")
        return cls(storage, cfg)

    # -- identity ----------------------------------------------------------------
    @property
    def path(self) -> str:
        return self.storage.uri

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def table_id(self) -> str:
        """Safe for ZooKeeper paths and unique per table location: name + hash of the root."""
        return table_id_for(self.storage, self.config.name)

    # -- timeline and schema -----------------------------------------------------
    def timeline(self) -> Timeline:
        """A fresh view of the timeline."""
        return Timeline.load(self.storage, self.config)

    def snapshot(self, as_of: str | None = None, *, timeline: Timeline | None = None, partitions: list[str] | None = None) -> Snapshot:
        """The visible file slices (as of requested time ``as_of``); raises
        :class:`~multiwriter.errors.InstantNotRetainedError` when the cleaner has removed slices
        that snapshot needs. Archived instants are read from the LSM history; only deleted files
        make an answer impossible."""
        tl = timeline or self.timeline()
        if as_of is not None:
            TimelineView(tl).check_as_of(as_of)
        return Snapshot.build(self.storage, tl, as_of=as_of, partitions=partitions)

    def schema(self, timeline: Timeline | None = None) -> pa.Schema:
        """The data schema (no meta columns): the schema the latest completed commit recorded,
        else the create schema. The one source of the table schema for every reader and writer;
        the commit check (``schema_resolution``) keeps each commit's schema a superset of the
        previous one, so the latest never lacks a column that any data file may hold."""
        tl = timeline or self.timeline()
        for i in reversed(tl.completed_writes()):
            meta = tl.commit_metadata(i)
            avro = meta.extra_metadata.get("schema")
            if avro:
                return avro_to_arrow(avro, source=tl.path_of(i))
        if self.config.create_schema:
            return avro_to_arrow(self.config.create_schema, source=PROPERTIES_FILE)
        return pa.schema([])

    def commit_metadata(self, requested_time: str) -> CommitMetadata:
        tl = self.timeline()
        i = tl.find(requested_time)
        if i is None or not i.is_completed:
            raise TableFormatError(f"instant {requested_time} is not a completed instant of {self.path}")
        return tl.commit_metadata(i)

    def retire_writer(self, writer_id: str, *, lock: Any, lock_timeout_s: float = 60.0) -> Any:
        """Forget a stopped writer id's streaming checkpoint (see :func:`multiwriter.checkpoint.retire`);
        ``lock`` is the writers' lock provider. Refuses while the id is registered live."""
        from ..checkpoint import retire

        return retire(self, writer_id, lock=lock, lock_timeout_s=lock_timeout_s)

    # -- reads ---------------------------------------------------------------------
    def read(self, as_of: str | None = None, columns: list[str] | None = None, filters: Any = None, *,
             read_optimized: bool = False) -> pa.Table:
        """Snapshot read (with meta columns) as a pyarrow Table; ``filters`` is a pyarrow
        compute expression or a list of DNF tuples like ``[("date", "=", "2024-01-01")]``.

        ``as_of`` (a requested instant time) reads the table as it was then; before the earliest
        commit the cleaner retains it raises :class:`~multiwriter.errors.InstantNotRetainedError`
        (whose ``earliest`` is readable) instead of returning a snapshot with holes."""
        tl = self.timeline()
        snap = self.snapshot(as_of, timeline=tl)
        full = self.read_schema(tl, snap)
        files = snap.files()
        if read_optimized:  # Hudi's read-optimized query: base files only, log files not merged
            files = [dataclasses.replace(f, logs=()) for f in files if f.has_base]  # a log-only group: nothing
        return self.read_slices(files, full, columns, filters)

    def read_slices(self, slices: list[FileSlice], schema: pa.Schema, columns: list[str] | None = None,
                    filters: Any = None) -> pa.Table:
        """The rows of these file slices: base files scanned as one dataset; slices with log
        files (Merge-on-Read) merged one by one, then filtered like the rest."""
        merged = [f for f in slices if f.logs]
        plain = _read_files(self.storage, [f.path for f in slices if not f.logs], schema, columns, filters)
        if not merged:
            return plain
        ordering = self.config.ordering_field
        expr = _filters_expr(filters)
        # only the asked columns, those the filter reads and those that decide the merge
        need = None if columns is None else _filter_columns(filters, schema, columns)
        key = key_column(self.config, schema) if need is not None else RECORD_KEY

        def one(f: FileSlice) -> pa.Table:
            return read_slice(self.storage, f, schema, ordering, columns=need, key=key)

        if len(merged) == 1:
            parts = [one(merged[0])]
        else:  # reading and merging release the GIL: slices side by side on every core
            parts = list(SLICE_READERS.get().map(one, merged))
        t = pa.concat_tables(parts)
        if expr is not None:
            t = t.filter(expr)
        if columns is not None:
            t = t.select(columns)
        return pa.concat_tables([plain, t]) if plain.num_rows else t

    def read_incremental(self, start: str | None = None, end: str | None = None) -> pa.Table:
        """Records changed by commits whose completion time is in (start, end], each once.

        Hudi's incremental semantics: for every record a commit in the range inserted or
        updated, its latest version written inside the range, read from the file slices that are
        latest as of ``end`` and kept by ``_hoodie_commit_time``. Rows of file groups that a
        replace commit completed by ``end`` retired are not returned. ``start=None`` reads from
        the beginning, ``end=None`` up to the latest commit. Bounds are completion times (the
        ``<T>_<C>`` of the timeline), as hudi-rs takes them on version 8 tables.

        Never partial: instants archived since are read from the LSM history, but when the
        cleaner deleted a slice the range needs (``end`` before its retention window), this
        raises :class:`~multiwriter.errors.InstantNotRetainedError` whose ``earliest`` is the
        earliest start still answered exactly. A full scan would not help there: versions overwritten
        after ``end`` are gone. A range ending at the latest commit from ``start=None`` is always
        exact.
        """
        tl = self.timeline()
        full = self.read_schema(tl)
        plan = self.incremental_plan(tl, start, end)
        if not plan.slices:
            return full.empty_table()
        t = self.read_slices(list(plan.slices), full)
        commit_time = t["_hoodie_commit_time"]
        keep = pc.is_in(commit_time, value_set=pa.array(sorted(plan.commit_times), pa.string()))
        return t.filter(pc.fill_null(keep, False))

    def incremental_plan(self, tl: Timeline, start: str | None, end: str | None) -> IncrementalPlan:
        """The slices and commit times of an incremental read (merged slices on Merge-on-Read)."""
        view = TimelineView(tl)
        if self.config.merge_on_read:
            bases, logs = list_files(self.storage)
            return view.incremental_merged(bases, logs, start, end)
        return view.incremental(list_data_files(self.storage), start, end)

    def to_spark(self, spark: SparkSession, as_of: str | None = None) -> DataFrame:
        """The snapshot (as of ``as_of``) as a Spark DataFrame, read by the ``multiwriter`` data
        source (pyarrow on the executors: local paths and ``s3://`` alike, no Hadoop jars).

        An ``as_of`` the cleaner no longer retains raises
        :class:`~multiwriter.errors.InstantNotRetainedError` here, before Spark plans anything."""
        from ..spark import register

        TimelineView(self.timeline()).check_as_of(as_of)
        register(spark)
        reader = spark.read.format("multiwriter")
        if as_of is not None:
            reader = reader.option("as.of.instant", as_of)
        return reader.load(self.storage.uri_of(""))

    def read_schema(self, tl: Timeline, snap: Snapshot | None = None) -> pa.Schema:
        """The schema rows are read with: the latest commit's schema with the meta columns
        (for a table whose commits carry no schema, the schema of a file of ``snap``)."""
        schema = self.schema(tl)
        with_base = [f for f in snap.files() if f.has_base] if snap is not None else []
        if len(schema) == 0 and with_base:
            import pyarrow.parquet as pq

            with self.storage.fs.open_input_file(self.storage.abs(with_base[-1].path)) as f:
                schema = data_schema(pq.read_schema(f))
        return with_meta(schema)


#: threads that read and merge Merge-on-Read slices, started once per process
SLICE_READERS = ProcessPool("mw-slice-read")


def table_id_for(storage: Storage, name: str) -> str:
    """The lock/registration id of the table named ``name`` at ``storage``'s root."""
    digest = hashlib.sha1(storage.uri_of("").encode()).hexdigest()[:12]
    return f"{name}-{digest}"


def _read_files(storage: Storage, rels: list[str], schema: pa.Schema, columns: list[str] | None, filters: Any) -> pa.Table:
    cols = columns
    if cols is not None:
        unknown = [c for c in cols if schema.get_field_index(c) < 0]
        if unknown:
            raise ConfigError(f"unknown columns {unknown}; the table has {schema.names}")
    if not rels:
        t = schema.empty_table()
        return t.select(cols) if cols else t
    ds = pads.dataset([storage.abs(r) for r in rels], schema=schema, format="parquet", filesystem=storage.fs)
    expr = _filters_expr(filters)
    return ds.to_table(columns=cols, filter=expr)


def _filter_columns(filters: Any, schema: pa.Schema, columns: list[str]) -> list[str] | None:
    """``columns`` and the columns ``filters`` reads; None (every column) when that cannot be
    told (a compute expression: pyarrow does not list the fields one references)."""
    if filters is None:
        return list(columns)
    if isinstance(filters, pads.Expression):
        return None
    disjunction = filters if filters and isinstance(filters[0], list) else [filters]
    names = {term[0] for conj in disjunction for term in conj}
    if not all(isinstance(n, str) for n in names):
        return None
    return [*columns, *(n for n in schema.names if n in names and n not in columns)]


def _filters_expr(filters: Any) -> Any:
    if filters is None or isinstance(filters, pads.Expression):
        return filters
    import pyarrow.parquet as pq

    return pq.filters_to_expression(filters)


def _validate_layout(table_type: str, num_buckets: int | None, hash_fields: Any, keys: tuple[str, ...]) -> tuple[str, ...]:
    """The table type and bucket index settings, checked; the hash fields as recorded."""
    if table_type not in props.TABLE_TYPES:
        raise ConfigError(f"table_type {table_type!r} must be one of {props.TABLE_TYPES}")
    if num_buckets is None:
        if hash_fields:
            raise ConfigError("bucket_hash_fields needs num_buckets (the bucket index)")
        return ()
    if table_type != props.MERGE_ON_READ:
        raise ConfigError("num_buckets (the bucket index) is for MERGE_ON_READ tables; a COPY_ON_WRITE table "
                          "finds keys with its bloom index")
    bucket.validate_num_buckets(num_buckets)
    fields = bucket.resolve_hash_fields(tuple(hash_fields or ()), keys)
    return () if fields == keys else fields


def _validate_settings(name: str, schema: pa.Schema, keys: tuple[str, ...], parts: tuple[str, ...], ordering: str | None) -> None:
    if not _NAME_RE.match(name or ""):
        raise ConfigError(f"table name {name!r} must match {_NAME_RE.pattern}")
    if not isinstance(schema, pa.Schema):
        raise ConfigError("schema must be a pyarrow.Schema")
    if not keys:
        raise ConfigError("record_key is required")
    cols = set(schema.names)
    reserved = cols & set(META_COLUMNS)
    if reserved:
        raise ConfigError(f"columns {sorted(reserved)} are reserved for Hudi meta columns")
    bad = invalid_avro_names(schema)
    if bad:
        raise ConfigError(f"column names {bad} are not Avro names (letters, digits and _, not starting with a "
                          "digit): Hudi's JVM readers could not parse the table schema; rename them")
    for kind, fields in (("record_key", keys), ("partition_by", parts), ("ordering_field", (ordering,) if ordering else ())):
        missing = [f for f in fields if f not in cols]
        if missing:
            raise ConfigError(f"{kind} columns {missing} are not in the schema {schema.names}")


def _describe(c: TableConfig) -> str:
    return (
        f"name={c.name}, record_key={list(c.record_key)}, partition_by={list(c.partition_by)}, "
        f"ordering_field={c.ordering_field}, hive_style_partitioning={c.hive_style_partitioning}"
    )


__all__ = ["META_SCHEMA", "Table"]
