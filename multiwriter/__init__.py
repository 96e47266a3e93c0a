"""multiwriter: several Spark Structured Streaming jobs writing one Apache Hudi table
(Copy-on-Write or Merge-on-Read) at once, safely (optimistic and non-blocking concurrency, Hudi
RFC-22).

>>> import multiwriter as mw                                    # doctest: +SKIP
>>> cfg = mw.WriterConfig(writer_id="ingest", lock=mw.InProcessLock())  # doctest: +SKIP
>>> mw.write(arrow_table, "/data/trips", cfg)                   # doctest: +SKIP
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Every log record of multiwriter and kazoo is redacted from now on: a table URI's credentials
# and ZooKeeper digest passwords never reach a handler (multiwriter.redact).
from .redact import install as _install_redaction

_install_redaction()

# The write subpackage is loaded now (its __init__ is empty) so that loading its modules later
# never rebinds ``multiwriter.write``: the function below must shadow the subpackage.
from . import write as _write_subpackage  # noqa: F401

# The Spark layer registers Table.to_spark's reader with the table layer (multiwriter.table.hooks)
# when it loads; its package imports no pyspark, so this costs nothing.
from . import spark as _spark_layer  # noqa: F401

if TYPE_CHECKING:  # pragma: no cover
    from .config import WriterConfig
    from .result import CommitResult

__version__ = "0.1.0"

# Everything else loads on first use: ``import multiwriter`` stays cheap (pyarrow, pandas and
# Spark-facing code are imported by the parts that need them).
_LAZY = {
    "errors": (".errors", None),
    "metrics": (".metrics", None),
    "WriterConfig": (".config", "WriterConfig"),
    "FileSystemLock": (".lock", "FileSystemLock"),
    "InProcessLock": (".lock", "InProcessLock"),
    "StorageLock": (".lock", "StorageLock"),
    "ZooKeeperLock": (".lock", "ZooKeeperLock"),
    "CommitResult": (".result", "CommitResult"),
    "Instant": (".table.instant", "Instant"),
    "Table": (".table.table", "Table"),
    "Writer": (".write.writer", "Writer"),
    "LocalZooKeeper": (".zookeeper_local", "LocalZooKeeper"),
    "LocalZooKeeperEnsemble": (".zookeeper_local", "LocalZooKeeperEnsemble"),
    "MultiWriterSink": (".sink.foreach_batch", "MultiWriterSink"),
    "Cleaner": (".cleaner.job", "Cleaner"),
    "CleanerReport": (".cleaner.job", "CleanerReport"),
    "ClusteringConfig": (".cleaner.clustering", "ClusteringConfig"),
    "CompactionConfig": (".cleaner.compaction", "CompactionConfig"),
    "register": (".spark", "register"),
    "retire_writer": (".checkpoint", "retire"),
    "bootstrap": (".write.bootstrap", "bootstrap"),
}


def write(data: Any, path: str, config: WriterConfig, batch_id: int | None = None, *,
          query_id: str | None = None) -> CommitResult:
    """Write one batch (pyarrow Table or Spark DataFrame) as one commit of the table at ``path``.

    Same protocol as the streaming sink: unique instant, heartbeat, conflict check under the
    lock, retries. With ``batch_id``, a batch already committed by ``config.writer_id`` is
    skipped (``CommitResult.skipped``); with ``query_id`` too (else ``config.query_id``), only
    when that query committed it: from another query it raises ``CheckpointResetError`` (see
    ``WriterConfig.on_checkpoint_reset``).
    """
    from .table.table import Table
    from .write.writer import Writer

    w = Writer(Table.open(path), config)
    try:
        return w.write(data, batch_id, query_id=query_id)
    finally:
        w.close()


def __getattr__(name: str) -> Any:
    spec = _LAZY.get(name)
    if spec is None:
        raise AttributeError(f"module 'multiwriter' has no attribute {name!r}")
    module = importlib.import_module(spec[0], __name__)
    value = module if spec[1] is None else getattr(module, spec[1])
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "Cleaner",
    "CleanerReport",
    "ClusteringConfig",
    "CommitResult",
    "CompactionConfig",
    "FileSystemLock",
    "InProcessLock",
    "Instant",
    "LocalZooKeeper",
    "MultiWriterSink",
    "StorageLock",
    "Table",
    "WriterConfig",
    "Writer",
    "bootstrap",
    "ZooKeeperLock",
    "errors",
    "metrics",
    "register",
    "retire_writer",
    "write",
]
