"""Orphans: data files no instant accounts for, and stale bookkeeping files.

An orphan data file has an instant time that is no write instant on the active timeline
(neither completed nor pending) and is not older than the earliest active instant: files older
than that belong to archived commits and readers treat them as committed, so they are never
orphans. Orphans come from writers that were only paused while the cleaner rolled them back
(a *zombie* that wrote one more file), from aborted attempts whose cleanup failed, or from tools
that are not multiwriter. Readers already ignore them; they only cost storage. Because a file's
instant may be on its way (a writer between issuing its instant and writing the requested file
holds the lock, but storage listings are not atomic), only files older than ``min_age_s`` by
modification time are reported, and deleted only when asked.

Stale bookkeeping: marker directories (``.hoodie/.temp/<T>``) and heartbeat files
(``.hoodie/.heartbeat/<T>``) of instants that are completed, or gone from the timeline and no
longer beating. A writer killed right after its commit leaves them behind; nothing reads them
except ``multiwriter heartbeats``, which would show a dead writer forever.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from ..instant_time import parse_time
from ..table import instant as inst
from ..table import layout
from ..table.timeline import Timeline
from . import CleanerContext

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Orphan:
    path: str  # relative to the table root
    instant_time: str
    age_s: float
    size: int


def _write_times(tl: Timeline) -> set[str]:
    return {i.requested_time for i in tl.latest_states() if i.action in inst.WRITE_ACTIONS}


def find(ctx: CleanerContext, tl: Timeline, *, min_age_s: float, now: float | None = None) -> list[Orphan]:
    """Orphan data files older than ``min_age_s`` (by modification time), by path."""
    now = time.time() if now is None else now
    known = _write_times(tl)
    earliest = tl.earliest_time()
    out = []
    for e in ctx.storage.walk_files(""):
        if any(seg.startswith(".") for seg in e.path.split("/")[:-1]):
            continue  # .hoodie and other hidden directories hold no data files
        name = e.path.rsplit("/", 1)[-1]
        parsed = layout.parse_data_file(name)
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

    n = 0
    for d in ctx.storage.list_subdirs(layout.TEMP_DIR):
        t = d.rsplit("/", 1)[-1]
        if inst.TIME_RE.match(t) and stale(t):
            ctx.storage.delete_dir(d)
            n += 1
    for e in ctx.storage.list_dir(layout.HEARTBEAT_DIR, files_only=True):
        t = e.path.rsplit("/", 1)[-1]
        if inst.TIME_RE.match(t) and stale(t) and ctx.storage.delete(e.path):
            n += 1
    return n
