"""The Spark side of the write path: small batches go to the driver; large ones are prepared,
indexed (a join against the key columns of the base snapshot), routed and merged on executors.

The driver only plans and commits. Executors call the same pure functions as the driver path
(:func:`records.prepare`, :func:`plan.bucket_of`, :func:`merge.merge_file_group`), so both paths
write the same rows.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InvalidRecordError, SchemaMismatchError
from ..storage import Storage
from ..table.metadata import WriteStat
from ..table.snapshot import Snapshot
from . import records
from .index import FILE_ID, KeyIndex, untagged
from .plan import FileGroupTask, bucket_of, insert_buckets, planned_metadata
from .records import KEY, OP, OP_DELETE, PARTITION

STAT_FIELDS = [
    ("file_id", pa.string()), ("path", pa.string()), ("partition_path", pa.string()), ("prev_commit", pa.string()),
    ("num_writes", pa.int64()), ("num_inserts", pa.int64()), ("num_update_writes", pa.int64()),
    ("num_deletes", pa.int64()), ("total_write_bytes", pa.int64()), ("file_size", pa.int64()),
    ("prev_base_file", pa.string()), ("create_time_ms", pa.int64()),
]
STAT_SCHEMA = pa.schema(STAT_FIELDS)

log = logging.getLogger(__name__)


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
    index: KeyIndex | None = None,
) -> list[WriteStat]:
    """Plan on the driver from the batch's keys, merge on executors: one job collects (partition,
    key) of every row, the driver's index tags them (footer key ranges and bloom filters, then
    the key columns of candidate files only) and routes each key to a file-group task; a second
    job prepares the rows again, sends each to its task's Spark partition (one exchange, no
    sort) and merges every file group of a partition there."""
    from .merge import armed

    started = time.monotonic()
    spark = df.sparkSession
    cfg = table.config
    ctx = armed(ctx, cfg)  # executors check the heartbeat file and pending instant before each file
    data_schema = ctx.data_schema
    keys = _with_job(spark, "multiwriter: keys of the batch", lambda: _batch_keys(df, cfg, data_schema, operation))
    t_keys = time.monotonic()
    route = _plan(keys, table, timeline, index or KeyIndex(table.storage), operation,
                  len(data_schema), target_file_size, spark.sparkContext.defaultParallelism)
    t_plan = time.monotonic()
    on_planned(planned_metadata(route.tasks, operation))
    stats = [] if not route.tasks else _with_job(
        spark, "multiwriter: merge file groups", lambda: _merge(df, cfg, data_schema, operation, route, ctx))
    log.debug("executor path: keys %.2fs, plan %.2fs, merge %.2fs (%d rows, %d file groups, %d Spark partitions)",
              t_keys - started, t_plan - t_keys, time.monotonic() - t_plan, keys.num_rows, len(route.tasks), route.bins)
    return stats


def _with_job(spark: Any, description: str, fn: Any) -> Any:
    """Run ``fn`` with its Spark jobs named (the Spark UI then says which phase is which)."""
    sc = spark.sparkContext
    sc.setJobDescription(description)
    try:
        return fn()
    finally:
        sc.setJobDescription(None)


def _prepared_schema(data_schema: pa.Schema) -> pa.Schema:
    return pa.schema(list(data_schema) + [pa.field(KEY, pa.string()), pa.field(PARTITION, pa.string()),
                                          pa.field(OP, pa.int8())])


def _batch_keys(df: Any, cfg: Any, data_schema: pa.Schema, operation: str) -> pa.Table:
    """(partition, key, op) of every row, collected to the driver (one job, no shuffle)."""
    schema = pa.schema([pa.field(PARTITION, pa.string()), pa.field(KEY, pa.string()), pa.field(OP, pa.int8())])

    def keys_of(batches):  # runs on executors
        for b in batches:
            t = records.prepare(pa.Table.from_batches([b]), cfg, data_schema, operation=operation)
            yield from t.select(schema.names).cast(schema).to_batches()

    t = df.mapInArrow(keys_of, _spark_schema(schema)).toArrow()
    t = t if t.num_columns else schema.empty_table()
    return records.dedupe(t, None)  # keys repeated across Arrow batches count once


@dataclass(frozen=True)
class Routing:
    """Where each row of the batch goes, small enough to ship to every task: existing keys by
    ``partition + SEP + key`` to their task, new keys by partition to the tasks of its new file
    groups (a stable hash of the key picks one), and each task's Spark partition."""

    tasks: list[FileGroupTask]
    existing: pa.Array  # partition SEP key of rows whose key a file group holds
    existing_task: pa.Array  # int32, their task index
    new_tasks: dict[str, list[int]]  # partition -> task indexes of its new file groups
    bin_of: list[int]  # task index -> Spark partition
    bins: int


SEP = "\x1f"


def _composite(partitions: Any, keys: Any) -> Any:
    return pc.binary_join_element_wise(partitions, keys, SEP)


def _plan(
    keys: pa.Table, table: Any, timeline: Any, index: KeyIndex, operation: str, n_cols: int, target_file_size: int,
    parallelism: int,
) -> Routing:
    """The driver's share: tag the keys with the index the driver path uses, then the tasks."""
    from ..table import layout

    if operation == "insert":  # as Hudi: no lookup against the table
        snap, tagged = Snapshot({}, timeline, None), untagged(keys)
    else:
        snap = index.snapshot(timeline, keys)
        tagged = index.tag(snap, keys)
    fids = tagged.column(FILE_ID)
    found = tagged.filter(pc.is_valid(fids))
    new = tagged.filter(pc.and_(pc.is_null(fids), pc.not_equal(tagged.column(OP), OP_DELETE)))
    row_bytes = 16.0 * max(n_cols, 1)
    groups: dict[tuple[str, str], int] = {}  # (partition, file id) -> incoming rows
    for item in found.group_by([PARTITION, FILE_ID]).aggregate([([], "count_all")]).to_pylist():
        groups[(item[PARTITION], item[FILE_ID])] = item["count_all"]
    new_ids: dict[str, list[str]] = {}
    for item in pc.value_counts(new.column(PARTITION)).to_pylist():
        n = item["counts"]
        ids = [layout.new_file_id() for _ in range(insert_buckets(n, row_bytes, target_file_size))]
        new_ids[item["values"]] = ids
        for f in ids:
            groups[(item["values"], f)] = n // len(ids) + 1
    tasks, cost = [], []
    for i, (p, f) in enumerate(sorted(groups)):
        old = snap.slices.get((p, f))
        tasks.append(FileGroupTask(p, f, i, old.name if old else None, old.instant_time if old else None))
        cost.append(groups[(p, f)] + (index.footer(old).num_rows if old else 0))
    task_of = {(t.partition, t.file_id): t.task_index for t in tasks}
    existing_task = pa.array([task_of[(p, f)] for p, f in zip(found.column(PARTITION).to_pylist(),
                                                              found.column(FILE_ID).to_pylist(), strict=True)], pa.int32())
    bins = max(1, min(len(tasks), parallelism))
    return Routing(
        tasks, _composite(found.column(PARTITION), found.column(KEY)).combine_chunks(), existing_task,
        {p: [task_of[(p, f)] for f in ids] for p, ids in new_ids.items()}, _pack(cost, bins), bins,
    )


def _pack(cost: list[int], bins: int) -> list[int]:
    """Each task's Spark partition: the costliest task first, into the least loaded partition."""
    load = [0] * bins
    out = [0] * len(cost)
    for i in sorted(range(len(cost)), key=lambda i: -cost[i]):
        b = min(range(bins), key=load.__getitem__)
        out[i], load[b] = b, load[b] + cost[i]
    return out


def _route(t: pa.Table, r: Routing) -> pa.Table:
    """``t`` (prepared rows) with each row's task index; deletes of absent keys are dropped."""
    n = t.num_rows
    if len(r.existing):
        pos = pc.index_in(_composite(t.column(PARTITION), t.column(KEY)), value_set=r.existing)
        task = pc.fill_null(r.existing_task.take(pos), -1).to_numpy(zero_copy_only=False).astype(np.int64)
    else:
        task = np.full(n, -1, np.int64)
    missing = np.flatnonzero(task < 0)
    if len(missing):
        parts = t.column(PARTITION).take(pa.array(missing)).to_pylist()
        ops = t.column(OP).take(pa.array(missing)).to_numpy(zero_copy_only=False)
        keys = t.column(KEY).take(pa.array(missing)).to_pylist()
        for j, i in enumerate(missing.tolist()):
            ids = r.new_tasks.get(parts[j])
            if ops[j] != OP_DELETE and ids:
                task[i] = ids[bucket_of(keys[j], len(ids))] if len(ids) > 1 else ids[0]
    keep = task >= 0
    t = t.append_column(TASK, pa.array(task.astype(np.int32)))
    return t if keep.all() else t.filter(pa.array(keep))


TASK = "_mw_task"
BIN = "_mw_bin"
ORDER = "_mw_order"


def _merge(df: Any, cfg: Any, data_schema: pa.Schema, operation: str, r: Routing, ctx: Any) -> list[WriteStat]:
    """Prepare and route on the batch's own partitions, one exchange by precomputed Spark
    partition, then merge every file group of a partition (rows in batch order, so the later
    of two rows with one key wins, as on the driver)."""
    from pyspark import TaskContext

    routed_schema = pa.schema(list(_prepared_schema(data_schema)) + [pa.field(TASK, pa.int32()),
                                                                   pa.field(BIN, pa.int32()), pa.field(ORDER, pa.int64())])
    bin_of = np.asarray(r.bin_of, np.int32)

    def prepare_and_route(batches):  # runs on executors
        tc = TaskContext.get()
        seen = (tc.partitionId() if tc else 0) << 40
        for b in batches:
            t = records.prepare(pa.Table.from_batches([b]), cfg, data_schema, operation=operation)
            t = _route(t, r)
            tasks = t.column(TASK).to_numpy(zero_copy_only=False)
            t = t.append_column(BIN, pa.array(bin_of[tasks])).append_column(ORDER, pa.array(np.arange(seen, seen + t.num_rows)))
            seen += b.num_rows
            yield from t.cast(routed_schema).to_batches()

    tasks = r.tasks

    def merge_partition(batches):  # runs on executors, every file group of one Spark partition
        got = list(batches)
        if not got:
            return
        t = pa.Table.from_batches(got)
        for group in _groups(t):
            st = _merge_one(group, tasks, ctx)
            yield pa.RecordBatch.from_pylist([{name: getattr(st, name) for name, _ in STAT_FIELDS}], schema=STAT_SCHEMA)

    routed = df.mapInArrow(prepare_and_route, _spark_schema(routed_schema)).repartitionById(r.bins, BIN)
    try:
        rows = routed.mapInArrow(merge_partition, _spark_schema(STAT_SCHEMA)).toArrow()
    except Exception:
        # a task that refused to write (pre-write check) fails the job with a wrapped error: say
        # so with the typed error when the instant is indeed no longer alive
        from .merge import check_alive

        check_alive(Storage(ctx.table_uri), ctx, "any further data file")
        raise
    return [WriteStat(**row) for row in rows.to_pylist()]


def _groups(t: pa.Table):
    """The rows of each task in ``t``, in batch order."""
    if t.num_rows == 0:
        return
    order = np.lexsort((t.column(ORDER).to_numpy(), t.column(TASK).to_numpy()))
    t = t.take(pa.array(order))
    task = t.column(TASK).to_numpy()
    starts = np.flatnonzero(np.r_[True, task[1:] != task[:-1]])
    ends = np.r_[starts[1:], len(task)]
    for lo, hi in zip(starts.tolist(), ends.tolist(), strict=True):
        yield t.slice(lo, hi - lo).drop_columns([BIN, ORDER])


def _merge_one(group: pa.Table, tasks: list[FileGroupTask], ctx: Any) -> WriteStat:
    from pyspark import TaskContext

    from ..table import layout
    from .merge import merge_file_group

    task = tasks[group.column(TASK)[0].as_py()]
    tc = TaskContext.get()
    token = layout.write_token(task.task_index, tc.stageId() if tc else 0, tc.attemptNumber() if tc else 0)
    return merge_file_group(Storage(ctx.table_uri), ctx, task, group.drop_columns([TASK]), token)


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
