"""The write path: prepare records, index, plan file groups, merge (driver or Spark executors)."""
