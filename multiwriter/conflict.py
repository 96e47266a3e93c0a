"""Conflict resolution: did an instant that completed after our base touch our file groups?

The default strategy (Hudi's ``SimpleConcurrentFileWritesConflictResolutionStrategy``) says two
writes conflict when they share a (partition, fileId). Inserts that create new file groups never
conflict. A replace commit touches the groups it writes and the groups it retires: an update to a
group that a concurrent replace retired conflicts (else it would land in a dead group).
Candidates are every write instant completed after our base (by completion time) plus pending
replace plans of writers; a compaction never conflicts (the slice it writes does not change a
record; log files completed after it was planned belong to the next slice). A pending clustering is never a candidate: ingestion goes first, the
clustering loses at its own commit when a writer touched one of its input groups
(:mod:`.cleaner.clustering`).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from .errors import TableFormatError, UnsafePathError
from .format import instant as inst
from .format import bounds, paths
from .format.instant import Instant
from .table.metadata import CommitMetadata, decode_commit_metadata
from .table.record_keys import read_stored_keys
from .table.timeline import Timeline

log = logging.getLogger(__name__)

FileGroup = tuple[str, str]
#: pending plans that count against a writer (a pending clustering does not: ingestion first)
_PENDING_PLAN_ACTIONS = frozenset({inst.REPLACE_COMMIT})


@dataclass(frozen=True)
class Conflict:
    winner: Instant
    file_groups: frozenset[FileGroup]
    winner_writer: str | None = None


class ConflictResolutionStrategy:
    """Interface: find the first candidate that conflicts with our file groups."""

    def candidates(self, timeline: Timeline, base_completion: str | None, own_time: str) -> list[Instant]:
        raise NotImplementedError

    def find_conflict(
        self, timeline: Timeline, base_completion: str | None, own_time: str, ours: set[FileGroup]
    ) -> Conflict | None:
        raise NotImplementedError


class FileGroupOverlapStrategy(ConflictResolutionStrategy):
    """Conflict = shared (partition, fileId) with a write completed after our base."""

    def candidates(self, timeline: Timeline, base_completion: str | None, own_time: str) -> list[Instant]:
        done = [
            i
            for i in timeline.completed_after(base_completion)
            if i.action in inst.WRITE_ACTIONS and i.requested_time != own_time
        ]
        plans = [i for i in timeline.pending(_PENDING_PLAN_ACTIONS) if i.requested_time != own_time]
        return done + plans

    def find_conflict(
        self, timeline: Timeline, base_completion: str | None, own_time: str, ours: set[FileGroup]
    ) -> Conflict | None:
        if not ours:
            return None
        for cand in self.candidates(timeline, base_completion, own_time):
            if is_compaction(timeline, cand):
                continue
            theirs = self.groups_of(timeline, cand)
            overlap = ours & theirs
            if overlap:
                writer = writer_of(timeline, cand)
                return Conflict(cand, frozenset(overlap), writer)
        return None


    def groups_of(self, timeline: Timeline, cand: Instant) -> set[FileGroup]:
        return touched_file_groups(timeline, cand)


class CreatedGroupOverlapStrategy(FileGroupOverlapStrategy):
    """Non-blocking writers (``ours`` are the groups we create): only two creations of one
    bucket's group conflict, since two base files of one group would hide each other's rows.
    Log appends never do, a delete block in a group no base file has started yet included: the
    base file created meanwhile takes it into its slice."""

    def groups_of(self, timeline: Timeline, cand: Instant) -> set[FileGroup]:
        meta = _written_or_planned(timeline, cand)
        return set() if meta is None else {(s.partition_path, s.file_id) for s in meta.all_stats() if s.creates_file_group}


def find_insert_conflict(
    timeline: Timeline,
    base_completion: str | None,
    own_time: str,
    inserted: dict[str, pa.Array],
    *,
    skip: set[str] | frozenset[str] = frozenset(),
) -> Conflict | None:
    """Two writers inserting the same NEW key: the second to commit loses.

    An insert lands in a new file group or in a group its batch rewrites anyway (small-file
    handling), so the file-group rule cannot see this; without it both commits would land and
    the key would exist twice. Only files with inserts (new groups, or rewrites that inserted)
    of commits that completed after our base, in partitions we insert into, are read (key
    column only, pruned by the footer key range): a key we took for new that such a file holds
    was inserted by that commit. ``skip`` names instants already checked (outside the
    lock), so the check under the lock reads only what completed since.
    """
    if not inserted:
        return None
    for cand in timeline.completed_after(base_completion):
        if cand.action not in inst.WRITE_ACTIONS or cand.requested_time == own_time or cand.requested_time in skip:
            continue
        for st in timeline.commit_metadata(cand).all_stats():
            ours = inserted.get(st.partition_path)
            if ours is None or len(ours) == 0 or not st.path or not (st.creates_file_group or st.num_inserts):
                continue
            if not _inside_table(timeline, cand, st.path):
                continue
            if _new_keys_overlap(timeline, st.path, ours):
                return Conflict(cand, frozenset({(st.partition_path, st.file_id)}), writer_of(timeline, cand))
    return None


def _inside_table(timeline: Timeline, cand: Instant, path: str) -> bool:
    """Whether a write statistic's path names a data file inside the table (the path rule); a
    file outside it is never opened, and holds none of the table's keys."""
    try:
        paths.data_file(path, source=timeline.path_of(cand))
    except UnsafePathError as e:
        log.warning("skipping a write statistic of %s: %s", cand, e)
        return False
    return True


def _new_keys_overlap(timeline: Timeline, path: str, ours: pa.Array) -> bool:
    storage = timeline.storage
    try:
        with storage.fs.open_input_file(storage.abs(path)) as f:
            pf = bounds.open_parquet(f, path)
            md = pf.metadata.metadata or {}
            lo, hi = md.get(b"hoodie_min_record_key"), md.get(b"hoodie_max_record_key")
            if lo is not None and hi is not None:
                if pc.max(ours).as_py() < lo.decode() or pc.min(ours).as_py() > hi.decode():
                    return False
            theirs = read_stored_keys(pf, timeline.config)  # virtual keys: from the key fields
    except FileNotFoundError:
        return False  # cleaned since: its keys live on in a newer slice we also check
    return bool(pc.any(pc.is_in(ours, value_set=theirs)).as_py())


def is_compaction(timeline: Timeline, i: Instant) -> bool:
    """A completed compaction: it rewrote slices without changing a record, and the log files
    written beside it belong to the next slice, so it never conflicts with a writer."""
    return i.is_completed and i.action == inst.COMMIT and timeline.config.merge_on_read and timeline.commit_metadata(i).compacted


def touched_file_groups(timeline: Timeline, i: Instant) -> set[FileGroup]:
    """The file groups a completed commit wrote or retired, or a pending one plans to (from its
    inflight plan; an unreadable plan counts as touching nothing)."""
    meta = _written_or_planned(timeline, i)
    return set() if meta is None else meta.file_groups()


def _written_or_planned(timeline: Timeline, i: Instant) -> CommitMetadata | None:
    """A completed commit's metadata, or a pending one's inflight plan (None when it has none
    or it is unreadable)."""
    if i.is_completed:
        return timeline.commit_metadata(i)
    try:
        data = timeline.read_bytes(i)
    except FileNotFoundError:
        return None
    if not data:
        return None
    try:
        return decode_commit_metadata(i.action, data, source=timeline.path_of(i))
    except TableFormatError:
        log.warning("pending plan %s is unreadable; treating it as touching nothing", i)
        return None


def writer_of(timeline: Timeline, i: Instant) -> str | None:
    """The writer id a completed commit recorded (for conflict messages); None when pending."""
    if not i.is_completed:
        return None
    return timeline.commit_metadata(i).extra_metadata.get("multiwriter.writer_id")
