"""The cleaner's sweep of failed writes: data files whose instant is neither completed (active
timeline or archive) nor pending are deleted once the instant is a few heartbeat bounds old,
even when Hudi's readers already take them for an archived commit's files (ours ask the archive).
Checked with hudi-rs."""

from __future__ import annotations

import os
import time

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from prometheus_client import CollectorRegistry

import multiwriter as mw
from multiwriter.cleaner import archive, orphans
from multiwriter.instant_time import format_time, next_after, parse_time
from multiwriter.metrics import Metrics
from multiwriter.format import layout
from tests.cleaner.conftest import BOUND, fake_failed_write, writer_config
from tests.conftest import trips
from tests.oracle import hudi_read, rows

@pytest.fixture()
def trips_table(table_path):
    """Without Hudi's metadata table: these tests are about the listing from storage (Hudi's rule
    for files older than the timeline, which hudi-rs applies there)."""
    from tests.conftest import TRIPS_SCHEMA

    return mw.Table.create(table_path, name="trips", schema=TRIPS_SCHEMA, record_key="id", partition_by=["date"],
                           ordering_field="ts", metadata=False)


COLS = ["id", "value"]


def _plant(table: mw.Table, instant_time: str, value: float) -> str:
    """A base file of a new file group named with ``instant_time``: the rows of a committed file
    with ``value`` (what a zombie writer's file looks like)."""
    src = table.snapshot().files()[0]
    data = pq.read_table(table.storage.abs(src.path))
    data = data.set_column(data.schema.get_field_index("value"), "value", pc.add(pc.multiply(data["value"], 0.0), value))
    name = layout.DataFileName(layout.new_file_id(), layout.write_token(7), instant_time).name
    rel = layout.data_file_path(src.partition, name)
    pq.write_table(data, table.storage.abs(rel))
    return rel


def _archived_table(table_path: str, zk_lock, cleaners, n: int = 8) -> dict[str, float]:
    """n commits, each to its own partition (so every commit's file stays a latest slice), and
    a cleaner run that archives all but the newest few. Returns the expected rows."""
    cfg = writer_config(zk_lock(), "ingest")
    for k in range(n):
        mw.write(trips([k], date=f"2024-01-{k + 1:02d}", value=k), table_path, cfg)
    report = cleaners(table_path, zk_lock(), retain_commits=2, archive_keep_min=2, archive_keep_max=3).run_once()
    assert report.archived >= n - 3
    return {str(k): float(k) for k in range(n)}


def test_files_older_than_the_timeline_that_no_archived_commit_wrote_are_swept(
    trips_table, table_path, zk_lock, cleaners
):
    expected = _archived_table(table_path, zk_lock, cleaners)
    tl = trips_table.timeline()
    history = archive.load_history(trips_table)
    assert history and max(a.requested_time for a in history) < tl.earliest_time()
    # a failed write older than the timeline: readers take it for an archived commit's file
    ghost = _plant(trips_table, format_time(parse_time(history[0].requested_time) - 60), value=999.0)
    between_t = next_after(history[0].requested_time)
    between = _plant(trips_table, between_t, value=998.0)  # between two archived commits
    young = _plant(trips_table, format_time(time.time() + 3600), value=555.0)  # too young to judge
    os.utime(trips_table.storage.abs(young), (time.time() + 3600, time.time() + 3600))  # by either clock
    assert 999.0 in hudi_read(table_path).column("value").to_pylist(), "the hazard: hudi-rs shows the ghost's rows"
    assert 999.0 not in trips_table.read().column("value").to_pylist(), "our reader asks the archive"

    registry = CollectorRegistry()
    cleaner = cleaners(table_path, zk_lock(), retain_commits=2, archive_keep_min=2, archive_keep_max=3,
                       failed_write_min_age_bounds=1, metrics=Metrics(registry))
    while time.time() - parse_time(between_t) <= BOUND:  # the safe age is measured from the instant time
        time.sleep(0.1)
    report = cleaner.run_once()
    assert sorted(report.failed_writes_swept) == sorted([ghost, between])
    assert not trips_table.storage.exists(ghost) and trips_table.storage.exists(young)
    deleted = registry.get_sample_value(
        "multiwriter_cleaner_files_deleted_total", {"table": "trips", "kind": "failed_write"})
    assert deleted == 2.0
    want = sorted(expected.items(), key=repr)
    assert rows(hudi_read(table_path), COLS) == rows(trips_table.read(), COLS) == want, "archived commits' files stay"


def test_late_file_of_a_rolled_back_instant_is_swept_and_pending_instants_are_not(
    trips_table, table_path, zk_lock, cleaners
):
    mw.write(trips([1, 2]), table_path, writer_config(zk_lock()))
    dead, _ = fake_failed_write(trips_table, zk_lock(), n_files=1)
    cleaner = cleaners(table_path, zk_lock(), failed_write_min_age_bounds=1)  # dead is older than one bound
    assert cleaner.run_once().rolled_back == [dead]
    late = _plant(trips_table, dead, value=999.0)  # the zombie woke up after its rollback
    assert 999.0 not in hudi_read(table_path).column("value").to_pylist(), "invisible while dead >= earliest"
    fake_failed_write(trips_table, zk_lock(), n_files=1)  # a pending instant: rollback's business, never swept
    ctx = cleaner._context()
    found = [f.path for f in orphans.failed_write_files(ctx, min_age_s=BOUND, now=time.time() + 10 * BOUND)]
    assert found == [late], "a pending instant's files are never swept, however old"
    assert orphans.failed_write_files(ctx, min_age_s=BOUND, now=time.time() - 10 * BOUND) == [], "safe age"
    report = cleaner.run_once()
    assert report.failed_writes_swept == [late] and not trips_table.storage.exists(late)
    assert rows(hudi_read(table_path), COLS) == rows(trips_table.read(), COLS) == [("1", 1.0), ("2", 1.0)]


def test_a_failed_write_of_a_writer_whose_clock_runs_ahead_is_swept_once_its_file_is_old(
    trips_table, table_path, zk_lock, cleaners
):
    """A writer 60 s ahead names its instant 60 s in the future; after its rollback a late file
    of it must not wait for the cleaner's clock to catch up: the store's clock (the file's
    modification time) says it is old."""
    mw.write(trips([1, 2]), table_path, writer_config(zk_lock()))
    dead, _ = fake_failed_write(trips_table, zk_lock(), n_files=1)
    cleaner = cleaners(table_path, zk_lock(), failed_write_min_age_bounds=1)
    assert cleaner.run_once().rolled_back == [dead]
    late = _plant(trips_table, format_time(time.time() + 60), value=999.0)  # the zombie's instant, 60 s ahead
    old = time.time() - 10 * BOUND
    os.utime(trips_table.storage.abs(late), (old, old))
    report = cleaner.run_once()
    assert report.failed_writes_swept == [late] and not trips_table.storage.exists(late)
    assert rows(hudi_read(table_path), COLS) == rows(trips_table.read(), COLS) == [("1", 1.0), ("2", 1.0)]


def test_a_foreign_archive_keeps_files_older_than_the_timeline(trips_table, table_path, zk_lock, cleaners):
    _archived_table(table_path, zk_lock, cleaners)
    history = archive.load_history(trips_table)
    ghost = _plant(trips_table, format_time(parse_time(history[0].requested_time) - 60), value=999.0)
    # a version 6 archive (Hudi's older archived log files) cannot be read here
    trips_table.storage.write_bytes(".hoodie/archived/.commits_.archive.1_1-0-1", b"an archive we cannot read")
    report = cleaners(table_path, zk_lock(), retain_commits=2, archive_keep_min=2, archive_keep_max=3).run_once()
    assert report.failed_writes_swept == [] and trips_table.storage.exists(ghost)


def test_the_sweep_can_be_turned_off_and_its_age_is_validated(trips_table, table_path, zk_lock, cleaners):
    _archived_table(table_path, zk_lock, cleaners)
    ghost = _plant(trips_table, format_time(parse_time(archive.load_history(trips_table)[0].requested_time) - 60), 999.0)
    report = cleaners(table_path, zk_lock(), sweep_failed_writes=False).run_once()
    assert report.failed_writes_swept == [] and trips_table.storage.exists(ghost)
    with pytest.raises(mw.errors.ConfigError, match="failed_write_min_age_bounds"):
        cleaners(table_path, zk_lock(), failed_write_min_age_bounds=0.5)
