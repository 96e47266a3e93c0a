"""Clustering: stitch the small file groups that streaming inserts leave into target-size ones.

Every micro-batch inserts into new file groups (so concurrent inserts never conflict); left
alone, a long-running stream makes thousands of tiny files and every read and index lookup pays
for them. Clustering rewrites them in Hudi's version-8 format, so every Hudi reader honours it:

1. Plan (candidates outside the lock, re-checked under it): per partition, the live file groups
   whose latest base file is below ``small_file_bytes``, binned into outputs of about
   ``target_file_bytes``. Groups that a pending instant is rewriting (its inflight plan names
   them) or that a commit touched since the candidates were read are left out. Under the lock:
   ``<T>.clustering.requested`` and ``<T>.clustering.inflight``, each a
   ``HoodieRequestedReplaceMetadata`` holding the ``HoodieClusteringPlan``.
2. Execute (outside the lock, heartbeat beating for T): read each input group's slice, sort by
   record key, write one new file group per plan group (markers first, the writers' pre-write
   check). Rows keep their meta columns, ``_hoodie_file_name`` aside: they are moved, not new.
3. Commit under the lock as ``<T>_<C>.replacecommit`` (``HoodieReplaceCommitMetadata``: the new
   groups' write stats, the input groups in ``partitionToReplaceFileIds``), unless a commit
   completed since the plan's base touched an input group.

Ingestion first: a pending clustering is never a conflict for a writer (see :mod:`..conflict`);
a writer that updates an input group before the clustering commits makes the clustering abort
and delete its files (the next run plans again). A writer whose base predates a completed
clustering that retired a group it updated gets a conflict and retries onto the new groups. A
clustering whose cleaner dies is a failed write like any other: its heartbeat lapses and the
rollback step deletes its files.
"""

from __future__ import annotations

import dataclasses
import logging
import posixpath
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from .. import faults, markers
from ..errors import ConfigError, InvalidRecordError, MultiWriterError, TableFormatError
from ..table.merge_config import MergeConfig
from ..format import instant as inst
from ..format import layout
from ..table import bootstrap_slice, bootstrap_state, decisions, metadata_files
from ..format import bounds
from ..table import timeline as tlmod
from ..table.files import FileGroup, FileSlice
from ..format.instant import Instant
from ..table.metadata import ReplaceCommitMetadata, WriteStat, decode_commit_metadata, decode_records, encode, parsing
from ..format.schema import with_meta
from ..table.snapshot import Snapshot
from ..table.timeline import Timeline
from ..transaction import rollback_targets
from . import CleanerContext, complete_rewrite, release_completed

log = logging.getLogger(__name__)

OPERATION = "CLUSTER"
STRATEGY_CLASS = "org.apache.hudi.client.clustering.run.strategy.SparkSortAndSizeExecutionStrategy"
BASE_KEY = "multiwriter.clustering.base_completion"
CLEANER_KEY = "multiwriter.cleaner_id"
SCHEMA_KEY = "schema"
_MB = 1024 * 1024


class ClusteringAbortedError(MultiWriterError):
    """A clustering did not commit (a writer touched an input group first, or its instant was
    rolled back); its files are deleted and the next run plans again."""


@dataclass(frozen=True)
class ClusteringConfig:
    """When and how much to cluster (the defaults suit streaming micro-batches).

    ``small_file_bytes``: a file group whose latest base file is smaller is a candidate.
    ``target_file_bytes``: the input bytes stitched into one output file group.
    ``max_bytes_per_run``: input bytes one run rewrites at most (bounds a run's duration).
    ``min_file_groups``: a partition is clustered once it has at least this many small groups.
    ``executor_min_bytes``: plan groups with at least this many input bytes are rewritten on
    Spark executors, one task each, when the cleaner has a SparkSession (``Cleaner(spark=...)``
    or ``Cleaner.start(spark)``); smaller ones, or all of them without a session or with None,
    on the driver. Large partitions then do not funnel through one process.
    """

    small_file_bytes: int = 32 * _MB
    target_file_bytes: int = 128 * _MB
    max_bytes_per_run: int = 2048 * _MB
    min_file_groups: int = 4
    executor_min_bytes: int | None = 256 * _MB

    def __post_init__(self) -> None:
        names = ["small_file_bytes", "target_file_bytes", "max_bytes_per_run", "min_file_groups"]
        if self.executor_min_bytes is not None:
            names.append("executor_min_bytes")
        for name in names:
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"ClusteringConfig {name}={v!r}: must be an int >= 1")
        if self.min_file_groups < 2:
            raise ConfigError(
                f"ClusteringConfig min_file_groups={self.min_file_groups}: must be >= 2 (one group alone is not stitched)"
            )
        if self.small_file_bytes > self.target_file_bytes:
            raise ConfigError(
                f"ClusteringConfig small_file_bytes={self.small_file_bytes} exceeds target_file_bytes="
                f"{self.target_file_bytes}: files above the target are not small"
            )
        if self.max_bytes_per_run < self.target_file_bytes:
            raise ConfigError(
                f"ClusteringConfig max_bytes_per_run={self.max_bytes_per_run} is below target_file_bytes="
                f"{self.target_file_bytes}: a run could not write one output group"
            )

    def params(self) -> dict[str, str]:
        """The settings as strategy parameters (Hudi's key names where Hudi has one)."""
        return {
            "hoodie.clustering.plan.strategy.small.file.limit": str(self.small_file_bytes),
            "hoodie.clustering.plan.strategy.target.file.max.bytes": str(self.target_file_bytes),
            "hoodie.clustering.plan.strategy.max.bytes.per.group": str(self.target_file_bytes),
            "hoodie.clustering.plan.strategy.sort.columns": "_hoodie_record_key",
            "multiwriter.clustering.max_bytes_per_run": str(self.max_bytes_per_run),
            "multiwriter.clustering.min_file_groups": str(self.min_file_groups),
        }


# -- the plan ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class InputSlice:
    """The latest base file of one input file group."""

    partition: str
    file_id: str
    path: str  # relative to the table root
    size: int = 0


@dataclass(frozen=True)
class PlanGroup:
    """Input groups of one partition stitched into one new file group."""

    partition: str
    slices: tuple[InputSlice, ...]

    @property
    def size(self) -> int:
        return sum(s.size for s in self.slices)


@dataclass(frozen=True)
class ClusteringPlan:
    clustering_time: str
    base_completion: str | None  # commits completed after this are checked at commit time
    groups: tuple[PlanGroup, ...]
    params: dict[str, str] = field(default_factory=dict)

    def input_groups(self) -> set[FileGroup]:
        return {(s.partition, s.file_id) for g in self.groups for s in g.slices}

    @property
    def input_bytes(self) -> int:
        return sum(g.size for g in self.groups)

    def to_bytes(self, uri_of: Any, extra: dict[str, str] | None = None,
                 bootstrap_file: Callable[[str], str] | None = None) -> bytes:
        """A ``HoodieRequestedReplaceMetadata`` (operation CLUSTER) with the plan; slices name
        their base file by full path, as Hudi does, and a skeleton base file's source file
        (``bootstrap_file`` of its path: ``bootstrapFilePath``, "" for other files)."""
        meta = {BASE_KEY: self.base_completion or "", **(extra or {})}
        plan = {
            "inputGroups": [
                {
                    "slices": [
                        {
                            "dataFilePath": uri_of(s.path),
                            "deltaFilePaths": [],
                            "fileId": s.file_id,
                            "partitionPath": s.partition,
                            "bootstrapFilePath": bootstrap_file(s.path) if bootstrap_file is not None else "",
                            "version": 1,
                        }
                        for s in g.slices
                    ],
                    "metrics": {"TOTAL_IO_MB": g.size / _MB, "TOTAL_FILE_SIZE": float(g.size), "NUM_SLICES": float(len(g.slices))},
                    "numOutputFileGroups": 1,
                    "version": 1,
                }
                for g in self.groups
            ],
            "strategy": {"strategyClassName": STRATEGY_CLASS, "strategyParams": dict(self.params), "version": 1},
            "extraMetadata": meta,
            "version": 1,
            "preserveHoodieMetadata": True,
            "missingSchedulePartitions": None,
        }
        return encode("requested_replace", {"operationType": OPERATION, "clusteringPlan": plan, "extraMetadata": meta, "version": 1})

    @classmethod
    def from_bytes(cls, clustering_time: str, data: bytes, *, source: str) -> ClusteringPlan:
        """Parse a plan; only data files inside the table named by their own group are kept."""
        recs = decode_records(data, source=source) if data else []
        with parsing(source, "clustering plan"):
            plan = recs[0].get("clusteringPlan") if len(recs) == 1 and isinstance(recs[0], dict) else None
            if not plan:
                raise TableFormatError(
                    f"{source}: not a clustering plan (HoodieRequestedReplaceMetadata with a clusteringPlan)")
            groups = []
            for g in plan.get("inputGroups") or []:
                slices = [s for s in (_slice(x, source) for x in g.get("slices") or []) if s is not None]
                if slices:
                    groups.append(PlanGroup(slices[0].partition, tuple(slices)))
            meta = plan.get("extraMetadata") or recs[0].get("extraMetadata") or {}
            params = dict((plan.get("strategy") or {}).get("strategyParams") or {})
            base = meta.get(BASE_KEY) or None
            if base is not None and not isinstance(base, str):
                raise TypeError(f"{BASE_KEY}={base!r:.80} is not a string")
            return cls(clustering_time, base, tuple(groups), params)


def _slice(rec: dict[str, Any], source: str) -> InputSlice | None:
    name = posixpath.basename(rec.get("dataFilePath") or "")
    parsed = layout.parse_data_file(name)
    try:
        part = layout.check_relative(rec.get("partitionPath") or "")
    except InvalidRecordError:
        part = None
    if parsed is None or part is None or parsed.file_id != rec.get("fileId"):
        log.warning("%s: ignoring slice %r: not a base file of its file group inside the table", source, rec)
        return None
    return InputSlice(part, parsed.file_id, layout.data_file_path(part, name))


def read_plan(ctx: CleanerContext, clustering_time: str) -> ClusteringPlan:
    rel = f"{ctx.config.timeline_dir}/{Instant(clustering_time, inst.CLUSTERING, inst.REQUESTED).file_name()}"
    try:
        data = ctx.storage.read_bytes(rel)
    except FileNotFoundError as e:
        raise TableFormatError(f"{rel}: the plan of pending clustering {clustering_time} is missing") from e
    return ClusteringPlan.from_bytes(clustering_time, data, source=rel)


# -- what is busy --------------------------------------------------------------------------------


def pending_file_groups(tl: Timeline) -> set[FileGroup]:
    """File groups pending instants are rewriting: writers' inflight plans, clusterings' inputs.
    An unreadable plan is skipped (its owner's commit check still protects it)."""
    out: set[FileGroup] = set()
    for i in tl.pending():
        if i.action == inst.CLUSTERING:
            req = Instant(i.requested_time, inst.CLUSTERING, inst.REQUESTED)
            try:
                out |= ClusteringPlan.from_bytes(i.requested_time, tl.read_bytes(req), source=tl.path_of(req)).input_groups()
            except (FileNotFoundError, TableFormatError):
                continue
        elif i.action in inst.WRITE_ACTIONS and i.state == inst.INFLIGHT:
            try:
                data = tl.read_bytes(i)
                if data:
                    out |= decode_commit_metadata(i.action, data, source=tl.path_of(i)).file_groups()
            except (FileNotFoundError, TableFormatError):
                continue
    return out


def touched_since(tl: Timeline, base_completion: str | None, own: str | None = None) -> dict[FileGroup, Instant]:
    """File groups written or retired by writes completed after ``base_completion``."""
    out: dict[FileGroup, Instant] = {}
    for i in tl.completed_after(base_completion):
        if i.action in inst.WRITE_ACTIONS and i.requested_time != own:
            for g in tl.commit_metadata(i).file_groups():
                out.setdefault(g, i)
    return out


# -- planning -------------------------------------------------------------------------------------


def candidates(
    snapshot: Snapshot, cfg: ClusteringConfig, busy: set[FileGroup], proven: Callable[[str], bool] = lambda t: True
) -> list[PlanGroup]:
    """Per partition with at least ``min_file_groups`` small idle groups: bins of about
    ``target_file_bytes``, smallest files first; at most ``max_bytes_per_run`` in all.

    Only slices whose commit is ``proven`` are inputs: a file that is visible merely because its
    instant is older than the active timeline may be a zombie writer's (docs/cleaner.md), and
    clustering it would turn its rows into committed data that the failed-write sweep can no
    longer remove. Merge-on-Read slices with log files are left to compaction (stitching their
    base files alone would bring back the versions the logs replaced). None on a bucket-indexed
    table: its layout is its index (a key's bucket names its file group), so stitching groups
    would lose keys."""
    if snapshot.timeline.config.bucket_index:
        return []
    by_part: dict[str, list[FileSlice]] = {}
    for f in snapshot.files():
        if f.size < cfg.small_file_bytes and not f.logs and f.group not in busy and proven(f.instant_time):
            by_part.setdefault(f.partition, []).append(f)
    out: list[PlanGroup] = []
    budget = cfg.max_bytes_per_run
    for part in sorted(by_part):
        small = sorted(by_part[part], key=lambda f: (f.size, f.file_id))
        if len(small) < cfg.min_file_groups:
            continue
        for group in _bins(small, cfg.target_file_bytes):
            if group.size > budget:
                return out
            budget -= group.size
            out.append(group)
    return out


def _bins(small: list[FileSlice], target: int) -> list[PlanGroup]:
    bins: list[list[FileSlice]] = [[]]
    size = 0
    for f in small:
        if bins[-1] and size + f.size > target:
            bins.append([])
            size = 0
        bins[-1].append(f)
        size += f.size
    return [
        PlanGroup(b[0].partition, tuple(InputSlice(f.partition, f.file_id, f.path, f.size) for f in b))
        for b in bins
        if len(b) >= 2
    ]


def schedule(ctx: CleanerContext, cfg: ClusteringConfig) -> ClusteringPlan | None:
    """Choose input groups from a snapshot read outside the lock; under the lock drop the groups
    that commits completed since (or pending instants) touch, then record the plan. None when
    there is nothing worth clustering (always on a bucket-indexed table: see :func:`candidates`)."""
    if ctx.config.bucket_index:
        return None
    tl0 = ctx.timeline()
    base = tl0.last_completed_write()
    base_ct = (base.completion_time or base.requested_time) if base else None
    snap = Snapshot.build(ctx.storage, tl0)
    snap.slices = {g: bootstrap_slice.weighed(ctx.storage, f) for g, f in snap.slices.items()}  # a skeleton's source too
    groups = candidates(snap, cfg, pending_file_groups(tl0), _proven(ctx, tl0))
    if not groups:
        return None
    with ctx.locked() as tl:
        if bootstrap_state.unfinished(tl, ctx.config):  # the bootstrap's next commit must be the next write
            return None
        busy = pending_file_groups(tl) | set(touched_since(tl, base_ct))
        kept = _without(groups, busy)
        if not kept:
            return None
        t = ctx.issue_time(tl)
        plan = ClusteringPlan(t, base_ct, tuple(kept), cfg.params())
        data = plan.to_bytes(ctx.storage.uri_of, {CLEANER_KEY: ctx.cleaner_id},
                             lambda rel: bootstrap_slice.source_path(ctx.storage, rel))
        ctx.start_heartbeat(t)
        try:
            tlmod.create_requested(ctx.storage, ctx.config, t, inst.CLUSTERING, data)
            tlmod.create_inflight(ctx.storage, ctx.config, t, inst.CLUSTERING, data)
        except BaseException:
            ctx.stop_heartbeat(t)
            raise
    log.info(
        "planned clustering %s: %d input file groups (%d bytes) into %d", t, len(plan.input_groups()), plan.input_bytes, len(kept)
    )
    return plan


def _proven(ctx: CleanerContext, tl: Timeline) -> Callable[[str], bool]:
    """Is a file's instant provably a completed commit: on the active timeline, or in an
    archive we can read whole? (Where the archive cannot be read whole, as for the sweep, files
    older than the active timeline are taken for archived commits.)"""
    from .orphans import archived_times

    done = set(tl.completed_write_times())
    archived, complete = archived_times(ctx)
    earliest = tl.earliest_time() or ""
    return lambda t: t in done or t in archived or (not complete and t < earliest)


def _without(groups: list[PlanGroup], busy: set[FileGroup]) -> list[PlanGroup]:
    out = []
    for g in groups:
        slices = tuple(s for s in g.slices if (s.partition, s.file_id) not in busy)
        if len(slices) >= 2:
            out.append(PlanGroup(g.partition, slices))
    return out


# -- executing ------------------------------------------------------------------------------------


def execute(ctx: CleanerContext, plan: ClusteringPlan, cfg: ClusteringConfig | None = None) -> list[WriteStat]:
    """Write one new file group per plan group (outside the lock); rows sorted by record key.
    Large groups go to Spark executors when the cleaner has a session (``executor_min_bytes``)."""
    from ..write import guard
    from ..write.merge import context

    t = plan.clustering_time
    MergeConfig.from_table_config(ctx.config)  # a merge setting we do not honour: refused by name, as on every path
    tl = ctx.table.timeline()
    schema = ctx.table.schema(tl)
    bound = ctx.heartbeat.bound_s if ctx.heartbeat is not None else None
    mctx = dataclasses.replace(
        context(ctx.storage.uri, t, schema, ctx.config.ordering_field, len(ctx.config.partition_by) or 1,
                config=ctx.config),
        heartbeat_bound_s=bound,
        pending_files=guard.pending_files(ctx.config, t, inst.CLUSTERING),
    )
    jobs = [GroupJob(n, g, layout.new_file_id()) for n, g in enumerate(plan.groups)]
    remote = [j for j in jobs if _on_executors(ctx, cfg, j.group)]
    stats: dict[int, WriteStat] = {}
    if remote:
        from .clustering_spark import run_on_executors

        stats.update(run_on_executors(ctx.spark, mctx, remote, execute_group, service="clustering",
                                      aborted=ClusteringAbortedError))
    for j in jobs:
        if j.index not in stats:
            stats[j.index] = execute_group(ctx.storage, mctx, j)
    return [stats[j.index] for j in jobs]


@dataclass(frozen=True)
class GroupJob:
    """One plan group and the new file group it becomes (plain, so it ships to executors)."""

    index: int
    group: PlanGroup
    file_id: str


def _on_executors(ctx: CleanerContext, cfg: ClusteringConfig | None, g: PlanGroup) -> bool:
    limit = cfg.executor_min_bytes if cfg is not None else None
    return ctx.spark is not None and limit is not None and g.size >= limit


def execute_group(storage: Any, mctx: Any, job: GroupJob, write_token: str | None = None) -> WriteStat:
    """Read the group's input slices and write them as one new file group (driver or executor;
    an executor's token carries its stage and attempt, so a retried task writes another file)."""
    from ..write.merge import write_moved_rows

    full = with_meta(mctx.data_schema)
    rows = pa.concat_tables([read_slice(storage, s, full, mctx.instant_time) for s in job.group.slices])
    token = write_token or layout.write_token(job.index)
    st = write_moved_rows(storage, mctx, job.group.partition, job.file_id, token, rows)
    faults.point("mid-clustering")
    return st


def read_slice(storage: Any, s: InputSlice, full: pa.Schema, t: str) -> pa.Table:
    from ..write.merge import align

    try:
        if bootstrap_slice.is_skeleton_file(s.path):  # a bootstrap's skeleton: with its source file's rows
            return align(bootstrap_slice.read_file(storage, s.path)[0], full)
        with storage.fs.open_input_file(storage.abs(s.path)) as f:
            return align(bounds.read_parquet(f, s.path), full)
    except FileNotFoundError as e:
        raise ClusteringAbortedError(
            f"clustering {t}: input {s.path} is gone (a newer slice superseded it and was cleaned); "
            "the clustering is aborted and planned again"
        ) from e


# -- committing -------------------------------------------------------------------------------------


def commit(ctx: CleanerContext, plan: ClusteringPlan, stats: list[WriteStat]) -> Instant:
    """Under the lock: check the instant is still ours and no write completed since the plan's
    base touched an input group, then write ``<T>_<C>.replacecommit``. Raises
    :class:`ClusteringAbortedError` otherwise (the caller deletes the files)."""
    t = plan.clustering_time
    meta = _metadata(plan, stats)
    markers.reconcile(ctx.storage, t, [s.path for s in stats])
    with ctx.locked(t) as tl:
        _fence(ctx, tl, t)
        hit = {g: i for g, i in touched_since(tl, plan.base_completion, own=t).items() if g in plan.input_groups()}
        if hit:
            g, winner = next(iter(sorted(hit.items())))
            raise ClusteringAbortedError(
                f"clustering {t} lost to instant {winner.requested_time} (completed {winner.completion_time}), which "
                f"touched its input file group {g[1]} in partition {g[0]!r} ({len(hit)} groups in all); ingestion "
                "goes first: the clustering is aborted and planned again"
            )
        done = complete_rewrite(ctx, tl, t, inst.REPLACE_COMMIT, meta)
    release_completed(ctx, t, "clustering")
    return done


def _fence(ctx: CleanerContext, tl: Timeline, t: str) -> None:
    own = tl.find(t, inst.CLUSTERING)
    if own is None or not own.is_pending:
        raise ClusteringAbortedError(f"clustering {t} is no longer pending ({own}); not committing")
    if t in rollback_targets(tl):
        raise ClusteringAbortedError(f"a rollback targets clustering {t} (its heartbeat lapsed); not committing")
    if ctx.heartbeat is not None:
        ctx.heartbeat.check(t)


def _metadata(plan: ClusteringPlan, stats: list[WriteStat]) -> ReplaceCommitMetadata:
    p2s: dict[str, list[WriteStat]] = {}
    for s in stats:
        p2s.setdefault(s.partition_path, []).append(s)
    replaced: dict[str, list[str]] = {}
    for part, fid in sorted(plan.input_groups()):
        replaced.setdefault(part, []).append(fid)
    return ReplaceCommitMetadata(
        partition_to_write_stats=p2s,
        extra_metadata={BASE_KEY: plan.base_completion or ""},
        operation_type=OPERATION,
        partition_to_replace_file_ids=replaced,
    )


def abort(ctx: CleanerContext, plan: ClusteringPlan) -> list[str]:
    """Undo a clustering that did not commit: its metadata-table deltacommit rolled back, then
    data files (from markers), markers and its pending instant files. Refuses when the instant
    completed or was decided."""
    t = plan.clustering_time
    if decisions.is_decided(ctx.storage, ctx.config, t, ctx.table.timeline()):
        log.error("clustering %s is completed (or decided); refusing to delete its files", t)
        ctx.stop_heartbeat(t)
        return []
    # its metadata-table deltacommit first, while the instant is pending (Hudi's way)
    metadata_files.rollback_deltacommit(ctx.storage, ctx.config, t)
    deleted = markers.delete_files(ctx.storage, t)
    markers.delete_dir(ctx.storage, t)
    tlmod.delete_pending(ctx.storage, ctx.config, t, inst.CLUSTERING)
    ctx.stop_heartbeat(t)
    return deleted


# -- one run ------------------------------------------------------------------------------------------


@dataclass
class ClusteringResult:
    committed: list[str] = field(default_factory=list)  # clustering instants completed
    replaced: int = 0  # input file groups retired
    aborted: int = 0  # input file groups of clusterings that lost to a writer
    bytes_rewritten: int = 0
    errors: list[str] = field(default_factory=list)


def run(ctx: CleanerContext, cfg: ClusteringConfig) -> ClusteringResult:
    """Plan, execute and commit one clustering; a lost race or failure aborts it cleanly."""
    result = ClusteringResult()
    plan = schedule(ctx, cfg)
    if plan is None:
        return result
    try:
        stats = execute(ctx, plan, cfg)
        commit(ctx, plan, stats)
    except ClusteringAbortedError as e:
        log.info("%s", e)
        abort(ctx, plan)
        result.aborted += len(plan.input_groups())
        return result
    except (MultiWriterError, OSError) as e:
        log.error("clustering %s failed: %s; its files are deleted and the next run plans again", plan.clustering_time, e)
        _abort_quietly(ctx, plan)
        result.aborted += len(plan.input_groups())
        result.errors.append(f"clustering {plan.clustering_time}: {type(e).__name__}: {e}")
        return result
    except BaseException:
        _abort_quietly(ctx, plan)
        raise
    result.committed.append(plan.clustering_time)
    result.replaced += len(plan.input_groups())
    result.bytes_rewritten += plan.input_bytes
    return result


def _abort_quietly(ctx: CleanerContext, plan: ClusteringPlan) -> None:
    try:
        abort(ctx, plan)
    except (MultiWriterError, OSError) as e:  # the rollback step finishes it once the heartbeat lapses
        log.error("could not abort clustering %s (%s); the cleaner rolls it back later", plan.clustering_time, e)
        ctx.stop_heartbeat(plan.clustering_time)


# -- table health -------------------------------------------------------------------------------------


@dataclass
class PartitionHealth:
    partition: str
    file_groups: int = 0
    small_files: int = 0
    bytes: int = 0


def health(snapshot: Snapshot, small_file_bytes: int) -> dict[str, PartitionHealth]:
    """Per partition: live file groups, how many are small, their bytes."""
    out: dict[str, PartitionHealth] = {}
    for f in snapshot.files():
        h = out.setdefault(f.partition, PartitionHealth(f.partition))
        h.file_groups += 1
        h.small_files += f.size < small_file_bytes
        h.bytes += f.size
    return out
