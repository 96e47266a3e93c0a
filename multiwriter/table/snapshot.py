"""Snapshots: per live file group, the newest committed base file with, on Merge-on-Read
tables, the committed log files of its slice (as readers decide).

Files of pending, rolled-back or unknown instants are never visible, nor are file groups that a
completed replace commit retired. A file older than the earliest instant on the active timeline
counts as committed only when the archived timeline names its instant as a completed write (Hudi
readers take every such file; a paused writer's late file after its rollback and archival would
show). Rollback still deletes files before their instant files. The rules live in :mod:`.view`.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..storage import Storage
from . import metadata_files
from .files import FileGroup, FileSlice, list_data_files, list_files, list_partitions
from .timeline import Timeline
from .view import TimelineView

__all__ = ["FileSlice", "LogHealth", "Snapshot", "list_data_files", "list_partitions", "log_health", "visibility"]


class Snapshot:
    """The visible file slices of a table at one point of its timeline."""

    def __init__(
        self, slices: dict[FileGroup, FileSlice], timeline: Timeline, as_of: str | None, view: TimelineView | None = None
    ) -> None:
        self.slices = slices
        self.timeline = timeline
        self.as_of = as_of
        self.view = view or TimelineView(timeline)

    @classmethod
    def build(
        cls,
        storage: Storage,
        timeline: Timeline,
        *,
        as_of: str | None = None,
        partitions: list[str] | None = None,
    ) -> Snapshot:
        view = TimelineView(timeline)
        listed = metadata_files.list_files(storage, timeline.config, partitions, logs=timeline.config.merge_on_read)
        bases, logs = listed if listed is not None else list_files(storage, partitions, logs=timeline.config.merge_on_read)
        slices = view.latest_slices(bases, as_of)
        if logs:
            slices = view.with_logs(slices, bases, logs, as_of)
        return cls(slices, timeline, as_of, view)

    def files(self) -> list[FileSlice]:
        return sorted(self.slices.values(), key=lambda f: (f.partition, f.file_id))

    def in_partition(self, partition: str) -> list[FileSlice]:
        return [f for f in self.files() if f.partition == partition]

    def partitions(self) -> list[str]:
        return sorted({f.partition for f in self.slices.values()})


@dataclass
class LogHealth:
    """Merge-on-Read files of one partition not yet compacted: what compaction has to catch up."""

    partition: str
    log_files: int = 0
    log_bytes: int = 0
    delta_commits: int = 0  # most deltacommits over one base file (its log files' instants)
    oldest_log: str | None = None  # requested time of the oldest log file


def log_health(snapshot: Snapshot) -> dict[str, LogHealth]:
    """Per partition with log files in the snapshot's slices: how far compaction lags."""
    out: dict[str, LogHealth] = {}
    for f in snapshot.files():
        if not f.logs:
            continue
        h = out.setdefault(f.partition, LogHealth(f.partition))
        h.log_files += len(f.logs)
        h.log_bytes += sum(lf.size for lf in f.logs)
        h.delta_commits = max(h.delta_commits, len({lf.instant_time for lf in f.logs}))
        oldest = min(lf.instant_time for lf in f.logs)
        h.oldest_log = oldest if h.oldest_log is None else min(h.oldest_log, oldest)
    return out


def visibility(timeline: Timeline, as_of: str | None) -> Callable[[str], bool]:
    """A predicate: is a file written at requested time T visible (as of ``as_of``)?

    ``as_of`` is an instant time: commits whose requested time is at or before it are visible
    (as Hudi's time travel and hudi-rs decide it; the completion time orders incremental reads).
    Replaced file groups are a per-group matter: see :meth:`TimelineView.latest_slices`.
    """
    view = TimelineView(timeline)
    return lambda t: view.visible(t, as_of)
