"""``Writer``: one writer's protocol loop, shared by ``mw.write`` (batch jobs) and the sink.

Per batch: validate (typed errors before anything is written) -> begin (unique instant,
heartbeat) -> index against the base snapshot -> plan -> inflight -> merge -> commit (lock,
conflict check, fence). A conflict or lock timeout deletes this attempt's files and retries
with a new instant and a fresh index, with exponential backoff and jitter.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import random
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from .. import faults, markers
from .ahead import AheadInstant, give_back
from ..config import WriterConfig
from ..errors import (
    CommitNotLandedError,
    CommitStateUnknownError,
    LockAcquireTimeout,
    MultiWriterError,
    WriteConflictError,
)
from ..heartbeat.client import HeartbeatClient
from ..lock.base import check_table_lock
from ..metrics import Metrics
from ..metrics import default as default_metrics
from ..redact import redact
from ..result import CommitResult
from ..format.instant import DELTA_COMMIT, REPLACE_COMMIT, WRITE_ACTIONS, Instant
from ..table.metadata import CommitMetadata, WriteStat
from ..format.schema import arrow_to_avro_json, check_compatible, data_schema
from ..table.snapshot import Snapshot
from ..table import metadata_record_index
from ..table.table import Table
from ..errors import ConfigError, DuplicateBatchError
from ..checkpoint import Checkpoint
from ..transaction import Transaction, last_checkpoint_entry, reset_error
from . import bloom, claims, guard, overwrite
from . import spark as spark_path
from .executor import MergedInserts, OldReads, run_on_driver, start_gather
from .index import KeyIndex
from .log_append import rebase_as_log
from .merge import context
from .plan import OPERATION_TYPES, plan_batch, planned_metadata
from .records import KEY, prepare, record_keys

log = logging.getLogger(__name__)
#: a non-blocking commit that found buckets created meanwhile rebases them and tries again
MAX_REBASES = 3


class Writer:
    """Holds one lock connection and one heartbeat client for the life of a writer."""

    def __init__(self, table: Table, config: WriterConfig, *, metrics: Metrics | None = None) -> None:
        self.table = table
        self.config = config
        self.metrics = metrics or default_metrics()
        assert config.lock is not None  # WriterConfig refuses a missing lock
        check_table_lock(table.config.raw, config.lock, table=redact(table.path))
        self.lock = config.lock.for_table(table.table_id, table.storage)
        self.heartbeat = HeartbeatClient(
            table.storage,
            writer_id=config.writer_id,
            interval_s=config.heartbeat_interval_s,
            tolerable_misses=config.heartbeat_tolerable_misses,
            on_beat=lambda age: self.metrics.heartbeat_age(table.name, config.writer_id, age),
            on_failure=lambda exc: self.metrics.heartbeat_failure(table.name, config.writer_id),
        )
        self.index = KeyIndex(table.storage)  # footers of files seen so far, kept across batches
        self.non_blocking = config.concurrency_for(table.config) == "non_blocking"
        self._checkpoint: Checkpoint | None = None
        self._checkpoint_loaded = False
        self._rng = random.Random()
        #: the next instant, begun in the last commit's lock hold (``config.begin_ahead_s``)
        self._ahead = AheadInstant(config.begin_ahead_s) if config.begin_ahead_s > 0 else None
        #: the others' claims on file groups (:mod:`.claims`); ours while this batch retries a lost race
        self._claims = claims.ClaimBoard(table, config.writer_id)
        self._lost: tuple[frozenset[tuple[str, str]], float] | None = None
        #: seconds this batch waited for others' claims, over its attempts
        self._claim_wait = 0.0

    # -- public -------------------------------------------------------------------------
    def last_checkpoint(self) -> int | None:
        """This writer's last committed batch id (cached after the first look)."""
        entry = self.last_checkpoint_entry()
        return None if entry is None else entry.batch_id

    def last_checkpoint_entry(self) -> Checkpoint | None:
        """This writer's last committed batch id and the query that sent it (cached)."""
        if not self._checkpoint_loaded:
            self._checkpoint = last_checkpoint_entry(self.table, self.config.writer_id)
            self._checkpoint_loaded = True
        return self._checkpoint

    def write(self, data: Any, batch_id: int | None = None, *, extra_metadata: dict[str, str] | None = None,
              query_id: str | None = None, instant_time: str | None = None) -> CommitResult:
        """Commit ``data`` as one instant (``extra_metadata``: added to the commit's extraMetadata;
        ``instant_time``: a bootstrap's fixed time, :func:`multiwriter.write.bootstrap.bootstrap`).

        ``batch_id`` with ``query_id`` (else ``config.query_id``): a batch id the checkpoint
        covers is skipped when the same query sent it (a replay) and raises
        CheckpointResetError when another did, unless ``config.on_checkpoint_reset`` is
        "continue"."""
        started = time.monotonic()
        name, wid = self.table.name, self.config.writer_id
        query_id = query_id or self.config.query_id
        if batch_id is not None and self._is_replay(batch_id, query_id):
            self.metrics.commit(name, wid, "skipped")
            return CommitResult(None, skipped=True, batch_id=batch_id)
        batch = _Batch.of(data, self.table, self.config)
        replacing = overwrite.is_overwrite(self.config.operation)
        if batch.empty and not replacing:  # an empty overwrite still empties the table
            return CommitResult(None, batch_id=batch_id, duration_s=time.monotonic() - started)
        attempts = conflicts = 0
        self._claim_wait = 0.0  # over every attempt of this batch
        while True:
            attempts += 1
            txn = self._begun_ahead(replacing or instant_time is not None) or Transaction(
                self.table, self.lock, writer_id=wid, heartbeat=self.heartbeat, lock_timeout_s=self.config.lock_timeout_s,
                non_blocking=self.non_blocking,
                allow_missing_columns=self.config.allow_missing_columns or self.config.partial_update,
                strategy=overwrite.OverwriteConflictStrategy() if replacing else None)
            try:
                result = self._attempt(txn, batch, batch_id, attempts, conflicts, started, extra_metadata, query_id,
                                       at=instant_time)
            except DuplicateBatchError as e:
                txn.abort()
                log.info("writer %s: %s; skipping", wid, e)
                self._checkpoint, self._checkpoint_loaded = Checkpoint(batch_id, query_id), True
                self.metrics.commit(name, wid, "skipped")
                return CommitResult(None, skipped=True, attempts=attempts, batch_id=batch_id)
            except (WriteConflictError, LockAcquireTimeout, CommitNotLandedError) as e:
                txn.abort()
                if isinstance(e, WriteConflictError) and e.file_groups:
                    self._lose(e.file_groups)
                conflicts += isinstance(e, WriteConflictError)
                self.metrics.commit(name, wid, "conflict" if isinstance(e, WriteConflictError) else "failed")
                if attempts > self.config.max_conflict_retries:
                    self._drop_claim()
                    raise _gave_up(e, attempts, self.config.max_conflict_retries) from e
                log.warning("writer %s attempt %d: %s; retrying with a new instant", wid, attempts, e)
                self.metrics.retry(name, wid)
                time.sleep(self._backoff(attempts))
                continue
            except BaseException:
                self._after_failure(txn, batch_id, query_id)
                raise
            self._after_commit(result, txn, query_id)
            self._drop_claim()
            if self._ahead is not None:
                self._ahead.keep(txn.next)
            return result

    def _lose(self, groups: list) -> None:
        """This batch lost a race on ``groups``: its retry claims them (:mod:`.claims`)."""
        lost = frozenset((str(p), str(f)) for p, f in groups)
        self._lost = (lost | self._lost[0], self._lost[1]) if self._lost else (lost, time.time())

    def _drop_claim(self) -> None:
        if self._lost is not None:
            self._lost = None
            claims.drop(self.table.storage, self.config.writer_id)

    def _begun_ahead(self, refused: bool) -> Transaction | None:
        """The instant begun in the last commit's hold, for this batch; ``refused``: this
        batch needs an instant of its own (an overwrite's replacecommit, a fixed time), and
        the one begun ahead is given back."""
        if self._ahead is None:
            return None
        if refused:
            self._ahead.drop("this batch needs an instant of its own")
            return None
        txn = self._ahead.take()
        if txn is not None:
            faults.point("after-requested")
        return txn

    def _is_replay(self, batch_id: int, query_id: str | None) -> bool:
        """Is this batch already committed (skip it)? Raises CheckpointResetError when the
        checkpoint covers it but another query sent it, unless resets are accepted."""
        wid = self.config.writer_id
        last = self.last_checkpoint_entry()
        if last is None or not last.covers(batch_id):
            return False
        if not last.reset_by(batch_id, query_id):
            log.info("writer %s: batch %s already committed (checkpoint %s); skipping", wid, batch_id, last.batch_id)
            return True
        assert query_id is not None
        if self.config.on_checkpoint_reset != "continue":
            raise reset_error(wid, Checkpoint(batch_id, query_id), last)
        log.warning("writer %s: batch %s of query %s is below the checkpoint (batch %s of query %s): a checkpoint "
                    "reset, accepted (on_checkpoint_reset=continue); writing it", wid, batch_id, query_id,
                    last.batch_id, last.query_id)
        return False

    def _after_failure(self, txn: Transaction, batch_id: int | None, query_id: str | None) -> None:
        """Any other exit: undo the attempt unless it landed (``abort`` refuses a committed or
        possibly-committed transaction), and never leave its heartbeat beating."""
        name, wid = self.table.name, self.config.writer_id
        try:
            if txn.committed:
                # the completed instant exists: the batch is durable, whatever failed after it
                self.metrics.commit(name, wid, "committed")
                if batch_id is not None:
                    self._checkpoint, self._checkpoint_loaded = Checkpoint(batch_id, query_id), True
                log.warning("writer %s: instant %s committed, then the write raised; its data stays", wid,
                            txn.instant.requested_time if txn.instant else None)
            else:
                self.metrics.commit(name, wid, "failed")
                txn.abort()
        except Exception as cleanup:  # noqa: BLE001 -- any cleanup failure must not mask the original error
            log.warning("writer %s: cleanup after failure also failed: %s", wid, cleanup)
        finally:
            txn.stop_heartbeat()
            if txn.next is not None:  # begun ahead by a commit that then raised
                give_back(txn.next, "its commit raised")
            self._drop_claim()

    def close(self) -> None:
        self._drop_claim()
        if self._ahead is not None:
            self._ahead.drop()
        self.heartbeat.close()
        self.lock.close()

    # -- internals -------------------------------------------------------------------------
    def _backoff(self, attempt: int) -> float:
        cap = min(self.config.retry_backoff_max_s, self.config.retry_backoff_s * (2 ** (attempt - 1)))
        return self._rng.uniform(cap / 2, cap) if cap > 0 else 0.0

    def _attempt(self, txn: Transaction, batch: _Batch, batch_id: int | None, attempts: int, conflicts: int, started: float,
                 extra_metadata: dict[str, str] | None = None, query_id: str | None = None,
                 at: str | None = None) -> CommitResult:
        name = self.table.name
        phases: dict[str, float] = {}
        replacing = overwrite.is_overwrite(self.config.operation)
        replaced: set[tuple[str, str]] = set()
        if txn.instant is not None:
            pass  # begun in the last commit's lock hold
        elif replacing:
            txn.begin(REPLACE_COMMIT, overwrite.requested_metadata())
        else:
            txn.begin(at=at)
        assert txn.instant is not None and txn.base_timeline is not None
        t = txn.instant.requested_time
        tl = txn.base_timeline
        if self._lost is not None:  # a retry of a lost race claims its groups for this instant
            claims.put(self.table.storage, claims.Claim(self.config.writer_id, self._lost[0], self._lost[1], t))
        schema = batch.evolved_schema(self.table.schema(tl))
        ctx = context(self.table.storage.uri, t, schema, self.table.config.ordering_field, len(self.table.config.partition_by) or 1,
                      tuple(self.table.config.record_key), log_append=self.table.config.merge_on_read, config=self.table.config)
        if self.config.partial_update:
            ctx = dataclasses.replace(ctx, keep_columns=tuple(n for n in data_schema(schema).names if n not in batch.schema.names))
        if replacing:  # the pre-write check looks for this instant's pending replacecommit files
            ctx = dataclasses.replace(ctx, pending_files=guard.pending_files(self.table.config, t, REPLACE_COMMIT))
        t0 = time.monotonic()
        if batch.spark_df is not None:
            if self.config.update_partition_path and metadata_record_index.kept_by(self.table.config):
                raise ConfigError(
                    f"update_partition_path=True (hoodie.record.index.update.partition.path) with a Spark DataFrame on "
                    f"{self.table.name}: a key moving partitions is written by the driver path only; pass a pyarrow "
                    "table, or keep the default (the record updates the stored one where it is)")
            stats, inserted = spark_path.run_on_executors(
                batch.spark_df, self.table, ctx, tl, operation=self.config.operation,
                target_file_size=self.config.target_file_size_bytes, on_planned=txn.write_inflight, index=self.index,
                small_file_limit=self.config.small_file_limit_bytes,
            )
            phases["index"] = 0.0
        else:
            prepared, hashes = batch.prepare_for(schema, self.table.config)
            # Copy-on-Write: old files read while tagging, inserted keys as the merges found them
            cow_upsert = not (replacing or self.table.config.merge_on_read)
            old_reads = OldReads(self.table.storage) if cow_upsert else None
            merged_inserts = MergedInserts() if cow_upsert else None
            if replacing:  # every record goes to a new base file; the live groups it leaves out are retired
                plan, replaced = overwrite.plan_overwrite(prepared, Snapshot.build(self.table.storage, tl), self.table.config,
                                                          target_file_size=self.config.target_file_size_bytes)
            else:
                plan = plan_batch(prepared, tl, self.index, self.config.operation, self.config.target_file_size_bytes,
                                  hashes=hashes, small_file_limit=self.config.small_file_limit_bytes,
                                  confirm_keys=False, on_found=old_reads.start if old_reads is not None else None,
                                  update_partition_path=self.config.update_partition_path)
            phases["index"] = time.monotonic() - t0
            start_gather(plan)  # the rows by task, on the merge threads while the inflight file is written
            planned = planned_metadata(plan.tasks, self.config.operation)
            txn.write_inflight(overwrite.replace_metadata(planned, replaced) if replacing else planned)
            stats = run_on_driver(self.table.storage, ctx, plan, self.table.config, on_footer=self.index.remember_written,
                                  list_markers=True, on_inserted=merged_inserts, old_reads=old_reads)
            if replacing:
                inserted = None
            else:
                inserted = merged_inserts.by_partition() if merged_inserts is not None else plan.inserted_keys()
        phases["write"] = time.monotonic() - t0 - phases["index"]
        faults.point("after-data-files")
        meta = commit_metadata(stats, schema, name, self.config.operation, extra_metadata)
        if replacing:
            meta = overwrite.replace_metadata(meta, replaced)
        markers.reconcile(self.table.storage, t, [p for s in stats for p in s.written])  # extra files of retried tasks
        t1 = time.monotonic()
        rewritten = set() if self.non_blocking else {(s.partition_path, s.file_id) for s in meta.all_stats()
                                                      if not s.creates_file_group}
        others = any(i.requested_time != t for i in tl.pending(WRITE_ACTIONS))
        self._claim_wait += self._claims.wait_for_older(rewritten, self._lost[1] if self._lost else math.inf,
                                                        self.config.heartbeat_bound_s, others_pending=others)
        instant = self._commit(txn, meta, batch_id, inserted, query_id, keep_columns=ctx.keep_columns)
        phases["commit"] = time.monotonic() - t1
        phases["total"] = time.monotonic() - started
        return CommitResult(
            instant,
            attempts=attempts,
            num_inserts=sum(s.num_inserts for s in stats),
            num_updates=sum(s.num_update_writes for s in stats),
            num_deletes=sum(s.num_deletes for s in stats),
            files_written=len(stats),
            log_bytes=sum(s.total_write_bytes for s in stats if s.is_log),
            batch_id=batch_id,
            duration_s=phases["total"],
            conflicts=conflicts,
            phases=phases,
            protocol={"lock_wait": txn.timings.lock_wait_s, "lock_hold": txn.timings.lock_hold_s,
                      "conflict_check": txn.timings.conflict_check_s, "timeline_io": txn.timings.timeline_io_s,
                      "commit_hold": txn.timings.commit_hold_s, "claim_wait": self._claim_wait,
                      **{f"hold_{k}": v for k, v in txn.timings.steps.items()}},
        )

    def _commit(self, txn: Transaction, meta: CommitMetadata, batch_id: int | None, inserted: Any,
                query_id: str | None = None, keep_columns: tuple[str, ...] = ()) -> Instant:
        """Commit; when the outcome is unknown, re-read the timeline instead of guessing. A
        non-blocking writer that lost the race to create a bucket's base file turns its file of
        that bucket into a log file and commits the same instant again: it never retries."""
        wid = self.config.writer_id
        for _ in range(MAX_REBASES):
            try:
                return self._commit_once(txn, meta, batch_id, inserted, query_id)
            except WriteConflictError as e:
                if not self.non_blocking or not e.file_groups or overwrite.is_overwrite(self.config.operation):
                    raise  # an overwrite's base files never become log files: it retries
                meta = self._rebase(txn, meta, set(e.file_groups), keep_columns)
                log.info("writer %s: buckets %s were created meanwhile; their rows now go to log files", wid,
                         sorted(e.file_groups)[:5])
        return self._commit_once(txn, meta, batch_id, inserted, query_id)

    def _rebase(self, txn: Transaction, meta: CommitMetadata, groups: set[tuple[str, str]],
                keep_columns: tuple[str, ...] = ()) -> CommitMetadata:
        assert txn.instant is not None
        t = txn.instant.requested_time
        stats = [rebase_as_log(self.table.storage, s, t, keep_columns) if (s.partition_path, s.file_id) in groups and s.creates_file_group
                 else s for s in meta.all_stats()]
        p2s: dict[str, list[WriteStat]] = {}
        for s in stats:
            p2s.setdefault(s.partition_path, []).append(s)
        return dataclasses.replace(meta, partition_to_write_stats=p2s)

    def _commit_once(self, txn: Transaction, meta: CommitMetadata, batch_id: int | None, inserted: Any,
                     query_id: str | None) -> Instant:
        wid = self.config.writer_id
        try:
            return txn.commit(meta, checkpoint=(wid, batch_id) if batch_id is not None else None, inserted_keys=inserted,
                              query_id=query_id, accept_reset=self.config.on_checkpoint_reset == "continue",
                              ahead=self._ahead is not None and not overwrite.is_overwrite(self.config.operation))
        except CommitStateUnknownError as e:
            if txn.resolve_unknown():
                log.warning("writer %s: %s -- re-read the timeline: the commit landed", wid, e)
                assert txn.instant is not None
                return txn.instant
            raise CommitNotLandedError(f"{e} -- re-read the timeline: it did not land; retrying with a new instant") from e

    def _after_commit(self, r: CommitResult, txn: Transaction, query_id: str | None = None) -> None:
        name, wid = self.table.name, self.config.writer_id
        m = self.metrics
        m.commit(name, wid, "committed")
        for phase, s in r.phases.items():
            m.phase(name, wid, phase, s)
        for held in txn.timings.lock_holds:
            m.lock_hold(name, wid, held)
        m.lock_wait(name, wid, txn.timings.lock_wait_s)
        m.records(name, wid, "insert", r.num_inserts)
        m.records(name, wid, "update", r.num_updates)
        m.records(name, wid, "delete", r.num_deletes)
        m.last_commit(name, wid, time.time())
        if r.instant is not None and r.instant.action == DELTA_COMMIT:
            m.delta_commit(name, wid, r.log_bytes)
        if r.batch_id is not None:
            self._checkpoint, self._checkpoint_loaded = Checkpoint(r.batch_id, query_id), True
        log.info(
            "writer %s committed instant %s (batch %s) in %d attempt(s): +%d ~%d -%d rows, %d files, %.3fs",
            wid, r.instant.requested_time if r.instant else None, r.batch_id, r.attempts,
            r.num_inserts, r.num_updates, r.num_deletes, r.files_written, r.duration_s,
        )


class _Batch:
    """The input batch, validated once before any attempt."""

    def __init__(
        self, arrow: pa.Table | None, spark_df: Any, schema: pa.Schema, operation: str,
        *, required: tuple[str, ...] = (), allow_missing: bool = False,
    ) -> None:
        self.arrow = arrow
        self.spark_df = spark_df
        self.schema = schema
        self.operation = operation
        self.required = required
        self.allow_missing = allow_missing
        self.empty = arrow is not None and arrow.num_rows == 0
        self.prepared: pa.Table | None = None
        self.prepared_schema: pa.Schema | None = None
        self.hashes: Callable[[], np.ndarray] | None = None
        self._keys: tuple[pa.Array, Callable[[], np.ndarray]] | None = None  # an insert's keys, being hashed

    @classmethod
    def of(cls, data: Any, table: Table, config: WriterConfig) -> _Batch:
        if spark_path.is_spark_df(data):
            small = None
            if config.executor == "driver":
                small = spark_path.to_arrow(data)
            elif config.executor == "auto":  # one job: collect up to the limit, keep it if it fits
                small = spark_path.collect_if_small(data, config.driver_max_rows)
            if small is not None:
                data = small
            elif overwrite.is_overwrite(config.operation):
                raise ConfigError(
                    f"operation {config.operation} writes through the driver: use executor='driver', or a batch of at "
                    f"most driver_max_rows={config.driver_max_rows} rows with executor='auto'")
            else:
                schema = spark_path.arrow_schema(data)
                b = cls(None, data, schema, config.operation, **_column_rules(table, config))
                b.evolved_schema(table.known_schema())
                spark_path.check_columns(data, table.config)  # the rows are checked where they are written
                return b
        if not isinstance(data, pa.Table):
            if isinstance(data, pa.RecordBatch):
                data = pa.Table.from_batches([data])
            else:
                raise MultiWriterError(f"cannot write {type(data).__name__}: pass a pyarrow.Table or a Spark DataFrame")
        b = cls(data, None, data.schema, config.operation, **_column_rules(table, config))
        # Validate fully now, so bad input fails before an instant exists; keep the result for
        # the first attempt when the table schema has not changed meanwhile.
        b._start_hashing(table.config)
        b.prepared_schema = b.evolved_schema(table.known_schema())
        b.prepared, b.hashes = b._prepare(table.config, b.prepared_schema)
        return b

    def prepare_for(self, schema: pa.Schema, config: Any) -> tuple[pa.Table, Callable[[], np.ndarray] | None]:
        """The prepared rows for this attempt's schema, and their bloom hashes when they are
        still being computed."""
        if self.prepared is not None and self.prepared_schema is not None and schema.equals(self.prepared_schema):
            return self.prepared, self.hashes
        return self._prepare(config, schema)

    def _start_hashing(self, config: Any) -> None:
        """An insert's record keys, hashed on the hash thread from the start: neither depends on
        the table schema, which is looked up meanwhile. Keys that do not compute are left to
        :func:`prepare`, which reports them in its usual order."""
        if self.operation != "insert" or self.arrow is None or config.virtual_keys:
            return
        try:
            keys = record_keys(self.arrow, config)
        except MultiWriterError:
            return
        self._keys = (keys, bloom.start_hashes(keys))

    def _prepare(self, config: Any, schema: pa.Schema) -> tuple[pa.Table, Callable[[], np.ndarray] | None]:
        """An insert looks nothing up, so its keys' hashes (for the new files' bloom filters)
        are computed on the hash threads while the batch is validated, the attempt begins its
        instant and plans; any other operation needs them for the index first. They are started
        on the keys of the batch as given (:meth:`_start_hashing`), and again on the kept rows'
        keys in the rare batch whose repeated keys were dropped."""
        assert self.arrow is not None
        if self.operation != "insert" or config.virtual_keys:  # virtual keys: no bloom filter, no hashes
            return prepare(self.arrow, config, schema, operation=self.operation, hashes=not config.virtual_keys), None
        if self._keys is not None:
            keys, pending = self._keys
            prepared = prepare(self.arrow, config, schema, operation=self.operation, keys=keys)
        else:
            started: list[Callable[[], np.ndarray]] = []
            prepared = prepare(self.arrow, config, schema, operation=self.operation,
                               on_keys=lambda keys: started.append(bloom.start_hashes(keys)))
            pending = started[0]
        if prepared.num_rows != self.arrow.num_rows:  # rows were dropped: the hashes must follow the kept ones
            return prepared, bloom.start_hashes(prepared.column(KEY))
        return prepared, pending

    def evolved_schema(self, table_schema: pa.Schema) -> pa.Schema:
        """The schema this attempt writes: the table's, evolved by the batch. Called again on
        every attempt, so a retry after a concurrent evolution validates against the new one."""
        return _evolve(table_schema, self.schema, self.operation, self.required, self.allow_missing)


def _column_rules(table: Table, config: WriterConfig) -> dict[str, Any]:
    """Columns every upsert batch must carry, and whether others may be omitted."""
    c = table.config
    required = tuple(c.record_key) + tuple(c.partition_by) + c.ordering_fields
    return {"required": required, "allow_missing": config.allow_missing_columns or config.partial_update}


def evolve_schema(table: Table, config: WriterConfig, table_schema: pa.Schema, batch_schema: pa.Schema) -> pa.Schema:
    """The data schema a batch writes: the table's, evolved by the batch (typed errors when they
    contradict); a delete writes the table's."""
    rules = _column_rules(table, config)
    return _evolve(table_schema, batch_schema, config.operation, rules["required"], rules["allow_missing"])


def _evolve(table_schema: pa.Schema, batch_schema: pa.Schema, operation: str, required: tuple[str, ...],
            allow_missing: bool) -> pa.Schema:
    if len(table_schema) == 0:
        return data_schema(batch_schema)
    if operation == "delete":
        return table_schema
    return check_compatible(table_schema, batch_schema, required=required, allow_missing=allow_missing)


def commit_metadata(stats: list[WriteStat], schema: pa.Schema, table_name: str, operation: str,
                    extra: dict[str, str] | None = None) -> CommitMetadata:
    """A write's commit metadata: its write stats by partition, the schema, ``extra``."""
    p2s: dict[str, list[WriteStat]] = {}
    for s in stats:
        p2s.setdefault(s.partition_path, []).append(s)
    return CommitMetadata(p2s, {"schema": arrow_to_avro_json(schema, table_name), **(extra or {})}, OPERATION_TYPES[operation])


def _gave_up(e: Exception, attempts: int, max_retries: int) -> Exception:
    msg = (f"{e} -- gave up after {attempts} attempts (max_conflict_retries={max_retries}); "
           "raise max_conflict_retries or reduce overlap between writers")
    if isinstance(e, WriteConflictError):
        return WriteConflictError(msg, instant=e.instant, winner=e.winner, file_groups=e.file_groups)
    if isinstance(e, CommitNotLandedError):
        return MultiWriterError(msg)
    return type(e)(msg)
