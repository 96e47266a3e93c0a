"""Archival racing a timeline load: the load lists again instead of failing the batch.

The race is made deterministic: a wrapper around ``Storage.list_dir`` returns the timeline
listing and then, before the caller reads any instant file, runs a real archival that deletes
the oldest instants' files.
"""
from __future__ import annotations

import pytest

import multiwriter as mw
from multiwriter.table import timeline as tlmod
from multiwriter.storage import Storage
from tests.conftest import trips
from tests.oracle import hudi_read, rows


@pytest.fixture()
def archive_after_next_listing(monkeypatch, table_path):
    """Arm once: the next listing of the timeline directory is followed by an archival."""
    original = Storage.list_dir
    state = {"armed": False, "fired": 0}

    def list_dir(self, rel, **kw):
        out = original(self, rel, **kw)
        if state["armed"] and rel.endswith(".hoodie/timeline") and self.uri.endswith(table_path.rsplit("/", 1)[-1]):
            state["armed"] = False
            with mw.Cleaner(table_path, lock=mw.InProcessLock(), retain_commits=1, archive_keep_min=1,
                            archive_keep_max=2) as cleaner:
                state["fired"] += cleaner.run_once().archived
        return out

    monkeypatch.setattr(Storage, "list_dir", list_dir)
    # like a separate process: no instant metadata parsed earlier to answer from
    if hasattr(tlmod, "_MetadataCache"):
        monkeypatch.setattr(tlmod, "_CACHE", tlmod._MetadataCache(0))
    return state


def test_writer_resumes_while_the_cleaner_archives(trips_table, table_path, archive_after_next_listing):
    cfg = mw.WriterConfig(writer_id="ingest", lock=mw.InProcessLock())
    for k in range(6):
        mw.write(trips(range(10 * k, 10 * k + 10), value=k), table_path, cfg)
    archive_after_next_listing["armed"] = True
    # a new streaming writer: its first batch scans the whole timeline for its checkpoint
    r = mw.write(trips(range(5), value=9), table_path, mw.WriterConfig(writer_id="late", lock=mw.InProcessLock()), batch_id=0)
    assert archive_after_next_listing["fired"] >= 4
    assert r.instant is not None and not r.skipped
    got = rows(mw.Table.open(table_path).read(), ["id", "value"])
    assert len(got) == 60 and dict(got)["3"] == 9.0
    assert rows(hudi_read(table_path), ["id", "value"]) == got


def test_reader_loads_while_the_cleaner_archives(trips_table, table_path, archive_after_next_listing):
    cfg = mw.WriterConfig(writer_id="ingest", lock=mw.InProcessLock())
    for k in range(6):
        mw.write(trips(range(k, k + 3), value=k), table_path, cfg)
    archive_after_next_listing["armed"] = True
    t = mw.Table.open(table_path)
    tl = t.timeline()
    assert archive_after_next_listing["fired"] >= 4
    for i in tl.completed_writes():
        tl.commit_metadata(i)  # answered from the load: no file read can vanish now
    assert len(tl.completed_writes()) < 6  # the view is the fresh listing, not the stale one
    assert rows(t.read(), ["id", "value"]) == rows(hudi_read(table_path), ["id", "value"])


def test_a_base_rebuilt_from_a_later_listing(trips_table, table_path):
    """``as_of_completion``: what had completed by a commit's completion time, from a listing
    taken after more commits (the view a streaming write's tasks take of their instant's base)."""
    cfg = mw.WriterConfig(lock=mw.InProcessLock())
    mw.write(trips(range(3)), table_path, cfg)
    base = mw.Table.open(table_path).timeline().last_completed_write()
    mw.write(trips(range(3), ts=2, value=2.0), table_path, cfg)
    tl = mw.Table.open(table_path).timeline()
    view = tl.as_of_completion(base.completion_time)
    assert [i.requested_time for i in view.completed_writes()] == [base.requested_time]
    assert not view.pending() and tl.as_of_completion(None).instants == []
    snap = mw.Table.open(table_path).snapshot(timeline=view)
    assert {s.instant_time for s in snap.slices.values()} == {base.requested_time}
