"""The Spark side of the write path: small batches go to the driver; large ones are prepared,
indexed (a join against the key columns of the base snapshot), routed and merged on executors.

The driver only plans and commits. Executors call the same pure functions as the driver path
(:func:`records.prepare`, :func:`plan.bucket_of`, :func:`merge.merge_file_group`), so both paths
write the same rows.
"""
from __future__ import annotations

from typing import Any

import pyarrow as pa

from ..errors import InvalidRecordError, SchemaMismatchError
from ..storage import Storage
from ..table.metadata import WriteStat
from ..table.snapshot import Snapshot
from . import records
from .index import FILE_ID
from .plan import FileGroupTask, bucket_of, insert_buckets, planned_metadata
from .records import KEY, OP, OP_DELETE, PARTITION

STAT_FIELDS = [
    ("file_id", pa.string()), ("path", pa.string()), ("partition_path", pa.string()), ("prev_commit", pa.string()),
    ("num_writes", pa.int64()), ("num_inserts", pa.int64()), ("num_update_writes", pa.int64()),
    ("num_deletes", pa.int64()), ("total_write_bytes", pa.int64()), ("file_size", pa.int64()),
    ("prev_base_file", pa.string()), ("create_time_ms", pa.int64()),
]
STAT_SCHEMA = pa.schema(STAT_FIELDS)


def is_spark_df(obj: Any) -> bool:
    return type(obj).__name__ == "DataFrame" and hasattr(obj, "sparkSession") and hasattr(obj, "rdd")


def arrow_schema(df: Any) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    tz = df.sparkSession.conf.get("spark.sql.session.timeZone") or "UTC"
    return to_arrow_schema(df.schema, timezone=tz)


def to_arrow(df: Any) -> pa.Table:
    """Collect a (small) DataFrame to the driver as Arrow."""
    t = df.toArrow()
    return t if t.num_columns else arrow_schema(df).empty_table()


def collect_if_small(df: Any, max_rows: int) -> pa.Table | None:
    """The batch as Arrow when it has at most ``max_rows`` rows, else None (one Spark job,
    so a small micro-batch is computed once, not counted and then collected)."""
    t = to_arrow(df.limit(max_rows + 1))
    return None if t.num_rows > max_rows else t


def validate(df: Any, table_config: Any, operation: str) -> None:
    """Typed errors before anything is written: missing key/partition columns, null or empty
    keys (one Spark job), unsafe partition values (checked on the distinct values only)."""
    from pyspark.sql import functions as F

    cols = set(df.columns)
    for kind, fields in (("record key", table_config.record_key), ("partition", table_config.partition_by)):
        missing = [f for f in fields if f not in cols]
        if missing:
            raise SchemaMismatchError(f"{kind} columns {missing} are missing from the batch")
    bad = None
    for k in table_config.record_key:
        c = F.col(k)
        cond = c.isNull() | (F.length(c.cast("string")) == 0)
        bad = cond if bad is None else bad | cond
    n_bad = df.filter(bad).limit(1).count() if bad is not None else 0
    if n_bad:
        raise InvalidRecordError(
            f"record(s) with a null or empty record key {list(table_config.record_key)}; every record needs a key "
            "(nothing was written)"
        )
    if table_config.partition_by:
        values = df.select(*table_config.partition_by).distinct().toArrow()
        records.partition_paths(values, table_config)


def _spark_schema(schema: pa.Schema) -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


def run_on_executors(
    df: Any,
    table: Any,
    ctx: Any,
    timeline: Any,
    *,
    operation: str,
    target_file_size: int,
    on_planned: Any,
) -> list[WriteStat]:
    from pyspark.sql import functions as F

    from .merge import armed

    spark = df.sparkSession
    cfg = table.config
    ctx = armed(ctx, cfg)  # executors check the heartbeat file and pending instant before each file
    data_schema = ctx.data_schema
    prepared_schema = pa.schema(list(data_schema) + [pa.field(KEY, pa.string()), pa.field(PARTITION, pa.string()),
                                                     pa.field(OP, pa.int8())])

    def prepare_batches(batches):  # runs on executors
        for b in batches:
            t = records.prepare(pa.Table.from_batches([b]), cfg, data_schema, operation=operation)
            yield from t.cast(prepared_schema).to_batches()

    prepared = df.mapInArrow(prepare_batches, _spark_schema(prepared_schema)).cache()
    try:
        parts = [r[0] for r in prepared.select(PARTITION).distinct().collect()]
        existing_parts = [p for p in parts if p == "" or table.storage.is_dir(p)]
        snap = Snapshot.build(table.storage, timeline, partitions=existing_parts)
        tagged = _tag(spark, prepared, table, snap)
        tagged = tagged.filter(~(F.col(FILE_ID).isNull() & (F.col(OP) == OP_DELETE)))
        new_ids = _new_file_ids(tagged, len(data_schema), target_file_size)
        routed = _route(tagged, new_ids, prepared_schema)
        groups = sorted((r[0], r[1]) for r in routed.select(PARTITION, FILE_ID).distinct().collect())
        tasks = {}
        for i, (p, f) in enumerate(groups):
            old = snap.slices.get((p, f))
            tasks[(p, f)] = FileGroupTask(p, f, i, old.name if old else None, old.instant_time if old else None)
        on_planned(planned_metadata(list(tasks.values()), operation))
        stats = _merge(routed, tasks, ctx)
    finally:
        prepared.unpersist()
    return stats


def _tag(spark: Any, prepared: Any, table: Any, snap: Snapshot) -> Any:
    """Left join against (partition, key, file id) of the latest slices: the index, on executors."""
    from pyspark.sql import functions as F

    files = snap.files()
    if not files:
        return prepared.withColumn(FILE_ID, F.lit(None).cast("string"))
    uris = [table.storage.uri_of(f.path) for f in files]
    existing = (
        spark.read.parquet(*uris)
        .select(
            F.col("_hoodie_record_key").alias(KEY),
            F.col("_hoodie_partition_path").alias(PARTITION),
            F.regexp_extract(F.col("_metadata.file_name"), r"^([^_]+)_", 1).alias(FILE_ID),
        )
    )
    return prepared.join(existing, on=[PARTITION, KEY], how="left")


def _new_file_ids(tagged: Any, n_cols: int, target_file_size: int) -> dict[str, list[str]]:
    """Per partition, the ids of the new file groups its inserts go to (sized by the target)."""
    from pyspark.sql import functions as F

    from ..table import layout

    counts = tagged.filter(F.col(FILE_ID).isNull()).groupBy(PARTITION).count().collect()
    row_bytes = 16.0 * max(n_cols, 1)
    return {r[0]: [layout.new_file_id() for _ in range(insert_buckets(r[1], row_bytes, target_file_size))] for r in counts}


def _route(tagged: Any, new_ids: dict[str, list[str]], prepared_schema: pa.Schema) -> Any:
    out_schema = pa.schema(list(prepared_schema) + [pa.field(FILE_ID, pa.string())])

    def assign(batches):  # runs on executors
        for b in batches:
            t = pa.Table.from_batches([b])
            fids = t.column(FILE_ID).to_pylist()
            keys = t.column(KEY).to_pylist()
            parts = t.column(PARTITION).to_pylist()
            for i, f in enumerate(fids):
                if f is None or f == "":
                    ids = new_ids[parts[i]]
                    fids[i] = ids[bucket_of(keys[i], len(ids))]
            t = t.set_column(t.schema.get_field_index(FILE_ID), FILE_ID, pa.array(fids, pa.string()))
            yield from t.select(out_schema.names).cast(out_schema).to_batches()

    return tagged.select(*out_schema.names).mapInArrow(assign, _spark_schema(out_schema))


def _merge(routed: Any, tasks: dict[tuple[str, str], FileGroupTask], ctx: Any) -> list[WriteStat]:
    from pyspark import TaskContext

    from ..table import layout
    from .merge import check_alive, merge_file_group

    def merge(group: pa.Table) -> pa.Table:  # runs on executors, one file group per call
        key = (group.column(PARTITION)[0].as_py(), group.column(FILE_ID)[0].as_py())
        task = tasks[key]
        tc = TaskContext.get()
        token = layout.write_token(task.task_index, tc.stageId() if tc else 0, tc.attemptNumber() if tc else 0)
        st = merge_file_group(Storage(ctx.table_uri), ctx, task, group, token)
        return pa.Table.from_pylist([{name: getattr(st, name) for name, _ in STAT_FIELDS}], schema=STAT_SCHEMA)

    try:
        rows = routed.groupBy(PARTITION, FILE_ID).applyInArrow(merge, _spark_schema(STAT_SCHEMA)).collect()
    except Exception:
        # a task that refused to write (pre-write check) fails the job with a wrapped error: say
        # so with the typed error when the instant is indeed no longer alive
        check_alive(Storage(ctx.table_uri), ctx, "any further data file")
        raise
    return [WriteStat(**{name: r[name] for name, _ in STAT_FIELDS}) for r in rows]


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
