"""The compaction plan of Merge-on-Read tables: the body of ``<T>.compaction.requested``.

Scheduling a compaction writes a ``HoodieCompactionPlan`` (an Avro container file of one record)
that names, per file group, the file slice to merge: its base file and log files as of the
scheduling instant. Whoever executes the compaction later (we, or Java Hudi) must merge exactly
those files, so the plan is the contract between scheduler and executor, and Java Hudi and hudi-rs
must read what we write. The layout is the one Hudi 1.x writes for table version 8 (plan version 2:
file *names*, not paths); the Spark-written fixture ``mor_v8_trips_8i3u1d`` holds one to compare with.
"""
from __future__ import annotations

import io
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import fastavro

from ..errors import TableFormatError
from ..format import avro
from ..format.instant import METADATA_BOOTSTRAP_TIME
from ..format.log_file import parse_log_file
from .metadata import NS, decode_records, parsing

#: plan version 2 keeps file names; version 1 kept full paths (Hudi migrates those on read)
LATEST_PLAN_VERSION = 2

#: keys of an operation's metrics, as ``CompactionStrategy.captureMetrics`` names them
TOTAL_IO_READ_MB = "TOTAL_IO_READ_MB"
TOTAL_IO_WRITE_MB = "TOTAL_IO_WRITE_MB"
TOTAL_IO_MB = "TOTAL_IO_MB"
TOTAL_LOG_FILES_SIZE = "TOTAL_LOG_FILES_SIZE"
TOTAL_LOG_FILES = "TOTAL_LOG_FILES"

#: Hudi's default of ``hoodie.parquet.max.file.size``: the write estimate of a slice without base file
DEFAULT_MAX_BASE_FILE_SIZE = 120 * 1024 * 1024

_MB = 1024 * 1024


def _opt(name: str, typ: Any, default: Any = None) -> dict[str, Any]:
    return {"name": name, "type": ["null", typ], "default": default}


def _req(name: str, typ: Any) -> dict[str, Any]:
    """A nullable field without default (Hudi declares fileId and baseInstantTime so)."""
    return {"name": name, "type": ["null", typ]}


_STR = "string"

#: ``HoodieCompactionOperation``: one file slice to merge. Field order, unions and defaults are those
#: of the schema embedded in Spark-written plans (Avro binary data depends on them).
OPERATION_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": f"{NS}.HoodieCompactionOperation",
    "fields": [
        _req("baseInstantTime", _STR),
        _opt("deltaFilePaths", {"type": "array", "items": _STR}),
        _opt("dataFilePath", _STR),
        _req("fileId", _STR),
        _opt("partitionPath", _STR),
        _opt("metrics", {"type": "map", "values": "double"}),
        _opt("bootstrapFilePath", _STR),
    ],
}

#: ``HoodieCompactionStrategy``: only log compaction plans set it; we always write null
STRATEGY_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": f"{NS}.HoodieCompactionStrategy",
    "fields": [
        _opt("compactorClassName", _STR),
        _opt("strategyParams", {"type": "map", "values": _STR}),
        {"name": "version", "type": ["int", "null"], "default": 1},
    ],
}

#: ``HoodieCompactionPlan``: the record of ``<T>.compaction.requested`` (and of its inflight file)
PLAN_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": f"{NS}.HoodieCompactionPlan",
    "fields": [
        _opt("operations", {"type": "array", "items": OPERATION_SCHEMA}),
        _opt("extraMetadata", {"type": "map", "values": _STR}),
        {"name": "version", "type": ["int", "null"], "default": 1},
        _opt("strategy", STRATEGY_SCHEMA),
        {"name": "preserveHoodieMetadata", "type": ["boolean", "null"], "default": False},
        _opt("missingSchedulePartitions", {"type": "array", "items": _STR}),
    ],
}

_PARSED = fastavro.parse_schema(PLAN_SCHEMA, named_schemas={})
#: the compiled encoder does not do doubles (the metrics) today; then fastavro writes the plan
_WRITER = avro.ContainerWriter.compile(_PARSED)


def compaction_metrics(
    base_file_size: int | None,
    log_file_sizes: Sequence[int],
    *,
    max_base_file_size: int = DEFAULT_MAX_BASE_FILE_SIZE,
) -> dict[str, float]:
    """The metrics Hudi's default compaction strategy records per operation.

    Strategies that order or bound compactions by IO read these, so we fill them the same way:
    whole mebibytes (rounded down) read (base file plus logs) and written (the base file's size,
    or ``max_base_file_size`` when the slice has no base file), their sum, the total log size in
    bytes and the number of logs. A negative size means "unknown" and counts as nothing, as in Hudi.
    The key order is the one Java's HashMap gives these keys, so our plans list them as Hudi's do.
    """
    logs_size = sum(s for s in log_file_sizes if s >= 0)
    base = base_file_size if base_file_size is not None and base_file_size >= 0 else 0
    read_mb = (base + logs_size) // _MB
    write_mb = (base_file_size if base_file_size is not None else max_base_file_size) // _MB
    return {
        TOTAL_LOG_FILES: float(len(log_file_sizes)),
        TOTAL_IO_MB: float(read_mb + write_mb),
        TOTAL_IO_READ_MB: float(read_mb),
        TOTAL_LOG_FILES_SIZE: float(logs_size),
        TOTAL_IO_WRITE_MB: float(write_mb),
    }


@dataclass(frozen=True)
class CompactionOperation:
    """One file slice to merge into a new base file: names only, relative to ``partition_path``.

    The names are checked against ``file_id`` because an executor that merged a foreign file
    would silently corrupt the group.
    """

    partition_path: str
    file_id: str
    base_instant_time: str
    data_file_name: str | None
    delta_file_names: tuple[str, ...]
    metrics: dict[str, float] = field(default_factory=dict)
    #: the source file of a skeleton base file (a METADATA_ONLY bootstrap's), by full path, as
    #: Hudi's planner names it (``CompactionOperation.bootstrapFilePath``); readers stitch the two
    bootstrap_file_path: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "delta_file_names", tuple(self.delta_file_names))
        object.__setattr__(self, "metrics", {k: float(v) for k, v in self.metrics.items()})
        if not self.file_id or "/" in self.file_id:
            raise ValueError(f"invalid file id {self.file_id!r}")
        if not self.base_instant_time:
            raise ValueError(f"file group {self.file_id}: empty base instant time")
        name = self.data_file_name
        if name is not None and ("/" in name or not name.startswith(f"{self.file_id}_")):
            raise ValueError(f"{name!r} is not a base file name of file group {self.file_id}")
        for log in self.delta_file_names:
            parsed = parse_log_file(log)
            if parsed is None or parsed.file_id != self.file_id:
                raise ValueError(f"{log!r} is not a log file name of file group {self.file_id}")
        if self.data_file_name is None and not self.delta_file_names:
            raise ValueError(f"file group {self.file_id}: a slice without base file needs log files")
        if self.bootstrap_file_path and self.base_instant_time != METADATA_BOOTSTRAP_TIME:
            raise ValueError(f"file group {self.file_id}: a bootstrap file for base instant {self.base_instant_time}; "
                             f"only a skeleton base file (instant {METADATA_BOOTSTRAP_TIME}) has one")

    @classmethod
    def for_slice(
        cls,
        partition_path: str,
        file_id: str,
        base_instant_time: str,
        base_file: tuple[str, int] | None,
        log_files: Sequence[tuple[str, int]],
        *,
        max_base_file_size: int = DEFAULT_MAX_BASE_FILE_SIZE,
        bootstrap_file_path: str | None = None,
    ) -> CompactionOperation:
        """The operation of a file slice given as (name, size in bytes) of its base and log files,
        with the metrics Hudi computes from those sizes (``bootstrap_file_path``: a skeleton base
        file's source)."""
        return cls(
            partition_path=partition_path,
            file_id=file_id,
            base_instant_time=base_instant_time,
            data_file_name=base_file[0] if base_file is not None else None,
            delta_file_names=tuple(n for n, _ in log_files),
            metrics=compaction_metrics(
                base_file[1] if base_file is not None else None,
                [s for _, s in log_files],
                max_base_file_size=max_base_file_size,
            ),
            bootstrap_file_path=bootstrap_file_path or None,
        )

    def to_avro(self) -> dict[str, Any]:
        return {
            "baseInstantTime": self.base_instant_time,
            "deltaFilePaths": list(self.delta_file_names),
            "dataFilePath": self.data_file_name,
            "fileId": self.file_id,
            "partitionPath": self.partition_path,
            "metrics": dict(self.metrics),
            "bootstrapFilePath": self.bootstrap_file_path,
        }


@dataclass(frozen=True)
class CompactionPlan:
    """The file slices one compaction merges, with free-form metadata of the scheduler."""

    operations: tuple[CompactionOperation, ...]
    extra_metadata: dict[str, str] = field(default_factory=dict)
    version: int = LATEST_PLAN_VERSION

    def __post_init__(self) -> None:
        object.__setattr__(self, "operations", tuple(self.operations))
        object.__setattr__(self, "extra_metadata", dict(self.extra_metadata))
        if self.version != LATEST_PLAN_VERSION:
            # the operations hold names, which only version 2 means
            raise ValueError(f"compaction plan version {self.version}: only {LATEST_PLAN_VERSION} is written")
        seen: set[tuple[str, str]] = set()
        for op in self.operations:
            group = (op.partition_path, op.file_id)
            if group in seen:
                raise ValueError(f"file group {op.file_id} of {op.partition_path!r} is planned twice")
            seen.add(group)

    def to_avro(self) -> dict[str, Any]:
        return {
            "operations": [op.to_avro() for op in self.operations],
            "extraMetadata": dict(self.extra_metadata),
            "version": self.version,
            "strategy": None,
            "preserveHoodieMetadata": False,
            "missingSchedulePartitions": [],
        }


def encode_plan(plan: CompactionPlan) -> bytes:
    """The bytes of ``<T>.compaction.requested``: an Avro container file of one plan record."""
    record = plan.to_avro()
    if _WRITER is not None:
        return _WRITER.write(record)
    buf = io.BytesIO()
    fastavro.writer(buf, _PARSED, [record])
    return buf.getvalue()


def decode_plan(data: bytes, *, source: str) -> CompactionPlan:
    """The plan in ``data`` (the file ``source``), version-1 plans (paths) migrated to names.

    Raises TableFormatError naming ``source`` when the file is no readable compaction plan, or
    when it asks for what we cannot execute. The strategy, which only log
    compaction uses, and the other plan-level fields are not kept.
    """
    records = decode_records(data, source=source)
    if len(records) != 1 or not isinstance(records[0], dict):
        raise TableFormatError(f"{source}: expected one compaction plan record, found {len(records)}")
    rec = records[0]
    if not {"operations", "extraMetadata", "version"} <= rec.keys():
        raise TableFormatError(f"{source}: not a compaction plan (fields {sorted(rec)})")
    version = rec.get("version")
    if version not in (1, LATEST_PLAN_VERSION):
        raise TableFormatError(f"{source}: unsupported compaction plan version {version}")
    with parsing(source, "compaction plan"):
        operations = tuple(_operation(op, version, source) for op in rec.get("operations") or ())
        return CompactionPlan(operations=operations, extra_metadata=dict(rec.get("extraMetadata") or {}))


def _operation(op: Mapping[str, Any], version: int, source: str) -> CompactionOperation:
    partition, file_id, base_instant = op.get("partitionPath"), op.get("fileId"), op.get("baseInstantTime")
    if partition is None or file_id is None or base_instant is None:
        raise TableFormatError(f"{source}: a compaction operation lacks its partition, file id or base instant")

    def name(p: str) -> str:
        return posixpath.basename(p) if version == 1 else p

    data_file = op.get("dataFilePath")
    return CompactionOperation(
        partition_path=partition,
        file_id=file_id,
        base_instant_time=base_instant,
        data_file_name=name(data_file) if data_file else None,
        delta_file_names=tuple(name(p) for p in op.get("deltaFilePaths") or ()),
        metrics=dict(op.get("metrics") or {}),
        bootstrap_file_path=op.get("bootstrapFilePath") or None,
    )
