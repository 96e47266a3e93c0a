"""``Table``: create/open a Hudi Copy-on-Write table and read it (snapshot, as-of, incremental)."""
from __future__ import annotations

import hashlib
import logging
import re
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.dataset as pads

from ..errors import ConfigError, TableFormatError, TableNotFoundError
from ..storage import FileExists, Storage
from . import properties as props
from .metadata import CommitMetadata
from .properties import PROPERTIES_FILE, TableConfig
from .schema import META_COLUMNS, META_SCHEMA, arrow_to_avro_json, avro_to_arrow, data_schema, with_meta
from .snapshot import Snapshot
from .timeline import Timeline

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


class Table:
    """A Hudi Copy-on-Write table (reads versions 6 and 8, writes version 8)."""

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
    ) -> Table:
        """Create the table, or open it when it exists with the same settings (idempotent)."""
        keys = (record_key,) if isinstance(record_key, str) else tuple(record_key)
        parts = tuple(partition_by or ())
        _validate_settings(name, schema, keys, parts, ordering_field)
        cfg = TableConfig(
            name=name,
            record_key=keys,
            partition_by=parts,
            ordering_field=ordering_field,
            hive_style_partitioning=hive_style_partitioning,
            create_schema=arrow_to_avro_json(schema, name),
        )
        storage = Storage(path)
        data = props.render(cfg.to_properties()).encode()
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
        return Snapshot.build(self.storage, timeline or self.timeline(), as_of=as_of, partitions=partitions)

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

    # -- reads ---------------------------------------------------------------------
    def read(self, as_of: str | None = None, columns: list[str] | None = None, filters: Any = None) -> pa.Table:
        """Snapshot read (with meta columns) as a pyarrow Table; ``filters`` is a pyarrow
        compute expression or a list of DNF tuples like ``[("date", "=", "2024-01-01")]``."""
        tl = self.timeline()
        snap = self.snapshot(as_of, timeline=tl)
        full = self._read_schema(tl, snap)
        return _read_files(self.storage, [f.path for f in snap.files()], full, columns, filters)

    def read_incremental(self, start: str | None = None, end: str | None = None) -> pa.Table:
        """Rows written by commits whose completion time is in (start, end]."""
        tl = self.timeline()
        full = self._read_schema(tl, None)
        parts = []
        for i in tl.completed_writes():
            ct = i.completion_time or i.requested_time
            if (start is not None and ct <= start) or (end is not None and ct > end):
                continue
            files = [s.path for s in tl.commit_metadata(i).all_stats() if s.path]
            files = [f for f in files if self.storage.exists(f)]
            if not files:
                continue
            t = _read_files(self.storage, files, full, None, None)
            mask = pa.compute.equal(t["_hoodie_commit_time"], i.requested_time)
            parts.append(t.filter(mask))
        if not parts:
            return full.empty_table()
        return pa.concat_tables(parts)

    def to_spark(self, spark: SparkSession, as_of: str | None = None) -> DataFrame:
        tl = self.timeline()
        snap = self.snapshot(as_of, timeline=tl)
        uris = [self.storage.uri_of(f.path) for f in snap.files()]
        schema = self._read_schema(tl, snap)
        if not uris:
            return spark.createDataFrame(schema.empty_table().to_pandas())
        from pyspark.sql.pandas.types import from_arrow_schema

        # The table schema, not the files' merged one: files older than a column lack it, and
        # files older than a widening hold the narrower type (Spark cannot merge those).
        return spark.read.schema(from_arrow_schema(schema)).parquet(*uris)

    def _read_schema(self, tl: Timeline, snap: Snapshot | None) -> pa.Schema:
        schema = self.schema(tl)
        if len(schema) == 0 and snap is not None and snap.files():
            import pyarrow.parquet as pq

            with self.storage.fs.open_input_file(self.storage.abs(snap.files()[-1].path)) as f:
                schema = data_schema(pq.read_schema(f))
        return with_meta(schema)


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


def _filters_expr(filters: Any) -> Any:
    if filters is None or isinstance(filters, pads.Expression):
        return filters
    import pyarrow.parquet as pq

    return pq.filters_to_expression(filters)


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
