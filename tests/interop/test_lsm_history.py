"""Archived instants in Hudi's LSM layout (table version 8), checked with plain pyarrow and json
against the layout Hudi's LSMTimeline reads; tables archived as JSON batches are migrated."""
from __future__ import annotations

import json
import re

import pyarrow as pa
import pyarrow.parquet as pq

import multiwriter as mw
from multiwriter.cleaner import archive
from multiwriter.format import instant as inst
from tests.cleaner.conftest import cleaners, writer_config  # noqa: F401 (fixtures)
from tests.conftest import trips

#: HoodieLSMTimelineInstant's Avro fields as Parquet types: (name, type, nullable)
HUDI_FIELDS = [
    ("instantTime", pa.string(), True),
    ("completionTime", pa.string(), True),
    ("action", pa.string(), True),
    ("metadata", pa.binary(), True),
    ("plan", pa.binary(), True),
    ("version", pa.int32(), False),
]


def _commit_n(table_path: str, lock, n: int) -> None:
    cfg = writer_config(lock, "ingest")
    for k in range(n):
        mw.write(trips([k], date=f"2024-01-{k + 1:02d}", value=k), table_path, cfg)


def _history_files(table) -> dict[str, bytes]:
    hist = table.config.history_dir
    return {e.path.rsplit("/", 1)[-1]: table.storage.read_bytes(e.path)
            for e in table.storage.list_dir(hist, files_only=True)}


def test_archival_writes_hudis_lsm_layout(trips_table, table_path, zk_lock, cleaners):  # noqa: F811
    _commit_n(table_path, zk_lock(), 8)
    before = trips_table.timeline()
    active_meta = {i.requested_time: before.read_bytes(i) for i in before.completed_writes()}
    report = cleaners(table_path, zk_lock(), retain_commits=2, archive_keep_min=2, archive_keep_max=3).run_once()
    assert report.archived >= 5

    files = _history_files(trips_table)
    assert files["_version_"].decode() == "1"
    manifest = json.loads(files["manifest_1"])
    assert list(manifest) == ["files"] and len(manifest["files"]) == 1
    entry = manifest["files"][0]
    assert set(entry) == {"fileName", "fileLen"} and entry["fileLen"] == len(files[entry["fileName"]])
    m = re.fullmatch(r"(\d+)_(\d+)_(\d)\.parquet", entry["fileName"])
    assert m and m.group(3) == "0"
    assert not [n for n in files if n.endswith(".json")]

    t = pq.read_table(pa.BufferReader(files[entry["fileName"]]))
    assert [(f.name, f.type, f.nullable) for f in t.schema] == HUDI_FIELDS
    rows = t.to_pylist()
    assert rows[0]["instantTime"] == m.group(1) and rows[-1]["instantTime"] == m.group(2)
    active_now = {i.requested_time for i in trips_table.timeline().latest_states()}
    for r in rows:
        assert r["version"] == 1 and r["action"] == inst.COMMIT and r["completionTime"] > r["instantTime"]
        assert r["metadata"] == active_meta[r["instantTime"]]  # the completed file's bytes, verbatim
        assert r["instantTime"] not in active_now  # history first, then the active files went
    # callers of load_history see the same instants, with readable commit metadata
    hist = archive.load_history(trips_table)
    assert [a.requested_time for a in hist] == [r["instantTime"] for r in rows]
    assert all(a.commit_metadata() is not None for a in hist)
    assert trips_table.read().num_rows == 8


def test_json_batches_of_earlier_releases_are_migrated(trips_table, table_path, zk_lock, cleaners):  # noqa: F811
    _commit_n(table_path, zk_lock(), 10)
    cleaner = cleaners(table_path, zk_lock(), retain_commits=2, archive_keep_min=2, archive_keep_max=6)
    ctx = cleaner._context()
    tl = trips_table.timeline()
    archive.compact_metadata_table(tl)  # as archive() does when archival waits for it
    chosen, _ = archive.choose(tl, keep_min=6, keep_max=6, retain_commits=2)
    assert len(chosen) >= 3
    hist = trips_table.config.history_dir
    # the layout earlier releases wrote: one JSON batch, then the active files removed
    legacy = f"{hist}/{chosen[0].requested_time}_{chosen[-1].requested_time}{archive.SUFFIX}"
    trips_table.storage.put_if_absent(legacy, archive.encode_batch(ctx, tl, chosen))
    for i in chosen:
        for f in [x for x in tl.instants if x.requested_time == i.requested_time]:
            trips_table.storage.delete(tl.path_of(f))
    old_view = [(a.requested_time, a.action, a.completion_time) for a in archive.load_history(trips_table)]

    report = cleaner.run_once()
    files = _history_files(trips_table)
    assert not [n for n in files if n.endswith(archive.SUFFIX)], files.keys()
    listed = [f["fileName"] for f in json.loads(files[f"manifest_{files['_version_'].decode()}"])["files"]]
    rows = [r for n in listed for r in pq.read_table(pa.BufferReader(files[n])).to_pylist()]
    times = sorted(r["instantTime"] for r in rows)
    assert times[: len(chosen)] == [i.requested_time for i in chosen]
    assert len(times) == len(chosen) + report.archived
    assert [(a.requested_time, a.action, a.completion_time) for a in archive.load_history(trips_table)][
        : len(old_view)] == old_view
    assert trips_table.read().num_rows == 10


def test_compaction_merges_ten_layer_zero_files_and_cleans_what_hudi_does_not_keep(trips_table, table_path):
    lock = mw.InProcessLock()
    cfg = mw.WriterConfig(writer_id="w", lock=lock)
    hist = trips_table.config.history_dir
    hist_dir = trips_table.storage.abs(hist)
    archived: list[str] = []
    with mw.Cleaner(table_path, lock=lock, clustering=None) as cleaner:
        ctx = cleaner._context()
        mw.write(trips([0], value=0), table_path, cfg)
        for k in range(1, 14):  # 13 archival rounds, one instant each
            if k == 11:  # a layer-0 file a crashed archival left, listed by no manifest
                pq.write_table(pa.table({"instantTime": ["1"]}), f"{hist_dir}/00000000000000001_00000000000000001_0.parquet")
            before = {i.requested_time for i in trips_table.timeline().latest_states()}
            mw.write(trips([k], value=k), table_path, cfg)
            assert archive.archive(ctx, keep_min=1, keep_max=1, retain_commits=0).archived == 1
            archived += sorted(before - {i.requested_time for i in trips_table.timeline().latest_states()})
    assert len(archived) == 13

    files = _history_files(trips_table)
    version = int(files["_version_"].decode())
    # 13 appends + 1 compaction; Hudi keeps the 3 newest manifests once no compaction ran
    assert version == 14
    assert sorted(n for n in files if n.startswith("manifest_")) == [f"manifest_{v}" for v in (12, 13, 14)]
    listed = json.loads(files[f"manifest_{version}"])["files"]
    names = [f["fileName"] for f in listed]
    assert all(f["fileLen"] == len(files[f["fileName"]]) for f in listed)
    assert sorted(n for n in files if n.endswith(".parquet")) == sorted(names)  # inputs and the stray file gone
    layers = sorted(int(re.fullmatch(r"\d+_\d+_(\d+)\.parquet", n).group(1)) for n in names)
    assert layers == [0, 0, 0, 1]

    (merged,) = [n for n in names if n.endswith("_1.parquet")]
    t = pq.read_table(pa.BufferReader(files[merged]))
    assert [(f.name, f.type, f.nullable) for f in t.schema] == HUDI_FIELDS
    times = t.column("instantTime").to_pylist()
    assert times == archived[:10]  # the ten oldest layer-0 files, in order
    assert merged == f"{times[0]}_{times[-1]}_1.parquet"
    assert set(t.column("version").to_pylist()) == {1}

    # every archived instant is in exactly one live file, and reads see each once
    every = [r for n in names for r in pq.read_table(pa.BufferReader(files[n])).column("instantTime").to_pylist()]
    assert sorted(every) == archived
    assert [a.requested_time for a in archive.load_history(trips_table)] == archived
    assert trips_table.read().num_rows == 14
    assert trips_table.read(as_of=archived[3]).num_rows == 4
