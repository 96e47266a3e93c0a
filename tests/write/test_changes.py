"""The CDC records of a Copy-on-Write merge (:mod:`multiwriter.write.changes`, Hudi's
``HoodieCDCLogger`` fed by the merge handle) equal what the reader infers from the two slices
(:func:`multiwriter.table.cdc._diff`, Hudi's ``HoodieCDCExtractor``), and encode as CDC blocks."""
from __future__ import annotations

import pyarrow as pa
import pytest

from multiwriter.format import cdc_log as cl
from multiwriter.format.schema import arrow_to_avro, with_meta
from multiwriter.table import cdc as table_cdc
from multiwriter.write.changes import merge_changes

T0, T1 = "20250101000000000", "20250101000000001"
DATA = pa.schema([pa.field("id", pa.string()), pa.field("n", pa.int64())])


def _rows(keys: list[str], ns: list[int], t: str) -> pa.Table:
    n = len(keys)
    meta = [pa.array([t] * n), pa.array([f"{t}_0_{i}" for i in range(n)]), pa.array(keys), pa.array(["p"] * n),
            pa.array(["f.parquet"] * n)]
    return pa.Table.from_arrays([*meta, pa.array(keys), pa.array(ns, pa.int64())], schema=with_meta(DATA))


def _merge() -> pa.Table:
    """Stored a, b, c; the commit updates a, deletes b (a delete marker or a delete batch), inserts d."""
    old = _rows(["a", "b", "c"], [1, 2, 3], T0)
    return merge_changes(cl.DATA_BEFORE_AFTER, T1, DATA,
                         updated=(pa.array(["a"]), old.slice(0, 1), _rows(["a"], [10], T1)),
                         deleted=(pa.array(["b"]), old.slice(1, 1)),
                         inserted=(pa.array(["d"]), _rows(["d"], [4], T1)))


def test_merge_changes_equal_the_inference_from_the_slices() -> None:
    before = _rows(["a", "b", "c"], [1, 2, 3], T0)
    after = pa.concat_tables([_rows(["c"], [3], T0), _rows(["a", "d"], [10, 4], T1)])
    inferred = table_cdc._diff(before, after, T1, table_cdc.cdc_schema(with_meta(DATA)))
    assert _merge().to_pylist() == inferred.to_pylist()


@pytest.mark.parametrize("mode", cl.MODES)
def test_each_mode_keeps_its_columns_and_encodes(mode: str) -> None:
    full = _merge()
    got = merge_changes(mode, T1, DATA, updated=(pa.array(["a"]), _rows(["a"], [1], T0), _rows(["a"], [10], T1)),
                        deleted=(pa.array(["b"]), _rows(["b"], [2], T0)), inserted=(pa.array(["d"]), _rows(["d"], [4], T1)))
    assert got.column_names == list(cl.cdc_columns(mode))
    assert got.column("op").to_pylist() == ["d", "u", "i"] == full.column("op").to_pylist()
    if cl.RECORD_KEY in got.column_names:
        assert got.column(cl.RECORD_KEY).to_pylist() == ["b", "a", "d"]
    if mode == cl.DATA_BEFORE:  # an insert has no before image
        assert got.column(cl.BEFORE).to_pylist() == [{"id": "b", "n": 2}, {"id": "a", "n": 1}, None]
    block = cl.encode_cdc_block(got, mode, arrow_to_avro(DATA, "t"), instant_time=T1)
    assert cl.read_cdc_records(block).to_pylist() == got.to_pylist()


def test_dictionary_encoded_stored_columns_decode_into_the_images() -> None:
    old = _rows(["a"], [1], T0)
    old = old.set_column(5, "id", old.column("id").dictionary_encode())
    got = merge_changes(cl.DATA_BEFORE, T1, DATA, updated=(pa.array(["a"]), old, _rows(["a"], [5], T1)),
                        deleted=(pa.array([], pa.string()), old.slice(0, 0)),
                        inserted=(pa.array([], pa.string()), old.slice(0, 0)))
    assert got.to_pylist() == [{"op": "u", "record_key": "a", "before": {"id": "a", "n": 1}}]
