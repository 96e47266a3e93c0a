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

from ..errors import ConfigError, TableFormatError, TableNotFoundError, VirtualKeysError
from ..redact import redact
from ..storage import FileExists, Storage
from ..threads import ProcessPool
from . import bootstrap_slice, bucket, cdc, hooks, metadata_files, metadata_record_index, metadata_stats, skipping
from ..format import bounds, names
from . import properties as props
from .metadata import CommitMetadata
from .properties import PROPERTIES_FILE, TableConfig
from ..format.schema import (
    META_COLUMNS,
    META_SCHEMA,
    arrow_to_avro_json,
    avro_to_arrow,
    cast_column,
    data_schema,
    has_double,
    invalid_avro_names,
    stored_float_types,
    with_meta,
)
from .files import FileSlice, list_data_files, list_files
from .merge_config import MergeConfig
from .merge_rule import RECORD_KEY
from .delete_markers import DeleteMarkers
from .merged_slice import key_column, read_merged_slices, read_slice
from .snapshot import Snapshot
from .timeline import Timeline, list_instants
from .view import IncrementalPlan, TimelineView

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

    from ..lock.base import LockProvider

log = logging.getLogger(__name__)
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}\Z")


class Table:
    """A Hudi Copy-on-Write or Merge-on-Read table (reads versions 6, 8 and 9, writes 8 and 9)."""

    def __init__(self, storage: Storage, config: TableConfig) -> None:
        self.storage = storage
        self.config = config
        self._last_timeline: Timeline | None = None

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
        table_version: int = props.WRITE_VERSION,
        metadata: bool = True,
        populate_meta_fields: bool = True,
        properties: dict[str, str] | None = None,
        column_stats: bool = False,
        record_index: bool = False,
        record_index_file_groups: int = metadata_record_index.MIN_FILE_GROUPS,
    ) -> Table:
        """Create the table, or open it when it exists with the same settings (idempotent).

        ``lock``: the lock every writer and cleaner of this table will use; recorded in
        ``hoodie.properties`` so that a writer or cleaner given another lock is refused (two
        locks exclude nothing). Tables created without one accept any lock.

        ``table_type="MERGE_ON_READ"``: writes append log files beside base files and the
        companion job compacts them; ``num_buckets`` gives it Hudi's simple bucket index (a
        key's file group is a hash of ``bucket_hash_fields``, by default the record key), which
        non-blocking writers need.

        ``table_version``: 8 (Hudi 1.0; Hudi 1.1 upgrades it on its first write) or 9 (Hudi 1.1:
        ordering fields and merge mode in the properties, ``field:value`` keys under the complex
        key generator).

        ``metadata`` (Hudi's ``hoodie.metadata.enable``, on by default as in Hudi 1.x): the table
        keeps Hudi's metadata table (its ``files`` partition), from which Hudi 1.x readers and
        hudi-rs list its files.

        ``column_stats=True`` (Hudi's ``hoodie.metadata.index.column.stats.enable`` with
        ``hoodie.metadata.index.partition.stats.enable``): the metadata table also keeps the
        ``column_stats`` and ``partition_stats`` indexes (per base file and per partition: min,
        max, nulls of each indexed column), which readers use to skip files and partitions.

        ``record_index=True`` (Hudi's ``hoodie.metadata.record.index.enable``): the metadata
        table also keeps the record index (each record key's partition and file group), which
        Hudi's writers use as their index, and ours. ``record_index_file_groups`` (Hudi's
        ``hoodie.metadata.record.index.min.filegroup.count``, 10): its file groups, fixed for
        the index's life (keys hash over them).

        ``populate_meta_fields=False`` (Hudi's ``hoodie.populate.meta.fields``: virtual keys,
        Copy-on-Write only): files keep Hudi's five meta columns but write no values into them,
        nor a bloom filter into the footer; the index finds a key's file by reading the key
        columns of its partition's files, as Hudi's simple index does. As in Hudi, such a table
        has no incremental or CDC reads (:class:`~multiwriter.errors.VirtualKeysError`).

        ``properties``: more ``hoodie.properties`` entries to record (a bootstrap's
        ``hoodie.bootstrap.base.path``); not settings, so not compared with an existing table's.
        """
        if table_version not in props.WRITE_VERSIONS:
            raise ConfigError(f"table_version={table_version!r}: multiwriter writes table versions 8 and 9")
        keys = (record_key,) if isinstance(record_key, str) else tuple(record_key)
        parts = tuple(partition_by or ())
        _validate_settings(name, schema, keys, parts, ordering_field)
        hash_fields = _validate_layout(table_type, num_buckets, bucket_hash_fields, keys)
        if not isinstance(record_index_file_groups, int) or not 1 <= record_index_file_groups <= 10_000:
            raise ConfigError(f"record_index_file_groups={record_index_file_groups!r}: between 1 and 10000 "
                              "(hoodie.metadata.record.index.min.filegroup.count)")
        if (column_stats or record_index) and not metadata:
            which = "column_stats" if column_stats else "record_index"
            raise ConfigError(f"{which}=True with metadata=False: the index lives in the metadata table; "
                              "keep metadata=True")
        if not populate_meta_fields and table_type != props.COPY_ON_WRITE:
            raise VirtualKeysError(
                f"populate_meta_fields=False ({props.POPULATE_META_FIELDS_KEY}=false) with table_type={table_type}: "
                "multiwriter writes virtual keys on Copy-on-Write tables only; create a Copy-on-Write table, "
                "or keep the meta fields"
            )
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
            version=table_version,
            populate_meta_fields=populate_meta_fields,
        )
        storage = Storage(path)
        recorded = {**(properties or {}), **cfg.to_properties()}
        if lock is not None:
            recorded.update(lock.table_properties())
        if metadata and not storage.exists(PROPERTIES_FILE):
            # the metadata table first: readers trust it as soon as the properties name it
            mdt = metadata_files.MetadataTable(storage, cfg)
            mdt.bootstrap({}, metadata_files.BOOTSTRAP_COMPLETION)
            kept = [metadata_files.PARTITION]
            if column_stats:
                mdt.start_stats(metadata_stats.KEPT, [])
                kept += metadata_stats.KEPT
            if record_index:
                mdt.start_record_index({}, record_index_file_groups)
                kept.append(metadata_record_index.PARTITION)
            recorded[metadata_files.PARTITIONS_KEY] = ",".join(sorted(kept))
        data = props.render(recorded).encode()
        try:
            storage.put_if_absent(PROPERTIES_FILE, data)
        except FileExists:
            existing = cls.open(path)
            if not existing.config.same_settings(cfg):
                raise ConfigError(
                    f"table at {redact(path)} exists with other settings ({_describe(existing.config)}); "
                    f"asked for ({_describe(cfg)}): open it instead, or use another path"
                ) from None
            return existing
        storage.makedirs(cfg.timeline_dir)
        storage.makedirs(cfg.history_dir)
        log.info("created table %s at %s", name, redact(path))
        return cls(storage, TableConfig.from_properties(props.parse(data.decode())))

    @classmethod
    def open(cls, path: str) -> Table:
        storage = Storage(path)
        return cls(storage, _read_config(storage, path))

    def enable_metadata(self, lock: LockProvider, *, column_stats: bool = False, record_index: bool = False,
                        record_index_file_groups: int = metadata_record_index.MIN_FILE_GROUPS,
                        timeout_s: float = 60.0) -> bool:
        """Start Hudi's metadata table (its ``files`` partition) on this table from a listing
        of its committed files, under the table lock (writers that began before go on: they
        read the setting under the lock when they commit). ``column_stats``: also start the
        ``column_stats`` and ``partition_stats`` indexes, from the footers of the latest base
        files. ``record_index``: also start the record index, from the keys of the latest
        slices, over at least ``record_index_file_groups`` file groups (more for a table of many
        keys, as Hudi sizes it). False when all of it was on already."""
        table_lock = lock.for_table(self.table_id, self.storage)
        table_lock.acquire(timeout_s=timeout_s)
        try:
            started = self._start_files_partition()
            if column_stats:
                started = self._start_column_stats() or started
            if record_index:
                started = self._start_record_index(record_index_file_groups) or started
            self.config = self.read_config()
            return started
        finally:
            table_lock.release()

    def _start_files_partition(self) -> bool:
        current = self.read_config()
        if metadata_files.enabled(current):
            return False
        view = TimelineView(Timeline.load(self.storage, current))
        bases, logs = list_files(self.storage, logs=current.merge_on_read)
        listing = metadata_files.listing_of(
            (f.partition, f.name, f.size) for f in [*bases, *logs] if view.committed(f.instant_time))
        metadata_files.MetadataTable(self.storage, current).bootstrap(listing, metadata_files.now_time())

        def add(p: dict[str, str]) -> dict[str, str]:
            listed = [n for n in p.get(metadata_files.PARTITIONS_KEY, "").split(",") if n.strip()]
            p[metadata_files.PARTITIONS_KEY] = ",".join([*listed, metadata_files.PARTITION])
            return p

        props.modify(self.storage, add)
        log.info("started the metadata table of %s from %d files", self.path, sum(map(len, listing.values())))
        return True

    def _start_column_stats(self) -> bool:
        """The data-skipping indexes from the footers of the latest slices' base files (under
        the table lock: no write completes meanwhile)."""
        current = self.read_config()
        listed = [n.strip() for n in current.raw.get(metadata_files.PARTITIONS_KEY, "").split(",") if n.strip()]
        if metadata_stats.kept(listed) == metadata_stats.KEPT:
            return False
        tl = Timeline.load(self.storage, current)
        files = [(f.partition, f.path) for f in Snapshot.build(self.storage, tl).files() if f.has_base]
        columns = metadata_stats.indexed_columns(self.storage, current.raw, _avro_schema(tl, current))
        records = metadata_stats.records_of_files(self.storage, files, metadata_stats.KEPT, current.version, columns)
        metadata_files.MetadataTable(self.storage, current).start_stats(metadata_stats.KEPT, records)

        def add(p: dict[str, str]) -> dict[str, str]:
            names = [n.strip() for n in p.get(metadata_files.PARTITIONS_KEY, "").split(",") if n.strip()]
            p[metadata_files.PARTITIONS_KEY] = ",".join(sorted({*names, *metadata_stats.KEPT}))
            return p

        props.modify(self.storage, add)
        log.info("started the column stats of %s from %d base files", self.path, len(files))
        return True

    def _start_record_index(self, min_groups: int) -> bool:
        """The record index from the keys of the latest slices (under the table lock: no write
        completes meanwhile)."""
        current = self.read_config()
        listed = [n.strip() for n in current.raw.get(metadata_files.PARTITIONS_KEY, "").split(",") if n.strip()]
        if metadata_record_index.PARTITION in listed:
            return False
        tl = Timeline.load(self.storage, current)
        entries = metadata_record_index.entries_of(self.storage, current, Snapshot.build(self.storage, tl))
        metadata_files.MetadataTable(self.storage, current).start_record_index(entries, min_groups)

        def add(p: dict[str, str]) -> dict[str, str]:
            names = [n.strip() for n in p.get(metadata_files.PARTITIONS_KEY, "").split(",") if n.strip()]
            p[metadata_files.PARTITIONS_KEY] = ",".join(sorted({*names, metadata_record_index.PARTITION}))
            return p

        props.modify(self.storage, add)
        log.info("started the record index of %s with %d keys", self.path, len(entries))
        return True

    def read_config(self) -> TableConfig:
        """``hoodie.properties`` as it is now (another writer, Hudi's JVM among them, may have
        upgraded the table or changed its settings since this object was opened)."""
        return _read_config(self.storage, self.path)

    # -- identity ----------------------------------------------------------------
    @property
    def path(self) -> str:
        return self.storage.uri

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def merge_config(self) -> MergeConfig:
        """How versions of a record merge in this table (:class:`MergeConfig`); raises
        :class:`~multiwriter.errors.MergeSettingError` naming a setting multiwriter does not merge by."""
        return MergeConfig.from_table_config(self.config)

    @property
    def table_id(self) -> str:
        """Safe for ZooKeeper paths and unique per table location: name + hash of the root."""
        return table_id_for(self.storage, self.config.name)

    # -- timeline and schema -----------------------------------------------------
    def timeline(self) -> Timeline:
        """A fresh view of the timeline."""
        tl = Timeline.load(self.storage, self.config)
        self._last_timeline = tl
        return tl

    def known_schema(self) -> pa.Schema:
        """The schema as of the last timeline this object loaded (loading one when it has none).
        Enough to prepare a batch before its attempt loads the timeline under the lock, which
        checks the batch again against the fresh schema: a long-lived writer then lists the
        timeline once per batch, not twice."""
        return self.schema(self._last_timeline)

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
            raise TableFormatError(f"instant {requested_time} is not a completed instant of {redact(self.path)}")
        return tl.commit_metadata(i)

    # -- reads ---------------------------------------------------------------------
    def read(self, as_of: str | None = None, columns: list[str] | None = None, filters: Any = None, *,
             read_optimized: bool = False) -> pa.Table:
        """Snapshot read (with meta columns) as a pyarrow Table; ``filters`` is a pyarrow
        compute expression or a list of DNF tuples like ``[("date", "=", "2024-01-01")]``.
        DNF filters also skip the file slices whose column stats in the metadata table prove
        that no row of them matches (:meth:`prune`); an expression cannot be inspected.

        ``as_of`` (a requested instant time) reads the table as it was then; before the earliest
        commit the cleaner retains it raises :class:`~multiwriter.errors.InstantNotRetainedError`
        (whose ``earliest`` is readable) instead of returning a snapshot with holes."""
        tl = self.timeline()
        snap = self.snapshot(as_of, timeline=tl)
        full = self.read_schema(tl, snap)
        files = snap.files()
        if read_optimized:  # Hudi's read-optimized query: base files only, log files not merged
            files = [dataclasses.replace(f, logs=()) for f in files if f.has_base]  # a log-only group: nothing
        pruned = self.prune(files, skipping.from_dnf(filters), full, timeline=tl, latest=as_of is None)
        if pruned.skipped and not pruned.kept:
            _check_filters(full, filters)  # the error reading any file would raise, not an empty answer
        return self.read_slices(list(pruned.kept), full, columns, filters)

    def prune(self, slices: list[FileSlice], skip: skipping.Filter | None, schema: pa.Schema, *,
              timeline: Timeline, latest: bool = False) -> skipping.Pruned:
        """The slices ``skip`` may match, by the column stats of the metadata table and, when
        ``slices`` are the latest snapshot of ``timeline`` (``latest``), its partition stats
        (:func:`.skipping.prune`). A few reads of the metadata table, no data file footer; a
        table that keeps neither index keeps every slice."""
        if skip is None or not slices:
            return skipping.Pruned(tuple(slices))
        partitions = {s.partition for s in slices}
        pstats = None
        if latest:
            pstats = metadata_files.partition_stats_of(self.storage, self.config)
            if pstats is not None and not self._settled(timeline):
                pstats = None
        out = skipping.partitions_ruled_out(skip, partitions, pstats, schema)
        cstats = None
        if partitions - out:
            cstats = metadata_files.column_stats_of(self.storage, self.config, sorted(partitions - out) if out else None)
        pruned = skipping.prune(slices, skip, column_stats=cstats, partition_stats=pstats, schema=schema)
        if pruned.skipped:
            log.debug("data skipping on %s: %d of %d file slices skipped (%d partitions by their partition stats)",
                      redact(self.path), pruned.slices_skipped, len(slices), len(pruned.partitions_skipped))
        return pruned

    def _settled(self, tl: Timeline) -> bool:
        """Nothing pending on ``tl`` and nothing begun since it was loaded. Partition stats
        describe the latest slices of the metadata table's view, which a writer updates before
        it completes: only then are they the stats of ``tl``'s snapshot (a file's column stats
        never change, so they need no such check). One listing of the timeline."""
        return not tl.pending() and list_instants(self.storage, self.config) == tl.instants

    def read_slices(self, slices: list[FileSlice], schema: pa.Schema, columns: list[str] | None = None,
                    filters: Any = None) -> pa.Table:
        """The rows of these file slices: base files scanned as one dataset; slices with log
        files (Merge-on-Read) merged one by one, then filtered like the rest. On S3 every file
        is fetched ahead, side by side (:meth:`Storage.read_ahead`), in the order read here."""
        with self.storage.read_ahead(_files_read(slices)):
            return self._read_slices(slices, schema, columns, filters)

    def _read_slices(self, slices: list[FileSlice], schema: pa.Schema, columns: list[str] | None,
                     filters: Any) -> pa.Table:
        # slices with log files, or whose base is a bootstrap's skeleton (stitched with its source), go one by one
        merged = [f for f in slices if f.logs or bootstrap_slice.is_skeleton(f)]
        plain = _read_files(self.storage, [f.path for f in slices if not (f.logs or bootstrap_slice.is_skeleton(f))],
                            schema, columns, filters)
        if not merged:
            return plain
        ordering = self.merge_config  # refused by name here when the table merges otherwise
        expr = _filters_expr(filters)
        # only the asked columns, those the filter reads and those that decide the merge
        need = None if columns is None else _filter_columns(filters, schema, columns)
        key = key_column(self.config, schema) if need is not None else RECORD_KEY

        if len(merged) == 1:
            t = read_slice(self.storage, merged[0], schema, ordering, columns=need, key=key, threads=True,
                           markers=DeleteMarkers.of(self.config))
        else:  # reading and keying release the GIL: slices side by side on every core, one merge
            t = read_merged_slices(self.storage, merged, schema, ordering, columns=need, key=key,
                                    map_=SLICE_READERS.get().map, markers=DeleteMarkers.of(self.config))
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
        replace commit completed by ``end`` retired are not returned, and deletes are not
        delivered (a deleted key is simply absent). ``start=None`` reads from the beginning,
        ``end=None`` up to the latest commit: a consumer that reads to the latest commit takes
        its next ``start`` from :meth:`read_incremental_batch`, which says which ``end`` it used.
        Bounds are completion times (the ``<T>_<C>`` of the timeline), as hudi-rs takes them on
        version 8 tables.

        Never partial: instants archived since are read from the LSM history, but when the
        cleaner deleted a slice the range needs (``end`` before its retention window), this
        raises :class:`~multiwriter.errors.InstantNotRetainedError` whose ``earliest`` is the
        earliest start still answered exactly. A full scan would not help there: versions overwritten
        after ``end`` are gone. A range ending at the latest commit from ``start=None`` is always
        exact.
        """
        return self.read_incremental_batch(start, end).rows

    def read_incremental_batch(self, start: str | None = None, end: str | None = None) -> IncrementalBatch:
        """:meth:`read_incremental`, with the range it read: ``end=None``, or an ``end`` past the
        latest commit, is resolved to the completion time of the latest write on the timeline
        this read loaded, so ``batch.end`` is exactly the next read's ``start`` (a commit
        completing later gets a completion time above it; a far-future ``end`` handed back as
        is would skip it). Neither the latest completion time looked up before or after the read
        nor ``max(_hoodie_commit_time)`` (a requested time) is a safe offset."""
        tl = self.timeline()
        end = resolve_end(tl, start, end)
        full = self.read_schema(tl)
        if end is None or (start is not None and end <= start):
            return IncrementalBatch(full.empty_table(), start, start)
        plan = self.incremental_plan(tl, start, end)
        if not plan.slices:
            return IncrementalBatch(full.empty_table(), start, end)
        t = self.read_slices(list(plan.slices), full)
        commit_time = t["_hoodie_commit_time"]
        keep = pc.is_in(commit_time, value_set=pa.array(sorted(plan.commit_times), pa.string()))
        return IncrementalBatch(t.filter(pc.fill_null(keep, False)), start, end)

    def read_cdc(self, start: str | None = None, end: str | None = None) -> pa.Table:
        """Change data capture: for every data commit whose completion time is in (start, end],
        in completion order, each key it changed once per changed file group: ``op`` (``i``,
        ``u``, ``d``), ``ts_ms`` (the commit's requested instant time), ``before`` and ``after``
        (structs of the data columns, null where absent), as Hudi's CDC query returns them
        (read from the CDC log files a commit's ``cdcStats`` names, else inferred from the data
        files, as Hudi's ``HoodieCDCExtractor`` does: :mod:`.cdc`).
        Deletes and the rows an insert-overwrite retired are ``d`` records; compaction and
        clustering change nothing. Bounds as :meth:`read_incremental`; a range whose slices the
        cleaner deleted raises :class:`~multiwriter.errors.InstantNotRetainedError`."""
        return self.read_cdc_batch(start, end).rows

    def read_cdc_batch(self, start: str | None = None, end: str | None = None) -> IncrementalBatch:
        """:meth:`read_cdc` with the range it read; ``batch.end`` is the next read's ``start``
        (resolved as :meth:`read_incremental_batch` resolves it)."""
        tl = self.timeline()
        end = resolve_end(tl, start, end)
        full = self.read_schema(tl)
        mode = cdc.supplemental_mode(self.config)  # a bad mode is refused by name, whatever the range
        if end is None or (start is not None and end <= start):
            return IncrementalBatch(cdc.cdc_schema(full).empty_table(), start, start)
        plan = self.cdc_plan(tl, start, end)
        merge = self.merge_config
        markers = DeleteMarkers.of(self.config)

        def read(fs: FileSlice, logs: tuple[Any, ...] | None) -> pa.Table:
            return read_slice(self.storage, fs, full, merge, logs=logs, markers=markers)

        def read_log(path: str) -> pa.Table:
            return cdc.read_cdc_file(self.storage, path)

        return IncrementalBatch(cdc.changes(plan, full, read, read_log, mode), start, end)

    def cdc_plan(self, tl: Timeline, start: str | None, end: str | None) -> cdc.CdcPlan:
        """The slices a CDC read of (start, end] compares (:func:`.cdc.plan`); refused on a
        table with virtual keys, as incremental reads are."""
        self._check_meta_fields()
        bases, logs = list_files(self.storage, logs=self.config.merge_on_read)
        return cdc.plan(TimelineView(tl), bases, logs, start, end)

    def _check_meta_fields(self) -> None:
        if self.config.virtual_keys:
            raise VirtualKeysError(
                f"table {self.config.name} has virtual keys ({props.POPULATE_META_FIELDS_KEY}=false): its rows record "
                "no commit time, so there are no incremental, CDC or streaming reads; read the whole table with read()"
            )

    def incremental_plan(self, tl: Timeline, start: str | None, end: str | None) -> IncrementalPlan:
        """The slices and commit times of an incremental read (merged slices on Merge-on-Read).
        Refused on a table with virtual keys, as Hudi does: its rows carry no commit time."""
        self._check_meta_fields()
        view = TimelineView(tl)
        if self.config.merge_on_read:
            bases, logs = list_files(self.storage)
            return view.incremental_merged(bases, logs, start, end)
        return view.incremental(list_data_files(self.storage), start, end)

    def to_spark(self, spark: SparkSession, as_of: str | None = None) -> DataFrame:
        """The snapshot (as of ``as_of``) as a Spark DataFrame, read by the ``multiwriter`` data
        source (pyarrow on the executors: local paths and ``s3://`` alike, no Hadoop jars).

        An ``as_of`` the cleaner no longer retains raises
        :class:`~multiwriter.errors.InstantNotRetainedError` here, before Spark plans anything.
        The Spark layer does the reading (:func:`multiwriter.spark.read_table`, through
        :mod:`.hooks`): the table layer imports no Spark code."""
        TimelineView(self.timeline()).check_as_of(as_of)
        return hooks.spark_reader()(self, spark, as_of)

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


@dataclasses.dataclass(frozen=True)
class IncrementalBatch:
    """What :meth:`Table.read_incremental_batch` read: the rows of the commits completed in
    (``start``, ``end``]; ``end`` is the next read's ``start`` (equal to ``start`` when nothing
    new completed)."""

    rows: pa.Table
    start: str | None
    end: str | None


def resolve_end(tl: Timeline, start: str | None, end: str | None) -> str | None:
    """The ``end`` a range read uses: ``end``, clamped to the completion time of the latest
    write on ``tl`` (that one when ``end`` is None), so it is a safe next ``start``."""
    latest = _latest_completion(tl, start)
    return latest if end is None or latest is None or end > latest else end


def _latest_completion(tl: Timeline, start: str | None) -> str | None:
    """The completion time of the newest completed write on ``tl`` (``start`` when none is newer)."""
    last = tl.last_completed_write()
    latest = (last.completion_time or last.requested_time) if last is not None else None
    if latest is None or (start is not None and latest <= start):
        return start
    return latest


#: threads that read and merge Merge-on-Read slices, started once per process
SLICE_READERS = ProcessPool("mw-slice-read")


def table_id_for(storage: Storage, name: str) -> str:
    """The lock/registration id of the table named ``name`` at ``storage``'s root."""
    digest = hashlib.sha1(storage.uri_of("").encode()).hexdigest()[:12]
    return f"{name}-{digest}"


def _files_read(slices: list[FileSlice]) -> list[tuple[str, int]]:
    """(path, size) of every file :meth:`Table.read_slices` opens, in its order: the base files
    of slices without logs (one dataset), then each merged slice's base and logs."""
    plain = [(f.path, f.size) for f in slices if not f.logs and f.has_base]
    merged = [(p, n) for f in slices if f.logs
              for p, n in ([(f.path, f.size)] if f.has_base else []) + sorted((lf.path, lf.size) for lf in f.logs)]
    return plain + merged


def _avro_schema(tl: Timeline, config: TableConfig) -> str | None:
    """The Avro schema the latest completed write recorded, else the create schema."""
    for i in reversed(tl.completed_writes()):
        avro = tl.commit_metadata(i).extra_metadata.get("schema")
        if avro:
            return avro
    return config.create_schema


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
    # Every footer, read side by side and checked against the decoding budgets (bounds) before a
    # page is decoded; the scans below reuse the metadata these fragments keep, so no footer is read twice.
    frags = list(ds.get_fragments())
    checked = None if expr is not None else cols
    list(SLICE_READERS.get().map(lambda f: bounds.check_parquet(f.metadata, _rel_of(storage, f.path), columns=checked),
                                 frags))
    if not has_double(schema):
        try:
            return pads.FileSystemDataset(frags, schema, ds.format, ds.filesystem).to_table(columns=cols, filter=expr)
        except (MemoryError, pa.ArrowMemoryError) as e:
            raise bounds.out_of_memory(f"{len(rels)} files of {storage.uri_of('')}", e) from e
    # Which files store floats of columns now double: from the same footers.
    stored = list(SLICE_READERS.get().map(lambda f: bool(stored_float_types(f.physical_schema, schema)), frags))
    plain = [f for f, s in zip(frags, stored, strict=True) if not s]
    widened = [f for f, s in zip(frags, stored, strict=True) if s]
    parts = [pads.FileSystemDataset(plain, schema, ds.format, ds.filesystem).to_table(columns=cols, filter=expr)] if plain else []
    parts += [_read_widened(frag, schema, cols, expr) for frag in widened]
    return pa.concat_tables(parts)


def _rel_of(storage: Storage, path: str) -> str:
    """A fragment's path relative to the table (the path itself when it is not under it)."""
    root = storage.abs("").rstrip("/") + "/"
    return path[len(root):] if path.startswith(root) else path


def _read_widened(frag: Any, schema: pa.Schema, cols: list[str] | None, expr: Any) -> pa.Table:
    """A file that stores floats of columns now double, widened as Hudi's readers widen them
    (:func:`~.schema.cast_column`), then filtered: the filter sees the values every reader sees."""
    stored = stored_float_types(frag.physical_schema, schema)
    t = frag.to_table(schema=pa.schema([pa.field(f.name, stored.get(f.name, f.type)) for f in schema]))
    t = pa.Table.from_arrays([cast_column(t.column(f.name), f.type) for f in schema], schema=schema)
    if expr is not None:
        t = t.filter(expr)
    return t.select(cols) if cols is not None else t


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


def _check_filters(schema: pa.Schema, filters: Any) -> None:
    """Raise what evaluating ``filters`` on rows of ``schema`` raises (an unknown column, a
    value of another type), on no rows."""
    schema.empty_table().filter(_filters_expr(filters))


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
    names.check(error=ConfigError, where="Table.create", table_name=name, columns=schema.names, partition_columns=parts)
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
        + ("" if c.populate_meta_fields else ", populate_meta_fields=False")
    )


__all__ = ["META_SCHEMA", "Table"]


def _read_config(storage: Storage, path: str) -> TableConfig:
    try:
        text = props.read_text(storage)
    except FileNotFoundError:
        raise TableNotFoundError(
            f"no Hudi table at {redact(path)} ({PROPERTIES_FILE} not found); create it with mw.Table.create"
        ) from None
    except UnicodeDecodeError as e:
        raise TableFormatError(f"{redact(path)}/{PROPERTIES_FILE} is not text: {e}") from e
    source = f"{redact(path)}/{PROPERTIES_FILE}"
    return TableConfig.from_properties(props.parse(text, source=source), source=source)
