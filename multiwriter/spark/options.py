"""The data source's options: Hudi's keys, parsed and checked before anything is read or written.

Kept free of Spark imports so the rules are testable on their own. Every unknown key and every
missing required key is reported at once, by name, as a :class:`~multiwriter.errors.ConfigError`.
"""
from __future__ import annotations

import os

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..config import (
    CONCURRENCY_KEY,
    INDEX_TYPE_KEY,
    ZK_AUTH_KEY,
    WriterConfig,
    settings_from_options,
    table_settings_from_options,
    zk_auth,
)
from ..errors import ConfigError, TableNotFoundError
from ..redact import redact
from ..lock.base import LockProvider
from ..table import cdc as cdc_table
from ..table import metadata_stats
from ..table.table import Table

QUERY_TYPE = "hoodie.datasource.query.type"
AS_OF = "as.of.instant"
BEGIN = "hoodie.datasource.read.begin.instanttime"
END = "hoodie.datasource.read.end.instanttime"
#: our own key: files larger than this are read as several Spark partitions (row-group splits)
SPLIT_BYTES = "multiwriter.read.split.bytes"
#: our own key: Spark partitions a scan aims for (default: the planning machine's cores);
#: small file slices are packed into tasks of about total bytes / parallelism, as Spark packs
#: the files of ``spark.read.parquet``
PARALLELISM = "multiwriter.read.parallelism"
#: Hudi's incremental query format: ``latest_state`` (the default: each changed record's latest
#: version) or ``cdc`` (change data capture: op, ts_ms, before, after per change)
INCREMENTAL_FORMAT = "hoodie.datasource.query.incremental.format"
INCREMENTAL_FORMATS = ("latest_state", "cdc")
READ_KEYS = frozenset({"path", QUERY_TYPE, AS_OF, BEGIN, END, SPLIT_BYTES, PARALLELISM, INCREMENTAL_FORMAT})
QUERY_TYPES = ("snapshot", "read_optimized", "incremental")
#: streaming reads: where a new query starts (``earliest``, ``latest`` or a completion time)
START_OFFSET = "hoodie.datasource.streaming.startOffset"
STREAM_READ_KEYS = frozenset({"path", START_OFFSET, SPLIT_BYTES, PARALLELISM, INCREMENTAL_FORMAT})
EARLIEST, LATEST = "earliest", "latest"

TABLE_NAME = "hoodie.table.name"
RECORD_KEY = "hoodie.datasource.write.recordkey.field"
PARTITION_FIELD = "hoodie.datasource.write.partitionpath.field"
PRECOMBINE = "hoodie.datasource.write.precombine.field"
HIVE_STYLE = "hoodie.datasource.write.hive_style_partitioning"
POPULATE_META_FIELDS = "hoodie.populate.meta.fields"  # "false": virtual keys (a table setting)
OPERATION = "hoodie.datasource.write.operation"
WRITER_ID = "hoodie.datasource.write.streaming.checkpoint.identifier"
ON_CHECKPOINT_RESET = "multiwriter.on.checkpoint.reset"  # "fail" (default) or "continue"
ZK_URL = "hoodie.write.lock.zookeeper.url"
ZK_PORT = "hoodie.write.lock.zookeeper.port"
ZK_BASE = "hoodie.write.lock.zookeeper.base_path"
ZK_LOCK_KEY = "hoodie.write.lock.zookeeper.lock_key"
ZK_SESSION_MS = "hoodie.write.lock.zookeeper.session_timeout_ms"
ZK_CONNECT_MS = "hoodie.write.lock.zookeeper.connection_timeout_ms"
ZK_AUTH = ZK_AUTH_KEY  # "USER:PASSWORD": digest credentials (Hudi has no key for them)
LOCK_PROVIDER = "hoodie.write.lock.provider"
ZK_PROVIDER = "org.apache.hudi.client.transaction.lock.ZookeeperBasedLockProvider"
FS_PROVIDER = "org.apache.hudi.client.transaction.lock.FileSystemBasedLockProvider"
#: keys whose only accepted value is the one this framework implements
FIXED = {
    "hoodie.cleaner.policy.failed.writes": "LAZY",
}
#: Merge-on-Read and its bucket index (table settings) and the writers' concurrency mode
TABLE_LAYOUT_KEYS = frozenset({"hoodie.table.type", "hoodie.datasource.write.table.type", INDEX_TYPE_KEY,
                               "hoodie.bucket.index.num.buckets", "hoodie.bucket.index.hash.field"})
#: numeric WriterConfig settings: key -> (field, scale to the field's unit)
NUMERIC = {
    "hoodie.client.heartbeat.interval_in_ms": ("heartbeat_interval_s", 0.001),
    "hoodie.client.heartbeat.tolerable.misses": ("heartbeat_tolerable_misses", 1),
    "hoodie.write.lock.wait_time_ms": ("lock_timeout_s", 0.001),
    "hoodie.write.lock.num_retries": ("max_conflict_retries", 1),
    "hoodie.write.lock.wait_time_ms_between_retry": ("retry_backoff_s", 0.001),
    "hoodie.parquet.max.file.size": ("target_file_size_bytes", 1),
}
#: Hudi's table settings for change data capture, taken when the data source creates the table
CDC_ENABLED = cdc_table.ENABLED_KEY
CDC_MODE = cdc_table.MODE_KEY
#: Hudi's column stats (with partition stats) in the metadata table, taken when the data source creates the table
COLUMN_STATS = "hoodie.metadata.index.column.stats.enable"
#: Hudi's record index in the metadata table, taken when the data source creates the table
RECORD_INDEX = "hoodie.metadata.record.index.enable"
RECORD_INDEX_GROUPS = "hoodie.metadata.record.index.min.filegroup.count"
WRITE_KEYS = frozenset(
    {"path", CDC_ENABLED, COLUMN_STATS, RECORD_INDEX, RECORD_INDEX_GROUPS, CDC_MODE, TABLE_NAME, RECORD_KEY, PARTITION_FIELD, PRECOMBINE, HIVE_STYLE, POPULATE_META_FIELDS, OPERATION, WRITER_ID, ON_CHECKPOINT_RESET, ZK_URL, ZK_PORT,
     ZK_BASE, ZK_LOCK_KEY, ZK_SESSION_MS, ZK_CONNECT_MS, ZK_AUTH, LOCK_PROVIDER, CONCURRENCY_KEY, *TABLE_LAYOUT_KEYS, *FIXED,
     *NUMERIC}
)
#: options Spark itself adds to a streaming write's options (not ours to check)
SPARK_STREAM_KEYS = frozenset({"checkpointlocation", "queryname"})
DEFAULT_ZK_PORT = "2181"
DEFAULT_ZK_BASE = "/multiwriter"


@dataclass(frozen=True)
class ReadOptions:
    """What one ``spark.read.format("multiwriter")`` query asks for."""

    path: str
    incremental: bool = False
    as_of: str | None = None
    begin: str | None = None
    end: str | None = None
    split_bytes: int = 128 * 1024 * 1024
    parallelism: int = 1
    read_optimized: bool = False  # Merge-on-Read: base files only
    cdc: bool = False  # incremental query in Hudi's CDC format


@dataclass(frozen=True)
class StreamReadOptions:
    """What one ``spark.readStream.format("multiwriter")`` query asks for. ``start`` is
    ``earliest``, ``latest`` or a completion time (records of commits completed after it)."""

    path: str
    start: str = EARLIEST
    split_bytes: int = 128 * 1024 * 1024
    parallelism: int = 1
    cdc: bool = False  # micro-batches of CDC records (op, ts_ms, before, after)


@dataclass(frozen=True)
class WriteOptions:
    """What one ``df.write.format("multiwriter")`` save asks for."""

    path: str
    table: dict[str, Any] = field(default_factory=dict)  # Table.create settings except the schema
    writer: dict[str, Any] = field(default_factory=dict)  # WriterConfig keyword arguments except lock
    lock: LockProvider | None = None

    def writer_config(self) -> WriterConfig:
        return WriterConfig(lock=self.lock, executor="driver", register_writer=False, **self.writer)


def parse_read(options: Mapping[str, str]) -> ReadOptions:
    opts = _lower(options)
    _check_known(opts, READ_KEYS, "read")
    path = _required(opts, ["path"], "read")["path"]
    qt = opts.get(QUERY_TYPE, "snapshot").lower()
    if qt not in QUERY_TYPES:
        raise ConfigError(f"{QUERY_TYPE}={qt!r} must be one of {QUERY_TYPES}")
    incremental = qt == "incremental"
    as_of, begin, end = (_instant(opts, k) for k in (AS_OF, BEGIN, END))
    if incremental and as_of is not None:
        raise ConfigError(f"{AS_OF} is a snapshot option; an incremental query takes {BEGIN} and {END}")
    if not incremental and (begin is not None or end is not None):
        raise ConfigError(f"{BEGIN} and {END} need {QUERY_TYPE}=incremental")
    if begin is not None and set(begin) == {"0"}:
        begin = None  # Hudi's "000": from the beginning
    split = _int(opts, SPLIT_BYTES, 128 * 1024 * 1024, lo=1024)
    cdc = _incremental_format(opts) == "cdc"
    if cdc and not incremental:
        raise ConfigError(f"{INCREMENTAL_FORMAT}=cdc needs {QUERY_TYPE}=incremental")
    return ReadOptions(path, incremental, as_of, begin, end, split, _parallelism(opts), read_optimized=qt == "read_optimized",
                       cdc=cdc)


def _incremental_format(opts: dict[str, str]) -> str:
    fmt = opts.get(INCREMENTAL_FORMAT, INCREMENTAL_FORMATS[0]).strip().lower()
    if fmt not in INCREMENTAL_FORMATS:
        raise ConfigError(f"{INCREMENTAL_FORMAT}={fmt!r} must be one of {INCREMENTAL_FORMATS}")
    return fmt


def is_cdc(options: Mapping[str, str]) -> bool:
    """Does the (batch) query ask for Hudi's CDC format? (For ``DataSource.schema``.)"""
    return _incremental_format(_lower(options)) == "cdc"


def _parallelism(opts: dict[str, str]) -> int:
    return _int(opts, PARALLELISM, os.cpu_count() or 1, lo=1)


def parse_stream_read(options: Mapping[str, str]) -> StreamReadOptions:
    opts = _lower(options)
    _check_known(opts, STREAM_READ_KEYS, "streaming read")
    path = _required(opts, ["path"], "streaming read")["path"]
    raw = opts.get(START_OFFSET.lower(), EARLIEST).strip().lower()
    start = raw if raw in (EARLIEST, LATEST) else _instant(opts, START_OFFSET.lower())
    if start is None or set(start) == {"0"}:
        start = EARLIEST
    split = _int(opts, SPLIT_BYTES, 128 * 1024 * 1024, lo=1024)
    return StreamReadOptions(path, start, split, _parallelism(opts), cdc=_incremental_format(opts) == "cdc")


def schema_path(options: Mapping[str, str]) -> tuple[str, bool]:
    """The table path and whether the query is incremental, for ``DataSource.schema``, which
    Spark calls for batch and streaming reads alike (the reader then checks every key)."""
    opts = _lower(options)
    _check_known(opts, READ_KEYS | STREAM_READ_KEYS, "read")
    path = _required(opts, ["path"], "read")["path"]
    return path, opts.get(QUERY_TYPE, "snapshot").lower() == "incremental"


def parse_write(options: Mapping[str, str], *, table_exists: bool, streaming: bool = False) -> WriteOptions:
    """Parse and check every write option; ``table_exists=False`` also requires what
    creating the table needs (name, record key). A streaming write also requires the writer id
    (:data:`WRITER_ID`): its checkpoint is what makes a replayed micro-batch commit nothing."""
    opts = _lower(options)
    if streaming:
        opts = {k: v for k, v in opts.items() if k not in SPARK_STREAM_KEYS}
    _check_known(opts, WRITE_KEYS, "streaming write" if streaming else "write")
    required = ["path"] + ([] if table_exists else [TABLE_NAME, RECORD_KEY]) + ([WRITER_ID] if streaming else [])
    provider = opts.get(LOCK_PROVIDER, ZK_PROVIDER)
    if provider not in (ZK_PROVIDER, FS_PROVIDER):
        raise ConfigError(f"{LOCK_PROVIDER}={provider!r} is not supported; use {ZK_PROVIDER} or {FS_PROVIDER}")
    if provider == ZK_PROVIDER:
        required.append(ZK_URL)
    _required(opts, required, "write")
    for k, want in FIXED.items():
        if k in opts and opts[k].lower() != want.lower():
            raise ConfigError(f"{k}={opts[k]!r} is not supported; this data source implements {want} only")
    table = _table_settings(opts)
    lock = _lock(opts, provider, table.get("name"))
    return WriteOptions(opts["path"], table, _writer_settings(opts), lock)


def _table_settings(opts: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if TABLE_NAME in opts:
        out["name"] = opts[TABLE_NAME]
    if RECORD_KEY in opts:
        out["record_key"] = _fields(opts[RECORD_KEY], RECORD_KEY)
    if opts.get(PARTITION_FIELD, "").strip():
        out["partition_by"] = _fields(opts[PARTITION_FIELD], PARTITION_FIELD)
    if opts.get(PRECOMBINE, "").strip():
        out["ordering_field"] = opts[PRECOMBINE].strip()
    if HIVE_STYLE in opts:
        out["hive_style_partitioning"] = _bool(opts, HIVE_STYLE)
    if POPULATE_META_FIELDS in opts:
        out["populate_meta_fields"] = _bool(opts, POPULATE_META_FIELDS)
    layout = {k: v for k, v in opts.items() if k in TABLE_LAYOUT_KEYS}
    if layout:  # the table type and bucket index: the same Hudi keys as WriterConfig.from_options
        out.update({k: v for k, v in table_settings_from_options(layout).items()
                    if k in ("table_type", "num_buckets", "bucket_hash_fields")})
    if COLUMN_STATS in opts:
        out["column_stats"] = _bool(opts, COLUMN_STATS)
    if RECORD_INDEX in opts:
        out["record_index"] = _bool(opts, RECORD_INDEX)
    if opts.get(RECORD_INDEX_GROUPS, "").strip():
        try:
            out["record_index_file_groups"] = int(opts[RECORD_INDEX_GROUPS].strip())
        except ValueError:
            raise ConfigError(f"{RECORD_INDEX_GROUPS}={opts[RECORD_INDEX_GROUPS]!r} is not a whole number") from None
    cdc = _cdc_properties(opts)
    if cdc:
        out["properties"] = cdc
    return out


def _cdc_properties(opts: dict[str, str]) -> dict[str, str]:
    """``hoodie.table.cdc.enabled`` and its supplemental logging mode as the table properties Hudi
    writes (``HoodieTableConfig.CDC_ENABLED``, ``CDC_SUPPLEMENTAL_LOGGING_MODE``), checked."""
    out: dict[str, str] = {}
    if CDC_ENABLED in opts:
        out[CDC_ENABLED] = "true" if _bool(opts, CDC_ENABLED) else "false"
    if opts.get(CDC_MODE, "").strip():
        raw = opts[CDC_MODE].strip()
        mode = cdc_table.normal_mode(raw)
        if mode is None:
            raise ConfigError(f"{CDC_MODE}={raw!r} is not a Hudi supplemental logging mode {cdc_table.MODES}")
        out[CDC_MODE] = mode
    return out


def _writer_settings(opts: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {"writer_id": opts.get(WRITER_ID) or f"datasource-{uuid.uuid4().hex[:12]}"}
    if OPERATION in opts:
        out["operation"] = opts[OPERATION].lower()
    if CONCURRENCY_KEY in opts:
        out["concurrency"] = settings_from_options({CONCURRENCY_KEY: opts[CONCURRENCY_KEY]})["concurrency"]
    if ON_CHECKPOINT_RESET in opts:
        out["on_checkpoint_reset"] = opts[ON_CHECKPOINT_RESET].strip().lower()
    for k, (name, scale) in NUMERIC.items():
        if k in opts:
            try:
                value = float(opts[k]) * scale
            except ValueError:
                raise ConfigError(f"{k}={opts[k]!r} is not a number") from None
            out[name] = int(value) if scale == 1 else value
    if "retry_backoff_s" in out:
        out["retry_backoff_max_s"] = max(out["retry_backoff_s"], WriterConfig.retry_backoff_max_s)
    return out


def _lock(opts: dict[str, str], provider: str, table_name: str | None) -> LockProvider:
    from ..lock import FileSystemLock, ZooKeeperLock

    if provider == FS_PROVIDER:
        if "://" in opts["path"] and not opts["path"].startswith("file://"):
            raise ConfigError(f"{FS_PROVIDER} needs a local disk (it relies on an atomic create); "
                              f"{redact(opts['path'])} is not one: use {ZK_PROVIDER}")
        return FileSystemLock()
    key = opts.get(ZK_LOCK_KEY)
    if key is not None and table_name is not None and key != table_name:
        raise ConfigError(
            f"{ZK_LOCK_KEY}={key!r}: the lock node is named after the table ({TABLE_NAME}={table_name!r}) and its "
            "location, so every writer of one table shares it; drop the option or set it to the table name"
        )
    port = opts.get(ZK_PORT, DEFAULT_ZK_PORT)
    hosts = [h.strip() for h in opts[ZK_URL].split(",") if h.strip()]
    connect = ",".join(h if ":" in h else f"{h}:{port}" for h in hosts)
    kw: dict[str, Any] = {}
    if ZK_SESSION_MS in opts:
        kw["session_timeout_s"] = _int(opts, ZK_SESSION_MS, 0, lo=1) / 1000.0
    if ZK_CONNECT_MS in opts:
        kw["connection_timeout_s"] = _int(opts, ZK_CONNECT_MS, 0, lo=1) / 1000.0
    if opts.get(ZK_AUTH):
        kw["auth"] = zk_auth(opts[ZK_AUTH], ZK_AUTH)
    return ZooKeeperLock(connect, opts.get(ZK_BASE, DEFAULT_ZK_BASE), **kw)


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    """Spark hands options with lower-cased keys; Hudi's keys are lower case except for
    none we accept, so compare lower-cased."""
    return {str(k).lower(): str(v) for k, v in options.items()}


def _check_known(opts: dict[str, str], known: frozenset[str], what: str) -> None:
    unknown = sorted(k for k in opts if k not in {x.lower() for x in known})
    if unknown:
        raise ConfigError(f"unknown {what} option(s) {unknown}; the multiwriter data source accepts {sorted(known)}")


def _required(opts: dict[str, str], keys: list[str], what: str) -> dict[str, str]:
    missing = [k for k in keys if not opts.get(k, "").strip()]
    if missing:
        hint = " (path: pass it to load()/save())" if "path" in missing else ""
        raise ConfigError(f"missing required {what} option(s) {missing}{hint}")
    return opts


def _instant(opts: dict[str, str], key: str) -> str | None:
    v = opts.get(key)
    if v is None or not v.strip():
        return None
    v = v.strip()
    digits = "".join(c for c in v if c.isdigit())
    if not v.replace("-", "").replace(":", "").replace(" ", "").replace(".", "").isdigit():
        raise ConfigError(f"{key}={v!r} is not an instant time (yyyyMMddHHmmssSSS or yyyy-MM-dd HH:mm:ss.SSS)")
    return digits.ljust(17, "0") if digits != v else digits


def _int(opts: dict[str, str], key: str, default: int, *, lo: int) -> int:
    if key not in opts:
        return default
    try:
        v = int(opts[key])
    except ValueError:
        raise ConfigError(f"{key}={opts[key]!r} is not an integer") from None
    if v < lo:
        raise ConfigError(f"{key}={v} must be at least {lo}")
    return v


def _bool(opts: dict[str, str], key: str) -> bool:
    v = opts[key].strip().lower()
    if v not in ("true", "false"):
        raise ConfigError(f"{key}={opts[key]!r} must be true or false")
    return v == "true"


def _fields(value: str, key: str) -> tuple[str, ...]:
    out = tuple(f.strip() for f in value.split(",") if f.strip())
    if not out:
        raise ConfigError(f"{key} names no field")
    return out


def checked_write(options: dict[str, Any], *, streaming: bool = False) -> tuple[WriteOptions, Table | None]:
    """The write options checked against the table at their path (None when it does not exist yet)."""
    path = _lower(options).get("path", "")
    try:
        table: Table | None = Table.open(path) if path else None
    except TableNotFoundError:
        table = None
    parsed = parse_write(options, table_exists=table is not None, streaming=streaming)
    if table is not None:
        _check_matches(parsed, table)
    return parsed, table


def _check_matches(parsed: WriteOptions, table: Table) -> None:
    """Options that name table settings must agree with the existing table."""
    c = table.config
    have = {"name": c.name, "record_key": tuple(c.record_key), "partition_by": tuple(c.partition_by),
            "ordering_field": c.ordering_field, "hive_style_partitioning": c.hive_style_partitioning,
            "table_type": c.table_type, "num_buckets": c.num_buckets,
            "bucket_hash_fields": tuple(c.bucket_hash_fields or c.record_key),
            "populate_meta_fields": c.populate_meta_fields,
            "column_stats": metadata_stats.index_version_of(c) is not None,
            "record_index": "record_index" in {n.strip() for n in c.raw.get(metadata_stats.INDEX_PARTITIONS_KEY, "").split(",")}}
    asked = {k: tuple(v) if isinstance(v, list) else v for k, v in parsed.table.items()
             if k not in ("properties", "record_index_file_groups")}  # the groups: a new index's sizing
    diff = {k: (v, have[k]) for k, v in asked.items() if have[k] != v}
    cdc_now = {CDC_ENABLED: "true" if cdc_table.cdc_enabled(c) else "false", CDC_MODE: cdc_table.supplemental_mode(c)}
    diff.update({k: (v, cdc_now[k]) for k, v in parsed.table.get("properties", {}).items() if cdc_now[k] != v})
    if diff:
        shown = ", ".join(f"{k}: asked {a!r}, table has {b!r}" for k, (a, b) in diff.items())
        raise ConfigError(f"the table at {redact(parsed.path)} exists with other settings ({shown})")
