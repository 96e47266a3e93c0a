"""Hudi's footer bloom filter: our bits equal the ones Hudi on Spark wrote, our files carry one,
and the index reads only the footers of files that are new to a long-lived writer."""
from __future__ import annotations

import glob
import math
import importlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import multiwriter as mw
from tests.conftest import trips
from tests.oracle import hudi_read, rows, unzip_fixture

bloom = importlib.import_module("multiwriter.write.bloom")
index_mod = importlib.import_module("multiwriter.write.index")

SIMPLE_KEY_TABLES = ["v6_nonpartitioned", "v6_simplekeygen_nonhivestyle", "v8_nonpartitioned",
                     "v8_simplekeygen_nonhivestyle", "v8_simplekeygen_nonhivestyle_overwritetable"]


def _base_files(root) -> list[str]:
    return sorted(f for f in glob.glob(f"{root}/**/*.parquet", recursive=True) if "/.hoodie/" not in f)


def _keys(path: str) -> pa.Array:
    return pq.read_table(path, columns=["_hoodie_record_key"]).column(0).combine_chunks()


@pytest.mark.needs_fixtures
@pytest.mark.parametrize("name", SIMPLE_KEY_TABLES)
def test_our_filter_is_bit_for_bit_the_one_hudi_wrote(name, tmp_path):
    files = _base_files(unzip_fixture(name, tmp_path))
    assert files
    for f in files:
        footer = pq.read_metadata(f).metadata
        assert footer[bloom.TYPE_CODE_KEY] == b"DYNAMIC_V0"
        ours = bloom.DynamicBloomFilter.new()
        ours.add(_keys(f))  # in the file's row order, as Hudi's writer added them
        assert ours.serialize() == footer[bloom.FOOTER_KEY], f


@pytest.mark.needs_fixtures
@pytest.mark.parametrize("name", SIMPLE_KEY_TABLES + ["v8_complexkeygen_hivestyle"])
def test_reads_hudi_written_filters(name, tmp_path):
    for f in _base_files(unzip_fixture(name, tmp_path)):
        footer = pq.read_metadata(f).metadata
        theirs = bloom.DynamicBloomFilter.deserialize(footer[bloom.FOOTER_KEY])
        # a filter that denies keys its file holds is not used by the index (from_footer: None)
        holds_own = bool(theirs.might_contain(_keys(f)).all())
        assert (bloom.from_footer(footer) is not None) == holds_own
        assert (theirs.bits, theirs.hashes, theirs.per_row, len(theirs.rows)) == (2587966, 30, 60000, 1)
        assert theirs.in_last_row == len(_keys(f))
        assert theirs.serialize() == footer[bloom.FOOTER_KEY]  # read and written back unchanged


def test_rows_grow_to_the_bound_then_round_robin():
    f = bloom.DynamicBloomFilter.new(entries=10, fpp=0.01, max_entries=25)
    keys = [f"key-{i}" for i in range(47)]
    f.add(keys[:13])
    f.add(keys[13:])
    # 10 keys per row; rows are added while rows * 10 < 25 (3 rows); then round-robin from row 0
    assert len(f.rows) == 3 and f.in_last_row == 47 - 20
    assert f.might_contain(keys).all()
    single = [bloom.DynamicBloomFilter.new(entries=10, fpp=0.01, max_entries=25) for _ in range(3)]
    for s in single:  # same bits and hashes, one row each: the keys each row of f should hold
        s.per_row = s.max_entries = 1000
    expected_rows = [0] * 10 + [1] * 10 + [2] * 10 + [0] + [i % 3 for i in range(16)]
    for k, r in zip(keys, expected_rows, strict=True):
        single[r].add([k])
    back = bloom.DynamicBloomFilter.deserialize(f.serialize())
    for r in range(3):
        assert (back.rows[r] == single[r].rows[0]).all()


def test_written_files_carry_hudi_footer_and_hudi_rs_reads_them(trips_table):
    path = trips_table.path
    cfg = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock())
    mw.write(trips(range(0, 500), date="2024-01-01"), path, cfg)
    mw.write(trips(range(250, 900), date="2024-01-01", ts=2, value=2.0), path, cfg)  # updates + inserts
    files = _base_files(path)
    assert files
    for f in files:
        footer = pq.read_metadata(f).metadata
        keys = _keys(f)
        assert footer[bloom.TYPE_CODE_KEY] == b"DYNAMIC_V0"
        mm = pc.min_max(keys)
        assert footer[b"hoodie_min_record_key"].decode() == mm["min"].as_py()
        assert footer[b"hoodie_max_record_key"].decode() == mm["max"].as_py()
        assert bloom.from_footer(footer).might_contain(keys).all(), f
        assert bloom.FOOTER_KEY not in (pq.read_schema(f).metadata or {}).get(b"ARROW:schema", b"")
    got = hudi_read(path)
    assert got.num_rows == 900
    assert rows(got, ["id", "ts"]) == sorted([(str(i), 1) for i in range(250)] + [(str(i), 2) for i in range(250, 900)], key=repr)


def test_long_lived_writer_reads_only_footers_of_new_files(trips_table):
    path = trips_table.path
    w = mw.Writer(mw.Table.open(path), mw.WriterConfig(writer_id="a", lock=mw.InProcessLock()))
    try:
        w.write(trips(range(0, 100)))
        w.write(trips(range(50, 150), ts=2))  # its own files: known without reading them back
        assert w.index.footer_reads == 0
        known = set(index_mod.SHARED_FOOTERS.keys())
        mw.write(trips(range(1000, 1010)), path, mw.WriterConfig(writer_id="b", lock=mw.InProcessLock()))
        for k in set(index_mod.SHARED_FOOTERS.keys()) - known:  # as if b ran in another process
            index_mod.SHARED_FOOTERS.discard(k)
        w.write(trips(range(140, 160), ts=3))
        assert w.index.footer_reads == 1  # only the other writer's new file group
        w.write(trips(range(0, 5), ts=4))
        assert w.index.footer_reads == 1
    finally:
        w.close()
    got = hudi_read(path)
    assert got.num_rows == 170
    assert sorted(got.column("id").to_pylist()) == sorted(str(i) for i in list(range(160)) + list(range(1000, 1010)))


def test_one_off_writes_in_one_process_share_the_footers_they_saw(trips_table, monkeypatch):
    """``mw.write`` per batch (a new Writer each time) reads no footer twice in one process:
    the footer cache is per process, keyed by table and file (files are immutable)."""
    path = trips_table.path
    cfg = mw.WriterConfig(writer_id="a", lock=mw.InProcessLock())
    mw.write(trips(range(0, 100)), path, cfg)
    reads: list[str] = []
    real = index_mod.read_footer
    monkeypatch.setattr(index_mod, "read_footer", lambda storage, p, *rest: reads.append(p) or real(storage, p, *rest))
    mw.write(trips(range(50, 150), ts=2), path, cfg)  # its files were written by this process
    assert reads == []
    index_mod.SHARED_FOOTERS.clear()
    mw.write(trips(range(60, 70), ts=3), path, cfg)
    assert reads and len(reads) == len(set(reads))  # read once each after the cache was cleared
    reads.clear()
    mw.write(trips(range(60, 70), ts=4), path, cfg)
    assert reads == []  # then known
    assert rows(hudi_read(path), ["id", "ts"]) == sorted(
        [(str(i), 1) for i in range(50)] + [(str(i), 2) for i in range(50, 150) if not 60 <= i < 70]
        + [(str(i), 4) for i in range(60, 70)], key=repr)


def test_insert_does_not_look_up_existing_keys(trips_table):
    """As Hudi's insert: no index lookup, so a key already stored is written again."""
    path = trips_table.path
    mw.write(trips(range(3)), path, mw.WriterConfig(writer_id="u", lock=mw.InProcessLock()))
    cfg = mw.WriterConfig(writer_id="i", lock=mw.InProcessLock(), operation="insert")
    r = mw.write(pa.concat_tables([trips([1], ts=5), trips([1], ts=7), trips([9])]), path, cfg)
    assert r.num_updates == 0 and r.num_inserts == 2  # in-batch duplicates still resolved
    got = rows(hudi_read(path), ["id", "ts"])
    assert got == sorted([("0", 1), ("1", 1), ("1", 7), ("2", 1), ("9", 1)], key=repr)


def test_new_files_carry_filters_sized_to_their_keys(trips_table):
    """A written-once file's filter is sized to its keys (the layout of a Hudi writer with that
    num_entries): small files carry MIN_ENTRIES-sized rows, each finds every key it holds."""
    path = trips_table.path
    cfg = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock())
    mw.write(trips(range(0, 100), date="2024-01-01"), path, cfg)
    mw.write(trips(range(5000, 12000), date="2024-01-02"), path, cfg)
    sizes = {}
    for f in _base_files(path):
        footer = pq.read_metadata(f).metadata
        fl = bloom.from_footer(footer)
        keys = _keys(f)
        assert fl.might_contain(keys).all(), f
        # the same filter built key by key from scratch (no precomputed hashes) has the same bits
        ref = bloom.DynamicBloomFilter.new(entries=fl.per_row)
        ref.add(keys.take(pc.sort_indices(keys)))
        assert ref.serialize() == footer[bloom.FOOTER_KEY]
        sizes[len(keys)] = (fl.per_row, fl.hashes, len(footer[bloom.FOOTER_KEY]))
    assert sizes[100][:2] == (bloom.MIN_ENTRIES, 30) and sizes[7000][:2] == (7000, 30)
    assert sizes[100][2] < 20_000 < 431_000 // 10


def test_precomputed_hashes_answer_as_hashing_each_key():
    keys = pa.array([f"key-{i}" for i in range(3000)] + ["x", "yy", "zzz", "wwww"])
    f = bloom.DynamicBloomFilter.for_keys(1500)
    f.add(keys.slice(0, 1500))
    f.add(keys.slice(1500, 600))  # a second row once the first is full
    h = bloom.key_hashes(keys, f.hashes)
    assert len(f.rows) == 2
    assert (f.might_contain_hashes(h) == f.might_contain(keys)).all()
    assert f.might_contain_hashes(h[:2100]).all()


def _murmur2_java(data: bytes, seed: int) -> int:
    """Scalar 32-bit MurmurHash2 as Hudi's Java code runs it (signed tail bytes), as uint32."""
    m, mask = 0x5BD1E995, 0xFFFFFFFF
    h = (seed ^ len(data)) & mask
    whole = len(data) // 4 * 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    tail = data[whole:]
    if tail:
        for j, b in enumerate(tail):
            h ^= ((b - 256 if b > 127 else b) << (8 * j)) & mask
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h


def _java_positions(key: str, hashes: int, bits: int) -> list[int]:
    out, h = [], 0
    for _ in range(hashes):
        h = _murmur2_java(key.encode(), h)
        signed = h - (1 << 32) if h >= 1 << 31 else h
        out.append(abs(int(math.fmod(signed, bits))))  # Java: Math.abs(h % bits), % truncates
    return out


def test_positions_match_a_scalar_murmur_for_mixed_lengths_and_sliced_arrays():
    """Keys of many byte lengths (one to nine, multi-byte UTF-8, so tail bytes above 127) in an
    array slice with an offset: every bit position equals the scalar reference's."""
    words = ["a", "bb", "ccc", "dddd", "eeeee", "ß", "€uro", "日本語キー", "k000000001", "x" * 13]
    keys = pa.array(["pad"] + [f"{w}{i}" if i % 3 else w for i in range(60) for w in words]).slice(1)
    for bits in (2_000_003, 86_263, (1 << 31) - 1):
        got = bloom.key_positions(keys, 30, bits)
        want = [_java_positions(k, 30, bits) for k in keys.to_pylist()]
        assert got.tolist() == want, bits


def test_positions_of_equal_length_keys_match_the_scalar_murmur():
    keys = pa.array([f"k{i:09d}" for i in range(500)])
    got = bloom.key_positions(keys, 30, 143_751)
    assert got.tolist() == [_java_positions(k, 30, 143_751) for k in keys.to_pylist()]


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork")
def test_a_forked_child_hashes_large_batches_with_its_own_threads():
    """The parallel hashing's threads do not survive a fork: a child that hashes a large batch
    after its parent did must not wait on them forever."""
    import multiprocessing

    keys = pa.array([f"k{i:09d}" for i in range(bloom.PARALLEL_MIN_KEYS + 10)])
    want = bloom.key_hashes(keys, 30)  # the parent's pool now exists
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        got = pool.apply_async(_hash_in_child, (keys.to_pylist(),)).get(timeout=60)
    assert got == want[:, 0].tolist()


def _hash_in_child(keys: list[str]) -> list[int]:
    return bloom.key_hashes(pa.array(keys), 30)[:, 0].tolist()


@pytest.mark.parametrize("repeated", [True, False])
def test_a_large_insert_hashed_while_its_instant_begins_carries_exact_filters(trips_table, repeated):
    """An insert large enough to hash its keys on a hash thread while it is validated, its
    instant begins and is planned: every file's filter has each of its keys' bits where the
    scalar murmur puts them (the hashes start on the batch's keys as given; ``repeated``: a key
    repeats, so rows are dropped and the kept rows are hashed again), and the repeated key is
    resolved by the ordering field (hudi-rs)."""
    path = trips_table.path
    n = bloom.PARALLEL_MIN_KEYS + 5_000
    ids = list(range(n))
    batch = pa.concat_tables([trips([i for i in ids if i % 3 == d], date=f"2024-01-0{d + 1}") for d in range(3)]
                             + ([trips([7], date="2024-01-02", ts=9, value=2.0)] if repeated else []))
    r = mw.write(batch, path, mw.WriterConfig(writer_id="i", lock=mw.InProcessLock(), operation="insert"))
    assert r.num_inserts == n
    files = _base_files(path)
    assert len(files) == 3
    for f in files:
        fl = bloom.from_footer(pq.read_metadata(f).metadata)
        keys = _keys(f).to_pylist()
        assert len(fl.rows) == 1
        bits = fl.rows[0]
        for k in keys[:: max(1, len(keys) // 150)]:
            for p in _java_positions(k, fl.hashes, fl.bits):
                assert bits[p >> 3] >> (p & 7) & 1, (f, k, p)
    got = hudi_read(path)
    assert got.num_rows == n
    assert rows(got.filter(pc.equal(got["id"], "7")), ["id", "ts", "value"]) == [("7", 9, 2.0) if repeated else ("7", 1, 1.0)]


@pytest.mark.parametrize("bad", ["null key", "no key column", "key and schema both wrong"])
def test_an_insert_whose_keys_do_not_compute_fails_as_before_and_writes_nothing(trips_table, bad):
    """An insert hashes its keys while the table schema is looked up; a batch whose keys cannot
    be computed raises the typed error it always did (the schema's first when both are wrong),
    and nothing reaches the table."""
    from multiwriter.errors import InvalidRecordError, SchemaMismatchError

    batch = trips(range(5))
    if bad == "null key":
        batch = batch.set_column(0, "id", pa.array(["1", None, "3", "4", "5"], pa.string()))
        want = InvalidRecordError
    elif bad == "no key column":
        batch = batch.drop_columns(["id"])
        want = SchemaMismatchError
    else:  # a key column of another type than the table's, holding a null
        batch = batch.set_column(0, "id", pa.array([1, None, 3, 4, 5], pa.int64()))
        want = SchemaMismatchError
    cfg = mw.WriterConfig(writer_id="i", lock=mw.InProcessLock(), operation="insert")
    with pytest.raises(want):
        mw.write(batch, trips_table.path, cfg)
    assert mw.Table.open(trips_table.path).timeline().completed() == []
    assert _base_files(trips_table.path) == []
    mw.write(trips(range(5)), trips_table.path, cfg)
    assert hudi_read(trips_table.path).num_rows == 5


def _reference_row(keys: list[str], hashes: int, bits: int) -> np.ndarray:
    """The filter row Hudi's writer builds, bit by bit from the scalar Java positions."""
    row = np.zeros((bits + 7) // 8, dtype=np.uint8)
    for k in keys:
        for p in _java_positions(k, hashes, bits):
            row[p // 8] |= 1 << (p % 8)
    return row


def test_filters_of_successive_files_in_one_thread_are_each_exact():
    """A merge thread reuses its scratch arrays from one file's filter to the next (larger,
    then smaller, then larger again): no bit of one file's keys may leak into another's."""
    sizes = [2_600, 700, 2_100, 40]
    keys = [f"f{n}-key-{i}" for n in range(len(sizes)) for i in range(sizes[n])]
    t = bloom.with_hashes(pa.table({"k": pa.array(keys)}), "k")
    start = 0
    for n in sizes:
        part = t.slice(start, n)
        f = bloom.DynamicBloomFilter.for_keys(n)
        f.add_rows(part, "k")
        assert (f.rows[0] == _reference_row(keys[start:start + n], f.hashes, f.bits)).all(), n
        start += n


def _bloom_footer(root: str) -> dict[str, bytes]:
    """Per file group, the bloom filter in its newest base file's footer."""
    newest: dict[str, str] = {}
    for f in _base_files(root):
        name = f.rsplit("/", 1)[1]
        group, instant = name.split("_", 1)[0], name.rsplit("_", 1)[1]
        if group not in newest or instant > newest[group].rsplit("_", 1)[1]:
            newest[group] = f
    return {g: pq.read_metadata(f).metadata[bloom.FOOTER_KEY] for g, f in newest.items()}


def test_a_filter_grown_from_the_footer_cache_is_the_one_grown_from_the_footer(tmp_path, monkeypatch):
    """A rewrite grows the old file's filter by the new keys: taken from the process's footer
    cache (the old file written or read here) or decoded from the old file's footer, the new
    file's filter is the same, byte for byte."""
    schema = pa.schema([("id", pa.string()), ("day", pa.string()), ("ts", pa.int64())])

    def batch(ids: range) -> pa.Table:
        return pa.table({"id": [f"k{i:05d}" for i in ids], "day": ["d"] * len(ids), "ts": [1] * len(ids)}, schema=schema)

    merge = importlib.import_module("multiwriter.write.merge")
    footers = []
    for cached in (True, False):
        if not cached:
            monkeypatch.setattr(merge, "_cached_filter", lambda storage, task: None)
        path = str(tmp_path / f"t{cached}")
        mw.Table.create(path, name="t", schema=schema, record_key="id", partition_by=["day"], ordering_field="ts")
        cfg = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock())
        mw.write(batch(range(0, 3000)), path, cfg)
        for step in range(3):  # updates of stored keys and new keys, into the one group
            mw.write(batch(range(2000 + step * 700, 3500 + step * 700)), path, cfg)
        footers.append(_bloom_footer(path))
    assert len(footers[0]) == 1 and list(footers[0].values()) == list(footers[1].values())
    got = hudi_read(str(tmp_path / "tTrue"))
    assert got.num_rows == 4900
