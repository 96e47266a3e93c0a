"""Failed-write rollback against real files, real ZooKeeper and real killed processes."""

from __future__ import annotations

import threading
import time

import multiwriter as mw
from multiwriter.cleaner import rollback
from multiwriter.format import instant as inst
from tests.cleaner.conftest import (
    BOUND,
    HB,
    MISSES,
    NO_GARBAGE,
    data_files_of,
    deleted_paths,
    fake_failed_write,
    garbage_of,
    rollbacks,
    run_proc,
    wait_lapsed,
    writer_config,
)
from tests.conftest import trips
from tests.oracle import hudi_read, rows

COLS = ["id", "value"]


def _proc_args(table_path, zk_server, zk_base, **kw) -> dict:
    return {"path": table_path, "zk": zk_server.connect, "base": zk_base, "hb": HB, "misses": MISSES, **kw}


def test_writer_killed_mid_batch_is_rolled_back_only_after_the_heartbeat_bound(
    trips_table, table_path, zk_server, zk_base, zk_lock, cleaners
):
    p = run_proc(
        "write",
        _proc_args(table_path, zk_server, zk_base, writer="doomed", ids=[1, 2, 3], batches=2),
        faults="after-data-files=kill@2",
    )
    assert p.returncode == -9, p.stderr.read()
    committed = [i.requested_time for i in trips_table.timeline().completed_writes()]
    assert len(committed) == 1
    [t] = [i.requested_time for i in trips_table.timeline().pending()]
    before = garbage_of(trips_table, t)
    assert before["data"] and before["markers"] and before["heartbeat"] and before["pending"], before

    cleaner = cleaners(table_path, zk_lock(), observe_max_s=0)  # its first run does not wait to decide
    early = cleaner.run_once()
    assert early.rolled_back == [] and early.files_deleted == 0
    assert garbage_of(trips_table, t) == before, "a writer not yet watched for its heartbeat bound must not be touched"

    wait_lapsed(trips_table, t, cleaner=cleaner)
    report = cleaner.run_once()
    assert report.rolled_back == [t]
    assert report.files_deleted == len(before["data"])
    assert garbage_of(trips_table, t) == NO_GARBAGE
    [rec] = rollbacks(trips_table)[t]
    assert rec["instantsRollback"] == [{"commitTime": t, "action": inst.COMMIT}]
    assert deleted_paths(trips_table, rec) == set(before["data"])
    assert rec["totalFilesDeleted"] == len(before["data"])
    assert trips_table.timeline().pending() == []

    expected = [("1", 1.0), ("2", 1.0), ("3", 1.0)]
    assert rows(trips_table.read(), COLS) == expected
    assert rows(hudi_read(table_path), COLS) == expected
    assert cleaner.run_once().rolled_back == [], "a second run finds nothing left to do"


def _run_together(*cleaners_):
    """``run_once`` on every cleaner at the same moment, one thread each; their reports."""
    start = threading.Barrier(len(cleaners_))
    reports: list = [None] * len(cleaners_)

    def run(n: int) -> None:
        start.wait()
        reports[n] = cleaners_[n].run_once()

    threads = [threading.Thread(target=run, args=(n,)) for n in range(len(cleaners_))]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    return reports


def test_two_cleaners_at_once_roll_back_each_failed_instant_exactly_once(trips_table, table_path, zk_lock, cleaners):
    mw.write(trips(range(10)), table_path, writer_config(zk_lock()))
    for _round in range(2):
        garbage = dict(fake_failed_write(trips_table, zk_lock(), n_files=3) for _ in range(3))
        # both cleaners are fresh: each watches the pending instants until it decides, then they race
        ra, rb = _run_together(cleaners(table_path, zk_lock()), cleaners(table_path, zk_lock()))
        assert ra.errors == [] and rb.errors == []
        assert sorted(ra.rolled_back + rb.rolled_back) == sorted(garbage), (
            "each failed instant rolled back by exactly one cleaner"
        )
        assert ra.files_deleted + rb.files_deleted == sum(len(f) for f in garbage.values()), "each file deleted once"
        done = rollbacks(trips_table)
        for t, files in garbage.items():
            assert len(done[t]) == 1, f"instant {t} has {len(done[t])} rollback instants"
            assert deleted_paths(trips_table, done[t][0]) == set(files)
            assert garbage_of(trips_table, t) == NO_GARBAGE
        assert trips_table.timeline().pending() == []
    assert (
        rows(trips_table.read(), COLS)
        == rows(hudi_read(table_path), COLS)
        == [(str(i), 1.0) for i in sorted(range(10), key=str)]
    )


def test_a_slow_live_writer_is_left_alone_and_then_commits(
    trips_table, table_path, zk_server, zk_base, zk_lock, cleaners
):
    mw.write(trips([1, 2]), table_path, writer_config(zk_lock(), "first"))
    hang = 3 * BOUND  # well past the bound: only its beating heartbeat keeps it alive
    p = run_proc(
        "write",
        _proc_args(table_path, zk_server, zk_base, writer="slow", ids=[3, 4]),
        faults="after-data-files=hang",
        hang_s=hang,
        wait=False,
    )
    cleaner = cleaners(table_path, zk_lock())
    deadline = time.time() + 60
    t = None
    while t is None or not data_files_of(trips_table, t):
        assert time.time() < deadline and p.poll() is None, p.stderr.read() if p.poll() is not None else "timeout"
        pending = trips_table.timeline().pending()
        t = pending[0].requested_time if pending else None
        time.sleep(0.05)
    seen = 0
    while p.poll() is None:
        report = cleaner.run_once()
        assert report.rolled_back == [], f"live writer {t} was rolled back"
        seen += 1
        time.sleep(0.3)
    assert p.returncode == 0, p.stderr.read()
    assert seen >= 3
    done = trips_table.timeline().find(t)
    assert done is not None and done.is_completed
    assert rollbacks(trips_table) == {}
    assert [i.requested_time for i in trips_table.timeline().completed_writes()][-1] == t
    expected = [(str(i), 1.0) for i in (1, 2, 3, 4)]
    assert rows(trips_table.read(), COLS) == rows(hudi_read(table_path), COLS) == expected


def test_a_planned_but_unfinished_rollback_is_completed_by_the_next_run(trips_table, table_path, zk_lock, cleaners):
    mw.write(trips([1, 2]), table_path, writer_config(zk_lock()))
    t, files = fake_failed_write(trips_table, zk_lock(), n_files=2)
    first = cleaners(table_path, zk_lock())
    wait_lapsed(trips_table, t, cleaner=first)
    ctx = first._context()
    [target] = rollback.failed_writes(ctx, trips_table.timeline())
    plan = rollback.schedule(ctx, target, rollback.files_of(ctx, t))
    assert plan is not None and set(plan.files) == set(files)
    first._heartbeat.pause()  # the cleaner hangs (or dies) right after recording its plan

    nxt = cleaners(table_path, zk_lock(), observe_max_s=0)
    assert nxt.run_once().rolled_back == [], "the plan's heartbeat was not yet watched: its cleaner may be alive"
    assert trips_table.timeline().find(plan.rollback_time, inst.ROLLBACK).state == inst.REQUESTED
    wait_lapsed(trips_table, plan.rollback_time, cleaner=nxt)
    report = nxt.run_once()
    assert report.rolled_back == [t] and report.resumed == [plan.rollback_time]
    assert garbage_of(trips_table, t) == NO_GARBAGE
    [rec] = rollbacks(trips_table)[t]
    assert rec["rollback_time"] == plan.rollback_time, "the recorded plan is finished, no second rollback planned"
    assert deleted_paths(trips_table, rec) == set(files)
    assert trips_table.timeline().pending() == []


def test_a_cleaner_killed_half_way_through_deleting_is_finished_by_another(
    trips_table, table_path, zk_server, zk_base, zk_lock, cleaners
):
    mw.write(trips([1, 2]), table_path, writer_config(zk_lock()))
    t, files = fake_failed_write(trips_table, zk_lock(), n_files=4)
    p = run_proc("clean", _proc_args(table_path, zk_server, zk_base), faults="mid-rollback=kill")
    assert p.returncode == -9, p.stderr.read()
    left = data_files_of(trips_table, t)
    assert 0 < len(left) < len(files), "the kill point is half-way through the deletes"
    [pending] = trips_table.timeline().pending(frozenset({inst.ROLLBACK}))

    survivor = cleaners(table_path, zk_lock())
    wait_lapsed(trips_table, pending.requested_time, cleaner=survivor)
    report = survivor.run_once()
    assert report.rolled_back == [t] and report.resumed == [pending.requested_time]
    assert report.files_deleted == len(left)
    assert garbage_of(trips_table, t) == NO_GARBAGE
    [rec] = rollbacks(trips_table)[t]
    assert deleted_paths(trips_table, rec) == set(files), "files the dead cleaner deleted count as deleted"
    assert rows(trips_table.read(), COLS) == rows(hudi_read(table_path), COLS) == [("1", 1.0), ("2", 1.0)]


def test_a_rollback_deletes_a_file_of_its_instant_that_has_no_marker(trips_table, table_path, zk_lock, cleaners):
    """Besides the files its markers name, a rollback deletes the files named with the failed
    instant in the partitions they name: an unmarked one left behind would be read as an
    archived commit's file once archival passed the instant."""
    import shutil

    from multiwriter.format import layout

    mw.write(trips([1, 2]), table_path, writer_config(zk_lock()))
    t, files = fake_failed_write(trips_table, zk_lock(), n_files=1)
    part = files[0].rpartition("/")[0]
    unmarked = layout.data_file_path(part, layout.DataFileName(layout.new_file_id(), layout.write_token(5), t).name)
    shutil.copyfile(trips_table.storage.abs(files[0]), trips_table.storage.abs(unmarked))
    c = cleaners(table_path, zk_lock())
    wait_lapsed(trips_table, t, cleaner=c)
    assert c.run_once().rolled_back == [t]
    assert not trips_table.storage.exists(unmarked) and garbage_of(trips_table, t) == NO_GARBAGE
    [rec] = rollbacks(trips_table)[t]
    assert deleted_paths(trips_table, rec) == {files[0], unmarked}
    assert rows(hudi_read(table_path), COLS) == rows(trips_table.read(), COLS) == [("1", 1.0), ("2", 1.0)]
