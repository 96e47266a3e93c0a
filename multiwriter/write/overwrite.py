"""INSERT OVERWRITE TABLE: a ``replacecommit`` that writes the batch as new file groups and
retires every file group live in its base snapshot.

The replace commit names the retired groups in ``partitionToReplaceFileIds`` (operation type
``INSERT_OVERWRITE_TABLE``); readers drop them from every snapshot at or after the replace while
time travel before it still sees them, until the cleaner's retention window has passed.

Conflicts: the overwrite decides what the whole table holds, so any write that completed after
its base (or a pending replace plan) touching any file group conflicts with it, not only one
sharing a group: otherwise a concurrent insert's new group would survive an overwrite that never
saw it, or an update would land in a group the overwrite retired.
"""
from __future__ import annotations

from ..conflict import Conflict, FileGroupOverlapStrategy, touched_file_groups, writer_of
from ..table.metadata import CommitMetadata, ReplaceCommitMetadata, encode
from ..table.snapshot import Snapshot
from ..table.timeline import Timeline

OPERATION = "insert_overwrite_table"
OPERATION_TYPE = "INSERT_OVERWRITE_TABLE"
FileGroup = tuple[str, str]


def is_overwrite(operation: str) -> bool:
    return operation == OPERATION


def live_groups(base: Snapshot) -> set[FileGroup]:
    """The groups the overwrite retires: every live group of its base snapshot."""
    return set(base.slices)


def replace_metadata(meta: CommitMetadata, replaced: set[FileGroup]) -> ReplaceCommitMetadata:
    """``meta`` (the new groups' write statistics) as a replace commit retiring ``replaced``."""
    by_partition: dict[str, list[str]] = {}
    for partition, file_id in sorted(replaced):
        by_partition.setdefault(partition, []).append(file_id)
    return ReplaceCommitMetadata(
        meta.partition_to_write_stats, meta.extra_metadata, OPERATION_TYPE, meta.compacted,
        partition_to_replace_file_ids=by_partition,
    )


def requested_metadata() -> bytes:
    """The ``<T>.replacecommit.requested`` content: a ``HoodieRequestedReplaceMetadata`` without
    a clustering plan, as Hudi writes it for an insert overwrite."""
    return encode("requested_replace", {"operationType": OPERATION_TYPE, "clusteringPlan": None,
                                        "extraMetadata": {}, "version": 1})


class OverwriteConflictStrategy(FileGroupOverlapStrategy):
    """Conflict = any candidate (completed after our base, or a pending replace plan) that
    touched any file group."""

    def find_conflict(
        self, timeline: Timeline, base_completion: str | None, own_time: str, ours: set[FileGroup]
    ) -> Conflict | None:
        for cand in self.candidates(timeline, base_completion, own_time):
            theirs = touched_file_groups(timeline, cand)
            if theirs:
                return Conflict(cand, frozenset(theirs), writer_of(timeline, cand))
        return None
