"""``mode("overwrite")``: Hudi's insert_overwrite_table as one replace commit retiring every
live file group; checked against hudi-rs and the replace commit's Avro (fastavro)."""
from __future__ import annotations

import io
import threading

import fastavro
import pytest

import multiwriter as mw
from multiwriter import faults
from tests.conftest import trips, wait_hanging
from tests.oracle import hudi_read, rows
from tests.spark.conftest import trips_write_options

COLS = ["id", "date", "ts", "value"]
FMT = "multiwriter"


def _cfg(writer_id: str = "w", **kw) -> mw.WriterConfig:
    return mw.WriterConfig(writer_id=writer_id, lock=mw.InProcessLock(), executor="driver", **kw)


def _opts(zk_server, zk_base):
    return trips_write_options(zk_server, zk_base)


def _replace_record(path: str, instant) -> dict:
    t = mw.Table.open(path)
    data = t.storage.read_bytes(t.timeline().path_of(instant))
    (rec,) = list(fastavro.reader(io.BytesIO(data)))
    return rec


def _live_groups(path: str) -> set[tuple[str, str]]:
    return set(mw.Table.open(path).snapshot().slices)


def test_overwrite_replaces_every_file_group(sp, trips_table, table_path, zk_server, zk_base):
    r1 = mw.write(trips(range(4)), table_path, _cfg())
    mw.write(trips(range(4, 6), date="2024-01-02", ts=2, value=2.0), table_path, _cfg())
    before = rows(hudi_read(table_path), COLS)
    old_groups = _live_groups(table_path)
    assert len(old_groups) == 2
    new = trips(range(10, 13), date="2024-01-03", ts=5, value=5.0)
    sp.createDataFrame(new.to_pandas()).write.format(FMT).options(**_opts(zk_server, zk_base)) \
        .mode("overwrite").save(table_path)
    tl = mw.Table.open(table_path).timeline()
    last = tl.last_completed_write()
    assert last.action == "replacecommit" and last.completion_time
    assert tl.path_of(last).endswith(f"{last.requested_time}_{last.completion_time}.replacecommit")
    rec = _replace_record(table_path, last)
    assert rec["operationType"] == "INSERT_OVERWRITE_TABLE"
    assert {(p, f) for p, ids in rec["partitionToReplaceFileIds"].items() for f in ids} == old_groups
    expect = [(str(i), "2024-01-03", 5, 5.0) for i in range(10, 13)]
    assert rows(hudi_read(table_path), COLS) == expect
    assert rows(mw.Table.open(table_path).read(), COLS) == expect
    assert sorted(tuple(r[c] for c in COLS) for r in sp.read.format(FMT).load(table_path).collect()) == expect
    t = mw.Table.open(table_path)
    assert sorted(tuple(r[c] for c in COLS) for r in t.to_spark(sp).collect()) == expect
    # time travel before the overwrite still sees the old rows
    as_of = r1.instant.requested_time
    assert rows(t.read(as_of=tl.completed_writes()[1].requested_time), COLS) == before
    assert rows(hudi_read(table_path, as_of=tl.completed_writes()[1].requested_time), COLS) == before
    assert rows(t.read(as_of=as_of), COLS) == rows(hudi_read(table_path, as_of=as_of), COLS)
    # and an upsert after the overwrite lands in the new groups only
    mw.write(trips([10], date="2024-01-03", ts=6, value=6.0), table_path, _cfg())
    assert rows(hudi_read(table_path), COLS) == sorted([("10", "2024-01-03", 6, 6.0)] + expect[1:], key=repr)


def test_an_empty_overwrite_empties_the_table(trips_table, table_path):
    mw.write(trips(range(3)), table_path, _cfg())
    r = mw.write(trips([]), table_path, _cfg(operation="insert_overwrite_table"))
    assert r.instant is not None and r.instant.action == "replacecommit"
    assert hudi_read(table_path).num_rows == 0 and mw.Table.open(table_path).read().num_rows == 0


def test_overwrite_conflicts_with_a_concurrent_commit_on_any_file_group(trips_table, table_path, tmp_path, monkeypatch):
    """An insert into brand-new file groups completes while the overwrite is writing: no file
    group is shared, yet the overwrite must retry, so that the table ends with its rows only."""
    mw.write(trips(range(3)), table_path, _cfg())
    monkeypatch.setenv("MULTIWRITER_FAULT_DIR", str(tmp_path))
    faults.configure("after-data-files=hang@1")
    got: dict = {}
    lock = mw.InProcessLock()
    ow = mw.WriterConfig(writer_id="ow", lock=lock, executor="driver", operation="insert_overwrite_table",
                         retry_backoff_s=0.0)
    th = threading.Thread(target=lambda: got.update(r=mw.write(trips(range(50, 52), ts=9, value=9.0), table_path, ow)))
    try:
        th.start()
        assert wait_hanging(tmp_path, th)
        ins = mw.write(trips(range(20, 22)), table_path, mw.WriterConfig(writer_id="ins", lock=lock, executor="driver",
                                                                         operation="insert"))
        assert ins.instant is not None
        (tmp_path / "after-data-files.release").write_text("")
        th.join(60)
    finally:
        faults.configure(None)
    assert got["r"].attempts == 2 and got["r"].conflicts == 1
    assert rows(hudi_read(table_path), COLS) == [(str(i), "2024-01-01", 9, 9.0) for i in range(50, 52)]
    assert rows(mw.Table.open(table_path).read(), COLS) == rows(hudi_read(table_path), COLS)


_CRASHING_OVERWRITE = """
import sys
import multiwriter as mw
from tests.conftest import trips
zk, base, path = sys.argv[1:4]
cfg = mw.WriterConfig(writer_id="ow", lock=mw.ZooKeeperLock(connect=zk, base_path=base), executor="driver",
                      operation="insert_overwrite_table", heartbeat_interval_s=1.0, heartbeat_tolerable_misses=2)
mw.write(trips(range(100, 103), ts=9, value=9.0), path, cfg)
"""


@pytest.mark.parametrize("point", ["after-inflight", "after-data-files"])
def test_a_crashed_overwrite_is_rolled_back_and_the_table_keeps_its_rows(point, zk_server, zk_base, trips_table, table_path):
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    from multiwriter.format.layout import parse_data_file

    lock = mw.ZooKeeperLock(connect=zk_server.connect, base_path=zk_base)
    cfg = mw.WriterConfig(writer_id="w", lock=lock, executor="driver", heartbeat_interval_s=1.0,
                          heartbeat_tolerable_misses=2)
    try:
        mw.write(trips(range(5)), table_path, cfg)
        before = rows(hudi_read(table_path), COLS)
        root = Path(__file__).resolve().parents[2]
        p = subprocess.run([sys.executable, "-c", _CRASHING_OVERWRITE, zk_server.connect, zk_base, table_path], cwd=root,
                           env=dict(os.environ, MULTIWRITER_FAULTS=f"{point}=crash"), capture_output=True, timeout=120)
        assert p.returncode == 137, p.stderr[-2000:]
        tl = mw.Table.open(table_path).timeline()
        (pending,) = tl.pending()
        assert pending.action == "replacecommit"
        time.sleep(3.5)  # the heartbeat's expiry bound: 1 s x (2 misses + 1), plus a margin
        with mw.Cleaner(table_path, lock=lock, heartbeat_interval_s=1.0, heartbeat_tolerable_misses=2) as c:
            assert c.run_once().rolled_back == [pending.requested_time]
        t = mw.Table.open(table_path)
        assert t.timeline().pending() == []
        listed = {s.path for i in t.timeline().completed_writes() for s in t.timeline().commit_metadata(i).all_stats()}
        data = {e.path for e in t.storage.walk_files("") if parse_data_file(e.path.rsplit("/", 1)[-1])}
        assert data == listed  # the crashed overwrite's files are gone
        assert rows(hudi_read(table_path), COLS) == rows(t.read(), COLS) == before
        # writers are no longer blocked by the dead overwrite's plan
        mw.write(trips([0], ts=3, value=3.0), table_path, cfg)
        assert ("0", "2024-01-01", 3, 3.0) in rows(hudi_read(table_path), COLS)
    finally:
        lock.close()
