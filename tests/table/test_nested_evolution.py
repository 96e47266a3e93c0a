"""Fields added inside structs (also in lists and maps of structs, and in a struct both
reordered and extended) evolve the table schema, on both table types and through compaction;
hudi-rs is the oracle for every read."""
from __future__ import annotations

import pyarrow as pa
import pytest

import multiwriter as mw
from multiwriter.errors import SchemaMismatchError
from multiwriter.schema_resolution import resolve
from multiwriter.format.schema import check_compatible, widens
from tests.oracle import hudi_read, rows

S1 = pa.struct([("a", pa.int32())])
S2 = pa.struct([("a", pa.int32()), ("b", pa.string())])
CASES = {
    "struct": (S1, S2, {"a": 1}, {"a": 2, "b": "x"}, {"a": 1, "b": None}),
    "list": (pa.list_(S1), pa.list_(S2), [{"a": 1}], [{"a": 2, "b": "x"}], [{"a": 1, "b": None}]),
    "map": (pa.map_(pa.string(), S1), pa.map_(pa.string(), S2), [("k", {"a": 1})], [("k", {"a": 2, "b": "x"})],
            [("k", {"a": 1, "b": None})]),
    "reordered": (S1, pa.struct([("b", pa.string()), ("a", pa.int32())]), {"a": 1}, {"b": "x", "a": 2},
                  {"a": 1, "b": None}),
}


def _schema(t: pa.DataType) -> pa.Schema:
    return pa.schema([("id", pa.string()), ("ts", pa.int64()), ("s", t)])


def _cfg() -> mw.WriterConfig:
    return mw.WriterConfig(lock=mw.InProcessLock(), writer_id="w")


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_field_added_inside_a_struct_is_kept(table_path, table_type, case):
    old, new, v1, v2, v1_read = CASES[case]
    mw.Table.create(table_path, name="t", schema=_schema(old), record_key="id", ordering_field="ts", table_type=table_type)
    mw.write(pa.Table.from_pylist([{"id": "k1", "ts": 1, "s": v1}, {"id": "k2", "ts": 1, "s": v1}], schema=_schema(old)),
             table_path, _cfg())
    mw.write(pa.Table.from_pylist([{"id": "k1", "ts": 2, "s": v2}], schema=_schema(new)), table_path, _cfg())
    v2_read = v2 if case != "reordered" else {"a": 2, "b": "x"}
    want = [("k1", v2_read), ("k2", v1_read)]
    assert rows(hudi_read(table_path), ["id", "s"]) == want
    assert rows(mw.Table.open(table_path).read(), ["id", "s"]) == want
    if table_type == "MERGE_ON_READ":
        with mw.Cleaner(table_path, lock=mw.InProcessLock(), compaction=mw.CompactionConfig(delta_commits=1)) as c:
            assert c.compact_once().compaction_instants
        assert rows(hudi_read(table_path), ["id", "s"]) == want
        assert rows(mw.Table.open(table_path).read(), ["id", "s"]) == want


def test_nested_evolution_rules():
    table = _schema(pa.list_(S1))
    assert check_compatible(table, _schema(pa.list_(S2))).field("s").type == pa.list_(S2)
    assert widens(S1, S2) and not widens(S2, S1)
    deep = pa.struct([("a", pa.int64()), ("c", pa.struct([("d", pa.float64())]))])
    got = check_compatible(_schema(S1), _schema(deep)).field("s").type
    assert got == pa.struct([("a", pa.int64()), ("c", pa.struct([("d", pa.float64())]))])
    with pytest.raises(SchemaMismatchError, match="s: table"):
        check_compatible(_schema(S2), _schema(pa.struct([("a", pa.int32()), ("b", pa.int32())])))
    with pytest.raises(SchemaMismatchError, match=r"s\.b"):  # a struct field left out is a missing column
        check_compatible(_schema(S2), _schema(S1))
    assert check_compatible(_schema(S2), _schema(S1), allow_missing=True).field("s").type == S2


def test_two_writers_adding_different_struct_fields_merge():
    base = _schema(S1)
    ours = _schema(S2)
    theirs = _schema(pa.struct([("a", pa.int32()), ("c", pa.int64())]))
    r = resolve(base, ours, theirs)
    assert r.ok
    assert r.schema.field("s").type == pa.struct([("a", pa.int32()), ("c", pa.int64()), ("b", pa.string())])
