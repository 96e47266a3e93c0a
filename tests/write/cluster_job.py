"""Driver program for the standalone-cluster test: an upsert through the executor path."""
from __future__ import annotations

import json
import sys

import pyarrow as pa
from pyspark.sql import SparkSession

import multiwriter as mw


def main() -> None:
    master, path = sys.argv[1], sys.argv[2]
    spark = (SparkSession.builder.master(master).appName("multiwriter-cluster-test")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.ui.enabled", "false").config("spark.executor.memory", "512m")
             .config("spark.cores.max", "1").config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    cfg = mw.WriterConfig(lock=mw.InProcessLock(), writer_id="cluster", executor="spark")
    first = pa.table({"id": [str(i) for i in range(100)], "date": ["2024-01-01"] * 100,
                      "ts": pa.array([1] * 100, pa.int64()), "value": [1.0] * 100})
    second = pa.table({"id": [str(i) for i in range(50, 150)], "date": ["2024-01-01"] * 100,
                       "ts": pa.array([2] * 100, pa.int64()), "value": [2.0] * 100})
    results = [mw.write(spark.createDataFrame(t), path, cfg) for t in (first, second)]
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
    print(json.dumps({"inserts": [r.num_inserts for r in results], "updates": [r.num_updates for r in results],
                      "executors": executors, "app_id": spark.sparkContext.applicationId}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
