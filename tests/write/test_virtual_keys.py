"""Virtual keys (``hoodie.populate.meta.fields=false``) on Copy-on-Write tables: the same writes
give the same rows as on a table with meta fields, files carry null meta columns and no bloom
filter (as Hudi writes them), hudi-rs reads them, and what Hudi refuses is refused by name."""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import multiwriter as mw
from multiwriter.errors import ConfigError, VirtualKeysError
from multiwriter.table import properties as props
from multiwriter.format.schema import META_COLUMNS
from tests.conftest import TRIPS_SCHEMA, trips
from tests.oracle import hudi_read, rows
from tests.test_concurrency import base_args, insert_the_same_new_key_from_two_writers, result, spawn

DATA = ["id", "date", "ts", "value"]
DATES = ("2024-01-01", "2024-01-02", "2024-01-03")


def _create(path: str, *, virtual: bool, **kw) -> mw.Table:
    kw.setdefault("record_key", "id")
    kw.setdefault("schema", TRIPS_SCHEMA)
    return mw.Table.create(path, name="trips", partition_by=["date"], ordering_field="ts",
                           populate_meta_fields=not virtual, **kw)


def _writer(operation: str = "upsert", **kw) -> mw.WriterConfig:
    return mw.WriterConfig(writer_id="w", lock=mw.InProcessLock(), operation=operation, **kw)


def _assert_files_have_no_meta_values(path: str) -> None:
    files = list(Path(path).glob("*/*.parquet"))
    assert files
    for f in files:
        pf = pq.ParquetFile(f)
        assert pf.schema_arrow.names[:5] == list(META_COLUMNS), "the meta columns stay in the schema"
        t = pf.read(columns=list(META_COLUMNS))
        assert all(t.column(c).null_count == t.num_rows for c in META_COLUMNS), f
        footer = pf.metadata.metadata or {}
        assert not any(k.startswith((b"org.apache.hudi.bloom", b"hoodie_")) for k in footer), sorted(footer)


batch = st.tuples(
    st.sampled_from(["upsert", "upsert", "insert", "delete", "insert_overwrite_table"]),
    st.lists(st.tuples(st.integers(0, 40), st.sampled_from(DATES), st.integers(0, 5), st.integers(-3, 3)),
             min_size=1, max_size=25),
)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=st.lists(batch, min_size=1, max_size=5), string_keys=st.booleans(), small_files=st.booleans())
def test_random_writes_give_the_rows_of_a_table_with_meta_fields(batches, string_keys, small_files):
    schema = TRIPS_SCHEMA if string_keys else TRIPS_SCHEMA.set(0, pa.field("id", pa.int64()))
    with tempfile.TemporaryDirectory() as d:
        paths = {v: f"{d}/{'virtual' if v else 'meta'}" for v in (False, True)}
        for v, p in paths.items():
            _create(p, virtual=v, schema=schema)
        for i, (op, recs) in enumerate(batches):
            if op == "insert":  # new keys only: which copy of a duplicated key an upsert updates is not defined
                recs = list({r[0]: (r[0] + 1000 * (i + 1), *r[1:]) for r in recs}.values())
            ids = [r[0] if not string_keys else f"k{r[0]}" for r in recs]
            t = pa.table({"id": pa.array(ids, schema.field("id").type), "date": [r[1] for r in recs],
                          "ts": pa.array([r[2] for r in recs], pa.int64()),
                          "value": pa.array([float(r[3]) for r in recs], pa.float64())})
            # small files: every batch adds file groups, so a key is looked up among several files
            extra = {"small_file_limit_bytes": 0} if small_files else {}
            for p in paths.values():
                mw.write(t, p, _writer(op, **extra))
        want = rows(mw.Table.open(paths[False]).read(), DATA)
        got = mw.Table.open(paths[True]).read()
        assert rows(got, DATA) == want
        assert all(got.column(c).null_count == got.num_rows for c in META_COLUMNS)
        assert rows(hudi_read(paths[True]), DATA) == want
        if got.num_rows:
            _assert_files_have_no_meta_values(paths[True])


def test_upserts_find_keys_among_several_files_of_a_partition(table_path):
    """No bloom filter nor key range: the index reads the key columns of the partition's files
    (Hudi's simple index); a composite key is computed as the complex key generator writes it."""
    schema = TRIPS_SCHEMA.append(pa.field("region", pa.string()))
    _create(table_path, virtual=True, schema=schema, record_key=["id", "region"])

    def batch(ids, region, value):
        return trips(ids, value=value).append_column("region", pa.array([region] * len(ids)))

    for k in range(3):  # three file groups in one partition
        mw.write(batch(range(k * 10, k * 10 + 10), "eu", k), table_path, _writer("insert"))
    mw.write(batch(range(5, 25), "eu", 7), table_path, _writer(small_file_limit_bytes=0))
    mw.write(batch(range(5, 25), "us", 8), table_path, _writer(small_file_limit_bytes=0))
    t = mw.Table.open(table_path)
    got = rows(t.read(), ["id", "region", "value"])
    want = sorted([(str(i), "eu", 7.0 if 5 <= i < 25 else float(i // 10)) for i in range(30)]
                  + [(str(i), "us", 8.0) for i in range(5, 25)], key=repr)
    assert got == want
    assert rows(hudi_read(table_path), ["id", "region", "value"]) == want
    _assert_files_have_no_meta_values(table_path)


def test_properties_record_the_setting_and_opening_honours_it(table_path):
    _create(table_path, virtual=True)
    text = (Path(table_path) / props.PROPERTIES_FILE).read_text()
    assert "hoodie.populate.meta.fields=false" in text.splitlines()
    t = mw.Table.open(table_path)
    assert t.config.virtual_keys and not t.config.populate_meta_fields
    assert _create(table_path, virtual=True).config.virtual_keys  # idempotent
    with pytest.raises(ConfigError, match="populate_meta_fields=False"):
        _create(table_path, virtual=False)  # as in Hudi: meta fields once disabled stay disabled


def test_a_table_hudi_created_without_meta_fields_is_written_without_them(table_path):
    """A table whose properties say ``hoodie.populate.meta.fields=false`` (as Hudi writes them)
    gets no meta values from our writers either."""
    _create(table_path, virtual=False)
    props.modify(mw.Table.open(table_path).storage,
                 lambda p: {**p, props.POPULATE_META_FIELDS_KEY: "false"})
    mw.write(trips(range(10)), table_path, _writer())
    mw.write(trips(range(5, 15), ts=2, value=2.0), table_path, _writer())
    _assert_files_have_no_meta_values(table_path)
    assert rows(hudi_read(table_path), ["id", "value"]) == rows(mw.Table.open(table_path).read(), ["id", "value"])
    assert mw.Table.open(table_path).read().num_rows == 15


def test_incremental_reads_are_refused_by_name(table_path):
    _create(table_path, virtual=True)
    mw.write(trips(range(3)), table_path, _writer())
    t = mw.Table.open(table_path)
    with pytest.raises(VirtualKeysError, match="hoodie.populate.meta.fields=false"):
        t.read_incremental()
    with pytest.raises(VirtualKeysError):
        t.read_incremental_batch(start=None)


def test_merge_on_read_with_virtual_keys_is_refused_by_name(table_path, tmp_path):
    with pytest.raises(VirtualKeysError, match="Copy-on-Write"):
        mw.Table.create(table_path, name="trips", schema=TRIPS_SCHEMA, record_key="id", partition_by=["date"],
                        ordering_field="ts", table_type="MERGE_ON_READ", num_buckets=2, populate_meta_fields=False)
    assert not (Path(table_path) / props.PROPERTIES_FILE).exists()
    # a Merge-on-Read table another writer created with virtual keys: our writers refuse it
    other = str(tmp_path / "mor")
    mw.Table.create(other, name="trips", schema=TRIPS_SCHEMA, record_key="id", partition_by=["date"],
                    ordering_field="ts", table_type="MERGE_ON_READ", num_buckets=2)
    props.modify(mw.Table.open(other).storage, lambda p: {**p, props.POPULATE_META_FIELDS_KEY: "false"})
    with pytest.raises(VirtualKeysError, match="hoodie.populate.meta.fields=false"):
        mw.write(trips(range(3)), other, _writer())


def test_overlapping_updates_one_wins(zk_server, zk_base, table_path):
    _create(table_path, virtual=True)
    mw.write(trips(range(20), ts=1), table_path, _writer())
    start = time.time() + 2.0
    hang = {"MULTIWRITER_FAULTS": "after-data-files=hang", "MULTIWRITER_FAULT_HANG_S": "2"}
    procs = [spawn("write", base_args(zk_server, zk_base, table_path, writer=f"w{i}", ids=list(range(20)), ts=10 + i,
                                      value=100 + i, start_at=start), hang) for i in range(2)]
    res = [result(p) for p in procs]
    assert sorted(r["ok"] for r in res) == [False, True], res
    assert [r for r in res if not r["ok"]][0]["error"] == "WriteConflictError"
    win = 100 + [i for i, r in enumerate(res) if r["ok"]][0]
    got = rows(mw.Table.open(table_path).read(), ["id", "value"])
    assert {v for _, v in got} == {float(win)} and len(got) == 20
    assert got == rows(hudi_read(table_path), ["id", "value"])


def test_same_new_key_inserted_by_two_writers_conflicts(zk_server, zk_base, table_path):
    """The same-new-key check reads the rival's new keys from its files' key columns."""
    _create(table_path, virtual=True)
    insert_the_same_new_key_from_two_writers(zk_server, zk_base, table_path)
    assert mw.Table.open(table_path).read().column("id").to_pylist().count("same") == 1


@pytest.mark.parametrize("spread", [False, True])
def test_the_executor_path_writes_virtual_keys_as_the_driver_writes_meta_fields(spark, tmp_path, monkeypatch, spread):
    """Spark executors (one task, or spread over tasks) write the same rows, without meta values."""
    from multiwriter.write import spark as spark_path
    from tests.write.test_write_path import BATCHES

    if spread:
        monkeypatch.setattr(spark_path, "ONE_TASK_MAX_ROWS", 0)
    meta, virtual = str(tmp_path / "meta"), str(tmp_path / "virtual")
    _create(meta, virtual=False)
    _create(virtual, virtual=True)
    for op, b in BATCHES:
        mw.write(b, meta, _writer(op))
        mw.write(spark.createDataFrame(b.to_pandas()), virtual, _writer(op, executor="spark"))
    want = rows(mw.Table.open(meta).read(), DATA)
    assert rows(mw.Table.open(virtual).read(), DATA) == want == rows(hudi_read(virtual), DATA)
    _assert_files_have_no_meta_values(virtual)
