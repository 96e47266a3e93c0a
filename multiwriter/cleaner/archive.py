"""Archival: keep the active timeline (``.hoodie/timeline/``) bounded.

Every reader and writer lists the active timeline, so it must not grow with every commit. When
more than ``keep_max`` completed instants are active, the oldest ones move to
``.hoodie/timeline/history/`` in Hudi's own LSM layout (:mod:`multiwriter.format.lsm_timeline`), so
Hudi's JVM readers and archivers see one archived timeline (see docs/cleaner.md). Tables archived
by earlier releases hold JSON batches ``<first>_<last>.archive.json`` there: they are still read,
and the next archival moves them into the LSM layout. Readers treat a data file older than the earliest active instant
as committed, which is what makes removing instants safe, and also what makes it dangerous.
So the archived set is always a *prefix* of the timeline, in both orders:

* by requested time: everything before a cutoff X and nothing after it, and X is never later
  than the oldest pending instant (else that instant's uncommitted files would look committed);
* by completion time: every archived instant completed before every instant that stays and
  before the oldest pending instant began, so a pending writer's conflict check (instants
  completed after its base) and the sink's checkpoint scan (newest first) never need an
  archived instant.

X is further held back so that the newest commit carrying each writer's streaming checkpoint
(``_hudi_streaming_sink_checkpoint``, read by the sink from the active timeline) stays, that
the commits retention keeps readable (``earliest_to_retain``) stay, that a replace commit stays
while any file of a group it replaced is still on storage (once it is archived, those files
would be older than the earliest active instant and count as committed again), that at least
``keep_min`` completed instants stay, and (Merge-on-Read) that a deltacommit stays while one of its
log files is on storage and a base file of that log's group was requested after the deltacommit
and at or before it completed (a compaction planned while it ran). Readers slice a log file by its
commit's completion time, and an archived commit's completion time is not on the active timeline:
readers (ours and hudi-rs) then use its requested time, which would put the log under the older
base, and its changes would vanish from the snapshot. On a table that keeps Hudi's metadata table,
X is held behind the files partition's newest compaction, as Hudi's archiver holds it: no instant
whose metadata records are still in log files of the open slice is archived (Hudi's readers check
those against the active timeline), so nothing is archived before the first compaction. When that
rule is what holds archival back, the archiver compacts the files partition first (under the
lock), as the table's companion job.

Crash safety, in Hudi's order: the Parquet file and then the manifest that lists it are written
under the table lock, and the history is compacted there too (see :mod:`~multiwriter.format.lsm_timeline`); then the instants' requested and inflight files
are deleted, and after them their completed files oldest first, so an interrupted archival never
leaves an instant that looks pending, and the instants left active are a suffix. The next
run finishes it: active instants already in the history are deleted without being archived again.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

from .. import checkpoint as ckpt
from .. import faults
from ..format import instant as inst
from ..table import history
from ..format import lsm_timeline as lsm
from ..table import metadata_files
from ..table.files import FileSlice, LogFile, list_data_files, list_files
from ..table.history import ArchivedInstant
from ..format.instant import Instant
from ..table.metadata import named_files
from ..storage import FileEntry
from ..table.table import Table
from ..table.timeline import Timeline
from ..table.view import TimelineView
from . import CleanerContext
from .retention import earliest_to_retain

log = logging.getLogger(__name__)

FORMAT = history.LEGACY_FORMAT
FORMAT_VERSION = 1
SUFFIX = history.LEGACY_SUFFIX
decode_batch = history.decode_legacy_batch
_STATE_ORDER = {inst.REQUESTED: 0, inst.INFLIGHT: 1, inst.COMPLETED: 2}
#: actions whose requested file is a plan, archived by Hudi in the ``plan`` column
PLAN_ACTIONS = frozenset({inst.CLEAN, inst.REPLACE_COMMIT, inst.CLUSTERING, inst.COMPACTION})


@dataclass
class ArchiveResult:
    archived: int = 0
    batch: str | None = None  # the history file written by this run
    finished: int = 0  # instants of an interrupted archival whose files this run removed
    held_back_by: str | None = None  # the rule that limited the cutoff (for logs and tests)
    swept: list[str] = field(default_factory=list)  # uncommitted data files deleted (see sweep_uncommitted)
    compacted: list[str] = field(default_factory=list)  # history files written by compaction
    distrusted: list[str] = field(default_factory=list)  # history manifests passed over (see lsm.trusted_manifest)


# -- deciding (pure, given a timeline) ---------------------------------------------------------


def newest_checkpoint_commits(tl: Timeline) -> dict[str, Instant]:
    """Per writer id, the newest completed commit (by completion time) carrying its checkpoint
    (with carried-forward checkpoints that is the newest commit for every writer)."""
    out: dict[str, Instant] = {}
    for i in reversed(tl.completed_writes()):
        for w in ckpt.parse(tl.commit_metadata(i)):
            out.setdefault(w, i)
    return out


def replace_with_live_files(tl: Timeline, files: list[FileSlice] | None = None) -> str | None:
    """The oldest completed replace commit whose replaced groups still have files on storage."""
    view = TimelineView(tl)
    if not view.replacements:
        return None
    present = {f.group for f in (files if files is not None else list_data_files(tl.storage))}
    held = [i.requested_time for g, i in view.replacements.items() if g in present]
    return min(held, default=None)


def sliced_by_completion(tl: Timeline, bases: list[FileSlice], logs: list[LogFile]) -> str | None:
    """The oldest completed deltacommit D with a log file on storage whose slice its completion
    time decides: a base of the log's group (listed, committed or not), or a pending compaction,
    requested in (D's requested time, D's completion time]."""
    done = {i.requested_time: i for i in tl.completed(frozenset({inst.DELTA_COMMIT}))}
    if not done or not logs:
        return None
    pending = [i.requested_time for i in tl.pending(frozenset({inst.COMPACTION, inst.COMMIT}))]
    by_group: dict[tuple[str, str], list[str]] = {}
    for b in bases:
        by_group.setdefault(b.group, []).append(b.instant_time)
    held = []
    for lf in logs:
        d = done.get(lf.instant_time)
        if d is None or not d.completion_time:
            continue
        lo, hi = d.requested_time, d.completion_time
        if any(lo < b <= hi for b in (*by_group.get(lf.group, ()), *pending)):
            held.append(lo)
    return min(held, default=None)


#: the rule that holds archival behind the metadata table (:func:`behind_metadata_compaction`)
METADATA_RULE = "the metadata table's newest compaction"


def compact_metadata_table(tl: Timeline) -> bool:
    """Compact the metadata table's files partition now, so that archival need not wait for the
    writers' next compaction of it (every ``MAX_DELTA_COMMITS`` actions). Call under the table
    lock; False when there was nothing to compact or it could not be (see
    :func:`~multiwriter.table.metadata_files.compact_open_slice`)."""
    newest = max((i.completion_time or i.requested_time for i in tl.completed()), default=None)
    if newest is None or not metadata_files.compact_open_slice(tl.storage, tl.config, newest, tl.pending_times()):
        return False
    log.info("compacted the metadata table's files partition of %s: archival waited for it", tl.storage.uri)
    return True


def behind_metadata_compaction(tl: Timeline, states: list[Instant]) -> str | None:
    """The requested time archival must stay below for the metadata table, None when nothing
    holds it. Hudi (``TimelineArchiverV2``) archives nothing before the metadata table's files
    partition first compacts, then keeps every instant that completed after its newest
    compaction: their records are in log files of the open slice, which Hudi's readers check
    against the active data timeline. Every data action with files writes such a log, so here
    the rule reads the open slice itself: the oldest instant that has a log file there stays
    (an action with no files, which writes no log, holds nothing)."""
    if not metadata_files.enabled(tl.config):
        return None
    open_slice = metadata_files.uncompacted_instants(tl.storage, tl.config)
    return min((i.requested_time for i in states if i.requested_time in open_slice), default=None)


def choose(
    tl: Timeline, *, keep_min: int, keep_max: int, retain_commits: int, files: list[FileSlice] | None = None,
    logs: list[LogFile] | None = None, walked: list[FileEntry] | None = None,
) -> tuple[list[Instant], str | None]:
    """The instants to archive now (oldest first) and the rule that held the cutoff back.

    ``files`` and ``logs`` are a listing of the table's base and log files; listed here when
    needed and not given (from ``walked``, a walk of the table, when given)."""
    states = tl.latest_states()  # one per instant, by requested time
    completed = [i for i in states if i.is_completed]
    if len(completed) <= keep_max:
        return [], None
    if files is None or (logs is None and tl.config.merge_on_read):
        files, logs = list_files(tl.storage, logs=tl.config.merge_on_read, walked=walked)
    bounds: dict[str, str] = {
        "keep_min": completed[len(completed) - keep_min].requested_time if keep_min > 0 else "9" * 17
    }
    pending = [i.requested_time for i in states if i.is_pending]
    if pending:
        bounds["oldest pending instant"] = min(pending)
    ckpt = newest_checkpoint_commits(tl)
    if ckpt:
        bounds["a writer's newest checkpoint commit"] = min(i.requested_time for i in ckpt.values())
    e = earliest_to_retain(tl, retain_commits)
    if e is not None:
        bounds["retained commits"] = e
    elif retain_commits > 0 and tl.completed_writes():
        # too few commits to clean yet: every write commit is retained
        bounds["retained commits"] = min(i.requested_time for i in tl.completed_writes())
    replace = replace_with_live_files(tl, files)
    if replace is not None:
        bounds["a replace commit whose replaced files are not cleaned yet"] = replace
    straddling = sliced_by_completion(tl, files, logs or [])
    if straddling is not None:
        bounds["a deltacommit that completed after a newer base of its log's group was requested"] = straddling
    mdt = behind_metadata_compaction(tl, states)
    if mdt is not None:
        bounds[METADATA_RULE] = mdt
    rule, cutoff = min(bounds.items(), key=lambda kv: kv[1])
    prefix = [i for i in states if i.requested_time < cutoff]
    n = _completion_prefix(states, len(prefix))
    if n < len(prefix):
        rule = "completion order"
    return prefix[:n], rule


def _completion_prefix(states: list[Instant], n: int) -> int:
    """The longest ``k <= n`` such that states[:k] all completed before anything in states[k:]
    completed or, for pending instants, began."""

    def end(i: Instant) -> str:
        return (i.completion_time or i.requested_time) if i.is_completed else i.requested_time

    suffix_min = [""] * (len(states) + 1)
    suffix_min[len(states)] = "9" * 17
    for j in range(len(states) - 1, -1, -1):
        suffix_min[j] = min(end(states[j]), suffix_min[j + 1])
    best, running = 0, ""
    for k in range(1, n + 1):
        running = max(running, end(states[k - 1]))
        if running < suffix_min[k]:
            best = k
    return best


# -- history files ------------------------------------------------------------------------------


def batch_name(instants: list[Instant]) -> str:
    """The layer-0 LSM file an archival of ``instants`` (oldest first) writes."""
    return lsm.data_file_name(instants[0].requested_time, instants[-1].requested_time)


def _files_of(tl: Timeline, i: Instant) -> list[Instant]:
    """Every timeline file of one instant (requested, inflight, completed), in deletion order."""
    action = inst.instant_action(i.action)  # a clustering's requested/inflight files go with its replacecommit
    same = [x for x in tl.instants if x.requested_time == i.requested_time and inst.instant_action(x.action) == action]
    return sorted(same, key=lambda x: _STATE_ORDER[x.state])


def lsm_record(tl: Timeline, i: Instant) -> lsm.LsmInstant:
    """One completed instant as Hudi archives it: the completed file's bytes as ``metadata``,
    the requested plan's bytes (for actions that have one) as ``plan``."""
    metadata = plan = None
    for f in _files_of(tl, i):
        if not (f.state == inst.COMPLETED or (f.state == inst.REQUESTED and i.action in PLAN_ACTIONS)):
            continue  # not recorded: not read (a request each on an object store)
        try:
            data = tl.read_bytes(f)
        except FileNotFoundError:
            continue
        if f.state == inst.COMPLETED:
            metadata = data
        elif f.state == inst.REQUESTED and i.action in PLAN_ACTIONS and data:
            plan = data
    return lsm.LsmInstant(i.requested_time, i.completion_time, i.action, metadata, plan)


def _to_lsm(a: ArchivedInstant) -> lsm.LsmInstant:
    completed = Instant(a.requested_time, a.action, inst.COMPLETED, a.completion_time).file_name()
    requested = Instant(a.requested_time, a.action, inst.REQUESTED).file_name()
    plan = a.files.get(requested) if a.action in PLAN_ACTIONS else None
    return lsm.LsmInstant(a.requested_time, a.completion_time, a.action, a.files.get(completed), plan or None)


def encode_batch(ctx: CleanerContext, tl: Timeline, instants: list[Instant]) -> bytes:
    """A JSON batch of the format earlier releases wrote (kept for migration tests)."""
    records = []
    for i in instants:
        files = {}
        for f in _files_of(tl, i):
            try:
                files[f.file_name(ctx.config.version)] = base64.b64encode(tl.read_bytes(f)).decode("ascii")
            except FileNotFoundError:
                continue
        rec: dict[str, Any] = {
            "requested_time": i.requested_time,
            "action": i.action,
            "state": i.state,
            "completion_time": i.completion_time,
            "files": files,
        }
        if i.action in inst.WRITE_ACTIONS:
            meta = tl.commit_metadata(i)
            rec["summary"] = {
                "operation": meta.operation_type,
                "files": len(meta.all_stats()),
                "extra": {k: v for k, v in meta.extra_metadata.items() if k != "schema"},
            }
        records.append(rec)
    doc = {"format": FORMAT, "version": FORMAT_VERSION, "table": ctx.table_name, "instants": records}
    return json.dumps(doc, indent=1, sort_keys=True).encode()


def batch_files(table: Table) -> list[str]:
    """The JSON history batches earlier releases wrote, oldest first (migrated to LSM files)."""
    return history.legacy_batches(table.storage, table.config.history_dir)


def load_history(table: Table) -> list[ArchivedInstant]:
    """Every archived instant of ``table``, oldest first: Hudi's LSM history and any JSON
    batches not migrated yet (see :func:`multiwriter.table.history.load`)."""
    return history.load(table.storage, table.config.history_dir)


def migrate_json_batches(ctx: CleanerContext) -> int:
    """Move JSON batches of earlier releases into the LSM layout (call under the table lock):
    one layer-0 file per batch, listed in a manifest, and only then the JSON file deleted, so a
    crash in between leaves the instants readable from one or both. Returns batches moved."""
    hist = ctx.config.history_dir
    moved = 0
    for rel in batch_files(ctx.table):
        batch = decode_batch(ctx.storage.read_bytes(rel), source=rel)
        if batch:
            lsm.append(ctx.storage, hist, [_to_lsm(a) for a in batch])
        ctx.storage.delete(rel)
        moved += 1
    if moved:
        log.info("moved %d JSON history batches into Hudi's LSM layout under %s", moved, hist)
    return moved


# -- the step -------------------------------------------------------------------------------------


def _delete_instant_files(ctx: CleanerContext, tl: Timeline, instants: list[Instant]) -> None:
    """Delete the instants' timeline files: every requested and inflight file first (one batch
    request per 1,000 on an object store; each instant still has its completed file, so none
    looks pending), then the completed files one by one, oldest first, so that the instants
    left active are always a suffix of the timeline."""
    files = [f for i in sorted(instants, key=lambda i: i.requested_time) for f in _files_of(tl, i)]
    pending = [tl.path_of(f) for f in files if not f.is_completed]
    if pending:
        ctx.storage.delete_many(pending)
    faults.point("mid-archival")  # tests stop archival here: every archived instant still completed
    for f in files:
        if f.is_completed:
            ctx.storage.delete(tl.path_of(f))


def sweep_uncommitted(ctx: CleanerContext, tl: Timeline, below: str | None,
                      walked: list[FileEntry] | None = None) -> list[str]:
    """Delete base and log files that would turn visible when the earliest active instant
    moves up to ``below``: files in [earliest, below) of no completed write, and files of a
    completed write there that its commit does not name (a losing task attempt's). Readers
    ignore them today (their instant is not completed, or the commit's stats do not name them)
    but would take them for archived commits' files tomorrow, with no stats left to check. They
    are leftovers: a zombie writer's file written after its rollback, an abort that failed
    half-way, a retried task still writing after its commit. Nothing pending or new can be in
    that range (the cutoff is below every pending instant, and new instants are issued above
    everything)."""
    lo = tl.earliest_time()
    if lo is None:
        return []
    done = tl.completed_write_times()
    names: dict[str, set[str]] = {}

    def garbage(t: str, name: str) -> bool:
        if t not in done:
            return True
        if t not in names:
            names[t] = named_files(tl.commit_metadata(done[t]).all_stats())
        return name not in names[t]

    bases, logs = list_files(ctx.storage, logs=True, walked=walked)
    swept = []
    for f in [*bases, *logs]:
        t = f.instant_time
        if t >= lo and (below is None or t < below) and garbage(t, f.name) and ctx.storage.delete(f.path):
            swept.append(f.path)
    if swept:
        log.warning(
            "deleted %d uncommitted data files below the new earliest instant %s (first: %s)",
            len(swept),
            below,
            swept[0],
        )
    return swept


def _remove_from_active(ctx: CleanerContext, tl: Timeline, instants: list[Instant],
                        walked: list[FileEntry] | None = None) -> list[str]:
    """Sweep, then delete the instants' files oldest first; returns the swept data files.
    ``walked``: the walk the choice was made on (a file written since is in no range the sweep
    judges: those lie below every pending instant, and new ones are issued above everything)."""
    gone = {(i.requested_time, i.action) for i in instants}
    remaining = [i.requested_time for i in tl.latest_states() if (i.requested_time, i.action) not in gone]
    swept = sweep_uncommitted(ctx, tl, min(remaining) if remaining else None, walked)
    _delete_instant_files(ctx, tl, instants)
    return swept


def _finish_interrupted(ctx: CleanerContext, tl: Timeline, swept: list[str]) -> int:
    """Remove active instants that a batch file already holds (an archival that crashed)."""
    history = load_history(ctx.table)
    if not history:
        return 0
    newest_last = history[-1].requested_time
    active = [i for i in tl.latest_states() if i.requested_time <= newest_last and i.is_completed]
    if not active:
        return 0
    archived = {(a.requested_time, a.action) for a in history}
    done = [i for i in active if (i.requested_time, i.action) in archived]
    if done:
        swept.extend(_remove_from_active(ctx, tl, done))
        log.info("finished an interrupted archival: removed %d already archived instants", len(done))
    return len(done)


@contextmanager
def _kept_under_lock(ctx: CleanerContext) -> Iterator[None]:
    """Under the lock only this archival changes the history and the metadata table's timeline
    and files partition, which its steps (the choice, the files partition's compaction, the
    choice again, the append, the history's compaction and trust check) each read: each folder
    is read once (:meth:`~multiwriter.storage.Storage.folder_kept`)."""
    mdt = metadata_files.MDT_DIR
    with ExitStack() as stack:
        for folder in (ctx.config.history_dir, f"{mdt}/{ctx.config.timeline_dir}", f"{mdt}/{metadata_files.PARTITION}"):
            stack.enter_context(ctx.storage.folder_kept(folder))
        yield


def _may_be_due(ctx: CleanerContext, keep_max: int) -> bool:
    """Could archival have anything to do, by the run's timeline and archive? More than
    ``keep_max`` completed instants, JSON batches of earlier releases to migrate, or an active
    completed instant the history holds already (an archival that crashed). Every choice is
    made again under the lock; a run that skips the lock on an older view leaves the work to
    the next run. Asked only of a timeline the run holds (after a lock hold of its own the
    run's listing is gone, and the lock's reads answer it as cheaply)."""
    if not ctx.holds_timeline():
        return True
    tl = ctx.timeline()
    states = tl.latest_states()
    if sum(i.is_completed for i in states) > keep_max or batch_files(ctx.table):
        return True
    archived = ctx.remembered("history", lambda: load_history(ctx.table))
    newest = archived[-1].requested_time if archived else None
    return newest is not None and any(i.is_completed and i.requested_time <= newest for i in states)


def archive(ctx: CleanerContext, *, keep_min: int, keep_max: int, retain_commits: int) -> ArchiveResult:
    """Move the oldest completed instants to history when more than ``keep_max`` are active.

    Decided and recorded under the lock (so two cleaners never archive the same instants into two
    batches); instant files are deleted after the lock is released.
    """
    result = ArchiveResult()
    if not _may_be_due(ctx, keep_max):  # no lock taken: the next run looks again
        result.distrusted = lsm.trusted_manifest(ctx.storage, ctx.config.history_dir)[2]
        for p in result.distrusted:
            log.error("%s", p)
        return result
    ctx.forget("archived_times", "history")  # the history may change here; later steps read it again
    with ctx.locked() as tl, _kept_under_lock(ctx):
        migrated = migrate_json_batches(ctx)
        result.finished = _finish_interrupted(ctx, tl, result.swept)
        if result.finished:
            tl = ctx.table.timeline()
        # one walk of the table for the choice and the sweep after it (a request per 1,000 files
        # on an object store), taken only when there are enough instants to archive
        walked = ctx.storage.walk_files("") if sum(i.is_completed for i in tl.latest_states()) > keep_max else None
        if walked is not None:
            ctx.keep_walk(walked)  # the failed-write sweep and the orphan scan judge this walk too
        chosen, result.held_back_by = choose(tl, keep_min=keep_min, keep_max=keep_max, retain_commits=retain_commits,
                                             walked=walked)
        if result.held_back_by == METADATA_RULE and compact_metadata_table(tl):
            chosen, result.held_back_by = choose(tl, keep_min=keep_min, keep_max=keep_max,
                                                 retain_commits=retain_commits, walked=walked)
        if chosen:
            ctx.check_lock(f"the archival of {len(chosen)} instants")  # two archivers would write two batches
            name = lsm.append(ctx.storage, ctx.config.history_dir, [lsm_record(tl, i) for i in chosen])
        if chosen or migrated:
            result.compacted = lsm.compact_and_clean(ctx.storage, ctx.config.history_dir)
        # after this run's manifest, which is written above a bad one and holds every archived instant
        result.distrusted = lsm.trusted_manifest(ctx.storage, ctx.config.history_dir)[2]
        for p in result.distrusted:
            log.error("%s", p)
        if not chosen:
            return result
    result.swept.extend(_remove_from_active(ctx, tl, chosen, walked))  # oldest first: a suffix stays active
    ctx.forget_files(result.swept)
    result.archived = len(chosen)
    result.batch = name
    log.info(
        "archived %d instants (%s) into %s; cutoff held by %s",
        len(chosen),
        f"{chosen[0].requested_time}..{chosen[-1].requested_time}",
        name,
        result.held_back_by,
    )
    return result
