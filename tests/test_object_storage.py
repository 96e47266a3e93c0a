"""Tables on an S3 endpoint (moto's server on 127.0.0.1) through plain ``s3://`` URIs and the
standard AWS variables: writes, the sink, the data source, the cleaner, racing writers, and
hudi-rs (an independent reader) reading the bucket."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import multiwriter as mw
from multiwriter.format import layout
from multiwriter.table.snapshot import list_data_files
from tests.cleaner.conftest import wait_lapsed
from tests.conftest import TRIPS_SCHEMA, trips
from tests.oracle import rows

ROOT = Path(__file__).resolve().parents[1]
COLS = ["id", "date", "ts", "value"]


def hudi_read_s3(uri: str, endpoint: str, as_of: str | None = None) -> pa.Table:
    """hudi-rs reading the bucket, configured only through its storage options."""
    from hudi import HudiReadOptions, HudiTableBuilder

    ht = HudiTableBuilder.from_base_uri(uri).with_storage_options({
        "aws_endpoint_url": endpoint, "aws_access_key_id": "testing", "aws_secret_access_key": "testing",
        "aws_region": "us-east-1", "aws_allow_http": "true",
    }).build()
    batches = ht.read(HudiReadOptions().with_as_of_timestamp(as_of)) if as_of else ht.read()
    return pa.Table.from_batches(batches) if batches else pa.table({})


def _create(uri: str, lock=None) -> mw.Table:
    return mw.Table.create(uri, name="trips", schema=TRIPS_SCHEMA, record_key="id", partition_by=["date"],
                           ordering_field="ts", lock=lock)


def _child(module: str, command: str, args: dict, *, faults: str | None = None) -> subprocess.Popen:
    env = dict(os.environ)  # carries the AWS variables the fixture set
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("MULTIWRITER_FAULTS", None)
    if faults:
        env["MULTIWRITER_FAULTS"] = faults
    return subprocess.Popen([sys.executable, "-m", module, command, json.dumps(args)], cwd=str(ROOT), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_storage_never_asks_aws_for_the_bucket_region(s3_server):
    from multiwriter.storage import Storage, s3_options

    st = Storage(s3_server() + "/t")
    assert st.fs.handler.client.meta.region_name == "us-east-1"
    assert s3_options({"AWS_ENDPOINT_URL": "http://127.0.0.1:1"}) == {
        "endpoint_override": "127.0.0.1:1", "scheme": "http", "region": "us-east-1"}
    assert s3_options({"AWS_DEFAULT_REGION": "eu-west-1"}) == {"region": "eu-west-1"}  # real S3, known region
    with pytest.raises(mw.errors.ConfigError, match="AWS_ALLOW_HTTP"):
        s3_options({"AWS_ENDPOINT_URL": "http://127.0.0.1:1", "AWS_ALLOW_HTTP": "false"})


def test_create_write_read_and_hudi_rs_on_s3(s3_server):
    uri = s3_server() + "/trips"
    _create(uri)
    cfg = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock(), executor="driver")
    r1 = mw.write(trips(range(4)), uri, cfg)
    mw.write(trips(range(2, 6), date="2024-01-02", ts=2, value=2.0), uri, cfg)
    mw.write(trips(range(2), ts=3, value=3.0), uri, cfg)
    expect = rows(hudi_read_s3(uri, s3_server.endpoint), COLS)
    assert len(expect) == 8
    assert rows(mw.Table.open(uri).read(), COLS) == expect
    assert rows(mw.Table.open(uri).read(as_of=r1.instant.requested_time), COLS) == rows(
        hudi_read_s3(uri, s3_server.endpoint, as_of=r1.instant.requested_time), COLS)
    # the objects are really in the bucket (boto3, not our storage layer)
    keys = {o["Key"] for o in s3_server.client.list_objects_v2(Bucket=uri[5:].split("/")[0])["Contents"]}
    assert "trips/.hoodie/hoodie.properties" in keys and any(k.endswith(".parquet") for k in keys)


def test_sink_and_data_source_on_s3(s3_server, spark, zk_server, zk_base, zk_lock):
    uri = s3_server() + "/trips"
    sink = mw.MultiWriterSink(uri, mw.WriterConfig(writer_id="stream", lock=zk_lock()),
                              table={"name": "trips", "schema": TRIPS_SCHEMA, "record_key": "id",
                                     "partition_by": ["date"], "ordering_field": "ts"})
    try:
        sink(spark.createDataFrame(trips(range(3)).to_pandas()), 0)
        sink(spark.createDataFrame(trips(range(3)).to_pandas()), 0)  # a replay: skipped
        sink(spark.createDataFrame(trips(range(2, 5), ts=2, value=2.0).to_pandas()), 1)
    finally:
        sink.close()
    assert len(mw.Table.open(uri).timeline().completed_writes()) == 2
    mw.register(spark)
    df = spark.read.format("multiwriter").load(uri)
    expect = rows(hudi_read_s3(uri, s3_server.endpoint), COLS)
    assert sorted((tuple(r[c] for c in COLS) for r in df.collect()), key=repr) == expect
    assert sorted(tuple(r) for r in mw.Table.open(uri).to_spark(spark).select(*COLS).collect()) == sorted(expect)
    # the data source's append, with Hudi's keys
    host, port = zk_server.connect.split(":")
    spark.createDataFrame(trips(range(5, 7), ts=3, value=3.0).to_pandas()).write.format("multiwriter") \
        .option("hoodie.write.lock.zookeeper.url", host).option("hoodie.write.lock.zookeeper.port", port) \
        .option("hoodie.write.lock.zookeeper.base_path", zk_base).mode("append").save(uri)
    assert len(rows(hudi_read_s3(uri, s3_server.endpoint), COLS)) == 7


def test_cleaner_rolls_back_a_killed_writer_retains_and_archives_on_s3(s3_server, zk_server, zk_base, zk_lock):
    uri = s3_server() + "/trips"
    table = _create(uri, lock=zk_lock())
    p = _child("tests.cleaner.proc", "write", {"zk": zk_server.connect, "base": zk_base, "path": uri, "writer": "k",
                                               "ids": [1, 2, 3], "batches": 2}, faults="after-data-files=kill@2")
    out, err = p.communicate(timeout=120)
    assert p.returncode != 0, err
    killed = [i for i in table.timeline().pending()]
    assert len(killed) == 1
    t_killed = killed[0].requested_time
    assert [f for f in list_data_files(table.storage) if f.instant_time == t_killed]
    cfg = mw.WriterConfig(writer_id="w", lock=zk_lock(), executor="driver", heartbeat_interval_s=1.0,
                          heartbeat_tolerable_misses=1)
    for k in range(4):
        mw.write(trips([1, 2, 3], ts=10 + k, value=float(k)), uri, cfg)
    wait_lapsed(table, t_killed)  # the killed writer's heartbeat (1 s, 1 miss) expires
    with mw.Cleaner(uri, lock=zk_lock(), heartbeat_interval_s=1.0, heartbeat_tolerable_misses=1,
                    retain_commits=1, archive_keep_min=1, archive_keep_max=2) as c:
        report = c.run_once()
    assert report.errors == []
    assert t_killed in report.rolled_back
    assert not [f for f in list_data_files(table.storage) if f.instant_time == t_killed]
    assert not table.storage.exists(layout.marker_dir(t_killed))
    assert report.old_versions_deleted >= 1 and report.archived >= 1
    tl = table.timeline()
    assert tl.pending() == [] and len(tl.completed()) <= 3
    assert rows(hudi_read_s3(uri, s3_server.endpoint), ["id", "value"]) == [("1", 3.0), ("2", 3.0), ("3", 3.0)]


def test_racing_writers_on_s3_create_every_instant_file_once(s3_server, zk_server, zk_base, zk_lock):
    """Two processes upsert the same file groups under the ZooKeeper lock. The bucket is
    versioned: every timeline object having exactly one version shows no instant file was ever
    written twice (the rule for stores without an atomic create)."""
    base = s3_server(versioned=True)
    uri = base + "/trips"
    _create(uri, lock=zk_lock())
    mw.write(trips(range(6)), uri, mw.WriterConfig(writer_id="seed", lock=zk_lock(), executor="driver"))
    procs = [
        _child("tests.workers", "write", {"zk": zk_server.connect, "base": zk_base, "path": uri, "writer": f"w{n}",
                                          "ids": list(range(6)), "ts": 2, "value": float(n), "retries": 5})
        for n in range(2)
    ]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert all(r["ok"] for r in results), results
    tl = mw.Table.open(uri).timeline()
    assert len(tl.completed_writes()) == 3 and tl.pending() == []
    # the later completion wins every record (same ordering value): an independent reader agrees
    last = max(range(2), key=lambda n: results[n]["completion"])
    assert rows(hudi_read_s3(uri, s3_server.endpoint), ["id", "value"]) == [(str(i), float(last)) for i in range(6)]
    bucket = base[5:]
    versions = s3_server.client.list_object_versions(Bucket=bucket, Prefix="trips/.hoodie/timeline/")
    per_key: dict[str, int] = {}
    for v in versions.get("Versions", []):
        if v["Key"].endswith("/"):
            continue  # a directory marker (Table.create makes the timeline directory)
        per_key[v["Key"]] = per_key.get(v["Key"], 0) + 1
    assert per_key and all(n == 1 for n in per_key.values()), per_key
    requested = {i.requested_time for i in tl.completed_writes()}
    assert len(requested) == 3
    # only attempts that lost a conflict deleted their (pending) instant files, never a commit's
    deleted = {m["Key"].rsplit("/", 1)[1][:17] for m in versions.get("DeleteMarkers", [])}
    assert not deleted & requested
    assert sum(r["attempts"] for r in results) - 2 == len(deleted)


def test_streaming_source_streaming_write_and_clustering_on_s3(s3_server, spark, zk_server, zk_base, zk_lock, tmp_path):
    """readStream/writeStream.format("multiwriter") and the cleaner's clustering on the bucket."""
    import pyarrow.parquet as pq

    bronze, silver = s3_server() + "/bronze", s3_server() + "/silver"
    _create(bronze, lock=zk_lock())
    cfg = mw.WriterConfig(writer_id="w", lock=zk_lock(), executor="driver")
    for k in range(4):  # four small commits: four file groups to stitch
        mw.write(trips(range(k * 3, k * 3 + 3), ts=1 + k), bronze, cfg)
    small = mw.ClusteringConfig(small_file_bytes=1 << 20, target_file_bytes=4 << 20, max_bytes_per_run=64 << 20,
                                min_file_groups=2)
    with mw.Cleaner(bronze, lock=zk_lock(), clustering=small) as c:
        report = c.run_once()
    assert report.errors == [] and len(report.clustering_instants) == 1 and report.clustered_file_groups == 4
    assert len(mw.Table.open(bronze).snapshot().files()) == 1
    expect = rows(hudi_read_s3(bronze, s3_server.endpoint), COLS)
    assert len(expect) == 12 and rows(mw.Table.open(bronze).read(), COLS) == expect

    mw.register(spark)  # after the fixture set the AWS variables: the workers get them
    got: list[tuple] = []
    q = (spark.readStream.format("multiwriter").load(bronze).writeStream
         .foreachBatch(lambda df, i: got.extend(tuple(r[c] for c in COLS) for r in df.collect()))
         .option("checkpointLocation", str(tmp_path / "ck-read")).trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert q.exception() is None and sorted(got, key=repr) == expect  # moved rows delivered once

    src = tmp_path / "src"
    src.mkdir()
    pq.write_table(trips(range(100, 105), date="2024-01-03", ts=7, value=7.0), src / "part-0.parquet")
    host, port = zk_server.connect.split(":")
    opts = {"hoodie.table.name": "silver", "hoodie.datasource.write.recordkey.field": "id",
            "hoodie.datasource.write.partitionpath.field": "date", "hoodie.datasource.write.precombine.field": "ts",
            "hoodie.datasource.write.streaming.checkpoint.identifier": "silver-1",
            "hoodie.write.lock.zookeeper.url": host, "hoodie.write.lock.zookeeper.port": port,
            "hoodie.write.lock.zookeeper.base_path": zk_base}
    schema = spark.createDataFrame(trips([0]).to_pandas()).schema
    w = (spark.readStream.schema(schema).parquet(str(src)).writeStream.format("multiwriter").options(**opts)
         .option("checkpointLocation", str(tmp_path / "ck-write")).trigger(availableNow=True).start(silver))
    w.awaitTermination(120)
    assert w.exception() is None
    assert rows(hudi_read_s3(silver, s3_server.endpoint), COLS) == sorted(
        ((str(i), "2024-01-03", 7, 7.0) for i in range(100, 105)), key=repr)
    staged = mw.Table.open(silver).storage
    assert not [e for e in staged.walk_files(".hoodie/.temp")]  # staging removed after the commit
