"""A table bootstrapped in both modes (METADATA_ONLY partitions and, on Spark executors, a
FULL_RECORD one) under a real ZooKeeper lock, read by the Spark data source (skeleton rows
stitched with their source rows on the executors, small splits too), upserted through the
writer's Spark executor path (the merge reads a skeleton group's stitched rows) and clustered on
executors; our reader and Spark against a model, the source files' hashes unchanged."""
from __future__ import annotations

import pyarrow as pa

import multiwriter as mw
from multiwriter.format.instant import FULL_BOOTSTRAP_TIME, METADATA_BOOTSTRAP_TIME
from multiwriter.spark.options import SPLIT_BYTES
from tests.write.test_bootstrap_metadata_only import (
    REGEX,
    REGEX_SELECTOR,
    check,
    hashes,
    make_source,
    model_rows,
    skeletons,
    table_rows,
)


def spark_rows(df) -> list[tuple]:
    return table_rows(pa.Table.from_pandas(df.select("id", "value", "date", "ts").toPandas(), preserve_index=False))


def test_a_bootstrapped_table_on_spark_under_zookeeper(spark, zk_lock, tmp_path):
    src = tmp_path / "src"
    model = make_source(src, hive=True, string_keys=False)
    before = hashes(src)
    path = str(tmp_path / "t")
    lock = zk_lock()
    opts = {REGEX: REGEX_SELECTOR, "hoodie.bootstrap.mode.selector.regex": "date=2024-01-0[12]"}
    r = mw.bootstrap(str(src), path, name="t", record_key="id", partition_by=["date"], ordering_field="ts",
                     options=opts, lock=lock, spark=spark)
    assert r.instants == (METADATA_BOOTSTRAP_TIME, FULL_BOOTSTRAP_TIME)
    check(path, model)
    table = mw.Table.open(path)
    assert spark_rows(table.to_spark(spark)) == model_rows(model)
    small = spark.read.format("multiwriter").option(SPLIT_BYTES, "1024").load(path)
    assert spark_rows(small) == model_rows(model)
    # an upsert on the executors: skeleton groups rewritten from their stitched rows
    keys = sorted(k for k, (_, d, _) in model.items() if d != "2024-01-03")[:5]
    batch = pa.table({"id": keys, "ts": [2] * len(keys), "value": [6.0] * len(keys), "name": ["s"] * len(keys),
                      "date": [model[k][1] for k in keys]})
    mw.write(spark.createDataFrame(batch.to_pandas()), path, mw.WriterConfig(writer_id="s", lock=lock,
                                                                             executor="spark"))
    model.update({k: (6.0, model[k][1], 2) for k in keys})
    check(path, model)
    assert spark_rows(mw.Table.open(path).to_spark(spark)) == model_rows(model)
    left = len(skeletons(path))
    on_executors = mw.ClusteringConfig(min_file_groups=2, executor_min_bytes=1)
    with mw.Cleaner(path, lock=zk_lock(), heartbeat_interval_s=1.0, clustering=on_executors, spark=spark) as c:
        assert c.run_once().clustering_instants
    latest = mw.Table.open(path).snapshot().files()
    assert left and not any(f.instant_time == METADATA_BOOTSTRAP_TIME for f in latest), "skeleton groups clustered"
    check(path, model)
    assert spark_rows(mw.Table.open(path).to_spark(spark)) == model_rows(model)
    assert hashes(src) == before, "the source files are never changed"
