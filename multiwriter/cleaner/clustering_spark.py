"""Table services on Spark executors: one task per large unit of work (a clustering plan group,
a compaction operation).

The driver keeps the plan, the heartbeat and the commit; executors only read input slices and
write the new files, with the same code as the driver (:func:`.clustering.execute_group`,
:func:`.compaction.execute_operation`) and the same pre-write check (heartbeat age and the
pending instant, shipped in the merge context), so a service whose cleaner died cannot leave
files behind an executor either.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..errors import MultiWriterError
from ..storage import Storage
from ..table.metadata import WriteStat


JOB_GROUP_PREFIX = "multiwriter-clustering-"

#: runs one job on an executor: (storage, merge context, job, write token) -> its write stat
Task = Callable[[Storage, Any, Any, str], WriteStat]


def run_on_executors(
    spark: Any, mctx: Any, jobs: list[Any], task: Task, *, service: str, aborted: type[MultiWriterError]
) -> dict[int, WriteStat]:
    """Run ``task`` over ``jobs`` (each with an ``index``) as one Spark job, job group
    ``multiwriter-<service>-<T>``; returns the write stat of each job index. Stats travel back
    as JSON; an executor raising ``aborted`` raises it here too."""
    sc = spark.sparkContext
    t = mctx.instant_time
    sc.setJobGroup(f"multiwriter-{service}-{t}", f"{service} {t}: {len(jobs)} file groups")
    try:
        rdd = sc.parallelize(jobs, len(jobs)).map(lambda j: _run(mctx, j, task))
        out = rdd.collect()
    except Exception as e:  # noqa: BLE001 -- Spark wraps executor errors in Py4J/PythonException
        raise _unwrap(e, t, service, aborted) from e
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
        sc.setLocalProperty("spark.job.description", None)
    return {i: WriteStat.from_row(json.loads(st)) for i, st in out}


def _run(mctx: Any, job: Any, task: Task) -> tuple[int, str]:  # runs on an executor

    from pyspark import TaskContext

    from ..format import layout

    tc = TaskContext.get()
    token = layout.write_token(job.index, tc.stageId() if tc else 0, tc.attemptNumber() if tc else 0)
    st = task(Storage(mctx.table_uri), mctx, job, token)
    return job.index, json.dumps(st.to_row())


def _unwrap(e: Exception, t: str, service: str, aborted: type[MultiWriterError]) -> MultiWriterError:
    """A typed error for a failed executor job: an executor's ``aborted`` error (an input
    cleaned away) is raised as on the driver; anything else fails the service's instant (the
    caller deletes its files either way)."""
    text = str(e)
    if aborted.__name__ in text:
        first = next((ln for ln in text.splitlines() if aborted.__name__ in ln), "")
        return aborted(f"{service} {t}: an executor found an input gone ({first.strip()[:300]})")
    first = next((ln for ln in text.splitlines() if "Error" in ln), text[:300])
    return MultiWriterError(f"{service} {t}: the Spark job writing its file groups failed: {first.strip()}")
