"""The record index Hudi wrote is kept by our actions, and one we start is kept the same way.

Oracles: the table's rows (each key's partition and file group, from the rows' own meta
columns as our reader and hudi-rs read them), Hudi's key-to-group hash, and the format's
decoder (:mod:`multiwriter.format.record_index`, checked against Hudi's files).
"""
from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest

import multiwriter as mw
from multiwriter.format import record_index as ri
from multiwriter.table import metadata_files as mf
from tests.oracle import hudi_read, rows, unzip_fixture
from tests.table.test_metadata_table import _compact_and_cluster, _roll_back_the_failed_write, _write_that_dies

TABLES = [("cow", "v9_txns_simple_meta"), ("mor", "v9_txns_simple_meta"), ("mor", "v8_trips_8i3u1d")]


def _model(path: str) -> dict[str, tuple[str, str]]:
    """Each live key's (partition, file id), from the rows as hudi-rs reads them (which agree
    with ours: :func:`_agreed`)."""
    t = hudi_read(path)
    if not t.num_rows:
        return {}
    names = t.column("_hoodie_file_name").to_pylist()
    out = {}
    for k, p, n in zip(t.column("_hoodie_record_key").to_pylist(), t.column("_hoodie_partition_path").to_pylist(),
                       names, strict=True):
        # a base file's name starts with its file id; a log row names its file id (or log file)
        out[k] = (p, n.lstrip(".").split("_")[0])
    return out


def _check_index(path: str) -> int:
    """The record index names exactly the live keys, each at its row's partition and file
    group; returns how many keys."""
    t = mw.Table.open(path)
    assert "record_index" in t.config.raw["hoodie.table.metadata.partitions"].split(",")
    got = mf.record_index_of(t.storage, t.config)
    assert got is not None
    model = _model(path)
    mine = {k: (loc.partition, loc.file_id) for k, loc in got.items()}
    assert mine.keys() == model.keys(), sorted(mine.keys() ^ model.keys())[:10]
    wrong = {k: (mine[k], model[k]) for k in model if mine[k] != model[k]}
    assert not wrong, list(wrong.items())[:5]
    return len(mine)


def _groups_hold_their_keys(path: str) -> int:
    """Every entry of every file sits in the file group its key hashes to; the group count."""
    d = Path(path, ".hoodie", "metadata", "record_index")
    names = os.listdir(d)
    groups = sorted({n.lstrip(".").split("_")[0] for n in names if ri.FILE_ID_PREFIX in n})
    for n in names:
        group = n.lstrip(".").split("_")[0]
        if n.endswith(".hfile"):
            keys = list(ri.decode_hfile((d / n).read_bytes(), source=n))
        elif ".log." in n:
            keys = [k for ch in ri.decode_log_file((d / n).read_bytes(), source=n) for k in [*ch.updates, *ch.deletes]]
        else:
            continue
        for k in keys:
            assert groups[ri.file_group_index(k, len(groups))] == group, (n, k)
    return len(groups)


def _index_logs(path: str, t: str) -> list[str]:
    return [n for n in os.listdir(Path(path, ".hoodie", "metadata", "record_index")) if f"_{t}.log." in n]


def _agreed(path: str) -> pa.Table:
    ours = mw.Table.open(path).read()
    cols = [c for c in ours.column_names if c != "_hoodie_commit_seqno"]
    assert rows(ours, cols) == rows(hudi_read(path), cols)
    return ours


@pytest.mark.needs_fixtures
@pytest.mark.parametrize(("kind", "name"), TABLES, ids=lambda x: x)
def test_hudis_record_index_continues_through_our_actions(kind, name, tmp_path):
    path = str(unzip_fixture(name, tmp_path, kind))
    assert _check_index(path) >= 3, "the fixture's own index matches its rows"
    groups = _groups_hold_their_keys(path)
    t = mw.Table.open(path)
    key, order = t.config.record_key[0], t.config.ordering_field
    before = t.read()
    data = before.select([c for c in before.column_names if not c.startswith("_hoodie")])
    first = data.slice(0, 2).to_pylist()
    lock = mw.InProcessLock()
    cfg = mw.WriterConfig(writer_id="w", lock=lock, heartbeat_interval_s=1.0, heartbeat_tolerable_misses=0)
    changed = [{**r, order: r[order] + 1000} for r in first]
    new = [{**first[0], key: f"NEW-{i}", order: first[0][order] + i} for i in range(3)]
    w = mw.write(pa.Table.from_pylist(changed + new, schema=data.schema), path, cfg)
    assert _check_index(path) == before.num_rows + 3
    assert len(_index_logs(path, w.instant.requested_time)) >= 1, "the new keys went to the index"
    mw.write(pa.Table.from_pylist(new[:1], schema=data.schema), path,
             mw.WriterConfig(writer_id="w", lock=lock, operation="delete"))
    assert _check_index(path) == before.num_rows + 2

    # a writer that dies after its deltacommit: the companion job rolls it back, and its
    # record-index logs go with it
    lost = _write_that_dies(path, pa.Table.from_pylist([{**first[1], key: "LOST"}], schema=data.schema), cfg)
    assert _index_logs(path, lost), "the dead write's keys are in the metadata table"
    assert _roll_back_the_failed_write(path, lock), "the failed write was not rolled back"
    assert not _index_logs(path, lost)
    assert "LOST" not in _agreed(path).column(key).to_pylist()
    _check_index(path)

    # table services: compaction (Merge-on-Read) keeps every key where it is; clustering moves
    # the keys of the groups it rewrites
    clusters = name.startswith("v9_txns")
    report = _compact_and_cluster(path, lock, kind)
    assert bool(report.clustering_instants) == clusters, report
    if kind == "mor":
        assert report.compaction_instants, report
    assert _agreed(path).num_rows == before.num_rows + 2
    assert _check_index(path) == before.num_rows + 2
    assert _groups_hold_their_keys(path) == groups, "the index keeps the number of groups Hudi gave it"


SCHEMA = pa.schema([("id", pa.string()), ("ts", pa.int64()), ("d", pa.string())])


def _batch(ids, ts: int) -> pa.Table:
    ids = list(ids)
    return pa.table({"id": [f"k{i:04d}" for i in ids], "ts": [ts] * len(ids), "d": [f"p{i % 3}" for i in ids]},
                    schema=SCHEMA)


@pytest.mark.parametrize("kind", ["cow", "mor"])
def test_a_table_created_with_the_record_index_keeps_it(kind, tmp_path):
    """Inserts, updates and deletes over more deltacommits than the metadata table keeps logs
    for (its compaction carries the index), an overwrite, and on Merge-on-Read the companion
    job's compaction."""
    path = str(tmp_path / "t")
    kw = {"table_type": "MERGE_ON_READ", "num_buckets": 2} if kind == "mor" else {}
    mw.Table.create(path, name="ri", schema=SCHEMA, record_key="id", partition_by=["d"], ordering_field="ts",
                    record_index=True, **kw)
    assert set(mw.Table.open(path).config.raw["hoodie.table.metadata.partitions"].split(",")) == \
        {"files", "record_index"}
    lock = mw.InProcessLock()
    cfg = mw.WriterConfig(writer_id="w", lock=lock)
    for i in range(mf.MAX_DELTA_COMMITS + 2):
        mw.write(_batch(range(i * 5, i * 5 + 8), ts=i), path, cfg)
    mw.write(_batch([3, 7, 9999], ts=99), path, mw.WriterConfig(writer_id="w", lock=lock, operation="delete"))
    live = set(range(0, (mf.MAX_DELTA_COMMITS + 1) * 5 + 8)) - {3, 7}
    assert _check_index(path) == len(live)
    assert any(n.endswith(".hfile") for n in os.listdir(Path(path, ".hoodie", "metadata", "record_index"))), \
        "compacted with the files partition"
    if kind == "mor":
        with mw.Cleaner(path, lock=lock, clustering=None, compaction=mw.CompactionConfig(delta_commits=1)) as c:
            assert c.run_once().compaction_instants
        assert _check_index(path) == len(live)
    # an overwrite of the table: the old keys leave the index, the new ones come in
    mw.write(_batch([1, 1000, 1003], ts=200), path,
             mw.WriterConfig(writer_id="w", lock=lock, operation="insert_overwrite_table"))
    live = {1, 1000, 1003}
    assert _check_index(path) == len(live)
    assert _groups_hold_their_keys(path) == ri.MIN_FILE_GROUPS
    assert sorted(_agreed(path).column("id").to_pylist()) == sorted(f"k{i:04d}" for i in live)


def test_the_record_index_started_on_a_table_with_commits(tmp_path):
    path = str(tmp_path / "t")
    mw.Table.create(path, name="late", schema=SCHEMA, record_key="id", partition_by=["d"], ordering_field="ts",
                    table_type="MERGE_ON_READ", num_buckets=2)
    lock = mw.InProcessLock()
    cfg = mw.WriterConfig(writer_id="w", lock=lock)
    for i in range(3):
        mw.write(_batch(range(i * 4, i * 4 + 6), ts=i), path, cfg)
    mw.write(_batch([2, 5], ts=9), path, mw.WriterConfig(writer_id="w", lock=lock, operation="delete"))
    t = mw.Table.open(path)
    assert t.enable_metadata(lock, record_index=True) is True
    assert t.enable_metadata(lock, record_index=True) is False
    assert _check_index(path) == 14 - 2
    mw.write(_batch(range(20, 26), ts=5), path, cfg)
    assert _check_index(path) == 12 + 6
    _agreed(path)


def test_the_record_index_needs_the_metadata_table(tmp_path):
    with pytest.raises(mw.errors.ConfigError, match="record_index=True with metadata=False"):
        mw.Table.create(str(tmp_path / "t"), name="x", schema=SCHEMA, record_key="id", metadata=False,
                        record_index=True)


@pytest.mark.needs_fixtures
def test_a_partitioned_record_index_is_dropped(tmp_path):
    """Hudi 1.1's partitioned record index (a key per partition) is not the global one we keep:
    our first commit drops it, partition and definition, as any index we do not maintain."""
    import json

    path = unzip_fixture("v9_txns_simple_meta", tmp_path, "cow")
    defs_path = path / ".hoodie" / ".index_defs" / "index.json"
    defs = json.loads(defs_path.read_text())
    defs["indexDefinitions"]["record_index"]["indexOptions"]["isPartitioned"] = "true"
    defs_path.write_text(json.dumps(defs))
    t = mw.Table.open(str(path))
    data = t.read()
    data = data.select([c for c in data.column_names if not c.startswith("_hoodie")]).slice(0, 1)
    mw.write(data, str(path), mw.WriterConfig(writer_id="w", lock=mw.InProcessLock()))
    listed = mw.Table.open(str(path)).config.raw["hoodie.table.metadata.partitions"].split(",")
    assert "record_index" not in listed and "column_stats" in listed
    assert not (path / ".hoodie" / "metadata" / "record_index").exists()
    assert "record_index" not in json.loads(defs_path.read_text())["indexDefinitions"]
    _agreed(str(path))


def test_the_record_index_on_s3(s3_server):
    """On an object store too: the index names the live keys at their rows' groups, as hudi-rs
    reads the bucket."""
    from tests.test_object_storage import hudi_read_s3

    uri = s3_server() + "/t"
    mw.Table.create(uri, name="ri", schema=SCHEMA, record_key="id", partition_by=["d"], ordering_field="ts",
                    record_index=True)
    lock = mw.InProcessLock()
    mw.write(_batch(range(0, 12), ts=1), uri, mw.WriterConfig(writer_id="w", lock=lock))
    mw.write(_batch(range(6, 18), ts=2), uri, mw.WriterConfig(writer_id="w", lock=lock))
    mw.write(_batch([0, 1], ts=3), uri, mw.WriterConfig(writer_id="w", lock=lock, operation="delete"))
    rows_ = hudi_read_s3(uri, s3_server.endpoint).to_pylist()
    model = {r["_hoodie_record_key"]: (r["_hoodie_partition_path"], r["_hoodie_file_name"].split("_")[0])
             for r in rows_}
    t = mw.Table.open(uri)
    got = {k: (loc.partition, loc.file_id) for k, loc in mf.record_index_of(t.storage, t.config).items()}
    assert got == model and len(model) == len(rows_) == 16


def test_the_number_of_file_groups_is_hudis_setting(tmp_path):
    """``record_index_file_groups`` (``hoodie.metadata.record.index.min.filegroup.count``): the
    index's groups, which keys hash over for its whole life."""
    path = str(tmp_path / "t")
    mw.Table.create(path, name="ri", schema=SCHEMA, record_key="id", partition_by=["d"], ordering_field="ts",
                    record_index=True, record_index_file_groups=3)
    mw.write(_batch(range(40), ts=1), path, mw.WriterConfig(writer_id="w", lock=mw.InProcessLock()))
    assert _groups_hold_their_keys(path) == 3
    assert _check_index(path) == 40
    with pytest.raises(mw.errors.ConfigError, match="record_index_file_groups=0"):
        mw.Table.create(str(tmp_path / "u"), name="x", schema=SCHEMA, record_key="id", record_index=True,
                        record_index_file_groups=0)
    from multiwriter.config import table_settings_from_options

    opts = table_settings_from_options({"hoodie.metadata.record.index.enable": "true",
                                                  "hoodie.metadata.record.index.min.filegroup.count": "5"})
    assert opts["record_index"] is True and opts["record_index_file_groups"] == 5
