"""The local Spark of the task-retry and late-attempt driver programs: ``local[2,2]`` (a failed
task is retried once), loopback only, and ``daemon`` as the Python workers' daemon module (which
plants the fault in every worker before it forks)."""
from __future__ import annotations

from pyspark.sql import SparkSession


def session(app: str, daemon: str) -> SparkSession:
    spark = (SparkSession.builder.master("local[2,2]").appName(app)
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.default.parallelism", "2").config("spark.python.daemon.module", daemon)
             .getOrCreate())
    spark.sparkContext.setLogLevel("OFF")
    return spark
