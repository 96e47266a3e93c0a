"""The Spark side of the write path: small batches go to the driver; large ones are planned on
the driver from their keys and merged on executors.

Validating a batch collects its key columns (as Arrow, one job); the driver computes each row's
Hudi key and partition path, tags them with the index the driver path uses (footer key ranges
and bloom filters, then key columns of candidate files only) and plans the file-group tasks.
A write of at most :data:`ONE_TASK_MAX_ROWS` rows is merged by one Spark task, its file groups
on a thread pool (an exchange costs more than it saves there); a larger one is routed in the
JVM (broadcast joins on the key columns), exchanged once by precomputed Spark partition and
merged there. Executors call the same pure functions as the driver path
(:func:`records.prepare`, :func:`merge.merge_file_group`), so both paths write the same rows.
"""
from __future__ import annotations

import dataclasses
import logging
import os
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
from .records import KEY, OP, OP_DELETE, OP_UPSERT, PARTITION

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


def validate(df: Any, table_config: Any, operation: str) -> pa.Table:
    """Typed errors before anything is written: missing key/partition columns, null or empty
    keys, unsafe partition values. Returns the batch's keys (one Spark job over the key
    columns), which every attempt of the write then plans from."""
    cols = set(df.columns)
    for kind, fields in (("record key", table_config.record_key), ("partition", table_config.partition_by)):
        missing = [f for f in fields if f not in cols]
        if missing:
            raise SchemaMismatchError(f"{kind} columns {missing} are missing from the batch")
    return _with_job(df.sparkSession, "multiwriter: keys of the batch", lambda: _batch_keys(df, table_config, operation))


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
    keys: pa.Table | None = None,
) -> list[WriteStat]:
    """Plan on the driver from the batch's keys (``keys``: as :func:`validate` returned them, else
    collected now), then one Spark job merges: see the module docstring."""
    from .merge import armed

    started = time.monotonic()
    spark = df.sparkSession
    cfg = table.config
    ctx = armed(ctx, cfg)  # executors check the heartbeat file and pending instant before each file
    data_schema = ctx.data_schema
    if keys is None:
        keys = validate(df, cfg, operation)
    t_keys = time.monotonic()
    route = _plan(keys, cfg, table, timeline, index or KeyIndex(table.storage), operation,
                  len(data_schema), target_file_size, spark.sparkContext.defaultParallelism)
    t_plan = time.monotonic()
    on_planned(planned_metadata(route.tasks, operation))
    stats = [] if not route.tasks else _with_job(
        spark, "multiwriter: route and merge", lambda: _merge(df, cfg, data_schema, operation, route, ctx))
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


def _key_columns(cfg: Any) -> list[str]:
    """The batch columns a record's key and partition path are made of."""
    return list(dict.fromkeys(list(cfg.record_key) + list(cfg.partition_by)))


def _batch_keys(df: Any, cfg: Any, operation: str) -> pa.Table:
    """The key columns of every row with its Hudi key and partition path: the key columns are
    collected as Arrow (one job, no Python worker, no shuffle) and the driver path's functions
    compute the rest on the driver (so their typed errors are raised as themselves)."""
    t = to_arrow(df.select(*_key_columns(cfg)))
    t = t.append_column(KEY, records.record_keys(t, cfg)).append_column(PARTITION, records.partition_paths(t, cfg))
    op = OP_DELETE if operation == "delete" else OP_UPSERT
    t = t.append_column(OP, pa.repeat(pa.scalar(op, pa.int8()), t.num_rows))
    if records.has_duplicates(t):  # one row per key, as the batch spells it (routing joins on that)
        t = t.group_by(t.column_names).aggregate([]).select(t.column_names)
    return t


SEP = "\x1f"


@dataclass(frozen=True)
class Routing:
    """Where each row of the batch goes: existing keys (by their key columns) to the task of
    their file group, new keys (by their partition columns) to one of their partition's new
    file groups (a stable hash of the key columns picks one), and each task's Spark partition."""

    tasks: list[FileGroupTask]
    existing: pa.Table  # key columns of rows whose key a file group holds, and TASK
    new: pa.Table  # partition columns, and the list of new tasks (NEW_TASKS)
    bin_of: list[int]  # task index -> Spark partition
    bins: int  # 1: one Spark task merges every file group (no exchange)
    existing_keys: pa.Array  # PARTITION SEP KEY of ``existing``'s rows (routing in Python)
    new_tasks: dict[str, list[int]]  # PARTITION -> its new tasks (routing in Python)


def _plan(
    keys: pa.Table, cfg: Any, table: Any, timeline: Any, index: KeyIndex, operation: str, n_cols: int,
    target_file_size: int, parallelism: int,
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
    existing_task = [task_of[pf] for pf in zip(found.column(PARTITION).to_pylist(), found.column(FILE_ID).to_pylist(), strict=True)]
    existing = found.select(_key_columns(cfg)).append_column(TASK, pa.array(existing_task, pa.int32()))
    by = list(cfg.partition_by) + [PARTITION]
    new_parts = new.select(by).group_by(by).aggregate([])
    new_tasks = [[task_of[(p, f)] for f in new_ids[p]] for p in new_parts.column(PARTITION).to_pylist()]
    new_parts = new_parts.select(list(cfg.partition_by)).append_column(NEW_TASKS, pa.array(new_tasks, pa.list_(pa.int32())))
    bins = 1 if sum(cost) <= ONE_TASK_MAX_ROWS else max(1, min(len(tasks), parallelism))
    return Routing(tasks, existing, new_parts, _pack(cost, bins), bins,
                   _composite(found.column(PARTITION), found.column(KEY)),
                   {p: [task_of[(p, f)] for f in ids] for p, ids in new_ids.items()})


def _composite(partitions: Any, keys: Any) -> pa.Array:
    out = pc.binary_join_element_wise(partitions, keys, SEP)
    return out.combine_chunks() if isinstance(out, pa.ChunkedArray) else out


def _pack(cost: list[int], bins: int) -> list[int]:
    """Each task's Spark partition: the costliest task first, into the least loaded partition."""
    load = [0] * bins
    out = [0] * len(cost)
    for i in sorted(range(len(cost)), key=lambda i: -cost[i]):
        b = min(range(bins), key=load.__getitem__)
        out[i], load[b] = b, load[b] + cost[i]
    return out


#: a write whose file groups hold at most this many rows (incoming plus old) is merged by one
#: Spark task, its file groups side by side on a thread pool: below this, an exchange that
#: spreads the rows over more tasks costs more time than it saves (and one Python worker can
#: hold the rows: a few hundred bytes each, about three times over while merging)
ONE_TASK_MAX_ROWS = 2_000_000

TASK = "_mw_task"
BIN = "_mw_bin"
ORDER = "_mw_order"
NEW_TASKS = "_mw_new_tasks"


def _routed(df: Any, cfg: Any, r: Routing) -> Any:
    """``df`` with each row's task and Spark partition, computed in the JVM: broadcast joins
    against the (small) routing tables, on the key columns as the batch has them. A row no
    task takes (a delete of an absent key) gets no task; ORDER keeps the batch order."""
    from pyspark.sql import functions as F

    spark = df.sparkSession
    cols = df.columns
    out = df.withColumn(ORDER, F.monotonically_increasing_id())
    out = _join_small(out, spark, r.existing, _key_columns(cfg))
    if cfg.partition_by:
        out = _join_small(out, spark, r.new, list(cfg.partition_by))
    elif r.new.num_rows:
        out = out.withColumn(NEW_TASKS, F.array(*[F.lit(t) for t in r.new.column(NEW_TASKS)[0].as_py()]))
    for name, kind in ((TASK, "int"), (NEW_TASKS, "array<int>")):
        out = out.withColumn(name, F.col(name).cast(kind) if name in out.columns else F.lit(None).cast(kind))
    new = F.col(NEW_TASKS)
    bucket = F.pmod(F.hash(*[F.col(c) for c in cfg.record_key]), F.size(new)) + 1
    task = F.coalesce(F.col(TASK), F.when(new.isNotNull(), F.element_at(new, bucket)))
    out = out.withColumn(TASK, task.cast("int"))
    bins = F.array(*[F.lit(b) for b in r.bin_of]).cast("array<int>")
    out = out.withColumn(BIN, F.when(F.col(TASK).isNotNull(), F.element_at(bins, F.col(TASK) + 1)))
    return out.select(*cols, TASK, ORDER, BIN)


def _join_small(df: Any, spark: Any, small: pa.Table, on: list[str]) -> Any:
    """Left join with a broadcast of ``small`` on ``on`` (null-safe: a null partition value
    is a value); ``small``'s other columns are added."""
    from pyspark.sql import functions as F

    if small.num_rows == 0:
        return df
    alias = {c: f"_mw_j{i}" for i, c in enumerate(on)}
    right = spark.createDataFrame(small).toDF(*[alias.get(c, c) for c in small.column_names])
    cond = None
    for c in on:
        e = df[c].eqNullSafe(right[alias[c]])
        cond = e if cond is None else cond & e
    return df.join(F.broadcast(right), on=cond, how="left").drop(*alias.values())


def _merge(df: Any, cfg: Any, data_schema: pa.Schema, operation: str, r: Routing, ctx: Any) -> list[WriteStat]:
    """One exchange by precomputed Spark partition, then per file group of a partition: the
    rows prepared (in batch order, so the later of two rows with one key wins, as on the
    driver) and merged."""
    tasks = r.tasks

    def merge_partition(batches):  # runs on executors, every file group of one Spark partition
        got = list(batches)
        if not got:
            return
        groups = []
        for group in _groups(pa.Table.from_batches(got), operation):
            groups.append((tasks[group.column(TASK)[0].as_py()], records.prepare(group, cfg, data_schema, operation=operation)))
        for st in _merge_all(groups, ctx, threads=1):
            yield _stat_batch(st)

    here = dataclasses.replace(r, existing=r.existing.select([TASK]), new=r.new.slice(0, 0))  # what it ships

    def merge_everything(batches):  # runs on one executor: the whole batch
        got = list(batches)
        if not got:
            return
        prepared = records.prepare(pa.Table.from_batches(got), cfg, data_schema, operation=operation)
        for st in _merge_all(_route_here(prepared, here, operation), ctx, threads=os.cpu_count() or 1):
            yield _stat_batch(st)

    if r.bins == 1:
        job = df.coalesce(1).mapInArrow(merge_everything, _spark_schema(STAT_SCHEMA))
    else:
        job = _routed(df, cfg, r).repartitionById(r.bins, BIN).mapInArrow(merge_partition, _spark_schema(STAT_SCHEMA))
    try:
        rows = job.toArrow()
    except Exception:
        # a task that refused to write (pre-write check) fails the job with a wrapped error: say
        # so with the typed error when the instant is indeed no longer alive
        from .merge import check_alive

        check_alive(Storage(ctx.table_uri), ctx, "any further data file")
        raise
    return [WriteStat(**row) for row in rows.to_pylist()]


def _stat_batch(st: WriteStat) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([{name: getattr(st, name) for name, _ in STAT_FIELDS}], schema=STAT_SCHEMA)


def _route_here(prepared: pa.Table, r: Routing, operation: str) -> list[tuple[FileGroupTask, pa.Table]]:
    """The prepared batch split by task, routed in Python (the one-task merge)."""
    n = prepared.num_rows
    task = np.full(n, -1, np.int64)
    if len(r.existing_keys):
        pos = pc.index_in(_composite(prepared.column(PARTITION), prepared.column(KEY)), value_set=r.existing_keys)
        task = pc.fill_null(r.existing.column(TASK).combine_chunks().take(pos), -1).to_numpy(zero_copy_only=False).astype(np.int64)
    missing = np.flatnonzero(task < 0)
    if len(missing) and operation != "delete":
        parts = prepared.column(PARTITION).combine_chunks().take(pa.array(missing))
        for p, idx in _positions_by_value(parts):
            ids = r.new_tasks.get(p)
            if not ids:
                raise _changed_batch(len(idx))
            rows = missing[idx]
            if len(ids) == 1:
                task[rows] = ids[0]
            else:
                keys = prepared.column(KEY).take(pa.array(rows)).to_pylist()
                task[rows] = [ids[bucket_of(k, len(ids))] for k in keys]
    keep = np.flatnonzero(task >= 0)
    order = keep[np.argsort(task[keep], kind="stable")]
    sorted_task = task[order]
    starts = np.flatnonzero(np.r_[True, sorted_task[1:] != sorted_task[:-1]]) if len(order) else np.array([], np.int64)
    ends = np.r_[starts[1:], len(order)]
    routed = prepared.take(pa.array(order))
    return [(r.tasks[int(sorted_task[lo])], routed.slice(lo, hi - lo)) for lo, hi in zip(starts.tolist(), ends.tolist(), strict=True)]


def _positions_by_value(values: pa.Array) -> list[tuple[str, np.ndarray]]:
    enc = values.dictionary_encode()
    codes = enc.indices.to_numpy(zero_copy_only=False)
    return [(v, np.flatnonzero(codes == c)) for c, v in enumerate(enc.dictionary.to_pylist())]


def _changed_batch(n: int) -> InvalidRecordError:
    return InvalidRecordError(
        f"{n} row(s) of the batch were not there when its keys were read: the DataFrame gives other rows each "
        "time it is computed; cache or checkpoint it before writing (nothing was committed)"
    )


def _merge_all(groups: list[tuple[FileGroupTask, pa.Table]], ctx: Any, *, threads: int) -> list[WriteStat]:
    """Merge file groups (prepared rows, one row per key) on up to ``threads`` threads: reading,
    sorting and writing Parquet release the GIL. The first failure is raised once every started
    merge has finished."""
    from concurrent.futures import ThreadPoolExecutor

    from pyspark import TaskContext

    tc = TaskContext.get()
    stage, attempt = (tc.stageId(), tc.attemptNumber()) if tc else (0, 0)
    workers = max(1, min(threads, len(groups)))
    if workers == 1:
        return [_merge_one(g, t, ctx, stage, attempt) for t, g in groups]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mw-merge") as pool:
        futures = [pool.submit(_merge_one, g, t, ctx, stage, attempt) for t, g in groups]
    return [f.result() for f in futures]


def _groups(t: pa.Table, operation: str):
    """The rows of each task in ``t``, in batch order. Rows of no task are deletes of absent
    keys, or rows the key job did not see: the batch changed between its two reads."""
    task = t.column(TASK)
    if task.null_count:
        if operation != "delete":
            raise _changed_batch(task.null_count)
        t = t.filter(pc.is_valid(task))
    if t.num_rows == 0:
        return
    order = np.lexsort((t.column(ORDER).to_numpy(), t.column(TASK).to_numpy()))
    t = t.take(pa.array(order))
    task = t.column(TASK).to_numpy()
    starts = np.flatnonzero(np.r_[True, task[1:] != task[:-1]])
    ends = np.r_[starts[1:], len(task)]
    for lo, hi in zip(starts.tolist(), ends.tolist(), strict=True):
        yield t.slice(lo, hi - lo)


def _merge_one(prepared: pa.Table, task: FileGroupTask, ctx: Any, stage: int, attempt: int) -> WriteStat:
    from ..table import layout
    from .merge import merge_file_group

    token = layout.write_token(task.task_index, stage, attempt)
    return merge_file_group(Storage(ctx.table_uri), ctx, task, prepared, token, deduped=True)


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
