"""``df.writeStream.format("multiwriter")``: one commit per micro-batch, exactly once.

Tasks stage their rows under the table's ``.hoodie/.temp`` area (:mod:`.staging`) and send only
the staged file's path to the driver; the driver's ``commit(messages, batchId)`` reads the named
files and commits them once through the writer protocol
(:class:`~multiwriter.write.writer.Writer`: instant, heartbeat, conflict check with retries,
fence). The commit records ``{writer id: batch id}`` (Hudi's streaming checkpoint), so a batch id
at or below the writer's checkpoint commits nothing: a micro-batch Spark replays after a crash
between our commit and its own commit log is not written twice. Staging is deleted after the
commit and on abort, so a failed micro-batch leaves no files.
"""
from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from ..errors import ConfigError, TableNotFoundError
from ..storage import Storage
from ..table.table import Table
from . import options as opt
from . import staging

log = logging.getLogger(__name__)
#: the local property Spark sets on every task of a micro-batch
BATCH_ID_PROPERTY = "streaming.sql.batchId"


@dataclass
class _StagedMessage(WriterCommitMessage):
    """What a task hands the driver: where its rows are, not the rows."""

    files: list[staging.StagedFile]


def parse(options: dict[str, Any]) -> tuple[opt.WriteOptions, Table | None]:
    """Every option checked (unknown keys, missing ones, the writer id), before any task runs."""
    path = opt._lower(options).get("path", "")
    try:
        table: Table | None = Table.open(path) if path else None
    except TableNotFoundError:
        table = None
    parsed = opt.parse_write(options, table_exists=table is not None, streaming=True)
    if parsed.writer.get("operation") not in (None, "upsert", "insert", "delete"):
        raise ConfigError(f"{opt.OPERATION}={parsed.writer['operation']!r} is not supported by a streaming write; "
                          "use upsert, insert or delete")
    if table is not None:
        from .source import _check_matches

        _check_matches(parsed, table)
    return parsed, table


class MultiWriterStreamWriter(DataSourceStreamArrowWriter):
    """Executors stage, the driver commits (see the module docstring)."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.options = options
        self.schema = schema
        parsed, _ = parse(options)
        self.path = parsed.path
        self.writer_id = parsed.writer["writer_id"]

    def write(self, iterator: Iterator[pa.RecordBatch]) -> _StagedMessage:
        staged = staging.stage(Storage(self.path), self.writer_id, _task_batch_id(), iterator)
        return _StagedMessage([staged] if staged is not None else [])

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 -- Spark's name
        from ..write.writer import Writer

        parsed, table = parse(self.options)
        storage = Storage(parsed.path)
        files = [f for m in messages if isinstance(m, _StagedMessage) for f in m.files]
        try:
            if table is None:
                table = Table.create(parsed.path, schema=_schema(self.schema), lock=parsed.lock, **parsed.table)
            w = Writer(table, parsed.writer_config())
            try:
                last = w.last_checkpoint()
                if last is not None and batchId <= last:
                    log.info("writer %s: micro-batch %s already committed (checkpoint %s); nothing to write",
                             self.writer_id, batchId, last)
                    return
                data = staging.read(storage, self.writer_id, batchId, files, _schema(self.schema))
                w.write(data, batch_id=batchId)
            finally:
                w.close()
        finally:
            staging.discard(storage, self.writer_id, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """No task wrote to the table: deleting the staged files undoes the micro-batch."""
        staging.discard(Storage(self.path), self.writer_id, batchId)


def _task_batch_id() -> int:
    from pyspark import TaskContext

    tc = TaskContext.get()
    value = tc.getLocalProperty(BATCH_ID_PROPERTY) if tc is not None else None
    if value is None:
        raise ConfigError(f"task has no micro-batch id ({BATCH_ID_PROPERTY}); a multiwriter stream writer runs in a streaming query")
    return int(value)


def _schema(schema: StructType) -> pa.Schema:
    return to_arrow_schema(schema)
