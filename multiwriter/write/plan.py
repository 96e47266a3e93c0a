"""Plan: route tagged records to file groups.

Updates and deletes go to the file group that holds their key. New keys go to NEW file groups,
sized by the target file size: by default inserts never go into an existing file group, so
writers that only insert never conflict (at the cost of more, smaller files until a future
clustering service merges them).
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from ..table import layout
from ..table.snapshot import Snapshot
from .index import FILE_ID
from .records import KEY, OP, OP_DELETE, PARTITION


@dataclass(frozen=True)
class FileGroupTask:
    """One file group to (re)write in this instant."""

    partition: str
    file_id: str
    task_index: int
    old_file: str | None = None  # name of the base file being replaced
    prev_commit: str | None = None

    @property
    def is_new(self) -> bool:
        return self.old_file is None


@dataclass
class Plan:
    tasks: list[FileGroupTask]
    routed: pa.Table  # prepared rows with _mw_file_id set for every row that is written

    def inserted_keys(self) -> dict[str, pa.Array]:
        """Per partition, the keys this plan inserts as new (for the same-new-key conflict check)."""
        new_ids = pa.array([t.file_id for t in self.tasks if t.is_new], pa.string())
        if len(new_ids) == 0:
            return {}
        rows = self.routed.filter(pc.is_in(self.routed.column(FILE_ID), value_set=new_ids))
        out: dict[str, pa.Array] = {}
        parts = rows.column(PARTITION).combine_chunks()
        for p in pc.unique(parts).to_pylist():
            out[p] = rows.column(KEY).combine_chunks().filter(pc.equal(parts, p))
        return out

    def rows_for(self, task: FileGroupTask) -> pa.Table:
        mask = pc.and_(pc.equal(self.routed.column(PARTITION), task.partition), pc.equal(self.routed.column(FILE_ID), task.file_id))
        return self.routed.filter(mask)


def insert_buckets(n_rows: int, row_bytes: float, target_file_size: int) -> int:
    return max(1, math.ceil(n_rows * max(row_bytes, 1.0) / target_file_size))


def bucket_of(key: str, buckets: int) -> int:
    return zlib.crc32(key.encode()) % buckets if buckets > 1 else 0


def make_plan(tagged: pa.Table, snapshot: Snapshot, *, target_file_size: int) -> Plan:
    is_delete = pc.equal(tagged.column(OP), OP_DELETE)
    # Deletes of keys that do not exist have nothing to do.
    tagged = tagged.filter(pc.invert(pc.and_(pc.is_null(tagged.column(FILE_ID)), is_delete)))
    fids = tagged.column(FILE_ID).combine_chunks()
    is_new = pc.is_null(fids)
    parts = tagged.column(PARTITION).combine_chunks()
    row_bytes = tagged.nbytes / max(tagged.num_rows, 1)
    single: dict[str, str] = {}
    multi: dict[str, list[str]] = {}
    for item in pc.value_counts(parts.filter(is_new)).to_pylist():
        ids = [layout.new_file_id() for _ in range(insert_buckets(item["counts"], row_bytes, target_file_size))]
        if len(ids) == 1:
            single[item["values"]] = ids[0]
        else:
            multi[item["values"]] = ids
    assigned = fids
    if single:  # the common case, vectorized: one new file group per partition
        chosen = pa.array(list(single.values()), pa.string()).take(pc.index_in(parts, value_set=pa.array(list(single), pa.string())))
        assigned = pc.if_else(is_new, chosen, fids)
    if multi:  # large inserts: spread keys over buckets by a stable hash
        out, keys, plist = assigned.to_pylist(), tagged.column(KEY).to_pylist(), parts.to_pylist()
        for r in pc.indices_nonzero(is_new).to_pylist():
            ids = multi.get(plist[r])
            if ids is not None:
                out[r] = ids[bucket_of(keys[r], len(ids))]
        assigned = pa.array(out, pa.string())
    routed = tagged.set_column(tagged.schema.get_field_index(FILE_ID), FILE_ID, assigned)
    pairs = routed.select([PARTITION, FILE_ID]).group_by([PARTITION, FILE_ID]).aggregate([])
    groups = sorted(zip(pairs.column(PARTITION).to_pylist(), pairs.column(FILE_ID).to_pylist()))
    tasks = []
    for i, (p, f) in enumerate(groups):
        old = snapshot.slices.get((p, f))
        tasks.append(FileGroupTask(p, f, i, old.name if old else None, old.instant_time if old else None))
    return Plan(tasks, routed)
