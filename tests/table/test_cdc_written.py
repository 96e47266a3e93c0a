"""Copy-on-Write writes of a table with ``hoodie.table.cdc.enabled``: each merge of a stored file
group writes Hudi's CDC log file beside its new base file (``HoodieMergeHandleWithChangeLog`` with
its ``HoodieCDCLogger``), named in the commit's ``cdcStats``; new file groups get none (Hudi's
create handle). ``read_cdc`` reads those files as they are (``HoodieCDCInferenceCase.AS_IS``), and
its answer is the model's and the inference's from the same slices with the files ignored."""
from __future__ import annotations

import dataclasses
import json
from collections import Counter

import pyarrow as pa
import pytest

import multiwriter as mw
from multiwriter import errors
from multiwriter.format import cdc_log as cl
from multiwriter.table import cdc
from multiwriter.table import properties as props
from multiwriter.table.merged_slice import read_slice
from tests.conftest import TRIPS_SCHEMA
from tests.oracle import hudi_read
from tests.table.test_cdc import _history, cdc_records, each_commit_read


def _enable(path: str, mode: str | None = None) -> None:
    extra = {cdc.MODE_KEY: mode} if mode else {}
    props.modify(mw.Table.open(path).storage, lambda p: {**p, cdc.ENABLED_KEY: "true", **extra})


def _cdc_stats(t: mw.Table) -> dict[str, int]:
    out: dict[str, int] = {}
    tl = t.timeline()
    for i in tl.completed_writes():
        for s in tl.commit_metadata(i).all_stats():
            out.update(s.cdc_stats)
    return out


def _inferred(t: mw.Table) -> Counter:
    """``read_cdc`` of the whole timeline with the CDC log files ignored: inference only."""
    tl = t.timeline()
    plan = t.cdc_plan(tl, None, None)
    hidden = cdc.CdcPlan(tuple(dataclasses.replace(c, cdc_files=()) for c in plan.changes), plan.commits)
    full = t.read_schema(tl)
    return cdc_records(cdc.changes(hidden, full, lambda fs, logs: read_slice(t.storage, fs, full, t.merge_config,
                                                                            logs=logs)))


@pytest.fixture()
def cdc_history(trips_table, table_path):
    _enable(table_path)
    model, _ = _history(table_path, "COPY_ON_WRITE")
    return table_path, model


def test_merges_write_cdc_log_files_named_in_cdc_stats(cdc_history):
    path, _ = cdc_history
    t = mw.Table.open(path)
    stats = _cdc_stats(t)
    assert stats, "merges of stored groups logged their changes"
    on_disk = {e.path: e.size for e in t.storage.walk_files("") if e.path.endswith(cl.CDC_SUFFIX)}
    assert on_disk == stats
    for rel in stats:
        parsed = cl.parse_cdc_log_file(rel.rsplit("/", 1)[-1])
        assert parsed is not None
        records = cl.read_cdc_records(t.storage.read_bytes(rel), source=rel)
        assert records.column_names == list(cl.cdc_columns(cl.DATA_BEFORE_AFTER))
        assert set(records.column("ts_ms").to_pylist()) <= {parsed.instant_time}


def test_read_cdc_of_the_logged_commits_is_the_model_and_the_inference(cdc_history):
    path, model = cdc_history
    t = mw.Table.open(path)
    everything = each_commit_read(t, model)
    assert cdc_records(t.read_cdc()) == everything == _inferred(t)


def test_hudi_rs_reads_the_table_beside_its_cdc_log_files(cdc_history):
    path, model = cdc_history
    got = hudi_read(path)
    assert sorted(got.column("id").to_pylist()) == sorted(model.state)


@pytest.mark.parametrize("mode", [cl.OP_KEY_ONLY, cl.DATA_BEFORE])
def test_other_modes_log_less_and_read_the_rest_from_the_slices(trips_table, table_path, mode):
    _enable(table_path, mode)
    w = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock())
    r0 = mw.write(mw_trips([1, 2], 1), table_path, w)
    r1 = mw.write(mw_trips([2, 3], 2), table_path, w)
    r2 = mw.write(mw_trips([1], 2), table_path, dataclasses.replace(w, operation="delete"))
    t = mw.Table.open(table_path)
    logged = _cdc_stats(t)
    assert len(logged) == 2, "the update and the delete merged the stored group; the first insert logged nothing"
    for rel in logged:
        assert cl.read_cdc_records(t.storage.read_bytes(rel)).column_names == list(cl.cdc_columns(mode))
    ts = [r.instant.requested_time for r in (r0, r1, r2)]
    assert cdc_records(t.read_cdc()) == Counter({
        ("i", ts[0], "1", None, ("1", 1, 1.0)): 1, ("i", ts[0], "2", None, ("2", 1, 1.0)): 1,
        ("u", ts[1], "2", ("2", 1, 1.0), ("2", 2, 2.0)): 1, ("i", ts[1], "3", None, ("3", 2, 2.0)): 1,
        ("d", ts[2], "1", ("1", 1, 1.0), None): 1})
    assert cdc_records(t.read_cdc()) == _inferred(t)


def mw_trips(ids, ts):
    from tests.conftest import trips

    return trips(ids, ts=ts, value=ts)


def test_a_missing_logged_file_is_refused_naming_it(cdc_history):
    path, _ = cdc_history
    t = mw.Table.open(path)
    rel = sorted(_cdc_stats(t))[0]
    t.storage.delete(rel)
    with pytest.raises(cdc.CdcLogFileError, match=rel.rsplit("/", 1)[-1]):
        mw.Table.open(path).read_cdc()


def test_the_logged_records_are_what_read_cdc_returns(trips_table, table_path):
    """AS_IS: the file's records are read, not inferred again (a file holding something else
    than the slices tell is what the read returns)."""
    _enable(table_path)
    w = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock())
    r0 = mw.write(mw_trips([1], 1), table_path, w)
    r = mw.write(mw_trips([1], 2), table_path, w)
    t = mw.Table.open(table_path)
    (rel,) = _cdc_stats(t)
    schema = json.loads(t.timeline().commit_metadata(r.instant).extra_metadata["schema"])
    forged = pa.table({"op": ["u"], "ts_ms": [r.instant.requested_time],
                       "before": [{"id": "1", "date": "2024-01-01", "ts": 1, "value": 1.0}],
                       "after": [{"id": "1", "date": "2024-01-01", "ts": 7, "value": 7.0}]})
    t.storage.delete(rel)
    t.storage.put_if_absent(rel, cl.encode_cdc_block(forged, cl.DATA_BEFORE_AFTER, schema,
                                                     instant_time=r.instant.requested_time))
    got = cdc_records(mw.Table.open(table_path).read_cdc(r0.instant.completion_time, None))
    assert got == Counter({("u", r.instant.requested_time, "1", ("1", 1, 1.0), ("1", 7, 7.0)): 1})


def test_an_aborted_write_deletes_its_cdc_log_files(trips_table, table_path):
    """A CDC log file is marked before it is written, as data files are: an aborted write
    deletes it with the base files its markers name."""
    from multiwriter import faults

    _enable(table_path)
    w = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock())
    mw.write(mw_trips([1, 2], 1), table_path, w)
    faults.configure("after-data-files=error")
    try:
        with pytest.raises(faults.InjectedFault):
            mw.write(mw_trips([1, 3], 2), table_path, w)
    finally:
        faults.configure(None)
    t = mw.Table.open(table_path)
    assert [e.path for e in t.storage.walk_files("") if e.path.endswith(cl.CDC_SUFFIX)] == []
    mw.write(mw_trips([1, 3], 2), table_path, w)
    assert len(_cdc_stats(mw.Table.open(table_path))) == 1


def test_the_spark_executor_path_logs_the_same_changes(spark, tmp_path, monkeypatch):
    """Executors merge through the same function (spread over tasks here): their stats carry
    ``cdcStats`` back to the driver, whose commit keeps the files; the changes read are the
    driver path's."""
    from multiwriter.write import spark as spark_path

    monkeypatch.setattr(spark_path, "ONE_TASK_MAX_ROWS", 0)
    got = []
    for ex in ("driver", "spark"):
        p = str(tmp_path / ex)
        mw.Table.create(p, name="trips", schema=TRIPS_SCHEMA, record_key="id", partition_by=["date"],
                        ordering_field="ts")
        _enable(p)
        for op, ids, ts in (("upsert", [1, 2, 3], 1), ("upsert", [2, 4], 2), ("delete", [3], 2)):
            b = mw_trips(ids, ts)
            data = spark.createDataFrame(b.to_pandas()) if ex == "spark" else b
            mw.write(data, p, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="w", executor=ex, operation=op))
        t = mw.Table.open(p)
        assert len(_cdc_stats(t)) == 2
        on_disk = {e.path: e.size for e in t.storage.walk_files("") if e.path.endswith(cl.CDC_SUFFIX)}
        assert on_disk == _cdc_stats(t)
        got.append(Counter((op, k, b, a) for op, _, k, b, a in cdc_records(t.read_cdc()).elements()))
    assert got[0] == got[1]


def test_cdc_with_virtual_keys_is_refused_by_name(table_path):
    """``read_cdc`` refuses tables with virtual keys, so their writers log no changes either."""
    mw.Table.create(table_path, name="trips", schema=TRIPS_SCHEMA, record_key="id", partition_by=["date"],
                    ordering_field="ts", populate_meta_fields=False)
    _enable(table_path)
    with pytest.raises(errors.VirtualKeysError, match="hoodie.table.cdc.enabled=true with"):
        mw.write(mw_trips([1], 1), table_path, mw.WriterConfig(writer_id="w", lock=mw.InProcessLock()))


def test_the_metadata_table_lists_the_cdc_log_files(cdc_history):
    """``HoodieTableMetadataUtil`` puts a write stat's ``cdcStats`` files into the files
    partition beside its data file; listings through it still see only the slices' files."""
    from multiwriter.table import metadata_files

    path, model = cdc_history
    t = mw.Table.open(path)
    listing = metadata_files.MetadataTable(t.storage, t.config).listing()
    names = {f"{p}/{n}" for p, files in listing.items() for n in files}
    assert set(_cdc_stats(t)) <= names
    assert sorted(t.read().column("id").to_pylist()) == sorted(model.state)
    assert sorted(hudi_read(path).column("id").to_pylist()) == sorted(model.state)


def _merged(table_path: str, commits: int) -> mw.InProcessLock:
    """CDC turned on, then ``commits`` upserts of the same four keys (one file group, each commit
    after the first a merge with its CDC file); returns the lock they used."""
    from tests.conftest import trips

    _enable(table_path)
    lock = mw.InProcessLock()
    w = mw.WriterConfig(writer_id="w", lock=lock)
    for k in range(commits):
        mw.write(trips(range(4), ts=k + 1, value=float(k)), table_path, w)
    return lock


def test_the_cleaner_deletes_a_cleaned_slices_cdc_log_files(trips_table, table_path):
    """Hudi's ``CleanPlanner`` deletes a cleaned slice's log files, its CDC log files included:
    retention 1 after three merges of one file group keeps only the CDC file of the slice it
    retains (the last commit's), and the table still reads as before."""
    lock = _merged(table_path, 4)
    t = mw.Table.open(table_path)
    written = set(_cdc_stats(t))
    assert len(written) == 3, "three merges of the one file group, each with its CDC file"
    tl = t.timeline()
    last = tl.completed_writes()[-1]
    own = set(tl.commit_metadata(last).all_stats()[0].cdc_files)
    with mw.Cleaner(table_path, lock=lock, retain_commits=1) as cleaner:
        assert cleaner.run_once().old_versions_deleted > 0
    t = mw.Table.open(table_path)
    assert {p for p in written if t.storage.exists(p)} == own
    assert sorted(hudi_read(table_path).column("value").to_pylist()) == [3.0] * 4


def test_a_cdc_stat_naming_another_file_never_points_the_clean_at_it(trips_table, table_path):
    """A commit whose ``cdcStats`` names a file that is not its group's CDC log (planted, or a
    bug: here the group's live base file) gets none of it deleted by the clean of that slice."""
    from multiwriter.cleaner import retention

    _merged(table_path, 3)
    t = mw.Table.open(table_path)
    tl = t.timeline()
    first, last = tl.completed_writes()[1], tl.completed_writes()[-1]
    stat = tl.commit_metadata(first).all_stats()[0]
    live = tl.commit_metadata(last).all_stats()[0].path
    from multiwriter.table.files import list_files

    bases, _ = list_files(t.storage, logs=False)
    doomed = [f for f in retention.old_slices(tl, bases, last.requested_time) if f.instant_time == first.requested_time]
    assert doomed
    planted = dataclasses.replace(stat, cdc_files=(live,), cdc_sizes=(1,))
    meta = tl.commit_metadata(first)
    meta.partition_to_write_stats[stat.partition_path] = [planted]
    assert retention._cdc_files_of(tl, doomed) == [], "the live base file is not a CDC log of the slice"
    meta.partition_to_write_stats[stat.partition_path] = [stat]
    assert retention._cdc_files_of(tl, doomed) == list(stat.cdc_files), "its own CDC log still goes"
