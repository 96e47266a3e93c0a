"""multiwriter: several Spark Structured Streaming jobs writing one Apache Hudi Copy-on-Write
table at once, safely (optimistic concurrency, Hudi RFC-22).

>>> import multiwriter as mw                                    # doctest: +SKIP
>>> cfg = mw.WriterConfig(writer_id="ingest", lock=mw.InProcessLock())  # doctest: +SKIP
>>> mw.write(arrow_table, "/data/trips", cfg)                   # doctest: +SKIP
"""
from __future__ import annotations

from typing import Any

from . import errors, metrics
from .config import WriterConfig
from .lock import FileSystemLock, InProcessLock, ZooKeeperLock
from .result import CommitResult
from .table.instant import Instant
from .table.table import Table
from .write.writer import Writer  # imported before ``write`` below, which must shadow the subpackage
from .zookeeper_local import LocalZooKeeper

__version__ = "0.1.0"


def write(data: Any, path: str, config: WriterConfig, batch_id: int | None = None) -> CommitResult:
    """Write one batch (pyarrow Table or Spark DataFrame) as one commit of the table at ``path``.

    Same protocol as the streaming sink: unique instant, heartbeat, conflict check under the
    lock, retries. With ``batch_id``, a batch already committed by ``config.writer_id`` is
    skipped (``CommitResult.skipped``).
    """
    w = Writer(Table.open(path), config)
    try:
        return w.write(data, batch_id)
    finally:
        w.close()


def __getattr__(name: str) -> Any:
    # Lazily import the parts that pull in Spark-facing code.
    if name == "MultiWriterSink":
        from .sink.foreach_batch import MultiWriterSink

        return MultiWriterSink
    if name == "register":
        from .spark import register

        return register
    if name in ("Cleaner", "CleanerReport"):
        from .cleaner import job

        return getattr(job, name)
    raise AttributeError(name)


__all__ = [
    "Cleaner",
    "CleanerReport",
    "CommitResult",
    "FileSystemLock",
    "InProcessLock",
    "Instant",
    "LocalZooKeeper",
    "MultiWriterSink",
    "Table",
    "WriterConfig",
    "ZooKeeperLock",
    "errors",
    "metrics",
    "register",
    "write",
]
