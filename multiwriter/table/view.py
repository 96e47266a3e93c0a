"""Which files are committed: the one answer every reader, the index and the cleaner share.

A :class:`TimelineView` wraps one loaded :class:`~.timeline.Timeline` and decides:

* *committed*: a data file's instant is a completed write on the active timeline, or older than
  its earliest instant and named as a completed write by the archived timeline (read once per
  view, without commit metadata, and only when such a file is met). Hudi's readers take every
  file older than the active timeline as committed; a writer rolled back while paused that wrote
  one more file after archival passed its instant would then show rows never acknowledged. Only
  when the archive holds files this package cannot read (a version 6 archive) is Hudi's rule kept;
* *visible as of* a requested time (snapshot and time travel, as Hudi and hudi-rs decide it);
  incremental reads follow commit completion order instead;
* *replaced*: file groups retired by a completed ``replacecommit`` (INSERT OVERWRITE, clustering).
  A replaced group is gone for every snapshot at or after the replace, even while its files wait
  on storage for the cleaner's retention window;
* *retained*: which as-of times and incremental ranges can still be answered exactly.

Time travel and incremental reads that reach before the active timeline read the archived
instants (:mod:`.history`: their commit metadata, replaced groups included) and answer exactly
as the active timeline did before archival, as long as the data files they need are still on
storage; only what the cleaner deleted makes them refuse.
"""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

from ..errors import InstantNotRetainedError, TableFormatError
from . import history
from ..format import instant as inst
from .files import FileGroup, FileSlice, LogFile, list_data_files
from .history import ArchivedInstant
from ..format.instant import Instant
from .metadata import CommitMetadata, decode_records, named_files
from .timeline import Timeline

__all__ = ["FileGroup", "IncrementalPlan", "TimelineView"]

#: the operation type of a clustering's replace commit
CLUSTER_OPERATION = "CLUSTER"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IncrementalPlan:
    """What an incremental read scans: one slice per file group (its latest as of the range's
    end) and the commit times whose rows are kept."""

    slices: tuple[FileSlice, ...]
    commit_times: frozenset[str]


class TimelineView:
    """Visibility of data files under one timeline (see the module docstring).

    ``archived``: instants archived from the timeline; given, the view answers over the whole
    history (the completed instants of both). :meth:`with_history` builds such a view when a
    read needs one."""

    def __init__(self, timeline: Timeline, archived: Sequence[ArchivedInstant] | None = None) -> None:
        self.timeline = timeline
        self._over_history = archived is not None
        archived = archived or ()
        self._archived: dict[str, ArchivedInstant] = {}
        if archived:
            active_keys = {(i.requested_time, inst.instant_action(i.action)) for i in timeline.latest_states()}
            self._archived = {
                a.requested_time: a
                for a in archived
                if a.completion_time and (a.requested_time, inst.instant_action(a.action)) not in active_keys
            }
        arch_writes = [a.instant for a in self._archived.values() if a.action in inst.WRITE_ACTIONS]
        # the timeline's completed writes are in this order already: sorted again only with archived ones
        writes = timeline.completed_writes()
        self._writes = sorted([*arch_writes, *writes], key=lambda i: (_completion(i), i.requested_time)) \
            if arch_writes else writes
        self._done = {i.requested_time: i for i in self._writes}
        self._pending = {i.requested_time for i in timeline.pending()}
        self._earliest = min([t for t in (timeline.earliest_time(),) if t is not None]
                             + [a.requested_time for a in archived], default=None)
        self._names: dict[str, set[str]] = {}
        self._meta_cache: dict[str, CommitMetadata] = {}

    def with_history(self) -> TimelineView:
        """This view over the archived instants too (itself when nothing was archived)."""
        if self._over_history or not self.has_history:
            return self
        return self._history_view

    @cached_property
    def _history_view(self) -> TimelineView:
        tl = self.timeline
        return TimelineView(tl, history.load(tl.storage, tl.config.history_dir))

    def commit_metadata(self, i: Instant) -> CommitMetadata:
        """The metadata of a completed write, active or archived."""
        a = self._archived.get(i.requested_time)
        if a is None or a.action != i.action:
            return self.timeline.commit_metadata(i)
        meta = self._meta_cache.get(i.requested_time)
        if meta is None:
            meta = a.commit_metadata()
            if meta is None:
                raise TableFormatError(
                    f"archived instant {i} has no commit metadata in {self.timeline.config.history_dir}; the "
                    "history is damaged: restore it from backup"
                )
            self._meta_cache[i.requested_time] = meta
        return meta

    # -- committed / visible ---------------------------------------------------------------
    def committed(self, t: str) -> bool:
        """Is a file written at requested time ``t`` committed (as Hudi readers decide)?"""
        if t in self._done:
            return True
        if t in self._pending or self._earliest is None or t >= self._earliest:
            return False
        archived = self._archived_completions
        return archived is None or t in archived

    def visible(self, t: str, as_of: str | None = None) -> bool:
        """Committed, and at or before ``as_of`` (a requested time) when one is given."""
        return self.committed(t) and (as_of is None or t <= as_of)

    def completion_of(self, t: str) -> str:
        """When the write requested at ``t`` completed. An archived write is looked up in the
        archived timeline (loaded once, only when a log file of one is sliced): its log file may
        belong to a slice whose base is newer than its requested time, when it completed after a
        compaction was planned. Its own time when the history does not know it."""
        i = self._done.get(t)
        if i is not None:
            return i.completion_time or t
        if self._earliest is not None and t < self._earliest and self.has_history:
            return (self._archived_completions or {}).get(t, t)
        return t

    @cached_property
    def _archived_completions(self) -> dict[str, str] | None:
        """Requested -> completion time of the archived data writes (None: the archive holds
        files not readable here, so archived commits cannot be told from failed writes)."""
        tl = self.timeline
        unreadable = history.unreadable_files(tl.storage, tl.config.history_dir)
        if unreadable:
            log.info("archive of %s holds files not readable here (first: %s): files older than the active "
                     "timeline are taken as committed, as Hudi does", tl.storage.uri, unreadable[0])
            return None
        return history.completed_writes(tl.storage, tl.config.history_dir)

    def named(self, fs: FileSlice | LogFile) -> bool:
        """Does the completed commit of ``fs``'s instant name this very file? (False for files of
        instants this view has no metadata of.)"""
        i = self._done.get(fs.instant_time)
        if i is None:
            return False
        names = self._names.get(i.requested_time)
        if names is None:
            names = named_files(self.commit_metadata(i).all_stats())  # the stats' paths, never their logFiles
            self._names[i.requested_time] = names
        return fs.name in names

    # -- replaced file groups ------------------------------------------------------------
    @cached_property
    def replacements(self) -> dict[FileGroup, Instant]:
        """Every file group retired by a completed replace commit, with the (first) instant."""
        out: dict[FileGroup, Instant] = {}
        for i in self._writes:
            if i.action == inst.REPLACE_COMMIT:
                for g in self.commit_metadata(i).replaced_file_groups():
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
        """Per live file group, its newest visible slice as of ``as_of`` (the snapshot); an
        ``as_of`` before the active timeline is answered over the archived instants."""
        view = self.with_history() if self._before_active(as_of) else self
        return _latest(files, lambda t: view.visible(t, as_of), view.replaced(as_of), view.named)

    def with_logs(self, slices: dict[FileGroup, FileSlice], bases: Iterable[FileSlice], logs: Iterable[LogFile],
                  as_of: str | None = None) -> dict[FileGroup, FileSlice]:
        """Merge-on-Read slicing (Hudi 1.x, by completion time): a committed log file belongs to
        the slice of its group whose base instant is the newest at or before the log's commit
        completed, so a deltacommit that completes after a compaction was planned lands on top
        of the compacted base. Each slice of ``slices`` gets the logs that belong to it and are
        visible as of ``as_of`` (their own requested time at or before it). A live group with
        visible logs and no visible base gets a *log-only* slice of them (Hudi's non-blocking
        writers start a bucket so; hudi-rs reads no such group, Hudi's JVM readers do)."""
        return self._attach(slices, bases, logs, self.committed, lambda t: self.visible(t, as_of),
                            self.replaced(as_of))

    def slices_by_completion(self, bases: Iterable[FileSlice], logs: Iterable[LogFile],
                             end: str | None) -> dict[FileGroup, FileSlice]:
        """Per live group, its slice as the commits completed by ``end`` (a completion time)
        left it, logs attached: what an incremental read up to ``end`` merges. A compaction
        not completed by ``end`` is not a slice boundary yet (its logs read over the old base,
        as Hudi merges a slice whose compaction is pending)."""
        bases = list(bases)

        def done(t: str) -> bool:
            return self.committed(t) and (end is None or self.completion_of(t) <= end)

        gone = self.replaced_by_completion(end)
        latest = _latest(bases, done, gone, self.named)
        return self._attach(latest, bases, logs, done, done, gone)

    def _attach(self, slices: dict[FileGroup, FileSlice], bases: Iterable[FileSlice], logs: Iterable[LogFile],
                base_ok: Callable[[str], bool], log_ok: Callable[[str], bool],
                gone: set[FileGroup]) -> dict[FileGroup, FileSlice]:
        """The one slicing rule: each log with ``log_ok`` joins its group's slice in
        ``slices`` when that slice's base is the newest ``base_ok`` base at or before the
        log's completion. A group not in ``slices`` nor ``gone`` (no acceptable base: its
        logs all complete before any) gets a log-only slice keyed by its first log's
        deltacommit, as Hudi's ``HoodieFileGroup.getBaseInstantTime`` keys it. Logs in
        completion order (the merge ranks them by :func:`~.merge_rule.log_order`)."""
        boundaries: dict[FileGroup, list[str]] = {}
        for b in bases:
            if b.group in slices and base_ok(b.instant_time):
                boundaries.setdefault(b.group, []).append(b.instant_time)
        found: dict[FileGroup, list[tuple[str, int, str, LogFile]]] = {}
        for lf in logs:
            cur = slices.get(lf.group)
            if cur is None and lf.group in gone:
                continue
            if not log_ok(lf.instant_time) or not self._named_log(lf):
                continue
            done = self.completion_of(lf.instant_time)
            if cur is not None and _slice_base(boundaries.get(lf.group, ()), done) != cur.instant_time:
                continue
            found.setdefault(lf.group, []).append((done, lf.version, lf.name, lf))
        out = dict(slices)
        for g, items in found.items():
            ordered = tuple(x[-1] for x in sorted(items, key=lambda x: x[:3]))
            cur = out.get(g)
            if cur is None:  # log-only
                first = min(lf.instant_time for lf in ordered)
                cur = FileSlice(g[0], g[1], first, "", 0)
            out[g] = dataclasses.replace(cur, logs=ordered)
        return out

    def incremental_merged(self, bases: Iterable[FileSlice], logs: Iterable[LogFile], start: str | None,
                           end: str | None) -> IncrementalPlan:
        """Plan an incremental read of a Merge-on-Read table: the commits completed in
        (start, end] (completion times, so a long write that completes after many short ones
        is read in the range it completed in, never skipped), and per file group one of them
        touched, its slice merged as of ``end``. The rows kept are the merged versions those
        commits wrote. Raises :class:`InstantNotRetainedError` rather than answer partially when
        the cleaner deleted a file of a needed slice (as :meth:`incremental` does); a range of
        table-service commits only (compaction, clustering) is empty without reading a file."""
        view = self._range_view(start)
        in_range = view._relevant(start, end)
        if not in_range:
            return IncrementalPlan((), frozenset())
        gone = view.replaced_by_completion(end)
        touched = {(s.partition_path, s.file_id) for i in in_range if not view.is_compaction(i)
                   for s in view.commit_metadata(i).all_stats() if s.file_id} - gone
        slices = view.slices_by_completion(bases, logs, end)
        expected = view._expected_slices(end)
        missing = [m for g in touched for m in _missing(g, slices.get(g), expected.get(g))]
        if missing:
            bound = max(_completion(expected[g].last) for g, _, _ in missing)
            _raise_cleaned(self.timeline, missing, bound)
        chosen = sorted((slices[g] for g in touched if g in slices), key=lambda f: (f.partition, f.file_id))
        return IncrementalPlan(tuple(chosen), frozenset(i.requested_time for i in in_range))

    @property
    def writes(self) -> tuple[Instant, ...]:
        """The completed writes this view knows (archived ones too over the history), in
        completion order."""
        return tuple(self._writes)

    def range_view(self, start: str | None) -> TimelineView:
        """The view a range from ``start`` is planned over (:meth:`_range_view`)."""
        return self._range_view(start)

    def missing_files(self, slices: dict[FileGroup, FileSlice], groups: Iterable[FileGroup],
                      end: str | None) -> list[tuple[FileGroup, Instant, str]]:
        """The files of ``groups``' slices as of ``end`` (a completion time) that the commit
        metadata names and ``slices`` (found on storage) lack: what the cleaner deleted. The
        check incremental reads make (:meth:`incremental_merged`), for any set of groups."""
        expected = self._expected_slices(end)
        return [m for g in groups for m in _missing(g, slices.get(g), expected.get(g))]

    def _range_view(self, start: str | None) -> TimelineView:
        """This view, over the archived instants too when ``start`` reaches before the active timeline."""
        floor = self.earliest_completion
        reaches_back = start is None or floor is None or start < floor
        return self.with_history() if reaches_back else self

    def is_compaction(self, i: Instant) -> bool:
        """A completed compaction: it rewrote slices, every row keeps its commit time."""
        return i.action == inst.COMMIT and self.timeline.config.merge_on_read and self.commit_metadata(i).compacted

    def is_table_service(self, i: Instant) -> bool:
        """Compaction or clustering: commits that move rows without changing one."""
        if i.action == inst.REPLACE_COMMIT:
            return self.commit_metadata(i).operation_type.upper() == CLUSTER_OPERATION
        return self.is_compaction(i)

    def _relevant(self, start: str | None, end: str | None) -> list[Instant]:
        """The writes completed in (start, end] whose files may hold rows of the range: every
        data commit, and a table service's only when a data commit of the range completed
        before it (clustering moved those rows into its new groups). A range of table services
        alone has no new rows, and nothing is read for it."""
        in_range = [i for i in self._writes if _within(_completion(i), start, end)]
        data = [i for i in in_range if not self.is_table_service(i)]
        if not data:
            return []
        first = min(_completion(i) for i in data)
        return [i for i in in_range if not self.is_table_service(i) or _completion(i) > first]

    def _expected_slices(self, end: str | None) -> dict[FileGroup, _Expected]:
        """Per file group, the files its slice as of ``end`` consists of, from the commit
        metadata of the writes completed by then (the base the newest base-writing commit
        named, and the log files that slice by completion onto it)."""
        out: dict[FileGroup, _Expected] = {}
        for i in self._writes:
            if end is not None and _completion(i) > end:
                break
            for s in self.commit_metadata(i).all_stats():
                if not (s.file_id and s.path):
                    continue
                e = out.setdefault((s.partition_path, s.file_id), _Expected(i))
                e.last = i
                if s.is_log:
                    e.logs.append((_completion(i), s.path.rsplit("/", 1)[-1], i))
                else:
                    e.bases[i.requested_time] = (s.path, i)
        return out

    def _named_log(self, lf: LogFile) -> bool:
        """A log file of an archived commit (:meth:`committed` checked the archive names it) is
        taken as committed (no stats to check), else its commit must name it (a failed task attempt's file is not)."""
        return lf.instant_time not in self._done or self.named(lf)

    def _before_active(self, as_of: str | None) -> bool:
        earliest = self.timeline.earliest_time()
        return as_of is not None and not self._over_history and (earliest is None or as_of < earliest) and self.has_history

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
        """An as-of time from which every snapshot is whole on storage (None: all are), known
        from the active timeline alone; earlier ones may be whole too (:meth:`check_as_of`).

        The cleaner keeps, per file group, the slice visible as of its *earliest commit to
        retain* E and every newer one, so snapshots as of E or later are whole; E of every clean
        on the active timeline counts, pending ones too (they may be deleting right now). After
        archival, as-of times before the earliest active instant are not covered: the cleans
        that cut into them may have been archived.
        """
        bounds = [e for e in (_clean_bound(self.timeline, i) for i in self.timeline.latest_states()) if e]
        earliest = self.timeline.earliest_time()
        if self.has_history and earliest is not None:
            bounds.append(earliest)
        return max(bounds, default=None)

    def check_as_of(self, as_of: str | None, files: Iterable[FileSlice] | None = None) -> None:
        """Raise when the snapshot as of ``as_of`` lacks slices the cleaner removed.

        At or after :attr:`retained_from` nothing is read; before it, the commit metadata of
        every write up to ``as_of`` (archived ones too) names the newest file of each group,
        and the snapshot is exact when all of them are on storage (``files``, listed when not
        given) and no clean in progress may be deleting them."""
        floor = self.retained_from if as_of is not None else None
        if floor is None or as_of is None or as_of >= floor:
            return
        listing = list(files) if files is not None else list_data_files(self.timeline.storage)
        whole, earliest = self.with_history()._whole_as_of(listing, as_of)
        busy = max((b for b in (_clean_bound(self.timeline, i) for i in self.timeline.pending(frozenset({inst.CLEAN}))) if b),
                   default=None)
        if busy is not None and as_of < busy:
            whole, earliest = False, max(earliest or busy, busy)
        if not whole:
            raise InstantNotRetainedError(
                f"cannot read {self.timeline.storage.uri} as of {as_of}: the cleaner has removed file slices that "
                f"snapshot needs; the earliest as-of time still readable exactly is {earliest}",
                requested=as_of,
                earliest=earliest,
            )

    def _whole_as_of(self, files: list[FileSlice], as_of: str) -> tuple[bool, str | None]:
        """Is the snapshot as of ``as_of`` whole on storage, and the earliest as-of time from
        which every snapshot is (None when not even the latest is)?

        Walks the writes by requested time, keeping per live group the file its newest write
        named; a snapshot is whole when every such file is listed."""
        present = {f.path for f in files}
        missing: set[FileGroup] = set()
        gone: set[FileGroup] = set()
        whole_at_as_of, whole_since = True, None
        for i in sorted(self._writes, key=lambda w: w.requested_time):
            meta = self.commit_metadata(i)
            for g in meta.replaced_file_groups():
                gone.add(g)
                missing.discard(g)
            for st in meta.all_stats():
                g = (st.partition_path, st.file_id)
                if st.file_id and st.path and g not in gone:
                    (missing.discard if st.path in present else missing.add)(g)
            if i.requested_time <= as_of:
                whole_at_as_of = not missing
            if missing:
                whole_since = None
            elif whole_since is None:
                whole_since = i.requested_time
        return whole_at_as_of, whole_since

    # -- incremental -----------------------------------------------------------------------
    def incremental(self, files: Iterable[FileSlice], start: str | None, end: str | None) -> IncrementalPlan:
        """Plan an exact incremental read of the commits completed in (start, end].

        Per file group touched by a commit in the range, the slice written by the last such
        commit is the group's latest slice as of ``end``; rows in it whose commit time is a
        commit in the range are exactly the latest in-range version of every record changed in
        the range. Groups retired by a replace completed by ``end`` are skipped (their rows were
        overwritten or moved). A range that starts before the active timeline is planned over
        the archived instants too. Raises :class:`InstantNotRetainedError` rather than answer
        partially when cleaning deleted a needed slice.
        """
        view = self._range_view(start)
        in_range = {i.requested_time for i in view._relevant(start, end)}
        if not in_range:
            return IncrementalPlan((), frozenset())
        return IncrementalPlan(tuple(view._needed_slices(list(files), end, in_range)), frozenset(in_range))

    def _needed_slices(self, files: list[FileSlice], end: str | None, in_range: set[str]) -> list[FileSlice]:
        by_path = {f.path: f for f in files}
        gone = self.replaced_by_completion(end)
        out: list[FileSlice] = []
        missing: list[tuple[FileGroup, Instant, str]] = []
        for g, (i, path) in self._last_writers(end).items():
            if g in gone or i.requested_time not in in_range:
                continue
            if path in by_path:
                out.append(by_path[path])
            else:
                missing.append((g, i, path))
        if missing:
            _raise_cleaned(self.timeline, missing, max(_completion(i) for _, i, _ in missing))
        return sorted(out, key=lambda f: (f.partition, f.file_id))

    def _last_writers(self, end: str | None) -> dict[FileGroup, tuple[Instant, str]]:
        """Per file group, the last write completed by ``end`` and the file it wrote."""
        out: dict[FileGroup, tuple[Instant, str]] = {}
        for i in self._writes:
            if end is not None and _completion(i) > end:
                break
            for s in self.commit_metadata(i).all_stats():
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


def _slice_base(bases: Iterable[str], completed: str) -> str | None:
    """The base instant of the slice a log completed at ``completed`` belongs to: the newest at
    or before it (None: before every base)."""
    return max((b for b in bases if b <= completed), default=None)


def _completion(i: Instant) -> str:
    return i.completion_time or i.requested_time


def _within(ct: str, start: str | None, end: str | None) -> bool:
    return (start is None or ct > start) and (end is None or ct <= end)


def _raise_cleaned(tl: Timeline, missing: list[tuple[FileGroup, Instant, str]], earliest: str) -> None:
    """``missing``: (group, writer, file) of each deleted file a range needs; ``earliest``: the
    start from which the range no longer touches those groups."""
    (g, i, path) = max(missing, key=lambda m: _completion(m[1]))
    raise InstantNotRetainedError(
        f"incremental read of {tl.storage.uri} needs {path} (file group {g[1]} in partition {g[0]!r}, written by "
        f"instant {i.requested_time}), which the cleaner has deleted; {len(missing)} such file(s). Ranges starting "
        f"at {earliest} or later are still exact, as is any range ending at the latest commit",
        earliest=earliest,
    )


@dataclass
class _Expected:
    """A file group's slice as the commit metadata up to some completion time describes it."""

    last: Instant  # the last write to the group
    bases: dict[str, tuple[str, Instant]] = dataclasses.field(default_factory=dict)  # base instant -> (path, writer)
    logs: list[tuple[str, str, Instant]] = dataclasses.field(default_factory=list)  # (completion, name, writer)


def _missing(g: FileGroup, got: FileSlice | None, exp: _Expected | None) -> list[tuple[FileGroup, Instant, str]]:
    """The files of ``g``'s expected slice that the slice found on storage lacks: its base
    (when a commit the view knows wrote it) and the log files that slice onto that base."""
    if exp is None:
        return []  # written only by instants this view has no metadata of
    if not exp.bases:
        return [] if got is not None else [(g, exp.last, f"log files of file group {g[1]}")]
    base = max(exp.bases)
    path, writer = exp.bases[base]
    if got is None or got.path != path:
        return [(g, writer, path)]
    have = {lf.name for lf in got.logs}
    return [(g, w, name) for done, name, w in exp.logs
            if name not in have and _slice_base(exp.bases, done) == base]


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
    value = recs[0].get(key) if recs and isinstance(recs[0], dict) else None
    if isinstance(value, dict):
        value = value.get("timestamp")
    return value if isinstance(value, str) and value else i.requested_time
