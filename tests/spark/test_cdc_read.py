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
