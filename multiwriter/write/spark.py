"""The Spark side of the write path: small batches go to the driver; large ones are written by
Spark tasks and committed by the driver.

A write of at most :data:`ONE_TASK_MAX_ROWS` rows runs as ONE Spark job of one task, which does
what the driver path does (:func:`~multiwriter.write.plan.plan_batch` against the instant's
base, then :func:`~multiwriter.write.executor.run_on_driver`, file groups on a thread pool) and
hands back its write stats and inserted keys: the input is read once, and no keys travel to the
driver first (an exchange that spreads so few rows over more tasks costs more than it saves).
Bad input (null keys, a partition value that escapes its directory) is reported by the task as
its typed error, nothing committed. The job reads at most ``ONE_TASK_MAX_ROWS + 1`` rows; a
task that sees more writes nothing, and the batch is then planned on the driver from its keys
(one Spark job over the key columns, tagged with the index the driver path uses), routed in the
JVM (broadcast joins on the key columns), exchanged once by precomputed Spark partition and
merged there. Executors call the same pure functions as the driver path
(:func:`records.prepare`, :func:`merge.merge_file_group`), so both paths write the same rows.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import HeartbeatExpiredError, InstantRolledBackError, InvalidRecordError, MultiWriterError, SchemaMismatchError
from ..storage import Storage
from ..table import bucket, layout
from ..table.metadata import WriteStat
from ..table.snapshot import Snapshot
from ..table.timeline import Timeline
from . import records
from .index import FILE_ID, KeyIndex, integral_key, tag_buckets, untagged
from .plan import FileGroupTask, Plan, insert_buckets, plan_batch, planned_metadata
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


def check_columns(df: Any, table_config: Any) -> None:
    """Typed error before anything is written (no Spark job): a key or partition column missing."""
    cols = set(df.columns)
    for kind, fields in (("record key", table_config.record_key), ("partition", table_config.partition_by)):
        missing = [f for f in fields if f not in cols]
        if missing:
            raise SchemaMismatchError(f"{kind} columns {missing} are missing from the batch")


def validate(df: Any, table_config: Any, operation: str) -> pa.Table:
    """The batch's keys (one Spark job over the key columns), typed errors for missing columns,
    null or empty keys and unsafe partition values: what a batch too large for one task is
    planned from."""
    check_columns(df, table_config)
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
) -> tuple[list[WriteStat], Mapping[str, pa.Array]]:
    """Write ``df`` as instant ``ctx.instant_time`` begun on ``timeline``: the write stats and, per
    partition, the keys inserted as new (:class:`InsertedKeys`). One Spark task when
    the batch is small enough, else planned on the driver: see the module docstring. The
    inflight file names no file groups when one task plans them (as a streaming write's)."""
    from .merge import armed

    started = time.monotonic()
    spark = df.sparkSession
    cfg = table.config
    ctx = armed(ctx, cfg)  # executors check the heartbeat file and pending instant before each file
    limit = ONE_TASK_MAX_ROWS
    if limit > 0:
        on_planned(planned_metadata([], operation))
        done = _with_job(spark, "multiwriter: write the batch in one task",
                         lambda: _in_one_task(df, cfg, ctx, timeline, operation, target_file_size, limit))
        if done is not None:
            log.debug("executor path: one task, %.2fs (%d file groups)", time.monotonic() - started, len(done))
            return done, InsertedKeys(table.storage, done)
        log.debug("executor path: more than %d rows, planned on the driver", limit)
        on_planned = None
    keys = validate(df, cfg, operation)
    t_keys = time.monotonic()
    route = _plan(keys, cfg, table, timeline, index or KeyIndex(table.storage), operation,
                  len(ctx.data_schema), target_file_size, spark.sparkContext.defaultParallelism)
    t_plan = time.monotonic()
    if on_planned is not None:
        on_planned(planned_metadata(route.tasks, operation))
    stats = [] if not route.tasks else _with_job(
        spark, "multiwriter: route and merge", lambda: _merge(df, cfg, ctx.data_schema, operation, route, ctx))
    log.debug("executor path: keys %.2fs, plan %.2fs, merge %.2fs (%d rows, %d file groups, %d Spark partitions)",
              t_keys - started, t_plan - t_keys, time.monotonic() - t_plan, keys.num_rows, len(route.tasks), route.bins)
    return stats, InsertedKeys(table.storage, stats)


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


@dataclass(frozen=True)
class Routing:
    """Where each row of the batch goes: existing keys (by their key columns) to the task of
    their file group, new keys (by their partition columns) to one of their partition's new
    file groups (a stable hash of the key columns picks one), and each task's Spark partition."""

    tasks: list[FileGroupTask]
    existing: pa.Table  # key columns of rows whose key a file group holds, and TASK
    new: pa.Table  # partition columns, and the list of new tasks (NEW_TASKS)
    bin_of: list[int]  # task index -> Spark partition
    bins: int


def _plan(
    keys: pa.Table, cfg: Any, table: Any, timeline: Any, index: KeyIndex, operation: str, n_cols: int,
    target_file_size: int, parallelism: int,
) -> Routing:
    """The driver's share: tag the keys with the index the driver path uses, then the tasks."""
    if timeline.config.bucket_index:  # every key's group is its bucket's: none is new
        snap = index.snapshot(timeline, keys)
        tagged = tag_buckets(snap, keys, timeline.config)
    elif operation == "insert":  # as Hudi: no lookup against the table
        snap, tagged = Snapshot({}, timeline, None), untagged(keys)
    else:
        snap = index.snapshot(timeline, keys)
        tagged = index.tag(snap, keys, integral_key(keys, timeline.config.record_key))
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
    log_append = timeline.config.merge_on_read  # a log append costs its rows, not the group's
    for i, (p, f) in enumerate(sorted(groups)):
        old = snap.slices.get((p, f))
        tasks.append(FileGroupTask(p, f, i, old.name if old else None, old.instant_time if old else None))
        cost.append(groups[(p, f)] + (index.footer(old).num_rows if old and not log_append else 0))
    task_of = {(t.partition, t.file_id): t.task_index for t in tasks}
    existing_task = [task_of[pf] for pf in zip(found.column(PARTITION).to_pylist(), found.column(FILE_ID).to_pylist(), strict=True)]
    existing = found.select(_key_columns(cfg)).append_column(TASK, pa.array(existing_task, pa.int32()))
    by = list(cfg.partition_by) + [PARTITION]
    new_parts = new.select(by).group_by(by).aggregate([])
    new_tasks = [[task_of[(p, f)] for f in new_ids[p]] for p in new_parts.column(PARTITION).to_pylist()]
    new_parts = new_parts.select(list(cfg.partition_by)).append_column(NEW_TASKS, pa.array(new_tasks, pa.list_(pa.int32())))
    bins = max(1, min(len(tasks), parallelism))
    return Routing(tasks, existing, new_parts, _pack(cost, bins), bins)


def _pack(cost: list[int], bins: int) -> list[int]:
    """Each task's Spark partition: the costliest task first, into the least loaded partition."""
    load = [0] * bins
    out = [0] * len(cost)
    for i in sorted(range(len(cost)), key=lambda i: -cost[i]):
        b = min(range(bins), key=load.__getitem__)
        out[i], load[b] = b, load[b] + cost[i]
    return out


#: a batch of at most this many rows is written by one Spark task, its file groups side by side
#: on a thread pool as on the driver: below this, an exchange that spreads the rows over more
#: tasks costs more time than it saves (and one Python worker can hold them, as the driver
#: does on the driver path: the batch, and the old rows of the file groups being merged)
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
    """A batch too large for one task: one exchange by precomputed Spark partition, then per
    file group of a partition: the rows prepared (in batch order, so the later of two rows with one key wins, as on the
    driver) and merged."""
    tasks = r.tasks

    def merge_partition(batches):  # runs on executors, every file group of one Spark partition
        got = list(batches)
        if not got:
            return
        groups = []
        for group in _groups(pa.Table.from_batches(got), operation):
            groups.append((tasks[group.column(TASK)[0].as_py()], records.prepare(group, cfg, data_schema, operation=operation)))
        for st in _merge_all(groups, ctx):
            yield _stat_batch(st)

    job = _routed(df, cfg, r).repartitionById(r.bins, BIN).mapInArrow(merge_partition, _spark_schema(STAT_SCHEMA))
    return [WriteStat(**row) for row in _results(job, ctx).to_pylist()]


def _results(job: Any, ctx: Any) -> pa.Table:
    """``job``'s rows, collected as Arrow."""
    try:
        return job.toArrow()
    except Exception:
        # a task that refused to write (pre-write check) fails the job with a wrapped error: say
        # so with the typed error when the instant is indeed no longer alive
        from .merge import check_alive

        check_alive(Storage(ctx.table_uri), ctx, "any further data file")
        raise


# -- one task ------------------------------------------------------------------------------------
#: what the one task hands back: a row per write stat and one with the task's phase times
#: (JSON), or one row saying the batch was too large or naming the typed error that stopped it
KIND, ERROR, MESSAGE = "_mw_kind", "_mw_error", "_mw_message"
STAT, TOO_LARGE, FAILED, TIMES = "stat", "too_large", "failed", "times"
ONE_TASK_SCHEMA = pa.schema(STAT_FIELDS + [(KIND, pa.string()), (ERROR, pa.string()), (MESSAGE, pa.string())])
#: errors a task reports as themselves: bad input, and a pre-write check that found the instant
#: no longer alive (retrying the task cannot help)
RELAYED = (InvalidRecordError, SchemaMismatchError, HeartbeatExpiredError, InstantRolledBackError)


@dataclass(frozen=True)
class _OneTask:
    """What the one task needs, plain so it ships: the instant, the base it began from, options."""

    cfg: Any
    ctx: Any
    base: list[Any]  # the instants of the timeline the attempt began on
    operation: str
    target_file_size: int
    limit: int

    def __call__(self, batches: Any) -> Any:  # runs in the task
        took = {"start": time.time()}
        t0 = time.perf_counter()
        storage = Storage(self.ctx.table_uri)
        base = Timeline(storage, self.cfg, list(self.base))
        prefetch = _Prefetch(storage, self.cfg, base) if self.operation != "insert" else None
        got, n = [], 0
        try:
            for b in batches:
                got.append(b)
                n += b.num_rows
                if prefetch is not None and n <= self.limit:
                    prefetch.add(b)
        finally:
            if prefetch is not None:
                prefetch.close()
        took["read"] = time.perf_counter() - t0
        if n > self.limit:
            yield _marker(TOO_LARGE)
            return
        if n == 0:
            return
        try:
            stats = self.write(pa.Table.from_batches(got), storage, base, took)
        except RELAYED as e:
            yield _marker(FAILED, type(e).__name__, str(e))
            return
        took["end"] = time.time()
        yield _marker(TIMES, message=json.dumps(took))
        yield _stats_batch(stats)

    def write(self, rows: pa.Table, storage: Storage, base: Timeline,
              took: dict[str, float]) -> list[WriteStat]:
        """The driver path over every row, against the attempt's base timeline; the token names
        the task attempt (Hudi's ``<partition>-<stage>-<taskAttemptId>``), the new file groups
        are named from the instant and their rows, so every attempt names them alike."""
        from pyspark import TaskContext

        from .executor import run_on_driver

        tc = TaskContext.get()
        token = layout.task_write_token(tc)
        t0 = time.perf_counter()
        prepared = records.prepare(rows, self.cfg, self.ctx.data_schema, operation=self.operation, hashes=True)
        t1 = time.perf_counter()
        plan = stable_new_ids(plan_batch(prepared, base, KeyIndex(storage), self.operation, self.target_file_size),
                               self.ctx.instant_time, bucketed=self.cfg.bucket_index)
        t2 = time.perf_counter()
        stats = run_on_driver(storage, self.ctx, plan, self.cfg, token=lambda _: token)
        took.update(prepare=t1 - t0, plan=t2 - t1, merge=time.perf_counter() - t2)
        return stats


class _Prefetch:
    """Reads the footers of the latest files in the partitions the batch touches on a thread while
    the rest of the batch arrives (the JVM turns rows into Arrow meanwhile), so tagging finds
    them in the process's footer cache. Best effort: a failure here leaves the index to read
    (and report) it again."""

    def __init__(self, storage: Storage, cfg: Any, base: Timeline) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.storage, self.cfg, self.base = storage, cfg, base
        self.seen: set[str] = set()
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mw-prefetch")

    def add(self, batch: pa.RecordBatch) -> None:
        try:
            parts = set(pc.unique(records.partition_paths(pa.Table.from_batches([batch]), self.cfg)).to_pylist())
        except (MultiWriterError, pa.ArrowException):
            return  # the rows are checked again (and refused) when the batch is prepared
        new = parts - self.seen
        if new:
            self.seen |= new
            self.pool.submit(self._read, sorted(new))

    def _read(self, partitions: list[str]) -> None:
        try:
            index = KeyIndex(self.storage)
            existing = [p for p in partitions if p == "" or self.storage.is_dir(p)]
            for fs in Snapshot.build(self.storage, self.base, partitions=existing).slices.values():
                if fs.has_base:
                    index.footer(fs)
        except (MultiWriterError, OSError, pa.ArrowException) as e:
            log.debug("footer prefetch of %s: %s", partitions, e)

    def close(self) -> None:
        """Wait for the reads under way (the timeline they use is the task's from here on)."""
        self.pool.shutdown(wait=True)


def _in_one_task(df: Any, cfg: Any, ctx: Any, timeline: Any, operation: str, target_file_size: int,
                 limit: int) -> list[WriteStat] | None:
    """One job, one task (it reads at most ``limit + 1`` rows, no exchange): the write stats, or
    None when the batch has more than ``limit`` rows (nothing written)."""
    fn = _OneTask(cfg, ctx, list(timeline.instants), operation, target_file_size, limit)
    job = df.coalesce(1).limit(limit + 1).mapInArrow(fn, _spark_schema(ONE_TASK_SCHEMA))
    submitted = time.time()
    out = _results(job, ctx)
    done = time.time()
    kind = out.column(KIND).to_pylist()
    if TOO_LARGE in kind:
        return None
    if FAILED in kind:
        row = out.slice(kind.index(FAILED), 1).to_pylist()[0]
        raise _relayed(row[ERROR], row[MESSAGE])
    if TIMES in kind:
        took = json.loads(out.column(MESSAGE)[kind.index(TIMES)].as_py())
        log.debug("executor path, one task: started after %.2fs; read %.2fs, prepare %.2fs, plan %.2fs, merge %.2fs; "
                  "done after %.2fs", took["start"] - submitted, took["read"], took["prepare"], took["plan"], took["merge"],
                  done - took["end"])
    return [WriteStat(**{name: row[name] for name, _ in STAT_FIELDS}) for row, k in zip(out.to_pylist(), kind, strict=True)
            if k == STAT]


def _relayed(name: str, message: str) -> Exception:
    by_name = {e.__name__: e for e in RELAYED}
    return by_name[name](message)


def stable_new_ids(plan: Plan, instant_time: str, *, bucketed: bool = False) -> Plan:
    """``plan`` with its new file groups named from the instant, their partition and the
    smallest key of their rows: a retried, speculative or late attempt of the task plans the
    same groups under the same names whatever order its rows arrive in (a recomputed shuffle
    reorders them), so two attempts collide on one file group and instant instead of adding a
    second copy of the rows in a group of their own. A bucket's group keeps its bucket number
    (``bucketed``: the table has the bucket index); the shared fixed id of non-blocking writers
    is stable already."""
    rename: dict[tuple[str, str], str] = {}
    keys = plan.rows.column(KEY)
    for t in plan.tasks:
        p, f = t.partition, t.file_id
        lo, hi = plan.bounds.get((p, f), (0, 0))
        if not t.is_new or hi <= lo or _bucket_id(f):
            continue
        smallest = pc.min(keys.take(pa.array(plan.order[lo:hi]))).as_py()
        stable = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{instant_time}/{p}/{smallest}"))
        b = bucket.bucket_of_file_id(f) if bucketed else None
        rename[(p, f)] = f"{bucket.bucket_id_str(b) + stable[bucket.BUCKET_DIGITS:] if b is not None else stable}-0"
    if not rename:
        return plan
    tasks = [dataclasses.replace(t, file_id=rename.get((t.partition, t.file_id), t.file_id)) for t in plan.tasks]
    bounds = {(p, rename.get((p, f), f)): v for (p, f), v in plan.bounds.items()}
    return dataclasses.replace(plan, tasks=tasks, bounds=bounds)


def _bucket_id(file_id: str) -> bool:
    """Is this a bucket's fixed file id (the bucket index names new groups so)? A random id
    whose first eight characters happen to be digits is not."""
    b = bucket.bucket_of_file_id(file_id)
    return b is not None and file_id == bucket.new_file_id(b, fixed=True)


def _marker(kind: str, error: str | None = None, message: str | None = None) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([{KIND: kind, ERROR: error, MESSAGE: message}], schema=ONE_TASK_SCHEMA)


def _stats_batch(stats: list[WriteStat]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([{**{name: getattr(st, name) for name, _ in STAT_FIELDS}, KIND: STAT} for st in stats],
                                      schema=ONE_TASK_SCHEMA)


# -- results ------------------------------------------------------------------------------------
def _stat_batch(st: WriteStat) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([{name: getattr(st, name) for name, _ in STAT_FIELDS}], schema=STAT_SCHEMA)


def _changed_batch(n: int) -> InvalidRecordError:
    return InvalidRecordError(
        f"{n} row(s) of the batch were not there when its keys were read: the DataFrame gives other rows each "
        "time it is computed; cache or checkpoint it before writing (nothing was committed)"
    )


def _merge_all(groups: list[tuple[FileGroupTask, pa.Table]], ctx: Any) -> list[WriteStat]:
    """Merge file groups (prepared rows, one row per key), one after the other."""
    from pyspark import TaskContext

    tc = TaskContext.get()
    stage, attempt = (tc.stageId(), tc.attemptNumber()) if tc else (0, 0)
    return [st for t, g in groups for st in _merge_one(g, t, ctx, stage, attempt)]


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


def _merge_one(prepared: pa.Table, task: FileGroupTask, ctx: Any, stage: int, attempt: int) -> list[WriteStat]:
    from .log_append import write_group

    return write_group(Storage(ctx.table_uri), ctx, task, prepared, layout.write_token(task.task_index, stage, attempt))


class InsertedKeys(Mapping[str, pa.Array]):
    """Per partition, the keys this attempt inserted as new (the same-new-key conflict check),
    read from the key column of the new file groups' files when the check first asks for a
    partition: it asks only when a commit that completed meanwhile created file groups there,
    so an attempt without such a rival reads nothing."""

    def __init__(self, storage: Storage, stats: list[WriteStat]) -> None:
        self.storage = storage
        self.paths: dict[str, list[str]] = {}
        for st in stats:
            if st.creates_file_group and st.path:
                self.paths.setdefault(st.partition_path, []).append(st.path)
        self.read: dict[str, pa.Array] = {}

    def __getitem__(self, partition: str) -> pa.Array:
        if partition not in self.read:
            self.read[partition] = pa.concat_arrays([self._keys(p) for p in self.paths[partition]])
        return self.read[partition]

    def __iter__(self) -> Iterator[str]:
        return iter(self.paths)

    def __len__(self) -> int:
        return len(self.paths)

    def _keys(self, path: str) -> pa.Array:
        import pyarrow.parquet as pq

        with self.storage.fs.open_input_file(self.storage.abs(path)) as f:
            return pq.read_table(f, columns=["_hoodie_record_key"]).column(0).combine_chunks()
