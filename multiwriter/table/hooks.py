"""What the table layer offers but the layers above implement: the table names the hook, the
layer that owns the work fills it in when it loads, and no import points upward.

``spark_reader``: how :meth:`Table.to_spark <multiwriter.table.table.Table.to_spark>` reads, set
by :mod:`multiwriter.spark` (which the top-level package loads, so ``import multiwriter`` is
enough)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import ConfigError

#: (table, spark session, as_of) -> Spark DataFrame
SparkReader = Callable[[Any, Any, "str | None"], Any]

_spark_reader: SparkReader | None = None


def set_spark_reader(reader: SparkReader) -> None:
    global _spark_reader
    _spark_reader = reader


def spark_reader() -> SparkReader:
    if _spark_reader is None:
        raise ConfigError("no Spark reader is registered: import multiwriter.spark (import multiwriter does) "
                          "before Table.to_spark")
    return _spark_reader
