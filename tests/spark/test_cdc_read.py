"""Spark batch CDC query (``hoodie.datasource.query.incremental.format=cdc``): the same records
as :meth:`Table.read_cdc`, checked against the model of the table's history on both table types
(names and ops as Hudi's ``HoodieCDCUtils`` / ``HoodieCDCOperation``, see tests/table/test_cdc.py)."""
from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest

import multiwriter as mw
from multiwriter.errors import ConfigError
from tests.table.test_cdc import cdc_records, history  # noqa: F401 -- the fixture

FMT = "multiwriter"
CDC = {"hoodie.datasource.query.type": "incremental", "hoodie.datasource.query.incremental.format": "cdc"}


def _spark_cdc(sp, path: str, start: str | None = None, end: str | None = None) -> pa.Table:
    r = sp.read.format(FMT).options(**CDC)
    if start:
        r = r.option("hoodie.datasource.read.begin.instanttime", start)
    if end:
        r = r.option("hoodie.datasource.read.end.instanttime", end)
    df = r.load(path)
    assert df.columns == ["op", "ts_ms", "before", "after"]
    return df.toArrow()


def test_the_spark_cdc_query_returns_read_cdc_s_records(sp, history):  # noqa: F811
    path, model, _ = history
    everything: Counter = Counter()
    for _, recs in model.expected:
        everything.update(recs)
    assert cdc_records(_spark_cdc(sp, path)) == everything
    # one commit's range: a delete-only commit delivers its deletes
    (c2, _), (c3, recs3) = model.expected[2], model.expected[3]
    assert cdc_records(_spark_cdc(sp, path, c2, c3)) == recs3
    assert cdc_records(_spark_cdc(sp, path, model.expected[-1][0])) == Counter()


def test_the_cdc_format_needs_an_incremental_query(sp, trips_table, table_path):
    mw.write(pa.table({"id": ["1"], "date": ["d"], "ts": [1], "value": [1.0]}), table_path,
             mw.WriterConfig(writer_id="w", lock=mw.InProcessLock()))
    with pytest.raises(Exception, match="incremental"):
        sp.read.format(FMT).option("hoodie.datasource.query.incremental.format", "cdc").load(table_path).collect()
    with pytest.raises(ConfigError, match="latest_state"):
        from multiwriter.spark import options as opt

        opt.parse_read({"path": table_path, "hoodie.datasource.query.type": "incremental",
                        "hoodie.datasource.query.incremental.format": "debezium"})


def test_a_cdc_stream_delivers_every_change_once_across_runs(sp, trips_table, table_path, tmp_path):
    """``readStream`` with the cdc format: micro-batches of read_cdc's records; a second run on
    the same checkpoint delivers only the commits completed since, deletes included."""
    lock = mw.InProcessLock()
    w = mw.WriterConfig(writer_id="w", lock=lock)
    dele = mw.WriterConfig(writer_id="w", lock=lock, operation="delete")
    row = lambda k, ts: pa.table({"id": [str(k)], "date": ["d"], "ts": [ts], "value": [float(ts)]})  # noqa: E731
    got: list[pa.Table] = []

    def run() -> None:
        def collect(df, batch_id):
            got.append(df.toArrow())

        q = (sp.readStream.format(FMT).option("hoodie.datasource.query.incremental.format", "cdc").load(table_path)
             .writeStream.foreachBatch(collect).option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
        q.awaitTermination(120)
        assert not q.isActive

    mw.write(row(1, 1), table_path, w)
    mw.write(row(1, 2), table_path, w)
    run()
    mw.write(row(1, 3), table_path, dele)
    run()
    t = mw.Table.open(table_path)
    delivered: Counter = Counter()
    for b in got:
        delivered.update(cdc_records(b))
    assert delivered == cdc_records(t.read_cdc())
    assert sorted(op for op, *_ in delivered.elements()) == ["d", "i", "u"]


def test_the_data_source_creates_a_cdc_table_whose_updates_log_their_changes(sp, tmp_path, zk_server, zk_base):
    """``hoodie.table.cdc.enabled`` (and the supplemental logging mode) given to a write that
    creates the table are recorded in ``hoodie.properties``, as Hudi's table config records them;
    the next write's update of a stored file group then writes a CDC log file its stat names,
    and the CDC query returns the insert and the update."""
    from tests.conftest import trips
    from tests.spark.test_datasource import _write_opts

    path = str(tmp_path / "t")
    opts = {**_write_opts(zk_server, zk_base), "hoodie.table.cdc.enabled": "true",
            "hoodie.table.cdc.supplemental.logging.mode": "data_before_after"}
    sp.createDataFrame(trips(range(2)).to_pandas()).write.format(FMT).options(**opts).mode("append").save(path)
    raw = mw.Table.open(path).config.raw
    assert (raw["hoodie.table.cdc.enabled"], raw["hoodie.table.cdc.supplemental.logging.mode"]) == (
        "true", "DATA_BEFORE_AFTER")
    sp.createDataFrame(trips([1], ts=2, value=2.0).to_pandas()).write.format(FMT).options(**opts) \
        .mode("append").save(path)
    tl = mw.Table.open(path).timeline()
    last = tl.commit_metadata(tl.completed_writes()[-1])
    assert [p for st in last.all_stats() for p in st.cdc_stats], "the update wrote a CDC log file"
    ops = sorted(op for op, *_ in cdc_records(_spark_cdc(sp, path)).elements())
    assert ops == ["i", "i", "u"]


def test_cdc_options_are_checked_against_the_table(tmp_path):
    """A bad mode is refused by name; on an existing table the options must agree with it (a
    write cannot turn change logging on or off: that is the table's setting)."""
    from multiwriter.spark import options as opt

    base = {"path": str(tmp_path / "t"), "hoodie.table.name": "t", "hoodie.datasource.write.recordkey.field": "id",
            "hoodie.write.lock.provider": "org.apache.hudi.client.transaction.lock.FileSystemBasedLockProvider"}
    with pytest.raises(ConfigError, match="supplemental logging mode"):
        opt.parse_write({**base, "hoodie.table.cdc.supplemental.logging.mode": "everything"}, table_exists=False)
    with pytest.raises(ConfigError, match="must be true or false"):
        opt.parse_write({**base, "hoodie.table.cdc.enabled": "yes"}, table_exists=False)
    mw.Table.create(base["path"], name="t", schema=pa.schema([("id", pa.string())]), record_key="id")
    with pytest.raises(ConfigError, match="hoodie.table.cdc.enabled: asked 'true', table has 'false'"):
        opt.checked_write({**base, "hoodie.table.cdc.enabled": "true"})
    parsed, table = opt.checked_write({**base, "hoodie.table.cdc.enabled": "false"})
    assert table is not None and parsed.table["properties"] == {"hoodie.table.cdc.enabled": "false"}