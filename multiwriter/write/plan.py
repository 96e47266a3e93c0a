"""Plan: route tagged records to file groups.

Updates and deletes go to the file group that holds their key. New keys go to NEW file groups,
sized by the target file size: by default inserts never go into an existing file group, so
writers that only insert never conflict (at the cost of more, smaller files until a future
clustering service merges them).
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field

import numpy as np

import pyarrow as pa
import pyarrow.compute as pc

from ..table import layout
from ..table.metadata import CommitMetadata, WriteStat
from ..table.snapshot import Snapshot
from . import bloom
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
    routed: pa.Table  # prepared rows with _mw_file_id set for every row that is written, grouped by file group
    groups: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)  # (partition, file id) -> row range

    def __post_init__(self) -> None:
        if not self.groups and self.routed.num_rows:
            self.routed, self.groups = group_rows(self.routed)

    def inserted_keys(self) -> dict[str, pa.Array]:
        """Per partition, the keys this plan inserts as new (for the same-new-key conflict check)."""
        out: dict[str, list[pa.Array]] = {}
        for t in self.tasks:
            if t.is_new:
                out.setdefault(t.partition, []).append(self.rows_for(t).column(KEY).combine_chunks())
        return {p: pa.concat_arrays(ks) if len(ks) > 1 else ks[0] for p, ks in out.items()}

    def rows_for(self, task: FileGroupTask) -> pa.Table:
        lo, hi = self.groups.get((task.partition, task.file_id), (0, 0))
        return self.routed.slice(lo, hi - lo)


def group_rows(rows: pa.Table) -> tuple[pa.Table, dict[tuple[str, str], tuple[int, int]]]:
    """``rows`` ordered by (partition, file id), stably (the order within a group is kept), and
    each group's row range. One pass over integer codes instead of a sort over strings."""
    p = rows.column(PARTITION).combine_chunks().dictionary_encode()
    f = rows.column(FILE_ID).combine_chunks().dictionary_encode()
    pi = p.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    fi = f.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    code = pi * max(len(f.dictionary), 1) + fi
    order = np.argsort(code, kind="stable")
    if not np.all(order[1:] > order[:-1]):
        rows = rows.take(pa.array(order))
    sorted_code = code[order]
    starts = np.flatnonzero(np.r_[True, sorted_code[1:] != sorted_code[:-1]])
    ends = np.r_[starts[1:], len(sorted_code)]
    pd_, fd = p.dictionary.to_pylist(), f.dictionary.to_pylist()
    nf = max(len(fd), 1)
    groups = {}
    for lo, hi in zip(starts.tolist(), ends.tolist(), strict=True):
        c = int(sorted_code[lo])
        groups[(pd_[c // nf], fd[c % nf])] = (lo, hi)
    return rows, groups


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
    routed = bloom.with_hashes(routed, KEY)  # each file's bloom filter then only takes them modulo its bits
    if routed.num_rows == 0:
        return Plan([], routed)
    routed, groups = group_rows(routed)
    tasks = []
    for i, (p, f) in enumerate(sorted(groups)):
        old = snapshot.slices.get((p, f))
        tasks.append(FileGroupTask(p, f, i, old.name if old else None, old.instant_time if old else None))
    return Plan(tasks, routed, groups)


#: Hudi's ``operationType`` of a commit, by our operation name
OPERATION_TYPES = {"upsert": "UPSERT", "insert": "INSERT", "delete": "DELETE", "insert_overwrite_table": "INSERT_OVERWRITE_TABLE"}


def planned_metadata(tasks: list[FileGroupTask], operation: str) -> CommitMetadata:
    """The ``<T>.inflight`` content: the file groups this attempt will write (Hudi's workload
    profile), so a conflict check sees a pending writer's groups before it completes."""
    p2s: dict[str, list[WriteStat]] = {}
    for t in tasks:
        p2s.setdefault(t.partition, []).append(
            WriteStat(file_id=t.file_id, path="", partition_path=t.partition, prev_commit=t.prev_commit or "null"))
    return CommitMetadata(p2s, {}, OPERATION_TYPES[operation])
