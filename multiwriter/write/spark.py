"""The Spark side of the write path: small batches go to the driver; large ones are written by
Spark tasks and committed by the driver.

A batch Spark estimates at most :data:`ONE_TASK_MAX_BYTES` runs as ONE Spark job of one task
(it reads at most :data:`ONE_TASK_MAX_ROWS` + 1 rows), which does what the driver path does
(:func:`~multiwriter.write.plan.plan_batch` against the instant's base, then
:func:`~multiwriter.write.executor.run_on_driver`, file groups on a thread pool) and hands back
its write stats: an exchange that spreads so few rows over more tasks costs more than it saves.

A larger batch (or one Spark cannot size) of a partitioned table goes to tasks by table
partition: one exchange hashed on the partition columns (the input is read once, by it), and
each task runs the one task's driver path over its partitions' rows, so no two tasks touch one
file group. An unpartitioned table's batch is spread by file group instead, and no key ever
reaches the driver: each task tags its rows (the driver path's index against the attempt's
base, a few hundred thousand rows at a time) and the tagged rows are cached (the input's one
read); the driver plans from counts alone (rows per partition and file group), routes in the
JVM (one broadcast join of that small table), and the rows are exchanged once by precomputed
Spark partition and merged there, one file group at a time. Bad input (null keys, a partition
value that escapes its directory) is reported by the task that found it as its typed error,
nothing committed. Executors call the same pure functions as the driver path
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
from ..table import bucket
from ..format import bounds, layout
from ..table.metadata import WRITE_STAT_FIELDS, WriteStat
from ..table.properties import TableConfig
from ..table.record_keys import read_stored_keys
from ..table.snapshot import Snapshot
from ..table.timeline import Timeline
from . import bloom, global_keys, records
from .index import FILE_ID, KeyIndex, integral_key, listable_partitions, tag_buckets
from .plan import FileGroupTask, Plan, insert_buckets, plan_batch, planned_metadata
from .records import KEY, PARTITION


log = logging.getLogger(__name__)


def is_spark_df(obj: Any) -> bool:
    """Asked of the class, not the object: ``DataFrame.rdd`` is a property whose first read plans
    the query and compiles it into an RDD of pickled rows (tens of ms, for a batch about to be
    planned and compiled again by its collection as Arrow)."""
    kind = type(obj)
    return kind.__name__ == "DataFrame" and hasattr(kind, "sparkSession") and hasattr(kind, "rdd")


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
    small_file_limit: int = 0,
) -> tuple[list[WriteStat], Mapping[str, pa.Array]]:
    """Write ``df`` as instant ``ctx.instant_time`` begun on ``timeline``: the write stats and, per
    partition, the keys inserted as new (:class:`InsertedKeys`). One Spark task when
    the batch is small enough, else spread over tasks: see the module docstring. The
    inflight file names no file groups when one task plans them (as a streaming write's).
    ``small_file_limit``: a Copy-on-Write upsert's new keys may join a small group it rewrites."""
    from .merge import armed

    started = time.monotonic()
    spark = df.sparkSession
    cfg = table.config
    ctx = armed(ctx, cfg)  # executors check the heartbeat file and pending instant before each file
    fill = small_file_limit if operation == "upsert" and not cfg.merge_on_read else 0
    limit = ONE_TASK_MAX_ROWS
    size = estimated_bytes(df)
    if limit > 0 and size is not None and size <= ONE_TASK_MAX_BYTES:
        on_planned(planned_metadata([], operation))
        done = _with_job(spark, "multiwriter: write the batch in one task",
                         lambda: _in_one_task(df, cfg, ctx, timeline, operation, target_file_size, limit, fill))
        if done is not None:
            log.debug("executor path: one task, %.2fs (%d file groups)", time.monotonic() - started, len(done))
            return done, InsertedKeys(table.storage, done, table.config)
        log.debug("executor path: more than %d rows, spread over tasks", limit)
        on_planned = None
    if cfg.partition_by and TASKS_BY_PARTITION:
        if on_planned is not None:
            on_planned(planned_metadata([], operation))
        bins = _bins(spark, size)
        stats = _with_job(spark, "multiwriter: write the batch, partitions by task",
                          lambda: _by_partition(df, cfg, ctx, timeline, operation, target_file_size, fill, bins))
    else:
        stats = _spread(df, cfg, ctx, table, timeline, index or KeyIndex(table.storage), operation,
                        target_file_size, fill, on_planned)
    log.debug("executor path: spread over tasks, %.2fs", time.monotonic() - started)
    return stats, InsertedKeys(table.storage, stats, table.config)


def estimated_bytes(df: Any) -> int | None:
    """Spark's estimate of the batch's size in bytes, None when it has none (an RDD, a Python
    data source: Spark then says ``spark.sql.defaultSizeInBytes``, the largest long)."""
    try:
        size = int(df._jdf.queryExecution().optimizedPlan().stats().sizeInBytes())
    except Exception:  # noqa: BLE001 -- no JVM plan (Spark Connect): no estimate
        return None
    return None if size >= 1 << 62 else size


def _storage_level() -> Any:
    from pyspark import StorageLevel

    return StorageLevel.MEMORY_AND_DISK


def _with_job(spark: Any, description: str, fn: Any) -> Any:
    """Run ``fn`` with its Spark jobs named (the Spark UI then says which phase is which), after
    the caller's own description if it set one (a bootstrap names itself so)."""
    sc = spark.sparkContext
    outer = sc.getLocalProperty("spark.job.description")
    sc.setJobDescription(f"{outer}: {description}" if outer else description)
    try:
        return fn()
    finally:
        sc.setJobDescription(outer)


def _key_columns(cfg: Any) -> list[str]:
    """The batch columns a record's key and partition path are made of."""
    return list(dict.fromkeys(list(cfg.record_key) + list(cfg.partition_by)))


#: a batch Spark estimates at more than this many bytes, or cannot size, is spread over tasks
#: at once (no one-task attempt that would read a million rows to give up)
ONE_TASK_MAX_BYTES = 160 << 20
#: rows one tagging step of a task holds at once (the index keeps the keys it read between steps)
TAG_CHUNK_ROWS = 500_000
#: about this many rows (incoming and old) per merge task: a Python worker holds its task's rows
MERGE_TASK_ROWS = 1_000_000
#: a partitioned table's batch too large for one task goes to tasks by table partition
#: (:func:`_by_partition`); an unpartitioned table's is tagged first and its file groups spread
#: (:func:`_spread`), as is every batch when this is False
TASKS_BY_PARTITION = True
#: Spark partitions of a batch sent to tasks by table partition: one per this many bytes of
#: Spark's estimate of the batch (at least one per core)
BIN_BYTES = 64 << 20

TASK = "_mw_task"
BIN = "_mw_bin"
ORDER = "_mw_order"
NEW_TASKS = "_mw_new_tasks"
ROWS = "_mw_rows"


# -- partitions by task ---------------------------------------------------------------------------
def _bins(spark: Any, size: int | None) -> int:
    """Spark partitions for a batch sent to tasks by table partition: at least one per core and
    ``spark.sql.shuffle.partitions``, and one per :data:`BIN_BYTES` of Spark's estimate."""
    shuffle = int(spark.conf.get("spark.sql.shuffle.partitions") or 1)
    return max(spark.sparkContext.defaultParallelism, shuffle, -(-(size or 0) // BIN_BYTES))


def _by_partition(df: Any, cfg: Any, ctx: Any, timeline: Any, operation: str, target_file_size: int, fill: int,
                  bins: int) -> list[WriteStat]:
    """Each table partition's rows to one Spark task (one exchange, hashed on the partition
    columns: the input is read once, by that exchange), where the driver path runs over them
    as in the one task: a task owns every file group of its partitions, so no two tasks touch
    one group, and each tags its own keys. Rows are put back in batch order first."""
    fn = _OneTask(cfg, ctx, list(timeline.instants), operation, target_file_size, 1 << 62, fill)
    job = df.withColumn(ORDER, _order()).repartition(bins, *cfg.partition_by).mapInArrow(fn, _spark_schema(ONE_TASK_SCHEMA))
    stats = _one_task_results(job, ctx)
    assert stats is not None
    return stats


# -- spread over tasks ----------------------------------------------------------------------------
def _spread(df: Any, cfg: Any, ctx: Any, table: Any, timeline: Any, index: KeyIndex, operation: str,
            target_file_size: int, fill: int, on_planned: Any) -> list[WriteStat]:
    """Tag on executors, plan on the driver from counts, merge on executors (module docstring)."""
    spark = df.sparkSession
    parallelism = spark.sparkContext.defaultParallelism
    tag = _Tag(cfg, list(timeline.instants), ctx.table_uri, operation)
    tagged = df.withColumn(ORDER, _order()).coalesce(parallelism)
    tagged = tagged.mapInArrow(tag, _spark_schema(tag.output_schema(arrow_schema(tagged)))).persist(_storage_level())
    try:
        t0 = time.monotonic()
        counts = _with_job(spark, "multiwriter: tag the batch", lambda: _counts(tagged))
        t1 = time.monotonic()
        route = _plan(counts, cfg, table, timeline, index, operation, len(ctx.data_schema), target_file_size,
                      parallelism, fill, ctx.instant_time)
        if on_planned is not None:
            on_planned(planned_metadata(route.tasks, operation))
        if not route.tasks:
            return []
        t2 = time.monotonic()
        stats = _with_job(spark, "multiwriter: route and merge",
                          lambda: _merge(tagged, df.columns, cfg, ctx.data_schema, operation, route, ctx))
        log.debug("executor path, spread: tag %.2fs, plan %.2fs, merge %.2fs (%d file groups, %d Spark partitions)",
                  t1 - t0, t2 - t1, time.monotonic() - t2, len(route.tasks), route.bins)
        return stats
    finally:
        tagged.unpersist()


def _order() -> Any:
    from pyspark.sql import functions as F

    return F.monotonically_increasing_id()


@dataclass(frozen=True)
class _Tag:
    """Tags a task's rows with their partition path and file group (the driver path's index
    against the attempt's base), a few hundred thousand rows at a time; a typed error for bad
    input comes back as one row naming it (the data columns null)."""

    cfg: Any
    base: list[Any]
    table_uri: str
    operation: str

    def output_schema(self, schema: pa.Schema) -> pa.Schema:
        fields = [f.with_nullable(True) for f in schema]
        return pa.schema(fields + [(PARTITION, pa.string()), (FILE_ID, pa.string()), (ERROR, pa.string()),
                                   (MESSAGE, pa.string())])

    def __call__(self, batches: Any) -> Any:  # runs in the task
        storage = Storage(self.table_uri)
        base = Timeline(storage, self.cfg, list(self.base))
        index = KeyIndex(storage, keep_keys=True)
        got, n = [], 0
        try:
            for b in batches:
                got.append(b)
                n += b.num_rows
                if n >= TAG_CHUNK_ROWS:
                    yield from self.tag(pa.Table.from_batches(got), base, index)
                    got, n = [], 0
            if n:
                yield from self.tag(pa.Table.from_batches(got), base, index)
        except (InvalidRecordError, SchemaMismatchError) as e:
            schema = self.output_schema(got[0].schema if got else pa.schema([]))
            row = {f.name: None for f in schema} | {ERROR: type(e).__name__, MESSAGE: str(e)}
            yield pa.RecordBatch.from_pylist([row], schema=schema)

    def tag(self, rows: pa.Table, base: Timeline, index: KeyIndex) -> Iterator[pa.RecordBatch]:
        keys = rows.select(_key_columns(self.cfg))
        keys = keys.append_column(KEY, records.record_keys(keys, self.cfg)).append_column(
            PARTITION, records.partition_paths(keys, self.cfg))
        found = None  # the record index's answer, when the table keeps one: then it is the index
        if self.operation != "insert":  # a key the record index stores in another partition updates it there
            found = global_keys.lookup(index.storage, base, keys)
            keys = global_keys.route(index.storage, base, keys, update_partition_path=False, found=found)
        if self.cfg.bucket_index:
            fids = tag_buckets(index.snapshot(base, keys), keys, self.cfg).column(FILE_ID)
        elif self.operation == "insert":  # as Hudi: no lookup against the table
            fids = pa.nulls(rows.num_rows, pa.string())
        elif found is not None:
            fids = global_keys.tag(index.snapshot(base, keys), keys, found).column(FILE_ID)
        else:
            if not self.cfg.virtual_keys:  # virtual keys: no bloom filter to probe
                keys = bloom.with_hashes(keys, KEY)
            fids = index.tag(index.snapshot(base, keys), keys, integral_key(keys, self.cfg.record_key)).column(FILE_ID)
        none = pa.nulls(rows.num_rows, pa.string())
        out = rows.append_column(PARTITION, keys.column(PARTITION)).append_column(FILE_ID, fids)
        out = out.append_column(ERROR, none).append_column(MESSAGE, none)
        yield from out.cast(self.output_schema(rows.schema)).to_batches()


def _counts(tagged: Any) -> pa.Table:
    """What crosses to the driver to plan from: rows per (partition, file group) (null: new
    keys), and any typed error a tagging task reported. Never a key."""
    from pyspark.sql import functions as F

    return to_arrow(tagged.groupBy(PARTITION, FILE_ID, ERROR, MESSAGE).agg(F.count(F.lit(1)).alias(ROWS)))


@dataclass(frozen=True)
class Routing:
    """The tasks of the batch, each (partition, file group) with its task (existing and bucket
    groups) or its partition's new tasks (new keys: a stable hash of the key columns picks
    one), and each task's Spark partition."""

    tasks: list[FileGroupTask]
    table: pa.Table  # PARTITION, FILE_ID (null: the partition's new keys), TASK, NEW_TASKS
    bin_of: list[int]  # task index -> Spark partition
    bins: int


def _plan(counts: pa.Table, cfg: Any, table: Any, timeline: Any, index: KeyIndex, operation: str, n_cols: int,
          target_file_size: int, parallelism: int, fill: int, instant_time: str) -> Routing:
    """The driver's share, from counts alone: the tasks, new file groups named from the instant
    and their partition (every attempt of a merge task writes the same names), a Copy-on-Write
    upsert's new keys into the smallest group it rewrites in their partition when that group
    is below ``fill`` bytes and they fit (as the driver path's :func:`make_plan`)."""
    errors = counts.filter(pc.is_valid(counts.column(ERROR)))
    if errors.num_rows:
        row = errors.slice(0, 1).to_pylist()[0]
        raise _relayed(row[ERROR], row[MESSAGE])
    found: dict[tuple[str, str], int] = {}
    new: dict[str, int] = {}
    for item in counts.to_pylist():
        if item[FILE_ID] is not None:
            found[(item[PARTITION], item[FILE_ID])] = item[ROWS]
        elif operation != "delete":
            new[item[PARTITION]] = new.get(item[PARTITION], 0) + item[ROWS]
    parts = sorted({p for p, _ in found} | set(new))
    existing = listable_partitions(table.storage, timeline.config, parts)
    snap = Snapshot.build(table.storage, timeline, partitions=existing) if existing else Snapshot({}, timeline, None)
    row_bytes = 16.0 * max(n_cols, 1)
    groups = dict(found)
    hosts: dict[str, str] = {}  # partition -> the rewritten group its new keys join
    new_ids: dict[str, list[str]] = {}
    for p, n in sorted(new.items()):
        host = _host(p, n, found, snap, fill, row_bytes, target_file_size) if fill else None
        if host is not None:
            hosts[p] = host
            groups[(p, host)] += n
            continue
        k = insert_buckets(n, row_bytes, target_file_size)
        new_ids[p] = [f"{uuid.uuid5(uuid.NAMESPACE_URL, f'{instant_time}/{p}/{i}')}-0" for i in range(k)]
        for f in new_ids[p]:
            groups[(p, f)] = n // k + 1
    tasks, cost = [], []
    log_append = timeline.config.merge_on_read  # a log append costs its rows, not the group's
    for i, (p, f) in enumerate(sorted(groups)):
        old = snap.slices.get((p, f))
        tasks.append(FileGroupTask(p, f, i, old.name if old else None, old.instant_time if old else None,
                                   old_logs=tuple(lf.name for lf in old.logs) if old else ()))
        cost.append(groups[(p, f)] + (index.footer(old).num_rows if old and old.has_base and not log_append else 0))
    task_of = {(t.partition, t.file_id): t.task_index for t in tasks}
    rows = [{PARTITION: p, FILE_ID: f, TASK: task_of[(p, f)], NEW_TASKS: None} for p, f in found]
    rows += [{PARTITION: p, FILE_ID: None, TASK: None, NEW_TASKS: [task_of[(p, hosts[p])]] if p in hosts else
              [task_of[(p, f)] for f in new_ids[p]]} for p in new]
    routing = pa.Table.from_pylist(rows, schema=pa.schema([(PARTITION, pa.string()), (FILE_ID, pa.string()),
                                                           (TASK, pa.int32()), (NEW_TASKS, pa.list_(pa.int32()))]))
    bins = max(1, min(len(tasks), max(parallelism, -(-sum(cost) // MERGE_TASK_ROWS))))
    return Routing(tasks, routing, _pack(cost, bins), bins)


def _host(p: str, n: int, found: dict[tuple[str, str], int], snap: Snapshot, fill: int, row_bytes: float,
          target_file_size: int) -> str | None:
    """The smallest group of partition ``p`` the batch rewrites, if below ``fill`` bytes with
    room for ``n`` more rows under the target file size."""
    sizes = sorted((fs.size, f) for (q, f) in found if q == p and (fs := snap.slices.get((q, f))) is not None
                   and fs.has_base and fs.size < fill)
    if not sizes or sizes[0][0] + n * row_bytes > target_file_size:
        return None
    return sizes[0][1]


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
ONE_TASK_MAX_ROWS = 1_000_000


def _routed(tagged: Any, cfg: Any, r: Routing, operation: str) -> Any:
    """The tagged rows with each row's task and Spark partition, computed in the JVM: one
    broadcast join against the (small) routing table on (partition path, file group). A delete
    of an absent key has no task and is dropped; any other row without one (its tag changed
    since the plan: the batch was computed again, and differently) fails its merge task."""
    from pyspark.sql import functions as F

    right = tagged.sparkSession.createDataFrame(r.table).toDF("_mw_jp", "_mw_jf", TASK, NEW_TASKS)
    cond = (tagged[PARTITION] == right["_mw_jp"]) & tagged[FILE_ID].eqNullSafe(right["_mw_jf"])
    out = tagged.join(F.broadcast(right), on=cond, how="left")
    new = F.col(NEW_TASKS)
    pick = F.pmod(F.hash(*[F.col(c) for c in cfg.record_key]), F.size(new)) + 1
    task = F.coalesce(F.col(TASK), F.when(new.isNotNull(), F.element_at(new, pick)))
    bins = F.array(*[F.lit(b) for b in r.bin_of]).cast("array<int>")
    out = out.withColumn(TASK, task.cast("int"))
    if operation == "delete":
        out = out.filter(F.col(TASK).isNotNull())
    return out.withColumn(BIN, F.coalesce(F.element_at(bins, F.col(TASK) + 1), F.lit(0)))


def _merge(tagged: Any, columns: list[str], cfg: Any, data_schema: pa.Schema, operation: str, r: Routing,
           ctx: Any) -> list[WriteStat]:
    """One exchange by precomputed Spark partition, then per file group of a partition: its
    rows prepared (in batch order, so the later of two rows with one key wins, as on the
    driver) and merged, one group after the other (a worker holds its task's rows and one
    group's merge). Bad input the merge finds comes back as its typed error."""
    tasks = r.tasks

    def merge_partition(batches):  # runs on executors, every file group of one Spark partition
        got = list(batches)
        if not got:
            return
        try:
            for group in _groups(pa.Table.from_batches(got), operation):
                task = tasks[group.column(TASK)[0].as_py()]
                prepared = records.prepare(group, cfg, data_schema, operation=operation)
                if _only_deletes_of_new_keys(prepared, task, cfg):
                    continue
                yield _stats_batch(_merge_all([(task, prepared)], ctx))
        except RELAYED as e:
            yield _marker(FAILED, type(e).__name__, str(e))

    job = _routed(tagged, cfg, r, operation).select(*columns, TASK, ORDER, BIN).repartitionById(r.bins, BIN)
    out = _results(job.mapInArrow(merge_partition, _spark_schema(ONE_TASK_SCHEMA)), ctx)
    kind = out.column(KIND).to_pylist()
    if FAILED in kind:
        row = out.slice(kind.index(FAILED), 1).to_pylist()[0]
        raise _relayed(row[ERROR], row[MESSAGE])
    return [WriteStat.from_row(row) for row in out.to_pylist()]


def _only_deletes_of_new_keys(prepared: pa.Table, task: FileGroupTask, cfg: Any) -> bool:
    """Whether a Copy-on-Write task of a new file group holds nothing but deletes: rows flagged
    by a delete marker whose keys the table does not hold (the plan counted them before they
    were read as deletes). Hudi writes nothing for them; neither do we (no empty base file)."""
    if cfg.merge_on_read or not task.is_new or prepared.num_rows == 0:
        return False
    return pc.min(prepared.column(records.OP)).as_py() == records.OP_DELETE


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
ONE_TASK_SCHEMA = pa.schema(WRITE_STAT_FIELDS + [pa.field(KIND, pa.string()), pa.field(ERROR, pa.string()),
                                                  pa.field(MESSAGE, pa.string())])
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
    fill: int = 0  # small_file_limit of a Copy-on-Write upsert

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
        rows = pa.Table.from_batches(got)
        if ORDER in rows.column_names:  # exchanged rows of several input partitions: back in batch order
            rows = rows.take(pa.array(np.argsort(rows.column(ORDER).to_numpy(), kind="stable")))
        try:
            stats = self.write(rows, storage, base, took)
        except RELAYED as e:
            yield _marker(FAILED, type(e).__name__, str(e))
            return
        took["end"] = time.time()
        yield _marker(TIMES, message=json.dumps(took))
        yield _stats_batch(stats)

    def write(self, rows: pa.Table, storage: Storage, base: Timeline,
              took: dict[str, float]) -> list[WriteStat]:
        """The driver path over every row, against the attempt's base timeline; each file's
        token names its group's place in the plan and the task attempt (Hudi's
        ``<partition>-<stage>-<taskAttemptId>``), the new file groups are named from the instant
        and their rows, so every attempt names them alike."""
        from pyspark import TaskContext

        from .executor import run_on_driver

        token = file_tokens(TaskContext.get())
        t0 = time.perf_counter()
        prepared = records.prepare(rows, self.cfg, self.ctx.data_schema, operation=self.operation, hashes=True)
        t1 = time.perf_counter()
        plan = stable_new_ids(plan_batch(prepared, base, KeyIndex(storage), self.operation, self.target_file_size,
                                         small_file_limit=self.fill),
                               self.ctx.instant_time, bucketed=self.cfg.bucket_index)
        t2 = time.perf_counter()
        stats = run_on_driver(storage, self.ctx, plan, self.cfg, token=token)
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
            existing = listable_partitions(self.storage, self.base.config, partitions)
            for fs in Snapshot.build(self.storage, self.base, partitions=existing).slices.values():
                if fs.has_base:
                    index.footer(fs)
        except (MultiWriterError, OSError, pa.ArrowException) as e:
            log.debug("footer prefetch of %s: %s", partitions, e)

    def close(self) -> None:
        """Wait for the reads under way (the timeline they use is the task's from here on)."""
        self.pool.shutdown(wait=True)


def file_tokens(tc: Any) -> Any:
    """Each file's write token in a task that writes several groups: Hudi's
    ``<partition>-<stage>-<taskAttemptId>``, the partition being the group's task index (as if
    each group had a Spark partition of its own), so no two files of an instant share a token."""
    stage, attempt = (tc.stageId(), tc.taskAttemptId()) if tc is not None else (0, 0)
    return lambda task: layout.write_token(task.task_index, stage, attempt)


def _in_one_task(df: Any, cfg: Any, ctx: Any, timeline: Any, operation: str, target_file_size: int,
                 limit: int, fill: int = 0) -> list[WriteStat] | None:
    """One job, one task (it reads at most ``limit + 1`` rows, no exchange): the write stats, or
    None when the batch has more than ``limit`` rows (nothing written)."""
    fn = _OneTask(cfg, ctx, list(timeline.instants), operation, target_file_size, limit, fill)
    return _one_task_results(df.coalesce(1).limit(limit + 1).mapInArrow(fn, _spark_schema(ONE_TASK_SCHEMA)), ctx)


def _one_task_results(job: Any, ctx: Any) -> list[WriteStat] | None:
    """The write stats of ``job``'s tasks (:class:`_OneTask`), None when one found the batch too
    large; the typed error one of them reported."""
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
    return [WriteStat.from_row(row) for row, k in zip(out.to_pylist(), kind, strict=True)
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
    return pa.RecordBatch.from_pylist([{**st.to_row(), KIND: STAT} for st in stats],
                                      schema=ONE_TASK_SCHEMA)


# -- results ------------------------------------------------------------------------------------
def _changed_batch(n: int) -> InvalidRecordError:
    return InvalidRecordError(
        f"{n} row(s) of the batch were not there when it was tagged: the DataFrame gives other rows each "
        "time it is computed; cache or checkpoint it before writing (nothing was committed)"
    )


def _merge_all(groups: list[tuple[FileGroupTask, pa.Table]], ctx: Any) -> list[WriteStat]:
    """Merge file groups (prepared rows, one row per key), one after the other."""
    from pyspark import TaskContext

    token = file_tokens(TaskContext.get())
    return [st for t, g in groups for st in _merge_one(g, t, ctx, token(t))]


def _groups(t: pa.Table, operation: str):
    """The rows of each task in ``t``, in batch order. Rows of no task are deletes of absent
    keys, or rows the plan did not count: the batch changed (Spark computed it again)."""
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


def _merge_one(prepared: pa.Table, task: FileGroupTask, ctx: Any, token: str) -> list[WriteStat]:
    from .log_append import write_group

    return write_group(Storage(ctx.table_uri), ctx, task, prepared, token)


class InsertedKeys(Mapping[str, pa.Array]):
    """Per partition, the keys this attempt inserted as new (the same-new-key conflict check),
    read from the key column of the new file groups' files when the check first asks for a
    partition: it asks only when a commit that completed meanwhile created file groups there,
    so an attempt without such a rival reads nothing."""

    def __init__(self, storage: Storage, stats: list[WriteStat], config: TableConfig | None = None) -> None:
        self.storage = storage
        self.config = config  # the table's: with virtual keys, keys come from the key fields
        self.paths: dict[str, list[str]] = {}
        self.old: dict[str, str] = {}  # a rewritten group's new file -> its old file (it took new keys in)
        for st in stats:
            if st.creates_file_group and st.path:
                self.paths.setdefault(st.partition_path, []).append(st.path)
            elif st.num_inserts and st.path and st.prev_base_file and st.path.endswith(".parquet"):
                self.paths.setdefault(st.partition_path, []).append(st.path)
                self.old[st.path] = layout.data_file_path(st.partition_path, st.prev_base_file)
        self.read: dict[str, pa.Array] = {}

    def __getitem__(self, partition: str) -> pa.Array:
        if partition not in self.read:
            self.read[partition] = pa.concat_arrays([self._inserted(p) for p in self.paths[partition]])
        return self.read[partition]

    def _inserted(self, path: str) -> pa.Array:
        keys = self._keys(path)
        old = self.old.get(path)
        return keys if old is None else keys.filter(pc.invert(pc.is_in(keys, value_set=self._keys(old))))

    def __iter__(self) -> Iterator[str]:
        return iter(self.paths)

    def __len__(self) -> int:
        return len(self.paths)

    def _keys(self, path: str) -> pa.Array:

        with self.storage.fs.open_input_file(self.storage.abs(path)) as f:
            if self.config is not None and self.config.virtual_keys:
                return read_stored_keys(bounds.open_parquet(f, path), self.config)
            return bounds.read_parquet(f, path, columns=["_hoodie_record_key"]).column(0).combine_chunks()
