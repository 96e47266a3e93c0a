"""Pure schema rules: lossless widening, batch validation, concurrent resolution, superset."""
from __future__ import annotations

import pyarrow as pa
import pytest

from multiwriter.errors import SchemaMismatchError
from multiwriter.schema_resolution import describe, is_older, is_superset, resolve, superset_violations
from multiwriter.table.properties import TableConfig
from multiwriter.format.schema import arrow_to_avro_json, avro_to_arrow, check_compatible, widens
from multiwriter.write.records import KEY, prepare

BASE = pa.schema([("id", pa.string()), ("ts", pa.int64()), ("n", pa.int16()), ("f", pa.float32())])


def add(schema: pa.Schema, name: str, t: pa.DataType) -> pa.Schema:
    return schema.append(pa.field(name, t))


def retype(schema: pa.Schema, name: str, t: pa.DataType) -> pa.Schema:
    return schema.set(schema.get_field_index(name), pa.field(name, t))


@pytest.mark.parametrize(
    ("old", "new", "ok"),
    [
        (pa.int16(), pa.int32(), True),
        (pa.int32(), pa.int64(), True),
        (pa.uint8(), pa.int16(), True),
        (pa.uint32(), pa.int64(), True),
        (pa.float32(), pa.float64(), True),
        (pa.string(), pa.large_string(), True),
        (pa.decimal128(5, 2), pa.decimal128(7, 3), True),
        (pa.int64(), pa.int32(), False),
        (pa.int32(), pa.uint32(), False),
        (pa.uint32(), pa.int32(), False),
        (pa.float64(), pa.float32(), False),
        (pa.int32(), pa.string(), False),
        (pa.decimal128(5, 2), pa.decimal128(5, 3), False),
    ],
)
def test_widens(old, new, ok):
    assert widens(old, new) is ok
    assert widens(old, old)


def test_batch_may_widen_and_add():
    batch = add(retype(BASE, "n", pa.int64()), "extra", pa.string())
    assert check_compatible(BASE, batch).equals(batch)


def test_batch_narrower_than_table_keeps_table_type():
    assert check_compatible(BASE, retype(BASE, "ts", pa.int32())).equals(BASE)


def test_batch_retype_fails_with_column_named():
    with pytest.raises(SchemaMismatchError, match="n: table int16 vs batch string"):
        check_compatible(BASE, retype(BASE, "n", pa.string()))


def test_missing_columns_strict_and_lenient():
    batch = pa.schema([f for f in BASE if f.name != "f"])
    with pytest.raises(SchemaMismatchError, match=r"lacks table columns \['f'\]"):
        check_compatible(BASE, batch)
    assert check_compatible(BASE, batch, allow_missing=True).equals(BASE)
    with pytest.raises(SchemaMismatchError, match=r"lacks required columns \['f'\]"):
        check_compatible(BASE, batch, allow_missing=True, required=("f",))


def test_missing_non_nullable_column_fails_even_when_lenient():
    table = BASE.set(3, pa.field("f", pa.float32(), nullable=False))
    with pytest.raises(SchemaMismatchError, match="f"):
        check_compatible(table, pa.schema([f for f in BASE if f.name != "f"]), allow_missing=True)


def test_prepare_writes_omitted_columns_as_null():
    cfg = TableConfig(name="t", record_key=("id",), ordering_field="ts")
    batch = pa.table({"id": ["a", "b"], "ts": [1, 2]})
    out = prepare(batch, cfg, add(BASE, "extra", pa.string()), operation="upsert")
    assert out.column("n").to_pylist() == [None, None] and out.column("extra").null_count == 2
    assert out.column(KEY).to_pylist() == ["a", "b"]
    with pytest.raises(SchemaMismatchError, match="ordering field 'ts'"):
        prepare(batch.drop_columns(["ts"]), cfg, BASE, operation="upsert")


# -- concurrent resolution ---------------------------------------------------------------------
def test_older_writer_takes_the_evolved_schema():
    theirs = add(retype(BASE, "n", pa.int32()), "extra", pa.string())
    r = resolve(BASE, BASE, theirs)
    assert r.ok and r.schema.equals(theirs)
    assert is_older(BASE, theirs) and not is_older(theirs, BASE)


def test_nobody_else_evolved_keeps_ours():
    ours = add(BASE, "mine", pa.int64())
    assert resolve(BASE, ours, BASE).schema.equals(ours)


def test_both_evolved_compatibly_merge():
    ours = add(retype(BASE, "f", pa.float64()), "mine", pa.int64())
    theirs = add(retype(BASE, "n", pa.int32()), "extra", pa.string())
    r = resolve(BASE, ours, theirs)
    assert r.ok
    assert r.schema.names == ["id", "ts", "n", "f", "extra", "mine"]
    assert r.schema.field("n").type == pa.int32() and r.schema.field("f").type == pa.float64()
    assert is_superset(r.schema, theirs) and is_superset(r.schema, ours)


def test_same_evolution_on_both_sides_is_no_conflict():
    both = add(BASE, "extra", pa.string())
    assert resolve(BASE, both, both).schema.equals(both)


@pytest.mark.parametrize(
    ("ours", "theirs", "column"),
    [
        (add(BASE, "extra", pa.int64()), add(BASE, "extra", pa.string()), "extra"),
        (add(BASE, "extra", pa.int32()), add(BASE, "extra", pa.int64()), "extra"),
        (retype(BASE, "n", pa.int64()), retype(BASE, "n", pa.int32()), "n"),
    ],
    ids=["new-column-two-types", "new-column-two-widths", "retyped-both-ways"],
)
def test_contradicting_evolutions_conflict(ours, theirs, column):
    r = resolve(BASE, ours, theirs)
    assert not r.ok
    assert [c.name for c in r.conflicts] == [column]
    assert column in r.conflicts[0].describe()


def test_superset_violations_name_the_column():
    assert superset_violations(BASE, BASE.remove(2)) == ["column 'n' (int16) is gone"]
    assert superset_violations(BASE, retype(BASE, "ts", pa.int32())) == ["column 'ts' changed from int64 to int32"]
    assert superset_violations(BASE, add(retype(BASE, "n", pa.int64()), "x", pa.string())) == []


def test_resolution_survives_the_avro_round_trip():
    theirs = add(retype(BASE, "n", pa.int32()), "extra", pa.string())
    merged = resolve(BASE, add(BASE, "mine", pa.int8()), theirs).schema
    assert avro_to_arrow(arrow_to_avro_json(merged, "t")).equals(merged)
    assert describe(merged).startswith("(id: string, ts: int64, n: int32")


@pytest.mark.parametrize("name", ["a-b", "1st", "with space", "é"])
def test_a_new_column_that_is_not_an_avro_name_is_refused_by_name(name):
    """Hudi's JVM ``Schema.Parser`` refuses the table schema otherwise (Avro spec, "Names")."""
    with pytest.raises(SchemaMismatchError, match=repr([name]).replace("[", r"\[").replace("]", r"\]")):
        check_compatible(BASE, add(BASE, name, pa.int32()))
    nested = pa.struct([pa.field("ok", pa.int32()), pa.field(name, pa.int32())])
    with pytest.raises(SchemaMismatchError, match="s\\." ):
        check_compatible(BASE, add(BASE, "s", pa.list_(nested)))
    assert "a_b9" in check_compatible(BASE, add(BASE, "a_b9", pa.int32())).names


def test_table_create_refuses_a_column_that_is_not_an_avro_name(tmp_path):
    import multiwriter as mw
    from multiwriter.errors import ConfigError

    schema = pa.schema([("id", pa.string()), ("a-b", pa.int64())])
    with pytest.raises(ConfigError, match="'a-b'"):
        mw.Table.create(str(tmp_path / "t"), name="t", schema=schema, record_key="id")
    assert not (tmp_path / "t" / ".hoodie").exists()


@pytest.mark.parametrize(("precision", "size"), [(1, 1), (2, 1), (3, 2), (9, 4), (10, 5), (18, 8), (19, 9), (38, 16)])
def test_decimal_fixed_size_is_sparks_minimum(precision, size):
    """Spark's ``Decimal.minBytesForPrecision`` (the fewest bytes whose two's complement holds
    10**precision - 1); a larger size makes a JVM reader fail to resolve our schema against Spark's."""
    from multiwriter.format.schema import arrow_to_avro

    avro = arrow_to_avro(pa.schema([("d", pa.decimal128(precision, 0))]), "t")
    (fixed,) = [b for b in avro["fields"][0]["type"] if b != "null"]
    assert (fixed["size"], fixed["precision"]) == (size, precision)
    assert 2 ** (8 * size - 1) >= 10**precision > 2 ** (8 * (size - 1) - 1)
