"""Spark tasks of a read (batch and streaming): a scan plan's task groups as Spark's input
partitions, and what a task reads."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from ..errors import ConfigError
from ..redact import redact
from .scan import Predicate, ScanPlan, ScanTask, read_task


@dataclass
class SparkPartition(InputPartition):
    """One Spark task (some scan tasks) with what reading them needs: ``read`` does not see what
    ``partitions`` set."""

    plan: ScanPlan  # without its task list
    tasks: tuple[ScanTask, ...]


def spark_partitions(plan: ScanPlan, columns: list[str], path: str) -> list[InputPartition]:
    """The plan's Spark tasks (batch and streaming reads), after checking the asked columns."""
    unknown = [c for c in columns if plan.schema.get_field_index(c) < 0]
    if unknown:
        raise ConfigError(f"columns {unknown} are not in the table at {redact(path)}; it has {plan.schema.names}")
    header = replace(plan, tasks=())
    return [SparkPartition(header, group) for group in plan.groups()]


def read_partition(partition: InputPartition, columns: list[str], predicates: list[Predicate] = ()) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, SparkPartition):
        return  # Spark reads one placeholder partition when the plan has no tasks
    for task in partition.tasks:
        yield from read_task(partition.plan, task, columns, predicates)
