"""Hudi's option keys, as a JVM writer of the same table is given them, map onto our settings."""
from __future__ import annotations

import pytest

import multiwriter as mw
from multiwriter.config import ZK_PROVIDER, table_settings_from_options
from multiwriter.errors import ConfigError

#: what a Hudi Spark job sharing the table sets (docs/interop.md: Running beside Hudi's JVM writers)
JVM_OPTIONS = {
    "hoodie.table.name": "trips",
    "hoodie.datasource.write.recordkey.field": "id",
    "hoodie.datasource.write.partitionpath.field": "date",
    "hoodie.datasource.write.precombine.field": "ts",
    "hoodie.datasource.write.operation": "upsert",
    "hoodie.write.concurrency.mode": "optimistic_concurrency_control",
    "hoodie.cleaner.policy.failed.writes": "LAZY",
    "hoodie.write.lock.provider": ZK_PROVIDER,
    "hoodie.write.lock.zookeeper.url": "127.0.0.1",
    "hoodie.write.lock.zookeeper.port": "2181",
    "hoodie.write.lock.zookeeper.base_path": "/hudi_locks",
    "hoodie.write.lock.zookeeper.session_timeout_ms": "20000",
    "hoodie.write.lock.zookeeper.connection_timeout_ms": "5000",
    "hoodie.write.lock.wait_time_ms": "30000",
    "hoodie.write.lock.num_retries": "7",
    "hoodie.client.heartbeat.interval_in_ms": "15000",
    "hoodie.client.heartbeat.tolerable.misses": "3",
}


def test_jvm_writer_options_build_the_same_lock_and_settings():
    cfg = mw.WriterConfig.from_options(JVM_OPTIONS, writer_id="py")
    lock = cfg.lock
    assert isinstance(lock, mw.ZooKeeperLock)
    assert lock.connect == "127.0.0.1:2181" and lock.base_path == "/hudi_locks"
    assert lock.lock_path("trips-0123456789ab") == "/hudi_locks/trips"  # Hudi: <base_path>/<lock_key>
    assert (lock.session_timeout_s, lock.connection_timeout_s, lock.acquire_timeout_s, lock.max_retries) == (
        20.0, 5.0, 30.0, 7)
    assert (cfg.lock_timeout_s, cfg.heartbeat_interval_s, cfg.operation) == (30.0, 15.0, "upsert")
    # Hudi's expiry bound is interval x misses (45 s here), ours interval x (misses + 1): the same bound
    assert cfg.heartbeat_bound_s == 45.0
    assert table_settings_from_options(JVM_OPTIONS) == {
        "name": "trips", "record_key": "id", "partition_by": ["date"], "ordering_field": "ts"}


def test_explicit_lock_key_wins_and_is_recorded():
    cfg = mw.WriterConfig.from_options({**JVM_OPTIONS, "hoodie.write.lock.zookeeper.lock_key": "trips_lock"})
    assert cfg.lock.lock_path("trips-0123456789ab") == "/hudi_locks/trips_lock"
    assert cfg.lock.table_properties()["multiwriter.lock.zookeeper.lock_key"] == "trips_lock"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("hoodie.write.concurrency.mode", "single_writer"),
        ("hoodie.cleaner.policy.failed.writes", "EAGER"),
        ("hoodie.write.lock.provider", "org.apache.hudi.client.transaction.lock.InProcessLockProvider"),
        ("hoodie.write.lock.zookeeper.port", "2182x"),
        ("hoodie.write.lock.zookeeper.url", "zk1:2999"),  # contradicts port 2181
        ("hoodie.datasource.write.operation", "bulk_insert"),
        ("hoodie.client.heartbeat.tolerable.misses", "0"),
        ("hoodie.no.such.key", "1"),
    ],
)
def test_unknown_or_contradictory_keys_are_named(key, value):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        mw.WriterConfig.from_options({**JVM_OPTIONS, key: value})


def test_zookeeper_keys_need_the_provider_and_a_lock_given_twice_is_refused():
    opts = {k: v for k, v in JVM_OPTIONS.items() if k != "hoodie.write.lock.provider"}
    with pytest.raises(ConfigError, match="hoodie.write.lock.provider"):
        mw.WriterConfig.from_options(opts)
    with pytest.raises(ConfigError, match="lock= was passed too"):
        mw.WriterConfig.from_options(JVM_OPTIONS, lock=mw.InProcessLock())


@pytest.mark.parametrize(("text", "want"), [("false", False), ("False", False), ("true", True), ("0", False)])
def test_boolean_options_are_parsed_not_cast(text, want):
    """``bool("false")`` is True: a string option must be parsed."""
    cfg = mw.WriterConfig.from_options({"register_writer": text, "allow_missing_columns": text}, lock=mw.InProcessLock())
    assert cfg.register_writer is want and cfg.allow_missing_columns is want
    with pytest.raises(ConfigError, match="register_writer"):
        mw.WriterConfig.from_options({"register_writer": "maybe"}, lock=mw.InProcessLock())


def test_metadata_and_version_keys_map_to_table_settings(tmp_path):
    """``hoodie.metadata.enable`` and ``hoodie.write.table.version`` as a JVM job's options give
    them; the table created from them keeps the files partition at version 9."""
    import pyarrow as pa

    import multiwriter as mw
    from multiwriter.config import table_settings_from_options

    got = table_settings_from_options({"hoodie.table.name": "t", "hoodie.datasource.write.recordkey.field": "id",
                                       "hoodie.table.ordering.fields": "ts", "hoodie.metadata.enable": "true",
                                       "hoodie.write.table.version": "9"})
    assert got == {"name": "t", "record_key": "id", "ordering_field": "ts", "metadata": True, "table_version": 9}
    t = mw.Table.create(str(tmp_path / "t"), schema=pa.schema([("id", pa.string()), ("ts", pa.int64())]), **got)
    assert t.config.version == 9 and t.config.raw["hoodie.table.metadata.partitions"] == "files"
    with pytest.raises(mw.errors.ConfigError, match="hoodie.metadata.enable"):
        table_settings_from_options({"hoodie.metadata.enable": "sometimes"})
