"""The cleaner: rolls back failed writers, removes old file slices, archives the timeline and
reports orphans, so that several writers can run for months against one table.

This module holds only what every cleaner step shares: :class:`CleanerContext` (the table, the
lock, the clock, the heartbeat rule) and the few timeline operations that must happen under the
table lock (issuing an instant time, completing an instant). The steps live beside it:
:mod:`.rollback`, :mod:`.retention`, :mod:`.archive`, :mod:`.orphans`; :mod:`.job` ties them
together as :class:`~multiwriter.cleaner.job.Cleaner`.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import LockLostError
from ..instant_time import PROCESS_CLOCK, InstantClock
from ..storage import FileEntry, Storage
from ..format import instant as inst
from ..table import decisions, metadata_table
from ..format import layout
from ..table import timeline as tlmod
from ..format.instant import Instant
from ..table.properties import TableConfig
from ..table.table import Table
from ..table.timeline import Timeline

if TYPE_CHECKING:  # pragma: no cover
    from ..heartbeat.client import HeartbeatClient
    from ..heartbeat.judge import HeartbeatJudge
    from ..lock.base import TableLock

log = logging.getLogger(__name__)

__all__ = ["Cleaner", "CleanerContext", "CleanerReport"]


@dataclass
class CleanerContext:
    """Everything a cleaner step needs; one per :class:`Cleaner`, reused across runs.

    ``heartbeat`` beats for the cleaner's own rollback and clean instants while it executes
    them, so that a second cleaner can tell a plan being executed right now (leave it) from one
    whose cleaner died (finish it) with the same rule it applies to writers.

    ``judge`` decides who is dead (:mod:`multiwriter.heartbeat.judge`): a writer whose beats
    stopped changing for its own bound on the judge's monotonic clock. The
    :class:`~multiwriter.cleaner.job.Cleaner` hands the same judge to every run, so its memory
    of the beats it saw carries over; ``heartbeat_interval_s`` / ``heartbeat_tolerable_misses``
    judge only beats that record no settings of their own.
    """

    table: Table
    lock: TableLock
    cleaner_id: str
    heartbeat_interval_s: float = 10.0
    heartbeat_tolerable_misses: int = 2
    lock_timeout_s: float = 60.0
    clock: InstantClock = PROCESS_CLOCK
    heartbeat: HeartbeatClient | None = None
    now: float | None = None  # frozen wall clock for the age-based sweeps in tests (liveness never uses it)
    lock_holds: list[float] = field(default_factory=list)
    spark: Any = None  # a SparkSession: large clustering groups run on its executors
    judge: HeartbeatJudge | None = None  # made on first use when not given
    #: the newest commit decision, read under the lock by :meth:`locked`
    decided: decisions.Decision | None = field(default=None, init=False, repr=False)
    #: what one run reads more than once and only archival changes (:meth:`remembered`)
    _memo: dict[str, Any] = field(default_factory=dict, init=False, repr=False)
    _run_timeline: Timeline | None = field(default=None, init=False, repr=False)
    #: the order in which the run's walk and its timeline were read (:meth:`timeline_after_walk`)
    _reads: int = field(default=0, init=False, repr=False)
    _walk_read: int = field(default=-1, init=False, repr=False)
    _timeline_read: int = field(default=-1, init=False, repr=False)

    def remembered(self, what: str, read: Callable[[], Any]) -> Any:
        """``read()`` once per run: the archived history is read by several steps (the plan
        checks, clustering's proof, the failed-write sweep), each a listing and a read on an
        object store. Archival, which changes it, and each new run call :meth:`forget`."""
        if what not in self._memo:
            self._memo[what] = read()
        return self._memo[what]

    def forget(self, *what: str) -> None:
        """Read again what :meth:`remembered` kept under ``what`` (everything, and the run's
        timeline, when none is named)."""
        if what:
            for w in what:
                self._memo.pop(w, None)
            return
        self._memo.clear()
        self._run_timeline = None

    def walked(self, *, fresh: bool = False) -> list[FileEntry]:
        """Every file of the table, walked once per run: the failed-write sweep walks
        (``fresh``), the orphan scan after it takes the same walk (on an object store a walk is a
        request per thousand files). Files a step deletes leave it (:meth:`forget_files`)."""
        if fresh:
            self._memo.pop("walk", None)
        if "walk" not in self._memo:
            self.keep_walk(self.storage.walk_files(""))
        return list(self._memo["walk"])

    def walk_taken(self) -> list[FileEntry] | None:
        """The run's walk when a step took one, else None (nothing is walked for it)."""
        walk = self._memo.get("walk")
        return None if walk is None else list(walk)

    def keep_walk(self, entries: list[FileEntry]) -> None:
        """A walk of every file just taken by a step (archival's, under the lock): the run's
        walk from now on."""
        self._memo["walk"] = list(entries)
        self._reads += 1
        self._walk_read = self._reads

    def timeline_after_walk(self) -> Timeline:
        """The run's walk of the files (:meth:`walked`), then a timeline loaded after it: what
        judges a file as unaccounted for (the failed-write sweep, the orphan scan) must be read
        after the file was listed, or a write completing in between would look failed. The run's
        timeline serves when it was loaded after the walk (no second listing)."""
        self.walked()
        if self._run_timeline is None or self._timeline_read < self._walk_read:
            self._run_timeline = None
            with self.storage.listings_fresh():  # never a listing kept from before the walk
                return self.timeline()
        return self._run_timeline

    def forget_files(self, paths: list[str]) -> None:
        gone = set(paths)
        if gone and "walk" in self._memo:
            self._memo["walk"] = [e for e in self._memo["walk"] if e.path not in gone]

    def timeline(self) -> Timeline:
        """The timeline the run's choices are made on (which pending instants to observe, audit
        or roll back, which file groups to cluster, the gauges at the end): loaded once, and
        again after any lock hold, which may have changed it. Every action checks its choice
        again under the lock, on a timeline loaded there; the sweeps of failed writes and
        orphans load their own, after listing the files they judge."""
        if self._run_timeline is None:
            self._run_timeline = self.table.timeline()
            self._reads += 1
            self._timeline_read = self._reads
        return self._run_timeline

    def holds_timeline(self) -> bool:
        """Is the run's timeline loaded (:meth:`timeline` costs no listing)?"""
        return self._run_timeline is not None

    def decision_log(self) -> decisions.DecisionLog:
        return decisions.DecisionLog(self.storage, self.config)

    @property
    def storage(self) -> Storage:
        return self.table.storage

    @property
    def config(self) -> TableConfig:
        return self.table.config

    @property
    def table_name(self) -> str:
        return self.table.name

    def is_lapsed(self, instant_time: str) -> bool:
        """Has the owner of ``instant_time`` stopped beating (writers and cleaners alike)? True
        only when this context's judge has seen no new beat for the owner's bound; an instant
        the judge sees for the first time is not lapsed (a later observation decides)."""
        return self.get_judge().is_lapsed(instant_time)

    def get_judge(self) -> HeartbeatJudge:
        if self.judge is None:
            from ..heartbeat.judge import HeartbeatJudge

            self.judge = HeartbeatJudge(
                self.storage, interval_s=self.heartbeat_interval_s, tolerable_misses=self.heartbeat_tolerable_misses
            )
        return self.judge

    @contextmanager
    def locked(self, instant: str | None = None) -> Iterator[Timeline]:
        """Hold the table lock and yield a timeline loaded after acquiring it, after the newest
        decision (kept as ``decided``: a completion under this hold follows it) was rolled forward."""
        from ..lock.base import HolderInfo

        holder = HolderInfo(self.cleaner_id, socket.gethostname(), os.getpid(), instant)
        self.lock.acquire(timeout_s=self.lock_timeout_s, holder=holder)
        since = time.monotonic()
        try:
            with self.storage.listings_fresh():  # decided on the store as it is under the lock
                self.decided, tl = decisions.settle(self.decision_log(), self.table.timeline)
                yield tl
        finally:
            self._run_timeline = None  # the hold may have changed it
            self.lock_holds.append(time.monotonic() - since)
            self.lock.release()

    def check_lock(self, what: str) -> None:
        """Immediately before a completion (or any decision) under the lock: the lock is still
        ours, probed on its server as a writer's commit fence does. A cleaner paused past its
        lock session or lease may share the table with another holder by now, and Hudi's JVM
        writers do not read the decision log: it completes nothing then (``LockLostError``; the
        next run finishes what it left)."""
        self.lock.check()
        if not self.lock.is_held():
            raise LockLostError(f"the table lock of {self.table_name} is no longer held by cleaner {self.cleaner_id}; "
                                f"{what} is not completed (the next run finishes it)")

    def issue_time(self, tl: Timeline, *floors: str) -> str:
        """A new instant time greater than everything on ``tl``; call under the lock only."""
        return self.clock.issue([tl.max_time(), *floors])

    def start_heartbeat(self, instant_time: str) -> None:
        if self.heartbeat is not None:
            self.heartbeat.start(instant_time)

    def stop_heartbeat(self, instant_time: str) -> None:
        if self.heartbeat is not None:
            try:
                self.heartbeat.stop(instant_time)
                return  # stopping deletes the file
            except Exception as e:  # noqa: BLE001 -- a heartbeat that will not stop only delays a resume
                log.warning("could not stop the heartbeat of cleaner instant %s: %s", instant_time, e)
        # the file goes too: a completed instant has no owner to beat for it
        self.storage.delete(layout.heartbeat_path(instant_time))


def claim(ctx: CleanerContext, instant_time: str, action: str) -> bool:
    """Take over a pending rollback/clean whose cleaner died: under the lock, check its heartbeat
    has lapsed and start beating for it, so a third cleaner sees it alive and leaves it."""
    with ctx.locked(instant_time) as tl:
        current = tl.find(instant_time, action)
        if current is None or not current.is_pending or not ctx.is_lapsed(instant_time):
            return False
        ctx.start_heartbeat(instant_time)
        return True


def mark_inflight(ctx: CleanerContext, instant_time: str, action: str) -> None:
    """``<T>.<action>.inflight``: execution started (a second attempt finds it there: fine)."""
    try:
        tlmod.create_inflight(ctx.storage, ctx.config, instant_time, action)
    except tlmod.InstantExistsError:
        pass


def complete_under_lock(ctx: CleanerContext, instant_time: str, action: str, data: bytes) -> Instant | None:
    """Write ``<T>_<C>.<action>`` under the lock, unless another cleaner completed it first.

    Completion is the one step two cleaners must never both do (two completed files with
    different completion times would be two instants), so it re-reads the timeline under the
    lock. Returns the completed instant, or None when it was already completed.
    """
    with ctx.locked(instant_time) as tl:
        return complete_held(ctx, tl, instant_time, action, data)


def complete_held(ctx: CleanerContext, tl: Timeline, instant_time: str, action: str, data: bytes, *,
                  inflight: bool = False) -> Instant | None:
    """:func:`complete_under_lock` inside a hold the caller has (``tl`` loaded in it);
    ``inflight``: the caller wrote the inflight file in this hold (after ``tl`` was loaded)."""
    current = tl.find(instant_time, action)
    if current is not None and current.is_completed:
        log.info("%s %s was completed by another cleaner", action, instant_time)
        return None
    if not inflight and (current is None or current.state == inst.REQUESTED):
        mark_inflight(ctx, instant_time, action)
    metadata_table.drop_unmaintained(ctx.storage)
    ctx.check_lock(f"{action} {instant_time}")
    completion = ctx.issue_time(tl, instant_time, *_decided_floor(ctx))
    return decisions.complete(ctx.storage, ctx.config, ctx.decided, instant_time, completion, action, data,
                              actor=ctx.cleaner_id)


def complete_rewrite(ctx: CleanerContext, tl: Timeline, instant_time: str, action: str, meta: Any) -> Instant:
    """Complete a table service that rewrote files (clustering, compaction), under the lock the
    caller holds (``tl`` loaded under it, its fence passed): the table schema as of now goes into
    the metadata, so a rewrite never records an older one, then ``<T>_<C>.<action>``."""
    from ..schema_resolution import SCHEMA_KEY
    from ..format.schema import arrow_to_avro_json

    schema = ctx.table.schema(tl)
    if len(schema):
        meta.extra_metadata[SCHEMA_KEY] = arrow_to_avro_json(schema, ctx.table.name)
    metadata_table.drop_unmaintained(ctx.storage)
    ctx.check_lock(f"{action} {instant_time}")
    completion = ctx.issue_time(tl, instant_time, *_decided_floor(ctx))
    return decisions.complete(ctx.storage, ctx.config, ctx.decided, instant_time, completion, action, meta.to_bytes(),
                              actor=ctx.cleaner_id)


def _decided_floor(ctx: CleanerContext) -> list[str]:
    """The newest decision's completion time: a completion is issued above it too."""
    d = ctx.decided
    return [d.completion] if d is not None and d.completion else []


def release_completed(ctx: CleanerContext, instant_time: str, what: str) -> None:
    """After a service's instant completed: stop beating it and drop its markers (garbage now;
    a failure to delete them is only logged)."""
    from .. import markers

    ctx.stop_heartbeat(instant_time)
    try:
        markers.delete_dir(ctx.storage, instant_time)
    except OSError as e:
        log.warning("could not delete markers of %s %s: %s", what, instant_time, e)


def delete_each(
    storage: Storage, files: list[str] | tuple[str, ...], deleted: list[str], missing: list[str], failed: list[str],
    *, fault_point: str | None = None, what: str,
) -> None:
    """Delete every file, sorting each into deleted / already missing / failed (one failure does
    not stop the rest: the step stays pending and the next run retries what failed)."""
    from .. import faults

    if not storage.is_local and len(files) > 1:  # an object store: one request per 1,000 files
        # split in two only where a test stops the run half-way (one request less otherwise)
        half = len(files) // 2 if fault_point and faults.armed(fault_point) else len(files)
        _delete_batch(storage, files[:half], deleted, failed, what)
        if half < len(files):
            faults.point(fault_point)  # tests kill the cleaner here, half-way through
            _delete_batch(storage, files[half:], deleted, failed, what)
        return
    for n, rel in enumerate(files):
        if fault_point and n == len(files) // 2:
            faults.point(fault_point)  # tests kill the cleaner here, half-way through
        try:
            (deleted if storage.delete(rel) else missing).append(rel)
        except OSError as e:
            log.error("%s: could not delete %s (%s); the next cleaner run retries", what, rel, e)
            failed.append(rel)


def _delete_batch(storage: Storage, files: list[str] | tuple[str, ...], deleted: list[str], failed: list[str],
                  what: str) -> None:
    """``files`` in batch deletes (an object store answers alike whether a file was there, so
    none counts as missing); those it could not delete are failed, the next run retries them."""
    from ..errors import DeleteError

    if not files:
        return
    try:
        storage.delete_many(list(files))
        deleted.extend(files)
    except DeleteError as e:
        bad = set(e.paths)
        log.error("%s: could not delete %d files (%s); the next cleaner run retries", what, len(bad), e)
        deleted.extend(f for f in files if f not in bad)
        failed.extend(f for f in files if f in bad)
    except OSError as e:  # no answer: none counts as deleted
        log.error("%s: could not delete %d files (%s); the next cleaner run retries", what, len(files), e)
        failed.extend(files)
