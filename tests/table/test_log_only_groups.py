"""File groups with log files and no base file, as Hudi's non-blocking Spark and Flink writers
start a bucket (tables built with our log-file codec under JVM-style deltacommits): read in
every query type, written into by our writer (a log, never a base that would hide them) and
compacted, ours or a JVM writer's plan. hudi-rs reads no log-only group, so before compaction
the expected rows are literal, each case naming the Hudi rule it follows; after compaction
hudi-rs agrees."""
from __future__ import annotations

import pyarrow as pa

import multiwriter as mw
from multiwriter.format import instant as inst
from multiwriter.table.files import FileSlice, LogFile, list_files
from multiwriter.table.metadata import CommitMetadata, WriteStat
from multiwriter.table import timeline as tlmod
from multiwriter.table.view import TimelineView
from tests.conftest import trips
from tests.oracle import hudi_read, rows
from tests.table.jvm_style import DATE, at, bucket_group, deltacommit, jvm_compaction_plan, keys_in_bucket

COLS = ["id", "ts", "value"]
A, B, C = keys_in_bucket(1, 3)
GROUP = bucket_group(1)


def _values(table_path: str, **kw) -> dict[str, float]:
    return dict(rows(mw.Table.open(table_path).read(**kw), ["id", "value"]))


def _cfg(w: str = "ours") -> mw.WriterConfig:
    return mw.WriterConfig(writer_id=w, lock=mw.InProcessLock())


def _cleaner(path: str, delta_commits: int = 1) -> mw.Cleaner:
    """A cleaner that also executes JVM writers' plans (no JVM compactor serves these tables)."""
    return mw.Cleaner(path, lock=mw.InProcessLock(), clustering=None, heartbeat_interval_s=1.0,
                      heartbeat_tolerable_misses=1,
                      compaction=mw.CompactionConfig(delta_commits=delta_commits, execute_foreign_plans=True))


def _bases(path: str) -> list[str]:
    bases, _ = list_files(mw.Table.open(path).storage)
    return [b.name for b in bases if b.file_id == GROUP]


# -- the slicing rule, literal cases (HoodieFileGroup.addLogFile / getBaseInstantTime) ----------


def _commit_base(table: mw.Table, requested: str, completed: str, file_id: str, name: str) -> None:
    stat = WriteStat(file_id=file_id, path=f"{DATE}/{name}", partition_path=DATE)
    tlmod.create_requested(table.storage, table.config, requested, inst.COMMIT)
    tlmod.create_completed(table.storage, table.config, requested, completed, inst.COMMIT,
                           data=CommitMetadata({DATE: [stat]}).to_bytes())


def test_slicing_rule_literal_cases(mor_table):
    """g: log L1 (requested 1, completed 2), base B5 (5 -> 6), log L3 (3 -> 7); h: log L8 (8 -> 9).
    Hudi adds the base first, then the logs in deltacommit order: L1 completed before every base
    and opens a slice of its own keyed by its deltacommit (getBaseInstantTime: no base at or
    before its completion); L3 completed after B5 and joins B5's slice; h has only L8: a
    log-only slice keyed 8. As of 4, B5 is not visible: g's latest slice is the log-only one
    with L1 and L3."""
    g, h = bucket_group(1), bucket_group(2)
    l1 = deltacommit(mor_table, at(1), at(2), g, upserts=[(A, 1, 1.0)])
    l3 = deltacommit(mor_table, at(3), at(7), g, upserts=[(A, 3, 3.0)])
    l8 = deltacommit(mor_table, at(8), at(9), h, upserts=[(C, 8, 8.0)])
    b5 = f"{g}_0-1-0_{at(5)}.parquet"
    _commit_base(mor_table, at(5), at(6), g, b5)
    view = TimelineView(mor_table.timeline())
    bases = [FileSlice(DATE, g, at(5), b5)]
    logs = [LogFile(DATE, g, at(1), 1, l1), LogFile(DATE, g, at(3), 1, l3), LogFile(DATE, h, at(8), 1, l8)]
    latest = view.with_logs(view.latest_slices(bases), bases, logs)
    assert {k: (s.instant_time, s.name, [lf.name for lf in s.logs]) for k, s in latest.items()} == {
        (DATE, g): (at(5), b5, [l3]),
        (DATE, h): (at(8), "", [l8]),
    }
    as_of = view.with_logs(view.latest_slices(bases, at(4)), bases, logs, at(4))
    assert {k: (s.instant_time, s.has_base, [lf.name for lf in s.logs]) for k, s in as_of.items()} == {
        (DATE, g): (at(1), False, [l1, l3]),
    }


# -- reading -------------------------------------------------------------------------------------


def test_a_log_only_group_is_read_in_snapshot_as_of_and_incremental_queries(mor_table, table_path):
    deltacommit(mor_table, at(1), at(2), GROUP, upserts=[(A, 1, 1.0), (B, 1, 1.0)])
    deltacommit(mor_table, at(3), at(4), GROUP, upserts=[(A, 2, 2.0)])
    assert _values(table_path) == {A: 2.0, B: 1.0}
    assert _values(table_path, as_of=at(1)) == {A: 1.0, B: 1.0}
    t = mw.Table.open(table_path)
    assert dict(rows(t.read_incremental(start=at(2)), ["id", "value"])) == {A: 2.0}
    assert dict(rows(t.read_incremental(), ["id", "value"])) == {A: 2.0, B: 1.0}
    assert t.read(read_optimized=True).num_rows == 0  # base files only: the group has none yet


# -- writing into one ----------------------------------------------------------------------------


def test_our_writer_appends_a_log_to_a_log_only_bucket_never_a_base_that_hides_it(mor_table, table_path):
    deltacommit(mor_table, at(1), at(2), GROUP, upserts=[(A, 1, 1.0), (B, 1, 1.0)])
    mw.write(pa.concat_tables([trips([A], ts=5, value=5.0), trips([C], ts=5, value=5.0)]), table_path, _cfg())
    assert _bases(table_path) == []  # a base at our instant would become the latest slice, hiding a and b
    assert _values(table_path) == {A: 5.0, B: 1.0, C: 5.0}


# -- compacting one ------------------------------------------------------------------------------


def test_our_compaction_of_a_log_only_group_keeps_its_rows_and_hudi_rs_then_agrees(mor_table, table_path):
    deltacommit(mor_table, at(1), at(2), GROUP, upserts=[(A, 1, 1.0), (B, 1, 1.0)])
    mw.write(trips([C], ts=5, value=5.0), table_path, _cfg())
    before = _values(table_path)
    assert before == {A: 1.0, B: 1.0, C: 5.0}
    c = _cleaner(table_path)
    try:
        assert c.run_once().compaction_instants
    finally:
        c.close()
    assert len(_bases(table_path)) == 1
    assert _values(table_path) == before
    t = mw.Table.open(table_path)
    assert rows(t.read(), COLS) == rows(hudi_read(table_path), COLS)


def test_a_jvm_plan_of_a_log_only_slice_waiting_to_run_is_executed(mor_table, table_path):
    """A JVM writer scheduled it (no cleaner of ours in its metadata, no heartbeat: Hudi beats
    only while a compaction executes): a plan waiting to run, which any compactor runs."""
    log = deltacommit(mor_table, at(1), at(2), GROUP, upserts=[(A, 1, 1.0), (B, 1, 1.0)])
    jvm_compaction_plan(mor_table, at(3), GROUP, [log])
    c = _cleaner(table_path, delta_commits=100)  # plans nothing of its own
    try:
        assert c.run_once().compaction_instants == [at(3)]
    finally:
        c.close()
    assert _bases(table_path) and _bases(table_path)[0].endswith(f"_{at(3)}.parquet")
    assert _values(table_path) == {A: 1.0, B: 1.0}
    assert rows(mw.Table.open(table_path).read(), COLS) == rows(hudi_read(table_path), COLS)


def test_a_jvm_plan_we_cannot_execute_is_left_pending_never_deleted(mor_table, table_path):
    log = deltacommit(mor_table, at(1), at(2), GROUP, upserts=[(A, 1, 1.0)])
    jvm_compaction_plan(mor_table, at(3), GROUP, [log, log.replace(at(1), at(0))])  # names a log never written
    c = _cleaner(table_path, delta_commits=100)
    try:
        report = c.run_once(raise_errors=False)
    finally:
        c.close()
    assert report.compaction_instants == []
    pending = mw.Table.open(table_path).timeline().find(at(3), inst.COMPACTION)
    assert pending is not None and pending.is_pending
    assert _values(table_path) == {A: 1.0}


def test_the_cleaner_deletes_a_log_only_slice_once_a_compacted_slice_is_retained(mor_table, table_path):
    log = deltacommit(mor_table, at(1), at(2), GROUP, upserts=[(A, 1, 1.0), (B, 1, 1.0)])
    c = _cleaner(table_path)
    try:
        assert c.run_once().compaction_instants
    finally:
        c.close()
    for n in range(3):
        mw.write(trips([C], ts=10 + n, value=float(10 + n)), table_path, _cfg())
    expect = _values(table_path)
    assert expect == {A: 1.0, B: 1.0, C: 12.0}
    c = mw.Cleaner(table_path, lock=mw.InProcessLock(), clustering=None, compaction=None, retain_commits=1,
                   heartbeat_interval_s=1.0, heartbeat_tolerable_misses=1)
    try:
        c.run_once()
    finally:
        c.close()
    _, logs = list_files(mw.Table.open(table_path).storage)
    assert log not in {lf.name for lf in logs}
    assert _values(table_path) == expect
    assert rows(mw.Table.open(table_path).read(), COLS) == rows(hudi_read(table_path), COLS)
