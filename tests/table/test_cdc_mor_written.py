"""Merge-on-Read writes of a table with ``hoodie.table.cdc.enabled``, as Hudi writes them.

Hudi's append handle (``HoodieAppendHandle.populateWriteStatAndFetchFileSlice``, table versions 8
and 9) records in a deltacommit's write stat the group's latest slice when the table logs changes:
``prevCommit`` its base instant, ``baseFile`` its base file name, ``logFiles`` its log files and
then the file written (``updateWriteStat``), for its CDC query's ``LOG_FILE`` case; it writes no
CDC log file. A compaction of a bucket-indexed table logs its changes (``HoodieMergeHandleFactory``
picks ``HoodieMergeHandleWithChangeLog`` when ``isYieldingPureLogForMor``). No reader may take the
earlier log files a stat names for files its commit wrote."""
from __future__ import annotations

import dataclasses

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import multiwriter as mw
from multiwriter import faults
from multiwriter.cleaner import compaction
from multiwriter.format import cdc_log as cl
from multiwriter.format import instant as inst
from multiwriter.format import layout
from multiwriter.format.log_file import parse_log_file
from multiwriter.table import cdc, metadata_files
from multiwriter.table import properties as props
from multiwriter.table.compaction_plan import decode_plan
from multiwriter.table.files import list_files
from multiwriter.table.metadata import WriteStat, named_files
from tests.conftest import compact_slices, trips
from tests.oracle import hudi_read
from tests.table.test_cdc import Model, cdc_records, each_commit_read


def _enable(path: str) -> None:
    props.modify(mw.Table.open(path).storage, lambda p: {**p, cdc.ENABLED_KEY: "true"})


def _rows(t: pa.Table) -> list[tuple]:
    return sorted((r["id"], r["ts"], r["value"]) for r in t.select(["id", "ts", "value"]).to_pylist())


def _history(path: str) -> tuple[Model, list[str]]:
    """An optimistic and a non-blocking writer: inserts, updates (one losing on ts), deletes, a
    new group, a compaction, then more updates and deletes on the compacted slices."""
    lock = mw.InProcessLock()
    occ = mw.WriterConfig(writer_id="occ", lock=lock, concurrency="optimistic")
    nb = mw.WriterConfig(writer_id="nb", lock=lock, concurrency="non_blocking")
    m = Model()
    m.upsert(mw.write(trips(range(8), ts=1, value=1), path, occ), range(8), 1, 1)
    m.upsert(mw.write(trips(range(3, 10), ts=2, value=2), path, nb), range(3, 10), 2, 2)
    m.upsert(mw.write(trips([2, 4], ts=0, value=9), path, occ), [2, 4], 0, 9)  # loses on ts: no change
    m.delete(mw.write(trips([1, 6], ts=2), path, dataclasses.replace(nb, operation="delete")), [1, 6], 2)
    with mw.Cleaner(path, lock=lock, retain_commits=50, clustering=None,
                    compaction=mw.CompactionConfig(delta_commits=2)) as cleaner:
        services = cleaner.run_once().compaction_instants
    m.upsert(mw.write(trips([0, 5, 11], ts=3, value=3), path, nb), [0, 5, 11], 3, 3)
    m.delete(mw.write(trips([7], ts=3), path, dataclasses.replace(occ, operation="delete")), [7], 3)
    m.upsert(mw.write(trips([0, 3], ts=4, value=4), path, occ), [0, 3], 4, 4)
    return m, services


@pytest.fixture()
def cdc_mor(mor_table, table_path):
    _enable(table_path)
    model, services = _history(table_path)
    assert services, "a compaction ran"
    return table_path, model, services


def test_read_cdc_of_every_commit_is_the_model(cdc_mor):
    path, model, services = cdc_mor
    t = mw.Table.open(path)
    everything = each_commit_read(t, model)
    assert cdc_records(t.read_cdc()) == everything
    tl = t.timeline()
    for s in services:  # the compaction's own CDC log files are no records of the CDC query
        i = tl.find(s)
        before = max(c for c, _ in model.expected if c < i.completion_time)
        assert t.read_cdc(before, i.completion_time).num_rows == 0


def _instant_of_base(name: str) -> str:
    parsed = layout.parse_data_file(name)
    assert parsed is not None, name
    return parsed.instant_time


def test_delta_stats_name_the_slice_they_appended_to_as_hudi_s_append_handle(cdc_mor):
    """A model of Hudi's rule, walking the commits in order: the slice a log stat names is the
    group's latest slice before its commit (base instant, base file, logs newest first), then
    its own file; a group without one names the deltacommit itself and nothing else."""
    path, _, _ = cdc_mor
    tl = mw.Table.open(path).timeline()
    slices: dict[tuple[str, str], tuple[str, str, list[str]]] = {}
    logs_checked = 0
    for i in tl.completed_writes():
        meta = tl.commit_metadata(i)
        before = {g: (b, f, list(lf)) for g, (b, f, lf) in slices.items()}
        for g in meta.replaced_file_groups():
            slices.pop(g, None)
        for s in meta.all_stats():
            g = (s.partition_path, s.file_id)
            own = s.path.rsplit("/", 1)[-1]
            if not s.is_log:
                slices[g] = (_instant_of_base(own), own, [])
                continue
            logs_checked += 1
            assert i.action == inst.DELTA_COMMIT
            if g in before:
                base_instant, base, logs = before[g]
                want = (base_instant, base, (*reversed(logs), own))
            else:
                want = (i.requested_time, "", (own,))
            assert (s.prev_commit, s.base_file, s.log_files) == want, (i.requested_time, g)
            avro = s.to_avro()
            assert (avro["prevCommit"], avro["baseFile"], avro["logFiles"]) == (want[0], want[1], list(want[2]))
            slices.setdefault(g, (i.requested_time, "", []))[2].append(own)
    assert logs_checked >= 4


def test_a_table_without_cdc_keeps_the_plain_version_8_stats(mor_table, table_path):
    """Without ``hoodie.table.cdc.enabled`` Hudi's handle names the deltacommit, no base file
    and the one file written."""
    w = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock())
    mw.write(trips(range(4), ts=1, value=1), table_path, w)
    r = mw.write(trips(range(4), ts=2, value=2), table_path, w)
    stats = mw.Table.open(table_path).timeline().commit_metadata(r.instant).all_stats()
    assert stats and all(s.is_log for s in stats)
    for s in stats:
        assert (s.prev_commit, s.base_file, s.log_files) == (r.instant.requested_time, "", (s.path.rsplit("/", 1)[-1],))


def test_the_compaction_logs_each_slice_s_changes_beside_its_base(cdc_mor):
    """``HoodieMergeHandleWithChangeLog`` on compaction: per key, the old base file's row against
    the compacted one, stamped with the compaction's instant, named in ``cdcStats``."""
    path, _, services = cdc_mor
    t = mw.Table.open(path)
    tl = t.timeline()
    logged = 0
    for s in services:
        for st in tl.commit_metadata(tl.find(s)).all_stats():
            if not st.cdc_files:
                continue
            logged += 1
            (rel,) = st.cdc_files
            assert cl.parse_cdc_log_file(rel.rsplit("/", 1)[-1]).instant_time == s
            assert len(t.storage.read_bytes(rel)) == st.cdc_sizes[0]
            got = cl.read_cdc_records(t.storage.read_bytes(rel), source=rel).to_pylist()
            part = st.partition_path
            old = pq.read_table(t.storage.abs(f"{part}/{st.prev_base_file}")).to_pylist()
            new = pq.read_table(t.storage.abs(st.path)).to_pylist()
            img = lambda r: (r["id"], r["ts"], r["value"])  # noqa: E731
            was = {r["_hoodie_record_key"]: r for r in old}
            now = {r["_hoodie_record_key"]: r for r in new}
            want = {(cl.DELETE_OP, k, img(was[k]), None) for k in was.keys() - now.keys()}
            want |= {(cl.INSERT_OP, k, None, img(now[k])) for k in now.keys() - was.keys()}
            want |= {(cl.UPDATE_OP, k, img(was[k]), img(now[k])) for k in was.keys() & now.keys()
                     if was[k]["_hoodie_commit_seqno"] != now[k]["_hoodie_commit_seqno"]}
            assert {(r["op"], (r["before"] or r["after"])["id"], r["before"] and img(r["before"]),
                     r["after"] and img(r["after"])) for r in got} == want
            assert {r["ts_ms"] for r in got} == {s}
    assert logged, "the compaction of updated and deleted keys logged them"


def test_hudi_rs_reads_what_our_reader_reads(cdc_mor):
    path, model, _ = cdc_mor
    ours = _rows(mw.Table.open(path).read())
    assert ours == sorted((k, ts, v) for k, (ts, v) in model.state.items())
    assert _rows(hudi_read(path)) == ours


def test_the_metadata_table_lists_each_file_once(cdc_mor):
    """``records_of`` takes each stat's path (and CDC files), never the earlier logs it names."""
    path, _, _ = cdc_mor
    t = mw.Table.open(path)
    listed = metadata_files.list_files(t.storage, t.config, logs=True)
    if listed is None:
        pytest.skip("the table keeps no metadata table")
    on_disk = list_files(t.storage, logs=True)
    names = lambda pair: sorted(f.path for fs in pair for f in fs)  # noqa: E731
    assert names(listed) == names(on_disk)


# -- readers of a stat's logFiles --------------------------------------------------------------


def _stat_naming_earlier_logs(path: str) -> WriteStat:
    tl = mw.Table.open(path).timeline()
    for i in reversed(tl.completed_writes()):
        for s in tl.commit_metadata(i).all_stats():
            if s.is_log and len(s.log_files) > 1:
                return s
    raise AssertionError("no stat names earlier log files")


def test_named_files_and_compaction_take_only_the_file_a_stat_wrote(cdc_mor):
    path, _, _ = cdc_mor
    s = _stat_naming_earlier_logs(path)
    own = s.path.rsplit("/", 1)[-1]
    assert named_files([s]) == {own}
    (lf,) = compaction._logs_of(s)
    assert (lf.name, lf.size, lf.instant_time) == (own, s.file_size, parse_log_file(own).instant_time)


def test_the_next_compaction_merges_each_log_once(mor_table, table_path):
    """Logs written on top of a compacted base name the slice's earlier logs; the next plan
    lists every log of the slice once, and compacts to the rows the model holds."""
    _enable(table_path)
    w = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock())
    mw.write(trips(range(4), ts=1, value=1), table_path, w)
    mw.write(trips(range(4), ts=2, value=2), table_path, w)
    compact_slices(table_path)
    mw.write(trips([0, 1], ts=3, value=3), table_path, w)
    mw.write(trips([0], ts=4, value=4), table_path, w)
    t = mw.Table.open(table_path)
    s = _stat_naming_earlier_logs(table_path)
    expected = [(str(k), 2, 2.0) for k in range(4)]
    expected[0], expected[1] = ("0", 4, 4.0), ("1", 3, 3.0)
    with mw.Cleaner(table_path, lock=mw.InProcessLock(), clustering=None,
                    compaction=mw.CompactionConfig(delta_commits=1)) as cleaner:
        report = cleaner.run_once()
    (c,) = report.compaction_instants
    rel = compaction.requested_path(t.config, c)
    plan = decode_plan(t.storage.read_bytes(rel), source=rel)
    op = next(o for o in plan.operations if o.file_id == s.file_id and o.partition_path == s.partition_path)
    assert sorted(op.delta_file_names) == sorted(s.log_files), "the slice's two logs, once each"
    assert _rows(mw.Table.open(table_path).read()) == sorted(expected)
    assert _rows(hudi_read(table_path)) == sorted(expected)
    assert t.storage.exists(s.path)


def test_an_aborted_deltacommit_deletes_its_own_log_only(mor_table, table_path):
    """The abort (and rollback) of a deltacommit on top of earlier logs deletes its own file:
    the earlier commits' logs and rows stay, for our reader and hudi-rs."""
    _enable(table_path)
    w = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock())
    mw.write(trips(range(4), ts=1, value=1), table_path, w)
    mw.write(trips(range(4), ts=2, value=2), table_path, w)
    mw.write(trips([0, 1], ts=3, value=3), table_path, w)
    t = mw.Table.open(table_path)
    logs_before = sorted(lf.path for lf in list_files(t.storage, logs=True)[1])
    faults.configure("after-data-files=error")
    try:
        with pytest.raises(faults.InjectedFault):
            mw.write(trips(range(4), ts=5, value=5), table_path, w)
    finally:
        faults.configure(None)
    with mw.Cleaner(table_path, lock=mw.InProcessLock(), clustering=None, compaction=None) as cleaner:
        cleaner.run_once()
    assert sorted(lf.path for lf in list_files(t.storage, logs=True)[1]) == logs_before
    expected = sorted([("0", 3, 3.0), ("1", 3, 3.0), ("2", 2, 2.0), ("3", 2, 2.0)])
    assert _rows(mw.Table.open(table_path).read()) == expected
    assert _rows(hudi_read(table_path)) == expected
    r = mw.write(trips([2], ts=6, value=6), table_path, w)
    (s,) = mw.Table.open(table_path).timeline().commit_metadata(r.instant).all_stats()
    assert s.log_files[:-1] == tuple(reversed(sorted(p.rsplit("/", 1)[-1] for p in logs_before
                                                     if f"/.{s.file_id}_" in p))), "the aborted log is named by no one"


def test_spark_executors_name_the_slice_too(spark, mor_table, table_path):
    """The Spark executor path plans the same tasks: its log stats name the slice as well."""
    _enable(table_path)
    w = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock(), executor="spark")
    mw.write(trips(range(6), ts=1, value=1.0), table_path, dataclasses.replace(w, executor="driver"))
    mw.write(spark.createDataFrame(trips(range(3), ts=2, value=2.0).to_pandas()), table_path, w)
    r = mw.write(spark.createDataFrame(trips([0], ts=3, value=3.0).to_pandas()), table_path, w)
    tl = mw.Table.open(table_path).timeline()
    first, second, _ = tl.completed_writes()
    bases = {(s.partition_path, s.file_id): s.path.rsplit("/", 1)[-1] for s in tl.commit_metadata(first).all_stats()}
    earlier = {(s.partition_path, s.file_id): s.path.rsplit("/", 1)[-1] for s in tl.commit_metadata(second).all_stats()}
    (s,) = tl.commit_metadata(r.instant).all_stats()
    g = (s.partition_path, s.file_id)
    assert (s.prev_commit, s.base_file, s.log_files) == (first.requested_time, bases[g],
                                                         (earlier[g], s.path.rsplit("/", 1)[-1]))
    assert _rows(mw.Table.open(table_path).read()) == _rows(hudi_read(table_path))


def test_the_clean_deletes_old_slices_with_their_cdc_logs_and_keeps_the_live_one(mor_table, table_path):
    """Two compactions, then a clean keeping one commit: the old slices' logs, and the first
    compaction's CDC files of the groups compacted again, go with their slices; the live
    slices' bases, their CDC files and the log written on top stay, though earlier stats name
    the deleted logs."""
    _enable(table_path)
    lock = mw.InProcessLock()
    w = mw.WriterConfig(writer_id="w", lock=lock)
    mw.write(trips(range(4), ts=1, value=1), table_path, w)
    mw.write(trips(range(4), ts=2, value=2), table_path, w)
    compact_slices(table_path)
    mw.write(trips([0, 1], ts=3, value=3), table_path, w)
    compact_slices(table_path)
    r = mw.write(trips([0], ts=4, value=4), table_path, w)
    t = mw.Table.open(table_path)
    tl = t.timeline()
    c1, c2 = [i for i in tl.completed_writes() if i.action == inst.COMMIT]
    cdc_files = {i.requested_time: {p for s in tl.commit_metadata(i).all_stats() for p in s.cdc_files} for i in (c1, c2)}
    assert cdc_files[c1.requested_time] and cdc_files[c2.requested_time]
    live_log = {s.path for s in tl.commit_metadata(r.instant).all_stats()}
    with mw.Cleaner(table_path, lock=lock, retain_commits=1, clustering=None, compaction=None) as cleaner:
        assert cleaner.run_once().old_versions_deleted > 0
    t = mw.Table.open(table_path)
    recompacted = {s.file_id for s in tl.commit_metadata(c2).all_stats()}
    gone = {p for p in cdc_files[c1.requested_time] if cl.parse_cdc_log_file(p.rsplit("/", 1)[-1]).file_id in recompacted}
    assert gone and not any(t.storage.exists(p) for p in gone)
    assert all(t.storage.exists(p) for p in (cdc_files[c1.requested_time] - gone) | cdc_files[c2.requested_time] | live_log)
    bases, logs = list_files(t.storage, logs=True)
    assert len(bases) == 4 and all(
        f.instant_time == (c2 if f.file_id in recompacted else c1).requested_time for f in bases), "one slice a group"
    assert {lf.path for lf in logs} == live_log
    expected = sorted([("0", 4, 4.0), ("1", 3, 3.0), ("2", 2, 2.0), ("3", 2, 2.0)])
    assert _rows(t.read()) == expected == _rows(hudi_read(table_path))
