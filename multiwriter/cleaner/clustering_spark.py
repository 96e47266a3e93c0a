"""Clustering on Spark executors: one task per large plan group.

The driver keeps the plan, the heartbeat and the commit; executors only read input slices and
write the new file groups, with the same code as the driver (:func:`.clustering.execute_group`)
and the same pre-write check (heartbeat age and the pending instant, shipped in the merge
context), so a clustering whose cleaner died cannot leave files behind an executor either.
"""
from __future__ import annotations

import json
from typing import Any

from ..errors import MultiWriterError
from ..storage import Storage
from ..table.metadata import WriteStat
from .clustering import ClusteringAbortedError, GroupJob, execute_group

JOB_GROUP_PREFIX = "multiwriter-clustering-"


def execute_on_executors(spark: Any, mctx: Any, jobs: list[GroupJob]) -> dict[int, WriteStat]:
    """Run ``jobs`` as one Spark job (Spark job group ``multiwriter-clustering-<T>``); returns
    the write stat of each job index. Stats travel back as JSON."""
    sc = spark.sparkContext
    sc.setJobGroup(JOB_GROUP_PREFIX + mctx.instant_time, f"clustering {mctx.instant_time}: {len(jobs)} file groups")
    try:
        rdd = sc.parallelize(jobs, len(jobs)).map(lambda j: _run(mctx, j))
        out = rdd.collect()
    except Exception as e:  # noqa: BLE001 -- Spark wraps executor errors in Py4J/PythonException
        raise _unwrap(e, mctx.instant_time) from e
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
        sc.setLocalProperty("spark.job.description", None)
    return {i: WriteStat(**json.loads(st)) for i, st in out}


def _run(mctx: Any, job: GroupJob) -> tuple[int, str]:  # runs on an executor
    import dataclasses

    from pyspark import TaskContext

    from ..table import layout

    tc = TaskContext.get()
    token = layout.write_token(job.index, tc.stageId() if tc else 0, tc.attemptNumber() if tc else 0)
    st = execute_group(Storage(mctx.table_uri), mctx, job, token)
    return job.index, json.dumps(dataclasses.asdict(st))


def _unwrap(e: Exception, t: str) -> MultiWriterError:
    """A typed error for a failed executor job: an input cleaned away aborts the clustering as
    on the driver; anything else fails it (the caller deletes its files either way)."""
    text = str(e)
    if ClusteringAbortedError.__name__ in text:
        return ClusteringAbortedError(f"clustering {t}: an executor found an input gone; aborted and planned again")
    first = next((ln for ln in text.splitlines() if "Error" in ln), text[:300])
    return MultiWriterError(f"clustering {t}: the Spark job writing its file groups failed: {first.strip()}")
