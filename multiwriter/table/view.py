"""Which files are committed: the one answer every reader, the index and the cleaner share.

A :class:`TimelineView` wraps one loaded :class:`~.timeline.Timeline` and decides:

* *committed*: a data file's instant is a completed write, or (Hudi's rule for archived
  instants) older than the earliest instant on the active timeline and not pending;
* *visible as of* a requested time (snapshot and time travel, as Hudi and hudi-rs decide it), or
  *completed by* a completion time (incremental reads, which follow commit completion order);
* *replaced*: file groups retired by a completed ``replacecommit`` (INSERT OVERWRITE, clustering).
  A replaced group is gone for every snapshot at or after the replace, even while its files wait
  on storage for the cleaner's retention window;
* *retained*: the earliest as-of time that the cleaner has not cut into, and which incremental
  ranges can still be answered exactly.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property

from ..errors import InstantNotRetainedError, TableFormatError
from . import instant as inst
from .instant import Instant
from .metadata import decode_records
from .files import FileGroup, FileSlice
from .timeline import Timeline

__all__ = ["FileGroup", "IncrementalPlan", "TimelineView"]


@dataclass(frozen=True)
class IncrementalPlan:
    """What an incremental read scans: one slice per file group (its latest as of the range's
    end) and the commit times whose rows are kept."""

    slices: tuple[FileSlice, ...]
    commit_times: frozenset[str]
    #: also keep rows whose commit time is below this (commits archived from the active timeline)
    archived_before: str | None = None


class TimelineView:
    """Visibility of data files under one timeline (see the module docstring)."""

    def __init__(self, timeline: Timeline) -> None:
        self.timeline = timeline
        self._done = timeline.completed_write_times()
        self._pending = {i.requested_time for i in timeline.pending()}
        self._earliest = timeline.earliest_time()
        self._names: dict[str, set[str]] = {}

    # -- committed / visible ---------------------------------------------------------------
    def committed(self, t: str) -> bool:
        """Is a file written at requested time ``t`` committed (as Hudi readers decide)?"""
        if t in self._done:
            return True
        if t in self._pending or self._earliest is None:
            return False
        return t < self._earliest

    def visible(self, t: str, as_of: str | None = None) -> bool:
        """Committed, and at or before ``as_of`` (a requested time) when one is given."""
        return self.committed(t) and (as_of is None or t <= as_of)

    def completed_by(self, t: str, end: str | None) -> bool:
        """Committed, and completed at or before ``end`` (a completion time). Archived instants
        completed before every active one; callers only ask for ``end`` past them."""
        i = self._done.get(t)
        if i is not None:
            return end is None or _completion(i) <= end
        return self.committed(t)

    def is_archived(self, t: str) -> bool:
        """Committed by the archived-instant rule (not on the active timeline)."""
        return t not in self._done and self.committed(t)

    def named(self, fs: FileSlice) -> bool:
        """Does the completed commit of ``fs``'s instant name this very file? (False for files of
        archived instants, whose statistics are not on the active timeline.)"""
        i = self._done.get(fs.instant_time)
        if i is None:
            return False
        names = self._names.get(i.requested_time)
        if names is None:
            stats = self.timeline.commit_metadata(i).all_stats()
            names = self._names[i.requested_time] = {st.path.rsplit("/", 1)[-1] for st in stats if st.path}
        return fs.name in names

    # -- replaced file groups ------------------------------------------------------------
    @cached_property
    def replacements(self) -> dict[FileGroup, Instant]:
        """Every file group retired by a completed replace commit, with the (first) instant."""
        out: dict[FileGroup, Instant] = {}
        for i in self.timeline.completed(frozenset({inst.REPLACE_COMMIT})):
            for g in self.timeline.commit_metadata(i).replaced_file_groups():
                out.setdefault(g, i)
        return out

    def replaced(self, as_of: str | None = None) -> set[FileGroup]:
        """Groups retired in the snapshot as of requested time ``as_of`` (latest when None)."""
        return {g for g, i in self.replacements.items() if as_of is None or i.requested_time <= as_of}

    def replaced_by_completion(self, end: str | None) -> set[FileGroup]:
        """Groups retired by replace commits completed at or before ``end``."""
        return {g for g, i in self.replacements.items() if end is None or _completion(i) <= end}

    # -- latest slices -------------------------------------------------------------------
    def latest_slices(self, files: Iterable[FileSlice], as_of: str | None = None) -> dict[FileGroup, FileSlice]:
        """Per live file group, its newest visible slice as of ``as_of`` (the snapshot)."""
        return _latest(files, lambda t: self.visible(t, as_of), self.replaced(as_of), self.named)

    def latest_slices_by_completion(self, files: Iterable[FileSlice], end: str | None) -> dict[FileGroup, FileSlice]:
        """Per live file group, its newest slice whose commit completed by ``end``."""
        return _latest(files, lambda t: self.completed_by(t, end), self.replaced_by_completion(end), self.named)

    # -- what cleaning and archival left ---------------------------------------------------
    @cached_property
    def has_history(self) -> bool:
        """Were instants archived from this table's active timeline?"""
        tl = self.timeline
        return bool(tl.storage.list_dir(tl.config.history_dir, files_only=True))

    @cached_property
    def earliest_completion(self) -> str | None:
        """The earliest completion time on the active timeline; archived instants completed
        before it (archival removes a prefix in completion order)."""
        return min((_completion(i) for i in self.timeline.completed()), default=None)

    @cached_property
    def retained_from(self) -> str | None:
        """The earliest as-of time whose snapshot is still whole on storage (None: all are).

        The cleaner keeps, per file group, the slice visible as of its *earliest commit to
        retain* E and every newer one, so snapshots as of E or later are whole; E of every clean
        on the active timeline counts, pending ones too (they may be deleting right now). After
        archival, as-of times before the earliest active instant are not answered either: the
        cleans that cut into them may have been archived.
        """
        bounds = [e for e in (_clean_bound(self.timeline, i) for i in self.timeline.latest_states()) if e]
        if self.has_history and self._earliest is not None:
            bounds.append(self._earliest)
        return max(bounds, default=None)

    def check_as_of(self, as_of: str | None) -> None:
        """Raise when the snapshot as of ``as_of`` may have lost slices to the cleaner."""
        floor = self.retained_from if as_of is not None else None
        if floor is not None and as_of is not None and as_of < floor:
            raise InstantNotRetainedError(
                f"cannot read {self.timeline.storage.uri} as of {as_of}: the cleaner has removed file slices or "
                f"instants that snapshot needs; the earliest as-of time still readable exactly is {floor}",
                requested=as_of,
                earliest=floor,
            )

    # -- incremental -----------------------------------------------------------------------
    def incremental(self, files: Iterable[FileSlice], start: str | None, end: str | None) -> IncrementalPlan:
        """Plan an exact incremental read of the commits completed in (start, end].

        Per file group touched by a commit in the range, the slice written by the last such
        commit is the group's latest slice as of ``end``; rows in it whose commit time is a
        commit in the range are exactly the latest in-range version of every record changed in
        the range. Groups retired by a replace completed by ``end`` are skipped (their rows were
        overwritten or moved). Raises :class:`InstantNotRetainedError` rather than answer
        partially when cleaning deleted a needed slice, or archival removed instants that may
        have completed in the range.
        """
        files = list(files)
        in_range = [i for i in self.timeline.completed_writes() if _within(_completion(i), start, end)]
        archived_before = self._archived_rows(start, end)
        slices = self._needed_slices(files, end, {i.requested_time for i in in_range}, archived_before)
        return IncrementalPlan(tuple(slices), frozenset(i.requested_time for i in in_range), archived_before)

    def _archived_rows(self, start: str | None, end: str | None) -> str | None:
        """The bound below which rows of archived commits are in range, or None (not in range);
        raises when archival makes that undecidable."""
        floor = self.earliest_completion
        if not self.has_history or floor is None or (start is not None and start >= floor):
            return None
        if start is None and (end is None or (end >= floor and self._covers_retained(end))):
            return self._earliest
        raise InstantNotRetainedError(
            f"incremental read ({start}, {end}] of {self.timeline.storage.uri} reaches before the active timeline: "
            f"instants completed before {floor} were archived, so which of them fall in the range is unknown; "
            f"start at {floor} or later, or read from the beginning (start=None) up to the latest commit",
            requested=start,
            earliest=floor,
        )

    def _covers_retained(self, end: str) -> bool:
        """Every write at or before the retained as-of time completed by ``end``: then no slice of
        the view as of ``end`` was cleaned."""
        floor = self.retained_from
        if floor is None:
            return True
        return all(_completion(i) <= end for i in self.timeline.completed_writes() if i.requested_time <= floor)

    def _needed_slices(
        self, files: list[FileSlice], end: str | None, in_range: set[str], archived_before: str | None
    ) -> list[FileSlice]:
        by_path = {f.path: f for f in files}
        last_writer = self._last_writers(end)
        gone = self.replaced_by_completion(end)
        out: list[FileSlice] = []
        missing: list[tuple[FileGroup, Instant, str]] = []
        for g, (i, path) in last_writer.items():
            if g in gone or i.requested_time not in in_range:
                continue
            if path in by_path:
                out.append(by_path[path])
            else:
                missing.append((g, i, path))
        if archived_before is not None:
            latest = self.latest_slices_by_completion(files, end)
            out.extend(f for g, f in latest.items() if g not in last_writer and self.is_archived(f.instant_time))
        if missing:
            _raise_cleaned(self.timeline, missing)
        return sorted(out, key=lambda f: (f.partition, f.file_id))

    def _last_writers(self, end: str | None) -> dict[FileGroup, tuple[Instant, str]]:
        """Per file group, the last active write completed by ``end`` and the file it wrote."""
        out: dict[FileGroup, tuple[Instant, str]] = {}
        for i in self.timeline.completed_writes():
            if end is not None and _completion(i) > end:
                break
            for s in self.timeline.commit_metadata(i).all_stats():
                if s.file_id and s.path:
                    out[(s.partition_path, s.file_id)] = (i, s.path)
        return out


def _latest(
    files: Iterable[FileSlice], ok: Callable[[str], bool], gone: set[FileGroup], named: Callable[[FileSlice], bool]
) -> dict[FileGroup, FileSlice]:
    """Per group the newest acceptable slice; two files of one group and instant (a retried or
    speculative task's losing attempt that outlived reconciliation) resolve to the one the
    commit's write statistics name, never by listing order."""
    latest: dict[FileGroup, FileSlice] = {}
    for fs in files:
        key = (fs.partition, fs.file_id)
        if key in gone or not ok(fs.instant_time):
            continue
        cur = latest.get(key)
        if cur is None or fs.instant_time > cur.instant_time:
            latest[key] = fs
        elif fs.instant_time == cur.instant_time and fs.name != cur.name:
            if (named(fs), fs.name) > (named(cur), cur.name):
                latest[key] = fs
    return latest


def _completion(i: Instant) -> str:
    return i.completion_time or i.requested_time


def _within(ct: str, start: str | None, end: str | None) -> bool:
    return (start is None or ct > start) and (end is None or ct <= end)


def _raise_cleaned(tl: Timeline, missing: list[tuple[FileGroup, Instant, str]]) -> None:
    (g, i, path) = max(missing, key=lambda m: _completion(m[1]))
    earliest = _completion(i)
    raise InstantNotRetainedError(
        f"incremental read of {tl.storage.uri} needs {path} (file group {g[1]} in partition {g[0]!r}, written by "
        f"instant {i.requested_time}), which the cleaner has deleted; {len(missing)} such file(s). Ranges starting "
        f"at {earliest} or later are still exact, as is any range ending at the latest commit",
        earliest=earliest,
    )


def _clean_bound(tl: Timeline, i: Instant) -> str | None:
    """The earliest commit a clean instant retains (from its metadata, or its plan if pending)."""
    if i.action != inst.CLEAN:
        return None
    target = i if i.is_completed else Instant(i.requested_time, inst.CLEAN, inst.REQUESTED)
    key = "earliestCommitToRetain" if i.is_completed else "earliestInstantToRetain"
    try:
        data = tl.read_bytes(target)
    except FileNotFoundError:
        return i.requested_time  # archived meanwhile: it retained nothing older than itself
    if not data:
        return i.requested_time
    try:
        recs = decode_records(data, source=tl.path_of(target))
    except TableFormatError:
        return i.requested_time
    value = recs[0].get(key) if recs else None
    if isinstance(value, dict):
        value = value.get("timestamp")
    return str(value) if value else i.requested_time
