"""Bootstrap in Hudi's METADATA_ONLY mode (``SparkBootstrapCommitActionExecutor.metadataBootstrap``):
the source files stay where they are, a skeleton base file of Hudi's meta columns stands for each
at ``00000000000001``, and the bootstrap index maps each file group to its source file. Readers
stitch the two; writers, compaction and clustering rewrite a bootstrapped group into normal
files; the companion job's rollback and retention never touch a source file (sha256 of every
source file compared throughout). Mixed with FULL_RECORD by Hudi's regex selector."""
from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import multiwriter as mw
from multiwriter import faults
from multiwriter.errors import (BootstrapModeError, BootstrapPendingError, BootstrapSourceError, InjectedFault,
                                TableFormatError)
from multiwriter.format import bootstrap_index as bi
from multiwriter.format.instant import FULL_BOOTSTRAP_TIME, METADATA_BOOTSTRAP_TIME
from multiwriter.format.layout import parse_data_file
from multiwriter.format.schema import META_COLUMNS
from multiwriter.table import bootstrap_index_files
from tests.oracle import hudi_read

DATES = ("2024-01-01", "2024-01-02", "2024-01-03")
FILES_PER_PARTITION = 3
REGEX = "hoodie.bootstrap.mode.selector"
REGEX_SELECTOR = "org.apache.hudi.client.bootstrap.selector.BootstrapRegexModeSelector"


def make_source(root: Path, *, hive: bool | None, string_keys: bool) -> dict:
    """Source files of several sizes per partition (``hive=None``: not partitioned); returns the
    model: key -> (value, date, ts)."""
    model = {}
    n = 0
    folders = [(root / (f"date={d}" if hive else d), d) for d in DATES] if hive is not None else [(root, DATES[0])]
    for folder, d in folders:
        folder.mkdir(parents=True, exist_ok=True)
        for f in range(FILES_PER_PARTITION):
            size = 4 + f  # files of different row counts: a skeleton must line up with its own source
            ids = list(range(n, n + size))[::-1]  # not sorted: the skeleton keeps the source's row order
            n += size
            keys = [f"k{i:03d}" for i in ids] if string_keys else ids
            cols = {"id": keys, "ts": [1] * size, "value": [float(i) for i in ids],
                    "name": [f"row {i}" for i in ids]}
            if hive is None:
                cols["date"] = [d] * size
            pq.write_table(pa.table(cols), folder / f"part-{f}.parquet", row_group_size=3)
            model.update({k: (float(i), d, 1) for k, i in zip(keys, ids, strict=True)})
    (root / "_SUCCESS").write_text("")
    return model


def hashes(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def table_rows(t: pa.Table) -> list[tuple]:
    return sorted(((str(k), v, d, ts) for k, v, d, ts in zip(*(t.column(c).to_pylist() for c in
                                                                 ("id", "value", "date", "ts")), strict=True)), key=repr)


def model_rows(model: dict) -> list[tuple]:
    return sorted(((str(k), v, d, ts) for k, (v, d, ts) in model.items()), key=repr)


def check(path: str, model: dict) -> None:
    t = mw.Table.open(path).read()
    assert table_rows(t) == model_rows(model)
    assert t.schema.names[:5] == list(META_COLUMNS)


def skeletons(path: str) -> list[Path]:
    return sorted(p for p in Path(path).rglob("*.parquet") if ".hoodie" not in p.parts
                  and (parsed := parse_data_file(p.name)) and parsed.instant_time == METADATA_BOOTSTRAP_TIME)


def boot(src: Path, path: str, lock, **kw):
    args = dict(name="t", record_key="id", partition_by=["date"], ordering_field="ts", mode="METADATA_ONLY",
                lock=lock) | kw
    return mw.bootstrap(str(src), path, **args)


def write(path: str, lock, writer: str, rows: list[tuple], operation: str = "upsert") -> None:
    keys, values, dates = (list(c) for c in zip(*rows, strict=True))
    batch = pa.table({"id": keys, "ts": [2] * len(keys), "value": values, "name": ["new"] * len(keys), "date": dates})
    mw.write(batch, path, mw.WriterConfig(writer_id=writer, lock=lock, operation=operation))


@pytest.mark.parametrize("hive,string_keys,table_type,version", [
    (True, False, "COPY_ON_WRITE", 8),
    (False, True, "MERGE_ON_READ", 9),
    (None, False, "COPY_ON_WRITE", 9),
])
def test_metadata_only_then_two_writers_and_the_companion_job(tmp_path, hive, string_keys, table_type, version):
    src = tmp_path / "src"
    model = make_source(src, hive=hive, string_keys=string_keys)
    before = hashes(src)
    path = str(tmp_path / "t")
    lock = mw.InProcessLock()
    partition_by = ["date"] if hive is not None else []
    r = boot(src, path, lock, table_type=table_type, partition_by=partition_by, table_version=version)
    assert r.instant.requested_time == METADATA_BOOTSTRAP_TIME and r.instants == (METADATA_BOOTSTRAP_TIME,)
    assert r.num_inserts == len(model) and r.files_written == len(list(src.rglob("*.parquet")))
    table = mw.Table.open(path)
    assert table.config.raw["hoodie.bootstrap.base.path"] == str(src)
    assert table.config.raw["hoodie.bootstrap.index.type"] == "HFILE" and table.config.version == version
    assert ("hoodie.bootstrap.index.class" in table.config.raw) is (version == 8)
    tl = table.timeline()
    (done,) = tl.completed_writes()
    assert done.action == ("deltacommit" if table_type == "MERGE_ON_READ" else "commit")
    meta = tl.commit_metadata(done)
    assert meta.operation_type == "BOOTSTRAP"
    assert sorted(s.path for s in meta.all_stats()) == sorted(str(p.relative_to(path)) for p in skeletons(path))
    check_skeletons_line_up(src, path)
    check(path, model)
    assert hashes(src) == before
    # the reader's other ways in: some columns, a filter, the incremental read from the start
    t = table.read(columns=["id", "name"], filters=[("value", ">=", 10.0)])
    assert sorted(map(str, t.column("id").to_pylist())) == sorted(str(k) for k, (v, _, _) in model.items() if v >= 10)
    assert table_rows(table.read_incremental()) == model_rows(model)
    # two writers at once: updates and deletes of bootstrapped keys, new keys
    keys = sorted(model, key=str)
    new = [f"n{i}" for i in range(3)] if string_keys else [1000 + i for i in range(3)]
    a = [(k, 7.0, model[k][1]) for k in keys[:4]]
    b = [(k, 8.0, model[k][1]) for k in keys[5:8]] + [(k, 8.0, DATES[0]) for k in new]
    gone = [(k, 0.0, model[k][1]) for k in keys[9:11]]
    threads = [threading.Thread(target=write, args=(path, lock, "a", a)),
               threading.Thread(target=write, args=(path, lock, "b", b))]
    [t.start() for t in threads], [t.join() for t in threads]
    write(path, lock, "a", gone, operation="delete")
    model.update({k: (v, d, 2) for k, v, d in a + b})
    for k, _, _ in gone:
        del model[k]
    check(path, model)
    with mw.Cleaner(path, lock=lock, heartbeat_interval_s=1.0, retain_commits=1, archive_keep_min=2, archive_keep_max=3,
                    compaction=mw.CompactionConfig(delta_commits=1) if table_type == "MERGE_ON_READ" else None,
                    clustering=mw.ClusteringConfig(min_file_groups=2)) as c:
        report = c.run_once()
        check(path, model)
        write(path, lock, "a", [(k, 9.0, model[k][1]) for k in keys[12:14]])
        model.update({k: (9.0, model[k][1], 2) for k in keys[12:14]})
        report2 = c.run_once()
    if table_type == "MERGE_ON_READ":
        assert report.compaction_instants, "the companion job compacted the log files over skeleton bases"
    assert report.clustering_instants or report2.clustering_instants, "skeleton groups were clustered into a normal one"
    assert report.old_versions_deleted or report2.old_versions_deleted, "old slices were cleaned"
    check(path, model)
    if table_type == "COPY_ON_WRITE":  # every group was clustered or rewritten: no skeleton is read any more
        latest = [f.name for f in mw.Table.open(path).snapshot().files()]
        assert all(parse_data_file(n).instant_time != METADATA_BOOTSTRAP_TIME for n in latest)
        assert table_rows(hudi_read(path)) == model_rows(model), "hudi-rs reads the rewritten table whole"
    assert hashes(src) == before, "the source files are never changed nor deleted"


def check_skeletons_line_up(src: Path, path: str) -> None:
    """Each skeleton holds only the meta columns, one row per source row, in the source's order,
    and the index names that source file."""
    mappings = {(m.partition_path, m.file_id): m for m in bootstrap_index_files.read_mappings(mw.Table.open(path).storage)}
    assert len(mappings) == len(skeletons(path))
    for p in skeletons(path):
        sk = pq.read_table(p)
        assert sk.schema.names == list(META_COLUMNS)
        partition = str(p.parent.relative_to(path)) if p.parent != Path(path) else ""
        m = mappings[(partition, parse_data_file(p.name).file_id)]
        assert m.status.uri.startswith("file:" + str(src))
        source_file = Path(m.status.uri.removeprefix("file:"))
        assert m.status.length == source_file.stat().st_size
        assert [str(k) for k in pq.read_table(source_file).column("id").to_pylist()] == sk.column(META_COLUMNS[2]).to_pylist()
        assert set(sk.column(META_COLUMNS[0]).to_pylist()) == {METADATA_BOOTSTRAP_TIME}
        assert set(sk.column(META_COLUMNS[3]).to_pylist()) == {partition}
        assert set(sk.column(META_COLUMNS[4]).to_pylist()) == {p.name}
        footer = pq.read_metadata(p).metadata
        assert b"org.apache.hudi.bloomfilter" in footer and b"hoodie_min_record_key" in footer


def test_regex_selector_mixes_metadata_only_and_full_record(tmp_path):
    src = tmp_path / "src"
    model = make_source(src, hive=True, string_keys=False)
    before = hashes(src)
    path = str(tmp_path / "t")
    lock = mw.InProcessLock()
    opts = {REGEX: REGEX_SELECTOR, "hoodie.bootstrap.mode.selector.regex": "date=2024-01-0[12]",
            "hoodie.bootstrap.mode.selector.regex.mode": "METADATA_ONLY"}
    r = boot(src, path, lock, mode="FULL_RECORD", options=opts)
    assert r.instants == (METADATA_BOOTSTRAP_TIME, FULL_BOOTSTRAP_TIME)
    assert r.num_inserts == len(model)
    tl = mw.Table.open(path).timeline()
    by_time = {i.requested_time: sorted(tl.commit_metadata(i).partition_to_write_stats) for i in tl.completed_writes()}
    assert by_time == {METADATA_BOOTSTRAP_TIME: ["date=2024-01-01", "date=2024-01-02"],
                       FULL_BOOTSTRAP_TIME: ["date=2024-01-03"]}
    assert {p.parent.name for p in skeletons(path)} == {"date=2024-01-01", "date=2024-01-02"}
    check(path, model)
    write(path, lock, "w", [(k, 5.0, d) for k, (_, d, _) in list(model.items())[::7]])
    model.update({k: (5.0, d, 2) for k, (_, d, _) in list(model.items())[::7]})
    check(path, model)
    assert hashes(src) == before


def test_the_bootstrap_index_has_hudis_layout(tmp_path):
    """Read back with fastavro and the HFile reader alone (not our index decoder): the file
    names, keys, Avro records and their field names and types of Hudi's avsc files
    (``HoodieBootstrapPartitionMetadata``, ``HoodieBootstrapFilePartitionInfo``, ``HoodieFileStatus``,
    ``HoodiePath``, ``HoodieBootstrapIndexInfo``). No Hudi-written bootstrap index is among the
    shared fixtures (their ``.aux/.bootstrap`` folders are empty), so none is compared."""
    import io

    import fastavro

    from multiwriter.format import hfile

    src = tmp_path / "src"
    make_source(src, hive=True, string_keys=True)
    path = tmp_path / "t"
    boot(src, str(path), mw.InProcessLock())
    name = "00000000-0000-0000-0000-000000000000-0_00000000000001.hfile"
    parts = hfile.read((path / ".hoodie/.aux/.bootstrap/.partitions" / name).read_bytes())
    files = hfile.read((path / ".hoodie/.aux/.bootstrap/.fileids" / name).read_bytes())

    def record(data: bytes) -> tuple[dict, dict]:
        r = fastavro.reader(io.BytesIO(data))
        assert r.codec == "null"
        (rec,) = list(r)
        return rec, r.writer_schema

    def fields(schema: dict) -> list[tuple[str, object]]:
        return [(f["name"], f["type"]) for f in schema["fields"]]

    status_fields = ["version", "path", "length", "isDir", "blockReplication", "blockSize", "modificationTime",
                     "accessTime", "permission", "owner", "group", "symlink"]
    assert [k.decode() for k, _ in parts.cells] == [f"part=date={d}" for d in DATES]
    for key, value in parts.cells:
        rec, schema = record(value)
        assert schema["name"] == "org.apache.hudi.avro.model.HoodieBootstrapPartitionMetadata"
        assert [n for n, _ in fields(schema)] == ["version", "bootstrapPartitionPath", "partitionPath",
                                                   "fileIdToBootstrapFile"]
        assert fields(schema)[0][1] == ["int", "null"]
        status_schema = fields(schema)[3][1][1]["values"]
        assert status_schema["name"] == "org.apache.hudi.avro.model.HoodieFileStatus"
        assert [n for n, _ in fields(status_schema)] == status_fields
        assert dict(fields(status_schema))["length"] == ["null", "long"]
        assert dict(fields(status_schema))["blockReplication"] == ["null", "int"]
        assert rec["partitionPath"] == rec["bootstrapPartitionPath"] == key.decode().removeprefix("part=")
        assert len(rec["fileIdToBootstrapFile"]) == FILES_PER_PARTITION
    keys = [k.decode() for k, _ in files.cells]
    assert keys == sorted(keys) and len(keys) == len(DATES) * FILES_PER_PARTITION
    for key, value in files.cells:
        rec, schema = record(value)
        assert schema["name"] == "org.apache.hudi.avro.model.HoodieBootstrapFilePartitionInfo"
        assert [n for n, _ in fields(schema)] == ["version", "bootstrapPartitionPath", "bootstrapFileStatus",
                                                   "partitionPath"]
        partition, _, file_id = key.decode().partition(";fileid=")
        assert partition == f"part={rec['partitionPath']}" and file_id.endswith("-0")
        status = rec["bootstrapFileStatus"]
        assert status["path"]["uri"].startswith(f"file:{src}/{rec['bootstrapPartitionPath']}/")
        assert status["accessTime"] == status["modificationTime"] and status["isDir"] is False
        assert status["permission"] is None and status["owner"] is None
    for f, n in ((parts, len(DATES)), (files, len(keys))):
        info, schema = record(f.file_info[b"INDEX_INFO"])
        assert schema["name"] == "org.apache.hudi.avro.model.HoodieBootstrapIndexInfo"
        assert [n_ for n_, _ in fields(schema)] == ["version", "bootstrapBasePath", "createdTimestamp", "numKeys"]
        assert info["bootstrapBasePath"] == str(src) and info["numKeys"] == n
    # and our own decoder agrees
    _, mappings = bi.decode_file_ids((path / ".hoodie/.aux/.bootstrap/.fileids" / name).read_bytes(), source="f")
    assert [m.key for m in mappings] == keys


def test_hudi_rs_reads_skeleton_rows_without_their_source_columns(tmp_path):
    """hudi-rs 0.5 has no bootstrap support: it reads a skeleton as a base file, so a row the
    bootstrap left as it was has its meta columns and nulls for every data column (what
    docs/bootstrap.md says); a row a writer rewrote reads whole."""
    src = tmp_path / "src"
    model = make_source(src, hive=True, string_keys=False)
    path = str(tmp_path / "t")
    lock = mw.InProcessLock()
    boot(src, path, lock)
    k = sorted(model)[0]
    write(path, lock, "w", [(k, 3.0, model[k][1])])
    t = hudi_read(path)
    assert t.num_rows == len(model)
    rewritten_group = {d for key, (_, d, _) in model.items() if key == k}
    ids = pc.cast(t.column("_hoodie_record_key"), pa.string()).to_pylist()
    values = t.column("value").to_pylist()
    dates = t.column("date").to_pylist()
    assert values[ids.index(str(k))] == 3.0 and dates[ids.index(str(k))] in rewritten_group
    assert any(v is None for v in values), "rows of untouched skeleton groups carry no data columns"


def test_refusals(tmp_path):
    src = tmp_path / "src"
    make_source(src, hive=True, string_keys=False)
    lock = mw.InProcessLock()
    with pytest.raises(BootstrapModeError, match="num_buckets"):
        boot(src, str(tmp_path / "t1"), lock, table_type="MERGE_ON_READ", num_buckets=2)
    assert not (tmp_path / "t1").exists()
    with pytest.raises(mw.errors.ConfigError, match="overlap"):
        boot(src, str(src / "table"), lock)
    with pytest.raises(mw.errors.ConfigError, match="overlap"):
        boot(src, str(tmp_path), lock)
    # a key repeated within a partition: refused, the attempt undone at once, a FULL_RECORD rerun goes through
    pq.write_table(pa.table({"id": [0], "ts": [1], "value": [0.0], "name": ["x"]}), src / "date=2024-01-01" / "dup.parquet")
    before = hashes(src)
    path = str(tmp_path / "t2")
    with pytest.raises(BootstrapSourceError, match="record key '0' appears more than once"):
        boot(src, path, lock)
    table = mw.Table.open(path)
    assert table.timeline().pending() == [] and not skeletons(path)
    assert not bootstrap_index_files.exists(table.storage)
    r = boot(src, path, lock, mode="FULL_RECORD")
    assert r.instants == (FULL_BOOTSTRAP_TIME,)
    assert "hoodie.bootstrap.index.type" not in mw.Table.open(path).config.raw
    assert hashes(src) == before


def test_a_changed_source_file_is_a_table_format_error(tmp_path):
    src = tmp_path / "src"
    make_source(src, hive=True, string_keys=False)
    path = str(tmp_path / "t")
    boot(src, path, mw.InProcessLock())
    f = src / "date=2024-01-01" / "part-0.parquet"
    pq.write_table(pq.read_table(f).slice(1), f)
    with pytest.raises(TableFormatError, match="the source was changed after the bootstrap"):
        mw.Table.open(path).read()


def test_writers_wait_for_the_full_record_part(tmp_path):
    """A bootstrap in both modes whose process stops between its two commits: writers and the
    companion job's table services wait; running it again does the FULL_RECORD part only."""
    src = tmp_path / "src"
    model = make_source(src, hive=True, string_keys=False)
    path = str(tmp_path / "t")
    lock = mw.InProcessLock()
    opts = {REGEX: REGEX_SELECTOR, "hoodie.bootstrap.mode.selector.regex": "date=2024-01-01"}
    faults.configure("bootstrap-after-metadata-only=error")
    try:
        with pytest.raises(InjectedFault):
            boot(src, path, lock, options=opts)
    finally:
        faults.configure(None)
    with pytest.raises(BootstrapPendingError, match="FULL_RECORD part"):
        write(path, lock, "w", [(0, 1.0, DATES[0])])
    with mw.Cleaner(path, lock=lock, heartbeat_interval_s=1.0, clustering=mw.ClusteringConfig(min_file_groups=2)) as c:
        assert not c.run_once().clustering_instants
    with pytest.raises(mw.errors.ConfigError, match="same mode options"):
        boot(src, path, lock, options={**opts, "hoodie.bootstrap.mode.selector.regex": "date=2024-01-0[12]"})
    r = boot(src, path, lock, options=opts)
    assert r.instants == (METADATA_BOOTSTRAP_TIME, FULL_BOOTSTRAP_TIME)
    check(path, model)


def test_retention_deletes_old_skeletons_never_their_sources_and_archival_keeps_the_rest(tmp_path):
    """A skeleton slice that writers superseded is cleaned like any old slice (the skeleton goes,
    its source stays); the bootstrap commit archived, untouched skeleton groups still read."""
    src = tmp_path / "src"
    model = make_source(src, hive=False, string_keys=True)
    before = hashes(src)
    path = str(tmp_path / "t")
    lock = mw.InProcessLock()
    boot(src, path, lock)
    first = sorted(skeletons(path))
    touched = [k for k, (_, d, _) in sorted(model.items()) if d == DATES[0]][:2]
    for i in range(4):
        write(path, lock, "w", [(k, float(100 + i), DATES[0]) for k in touched])
    model.update({k: (103.0, DATES[0], 2) for k in touched})
    with mw.Cleaner(path, lock=lock, heartbeat_interval_s=1.0, retain_commits=1, archive_keep_min=2, archive_keep_max=3,
                    clustering=None) as c:
        report = c.run_once()
    assert report.old_versions_deleted and report.archived
    tl = mw.Table.open(path).timeline()
    assert METADATA_BOOTSTRAP_TIME not in {i.requested_time for i in tl.instants}, "the bootstrap commit was archived"
    gone = [p for p in first if not p.exists()]
    assert gone and len(gone) < len(first), "the superseded skeletons went, the others stayed"
    check(path, model)
    assert hashes(src) == before, "no source file was deleted or changed"


# -- a bootstrap killed at each step -----------------------------------------------------------

#: the METADATA_ONLY commit's steps (the writer's points the first time they pass), then between the two
#: commits, then in the FULL_RECORD commit (``after-data-files`` is the writer's: only that commit passes it)
KILL_POINTS = ["bootstrap-after-table", "after-requested", "after-inflight", "bootstrap-after-skeletons",
               "bootstrap-after-index", "before-complete", "bootstrap-after-metadata-only", "after-data-files"]
BOOT = """
import json, sys
import multiwriter as mw
a = json.loads(sys.argv[1])
mw.bootstrap(a["src"], a["path"], name="t", record_key="id", partition_by=["date"], ordering_field="ts",
             options=a["options"], lock=mw.FileSystemLock(lease_s=2.0), heartbeat_interval_s=1.0,
             heartbeat_tolerable_misses=0)
"""
#: both modes: the first two dates METADATA_ONLY (the regex mode's default), the last FULL_RECORD
MIXED = {REGEX: REGEX_SELECTOR, "hoodie.bootstrap.mode.selector.regex": "date=2024-01-0[12]"}


def test_a_killed_bootstrap_is_rolled_back_and_run_again(tmp_path):
    import json
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    src = tmp_path / "src"
    model = make_source(src, hive=True, string_keys=False)
    before = hashes(src)
    paths = {p: str(tmp_path / p) for p in KILL_POINTS}
    procs = {}
    for p in KILL_POINTS:
        env = dict(os.environ, MULTIWRITER_FAULTS=f"{p}=kill", PYTHONPATH=str(root))
        args = json.dumps({"src": str(src), "path": paths[p], "options": MIXED})
        procs[p] = subprocess.Popen([sys.executable, "-c", BOOT, args], cwd=root, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
    for p, proc in procs.items():
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == -9, f"{p}: the bootstrap was killed there: {err[-2000:]}"
    lock = mw.FileSystemLock(lease_s=2.0)
    for p, path in paths.items():  # writers are refused until the bootstrap completes
        with pytest.raises(BootstrapPendingError):
            write(path, lock, "w", [(0, 1.0, DATES[0])])
        if p in ("bootstrap-after-index", "before-complete"):
            assert bootstrap_index_files.exists(mw.Table.open(path).storage), p

    def clean(path: str) -> None:
        with mw.Cleaner(path, lock=lock, heartbeat_interval_s=1.0, clustering=mw.ClusteringConfig(min_file_groups=2)) as c:
            c.run_once()

    cleaners = [threading.Thread(target=clean, args=(path,)) for path in paths.values()]
    [t.start() for t in cleaners], [t.join() for t in cleaners]
    for p, path in paths.items():
        table = mw.Table.open(path)
        tl = table.timeline()
        assert tl.pending() == [], f"{p}: pending instants left: {tl.pending()}"
        meta_done = p in ("bootstrap-after-metadata-only", "after-data-files")
        assert [i.requested_time for i in tl.completed_writes()] == ([METADATA_BOOTSTRAP_TIME] if meta_done else []), p
        assert bootstrap_index_files.exists(table.storage) is meta_done, f"{p}: the failed attempt's index went"
        assert bool(skeletons(path)) is meta_done, f"{p}: the failed attempt's skeletons went"
        assert not list(Path(path, ".hoodie", ".heartbeat").glob("*")), p
        assert hashes(src) == before, f"{p}: the rollback left the source alone"
        r = mw.bootstrap(str(src), path, name="t", record_key="id", partition_by=["date"], ordering_field="ts",
                         options=MIXED, lock=lock)
        assert r.instants == (METADATA_BOOTSTRAP_TIME, FULL_BOOTSTRAP_TIME), p
        check(path, model)
        write(path, lock, "w", [(0, 5.0, DATES[0])])
        check(path, {**model, 0: (5.0, DATES[0], 2)})
    assert hashes(src) == before, "the source files are never changed"


def test_clustering_weighs_a_skeleton_with_its_source_file(tmp_path):
    """A skeleton slice is as large as its skeleton and source file together: below the small
    file limit by its skeleton alone but not with its source, it is not clustered."""
    src = tmp_path / "src"
    model = make_source(src, hive=True, string_keys=False)
    path = str(tmp_path / "t")
    lock = mw.InProcessLock()
    boot(src, path, lock)
    limit = max(p.stat().st_size for p in skeletons(path)) + 1
    assert min(p.stat().st_size for p in skeletons(path)) + min(p.stat().st_size for p in src.rglob("*.parquet")) > limit
    with mw.Cleaner(path, lock=lock, heartbeat_interval_s=1.0,
                    clustering=mw.ClusteringConfig(min_file_groups=2, small_file_bytes=limit)) as c:
        assert not c.run_once().clustering_instants
    with mw.Cleaner(path, lock=lock, heartbeat_interval_s=1.0,
                    clustering=mw.ClusteringConfig(min_file_groups=2, small_file_bytes=limit * 2)) as c:
        assert c.run_once().clustering_instants
    check(path, model)


def test_a_source_and_table_on_s3(s3_server, tmp_path):
    """Both on an S3 endpoint (moto's server): the index names the source objects by their
    ``s3://`` URIs, readers and a writer's merge fetch them, and no source object changes."""
    local = tmp_path / "src"
    model = make_source(local, hive=True, string_keys=True)
    bucket = s3_server()
    name = bucket.removeprefix("s3://")
    for p in sorted(local.rglob("*.parquet")):
        s3_server.client.upload_file(str(p), name, f"src/{p.relative_to(local)}")

    def etags() -> dict[str, str]:
        objs = s3_server.client.list_objects_v2(Bucket=name, Prefix="src/")["Contents"]
        return {o["Key"]: o["ETag"] for o in objs}

    before = etags()
    path = f"{bucket}/t"
    lock = mw.InProcessLock()
    boot(f"{bucket}/src", path, lock)
    mappings = bootstrap_index_files.read_mappings(mw.Table.open(path).storage)
    assert mappings and all(m.status.uri.startswith(f"{bucket}/src/date=") for m in mappings)
    check(path, model)
    k = sorted(model)[0]
    write(path, lock, "w", [(k, 4.0, model[k][1])])
    model[k] = (4.0, model[k][1], 2)
    check(path, model)
    assert etags() == before
