"""Retention: delete file slices that no retained snapshot can read (Hudi KEEP_LATEST_COMMITS).

Copy-on-write keeps every version of a file group, so storage grows with each upsert. We keep
the snapshots of the newest ``retain_commits`` completed commits readable (``Table.read(as_of=)``
and hudi-rs time travel to any of them still work) and nothing older:

* E, the *earliest commit to retain*, is the smallest requested time among the newest
  ``retain_commits`` completed write commits (by completion time), lowered to the requested
  time of the oldest pending write if there is one (an in-flight writer reads the slices of the
  snapshot it started from, as Hudi's cleaner also protects).
* Per file group, the slice visible as of E is kept, and so is every newer slice; the strictly
  older committed slices are deleted. The latest slice of a live group is never deleted.
* A file group retired by a replace commit whose requested time is at or before E is invisible
  in every retained snapshot: all its slices are deleted (Hudi cleans replaced groups the same
  way). Until then time travel before the replace still reads it.
* Only committed slices are considered: files of pending instants belong to rollback, files of
  unknown instants to the orphan report.
* Merge-on-Read: a slice is a base file with the log files that belong to it by the one slicing
  rule (:meth:`TimelineView.with_logs`: the newest committed base of the group at or before the
  log's completion time). An old slice goes with its logs; a log completed after a newer base
  was requested (a deltacommit that ran across a compaction) belongs to the newer slice and
  stays with it. The latest slice, logs included, is never deleted. Logs of pending or unknown
  instants, and logs a completed commit does not name, are never planned here.

The plan is computed outside the lock (it lists the whole table) from a timeline T0. It stays
safe under any later timeline: new commits only add newer slices and move E forward, and new
pending writes get times above everything on T0. Under the lock we only check that no other
clean is pending, then record ``<C>.clean.requested`` (``HoodieCleanerPlan``). Files are deleted
outside the lock; ``<C>_<D>.clean`` (``HoodieCleanMetadata``) completes it under the lock. A
plan of at most :data:`ONE_HOLD_FILES` files (one batch request on an object store) is recorded,
executed and completed in a single hold instead: the second hold's reads and the heartbeat
(which tells other cleaners a plan is being executed while no lock is held) are not needed, and
the states a crash leaves are the same (a pending clean that the next run resumes). A clean
instant is recorded only when there is something to delete.
"""

from __future__ import annotations

import io
import logging
import posixpath
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import fastavro

from ..errors import InvalidRecordError, MultiWriterError, PlanRefusedError, TableFormatError
from ..format import instant as inst
from ..table import metadata_files
from ..format import layout
from ..table import timeline as tlmod
from ..format.instant import Instant
from ..table.metadata import NS, decode_records, encode, parsing
from ..table.files import FileGroup, FileSlice, LogFile, list_files
from ..format.cdc_log import parse_cdc_log_file
from ..format.log_file import parse_log_file
from ..table.timeline import Timeline
from ..table.view import TimelineView
from . import CleanerContext, claim, complete_held, complete_under_lock, delete_each, mark_inflight, plan_checks

log = logging.getLogger(__name__)

POLICY = "KEEP_LATEST_COMMITS"
PLAN_VERSION = 2
METADATA_VERSION = 2

#: ``HoodieCleanerPlan`` as published in apache/hudi (hudi-common/src/main/avro).
CLEANER_PLAN_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": f"{NS}.HoodieCleanerPlan",
    "fields": [
        {
            "name": "earliestInstantToRetain",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": f"{NS}.HoodieActionInstant",
                    "fields": [
                        {"name": "timestamp", "type": "string"},
                        {"name": "action", "type": "string"},
                        {"name": "state", "type": "string"},
                    ],
                },
            ],
            "default": None,
        },
        {"name": "policy", "type": "string"},
        {
            "name": "filesToBeDeletedPerPartition",
            "type": ["null", {"type": "map", "values": {"type": "array", "items": "string"}}],
            "default": None,
        },
        {"name": "version", "type": ["int", "null"], "default": 1},
        {
            "name": "filePathsToBeDeletedPerPartition",
            "type": [
                "null",
                {
                    "type": "map",
                    "values": {
                        "type": "array",
                        "items": {
                            "type": "record",
                            "name": f"{NS}.HoodieCleanFileInfo",
                            "fields": [
                                {"name": "filePath", "type": ["null", "string"], "default": None},
                                {"name": "isBootstrapBaseFile", "type": ["null", "boolean"], "default": None},
                            ],
                        },
                    },
                },
            ],
            "default": None,
        },
        {"name": "partitionsToBeDeleted", "type": ["null", {"type": "array", "items": "string"}], "default": None},
    ],
}
_PARSED_PLAN = fastavro.parse_schema(CLEANER_PLAN_SCHEMA, named_schemas={})


@dataclass(frozen=True)
class CleanPlan:
    """Old file slices to delete, and the commit from which everything is retained."""

    earliest_to_retain: str
    last_completed: str
    files: tuple[str, ...]  # paths relative to the table root
    clean_time: str = ""

    def to_bytes(self, uri_of: Any) -> bytes:
        per_part: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for rel in self.files:
            part = rel.rpartition("/")[0]
            per_part[part].append({"filePath": uri_of(rel), "isBootstrapBaseFile": False})
        rec = {
            "earliestInstantToRetain": {
                "timestamp": self.earliest_to_retain,
                "action": inst.COMMIT,
                "state": "COMPLETED",
            },
            "policy": POLICY,
            "filesToBeDeletedPerPartition": None,
            "version": PLAN_VERSION,
            "filePathsToBeDeletedPerPartition": dict(per_part),
            "partitionsToBeDeleted": [],
        }
        buf = io.BytesIO()
        fastavro.writer(buf, _PARSED_PLAN, [rec])
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, clean_time: str, data: bytes, *, source: str) -> CleanPlan:
        """Parse a plan; only data files inside the table are accepted (see rollback)."""
        hint = ("inspect it, and delete the pending clean instant files by hand if it is garbage (a later run plans "
                "a new clean)")
        recs = decode_records(data, source=source) if data else []
        if len(recs) != 1 or not isinstance(recs[0], dict):
            raise TableFormatError(f"{source}: not a cleaner plan; {hint}")
        rec = recs[0]
        with parsing(source, "cleaner plan", hint):
            earliest = (rec.get("earliestInstantToRetain") or {}).get("timestamp") or ""
            if not isinstance(earliest, str):
                raise TypeError(f"earliestInstantToRetain.timestamp={earliest!r:.80} is not a string")
            files: list[str] = []
            for part, infos in (rec.get("filePathsToBeDeletedPerPartition") or {}).items():
                for info in infos or []:
                    if info.get("isBootstrapBaseFile"):  # a bootstrap's source file: never deleted here
                        log.warning("%s: not deleting bootstrap source file %r", source, info.get("filePath"))
                        continue
                    rel = _safe_data_path(part, info.get("filePath") or "", source)
                    if rel is not None:
                        files.append(rel)
            for part, names in (rec.get("filesToBeDeletedPerPartition") or {}).items():
                for name in names or []:
                    rel = _safe_data_path(part, name, source)
                    if rel is not None:
                        files.append(rel)
            return cls(earliest, "", tuple(sorted(set(files))), clean_time)


def _safe_data_path(partition: str, path: str, source: str) -> str | None:
    name = posixpath.basename(path)
    try:
        part = layout.check_relative(partition)
    except InvalidRecordError:
        part = None
    if (layout.parse_data_file(name) is None and parse_log_file(name) is None) or part is None:
        log.warning("%s: ignoring %r: not a base or log file inside the table", source, path)
        return None
    return layout.data_file_path(part, name)


@dataclass
class CleanOutcome:
    clean_time: str
    deleted: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    completed: Instant | None = None


@dataclass
class RetentionResult:
    old_versions_deleted: int = 0
    clean_instants: list[str] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
    earliest_to_retain: str | None = None
    errors: list[str] = field(default_factory=list)


# -- planning (pure, given a timeline and a listing) ----------------------------------------


def earliest_to_retain(tl: Timeline, retain_commits: int) -> str | None:
    """E: the smallest requested time among the newest ``retain_commits`` completed writes,
    lowered to the oldest pending write's time; None when there are too few commits to clean."""
    writes = tl.completed_writes()
    if retain_commits < 1 or len(writes) <= retain_commits:
        return None
    e = min(i.requested_time for i in writes[-retain_commits:])
    pending = [i.requested_time for i in tl.pending(inst.WRITE_ACTIONS)]
    return min([e, *pending])


def old_slices(
    tl: Timeline, files: list[FileSlice], earliest: str, logs: list[LogFile] | None = None
) -> list[FileSlice | LogFile]:
    """Committed slices no snapshot as of ``earliest`` or later reads: those strictly older than
    their group's slice visible as of ``earliest``, and every slice of a group replaced by then;
    with ``logs``, each old slice's log files go with its base."""
    view = TimelineView(tl)
    retired = view.replaced(earliest)
    groups: dict[FileGroup, list[FileSlice]] = defaultdict(list)
    for f in files:
        if view.committed(f.instant_time):
            groups[f.group].append(f)
    out: list[FileSlice | LogFile] = []
    keep_from: dict[FileGroup, str] = {}
    for g, slices in groups.items():
        if g in retired:
            out.extend(slices)
            continue
        at_e = [f.instant_time for f in slices if f.instant_time <= earliest]
        if not at_e:
            continue
        keep_from[g] = max(at_e)
        out.extend(f for f in slices if f.instant_time < keep_from[g])
    out.extend(_old_logs(view, groups, keep_from, retired, logs or []))
    return sorted(out, key=lambda f: f.path)


def _old_logs(view: TimelineView, groups: dict[FileGroup, list[FileSlice]], keep_from: dict[FileGroup, str],
              retired: set[FileGroup], logs: list[LogFile]) -> list[LogFile]:
    """Committed log files of old slices: of a retired group, or sliced (by their commit's
    completion time) under a base older than the group's kept slice, or in the log-only slice a
    group had before its first base (a bucket a JVM writer started with a log file)."""
    out = []
    active = set(view.timeline.completed_write_times())
    for lf in logs:
        if not view.committed(lf.instant_time) or not _accounted(view, lf, active):
            continue
        if lf.group in retired and lf.group in groups:
            out.append(lf)
            continue
        kept = keep_from.get(lf.group)
        if kept is None:
            continue
        done = view.completion_of(lf.instant_time)
        base = max((f.instant_time for f in groups[lf.group] if f.instant_time <= done), default=None)
        if base is None or base < kept:
            out.append(lf)
    return out


def _accounted(view: TimelineView, lf: LogFile, active: set[str]) -> bool:
    """Named by its completed commit, or of an archived one (``active``: the requested times
    of completed writes on the active timeline; an archived one has no stats left to check): a
    losing task attempt's log is the failed-write sweep's business, not a slice of the table."""
    return lf.instant_time not in active or view.named(lf)


def plan(ctx: CleanerContext, tl: Timeline, retain_commits: int) -> CleanPlan | None:
    e = earliest_to_retain(tl, retain_commits)
    if e is None:
        return None
    # the metadata table lists every committed file version (a clean removes its entries): no
    # walk of the whole store when the table keeps one
    listed = metadata_files.list_files(ctx.storage, ctx.config, logs=tl.config.merge_on_read)
    bases, logs = listed if listed is not None else list_files(ctx.storage, logs=tl.config.merge_on_read)
    doomed = old_slices(tl, bases, e, logs)
    last = tl.last_completed_write()
    paths = [f.path for f in doomed] + _cdc_files_of(tl, doomed)
    return CleanPlan(e, last.requested_time if last else "", tuple(sorted(paths)))


def _cdc_files_of(tl: Timeline, doomed: list) -> list[str]:
    """The CDC log files written beside the doomed base files (their commit's ``cdcStats``): they
    go with their slice, as Hudi's ``CleanPlanner`` deletes a cleaned slice's log files. Commits
    already archived name theirs no more here; those stay until the table is cleaned by hand."""
    wanted = {(f.partition, f.file_id, f.instant_time) for f in doomed if isinstance(f, FileSlice)}
    if not wanted:
        return []
    out: list[str] = []
    for t in sorted({w[2] for w in wanted}):
        i = tl.find(t)
        if i is None or not i.is_completed or i.action not in inst.WRITE_ACTIONS:
            continue
        for s in tl.commit_metadata(i).all_stats():
            if s.cdc_files and (s.partition_path, s.file_id, t) in wanted:
                out.extend(p for p in s.cdc_files if _is_cdc_file_of(p, s.partition_path, s.file_id, t))
    return out


def _is_cdc_file_of(path: str, partition: str, file_id: str, t: str) -> bool:
    """Whether ``path`` (named by a commit's ``cdcStats``) is the CDC log file of that file group
    and instant in its partition: a stat naming any other file (planted, or a bug) never points
    a deletion at it."""
    part, _, name = path.rpartition("/")
    parsed = parse_cdc_log_file(name)
    ok = part == partition and parsed is not None and parsed.file_id == file_id and parsed.instant_time == t
    if not ok:
        log.warning("commit %s names %r as a CDC log file of %s/%s: not one, left alone", t, path[:200], partition, file_id)
    return ok


# -- scheduling, executing, resuming ----------------------------------------------------------


def _timed(ctx: CleanerContext, tl: Timeline, p: CleanPlan) -> CleanPlan | None:
    """Under the lock: ``p`` with a clean time issued now, None while another clean is pending."""
    busy = tl.pending(frozenset({inst.CLEAN}))
    if busy:
        log.info("clean %s is pending; not planning another", busy[0].requested_time)
        return None
    return CleanPlan(p.earliest_to_retain, p.last_completed, p.files, ctx.issue_time(tl))


def schedule(ctx: CleanerContext, p: CleanPlan) -> CleanPlan | None:
    """Record ``<C>.clean.requested`` under the lock unless another clean is pending."""
    with ctx.locked() as tl:
        timed = _timed(ctx, tl, p)
        if timed is None:
            return None
        p, c = timed, timed.clean_time
        ctx.start_heartbeat(c)
        try:
            tlmod.create_requested(ctx.storage, ctx.config, c, inst.CLEAN, p.to_bytes(ctx.storage.uri_of))
        except BaseException:
            ctx.stop_heartbeat(c)
            raise
    log.info("planned clean %s: %d old file slices before %s", c, len(p.files), p.earliest_to_retain)
    return p


#: a clean of at most this many files runs in one lock hold (:func:`run_in_one_hold`)
ONE_HOLD_FILES = 1000


def run_in_one_hold(ctx: CleanerContext, p: CleanPlan) -> CleanOutcome | None:
    """Record, execute and complete a small clean in one lock hold (see the module); None when
    another clean is pending. A failed deletion raises with the clean left pending, as a crash
    leaves it: the next run resumes it once its (absent) heartbeat counts as lapsed."""
    started = time.monotonic()
    with ctx.locked() as tl:
        timed = _timed(ctx, tl, p)
        if timed is None:
            return None
        p, c = timed, timed.clean_time
        tlmod.create_requested(ctx.storage, ctx.config, c, inst.CLEAN, p.to_bytes(ctx.storage.uri_of))
        out = CleanOutcome(c)
        mark_inflight(ctx, c, inst.CLEAN)
        delete_each(ctx.storage, p.files, out.deleted, out.missing, out.failed, fault_point="mid-clean",
                    what=f"clean {c}")
        if out.failed:
            raise OSError(f"clean {c}: {len(out.failed)} old files could not be deleted (first: {out.failed[0]}); "
                          "the clean stays pending and a later cleaner run resumes it")
        out.completed = complete_held(ctx, tl, c, inst.CLEAN, encode("clean", _metadata(p, out, started)),
                                      inflight=True)
    log.info("clean %s deleted %d old file slices (%d already gone) in one lock hold", c, len(out.deleted),
             len(out.missing))
    return out


def execute(ctx: CleanerContext, p: CleanPlan) -> CleanOutcome:
    started = time.monotonic()
    out = CleanOutcome(p.clean_time)
    try:
        mark_inflight(ctx, p.clean_time, inst.CLEAN)
        delete_each(ctx.storage, p.files, out.deleted, out.missing, out.failed, fault_point="mid-clean",
                    what=f"clean {p.clean_time}")
        if out.failed:
            raise OSError(
                f"clean {p.clean_time}: {len(out.failed)} old files could not be deleted (first: {out.failed[0]}); "
                "the clean stays pending and the next cleaner run retries it"
            )
        out.completed = complete_under_lock(ctx, p.clean_time, inst.CLEAN, encode("clean", _metadata(p, out, started)))
    finally:
        ctx.stop_heartbeat(p.clean_time)
    log.info("clean %s deleted %d old file slices (%d already gone)", p.clean_time, len(out.deleted), len(out.missing))
    return out


def _metadata(p: CleanPlan, out: CleanOutcome, started: float) -> dict[str, Any]:
    """``HoodieCleanMetadata``; Hudi lists file names (not paths) per partition."""
    per_part: dict[str, dict[str, Any]] = {}
    planned = defaultdict(list)
    for rel in p.files:
        planned[rel.rpartition("/")[0]].append(rel.rpartition("/")[2])
    done = set(out.deleted) | set(out.missing)
    for part, names in sorted(planned.items()):
        per_part[part] = {
            "partitionPath": part,
            "policy": POLICY,
            "deletePathPatterns": sorted(names),
            "successDeleteFiles": sorted(n for n in names if layout.data_file_path(part, n) in done),
            "failedDeleteFiles": sorted(n for n in names if layout.data_file_path(part, n) not in done),
            "isPartitionDeleted": False,
        }
    return {
        "startCleanTime": p.clean_time,
        "timeTakenInMillis": int((time.monotonic() - started) * 1000),
        "totalFilesDeleted": len(done),
        "earliestCommitToRetain": p.earliest_to_retain,
        "lastCompletedCommitTimestamp": p.last_completed,
        "partitionMetadata": per_part,
        "version": METADATA_VERSION,
    }


def read_plan(ctx: CleanerContext, clean_time: str) -> CleanPlan:
    rel = f"{ctx.config.timeline_dir}/{Instant(clean_time, inst.CLEAN, inst.REQUESTED).file_name()}"
    try:
        data = ctx.storage.read_bytes(rel)
    except FileNotFoundError as e:
        raise TableFormatError(f"{rel}: the plan of pending clean {clean_time} is missing") from e
    return CleanPlan.from_bytes(clean_time, data, source=rel)


def check_plan(ctx: CleanerContext, tl: Timeline, p: CleanPlan, retain_commits: int) -> None:
    """Before a plan found on the timeline is executed: every file it names that is still on
    storage must be one this cleaner would delete itself, with the plan's earliest retained
    commit or its own, whichever keeps more (never a file of a group's latest slice, of a
    retained snapshot, or of a commit still needed). Raises :class:`PlanRefusedError` naming
    the plan and the first such file."""
    source = f"{ctx.config.timeline_dir}/{Instant(p.clean_time, inst.CLEAN, inst.REQUESTED).file_name()}"
    if not p.files:
        return
    now = earliest_to_retain(tl, retain_commits)
    e = min(x for x in (p.earliest_to_retain, now) if x is not None) if now is not None else None
    bases, logs = list_files(ctx.storage, logs=True)
    present = {f.path for f in [*bases, *logs]}
    allowed = set() if not e else {f.path for f in old_slices(tl, bases, e, logs if tl.config.merge_on_read else None)}
    bad = [f for f in p.files if f in present and f not in allowed]
    if bad:
        raise PlanRefusedError(
            f"{source}: the clean plan names {len(bad)} files that retained snapshots still read (first: {bad[0]}; "
            f"earliest retained commit {e or 'none yet'}); refused, nothing deleted", source=source, path=bad[0])


def _run(ctx: CleanerContext, p: CleanPlan, result: RetentionResult) -> bool:
    try:
        out = execute(ctx, p)
    except (MultiWriterError, OSError) as e:
        log.error("clean %s failed: %s; the next cleaner run resumes it", p.clean_time, e)
        result.errors.append(f"clean {p.clean_time}: {e}")
        return False
    result.old_versions_deleted += len(out.deleted)
    result.clean_instants.append(p.clean_time)
    return True


def clean_old_versions(ctx: CleanerContext, retain_commits: int) -> RetentionResult:
    """Resume a dead cleaner's clean, then plan and run a new one when slices are due."""
    result = RetentionResult()
    tl = ctx.table.timeline()
    for c in tl.pending(frozenset({inst.CLEAN})):
        if not ctx.is_lapsed(c.requested_time):
            return result  # a live cleaner is cleaning; one clean at a time
        try:
            p = read_plan(ctx, c.requested_time)
            check_plan(ctx, tl, p, retain_commits)
        except TableFormatError as e:
            # unreadable, out of the table, or deleting what retention keeps: never executed; moved
            # aside so that it holds neither retention nor archival
            moved = plan_checks.quarantine(ctx, c.requested_time, inst.CLEAN, f"{type(e).__name__}: {e}")
            result.errors.extend(str(q) for q in moved) if moved else result.errors.append(str(e))
            if not moved:
                return result
            tl = ctx.table.timeline()
            break
        if claim(ctx, c.requested_time, inst.CLEAN):
            log.info("resuming clean %s left by a dead cleaner", c.requested_time)
            if _run(ctx, p, result):
                result.resumed.append(c.requested_time)
        return result
    p = plan(ctx, tl, retain_commits)
    if p is None:
        return result
    result.earliest_to_retain = p.earliest_to_retain
    if not p.files:
        return result
    if len(p.files) <= ONE_HOLD_FILES:
        try:
            out = run_in_one_hold(ctx, p)
        except (MultiWriterError, OSError) as e:
            log.error("clean failed: %s; a later cleaner run resumes it", e)
            result.errors.append(f"clean: {e}")
            return result
        if out is not None:
            result.old_versions_deleted += len(out.deleted)
            result.clean_instants.append(out.clean_time)
        return result
    scheduled = schedule(ctx, p)
    if scheduled is not None:
        _run(ctx, scheduled, result)
    return result
