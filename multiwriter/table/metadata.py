"""Timeline metadata: commit, replace, rollback and clean records as Avro container files.

Layouts follow Hudi's ``org.apache.hudi.avro.model`` records so that Java Hudi and hudi-rs read
them; version 6 tables keep commit metadata as JSON, which we read too. Never pickle.
"""
from __future__ import annotations

import io
import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from typing import Any

import fastavro
import pyarrow as pa

from ..errors import MultiWriterError, TableFormatError
from ..format import avro

NS = "org.apache.hudi.avro.model"


def _opt(name: str, typ: Any, default: Any = None) -> dict[str, Any]:
    return {"name": name, "type": ["null", typ], "default": default}


_STR = "string"
_WRITE_STAT_LONGS = ["numWrites", "numDeletes", "numUpdateWrites", "totalWriteBytes", "totalWriteErrors"]

WRITE_STAT_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": f"{NS}.HoodieWriteStat",
    "fields": [
        _opt("fileId", _STR),
        _opt("path", _STR),
        _opt("prevCommit", _STR),
        *[_opt(n, "long") for n in _WRITE_STAT_LONGS],
        _opt("partitionPath", _STR),
        _opt("totalLogRecords", "long"),
        _opt("totalLogFiles", "long"),
        _opt("totalUpdatedRecordsCompacted", "long"),
        _opt("numInserts", "long"),
        _opt("totalLogBlocks", "long"),
        _opt("totalCorruptLogBlock", "long"),
        _opt("totalRollbackBlocks", "long"),
        _opt("fileSizeInBytes", "long"),
        _opt("logVersion", "int"),
        _opt("logOffset", "long"),
        _opt("baseFile", _STR),
        _opt("logFiles", {"type": "array", "items": _STR}),
        _opt("cdcStats", {"type": "map", "values": "long"}),
        _opt("prevBaseFile", _STR),
        _opt("minEventTime", "long"),
        _opt("maxEventTime", "long"),
        _opt(
            "runtimeStats",
            {
                "type": "record",
                "name": f"{NS}.HoodieRuntimeStats",
                "fields": [_opt("totalScanTime", "long"), _opt("totalCreateTime", "long"), _opt("totalUpsertTime", "long")],
            },
        ),
        _opt("totalLogFilesCompacted", "long"),
        _opt("totalLogReadTimeMs", "long"),
        _opt("totalLogSizeCompacted", "long"),
        _opt("tempPath", _STR),
        _opt("numUpdates", "long"),
    ],
}

COMMIT_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": f"{NS}.HoodieCommitMetadata",
    "fields": [
        _opt("partitionToWriteStats", {"type": "map", "values": {"type": "array", "items": WRITE_STAT_SCHEMA}}),
        _opt("compacted", "boolean"),
        _opt("extraMetadata", {"type": "map", "values": _STR}),
        {"name": "version", "type": ["int", "null"], "default": 1},
        _opt("operationType", _STR),
    ],
}

#: ``HoodieReplaceCommitMetadata``: a commit's fields plus the file groups it retires. Field order
#: as Java Hudi writes it in version 8 (``compacted`` included, replaced ids last).
REPLACE_COMMIT_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": f"{NS}.HoodieReplaceCommitMetadata",
    "fields": [
        *[f for f in COMMIT_SCHEMA["fields"]],
        _opt("partitionToReplaceFileIds", {"type": "map", "values": {"type": "array", "items": _STR}}),
    ],
}

INSTANT_INFO_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": f"{NS}.HoodieInstantInfo",
    "fields": [{"name": "commitTime", "type": _STR}, {"name": "action", "type": _STR}],
}

ROLLBACK_PLAN_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": f"{NS}.HoodieRollbackPlan",
    "fields": [
        _opt("instantToRollback", INSTANT_INFO_SCHEMA),
        _opt(
            "RollbackRequests",
            {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": f"{NS}.HoodieRollbackRequest",
                    "fields": [
                        {"name": "partitionPath", "type": _STR},
                        _opt("fileId", _STR),
                        _opt("latestBaseInstant", _STR),
                        {"name": "filesToBeDeleted", "type": {"type": "array", "items": _STR}, "default": []},
                        _opt("logBlocksToBeDeleted", {"type": "map", "values": "long"}),
                    ],
                },
            },
        ),
        {"name": "version", "type": ["int", "null"], "default": 1},
    ],
}

ROLLBACK_METADATA_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": f"{NS}.HoodieRollbackMetadata",
    "fields": [
        {"name": "startRollbackTime", "type": _STR},
        {"name": "timeTakenInMillis", "type": "long"},
        {"name": "totalFilesDeleted", "type": "int"},
        {"name": "commitsRollback", "type": {"type": "array", "items": _STR}},
        {
            "name": "partitionMetadata",
            "type": {
                "type": "map",
                "values": {
                    "type": "record",
                    "name": f"{NS}.HoodieRollbackPartitionMetadata",
                    "fields": [
                        {"name": "partitionPath", "type": _STR},
                        {"name": "successDeleteFiles", "type": {"type": "array", "items": _STR}},
                        {"name": "failedDeleteFiles", "type": {"type": "array", "items": _STR}},
                        _opt("rollbackLogFiles", {"type": "map", "values": "long"}),
                        _opt("writtenLogFiles", {"type": "map", "values": "long"}),
                    ],
                },
            },
        },
        {"name": "version", "type": ["int", "null"], "default": 1},
        {"name": "instantsRollback", "type": {"type": "array", "items": INSTANT_INFO_SCHEMA}, "default": []},
    ],
}

CLEAN_METADATA_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": f"{NS}.HoodieCleanMetadata",
    "fields": [
        {"name": "startCleanTime", "type": _STR},
        {"name": "timeTakenInMillis", "type": "long"},
        {"name": "totalFilesDeleted", "type": "int"},
        {"name": "earliestCommitToRetain", "type": _STR},
        _opt("lastCompletedCommitTimestamp", _STR, None),
        {
            "name": "partitionMetadata",
            "type": {
                "type": "map",
                "values": {
                    "type": "record",
                    "name": f"{NS}.HoodieCleanPartitionMetadata",
                    "fields": [
                        {"name": "partitionPath", "type": _STR},
                        {"name": "policy", "type": _STR},
                        {"name": "deletePathPatterns", "type": {"type": "array", "items": _STR}},
                        {"name": "successDeleteFiles", "type": {"type": "array", "items": _STR}},
                        {"name": "failedDeleteFiles", "type": {"type": "array", "items": _STR}},
                        _opt("isPartitionDeleted", "boolean"),
                    ],
                },
            },
        },
        {"name": "version", "type": ["int", "null"], "default": 1},
    ],
}


SLICE_INFO_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": f"{NS}.HoodieSliceInfo",
    "fields": [
        _opt("dataFilePath", _STR),
        _opt("deltaFilePaths", {"type": "array", "items": _STR}),
        {"name": "fileId", "type": ["null", _STR]},
        _opt("partitionPath", _STR),
        _opt("bootstrapFilePath", _STR),
        {"name": "version", "type": ["int", "null"], "default": 1},
    ],
}

CLUSTERING_GROUP_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": f"{NS}.HoodieClusteringGroup",
    "fields": [
        _opt("slices", {"type": "array", "items": SLICE_INFO_SCHEMA}),
        _opt("metrics", {"type": "map", "values": "double"}),
        {"name": "numOutputFileGroups", "type": ["int", "null"], "default": 1},
        {"name": "version", "type": ["int", "null"], "default": 1},
    ],
}

CLUSTERING_STRATEGY_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": f"{NS}.HoodieClusteringStrategy",
    "fields": [
        _opt("strategyClassName", _STR),
        _opt("strategyParams", {"type": "map", "values": _STR}),
        {"name": "version", "type": ["int", "null"], "default": 1},
    ],
}

CLUSTERING_PLAN_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": f"{NS}.HoodieClusteringPlan",
    "fields": [
        _opt("inputGroups", {"type": "array", "items": CLUSTERING_GROUP_SCHEMA}),
        {"name": "strategy", "type": [CLUSTERING_STRATEGY_SCHEMA, "null"], "default": None},
        _opt("extraMetadata", {"type": "map", "values": _STR}),
        {"name": "version", "type": ["int", "null"], "default": 1},
        _opt("preserveHoodieMetadata", "boolean"),
        _opt("missingSchedulePartitions", {"type": "array", "items": _STR}),
    ],
}

#: ``HoodieRequestedReplaceMetadata``: the body of ``<T>.clustering.requested`` (and of its
#: inflight file), with ``operationType`` "CLUSTER" and the plan.
REQUESTED_REPLACE_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": f"{NS}.HoodieRequestedReplaceMetadata",
    "fields": [
        {"name": "operationType", "type": ["null", _STR], "default": ""},
        {"name": "clusteringPlan", "type": [CLUSTERING_PLAN_SCHEMA, "null"], "default": None},
        _opt("extraMetadata", {"type": "map", "values": _STR}),
        {"name": "version", "type": ["int", "null"], "default": 1},
    ],
}


def _parsed(schema: dict[str, Any], named: dict[str, Any] | None = None) -> Any:
    return fastavro.parse_schema(schema, named_schemas=named if named is not None else {})


_PARSED = {
    "commit": _parsed(COMMIT_SCHEMA, {}),
    "replacecommit": _parsed(REPLACE_COMMIT_SCHEMA, {}),
    "rollback_plan": _parsed(ROLLBACK_PLAN_SCHEMA, {}),
    "rollback": _parsed(ROLLBACK_METADATA_SCHEMA, {}),
    "clean": _parsed(CLEAN_METADATA_SCHEMA, {}),
    "requested_replace": _parsed(REQUESTED_REPLACE_SCHEMA, {}),
}


#: compiled container writers of the kinds written on every commit (the rest use fastavro)
_WRITERS = {kind: w for kind in ("commit",) if (w := avro.ContainerWriter.compile(_PARSED[kind])) is not None}


def encode(kind: str, record: dict[str, Any]) -> bytes:
    writer = _WRITERS.get(kind)
    if writer is not None:
        try:
            return writer.write(record)
        except (avro.Unsupported, TypeError, AttributeError):
            pass  # a value the compiled encoder does not take: fastavro encodes it or says why not
    buf = io.BytesIO()
    fastavro.writer(buf, _PARSED[kind], [record])
    return buf.getvalue()


def decode_records(data: bytes, *, source: str) -> list[dict[str, Any]]:
    """Read the records of an Avro container; a clear error names the file when it is corrupt."""
    try:
        return list(avro.bounded_reader(data))
    except Exception as e:  # fastavro raises many types for corrupt input
        raise TableFormatError(
            f"{source}: not a readable Avro container ({type(e).__name__}: {e}); "
            "the file is corrupt or truncated: restore it from backup or remove the instant by rollback"
        ) from e


#: what a parse of a file of the wrong shape raises (a field of another type, a number out of
#: range, nesting too deep, a bad escape): turned into TableFormatError by :func:`parsing`
PARSE_ERRORS = (AttributeError, TypeError, KeyError, IndexError, ValueError, OverflowError, RecursionError)


@contextmanager
def parsing(source: str, what: str, hint: str = "restore it from backup, or remove it if it is garbage") -> Iterator[None]:
    """Turn any failure while making sense of ``source`` into a TableFormatError naming it: a
    table file written by anyone must never stop a reader or the cleaner with an untyped error."""
    try:
        yield
    except MultiWriterError:
        raise
    except PARSE_ERRORS as e:
        raise TableFormatError(f"{source}: not a valid {what} ({type(e).__name__}: {e}); {hint}") from e


def rollback_target(record: Any) -> str | None:
    """The requested time a rollback record undoes: ``instantToRollback`` of a plan
    (``HoodieRollbackPlan``) or the first of ``commitsRollback`` of a completed rollback; None
    when the record has neither (or they are not of the expected types)."""
    if not isinstance(record, dict):
        return None
    info = record.get("instantToRollback")
    if info:
        t = info.get("commitTime") if isinstance(info, dict) else None
        return t if isinstance(t, str) and t else None
    commits = record.get("commitsRollback")
    t = commits[0] if isinstance(commits, list) and commits else None
    return t if isinstance(t, str) and t else None


# -- commit metadata -------------------------------------------------------------


@dataclass
class WriteStat:
    """What one commit wrote into one file (a ``HoodieWriteStat``)."""

    file_id: str
    path: str
    partition_path: str
    prev_commit: str = "null"
    num_writes: int = 0
    num_inserts: int = 0
    num_update_writes: int = 0
    num_deletes: int = 0
    total_write_bytes: int = 0
    file_size: int = 0
    prev_base_file: str | None = None
    total_write_errors: int = 0
    create_time_ms: int = 0
    log_version: int | None = None  # a log file's stat (HoodieDeltaWriteStat): its version
    #: ... its ``logFiles``: the file it wrote (its ``path``), after the log files of the slice it
    #: appended to when the table logs changes (:meth:`_log_fields`): never all this commit's own
    log_files: tuple[str, ...] = ()
    base_file: str = ""  # ... and its ``baseFile``: that slice's base file name ("" when none)
    compacted_log_files: int = 0  # a compaction's stat: log files merged into the new base
    compacted_log_bytes: int = 0
    #: the CDC log files written beside this file (``HoodieWriteStat.cdcStats``: path from the
    #: table root -> size; ``HoodieCDCLogger.getCDCWriteStats``), as two parallel tuples
    cdc_files: tuple[str, ...] = ()
    cdc_sizes: tuple[int, ...] = ()

    @property
    def cdc_stats(self) -> dict[str, int]:
        """``cdcStats``: Hudi's CDC query reads these files as they are (``AS_IS``) instead of
        inferring the changes from the data files (``HoodieCDCExtractor.parseWriteStat``)."""
        return dict(zip(self.cdc_files, self.cdc_sizes, strict=True))

    @property
    def written(self) -> tuple[str, ...]:
        """Every file this stat names as written: its data file and its CDC log files (what a
        commit keeps of its instant's marked files: :func:`multiwriter.markers.reconcile`)."""
        return (self.path, *self.cdc_files)

    @property
    def is_log(self) -> bool:
        return self.log_version is not None

    @property
    def creates_file_group(self) -> bool:
        """True when this write started a new file group (Hudi's ``prevCommit`` is "null"):
        such a group existed for nobody else, so it cannot conflict on file groups."""
        return self.prev_commit in (None, "", "null")

    def to_row(self) -> dict[str, Any]:
        """This stat as a row of :data:`WRITE_STAT_FIELDS`, every field included."""
        return {f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v for f in fields(self)}

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> WriteStat:
        """The stat :meth:`to_row` (or its JSON) gave."""
        return cls(**{f.name: tuple(row.get(f.name) or ()) if f.type in _TUPLES else row[f.name] for f in fields(cls)})

    def to_avro(self) -> dict[str, Any]:
        return {
            "fileId": self.file_id,
            "path": self.path,
            "prevCommit": self.prev_commit,
            "numWrites": self.num_writes,
            "numDeletes": self.num_deletes,
            "numUpdateWrites": self.num_update_writes,
            "totalWriteBytes": self.total_write_bytes,
            "totalWriteErrors": self.total_write_errors,
            "partitionPath": self.partition_path,
            "totalLogRecords": 0,
            "totalUpdatedRecordsCompacted": 0,
            "numInserts": self.num_inserts,
            "totalLogBlocks": 0,
            "totalCorruptLogBlock": 0,
            "totalRollbackBlocks": 0,
            "fileSizeInBytes": self.file_size,
            "prevBaseFile": self.prev_base_file,
            "runtimeStats": {"totalScanTime": 0, "totalCreateTime": self.create_time_ms, "totalUpsertTime": 0},
            "totalLogFilesCompacted": self.compacted_log_files,
            "totalLogReadTimeMs": 0,
            "totalLogSizeCompacted": self.compacted_log_bytes,
            "numUpdates": 0,
            **self._log_fields(),
            **({"cdcStats": self.cdc_stats} if self.cdc_files else {}),
        }

    def _log_fields(self) -> dict[str, Any]:
        """Hudi's delta write stat fields, as its append handle sets them on table versions 8
        and 9 (``HoodieAppendHandle.populateWriteStatAndFetchFileSlice``, then
        ``updateWriteStat`` adds the file written to ``logFiles``): on a table without
        ``hoodie.table.cdc.enabled``, ``prevCommit`` is the deltacommit itself, ``baseFile``
        empty and ``logFiles`` the one file written; with it, ``prevCommit`` is the base
        instant of the group's latest slice, ``baseFile`` its base file name ("" for a log-only
        slice) and ``logFiles`` its log files (newest first, as ``FileSlice`` orders them) and
        then the file written, so that Hudi's CDC query finds the slice before the commit
        (``HoodieCDCExtractor``: ``LOG_FILE``). The file this stat wrote is its ``path``."""
        if self.log_version is None:
            return {}
        return {"logVersion": self.log_version, "logOffset": 0, "baseFile": self.base_file,
                "logFiles": list(self.log_files)}

    @classmethod
    def from_avro(cls, d: dict[str, Any], partition: str) -> WriteStat:
        """A stat from its Avro (or version-6 JSON) record; TypeError names a field of another
        type (JSON metadata carries any types)."""
        if not isinstance(d, dict):
            raise TypeError(f"a write stat is a {type(d).__name__}, not a record")
        part = _text(d, "partitionPath")
        log_files = d.get("logFiles") or ()
        if not isinstance(log_files, list | tuple) or not all(isinstance(n, str) for n in log_files):
            raise TypeError(f"logFiles={log_files!r:.80} is not a list of file names")
        cdc = _cdc_stats(d.get("cdcStats"))
        return cls(
            file_id=_text(d, "fileId") or "",
            path=_text(d, "path") or "",
            partition_path=part if part is not None else partition,
            prev_commit=_text(d, "prevCommit") or "null",
            num_writes=_count(d, "numWrites"),
            num_inserts=_count(d, "numInserts"),
            num_update_writes=_count(d, "numUpdateWrites"),
            num_deletes=_count(d, "numDeletes"),
            total_write_bytes=_count(d, "totalWriteBytes"),
            file_size=_count(d, "fileSizeInBytes"),
            prev_base_file=_text(d, "prevBaseFile"),
            total_write_errors=_count(d, "totalWriteErrors"),
            log_version=_count(d, "logVersion") if d.get("logVersion") is not None else None,
            log_files=tuple(log_files),
            base_file=_text(d, "baseFile") or "",
            compacted_log_files=_count(d, "totalLogFilesCompacted"),
            compacted_log_bytes=_count(d, "totalLogSizeCompacted"),
            cdc_files=tuple(cdc),
            cdc_sizes=tuple(cdc.values()),
        )

    def to_json(self) -> dict[str, Any]:
        return self.to_avro()


_NAMES = "tuple[str, ...]"  # the annotation of a list of file names (annotations are strings here)
_SIZES = "tuple[int, ...]"
_TUPLES = (_NAMES, _SIZES)
_ARROW_TYPES = {"str": pa.string(), "str | None": pa.string(), "int": pa.int64(), "int | None": pa.int64(),
                _NAMES: pa.list_(pa.string()), _SIZES: pa.list_(pa.int64())}


def _cdc_stats(raw: Any) -> dict[str, int]:
    """``cdcStats`` of a write stat: a map of path to size, or null."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping) or not all(isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
                                               for k, v in raw.items()):
        raise TypeError(f"cdcStats={raw!r:.80} is not a map of paths to sizes")
    return dict(raw)


def _write_stat_fields() -> list[pa.Field]:
    out = []
    for f in fields(WriteStat):
        if f.type not in _ARROW_TYPES:
            raise TypeError(f"WriteStat.{f.name}: no Arrow type for {f.type!r}; add it to _ARROW_TYPES")
        out.append(pa.field(f.name, _ARROW_TYPES[f.type]))
    return out


#: every field of :class:`WriteStat` as an Arrow column, in order: the one schema of the write
#: stats Spark tasks hand back to the driver (:meth:`WriteStat.to_row`, :meth:`WriteStat.from_row`),
#: derived from the dataclass so that no field (a log file's version) can be left out
WRITE_STAT_FIELDS: list[pa.Field] = _write_stat_fields()

_RUNTIME_STATS = f"{NS}.HoodieRuntimeStats"


def _stats_union(p2s: dict[str, list[WriteStat]]) -> tuple[str, dict[str, list[dict[str, Any]]]]:
    """The write stats as Avro values of their ``["null", ...]`` unions, in fastavro's tuple
    notation (branch, value): untagged, fastavro picks a union's branch by validating the value
    against it, which here means validating every stat (half the time of encoding a commit).
    The bytes are the same."""
    out = {}
    for p, ss in p2s.items():
        recs = []
        for s in ss:
            r = s.to_avro()
            r["runtimeStats"] = (_RUNTIME_STATS, r["runtimeStats"])
            recs.append(r)
        out[p] = recs
    return ("map", out)


@dataclass
class CommitMetadata:
    """A ``HoodieCommitMetadata``: every file a commit wrote, plus string key/values."""

    partition_to_write_stats: dict[str, list[WriteStat]] = field(default_factory=dict)
    extra_metadata: dict[str, str] = field(default_factory=dict)
    operation_type: str = "UPSERT"
    compacted: bool = False

    def all_stats(self) -> list[WriteStat]:
        return [s for stats in self.partition_to_write_stats.values() for s in stats]

    def file_groups(self) -> set[tuple[str, str]]:
        """(partition, fileId) pairs touched; the unit of conflict."""
        return {(s.partition_path, s.file_id) for s in self.all_stats() if s.file_id}

    def to_bytes(self) -> bytes:
        return encode(
            "commit",
            {
                "partitionToWriteStats": _stats_union(self.partition_to_write_stats),
                "compacted": self.compacted,
                "extraMetadata": ("map", dict(self.extra_metadata)),
                "version": 1,
                "operationType": self.operation_type,
            },
        )

    def replaced_file_groups(self) -> set[tuple[str, str]]:
        """(partition, fileId) pairs this commit retires; none for a plain commit."""
        return set()

    @classmethod
    def from_bytes(cls, data: bytes, *, source: str) -> CommitMetadata:
        rec = _commit_record(data, source=source)
        if rec is None:
            return cls()
        with parsing(source, "commit metadata", "restore it from backup"):
            return cls(**_commit_fields(rec))


@dataclass
class ReplaceCommitMetadata(CommitMetadata):
    """A ``HoodieReplaceCommitMetadata``: a commit that also retires whole file groups.

    Written by INSERT OVERWRITE, DELETE PARTITION and clustering. Once the instant completes, the
    groups in ``partition_to_replace_file_ids`` are no longer part of the table for any reader
    (snapshot, time travel at or after it, incremental), even though their files stay on storage
    until the cleaner's retention window has passed.
    """

    partition_to_replace_file_ids: dict[str, list[str]] = field(default_factory=dict)
    operation_type: str = "INSERT_OVERWRITE"

    def replaced_file_groups(self) -> set[tuple[str, str]]:
        return {(p, f) for p, ids in self.partition_to_replace_file_ids.items() for f in ids if f}

    def file_groups(self) -> set[tuple[str, str]]:
        """Written and retired groups alike: a concurrent write to either conflicts."""
        return super().file_groups() | self.replaced_file_groups()

    def to_bytes(self) -> bytes:
        return encode(
            "replacecommit",
            {
                "partitionToWriteStats": _stats_union(self.partition_to_write_stats),
                "compacted": self.compacted,
                "extraMetadata": ("map", dict(self.extra_metadata)),
                "version": 1,
                "operationType": self.operation_type,
                "partitionToReplaceFileIds": {p: list(ids) for p, ids in self.partition_to_replace_file_ids.items()},
            },
        )

    @classmethod
    def from_bytes(cls, data: bytes, *, source: str) -> ReplaceCommitMetadata:
        rec = _commit_record(data, source=source)
        if rec is None:
            return cls()
        with parsing(source, "replace commit metadata", "restore it from backup"):
            replaced = rec.get("partitionToReplaceFileIds") or {}
            return cls(
                **_commit_fields(rec),
                partition_to_replace_file_ids={p: [str(f) for f in ids or []] for p, ids in replaced.items()},
            )


def decode_commit_metadata(action: str, data: bytes, *, source: str) -> CommitMetadata:
    """The metadata of a completed write instant: a replace commit's carries its retired groups."""
    if action == "replacecommit":
        return ReplaceCommitMetadata.from_bytes(data, source=source)
    return CommitMetadata.from_bytes(data, source=source)


def _text(d: dict[str, Any], key: str) -> str | None:
    v = d.get(key)
    if v is not None and not isinstance(v, str):
        raise TypeError(f"{key}={v!r:.80} is not a string")
    return v


#: the largest count a write stat may record (Avro's long)
_MAX_COUNT = (1 << 63) - 1


def _count(d: dict[str, Any], key: str) -> int:
    v = d.get(key)
    if v is None:
        return 0
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int) or not -_MAX_COUNT <= v <= _MAX_COUNT:
        raise TypeError(f"{key}={v!r:.80} is not a whole number within Avro's long")
    return v


def _commit_record(data: bytes, *, source: str) -> dict[str, Any] | None:
    """The one record of a commit file: Avro (version 8) or JSON (version 6); None when empty."""
    if not data.strip():
        return None
    if data.lstrip()[:1] == b"{":
        try:
            rec = json.loads(data)
        except (ValueError, RecursionError) as e:
            raise TableFormatError(f"{source}: commit metadata is neither Avro nor valid JSON ({e})") from e
        if not isinstance(rec, dict):
            raise TableFormatError(f"{source}: commit metadata is JSON but not an object")
        return rec
    recs = decode_records(data, source=source)
    if len(recs) != 1 or not isinstance(recs[0], dict):
        raise TableFormatError(f"{source}: expected one commit metadata record, found {len(recs)} values")
    return recs[0]


def _commit_fields(rec: dict[str, Any]) -> dict[str, Any]:
    p2s = rec.get("partitionToWriteStats") or {}
    return {
        "partition_to_write_stats": {p: [WriteStat.from_avro(s, p) for s in ss or []] for p, ss in p2s.items()},
        "extra_metadata": dict(rec.get("extraMetadata") or {}),
        "operation_type": rec.get("operationType") or "UNKNOWN",
        "compacted": bool(rec.get("compacted") or False),
    }


def named_files(stats: list[WriteStat]) -> set[str]:
    """The base and log file names a list of write statistics names as written: what a
    completed commit vouches for, as the archive, the orphan sweep and the readers' view read
    it. Each stat's ``path`` only: every file Hudi's append handle writes is the ``path`` of a
    stat of its own (a rolled-over log file starts a new stat: ``updateWriteStatus``), while a
    log stat's ``logFiles`` also names earlier commits' log files of its slice on a table that
    logs changes (:meth:`WriteStat._log_fields`)."""
    return {st.path.rsplit("/", 1)[-1] for st in stats if st.path}
