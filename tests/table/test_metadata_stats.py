"""The column_stats and partition_stats partitions Hudi wrote are kept by our actions.

Oracles: each live base file's rows (min, max, nulls and values of every indexed column,
computed by pyarrow from the rows, not from the footer), hudi-rs's read of the table, and the
format's own decoder (:mod:`multiwriter.format.column_stats`, checked against Hudi's files).
"""
from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import multiwriter as mw
from multiwriter.format import column_stats as cs
from multiwriter.table import metadata_files as mf
from tests.oracle import hudi_read, rows, unzip_fixture
from tests.table.test_metadata_table import _compact_and_cluster, _roll_back_the_failed_write, _write_that_dies

TABLES = [("cow", "v9_txns_simple_meta"), ("mor", "v9_txns_simple_meta"), ("mor", "v8_trips_8i3u1d")]
KEPT = {"files", "column_stats", "partition_stats"}


def _value(v):
    """A stats or row value in one comparable form (instants as UTC-aware datetimes)."""
    if isinstance(v, dt.datetime) and v.tzinfo is None:
        return v.replace(tzinfo=dt.timezone.utc)
    return v


def _model(path: str, rel: str, columns: list[str]) -> dict[str, tuple]:
    """Per column of a base file: (min, max, null count, value count), from its rows."""
    t = pq.read_table(os.path.join(path, rel))
    out = {}
    for c in columns:
        if c not in t.column_names or not (pa.types.is_primitive(t.schema.field(c).type)
                                           or pa.types.is_string(t.schema.field(c).type)):
            continue
        col = t.column(c)
        mm = pc.min_max(col)
        out[c] = (_value(mm["min"].as_py()), _value(mm["max"].as_py()), col.null_count, len(col))
    return out


def _check_stats(path: str) -> int:
    """Every live base file's column stats equal the model of its rows, and each partition's
    stats cover its live files; returns how many files were checked."""
    t = mw.Table.open(path)
    listed = set(t.config.raw["hoodie.table.metadata.partitions"].split(","))
    assert KEPT <= listed, "the data-skipping partitions are kept"
    stats = mf.column_stats_of(t.storage, t.config)
    parts = mf.partition_stats_of(t.storage, t.config)
    assert stats is not None and parts is not None
    checked = 0
    for f in t.snapshot().files():
        if not f.has_base:
            continue
        name = f.path.rsplit("/", 1)[-1]
        got = stats.get((f.partition, name))
        assert got is not None, f"{f.path}: no column stats"
        model = _model(path, f.path, sorted(got))
        assert model, f.path
        for c, (lo, hi, nulls, values) in model.items():
            s = got[c]
            assert (_value(s.min), _value(s.max), s.null_count, s.value_count) == (lo, hi, nulls, values), (f.path, c)
            p = parts[f.partition][c]
            if lo is not None:
                assert cs._order_key(p.min) <= cs._order_key(s.min) and cs._order_key(p.max) >= cs._order_key(s.max)
        checked += 1
    return checked


def _groups_hold_their_keys(path: str) -> None:
    """Each record sits in the file group its key maps to (Hudi's readers look only there)."""
    for partition in ("column_stats", "partition_stats"):
        d = Path(path, ".hoodie", "metadata", partition)
        names = os.listdir(d)
        groups = sorted({n.lstrip(".").split("_")[0] for n in names if cs.FILE_ID_PREFIX[partition] in n})
        for n in names:
            if n.endswith(".hfile"):
                recs = cs.decode_hfile((d / n).read_bytes(), source=n)
            elif ".log." in n:
                recs = [r for _, b in cs.decode_log_file((d / n).read_bytes(), source=n) for r in b]
            else:
                continue
            group = n.lstrip(".").split("_")[0]
            for r in recs:
                assert groups[cs.file_group_index(r.key, len(groups))] == group, (n, r.key)


def _stats_logs(path: str, t: str) -> list[str]:
    return [n for p in ("column_stats", "partition_stats")
            for n in os.listdir(Path(path, ".hoodie", "metadata", p)) if f"_{t}.log." in n]


def _agreed(path: str) -> pa.Table:
    ours = mw.Table.open(path).read()
    cols = [c for c in ours.column_names if c != "_hoodie_commit_seqno"]
    assert rows(ours, cols) == rows(hudi_read(path), cols)
    return ours


@pytest.mark.needs_fixtures
@pytest.mark.parametrize(("kind", "name"), TABLES, ids=lambda x: x)
def test_hudis_stats_continue_through_our_actions(kind, name, tmp_path):
    path = str(unzip_fixture(name, tmp_path, kind))
    assert _check_stats(path) >= 3, "the fixture's own stats match its rows"
    t = mw.Table.open(path)
    key, order = t.config.record_key[0], t.config.ordering_field
    before = t.read()
    cols = [c for c in before.column_names if not c.startswith("_hoodie")]
    data = before.select(cols)
    first = data.slice(0, 2).to_pylist()
    lock = mw.InProcessLock()
    cfg = mw.WriterConfig(writer_id="w", lock=lock, heartbeat_interval_s=1.0, heartbeat_tolerable_misses=0)
    changed = [{**r, order: r[order] + 1000} for r in first]
    new = [{**first[0], key: f"NEW-{i}", order: first[0][order] + i} for i in range(3)]
    mw.write(pa.Table.from_pylist(changed + new, schema=data.schema), path, cfg)
    assert _check_stats(path) >= 3
    mw.write(pa.Table.from_pylist(new[:1], schema=data.schema), path,
             mw.WriterConfig(writer_id="w", lock=lock, operation="delete"))
    _check_stats(path)

    # a writer that dies after its deltacommit (nothing of its own abort runs): the companion
    # job rolls it back, and its stats logs go with it
    lost = _write_that_dies(path, pa.Table.from_pylist([{**first[1], key: "LOST"}], schema=data.schema), cfg)
    assert _stats_logs(path, lost), "the dead write's stats are in the metadata table"
    assert _roll_back_the_failed_write(path, lock), "the failed write was not rolled back"
    assert not _stats_logs(path, lost)
    assert "LOST" not in _agreed(path).column(key).to_pylist()
    _check_stats(path)

    # table services: compaction (Merge-on-Read), clustering (the txns tables have partitions of
    # two small groups without logs)
    clusters = name.startswith("v9_txns")
    report = _compact_and_cluster(path, lock, kind)
    assert bool(report.clustering_instants) == clusters, report
    if kind == "mor":
        assert report.compaction_instants, report
    ours = _agreed(path)
    assert ours.num_rows == before.num_rows + 2
    assert _check_stats(path) >= 3
    _groups_hold_their_keys(path)


@pytest.mark.needs_fixtures
def test_a_cleaned_file_leaves_the_index(tmp_path):
    """Files the cleaner deletes get tombstones: the index names only files on storage."""
    path = str(unzip_fixture("v9_txns_simple_meta", tmp_path, "cow"))
    t = mw.Table.open(path)
    data = t.read().select([c for c in t.read().column_names if not c.startswith("_hoodie")])
    lock = mw.InProcessLock()
    cfg = mw.WriterConfig(writer_id="w", lock=lock)
    for i in range(4):  # rewrite the same file groups until old slices fall out of retention
        upd = [{**r, "txn_ts": r["txn_ts"] + 1000 * (i + 1)} for r in data.to_pylist()]
        mw.write(pa.Table.from_pylist(upd, schema=data.schema), path, cfg)
    with mw.Cleaner(path, lock=lock, clustering=None, retain_commits=1) as cleaner:
        report = cleaner.run_once()
    assert report.old_versions_deleted, report
    t = mw.Table.open(path)
    stats = mf.column_stats_of(t.storage, t.config)
    on_disk = {(p, n) for p in {k[0] for k in stats} for n in os.listdir(os.path.join(path, p))}
    assert set(stats) <= on_disk, "no entry for a deleted file"
    _check_stats(path)


SCHEMA = pa.schema([("id", pa.string()), ("ts", pa.int64()), ("v", pa.float64()), ("d", pa.string()),
                    ("n", pa.int32())])


def _batch(ids, ts: int) -> pa.Table:
    ids = list(ids)
    return pa.table({"id": [f"k{i:04d}" for i in ids], "ts": [ts] * len(ids), "v": [i * 0.5 + ts for i in ids],
                     "d": [f"p{i % 3}" for i in ids], "n": [None if i % 4 == 0 else i for i in ids]}, schema=SCHEMA)


@pytest.mark.parametrize("kind", ["cow", "mor"])
def test_a_table_created_with_column_stats_keeps_them(kind, tmp_path):
    """Every write, the files partition's compactions (more deltacommits than it keeps logs
    for) and, on Merge-on-Read, the companion job's compaction keep the stats equal to the rows."""
    path = str(tmp_path / "t")
    kw = {"table_type": "MERGE_ON_READ", "num_buckets": 2} if kind == "mor" else {}
    mw.Table.create(path, name="stats", schema=SCHEMA, record_key="id", partition_by=["d"], ordering_field="ts",
                    column_stats=True, **kw)
    t = mw.Table.open(path)
    assert set(t.config.raw["hoodie.table.metadata.partitions"].split(",")) == KEPT
    lock = mw.InProcessLock()
    cfg = mw.WriterConfig(writer_id="w", lock=lock)
    for i in range(mf.MAX_DELTA_COMMITS + 2):
        mw.write(_batch(range(i * 5, i * 5 + 8), ts=i), path, cfg)
    mw.write(_batch([3, 7], ts=99), path, mw.WriterConfig(writer_id="w", lock=lock, operation="delete"))
    if kind == "mor":
        with mw.Cleaner(path, lock=lock, clustering=None, compaction=mw.CompactionConfig(delta_commits=1)) as c:
            assert c.run_once().compaction_instants
    assert _check_stats(path) >= 3
    for partition in ("column_stats", "partition_stats"):
        names = os.listdir(Path(path, ".hoodie", "metadata", partition))
        assert any(n.endswith(".hfile") for n in names), f"{partition}: compacted with the files partition"
    _groups_hold_their_keys(path)
    ours = _agreed(path)
    assert ours.num_rows == len(set(range(0, (mf.MAX_DELTA_COMMITS + 1) * 5 + 8)) - {3, 7})


def test_column_stats_started_on_a_table_with_commits(tmp_path):
    path = str(tmp_path / "t")
    mw.Table.create(path, name="late", schema=SCHEMA, record_key="id", partition_by=["d"], ordering_field="ts",
                    metadata=False)
    lock = mw.InProcessLock()
    cfg = mw.WriterConfig(writer_id="w", lock=lock)
    for i in range(3):
        mw.write(_batch(range(i * 4, i * 4 + 6), ts=i), path, cfg)
    t = mw.Table.open(path)
    assert t.enable_metadata(lock, column_stats=True) is True
    assert t.enable_metadata(lock, column_stats=True) is False
    assert _check_stats(path) >= 3
    mw.write(_batch(range(20, 26), ts=5), path, cfg)
    assert _check_stats(path) >= 3
    _agreed(path)


def test_column_stats_need_the_metadata_table(tmp_path):
    with pytest.raises(mw.errors.ConfigError, match="column_stats=True with metadata=False"):
        mw.Table.create(str(tmp_path / "t"), name="x", schema=SCHEMA, record_key="id", metadata=False,
                        column_stats=True)
    assert not os.path.exists(tmp_path / "t" / ".hoodie")


@pytest.mark.parametrize("kind", ["cow", "mor"])
def test_filtered_reads_skip_by_the_kept_stats_and_lose_no_row(kind, tmp_path):
    """Reads skip the slices the metadata table's stats rule out, and return what a full read
    filtered by pyarrow returns; a value too long for Parquet's statistics keeps its file."""
    from multiwriter.table import skipping

    path = str(tmp_path / "t")
    kw = {"table_type": "MERGE_ON_READ", "num_buckets": 2} if kind == "mor" else {}
    schema = pa.schema([("id", pa.string()), ("ts", pa.int64()), ("d", pa.string()), ("s", pa.string())])
    mw.Table.create(path, name="skip", schema=schema, record_key="id", partition_by=["d"], ordering_field="ts",
                    column_stats=True, **kw)
    cfg = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock(), operation="insert")
    for b in range(6):
        ids = range(b * 10, b * 10 + 10)
        mw.write(pa.table({"id": [f"k{i:03d}" for i in ids], "ts": [b] * 10, "d": [f"p{i % 2}" for i in ids],
                           "s": ["x" * 5000 if i == 33 else f"s{i}" for i in ids]}, schema=schema), path, cfg)
    if kind == "mor":
        with mw.Cleaner(path, lock=cfg.lock, clustering=None, compaction=mw.CompactionConfig(delta_commits=1)) as c:
            c.run_once()
    t = mw.Table.open(path)
    full = t.read()
    for filters in ([("ts", "=", 2)], [("ts", ">=", 4)], [("s", "=", "x" * 5000)], [("s", "=", "s41")],
                    [[("ts", "=", 0)], [("id", "=", "k055")]]):
        got = t.read(filters=filters)
        want = full.filter(pq.filters_to_expression(filters))
        assert sorted(got.column("id").to_pylist()) == sorted(want.column("id").to_pylist()), filters
        tl = t.timeline()
        snap = t.snapshot(timeline=tl)
        pruned = t.prune(snap.files(), skipping.from_dnf(filters), t.read_schema(tl, snap), timeline=tl, latest=True)
        if filters == [("ts", "=", 2)] and kind == "cow":
            assert pruned.slices_kept == 2 and pruned.slices_skipped >= 8, pruned
        if filters == [("s", "=", "x" * 5000)]:
            assert pruned.slices_kept >= 1
