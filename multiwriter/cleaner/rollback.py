"""Roll back failed writes: pending commit instants whose writer stopped beating.

The protocol, and why each step is where it is:

1. Outside the lock: find candidates (pending write instants with a lapsed heartbeat that no
   rollback targets yet) and list the files each one wrote (its markers; a full listing when the
   markers are gone). Listing can be slow, so it stays out of the critical path.
2. Under the lock: reload the timeline and check again (still pending, still lapsed, still not
   targeted), issue a rollback time R greater than everything on the timeline, start the
   cleaner's own heartbeat for R and write ``<R>.rollback.requested`` (a ``HoodieRollbackPlan``
   naming the instant and its files). From here on the writer's commit fence refuses to commit
   that instant, and no other cleaner will plan a second rollback of it.
3. Outside the lock: ``<R>.rollback.inflight``; delete the data files, then any file whose marker
   appeared meanwhile, the marker directory, the writer's heartbeat, and last the pending instant
   files. Data files go first because a file without any instant left on the timeline could
   later be taken for an archived (hence committed) one.
4. Under the lock: ``<R>_<C>.rollback`` (``HoodieRollbackMetadata``), unless someone else
   completed it first.

The metadata table: at step 3, before any file is deleted, the target's deltacommit there (if
it wrote one) is rolled back at R, as Hudi's writer rolls it back at its data rollback's time;
the rollback writes no deltacommit of its own.

A cleaner that dies anywhere leaves a pending rollback whose heartbeat lapses; the next cleaner
re-reads its plan and finishes steps 3-4. Every step is idempotent.

Merge-on-Read: a failed deltacommit's log files carry its requested time in their names (table
version 8), so they are rolled back as Hudi 1.x does it, by deleting them (no rollback command
block is appended), listed in ``successDeleteFiles`` beside its new base files.
"""

from __future__ import annotations

import logging
import posixpath
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from .. import markers
from ..errors import CommitDecisionLostError, MultiWriterError, TableFormatError, UnsafePathError
from ..format import instant as inst
from ..table import bootstrap_index_files, decisions, metadata_files
from ..format import layout, paths
from ..table import timeline as tlmod
from ..format.instant import Instant
from ..table.metadata import decode_records, encode, parsing, rollback_target
from ..table.files import list_files
from ..format.cdc_log import parse_cdc_log_file
from ..format.log_file import parse_log_file
from ..table.timeline import Timeline
from ..transaction import covering_rollback_targets, rollback_targets
from . import CleanerContext, claim, complete_under_lock, delete_each, mark_inflight, plan_checks

log = logging.getLogger(__name__)

PLAN_VERSION = 1
METADATA_VERSION = 1


def encode_metadata(record: dict[str, Any]) -> bytes:
    """A ``HoodieRollbackMetadata`` Avro container (its embedded schema is self-contained)."""
    return encode("rollback", record)


@dataclass(frozen=True)
class RollbackPlan:
    """What one rollback instant undoes: the target instant and the data files it wrote."""

    rollback_time: str
    target_time: str
    target_action: str
    files: tuple[str, ...]  # paths relative to the table root

    def to_record(self, uri_of: Any) -> dict[str, Any]:
        """A ``HoodieRollbackPlan``: one request per file group, full paths as Hudi writes them."""
        groups: dict[tuple[str, str | None], list[str]] = defaultdict(list)
        for rel in self.files:
            part, _, name = rel.rpartition("/")
            parsed = layout.parse_data_file(name) or parse_log_file(name) or parse_cdc_log_file(name)
            groups[(part, parsed.file_id if parsed else None)].append(uri_of(rel))
        requests = [
            {
                "partitionPath": part,
                "fileId": fid,
                "latestBaseInstant": self.target_time,
                "filesToBeDeleted": sorted(paths),
                "logBlocksToBeDeleted": None,
            }
            for (part, fid), paths in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] or ""))
        ]
        return {
            "instantToRollback": {"commitTime": self.target_time, "action": self.target_action},
            "RollbackRequests": requests,
            "version": PLAN_VERSION,
        }

    @classmethod
    def from_bytes(cls, rollback_time: str, data: bytes, *, source: str) -> RollbackPlan:
        """Parse a plan; only data files of the target instant inside the table are accepted,
        so a corrupt or foreign plan can never make the cleaner delete anything else."""
        hint = ("inspect it and delete the rollback instant files by hand if it is garbage (its target, if any, "
                "will then be planned again)")
        recs = decode_records(data, source=source) if data else []
        with parsing(source, "rollback plan", hint):
            if len(recs) != 1 or not isinstance(recs[0], dict) or not rollback_target(recs[0]):
                raise TableFormatError(f"{source}: not a rollback plan naming its instant; {hint}")
            rec = recs[0]
            target = rec["instantToRollback"]
            # the target names directories this rollback deletes (markers, heartbeat): the path rule first
            t = paths.instant_time(rollback_target(rec), source=source)
            action = target.get("action") or inst.COMMIT
            if not isinstance(action, str) or action not in inst.KNOWN_ACTIONS:
                raise UnsafePathError(f"{source}: instantToRollback.action {str(action)[:80]!r} is not a Hudi action; "
                                      "nothing was deleted. Inspect the plan", path=str(action), source=source)
            files: list[str] = []
            for req in rec.get("RollbackRequests") or []:
                part = req.get("partitionPath") or ""
                for path in req.get("filesToBeDeleted") or []:
                    rel = _safe_data_path(part, path, t, source)
                    if rel is not None:
                        files.append(rel)
            return cls(rollback_time, t, action, tuple(sorted(set(files))))


def _safe_data_path(partition: str, path: str, target_time: str, source: str) -> str | None:
    """``partition/<basename>`` of a planned path, or None (with a warning) if it is not a base
    or log file of the target instant: plans store full paths, which change when a table is moved."""
    name = posixpath.basename(path)
    parsed = layout.parse_data_file(name) or parse_log_file(name) or parse_cdc_log_file(name)
    try:
        part: str | None = paths.partition(partition, source=source)
    except UnsafePathError:
        part = None
    if parsed is None or parsed.instant_time != target_time or part is None:
        log.warning("%s: ignoring %r: not a data file of instant %s inside the table", source, path, target_time)
        return None
    return layout.data_file_path(part, name)


@dataclass
class RollbackOutcome:
    """What executing one rollback did."""

    rollback_time: str
    target_time: str
    deleted: list[str] = field(default_factory=list)  # data files this cleaner deleted
    missing: list[str] = field(default_factory=list)  # already gone (an earlier attempt)
    failed: list[str] = field(default_factory=list)
    completed: Instant | None = None


@dataclass
class RollbackResult:
    """All rollbacks of one cleaner run."""

    rolled_back: list[str] = field(default_factory=list)  # requested times of failed writes
    resumed: list[str] = field(default_factory=list)  # rollback times finished for a dead cleaner
    files_deleted: int = 0
    outcomes: list[RollbackOutcome] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


# -- finding work -----------------------------------------------------------------------


#: pending instants that write data files: writers' and clustering's (a clustering whose cleaner
#: died is rolled back like a failed writer; it is planned again later)
ROLLBACK_ACTIONS = inst.WRITE_ACTIONS | {inst.CLUSTERING}


def failed_writes(ctx: CleanerContext, tl: Timeline) -> list[Instant]:
    """Pending write (or clustering) instants whose heartbeat lapsed and no rollback targets yet."""
    targeted = rollback_targets(tl)
    out = []
    for i in tl.pending(ROLLBACK_ACTIONS):
        covering = covering_rollback_targets(tl, i.requested_time) if i.requested_time in inst.BOOTSTRAP_TIMES else targeted
        if i.requested_time in covering:
            continue
        if ctx.is_lapsed(i.requested_time):
            out.append(i)
    return out


def pending_rollbacks(tl: Timeline) -> list[Instant]:
    return tl.pending(frozenset({inst.ROLLBACK}))


def files_of(ctx: CleanerContext, t: str) -> list[str]:
    """Base and log files instant ``t`` may have written: from its markers (written before each
    file) and the partitions they name, or, when the markers are gone, by listing every
    partition for files named with ``t``."""
    from_markers = markers.instant_files(ctx.storage, t)
    if from_markers:
        return from_markers
    # no markers (gone, or a kind not read here): list; a v8 log file is named with its deltacommit
    bases, logs = list_files(ctx.storage)
    return sorted(f.path for f in [*bases, *logs] if f.instant_time == t)


# -- scheduling (under the lock) -----------------------------------------------------------


def schedule(ctx: CleanerContext, target: Instant, files: list[str]) -> RollbackPlan | None:
    """Record a rollback plan for ``target`` under the lock, after checking again that it is
    still a pending, lapsed, untargeted write. None when another cleaner got there first or the
    writer came back to life."""
    t = target.requested_time
    with ctx.locked() as tl:
        current = tl.find(t, target.action)
        if current is None or not current.is_pending:
            log.info("instant %s is no longer pending (%s); nothing to roll back", t, current)
            return None
        if t in covering_rollback_targets(tl, t):
            log.info("instant %s is already targeted by a rollback", t)
            return None
        if not ctx.is_lapsed(t):
            log.info("instant %s beat again; leaving it to its writer", t)
            return None
        r = ctx.issue_time(tl)
        plan = RollbackPlan(r, t, target.action, tuple(files))
        ctx.start_heartbeat(r)
        try:
            tlmod.create_requested(
                ctx.storage, ctx.config, r, inst.ROLLBACK, encode("rollback_plan", plan.to_record(ctx.storage.uri_of))
            )
            if not decide(ctx, plan):
                return None
        except BaseException:
            ctx.stop_heartbeat(r)
            raise
    log.info("planned rollback %s of failed instant %s (%d files)", r, t, len(files))
    return plan


def decide(ctx: CleanerContext, plan: RollbackPlan) -> bool:
    """Under the lock, after the plan is on the timeline and before any file is deleted: decide
    the rollback (:mod:`multiwriter.table.decisions`), so a writer frozen past its lock can
    never also decide its commit. False when it lost: the writer's commit was decided first; it
    is rolled forward and this plan is dropped."""
    t, r = plan.target_time, plan.rollback_time
    ctx.check_lock(f"the rollback {r} of instant {t}")
    try:
        ctx.decided = ctx.decision_log().decide(
            ctx.decided, decisions.Decision(decisions.ROLLBACK, r, inst.ROLLBACK, ctx.cleaner_id, target=t))
        return True
    except CommitDecisionLostError as e:
        log.warning("rollback %s of instant %s: %s; keeping the instant", r, t, e)
    decisions.settle(ctx.decision_log(), ctx.table.timeline)
    tlmod.delete_pending(ctx.storage, ctx.config, r, inst.ROLLBACK)
    ctx.stop_heartbeat(r)
    return False


# -- executing (outside the lock) ---------------------------------------------------------


def execute(ctx: CleanerContext, plan: RollbackPlan) -> RollbackOutcome:
    """Carry out a recorded plan and complete the rollback instant; safe to repeat."""
    started = time.monotonic()
    t, r = plan.target_time, plan.rollback_time
    out = RollbackOutcome(r, t)
    try:
        _refuse_completed_target(ctx, plan)
        mark_inflight(ctx, r, inst.ROLLBACK)
        # the target's metadata-table deltacommit first, at this rollback's time (Hudi's way),
        # while the target is still pending (no compaction of the files partition absorbs it)
        # and before its files go (no listing names a deleted file)
        metadata_files.rollback_deltacommit(ctx.storage, ctx.config, t, r)
        _delete_all(ctx, plan.files, out, fault_point="mid-rollback")
        # a writer that was only paused may have written more files since the plan was made
        planned = set(plan.files)
        late = [p for p in markers.instant_files(ctx.storage, t) if p not in planned]
        if late:
            log.warning(
                "rollback %s: instant %s wrote %d more files after the plan; deleting them too", r, t, len(late)
            )
            _delete_all(ctx, late, out)
        markers.delete_dir(ctx.storage, t)
        if t == inst.METADATA_BOOTSTRAP_TIME:  # its bootstrap index goes too (``dropBootstrapIndexIfNeeded``)
            bootstrap_index_files.drop(ctx.storage)
        ctx.storage.delete(layout.heartbeat_path(t))
        tlmod.delete_pending(ctx.storage, ctx.config, t, plan.target_action)
        data = encode_metadata(_metadata(ctx, plan, out, started))
        out.completed = complete_under_lock(ctx, r, inst.ROLLBACK, data)
    finally:
        ctx.stop_heartbeat(r)
    log.info(
        "rolled back instant %s with rollback %s: %d files deleted, %d already gone, %d failed",
        t,
        r,
        len(out.deleted),
        len(out.missing),
        len(out.failed),
    )
    return out


def _refuse_completed_target(ctx: CleanerContext, plan: RollbackPlan) -> None:
    """Never delete a completed commit's files, whatever a plan says (the writer's fence makes
    this impossible for our plans; a hand-made or foreign plan could still ask for it)."""
    current = ctx.table.timeline().find(plan.target_time, plan.target_action)
    if current is not None and current.is_completed:
        raise TableFormatError(
            f"rollback {plan.rollback_time} targets instant {plan.target_time}, which is completed; refusing to "
            "delete committed data. Inspect the rollback plan and remove the pending rollback instant files by hand"
        )


def _delete_all(
    ctx: CleanerContext, files: list[str] | tuple[str, ...], out: RollbackOutcome, fault_point: str | None = None
) -> None:
    delete_each(ctx.storage, files, out.deleted, out.missing, out.failed, fault_point=fault_point,
                what=f"rollback {out.rollback_time}")
    if out.failed:
        raise OSError(
            f"rollback {out.rollback_time} of instant {out.target_time}: {len(out.failed)} files could not be "
            f"deleted (first: {out.failed[0]}); the rollback stays pending and the next run retries it"
        )


def _metadata(ctx: CleanerContext, plan: RollbackPlan, out: RollbackOutcome, started: float) -> dict[str, Any]:
    """``HoodieRollbackMetadata``: a file already gone counts as deleted (an earlier attempt)."""
    per_part: dict[str, dict[str, Any]] = {}
    for rel in sorted(set(out.deleted) | set(out.missing)):
        part = rel.rpartition("/")[0]
        pm = per_part.setdefault(
            part,
            {
                "partitionPath": part,
                "successDeleteFiles": [],
                "failedDeleteFiles": [],
                "rollbackLogFiles": None,
                "writtenLogFiles": None,
            },
        )
        pm["successDeleteFiles"].append(ctx.storage.uri_of(rel))
    return {
        "startRollbackTime": plan.rollback_time,
        "timeTakenInMillis": int((time.monotonic() - started) * 1000),
        "totalFilesDeleted": sum(len(p["successDeleteFiles"]) for p in per_part.values()),
        "commitsRollback": [plan.target_time],
        "partitionMetadata": per_part,
        "version": METADATA_VERSION,
        "instantsRollback": [{"commitTime": plan.target_time, "action": plan.target_action}],
    }


def read_plan(ctx: CleanerContext, rollback_time: str) -> RollbackPlan:
    rel = f"{ctx.config.timeline_dir}/{Instant(rollback_time, inst.ROLLBACK, inst.REQUESTED).file_name()}"
    try:
        data = ctx.storage.read_bytes(rel)
    except FileNotFoundError as e:
        raise TableFormatError(f"{rel}: the plan of pending rollback {rollback_time} is missing") from e
    return RollbackPlan.from_bytes(rollback_time, data, source=rel)


# -- the step ------------------------------------------------------------------------------


def resume(ctx: CleanerContext, tl: Timeline, result: RollbackResult) -> None:
    """Finish pending rollbacks whose cleaner died (its heartbeat lapsed)."""
    for r in pending_rollbacks(tl):
        if not ctx.is_lapsed(r.requested_time):
            continue  # a live cleaner is executing it
        try:
            plan = read_plan(ctx, r.requested_time)
        except TableFormatError as e:
            log.error("cannot resume rollback %s: %s", r.requested_time, e)
            moved = plan_checks.quarantine(ctx, r.requested_time, inst.ROLLBACK, f"{type(e).__name__}: {e}")
            result.errors.extend(str(q) for q in moved) if moved else result.errors.append(str(e))
            continue
        if not claim(ctx, plan.rollback_time, inst.ROLLBACK) or not _decide_resumed(ctx, plan):
            continue
        log.info("resuming rollback %s of instant %s left by a dead cleaner", plan.rollback_time, plan.target_time)
        if _run(ctx, plan, result):
            result.resumed.append(plan.rollback_time)


def _decide_resumed(ctx: CleanerContext, plan: RollbackPlan) -> bool:
    """A dead cleaner's plan may never have been decided (it died between plan and decision):
    decide it now, unless its target completed meanwhile (the plan is then dropped)."""
    with ctx.locked(plan.rollback_time) as tl:
        target = tl.find(plan.target_time, plan.target_action)
        if target is not None and target.is_completed:
            log.warning("rollback %s: its target %s completed; dropping the plan", plan.rollback_time, plan.target_time)
            tlmod.delete_pending(ctx.storage, ctx.config, plan.rollback_time, inst.ROLLBACK)
            ctx.stop_heartbeat(plan.rollback_time)
            return False
        return decide(ctx, plan)


def _run(ctx: CleanerContext, plan: RollbackPlan, result: RollbackResult) -> bool:
    """Execute one plan; a failure is logged and reported, and the next run retries it."""
    try:
        out = execute(ctx, plan)
    except (MultiWriterError, OSError) as e:
        log.error(
            "rollback %s of instant %s failed: %s; the next cleaner run resumes it",
            plan.rollback_time,
            plan.target_time,
            e,
        )
        result.errors.append(f"rollback {plan.rollback_time} of {plan.target_time}: {e}")
        return False
    result.rolled_back.append(out.target_time)
    result.files_deleted += len(out.deleted)
    result.outcomes.append(out)
    return True


def rollback_failed_writes(ctx: CleanerContext) -> RollbackResult:
    """Resume dead cleaners' rollbacks, then roll back every failed write found now."""
    result = RollbackResult()
    tl = ctx.timeline()
    resume(ctx, tl, result)
    for target in failed_writes(ctx, tl):
        plan = schedule(ctx, target, files_of(ctx, target.requested_time))
        if plan is not None:
            _run(ctx, plan, result)
    return result
