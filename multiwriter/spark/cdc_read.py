"""``spark.read.format("multiwriter")`` with ``hoodie.datasource.query.incremental.format=cdc``:
the records :meth:`Table.read_cdc` returns (op, ts_ms, before, after), one Spark task per data
commit of the range; ``readStream`` with the same option plans its micro-batches here too
(:mod:`.stream_read`).

The driver resolves the range as :meth:`Table.read_cdc_batch` does and plans it once (a range
the cleaner cut into fails there, before a task runs); each task reads one commit's range,
(completion of the previous data commit, completion of its commit], which holds that commit
alone (table services in between change nothing).
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from ..table import cdc
from ..table.table import Table, resolve_end
from . import options as opt


@dataclass
class CommitPartition(InputPartition):
    """One data commit's changes: the range (start, end] that holds it alone."""

    path: str
    start: str | None
    end: str


def cdc_schema(table: Table) -> pa.Schema:
    return cdc.cdc_schema(table.read_schema(table.timeline()))


def commit_ranges(options: opt.ReadOptions) -> list[InputPartition]:
    """Per data commit completed in the query's range, the range holding it alone."""
    table = Table.open(options.path)
    tl = table.timeline()
    start = options.begin
    end = resolve_end(tl, start, options.end)
    if end is None or (start is not None and end <= start):
        return []
    plan = table.cdc_plan(tl, start, end)
    out: list[InputPartition] = []
    lo = start
    for c in plan.commits:
        hi = c.completion_time or c.requested_time
        out.append(CommitPartition(options.path, lo, hi))
        lo = hi
    return out


class CdcReader(DataSourceReader):
    """Plans on the driver (:func:`commit_ranges`), reads one commit per task."""

    def __init__(self, options: opt.ReadOptions, schema: StructType) -> None:
        self.options = options
        self.columns = [f.name for f in schema.fields]

    def partitions(self) -> list[InputPartition]:
        return commit_ranges(self.options)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, CommitPartition):
            return iter(())  # Spark reads one placeholder partition when there is nothing to read
        return read_commit(partition, self.columns)


def read_commit(partition: CommitPartition, columns: list[str]) -> Iterator[pa.RecordBatch]:
    """One commit's CDC records (a batch or a streaming task)."""
    rows = Table.open(partition.path).read_cdc(partition.start, partition.end)
    yield from rows.select(columns).to_batches()
