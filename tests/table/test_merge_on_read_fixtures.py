"""Merge-on-Read tables Hudi on Spark wrote: our reader merges their log files as hudi-rs does."""
from __future__ import annotations

import pytest

import multiwriter as mw
from tests.oracle import hudi_read, rows, unzip_fixture

pytestmark = pytest.mark.needs_fixtures

MOR = ["v8_trips_8i1u", "v8_trips_8i3d", "v8_trips_8i3u1d"]
COLS = ["uuid", "rider", "driver", "fare", "city"]


@pytest.mark.parametrize("name", MOR)
def test_snapshot_merges_log_files_as_hudi_rs_does(name, tmp_path):
    path = str(unzip_fixture(name, tmp_path, "mor"))
    t = mw.Table.open(path)
    assert t.config.merge_on_read
    ours = t.read()
    assert rows(ours, COLS) == rows(hudi_read(path), COLS)
    assert any(f.logs for f in t.snapshot().files()), "the fixture's updates live in log files"


@pytest.mark.parametrize("name", MOR)
def test_as_of_each_commit_matches_hudi_rs(name, tmp_path):
    path = str(unzip_fixture(name, tmp_path, "mor"))
    t = mw.Table.open(path)
    for i in t.timeline().completed_writes():
        assert rows(t.read(as_of=i.requested_time), COLS) == rows(hudi_read(path, as_of=i.requested_time), COLS), i


@pytest.mark.parametrize("name", ["v8_trips_8i1u", "v8_trips_8i3d"])
def test_continue_a_hudi_written_table(name, tmp_path):
    """Without a bucket index, the bloom index finds each key's file group: updates and deletes
    become log files of that group, new keys a new file group; hudi-rs reads the result as we do."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from multiwriter.table.files import list_files

    path = str(unzip_fixture(name, tmp_path, "mor"))
    t = mw.Table.open(path)
    before = t.read()
    groups_before = {f.group for f in t.snapshot().files()}
    rows_ = before.select(["ts", "uuid", "rider", "driver", "fare", "city"]).slice(0, 2).to_pylist()
    upd = pa.Table.from_pylist([{**rows_[0], "ts": rows_[0]["ts"] + 1, "fare": 999.0}], schema=before.select(
        ["ts", "uuid", "rider", "driver", "fare", "city"]).schema)
    cfg = mw.WriterConfig(writer_id="continue", lock=mw.InProcessLock())
    r = mw.write(upd, path, cfg)
    assert r.instant.action == "deltacommit"
    mw.write(pa.Table.from_pylist([rows_[1]], schema=upd.schema), path, mw.WriterConfig(
        writer_id="continue", lock=mw.InProcessLock(), operation="delete"))
    new = pa.Table.from_pylist([{**rows_[0], "uuid": "new-key-1", "ts": 1, "fare": 1.0}], schema=upd.schema)
    mw.write(new, path, cfg)
    t = mw.Table.open(path)
    got = t.read()
    assert rows(got, COLS) == rows(hudi_read(path), COLS)
    fares = dict(zip(got.column("uuid").to_pylist(), got.column("fare").to_pylist(), strict=True))
    assert fares[rows_[0]["uuid"]] == 999.0 and rows_[1]["uuid"] not in fares and fares["new-key-1"] == 1.0
    assert got.num_rows == before.num_rows
    after = {f.group for f in t.snapshot().files()}
    assert groups_before < after and len(after - groups_before) == 1, "only the new key made a new file group"
    _, logs = list_files(t.storage)
    ours = [lf for lf in logs if lf.instant_time == r.instant.requested_time]
    assert len(ours) == 1 and pc.equal(got.column("uuid"), rows_[0]["uuid"]).to_pylist().count(True) == 1
