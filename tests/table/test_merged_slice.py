"""Reading Merge-on-Read slices with only some columns: the merge then reads the asked columns
plus the key and the ordering field (and takes the key from the record key field when the table's
key generator makes them equal). On random histories with deletes and ordering ties, a projected
read returns exactly the rows of the full read."""
from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import multiwriter as mw
from multiwriter.table.merge_rule import RECORD_KEY, Versions, merge
from multiwriter.table.merged_slice import key_column, merge_schema
from multiwriter.table.properties import TableConfig
from multiwriter.format.schema import META_COLUMNS, with_meta
from tests.table.test_merge_rule import SCHEMA, dels, recs

DATES = ("2024-01-01", "2024-01-02")


def _schema(key_type: pa.DataType) -> pa.Schema:
    return pa.schema([("id", key_type), ("date", pa.string()), ("ts", pa.int64()), ("value", pa.float64()),
                      ("note", pa.string())])


def _batch(rnd: random.Random, keys: list, key_type: pa.DataType, serial) -> pa.Table:
    n = len(keys)
    return pa.table({
        "id": pa.array(keys, key_type),
        "date": pa.array([DATES[int(str(k)[-1]) % 2] for k in keys], pa.string()),  # fixed per key
        "ts": pa.array([rnd.choice([0, 1, 2, 3]) for _ in range(n)], pa.int64()),  # ties on purpose
        "value": pa.array([float(next(serial)) for _ in range(n)], pa.float64()),
        "note": pa.array([f"n{next(serial)}" for _ in range(n)], pa.string()),
    }, schema=_schema(key_type))


def _sorted(t: pa.Table, by: str = "id") -> pa.Table:
    return t.take(pc.sort_indices(t, sort_keys=[(by, "ascending")]))


def _random_table(path: str, seed: int, key_type: pa.DataType, ordering: str | None) -> mw.Table:
    rnd = random.Random(seed)
    mw.Table.create(path, name="t", schema=_schema(key_type), record_key="id", partition_by=["date"],
                    ordering_field=ordering, table_type="MERGE_ON_READ", num_buckets=2)
    pool = [f"k{i:02d}" if key_type == pa.string() else i for i in range(24)]
    serial = iter(range(1_000_000))
    lock = mw.InProcessLock()
    mw.write(_batch(rnd, rnd.sample(pool, 16), key_type, serial), path, mw.WriterConfig(writer_id="w", lock=lock))
    for _ in range(rnd.randint(3, 5)):
        keys = rnd.sample(pool, rnd.randint(1, 10))
        op = "delete" if rnd.random() < 0.3 else "upsert"
        mw.write(_batch(rnd, keys, key_type, serial), path, mw.WriterConfig(writer_id="w", lock=lock, operation=op))
    return mw.Table.open(path)


@pytest.mark.parametrize("key_type,ordering", [(pa.string(), "ts"), (pa.int64(), "ts"), (pa.string(), None)])
@pytest.mark.parametrize("seed", range(4))
def test_projected_reads_return_the_rows_of_the_full_read(tmp_path, seed, key_type, ordering):
    t = _random_table(str(tmp_path / "t"), seed, key_type, ordering)
    assert any(f.logs for f in t.snapshot().files())
    full = _sorted(t.read())
    for cols in (["id", "ts", "value"], ["value", "id"], ["note"], ["ts"], [RECORD_KEY, "value"]):
        got = t.read(columns=cols)
        assert got.schema.names == cols
        by = "id" if "id" in cols else cols[0]
        assert _sorted(got, by).equals(_sorted(full.select(cols), by)), cols
    # a filter on a column that is not returned is still read and applied after the merge
    cut = pc.min(full["value"]).as_py() + 5
    got = t.read(columns=["id"], filters=[("value", ">", cut)])
    want = full.filter(pc.greater(full["value"], cut)).select(["id"])
    assert _sorted(got).equals(_sorted(want))
    got = t.read(columns=["id"], filters=pc.field("value") > cut)
    assert _sorted(got).equals(_sorted(want))


def test_the_key_field_stands_in_for_the_meta_key_only_under_the_simple_key_generator():
    def cfg(keys=("id",), parts=("date",), **raw) -> TableConfig:
        c = TableConfig(name="t", record_key=keys, partition_by=parts)
        return TableConfig(name="t", record_key=keys, partition_by=parts, raw={**c.to_properties(), **raw})

    schema = with_meta(_schema(pa.string()))
    assert key_column(cfg(), schema) == "id"
    assert key_column(cfg(parts=("date", "ts")), schema) == RECORD_KEY  # complex key generator
    assert key_column(cfg(parts=()), schema) == RECORD_KEY  # non-partitioned
    assert key_column(cfg(keys=("id", "date")), schema) == RECORD_KEY
    assert key_column(cfg(), with_meta(_schema(pa.int64()))) == "id"  # an integer's text names one integer
    assert key_column(cfg(), with_meta(_schema(pa.float64()))) == RECORD_KEY  # 1.0 and 1.00 name one number
    assert key_column(cfg(**{"hoodie.table.keygenerator.class": "org.apache.hudi.keygen.SimpleKeyGenerator"}), schema) == "id"
    custom = cfg(**{"hoodie.table.keygenerator.class": "com.example.MyKeyGenerator"})
    assert key_column(custom, schema) == RECORD_KEY
    bare = TableConfig(name="t", record_key=("id",), partition_by=("date",))  # no key generator recorded
    assert key_column(bare, schema) == RECORD_KEY


def test_merge_schema_keeps_the_asked_columns_the_key_and_the_ordering_field_in_file_order():
    schema = with_meta(_schema(pa.string()))
    assert merge_schema(schema, None, "ts") is schema
    assert merge_schema(schema, ["value"], "ts").names == [RECORD_KEY, "ts", "value"]
    assert merge_schema(schema, ["value", "id"], None, key="id").names == ["id", "value"]


@pytest.mark.parametrize("key_type", [pa.string(), pa.int64()])
@pytest.mark.parametrize("seed", range(200))
def test_a_column_equal_to_the_meta_key_merges_alike(seed, key_type):
    """merge(key="id") on sources whose id equals _hoodie_record_key (an integer id: its text
    is the key, deletes name it so) gives the rows of merge()."""
    rnd = random.Random(seed)
    pool = [f"k{i}" for i in range(6)] if key_type == pa.string() else [str(i) for i in (-3, 0, 7, 42, 10**12, 5)]
    serial = iter(range(10_000))
    schema = SCHEMA.append(pa.field("id", key_type))

    def with_id(t: pa.Table) -> pa.Table:
        return t.append_column("id", t.column(RECORD_KEY).cast(key_type))

    def rows_of(keys):
        return [(k, rnd.choice([None, 0, 1, 2]), f"v{next(serial)}") for k in keys]

    base = rows_of(rnd.sample(pool, rnd.randint(0, 6)))
    sources = [Versions(-1, with_id(recs("100", *base)))] if base or rnd.random() < 0.5 else []
    for r in rnd.sample(range(10), rnd.randint(1, 4)):
        records = rows_of([rnd.choice(pool) for _ in range(rnd.randint(0, 4))])
        deletes = [(rnd.choice(pool), rnd.choice([None, 0, 1, 2])) for _ in range(rnd.randint(0, 3))]
        sources.append(Versions(r, with_id(recs(f"{200 + r}", *records)) if records else None,
                                dels(*deletes) if deletes else None))
    for ordering in ("ts", None):
        want = merge(sources, ordering_field=ordering, schema=schema)
        got = merge(sources, ordering_field=ordering, schema=schema, key="id")
        assert got.equals(want), (seed, ordering)


def test_a_log_file_mixing_partial_and_full_blocks_is_read_as_runs_in_block_order(tmp_path):
    """Blocks of one log file: a partial update (IS_PARTIAL, without ``val``), then full records
    of a narrower schema (no header: ``val`` is null), then deletes. Each run is its own source
    of the file's rank, the deletes too, in block order (Hudi's ``BaseHoodieLogRecordReader``
    applies a file's blocks one after another)."""
    from multiwriter.storage import Storage
    from multiwriter.table.files import LogFile
    from multiwriter.format.log_file import LogFileName, encode_data_block, encode_delete_block, encode_parquet_data_block
    from multiwriter.table.merged_slice import read_log
    from multiwriter.format.schema import arrow_to_avro_json, data_schema

    import json

    t = "20250101000000002"
    narrow = json.loads(arrow_to_avro_json(pa.schema([("ts", pa.int64())]), "record"))
    full = json.loads(arrow_to_avro_json(data_schema(SCHEMA), "record"))
    part = recs(t, ("k1", 7, None)).drop_columns(["val"])
    data = (encode_parquet_data_block(part, narrow, instant_time=t, partial=True)
            + encode_data_block(recs(t, ("k2", 8, None)).drop_columns(["val"]), narrow, instant_time=t)
            + encode_delete_block(dels(("k3", None)), instant_time=t, schema=full))
    name = LogFileName("f1", t, 1, "1-0-1").name
    (tmp_path / "p1").mkdir()
    (tmp_path / "p1" / name).write_bytes(data)
    got = read_log(Storage(str(tmp_path)), LogFile("p1", "f1", t, 1, name), 0, SCHEMA)
    assert [v.carries for v in got] == [frozenset([*META_COLUMNS, "ts"]), None, None]
    assert [v.records.column("_hoodie_record_key").to_pylist() for v in got[:2]] == [["k1"], ["k2"]]
    assert got[2].records is None and got[2].deletes.column("record_key").to_pylist() == ["k3"]
    base = Versions(-1, recs("100", ("k1", 1, "a"), ("k2", 1, "b"), ("k3", 1, "c")))
    out = merge([base, *got], ordering_field="ts", schema=SCHEMA)
    assert out.select(["_hoodie_record_key", "ts", "val"]).to_pylist() == [
        {"_hoodie_record_key": "k1", "ts": 7, "val": "a"}, {"_hoodie_record_key": "k2", "ts": 8, "val": None}]
