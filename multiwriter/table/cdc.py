"""Change data capture by inference: per commit and changed key, how the record changed.

Hudi's CDC query (``hoodie.datasource.query.incremental.format=cdc``) returns one record per
key and commit: ``op`` (``i``, ``u``, ``d``: ``HoodieCDCOperation``), ``ts_ms`` (the commit's
requested instant time: ``HoodieCDCFileSplit`` carries the instant's timestamp and
``CDCFileGroupIterator`` writes it), ``before`` and ``after`` (column names:
``HoodieCDCUtils.CDC_OPERATION_TYPE``, ``CDC_COMMIT_TIMESTAMP``, ``CDC_BEFORE_IMAGE``,
``CDC_AFTER_IMAGE``). For commits written without CDC log files Hudi's ``HoodieCDCExtractor``
infers the changes from the data files; this module does the same, per commit and file group,
comparing the group's slice just before the commit completed with the slice it left:

* a data commit's group (``BASE_FILE_INSERT``, ``BASE_FILE_DELETE``, ``LOG_FILE``): keys only in
  the new slice are inserts, keys only in the old one deletes, keys in both that the commit
  wrote (``_hoodie_commit_time`` is its instant) updates, with the old row as ``before``. On
  Merge-on-Read both slices are merged by :func:`~.merged_slice.read_slice` (the old one with
  the logs completed before the commit: the ``logs=`` subset), never by a merge of their own;
* a group a replace commit retired (``REPLACE_COMMIT``): every row of its last slice is a
  delete; an insert-overwrite's new groups are inserts (a key it both retired and rewrote is a
  ``d`` and an ``i`` of one commit, as Hudi's extractor splits them per file group);
* table services (compaction, clustering: ``WriteOperationType.isDataChange`` is false) change
  nothing and are skipped.

Commits are taken by completion time in (start, end], as incremental reads take them, so a
change's ``before`` is the row as the commits completed before it left it. Deciding which
files form those slices is :mod:`.view`'s job; this module only plans which slices to compare
and compares them.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InstantNotRetainedError, TableFormatError
from ..format import cdc_log
from ..format import instant as inst
from ..format.instant import Instant
from ..format.schema import META_COLUMNS, data_schema
from ..storage import Storage
from .files import FileGroup, FileSlice, LogFile
from .merge_rule import RECORD_KEY
from .properties import CDC_ENABLED_KEY as ENABLED_KEY
from .properties import TableConfig
from .view import TimelineView

#: column names of a CDC record (``HoodieCDCUtils``)
OP, TS, BEFORE, AFTER = "op", "ts_ms", "before", "after"
#: ``HoodieCDCOperation`` values
INSERT, UPDATE, DELETE = cdc_log.INSERT_OP, cdc_log.UPDATE_OP, cdc_log.DELETE_OP

MODE_KEY = "hoodie.table.cdc.supplemental.logging.mode"
#: ``HoodieCDCSupplementalLoggingMode`` (Hudi 0.13+ names; the older ``cdc_*`` values map onto them)
MODES = cdc_log.MODES
_LEGACY_MODES = {"cdc_op_key": "OP_KEY_ONLY", "cdc_data_before": "DATA_BEFORE", "cdc_data_before_after": "DATA_BEFORE_AFTER"}
_COMMIT_TIME = META_COLUMNS[0]
CDC_LOG_SUFFIX = cdc_log.CDC_SUFFIX


class CdcLogFileError(TableFormatError):
    """A CDC log file a commit's ``cdcStats`` names is missing: Hudi's reader takes the
    commit's changes from it as they are (``HoodieCDCInferenceCase.AS_IS``), so they cannot be
    told."""


def cdc_enabled(config: TableConfig) -> bool:
    """``hoodie.table.cdc.enabled=true`` (Java's ``Boolean.parseBoolean``): Hudi's writers log
    each commit's changes to CDC log files (:mod:`multiwriter.format.cdc_log`)."""
    return (config.raw.get(ENABLED_KEY) or "").strip().lower() == "true"


def normal_mode(raw: str) -> str | None:
    """A supplemental logging mode's Hudi 0.13+ name (older ``cdc_*`` names mapped), None when
    ``raw`` names none."""
    mode = _LEGACY_MODES.get(raw.strip().lower(), raw.strip().upper())
    return mode if mode in MODES else None


def supplemental_mode(config: TableConfig) -> str:
    """The table's supplemental logging mode (``DATA_BEFORE_AFTER`` by default, as Hudi's
    ``HoodieTableConfig.CDC_SUPPLEMENTAL_LOGGING_MODE``). It says what Hudi's writer puts into
    CDC log files; Hudi's CDC query returns the full record (op, ts_ms, before, after) in every
    mode, computing the images the log does not hold from the file slices."""
    raw = (config.raw.get(MODE_KEY) or MODES[-1]).strip()
    mode = normal_mode(raw)
    if mode is None:
        raise TableFormatError(f"{MODE_KEY}={raw!r} in hoodie.properties is not a Hudi supplemental logging mode "
                               f"{MODES}; fix the table property")
    return mode


def cdc_schema(schema: pa.Schema) -> pa.Schema:
    """The schema of CDC records of a table with data columns ``schema`` (meta columns dropped):
    the images are structs of the data columns."""
    image = pa.struct(list(data_schema(schema)))
    return pa.schema([pa.field(OP, pa.string()), pa.field(TS, pa.string()), pa.field(BEFORE, image),
                      pa.field(AFTER, image)])


@dataclass(frozen=True)
class GroupChange:
    """One file group one commit changed: its slice as the commits completed before it left
    it (None: the group did not exist) and after it (None: the commit retired the group)."""

    commit: Instant
    group: FileGroup
    before: FileSlice | None
    after: FileSlice | None
    #: the CDC log files the commit's write stat names for the group (``cdcStats``): read as
    #: they are (``AS_IS``) instead of inferring the changes
    cdc_files: tuple[str, ...] = ()


@dataclass(frozen=True)
class CdcPlan:
    """The group changes of a range, in commit completion order, then by group."""

    changes: tuple[GroupChange, ...]
    commits: tuple[Instant, ...]


def plan(view: TimelineView, bases: list[FileSlice], logs: list[LogFile], start: str | None,
         end: str | None) -> CdcPlan:
    """The group changes of the data commits completed in (start, end]. Raises
    :class:`InstantNotRetainedError` when the cleaner deleted a slice one of them needs."""
    v = view.range_view(start)
    writes = v.writes
    if writes and _within(_completion(writes[0]), start, end) and v.has_history:
        v = v.with_history()  # the first active write's "before" is an archived write's slice
        writes = v.writes
    changes: list[GroupChange] = []
    missing: list[tuple[Instant, FileGroup, str]] = []
    commits: list[Instant] = []
    for n, c in enumerate(writes):
        done = _completion(c)
        if not _within(done, start, end) or v.is_table_service(c):
            continue
        commits.append(c)
        prev = _completion(writes[n - 1]) if n else None
        meta = v.commit_metadata(c)
        retired = meta.replaced_file_groups() if c.action == inst.REPLACE_COMMIT else set()
        touched = {(s.partition_path, s.file_id) for s in meta.all_stats() if s.file_id}
        logged: dict[FileGroup, tuple[str, ...]] = {}
        for s in meta.all_stats():
            if s.file_id and s.cdc_files:
                logged[(s.partition_path, s.file_id)] = logged.get((s.partition_path, s.file_id), ()) + s.cdc_files
        before = v.slices_by_completion(bases, logs, prev) if prev is not None else {}
        after = v.slices_by_completion(bases, logs, done)
        groups = sorted(touched | retired)
        if prev is not None:
            missing += [(c, g, p) for g, _, p in v.missing_files(before, groups, prev)]
        missing += [(c, g, p) for g, _, p in v.missing_files(after, sorted(touched - retired), done)]
        changes += [GroupChange(c, g, before.get(g), None if g in retired and g not in touched else after.get(g),
                                logged.get(g, ())) for g in groups]
    if missing:
        _refuse(v, missing)
    return CdcPlan(tuple(changes), tuple(commits))


def _refuse(view: TimelineView, missing: list[tuple[Instant, FileGroup, str]]) -> None:
    c, g, path = max(missing, key=lambda m: _completion(m[0]))
    earliest = _completion(c)
    raise InstantNotRetainedError(
        f"CDC read of {view.timeline.storage.uri} needs {path} (file group {g[1]} in partition {g[0]!r}) to tell "
        f"what commit {c.requested_time} changed, and the cleaner has deleted it; {len(missing)} such file(s). "
        f"Ranges starting at {earliest} or later are still exact; rows changed before are only in a snapshot read",
        earliest=earliest,
    )


def read_cdc_file(storage: Storage, path: str) -> pa.Table:
    """The records of a CDC log file a write stat names (``cdcStats``, a path from the table
    root); a missing file is refused (:class:`CdcLogFileError`) naming it."""
    try:
        data = storage.read_bytes(path)
    except FileNotFoundError as e:
        raise CdcLogFileError(
            f"{path} is named by a commit's cdcStats but is not in the table; Hudi's CDC query reads the changes "
            "from it, so they cannot be told: restore the file, or read a range without that commit") from e
    return cdc_log.read_cdc_records(data, source=path)


SliceReader = Callable[[FileSlice, tuple[LogFile, ...] | None], pa.Table]
CdcFileReader = Callable[[str], pa.Table]


def changes(plan_: CdcPlan, schema: pa.Schema, read: SliceReader, read_log: CdcFileReader | None = None,
            mode: str = MODES[-1]) -> pa.Table:
    """The CDC records of ``plan_`` in :func:`cdc_schema`; ``schema``: the read schema (meta
    columns first); ``read(slice, logs)``: a slice's current rows (``logs``: a subset of its
    logs, None for all); ``read_log(path)``: a CDC log file's records (:func:`read_cdc_file`),
    in the table's supplemental logging ``mode``. A slice read for one commit's ``after`` is
    the next one's ``before``: each is read once."""
    out_schema = cdc_schema(schema)
    cache: dict[tuple[str, str, tuple[str, ...]], pa.Table] = {}

    def rows(fs: FileSlice | None, logs: tuple[LogFile, ...] | None = None) -> pa.Table:
        if fs is None:
            return schema.empty_table()
        use = fs.logs if logs is None else logs
        k = (fs.path, fs.instant_time, tuple(lf.name for lf in use))
        if k not in cache:
            cache[k] = read(fs, logs)
        return cache[k]

    parts = []
    for ch in plan_.changes:
        after = rows(ch.after)
        if ch.before is not None and ch.after is not None and _same_base(ch.before, ch.after):
            before = rows(ch.after, ch.before.logs)  # the slice with the logs completed before the commit
        else:
            before = rows(ch.before)
        if ch.cdc_files and read_log is not None:
            logged = pa.concat_tables([read_log(p) for p in ch.cdc_files])
            part = _as_is(logged, mode, before, after, ch.commit.requested_time, out_schema)
        else:
            part = _diff(before, after, ch.commit.requested_time, out_schema)
        if part.num_rows:
            parts.append(part)
    return pa.concat_tables(parts) if parts else out_schema.empty_table()


def _as_is(logged: pa.Table, mode: str, before: pa.Table, after: pa.Table, commit_time: str,
           out: pa.Schema) -> pa.Table:
    """A group's changes as its CDC log holds them (``HoodieCDCInferenceCase.AS_IS``, read as
    ``CDCFileGroupIterator`` does): every record's op; images the log holds are taken as they
    are, the others looked up by key in the slice before the commit (``before``, mode
    ``OP_KEY_ONLY``) and after it (``after``, modes ``OP_KEY_ONLY`` and ``DATA_BEFORE``)."""
    n = logged.num_rows
    image = out.field(BEFORE).type
    ops = logged.column(cdc_log.OP).combine_chunks().cast(pa.string())
    if mode == cdc_log.DATA_BEFORE_AFTER:
        ts = logged.column(cdc_log.TS).combine_chunks().cast(pa.string())
        b, a = (_struct_image(logged.column(c).combine_chunks(), image) for c in (BEFORE, AFTER))
    else:
        keys = logged.column(cdc_log.RECORD_KEY).combine_chunks().cast(pa.string())
        ts = pa.array([commit_time] * n, pa.string())
        if mode == cdc_log.DATA_BEFORE:
            b = _struct_image(logged.column(BEFORE).combine_chunks(), image)
        else:
            b = _lookup(before, keys, pc.not_equal(ops, INSERT), image)
        a = _lookup(after, keys, pc.not_equal(ops, DELETE), image)
    return pa.Table.from_arrays([ops, ts, b, a], schema=out)


def _struct_image(col: pa.Array, image: pa.StructType) -> pa.Array:
    """A logged image as the read's image type, field by field by name (a field the log lacks,
    after a schema change, is null)."""
    arrays = []
    for f in image:
        i = col.type.get_field_index(f.name)
        arrays.append(col.field(i).cast(f.type) if i >= 0 else pa.nulls(len(col), f.type))
    return pa.StructArray.from_arrays(arrays, fields=list(image), mask=col.is_null())


def _lookup(rows: pa.Table, keys: pa.Array, wanted: pa.Array, image: pa.StructType) -> pa.Array:
    """The images of ``keys`` in ``rows`` where ``wanted`` (null elsewhere, or where the key is
    not there)."""
    at = pc.index_in(keys, value_set=rows.column(RECORD_KEY).combine_chunks())
    at = pc.if_else(pc.fill_null(wanted, False), at, pa.scalar(None, at.type))
    found = rows.take(at)
    arrays = [found.column(f.name).combine_chunks() for f in image]
    return pa.StructArray.from_arrays(arrays, fields=list(image), mask=at.is_null())


def _same_base(a: FileSlice, b: FileSlice) -> bool:
    return a.name == b.name and a.instant_time == b.instant_time


def _diff(before: pa.Table, after: pa.Table, commit_time: str, out: pa.Schema) -> pa.Table:
    """One group's changes by one commit: deletes, updates, inserts."""
    kb, ka = before.column(RECORD_KEY), after.column(RECORD_KEY)
    in_before = pc.is_in(ka, value_set=kb.combine_chunks()) if before.num_rows else pa.array([False] * after.num_rows)
    in_after = pc.is_in(kb, value_set=ka.combine_chunks()) if after.num_rows else pa.array([False] * before.num_rows)
    written = pc.equal(after.column(_COMMIT_TIME), commit_time)
    deleted = before.filter(pc.invert(in_after))
    inserted = after.filter(pc.invert(in_before))
    upd_mask = pc.and_(in_before, pc.fill_null(written, False))
    updated = after.filter(upd_mask)
    old = before.take(pc.index_in(updated.column(RECORD_KEY), value_set=kb.combine_chunks())) if updated.num_rows \
        else before.slice(0, 0)
    return pa.concat_tables([
        _records(DELETE, commit_time, deleted, None, out),
        _records(UPDATE, commit_time, old, updated, out),
        _records(INSERT, commit_time, None, inserted, out),
    ])


def _records(op: str, ts: str, before: pa.Table | None, after: pa.Table | None, out: pa.Schema) -> pa.Table:
    n = (before if before is not None else after).num_rows  # type: ignore[union-attr]
    image = out.field(BEFORE).type
    cols = [pa.array([op] * n, pa.string()), pa.array([ts] * n, pa.string()),
            _image(before, image, n), _image(after, image, n)]
    return pa.Table.from_arrays(cols, schema=out)


def _image(rows: pa.Table | None, image: pa.StructType, n: int) -> pa.Array:
    if rows is None:
        return pa.nulls(n, image)
    arrays = [rows.column(f.name).combine_chunks() for f in image]
    return pa.StructArray.from_arrays(arrays, fields=list(image))


def _completion(i: Instant) -> str:
    return i.completion_time or i.requested_time


def _within(ct: str, start: str | None, end: str | None) -> bool:
    return (start is None or ct > start) and (end is None or ct <= end)

