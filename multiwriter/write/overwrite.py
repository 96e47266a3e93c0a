"""INSERT OVERWRITE TABLE: a ``replacecommit`` that writes the batch as new file groups and
retires every file group live in its base snapshot.

The replace commit names the retired groups in ``partitionToReplaceFileIds`` (operation type
``INSERT_OVERWRITE_TABLE``); readers drop them from every snapshot at or after the replace while
time travel before it still sees them, until the cleaner's retention window has passed.

On a bucket-indexed table the rows go to their buckets' groups instead, each written as a new
slice (a base file of this instant) of the group, and a bucket group the batch has no rows for
gets an empty base file when its file id is the bucket's fixed one: such groups are not retired.
The next write of a bucket names the group it finds live, else the fixed id; had the overwrite
retired the fixed group, that write would create its files inside a retired group, hidden from
every reader and deleted by the cleaner. Other groups (random file ids) are retired as above.

Conflicts: the overwrite decides what the whole table holds, so any write that completed after
its base (or a pending replace plan) touching any file group conflicts with it, not only one
sharing a group: otherwise a concurrent insert's new group would survive an overwrite that never
saw it, or an update would land in a group the overwrite retired.
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from ..conflict import Conflict, FileGroupOverlapStrategy, touched_file_groups, writer_of
from ..table import bucket
from ..table.metadata import CommitMetadata, ReplaceCommitMetadata, encode
from ..table.properties import TableConfig
from ..table.snapshot import Snapshot
from ..table.timeline import Timeline
from .index import tag_buckets, untagged
from .plan import FileGroupTask, Plan, make_plan
from .records import OP, OP_DELETE

OPERATION = "insert_overwrite_table"
OPERATION_TYPE = "INSERT_OVERWRITE_TABLE"
FileGroup = tuple[str, str]


def is_overwrite(operation: str) -> bool:
    return operation == OPERATION


def live_groups(base: Snapshot) -> set[FileGroup]:
    """The groups the overwrite retires: every live group of its base snapshot."""
    return set(base.slices)


def plan_overwrite(prepared: pa.Table, base: Snapshot, config: TableConfig, *,
                   target_file_size: int) -> tuple[Plan, set[FileGroup]]:
    """The overwrite's plan, every task a new base file, and the groups its commit retires.
    A bucket table's rows go to their buckets' live groups (else the fixed ids) as new slices,
    and its fixed bucket groups without rows get an empty base file; neither is retired."""
    fresh = Snapshot({}, base.timeline, None)  # no task merges an old file
    live = live_groups(base)
    if not config.bucket_index:
        return make_plan(untagged(prepared), fresh, target_file_size=target_file_size), live
    if prepared.num_rows and pc.max(prepared.column(OP)).as_py() == OP_DELETE:  # nothing to delete in a new table
        prepared = prepared.filter(pc.not_equal(prepared.column(OP), OP_DELETE))
    plan = make_plan(tag_buckets(base, prepared, config), fresh, target_file_size=target_file_size)
    written = {(t.partition, t.file_id) for t in plan.tasks}
    emptied = sorted(g for g in live - written if bucket.is_fixed_file_id(g[1]))
    plan.tasks += [FileGroupTask(p, f, len(plan.tasks) + i) for i, (p, f) in enumerate(emptied)]
    return plan, live - written - set(emptied)


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
