"""``spark.readStream.format("multiwriter")``: micro-batches of committed records, in commit
completion order.

An offset is a completion time, ``{"completion_time": "<C>"}``; a micro-batch (start, end] holds
what :meth:`Table.read_incremental` returns for that range: the latest in-range version of every
record changed by a commit completed after ``start`` and at or before ``end``. Completion times,
not requested times, because commits complete in another order than they start: a slow writer
that began early and completed late has a completion time past every offset handed out before
it completed (completion times are issued under the table lock in one fenced step, above every
time on the timeline: ``Transaction._complete``), so it lands in a later micro-batch instead of
being skipped. Rows that compaction or clustering only moved keep their commit time and are not
delivered again; a micro-batch of only such commits plans no partition and reads no file.
Deletes are not delivered (docs/consumers.md), except with
``hoodie.datasource.query.incremental.format=cdc``: micro-batches of the CDC records
:meth:`Table.read_cdc` returns for the same ranges (:mod:`.cdc_read`). On both table types a micro-batch whose slices
the cleaner deleted fails with :class:`InstantNotRetainedError` rather than deliver fewer rows.

Planning (:func:`plan_range`) runs on the driver and is a pure function of (start, end) and the
table, so a restarted query replans a logged micro-batch to the same rows; Spark's checkpoint
(offset and commit logs) then delivers every committed record once.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from ..errors import ConfigError, InstantNotRetainedError
from ..redact import redact
from ..table.table import Table
from . import options as opt
from .scan import ScanPlan, plan_scan

try:  # pyspark >= 4.1; without it Spark wraps the reader itself
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover - older pyspark
    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in when pyspark has no mixin: Spark then never calls the hook."""

T = TypeVar("T")
OFFSET_KEY = "completion_time"
#: the offset before every commit (Hudi's "000": from the beginning)
EARLIEST_OFFSET = "0" * 17


def offset(completion_time: str | None) -> dict[str, str]:
    return {OFFSET_KEY: completion_time or EARLIEST_OFFSET}


def offset_time(o: dict[str, Any] | None) -> str | None:
    """The completion time of an offset; None for the earliest offset."""
    value = str((o or {}).get(OFFSET_KEY) or EARLIEST_OFFSET)
    if not value.isdigit():
        raise ConfigError(f"streaming offset {o!r} is not a multiwriter offset ({{{OFFSET_KEY!r}: <completion time>}})")
    return None if set(value) == {"0"} else value


def latest_completion(path: str) -> str | None:
    """The completion time of the newest completed write (commit or replace), or None."""
    last = Table.open(path).timeline().last_completed_write()
    if last is None:
        return None
    return last.completion_time or last.requested_time


def initial_offset(options: opt.StreamReadOptions) -> dict[str, str]:
    if options.start == opt.EARLIEST:
        return offset(None)
    if options.start == opt.LATEST:
        return offset(latest_completion(options.path))
    return offset(options.start)


def plan_range(options: opt.StreamReadOptions, start: str | None, end: str | None) -> ScanPlan:
    """The scan of micro-batch (start, end]; a range the cleaner cut into raises
    :class:`InstantNotRetainedError` saying how to resume."""
    read = opt.ReadOptions(options.path, incremental=True, begin=start, end=end, split_bytes=options.split_bytes, parallelism=options.parallelism)
    return _resumable(options, start, end, lambda: plan_scan(read))


def plan_cdc_range(options: opt.StreamReadOptions, start: str | None, end: str | None) -> list[InputPartition]:
    """The tasks of a CDC micro-batch (start, end]: one per data commit (:mod:`.cdc_read`)."""
    from .cdc_read import commit_ranges

    read = opt.ReadOptions(options.path, incremental=True, begin=start, end=end, cdc=True)
    return _resumable(options, start, end, lambda: commit_ranges(read))


def _resumable(options: opt.StreamReadOptions, start: str | None, end: str | None, planned: Callable[[], T]) -> T:
    """``planned()``, an :class:`InstantNotRetainedError` said again with how to restart the query."""
    try:
        return planned()
    except InstantNotRetainedError as e:
        resume = e.earliest or "earliest"
        raise InstantNotRetainedError(
            f"streaming read of {redact(options.path)}: the query's offset {start} fell behind what the cleaner retains, so the "
            f"micro-batch ({start}, {end}] cannot be delivered exactly ({e}). Restart the query with a new "
            f"checkpointLocation and {opt.START_OFFSET}={resume} (records completed between are skipped) or "
            f"{opt.START_OFFSET}=earliest (the whole table again); to avoid this, let the cleaner retain more "
            "commits (retain_commits, archive_keep_min) than the query lags behind",
            requested=start,
            earliest=e.earliest,
        ) from e


class MultiWriterStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets and planning on the driver, reading on executors (:func:`read_task`).

    ``Trigger.AvailableNow`` is handled here rather than by Spark's generic wrapper, which ends a
    restarted run after replaying its unfinished micro-batch and leaves newer commits for the
    next run: the target is the newest completion time when the run starts."""

    def __init__(self, options: opt.StreamReadOptions, schema: StructType) -> None:
        self.options = options
        self.columns = [f.name for f in schema.fields]
        self.available_now = False
        self.target: str | None = None

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 -- Spark's name
        self.available_now = True
        self.target = latest_completion(self.options.path)

    def initialOffset(self) -> dict:  # noqa: N802 -- Spark's name
        return initial_offset(self.options)

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:  # noqa: N802
        """The newest completion time, or ``start`` when nothing completed after it."""
        latest = self.target if self.available_now else latest_completion(self.options.path)
        current = offset_time(start) if start is not None else None
        if latest is None or (current is not None and latest <= current):
            return start if start is not None else self.initialOffset()
        return offset(latest)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        from .partitions import spark_partitions

        lo, hi = offset_time(start), offset_time(end)
        if hi is None or (lo is not None and hi <= lo):
            return []  # nothing new: an empty micro-batch
        if self.options.cdc:
            return plan_cdc_range(self.options, lo, hi)
        return spark_partitions(plan_range(self.options, lo, hi), self.columns, self.options.path)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from .cdc_read import CommitPartition, read_commit
        from .partitions import read_partition

        if isinstance(partition, CommitPartition):
            return read_commit(partition, self.columns)
        return read_partition(partition, self.columns)
