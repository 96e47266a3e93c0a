"""The bloom index's pruning by key range: with a one-field integral record key, files are pruned
by the key column's typed statistics, since the footer's string range of numeric keys ("10" <
"9") covers almost any key."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
import pyarrow as pa
import pyarrow.parquet as pq

import multiwriter as mw
from multiwriter.table.snapshot import Snapshot
from multiwriter.write import index
from tests.oracle import hudi_read, rows

SCHEMA = pa.schema([("id", pa.int64()), ("date", pa.string()), ("ts", pa.int64()), ("v", pa.string())])


def _batch(ids, ts: int, date: str = "2024-01-01") -> pa.Table:
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()), "date": [date] * len(ids), "ts": pa.array([ts] * len(ids), pa.int64()),
                     "v": [f"{i}@{ts}" for i in ids]}, schema=SCHEMA)


def test_a_typed_range_prunes_what_the_string_range_cannot():
    f = index.FooterKeys("100", "199", None, 100, typed=(100, 199))
    keys = pa.array(["1000", "150", "1500"])
    ints = np.array([1000, 150, 1500])
    assert f.may_hold(keys, "1000", "1500").tolist() == [True, True, True], "as strings all three are in range"
    assert f.may_hold(keys, "1000", "1500", typed=index.typed_keys(ints)).tolist() == [False, True, False]
    assert f.may_hold(keys[:1], "1000", "1000", typed=index.typed_keys(ints[:1])) is False
    untyped = index.FooterKeys("100", "199", None, 100)
    assert untyped.may_hold(keys, "1000", "1500", typed=index.typed_keys(ints)).tolist() == [True, True, True]


def test_integral_key_is_only_a_single_integer_field():
    t = _batch([1], 1)
    assert index.integral_key(t, ["id"]) == "id"
    assert index.integral_key(t, ["v"]) is None
    assert index.integral_key(t, ["id", "date"]) is None
    assert index.integral_key(t, ["missing"]) is None


def test_files_carry_their_typed_key_range_and_the_cache_agrees_with_storage(tmp_path):
    path = str(tmp_path / "t")
    mw.Table.create(path, name="t", schema=SCHEMA, record_key="id", partition_by=["date"], ordering_field="ts")
    w = mw.Writer(mw.Table.open(path), mw.WriterConfig(writer_id="a", lock=mw.InProcessLock(), executor="driver"))
    try:
        w.write(_batch(range(0, 100), 1))
        w.write(_batch(range(100, 200), 2))  # new keys: a second file group of the partition
        table = mw.Table.open(path)
        snap = Snapshot.build(table.storage, table.timeline())
        ranges = {}
        for fs in snap.slices.values():
            stored = index.read_footer(table.storage, fs.path, "id")
            cached = index.SHARED_FOOTERS.get((table.storage.uri, fs.path))
            assert cached is not None and cached.typed == stored.typed, fs.path
            ids = pq.read_table(table.storage.abs(fs.path), columns=["id"]).column(0).to_pylist()
            assert stored.typed == (min(ids), max(ids))
            if stored.typed == (0, 99):  # "0" <= "150" <= "99": only the typed range rules it out
                assert stored.min_key <= "150" <= stored.max_key
                assert stored.may_hold(pa.array(["150"]), "150", "150", typed=index.typed_keys(np.array([150]))) is False
            ranges[fs.file_id] = stored.typed
        assert sorted(ranges.values()) == [(0, 99), (100, 199)]
        # an upsert across both blocks lands in the file groups that hold the keys
        w.write(_batch([5, 150, 1000], 3))
    finally:
        w.close()
    got = hudi_read(path)
    assert got.num_rows == 201
    assert rows(got, ["id", "v"]) == sorted(
        [(i, f"{i}@1") for i in range(100) if i != 5] + [(i, f"{i}@2") for i in range(100, 200) if i != 150]
        + [(5, "5@3"), (150, "150@3"), (1000, "1000@3")], key=repr)


def test_a_file_without_the_key_column_statistics_is_probed_as_before(tmp_path):
    f = tmp_path / "x.parquet"
    pq.write_table(pa.table({"id": pa.array([3, 9], pa.int64())}), f, write_statistics=False)
    assert index.typed_range(pq.read_metadata(f), "id") is None
    pq.write_table(pa.table({"id": pa.array([3, 9], pa.int64())}), f)
    assert index.typed_range(pq.read_metadata(f), "id") == (3, 9)
    assert index.typed_range(pq.read_metadata(f), "other") is None


@settings(max_examples=25, deadline=None)
@given(blocks=st.lists(st.integers(1, 60), min_size=1, max_size=4), probe=st.lists(st.integers(0, 400), min_size=1, max_size=80,
                                                                              unique=True),
       typed=st.booleans())
def test_lookups_without_the_keys_as_strings_find_what_lookups_with_them_find(tmp_path_factory, blocks, probe, typed):
    """Files with disjoint typed key ranges, tested with the batch's hashes, never need the keys
    as strings (nor their string range), so those are not built; either way each key is tagged
    with the file group that holds it, as a confirming lookup given the strings up front tags it."""
    from multiwriter.write import bloom, records

    path = str(tmp_path_factory.mktemp("idx") / "t")
    mw.Table.create(path, name="t", schema=SCHEMA, record_key="id", partition_by=["date"], ordering_field="ts")
    start, held = 0, {}
    for size in blocks:  # one file group per block of ids (inserts never join a group)
        mw.write(_batch(range(start, start + size), 1), path,
                 mw.WriterConfig(writer_id="w", lock=mw.InProcessLock(), operation="insert"))
        start += size + 5
    table = mw.Table.open(path)
    snap = Snapshot.build(table.storage, table.timeline())
    for fs in snap.slices.values():
        for i in pq.read_table(table.storage.abs(fs.path), columns=["id"]).column(0).to_pylist():
            held[i] = fs.file_id
    prepared = records.prepare(_batch(probe, 2), table.config, table.schema(), operation="upsert", hashes=True)
    built: list[int] = []
    strings = index.PartitionKeys.strings
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(index.PartitionKeys, "strings", property(lambda self: built.append(1) or strings.func(self)))
        # as a Copy-on-Write writer tags (no confirming read of a key only one file may hold)
        got = index.KeyIndex(table.storage, cache=index.FooterCache()).tag(snap, prepared, "id" if typed else None,
                                                                          confirm=False)
    plain = index.KeyIndex(table.storage, cache=index.FooterCache())
    keys = prepared.column(records.KEY).combine_chunks()
    files = list(snap.slices.values())
    want = [None] * len(probe)
    for fid, found in plain._lookup(files, keys, bloom.hashes_of(prepared)):
        for j in found.tolist():
            want[j] = fid
    assert got.column(index.FILE_ID).to_pylist() == want == [held.get(i) for i in probe]
    if typed:
        assert built == [], "typed ranges and hashes need no key strings"
