"""The ``multiwriter`` data source for Spark's Python Data Source API (pyspark 4).

Spark runs these classes in Python worker processes: planning and the write commit in workers
on the driver host, :meth:`MultiWriterReader.read` and :meth:`MultiWriterWriter.write` on
executors. Every file is opened through :mod:`pyarrow.fs`, so ``s3://`` tables need no Hadoop
jars (credentials: see :mod:`multiwriter.storage`).

What the API of the installed pyspark offers, and what this source does with it:

* filter pushdown (``pushFilters``, pyspark >= 4.1, with ``spark.sql.python.filterPushdown.enabled``,
  which :func:`multiwriter.spark.register` turns on): predicates on partition columns prune
  partitions; predicates on string and integer columns also skip rows in pyarrow. Every filter
  is still returned to Spark, which evaluates it again.
* column pruning: the API has no hook for it, Spark asks for the whole schema. A query that
  names its columns up front (``spark.read.format("multiwriter").schema("id string, ts long")``)
  reads only those columns from the files.
"""
from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
    WriterCommitMessage,
)
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

from ..errors import ConfigError
from ..table.table import Table
from ..write.overwrite import OPERATION as OVERWRITE
from . import options as opt
from .partitions import read_partition, spark_partitions
from .scan import Predicate, plan_scan

NAME = "multiwriter"
_OPS = {EqualTo: "=", LessThan: "<", LessThanOrEqual: "<=", GreaterThan: ">", GreaterThanOrEqual: ">="}


class MultiWriterDataSource(DataSource):
    """``spark.read``/``readStream`` and ``df.write``/``writeStream`` with ``format("multiwriter")``
    (streaming: :mod:`.stream_read`, :mod:`.stream_write`)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        """The table schema of the latest commit, meta columns first (a CDC query: op, ts_ms,
        before, after)."""
        path, incremental = opt.schema_path(self.options)
        table = Table.open(path)
        if opt.is_cdc(self.options):  # a batch query also needs query.type=incremental (parse_read)
            from .cdc_read import cdc_schema

            return from_arrow_schema(cdc_schema(table))
        tl = table.timeline()
        snap = None if incremental else table.snapshot(timeline=tl)
        return from_arrow_schema(table.read_schema(tl, snap))

    def reader(self, schema: StructType) -> DataSourceReader:
        options = opt.parse_read(self.options)
        if options.cdc:  # Hudi's CDC query: op, ts_ms, before, after (:mod:`.cdc_read`)
            from .cdc_read import CdcReader

            return CdcReader(options, schema)
        return MultiWriterReader(options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802
        from .stream_write import MultiWriterStreamWriter

        if overwrite:
            raise ConfigError('a multiwriter streaming write commits each micro-batch as an upsert: use outputMode("append")')
        return MultiWriterStreamWriter(dict(self.options), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802 -- Spark's name
        from .stream_read import MultiWriterStreamReader

        return MultiWriterStreamReader(opt.parse_stream_read(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool) -> MultiWriterWriter:
        """``mode("append")`` upserts (or the configured operation); ``mode("overwrite")`` is
        Hudi's ``insert_overwrite_table``: one replace commit retiring every live file group (on
        a bucket table, rewriting the bucket groups instead: :mod:`multiwriter.write.overwrite`)."""
        options = dict(self.options)
        opt.checked_write(options)  # every option error at save(), before any task runs
        return MultiWriterWriter(options, schema, overwrite=overwrite)


class MultiWriterReader(DataSourceReader):
    """Plans on the driver (:func:`plan_scan`), reads on executors (:func:`read_task`)."""

    def __init__(self, options: opt.ReadOptions, schema: StructType) -> None:
        self.options = options
        self.columns = [f.name for f in schema.fields]
        self.predicates: list[Predicate] = []

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:  # noqa: N802 -- Spark's name
        for f in filters:
            p = _predicate(f)
            if p is not None:
                self.predicates.append(p)
            yield f  # Spark evaluates every filter again: pushed ones only prune

    def partitions(self) -> list[InputPartition]:
        return spark_partitions(plan_scan(self.options, self.predicates), self.columns, self.options.path)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition, self.columns, self.predicates)


def _predicate(f: Filter) -> Predicate | None:
    attr = getattr(f, "attribute", ())
    if len(attr) != 1:
        return None
    if isinstance(f, IsNotNull):
        return Predicate("notnull", attr[0])
    if isinstance(f, In):
        return Predicate("in", attr[0], tuple(f.value))
    op = _OPS.get(type(f))
    return Predicate(op, attr[0], f.value) if op else None


@dataclass
class _Staged(WriterCommitMessage):
    """One task's rows, as Arrow IPC bytes, for the single commit on the driver."""

    ipc: bytes
    rows: int


class MultiWriterWriter(DataSourceArrowWriter):
    """Append or overwrite: every task hands its rows to the driver, which commits them once
    through the writer protocol (:class:`~multiwriter.write.writer.Writer`). Tasks write nothing
    to the table, so a failed job leaves nothing behind."""

    def __init__(self, options: dict[str, str], schema: StructType, *, overwrite: bool = False) -> None:
        self.options = options
        self.schema = schema
        self.overwrite = overwrite

    def write(self, iterator: Iterator[pa.RecordBatch]) -> _Staged:
        sink = io.BytesIO()
        rows = 0
        writer: pa.ipc.RecordBatchStreamWriter | None = None
        for b in iterator:
            if writer is None:
                writer = pa.ipc.new_stream(sink, b.schema)
            writer.write_batch(b)
            rows += b.num_rows
        if writer is not None:
            writer.close()
        return _Staged(sink.getvalue(), rows)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        from ..write.writer import Writer

        parsed, table = opt.checked_write(self.options)
        data = _concat([m for m in messages if isinstance(m, _Staged)], to_arrow_schema(self.schema))
        if table is None:
            table = Table.create(parsed.path, schema=data.schema, lock=parsed.lock, **_create_settings(parsed))
        cfg = parsed.writer_config()
        if self.overwrite:
            cfg = replace(cfg, operation=OVERWRITE)
        w = Writer(table, cfg)
        try:
            w.write(data)
        finally:
            w.close()

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing to undo: no task wrote to the table."""


def _create_settings(parsed: opt.WriteOptions) -> dict[str, Any]:
    return dict(parsed.table)


def _concat(staged: list[_Staged], schema: pa.Schema) -> pa.Table:
    tables = [pa.ipc.open_stream(s.ipc).read_all() for s in staged if s.ipc]
    if not tables:
        return schema.empty_table()
    return pa.concat_tables(tables, promote_options="permissive")
