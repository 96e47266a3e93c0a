"""The Spark side of the write path: hand small batches to the driver, large ones to executors."""
from __future__ import annotations

from typing import Any

import pyarrow as pa


def is_spark_df(obj: Any) -> bool:
    return type(obj).__name__ == "DataFrame" and hasattr(obj, "sparkSession") and hasattr(obj, "rdd")


def arrow_schema(df: Any) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(df.schema)


def to_arrow(df: Any) -> pa.Table:
    """Collect a (small) DataFrame to the driver as Arrow."""
    t = df.toArrow()
    return t if t.num_columns else arrow_schema(df).empty_table()


def fits_driver(df: Any, max_rows: int) -> bool:
    """True when the batch has at most ``max_rows`` rows (one cheap limit+count job)."""
    return df.limit(max_rows + 1).count() <= max_rows


def validate(df: Any, table_config: Any, operation: str) -> None:
    raise NotImplementedError("the Spark executor path is not wired yet")


def run_on_executors(df: Any, table: Any, ctx: Any, timeline: Any, **kw: Any) -> list:
    raise NotImplementedError("the Spark executor path is not wired yet")
