"""Spark's ``format("multiwriter")``: a Python data source reading and writing with pyarrow.

Importing this package imports pyspark; ``multiwriter`` itself exposes :func:`register` lazily.
"""
from __future__ import annotations

from typing import Any

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def register(spark: Any) -> None:
    """Register the ``multiwriter`` data source with ``spark`` (once per session).

    Also enables Python data source filter pushdown for the session (``PUSHDOWN_CONF``): the
    reader prunes partitions with pushed filters, and Spark refuses a reader that accepts
    filters while the setting is off."""
    from .source import MultiWriterDataSource

    spark.conf.set(PUSHDOWN_CONF, "true")
    spark.dataSource.register(MultiWriterDataSource)


__all__ = ["PUSHDOWN_CONF", "register"]
