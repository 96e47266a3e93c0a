"""Replaced file groups: kept for time travel within the retention window, deleted after it;
a replace commit is archived only once its replaced files are gone. Oracle: hudi-rs."""
from __future__ import annotations

from pathlib import Path

import pytest

import multiwriter as mw
from multiwriter.cleaner import archive
from multiwriter.format import instant as inst
from tests.conftest import trips
from tests.oracle import hudi_read, rows
from tests.table.test_replace import write_replacecommit

pytestmark = pytest.mark.needs_fixtures  # the replace commit is encoded with the fixture's schema
COLS = ["id", "value"]


def _replace_first_partition(table_path: str) -> tuple[mw.Table, str, set[str]]:
    """Write two partitions, then a completed replace commit retiring the first one's group."""
    cfg = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock())
    mw.write(trips(range(10), date="2024-01-01", value=1), table_path, cfg)
    mw.write(trips(range(100, 105), date="2024-01-02", value=1), table_path, cfg)
    t = mw.Table.open(table_path)
    (retired,) = [f for f in t.snapshot().files() if f.partition == "2024-01-01"]
    tl = t.timeline()
    rt = str(int(tl.max_time()) + 1)
    write_replacecommit(t, rt, str(int(rt) + 1), {"2024-01-01": [retired.file_id]})
    files = {str(p) for p in Path(table_path, "2024-01-01").glob("*.parquet")}
    return t, rt, files


def _later_updates(table_path: str, n: int) -> None:
    for k in range(n):
        mw.write(trips(range(100, 105), date="2024-01-02", ts=2 + k, value=2 + k), table_path, mw.WriterConfig(writer_id="w", lock=mw.InProcessLock()))


def test_replaced_group_readable_before_the_replace_until_the_window_passes(trips_table, table_path):
    t, rt, retired_files = _replace_first_partition(table_path)
    before = t.timeline().completed_writes()[1].requested_time
    assert rows(t.read(), COLS) == rows(hudi_read(table_path), COLS) == [(str(i), 1.0) for i in range(100, 105)]
    _later_updates(table_path, 2)
    with mw.Cleaner(table_path, lock=mw.InProcessLock(), retain_commits=10) as cleaner:
        cleaner.run_once()
    assert all(Path(f).exists() for f in retired_files)  # inside the window: time travel still works
    assert rows(t.read(as_of=before), COLS) == rows(hudi_read(table_path, as_of=before), COLS)
    assert len(t.read(as_of=before)) == 15


def test_replace_not_archived_while_its_replaced_files_exist(trips_table, table_path):
    t, rt, retired_files = _replace_first_partition(table_path)
    _later_updates(table_path, 4)
    archive.compact_metadata_table(t.timeline())  # as archive() does when archival waits for it
    chosen, rule = archive.choose(t.timeline(), keep_min=1, keep_max=2, retain_commits=1)
    assert rt not in {i.requested_time for i in chosen}
    assert rule == "a replace commit whose replaced files are not cleaned yet"
    assert all(i.requested_time < rt for i in chosen)


def test_retention_deletes_replaced_groups_then_archival_keeps_them_retired(trips_table, table_path):
    t, rt, retired_files = _replace_first_partition(table_path)
    _later_updates(table_path, 3)
    latest = [(str(i), 4.0) for i in range(100, 105)]
    with mw.Cleaner(table_path, lock=mw.InProcessLock(), retain_commits=1, archive_keep_min=1, archive_keep_max=2) as c:
        report = c.run_once()
    assert not any(Path(f).exists() for f in retired_files), "replaced group outlived the retention window"
    assert report.archived >= 3
    tl = t.timeline()
    assert tl.find(rt, inst.REPLACE_COMMIT) is None  # archived, now that its files are gone
    assert rows(t.read(), COLS) == rows(hudi_read(table_path), COLS) == latest
    assert t.read_incremental().num_rows == 5
