"""``spark.readStream.format("multiwriter")``: micro-batches by commit completion time, each
committed record delivered once across restarts; checked against hudi-rs and pyarrow."""
from __future__ import annotations

import threading

import pyarrow.dataset as pads
import pytest

import multiwriter as mw
from multiwriter import faults
from multiwriter.spark import options as opt
from multiwriter.spark.stream_read import MultiWriterStreamReader, offset
from tests.conftest import TRIPS_SCHEMA, trips, wait_hanging
from tests.oracle import hudi_read, rows

COLS = ["id", "date", "ts", "value"]
FMT = "multiwriter"


def _cfg(writer_id: str = "w", **kw) -> mw.WriterConfig:
    return mw.WriterConfig(writer_id=writer_id, lock=mw.InProcessLock(), executor="driver", **kw)


def _spark_rows(t) -> list[tuple]:
    return sorted((tuple(r[c] for c in COLS) for r in t), key=repr)


def _run(sp, path: str, ck: str, **options) -> list[tuple[int, list[tuple]]]:
    """One availableNow run of a streaming read into foreachBatch: (batch id, rows) per batch."""
    got: list[tuple[int, list[tuple]]] = []

    def collect(df, batch_id):
        got.append((batch_id, _spark_rows(df.select(*COLS).collect())))

    q = (sp.readStream.format(FMT).options(**options).load(path).writeStream
         .foreachBatch(collect).option("checkpointLocation", ck).trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert not q.isActive
    return got


def hudi_incremental(path: str, start: str):
    """hudi-rs's incremental read of the commits completed after ``start``."""
    import pyarrow as pa
    from hudi import HudiQueryType, HudiReadOptions, HudiTableBuilder

    opts = HudiReadOptions().with_query_type(HudiQueryType.Incremental).with_start_timestamp(start)
    return pa.Table.from_batches(HudiTableBuilder.from_base_uri(path).build().read(opts))


def _delivered(batches: list[tuple[int, list[tuple]]]) -> list[tuple]:
    return sorted((r for _, rs in batches for r in rs), key=repr)


def _expect(ids, date="2024-01-01", ts=1, value=1.0) -> list[tuple]:
    return [(str(i), date, ts, float(value)) for i in ids]


def test_restart_delivers_only_new_commits_once(sp, trips_table, table_path, tmp_path):
    mw.write(trips(range(3)), table_path, _cfg())
    mw.write(trips(range(3, 5), date="2024-01-02"), table_path, _cfg())
    ck, out = str(tmp_path / "ck"), str(tmp_path / "out")

    def run_to_parquet():
        q = (sp.readStream.format(FMT).load(table_path).select(*COLS).writeStream.format("parquet")
             .option("path", out).option("checkpointLocation", ck).trigger(availableNow=True).start())
        q.awaitTermination(120)
        assert q.exception() is None
        return sorted(rows(pads.dataset(out, format="parquet", exclude_invalid_files=True).to_table(), COLS), key=repr)

    first = run_to_parquet()
    assert first == rows(hudi_read(table_path), COLS)
    seen = mw.Table.open(table_path).timeline().last_completed_write().completion_time
    # an update of id 0 and a new id 9: the restarted query delivers exactly these two rows
    mw.write(trips([0], ts=2, value=2.0), table_path, _cfg())
    mw.write(trips([9], date="2024-01-03"), table_path, _cfg())
    second = run_to_parquet()
    new = _expect([0], ts=2, value=2.0) + _expect([9], date="2024-01-03")
    assert second == sorted(first + new, key=repr)
    assert rows(hudi_incremental(table_path, seen), COLS) == sorted(new, key=repr)  # hudi-rs: the same range
    # nothing new: a third run delivers nothing and does not fail
    assert run_to_parquet() == second


def test_a_commit_that_started_first_but_completed_last_is_delivered(sp, trips_table, table_path, tmp_path, monkeypatch):
    """Writer A begins before writer B but completes after B and after a micro-batch that
    included B: an offset by requested time would skip A for good."""
    mw.write(trips(range(2)), table_path, _cfg())
    monkeypatch.setenv("MULTIWRITER_FAULT_DIR", str(tmp_path))
    faults.configure("after-data-files=hang@1")  # only the first writer past its data files hangs
    slow: dict = {}
    a = threading.Thread(target=lambda: slow.update(r=mw.write(trips(range(10, 13)), table_path, _cfg("a"))))
    try:
        a.start()
        assert wait_hanging(tmp_path, a), "writer A did not reach its fault point"
        fast = mw.write(trips(range(20, 22)), table_path, _cfg("b"))
        ck = str(tmp_path / "ck")
        first = _delivered(_run(sp, table_path, ck))
        assert first == sorted(_expect(range(2)) + _expect(range(20, 22)), key=repr)
        (tmp_path / "after-data-files.release").write_text("")
        a.join(60)
    finally:
        faults.configure(None)
    assert slow["r"].instant.requested_time < fast.instant.requested_time
    assert slow["r"].instant.completion_time > fast.instant.completion_time
    second = _delivered(_run(sp, table_path, ck))
    assert second == sorted(_expect(range(10, 13)), key=repr)
    assert sorted(first + second, key=repr) == rows(hudi_read(table_path), COLS)


def test_start_offset_latest_and_instant(sp, trips_table, table_path, tmp_path):
    r1 = mw.write(trips(range(2)), table_path, _cfg())
    r2 = mw.write(trips(range(2, 4)), table_path, _cfg())
    latest = str(tmp_path / "latest")
    assert _delivered(_run(sp, table_path, latest, **{opt.START_OFFSET: "latest"})) == []
    at = str(tmp_path / "at")
    got = _run(sp, table_path, at, **{opt.START_OFFSET: r1.instant.completion_time})
    assert _delivered(got) == _expect(range(2, 4))
    mw.write(trips([7]), table_path, _cfg())
    assert _delivered(_run(sp, table_path, latest, **{opt.START_OFFSET: "latest"})) == _expect([7])
    assert _delivered(_run(sp, table_path, at)) == _expect([7])
    assert r2.instant.completion_time  # the instant offset was exclusive: r1's rows were not delivered


def test_empty_range_plans_no_partitions(trips_table, table_path):
    from pyspark.sql.types import StructType

    r = mw.write(trips(range(2)), table_path, _cfg())
    reader = MultiWriterStreamReader(opt.parse_stream_read({"path": table_path}), StructType())
    at = offset(r.instant.completion_time)
    assert reader.latestOffset(at, None) == at  # nothing newer: the same offset
    assert reader.partitions(at, at) == []
    assert reader.initialOffset() == offset(None)
    assert len(reader.partitions(offset(None), at)) == 1


def test_an_offset_past_archival_still_delivers_from_the_lsm_history(sp, trips_table, table_path, tmp_path):
    """Archival alone loses nothing: the range is planned from Hudi's LSM history."""
    lock = mw.InProcessLock()
    cfg = mw.WriterConfig(writer_id="w", lock=lock, executor="driver")
    mw.write(trips(range(5)), table_path, cfg)
    ck = str(tmp_path / "ck")
    assert _delivered(_run(sp, table_path, ck)) == _expect(range(5))
    for k in range(5):
        mw.write(trips([k], ts=2 + k, value=2.0), table_path, cfg)
    with mw.Cleaner(table_path, lock=lock, retain_commits=1, archive_keep_min=1, archive_keep_max=2) as c:
        assert c.run_once().archived >= 2
    got = _delivered(_run(sp, table_path, ck))
    assert got == sorted([(str(k), "2024-01-01", 2 + k, 2.0) for k in range(5)], key=repr)
    assert got == _spark_rows(hudi_read(table_path).to_pylist())


def test_a_replayed_batch_whose_files_were_cleaned_raises_instant_not_retained(sp, trips_table, table_path, tmp_path):
    """A micro-batch Spark replays after a restart keeps its logged end offset; when the cleaner
    deleted the slices that end needs, the source says it fell behind instead of guessing."""
    lock = mw.InProcessLock()
    cfg = mw.WriterConfig(writer_id="w", lock=lock, executor="driver")
    mw.write(trips(range(5)), table_path, cfg)
    ck = tmp_path / "ck"
    assert _delivered(_run(sp, table_path, str(ck))) == _expect(range(5))
    mw.write(trips(range(5), ts=2, value=2.0), table_path, cfg)
    assert [b for b, _ in _run(sp, table_path, str(ck))] == [1]
    (ck / "commits" / "1").unlink()  # as if the query died before Spark logged batch 1 done
    for k in range(3, 8):
        mw.write(trips(range(5), ts=k, value=float(k)), table_path, cfg)
    with mw.Cleaner(table_path, lock=lock, retain_commits=1) as c:
        assert c.run_once().old_versions_deleted >= 1
    q = (sp.readStream.format(FMT).load(table_path).writeStream.foreachBatch(lambda df, i: None)
         .option("checkpointLocation", str(ck)).trigger(availableNow=True).start())
    with pytest.raises(Exception, match="InstantNotRetainedError") as e:
        q.awaitTermination(120)
    assert "fell behind" in str(e.value) and opt.START_OFFSET in str(e.value)


def test_unknown_stream_option_is_refused(sp, trips_table, table_path, tmp_path):
    mw.write(trips(range(1)), table_path, _cfg())
    with pytest.raises(Exception, match="as.of.instant"):
        q = (sp.readStream.format(FMT).option("as.of.instant", "1").load(table_path).writeStream
             .foreachBatch(lambda df, i: None).option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
        q.awaitTermination(60)


def test_clustering_delivers_nothing_new_and_an_overwrite_delivers_its_rows(sp, trips_table, table_path, tmp_path):
    for k in range(4):  # four small inserts: four file groups to cluster
        mw.write(trips(range(k * 2, k * 2 + 2)), table_path, _cfg())
    ck = str(tmp_path / "ck")
    assert _delivered(_run(sp, table_path, ck)) == _expect(range(8))
    small = mw.ClusteringConfig(small_file_bytes=1 << 20, target_file_bytes=4 << 20, max_bytes_per_run=64 << 20,
                                min_file_groups=2)
    with mw.Cleaner(table_path, lock=mw.InProcessLock(), clustering=small) as c:
        assert len(c.run_once().clustering_instants) == 1
    assert mw.Table.open(table_path).timeline().last_completed_write().action == "replacecommit"
    assert _delivered(_run(sp, table_path, ck)) == []  # moved rows are not new data
    mw.write(trips([1, 30], ts=4, value=4.0), table_path, _cfg(operation="insert_overwrite_table"))
    assert _delivered(_run(sp, table_path, ck)) == _expect([1, 30], ts=4, value=4.0)
    assert rows(hudi_read(table_path), COLS) == _expect([1, 30], ts=4, value=4.0)


def test_available_now_after_a_replayed_batch_also_delivers_newer_commits(sp, trips_table, table_path, tmp_path):
    """A query that died after its micro-batch ran but before Spark logged it done replays that
    batch on restart; an availableNow run must then go on to the commits completed since."""
    mw.write(trips(range(3)), table_path, _cfg())
    ck = tmp_path / "ck"
    assert [b for b, _ in _run(sp, table_path, str(ck))] == [0]
    seen = mw.Table.open(table_path).timeline().last_completed_write().completion_time
    mw.write(trips(range(3, 5)), table_path, _cfg())
    assert _run(sp, table_path, str(ck)) == [(1, _expect(range(3, 5)))]
    for name in ("1", ".1.crc"):  # as if the query died before Spark logged batch 1 done
        (ck / "commits" / name).unlink(missing_ok=True)
    mw.write(trips([9], ts=2, value=2.0), table_path, _cfg())
    got = _run(sp, table_path, str(ck))
    assert got == [(1, _expect(range(3, 5))), (2, _expect([9], ts=2, value=2.0))]
    # hudi-rs: batches 1 and 2 together are every record completed after batch 0
    assert sorted(got[0][1] + got[1][1], key=repr) == rows(hudi_incremental(table_path, seen), COLS)


def test_a_table_with_virtual_keys_has_no_streaming_reads(sp, table_path, tmp_path):
    """As Hudi refuses incremental queries without meta fields: the stream fails by the property's name."""
    mw.Table.create(table_path, name="trips", schema=TRIPS_SCHEMA, record_key="id", partition_by=["date"],
                    ordering_field="ts", populate_meta_fields=False)
    mw.write(trips(range(3)), table_path, _cfg())
    q = (sp.readStream.format(FMT).load(table_path).writeStream.foreachBatch(lambda df, i: None)
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    with pytest.raises(Exception, match="hoodie.populate.meta.fields=false"):
        q.awaitTermination(120)
