"""The METADATA_ONLY part of a bootstrap: skeleton base files and the bootstrap index, one commit.

Hudi's ``SparkBootstrapCommitActionExecutor.metadataBootstrap``: the instant
``METADATA_BOOTSTRAP_INSTANT_TS`` (``00000000000001``), the table type's write action
(``commit``, ``deltacommit`` on Merge-on-Read), operation ``BOOTSTRAP``; one skeleton per source
file (:mod:`.bootstrap_skeleton`), then the bootstrap index of every file group (written before
the commit completes, in ``commit``), then the commit whose write stats are the skeletons'.

Here it runs through the writers' protocol (heartbeat, markers, the lock, the decision log, the
metadata table): a bootstrap that dies is a failed write the companion job rolls back, its
skeletons from their markers and its index with it (``dropBootstrapIndexIfNeeded``). One that
fails in this process is undone at once, the same way. The source files are only read.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from .. import faults, markers
from ..config import WriterConfig
from ..errors import CommitNotLandedError, CommitStateUnknownError
from ..format import instant as inst
from ..format import layout
from ..format.schema import arrow_to_avro_json
from ..heartbeat.client import HeartbeatClient
from ..lock.base import check_table_lock
from ..redact import redact
from ..result import CommitResult
from ..storage import Storage
from ..table import bootstrap_index_files
from ..table.metadata import CommitMetadata, WriteStat
from ..table.properties import BOOTSTRAP_BASE_PATH_KEY
from ..table.table import Table
from ..transaction import Transaction
from . import bootstrap_skeleton as skeleton
from .bootstrap_source import Source, SourceFile
from .merge import armed, context

log = logging.getLogger(__name__)

#: Hudi's operation type of a metadata bootstrap commit (``WriteOperationType.BOOTSTRAP``)
OPERATION = "BOOTSTRAP"
#: source files read and skeletons written side by side
THREADS = 8


@dataclass(frozen=True)
class Partition:
    """A table partition bootstrapped METADATA_ONLY and its source files."""

    path: str
    files: tuple[SourceFile, ...]


def run(table: Table, src: Source, source: Storage, partitions: list[Partition], cfg: WriterConfig) -> CommitResult:
    """Commit the skeletons and index of ``partitions`` at ``00000000000001``."""
    started = time.monotonic()
    assert cfg.lock is not None
    check_table_lock(table.config.raw, cfg.lock, table=redact(table.path))
    lock = cfg.lock.for_table(table.table_id, table.storage)
    heartbeat = HeartbeatClient(table.storage, writer_id=cfg.writer_id, interval_s=cfg.heartbeat_interval_s,
                                tolerable_misses=cfg.heartbeat_tolerable_misses)
    txn = Transaction(table, lock, writer_id=cfg.writer_id, heartbeat=heartbeat, lock_timeout_s=cfg.lock_timeout_s)
    try:
        txn.begin(at=inst.METADATA_BOOTSTRAP_TIME)
        jobs = _jobs(partitions)
        txn.write_inflight(_planned(jobs))
        written = list(_skeletons(table, src, source, jobs, partitions))
        faults.point("bootstrap-after-skeletons")
        t = inst.METADATA_BOOTSTRAP_TIME
        markers.reconcile(table.storage, t, [s.stat.path for s in written])
        bootstrap_index_files.write(table.storage, src.root, [s.mapping for s in written], int(time.time() * 1000))
        faults.point("bootstrap-after-index")
        meta = _metadata(table, src, [s.stat for s in written])
        instant = _commit(txn, meta)
    except BaseException:
        _undo(table, txn)
        raise
    finally:
        heartbeat.close()
        lock.close()
    n = sum(s.stat.num_writes for s in written)
    log.info("bootstrapped %d source files (%d rows) of %s METADATA_ONLY at instant %s", len(written), n,
             redact(src.root), instant.requested_time)
    return CommitResult(instant, attempts=1, num_inserts=n, files_written=len(written),
                        duration_s=time.monotonic() - started)


def _jobs(partitions: list[Partition]) -> dict[str, list[skeleton.Job]]:
    """A new file group per source file, numbered as tasks across the whole bootstrap."""
    out: dict[str, list[skeleton.Job]] = {}
    task = 0
    for p in partitions:
        for f in p.files:
            out.setdefault(p.path, []).append(skeleton.Job(f, p.path, layout.new_file_id(), task))
            task += 1
    return out


def _planned(jobs: dict[str, list[skeleton.Job]]) -> CommitMetadata:
    """The inflight file: the file groups the bootstrap creates."""
    return CommitMetadata({p: [WriteStat(file_id=j.file_id, path="", partition_path=p) for j in js]
                           for p, js in jobs.items()}, {}, OPERATION)


def _skeletons(table: Table, src: Source, source: Storage, jobs: dict[str, list[skeleton.Job]],
               partitions: list[Partition]) -> Iterator[skeleton.Skeleton]:
    """Each partition's keys read and checked, then its skeletons written, files side by side."""
    t = inst.METADATA_BOOTSTRAP_TIME
    schema = table.schema()
    ctx = armed(context(table.storage.uri, t, schema, None, len(table.config.partition_by) or 1,
                        tuple(table.config.record_key), config=table.config), table.config)
    done = 0
    total = sum(len(js) for js in jobs.values())
    with ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="mw-bootstrap") as pool:
        for p in partitions:
            keys = list(pool.map(lambda j: skeleton.read_keys(src, source, table.config, j), jobs[p.path]))
            skeleton.check_unique(src, p.path, keys)
            yield from pool.map(lambda k: skeleton.write(table.storage, source, ctx, k), keys)
            done += len(keys)
            log.info("bootstrap of %s: %d of %d skeleton files written", redact(table.path), done, total)


def _metadata(table: Table, src: Source, stats: list[WriteStat]) -> CommitMetadata:
    p2s: dict[str, list[WriteStat]] = {}
    for s in stats:
        p2s.setdefault(s.partition_path, []).append(s)
    extra = {"schema": arrow_to_avro_json(table.schema(), table.name), BOOTSTRAP_BASE_PATH_KEY: src.root}
    return CommitMetadata(p2s, extra, OPERATION)


def _commit(txn: Transaction, meta: CommitMetadata) -> inst.Instant:
    """Commit; an unknown outcome is settled by reading the timeline again."""
    try:
        return txn.commit(meta)
    except CommitStateUnknownError as e:
        if txn.resolve_unknown():
            assert txn.instant is not None
            return txn.instant
        raise CommitNotLandedError(f"{e} -- re-read the timeline: it did not land") from e


def _undo(table: Table, txn: Transaction) -> None:
    """A failure here: undo the attempt unless it landed (its skeletons from their markers,
    its pending instant), then its index once the instant is gone."""
    try:
        if txn.committed:
            return
        txn.abort()
        own = txn.instant
        if own is not None and table.timeline().find(own.requested_time, own.action) is None:
            bootstrap_index_files.drop(table.storage)
    except Exception as e:  # noqa: BLE001 -- a failing clean-up must not hide the error; the companion job finishes it
        log.warning("bootstrap of %s: undoing the failed attempt also failed (%s); the companion job rolls it back",
                    redact(table.path), e)
    finally:
        txn.stop_heartbeat()
