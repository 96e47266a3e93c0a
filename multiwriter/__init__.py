"""multiwriter: several Spark Structured Streaming jobs writing one Apache Hudi Copy-on-Write
table at once, safely (optimistic concurrency, Hudi RFC-22).
"""
from __future__ import annotations

from typing import Any

from . import errors, metrics
from .config import WriterConfig
from .lock import InProcessLock
from .result import CommitResult
from .table.instant import Instant
from .table.table import Table
from .write.writer import Writer  # imported before ``write`` below, which must shadow the subpackage

__version__ = "0.1.0"


def write(data: Any, path: str, config: WriterConfig, batch_id: int | None = None) -> CommitResult:
    w = Writer(Table.open(path), config)
    try:
        return w.write(data, batch_id)
    finally:
        w.close()
