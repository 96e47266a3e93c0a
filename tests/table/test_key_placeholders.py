"""Record keys with a null or empty part, as Hudi's key generators make them
(``KeyGenUtils.getRecordKey``): a part of a multi-field key that is null is written
``field:__null__`` (``NULL_RECORDKEY_PLACEHOLDER``), an empty one ``field:__empty__``
(``EMPTY_RECORDKEY_PLACEHOLDER``); only a key whose every part is null or empty is refused
(``HoodieKeyException``). A single-field key is refused when null or empty
(``KeyGenUtils.getRecordKey`` for one field, and the one-field complex generator of Hudi 1.1,
whose only part is then entirely null or empty). A null or empty partition value goes to
``__HIVE_DEFAULT_PARTITION__`` (``PartitionPathEncodeUtils.DEFAULT_PARTITION_PATH``)."""
from __future__ import annotations

import pyarrow as pa
import pytest

import multiwriter as mw
from multiwriter.errors import InvalidRecordError
from multiwriter.table.properties import TableConfig
from multiwriter.table.record_keys import record_keys
from tests.oracle import hudi_read, rows

SCHEMA = pa.schema([("a", pa.string()), ("b", pa.int64()), ("ts", pa.int64()), ("p", pa.string()), ("v", pa.string())])


def _cfg(**kw) -> mw.WriterConfig:
    return mw.WriterConfig(writer_id="w", lock=mw.InProcessLock(), **kw)


def _batch(a, b, v, p="x") -> pa.Table:
    n = len(a)
    return pa.table({"a": a, "b": b, "ts": [1] * n, "p": [p] * n if not isinstance(p, list) else p, "v": v}, schema=SCHEMA)


def test_a_null_or_empty_part_of_a_multi_field_key_is_hudis_placeholder():
    config = TableConfig(name="t", record_key=("a", "b"))
    keys = record_keys(_batch(["x", None, "", "y"], [1, 2, 3, None], ["1", "2", "3", "4"]), config)
    assert keys.to_pylist() == ["a:x,b:1", "a:__null__,b:2", "a:__empty__,b:3", "a:y,b:__null__"]


@pytest.mark.parametrize("a, b", [([None], [None]), ([""], [None])])
def test_a_key_whose_every_part_is_null_or_empty_is_refused(a, b):
    with pytest.raises(InvalidRecordError, match="entirely null or empty"):
        record_keys(_batch(a, b, ["1"]), TableConfig(name="t", record_key=("a", "b")))


@pytest.mark.parametrize("bad", [None, ""])
def test_a_null_or_empty_single_field_key_is_refused(bad):
    with pytest.raises(InvalidRecordError, match="null or empty record key"):
        record_keys(_batch([bad], [1], ["1"]), TableConfig(name="t", record_key=("a",)))
    born_9 = TableConfig(name="t", record_key=("a",), version=9, raw={"hoodie.table.keygenerator.type": "COMPLEX",
                                                                      "hoodie.table.initial.version": "9"})
    with pytest.raises(InvalidRecordError, match="null or empty record key"):
        record_keys(_batch([bad], [1], ["1"]), born_9)


@pytest.mark.parametrize("table_type, executor", [("COPY_ON_WRITE", "driver"), ("MERGE_ON_READ", "driver"),
                                                  ("COPY_ON_WRITE", "spark")])
def test_placeholder_keys_are_written_updated_and_deleted(tmp_path, spark, table_type, executor):
    """Written, updated and deleted by key on every path, as hudi-rs reads them; a null
    partition value lands in Hudi's default partition."""
    path = str(tmp_path / "t")
    mw.Table.create(path, name="t", schema=SCHEMA, record_key=["a", "b"], partition_by=["p"], ordering_field="ts",
                    table_type=table_type)

    def write(t: pa.Table, **kw):
        if executor == "spark":
            t = spark.createDataFrame(t.to_pylist(), "a string, b long, ts long, p string, v string")
        return mw.write(t, path,
                        _cfg(executor=executor, **kw))

    write(_batch(["x", None, "", "y"], [1, 2, 3, None], ["1", "2", "3", "4"], p=["x", "x", None, "x"]))
    write(_batch([None], [2], ["2'"]))
    write(_batch([""], [3], ["gone"], p=[None]), operation="delete")
    cols = ["_hoodie_record_key", "_hoodie_partition_path", "v"]
    ours = rows(mw.Table.open(path).read(), cols)
    assert ours == rows(hudi_read(path), cols)
    assert ours == [("a:__null__,b:2", "x", "2'"), ("a:x,b:1", "x", "1"), ("a:y,b:__null__", "x", "4")]
