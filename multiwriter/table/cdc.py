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

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InstantNotRetainedError, TableFormatError
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
INSERT, UPDATE, DELETE = "i", "u", "d"

MODE_KEY = "hoodie.table.cdc.supplemental.logging.mode"
#: ``HoodieCDCSupplementalLoggingMode`` (Hudi 0.13+ names; the older ``cdc_*`` values map onto them)
MODES = ("OP_KEY_ONLY", "DATA_BEFORE", "DATA_BEFORE_AFTER")
_LEGACY_MODES = {"cdc_op_key": "OP_KEY_ONLY", "cdc_data_before": "DATA_BEFORE", "cdc_data_before_after": "DATA_BEFORE_AFTER"}
_COMMIT_TIME = META_COLUMNS[0]
CDC_LOG_SUFFIX = ".cdc"


class CdcLogFileError(TableFormatError):
    """A commit in a CDC range has CDC log files Hudi wrote (``hoodie.table.cdc.enabled``):
    Hudi's reader takes those as they are (``HoodieCDCInferenceCase.AS_IS``), which inference
    from the data files does not reproduce in every case, so the range is refused."""


def supplemental_mode(config: TableConfig) -> str:
    """The table's supplemental logging mode (``DATA_BEFORE_AFTER`` by default, as Hudi's
    ``HoodieTableConfig.CDC_SUPPLEMENTAL_LOGGING_MODE``). It says what Hudi's writer puts into
    CDC log files; Hudi's CDC query returns the full record (op, ts_ms, before, after) in every
    mode, computing the images the log does not hold from the file slices."""
    raw = (config.raw.get(MODE_KEY) or MODES[-1]).strip()
    mode = _LEGACY_MODES.get(raw.lower(), raw.upper())
    if mode not in MODES:
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
        before = v.slices_by_completion(bases, logs, prev) if prev is not None else {}
        after = v.slices_by_completion(bases, logs, done)
        groups = sorted(touched | retired)
        if prev is not None:
            missing += [(c, g, p) for g, _, p in v.missing_files(before, groups, prev)]
        missing += [(c, g, p) for g, _, p in v.missing_files(after, sorted(touched - retired), done)]
        changes += [GroupChange(c, g, before.get(g), None if g in retired and g not in touched else after.get(g))
                    for g in groups]
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


def check_no_cdc_logs(storage: Storage, config: TableConfig, commits: Iterable[Instant]) -> None:
    """Refuse (:class:`CdcLogFileError`, naming the file) a range in which Hudi wrote CDC log
    files: a table without ``hoodie.table.cdc.enabled=true`` has none, and is not listed."""
    if (config.raw.get(ENABLED_KEY) or "").strip().lower() != "true":
        return
    wanted = {c.requested_time for c in commits}
    for e in storage.walk_files(""):
        name = e.path.rsplit("/", 1)[-1]
        if name.endswith(CDC_LOG_SUFFIX) and _cdc_log_instant(name) in wanted:
            raise CdcLogFileError(
                f"{e.path} is a CDC log file Hudi wrote for instant {_cdc_log_instant(name)}; Hudi's CDC query reads "
                "such files as they are, which multiwriter's inference from the data files does not reproduce in every "
                "case: read this range with Hudi, or read ranges of commits multiwriter wrote"
            )


def _cdc_log_instant(name: str) -> str | None:
    """The instant of a CDC log file name (``.<fileId>_<instant>.log.<v>_<token>.cdc``)."""
    head = name[1:].split(".log.", 1)[0]
    return head.rsplit("_", 1)[-1] if "_" in head else None


SliceReader = Callable[[FileSlice, tuple[LogFile, ...] | None], pa.Table]


def changes(plan_: CdcPlan, schema: pa.Schema, read: SliceReader) -> pa.Table:
    """The CDC records of ``plan_`` in :func:`cdc_schema`; ``schema``: the read schema (meta
    columns first); ``read(slice, logs)``: a slice's current rows (``logs``: a subset of its
    logs, None for all). A slice read for one commit's ``after`` is the next one's ``before``:
    each is read once."""
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
        part = _diff(before, after, ch.commit.requested_time, out_schema)
        if part.num_rows:
            parts.append(part)
    return pa.concat_tables(parts) if parts else out_schema.empty_table()


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

