"""Decompression bombs planted inside a table's folder: each is refused from the sizes its headers
declare, before anything is allocated, with a TableFormatError naming the file, by a step run in
a child process capped at 3 GB of address space; the rows the bomb does not hold stay readable."""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

import multiwriter as mw
from multiwriter.format import lsm_timeline as lsm
from multiwriter.format.avro import zigzag
from multiwriter.format.log_file import BlockType, HeaderKey, encode_block
from tests.oracle import rows
from tests.table.bombs import hfile_with, null_parquet

ROOT = Path(__file__).resolve().parents[2]
CAP = 3 << 30
SCHEMA = pa.schema([("id", pa.string()), ("ts", pa.int64()), ("v", pa.float64()), ("d", pa.string())])
COLS = ["_hoodie_record_key", "id", "ts", "v", "d"]
T0 = "20250101000000000"

CHILD = textwrap.dedent("""
    import resource, sys
    resource.setrlimit(resource.RLIMIT_AS, ({cap}, {cap}))
    from multiwriter.errors import MultiWriterError
    path = sys.argv[1]
    try:
        exec(sys.argv[2])
        print("DONE")
    except MultiWriterError as e:  # a TableFormatError, or the cleaner's report of one
        print("TYPED", type(e).__name__, str(e).replace("\\n", " "))
    except BaseException as e:
        print("UNTYPED", type(e).__name__, e)
""").format(cap=CAP)


def capped(step: str, path: str) -> str:
    """The last line the child printed after running ``step`` (``path`` bound) under the cap."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", CHILD, path, textwrap.dedent(step)], capture_output=True, text=True,
                          timeout=120, env=env, cwd=ROOT)
    lines = done.stdout.strip().splitlines()
    assert lines, done.stderr[-2000:]
    return lines[-1]


def assert_typed(out: str, name: str) -> None:
    assert out.startswith("TYPED"), out
    assert "TableFormatError" in out, out
    assert name in out, out


def _null_array_schema(name: str = "R") -> dict:
    return {"type": "record", "name": name, "fields": [{"name": "a", "type": {"type": "array", "items": "null"}}]}


def _log(tmp: Path, name: str, block: bytes) -> str:
    p = tmp / name
    p.write_bytes(block)
    return str(p)


@pytest.fixture(scope="module")
def reindexed_bomb() -> bytes:
    """The review's metadata-table HFile: one gzip block inflating to 256 MB, indexed 64 times."""
    return hfile_with({b"k": b""}, {b"schema": b"{}"}, times=64, block_bytes=256 << 20)


def test_an_hfile_log_block_indexed_64_times_is_refused(tmp_path, reindexed_bomb):
    path = _log(tmp_path, ".files-0000-0_20250101000000000.log.1_0-0-0",
                encode_block(BlockType.HFILE_DATA, {HeaderKey.INSTANT_TIME: T0}, reindexed_bomb))
    assert os.path.getsize(path) < 300_000
    out = capped("""
        from multiwriter.format.log_file import read_log_blocks
        from multiwriter.table.metadata_files import _decode_hfile
        for b in read_log_blocks(open(path, "rb").read(), source=path):
            _decode_hfile(b.content, path)
    """, path)
    assert_typed(out, path)
    assert "index" in out


def test_an_hfile_file_info_schema_of_zero_width_items_is_refused(tmp_path):
    schema = json.dumps(_null_array_schema()).encode()
    bomb = hfile_with({b"k": zigzag(1 << 40) + b"\x00"}, {b"schema": schema})
    path = _log(tmp_path, ".files-0000-0_20250101000000000.log.1_0-0-0",
                encode_block(BlockType.HFILE_DATA, {HeaderKey.INSTANT_TIME: T0}, bomb))
    out = capped("""
        from multiwriter.format.log_file import read_log_blocks
        from multiwriter.table.metadata_files import _decode_hfile
        for b in read_log_blocks(open(path, "rb").read(), source=path):
            _decode_hfile(b.content, path)
    """, path)
    assert_typed(out, path)


def test_an_avro_log_block_of_2_to_the_40_nulls_is_refused_at_once(tmp_path):
    record = zigzag(1 << 40) + b"\x00"
    content = struct.pack(">ii", 3, 1) + struct.pack(">i", len(record)) + record
    header = {HeaderKey.INSTANT_TIME: T0, HeaderKey.SCHEMA: json.dumps(_null_array_schema())}
    path = _log(tmp_path, ".f1-0_20250101000000000.log.1_0-0-0", encode_block(BlockType.AVRO_DATA, header, content))
    out = capped("""
        import time
        from multiwriter.format.log_file import read_log_blocks
        t = time.monotonic()
        try:
            read_log_blocks(open(path, "rb").read(), source=path)
        finally:
            assert time.monotonic() - t < 1, "decoding looped"
    """, path)
    assert_typed(out, path)


def test_a_parquet_log_block_of_a_trillion_bytes_is_refused(tmp_path):
    block = null_parquet(SCHEMA)
    header = {HeaderKey.INSTANT_TIME: T0, HeaderKey.SCHEMA: json.dumps({"type": "record", "name": "r", "fields": []})}
    path = _log(tmp_path, ".f1-0_20250101000000000.log.1_0-0-0", encode_block(BlockType.PARQUET_DATA, header, block))
    assert os.path.getsize(path) < 20_000
    out = capped("""
        from multiwriter.format.log_file import read_log_blocks
        read_log_blocks(open(path, "rb").read(), source=path)
    """, path)
    assert_typed(out, path)
    assert "row group" in out


@pytest.mark.parametrize("states_only", [False, True])
def test_a_history_parquet_file_of_hundreds_of_gb_is_refused(tmp_path, states_only):
    rel = "00000000000000001_00000000000000002_0.parquet"
    (tmp_path / rel).write_bytes(null_parquet(lsm.SCHEMA))
    out = capped(f"""
        from multiwriter.storage import Storage
        from multiwriter.format import lsm_timeline as lsm
        lsm.read_file(Storage(path), {rel!r}, states_only={states_only})
    """, str(tmp_path))
    assert_typed(out, rel)


def _batch(ids, ts: int) -> pa.Table:
    ids = list(ids)
    return pa.table({"id": [f"k{i:03d}" for i in ids], "ts": [ts] * len(ids), "v": [float(i) for i in ids],
                     "d": [f"p{i % 2}" for i in ids]}, schema=SCHEMA)


def test_a_planted_parquet_base_file_is_refused_by_readers_and_writers_and_the_rest_stays_readable(tmp_path):
    path = str(tmp_path / "t")
    mw.Table.create(path, name="bombed", schema=SCHEMA, record_key="id", partition_by=["d"], ordering_field="ts")
    mw.write(_batch(range(10), 1), path, mw.WriterConfig(writer_id="w", lock=mw.InProcessLock()))
    before = rows(mw.Table.open(path).read(), COLS)
    p1_before = [r for r in before if r[-1] == "p1"]
    t = mw.Table.open(path)
    (victim,) = [f.path for f in t.snapshot().files() if f.partition.endswith("p0")]
    full = t.storage.abs(victim)
    schema = pa.schema([pa.field(n, pa.string()) for n in
                        ("_hoodie_commit_time", "_hoodie_commit_seqno", "_hoodie_record_key",
                         "_hoodie_partition_path", "_hoodie_file_name")] + list(SCHEMA))
    Path(full).write_bytes(null_parquet(schema))
    assert os.path.getsize(full) < 20_000

    out = capped("import multiwriter as mw\nmw.Table.open(path).read()", path)
    assert_typed(out, victim)
    out = capped("""
        import pyarrow as pa
        import multiwriter as mw
        b = pa.table({"id": ["k000"], "ts": [2], "v": [0.5], "d": ["p0"]})
        mw.write(b, path, mw.WriterConfig(writer_id="w2", lock=mw.InProcessLock()))
    """, path)
    assert_typed(out, victim)

    # the rest: the other partition, by both readers
    t = mw.Table.open(path)
    tl = t.timeline()
    snap = t.snapshot(timeline=tl)
    rest = t.read_slices([f for f in snap.files() if f.partition.endswith("p1")], t.read_schema(tl, snap))
    assert rows(rest, COLS) == p1_before
    from hudi import HudiReadOptions, HudiTableBuilder

    opts = HudiReadOptions().with_filters([("d", "=", "p1")])
    theirs = pa.Table.from_batches(HudiTableBuilder.from_base_uri(path).build().read(opts))
    assert rows(theirs, COLS) == p1_before


def test_legitimate_files_stay_within_the_budgets(tmp_path):
    """A real base file of 200,000 rows in several row groups reads as ever."""
    from multiwriter.format import bounds
    import pyarrow.parquet as pq

    t = pa.table({"k": [f"key-{i}" for i in range(200_000)], "x": list(range(200_000))})
    p = tmp_path / "f.parquet"
    pq.write_table(t, p, row_group_size=50_000)
    with pa.OSFile(str(p)) as f:
        assert bounds.read_parquet(f, "f.parquet").equals(t)


def test_the_budgets_are_configurable(tmp_path, monkeypatch):
    from multiwriter.errors import TableFormatError
    from multiwriter.format import bounds
    import pyarrow.parquet as pq

    t = pa.table({"x": list(range(100_000))})
    p = tmp_path / "f.parquet"
    pq.write_table(t, p)
    monkeypatch.setenv(bounds.ROW_GROUP_ENV, str(100_000))
    with pa.OSFile(str(p)) as f, pytest.raises(TableFormatError, match="f.parquet"):
        bounds.read_parquet(f, "f.parquet")


def test_a_parquet_log_block_planted_in_a_committed_log_stops_compaction_with_a_typed_error(tmp_path):
    path = str(tmp_path / "t")
    mw.Table.create(path, name="bombed", schema=SCHEMA, record_key="id", partition_by=["d"], ordering_field="ts",
                    table_type="MERGE_ON_READ", num_buckets=1)
    lock = mw.InProcessLock()
    mw.write(_batch(range(10), 1), path, mw.WriterConfig(writer_id="w", lock=lock))
    mw.write(_batch(range(0, 10, 2), 2), path, mw.WriterConfig(writer_id="w", lock=lock))
    t = mw.Table.open(path)
    logs = [lf.path for f in t.snapshot().files() if f.partition.endswith("p0") for lf in f.logs]
    assert logs
    victim = logs[0]
    header = {HeaderKey.INSTANT_TIME: T0, HeaderKey.SCHEMA: json.dumps({"type": "record", "name": "r", "fields": []})}
    Path(t.storage.abs(victim)).write_bytes(encode_block(BlockType.PARQUET_DATA, header, null_parquet(SCHEMA)))
    out = capped("""
        import multiwriter as mw
        mw.Cleaner(path, lock=mw.InProcessLock(), clustering=None,
                   compaction=mw.CompactionConfig(delta_commits=1)).run_once()
    """, path)
    assert_typed(out, victim)
    assert "CleanerError" in out  # the job reports it
    assert_typed(capped("import multiwriter as mw\nmw.Table.open(path).read()", path), victim)


def test_a_planted_parquet_base_file_stops_clustering_with_a_typed_error(tmp_path):
    """Clustering reads its input groups through the same checked reads: a bomb among them is a
    typed error naming the file, which the job reports; nothing is rewritten through it."""
    path = str(tmp_path / "t")
    mw.Table.create(path, name="bombed", schema=SCHEMA, record_key="id", partition_by=["d"], ordering_field="ts")
    cfg = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock())
    for n in range(3):  # inserts only: a new small file group per batch and partition
        mw.write(_batch(range(10 * n, 10 * n + 10), 1), path, cfg)
    t = mw.Table.open(path)
    p0 = sorted(f.path for f in t.snapshot().files() if f.partition.endswith("p0"))
    assert len(p0) == 3
    victim = p0[0]
    schema = pa.schema([pa.field(n, pa.string()) for n in
                        ("_hoodie_commit_time", "_hoodie_commit_seqno", "_hoodie_record_key",
                         "_hoodie_partition_path", "_hoodie_file_name")] + list(SCHEMA))
    Path(t.storage.abs(victim)).write_bytes(null_parquet(schema))
    out = capped("""
        import multiwriter as mw
        mw.Cleaner(path, lock=mw.InProcessLock(), compaction=None,
                   clustering=mw.ClusteringConfig(min_file_groups=2)).run_once()
    """, path)
    assert_typed(out, victim)
    assert "CleanerError" in out  # the job reports it
    t = mw.Table.open(path)
    tl = t.timeline()
    assert not [i for i in tl.completed() if i.action == "replacecommit"], "nothing was clustered through it"
    snap = t.snapshot(timeline=tl)
    p1 = [f for f in snap.files() if f.partition.endswith("p1")]
    assert t.read_slices(p1, t.read_schema(tl, snap)).num_rows == 15, "the other partition reads whole"


def test_a_planted_history_file_stops_the_archivers_compaction_with_a_typed_error(tmp_path):
    """The archiver compacts the history's files (Hudi's LSM layout) by reading them through the
    checked reads: a bomb among them is a typed error naming it, and the table reads whole."""
    path = str(tmp_path / "t")
    mw.Table.create(path, name="bombed", schema=SCHEMA, record_key="id", partition_by=["d"], ordering_field="ts")
    cfg = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock())
    with mw.Cleaner(path, lock=mw.InProcessLock(), clustering=None, retain_commits=1, archive_keep_min=1,
                    archive_keep_max=2) as job:
        for n in range(8):
            mw.write(_batch(range(n, n + 2), n + 1), path, cfg)
            job.run_once()
    t = mw.Table.open(path)
    history = t.config.history_dir
    files = sorted(n for n in os.listdir(t.storage.abs(history)) if n.endswith(".parquet"))
    assert len(files) >= 2, "archival made history files to compact"
    before = rows(t.read(), COLS)
    victim = f"{history}/{files[0]}"
    Path(t.storage.abs(victim)).write_bytes(null_parquet(lsm.SCHEMA))
    out = capped("""
        import multiwriter as mw
        from multiwriter.format import lsm_timeline as lsm
        t = mw.Table.open(path)
        lsm.compact_and_clean(t.storage, t.config.history_dir, batch=2)
    """, path)
    assert_typed(out, files[0])
    with pytest.raises(mw.errors.TableFormatError, match=files[0]):  # our reader consults the history: typed
        mw.Table.open(path).read()
    from tests.oracle import hudi_read

    assert rows(hudi_read(path), COLS) == before, "no committed row lost"
