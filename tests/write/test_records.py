"""Batch preparation: keys hashed once, duplicates found by hash and confirmed by key."""
from __future__ import annotations

import numpy as np
import pytest
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from multiwriter.write import bloom, records
from multiwriter.write.records import KEY, PARTITION


def _batch(keys: list[str], parts: list[str]) -> pa.Table:
    t = pa.table({KEY: pa.array(keys), PARTITION: pa.array(parts)})
    return bloom.with_hashes(t, KEY)


def test_distinct_keys_whose_hashes_collide_are_not_duplicates():
    t = _batch(["a", "b", "c"], ["p", "p", "p"])
    h = np.array(t.column(bloom.HASHES).combine_chunks().flatten()).reshape(3, -1)
    h[:, :2] = 7  # a 64-bit collision of every key: the keys themselves decide
    t = t.set_column(t.schema.get_field_index(bloom.HASHES), bloom.HASHES,
                     pa.FixedSizeListArray.from_arrays(pa.array(h.ravel(), pa.uint32()), h.shape[1]))
    assert not records.has_duplicates(t)


def test_duplicates_are_found_with_and_without_hashes():
    for keys, parts, dup in ((["a", "b", "a"], ["p", "p", "p"], True), (["a", "b", "a"], ["p", "p", "q"], False),
                             ([f"k{i}" for i in range(1000)], ["p"] * 1000, False)):
        with_h = _batch(keys, parts)
        assert records.has_duplicates(with_h) is dup
        assert records.has_duplicates(with_h.drop_columns([bloom.HASHES])) is dup


def test_prepare_with_hashes_keeps_each_rows_own_hashes_through_dedupe():
    from multiwriter.table.properties import TableConfig

    cfg = TableConfig(name="t", record_key=("id",), partition_by=("d",), ordering_field="ts")
    batch = pa.table({"id": ["x", "y", "x", "z"], "d": ["p"] * 4, "ts": pa.array([1, 1, 2, 1], pa.int64())})
    out = records.prepare(batch, cfg, batch.schema, operation="upsert", hashes=True)
    assert sorted(out.column(KEY).to_pylist()) == ["x", "y", "z"]
    got = bloom.hashes_of(out)
    want = bloom.key_hashes(out.column(KEY), got.shape[1])
    assert (got == want).all()


def test_equal_length_keys_are_checked_by_their_words():
    """Keys of one byte length (up to 8 bytes: the word is the key; longer: folded words) and of
    mixed lengths, sliced with an offset: duplicates as a set of the keys says."""
    rng = np.random.default_rng(3)
    cases = [
        [f"{i:08d}" for i in range(5000)],  # one word: the word is the key
        [f"k{i:09d}" for i in range(5000)],  # two words
        [f"{i:036x}" for i in range(5000)],  # five words, as UUIDs
        [f"k{i}" for i in range(5000)],  # mixed lengths
        ["日本" + f"{i:04d}" for i in range(3000)],  # multi-byte UTF-8 of one byte length
    ]
    for keys in cases:
        for dup in (False, True):
            ks = list(keys) + ([keys[int(rng.integers(len(keys)))]] if dup else [])
            t = pa.table({KEY: pa.array(["pad"] + ks).slice(1), PARTITION: pa.array(["p"] * (len(ks) + 1)).slice(1)})
            assert records.has_duplicates(t) is (len(set(ks)) < len(ks)), (ks[:2], dup)


def test_fingerprints_that_collide_leave_the_decision_to_the_keys(monkeypatch):
    t = pa.table({KEY: [f"k{i:09d}" for i in range(100)][::-1], PARTITION: ["p"] * 100})  # not in order
    monkeypatch.setattr(records, "_fingerprints", lambda keys: np.zeros(len(keys), np.uint64))
    assert not records.has_duplicates(t)
    assert records.has_duplicates(pa.concat_tables([t, t.slice(5, 1)]))


@pytest.mark.parametrize(("value", "single", "java"), [
    # Double.toString / Float.toString (JDK 19+): positional in [1e-3, 1e7), else d.dddE<n>
    (1.0, False, "1.0"), (100.0, False, "100.0"), (0.001, False, "0.001"), (1e7, False, "1.0E7"),
    (1.5e-5, False, "1.5E-5"), (0.0001, False, "1.0E-4"), (-2.5, False, "-2.5"), (9999999.0, False, "9999999.0"),
    (1e23, False, "1.0E23"), (2.0 / 3, False, "0.6666666666666666"), (-0.0, False, "-0.0"),
    (float("nan"), False, "NaN"), (float("-inf"), False, "-Infinity"),
    (0.1, True, "0.1"), (2.0 / 3, True, "0.6666667"), (3.4028234663852886e38, True, "3.4028235E38"),
])
def test_float_key_strings_are_javas(value, single, java):
    from multiwriter.table.key_strings import java_float_string

    assert java_float_string(value, single=single) == java


def test_record_keys_of_float_and_timestamp_columns_are_what_hudis_jvm_key_generators_write():
    """HoodieAvroUtils.getNestedFieldValAsString: Float/Double.toString, a timestamp's Avro long
    (micros here), a date as LocalDate prints it."""
    import datetime as dt

    from multiwriter.table.properties import TableConfig
    from multiwriter.write.records import record_keys

    batch = pa.table({
        "f": pa.array([1.0, 1e7, 0.5], pa.float32()),
        "d": pa.array([2.0, 1.5e-5, 1.0], pa.float64()),
        "t": pa.array([dt.datetime(2024, 1, 5)] * 3, pa.timestamp("us", tz="UTC")),
        "day": pa.array([dt.date(2024, 1, 5)] * 3, pa.date32()),
    })
    def created(**kw) -> TableConfig:  # as Table.create records a new table
        return TableConfig.from_properties(TableConfig(name="t", **kw).to_properties())

    one = created(record_key=("f",))
    assert record_keys(batch, one).to_pylist() == ["1.0", "1.0E7", "0.5"]
    many = created(record_key=("d", "t", "day"))
    assert record_keys(batch, many).to_pylist()[:2] == [
        "d:2.0,t:1704412800000000,day:2024-01-05", "d:1.5E-5,t:1704412800000000,day:2024-01-05"]
    # a version 8 table created before keys were printed as Java does keeps its rows' keys
    old = {k: v for k, v in one.raw.items() if k != "multiwriter.record.key.strings"}
    assert record_keys(batch, TableConfig.from_properties(old)).to_pylist() == ["1", "10000000", "0.5"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 60), max_size=400), st.sampled_from(["sorted", "shuffled", "as drawn"]),
       st.integers(0, 3), st.integers(1, 3))
def test_duplicates_as_python_sees_them_whatever_the_order(ints, order, offset, chunks):
    """Keys in order (the one-comparison fast path), out of order and as drawn, sliced and in
    several chunks, with and without hashes: duplicate (partition, key) pairs as a set says,
    and dedupe keeps exactly the distinct pairs."""
    keys = [f"k{i:05d}" for i in ints]
    if order == "sorted":
        keys = sorted(set(keys))
    elif order == "shuffled":
        keys = keys[::-1]
    parts = ["p" if i % 7 else "q" for i in range(len(keys))]
    want = len(set(zip(parts, keys, strict=True))) < len(keys)
    padded_k, padded_p = pa.array(["pad"] * offset + keys, pa.string()), pa.array(["pad"] * offset + parts, pa.string())
    bounds = np.linspace(0, len(keys), chunks + 1).astype(int).tolist()
    pieces = list(zip(bounds, bounds[1:], strict=False))
    t = pa.table({KEY: pa.chunked_array([padded_k.slice(offset + a, b - a) for a, b in pieces], pa.string()),
                  PARTITION: pa.chunked_array([padded_p.slice(offset + a, b - a) for a, b in pieces], pa.string()),
                  "ts": pa.array(range(len(keys)), pa.int64())})
    assert records.has_duplicates(t) is want
    assert records.has_duplicates(bloom.with_hashes(t, KEY)) is want
    kept = records.dedupe(t, "ts")
    assert sorted(zip(kept.column(PARTITION).to_pylist(), kept.column(KEY).to_pylist(), strict=True)) == sorted(
        set(zip(parts, keys, strict=True)))
