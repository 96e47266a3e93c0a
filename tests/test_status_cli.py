"""Operating a long-running table from the command line: ``status``, ``writers retire``,
``cluster`` (real processes, real ZooKeeper). Oracles: hudi-rs (file groups it reads), fastavro
(the checkpoint map in commit files)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import fastavro

import multiwriter as mw
from multiwriter.format import layout
from multiwriter.transaction import Transaction
from tests.conftest import trips
from tests.oracle import hudi_read

CKPT = "_hudi_streaming_sink_checkpoint"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "multiwriter.cli", *args], capture_output=True, text=True, timeout=120)


def _zk(zk_server, zk_base) -> mw.ZooKeeperLock:
    return mw.ZooKeeperLock(connect=zk_server.connect, base_path=zk_base)


def _cfg(zk_server, zk_base, writer_id: str) -> mw.WriterConfig:
    return mw.WriterConfig(writer_id=writer_id, lock=_zk(zk_server, zk_base))


def _groups_per_partition_by_hudi_rs(path: str) -> dict[str, int]:
    t = hudi_read(path)
    out: dict[str, set[str]] = {}
    for part, name in zip(t.column("_hoodie_partition_path").to_pylist(), t.column("_hoodie_file_name").to_pylist(), strict=True):
        out.setdefault(part, set()).add(layout.parse_data_file(name).file_id)
    return {p: len(ids) for p, ids in out.items()}


def _checkpoint_map(path: str, requested_time: str) -> dict[str, str]:
    tdir = Path(path, ".hoodie", "timeline")
    (name,) = [n for n in os.listdir(tdir) if n.startswith(f"{requested_time}_") and n.endswith(".commit")]
    with open(tdir / name, "rb") as f:
        (rec,) = list(fastavro.reader(f))
    return json.loads(rec["extraMetadata"][CKPT])


def test_status_shows_writers_in_flight_instants_and_file_health(zk_server, zk_base, trips_table, table_path):
    for b in range(3):
        mw.write(trips(range(b * 5, b * 5 + 5), date="2024-01-01"), table_path, _cfg(zk_server, zk_base, "ingest-a"), batch_id=b)
    last_b = mw.write(trips(range(100, 103), date="2024-01-02"), table_path, _cfg(zk_server, zk_base, "ingest-b"), batch_id=7,
                      query_id="query-b")
    # an in-flight instant whose writer stopped beating long ago
    table = mw.Table.open(table_path)
    lock = _zk(zk_server, zk_base)
    try:
        t = Transaction(table, lock.for_table(table.table_id, table.storage), writer_id="ghost").begin().requested_time
    finally:
        lock.close()
    table.storage.write_bytes(layout.heartbeat_path(t), json.dumps({"writer_id": "ghost", "ts_ms": 0}).encode())
    os.utime(table.storage.abs(layout.heartbeat_path(t)), (time.time() - 3600, time.time() - 3600))
    registered = _zk(zk_server, zk_base)
    reg = registered.register_writer(table.table_id, "ingest-b")
    try:
        # the ghost's beat records no settings: judged by these, watched until it is decided
        out = cli("status", table_path, "--json", "--zk", zk_server.connect, "--zk-base-path", zk_base,
                  "--heartbeat-interval", "1", "--heartbeat-misses", "1")
    finally:
        reg.close()
        registered.close()
    assert out.returncode == 0, out.stderr
    s = json.loads(out.stdout)
    assert s["live_writers"] == ["ingest-b"]
    writers = {w["writer_id"]: w for w in s["writers"]}
    assert writers["ingest-a"]["last_batch"] == 2 and writers["ingest-a"]["live"] is False
    assert writers["ingest-b"]["last_batch"] == 7 and writers["ingest-b"]["live"] is True
    assert writers["ingest-b"]["last_commit"] == last_b.instant.requested_time
    assert writers["ingest-b"]["query_id"] == "query-b" and writers["ingest-a"]["query_id"] is None
    (ghost,) = s["in_flight"]
    assert ghost["instant"] == t and ghost["writer"] == "ghost" and ghost["verdict"] == "lapsed"
    assert ghost["bound_s"] == 2.0 and ghost["bound_from"] == "judge" and ghost["unchanged_s"] >= 2.0
    parts = {p["partition"]: p for p in s["partitions"]}
    assert {p: v["file_groups"] for p, v in parts.items()} == _groups_per_partition_by_hudi_rs(table_path)
    assert all(v["small_files"] == v["file_groups"] for v in parts.values())
    assert s["active_instants"] == 5 and s["archived_instants"] == 0
    text = cli("status", table_path, "--heartbeat-interval", "1", "--heartbeat-misses", "1")
    assert text.returncode == 0 and "ingest-a" in text.stdout and "lapsed" in text.stdout and "unknown (pass --zk)" in text.stdout
    assert "query query-b" in text.stdout


def test_retire_refused_while_live_then_forgets_the_checkpoint(zk_server, zk_base, trips_table, table_path):
    mw.write(trips(range(5)), table_path, _cfg(zk_server, zk_base, "old"), batch_id=4)
    mw.write(trips(range(5, 10)), table_path, _cfg(zk_server, zk_base, "keep"), batch_id=1)
    table = mw.Table.open(table_path)
    holder = _zk(zk_server, zk_base)
    reg = holder.register_writer(table.table_id, "old")
    try:
        refused = cli("writers", "retire", table_path, "old", "--zk", zk_server.connect, "--zk-base-path", zk_base)
    finally:
        reg.close()
        holder.close()
    assert refused.returncode == 2 and "registered live" in refused.stderr
    assert not table.storage.exists(".hoodie/multiwriter.retired_writers.json")
    ok = cli("writers", "retire", table_path, "old", "--zk", zk_server.connect, "--zk-base-path", zk_base)
    assert ok.returncode == 0, ok.stderr
    assert "last batch 4" in ok.stdout
    r = mw.write(trips(range(10, 12)), table_path, _cfg(zk_server, zk_base, "keep"), batch_id=2)
    assert _checkpoint_map(table_path, r.instant.requested_time) == {"keep": "2"}
    s = json.loads(cli("status", table_path, "--json").stdout)
    assert [w["writer_id"] for w in s["writers"]] == ["keep"] and "old" in s["retired_writers"]
    # the id may come back: its own new commits count again
    back = mw.write(trips(range(12, 14)), table_path, _cfg(zk_server, zk_base, "old"), batch_id=0)
    assert _checkpoint_map(table_path, back.instant.requested_time) == {"keep": "2", "old": "0"}
    lock = _zk(zk_server, zk_base)
    try:
        mw.retire_writer(table, "old", lock=lock)
    finally:
        lock.close()
    s = json.loads(cli("status", table_path, "--json").stdout)
    assert [w["writer_id"] for w in s["writers"]] == ["keep"]


def test_cluster_command_needs_a_lock_and_stitches_small_files(trips_table, table_path):
    cfg = mw.WriterConfig(writer_id="w", lock=mw.FileSystemLock())
    for k in range(4):
        mw.write(trips(range(k * 10, k * 10 + 10), date="2024-01-01"), table_path, cfg)
    before = sorted(hudi_read(table_path).column("id").to_pylist())
    no_lock = cli("cluster", table_path, "--once")
    assert no_lock.returncode == 2 and "--zk HOST:PORT or --file-lock" in no_lock.stderr
    out = cli("cluster", table_path, "--file-lock", "--once", "--small-file-bytes", str(1 << 20),
              "--target-file-bytes", str(4 << 20), "--max-bytes-per-run", str(64 << 20), "--min-file-groups", "2")
    assert out.returncode == 0, out.stderr
    assert "clustered 4 file groups in 1 instants" in out.stdout
    assert _groups_per_partition_by_hudi_rs(table_path) == {"2024-01-01": 1}
    assert sorted(hudi_read(table_path).column("id").to_pylist()) == before


def test_status_names_the_newest_file_of_the_lsm_history(trips_table, table_path):
    from multiwriter.cleaner import archive
    from multiwriter.status import collect

    cfg = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock())
    with mw.Cleaner(table_path, lock=cfg.lock, clustering=None) as cleaner:
        for k in range(4):
            mw.write(trips([k]), table_path, cfg)
            archive.archive(cleaner._context(), keep_min=1, keep_max=1, retain_commits=0)
    hist = Path(table_path, ".hoodie", "timeline", "history")
    version = (hist / "_version_").read_text()
    listed = [f["fileName"] for f in json.loads((hist / f"manifest_{version}").read_text())["files"]]
    newest = max(listed, key=lambda n: n.split("_")[1])
    s = collect(mw.Table.open(table_path))
    assert s.archived_instants == 3 and len(listed) == 3
    assert s.cleaner_last["archive"] == {"newest_batch": newest, "history_files": 3}


def test_status_shows_log_files_waiting_for_compaction(mor_table, table_path):
    cfg = mw.WriterConfig(writer_id="m", lock=mw.InProcessLock())
    mw.write(trips(range(8), date="2024-01-01"), table_path, cfg)
    for n in range(3):
        mw.write(trips(range(2), date="2024-01-01", ts=2 + n), table_path, cfg)
    out = cli("status", table_path, "--json")
    assert out.returncode == 0, out.stderr
    s = json.loads(out.stdout)
    assert s["table_type"] == "MERGE_ON_READ" and s["pending_compactions"] == []
    (u,) = s["uncompacted"]
    on_disk = [f for f in os.listdir(f"{table_path}/2024-01-01") if ".log." in f]
    assert u["partition"] == "2024-01-01" and u["log_files"] == len(on_disk) and u["delta_commits"] == 3
    text = cli("status", table_path).stdout
    assert "MERGE_ON_READ" in text and "log files not yet compacted" in text


def test_status_shows_the_metadata_table(tmp_path):
    import pyarrow as pa

    path = str(tmp_path / "t")
    schema = pa.schema([("id", pa.string()), ("d", pa.string())])
    mw.Table.create(path, name="m", schema=schema, record_key="id", partition_by=["d"], metadata=True)
    cfg = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock())
    for i in range(3):
        mw.write(pa.table({"id": [f"k{i}"], "d": ["x"]}, schema=schema), path, cfg)
    s = json.loads(cli("status", path, "--json").stdout)
    logs = [f for f in os.listdir(f"{path}/.hoodie/metadata/files") if f.startswith(".files")]
    # three writes' logs and Hudi's empty bootstrap log
    assert s["metadata"]["partitions"] == ["files"] and s["metadata"]["files_log_files"] == len(logs) == 4
    assert "metadata table: files; files partition based at 00000000000000000 with 4 log files" in cli("status", path).stdout


def test_status_warns_of_log_files_hudi_rs_may_not_read_until_compaction(tmp_path):
    """A Merge-on-Read column widened int32 -> int64 while log files of the narrower type wait
    for compaction: status says so, and stops saying so once they are compacted."""
    import pyarrow as pa

    path = str(tmp_path / "t")
    narrow = pa.schema([("id", pa.string()), ("v", pa.int32())])
    mw.Table.create(path, name="m", schema=narrow, record_key="id", table_type="MERGE_ON_READ", num_buckets=1)
    cfg = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock())
    mw.write(pa.table({"id": ["a", "b"], "v": pa.array([1, 2], pa.int32())}), path, cfg)
    mw.write(pa.table({"id": ["a"], "v": pa.array([3], pa.int32())}), path, cfg)  # a log file, v int32
    mw.write(pa.table({"id": ["b"], "v": pa.array([4], pa.int64()), "n": ["x"]}), path, cfg)  # widened, gained n
    warnings = json.loads(cli("status", path, "--json").stdout)["warnings"]
    assert any("v as int32 (table: int64)" in w for w in warnings), warnings
    with mw.Cleaner(path, lock=mw.InProcessLock(), clustering=None, compaction=mw.CompactionConfig(delta_commits=1)) as c:
        assert c.run_once().compaction_instants
    assert not any("hudi-rs may not read" in w for w in json.loads(cli("status", path, "--json").stdout)["warnings"])
