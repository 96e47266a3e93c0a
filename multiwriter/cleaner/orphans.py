"""Orphans and failed writes: data files no completed instant accounts for, and stale
bookkeeping files.

Failed writes (:func:`failed_write_files`, deleted by default): a data file whose instant is
neither completed on the active timeline, nor pending there, nor recorded in the archive can
never become part of a commit, so it is garbage; and readers (ours and Hudi's) take a file older
than the earliest active instant for an archived commit's file, so such garbage may be *visible*.
It comes from writers paused past their heartbeat that woke up after their rollback and wrote
one more file (the pre-write check leaves only a pause between check and write), or from aborts
and rollbacks that failed half-way. Decided in this order: list the data files, then load the
timeline, then the archive. A data file is written only after its instant's requested file
exists, so a live instant seen in the listing is pending or completed on the timeline loaded
after it, or archived in the history read after that. Files younger than a safe age (some
heartbeat bounds) are left alone anyway, their age being the older of what the writer's clock
(the instant time) and the store's clock (the modification time) say, so one skewed clock does
not hold a failed write's files back. When the history holds files that are
not readable here (a version 6 archive), archived commits cannot be told from failed ones and files
older than the earliest active instant are kept.

An orphan data file has an instant time that is no instant on the active timeline (neither
completed nor pending; a pending clustering or compaction counts) and is not older than the earliest active instant: files older
than that belong to archived commits and readers treat them as committed, so they are never
orphans. Orphans come from writers that were only paused while the cleaner rolled them back
(a *zombie* that wrote one more file), from aborted attempts whose cleanup failed, or from tools
that are not multiwriter. Readers already ignore them; they only cost storage. Because a file's
instant may be on its way (a writer between issuing its instant and writing the requested file
holds the lock, but storage listings are not atomic), only files older than ``min_age_s`` by
modification time are reported, and deleted only when asked.

Log files (Merge-on-Read) are data files here like base files: a log file is named with the
requested time of the deltacommit that wrote it, so the same rules judge it by that instant.

Stale bookkeeping: marker directories (``.hoodie/.temp/<T>``) and heartbeat files
(``.hoodie/.heartbeat/<T>``) of instants that are completed, or gone from the timeline and no
longer beating. A writer killed right after its commit leaves them behind; nothing reads them
except ``multiwriter heartbeats``, which would show a dead writer forever.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from .. import markers
from ..instant_time import parse_time
from ..table import history
from ..format import layout
from ..table.files import FileSlice, LogFile, list_files
from ..format.log_file import parse_log_file
from ..table.metadata import named_files
from ..format.instant import Instant
from ..table.timeline import Timeline
from . import CleanerContext
from . import archive as archive_mod

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Orphan:
    path: str  # relative to the table root
    instant_time: str
    age_s: float
    size: int


def _write_times(tl: Timeline) -> set[str]:
    """Requested times of every instant on the active timeline, whatever its action: a pending
    clustering or compaction writes base files under its own action (``clustering``,
    ``compaction``) before it completes as a replace commit or a commit, and no other action
    names a data file with its time."""
    return {i.requested_time for i in tl.latest_states()}


def find(ctx: CleanerContext, tl: Timeline, *, min_age_s: float, now: float | None = None) -> list[Orphan]:
    """Orphan data files older than ``min_age_s`` (by modification time), by path."""
    now = time.time() if now is None else now
    known = _write_times(tl)
    earliest = tl.earliest_time()
    out = []
    for e in ctx.walked():  # the sweep's walk of this run when it walked, taken before ``tl``
        if any(seg.startswith(".") for seg in e.path.split("/")[:-1]):
            continue  # .hoodie and other hidden directories hold no data files
        name = e.path.rsplit("/", 1)[-1]
        parsed = layout.parse_data_file(name) or parse_log_file(name)
        if parsed is None or parsed.instant_time in known:
            continue
        if earliest is None or parsed.instant_time < earliest:
            continue  # an archived commit's file (or a table without instants): committed
        age = now - e.mtime_s
        if age >= min_age_s:
            out.append(Orphan(e.path, parsed.instant_time, age, e.size))
    return sorted(out, key=lambda o: o.path)


def delete(ctx: CleanerContext, orphans: list[Orphan]) -> int:
    """Delete orphans after checking again against a fresh timeline; returns how many went."""
    if not orphans:
        return 0
    tl = ctx.table.timeline()
    known = _write_times(tl)
    earliest = tl.earliest_time()
    n = 0
    for o in orphans:
        if o.instant_time in known or earliest is None or o.instant_time < earliest:
            continue
        if ctx.storage.delete(o.path):
            n += 1
    log.info("deleted %d orphan data files", n)
    return n


def _age_of_instant(t: str, now: float) -> float:
    try:
        return now - parse_time(t)
    except ValueError:
        return 0.0


def _age_of_file(f: FileSlice | LogFile, now: float) -> float:
    """A data file's age by its instant time (the writer's clock) or by its modification time
    (the store's clock), whichever is older: a writer whose clock runs ahead names its instants
    in the future, and its files must not wait for the cleaner's clock to catch up."""
    by_instant = _age_of_instant(f.instant_time, now)
    return by_instant if f.mtime_s is None else max(by_instant, now - f.mtime_s)


def clean_bookkeeping(ctx: CleanerContext, tl: Timeline, *, min_age_s: float, now: float | None = None) -> int:
    """Delete stale marker directories and heartbeat files; returns how many were removed."""
    now = time.time() if now is None else now
    by_time: dict[str, bool] = {}  # requested time -> completed?
    for i in tl.latest_states():
        by_time[i.requested_time] = by_time.get(i.requested_time, False) or i.is_completed

    def stale(t: str) -> bool:
        if t in by_time:
            return by_time[t]  # completed: nobody needs it; pending: rollback's business
        return _age_of_instant(t, now) >= min_age_s and ctx.is_lapsed(t)

    marker_times, heartbeats = _bookkeeping(ctx)
    n = 0
    for t in marker_times:
        if stale(t):
            markers.delete_dir(ctx.storage, t)
            n += 1
    for rel in heartbeats:
        t = rel.rsplit("/", 1)[-1]
        if layout.INSTANT_TIME_RE.match(t) and stale(t) and ctx.storage.delete(rel):
            n += 1
    return n


def _bookkeeping(ctx: CleanerContext) -> tuple[list[str], list[str]]:
    """Instant times with a marker folder, and heartbeat files. On an object store both come
    from the run's walk of the table (taken before the timeline they are judged on; a folder
    there exists only while it holds a file): two listings fewer. A local disk is listed (an
    empty marker folder walks as nothing)."""
    if ctx.storage.is_local:
        return (markers.instants_with_markers(ctx.storage),
                [e.path for e in ctx.storage.list_dir(layout.HEARTBEAT_DIR, files_only=True)])
    temp, beats = layout.TEMP_DIR + "/", layout.HEARTBEAT_DIR + "/"
    times: set[str] = set()
    heartbeats = []
    for e in ctx.walked():
        if e.path.startswith(temp):
            t, sep, _ = e.path[len(temp):].partition("/")
            if sep and layout.INSTANT_TIME_RE.match(t):
                times.add(t)
        elif e.path.startswith(beats) and "/" not in e.path[len(beats):]:
            heartbeats.append(e.path)
    return sorted(times), heartbeats


# -- failed writes --------------------------------------------------------------------------------

V6_ARCHIVE_DIR = history.V6_ARCHIVE_DIR


def failed_write_files(
    ctx: CleanerContext, *, min_age_s: float, now: float | None = None
) -> list[FileSlice | LogFile]:
    """Base and log files of instants that are neither completed (active timeline or archive)
    nor pending, or of completed ones that do not name them, old enough by the
    writer's or the store's clock (:func:`_age_of_file`); by path."""
    now = time.time() if now is None else now
    # first the files (archival's walk under the lock when it walked this run), then what
    # accounts for them: a timeline and the archive read after
    bases, logs = list_files(ctx.storage, walked=ctx.walked())
    files: list[FileSlice | LogFile] = [*bases, *logs]
    tl = ctx.timeline_after_walk()
    earliest = tl.earliest_time()
    if earliest is None:
        return []  # no active instant at all: nothing to judge against
    known = {i.requested_time for i in tl.latest_states()}  # completed or pending, any action
    done = tl.completed_write_times()
    archived, complete = archived_times(ctx, fresh=True)
    names: dict[str, set[str]] = {}
    out = []
    for f in files:
        t = f.instant_time
        if t in done and f.name not in (names.get(t) or names.setdefault(t, _named_files(tl, done[t]))):
            # a completed commit that does not name this file: the losing attempt of a retried or
            # speculative task that was still writing after the commit's reconciliation
            if _age_of_file(f, now) >= min_age_s:
                out.append(f)
            continue
        if t in known or t in archived:
            continue
        if t < earliest and not complete:
            continue  # may be a commit archived by another tool
        if _age_of_file(f, now) >= min_age_s:
            out.append(f)
    return sorted(out, key=lambda f: f.path)


def _named_files(tl: Timeline, i: Instant) -> set[str]:
    """File names a completed commit's write statistics name as written (their paths)."""
    return named_files(tl.commit_metadata(i).all_stats())


def archived_times(ctx: CleanerContext, *, fresh: bool = False) -> tuple[set[str], bool]:
    """Requested times of every archived instant that completed, and whether the archive is
    complete: Hudi's LSM history (written by us or by Hudi's archiver) and JSON batches of
    earlier releases; anything else there (a version 6 archive) cannot be read here. An
    archived instant that never completed accounts for no data file (readers take none).
    Read once per cleaner run (:meth:`~.CleanerContext.remembered`); ``fresh``: read now, as a
    deletion must, after listing the files it judges."""
    def read() -> tuple[set[str], bool]:
        with ctx.storage.listings_kept():  # one listing of the history folder for both reads
            return _read()

    def _read() -> tuple[set[str], bool]:
        foreign = history.unreadable_files(ctx.storage, ctx.config.history_dir)
        if foreign:
            log.info("archive holds files that are not multiwriter history batches (first: %s); "
                     "data files older than the earliest active instant are not swept", foreign[0])
        return {a.requested_time for a in archived_instants(ctx) if a.completion_time}, not foreign

    if fresh:  # read after the files it accounts for: another cleaner may have archived since
        ctx.forget("archived_times", "history")
    times, complete = ctx.remembered("archived_times", read)
    return set(times), complete


def archived_instants(ctx: CleanerContext) -> list:
    """Every archived instant (:func:`~.archive.load_history`), read once per cleaner run."""
    return ctx.remembered("history", lambda: archive_mod.load_history(ctx.table))


def sweep_failed_writes(ctx: CleanerContext, *, min_age_s: float, now: float | None = None) -> list[str]:
    """Delete :func:`failed_write_files`; returns the deleted paths."""
    deleted = [f.path for f in failed_write_files(ctx, min_age_s=min_age_s, now=now) if ctx.storage.delete(f.path)]
    ctx.forget_files(deleted)
    if deleted:
        log.warning(
            "deleted %d data files of failed writes (instant neither completed nor pending; first: %s)",
            len(deleted),
            deleted[0],
        )
    return deleted
