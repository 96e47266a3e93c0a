"""The optimistic transaction of one write: begin (issue a unique instant under the lock,
capture the base), commit (lock, reload, conflict check, fence, complete), abort.

Nothing slow runs under the lock: data files are written between begin and commit. A failed
transaction cannot be reused; a retry starts a new one with a new instant.
"""
from __future__ import annotations

import logging
import os
import socket
import time
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import checkpoint as ckpt
from . import faults, markers
from .conflict import (ConflictResolutionStrategy, CreatedGroupOverlapStrategy, FileGroupOverlapStrategy,
                       find_insert_conflict)
from .errors import (
    CheckpointResetError,
    CommitDecisionLostError,
    CommitStateUnknownError,
    DuplicateBatchError,
    InstantRolledBackError,
    LockLostError,
    MultiWriterError,
    TableFormatError,
    WriteConflictError,
)
from .instant_time import PROCESS_CLOCK, InstantClock
from .lock.base import HolderInfo, TableLock
from .s3_store import REQUESTS
from .schema_resolution import SCHEMA_KEY, commit_schema
from .format import instant as inst
from .table import bootstrap_state, decisions, metadata_files, metadata_table
from .table import timeline as tlmod
from .format.instant import Instant
from .table.metadata import CommitMetadata, decode_records, rollback_target
from .table.merge_config import MergeConfig
from .table.properties import PROPERTIES_FILE
from .table.table import Table
from .table.timeline import Timeline

if TYPE_CHECKING:  # pragma: no cover
    from .heartbeat.client import HeartbeatClient

log = logging.getLogger(__name__)

CHECKPOINT_KEY = ckpt.CHECKPOINT_KEY
WRITER_KEY = "multiwriter.writer_id"


@dataclass
class TxnTimings:
    """Where one transaction spent its time (for metrics and benchmarks)."""

    lock_wait_s: float = 0.0
    lock_hold_s: float = 0.0
    conflict_check_s: float = 0.0
    timeline_io_s: float = 0.0
    lock_holds: list[float] = field(default_factory=list)
    #: the last commit attempt's lock hold (``lock_holds`` has begin's too)
    commit_hold_s: float = 0.0
    #: the commit's lock hold by step (seconds, the successful or last attempt): decision read,
    #: timeline load, checkpoint, conflict, schema, settings, fence, metadata table, decide,
    #: completed file, the next instant begun ahead, release (see :data:`STEPS`)
    steps: dict[str, float] = field(default_factory=dict)

    def step(self, name: str, since: float) -> float:
        """Add the time since ``since`` to step ``name``; returns now."""
        now = time.monotonic()
        self.steps[name] = self.steps.get(name, 0.0) + now - since
        return now


#: the steps of a commit's lock hold, in order (:attr:`TxnTimings.steps`)
STEPS = ("decision_read", "timeline_load", "checkpoint", "conflict", "schema", "settings", "fence",
         "metadata_table", "decide", "completed_file", "begin_next", "release")


class Transaction:
    """One attempt to commit one instant."""

    def __init__(
        self,
        table: Table,
        lock: TableLock,
        *,
        writer_id: str,
        heartbeat: HeartbeatClient | None = None,
        lock_timeout_s: float = 60.0,
        clock: InstantClock = PROCESS_CLOCK,
        strategy: ConflictResolutionStrategy | None = None,
        non_blocking: bool = False,
        allow_missing_columns: bool = True,
    ) -> None:
        self.table = table
        #: False: a batch lacking columns a concurrent commit added is refused at commit
        #: (``WriterConfig.allow_missing_columns``; table services write whole rows)
        self.allow_missing_columns = allow_missing_columns
        #: non-blocking concurrency (Merge-on-Read with a bucket index): only a race to create one
        #: bucket's base file conflicts; overlapping log appends and same new keys never do
        self.non_blocking = non_blocking
        self.lock = lock
        self.writer_id = writer_id
        self.heartbeat = heartbeat
        self.lock_timeout_s = lock_timeout_s
        self.clock = clock
        self.strategy = strategy or (CreatedGroupOverlapStrategy() if non_blocking else FileGroupOverlapStrategy())
        self.instant: Instant | None = None
        self.base: Instant | None = None
        self.base_timeline: Timeline | None = None
        self.timings = TxnTimings()
        self._state = "new"
        #: the newest decision read under the lock at commit (the one ours must follow)
        self._after: decisions.Decision | None = None
        #: the decision this commit created
        self._decided: decisions.Decision | None = None
        #: the metadata of this commit's completed file, once decided
        self._completed_meta: CommitMetadata | None = None
        #: the writer's next instant, begun in this commit's lock hold (``commit(ahead=True)``)
        self.next: Transaction | None = None

    @classmethod
    def resume(cls, table: Table, lock: TableLock, *, instant: Instant, base: Instant | None,
               base_timeline: Timeline, **kwargs: Any) -> Transaction:
        """The transaction of an instant another process began (a streaming write begins on
        Spark's query thread, tasks write, a third process commits). The caller beats the
        heartbeat again before committing; the commit checks it as usual."""
        txn = cls(table, lock, **kwargs)
        txn.instant, txn.base, txn.base_timeline = instant, base, base_timeline
        txn._state = "begun"
        return txn

    # -- lock helpers ------------------------------------------------------------
    def _acquire(self, fenced: bool = False) -> float:
        """``fenced``: a commit's acquire, whose fence probes the lock before it completes."""
        holder = HolderInfo(self.writer_id, socket.gethostname(), os.getpid(), self.instant.requested_time if self.instant else None)
        t0 = time.monotonic()
        self.lock.acquire(timeout_s=self.lock_timeout_s, holder=holder, fenced=fenced)
        t1 = time.monotonic()
        self.timings.lock_wait_s += t1 - t0
        return t1

    def _release(self, since: float) -> None:
        held = time.monotonic() - since
        self.timings.lock_hold_s += held
        self.timings.lock_holds.append(held)
        self.lock.release()

    # -- begin -----------------------------------------------------------------------
    def begin(self, action: str | None = None, requested: bytes = b"", *, at: str | None = None) -> Instant:
        """Issue a unique instant under the lock, start the heartbeat, write ``T.<action>.requested``
        (with ``requested`` as its content: a replace commit's requested metadata). The action
        defaults to the table type's write: ``commit``, or ``deltacommit`` on Merge-on-Read.

        ``at``: a fixed requested time instead of an issued one, a bootstrap's (Hudi's
        ``FULL_BOOTSTRAP_INSTANT_TS``); accepted only while no write has completed. Any other
        writer is refused (BootstrapPendingError) while a bootstrap is unfinished."""
        action = action or (inst.DELTA_COMMIT if self.table.config.merge_on_read else inst.COMMIT)
        if self._state != "new":
            raise MultiWriterError(f"transaction is {self._state}; start a new one to retry")
        self.table.config.check_writable()
        MergeConfig.from_table_config(self.table.config)  # a merge setting no path of ours honours
        since = self._acquire()
        try:
            t0 = time.monotonic()
            self._issue(self.table.timeline(), action, requested, at)
            self.timings.timeline_io_s += time.monotonic() - t0
        finally:
            self._release(since)
        self._state = "begun"
        faults.point("after-requested")
        assert self.instant is not None
        return self.instant

    def _issue(self, tl: Timeline, action: str, requested: bytes = b"", at: str | None = None) -> None:
        """Under the lock, from ``tl`` listed under it: a time above every one there, its
        heartbeat, ``T.<action>.requested``; ``tl`` is the base."""
        bootstrap_state.check_writable(tl, self.table.config, table=self.table.path, ours=at)
        t = self.clock.issue([tl.max_time()]) if at is None else _fixed_time(tl, at)
        if self.heartbeat is not None:
            self.heartbeat.start(t)
        try:
            self.instant = tlmod.create_requested(self.table.storage, self.table.config, t, action, requested)
        except BaseException:
            if self.heartbeat is not None:
                self.heartbeat.stop(t)
            raise
        self.base_timeline = tl
        self.base = tl.last_completed_write()

    def _begin_next(self, tl: Timeline) -> Transaction | None:
        """In this commit's lock hold, right after its completed file: the writer's next
        instant, begun as :meth:`begin` would begin it under a lock of its own (the timeline is
        ``tl`` with this commit completed: nothing else completes while the lock is held). It
        saves the next batch a lock round; None (the next batch begins as usual) when the lock
        is no longer known to be ours or the begin fails."""
        assert self.instant is not None and self._completed_meta is not None
        if not self.lock.is_held():
            return None
        nxt = Transaction(self.table, self.lock, writer_id=self.writer_id, heartbeat=self.heartbeat,
                          lock_timeout_s=self.lock_timeout_s, clock=self.clock, strategy=self.strategy,
                          non_blocking=self.non_blocking, allow_missing_columns=self.allow_missing_columns)
        try:
            nxt._issue(tl.with_completed(self.instant, self._completed_meta), self.instant.action)
            nxt._state = "begun"
            faults.point("after-begin-ahead")
        except Exception as e:  # noqa: BLE001 -- the commit landed; the next batch begins on its own
            log.warning("instant %s: beginning the next instant in its lock hold failed (%s): it begins on its own",
                        self.instant.requested_time, e)
            if nxt.instant is not None:
                try:
                    nxt.abort()  # its requested file and heartbeat go
                except Exception as undo:  # noqa: BLE001 -- the companion job rolls back what is left
                    log.warning("could not give back instant %s: %s", nxt.instant.requested_time, undo)
                nxt.stop_heartbeat()
            return None
        return nxt

    def write_inflight(self, planned: CommitMetadata) -> None:
        assert self.instant is not None
        tlmod.create_inflight(self.table.storage, self.table.config, self.instant.requested_time, self.instant.action, planned.to_bytes())
        self.instant = self.instant.with_state(inst.INFLIGHT)
        faults.point("after-inflight")

    # -- commit ----------------------------------------------------------------------
    @property
    def committed(self) -> bool:
        """True once this instant's completed file exists: from then on nothing of it may be deleted."""
        return self._state == "committed"

    def commit(
        self,
        metadata: CommitMetadata,
        *,
        checkpoint: tuple[str, int] | None = None,
        file_groups: set[tuple[str, str]] | None = None,
        inserted_keys: dict[str, Any] | None = None,
        query_id: str | None = None,
        accept_reset: bool = False,
        ahead: bool = False,
    ) -> Instant:
        """Lock, reload, check conflicts, then the fenced completion step (:meth:`_complete`:
        fence, metadata table, decision, ``<T>_<C>.commit``), unlock.

        ``checkpoint`` (writer id, batch id) sent by the streaming query ``query_id`` is recorded
        in the carried-forward maps (:mod:`checkpoint`); ``accept_reset`` lets a batch id at or
        below the writer's checkpoint from another query land (``on_checkpoint_reset="continue"``).

        Raises WriteConflictError / DuplicateBatchError / CheckpointResetError / fence errors when
        the commit did not land, CommitStateUnknownError when it may have. Once the completed file exists the
        transaction counts as committed whatever happens next (a failing unlock, an interrupt):
        :meth:`abort` then refuses, so a landed commit never loses its files.

        ``ahead``: also begin this writer's next instant in the same lock hold, after the
        completed file (:meth:`_begin_next`), unless this commit rewrote file groups (an
        optimistic writer's updates); it is left in :attr:`next`.
        """
        assert self.instant is not None and self._state == "begun"
        t = self.instant.requested_time
        ours = file_groups if file_groups is not None else _updated_groups(metadata)
        if self.non_blocking:
            ours, inserted_keys = _created_groups(metadata), None
        metadata.extra_metadata[WRITER_KEY] = self.writer_id
        base_ct = (self.base.completion_time or self.base.requested_time) if self.base else None
        # The same-new-key check reads Parquet key columns: do it outside the lock against what
        # completed so far, and under the lock only for what completed after this look.
        pre_checked: set[str] = set()
        if inserted_keys:
            t0 = time.monotonic()
            pre_tl = self.table.timeline()
            pre_checked = {i.requested_time for i in pre_tl.completed_after(base_ct)}
            conflict = find_insert_conflict(pre_tl, base_ct, t, inserted_keys)
            self.timings.conflict_check_s += time.monotonic() - t0
            if conflict is not None:
                raise self._conflict_error(conflict)
        # every writer's checkpoint as of our base: read outside the lock; under it only the
        # commits completed since are added (see _checkpoints)
        carried = ckpt.carried_entries(self.base_timeline) if checkpoint is not None and self.base_timeline else {}
        # under the lock nothing is written before the fence but idempotent repairs (the
        # roll-forward of a decision, final whoever writes it; metadata partitions we do not
        # maintain dropped from the settings), so the fence's probe alone confirms the lock
        since = self._acquire(fenced=True)
        steps = self.timings
        steps.steps = {}
        settings_ahead = ExitStack()
        try:
            faults.point("after-lock-acquired")
            settings_ahead.enter_context(self._settings_read_ahead())
            listed: list[metadata_files.ReadAhead | None] = [None]

            def list_metadata_table() -> None:  # not before the decision log's listing: see read_ahead
                listed[0] = metadata_files.read_ahead(self.table.storage, self.table.config)

            t0 = time.monotonic()
            loaded = [0.0]

            def load() -> Timeline:
                l0 = time.monotonic()
                try:
                    return self.table.timeline()
                finally:
                    loaded[0] += time.monotonic() - l0

            self._after, tl = decisions.settle(self._decisions(), load, list_metadata_table)
            mdt_ahead = listed[0]
            t1 = time.monotonic()
            self.timings.timeline_io_s += t1 - t0
            steps.steps["timeline_load"] = loaded[0]
            steps.steps["decision_read"] = t1 - t0 - loaded[0]
            if checkpoint is not None:
                entry = ckpt.Checkpoint(checkpoint[1], query_id)
                _check_duplicate(tl, base_ct, checkpoint[0], entry, accept_reset, carried)
                metadata.extra_metadata.update(ckpt.encode(_checkpoints(carried, tl, base_ct, checkpoint[0], entry)))
            t1 = steps.step("checkpoint", t1)
            conflict = self.strategy.find_conflict(tl, base_ct, t, ours)
            if conflict is None and inserted_keys:
                conflict = find_insert_conflict(tl, base_ct, t, inserted_keys, skip=pre_checked)
            self.timings.conflict_check_s += time.monotonic() - t1
            t1 = steps.step("conflict", t1)
            if conflict is not None:
                raise self._conflict_error(conflict)
            self._reconcile_schema(tl, base_ct, metadata)
            t1 = steps.step("schema", t1)
            self._check_table_settings()
            settings_ahead.close()
            steps.step("settings", t1)
            faults.point("before-complete")
            t2 = time.monotonic()
            self._complete(tl, metadata, mdt_ahead)
            self.timings.timeline_io_s += time.monotonic() - t2
            faults.point("after-complete")
            # not after rewriting file groups another writer may be rewriting too: its next batch
            # would begin before the loser's retry, again and again, and win every race
            if ahead and (self.non_blocking or not ours):
                t2 = time.monotonic()
                self.next = self._begin_next(tl)
                steps.step("begin_next", t2)
        finally:
            settings_ahead.close()
            try:
                t3 = time.monotonic()
                self._release(since)
                steps.step("release", t3)
                steps.commit_hold_s = steps.lock_holds[-1]
            except Exception as e:
                if not self.committed:
                    raise
                log.warning("instant %s committed, but releasing the table lock failed: %s", t, e)
            if self.committed:
                self._finish()
                if self._decided is not None:  # old decisions are garbage: deleted after the lock
                    self._decisions().prune_due(self._decided.seq)
        return self.instant

    def _conflict_error(self, conflict: Any) -> WriteConflictError:
        assert self.instant is not None
        t = self.instant.requested_time
        groups = sorted(conflict.file_groups)
        who = f" by writer {conflict.winner_writer!r}" if conflict.winner_writer else ""
        return WriteConflictError(
            f"instant {t} of writer {self.writer_id!r} conflicts with instant "
            f"{conflict.winner.requested_time} (completed {conflict.winner.completion_time}){who} "
            f"on file groups {groups[:5]}{' ...' if len(groups) > 5 else ''}; the first committer "
            "wins: retry the batch (the sink does this) or make the writers touch disjoint data",
            instant=t,
            winner=conflict.winner.requested_time,
            file_groups=groups,
        )

    def _reconcile_schema(self, tl: Timeline, base_ct: str | None, metadata: CommitMetadata) -> None:
        """Record the table schema evolved by commits since our base (never a regressed one),
        or raise SchemaMismatchError when our schema contradicts theirs (schema_resolution)."""
        assert self.instant is not None and self.base_timeline is not None
        t0 = time.monotonic()
        schema = commit_schema(self.table, self.base_timeline, tl, base_ct, self.instant.requested_time,
                               self.writer_id, metadata.extra_metadata.get(SCHEMA_KEY),
                               allow_missing=self.allow_missing_columns)
        if schema is not None:
            metadata.extra_metadata[SCHEMA_KEY] = schema
        self.timings.conflict_check_s += time.monotonic() - t0

    def _settings_read_ahead(self) -> AbstractContextManager[None]:
        """On an object store the settings are read under the lock on every commit: their GET
        goes out as the lock is taken, beside the decision log's and the timeline's listings,
        and :meth:`_check_table_settings` takes its answer (a local disk checks a stamp)."""
        storage = self.table.storage
        if not storage.is_s3:
            return nullcontext()
        return storage.read_ahead([(PROPERTIES_FILE, 0)])

    def _check_table_settings(self) -> None:
        """Under the lock: the table's settings as written now, with the metadata partitions we
        do not maintain dropped (:mod:`.table.metadata_table`). On a local disk the file is read
        only when it changed since the last check (its inode, size, mtime and ctime, which any
        rewrite, Hudi's backup-and-replace among them, changes); an object store reads it. A Hudi 1.1 writer sharing the
        table upgrades it from version 8 to 9 on its first write; what we wrote stays valid (the
        record-key format is fixed when a table is created), so we go on with the new settings,
        unless they are ones we do not write (refused by name, the commit does not land)."""
        ours = self.table.config
        stamp = _properties_stamp(self.table.storage)
        if stamp is not None and _SETTINGS_SEEN.get(self.table.storage.uri) == (stamp, ours.raw):
            return  # the file is the one whose settings we checked: same inode, size and times
        now = self.table.read_config()
        if metadata_table.drop_unmaintained(self.table.storage, current=now.raw):
            now = self.table.read_config()
            stamp = _properties_stamp(self.table.storage)
        if now.raw == ours.raw:
            if stamp is not None:
                _SETTINGS_SEEN[self.table.storage.uri] = (stamp, dict(ours.raw))
            return
        now.check_writable()
        MergeConfig.from_table_config(now)
        self.table.config = now
        if now.version != ours.version:
            log.info("table %s is now version %d (was %d): going on with its settings", self.table.path,
                     now.version, ours.version)

    def _decisions(self) -> decisions.DecisionLog:
        return decisions.DecisionLog(self.table.storage, self.table.config)

    def _complete(self, tl: Timeline, metadata: CommitMetadata,
                  mdt_ahead: metadata_files.ReadAhead | None = None) -> None:
        """The completion step: fence, metadata-table deltacommit, the decision, the completed
        file.

        A writer may pause anywhere (GC, a frozen VM) and its lock session expire meanwhile;
        another holder may then complete, with a clock running ahead. The fence (lock session
        probed on the server, instant still pending, heartbeat without a gap) refuses most such
        commits early. The probe comes after ``tl`` was listed under the lock, so it also stands
        for a second listing: every completer, Hudi's JVM writers among them, completes under
        the lock, so a completion that appeared since ``tl`` means the lock passed on, which the
        probe finds (the lock node gone with its session, the lease object replaced). What decides is the creation of the next
        decision (:mod:`.table.decisions`) after the one read under the lock: a writer frozen
        past its lock finds it taken and never writes its completed file. Once decided, the
        commit is final: if this writer freezes or dies before its completed file, the next
        completer rolls it forward. The completion time is issued above every time seen, so it
        is never below one a consumer may already have read."""
        assert self.instant is not None
        t, action = self.instant.requested_time, self.instant.action
        steps = self.timings
        t0 = time.monotonic()
        self._fence(tl)
        t0 = steps.step("fence", t0)
        faults.point("before-completed-file")
        floor = [tl.max_time(), t] + ([self._after.completion] if self._after and self._after.completion else [])
        completion = self.clock.issue(floor)
        data = metadata.to_bytes()
        upkeep = metadata_files.on_completed(self.table.storage, self.table.config, t, completion, action, data,
                                             metadata, mdt_ahead)
        t0 = steps.step("metadata_table", t0)
        self._state = "deciding"
        try:
            self._decided = self._decisions().decide(self._after, decisions.Decision(
                decisions.COMPLETE, t, action, self.writer_id, completion=completion, data=data), prune=False)
        except CommitDecisionLostError:
            self._state = "begun"  # not decided: nothing of it can become visible
            raise
        except OSError as e:  # the create provably did not land (create_exclusive read it back)
            self._state = "begun"
            raise MultiWriterError(f"deciding the completion of instant {t} failed before it was decided: {e}") from e
        except Exception as e:
            raise CommitStateUnknownError(f"deciding the completion of instant {t} ended without an answer ({e}); "
                                          "re-read the decision log and the timeline before retrying", instant=t) from e
        self._state = "committed"
        self._completed_meta = metadata
        t0 = steps.step("decide", t0)
        self.instant = Instant(t, action, inst.COMPLETED, completion)
        faults.point("after-decision")
        decisions.write_completed(self.table.storage, self.table.config, t, completion, action, data)
        t0 = steps.step("completed_file", t0)
        decisions.after_decided(self.table.storage, self.table.config, upkeep, t)
        steps.step("metadata_upkeep", t0)

    def _fence(self, tl: Timeline) -> None:
        """Immediately before completing: lock ours, instant alive, heartbeat fresh."""
        assert self.instant is not None
        t = self.instant.requested_time
        self.lock.check()
        if not self.lock.is_held():
            raise LockLostError(f"table lock of {self.table.table_id} is no longer held by instant {t}; not committing")
        own = tl.find(t, self.instant.action)
        if own is None or not own.is_pending:
            raise InstantRolledBackError(
                f"instant {t} is no longer pending on the timeline (state: {own.state if own else 'gone'}); "
                "the cleaner rolled it back, so this writer must not commit: the batch will be retried"
            )
        # a bootstrap's fixed time may have been rolled back before this attempt began: those
        # rollbacks (completed when it began) are of an earlier attempt
        earlier = _completed_rollbacks(self.base_timeline) if t in inst.BOOTSTRAP_TIMES and self.base_timeline else set()
        if rollback_targets(tl, newer_than=t, skip=earlier) & {t}:
            raise InstantRolledBackError(f"a rollback targets instant {t}; not committing")
        if self.heartbeat is not None:
            self.heartbeat.check(t)

    def resolve_unknown(self) -> bool:
        """After ``CommitStateUnknownError``: re-read the timeline and learn whether our completed
        instant landed (True: this transaction is committed; False: it provably did not, and
        :meth:`abort` may undo it). Raises CommitStateUnknownError when the timeline cannot be read."""
        assert self.instant is not None
        t = self.instant.requested_time
        try:
            _, tl = decisions.settle(self._decisions(), self.table.timeline)  # rolls ours forward if decided
            own = tl.find(t, self.instant.action)
        except (OSError, MultiWriterError) as e:
            raise CommitStateUnknownError(
                f"cannot re-read the timeline to learn whether instant {t} landed ({e}); its files are kept: "
                "the cleaner rolls it back if it did not land", instant=t) from e
        if own is not None and own.is_completed:
            self._state = "committed"
            self.instant = own
            self._finish()
            return True
        self._state = "begun"
        return False

    def _finish(self) -> None:
        """After the commit: its heartbeat and markers go. On an object store the two deletes
        go out side by side (they depend on each other in nothing: the instant is complete)."""
        assert self.instant is not None
        t = self.instant.requested_time
        beside = REQUESTS.get().submit(self._delete_markers, t) if self.table.storage.is_s3 else None
        try:
            if self.heartbeat is not None:
                self.heartbeat.stop(t)
        finally:
            if beside is None:
                self._delete_markers(t)
            else:
                beside.result()

    def _delete_markers(self, t: str) -> None:
        try:
            markers.delete_committed(self.table.storage, t)
        except OSError as e:  # markers of a completed instant are garbage, not state
            log.warning("could not delete markers of %s: %s", t, e)

    def stop_heartbeat(self) -> None:
        """Stop beating for this instant whatever its state (every exit path calls this): a
        leaked heartbeat would keep a dead attempt looking alive and pin archival."""
        if self.heartbeat is not None and self.instant is not None:
            self.heartbeat.stop(self.instant.requested_time)

    # -- abort -----------------------------------------------------------------------
    def abort(self) -> list[str]:
        """Undo an attempt that provably did not land: roll back its metadata-table deltacommit,
        delete its files (from markers), then its markers and pending instant files.

        Refuses (returns nothing, deletes nothing) unless the transaction is begun and not
        completed; before deleting it also checks the timeline, so even a caller that lost track
        cannot delete the files of a landed commit.
        """
        if self.instant is None or self._state != "begun":
            if self._state in ("deciding", "committed"):
                log.warning("not aborting instant %s: it is %s", self.instant.requested_time if self.instant else None, self._state)
            self.stop_heartbeat()
            return []
        t = self.instant.requested_time
        if decisions.is_decided(self.table.storage, self.table.config, t, self.table.timeline()):
            log.error("instant %s is completed (or decided); refusing to delete its files", t)
            self._state = "committed"
            self.stop_heartbeat()
            return []
        # its metadata-table deltacommit first (Hudi's way: rolled back there), while the instant
        # is still pending, so no metadata compaction absorbs it and no listing names a file
        # about to be deleted
        metadata_files.rollback_deltacommit(self.table.storage, self.table.config, t)
        deleted = markers.delete_files(self.table.storage, t)
        markers.delete_dir(self.table.storage, t)
        tlmod.delete_pending(self.table.storage, self.table.config, t, self.instant.action)
        self.stop_heartbeat()
        self._state = "aborted"
        log.info("aborted instant %s of writer %s: deleted %d files", t, self.writer_id, len(deleted))
        return deleted


#: per table on a local disk: (stamp of hoodie.properties, its settings) last checked equal to ours
_SETTINGS_SEEN: dict[str, tuple[tuple[int, ...], dict[str, str]]] = {}


def _properties_stamp(storage: Any) -> tuple[int, ...] | None:
    """``hoodie.properties``' inode, size, mtime and ctime on a local disk (None elsewhere, or
    when it is missing: the properties are then read)."""
    if not storage.is_local:
        return None
    try:
        st = os.stat(storage.abs(PROPERTIES_FILE))
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _created_groups(meta: CommitMetadata) -> set[tuple[str, str]]:
    """File groups this commit creates (a bucket's first base file): two writers creating one
    bucket at once would leave two bases of one group, the later hiding the other's rows."""
    return {(s.partition_path, s.file_id) for s in meta.all_stats() if s.creates_file_group}


def _updated_groups(meta: CommitMetadata) -> set[tuple[str, str]]:
    """File groups this commit rewrote (prevCommit set); brand-new groups cannot conflict."""
    return {(s.partition_path, s.file_id) for s in meta.all_stats() if not s.creates_file_group}


def _checkpoints(carried: dict[str, ckpt.Checkpoint], tl: Timeline, base_ct: str | None, writer: str,
                 ours: ckpt.Checkpoint) -> dict[str, ckpt.Checkpoint]:
    """Every writer's checkpoint carried forward (see :mod:`checkpoint`): ``carried`` as of our
    base, the commits completed since on top in completion order (the newer map wins: a writer
    accepted after a checkpoint reset goes back to lower batch ids), ours last."""
    out = dict(carried)
    for i in tl.completed_after(base_ct):
        if i.action in inst.WRITE_ACTIONS:
            out.update(ckpt.entries(tl.commit_metadata(i)))
    out[writer] = ours
    return out


def _check_duplicate(tl: Timeline, base_ct: str | None, writer: str, ours: ckpt.Checkpoint, accept_reset: bool,
                     carried: dict[str, ckpt.Checkpoint]) -> None:
    """A commit already holds this batch: a duplicate when it came from our query, a checkpoint
    reset when from another (refused unless accepted). Two places name such a commit: the
    commits completed since our base, and ``carried``, every writer's checkpoint as of our base.
    The second is needed: a decided commit rolled forward by another completer after this
    writer last read its checkpoint, but before its base was loaded, completed below the base's
    completion time, so only the checkpoint carried to the base still names it."""
    found: list[tuple[ckpt.Checkpoint, str]] = []
    if (got := carried.get(writer)) is not None:
        found.append((got, "the checkpoint carried to this commit's base"))
    for i in tl.completed_after(base_ct):
        if i.action in inst.WRITE_ACTIONS and (got := ckpt.entries(tl.commit_metadata(i)).get(writer)) is not None:
            found.append((got, f"instant {i.requested_time}"))
    for got, where in found:
        if not got.covers(ours.batch_id):
            continue
        if not got.reset_by(ours.batch_id, ours.query_id):
            raise DuplicateBatchError(f"batch {ours.batch_id} of writer {writer!r} was already committed ({where})")
        if not accept_reset:
            raise reset_error(writer, ours, got)


def reset_error(writer: str, ours: ckpt.Checkpoint, last: ckpt.Checkpoint) -> CheckpointResetError:
    """The typed error of a checkpoint reset, saying what happened and the two ways forward."""
    assert ours.query_id is not None and last.query_id is not None
    return CheckpointResetError(
        f"writer id {writer!r} got batch {ours.batch_id} from streaming query {ours.query_id}, but its checkpoint "
        f"on the table is batch {last.batch_id} of query {last.query_id}: the query was redeployed with a new "
        "checkpoint location (its batch ids start again from 0), so this is not a replay and skipping it would "
        "drop its rows. Nothing of the batch was written. Either give the new query a new writer id, or accept it "
        "under this one with WriterConfig(on_checkpoint_reset=\"continue\") (its batches are then written from 0)",
        writer_id=writer, batch_id=ours.batch_id, last_batch_id=last.batch_id,
        query_id=ours.query_id, last_query_id=last.query_id,
    )


def last_checkpoint(table: Table, writer_id: str, timeline: Timeline | None = None) -> int | None:
    """The newest batch id this writer committed."""
    return ckpt.last(timeline or table.timeline(), writer_id)


def last_checkpoint_entry(table: Table, writer_id: str, timeline: Timeline | None = None) -> ckpt.Checkpoint | None:
    """The newest batch id this writer committed, with the query that sent it."""
    return ckpt.last_entry(timeline or table.timeline(), writer_id)


def _fixed_time(tl: Timeline, at: str) -> str:
    """``at`` as this instant's time: only a bootstrap's, and only as the table's first write."""
    if at not in inst.BOOTSTRAP_TIMES:
        raise MultiWriterError(f"instant time {at} is not a bootstrap's ({sorted(inst.BOOTSTRAP_TIMES)}); "
                               "writers issue their own times")
    done = tl.last_completed_write()
    if done is not None and not (at == inst.FULL_BOOTSTRAP_TIME and bootstrap_state.full_record_follows(tl, tl.config)):
        raise MultiWriterError(f"cannot begin bootstrap instant {at}: instant {done.requested_time} already completed "
                               "(a bootstrap must be the table's first write: bootstrap into a new path)")
    return at


def _completed_rollbacks(tl: Timeline) -> set[str]:
    return {i.requested_time for i in tl.latest_states() if i.action == inst.ROLLBACK and i.is_completed}


def rollback_targets(tl: Timeline, newer_than: str | None = None, skip: set[str] | frozenset[str] = frozenset()) -> set[str]:
    """Requested times targeted by rollback instants (any state, but those whose times are in
    ``skip``), read from their plans/metadata."""
    out: set[str] = set()
    for i in tl.latest_states():
        if i.action != inst.ROLLBACK or (newer_than and i.requested_time <= newer_than) or i.requested_time in skip:
            continue
        target = _rollback_target(tl, i)
        if target:
            out.add(target)
    return out


def _rollback_target(tl: Timeline, i: Instant) -> str | None:
    rel = tl.path_of(i)
    candidates = [rel]
    if i.is_completed or i.state == inst.INFLIGHT:
        candidates.append(f"{tl.config.timeline_dir}/{Instant(i.requested_time, inst.ROLLBACK, inst.REQUESTED).file_name()}")
    for path in candidates:
        try:
            data = tl.storage.read_bytes(path)
        except FileNotFoundError:
            continue
        if not data:
            continue
        try:
            rec = decode_records(data, source=path)[0]
        except (TableFormatError, IndexError):
            continue
        target = rollback_target(rec)
        if target:
            return target
    return None



def covering_rollback_targets(tl: Timeline, t: str) -> set[str]:
    """The targets of rollbacks that cover a pending instant ``t``: every rollback's, but for a
    bootstrap's fixed time, which a rerun reuses after an earlier attempt was rolled back, only
    pending rollbacks' (a completed one removed the earlier attempt's pending files before it
    completed, so the pending instant now is a later attempt)."""
    if t in inst.BOOTSTRAP_TIMES:
        return rollback_targets(tl, skip=_completed_rollbacks(tl))
    return rollback_targets(tl)
