"""Archival's deletion of the archived instants' timeline files, cut short at every point.

Archival writes the history first, then deletes the archived instants' files: their requested
and inflight files in one batch request (whose objects a store deletes in no given order, and
any of which may fail), then their completed files one by one, oldest first. Whatever prefix of
that ran, two things hold for readers and writers until the next run finishes it: no instant
looks pending (it keeps its completed file while any of its other files remain), and the
instants left active are a suffix of the timeline (an archived commit in the middle would make
its files look uncommitted, and a writer would merge against an older slice).

Every crash state is enumerated (each prefix of the deletions, and every subset of the batch),
on the real plan of :func:`multiwriter.cleaner.archive._delete_instant_files`; the same check
finds the states that break the rules when the completed files go in the batch too.
"""
from __future__ import annotations

from itertools import combinations
from types import SimpleNamespace

import numpy as np
import pyarrow as pa

import multiwriter as mw
from multiwriter.cleaner import archive
from multiwriter.format import instant as inst

SCHEMA = pa.schema([("id", pa.string()), ("ts", pa.int64())])


class _Recorder:
    """Records the deletions a plan asks for, in order; deletes nothing."""

    def __init__(self) -> None:
        self.events: list[list[str]] = []

    def delete_many(self, rels) -> None:
        self.events.append(list(rels))

    def delete(self, rel: str) -> bool:
        self.events.append([rel])
        return True


def _crash_states(files: set[str], events: list[list[str]]):
    """Every set of files left when the deletions stop part-way: after each whole event, and
    inside a batch event after any subset of it."""
    left = set(files)
    yield set(left)
    for ev in events:
        for k in range(1, len(ev)):
            for gone in combinations(ev, k):
                yield left - set(gone)
        left -= set(ev)
        yield set(left)


def _violations(left: set[str], order: list[str]) -> list[str]:
    by_time: dict[str, list[inst.Instant]] = {}
    for rel in left:
        i = inst.decode_file_name(rel.rsplit("/", 1)[-1])
        if i is not None:
            by_time.setdefault(i.requested_time, []).append(i)
    bad = [f"{t} looks pending" for t, states in by_time.items() if not any(s.is_completed for s in states)]
    active = [t for t in order if t in by_time]
    if active != order[len(order) - len(active):]:
        bad.append(f"active instants {active} are not a suffix of {order}")
    return bad


def _table(tmp_path) -> tuple[object, list[inst.Instant]]:
    uri = str(tmp_path / "t")
    mw.Table.create(uri, name="t", schema=SCHEMA, record_key="id", ordering_field="ts")
    cfg = mw.WriterConfig(writer_id="w", executor="driver", lock=mw.InProcessLock())
    for ts in range(5):
        ids = np.arange(10) + 10 * ts
        mw.write(pa.table({"id": [f"k{i}" for i in ids], "ts": np.full(10, ts, np.int64)}, schema=SCHEMA), uri, cfg)
    tl = mw.Table.open(uri).timeline()
    return tl, sorted(tl.completed_writes(), key=lambda i: i.requested_time)


def test_every_crash_state_of_archivals_deletions_keeps_both_rules(tmp_path):
    tl, done = _table(tmp_path)
    chosen = done[:3]
    rec = _Recorder()
    archive._delete_instant_files(SimpleNamespace(storage=rec), tl, chosen)
    files = {tl.path_of(f) for f in tl.instants}
    order = [i.requested_time for i in done]
    assert len(rec.events) == 1 + len(chosen), rec.events  # one batch, then each completed file
    states = list(_crash_states(files, rec.events))
    assert len(states) > 60
    for left in states:
        assert not _violations(left, order), (sorted(left), _violations(left, order))
    assert states[-1] == {tl.path_of(f) for f in tl.instants if f.requested_time not in {i.requested_time for i in chosen}}


def test_the_check_finds_broken_states_when_completed_files_go_in_the_batch(tmp_path):
    tl, done = _table(tmp_path)
    chosen = done[:3]
    every = [tl.path_of(f) for i in chosen for f in archive._files_of(tl, i)]  # one unordered batch
    files = {tl.path_of(f) for f in tl.instants}
    order = [i.requested_time for i in done]
    found = [v for left in _crash_states(files, [every]) for v in _violations(left, order)]
    assert any("looks pending" in v for v in found) and any("not a suffix" in v for v in found), found[:5]


def test_an_archival_stopped_between_its_batch_and_its_completed_files_is_finished(tmp_path):
    """Archival stopped at ``mid-archival`` (its requested and inflight files deleted, no
    completed file yet), with the metadata table on: no instant looks pending, hudi-rs reads
    every row, and the next run finishes the archival with nothing archived twice."""
    from multiwriter import faults
    from tests.oracle import hudi_read

    uri = str(tmp_path / "t")
    mw.Table.create(uri, name="t", schema=SCHEMA, record_key="id", ordering_field="ts", metadata=True)
    cfg = mw.WriterConfig(writer_id="w", executor="driver", lock=mw.InProcessLock())
    for ts in range(9):
        ids = np.arange(10) + 10 * ts
        mw.write(pa.table({"id": [f"k{i}" for i in ids], "ts": np.full(10, ts, np.int64)}, schema=SCHEMA), uri, cfg)
    settings = dict(lock=cfg.lock, retain_commits=2, archive_keep_min=3, archive_keep_max=4, clustering=None)
    faults.configure("mid-archival=error")
    try:
        with mw.Cleaner(uri, **settings) as cleaner:
            report = cleaner.run_once(raise_errors=False)
    finally:
        faults.configure(None)
    assert any("injected fault at mid-archival" in e for e in report.errors), report.errors
    tl = mw.Table.open(uri).timeline()
    assert not [i for i in tl.latest_states() if i.is_pending], tl.latest_states()
    assert hudi_read(uri).num_rows == 90 and mw.Table.open(uri).read(columns=["id"]).num_rows == 90
    with mw.Cleaner(uri, **settings) as cleaner:
        cleaner.run_once()
    after = mw.Table.open(uri).timeline()
    archived = {a.requested_time for a in archive.load_history(mw.Table.open(uri))}
    active = {i.requested_time for i in after.latest_states()}
    assert archived and not archived & active
    assert len(archive.load_history(mw.Table.open(uri))) == len(archived)  # none archived twice
    assert hudi_read(uri).num_rows == 90 and mw.Table.open(uri).read(columns=["id"]).num_rows == 90
