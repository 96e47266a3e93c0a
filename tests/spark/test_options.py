"""The data source's option rules, without Spark: Hudi's keys mapped, errors by name."""
from __future__ import annotations

import pytest

from multiwriter.errors import ConfigError
from multiwriter.spark import options as o


def test_write_options_map_hudi_keys():
    w = o.parse_write({
        "path": "/t", "hoodie.table.name": "t", "hoodie.datasource.write.recordkey.field": "a, b",
        "hoodie.datasource.write.partitionpath.field": "d", "hoodie.datasource.write.hive_style_partitioning": "true",
        "hoodie.write.lock.zookeeper.url": "h1,h2:2182", "hoodie.write.lock.zookeeper.port": "2190",
        "hoodie.write.lock.zookeeper.base_path": "/b", "hoodie.client.heartbeat.interval_in_ms": "2000",
        "hoodie.write.lock.num_retries": "7", "hoodie.datasource.write.streaming.checkpoint.identifier": "job1",
    }, table_exists=False)
    assert w.table == {"name": "t", "record_key": ("a", "b"), "partition_by": ("d",), "hive_style_partitioning": True}
    assert w.lock.connect == "h1:2190,h2:2182" and w.lock.base_path == "/b"
    cfg = w.writer_config()
    assert (cfg.writer_id, cfg.heartbeat_interval_s, cfg.max_conflict_retries) == ("job1", 2.0, 7)


def test_errors_name_every_unknown_or_missing_key():
    with pytest.raises(ConfigError, match=r"\['hoodie\.bogus', 'x'\]"):
        o.parse_write({"path": "/t", "hoodie.bogus": "1", "x": "2"}, table_exists=True)
    with pytest.raises(ConfigError, match="hoodie.table.name.*hoodie.datasource.write.recordkey.field.*zookeeper.url"):
        o.parse_write({"path": "/t"}, table_exists=False)
    with pytest.raises(ConfigError, match="local disk"):
        o.parse_write({"path": "s3://b/t", "hoodie.write.lock.provider": o.FS_PROVIDER}, table_exists=True)
    with pytest.raises(ConfigError, match="lock_key"):
        o.parse_write({"path": "/t", "hoodie.table.name": "t", "hoodie.write.lock.zookeeper.url": "h",
                       "hoodie.write.lock.zookeeper.lock_key": "other"}, table_exists=True)


def test_read_options():
    r = o.parse_read({"path": "/t", "hoodie.datasource.query.type": "incremental",
                      "hoodie.datasource.read.begin.instanttime": "000",
                      "hoodie.datasource.read.end.instanttime": "2024-01-02 03:04:05.006"})
    assert (r.incremental, r.begin, r.end) == (True, None, "20240102030405006")
    assert o.parse_read({"path": "/t", "as.of.instant": "2024-01-02"}).as_of == "20240102000000000"
    with pytest.raises(ConfigError, match="need hoodie.datasource.query.type=incremental"):
        o.parse_read({"path": "/t", "hoodie.datasource.read.begin.instanttime": "1"})
    with pytest.raises(ConfigError, match="snapshot option"):
        o.parse_read({"path": "/t", "hoodie.datasource.query.type": "incremental", "as.of.instant": "1"})


def test_column_stats_option_creates_the_index_and_is_checked(tmp_path):
    """``hoodie.metadata.index.column.stats.enable`` is a table setting of the creating write (the
    metadata table then keeps column_stats and partition_stats); a write naming it otherwise than
    the table has is refused by name."""
    import pyarrow as pa

    import multiwriter as mw
    from multiwriter.config import table_settings_from_options

    base = {"path": str(tmp_path / "t"), "hoodie.table.name": "t", "hoodie.datasource.write.recordkey.field": "id",
            "hoodie.write.lock.provider": o.FS_PROVIDER}
    parsed = o.parse_write({**base, o.COLUMN_STATS: "true"}, table_exists=False)
    assert parsed.table["column_stats"] is True
    assert table_settings_from_options({o.COLUMN_STATS: "true"}) == {"column_stats": True}
    with pytest.raises(ConfigError, match="column.stats.enable"):
        o.parse_write({**base, o.COLUMN_STATS: "maybe"}, table_exists=False)
    t = mw.Table.create(base["path"], schema=pa.schema([("id", pa.string())]), lock=parsed.lock, **parsed.table)
    assert "column_stats" in t.config.raw["hoodie.table.metadata.partitions"]
    o._check_matches(parsed, t)
    with pytest.raises(ConfigError, match="column_stats: asked False, table has True"):
        o._check_matches(o.parse_write({**base, o.COLUMN_STATS: "false"}, table_exists=True), t)
