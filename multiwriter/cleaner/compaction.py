"""Compaction: merge the log files of Merge-on-Read file slices into new base files.

Writers of a Merge-on-Read table append one log file per file group and deltacommit; left alone,
every snapshot read merges ever more logs. Compaction rewrites a slice (base file plus logs) as
one base file, in Hudi's version-8 format, so Java Hudi, hudi-rs and this package read it alike:

1. Schedule (the snapshot is listed outside the lock, the plan is made under it): once at least
   ``delta_commits`` deltacommits completed since the latest compaction was requested, issue T
   and write ``<T>.compaction.requested`` (Hudi's Avro ``HoodieCompactionPlan``) naming, per file
   group with log files, its base file (none for a log-only slice, as Hudi's non-blocking
   writers start a bucket) and exactly the logs whose deltacommit completed before T. Every completion time is issued under the lock and exceeds everything on the timeline, so
   the logs completed on the timeline read under the lock are all the logs completed before T;
   the few that completed since the listing come from their commits' write statistics.
2. Execute (outside the lock, heartbeat beating for T): ``<T>.compaction.inflight``, then per
   operation read the slice's base file and the plan's logs with
   :func:`~multiwriter.table.merged_slice.read_slice` (the readers' merge rule, so a compacted
   base holds exactly what a snapshot read returned) and write ``<fileId>_<token>_<T>.parquet``
   (marker first, pre-write check). Rows keep their own ``_hoodie_commit_time``. Operations run
   on threads, large ones on Spark executors when the cleaner has a session.
3. Commit under the lock as ``<T>_<C>.commit`` (operation ``COMPACT``, ``compacted=true``, one
   write stat per file group) after the fence: T still pending, not targeted by a rollback,
   our heartbeat beyond doubt.

Writers never wait for a compaction and never conflict with one (:func:`..conflict.is_compaction`).
A deltacommit still in flight at T completes after T, so the slicing rule
(:meth:`~multiwriter.table.view.TimelineView.with_logs`) puts its log on top of the new base
once the compaction commits, and on the old slice until then: no read ever misses it.

A compaction whose cleaner died stays pending: like Hudi, the next run re-executes its plan (the
plan is the contract Java Hudi also honours) once its heartbeat lapsed, after deleting the dead
attempt's files through their markers. A plan another writer scheduled (its plan names no
cleaner of ours: a JVM writer's) is left to it by default: Hudi's compactors take a requested
plan without a lock or heartbeat, and roll back an inflight one they did not start before
running it again (``BaseHoodieTableServiceClient.compact``), so nothing fences our run of it from
theirs. With ``CompactionConfig.execute_foreign_plans`` (the user asserts no JVM compactor runs)
such a plan is executed as Hudi's compactors take it: at once while it waits (requested, no
heartbeat: Hudi beats only while executing), else once it lapsed. A plan of ours that can no longer be executed (an input file gone, an
unreadable plan) is unscheduled: its files and pending instant files are deleted and the next
run plans again; a JVM writer's plan is never deleted, only this attempt's files. Until a compaction commits nothing it wrote is visible.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from .. import faults, markers
from ..errors import (ConfigError, HeartbeatExpiredError, MultiWriterError, PlanRefusedError, TableFormatError,
                      UnsafePathError)
from ..instant_time import parse_time
from ..storage import Storage
from ..format import instant as inst
from ..format import layout
from ..table import bootstrap_slice, bootstrap_state, decisions
from ..format import bounds
from ..table import timeline as tlmod
from ..table.compaction_plan import CompactionOperation, CompactionPlan, decode_plan, encode_plan
from ..table.files import FileGroup, FileSlice, LogFile
from ..format.instant import Instant
from ..format.log_file import parse_log_file
from ..table import cdc
from ..table.merge_config import MergeConfig
from ..table.delete_markers import DeleteMarkers
from ..table.merged_slice import read_slice
from ..format.schema import arrow_to_avro_json, data_schema
from ..table.metadata import CommitMetadata, WriteStat
from ..table.snapshot import Snapshot
from ..table.timeline import Timeline
from ..table.view import TimelineView
from ..transaction import rollback_targets
from . import CleanerContext, claim, complete_rewrite, mark_inflight, plan_checks, release_completed

log = logging.getLogger(__name__)

OPERATION = "COMPACT"
CLEANER_KEY = "multiwriter.cleaner_id"
SCHEMA_KEY = "schema"
#: Hudi's trigger that counts deltacommits since the latest compaction request (pending or done)
TRIGGER_STRATEGY = "NUM_COMMITS_AFTER_LAST_REQUEST"
_MB = 1024 * 1024


class CompactionAbortedError(MultiWriterError):
    """A compaction did not commit: its instant is no longer pending, a rollback targets it, or
    this cleaner's heartbeat for it had a gap (another cleaner may have taken it over). Its plan
    stays pending; the next run re-executes it once its heartbeat lapsed."""


class CompactionPlanError(MultiWriterError):
    """A compaction plan cannot be executed (an input file is gone, the plan is unreadable); the
    compaction is unscheduled and planned again when this package's cleaners planned it, else
    (a JVM writer's plan) left pending for its writer."""


@dataclass(frozen=True)
class CompactionConfig:
    """When and how to compact a Merge-on-Read table.

    ``delta_commits``: Hudi's ``hoodie.compact.inline.max.delta.commits``. A compaction is
    scheduled once at least this many deltacommits completed after the latest compaction was
    requested (Hudi's trigger ``NUM_COMMITS_AFTER_LAST_REQUEST``), and it then takes every file
    slice with log files, as Hudi's default plan does. Counted over the table, not per slice:
    with the bucket index most deltacommits touch most buckets, so the two counts move together,
    and Java compactors of the same table then schedule when this one does.
    ``max_file_groups``: at most this many slices per compaction (those with the most log bytes
    first); None compacts them all.
    ``executor_min_bytes``: slices of at least this many bytes (base plus logs) are compacted on
    Spark executors, one task each, when the cleaner has a SparkSession; None keeps them all on
    the driver. ``threads``: driver threads compacting slices in parallel.
    ``execute_foreign_plans``: also execute compaction plans another writer scheduled (a JVM
    writer's). Off by default: a JVM compactor may run the same plan, and nothing fences the
    two (see the module docstring); turn it on only when no JVM compactor serves the table.
    """

    delta_commits: int = 5
    max_file_groups: int | None = None
    executor_min_bytes: int | None = 256 * _MB
    threads: int = 4
    execute_foreign_plans: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.execute_foreign_plans, bool):
            raise ConfigError(f"CompactionConfig execute_foreign_plans={self.execute_foreign_plans!r}: must be a bool")
        names = ["delta_commits", "threads"]
        names += [n for n in ("max_file_groups", "executor_min_bytes") if getattr(self, n) is not None]
        for name in names:
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"CompactionConfig {name}={v!r}: must be an int >= 1")

    def params(self) -> dict[str, str]:
        """The settings as plan metadata (Hudi's key names where Hudi has one)."""
        out = {
            "hoodie.compact.inline.max.delta.commits": str(self.delta_commits),
            "hoodie.compact.inline.trigger.strategy": TRIGGER_STRATEGY,
        }
        if self.max_file_groups is not None:
            out["multiwriter.compaction.max_file_groups"] = str(self.max_file_groups)
        return out


@dataclass(frozen=True)
class Scheduled:
    """A compaction on the timeline: its requested time and its plan."""

    compaction_time: str
    plan: CompactionPlan

    def file_groups(self) -> set[FileGroup]:
        return {(op.partition_path, op.file_id) for op in self.plan.operations}

    @property
    def log_files(self) -> int:
        return sum(len(op.delta_file_names) for op in self.plan.operations)


# -- the timeline ------------------------------------------------------------------------------


def requested_path(config: Any, t: str) -> str:
    return f"{config.timeline_dir}/{Instant(t, inst.COMPACTION, inst.REQUESTED).file_name()}"


def read_plan(ctx: CleanerContext, t: str) -> Scheduled:
    """The plan of compaction ``t`` (raises :class:`CompactionPlanError` when it is unreadable)."""
    rel = requested_path(ctx.config, t)
    try:
        return Scheduled(t, decode_plan(ctx.storage.read_bytes(rel), source=rel))
    except FileNotFoundError as e:
        raise CompactionPlanError(f"{rel}: the plan of pending compaction {t} is missing") from e
    except TableFormatError as e:
        raise CompactionPlanError(f"compaction {t}: {e}") from e


def last_request(tl: Timeline) -> str | None:
    """The requested time of the latest compaction, pending or completed (its requested file
    stays beside its completed commit)."""
    return max((i.requested_time for i in tl.instants if i.action == inst.COMPACTION), default=None)


def delta_commits_since(tl: Timeline, since: str | None) -> int:
    """Deltacommits completed on the active timeline at or after ``since`` (the latest
    compaction's requested time): by the slicing rule their logs are in no compaction yet, a
    straggler requested before the compaction and completed after it included."""
    return sum(1 for i in tl.completed(frozenset({inst.DELTA_COMMIT}))
               if since is None or (i.completion_time or i.requested_time) >= since)


def busy_file_groups(ctx: CleanerContext, tl: Timeline) -> set[FileGroup]:
    """File groups a pending compaction or clustering is rewriting: never planned twice. An
    unreadable plan is skipped here (resuming it unschedules it)."""
    from .clustering import ClusteringPlan

    out: set[FileGroup] = set()
    for i in tl.pending(frozenset({inst.COMPACTION, inst.CLUSTERING})):
        try:
            if i.action == inst.COMPACTION:
                out |= read_plan(ctx, i.requested_time).file_groups()
            else:
                req = Instant(i.requested_time, inst.CLUSTERING, inst.REQUESTED)
                out |= ClusteringPlan.from_bytes(i.requested_time, tl.read_bytes(req), source=tl.path_of(req)).input_groups()
        except (CompactionPlanError, FileNotFoundError, TableFormatError):
            continue
    return out


# -- scheduling ----------------------------------------------------------------------------------


def candidates(snapshot: Snapshot, busy: set[FileGroup]) -> dict[FileGroup, FileSlice]:
    """The latest slices with log files, of groups no pending service rewrites."""
    return {f.group: f for f in snapshot.files() if f.logs and f.group not in busy}


def catch_up(tl: Timeline, base_completion: str | None, slices: dict[FileGroup, FileSlice]) -> dict[FileGroup, FileSlice]:
    """``slices`` (listed as of ``base_completion``) with the logs of deltacommits completed
    since, from their write statistics. A group that a commit since touched otherwise (a new base
    file, a replace) is left out: its slice is no longer the one listed."""
    out = dict(slices)
    for i in tl.completed_after(base_completion):
        if i.action not in inst.WRITE_ACTIONS:
            continue
        for st in tl.commit_metadata(i).all_stats():
            g = (st.partition_path, st.file_id)
            cur = out.get(g)
            if cur is None:
                continue
            new = _logs_of(st) if i.action == inst.DELTA_COMMIT else None
            if new is None:
                del out[g]
                continue
            known = {lf.name for lf in cur.logs}
            out[g] = dataclasses.replace(cur, logs=cur.logs + tuple(lf for lf in new if lf.name not in known))
        for g in tl.commit_metadata(i).replaced_file_groups():
            out.pop(g, None)
    return out


def _logs_of(st: WriteStat) -> tuple[LogFile, ...] | None:
    """The log file a delta write stat wrote (its ``path``); None when it wrote a base file. Its
    ``logFiles`` are not taken: on a table that logs changes they also name the earlier log
    files of the slice it appended to, which may be an older slice than the one listed (a
    compaction completed meanwhile) and are never this commit's."""
    if not st.is_log:
        return None
    name = st.path.rsplit("/", 1)[-1]
    parsed = parse_log_file(name)
    if parsed is None or parsed.file_id != st.file_id:
        return None
    return (LogFile(st.partition_path, parsed.file_id, parsed.instant_time, parsed.version, name, st.file_size),)


def operations(slices: dict[FileGroup, FileSlice], cfg: CompactionConfig,
               bootstrap_file: Callable[[str], str] | None = None) -> list[CompactionOperation]:
    """One operation per slice (logs in completion order), the most log bytes first, at most
    ``max_file_groups``; then in (partition, file id) order. ``bootstrap_file``: the source file
    of a skeleton base file, by its path ("" for other files), which the operation names."""
    chosen = sorted(slices.values(), key=lambda f: (-sum(lf.size for lf in f.logs), f.partition, f.file_id))
    if cfg.max_file_groups is not None:
        chosen = chosen[: cfg.max_file_groups]
    return [
        CompactionOperation.for_slice(
            f.partition, f.file_id, f.instant_time, (f.name, f.size) if f.has_base else None,
            [(lf.name, lf.size) for lf in f.logs],
            bootstrap_file_path=bootstrap_file(f.path) if bootstrap_file is not None and f.has_base else None,
        )
        for f in sorted(chosen, key=lambda f: (f.partition, f.file_id))
    ]


def schedule(ctx: CleanerContext, cfg: CompactionConfig) -> Scheduled | None:
    """Plan a compaction when the trigger is met: the table is listed outside the lock, and under
    it the trigger is checked again, the listing caught up with commits completed since, T issued
    and ``<T>.compaction.requested`` written. None when there is nothing to compact."""
    if not ctx.config.merge_on_read:
        return None
    MergeConfig.from_table_config(ctx.config)  # a merge we do not do: refused by name, no plan written
    tl0 = ctx.table.timeline()
    if delta_commits_since(tl0, last_request(tl0)) < cfg.delta_commits:
        return None
    base = tl0.last_completed_write()
    base_ct = (base.completion_time or base.requested_time) if base else None
    found = candidates(Snapshot.build(ctx.storage, tl0), busy_file_groups(ctx, tl0))
    if not found:
        return None
    with ctx.locked() as tl:
        if delta_commits_since(tl, last_request(tl)) < cfg.delta_commits:
            return None  # another cleaner compacted meanwhile
        if bootstrap_state.unfinished(tl, ctx.config):  # the bootstrap's next commit must be the next write
            return None
        busy = busy_file_groups(ctx, tl)
        slices = {g: f for g, f in catch_up(tl, base_ct, found).items() if g not in busy}
        ops = operations(slices, cfg, lambda rel: bootstrap_slice.source_path(ctx.storage, rel))
        if not ops:
            return None
        t = ctx.issue_time(tl)
        plan = CompactionPlan(tuple(ops), {CLEANER_KEY: ctx.cleaner_id, **cfg.params()})
        ctx.start_heartbeat(t)
        try:
            tlmod.create_requested(ctx.storage, ctx.config, t, inst.COMPACTION, encode_plan(plan))
        except BaseException:
            ctx.stop_heartbeat(t)
            raise
    sched = Scheduled(t, plan)
    log.info("planned compaction %s: %d file groups, %d log files", t, len(ops), sched.log_files)
    faults.point("compaction-after-plan")
    return sched


# -- executing -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OperationJob:
    """One slice to compact, its files resolved (plain, so it ships to executors)."""

    index: int
    partition: str
    file_id: str
    base_instant: str
    base_name: str  # "" for a log-only slice (Hudi's non-blocking writers start a bucket so)
    base_size: int
    logs: tuple[LogFile, ...]  # in completion order (the merge ranks them by requested time)

    @property
    def size(self) -> int:
        return self.base_size + sum(lf.size for lf in self.logs)

    def file_slice(self) -> FileSlice:
        return FileSlice(self.partition, self.file_id, self.base_instant, self.base_name, self.base_size, self.logs)


def jobs_of(ctx: CleanerContext, tl: Timeline, sched: Scheduled) -> list[OperationJob]:
    """The plan's operations with their files' sizes (one listing per partition) and logs in
    completion order; raises :class:`CompactionPlanError` when a file is gone."""
    t = sched.compaction_time
    plan_checks.check_compaction_inputs(ctx, tl, t, sched.plan.operations, requested_path(ctx.config, t))
    view = TimelineView(tl)
    sizes: dict[str, dict[str, int]] = {}
    out = []
    for n, op in enumerate(sched.plan.operations):
        listed = sizes.get(op.partition_path)
        if listed is None:
            part = layout.check_relative(op.partition_path) if op.partition_path else ""
            listed = sizes[op.partition_path] = {e.path.rsplit("/", 1)[-1]: e.size for e in ctx.storage.list_dir(part, files_only=True)}
        base = () if op.data_file_name is None else (op.data_file_name,)  # None: a log-only slice
        missing = [name for name in (*base, *op.delta_file_names) if name not in listed]
        if missing:
            raise CompactionPlanError(
                f"compaction {t}: input {layout.data_file_path(op.partition_path, missing[0])} of file group "
                f"{op.file_id} is gone ({len(missing)} files in all); the compaction is unscheduled and planned again"
            )
        logs = []
        for name in op.delta_file_names:
            p = parse_log_file(name)
            assert p is not None  # CompactionOperation checked the names
            logs.append(LogFile(op.partition_path, p.file_id, p.instant_time, p.version, name, listed[name]))
        logs.sort(key=lambda lf: (view.completion_of(lf.instant_time), lf.version, lf.name))
        out.append(OperationJob(n, op.partition_path, op.file_id, op.base_instant_time, op.data_file_name or "",
                                listed[op.data_file_name] if op.data_file_name else 0, tuple(logs)))
    return out


def execute(ctx: CleanerContext, sched: Scheduled, cfg: CompactionConfig | None = None) -> list[WriteStat]:
    """``<T>.compaction.inflight``, then one new base file per operation (outside the lock):
    large slices on Spark executors when the cleaner has a session, the rest on threads."""
    from ..write import guard
    from ..write.merge import context

    cfg = cfg or CompactionConfig()
    t = sched.compaction_time
    merge = MergeConfig.from_table_config(ctx.config)  # refused by name before the compaction starts
    mark_inflight(ctx, t, inst.COMPACTION)
    tl = ctx.table.timeline()
    bound = ctx.heartbeat.bound_s if ctx.heartbeat is not None else None
    mctx = dataclasses.replace(
        context(ctx.storage.uri, t, ctx.table.schema(tl), ctx.config.ordering_field, len(ctx.config.partition_by) or 1),
        heartbeat_bound_s=bound,
        pending_files=guard.pending_files(ctx.config, t, inst.COMPACTION),
        merge_config=merge,
        delete_markers=DeleteMarkers.of(ctx.config),
    )
    if logs_changes(ctx.config):
        mctx = dataclasses.replace(mctx, cdc_mode=cdc.supplemental_mode(ctx.config),
                                   cdc_table_schema=arrow_to_avro_json(data_schema(mctx.data_schema), ctx.config.name))
    jobs = jobs_of(ctx, tl, sched)
    stats: dict[int, WriteStat] = {}
    remote = [j for j in jobs if ctx.spark is not None and cfg.executor_min_bytes is not None and j.size >= cfg.executor_min_bytes]
    if remote:
        from .clustering_spark import run_on_executors

        stats.update(run_on_executors(ctx.spark, mctx, remote, execute_operation, service="compaction",
                                      aborted=CompactionPlanError))
    # a token of its own per attempt: a resumed compaction never writes a dead attempt's file name
    stage = secrets.randbelow(1 << 30)
    local = [j for j in jobs if j.index not in stats]
    if len(local) > 1 and cfg.threads > 1:
        with ThreadPoolExecutor(max_workers=min(cfg.threads, len(local)), thread_name_prefix=f"compaction-{t}") as pool:
            done = list(pool.map(lambda j: execute_operation(ctx.storage, mctx, j, layout.write_token(j.index, stage)), local))
    else:
        done = [execute_operation(ctx.storage, mctx, j, layout.write_token(j.index, stage)) for j in local]
    stats.update({j.index: st for j, st in zip(local, done, strict=True)})
    return [stats[j.index] for j in jobs]


def execute_operation(storage: Storage, mctx: Any, job: OperationJob, write_token: str) -> WriteStat:
    """Merge one slice's base file and logs by the readers' merge rule and write the result as
    the group's base file at T (driver thread or executor). Rows keep their meta columns but
    ``_hoodie_file_name``."""
    from ..write.merge import write_moved_rows

    fs = job.file_slice()
    full = mctx.file_schema
    try:
        rows = read_slice(storage, fs, full, mctx.merge_config or mctx.ordering_field, logs=job.logs,
                          markers=mctx.delete_markers)
        base = _base_versions(storage, fs)
    except FileNotFoundError as e:
        raise CompactionPlanError(
            f"compaction {mctx.instant_time}: an input of file group {job.file_id} in {job.partition!r} is gone "
            f"({e}); the compaction is unscheduled and planned again"
        ) from e
    st = write_moved_rows(storage, mctx, job.partition, job.file_id, write_token, rows)
    inserts, updates, deletes = _changes(base, rows)
    cdc_files, cdc_sizes = _log_changes(storage, mctx, job, write_token, rows) if mctx.cdc_mode else ((), ())
    return dataclasses.replace(
        st,
        prev_commit=job.base_instant,
        prev_base_file=job.base_name or None,
        num_inserts=inserts,
        num_update_writes=updates,
        num_deletes=deletes,
        compacted_log_files=len(job.logs),
        compacted_log_bytes=sum(lf.size for lf in job.logs),
        cdc_files=cdc_files,
        cdc_sizes=cdc_sizes,
    )


def logs_changes(config: Any) -> bool:
    """Does a compaction of this table write CDC log files? Hudi's does on a table with
    ``hoodie.table.cdc.enabled`` whose writers start file groups with log files (the bucket
    index: ``HoodieMergeHandleFactory`` picks ``HoodieMergeHandleWithChangeLog`` when
    ``HoodieWriteConfig.isYieldingPureLogForMor``), for readers that take a Merge-on-Read
    table's changes from its compactions (Flink's); other indexes' compactions log none."""
    return config.merge_on_read and config.bucket_index and cdc.cdc_enabled(config)


def _log_changes(storage: Storage, mctx: Any, job: OperationJob, write_token: str,
                 merged: pa.Table) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The CDC log file of one compacted slice beside its new base file, as
    ``HoodieMergeHandleWithChangeLog`` logs a compaction (``cdcStats`` entry: path, size): per
    key, the base file's row against the merged slice's (a key the logs deleted ``d``, one
    they updated ``u``, one only they hold ``i``), the records stamped with the compaction's
    instant. None, as Hudi writes none, when the slice merges to no row or to inserts only (a
    log-only slice), or when nothing changed; a log version that lost to the base file's by
    the ordering field is no change (as :mod:`multiwriter.table.cdc` infers)."""
    from ..write import changes
    from ..write.merge import _write_changes
    from ..write.plan import FileGroupTask

    if not job.base_name or merged.num_rows == 0:
        return (), ()
    old = _base_rows(storage, job.file_slice(), mctx.file_schema)
    old_keys, new_keys = _strings(old, "_hoodie_record_key"), _strings(merged, "_hoodie_record_key")
    if not pc.any(pc.is_in(new_keys, value_set=old_keys)).as_py():
        return (), ()
    at = pc.index_in(new_keys, value_set=old_keys)
    existed = pc.is_valid(at)
    seq = _strings(merged, "_hoodie_commit_seqno")
    stored_seq = _strings(old, "_hoodie_commit_seqno").take(pc.fill_null(at, 0))
    upd = pc.and_(existed, pc.fill_null(pc.not_equal(seq, stored_seq), True))
    gone = old.filter(pc.invert(pc.is_in(old_keys, value_set=new_keys)))
    ins = merged.filter(pc.invert(existed))
    updated = merged.filter(upd)
    if gone.num_rows + ins.num_rows + updated.num_rows == 0:
        return (), ()
    records = changes.merge_changes(
        mctx.cdc_mode, mctx.instant_time, mctx.data_schema,
        updated=(updated.column("_hoodie_record_key").combine_chunks(), old.take(at.filter(upd)), updated),
        deleted=(gone.column("_hoodie_record_key").combine_chunks(), gone),
        inserted=(ins.column("_hoodie_record_key").combine_chunks(), ins))
    task = FileGroupTask(job.partition, job.file_id, job.index, job.base_name, job.base_instant)
    return _write_changes(storage, mctx, task, write_token, records)


def _base_rows(storage: Storage, fs: FileSlice, full: pa.Schema) -> pa.Table:
    """Every row of the slice's base file in the table's file schema (a skeleton's stitched
    with its source file's)."""
    from ..write.merge import align

    if bootstrap_slice.is_skeleton(fs):
        return align(bootstrap_slice.read_file(storage, fs.path)[0], full)
    with storage.fs.open_input_file(storage.abs(fs.path)) as f:
        return align(bounds.read_parquet(f, fs.path), full)


def _strings(t: pa.Table, column: str) -> pa.Array:
    col = t.column(column).combine_chunks()
    return col.cast(pa.string()) if not pa.types.is_string(col.type) else col


def _base_versions(storage: Storage, fs: FileSlice) -> pa.Table:
    """The keys and versions of the slice's base file (none for a log-only slice)."""
    cols = ["_hoodie_record_key", "_hoodie_commit_seqno"]
    if not fs.has_base:
        return pa.table({c: pa.array([], pa.string()) for c in cols})
    with storage.fs.open_input_file(storage.abs(fs.path)) as f:
        return bounds.read_parquet(f, fs.path, columns=cols)


def _changes(base: pa.Table, merged: pa.Table) -> tuple[int, int, int]:
    """(inserted, updated, deleted) keys of the merged slice against its base file: a key whose
    version (sequence number) is not the base file's was updated by a log."""
    old_keys = base.column("_hoodie_record_key").combine_chunks()
    new_keys = merged.column("_hoodie_record_key").combine_chunks()
    old_versions = base.column("_hoodie_commit_seqno").combine_chunks()
    new_versions = merged.column("_hoodie_commit_seqno").combine_chunks()
    was = pc.is_in(new_keys, value_set=old_keys)
    kept = pc.is_in(old_keys, value_set=new_keys)
    same = pc.is_in(new_versions, value_set=old_versions)
    existed = _count(was)
    return len(new_keys) - existed, existed - _count(pc.and_(was, same)), len(old_keys) - _count(kept)


def _count(mask: pa.Array) -> int:
    return int(pc.sum(pc.cast(mask, pa.int64())).as_py() or 0)


# -- committing --------------------------------------------------------------------------------------


def commit(ctx: CleanerContext, sched: Scheduled, stats: list[WriteStat]) -> Instant:
    """Under the lock: the fence, files the stats do not name deleted, then ``<T>_<C>.commit``
    with ``COMPACT`` metadata. Raises :class:`CompactionAbortedError` when the fence fails."""
    t = sched.compaction_time
    meta = CommitMetadata(
        partition_to_write_stats=_by_partition(stats),
        extra_metadata={CLEANER_KEY: ctx.cleaner_id},
        operation_type=OPERATION,
        compacted=True,
    )
    faults.point("compaction-before-complete")
    with ctx.locked(t) as tl:
        _fence(ctx, tl, t)
        # under the lock: a cleaner that took this compaction over cannot commit meanwhile
        markers.reconcile(ctx.storage, t, [p for s in stats for p in s.written])  # its CDC log files too
        mark_inflight(ctx, t, inst.COMPACTION)
        done = complete_rewrite(ctx, tl, t, inst.COMMIT, meta)
    release_completed(ctx, t, "compaction")
    log.info("compaction %s completed at %s: %d file groups", t, done.completion_time, len(stats))
    return done


def _by_partition(stats: list[WriteStat]) -> dict[str, list[WriteStat]]:
    out: dict[str, list[WriteStat]] = {}
    for s in stats:
        out.setdefault(s.partition_path, []).append(s)
    return out


def _fence(ctx: CleanerContext, tl: Timeline, t: str) -> None:
    own = tl.find(t, inst.COMPACTION)
    if own is None or not own.is_pending:
        raise CompactionAbortedError(f"compaction {t} is no longer pending ({own}); not committing")
    if t in rollback_targets(tl):
        raise CompactionAbortedError(f"a rollback targets compaction {t}; not committing")
    if ctx.heartbeat is not None:
        try:
            ctx.heartbeat.check(t)
        except HeartbeatExpiredError as e:
            raise CompactionAbortedError(
                f"compaction {t}: this cleaner's heartbeat for it had a gap ({e}); another cleaner may have taken it "
                "over, so not committing: the next run re-executes it"
            ) from e


# -- failures ----------------------------------------------------------------------------------------


def _owned(ctx: CleanerContext, t: str) -> bool:
    """Does this cleaner still own compaction ``t`` (its heartbeat beyond doubt)?"""
    if ctx.heartbeat is None:
        return True
    try:
        ctx.heartbeat.check(t)
        return True
    except HeartbeatExpiredError:
        return False


def _let_go(ctx: CleanerContext, t: str) -> None:
    """Stop beating ``t`` but leave its heartbeat file: another cleaner may be beating it now."""
    if ctx.heartbeat is not None:
        try:
            ctx.heartbeat.hand_over(t)
        except Exception as e:  # noqa: BLE001 -- a beat that will not stop only delays a resume
            log.warning("could not stop beating compaction %s: %s", t, e)


def discard(ctx: CleanerContext, t: str) -> list[str]:
    """After a failed attempt: delete the files its markers name and the markers, keep the plan
    pending (the next run re-executes it once the heartbeat, deleted here, counts as lapsed).
    Does nothing but stop beating when the compaction completed or another cleaner may own it."""
    tl = ctx.table.timeline()
    own = tl.find(t, inst.COMPACTION)
    if own is None or own.is_completed or not _owned(ctx, t) or decisions.is_decided(ctx.storage, ctx.config, t, tl):
        _let_go(ctx, t)
        return []
    deleted = markers.delete_files(ctx.storage, t)
    markers.delete_dir(ctx.storage, t)
    ctx.stop_heartbeat(t)
    return deleted


def unschedule(ctx: CleanerContext, t: str) -> list[str]:
    """Remove a pending compaction that cannot be executed: its files first (markers), then the
    markers, then ``<T>.compaction.inflight`` and ``.requested`` (a file left without any instant
    could later be taken for an archived commit's). Refuses a completed one."""
    tl = ctx.table.timeline()
    own = tl.find(t, inst.COMPACTION)
    if (own is not None and own.is_completed) or decisions.is_decided(ctx.storage, ctx.config, t, tl):
        log.error("compaction %s is completed (or decided); refusing to unschedule it", t)
        _let_go(ctx, t)
        return []
    deleted = markers.delete_files(ctx.storage, t)
    markers.delete_dir(ctx.storage, t)
    tlmod.delete_pending(ctx.storage, ctx.config, t, inst.COMPACTION)
    ctx.stop_heartbeat(t)
    log.warning("unscheduled compaction %s (%d files deleted); the next run plans again", t, len(deleted))
    return deleted


# -- one run -------------------------------------------------------------------------------------------


@dataclass
class CompactionResult:
    committed: list[str] = field(default_factory=list)  # compaction instants completed
    resumed: list[str] = field(default_factory=list)  # of which re-executed for a dead cleaner
    unscheduled: list[str] = field(default_factory=list)  # plans that could not be executed
    file_groups: int = 0  # file groups compacted
    log_files: int = 0  # log files merged into new base files
    timings: list[tuple[float, int]] = field(default_factory=list)  # per committed one: (plan to commit s, groups)
    errors: list[str] = field(default_factory=list)


def run(ctx: CleanerContext, cfg: CompactionConfig) -> CompactionResult:
    """Finish the compactions of dead cleaners, then plan, execute and commit a new one when the
    trigger is met. Nothing on Copy-on-Write tables."""
    result = CompactionResult()
    if not ctx.config.merge_on_read:
        return result
    for t in _lapsed(ctx, cfg):
        if not _claim(ctx, t):
            continue  # another cleaner took it, or it completed
        try:
            sched = read_plan(ctx, t)
        except CompactionPlanError as e:
            _unschedule_quietly(ctx, t, result, e)
            continue
        markers.delete_files(ctx.storage, t)  # the dead attempt's files; new ones get new names
        markers.delete_dir(ctx.storage, t)
        log.info("resuming compaction %s of a dead cleaner (%d file groups)", t, len(sched.plan.operations))
        if _execute_and_commit(ctx, sched, cfg, result):
            result.resumed.append(t)
    sched = schedule(ctx, cfg)
    if sched is not None:
        _execute_and_commit(ctx, sched, cfg, result)
    return result


def lag(snapshot: Snapshot, now: float) -> tuple[int, float]:
    """(most log files over one base file, age in seconds of the oldest log file) of the latest
    snapshot: how far compaction is behind the writers."""
    logs = [lf for f in snapshot.files() for lf in f.logs]
    most = max((len(f.logs) for f in snapshot.files()), default=0)
    oldest = min((lf.instant_time for lf in logs), default=None)
    return most, (max(0.0, now - parse_time(oldest)) if oldest else 0.0)


def _lapsed(ctx: CleanerContext, cfg: CompactionConfig) -> list[str]:
    """Pending compactions whose cleaner stopped beating (oldest first); another writer's plans
    only with ``cfg.execute_foreign_plans``, then also those waiting to run."""
    tl = ctx.table.timeline()
    out = []
    for i in tl.pending(frozenset({inst.COMPACTION})):
        if _foreign(ctx, i.requested_time):
            if not cfg.execute_foreign_plans:
                log.info("compaction %s was planned by another writer: left to it (execute_foreign_plans is off)",
                         i.requested_time)
                continue
            if _waiting_foreign(ctx, i):
                out.append(i.requested_time)
                continue
        if ctx.is_lapsed(i.requested_time):
            out.append(i.requested_time)
    return out


def _foreign(ctx: CleanerContext, t: str) -> bool:
    """Whether pending compaction ``t``'s plan names no cleaner of ours (False when it cannot be
    read: such a plan is unscheduled once lapsed, as before)."""
    try:
        return not planned_here(read_plan(ctx, t))
    except CompactionPlanError:
        return False


def _waiting_foreign(ctx: CleanerContext, i: Instant) -> bool:
    """A JVM writer's plan waiting to run: requested, not inflight, no heartbeat. Hudi starts a
    compaction's heartbeat only when it executes, so such a plan is not abandoned but free for
    any compactor to run, as Hudi's compactors run it. (Plans of this package's cleaners beat
    from the moment they are planned: theirs lapse by the heartbeat rule.)"""
    if i.state != inst.REQUESTED or ctx.storage.exists(layout.heartbeat_path(i.requested_time)):
        return False
    try:
        return not planned_here(read_plan(ctx, i.requested_time))
    except CompactionPlanError:
        return False


def _claim(ctx: CleanerContext, t: str) -> bool:
    """Take a pending compaction over (:func:`claim`); a JVM plan waiting to run is taken once
    it is still waiting under the lock."""
    with ctx.locked(t) as tl:
        current = tl.find(t, inst.COMPACTION)
        if current is not None and current.is_pending and _waiting_foreign(ctx, current):
            ctx.start_heartbeat(t)
            return True
    return claim(ctx, t, inst.COMPACTION)


def _execute_and_commit(ctx: CleanerContext, sched: Scheduled, cfg: CompactionConfig, result: CompactionResult) -> bool:
    t = sched.compaction_time
    try:
        stats = execute(ctx, sched, cfg)
        faults.point("compaction-after-files")
        done = commit(ctx, sched, stats)
    except CompactionPlanError as e:
        if planned_here(sched):
            _unschedule_quietly(ctx, t, result, e)
        else:
            _leave_foreign(ctx, t, result, e)
        return False
    except (PlanRefusedError, UnsafePathError) as e:  # the plan contradicts the table: never executed
        if planned_here(sched):
            _unschedule_quietly(ctx, t, result, e)
        elif isinstance(e, PlanRefusedError) and not e.forged:  # a JVM writer's plan we do not execute
            _leave_foreign(ctx, t, result, e)
        else:  # an unsafe path is no plan of anyone's
            _discard_quietly(ctx, t)
            moved = plan_checks.quarantine(ctx, t, inst.COMPACTION, f"{type(e).__name__}: {e}")
            result.errors.extend(str(q) for q in moved) if moved else result.errors.append(
                f"compaction {t}: {type(e).__name__}: {e}")
        return False
    except CompactionAbortedError as e:
        log.warning("%s", e)
        _discard_quietly(ctx, t)
        return False
    except (MultiWriterError, OSError) as e:
        log.error("compaction %s failed: %s; its files are deleted and the next run re-executes its plan", t, e)
        _discard_quietly(ctx, t)
        result.errors.append(f"compaction {t}: {type(e).__name__}: {e}")
        return False
    except BaseException:
        _discard_quietly(ctx, t)
        raise
    result.committed.append(t)
    seconds = max(0.0, parse_time(done.completion_time or t) - parse_time(t))
    result.timings.append((seconds, len(sched.plan.operations)))
    result.file_groups += len(sched.plan.operations)
    result.log_files += sched.log_files
    return True


def planned_here(sched: Scheduled) -> bool:
    """Did a cleaner of this package plan this compaction (its plan names the cleaner)? A plan
    of Hudi's JVM writers is theirs: executed like Hudi's compactors do, never unscheduled."""
    return CLEANER_KEY in sched.plan.extra_metadata


def _leave_foreign(ctx: CleanerContext, t: str, result: CompactionResult, why: Exception) -> None:
    """A JVM writer's plan this cleaner cannot execute: delete only this attempt's files, leave
    the plan pending for a Hudi compactor (deleting it would drop a plan we did not write)."""
    log.error("%s; compaction %s was planned by another writer, so it stays pending for Hudi's compactor", why, t)
    result.errors.append(f"compaction {t}: {type(why).__name__}: {why} (left pending: not planned by this package)")
    _discard_quietly(ctx, t)


def _discard_quietly(ctx: CleanerContext, t: str) -> None:
    try:
        discard(ctx, t)
    except (MultiWriterError, OSError) as e:  # the next run deletes them before re-executing
        log.error("could not delete the files of compaction %s (%s); the next run does", t, e)
        _let_go(ctx, t)


def _unschedule_quietly(ctx: CleanerContext, t: str, result: CompactionResult, why: Exception) -> None:
    log.error("%s", why)
    result.errors.append(f"compaction {t}: {type(why).__name__}: {why}")
    try:
        unschedule(ctx, t)
        result.unscheduled.append(t)
    except (MultiWriterError, OSError) as e:
        log.error("could not unschedule compaction %s (%s); the next run retries", t, e)
        _let_go(ctx, t)
