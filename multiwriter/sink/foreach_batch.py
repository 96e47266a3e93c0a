"""``MultiWriterSink``: a ``foreachBatch`` callable that commits each micro-batch exactly once.

It holds one lock connection and one heartbeat client for the life of the query. Before
writing, a batch id at or below this writer's last committed checkpoint is skipped when the
same query sent it (a replay after a crash between our commit and Spark's own checkpoint); from
another query (a fresh checkpoint location, Spark's persistent query id differs) it raises
``CheckpointResetError`` unless ``WriterConfig(on_checkpoint_reset="continue")``. The checkpoint lives in each
commit's ``extraMetadata`` under Hudi's ``_hudi_streaming_sink_checkpoint`` key.
"""
from __future__ import annotations

import logging
import threading
from typing import Any

from ..config import WriterConfig
from ..errors import ConfigError, TableNotFoundError
from ..metrics import Metrics
from ..result import CommitResult
from ..table.table import Table
from ..write.writer import Writer
from .registry import WriterRegistration, register_writer

log = logging.getLogger(__name__)


class MultiWriterSink:
    """``df.writeStream.foreachBatch(MultiWriterSink(path, config)).start()``.

    ``table``: optional ``Table.create`` settings (``name``, ``schema``, ``record_key``, ...)
    used to create the table on the first batch when it does not exist yet.
    Two live sinks must not share a ``writer_id``: the second one raises ``ConfigError``.
    """

    def __init__(self, path: str, config: WriterConfig, table: dict[str, Any] | None = None, *, metrics: Metrics | None = None) -> None:
        if not isinstance(config, WriterConfig):
            raise ConfigError("config must be a mw.WriterConfig")
        self.path = str(path)
        self.config = config
        self.table_settings = dict(table) if table else None
        self._metrics = metrics
        self._writer: Writer | None = None
        self._mu = threading.Lock()
        self._registration: WriterRegistration | None = None
        self.results: list[CommitResult] = []
        try:
            existing: Table | None = Table.open(self.path)
        except TableNotFoundError:
            if self.table_settings is None:
                raise
            existing = None
        if config.register_writer:
            self._registration = register_writer(self.path, existing, self.table_settings, config)

    def __call__(self, batch_df: Any, batch_id: int) -> CommitResult:
        with self._mu:
            writer = self._ensure_writer()
            result = writer.write(batch_df, int(batch_id), query_id=streaming_query_id(batch_df))
            self.results.append(result)
            if len(self.results) > 1000:
                del self.results[:500]
            return result

    @property
    def last_checkpoint(self) -> int | None:
        return self._ensure_writer().last_checkpoint()

    def close(self) -> None:
        """Release the writer id, the lock connection and the heartbeat thread."""
        with self._mu:
            if self._writer is not None:
                self._writer.close()
                self._writer = None
            if self._registration is not None:
                self._registration.close()
                self._registration = None

    def __enter__(self) -> MultiWriterSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _ensure_writer(self) -> Writer:
        if self._writer is None:
            try:
                table = Table.open(self.path)
            except TableNotFoundError:
                if self.table_settings is None:
                    raise
                table = Table.create(self.path, **self.table_settings)
            self._writer = Writer(table, self.config, metrics=self._metrics)
        return self._writer


#: the local property Spark's stream execution sets to the query's persistent id (kept in its
#: checkpoint's ``metadata`` file: the same across restarts from it, new with a new checkpoint)
QUERY_ID_PROPERTY = "sql.streaming.queryId"


def streaming_query_id(batch_df: Any) -> str | None:
    """The persistent id of the streaming query calling foreachBatch, None outside one (a
    pyarrow Table, a DataFrame passed by hand)."""
    session = getattr(batch_df, "sparkSession", None)
    if session is None:
        return None
    try:
        return session.sparkContext.getLocalProperty(QUERY_ID_PROPERTY) or None
    except Exception:  # noqa: BLE001 -- a session without a JVM context (Spark Connect) has no local properties
        return None
