"""Run a plan's file-group merges: on the driver (small batches: no Spark job, which costs
~100 ms+) or on Spark executors (see :mod:`multiwriter.write.spark`)."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from ..storage import Storage
from ..table import layout
from ..table.metadata import WriteStat
from ..table.properties import TableConfig
from ..table.table import Table
from .index import FILE_ID
from .merge import MergeContext, armed, merge_file_group
from .plan import Plan
from .records import PARTITION


def run_on_driver(storage: Storage, ctx: MergeContext, plan: Plan, config: TableConfig | None = None) -> list[WriteStat]:
    """Merge every file group of ``plan`` in this process (pre-write checks armed: ``config`` is
    read from the table when not given)."""
    ctx = armed(ctx, config if config is not None else Table.open(storage.uri).config)
    routed = plan.routed
    if routed.num_rows:
        order = pc.sort_indices(routed, sort_keys=[(PARTITION, "ascending"), (FILE_ID, "ascending")])
        routed = routed.take(order)
    slices = _group_slices(routed)
    stats = []
    for task in plan.tasks:
        lo, hi = slices.get((task.partition, task.file_id), (0, 0))
        rows = routed.slice(lo, hi - lo)
        stats.append(merge_file_group(storage, ctx, task, rows, layout.write_token(task.task_index, 0, 0)))
    return stats


def _group_slices(routed: pa.Table) -> dict[tuple[str, str], tuple[int, int]]:
    out: dict[tuple[str, str], tuple[int, int]] = {}
    if routed.num_rows == 0:
        return out
    parts = routed.column(PARTITION).to_pylist()
    fids = routed.column(FILE_ID).to_pylist()
    start = 0
    for i in range(1, len(parts) + 1):
        if i == len(parts) or parts[i] != parts[start] or fids[i] != fids[start]:
            out[(parts[start], fids[start])] = (start, i)
            start = i
    return out
