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


def inserted_keys(storage: Any, stats: list) -> dict:
    """Keys inserted by the executor path, for the same-new-key conflict check: read back from
    the key column of the new file groups this attempt wrote (outside the lock)."""
    import pyarrow.parquet as pq

    out: dict[str, list] = {}
    for st in stats:
        if st.prev_commit not in (None, "", "null") or not st.path:
            continue
        with storage.fs.open_input_file(storage.abs(st.path)) as f:
            keys = pq.read_table(f, columns=["_hoodie_record_key"]).column(0).combine_chunks()
        out.setdefault(st.partition_path, []).append(keys)
    return {p: pa.concat_arrays(ks) for p, ks in out.items()}
