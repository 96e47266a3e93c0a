"""Driver program of the task-retry test: ``python -m tests.write.retry_job PATH N [N ...]`` upserts
ids 0..N-1 (value 1.0) once per N through the executor path on a local Spark that retries failed
tasks (``local[2,2]``), where every first task attempt fails after its write
(:mod:`tests.write.retry_daemon`). Prints one JSON line."""
from __future__ import annotations

import json
import sys

import pyarrow as pa

import multiwriter as mw
from tests.write.retrying_spark import session


def _batch(ids: range, value: float) -> pa.Table:
    n = len(ids)
    return pa.table({"id": [str(i) for i in ids], "date": ["2024-01-01" if i % 2 else "2024-01-02" for i in ids],
                     "ts": pa.array([int(value)] * n, pa.int64()), "value": [value] * n})


def main() -> None:
    path = sys.argv[1]
    spark = session("multiwriter-task-retry", "tests.write.retry_daemon")
    cfg = mw.WriterConfig(writer_id="retry", executor="spark", lock=mw.InProcessLock())
    results = [mw.write(spark.createDataFrame(_batch(range(n), 1.0)), path, cfg) for n in map(int, sys.argv[2:])]
    print(json.dumps({"inserts": [r.num_inserts for r in results], "updates": [r.num_updates for r in results],
                      "instants": [r.instant.requested_time for r in results]}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
