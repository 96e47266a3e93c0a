"""PySpark daemon for the late-attempt test (``spark.python.daemon.module``): the first attempt of
a task forks right before writing its first data file (past its pre-write check). The parent
fails the attempt, so Spark reruns the task and the batch commits; the forked child is the late
attempt: it waits until the instant completed, then writes the file and goes on as the attempt
would have (the check before publishing, then the publish).
It leaves ``resumed-<pid>`` (holding the path it wrote) in ``$MULTIWRITER_LATE_HOOK_DIR``.

The data source's tasks (``df.write``) write no table file: they hand their rows to the driver,
which commits them. Their first attempt is lost the same way, and the late one finishes its
task once the batch committed (whatever it would write then must not show).

The patch is made in the daemon, before it forks the Python workers, so every worker has it.
"""
from __future__ import annotations

import glob
import os
import time

from multiwriter.spark import source
from multiwriter.write import executor, merge

_original = merge._write_parquet
_forked = [False]


def _completed(storage, instant_time: str) -> bool:
    return bool(glob.glob(os.path.join(storage.abs(".hoodie/timeline"), f"{instant_time}_*.commit")))


def _late_first_attempt(storage, rel, out, *rest, **options):
    from pyspark import TaskContext

    tc = TaskContext.get()
    if tc is None or tc.attemptNumber() != 0 or _forked[0]:
        return _original(storage, rel, out, *rest, **options)
    _forked[0] = True
    if os.fork() != 0:  # the attempt Spark sees: lost
        raise RuntimeError(f"injected: attempt 0 of task {tc.partitionId()} is lost after writing {rel}")
    os.setsid()  # out of the daemon's process group, which Spark's shutdown kills
    t = rel.rsplit("_", 1)[-1].removesuffix(".parquet")
    deadline = time.time() + 90
    while not _completed(storage, t) and time.time() < deadline:
        time.sleep(0.05)
    with open(os.path.join(os.environ["MULTIWRITER_LATE_HOOK_DIR"], f"resumed-{os.getpid()}"), "w") as f:
        f.write(rel)
    return _original(storage, rel, out, *rest, **options)


def _late_first_task(write):
    def late(self, iterator):
        from pyspark import TaskContext

        tc = TaskContext.get()
        if tc is None or tc.attemptNumber() != 0 or _forked[0]:
            return write(self, iterator)
        _forked[0] = True
        rows = list(iterator)  # past the point of no return: the task has its input
        if os.fork() != 0:
            raise RuntimeError(f"injected: attempt 0 of task {tc.partitionId()} is lost after reading its rows")
        os.setsid()
        table = self.options["path"]
        deadline = time.time() + 90
        while not glob.glob(os.path.join(table, ".hoodie/timeline/*.commit")) and time.time() < deadline:
            time.sleep(0.05)
        with open(os.path.join(os.environ["MULTIWRITER_LATE_HOOK_DIR"], f"resumed-{os.getpid()}"), "w") as f:
            f.write("data source task")
        out = write(self, iter(rows))
        os._exit(0)  # the late attempt's result has nowhere to go
        return out

    return late


merge._write_parquet = _late_first_attempt
source.MultiWriterWriter.write = _late_first_task(source.MultiWriterWriter.write)
executor.MAX_PARALLEL_MERGES = 1  # a forked child has no thread pool: its merges must run in its own thread

if __name__ == "__main__":
    from pyspark.daemon import manager

    manager()
