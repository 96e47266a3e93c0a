"""Which base rows the logs touch (:func:`~multiwriter.table.merge_rule.touched`): integer keys,
and string keys of one length, that a base file stores sorted are found by a binary search per
log key, other keys by a hash probe of every base key. On random keys (hypothesis: sorted or
not, repeated or not, every integer width; strings of one length or not, with NUL and multibyte
characters) both give the same rows, and a merge over a sorted base equals the merge with the
binary search turned off; a table with int64 keys reads as hudi-rs reads it."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import multiwriter as mw
from multiwriter.table import merge_rule
from multiwriter.table.merge_rule import Versions, merge, touched
from tests.oracle import hudi_read

INT_TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint32(), pa.uint64()]


def _hashed(keys: pa.Array, dictionary: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    codes = pc.fill_null(pc.index_in(keys, value_set=dictionary), -1).to_numpy()
    at = np.flatnonzero(codes >= 0)
    return at, codes[at]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(t=st.sampled_from(INT_TYPES), base=st.lists(st.integers(0, 40), max_size=30),
       logs=st.lists(st.integers(0, 40), max_size=12, unique=True), sort=st.booleans(),
       chunks=st.integers(1, 3))
def test_touched_equals_the_hash_probe_of_every_base_key(t, base, logs, sort, chunks):
    values = sorted(base) if sort else base
    cut = len(values) // chunks
    parts = [values[i * cut:(i + 1) * cut] for i in range(chunks - 1)] + [values[(chunks - 1) * cut:]]
    keys = pa.chunked_array([pa.array(p, t) for p in parts], t)
    dictionary = pa.array(logs, t)
    at, code = touched(keys, dictionary)
    want_at, want_code = _hashed(keys.combine_chunks(), dictionary)
    assert at.tolist() == want_at.tolist()
    assert code.tolist() == want_code.tolist()
    if sort:
        assert merge_rule._touched_sorted(keys, dictionary) is not None


CHARS = ["a", "b", "\x00", "\u00e9", "z"]  # a NUL byte sorts first; the accented letter is 2 bytes


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(width=st.integers(1, 3), base=st.lists(st.lists(st.sampled_from(CHARS), min_size=1, max_size=3), max_size=30),
       logs=st.lists(st.lists(st.sampled_from(CHARS), min_size=1, max_size=3), max_size=12), sort=st.booleans(),
       one_width=st.booleans(), chunks=st.integers(1, 3))
def test_touched_string_keys_equals_the_hash_probe_of_every_base_key(width, base, logs, sort, one_width, chunks):
    def text(chars: list[str]) -> str:
        return ("".join(chars) * 3)[:width] if one_width else "".join(chars)

    values = [text(c) for c in base]
    values = sorted(values, key=lambda v: v.encode()) if sort else values
    cut = len(values) // chunks
    parts = [values[i * cut:(i + 1) * cut] for i in range(chunks - 1)] + [values[(chunks - 1) * cut:]]
    keys = pa.chunked_array([pa.array(p, pa.string()) for p in parts], pa.string())
    dictionary = pa.array(list(dict.fromkeys(text(c) for c in logs)), pa.string())
    at, code = touched(keys, dictionary)
    want_at, want_code = _hashed(keys.combine_chunks(), dictionary)
    assert at.tolist() == want_at.tolist()
    assert code.tolist() == want_code.tolist()
    if sort and values and len({len(v.encode()) for v in values}) == 1:
        assert merge_rule._touched_sorted(keys, dictionary) is not None


def test_keys_with_nulls_or_of_other_types_take_the_hash_probe():
    assert merge_rule._touched_sorted(pa.array([1, None, 3]), pa.array([3])) is None
    assert merge_rule._touched_sorted(pa.array(["a", "bb"]), pa.array(["bb"])) is None
    assert merge_rule._touched_sorted(pa.array(["b", "a"]), pa.array(["b"])) is None
    assert merge_rule._touched_sorted(pa.array(["a", None]), pa.array(["a"])) is None
    assert merge_rule._touched_sorted(pa.array([b"a", b"b"]), pa.array([b"b"])) is None
    assert merge_rule._touched_sorted(pa.array([3, 1]), pa.array([3])) is None
    assert touched(pa.array([1, None, 3]), pa.array([3]))[0].tolist() == [2]


SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("v", pa.string())])


def _rows(items: list[tuple[int, int, str]]) -> pa.Table:
    return pa.table({"id": pa.array([i[0] for i in items], pa.int64()), "ts": pa.array([i[1] for i in items], pa.int64()),
                     "v": pa.array([i[2] for i in items], pa.string())}, schema=SCHEMA)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(base=st.lists(st.integers(0, 30), max_size=20, unique=True),
       logs=st.lists(st.tuples(st.lists(st.tuples(st.integers(0, 35), st.integers(0, 3), st.sampled_from("xyz")),
                                        max_size=6),
                               st.lists(st.tuples(st.integers(0, 35), st.integers(0, 3)), max_size=2)),
                     min_size=1, max_size=4))
def test_a_merge_over_a_sorted_integer_base_equals_the_merge_with_the_hash_probe(base, logs):
    sources = [Versions(-1, _rows([(k, 1, "b") for k in sorted(base)]))]
    for rank, (records, deletes) in enumerate(logs):
        d = pa.table({"record_key": pa.array([str(k) for k, _ in deletes], pa.string()),
                      "partition_path": pa.array(["p"] * len(deletes), pa.string()),
                      "ordering_value": pa.array([o for _, o in deletes], pa.int64())})
        sources.append(Versions(rank, _rows(records) if records else None, d if deletes else None))
    fast, plain = _merged_with_and_without_the_binary_search(sources, SCHEMA)
    assert fast.equals(plain)


def test_a_table_with_int64_keys_reads_as_hudi_rs_reads_it(tmp_path):
    """Updates, inserts and deletes over 4 delta commits of a bucketed table with int64 keys:
    a few columns (the key field stands in for the meta key) and all columns as hudi-rs reads them."""
    path = str(tmp_path / "t")
    schema = pa.schema([("id", pa.int64()), ("date", pa.string()), ("ts", pa.int64()), ("amount", pa.float64())])
    mw.Table.create(path, name="t", schema=schema, record_key="id", partition_by=["date"], ordering_field="ts",
                    table_type="MERGE_ON_READ", num_buckets=2)
    lock = mw.InProcessLock()
    cfg = mw.WriterConfig(writer_id="w", lock=lock)
    rng = np.random.default_rng(7)

    def batch(ids, ts: int) -> pa.Table:
        ids = sorted(int(i) for i in ids)
        return pa.table({"id": pa.array(ids, pa.int64()), "date": [f"2024-01-0{1 + i % 2}" for i in ids],
                         "ts": pa.array([ts] * len(ids), pa.int64()), "amount": [float(rng.random()) for _ in ids]},
                        schema=schema)

    mw.write(batch(rng.permutation(300)[:200], 1), path, cfg)
    for c in range(3):
        mw.write(batch(rng.choice(320, 25, replace=False), 2 + c), path, cfg)
    mw.write(batch(rng.choice(300, 10, replace=False), 9), path, mw.WriterConfig(writer_id="w", lock=lock, operation="delete"))
    files = mw.Table.open(path).snapshot().files()
    assert any(f.logs for f in files)
    sorted_bases = [pq.read_table(f"{path}/{f.path}", columns=["id"]).column("id") for f in files if f.has_base]
    assert any(merge_rule._touched_sorted(k, pa.array([0], pa.int64())) is not None for k in sorted_bases)
    theirs = hudi_read(path)
    order = [("id", "ascending")]
    for cols in (["id", "ts", "amount"], ["id", "date", "ts", "amount", "_hoodie_record_key"]):
        ours = mw.Table.open(path).read(columns=cols)
        want = theirs.select(cols).cast(ours.schema)
        assert ours.take(pc.sort_indices(ours, order)).equals(want.take(pc.sort_indices(want, order)))


STRING_SCHEMA = pa.schema([("id", pa.string()), ("ts", pa.int64()), ("v", pa.string())])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(base=st.lists(st.integers(0, 30), max_size=20, unique=True),
       logs=st.lists(st.tuples(st.lists(st.tuples(st.integers(0, 35), st.integers(0, 3), st.sampled_from("xyz")),
                                        max_size=6),
                               st.lists(st.tuples(st.integers(0, 35), st.integers(0, 3)), max_size=2)),
                     min_size=1, max_size=4),
       width=st.sampled_from([2, 3]))
def test_a_merge_over_a_sorted_fixed_width_string_base_equals_the_merge_with_the_hash_probe(base, logs, width):
    """Keys ``k07`` (or ``k007``): the logs' keys of other widths (``k100`` among ``k07``) are
    never found in the base, as in the hash probe."""
    def key(k: int) -> str:
        return f"k{k:0{width}d}" if k < 33 else f"k{k:0{width + 1}d}"

    def rows(items: list[tuple[int, int, str]]) -> pa.Table:
        return pa.table({"id": pa.array([key(i[0]) for i in items], pa.string()),
                         "ts": pa.array([i[1] for i in items], pa.int64()),
                         "v": pa.array([i[2] for i in items], pa.string())}, schema=STRING_SCHEMA)

    sources = [Versions(-1, rows([(k, 1, "b") for k in sorted(base)]))]
    for rank, (records, deletes) in enumerate(logs):
        d = pa.table({"record_key": pa.array([key(k) for k, _ in deletes], pa.string()),
                      "partition_path": pa.array(["p"] * len(deletes), pa.string()),
                      "ordering_value": pa.array([o for _, o in deletes], pa.int64())})
        sources.append(Versions(rank, rows(records) if records else None, d if deletes else None))
    fast, plain = _merged_with_and_without_the_binary_search(sources, STRING_SCHEMA)
    assert fast.equals(plain)


def _merged_with_and_without_the_binary_search(sources: list, schema: pa.Schema) -> tuple[pa.Table, pa.Table]:
    """The merge of ``sources`` as it runs, and with the sorted-key search turned off (the hash probe)."""
    fast = merge(sources, ordering_field="ts", schema=schema, key="id")
    keep = merge_rule._touched_sorted
    merge_rule._touched_sorted = lambda keys, dictionary: None
    try:
        plain = merge(sources, ordering_field="ts", schema=schema, key="id")
    finally:
        merge_rule._touched_sorted = keep
    return fast, plain
