"""Failures on Merge-on-Read tables are recovered as on Copy-on-Write ones: a failed deltacommit
is rolled back with its log files, the failed-write sweep and the orphan report judge log files
by the deltacommit named in them, a retried task's extra log file never shows, retention
deletes an old base together with the log files of its slice (by the completion-time slicing
rule), and archival keeps every log readable. Every read is compared with hudi-rs."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import multiwriter as mw
from multiwriter import faults, markers
from multiwriter.cleaner import archive, orphans
from multiwriter.instant_time import next_after, parse_time
from multiwriter.format import instant as inst
from multiwriter.format import layout
from multiwriter.table.files import LogFile, list_files
from multiwriter.format.log_file import LogFileName, encode_log_file, parse_log_file, read_log_blocks
from multiwriter.table.merged_slice import read_slice
from multiwriter.table.metadata import WriteStat, decode_records
from multiwriter.transaction import Transaction
from multiwriter.write.writer import commit_metadata
from tests.cleaner.conftest import (
    BOUND,
    HB,
    MISSES,
    deleted_paths,
    rollbacks,
    run_proc,
    wait_lapsed,
    writer_config,
)
from tests.conftest import trips, wait_hanging
from tests.oracle import hudi_read, rows
from tests.test_concurrency import result, spawn
from tests.test_faults import CRASHED_SESSION

COLS = ["id", "value"]


# -- helpers --------------------------------------------------------------------------------


def _same(path: str, as_of: str | None = None) -> list[tuple]:
    """Our read and hudi-rs's, which must agree; the rows."""
    ours = rows(mw.Table.open(path).read(as_of), COLS)
    assert ours == rows(hudi_read(path, as_of), COLS), f"hudi-rs disagrees (as of {as_of})"
    return ours


def _paths(table: mw.Table, t: str | None = None) -> tuple[list[str], list[str]]:
    """Base and log file paths on storage (of instant ``t`` when given)."""
    bases, logs = list_files(table.storage)
    return (sorted(f.path for f in bases if t is None or f.instant_time == t),
            sorted(f.path for f in logs if t is None or f.instant_time == t))


def _logs(table: mw.Table) -> list[LogFile]:
    return list_files(table.storage)[1]


def _expected(values: dict[int, float]) -> list[tuple]:
    return sorted(((str(k), v) for k, v in values.items()), key=repr)


def _compact(table: mw.Table, lock_provider) -> str:
    """A compaction of every file group, as Hudi completes one: a new base file per group named
    with the compaction's instant T (the slice's merged rows, original commit times kept), under
    a completed ``commit``. Returns T."""
    lock = lock_provider.for_table(table.table_id, table.storage)
    try:
        txn = Transaction(table, lock, writer_id="compactor", non_blocking=True)
        t = txn.begin(inst.COMMIT).requested_time
        tl = table.timeline()
        snap = table.snapshot(timeline=tl)
        schema = table.read_schema(tl, snap)
        stats = []
        for fs in snap.files():
            merged = read_slice(table.storage, fs, schema, table.config.ordering_field)
            name = layout.DataFileName(fs.file_id, layout.write_token(9), t).name
            merged = merged.set_column(merged.schema.get_field_index("_hoodie_file_name"), "_hoodie_file_name",
                                       pa.repeat(pa.scalar(name), merged.num_rows))
            rel = layout.data_file_path(fs.partition, name)
            markers.create(table.storage, t, fs.partition, name)
            pq.write_table(merged, table.storage.abs(rel))
            size = os.path.getsize(table.storage.abs(rel))
            stats.append(WriteStat(file_id=fs.file_id, path=rel, partition_path=fs.partition,
                                   prev_commit=fs.instant_time, num_writes=merged.num_rows, file_size=size))
        meta = commit_metadata(stats, table.schema(tl), table.name, "upsert")
        txn.commit(meta)
    finally:
        lock.close()
    return t


def _with_values(table: mw.Table, lf: LogFile, value: float) -> bytes:
    """The bytes of log file ``lf`` with every record's value replaced (another attempt's log
    of the same instant and group that wrote different rows)."""
    blocks = read_log_blocks(table.storage.read_bytes(lf.path), source=lf.path)
    [data] = [b for b in blocks if b.kind == "data"]
    recs = data.records
    recs = recs.set_column(recs.schema.get_field_index("value"), "value",
                           pc.add(pc.multiply(recs["value"], 0.0), value))
    return encode_log_file(instant_time=lf.instant_time, schema=json.loads(data.header["SCHEMA"]), records=recs)


def _other_attempt(lf: LogFile, token: str = "7-7-7") -> str:
    """The name of another task attempt's log file of the same group and instant."""
    return LogFileName(lf.file_id, lf.instant_time, lf.version, token).name


@pytest.fixture()
def mor_cleaners(cleaners):
    """Cleaners that leave compaction to the tests, which place compactions where they need one."""

    def make(path: str, lock, **kw):
        kw.setdefault("compaction", None)
        return cleaners(path, lock, **kw)

    return make


def _proc_args(table_path, zk_server, zk_base, **kw) -> dict:
    return {"path": table_path, "zk": zk_server.connect, "base": zk_base, "hb": HB, "misses": MISSES, **kw}


# -- 1. rollback of a failed deltacommit ---------------------------------------------------


def test_deltacommit_killed_after_its_files_is_rolled_back_with_its_logs_and_new_bases(
    mor_table, table_path, zk_server, zk_base, zk_lock, mor_cleaners
):
    mw.write(trips(["1"], value=1.0), table_path, writer_config(zk_lock(), "seed"))
    expected = _same(table_path)
    assert expected == [("1", 1.0)]
    p = run_proc("write", _proc_args(table_path, zk_server, zk_base, writer="doomed", ids=list(range(20))),
                 faults="after-data-files=kill@1")
    assert p.returncode == -9, p.stderr.read()
    [pending] = mor_table.timeline().pending()
    t = pending.requested_time
    assert pending.action == inst.DELTA_COMMIT
    bases, logs = _paths(mor_table, t)
    assert bases and logs, "the failed deltacommit appended a log to the seeded group and created new groups"
    assert _same(table_path) == expected, "nothing of a pending deltacommit is visible"

    cleaner = mor_cleaners(table_path, zk_lock(), observe_max_s=0)  # its first run does not wait to decide
    early = cleaner.run_once()
    assert early.rolled_back == [] and _paths(mor_table, t) == (bases, logs), "a writer not yet watched is left alone"

    wait_lapsed(mor_table, t, cleaner=cleaner)
    report = cleaner.run_once()
    assert report.rolled_back == [t] and report.files_deleted == len(bases) + len(logs)
    assert _paths(mor_table, t) == ([], [])
    assert not mor_table.storage.exists(layout.marker_dir(t))
    assert [i for i in mor_table.timeline().instants if i.requested_time == t] == []
    [rec] = rollbacks(mor_table)[t]
    assert rec["instantsRollback"] == [{"commitTime": t, "action": inst.DELTA_COMMIT}]
    assert deleted_paths(mor_table, rec) == set(bases) | set(logs), "successDeleteFiles lists the log files too"
    assert _same(table_path) == expected
    assert cleaner.run_once().rolled_back == []


def test_an_aborted_deltacommit_deletes_its_log_files(mor_table, table_path, zk_lock):
    mw.write(trips(range(8), value=1.0), table_path, writer_config(zk_lock(), "seed"))
    faults.configure("after-data-files=error")
    try:
        with pytest.raises(faults.InjectedFault):
            mw.write(trips(range(8), ts=2, value=2.0), table_path, writer_config(zk_lock(), "w"))
    finally:
        faults.configure(None)
    assert _paths(mor_table)[1] == [], "the abort deleted the log files its markers name"
    assert _same(table_path) == _expected({k: 1.0 for k in range(8)})


def test_a_rollback_without_markers_finds_the_log_files_by_listing(
    mor_table, table_path, zk_server, zk_base, zk_lock, mor_cleaners
):
    mw.write(trips(range(8), value=1.0), table_path, writer_config(zk_lock(), "seed"))
    p = run_proc("write", _proc_args(table_path, zk_server, zk_base, writer="doomed", ids=list(range(8))),
                 faults="after-data-files=kill@1")
    assert p.returncode == -9, p.stderr.read()
    [pending] = mor_table.timeline().pending()
    t = pending.requested_time
    logs = _paths(mor_table, t)[1]
    assert logs and _paths(mor_table, t)[0] == []
    shutil.rmtree(mor_table.storage.abs(layout.marker_dir(t)))  # lost: only a listing finds the files
    report = mor_cleaners(table_path, zk_lock()).run_once()
    assert report.rolled_back == [t]
    assert _paths(mor_table, t) == ([], [])
    assert deleted_paths(mor_table, rollbacks(mor_table)[t][0]) == set(logs)
    assert _same(table_path) == _expected({k: 1.0 for k in range(8)})


# -- 2. the failed-write sweep and orphans ------------------------------------------------


def test_sweep_and_orphans_judge_log_files_by_their_deltacommit(mor_table, table_path, zk_lock, mor_cleaners):
    cfg = writer_config(zk_lock(), "w")
    mw.write(trips(range(8), value=1.0), table_path, cfg)
    first = mor_table.timeline().completed_writes()[0].requested_time
    mw.write(trips(range(8), ts=2, value=2.0), table_path, cfg)
    expected = _same(table_path)
    committed = _logs(mor_table)
    assert committed
    src = committed[0]
    # a log file of an instant that is neither completed nor pending (a zombie's, after its rollback)
    ghost_t = next_after(first)
    ghost = layout.data_file_path(src.partition, LogFileName(src.file_id, ghost_t, 1, "0-0-0").name)
    mor_table.storage.put_if_absent(ghost, _with_values(mor_table, src, 999.0).replace(
        src.instant_time.encode(), ghost_t.encode()))
    # a losing task attempt's log of a completed deltacommit: its commit names the other one
    loser = layout.data_file_path(src.partition, _other_attempt(src))
    mor_table.storage.put_if_absent(loser, _with_values(mor_table, src, 777.0))
    assert rows(mw.Table.open(table_path).read(), COLS) == expected, "neither is visible to our reader"

    tl = mor_table.timeline()
    ctx = mor_cleaners(table_path, zk_lock())._context()
    found = {o.path for o in orphans.find(ctx, tl, min_age_s=0)}
    assert ghost in found and not {lf.path for lf in committed} & found, "a committed log is never an orphan"

    while time.time() - parse_time(max(ghost_t, src.instant_time)) <= BOUND:  # the sweep's safe age
        time.sleep(0.1)
    report = mor_cleaners(table_path, zk_lock(), failed_write_min_age_bounds=1).run_once()
    assert sorted(report.failed_writes_swept) == sorted([ghost, loser])
    assert all(mor_table.storage.exists(lf.path) for lf in committed), "no log of a completed instant named by it"
    assert _same(table_path) == expected


# -- 3. task retries: two log files of one instant and group -------------------------------


def test_a_retried_tasks_extra_log_file_is_reconciled_and_never_visible(
    mor_table, table_path, zk_lock, tmp_path, monkeypatch
):
    cfg = writer_config(zk_lock(), "w")
    mw.write(trips(range(8), value=1.0), table_path, cfg)
    monkeypatch.setenv("MULTIWRITER_FAULT_DIR", str(tmp_path))
    faults.configure("after-data-files=hang")
    box: dict = {}
    th = threading.Thread(target=lambda: box.setdefault(
        "r", mw.write(trips(range(8), ts=2, value=2.0), table_path, writer_config(zk_lock(), "w2"))))
    try:
        th.start()
        assert wait_hanging(tmp_path, th)
        [pending] = mor_table.timeline().pending()
        t = pending.requested_time
        lf = next(x for x in _logs(mor_table) if x.instant_time == t)
        extra = _other_attempt(lf)
        markers.create(mor_table.storage, t, lf.partition, extra)  # a task attempt marks, then writes
        mor_table.storage.put_if_absent(layout.data_file_path(lf.partition, extra), _with_values(mor_table, lf, 777.0))
    finally:
        (tmp_path / "after-data-files.release").touch()
        th.join(60)
        faults.configure(None)
    assert box["r"].instant.requested_time == t
    assert not mor_table.storage.exists(layout.data_file_path(lf.partition, extra)), "reconcile deleted it"
    assert mor_table.storage.exists(lf.path)
    assert _same(table_path) == _expected({k: 2.0 for k in range(8)})

    # one that outlived reconciliation (still writing when the commit landed): our reader takes
    # the file the commit names, never the other; the sweep deletes it, then hudi-rs agrees
    late = layout.data_file_path(lf.partition, _other_attempt(lf, "8-8-8"))
    mor_table.storage.put_if_absent(late, _with_values(mor_table, lf, 777.0))
    assert rows(mw.Table.open(table_path).read(), COLS) == _expected({k: 2.0 for k in range(8)})
    from multiwriter.table.view import TimelineView

    view = TimelineView(mor_table.timeline())
    assert view.named(lf) and not view.named(parse_and_wrap(lf, "8-8-8"))
    swept = orphans.sweep_failed_writes(_ctx(table_path, zk_lock), min_age_s=0)
    assert swept == [late]
    assert _same(table_path) == _expected({k: 2.0 for k in range(8)})


def parse_and_wrap(lf: LogFile, token: str) -> LogFile:
    name = _other_attempt(lf, token)
    parsed = parse_log_file(name)
    assert parsed is not None
    return LogFile(lf.partition, parsed.file_id, parsed.instant_time, parsed.version, name)


def _ctx(table_path: str, zk_lock):
    from multiwriter.cleaner.job import Cleaner

    c = Cleaner(table_path, lock=zk_lock(), heartbeat_interval_s=HB, heartbeat_tolerable_misses=MISSES)
    return c._context()


# -- 4 and 5. retention and archival by the slicing rule ------------------------------------


def _clean_deleted(table: mw.Table) -> set[str]:
    tl = table.timeline()
    out = set()
    for i in tl.completed(frozenset({inst.CLEAN})):
        rec = decode_records(tl.read_bytes(i), source=tl.path_of(i))[0]
        for part, pm in rec["partitionMetadata"].items():
            out.update(layout.data_file_path(part, n) for n in pm["successDeleteFiles"])
    return out


def test_retention_and_archival_follow_the_slicing_rule_across_a_compaction(
    mor_table, table_path, zk_lock, mor_cleaners, tmp_path, monkeypatch
):
    cfg = writer_config(zk_lock(), "w")
    mw.write(trips(range(8), ts=1, value=1.0), table_path, cfg)
    mw.write(trips(range(8), ts=2, value=2.0), table_path, cfg)
    mw.write(trips(range(8), ts=3, value=3.0), table_path, cfg)
    old_bases, old_logs = _paths(mor_table)
    # a deltacommit D that runs across a compaction T: requested before T, completed after it
    monkeypatch.setenv("MULTIWRITER_FAULT_DIR", str(tmp_path))
    faults.configure("after-data-files=hang")
    box: dict = {}
    slow = threading.Thread(target=lambda: box.setdefault(
        "r", mw.write(trips(range(4), ts=4, value=4.0), table_path,
                      mw.WriterConfig(writer_id="slow", lock=zk_lock(), executor="driver", heartbeat_interval_s=5.0))))
    try:
        slow.start()
        assert wait_hanging(tmp_path, slow)
        t_compact = _compact(mor_table, zk_lock())
    finally:
        (tmp_path / "after-data-files.release").touch()
        slow.join(60)
        faults.configure(None)
    d = box["r"].instant
    assert d.requested_time < t_compact < d.completion_time
    d_logs = _paths(mor_table, d.requested_time)[1]
    assert d_logs
    mw.write(trips(range(4, 8), ts=5, value=5.0), table_path, cfg)
    mw.write(trips(range(4, 8), ts=6, value=6.0), table_path, cfg)
    want = _expected({**{k: 4.0 for k in range(4)}, **{k: 6.0 for k in range(4, 8)}})
    assert _same(table_path) == want, "D's log belongs to the compacted slice (it completed after T)"
    as_of_d = _same(table_path, d.requested_time)

    # E = D's requested time: the old slice is still what a retained snapshot reads
    r = mor_cleaners(table_path, zk_lock(), retain_commits=4).run_once()
    assert r.old_versions_deleted == 0 and _paths(mor_table)[0] == sorted(old_bases + _paths(mor_table, t_compact)[0])
    assert _same(table_path, d.requested_time) == as_of_d

    # E past T: the old bases go with the logs completed before T; D's log stays with T
    r = mor_cleaners(table_path, zk_lock(), retain_commits=2).run_once()
    assert r.old_versions_deleted == len(old_bases) + len(old_logs)
    bases, logs = _paths(mor_table)
    assert not set(old_bases) & set(bases) and not set(old_logs) & set(logs)
    assert set(d_logs) <= set(logs), "a log sliced under the kept base is never deleted"
    assert _clean_deleted(mor_table) == set(old_bases) | set(old_logs), "the clean metadata lists the log files"
    assert _same(table_path) == want
    for i in mor_table.timeline().completed_writes()[-2:]:
        _same(table_path, i.requested_time)

    # archival must not archive D while its log is on storage: readers would then slice it by
    # its requested time (no completion time off the active timeline), under the old base
    tl = mor_table.timeline()
    archive.compact_metadata_table(tl)  # as archive() does when archival waits for it
    chosen, rule = archive.choose(tl, keep_min=1, keep_max=2, retain_commits=2)
    assert chosen and all(i.requested_time < d.requested_time for i in chosen)
    assert rule is not None and "deltacommit" in rule
    r = mor_cleaners(table_path, zk_lock(), retain_commits=2, archive_keep_min=1, archive_keep_max=2).run_once()
    assert r.archived == len(chosen)
    assert mor_table.timeline().find(d.requested_time) is not None
    assert _same(table_path) == want

    # a second compaction and two more commits: retention deletes T's slice, D's log with it,
    # and archival moves past D
    t2 = _compact(mor_table, zk_lock())
    mw.write(trips(range(2), ts=7, value=7.0), table_path, cfg)
    mw.write(trips(range(2), ts=8, value=8.0), table_path, cfg)
    want = _expected({**{k: 8.0 for k in range(2)}, **{k: 4.0 for k in range(2, 4)}, **{k: 6.0 for k in range(4, 8)}})
    assert _same(table_path) == want
    r = mor_cleaners(table_path, zk_lock(), retain_commits=2, archive_keep_min=1, archive_keep_max=2).run_once()
    assert not set(d_logs) & set(_paths(mor_table)[1])
    assert mor_table.timeline().find(d.requested_time) is None, "D archived once its log is gone"
    assert mor_table.timeline().earliest_time() > t2 or mor_table.timeline().find(t2) is not None
    assert _same(table_path) == want


def test_archived_deltacommits_stay_readable(mor_table, table_path, zk_lock, mor_cleaners):
    cfg = writer_config(zk_lock(), "w")
    state: dict[int, float] = {}
    for n in range(8):
        ids = [n % 5, (n + 2) % 7, 10 + n]
        mw.write(trips(ids, ts=n + 1, value=float(n + 1)), table_path, cfg)
        state.update({k: float(n + 1) for k in ids})
    before = _same(table_path)
    assert before == _expected(state)
    logs_before = _paths(mor_table)[1]
    r = mor_cleaners(table_path, zk_lock(), retain_commits=2, archive_keep_min=2, archive_keep_max=3).run_once()
    assert r.archived >= 5 and r.old_versions_deleted == 0
    assert archive.load_history(mor_table)
    assert _paths(mor_table)[1] == logs_before, "archival deletes no committed log"
    assert _same(table_path) == before


# -- fault points on Merge-on-Read (tests/test_faults.py's protocol) -------------------------


def mor_invariants(path: str) -> None:
    """No pending instant, every base and log file named by a completed commit, no markers or
    heartbeats left, our read equal to hudi-rs's."""
    t = mw.Table.open(path)
    tl = t.timeline()
    assert tl.pending() == [], f"pending instants left: {tl.pending()}"
    named = orphans.named_files([s for i in tl.completed_writes() for s in tl.commit_metadata(i).all_stats()])
    bases, logs = list_files(t.storage)
    stray = {f.path for f in [*bases, *logs] if f.name not in named}
    assert not stray, f"files no completed commit names: {stray}"
    assert not t.storage.walk_files(layout.TEMP_DIR), "markers left behind"
    assert not t.storage.list_dir(layout.HEARTBEAT_DIR, files_only=True), "heartbeats left behind"
    _same(path)


WRITER_POINTS = ["after-requested", "after-inflight", "after-data-files", "after-lock-acquired", "before-complete",
                 "after-complete"]


@pytest.mark.parametrize("point", WRITER_POINTS)
def test_error_at_each_point_of_a_deltacommit_aborts_cleanly(point, mor_table, table_path):
    cfg = mw.WriterConfig(lock=mw.InProcessLock(), writer_id="w", heartbeat_interval_s=1.0)
    mw.write(trips(range(4), value=1.0), table_path, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="seed"))
    faults.configure(f"{point}=error")
    try:
        with pytest.raises(faults.InjectedFault):
            mw.write(trips(range(2, 12), value=2.0), table_path, cfg, batch_id=0)
    finally:
        faults.configure(None)
    mor_invariants(table_path)
    landed = point == "after-complete"
    want = {**{k: 1.0 for k in range(4)}, **({k: 2.0 for k in range(2, 12)} if landed else {})}
    assert _same(table_path) == _expected(want)
    again = mw.write(trips(range(2, 12), value=2.0), table_path, cfg, batch_id=0)
    assert again.skipped == landed
    mor_invariants(table_path)


def test_deltacommit_crash_after_complete_is_cleaned_up_and_its_replay_skipped(zk_server, zk_base, mor_table,
                                                                                table_path):
    """The one crash point of a deltacommit with no other test on Merge-on-Read: past the commit
    point, the cleaner clears the completed deltacommit's markers and heartbeat, and the replay
    is skipped by the checkpoint in its metadata. The others are covered elsewhere: a crash with
    the deltacommit's files on storage (after-data-files) by
    test_deltacommit_killed_after_its_files_is_rolled_back_with_its_logs_and_new_bases (the
    rollback, log files included) and tests/test_merge_on_read_faults.py's
    test_writer_killed_between_log_appends_is_rolled_back (one-shot cleaner process, then the
    replay lands); a crash holding the lock (before-complete) by tests/test_faults.py's
    test_writer_crash_at_each_point_is_recovered, and that rollback leaves the same files."""
    mw.write(trips(range(10), value=1.0), table_path, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="seed"))
    args = dict(zk=zk_server.connect, base=zk_base, path=table_path, writer="w", ids=list(range(5, 25)), value=2,
                batch_id=0)
    # it dies holding the lock: a short session lets the lock node go in 4 s (CRASHED_SESSION)
    p = spawn("write", {**args, **CRASHED_SESSION}, {"MULTIWRITER_FAULTS": "after-complete=crash"})
    p.communicate(timeout=120)
    assert p.returncode == 137
    table = mw.Table.open(table_path)
    landed = table.timeline().completed_writes()[-1].requested_time
    assert table.storage.exists(layout.marker_dir(landed)), "the crash left the completed deltacommit's markers"
    # the one-shot cleaner watches the crashed writer's heartbeat for its bound before deciding
    assert result(spawn("clean", dict(zk=zk_server.connect, base=zk_base, path=table_path)))["ok"]
    mor_invariants(table_path)
    assert not table.storage.exists(layout.marker_dir(landed))
    want = {**{k: 1.0 for k in range(10)}, **{k: 2.0 for k in range(5, 25)}}
    assert _same(table_path) == _expected(want)
    again = result(spawn("write", args))
    assert again["ok"] and again["skipped"]
    mor_invariants(table_path)
    assert _same(table_path) == _expected({**{k: 1.0 for k in range(5)}, **{k: 2.0 for k in range(5, 25)}})


# -- what archival itself sweeps, and a pending compaction's files ---------------------------


def test_archival_sweeps_a_losing_attempts_log_before_its_commit_leaves_the_timeline(
    mor_table, table_path, zk_lock, mor_cleaners
):
    """Once a deltacommit is archived its stats are no longer checked (its files count as
    committed), so archival deletes a log file of it that its commit does not name first."""
    cfg = writer_config(zk_lock(), "w")
    for n in range(6):
        mw.write(trips(range(6), ts=n + 1, value=float(n + 1)), table_path, cfg)
    expected = _same(table_path)
    oldest = mor_table.timeline().completed_writes()[1].requested_time  # its first deltacommit
    src = next(lf for lf in _logs(mor_table) if lf.instant_time == oldest)
    loser = layout.data_file_path(src.partition, _other_attempt(src))
    mor_table.storage.put_if_absent(loser, _with_values(mor_table, src, 777.0))
    ctx = mor_cleaners(table_path, zk_lock())._context()
    r = archive.archive(ctx, keep_min=1, keep_max=2, retain_commits=1)
    assert r.archived and mor_table.timeline().find(oldest) is None
    assert r.swept == [loser] and mor_table.storage.exists(src.path)
    assert _same(table_path) == expected


def test_a_pending_compactions_base_files_are_no_orphans(mor_table, table_path, zk_lock, mor_cleaners):
    cfg = writer_config(zk_lock(), "w")
    mw.write(trips(range(6), value=1.0), table_path, cfg)
    mw.write(trips(range(6), ts=2, value=2.0), table_path, cfg)
    lock = zk_lock().for_table(mor_table.table_id, mor_table.storage)
    try:
        txn = Transaction(mor_table, lock, writer_id="planner")
        t = txn.begin(inst.COMPACTION).requested_time  # a compaction planned, its base being written
    finally:
        lock.close()
    src = mor_table.snapshot().files()[0]
    base = layout.data_file_path(src.partition, layout.DataFileName(src.file_id, "0-0-0", t).name)
    shutil.copyfile(mor_table.storage.abs(src.path), mor_table.storage.abs(base))
    ctx = mor_cleaners(table_path, zk_lock())._context()
    assert orphans.find(ctx, mor_table.timeline(), min_age_s=0) == []
    assert all(f.path != base for f in orphans.failed_write_files(ctx, min_age_s=0))
    assert _same(table_path) == _expected({k: 2.0 for k in range(6)}), "a pending compaction's base is not read"
