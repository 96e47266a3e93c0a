"""Run a plan's file-group merges: on the driver (small batches: no Spark job, which costs
~100 ms+) or on Spark executors (see :mod:`multiwriter.write.spark`).

On the driver the merges of one plan run on a thread pool: reading, sorting and writing
Parquet release the GIL, so file groups merge side by side on every core. On S3 the files they
write are published side by side too (:meth:`Storage.publishing_together`): a merge hands its
file's final PUT to the request threads and goes on with the next group, and the plan's run ends
once every upload has ended, so the commit follows only files in place.
"""
from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

import pyarrow as pa

from .. import markers
from ..storage import Storage
from ..threads import ProcessPool
from ..format import layout
from ..table.metadata import WriteStat
from ..table.properties import TableConfig
from ..table.snapshot import FileSlice
from .index import FooterKeys
from .log_append import is_log_append, log_file_name, write_group
from .merge import MergeContext, armed, cdc_file_name, check_alive, read_old_file, with_encodings
from .plan import FileGroupTask, Plan

#: merges of one plan running at once on the driver (None: one per core)
MAX_PARALLEL_MERGES: int | None = None


def run_on_driver(
    storage: Storage, ctx: MergeContext, plan: Plan, config: TableConfig | None = None,
    *, on_footer: Callable[[str, FooterKeys], None] | None = None,
    token: Callable[[FileGroupTask], str] | None = None, list_markers: bool = False,
    on_inserted: Callable[[str, pa.Array], None] | None = None, old_reads: OldReads | None = None,
) -> list[WriteStat]:
    """Merge every file group of ``plan`` in this process (pre-write checks armed: ``config`` is
    read from the table when not given; ``token``: each file's write token, by default the
    task's index). ``list_markers``: this call writes every file of its instant, so their
    markers go into one list first (:func:`markers.create_all`) instead of one file each.
    Stats come back in task order; the first failure is raised once every started merge has
    finished and every upload sent has ended (so markers name all files left behind, and none
    lands later); a failed upload raises :class:`~multiwriter.errors.UploadError`. ``on_inserted``: see
    :func:`~.merge.merge_file_group` (called from the merge threads). ``old_reads``: reads of
    old base files started while the batch was tagged."""
    if config is None:
        from ..table.table import Table

        config = Table.open(storage.uri).config
    ctx = with_encodings(armed(ctx, config), plan.rows)
    tasks = plan.tasks
    if list_markers and tasks:
        files = [(t.partition, _file_name(ctx, t, token)) for t in tasks]
        files += [(t.partition, n) for t in tasks if not is_log_append(ctx, t)
                  and (n := cdc_file_name(ctx, t, _token(t, token))) is not None]  # CDC logs of merged groups
        check_alive(storage, ctx, f"the markers of {len(files)} files")
        markers.create_all(storage, ctx.instant_time, files)
        ctx = dataclasses.replace(ctx, markers_listed=True)
    with storage.publishing_together() as uploads:
        workers = _workers(plan)
        if workers <= 1:
            plan.gather()
            return [st for t in tasks for st in _merge_one(storage, ctx, plan, t, on_footer, token, on_inserted,
                                                            old_reads)]
        pool = _merge_pool()
        start_gather(plan)  # a no-op when the writer started it before its inflight file
        by_task = _dispatch(plan, workers, lambda t: pool.submit(uploads.run, _merge_one, storage, ctx, plan, t,
                                                                 on_footer, token, on_inserted, old_reads))
        futures = [by_task[t.task_index] for t in tasks if t.task_index in by_task]
        failed = [f for f in futures if f.exception() is not None]
        if failed:
            raise _first_error(failed)
        return [st for f in futures for st in f.result()]


def _dispatch(plan: Plan, cores: int, submit: Callable[[FileGroupTask], Future]) -> dict[int, Future]:
    """Run the merges, longest first: one per core at any time, and more beside them while the
    merges running hold little (:meth:`Plan.weight`, at most :data:`SHARED_MERGE_BYTES` in all)
    and the plan has no more merges than the pool has threads. Merges of similar size, one per
    core, leave a core idle while the last ones run alone (5 groups on 2 cores take 3 rounds);
    side by side, the cores share them to the end. Many small merges (an insert's new files)
    balance by themselves, and more threads than cores only fight for the interpreter lock
    there (a fifth more CPU). Once a merge fails, none is started; returns when every started
    merge has finished."""
    pending = list(reversed(_longest_first(plan)))
    share = len(pending) <= MERGE_POOL_THREADS
    running: dict[Future, int] = {}
    started: dict[int, Future] = {}
    failed = False
    while running or (pending and not failed):
        while pending and not failed:
            task, held = pending[-1], sum(running.values())
            if len(running) >= MERGE_POOL_THREADS or (len(running) >= cores and (
                    not share or held + plan.weight(task) > SHARED_MERGE_BYTES)):
                break
            pending.pop()
            f = started[task.task_index] = submit(task)
            running[f] = plan.weight(task)
        done, _ = wait(list(running), return_when=FIRST_COMPLETED)
        for f in done:
            del running[f]
            failed = failed or f.exception() is not None
    return started


def start_gather(plan: Plan) -> None:
    """Start reordering ``plan``'s rows by task on the merge threads (several pieces side by
    side), so the caller can write its inflight file and markers meanwhile."""
    workers = _workers(plan)
    if workers > 1:
        plan.gather(workers, _merge_pool().submit)


def _workers(plan: Plan) -> int:
    return min(len(plan.tasks), MAX_PARALLEL_MERGES or os.cpu_count() or 1)


#: the merge threads, started once per process rather than once per batch (merges never wait
#: on each other, so the writers of one process can share them)
MERGE_POOL_WORKERS = max(os.cpu_count() or 1, 2)
#: threads of the merge pool: merges beyond one per core run beside the others (:func:`_dispatch`)
MERGE_POOL_THREADS = 4 * MERGE_POOL_WORKERS
MERGE_POOL = ProcessPool("mw-merge", MERGE_POOL_THREADS)
#: the most memory (:meth:`Plan.weight`) that the merges of one plan hold while more of them run than cores
SHARED_MERGE_BYTES = 128 << 20
#: the most bytes of old base files (as stored) read ahead of their merges, see :class:`OldReads`
EARLY_READ_BYTES = 64 << 20


def _merge_pool() -> ThreadPoolExecutor:
    return MERGE_POOL.get()


def _longest_first(plan: Plan) -> list[FileGroupTask]:
    """The tasks in the order they start: rewrites of existing files (they read and rewrite the
    old rows) before new files, larger before smaller, so no long merge starts last while the
    other threads have nothing left to do."""
    return sorted(plan.tasks, key=lambda t: (t.is_new, -plan.row_count(t), t.task_index))


def _token(task: FileGroupTask, token: Callable[[FileGroupTask], str] | None) -> str:
    return token(task) if token is not None else layout.write_token(task.task_index, 0, 0)


def _file_name(ctx: MergeContext, task: FileGroupTask, token: Callable[[FileGroupTask], str] | None) -> str:
    if is_log_append(ctx, task):
        return log_file_name(ctx, task, _token(task, token))
    return layout.DataFileName(task.file_id, _token(task, token), ctx.instant_time).name


def _merge_one(
    storage: Storage, ctx: MergeContext, plan: Plan, task: FileGroupTask,
    on_footer: Callable[[str, FooterKeys], None] | None, token: Callable[[FileGroupTask], str] | None = None,
    on_inserted: Callable[[str, pa.Array], None] | None = None, old_reads: OldReads | None = None,
) -> list[WriteStat]:
    return write_group(storage, ctx, task, plan.rows_for(task), _token(task, token), may_delete=plan.has_deletes,
                       on_footer=on_footer, on_inserted=on_inserted,
                       old_read=old_reads.of(task) if old_reads is not None else None)


class OldReads:
    """Reads of the old base files a Copy-on-Write batch will rewrite, started on the merge
    threads as the index finds each file holding batch keys: the files are read while the
    main thread goes on tagging, planning and writing the inflight file, which would otherwise
    leave the other cores idle. A read the plan does not use is dropped unread (files are
    immutable, so an early read is the same read). Bounded, since a read waits in memory for
    its merge: at most ``max_files`` files and ``max_bytes`` of them (their size on storage);
    the merges read the others themselves, as many at once as there are merge threads. By
    default two files per core, or on S3, where a read mostly waits on its request, as many as
    the merge pool has threads."""

    def __init__(self, storage: Storage, max_files: int | None = None, max_bytes: int = EARLY_READ_BYTES) -> None:
        self.storage = storage
        if max_files is None:
            max_files = MERGE_POOL_THREADS if storage.is_s3 else 2 * MERGE_POOL_WORKERS
        self.max_files = max_files
        self.max_bytes = max_bytes
        self._bytes = 0
        self._reads: dict[str, Future] = {}

    def start(self, fs: FileSlice) -> None:
        if fs.path in self._reads or len(self._reads) >= self.max_files or self._bytes + fs.size > self.max_bytes:
            return
        self._bytes += fs.size
        self._reads[fs.path] = _merge_pool().submit(read_old_file, self.storage, fs.path)

    def of(self, task: FileGroupTask) -> Future | None:
        if task.old_file is None:
            return None
        return self._reads.get(layout.data_file_path(task.partition, task.old_file))


class MergedInserts:
    """The keys the merges of one attempt inserted as new, per partition (collected from the
    merge threads): what the same-new-key conflict check compares, as each merge saw it."""

    def __init__(self) -> None:
        self._parts: dict[str, list[pa.Array]] = {}
        self._mu = threading.Lock()

    def __call__(self, partition: str, keys: pa.Array) -> None:
        with self._mu:
            self._parts.setdefault(partition, []).append(keys)

    def by_partition(self) -> dict[str, pa.Array]:
        with self._mu:
            return {p: ks[0] if len(ks) == 1 else pa.concat_arrays(ks) for p, ks in self._parts.items()}


def _first_error(failed: list[Future]) -> BaseException:
    exc = failed[0].exception()
    assert exc is not None
    return exc
