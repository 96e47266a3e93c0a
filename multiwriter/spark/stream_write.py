"""``df.writeStream.format("multiwriter")``: executors write the data files, the driver commits
once per micro-batch, exactly once across restarts.

Spark creates the stream writer on the query thread before each micro-batch, ships it to the
tasks, and calls ``commit`` (or ``abort``) in a Python worker on the driver afterwards. So:

* **begin** (``__init__``, driver): the options are checked, the table is created on first use,
  and an instant is issued under the lock with its heartbeat file written; the instant time and
  the base it began from travel to the tasks with the writer.
* **write** (each task): the task stages its rows (:mod:`.staging`) and runs the driver path's
  index, plan and merge on its rows against the base: data files of the instant, with markers,
  exactly as the driver path writes them, each published only while the instant is alive and
  not completed (:mod:`multiwriter.write.guard`). New file groups are named from the instant and
  their rows (never from row order or the attempt), so a rerun and a late attempt of a task name
  the same groups. Only the driver beats the instant's heartbeat: a task that beat it would keep
  an aborted micro-batch looking alive.
* **commit** (driver): under the lock, the ordinary commit (conflict check, checkpoint
  ``{writer id: batch id}``, fence) of the tasks' write stats. The commit is redone from the
  staged rows through the driver path (:class:`~multiwriter.write.writer.Writer`, with its
  retries) when it cannot stand as written: two tasks rewrote the same file group, appended the
  same key to one Merge-on-Read group's log or inserted the same new key (the input is not
  partitioned by key; two tasks appending other keys to one group's log stand, as Hudi's log
  files of one instant), another writer won a conflict, or the instant's heartbeat lapsed. The
  executor-written attempt is rolled back first.

A batch id at or below the writer's checkpoint commits nothing when the same query sent it (a
micro-batch Spark replays after a crash between our commit and its own commit log); its instant
is rolled back. From another query (Spark's persistent query id, which the tasks read, differs:
a new checkpoint) it is a checkpoint reset: ``CheckpointResetError`` unless
``on_checkpoint_reset`` is "continue". ``abort`` rolls
the instant back (found by its heartbeat's writer id when no task reported it, so the driver
stops beating it at once); staging is deleted after every commit and abort, so a failed
micro-batch leaves no files. Each commit names the query's checkpoint location beside the writer id, so a second
query reusing a writer id fails instead of having its batches skipped as already committed.

Spark runs the begin and the commit in pooled Python workers on the driver, so each process
keeps its writer (its lock, its heartbeat client) from one micro-batch to the next, as the
foreachBatch sink does.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from .. import faults, markers
from ..checkpoint import last_commits
from ..errors import (
    CheckpointResetError,
    ConfigError,
    DuplicateBatchError,
    HeartbeatExpiredError,
    InstantCompletedError,
    InstantRolledBackError,
    LockAcquireTimeout,
    WriteConflictError,
)
from ..redact import redact
from ..heartbeat.client import HeartbeatClient, expiry_bound_s, heartbeat_age_s
from ..storage import Storage
from ..format import instant as inst
from ..format import layout
from ..format.instant import Instant
from ..table.metadata import WriteStat
from ..table.table import Table
from ..table.timeline import Timeline
from ..checkpoint import Checkpoint
from ..transaction import Transaction, last_checkpoint_entry, reset_error
from ..write import bloom, guard
from ..write.executor import run_on_driver
from ..write.index import KeyIndex
from ..write.log_append import is_log_append
from ..write.merge import armed, context
from ..write.plan import planned_metadata
from ..write.records import KEY, prepare
from ..write.spark import stable_new_ids
from ..write.plan import plan_batch
from ..write.writer import Writer, commit_metadata, evolve_schema
from . import options as opt
from . import staging
from ..threads import free_in_child

log = logging.getLogger(__name__)
#: the local properties Spark sets on every task of a micro-batch
BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"  # the query's persistent id (its checkpoint's)
#: commit metadata key: the checkpoint location of the query that committed for the writer id
QUERY_KEY = "multiwriter.streaming.checkpoint_location"
CHECKPOINT_LOCATION = "checkpointlocation"
#: how long the process that began a micro-batch beats its instant at most (at least 20 bounds)
KEEPER_MAX_S = 1800.0


@dataclass
class _TaskResult(WriterCommitMessage):
    """What a task hands the driver: its staged rows and the data files it wrote."""

    staged: list[staging.StagedFile] = field(default_factory=list)
    stats: list[WriteStat] = field(default_factory=list)
    inserted: dict[str, pa.Array] = field(default_factory=dict)  # new keys per partition
    redo: str | None = None  # why the task wrote no data files (the driver path then writes the batch)
    #: (partition, file id) -> 64-bit hashes of the keys the task appended to that group's log
    appended: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)
    begun: _Begun | None = None  # the micro-batch's instant (the committing process knows it from here)
    query_id: str | None = None  # Spark's persistent id of the query (a task's local property)


@dataclass(frozen=True)
class _Begun:
    """The instant a micro-batch writes, as begun on the query thread (plain: it is pickled)."""

    instant_time: str
    base_time: str | None  # the base commit's requested time
    base_completion: str | None  # ... and completion time: the tasks' view of the table
    schema_ipc: bytes  # the data schema this micro-batch writes (the table's, evolved by the batch)
    heartbeat_interval_s: float
    heartbeat_misses: int

    @property
    def schema(self) -> pa.Schema:
        return pa.ipc.read_schema(pa.py_buffer(self.schema_ipc))


def parse(options: dict[str, Any]) -> tuple[opt.WriteOptions, Table | None]:
    """Every option checked (unknown keys, missing ones, the writer id), before any task runs."""
    parsed, table = opt.checked_write(options, streaming=True)
    if parsed.writer.get("operation") not in (None, "upsert", "insert", "delete"):
        raise ConfigError(f"{opt.OPERATION}={parsed.writer['operation']!r} is not supported by a streaming write; "
                          "use upsert, insert or delete")
    return parsed, table


class MultiWriterStreamWriter(DataSourceStreamArrowWriter):
    """Begin on the query thread, write on executors, commit on the driver (module docstring)."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.options = options
        parsed, table = parse(options)
        self.path = parsed.path
        self.writer_id = parsed.writer["writer_id"]
        self.operation = parsed.writer.get("operation") or "upsert"
        self.query = str(opt._lower(options).get(CHECKPOINT_LOCATION, ""))
        if table is None:
            table = Table.create(parsed.path, schema=to_arrow_schema(schema), lock=parsed.lock, **parsed.table)
        config = parsed.writer_config()
        self.target_file_size = config.target_file_size_bytes
        self.begun: _Begun | None = None
        # the table, config and batch schema found here: the begin and the commit use them, tasks never
        self._local: tuple[Table, Any, StructType] | None = (table, config, schema)

    def __getstate__(self) -> dict[str, Any]:
        """Spark pickles the writer on the query thread to ship it to the micro-batch's tasks:
        that is where the micro-batch begins, so its instant is issued here, once. (The process
        that commits builds a writer of its own and never pickles it: it issues nothing.)"""
        if self.begun is None:
            assert self._local is not None  # a writer unpickled in a task is begun
            table, config, schema = self._local
            data_schema = evolve_schema(table, config, table.schema(), to_arrow_schema(schema))
            with _writer(table, config, self.options) as w:  # its lock, kept from the last micro-batch
                self.begun = _begin(table, config, data_schema, w.lock)
        return {k: v for k, v in self.__dict__.items() if k != "_local"} | {"_local": None}

    # -- executors ---------------------------------------------------------------------------
    def write(self, iterator: Iterator[pa.RecordBatch]) -> _TaskResult:
        from pyspark import TaskContext

        tc = TaskContext.get()
        batch_id = _task_batch_id(tc)
        query_id = tc.getLocalProperty(QUERY_ID_PROPERTY) or None
        storage = Storage(self.path)
        assert self.begun is not None  # the writer reached this task pickled
        batches = list(iterator)
        if not any(b.num_rows for b in batches):
            return _TaskResult(begun=self.begun, query_id=query_id)
        staged = staging.stage(storage, self.writer_id, batch_id, iter(batches))
        rows = pa.Table.from_batches(batches)
        token = layout.task_write_token(tc)
        kept = [staged] if staged is not None else []
        try:
            stats, inserted, appended = _write_task(Table.open(self.path), self.begun, self.writer_id, self.operation,
                                                    rows, self.target_file_size, token)
        except (HeartbeatExpiredError, InstantRolledBackError) as e:  # the instant is (being) rolled back
            return _TaskResult(kept, redo=str(e), begun=self.begun, query_id=query_id)
        except InstantCompletedError:  # a late attempt: the batch committed without it, its staged rows go too
            if staged is not None:
                storage.delete(staged.path)
            raise
        return _TaskResult(kept, stats, compact(inserted), begun=self.begun, query_id=query_id, appended=appended)

    # -- driver ------------------------------------------------------------------------------
    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 -- Spark's name
        table, config = self._table()
        results = [m for m in messages if isinstance(m, _TaskResult)]
        begun = next((r.begun for r in results if r.begun is not None), None)
        if begun is None:  # no task ran: nothing was written (an issued instant lapses to the cleaner)
            return
        try:
            with _writer(table, config, self.options) as w:
                self._commit(table, w, begun, results, batchId)
        finally:
            staging.discard(table.storage, self.writer_id, batchId)

    def _commit(self, table: Table, w: Writer, begun: _Begun, results: list[_TaskResult], batch_id: int) -> None:
        query_id = next((r.query_id for r in results if r.query_id), None)
        try:
            tl = table.timeline()  # one listing for the owner, the checkpoint and the resumed transaction
            if query_id is None:
                _check_owner(tl, self.writer_id, self.query)
            last = last_checkpoint_entry(table, self.writer_id, tl)
            replay = last is not None and last.covers(batch_id) and not last.reset_by(batch_id, query_id)
            if last is not None and last.reset_by(batch_id, query_id) and w.config.on_checkpoint_reset != "continue":
                assert query_id is not None
                raise reset_error(self.writer_id, Checkpoint(batch_id, query_id), last)
        except (ConfigError, CheckpointResetError):
            _resume(table, w, begun).abort()
            raise
        if replay:
            assert last is not None
            log.info("writer %s: micro-batch %s already committed (checkpoint %s); rolling back instant %s",
                     self.writer_id, batch_id, last.batch_id, begun.instant_time)
            _resume(table, w, begun, tl).abort()
            return
        if self._commit_as_written(table, w, begun, results, batch_id, tl, query_id):
            return
        data = staging.read(table.storage, self.writer_id, batch_id, [f for r in results for f in r.staged], begun.schema)
        result = w.write(data, batch_id=batch_id, extra_metadata={QUERY_KEY: self.query}, query_id=query_id)
        log.info("writer %s: micro-batch %s committed through the driver path as instant %s", self.writer_id,
                 batch_id, result.instant.requested_time if result.instant else None)

    def _table(self) -> tuple[Table, Any]:
        """The table and writer config: those ``__init__`` found when Spark built this writer in
        the committing process (it commits right after), else parsed again."""
        if self._local is not None:
            return self._local[0], self._local[1]
        parsed, table = parse(self.options)
        if table is None:
            raise ConfigError(f"the table at {redact(parsed.path)} is gone: micro-batch not committed")
        return table, parsed.writer_config()

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Roll back what the tasks wrote, and the staged rows."""
        parsed, table = parse(self.options)
        if table is None:
            return
        begun = next((m.begun for m in messages if isinstance(m, _TaskResult) and m.begun is not None), None)
        w = Writer(table, parsed.writer_config())
        try:
            if begun is not None:
                _resume(table, w, begun).abort()
            else:  # no task reported: roll back this writer's pending instants (the driver then stops beating)
                rolled = _abort_unreported(table, w)
                log.warning("writer %s: micro-batch %s aborted before any task reported its instant; rolled back %s",
                            self.writer_id, batchId, rolled or "nothing")
        finally:
            w.close()
            staging.discard(table.storage, self.writer_id, batchId)

    def _commit_as_written(self, table: Table, w: Any, begun: _Begun, results: list[_TaskResult], batch_id: int,
                           tl: Timeline, query_id: str | None) -> bool:
        """Commit the tasks' files as they are; False (the attempt rolled back) when they cannot stand."""
        t = begun.instant_time
        stats = [s for r in results for s in r.stats]
        txn = _resume(table, w, begun, tl)
        why = next((r.redo for r in results if r.redo), None) or _overlap(results) or _lapsed(table, begun)
        if why is not None:
            log.info("writer %s micro-batch %s: %s; redoing it through the driver path", self.writer_id, batch_id, why)
            txn.abort()
            return False
        w.heartbeat.start(t)
        try:
            faults.point("after-data-files")
            markers.reconcile(table.storage, t, [p for s in stats for p in s.written])  # files of failed task attempts
            meta = commit_metadata(stats, begun.schema, table.name, self.operation, {QUERY_KEY: self.query})
            try:
                txn.commit(meta, checkpoint=(self.writer_id, batch_id), inserted_keys=_merged_inserts(results) or None,
                           query_id=query_id, accept_reset=w.config.on_checkpoint_reset == "continue")
            except DuplicateBatchError as e:  # another attempt of this batch landed meanwhile
                log.info("writer %s: %s; rolling back instant %s", self.writer_id, e, t)
                txn.abort()
                return True
            except (WriteConflictError, LockAcquireTimeout) as e:
                log.info("writer %s micro-batch %s: %s; redoing it through the driver path", self.writer_id, batch_id, e)
                w.metrics.commit(table.name, self.writer_id, "conflict" if isinstance(e, WriteConflictError) else "failed")
                txn.abort()
                return False
        except BaseException:
            if not txn.committed:
                txn.abort()
            raise
        finally:
            txn.stop_heartbeat()
        w.metrics.commit(table.name, self.writer_id, "committed")
        log.info("writer %s committed micro-batch %s as instant %s (%d files written by %d tasks)", self.writer_id,
                 batch_id, t, len(stats), sum(1 for r in results if r.stats))
        return True


# -- begin (driver, query thread) ---------------------------------------------------------------
def _begin(table: Table, config: Any, schema: pa.Schema, lock: Any) -> _Begun:
    """Issue the micro-batch's instant and beat its heartbeat from here until it is committed or
    rolled back (:func:`_keep_beating`): the tasks and the committer beat it too, but only while
    they run, and Spark may take a while to schedule either."""

    hb = HeartbeatClient(table.storage, writer_id=config.writer_id, interval_s=config.heartbeat_interval_s,
                         tolerable_misses=config.heartbeat_tolerable_misses)
    txn = Transaction(table, lock, writer_id=config.writer_id, heartbeat=hb, lock_timeout_s=config.lock_timeout_s)
    try:
        txn.begin()
        txn.write_inflight(planned_metadata([], config.operation))
    except BaseException:
        txn.abort()
        hb.close()
        raise
    assert txn.instant is not None
    t = txn.instant.requested_time
    threading.Thread(target=_keep_beating, args=(table.storage, table.config, t, hb), daemon=True,
                     name=f"mw-stream-heartbeat-{t}").start()
    base = txn.base
    return _Begun(t, base.requested_time if base else None, (base.completion_time or base.requested_time) if base else None,
                  schema.serialize().to_pybytes(), config.heartbeat_interval_s, config.heartbeat_tolerable_misses)


def _keep_beating(storage: Storage, config: Any, t: str, hb: HeartbeatClient) -> None:
    """Keep ``hb`` beating ``t`` until the instant completed or was rolled back (then the file
    goes), or :data:`KEEPER_MAX_S` passed (a micro-batch whose driver lost track of it then
    lapses to the cleaner). The beats come from ``hb``'s own thread; this one only watches."""
    deadline = time.monotonic() + max(KEEPER_MAX_S, 20 * hb.bound_s)
    try:
        while time.monotonic() < deadline:
            time.sleep(hb.interval_s)
            if not _pending(storage, config, t):
                hb.stop(t)
                return
        hb.hand_over(t)
    except Exception as e:  # noqa: BLE001 -- a watcher must not die loudly; the beats then stop and lapse
        log.warning("heartbeat watcher of instant %s stopped: %s", t, e)
        hb.hand_over(t)
    finally:
        hb.close()


def _pending(storage: Storage, config: Any, t: str) -> bool:
    """``t`` has a requested or inflight file and no completed one."""
    names = {e.path.rsplit("/", 1)[-1] for e in storage.list_dir(config.timeline_dir, files_only=True)}
    if any(n.startswith(f"{t}_") for n in names):
        return False
    return any(p.rsplit("/", 1)[-1] in names for p in guard.pending_files(config, t))


# -- write (executors) --------------------------------------------------------------------------
def _write_task(table: Table, begun: _Begun, writer_id: str, operation: str, rows: pa.Table,
                target_file_size: int, token: str) -> tuple[list[WriteStat], dict[str, pa.Array], dict[tuple[str, str], np.ndarray]]:
    """The driver path's index, plan and merge over one task's rows, against the instant's base;
    also the hashes of the keys appended to each existing group's log (:func:`_overlap`)."""

    t = begun.instant_time
    _check_heartbeat(table, begun)  # the driver beats the instant; a task never does (it would outlive an abort)
    schema, cfg = begun.schema, table.config
    base = table.timeline().as_of_completion(begun.base_completion)
    prepared = prepare(rows, cfg, schema, operation=operation, hashes=operation != "insert" and not cfg.virtual_keys)
    index = KeyIndex(table.storage)  # footers cached per process: Spark reuses the task's Python worker
    plan = stable_new_ids(plan_batch(prepared, base, index, operation, target_file_size), t, bucketed=cfg.bucket_index)
    bound = expiry_bound_s(begun.heartbeat_interval_s, begun.heartbeat_misses)
    ctx = armed(dataclasses.replace(context(table.storage.uri, t, schema, cfg.ordering_field, len(cfg.partition_by) or 1,
                                            tuple(cfg.record_key), log_append=cfg.merge_on_read, config=cfg),
                              heartbeat_bound_s=bound), cfg)
    # one file per group; the footers of the files written go to the cache, as the driver path's do
    stats = run_on_driver(table.storage, ctx, plan, cfg, token=lambda _: token, on_footer=index.remember_written)
    appended = {(t.partition, t.file_id): key_hashes(plan.rows_for(t).column(KEY)) for t in plan.tasks
                if is_log_append(ctx, t)}
    return stats, plan.inserted_keys(), appended


def key_hashes(keys: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """64-bit hashes of ``keys`` (two of their bloom hashes side by side): what a task reports
    of the keys it appended, 8 bytes a key."""
    h = bloom.key_hashes(keys, 2).astype(np.uint64)
    return (h[:, 0] << np.uint64(32)) | h[:, 1]


def compact(inserted: dict[str, pa.Array]) -> dict[str, pa.Array]:
    """Each partition's keys copied into buffers of their own. The plan hands out slices of one
    array of every new key, and a pickled slice carries its parent's whole buffers: the commit
    message would hold all the batch's new keys once per partition (megabytes that Spark then
    ships to the driver and the committing process)."""
    return {p: pa.concat_arrays([keys]) for p, keys in inserted.items()}


# -- commit (driver) ----------------------------------------------------------------------------
#: the committing process's writers, by table, table id and options; at most this many kept
MAX_WRITERS = 8
_WRITERS: OrderedDict[tuple[str, str, tuple[tuple[str, str], ...]], Writer] = OrderedDict()
_WRITERS_MU = free_in_child(threading.Lock())


@contextmanager
def _writer(table: Table, config: Any, options: dict[str, str]) -> Iterator[Writer]:
    """A writer kept from the last micro-batch of the same query, as the foreachBatch sink keeps
    its writer: Spark commits every micro-batch in a pooled Python worker, and a new writer pays
    its lock's first checks (ZooKeeper round trips) and a heartbeat thread each time. A writer
    is taken out while in use (never shared) and put back only if nothing went wrong and it
    beats nothing; otherwise it is closed."""
    key = (table.storage.uri, table.table_id, tuple(sorted((str(k), str(v)) for k, v in options.items())))
    with _WRITERS_MU:
        w = _WRITERS.pop(key, None)
    if w is None:
        w = Writer(table, config)
    try:
        yield w
    except BaseException:
        w.close()
        raise
    if w.heartbeat.instants:
        w.close()
        return
    with _WRITERS_MU:
        _WRITERS[key] = w
        evicted = [_WRITERS.popitem(last=False)[1] for _ in range(len(_WRITERS) - MAX_WRITERS)]
    for old in evicted:
        old.close()


def _resume(table: Table, w: Any, begun: _Begun, tl: Timeline | None = None) -> Transaction:
    tl = tl if tl is not None else table.timeline()
    base = tl.find(begun.base_time) if begun.base_time else None
    action = inst.DELTA_COMMIT if table.config.merge_on_read else inst.COMMIT
    own = tl.find(begun.instant_time) or Instant(begun.instant_time, action, inst.INFLIGHT)
    return Transaction.resume(table, w.lock, instant=own, base=base, base_timeline=tl.as_of_completion(begun.base_completion),
                              writer_id=w.config.writer_id, heartbeat=w.heartbeat, lock_timeout_s=w.config.lock_timeout_s,
                              non_blocking=w.config.concurrency_for(table.config) == "non_blocking")


def _abort_unreported(table: Table, w: Any) -> list[str]:
    """Roll back every pending write of ``w``'s writer id whose heartbeat names it: the instant
    of a micro-batch Spark aborted before a task reported it (the process that began it beats
    it until it is no longer pending, so it would otherwise look alive to the cleaner). One
    query writes one micro-batch at a time under a writer id, so no live write is among them."""
    tl = table.timeline()
    out = []
    for i in tl.pending(inst.WRITE_ACTIONS):
        if _heartbeat_writer(table.storage, i.requested_time) != w.config.writer_id:
            continue
        begun = _Begun(i.requested_time, None, None, b"", w.config.heartbeat_interval_s, w.config.heartbeat_tolerable_misses)
        _resume(table, w, begun, tl).abort()
        out.append(i.requested_time)
    return out


def _heartbeat_writer(storage: Storage, t: str) -> str | None:
    """The writer id a heartbeat file of ``t`` names (None: no readable file)."""
    try:
        return json.loads(storage.read_bytes(layout.heartbeat_path(t))).get("writer_id")
    except (FileNotFoundError, ValueError, AttributeError):
        return None


def _overlap(results: list[_TaskResult]) -> str | None:
    """Why the tasks' files cannot be committed together, if they cannot: each task routed its
    own rows, so two of them may have rewritten one file group or inserted one new key. Two
    tasks appending log files to one Merge-on-Read group stand together (as Hudi's log files
    of one instant with their own write tokens) when no key is in both: the order of the two
    files then decides nothing."""
    seen: dict[tuple[str, str], int] = {}
    shared: set[tuple[str, str]] = set()
    for n, r in enumerate(results):
        for s in r.stats:
            group = (s.partition_path, s.file_id)
            other = seen.setdefault(group, n)
            if other == n:
                continue
            if group not in r.appended or group not in results[other].appended:
                return f"tasks {other} and {n} both rewrote file group {s.file_id} in {s.partition_path!r}"
            shared.add(group)
    for group in sorted(shared):
        hashes = [r.appended[group] for r in results if group in r.appended]
        if len(np.unique(np.concatenate(hashes))) != sum(len(h) for h in hashes):
            return f"two tasks appended the same key to file group {group[1]} in {group[0]!r}"
    for part, ks in _inserts_by_partition(results).items():  # a task's own new keys are distinct (deduplicated rows)
        if len(ks) > 1 and pc.count_distinct(pa.concat_arrays(ks)).as_py() != sum(len(k) for k in ks):
            return f"two tasks inserted the same new key in {part!r}"
    return None


def _inserts_by_partition(results: list[_TaskResult]) -> dict[str, list[pa.Array]]:
    """Per partition, each task's new keys there."""
    out: dict[str, list[pa.Array]] = {}
    for r in results:
        for part, keys in r.inserted.items():
            out.setdefault(part, []).append(keys)
    return out


def _merged_inserts(results: list[_TaskResult]) -> dict[str, pa.Array]:
    return {p: pa.concat_arrays(ks) if len(ks) > 1 else ks[0] for p, ks in _inserts_by_partition(results).items()}


def _lapsed(table: Table, begun: _Begun) -> str | None:
    try:
        _check_heartbeat(table, begun)
    except HeartbeatExpiredError as e:
        return str(e)
    return None


def _check_heartbeat(table: Table, begun: _Begun) -> None:
    """The instant's heartbeat file is younger than the bound (else a cleaner may already be
    rolling the instant back, and beating it again must not make it look alive)."""

    bound = expiry_bound_s(begun.heartbeat_interval_s, begun.heartbeat_misses)
    age = heartbeat_age_s(table.storage, begun.instant_time)
    if age is None or age > bound:
        seen = "is gone" if age is None else f"is {age:.1f}s old"
        raise HeartbeatExpiredError(
            f"heartbeat of instant {begun.instant_time} {seen} (bound {bound:.1f}s): the micro-batch's instant may be "
            "rolled back by the cleaner, so it is not written or committed as it is")


def _check_owner(tl: Timeline, writer_id: str, query: str) -> None:
    """Refuse a writer id whose last commit came from another query (another checkpoint
    location): its batch ids are not ours, and ours at or below its checkpoint would be skipped
    as already committed."""
    if not query:
        return
    last = last_commits(tl).get(writer_id)
    if last is None:
        return
    owner = tl.commit_metadata(last).extra_metadata.get(QUERY_KEY)
    if owner and os.path.normpath(owner) != os.path.normpath(query):
        raise ConfigError(
            f"writer id {writer_id!r} last committed (instant {last.requested_time}) from the query with checkpoint "
            f"location {owner!r}, not this one ({query!r}): two queries must not share a writer id (their batch ids "
            f"would be taken for each other's and skipped). Give this query its own "
            f"{opt.WRITER_ID}, or retire the old id (multiwriter writers retire) if that query is gone for good")


def _task_batch_id(tc: Any) -> int:
    value = tc.getLocalProperty(BATCH_ID_PROPERTY) if tc is not None else None
    if value is None:
        raise ConfigError(f"task has no micro-batch id ({BATCH_ID_PROPERTY}); a multiwriter stream writer runs in a streaming query")
    return int(value)


__all__ = ["MultiWriterStreamWriter", "QUERY_KEY"]
