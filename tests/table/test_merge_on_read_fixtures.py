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
