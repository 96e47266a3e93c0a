"""Quarantine: a bad pending instant is moved aside, so that it stops only itself, not the table.

A pending rollback, clean or compaction whose plan cannot be read, names paths out of the table,
or contradicts the table (:class:`~multiwriter.errors.PlanRefusedError`), and any pending action
at a time that belongs to a completed instant or below the archived timeline
(:func:`multiwriter.table.plan_checks.forged_time`), would otherwise stay pending for good: it
holds archival (nothing is archived past a pending instant), retention (one clean at a time),
and errors on every run. None of them can be legitimate work of a live process (an abandoned
one's owner stopped beating; a forged time is never issued), so the companion job moves its
timeline files, under the table lock, to ``.hoodie/.quarantine/`` inside the table, deletes
nothing else (no data file, no marker: a forged instant's markers may be a committed one's), and
reports each file with what a person must do. Every run lists what is still in quarantine
(:func:`waiting`), until a person deletes it.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import PlanRefusedError, TableFormatError
from ..format import instant as inst
from ..table import history, metadata_files
from ..format import layout, paths
from ..format.instant import Instant
from ..table.plan_checks import forged_time
from ..table.timeline import Timeline
from . import CleanerContext

log = logging.getLogger(__name__)

QUARANTINE_DIR = ".hoodie/.quarantine"
#: what a person must do about a quarantined file
HINT = (f"inspect it in {QUARANTINE_DIR}/ and delete it there (a real plan of a dead Hudi process is planned "
        "again by its service)")


@dataclass(frozen=True)
class Quarantined:
    """One timeline file moved aside: where it was, where it is, and why."""

    source: str
    dest: str
    why: str

    def __str__(self) -> str:
        return f"{self.source}: {self.why}; moved to {self.dest}: {HINT}"


def _dest(ctx: CleanerContext, name: str, where: str) -> str:
    prefix = "metadata-" if where == "metadata" else ""
    dest = f"{QUARANTINE_DIR}/{prefix}{name}"
    n = 1
    while ctx.storage.exists(dest):
        dest, n = f"{QUARANTINE_DIR}/{prefix}{name}.{n}", n + 1
    return dest


def _move(ctx: CleanerContext, timeline_dir: str, names: list[str], why: str, where: str = "data") -> list[Quarantined]:
    out = []
    for name in names:
        src = f"{timeline_dir}/{name}"
        try:
            data = ctx.storage.read_bytes(src)
        except FileNotFoundError:
            continue
        dest = _dest(ctx, name, where)
        ctx.storage.write_bytes(dest, data)
        ctx.storage.delete(src)
        q = Quarantined(src, dest, why)
        log.error("quarantined %s", q)
        out.append(q)
    return out


def quarantine(ctx: CleanerContext, t: str, action: str, why: str) -> list[Quarantined]:
    """Move the pending files of instant (``t``, ``action``) to the quarantine, under the lock,
    when it is still pending there (never a completed instant's files)."""
    with ctx.locked(t) as tl:
        current = tl.find(t, action)
        if current is None or not current.is_pending:
            return []
        names = [i.file_name(ctx.config.version) for i in tl.instants
                 if i.requested_time == t and i.is_pending and inst.instant_action(i.action) == inst.instant_action(action)]
        moved = _move(ctx, ctx.config.timeline_dir, names, why)
    try:
        ctx.stop_heartbeat(t)
    except OSError as e:  # a heartbeat file left behind is only bookkeeping
        log.warning("could not delete the heartbeat of quarantined instant %s: %s", t, e)
    return moved


def history_floor(ctx: CleanerContext) -> str | None:
    """The newest archived requested time (None when nothing is archived or it cannot be read)."""
    try:
        archived = ctx.remembered("history", lambda: history.load(ctx.storage, ctx.config.history_dir))
    except Exception as e:  # noqa: BLE001 -- an unreadable history is archival's report, not this check's
        log.debug("history of %s not read for the pending-time check: %s", ctx.table_name, e)
        return None
    return max((a.requested_time for a in archived), default=None)


def forged_pending(tl: Timeline, floor: str | None) -> list[tuple[Instant, str]]:
    """Pending instants of ``tl`` at impossible times, with why."""
    done = tl.completed()
    out = []
    for p in tl.pending():
        why = forged_time(p, done, floor)
        if why is not None:
            out.append((p, why))
    return out


def audit(ctx: CleanerContext) -> list[Quarantined]:
    """Quarantine every pending action at an impossible time, on the data timeline and on the
    metadata table's (before any step could act on one: roll a "failed write" back over a
    completed commit's files, undo a "compaction" over the metadata table's base file)."""
    moved: list[Quarantined] = []
    tl = ctx.timeline()
    for p, why in forged_pending(tl, history_floor(ctx)):
        moved += quarantine(ctx, p.requested_time, p.action,
                            f"pending {p.action} refused: {why} (an instant time is issued above everything)")
    if metadata_files.enabled(ctx.config):
        moved += _audit_metadata_table(ctx)
    return moved


def _audit_metadata_table(ctx: CleanerContext) -> list[Quarantined]:
    mdt_dir = metadata_files.MetadataTable(ctx.storage, ctx.config).timeline_dir
    if not _forged_metadata_pending(ctx.storage.list_names(mdt_dir)):
        return []  # nothing to move: no lock taken (the same names are judged again under it)
    moved: list[Quarantined] = []
    with ctx.locked():  # the metadata timeline changes only under the data table's lock
        for name, i, why in _forged_metadata_pending(ctx.storage.list_names(mdt_dir)):
            moved += _move(ctx, mdt_dir, [name], f"pending {i.action} of the metadata table refused: {why}",
                           "metadata")
    return moved


def _forged_metadata_pending(names: list[str]) -> list[tuple[str, Instant, str]]:
    """The pending instants among a metadata timeline's file names at impossible times, with why."""
    parsed = [(n, _instant(n)) for n in names]
    done = [i for _, i in parsed if i is not None and i.is_completed]
    finished = {(i.requested_time, inst.instant_action(i.action)) for i in done}
    out = []
    for name, i in parsed:
        if i is None or not i.is_pending or (i.requested_time, inst.instant_action(i.action)) in finished:
            continue
        why = forged_time(i, done, None)
        if why is None and i.requested_time <= metadata_files.BOOTSTRAP_TIME and i.action != inst.DELTA_COMMIT:
            why = f"its time {i.requested_time} is not above the metadata table's bootstrap"
        if why is not None:
            out.append((name, i, why))
    return out


def unsafe_metadata_records(ctx: CleanerContext) -> list[str]:
    """The records of the metadata table's latest slice that readers skip (a partition such as
    ``../x`` or an absolute path, a file name no file system takes), each naming its file and
    what happened to it. While any is in a log file of the open slice, that slice is compacted
    now, under the table lock, so that the new base leaves them out (the files stay, readers of
    older slices skip them; a person may inspect them). One in the base alone goes with the
    base's next compaction."""
    if not metadata_files.enabled(ctx.config):
        return []
    found = metadata_files.MetadataTable(ctx.storage, ctx.config).ignored()
    if not found:
        return []
    with ctx.locked() as tl:
        newest = max((i.completion_time or i.requested_time for i in tl.completed()), default=None)
        compacted = newest is not None and metadata_files.compact_open_slice(tl.storage, tl.config, newest, tl.pending_times())
    after = ("left out of the metadata table's new base by the compaction this run made" if compacted
             else "skipped by readers; the files partition's next compaction leaves it out")
    out = [f"{why}: {after}" for why in found]
    for line in out:
        log.warning("%s", line)
    return out


def _instant(name: str) -> Instant | None:
    try:
        return inst.decode_file_name(name)
    except (ValueError, TableFormatError):
        return None


def waiting(ctx: CleanerContext) -> list[str]:
    """The files in quarantine (relative to the table), oldest name first: on an object store
    from the run's walk of the table when it took one (a gauge; no listing more)."""
    walk = None if ctx.storage.is_local else ctx.walk_taken()
    if walk is not None:
        under = QUARANTINE_DIR.rstrip("/") + "/"
        return sorted(e.path for e in walk if e.path.startswith(under) and "/" not in e.path[len(under):])
    try:
        return sorted(e.path for e in ctx.storage.list_dir(QUARANTINE_DIR, files_only=True))
    except FileNotFoundError:
        return []


__all__ = ["HINT", "QUARANTINE_DIR", "Quarantined", "audit", "forged_pending", "quarantine", "unsafe_metadata_records",
           "waiting"]


# -- compaction plans against the timeline's slices ---------------------------------------------------------


def check_compaction_inputs(ctx: CleanerContext, tl: Timeline, t: str, operations: Sequence[Any], source: str) -> None:
    """A compaction at ``t`` merges, per file group, the slice the timeline has: the group's
    latest committed base and every committed log of that slice whose deltacommit completed
    before ``t`` (a later one belongs to the slice ``t`` opens). A plan naming anything else
    (a log left out would vanish from every snapshot once the new base commits; a base or log
    of another slice would bring back old rows) is refused with :class:`PlanRefusedError`."""
    from ..table.snapshot import Snapshot

    parts = sorted({op.partition_path for op in operations})
    for p in parts:
        if p:
            paths.partition(p, source=source)
    snap = Snapshot.build(ctx.storage, tl, partitions=parts or None)
    view = snap.view
    for op in operations:
        fs = snap.slices.get((op.partition_path, op.file_id))
        planned = ({op.data_file_name} if op.data_file_name else set()) | set(op.delta_file_names)
        if fs is None:
            raise PlanRefusedError(
                f"{source}: compaction {t} names file group {op.file_id} of {op.partition_path!r}, which has no live "
                "slice on the timeline; refused, nothing rewritten", source=source, path=op.file_id)
        expected = ({fs.name} if fs.has_base else set()) | {
            lf.name for lf in fs.logs if view.completion_of(lf.instant_time) < t}
        if planned != expected:
            odd = sorted(planned ^ expected)
            raise PlanRefusedError(
                f"{source}: compaction {t} of file group {op.file_id} in {op.partition_path!r} plans {len(planned)} "
                f"files, but the slice as the timeline has it is {len(expected)} files (first difference: {odd[0]}); "
                "refused, nothing rewritten", source=source, path=layout.data_file_path(op.partition_path, odd[0]),
                # a plan naming files our timeline does not show committed may be a JVM writer's
                # (its view can hold more); one leaving out what completed before it is no one's
                forged=bool(expected - planned))
