"""Planning and reading a data source scan with pyarrow only, so executors need no Hadoop jars.

The driver side (:func:`plan_scan`) decides which file slices a query reads (the same rules as
:meth:`Table.read` and :meth:`Table.read_incremental`, through :class:`TimelineView`), prunes
partitions by the pushed predicates, skips the slices the metadata table's column stats rule out
(:meth:`Table.prune`) and splits large files by row groups. The executor side
(:func:`read_task`) reads one task through :mod:`pyarrow.fs`.

Predicates are only ever used to skip data that cannot match: the data source hands every filter
back to Spark, which evaluates it again, so a predicate this module cannot decide costs speed,
never rows.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from ..storage import Storage
from ..format import bounds
from ..table import bootstrap_slice
from ..table.delete_markers import DeleteMarkers
from ..table.files import FileSlice, LogFile
from ..format.layout import DEFAULT_PARTITION, parse_data_file
from ..table.merge_config import MergeConfig
from ..table.merged_slice import read_slice
from ..table import skipping
from ..format.schema import cast_column, has_double, stored_float_types
from ..table.table import Table
from .options import ReadOptions

COMMIT_TIME = "_hoodie_commit_time"
OPS = ("=", "<", "<=", ">", ">=", "in", "notnull")


@dataclass(frozen=True)
class Predicate:
    """One conjunct of a query's filter on a top-level column: ``column op value``."""

    op: str
    column: str
    value: Any = None


@dataclass(frozen=True)
class ScanTask:
    """A base file, or some of its row groups (Spark tasks read one or several of these)."""

    path: str  # relative to the table root
    partition: str
    row_groups: tuple[int, ...] | None = None
    size: int = 0  # bytes, for packing small tasks together
    logs: tuple[LogFile, ...] = ()  # Merge-on-Read: the slice's log files, merged over the whole base file


@dataclass(frozen=True)
class ScanPlan:
    """Everything executors need; plain values, so it pickles to them."""

    uri: str
    schema: pa.Schema  # the table schema with meta columns
    tasks: tuple[ScanTask, ...]
    commit_times: frozenset[str] | None = None  # incremental: keep rows of these commits
    task_bytes: int = 128 * 1024 * 1024  # scan tasks are packed into Spark tasks of about this size
    merge: MergeConfig | None = None  # the table's merge (Merge-on-Read slices with logs)
    markers: DeleteMarkers = DeleteMarkers()  # the table's delete markers (Merge-on-Read)

    def groups(self) -> list[tuple[ScanTask, ...]]:
        """The scan tasks packed into Spark tasks (see :func:`pack`)."""
        return pack(self.tasks, self.task_bytes)


def plan_scan(opts: ReadOptions, predicates: list[Predicate] = ()) -> ScanPlan:
    """The tasks of one query; raises :class:`~multiwriter.errors.InstantNotRetainedError` when
    the cleaner removed what the query needs (never a partial answer)."""
    table = Table.open(opts.path)
    tl = table.timeline()
    commit_times: frozenset[str] | None = None
    if opts.incremental:
        plan = table.incremental_plan(tl, opts.begin, opts.end)
        slices: list[FileSlice] = list(plan.slices)
        commit_times = plan.commit_times
        schema = table.read_schema(tl)
    else:
        snap = table.snapshot(opts.as_of, timeline=tl)
        slices = snap.files()
        schema = table.read_schema(tl, snap)
        if opts.read_optimized:
            slices = [dataclasses.replace(s, logs=()) for s in slices if s.has_base]  # a log-only group: nothing
    skip = skipping.spark_filter([(p.column, p.op, p.value) for p in predicates])
    latest = not opts.incremental and opts.as_of is None
    slices = list(table.prune(slices, skip, schema, timeline=tl, latest=latest).kept)
    keep = partition_filter(table, schema, predicates)
    tasks = [t for s in slices if keep(s.partition) for t in _split(table.storage, s, opts.split_bytes)]
    merge = table.merge_config if any(t.logs for t in tasks) else None  # refused here, by name
    return ScanPlan(table.storage.uri, schema, tuple(tasks), commit_times, task_bytes(tasks, opts.split_bytes, opts.parallelism),
                    merge, DeleteMarkers.of(table.config))


def read_task(plan: ScanPlan, task: ScanTask, columns: list[str], predicates: list[Predicate] = ()) -> Iterator[pa.RecordBatch]:
    """Read one task's rows (``columns`` only), as record batches of the table schema."""
    storage = Storage(plan.uri)
    incremental = plan.commit_times is not None
    cols = list(columns) + ([COMMIT_TIME] if incremental and COMMIT_TIME not in columns else [])
    if task.logs or bootstrap_slice.is_skeleton_file(task.path):  # a skeleton base: stitched with its source
        t = _merged(storage, plan, task, cols, predicates)
    else:
        ds = pads.dataset([storage.abs(task.path)], schema=plan.schema, format="parquet", filesystem=storage.fs)
        frag = next(iter(ds.get_fragments()))
        bounds.check_parquet(frag.metadata, task.path, columns=cols)  # the footer the scan reuses
        if task.row_groups is not None:
            frag = frag.subset(row_group_ids=list(task.row_groups))
        stored = stored_float_types(frag.physical_schema, plan.schema) if has_double(plan.schema) else {}
        if stored:  # floats now double: widened as Hudi's readers widen them, then filtered
            read_as = pa.schema([pa.field(f.name, stored.get(f.name, f.type)) for f in plan.schema])
            t = frag.to_table(schema=read_as)
            t = pa.Table.from_arrays([cast_column(t.column(f.name), f.type) for f in plan.schema], schema=plan.schema)
            expr = data_filter(plan.schema, predicates)
            t = (t if expr is None else t.filter(expr)).select(cols)
        else:
            t = frag.to_table(schema=plan.schema, columns=cols, filter=data_filter(plan.schema, predicates))
    if incremental:
        t = t.filter(_in_range(t[COMMIT_TIME], plan)).select(list(columns))
    yield from t.to_batches()


def _merged(storage: Storage, plan: ScanPlan, task: ScanTask, cols: list[str], predicates: list[Predicate]) -> pa.Table:
    """A Merge-on-Read slice's rows, merged by the table's merge rule, then filtered (a
    predicate may not skip a version before the merge: an older one would show through)."""
    name = task.path.rsplit("/", 1)[-1]
    if name:
        parsed = parse_data_file(name)
        assert parsed is not None
        fs = FileSlice(task.partition, parsed.file_id, parsed.instant_time, name, task.size, task.logs)
    else:  # a log-only slice
        first = min(task.logs, key=lambda lf: lf.instant_time)
        fs = FileSlice(task.partition, first.file_id, first.instant_time, "", 0, task.logs)
    t = read_slice(storage, fs, plan.schema, plan.merge, markers=plan.markers)
    expr = data_filter(plan.schema, predicates)
    return (t.filter(expr) if expr is not None else t).select(cols)


def _in_range(commit_time: Any, plan: ScanPlan) -> Any:
    """The rows an incremental read keeps (as :meth:`Table.read_incremental`)."""
    keep = pc.is_in(commit_time, value_set=pa.array(sorted(plan.commit_times or ()), pa.string()))
    return pc.fill_null(keep, False)


# -- partition pruning -------------------------------------------------------------------
def partition_filter(table: Table, schema: pa.Schema, predicates: list[Predicate]) -> Any:
    """A test on partition paths: False only for partitions no row of which can match."""
    cfg = table.config
    mine = [p for p in predicates if p.column in cfg.partition_by and schema.get_field_index(p.column) >= 0]
    if not mine:
        return lambda partition: True

    def keep(partition: str) -> bool:
        values = partition_values(partition, cfg.partition_by, cfg.hive_style_partitioning)
        if values is None:
            return True
        return all(_may_match(p, values[p.column], schema.field(p.column).type) for p in mine)

    return keep


def partition_values(partition: str, fields: tuple[str, ...], hive_style: bool) -> dict[str, str] | None:
    """Each partition field's value as written in the path, or None when the path does not
    have the table's shape (then nothing is pruned)."""
    segs = partition.split("/") if partition else []
    if len(segs) != len(fields):
        return None
    out: dict[str, str] = {}
    for f, seg in zip(fields, segs, strict=True):
        if hive_style:
            name, eq, value = seg.partition("=")
            if not eq or name != f:
                return None
            seg = value
        out[f] = seg
    return out


def _may_match(p: Predicate, text: str, typ: pa.DataType) -> bool:
    """Can a row whose partition column renders as ``text`` satisfy ``p``? True when unsure."""
    if text == DEFAULT_PARTITION:
        return True  # null or empty values: leave them to Spark
    if p.op == "notnull":
        return True
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        value, ok = text, lambda v: isinstance(v, str)
    elif pa.types.is_integer(typ):
        try:
            value = int(text)
        except ValueError:
            return True
        ok = lambda v: isinstance(v, int) and not isinstance(v, bool)  # noqa: E731
    else:
        return True
    if p.op == "in":
        vals = list(p.value)
        return not all(ok(v) for v in vals) or value in vals
    if not ok(p.value):
        return True
    return _compare(p.op, value, p.value)


def _compare(op: str, a: Any, b: Any) -> bool:
    return {"=": a == b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]


# -- row filtering on executors ----------------------------------------------------------
def data_filter(schema: pa.Schema, predicates: list[Predicate]) -> Any:
    """A pyarrow expression for the predicates on string and integer columns (where pyarrow and
    Spark compare alike; floats are left out: Spark orders NaN above every number), or None."""
    exprs = [e for e in (_expr(schema, p) for p in predicates) if e is not None]
    if not exprs:
        return None
    out = exprs[0]
    for e in exprs[1:]:
        out = out & e
    return out


def _expr(schema: pa.Schema, p: Predicate) -> Any:
    if schema.get_field_index(p.column) < 0:
        return None
    typ = schema.field(p.column).type
    col = pc.field(p.column)
    if p.op == "notnull":
        return col.is_valid()
    if pa.types.is_string(typ):
        ok = lambda v: isinstance(v, str)  # noqa: E731
    elif pa.types.is_integer(typ):
        ok = lambda v: isinstance(v, int) and not isinstance(v, bool)  # noqa: E731
    else:
        return None
    if p.op == "in":
        vals = list(p.value)
        if not vals or not all(ok(v) for v in vals):
            return None
        return col.isin(pa.array(vals, typ))
    if not ok(p.value):
        return None
    v = pa.scalar(p.value, typ)
    return {"=": col == v, "<": col < v, "<=": col <= v, ">": col > v, ">=": col >= v}[p.op]


# -- packing -----------------------------------------------------------------------------
#: what opening one more file is worth in bytes when packing (Spark's ``openCostInBytes``)
OPEN_COST = 4 * 1024 * 1024


def task_bytes(tasks: list[ScanTask], split_bytes: int, parallelism: int) -> int:
    """Spark's rule for ``spark.read.parquet``: about total / parallelism (an open cost counted
    per file), at least one open cost, at most ``split_bytes``."""
    total = sum(t.size + OPEN_COST for t in tasks)
    return min(split_bytes, max(OPEN_COST, total // max(parallelism, 1)))


def pack(tasks: tuple[ScanTask, ...], limit: int) -> list[tuple[ScanTask, ...]]:
    """Largest first, each scan task goes to the current Spark task until that would pass
    ``limit`` (counting an open cost per file): one Spark task per file costs more in task
    overhead than reading a small file does."""
    groups: list[tuple[ScanTask, ...]] = []
    current: list[ScanTask] = []
    size = 0
    for t in sorted(tasks, key=lambda t: t.size, reverse=True):
        if current and size + t.size > limit:
            groups.append(tuple(current))
            current, size = [], 0
        current.append(t)
        size += t.size + OPEN_COST
    if current:
        groups.append(tuple(current))
    return groups


# -- splits ------------------------------------------------------------------------------
def _split(storage: Storage, s: FileSlice, split_bytes: int) -> list[ScanTask]:
    """One task per file, or per run of row groups of about ``split_bytes`` in a large file
    (a slice with log files is one task: its merge needs every row of the base)."""
    if s.logs or bootstrap_slice.is_skeleton(s):  # a skeleton's rows are stitched with its source's: whole
        return [ScanTask(s.path, s.partition, size=s.size + sum(lf.size for lf in s.logs), logs=s.logs)]
    if s.size <= split_bytes:
        return [ScanTask(s.path, s.partition, size=s.size)]
    with storage.fs.open_input_file(storage.abs(s.path)) as f:
        meta = pq.ParquetFile(f).metadata
    tasks: list[ScanTask] = []
    run: list[int] = []
    size = 0
    for i in range(meta.num_row_groups):
        run.append(i)
        size += meta.row_group(i).total_byte_size
        if size >= split_bytes:
            tasks.append(ScanTask(s.path, s.partition, tuple(run), size))
            run, size = [], 0
    if run or not tasks:
        tasks.append(ScanTask(s.path, s.partition, tuple(run), size))
    return tasks
