"""A data file becomes visible under its final name only after the liveness check: written under a
staged name, published when its instant is still pending and not completed, deleted otherwise.
Oracles: the files on storage (plain directory walks) and hudi-rs."""
from __future__ import annotations

import dataclasses
import os

import pyarrow as pa
import pytest

import multiwriter as mw
from multiwriter.errors import HeartbeatExpiredError, InstantCompletedError, InstantRolledBackError
from multiwriter.heartbeat.client import HeartbeatClient
from multiwriter.format import layout
from multiwriter.table import timeline as tlmod
from multiwriter.write import guard, merge
from multiwriter.write.plan import FileGroupTask
from multiwriter.write.records import prepare
from tests.conftest import trips
from tests.oracle import hudi_read, rows


def _data_files(root: str) -> list[str]:
    """Every file under ``root`` (hidden directories included) whose name ends like a base file."""
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs
                  if f.endswith(".parquet") and "/history" not in d)


def _late_merge_publishes_nothing(trips_table, table_path: str, t: str, before: list[str], *,
                                  markers_listed: bool) -> None:
    """A merge of 4 rows into a new file group of the completed instant ``t`` is refused, leaves
    no file (staged or not) and hudi-rs still reads the committed rows."""
    ctx = merge.armed(merge.context(table_path, t, trips_table.schema(), "ts", 1, ("id",)), trips_table.config)
    ctx = dataclasses.replace(ctx, markers_listed=markers_listed)
    late = prepare(trips(range(4), value=99.0), trips_table.config, trips_table.schema(), operation="upsert")
    task = FileGroupTask("2024-01-01", layout.new_file_id(), 0)
    with pytest.raises(InstantCompletedError, match=t):
        merge.merge_file_group(trips_table.storage, ctx, task, late, "0-0-1")
    assert _data_files(table_path) == before, "no new base file, not even a staged one"
    assert rows(hudi_read(table_path), ["id", "value"]) == [(str(i), 1.0) for i in range(4)]


def test_a_task_attempt_that_outlived_the_commit_publishes_nothing(trips_table, table_path):
    """A rerun task's late attempt of a completed instant: its requested and inflight files are
    still on the timeline, so only the completed instant tells it the commit happened."""
    mw.write(trips(range(4), value=1.0), table_path, mw.WriterConfig(writer_id="w", lock=mw.InProcessLock()))
    before = _data_files(table_path)
    tl = trips_table.timeline()
    [done] = tl.completed_writes()
    t = done.requested_time
    assert all(trips_table.storage.exists(p) for p in guard.pending_files(trips_table.config, t)), \
        "Hudi keeps the requested and inflight files after completion"
    _late_merge_publishes_nothing(trips_table, table_path, t, before, markers_listed=False)


def test_a_writer_rolled_back_while_writing_deletes_what_it_wrote(trips_table, table_path):
    storage, cfg = trips_table.storage, trips_table.config
    t = "20240101000000000"
    tlmod.create_requested(storage, cfg, t)
    pending = guard.pending_files(cfg, t)
    rel = layout.data_file_path("2024-01-01", layout.DataFileName(layout.new_file_id(), "0-0-0", t).name)
    staged: list[str] = []

    def write(path: str) -> int:
        staged.append(path)
        storage.write_bytes(path, b"the bytes of a data file")
        for p in pending:  # the cleaner rolls the instant back meanwhile
            storage.delete(p)
        return 1

    with pytest.raises(InstantRolledBackError, match=t):
        guard.write_checked(storage, t, None, pending, rel, write)
    assert staged and staged[0].startswith(f".hoodie/.temp/{t}/staged/")
    assert not storage.exists(rel) and not storage.exists(staged[0])


def test_a_live_writer_publishes_under_the_final_name(trips_table, table_path):
    storage, cfg = trips_table.storage, trips_table.config
    t = "20240101000000000"
    tlmod.create_requested(storage, cfg, t)
    rel = layout.data_file_path("2024-01-01", layout.DataFileName(layout.new_file_id(), "0-0-0", t).name)
    assert guard.write_checked(storage, t, None, guard.pending_files(cfg, t), rel,
                               lambda path: storage.write_bytes(path, b"x") or 7) == 7
    assert storage.read_bytes(rel) == b"x"
    assert not [e for e in storage.walk_files(f".hoodie/.temp/{t}")], "the staged name is gone"


def test_a_late_attempt_with_listed_markers_publishes_nothing(trips_table, table_path):
    """On the driver the markers are listed before the merges (``markers_listed``) and a merge
    makes no check of its own before writing: the check before publication still stops a file
    of a completed instant, and its staged copy is deleted."""
    mw.write(trips(range(4), value=1.0), table_path, mw.WriterConfig(writer_id="w", lock=mw.InProcessLock()))
    before = _data_files(table_path)
    [done] = trips_table.timeline().completed_writes()
    t = done.requested_time
    _late_merge_publishes_nothing(trips_table, table_path, t, before, markers_listed=True)


def test_a_driver_write_checks_once_before_its_markers_and_once_per_published_file(trips_table, table_path, monkeypatch):
    """Every file is published after a check of its own; the driver adds one check before the
    markers of all files, not one more per file."""
    calls: list[str] = []
    real = guard.check_alive

    def counting(storage, instant_time, bound_s, pending, what):
        calls.append(what)
        return real(storage, instant_time, bound_s, pending, what)

    monkeypatch.setattr(guard, "check_alive", counting)
    data = pa.concat_tables([trips(range(20), date="2024-01-01"), trips(range(20, 40), date="2024-01-02")])
    r = mw.write(data, table_path, mw.WriterConfig(writer_id="w", lock=mw.InProcessLock(), operation="insert"))
    published = [p for p in _data_files(table_path) if not p.startswith(".hoodie")]
    assert r.files_written == len(published) > 1
    assert len(calls) == 1 + len(published)
    assert calls[0].startswith("the markers of")
    assert sorted(calls[1:]) == sorted(published)
    assert sorted(rows(hudi_read(table_path), ["id", "value"])) == sorted((str(i), 1.0) for i in range(40))


def test_a_beating_writer_lists_its_instant_once_and_a_later_lapse_still_stops_it(trips_table, table_path):
    """In the writer's process the timeline is listed at the first check only: later checks ask
    the heartbeat client, which fails for good once a beat came later than the bound (a
    rollback needs such a lapse first), so a file after the lapse is not published."""
    storage, cfg = trips_table.storage, trips_table.config
    t = "20240101000000000"
    tlmod.create_requested(storage, cfg, t)
    pending = guard.pending_files(cfg, t)
    now = [1000.0]
    client = HeartbeatClient(storage, interval_s=1.0, tolerable_misses=1, clock=lambda: now[0])
    client.start(t)
    listed: list[str] = []
    real = storage.list_names

    def counting(folder, prefix=""):
        listed.append(prefix)
        return real(folder, prefix)

    storage.list_names = counting
    try:
        names = [layout.data_file_path("2024-01-01", layout.DataFileName(layout.new_file_id(), "0-0-0", t).name)
                 for _ in range(3)]
        for rel in names[:2]:
            guard.write_checked(storage, t, None, pending, rel, lambda path: storage.write_bytes(path, b"x"))
        assert listed == [t], "one listing of the instant's timeline files for two files"
        now[0] += 5.0  # no beat for 5 s against a 2 s bound: the cleaner may roll it back now
        with pytest.raises(HeartbeatExpiredError, match=t):
            guard.write_checked(storage, t, None, pending, names[2], lambda path: storage.write_bytes(path, b"x"))
        assert [storage.exists(r) for r in names] == [True, True, False]
    finally:
        storage.list_names = real
        client.stop(t)
        client.close()
