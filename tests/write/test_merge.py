"""How base files are encoded: dictionaries only where values repeat, and meta columns that
every reader sees as plain strings naming the file and partition they are in."""
from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import multiwriter as mw
from tests.oracle import hudi_read, rows

SCHEMA = pa.schema([("id", pa.string()), ("day", pa.string()), ("ts", pa.int64()), ("x", pa.float64()),
                    ("color", pa.string())])


def _batch(ids: range, ts: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    n = len(ids)
    return pa.table({"id": [f"k{i:06d}" for i in ids], "day": [f"d{i % 2}" for i in ids], "ts": [ts] * n,
                     "x": rng.random(n), "color": rng.choice(["red", "green", "blue"], n)}, schema=SCHEMA)


def _data_files(root: str) -> list[str]:
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if not x.startswith(".")]
        out += [os.path.join(d, f) for f in files if f.endswith(".parquet")]
    return out


def _encodings(path: str) -> dict[str, tuple[str, ...]]:
    md = pq.ParquetFile(path).metadata
    rg = md.row_group(0)
    return {rg.column(i).path_in_schema: rg.column(i).encodings for i in range(rg.num_columns)}


def test_dictionaries_only_where_values_repeat_and_meta_columns_read_as_strings(tmp_path):
    path = str(tmp_path / "enc")
    mw.Table.create(path, name="enc", schema=SCHEMA, record_key="id", partition_by=["day"], ordering_field="ts")
    cfg = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock())
    first = _batch(range(4000), 1, 1)
    mw.write(first, path, cfg)
    update = _batch(range(0, 4000, 7), 2, 2)  # rewrites both file groups: kept rows plus incoming ones
    mw.write(update, path, cfg)

    latest = {}
    for f in _data_files(path):
        fid = os.path.basename(f).split("_")[0]
        if fid not in latest or os.path.basename(f) > os.path.basename(latest[fid]):
            latest[fid] = f
    assert len(latest) == 2
    for f in latest.values():
        enc = _encodings(f)
        assert "RLE_DICTIONARY" not in enc["x"], f"distinct doubles need no dictionary: {enc['x']}"
        assert "RLE_DICTIONARY" in enc["color"], f"three repeating values keep one: {enc['color']}"
        assert "RLE_DICTIONARY" in enc["_hoodie_file_name"]
        meta = pq.read_table(f, columns=["_hoodie_file_name", "_hoodie_partition_path"])
        assert meta.schema.field("_hoodie_file_name").type == pa.string()
        assert set(meta.column("_hoodie_file_name").to_pylist()) == {os.path.basename(f)}
        assert set(meta.column("_hoodie_partition_path").to_pylist()) == {os.path.basename(os.path.dirname(f))}

    got = hudi_read(path)
    for c in ("_hoodie_file_name", "_hoodie_partition_path", "_hoodie_commit_time"):
        assert pa.types.is_string(got.schema.field(c).type) or pa.types.is_large_string(got.schema.field(c).type), got.schema
    assert set(got.column("_hoodie_file_name").to_pylist()) == {os.path.basename(f) for f in latest.values()}
    expected = {r["id"]: (r["ts"], r["x"]) for r in first.to_pylist()}
    expected.update({r["id"]: (r["ts"], r["x"]) for r in update.to_pylist()})
    assert rows(got, ["id", "ts", "x"]) == sorted(((k, *v) for k, v in expected.items()), key=repr)


@pytest.mark.parametrize("prefix", ["20260101000000123_7", "20260101000000123_42", "x"])
def test_sequence_numbers_match_hudis_format_at_every_digit_boundary(prefix, monkeypatch):
    from multiwriter.write import merge

    # small sizes first, so the cached template has to grow; past the cap the strings are joined
    monkeypatch.setattr(merge, "_TEMPLATE_ROWS", 5_000)
    monkeypatch.setattr(merge, "_seqno_templates", {})
    for n in (0, 1, 9, 10, 11, 99, 100, 1001, 4_999, 5_000, 5_001, 12_345, 3):
        got = merge.sequence_numbers(prefix, n)
        got.validate(full=True)
        assert got.type == pa.string()
        assert got.to_pylist() == [f"{prefix}_{i}" for i in range(n)]


def test_nested_columns_keep_statistics_and_dictionaries_by_their_leaves(tmp_path):
    schema = pa.schema([("id", pa.string()), ("day", pa.string()), ("ts", pa.int64()),
                        ("loc", pa.struct([("city", pa.string()), ("zip", pa.int32())])), ("tags", pa.list_(pa.string()))])
    path = str(tmp_path / "nested")
    mw.Table.create(path, name="nested", schema=schema, record_key="id", partition_by=["day"], ordering_field="ts")
    n = 3000
    batch = pa.table({"id": [f"k{i:05d}" for i in range(n)], "day": ["d"] * n, "ts": [1] * n,
                      "loc": [{"city": ["Oslo", "Lima"][i % 2], "zip": i % 3} for i in range(n)],
                      "tags": [["a", "b"][: 1 + i % 2] for i in range(n)]}, schema=schema)
    mw.write(batch, path, mw.WriterConfig(writer_id="w", lock=mw.InProcessLock()))
    [f] = _data_files(path)
    rg = pq.ParquetFile(f).metadata.row_group(0)
    cols = {rg.column(i).path_in_schema: rg.column(i) for i in range(rg.num_columns)}
    for leaf in ("loc.city", "loc.zip", "tags.list.element"):
        assert cols[leaf].is_stats_set, leaf
        assert "RLE_DICTIONARY" in cols[leaf].encodings, leaf
    assert cols["loc.city"].statistics.min == "Lima" and cols["loc.city"].statistics.max == "Oslo"
    assert not cols["_hoodie_commit_seqno"].is_stats_set and not cols["_hoodie_record_key"].is_stats_set
    # the file's own path needs no statistics; the commit time does (incremental reads filter on it)
    assert not cols["_hoodie_partition_path"].is_stats_set and not cols["_hoodie_file_name"].is_stats_set
    assert cols["_hoodie_commit_time"].is_stats_set and cols["ts"].is_stats_set and cols["day"].is_stats_set
    assert rows(hudi_read(path), ["id", "ts"]) == sorted([(f"k{i:05d}", 1) for i in range(n)], key=repr)


INT_SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string()), ("ts", pa.int64()), ("x", pa.float64())])


def _int_batch(ids: np.ndarray, ts: np.ndarray, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({"id": ids, "day": [f"d{i % 2}" for i in ids.tolist()], "ts": ts, "x": rng.random(len(ids))},
                    schema=INT_SCHEMA)


def test_integer_keys_match_by_value_newer_rows_win_and_older_ones_are_dropped(tmp_path):
    """A one-field integral key is matched to the old rows by its values, not its strings: every
    kind of incoming row (newer and older versions of stored keys, new keys, deletes) lands as
    the event-time rule says, read back by hudi-rs."""
    path = str(tmp_path / "t")
    mw.Table.create(path, name="t", schema=INT_SCHEMA, record_key="id", partition_by=["day"], ordering_field="ts")
    cfg = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock())
    model: dict[int, tuple[int, float]] = {}

    def apply(t: pa.Table) -> None:
        for i, ts, x in zip(t.column("id").to_pylist(), t.column("ts").to_pylist(), t.column("x").to_pylist(), strict=True):
            if i not in model or ts >= model[i][0]:
                model[i] = (ts, x)

    first = _int_batch(np.arange(0, 2000, dtype=np.int64), np.full(2000, 10, np.int64), 1)
    mw.write(first, path, cfg)
    apply(first)
    rng = np.random.default_rng(5)
    # stored keys with newer and older versions (ids 9 and 90 share no string prefix order), and new keys
    upd = rng.choice(2000, 600, replace=False).astype(np.int64)
    ts = np.where(np.arange(600) % 2 == 0, 20, 5).astype(np.int64)
    second = _int_batch(np.concatenate([upd, np.arange(2000, 2300, dtype=np.int64)]),
                        np.concatenate([ts, np.full(300, 20, np.int64)]), 2)
    res = mw.write(second, path, cfg)
    apply(second)
    assert res.num_updates == 300 and res.num_inserts == 300
    gone = [int(k) for k in rng.choice(2300, 50, replace=False)]
    last = {i: model[i] for i in gone}
    deletes = pa.table({"id": pa.array(gone, pa.int64()), "day": [f"d{i % 2}" for i in gone],
                        "ts": [last[i][0] for i in gone], "x": [last[i][1] for i in gone]}, schema=INT_SCHEMA)
    mw.write(deletes, path, mw.WriterConfig(writer_id="w", lock=mw.InProcessLock(), operation="delete"))
    for k in gone:
        model.pop(k)
    want = sorted((i, ts, x) for i, (ts, x) in model.items())
    got = hudi_read(path)
    assert rows(got, ["id", "ts", "x"]) == sorted(want, key=repr)
    assert got.column("_hoodie_record_key").to_pylist() == [str(i) for i in got.column("id").to_pylist()]


def test_each_rewritten_file_is_read_once_started_while_the_batch_is_tagged(tmp_path, monkeypatch):
    """The old base files a batch rewrites are read on the merge threads as soon as the index
    finds them holding batch keys, and each merge takes that read instead of reading again."""
    import importlib

    executor = importlib.import_module("multiwriter.write.executor")
    merge = importlib.import_module("multiwriter.write.merge")
    early, late = [], []
    read = merge.read_old_file
    monkeypatch.setattr(executor, "read_old_file", lambda storage, rel: early.append(rel) or read(storage, rel))
    monkeypatch.setattr(merge, "read_old_file", lambda storage, rel: late.append(rel) or read(storage, rel))
    path = str(tmp_path / "t")
    mw.Table.create(path, name="t", schema=SCHEMA, record_key="id", partition_by=["day"], ordering_field="ts")
    cfg = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock())
    mw.write(_batch(range(0, 400), 1, 1), path, cfg)
    assert early == late == []
    res = mw.write(_batch(range(300, 500), 2, 2), path, cfg)  # updates in both days' groups, and new keys
    assert len(set(early)) == len(early) == 2  # one read per day's group
    assert late == [] and res.num_updates == 100 and res.num_inserts == 100
    got = hudi_read(path)
    assert got.num_rows == 500 and sorted(set(got.column("ts").to_pylist())) == [1, 2]


def test_reads_ahead_of_their_merges_are_bounded_by_files_and_bytes(tmp_path):
    """Reads started ahead wait in memory for their merges, so only a few files (and bytes) are
    read ahead; the merges of the other files read them as before."""
    import importlib

    executor = importlib.import_module("multiwriter.write.executor")
    plan = importlib.import_module("multiwriter.write.plan")
    path = str(tmp_path / "t")
    mw.Table.create(path, name="t", schema=SCHEMA, record_key="id", partition_by=["day"], ordering_field="ts")
    mw.write(pa.concat_tables([_batch(range(i, 400, 4), 1, i) for i in range(4)]), path,
             mw.WriterConfig(writer_id="w", lock=mw.InProcessLock()))
    table = mw.Table.open(path)
    slices = sorted(table.snapshot().files(), key=lambda fs: fs.path)
    assert len(slices) == 2
    tasks = [plan.FileGroupTask(fs.partition, fs.file_id, i, fs.name, fs.instant_time) for i, fs in enumerate(slices)]

    def started(reads) -> int:
        for fs in slices:
            reads.start(fs)
        return sum(reads.of(t) is not None for t in tasks)

    assert started(executor.OldReads(table.storage, max_files=1)) == 1
    assert started(executor.OldReads(table.storage, max_bytes=slices[0].size)) == 1
    assert started(executor.OldReads(table.storage, max_bytes=0)) == 0
    reads = executor.OldReads(table.storage)
    assert started(reads) == 2
    rows_read, _md = reads.of(tasks[0]).result()
    assert rows_read.num_rows == 200


DICT_SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string()), ("ts", pa.int64()), ("color", pa.string()),
                         ("note", pa.string())])


def _dict_batch(ids: list[int], ts: list[int], colors: list[str | None], notes: list[str]) -> pa.Table:
    return pa.table({"id": ids, "day": [f"d{i % 2}" for i in ids], "ts": ts, "color": colors, "note": notes},
                    schema=DICT_SCHEMA)


@st.composite
def _dict_batches(draw):
    """A few upserts and deletes of small int keys: repeating (and null) colors, distinct notes."""
    out = []
    for b in range(draw(st.integers(2, 5))):
        ids = draw(st.lists(st.integers(0, 300), min_size=1, max_size=120, unique=True))
        op = "delete" if b > 0 and draw(st.integers(0, 4)) == 0 else "upsert"
        ts = [draw(st.integers(0, 3)) + b for _ in ids]
        colors = [draw(st.sampled_from(["red", "green", "blue", None])) for _ in ids]
        out.append((op, _dict_batch(ids, ts, colors, [f"n{b}-{i}" for i in ids])))
    return out


def _write_all(path: str, batches: list[tuple[str, pa.Table]]) -> None:
    mw.Table.create(path, name="t", schema=DICT_SCHEMA, record_key="id", partition_by=["day"], ordering_field="ts")
    for op, b in batches:
        mw.write(b, path, mw.WriterConfig(writer_id="w", lock=mw.InProcessLock(), operation=op))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=_dict_batches())
def test_columns_read_as_dictionaries_write_what_plain_columns_write(tmp_path_factory, batches):
    """Rewrites that keep the old file's dictionary-encoded string columns (commit time, the
    partition column, a repeating data column) as dictionaries write the rows that decoding
    them writes, as hudi-rs reads them, with the columns still dictionary-encoded."""
    import importlib

    merge = importlib.import_module("multiwriter.write.merge")
    root = tmp_path_factory.mktemp("dict")
    fast, plain = str(root / "fast"), str(root / "plain")
    written, write = [], merge._write_parquet

    def one_dictionary(storage, rel, out, *a, **kw):  # the Parquet writer falls back to plain values on a new one
        for col in out.columns:
            if pa.types.is_dictionary(col.type):
                written.append(all(c.dictionary.equals(col.chunk(0).dictionary) for c in col.chunks))
        return write(storage, rel, out, *a, **kw)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(merge, "_write_parquet", one_dictionary)
        _write_all(fast, batches)
        mp.setattr(merge, "_dictionary_encoded", lambda *a: [])
        _write_all(plain, batches)
    assert all(written)
    view = ["_hoodie_record_key", "_hoodie_partition_path", "_hoodie_commit_time", "id", "day", "ts", "color", "note"]
    a, b = hudi_read(fast), hudi_read(plain)
    assert rows(a, [c for c in view if c != "_hoodie_commit_time"]) == rows(b, [c for c in view if c != "_hoodie_commit_time"])
    assert rows(a, view) == rows(mw.Table.open(fast).read(), view)
    # the same commit of each row: the instants differ between the tables, their order does not
    order = {t: i for i, t in enumerate(sorted(set(a.column("_hoodie_commit_time").to_pylist())))}
    order_b = {t: i for i, t in enumerate(sorted(set(b.column("_hoodie_commit_time").to_pylist())))}
    assert (sorted((r["id"], order[r["_hoodie_commit_time"]]) for r in a.select(["id", "_hoodie_commit_time"]).to_pylist())
            == sorted((r["id"], order_b[r["_hoodie_commit_time"]]) for r in b.select(["id", "_hoodie_commit_time"]).to_pylist()))
    for f in mw.Table.open(fast).snapshot().files():
        md = pq.ParquetFile(os.path.join(fast, f.path)).metadata
        if md.num_rows:
            rg = md.row_group(0)
            enc = {rg.column(i).path_in_schema: rg.column(i).encodings for i in range(rg.num_columns)}
            assert "RLE_DICTIONARY" in enc["_hoodie_commit_time"], enc


@settings(max_examples=40, deadline=None)
@given(parts=st.lists(st.lists(st.one_of(st.none(), st.integers(0, 80)), min_size=0, max_size=60), min_size=1, max_size=4),
       size=st.integers(1, 90))
def test_joined_dictionaries_hold_the_same_values_in_one_dictionary(parts, size):
    """Chunks with their own dictionaries (old rows as read, new ones encoded) come out with one
    dictionary over every chunk, the same values row by row, and past the compaction bound only
    the values rows use."""
    from multiwriter.write.merge import COMPACT_DICTIONARY, joined_dictionaries

    chunks = []
    for k, p in enumerate(parts):  # each chunk its own dictionary: the same values in another order, or fewer
        dictionary = pa.array([f"v{(j + 7 * k) % (size + k)}" for j in range(size)])
        idx = pa.array([None if v is None else v % size for v in p], pa.int32())
        chunks.append(pa.DictionaryArray.from_arrays(idx, dictionary))
    t = pa.table({"c": pa.chunked_array(chunks, pa.dictionary(pa.int32(), pa.string())), "n": pa.array(range(sum(map(len, parts))))})
    got = joined_dictionaries(t)
    assert got.column("c").to_pylist() == t.column("c").to_pylist()
    dicts = [c.dictionary for c in got.column("c").chunks]
    assert all(d.equals(dicts[0]) for d in dicts)
    used = {v for v in t.column("c").to_pylist() if v is not None}
    if dicts and len(set(dicts[0].to_pylist()) | used) > COMPACT_DICTIONARY and len(dicts[0]) > COMPACT_DICTIONARY:
        raise AssertionError("a dictionary past the bound was not compacted")
    if dicts and len(dicts[0]) <= COMPACT_DICTIONARY:
        assert used <= set(dicts[0].to_pylist())


def test_a_file_rewritten_by_many_commits_keeps_a_bounded_commit_time_dictionary(tmp_path):
    """Each rewrite adds its instant to the file's commit-time dictionary; once past the bound,
    the values of rows since replaced are dropped rather than carried on, and hudi-rs reads
    every row with its own commit time."""
    from multiwriter.write.merge import COMPACT_DICTIONARY

    path = str(tmp_path / "t")
    mw.Table.create(path, name="t", schema=DICT_SCHEMA, record_key="id", partition_by=["day"], ordering_field="ts")
    cfg = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock())
    mw.write(_dict_batch(list(range(0, 20, 2)), [0] * 10, ["red"] * 10, ["x"] * 10), path, cfg)
    for b in range(COMPACT_DICTIONARY + 6):  # every commit replaces the same two rows
        mw.write(_dict_batch([0, 2], [b + 1] * 2, ["blue"] * 2, ["y"] * 2), path, cfg)
    (f,) = mw.Table.open(path).snapshot().files()
    t = pq.ParquetFile(os.path.join(path, f.path), read_dictionary=["_hoodie_commit_time"]).read()
    times = t.column("_hoodie_commit_time")
    assert len(times.chunk(0).dictionary) <= COMPACT_DICTIONARY + 1
    got = hudi_read(path)
    assert got.num_rows == 10 and len(set(got.column("_hoodie_commit_time").to_pylist())) == 2
    assert rows(got, ["id", "ts"]) == sorted([(0, COMPACT_DICTIONARY + 6), (2, COMPACT_DICTIONARY + 6)]
                                             + [(i, 0) for i in range(4, 20, 2)], key=repr)


def _six_day_table(path: str) -> None:
    schema = pa.schema([("id", pa.string()), ("day", pa.string()), ("ts", pa.int64())])
    mw.Table.create(path, name="t", schema=schema, record_key="id", partition_by=["day"], ordering_field="ts")
    mw.write(pa.table({"id": [f"k{i}" for i in range(600)], "day": [f"d{i % 6}" for i in range(600)], "ts": [1] * 600},
                      schema=schema), path, mw.WriterConfig(writer_id="w", lock=mw.InProcessLock()))


def _update_every_day(path: str):
    schema = mw.Table.open(path).schema()
    return mw.write(pa.table({"id": [f"k{i}" for i in range(0, 600, 5)], "day": [f"d{i % 6}" for i in range(0, 600, 5)],
                              "ts": [2] * 120}, schema=schema), path, mw.WriterConfig(writer_id="w", lock=mw.InProcessLock()))


@pytest.mark.parametrize("budget", ["default", "none", "more merges than threads"])
def test_small_merges_run_side_by_side_large_ones_one_per_core(tmp_path, monkeypatch, budget):
    """Six small rewrites run at once (two cores would otherwise leave one idle while the last
    runs alone); with no memory to share, or more merges than the pool has threads (an
    insert's many new files), no more run at once than there are cores."""
    import importlib
    import threading
    import time

    executor = importlib.import_module("multiwriter.write.executor")
    path = str(tmp_path / "t")
    _six_day_table(path)
    if budget == "none":
        monkeypatch.setattr(executor, "SHARED_MERGE_BYTES", 0)
    if budget == "more merges than threads":
        monkeypatch.setattr(executor, "MERGE_POOL_THREADS", 5)
    merge_one, mu, active, most = executor._merge_one, threading.Lock(), [0], [0]

    def counted(*a, **kw):
        with mu:
            active[0] += 1
            most[0] = max(most[0], active[0])
        try:
            time.sleep(0.1)
            return merge_one(*a, **kw)
        finally:
            with mu:
                active[0] -= 1

    monkeypatch.setattr(executor, "_merge_one", counted)
    res = _update_every_day(path)
    cores = min(6, os.cpu_count() or 1)
    assert res.num_updates == 120 and res.files_written == 6
    assert most[0] == (min(6, executor.MERGE_POOL_THREADS) if budget == "default" else cores)
    got = hudi_read(path)
    assert got.num_rows == 600 and sorted(got.column("ts").to_pylist()).count(2) == 120


def test_after_a_merge_fails_no_other_starts_and_its_error_is_raised(tmp_path, monkeypatch):
    import importlib
    import threading
    import time

    executor = importlib.import_module("multiwriter.write.executor")
    path = str(tmp_path / "t")
    _six_day_table(path)
    monkeypatch.setattr(executor, "SHARED_MERGE_BYTES", 0)  # one merge per core
    merge_one, mu, started = executor._merge_one, threading.Lock(), []

    def failing(storage, ctx, plan, task, *a, **kw):
        with mu:
            started.append(task.task_index)
            first = len(started) == 1
        if first:
            raise OSError("disk gone")
        time.sleep(0.2)
        return merge_one(storage, ctx, plan, task, *a, **kw)

    monkeypatch.setattr(executor, "_merge_one", failing)
    with pytest.raises(OSError, match="disk gone"):
        _update_every_day(path)
    assert len(started) == min(6, os.cpu_count() or 1)
    got = hudi_read(path)
    assert got.num_rows == 600 and set(got.column("ts").to_pylist()) == {1}
