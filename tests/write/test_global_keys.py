"""On a table keeping the record index a key lives in one partition (Hudi's global index): a
record naming another partition updates the stored one where it is, or moves it there with
``update_partition_path=True`` (``hoodie.record.index.update.partition.path``).

Oracles: the rows as hudi-rs reads them, and the record index checked against them."""
from __future__ import annotations

import pyarrow as pa
import pytest

import multiwriter as mw
from tests.oracle import hudi_read
from tests.table.test_metadata_record_index import _check_index
from tests.table.test_metadata_table import _write_that_dies

SCHEMA = pa.schema([("id", pa.string()), ("ts", pa.int64()), ("v", pa.int64()), ("d", pa.string())])


def _rows(*rows) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(("id", "ts", "v", "d"), r, strict=True)) for r in rows], schema=SCHEMA)


def _table(tmp_path, kind: str, record_index: bool = True) -> str:
    path = str(tmp_path / "t")
    kw = {"table_type": "MERGE_ON_READ", "num_buckets": 2} if kind == "mor" else {}
    mw.Table.create(path, name="g", schema=SCHEMA, record_key="id", partition_by=["d"], ordering_field="ts",
                    record_index=record_index, **kw)
    return path


def _read(path: str) -> dict[str, tuple]:
    t = hudi_read(path)
    out = {r["id"]: (r["_hoodie_partition_path"], r["v"], r["d"]) for r in t.to_pylist()}
    assert len(out) == t.num_rows, "a key stored twice"
    return out


@pytest.mark.parametrize("kind", ["cow", "mor"])
def test_a_key_named_in_another_partition_updates_the_stored_record(kind, tmp_path):
    path = _table(tmp_path, kind)
    cfg = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock())
    mw.write(_rows(("a", 1, 1, "x"), ("b", 1, 1, "x")), path, cfg)
    mw.write(_rows(("a", 2, 2, "y"), ("c", 2, 2, "y")), path, cfg)
    # Hudi's default: the record updates the stored one in its partition (its columns as given)
    assert _read(path) == {"a": ("x", 2, "y"), "b": ("x", 1, "x"), "c": ("y", 2, "y")}
    assert _check_index(path) == 3
    mw.write(_rows(("b", 3, 0, "z")), path, mw.WriterConfig(writer_id="w", lock=mw.InProcessLock(),
                                                            operation="delete"))
    assert set(_read(path)) == {"a", "c"}, "a delete naming another partition deletes the stored record"
    assert _check_index(path) == 2


@pytest.mark.parametrize("kind", ["cow", "mor"])
def test_update_partition_path_moves_the_key(kind, tmp_path):
    path = _table(tmp_path, kind)
    cfg = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock(), update_partition_path=True)
    mw.write(_rows(("a", 1, 1, "x"), ("b", 1, 1, "x")), path, cfg)
    mw.write(_rows(("a", 2, 2, "y")), path, cfg)
    assert _read(path) == {"a": ("y", 2, "y"), "b": ("x", 1, "x")}
    assert _check_index(path) == 2


@pytest.mark.parametrize("move", [False, True], ids=["update-in-place", "update-partition-path"])
def test_keys_named_in_another_partition_on_s3(s3_server, move):
    """On an object store the index is looked up while the batch's snapshot is listed; a batch
    whose keys the index routes to other partitions is planned on those partitions' files."""
    from tests.test_object_storage import hudi_read_s3
    from multiwriter.table import metadata_files as mf

    uri = s3_server() + "/t"
    mw.Table.create(uri, name="g", schema=SCHEMA, record_key="id", partition_by=["d"], ordering_field="ts",
                    record_index=True)
    cfg = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock(), update_partition_path=move)
    mw.write(_rows(("a", 1, 1, "x"), ("b", 1, 1, "x"), ("c", 1, 1, "w")), uri, cfg)
    mw.write(_rows(("a", 2, 2, "y"), ("c", 2, 2, "w"), ("d", 2, 2, "y")), uri, cfg)
    rows = hudi_read_s3(uri, s3_server.endpoint).to_pylist()
    got = {r["id"]: (r["_hoodie_partition_path"], r["v"]) for r in rows}
    assert len(got) == len(rows) == 4, "a key stored twice"
    assert got == {"a": ("y" if move else "x", 2), "b": ("x", 1), "c": ("w", 2), "d": ("y", 2)}
    t = mw.Table.open(uri)
    index = {k: (loc.partition, loc.file_id) for k, loc in mf.record_index_of(t.storage, t.config).items()}
    assert index == {r["id"]: (r["_hoodie_partition_path"], r["_hoodie_file_name"].split("_")[0]) for r in rows}


def test_without_the_record_index_partitions_stay_apart(tmp_path):
    """The index is per partition (Hudi's non-global bloom index): the same key in two
    partitions is two records."""
    path = _table(tmp_path, "cow", record_index=False)
    cfg = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock())
    mw.write(_rows(("a", 1, 1, "x")), path, cfg)
    mw.write(_rows(("a", 2, 2, "y")), path, cfg)
    assert sorted(hudi_read(path).column("_hoodie_partition_path").to_pylist()) == ["x", "y"]


def test_an_entry_of_a_write_that_never_completed_routes_nothing(tmp_path):
    """A writer that died after its metadata-table deltacommit left index entries for a file
    group no reader sees: a key it wrote goes where the next batch names it."""
    path = _table(tmp_path, "cow")
    lock = mw.InProcessLock()
    cfg = mw.WriterConfig(writer_id="w", lock=lock)
    mw.write(_rows(("a", 1, 1, "x")), path, cfg)
    _write_that_dies(path, _rows(("lost", 1, 1, "x")), cfg)
    mw.write(_rows(("lost", 2, 2, "y")), path, mw.WriterConfig(writer_id="w2", lock=lock))
    assert _read(path) == {"a": ("x", 1, "x"), "lost": ("y", 2, "y")}


def test_a_spark_dataframe_moving_keys_is_refused(spark, tmp_path):
    path = _table(tmp_path, "cow")
    cfg = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock(), update_partition_path=True, executor="spark")
    df = spark.createDataFrame(_rows(("a", 1, 1, "x")).to_pandas())
    with pytest.raises(mw.errors.ConfigError, match="update_partition_path=True"):
        mw.write(df, path, cfg)
    assert hudi_read(path).num_rows == 0


def test_spark_executors_update_the_stored_record_and_keep_the_index(spark, tmp_path):
    path = _table(tmp_path, "cow")
    cfg = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock(), executor="spark")
    mw.write(spark.createDataFrame(_rows(("a", 1, 1, "x"), ("b", 1, 1, "x")).to_pandas()), path, cfg)
    mw.write(spark.createDataFrame(_rows(("a", 2, 2, "y"), ("c", 2, 2, "y")).to_pandas()), path, cfg)
    assert _read(path) == {"a": ("x", 2, "y"), "b": ("x", 1, "x"), "c": ("y", 2, "y")}
    assert _check_index(path) == 3
