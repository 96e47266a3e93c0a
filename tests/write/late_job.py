"""Driver program of the late-attempt test: ``python -m tests.write.late_job PATH N [API]`` upserts
ids 0..N-1 (value 1.0, two partitions) on a local Spark that retries failed tasks
(``local[2,2]``), where every task's first attempt is lost but goes on late
(:mod:`tests.write.late_daemon`). ``API``: ``mw.write`` (the executor path, the default) or
``df.write`` (the data source, Hudi's option keys, a file-system lock). Prints one JSON line."""
from __future__ import annotations

import json
import sys

import pyarrow as pa

import multiwriter as mw
from tests.write.retrying_spark import session


def main() -> None:
    path, n = sys.argv[1], int(sys.argv[2])
    api = sys.argv[3] if len(sys.argv) > 3 else "mw.write"
    spark = session("multiwriter-late-attempt", "tests.write.late_daemon")
    batch = pa.table({"id": [str(i) for i in range(n)], "date": ["2024-01-01" if i % 2 else "2024-01-02" for i in range(n)],
                      "ts": pa.array([1] * n, pa.int64()), "value": [1.0] * n})
    if api == "df.write":
        mw.register(spark)
        spark.createDataFrame(batch).write.format("multiwriter").options(**{
            "hoodie.table.name": "trips", "hoodie.datasource.write.recordkey.field": "id",
            "hoodie.datasource.write.partitionpath.field": "date", "hoodie.datasource.write.precombine.field": "ts",
            "hoodie.datasource.write.operation": "upsert",
            "hoodie.write.lock.provider": "org.apache.hudi.client.transaction.lock.FileSystemBasedLockProvider",
        }).mode("append").save(path)
        tl = mw.Table.open(path).timeline()
        (instant,) = tl.completed_writes()
        inserts = sum(st.num_inserts for st in tl.commit_metadata(instant).all_stats())
        print(json.dumps({"inserts": inserts, "instant": instant.requested_time}), flush=True)
    else:
        cfg = mw.WriterConfig(writer_id="late", executor="spark", lock=mw.InProcessLock())
        r = mw.write(spark.createDataFrame(batch), path, cfg)
        print(json.dumps({"inserts": r.num_inserts, "instant": r.instant.requested_time}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
