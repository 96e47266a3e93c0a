"""Tables we write are read identically by our reader and hudi-rs; pending files stay invisible."""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

import multiwriter as mw
from multiwriter.format import layout
from multiwriter.table import timeline as tlmod
from tests.conftest import trips
from tests.oracle import hudi_read, rows

COLS = ["_hoodie_record_key", "_hoodie_partition_path", "_hoodie_commit_time", "id", "date", "ts", "value"]


def test_two_partitions_and_as_of_match_hudi_rs(trips_table, table_path):
    cfg = mw.WriterConfig(lock=mw.InProcessLock(), writer_id="w")
    first = mw.write(trips(range(10), date="2024-01-01", ts=1, value=1), table_path, cfg)
    mw.write(trips(range(5), date="2024-01-02", ts=1, value=2), table_path, cfg)
    mw.write(trips(range(3, 8), date="2024-01-01", ts=2, value=3), table_path, cfg)
    t = mw.Table.open(table_path)
    ours = t.read()
    assert ours.num_rows == 15
    assert rows(ours, COLS) == rows(hudi_read(table_path), COLS)
    as_of = first.instant.requested_time
    old = t.read(as_of=as_of)
    assert rows(old, ["id", "value"]) == [(str(i), 1.0) for i in sorted(range(10), key=lambda i: repr(str(i)))]
    assert rows(old, COLS) == rows(hudi_read(table_path, as_of=as_of), COLS)


def test_table_files_are_hudi_shaped(trips_table, table_path):
    r = mw.write(trips(range(4)), table_path, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="w"))
    part = Path(table_path) / "2024-01-01"
    files = list(part.glob("*.parquet"))
    assert len(files) == 1 and (part / ".hoodie_partition_metadata").exists()
    parsed = layout.parse_data_file(files[0].name)
    assert parsed and parsed.instant_time == r.instant.requested_time
    f = pq.ParquetFile(files[0])
    assert f.schema_arrow.names[:5] == list(mw.format.schema.META_COLUMNS)
    md = f.metadata.metadata
    assert md[b"hoodie_min_record_key"] == b"0" and md[b"hoodie_max_record_key"] == b"3"
    tl = mw.Table.open(table_path).timeline()
    meta = tl.commit_metadata(tl.completed()[0])
    stat = meta.all_stats()[0]
    assert stat.path == f"2024-01-01/{files[0].name}" and stat.num_inserts == 4 and stat.file_size == files[0].stat().st_size
    assert meta.operation_type == "UPSERT" and "schema" in meta.extra_metadata


def test_pending_instant_files_are_invisible(trips_table, table_path):
    mw.write(trips(range(3), value=1), table_path, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="w"))
    t = mw.Table.open(table_path)
    # a writer that died after writing a data file: requested + inflight, no completed instant
    pending_t = "29990101000000000"
    tlmod.create_requested(t.storage, t.config, pending_t)
    tlmod.create_inflight(t.storage, t.config, pending_t)
    data = t.read()
    ghost = data.set_column(data.schema.get_field_index("value"), "value", pa.array([99.0] * data.num_rows))
    name = layout.DataFileName(layout.new_file_id(), "0-0-0", pending_t).name
    pq.write_table(ghost, Path(table_path) / "2024-01-01" / name)
    assert {v for v in t.read().column("value").to_pylist()} == {1.0}
    assert {v for v in hudi_read(table_path).column("value").to_pylist()} == {1.0}


def test_read_incremental_uses_completion_times(trips_table, table_path):
    cfg = mw.WriterConfig(lock=mw.InProcessLock(), writer_id="w")
    a = mw.write(trips(range(3), value=1), table_path, cfg)
    b = mw.write(trips(range(2, 5), value=2), table_path, cfg)
    t = mw.Table.open(table_path)
    inc = t.read_incremental(start=a.instant.completion_time)
    assert rows(inc, ["id", "value"]) == [("2", 2.0), ("3", 2.0), ("4", 2.0)]
    assert t.read_incremental(end=a.instant.completion_time).num_rows == 3
    assert t.read_incremental(start=b.instant.completion_time).num_rows == 0


def test_to_spark(spark, trips_table, table_path):
    mw.write(trips(range(6)), table_path, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="w"))
    df = mw.Table.open(table_path).to_spark(spark)
    assert df.count() == 6 and "_hoodie_commit_time" in df.columns
