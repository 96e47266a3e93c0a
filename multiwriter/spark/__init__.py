"""Spark's ``format("multiwriter")``: a Python data source reading and writing with pyarrow.

Importing this package is cheap (pyspark loads with the data source, on :func:`register`); the
top-level package loads it so that ``Table.to_spark`` finds :func:`read_table` registered.
"""
from __future__ import annotations

import os
from typing import Any

from ..table import hooks

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
#: the object-store variables :func:`register` forwards to the session's Python workers
AWS_VARIABLES = (
    "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ALLOW_HTTP",
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
    # gs:// tables (multiwriter.gcs): an emulator, or where Google's credentials come from
    "STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_OAUTH_ACCESS_TOKEN", "GCE_METADATA_HOST",
)


def register(spark: Any, *, forward_aws_env: bool = True) -> None:
    """Register the ``multiwriter`` data source with ``spark`` (once per session is enough).

    Also enables Python data source filter pushdown for the session (``PUSHDOWN_CONF``): the
    reader prunes partitions with pushed filters, and Spark refuses a reader that accepts
    filters while the setting is off.

    ``forward_aws_env``: the driver's ``AWS_*`` variables and those of Google's credentials
    (``AWS_VARIABLES``) go to the Python
    workers that run the data source, so executors reach the same object store with the same
    credentials. Turn it off when executors carry their own (``spark.executorEnv.AWS_*``,
    instance roles)."""
    from .source import MultiWriterDataSource

    if forward_aws_env:
        _forward_aws_env(spark)
    spark.conf.set(PUSHDOWN_CONF, "true")
    spark.dataSource.register(MultiWriterDataSource)


def read_table(table: Any, spark: Any, as_of: str | None = None) -> Any:
    """``table`` (a :class:`~multiwriter.table.table.Table`) as a Spark DataFrame read by the
    ``multiwriter`` data source, as of ``as_of``: what ``Table.to_spark`` returns."""
    register(spark)
    reader = spark.read.format("multiwriter")
    if as_of is not None:
        reader = reader.option("as.of.instant", as_of)
    return reader.load(table.storage.uri_of(""))


hooks.set_spark_reader(read_table)


def _forward_aws_env(spark: Any) -> None:
    """Spark gives a Python function the worker environment of ``SparkContext.environment``
    as it is when the function is registered, so this runs before registering."""
    sc = getattr(spark, "sparkContext", None)
    env = getattr(sc, "environment", None)
    if env is None:  # Spark Connect: executors use their own environment
        return
    for name in AWS_VARIABLES:
        if name in os.environ:
            env[name] = os.environ[name]


__all__ = ["AWS_VARIABLES", "PUSHDOWN_CONF", "read_table", "register"]
