"""Defaults that would silently drop mutual exclusion are refused, and checkpoints never pin
archival: a writer needs an explicit lock, the table records the lock its writers use, and every
commit carries every writer's checkpoint forward."""
from __future__ import annotations

import json
import subprocess
import time
import sys
from pathlib import Path
from types import SimpleNamespace

import fastavro
import pytest

import multiwriter as mw
from multiwriter.errors import ConfigError
from tests.conftest import TRIPS_SCHEMA, trips


def properties(path: str) -> dict[str, str]:
    """hoodie.properties parsed by hand (key=value lines), not by the code under test."""
    out = {}
    for line in Path(path, ".hoodie", "hoodie.properties").read_text().splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.partition("=")
            out[k.replace("\\:", ":")] = v.replace("\\:", ":")
    return out


def create(path: str, lock) -> mw.Table:
    return mw.Table.create(path, name="trips", schema=TRIPS_SCHEMA, record_key="id", partition_by=["date"],
                           ordering_field="ts", lock=lock)


def test_a_writer_without_a_lock_is_refused():
    with pytest.raises(ConfigError, match="ZooKeeperLock"):
        mw.WriterConfig(writer_id="w")


def test_file_lock_is_refused_on_object_storage():
    # the provider decides from the storage's kind alone (no S3 endpoint is contacted)
    s3 = SimpleNamespace(is_local=False, uri="s3://bucket/table")
    with pytest.raises(ConfigError, match="local"):
        mw.FileSystemLock().for_table("t", s3)


def test_the_table_records_its_lock_and_refuses_another(zk_server, zk_base, table_path):
    zk = mw.ZooKeeperLock(connect=zk_server.connect, base_path=zk_base)
    create(table_path, zk)
    props = properties(table_path)
    assert props["multiwriter.lock.kind"] == "zookeeper"
    assert props["multiwriter.lock.zookeeper.base_path"] == zk_base
    others = [mw.FileSystemLock(), mw.InProcessLock(), mw.ZooKeeperLock(connect=zk_server.connect, base_path=zk_base + "-x")]
    for other in others:
        with pytest.raises(ConfigError, match="same lock"):
            mw.write(trips([1]), table_path, mw.WriterConfig(writer_id="w", lock=other))
        with pytest.raises(ConfigError, match="same lock"):
            mw.Cleaner(table_path, lock=other)
    r = mw.write(trips([1]), table_path, mw.WriterConfig(writer_id="w", lock=zk))
    assert r.instant is not None
    zk.close()


def test_clean_cli_needs_the_writers_lock(zk_server, zk_base, table_path):
    create(table_path, mw.ZooKeeperLock(connect=zk_server.connect, base_path=zk_base))
    run = [sys.executable, "-m", "multiwriter.cli", "clean", table_path, "--once"]
    out = subprocess.run(run, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "zookeeper" in out.stderr, out.stderr
    out = subprocess.run(run + ["--file-lock"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "same lock" in out.stderr, out.stderr
    out = subprocess.run(run + ["--zk", zk_server.connect], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def checkpoint_maps(path: str) -> list[dict[str, str]]:
    """The checkpoint map of every completed commit, in completion order, read with fastavro."""
    out = []
    files = sorted(Path(path, ".hoodie", "timeline").glob("*_*.commit"), key=lambda p: p.name.split("_")[1])
    for f in files:
        with open(f, "rb") as fh:
            rec = next(iter(fastavro.reader(fh)))
        out.append(json.loads(rec["extraMetadata"].get("_hudi_streaming_sink_checkpoint") or "{}"))
    return out


def test_every_commit_carries_every_writers_checkpoint(trips_table, table_path):
    lock = mw.InProcessLock()
    mw.write(trips([1]), table_path, mw.WriterConfig(writer_id="retired", lock=lock), batch_id=41)
    for b in range(3):
        mw.write(trips([2 + b]), table_path, mw.WriterConfig(writer_id="ingest", lock=lock), batch_id=b)
    maps = checkpoint_maps(table_path)
    assert maps[-1] == {"retired": "41", "ingest": "2"}
    assert all(m.get("retired") == "41" for m in maps)
    # the retired writer no longer holds archival back: only the newest commit carries checkpoints
    from multiwriter.cleaner.archive import newest_checkpoint_commits

    tl = mw.Table.open(table_path).timeline()
    newest = tl.completed_writes()[-1]
    assert set(newest_checkpoint_commits(tl).values()) == {newest}


def test_same_new_key_check_reads_parquet_outside_the_lock(trips_table, table_path, tmp_path, monkeypatch):
    """Writer B inserts while writer A commits new file groups in the same partition: B's commit
    must read A's key column, and must do it without holding the table lock."""
    import threading

    from multiwriter import conflict, faults
    from multiwriter.lock import in_process

    slot = in_process._slot(trips_table.table_id)
    reads: list[bool] = []
    real = conflict._new_keys_overlap

    def spy(timeline, path, ours):
        reads.append(slot.lock.locked())
        return real(timeline, path, ours)

    monkeypatch.setattr(conflict, "_new_keys_overlap", spy)
    monkeypatch.setenv("MULTIWRITER_FAULT_DIR", str(tmp_path))
    monkeypatch.setenv("MULTIWRITER_FAULT_HANG_S", "60")
    lock = mw.InProcessLock()
    faults.configure("after-data-files=hang@1")  # only B, the first to pass, hangs there
    try:
        out = {}
        b = threading.Thread(target=lambda: out.setdefault("b", mw.write(trips(["b1"]), table_path, mw.WriterConfig(writer_id="b", lock=lock))))
        b.start()
        deadline = time.monotonic() + 30
        while not (tmp_path / "after-data-files.hanging").exists():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        mw.write(trips(["a1"]), table_path, mw.WriterConfig(writer_id="a", lock=lock))
        (tmp_path / "after-data-files.release").touch()
        b.join(60)
    finally:
        faults.configure(None)
    assert out["b"].instant is not None
    assert reads, "B's commit never looked at A's new file group"
    assert not any(reads), "a Parquet key column was read while holding the table lock"
