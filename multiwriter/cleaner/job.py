"""``Cleaner``: one pass of every cleaner step (``run_once``), the companion Structured Streaming
query (``start``) and the ``multiwriter clean`` command (``clean_command`` / ``main``).

    cleaner = mw.Cleaner(path, lock=mw.ZooKeeperLock(connect="127.0.0.1:2181"))
    report = cleaner.run_once()          # roll back, clean, archive, report orphans
    query = cleaner.start(spark, interval="30 seconds")   # or keep it running beside the writers

A run never stops half-way because one step failed: each step's error is recorded, the next
step still runs (every step is safe on its own), and ``run_once`` raises :class:`CleanerError`
at the end (``raise_errors=False`` returns the report with ``errors`` instead, which the
streaming query and the command-line loop use so that one bad run does not end them).
"""

from __future__ import annotations

import logging
import os
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import CleanerError, ConfigError, MultiWriterError, TableFormatError
from ..redact import redact
from ..lock.base import LockProvider, check_table_lock
from ..table.table import Table
from . import CleanerContext
from . import archive as archive_mod
from . import clustering as clustering_mod
from . import compaction as compaction_mod
from . import orphans as orphans_mod
from . import plan_checks
from . import retention as retention_mod
from . import rollback as rollback_mod
from .clustering import ClusteringConfig
from .compaction import CompactionConfig
from ..heartbeat.judge import DEFAULT_MAX_OBSERVE_S, DEFAULT_SKEW_WARN_S, HeartbeatJudge

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from ..heartbeat.client import HeartbeatClient
    from ..lock.base import TableLock
    from ..metrics import Metrics

log = logging.getLogger(__name__)

DEFAULT_CLUSTERING = ClusteringConfig()
DEFAULT_COMPACTION = CompactionConfig()
#: how long a run waits for the table lock unless ``hoodie.write.lock.wait_time_ms`` says otherwise
DEFAULT_LOCK_TIMEOUT_S = 60.0


@dataclass
class CleanerReport:
    """What one ``run_once`` did."""

    rolled_back: list[str] = field(default_factory=list)  # requested times of failed writes
    files_deleted: int = 0  # data files of failed writes
    old_versions_deleted: int = 0  # file slices no retained snapshot needs
    archived: int = 0  # instants moved to .hoodie/timeline/history
    orphans: list[str] = field(default_factory=list)  # orphan data files (relative paths)
    orphans_deleted: int = 0
    duration_s: float = 0.0
    resumed: list[str] = field(default_factory=list)  # rollback/clean/compaction instants of dead cleaners finished
    clean_instants: list[str] = field(default_factory=list)
    stale_files_deleted: int = 0  # marker dirs and heartbeat files of finished instants
    uncommitted_deleted: int = 0  # leftovers swept before archival would make them look committed
    failed_writes_swept: list[str] = field(default_factory=list)  # files of instants neither completed nor pending
    pending_instants: int = 0  # left on the timeline after this run
    clustering_instants: list[str] = field(default_factory=list)  # requested times of clusterings committed
    clustered_file_groups: int = 0  # input file groups those clusterings replaced
    clustering_aborted_file_groups: int = 0  # input groups of clusterings that lost to a writer
    compaction_instants: list[str] = field(default_factory=list)  # requested times of compactions completed
    compacted_file_groups: int = 0  # file slices those compactions rewrote as base files
    compacted_log_files: int = 0  # log files merged into them
    live_files: int = 0  # live file groups after this run
    small_files: int = 0  # of which below the clustering small-file size
    quarantined: list[str] = field(default_factory=list)  # timeline files this run moved aside, why, what to do
    in_quarantine: list[str] = field(default_factory=list)  # files waiting in .hoodie/.quarantine for a person
    #: metadata-table records readers skip (unsafe partitions, file names), naming their files
    metadata_ignored: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    def __str__(self) -> str:
        parts = [
            f"rolled back {len(self.rolled_back)} failed writes ({self.files_deleted} files)",
            f"deleted {self.old_versions_deleted} old versions",
            f"archived {self.archived} instants",
            f"{len(self.orphans)} orphans ({self.orphans_deleted} deleted)",
            f"{self.pending_instants} pending instants",
        ]
        if self.resumed:
            parts.append(f"resumed {len(self.resumed)} dead cleaner instants")
        if self.clustering_instants or self.clustering_aborted_file_groups:
            parts.append(
                f"clustered {self.clustered_file_groups} file groups in {len(self.clustering_instants)} instants"
                f" ({self.clustering_aborted_file_groups} aborted)"
            )
        if self.compaction_instants:
            parts.append(
                f"compacted {self.compacted_file_groups} file groups ({self.compacted_log_files} log files) in "
                f"{len(self.compaction_instants)} instants"
            )
        if self.failed_writes_swept:
            parts.append(f"swept {len(self.failed_writes_swept)} files of failed writes")
        if self.in_quarantine:
            parts.append(f"{len(self.in_quarantine)} files in {plan_checks.QUARANTINE_DIR} (first: "
                         f"{self.in_quarantine[0]}): {plan_checks.HINT}")
        if self.metadata_ignored:
            parts.append(f"{len(self.metadata_ignored)} unsafe metadata-table records (first: "
                         f"{self.metadata_ignored[0]})")
        if self.errors:
            parts.append(f"{len(self.errors)} errors: {self.errors[0]}")
        return f"cleaner: {', '.join(parts)} in {self.duration_s:.2f}s"


class Cleaner:
    """Keeps one table healthy while writers run: rollback of failed writes, retention of old
    file slices, archival of old instants, orphan report. Safe to run several at once (they
    coordinate through the table lock and their own heartbeats) and to kill at any point.

    A writer is judged dead once no new beat of its instant appeared for its own bound
    ``interval * (misses + 1)`` (recorded in each beat) on this cleaner's monotonic clock
    (:mod:`multiwriter.heartbeat.judge`); the cleaner keeps one judge for its life, so a long
    running cleaner remembers what it saw, and its first run observes the pending instants until
    each is decided or ``observe_max_s`` passed (undecided ones are left to a later run).
    ``heartbeat_interval_s`` and ``heartbeat_tolerable_misses`` are the cleaner's own beats and
    judge only heartbeats that record no settings (Hudi's JVM writers, files of earlier
    releases). ``skew_warn_s``: a writer whose heartbeat clock is further than this from the
    cleaner's is logged and shown by ``multiwriter_heartbeat_clock_skew_seconds``.
    ``sweep_failed_writes`` deletes data files whose instant is neither completed (active
    timeline or archive) nor pending, once the instant is ``failed_write_min_age_bounds``
    heartbeat bounds old (see :mod:`.orphans`). ``clustering`` (on by default) stitches small
    file groups into target-size ones after the rollback step (:mod:`.clustering`);
    ``clustering=None`` turns it off; it leaves bucket-indexed tables alone (their layout is
    their index). ``compaction`` (on by default, Merge-on-Read tables only) merges the log files
    of file slices into new base files once enough deltacommits completed (:mod:`.compaction`);
    ``compaction=None`` turns it off. ``spark`` (or the session given to :meth:`start`): large
    clustering groups and compaction slices are rewritten on its executors
    (``executor_min_bytes`` of their configs).
    """

    def __init__(
        self,
        path: str,
        *,
        lock: LockProvider,
        heartbeat_interval_s: float = 10.0,
        heartbeat_tolerable_misses: int = 2,
        retain_commits: int = 10,
        archive_keep_min: int = 20,
        archive_keep_max: int = 30,
        orphan_min_age_s: float = 6 * 3600,
        delete_orphans: bool = False,
        sweep_failed_writes: bool = True,
        failed_write_min_age_bounds: float = 5.0,
        lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
        metrics: Metrics | None = None,
        pushgateway: str | None = None,
        clustering: ClusteringConfig | None = DEFAULT_CLUSTERING,
        spark: SparkSession | None = None,
        compaction: CompactionConfig | None = DEFAULT_COMPACTION,
        observe_max_s: float = DEFAULT_MAX_OBSERVE_S,
        skew_warn_s: float = DEFAULT_SKEW_WARN_S,
    ) -> None:
        _validate(
            heartbeat_interval_s,
            heartbeat_tolerable_misses,
            retain_commits,
            archive_keep_min,
            archive_keep_max,
            orphan_min_age_s,
            lock_timeout_s,
        )
        if (
            not isinstance(failed_write_min_age_bounds, (int, float))
            or isinstance(failed_write_min_age_bounds, bool)
            or not failed_write_min_age_bounds >= 1
        ):
            raise ConfigError(
                f"Cleaner failed_write_min_age_bounds={failed_write_min_age_bounds!r}: must be >= 1 (heartbeat bounds "
                "an instant must be old before its files may be swept); use sweep_failed_writes=False to turn it off"
            )
        from ..lock.base import LockProvider as _LockProvider

        if not isinstance(lock, _LockProvider):
            raise ConfigError(
                "lock must be a LockProvider (mw.ZooKeeperLock, mw.FileSystemLock, mw.InProcessLock), "
                f"got {type(lock).__name__}"
            )
        self.path = str(path)
        self.table = Table.open(self.path)
        if self.table.config.version < 8:
            raise TableFormatError(
                f"{redact(self.path)} is a version {self.table.config.version} table; the cleaner writes version 8 "
                "timelines only: upgrade the table with Hudi first"
            )
        check_table_lock(self.table.config.raw, lock, table=redact(self.path))
        self.lock_provider = lock
        self.heartbeat_interval_s = float(heartbeat_interval_s)
        self.heartbeat_tolerable_misses = int(heartbeat_tolerable_misses)
        self.retain_commits = int(retain_commits)
        self.archive_keep_min = int(archive_keep_min)
        self.archive_keep_max = int(archive_keep_max)
        self.orphan_min_age_s = float(orphan_min_age_s)
        self.delete_orphans = bool(delete_orphans)
        self.sweep_failed_writes = bool(sweep_failed_writes)
        self.failed_write_min_age_bounds = float(failed_write_min_age_bounds)
        self.lock_timeout_s = float(lock_timeout_s)
        self.pushgateway = pushgateway
        if clustering is not None and not isinstance(clustering, ClusteringConfig):
            raise ConfigError(f"clustering must be a mw.ClusteringConfig or None, got {type(clustering).__name__}")
        self.clustering = clustering
        if compaction is not None and not isinstance(compaction, CompactionConfig):
            raise ConfigError(f"compaction must be a mw.CompactionConfig or None, got {type(compaction).__name__}")
        self.compaction = compaction
        self.spark = spark
        self.cleaner_id = f"cleaner-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.last_report: CleanerReport | None = None
        self.runs = 0
        self._metrics = metrics
        self._lock: TableLock | None = None
        self._heartbeat: HeartbeatClient | None = None
        if not observe_max_s >= 0 or not skew_warn_s >= 0:
            raise ConfigError(f"Cleaner observe_max_s={observe_max_s!r}, skew_warn_s={skew_warn_s!r}: must be >= 0")
        self.judge = HeartbeatJudge(
            self.table.storage,
            interval_s=self.heartbeat_interval_s,
            tolerable_misses=self.heartbeat_tolerable_misses,
            max_observe_s=observe_max_s,
            skew_warn_s=skew_warn_s,
            on_skew=self._on_skew,
            name=f"cleaner of {self.table.name}",
        )
        self._observed = False  # the first run observed the pending instants until decided
        self._mu = threading.Lock()

    # -- public ------------------------------------------------------------------------------
    @property
    def metrics(self) -> Metrics:
        if self._metrics is None:
            from ..metrics import default

            self._metrics = default()
        return self._metrics

    def run_once(self, *, raise_errors: bool = True) -> CleanerReport:
        """Roll back failed writes, delete old versions, archive, find orphans; one pass."""
        with self._mu:
            started = time.monotonic()
            report = CleanerReport()
            ctx = self._context()
            ctx.forget()
            if self.runs == 0:
                self._step(report, "lock", lambda: self._lock_usable(ctx))
            with self.table.storage.listings_kept():  # see _step
                self._steps(ctx, report)
            report.duration_s = time.monotonic() - started
            self.runs += 1
            self.last_report = report
            self._push()
        (log.warning if report.errors else log.info)("%s", report)
        if report.errors and raise_errors:
            raise CleanerError(
                f"cleaner run on {redact(self.path)} had {len(report.errors)} errors: " + "; ".join(report.errors), report
            )
        return report

    def _lock_usable(self, ctx: CleanerContext) -> None:
        """The first run takes the table lock once, even with nothing due (later runs take it
        only for work): a cleaner that cannot take it (credentials the lock's ACL refuses, an
        unreachable server) says so when it starts, not when work first falls due."""
        from ..lock.base import HolderInfo

        ctx.lock.acquire(timeout_s=ctx.lock_timeout_s,
                         holder=HolderInfo(ctx.cleaner_id, socket.gethostname(), os.getpid(), None))
        ctx.lock.release()

    def _steps(self, ctx: CleanerContext, report: CleanerReport) -> None:
        self._step(report, "heartbeats", lambda: self._observe_first(ctx))
        self._step(report, "plan checks", lambda: self._audit(ctx, report))
        self._step(report, "rollback", lambda: self._rollback(ctx, report))
        if self.clustering is not None:
            self._step(report, "clustering", lambda: self._cluster(ctx, report))
        if self.compaction is not None and self.table.config.merge_on_read:
            self._step(report, "compaction", lambda: self._compact(ctx, report))
        self._step(report, "retention", lambda: self._retention(ctx, report))
        self._step(report, "archival", lambda: self._archive(ctx, report))
        if self.sweep_failed_writes:
            self._step(report, "failed writes", lambda: self._sweep(ctx, report), fresh=True)
        self._step(report, "orphans", lambda: self._orphans(ctx, report), fresh=True)
        self._step(report, "pending", lambda: self._pending(ctx, report))
        self._step(report, "health", lambda: self._health(ctx, report))
        self._step(report, "quarantine", lambda: self._quarantine(ctx, report))

    def cluster_once(self, *, raise_errors: bool = True) -> CleanerReport:
        """Only the clustering step (and the file-health gauges): ``multiwriter cluster``, or a
        caller that runs the other steps elsewhere. Uses ``ClusteringConfig()`` when the cleaner
        was built with ``clustering=None``."""
        cfg = self.clustering or DEFAULT_CLUSTERING
        return self._service_once("clustering", lambda ctx, report: self._cluster(ctx, report, cfg), raise_errors)

    def compact_once(self, *, raise_errors: bool = True) -> CleanerReport:
        """Only the compaction step (and the file-health gauges): ``multiwriter compact``, or a
        caller that runs the other steps elsewhere. Uses ``CompactionConfig()`` when the cleaner
        was built with ``compaction=None``; does nothing on a Copy-on-Write table."""
        cfg = self.compaction or DEFAULT_COMPACTION
        return self._service_once("compaction", lambda ctx, report: self._compact(ctx, report, cfg), raise_errors)

    def _service_once(
        self, name: str, step: Callable[[CleanerContext, CleanerReport], None], raise_errors: bool
    ) -> CleanerReport:
        with self._mu:
            started = time.monotonic()
            report = CleanerReport()
            ctx = self._context()
            ctx.forget()
            self._step(report, "heartbeats", lambda: self._observe_first(ctx))
            self._step(report, name, lambda: step(ctx, report))
            self._step(report, "health", lambda: self._health(ctx, report))
            self._step(report, "quarantine", lambda: self._quarantine(ctx, report))
            report.duration_s = time.monotonic() - started
            self._push()
        if report.errors and raise_errors:
            raise CleanerError(f"{name} run on {redact(self.path)} failed: " + "; ".join(report.errors), report)
        return report

    def start(
        self, spark: SparkSession, interval: str = "30 seconds", checkpoint_location: str | None = None
    ) -> StreamingQuery:
        """Run ``run_once`` on every trigger of a Structured Streaming query (a rate source,
        ``trigger(processingTime=interval)``, ``foreachBatch``), so the cleaner lives in the same
        Spark application as the writers. Errors of a run are logged, never end the query.
        Stop it with ``query.stop()``, then ``cleaner.close()``."""
        self.spark = self.spark or spark
        ck = checkpoint_location or tempfile.mkdtemp(prefix="multiwriter-cleaner-")
        ticks = spark.readStream.format("rate").option("rowsPerSecond", 1).option("numPartitions", 1).load()

        def on_batch(_df: Any, batch_id: int) -> None:
            self._on_trigger(batch_id)

        return (
            ticks.writeStream.queryName(f"multiwriter-cleaner-{self.table.name}-{self.cleaner_id[-6:]}")
            .trigger(processingTime=interval)
            .option("checkpointLocation", ck)
            .foreachBatch(on_batch)
            .start()
        )

    def close(self) -> None:
        """Stop the cleaner's heartbeat thread and release the lock connection."""
        with self._mu:
            if self._heartbeat is not None:
                self._heartbeat.close()
                self._heartbeat = None
            if self._lock is not None:
                self._lock.close()
                self._lock = None

    def __enter__(self) -> Cleaner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- steps -------------------------------------------------------------------------------------
    def _rollback(self, ctx: CleanerContext, report: CleanerReport) -> None:
        r = rollback_mod.rollback_failed_writes(ctx)
        report.rolled_back.extend(r.rolled_back)
        report.files_deleted += r.files_deleted
        report.resumed.extend(r.resumed)
        report.errors.extend(r.errors)
        name = self.table.name
        for _ in r.outcomes:
            self.metrics.rollback(name)
        if r.files_deleted:
            self.metrics.files_deleted(name, "failed_write", r.files_deleted)

    def _cluster(self, ctx: CleanerContext, report: CleanerReport, cfg: ClusteringConfig | None = None) -> None:
        cfg = cfg or self.clustering
        assert cfg is not None
        r = clustering_mod.run(ctx, cfg)
        report.clustering_instants.extend(r.committed)
        report.clustered_file_groups += r.replaced
        report.clustering_aborted_file_groups += r.aborted
        report.errors.extend(r.errors)
        self.metrics.clustering(self.table.name, replaced=r.replaced, aborted=r.aborted, bytes_rewritten=r.bytes_rewritten)

    def _compact(self, ctx: CleanerContext, report: CleanerReport, cfg: CompactionConfig | None = None) -> None:
        cfg = cfg or self.compaction
        assert cfg is not None
        r = compaction_mod.run(ctx, cfg)
        report.compaction_instants.extend(r.committed)
        report.compacted_file_groups += r.file_groups
        report.compacted_log_files += r.log_files
        report.resumed.extend(r.resumed)
        report.errors.extend(r.errors)
        for seconds, groups in r.timings:
            self.metrics.compaction(self.table.name, seconds, groups)

    def _health(self, ctx: CleanerContext, report: CleanerReport) -> None:
        from ..table.snapshot import Snapshot

        small = (self.clustering or ClusteringConfig()).small_file_bytes
        snap = Snapshot.build(self.table.storage, ctx.timeline())
        parts = clustering_mod.health(snap, small)
        report.live_files = sum(h.file_groups for h in parts.values())
        report.small_files = sum(h.small_files for h in parts.values())
        self.metrics.table_files(self.table.name, live=report.live_files, small=report.small_files)
        if self.table.config.merge_on_read:
            most, oldest_s = compaction_mod.lag(snap, time.time())
            self.metrics.compaction_lag(self.table.name, delta_commits=most, oldest_log_age_s=oldest_s)

    def _audit(self, ctx: CleanerContext, report: CleanerReport) -> None:
        moved = plan_checks.audit(ctx)
        report.quarantined.extend(str(q) for q in moved)
        report.errors.extend(f"plan checks: {q}" for q in moved)
        report.metadata_ignored.extend(plan_checks.unsafe_metadata_records(ctx))

    def _quarantine(self, ctx: CleanerContext, report: CleanerReport) -> None:
        report.quarantined.extend(e for e in report.errors if plan_checks.QUARANTINE_DIR in e
                                  and e not in report.quarantined and not e.startswith("plan checks: "))
        report.in_quarantine = plan_checks.waiting(ctx)
        if report.in_quarantine:
            log.warning("%d files in %s of %s (first: %s): %s", len(report.in_quarantine), plan_checks.QUARANTINE_DIR,
                        redact(self.path), report.in_quarantine[0], plan_checks.HINT)

    def _retention(self, ctx: CleanerContext, report: CleanerReport) -> None:
        r = retention_mod.clean_old_versions(ctx, self.retain_commits)
        report.old_versions_deleted += r.old_versions_deleted
        report.clean_instants.extend(r.clean_instants)
        report.resumed.extend(r.resumed)
        report.errors.extend(r.errors)
        if r.old_versions_deleted:
            self.metrics.files_deleted(self.table.name, "old_version", r.old_versions_deleted)

    def _archive(self, ctx: CleanerContext, report: CleanerReport) -> None:
        r = archive_mod.archive(
            ctx, keep_min=self.archive_keep_min, keep_max=self.archive_keep_max, retain_commits=self.retain_commits
        )
        report.archived += r.archived
        report.errors.extend(f"archival: {p}" for p in r.distrusted)
        report.uncommitted_deleted += len(r.swept)
        if r.swept:
            self.metrics.files_deleted(self.table.name, "orphan", len(r.swept))

    def _observe_first(self, ctx: CleanerContext) -> None:
        """A fresh cleaner knows no beat yet: observe every pending instant until each is
        decided (alive or lapsed) or ``observe_max_s`` passed, so one run can roll back. Later
        runs rely on the judge's memory and never wait."""
        if self._observed:
            return
        pending = [i.requested_time for i in ctx.timeline().pending()]
        if pending:
            obs = self.judge.decide(pending)
            undecided = sorted(t for t, o in obs.items() if o.verdict == "undecided")
            if undecided:
                log.info("%d pending instants not decided within %.0fs (first %s): left to a later run",
                         len(undecided), self.judge.max_observe_s, undecided[0])
        self._observed = True

    def _on_skew(self, writer: str, skew_s: float) -> None:
        try:
            self.metrics.heartbeat_skew(self.table.name, writer, skew_s)
        except Exception as e:  # noqa: BLE001 -- metrics must never break cleaning
            log.debug("could not record heartbeat skew: %s", e)

    def _sweep(self, ctx: CleanerContext, report: CleanerReport) -> None:
        # the largest bound in use (the cleaner's default and every writer's recorded one): a
        # failed write's files go only once even the slowest writer's bound passed many times
        bound = self.judge.max_bound_s()
        swept = orphans_mod.sweep_failed_writes(ctx, min_age_s=self.failed_write_min_age_bounds * bound, now=ctx.now)
        report.failed_writes_swept.extend(swept)
        if swept:
            self.metrics.files_deleted(self.table.name, "failed_write", len(swept))

    def _orphans(self, ctx: CleanerContext, report: CleanerReport) -> None:
        tl = ctx.timeline_after_walk()
        found = orphans_mod.find(ctx, tl, min_age_s=self.orphan_min_age_s)
        report.orphans = [o.path for o in found]
        if found:
            log.warning(
                "%d orphan data files in %s (first: %s)%s",
                len(found),
                redact(self.path),
                found[0].path,
                "" if self.delete_orphans else "; run with delete_orphans=True to delete them",
            )
        if self.delete_orphans and found:
            report.orphans_deleted = orphans_mod.delete(ctx, found)
            if report.orphans_deleted:
                self.metrics.files_deleted(self.table.name, "orphan", report.orphans_deleted)
        report.stale_files_deleted = orphans_mod.clean_bookkeeping(
            ctx, tl, min_age_s=min(self.orphan_min_age_s, 3600.0)
        )

    def _pending(self, ctx: CleanerContext, report: CleanerReport) -> None:
        report.pending_instants = len(ctx.timeline().pending())
        self.metrics.pending_instants(self.table.name, report.pending_instants)

    # -- internals ----------------------------------------------------------------------------------
    def _step(self, report: CleanerReport, name: str, fn: Callable[[], None], *, fresh: bool = False) -> None:
        """Run one step; its error is recorded, never raised. Between lock holds a run's steps
        share one listing of each folder (:meth:`~multiwriter.storage.Storage.listings_kept`):
        outside the lock they only plan and report, and every action is decided again under
        the lock on listings read there (:meth:`CleanerContext.locked`). A ``fresh`` step
        deletes what it judges outside the lock (failed writes, orphans, bookkeeping) and
        lists everything it judges anew, files first, then what accounts for them."""
        try:
            if fresh:
                with self.table.storage.listings_fresh():
                    fn()
            else:
                fn()
        except (MultiWriterError, OSError) as e:
            log.error("cleaner %s step failed on %s: %s", name, redact(self.path), redact(e))
            report.errors.append(redact(f"{name}: {type(e).__name__}: {e}"))
        except Exception as e:  # noqa: BLE001 -- one step's bug must not stop the others (each is safe alone)
            log.exception("cleaner %s step failed unexpectedly on %s", name, redact(self.path))
            report.errors.append(redact(f"{name}: {type(e).__name__}: {e}"))

    def _context(self) -> CleanerContext:
        if self._lock is None:
            self._lock = self.lock_provider.for_table(self.table.table_id, self.table.storage)
        if self._heartbeat is None:
            from ..heartbeat.client import HeartbeatClient

            self._heartbeat = HeartbeatClient(
                self.table.storage,
                writer_id=self.cleaner_id,
                interval_s=self.heartbeat_interval_s,
                tolerable_misses=self.heartbeat_tolerable_misses,
            )
        return CleanerContext(
            table=self.table,
            lock=self._lock,
            cleaner_id=self.cleaner_id,
            heartbeat_interval_s=self.heartbeat_interval_s,
            heartbeat_tolerable_misses=self.heartbeat_tolerable_misses,
            lock_timeout_s=self.lock_timeout_s,
            heartbeat=self._heartbeat,
            spark=self.spark,
            judge=self.judge,
        )

    def _on_trigger(self, batch_id: int) -> None:
        try:
            self.run_once(raise_errors=False)
        except Exception:  # the companion query must outlive any one bad run
            log.exception("cleaner run %s on %s failed", batch_id, redact(self.path))

    def _push(self) -> None:
        if not self.pushgateway:
            return
        try:
            from ..metrics import push_to_gateway

            push_to_gateway(self.pushgateway, "multiwriter-cleaner", registry=getattr(self.metrics, "registry", None))
        except Exception as e:  # noqa: BLE001 -- metrics must never break cleaning
            log.warning("could not push cleaner metrics to %s: %s", redact(self.pushgateway), redact(e))


def _validate(
    interval: float, misses: int, retain: int, keep_min: int, keep_max: int, orphan_age: float, lock_timeout: float
) -> None:
    def bad(name: str, value: Any, rule: str) -> ConfigError:
        return ConfigError(f"Cleaner {name}={value!r}: {rule}")

    if not isinstance(interval, (int, float)) or isinstance(interval, bool) or interval <= 0:
        raise bad("heartbeat_interval_s", interval, "must be > 0 (the cleaner's own beats; judges only heartbeats that record no interval)")
    if not isinstance(misses, int) or isinstance(misses, bool) or misses < 0:
        raise bad("heartbeat_tolerable_misses", misses, "must be an int >= 0 (as heartbeat_interval_s)")
    if not isinstance(retain, int) or isinstance(retain, bool) or retain < 1:
        raise bad("retain_commits", retain, "must be an int >= 1 (the newest commits whose snapshots stay readable)")
    if not isinstance(keep_min, int) or not isinstance(keep_max, int) or not 1 <= keep_min <= keep_max:
        raise bad(
            "archive_keep_min/archive_keep_max", (keep_min, keep_max), "need 1 <= archive_keep_min <= archive_keep_max"
        )
    if not isinstance(orphan_age, (int, float)) or orphan_age < 0:
        raise bad("orphan_min_age_s", orphan_age, "must be >= 0 seconds")
    if not isinstance(lock_timeout, (int, float)) or lock_timeout <= 0:
        raise bad("lock_timeout_s", lock_timeout, "must be > 0 seconds")
