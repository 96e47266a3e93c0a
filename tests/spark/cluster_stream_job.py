"""Driver program for the standalone-cluster streaming test: one availableNow run of
``writeStream.format("multiwriter")`` from a parquet directory, its tasks on the worker's executor."""
from __future__ import annotations

import json
import sys

from pyspark.sql import SparkSession

import multiwriter as mw

DDL = "id string, date string, ts long, value double"


def main() -> None:
    master, src, path, ck, zk_connect, zk_base = sys.argv[1:7]
    host, port = zk_connect.split(":")
    spark = (SparkSession.builder.master(master).appName("multiwriter-cluster-stream-test")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.ui.enabled", "false").config("spark.executor.memory", "512m")
             .config("spark.cores.max", "1").config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    mw.register(spark)
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
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
    batches = [p["batchId"] for p in q.recentProgress if p["numInputRows"]]
    print(json.dumps({"error": str(error) if error else None, "executors": executors, "batches": batches}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
