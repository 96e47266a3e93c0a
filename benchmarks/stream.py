"""Real Spark Structured Streaming queries for the benchmarks: a parquet directory source read
with ``maxFilesPerTrigger=1`` and ``trigger(availableNow=True)``, each micro-batch handed to a
``foreachBatch`` function. Files are moved into the source directory one at a time so that
several queries can take turns on the same micro-batch (interleaving, as every section does)."""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq


def stage(tables: list[pa.Table], staging: Path) -> list[Path]:
    """Write each batch as one parquet file in ``staging`` (not yet visible to any query)."""
    staging.mkdir(parents=True, exist_ok=True)
    out = []
    for i, t in enumerate(tables):
        p = staging / f"part-{i:06d}.parquet"
        pq.write_table(t, p)
        out.append(p)
    return out


def publish(files: list[Path], source: Path) -> None:
    """Move staged files into the source directory (a rename: a query never sees half a file)."""
    source.mkdir(parents=True, exist_ok=True)
    for f in files:
        os.replace(f, source / f.name)


def spark_schema(schema: pa.Schema) -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


class Query:
    """One streaming query over ``source``, restarted with ``availableNow`` on every ``drain``
    (its checkpoint keeps the files it has seen, so each drain takes only the new files)."""

    def __init__(self, spark, source: Path, schema: pa.Schema, checkpoint: Path, fn: Callable[[Any, int], None],
                 name: str) -> None:
        self.spark, self.source, self.schema, self.checkpoint, self.fn, self.name = spark, source, schema, checkpoint, fn, name
        self.progress: list[dict] = []

    def drain(self) -> float:
        """Process every file not seen yet, one file per micro-batch; returns the wall seconds."""
        df = (self.spark.readStream.schema(spark_schema(self.schema)).option("maxFilesPerTrigger", 1)
              .parquet(str(self.source)))
        t0 = time.perf_counter()
        q = self.start(df.writeStream.queryName(self.name).option("checkpointLocation", str(self.checkpoint))
                       .trigger(availableNow=True))
        q.awaitTermination()
        wall = time.perf_counter() - t0
        if q.exception() is not None:
            raise RuntimeError(f"streaming query {self.name} failed: {q.exception()}")
        self.progress += [p for p in q.recentProgress if p.get("numInputRows", 0) > 0]
        return wall

    def start(self, writer: Any) -> Any:
        """Start the query's sink: ``foreachBatch(fn)``."""
        return writer.foreachBatch(self.fn).start()

    def trigger_ms(self) -> list[float]:
        """Spark's own duration of each non-empty micro-batch (``durationMs.triggerExecution``)."""
        return [float(p["durationMs"]["triggerExecution"]) for p in self.progress]
