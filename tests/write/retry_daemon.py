"""PySpark daemon for the task-retry test (``spark.python.daemon.module``): every task's first
attempt fails right after writing its data file, as a task killed after its write would.

The patch is made in the daemon, before it forks the Python workers, so every worker has it;
each injected failure leaves a file in ``$MULTIWRITER_RETRY_HOOK_DIR`` so the test can tell
that retries really happened.
"""
from __future__ import annotations

import os
import uuid

from multiwriter.write import merge

_original = merge._write_parquet


def _write_then_fail_first_attempt(storage, rel, out, *rest, **options):
    from pyspark import TaskContext

    written = _original(storage, rel, out, *rest, **options)
    tc = TaskContext.get()
    if tc is not None and tc.attemptNumber() == 0:
        with open(os.path.join(os.environ["MULTIWRITER_RETRY_HOOK_DIR"], uuid.uuid4().hex), "w") as f:
            f.write(rel)
        raise RuntimeError(f"injected: attempt 0 of task {tc.partitionId()} fails after writing {rel}")
    return written


merge._write_parquet = _write_then_fail_first_attempt

if __name__ == "__main__":
    from pyspark.daemon import manager

    manager()
