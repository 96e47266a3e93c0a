"""A SparkSession for a command-line job (``multiwriter bootstrap --spark``)."""
from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def session(app_name: str, master: str | None = None) -> Iterator[Any]:
    """The session running in this process if there is one (left running), else a new one on
    ``master`` (default ``local[*]``), stopped at the end. Local Python workers run this
    interpreter, as the driver does, unless ``PYSPARK_PYTHON`` says otherwise."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        yield active
        return
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = SparkSession.builder.master(master or "local[*]").appName(app_name).getOrCreate()
    try:
        yield spark
    finally:
        spark.stop()
