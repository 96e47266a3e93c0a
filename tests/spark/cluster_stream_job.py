"""Driver program for the standalone-cluster streaming test: availableNow runs of
``writeStream.format("multiwriter")`` from a parquet directory, their tasks on the worker's
executor. Before run k, the files of ``<incoming>/<k>/`` land in the source directory; every run
is a new query on the same checkpoint (a restart)."""
from __future__ import annotations

import json
import os
import shutil
import sys

from pyspark.sql import SparkSession

import multiwriter as mw

DDL = "id string, date string, ts long, value double"


def main() -> None:
    master, src, path, ck, zk_connect, zk_base, incoming = sys.argv[1:8]
    spark = (SparkSession.builder.master(master).appName("multiwriter-cluster-stream-test")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.ui.enabled", "false").config("spark.executor.memory", "512m")
             .config("spark.cores.max", "1").config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    mw.register(spark)
    runs = []
    for k in sorted(os.listdir(incoming), key=int):
        for name in sorted(os.listdir(os.path.join(incoming, k))):
            shutil.move(os.path.join(incoming, k, name), os.path.join(src, name))
        runs.append(run(spark, src, path, ck, zk_connect, zk_base))
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
    print(json.dumps({"runs": runs, "executors": executors, "app_id": spark.sparkContext.applicationId}), flush=True)
    spark.stop()


def run(spark: SparkSession, src: str, path: str, ck: str, zk_connect: str, zk_base: str) -> dict:
    """One availableNow query: its error (or None) and the ids of the micro-batches that had rows."""
    host, port = zk_connect.split(":")
    q = (spark.readStream.schema(DDL).parquet(src).writeStream.format("multiwriter")
         .option("hoodie.table.name", "trips")
         .option("hoodie.datasource.write.recordkey.field", "id")
         .option("hoodie.datasource.write.partitionpath.field", "date")
         .option("hoodie.datasource.write.precombine.field", "ts")
         .option("hoodie.datasource.write.streaming.checkpoint.identifier", "cluster-stream")
         .option("hoodie.write.lock.zookeeper.url", host).option("hoodie.write.lock.zookeeper.port", port)
         .option("hoodie.write.lock.zookeeper.base_path", zk_base)
         .option("checkpointLocation", ck).trigger(availableNow=True).start(path))
    q.awaitTermination(180)
    error = q.exception()
    return {"error": str(error) if error else None, "batches": [p["batchId"] for p in q.recentProgress if p["numInputRows"]]}

if __name__ == "__main__":
    main()
