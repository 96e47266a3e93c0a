"""Planted plans and manifests never make the companion job lose committed rows, and never stop
its upkeep for good: each case plants a file someone who can write inside the table's folder
could plant, runs the job, and checks both readers (ours and hudi-rs) against the rows written,
the typed error or report naming the file, and the job's other steps still running."""
from __future__ import annotations

import json
import os

import pytest

import multiwriter as mw
from multiwriter.cleaner import plan_checks
from multiwriter.cleaner import retention
from multiwriter.errors import PlanRefusedError
from multiwriter.instant_time import next_after
from multiwriter.format import instant as inst
from multiwriter.format import lsm_timeline as lsm
from multiwriter.table import metadata_files
from multiwriter.table import timeline as tlmod
from multiwriter.table.compaction_plan import CompactionOperation, CompactionPlan, encode_plan
from multiwriter.format.log_file import BlockType, HeaderKey, encode_block, parse_log_file
from multiwriter.table.metadata import encode
from tests.cleaner.conftest import writer_config
from tests.conftest import trips
from tests.oracle import hudi_read, rows

COLS = ["id", "value"]


def _lock() -> mw.FileSystemLock:
    return mw.FileSystemLock()


def _write(path: str, ids, value: float = 1.0, writer: str = "ingest") -> str:
    return mw.write(trips(ids, value=value), path, writer_config(_lock(), writer)).instant.requested_time


def _both(table: mw.Table) -> tuple[list, list]:
    return rows(table.read(), COLS), rows(hudi_read(table.path), COLS)


def _next_time(table: mw.Table) -> str:
    return next_after(table.timeline().max_time())


def _cleaner(cleaners, path: str, **kw):
    kw.setdefault("clustering", None)
    kw.setdefault("observe_max_s", 10.0)
    return cleaners(path, _lock(), **kw)


# -- item 2: plans and manifests that would lose rows ------------------------------------------------------


def test_a_planted_clean_plan_naming_live_base_files_is_refused_and_quarantined(trips_table, table_path, cleaners):
    for k in range(3):
        _write(table_path, range(5 * k, 5 * k + 5))
    expected = _both(trips_table)[0]
    assert len(expected) == 15
    live = [f.path for f in trips_table.snapshot().files()]
    c = _next_time(trips_table)
    plan = retention.CleanPlan(earliest_to_retain="99999999999999999", last_completed="", files=tuple(live), clean_time=c)
    tlmod.create_requested(trips_table.storage, trips_table.config, c, inst.CLEAN, plan.to_bytes(trips_table.storage.uri_of))
    cleaner = _cleaner(cleaners, table_path, retain_commits=1, archive_keep_min=1, archive_keep_max=2)
    report = cleaner.run_once(raise_errors=False)
    ours, theirs = _both(trips_table)
    assert ours == theirs == expected, "no committed row lost"
    source = f".hoodie/timeline/{c}.clean.requested"
    assert any(source in q and "PlanRefusedError" in q and live[0] in q for q in report.quarantined), report
    assert report.in_quarantine == [f"{plan_checks.QUARANTINE_DIR}/{c}.clean.requested"]
    assert trips_table.timeline().find(c, inst.CLEAN) is None
    assert report.archived > 0, "archival still ran"
    with pytest.raises(PlanRefusedError, match=source):
        retention.check_plan(cleaner._context(), trips_table.timeline(), plan, 1)
    # the next run has nothing new to report but what waits in quarantine
    again = cleaner.run_once(raise_errors=False)
    assert again.errors == [] and again.in_quarantine == report.in_quarantine


def test_a_pending_write_planted_at_a_committed_time_is_quarantined_not_rolled_back(trips_table, table_path,
                                                                                     cleaners):
    t = _write(table_path, range(5))
    _write(table_path, range(5, 10))
    expected = _both(trips_table)[0]
    # a deltacommit at the first commit's time: rolling it back would delete that commit's files
    tlmod.create_requested(trips_table.storage, trips_table.config, t, inst.DELTA_COMMIT, b"")
    cleaner = _cleaner(cleaners, table_path)
    report = cleaner.run_once(raise_errors=False)
    assert _both(trips_table) == (expected, expected)
    assert report.rolled_back == []
    assert any(f"{t}.deltacommit.requested" in q and "requested time of the completed commit" in q
               for q in report.quarantined), report


def test_a_compaction_plan_leaving_out_logs_of_the_slice_is_refused(mor_table, table_path, cleaners):
    _write(table_path, range(10))
    for k in range(3):
        _write(table_path, range(10), value=10.0 + k)
    expected = _both(mor_table)[0]
    slice_ = next(f for f in mor_table.snapshot().files() if len(f.logs) == 3)
    t = _next_time(mor_table)
    first = sorted(slice_.logs, key=lambda lf: lf.instant_time)[0]
    op = CompactionOperation.for_slice(slice_.partition, slice_.file_id, slice_.instant_time,
                                       (slice_.name, slice_.size) if slice_.has_base else None, [(first.name, first.size)])
    tlmod.create_requested(mor_table.storage, mor_table.config, t, inst.COMPACTION, encode_plan(CompactionPlan((op,))))
    # a plan naming no cleaner of ours is checked when it would be executed: foreign plans opted in
    cleaner = _cleaner(cleaners, table_path, compaction=mw.CompactionConfig(delta_commits=100, execute_foreign_plans=True))
    report = cleaner.run_once(raise_errors=False)
    assert _both(mor_table) == (expected, expected), "no committed row lost"
    assert report.compaction_instants == []
    source = f".hoodie/timeline/{t}.compaction.requested"
    assert any(source in q and "PlanRefusedError" in q for q in report.quarantined), report
    assert mor_table.timeline().find(t, inst.COMPACTION) is None, "it holds archival no more"
    # the job's own compaction still runs past it
    report = cleaners(table_path, _lock(), clustering=None, compaction=mw.CompactionConfig(delta_commits=1)).run_once()
    assert report.compaction_instants and _both(mor_table) == (expected, expected)


def test_a_pending_compaction_at_the_metadata_tables_bootstrap_time_deletes_nothing(trips_table, table_path,
                                                                                    cleaners):
    for k in range(3):
        _write(table_path, range(5 * k, 5 * k + 5))
    trips_table.enable_metadata(_lock())  # on by default: False then
    for k in range(3, 5):
        _write(table_path, range(5 * k, 5 * k + 3))
    expected = _both(trips_table)[0]
    mt = metadata_files.MetadataTable(trips_table.storage, trips_table.config)
    planted = f"{mt.timeline_dir}/{metadata_files.BOOTSTRAP_TIME}.compaction.requested"
    trips_table.storage.write_bytes(planted, b"")
    cleaner = _cleaner(cleaners, table_path, retain_commits=1, archive_keep_min=1, archive_keep_max=2)
    for k in range(5, 15):  # writers compact the files partition meanwhile
        _write(table_path, [100 + k])
        expected.append((str(100 + k), 1.0))
        if k == 6:
            report = cleaner.run_once(raise_errors=False)
            assert any(planted in q and "refused" in q for q in report.quarantined), report
    report = cleaner.run_once(raise_errors=False)
    assert _both(trips_table) == (sorted(expected, key=repr),) * 2
    bootstrap = f"{metadata_files.MDT_DIR}/files/{metadata_files.GROUP}_0-0-0_{metadata_files.BOOTSTRAP_TIME}.hfile"
    assert not trips_table.storage.exists(planted)
    assert report.archived > 0 or trips_table.storage.exists(bootstrap)


def test_an_empty_history_manifest_is_passed_over(trips_table, table_path, cleaners):
    for k in range(10):
        _write(table_path, range(3 * k, 3 * k + 3))
    expected = _both(trips_table)[0]
    assert len(expected) == 30
    cleaner = _cleaner(cleaners, table_path, retain_commits=2, archive_keep_min=2, archive_keep_max=3,
                       failed_write_min_age_bounds=1.0)
    assert cleaner.run_once().archived > 0
    hist = trips_table.config.history_dir
    v = lsm.latest_version(trips_table.storage, hist)
    trips_table.storage.write_bytes(f"{hist}/{lsm.MANIFEST_PREFIX}{v + 1}", json.dumps({"files": []}).encode())
    trips_table.storage.write_bytes(f"{hist}/{lsm.VERSION_FILE}", str(v + 1).encode())
    ours, theirs = _both(trips_table)
    assert ours == theirs == expected
    report = cleaner.run_once(raise_errors=False)
    assert report.failed_writes_swept == [], "no archived commit's file is taken for a failed write"
    assert any(f"{lsm.MANIFEST_PREFIX}{v + 1}" in e and "drops archived instants" in e for e in report.errors), report
    for k in range(10, 14):
        _write(table_path, range(3 * k, 3 * k + 3))
        expected = sorted([*expected, *((str(i), 1.0) for i in range(3 * k, 3 * k + 3))], key=repr)
    report = cleaner.run_once(raise_errors=False)
    assert report.archived > 0 and report.errors == [], "archival wrote a manifest above the bad one"
    assert _both(trips_table) == (expected, expected)


# -- item 5: one planted file never stops upkeep ---------------------------------------------------------------


@pytest.mark.parametrize("action", [inst.ROLLBACK, inst.CLEAN])
def test_an_early_garbage_plan_is_quarantined_and_archival_goes_on(trips_table, table_path, cleaners, action):
    first = _write(table_path, range(3))
    early = next_after(first[:-3] + "000")  # a time before the table's second commit, after its first
    for k in range(1, 12):
        _write(table_path, range(3 * k, 3 * k + 3))
    expected = _both(trips_table)[0]
    body = b"garbage" if action == inst.CLEAN else encode("rollback_plan", {
        "instantToRollback": {"commitTime": "../..", "action": inst.COMMIT}, "RollbackRequests": [], "version": 1})
    rel = f".hoodie/timeline/{min(early, first)}.{action}.requested"
    rel = rel if min(early, first) != first else f".hoodie/timeline/{first[:-1]}0.{action}.requested"
    trips_table.storage.write_bytes(rel, body)
    cleaner = _cleaner(cleaners, table_path, retain_commits=2, archive_keep_min=3, archive_keep_max=5)
    report = cleaner.run_once(raise_errors=False)
    assert any(rel in q for q in report.quarantined), report
    assert report.archived > 0, report
    assert len(trips_table.timeline().completed()) <= 8
    assert _both(trips_table) == (expected, expected)


def _plant_metadata_record(table: mw.Table, part: str, name: str, *, in_base: bool = False) -> str:
    """Rewrite the files partition's newest log file (or its base) with one more record: ``name``
    in partition ``part``, which the partition list names too. Returns the file's path."""
    mt = metadata_files.MetadataTable(table.storage, table.config)
    base, _, logs = mt.latest_slice()
    target = base if in_base else logs[-1]
    recs: metadata_files.Records = {}
    for r in mt._decoded(target):
        metadata_files._merge(recs, r)
    recs.setdefault(part, {})[name] = (10, False)
    recs.setdefault(metadata_files.ALL_PARTITIONS, {})[part] = (0, False)
    schema = mt.schema_json
    body = metadata_files._hfile(recs, schema)
    if not in_base:
        t = parse_log_file(target).instant_time
        body = encode_block(BlockType.HFILE_DATA, {HeaderKey.INSTANT_TIME: t, HeaderKey.SCHEMA: schema}, body)
    rel = f"{metadata_files.MDT_DIR}/{metadata_files.PARTITION}/{target}"
    table.storage.write_bytes(rel, body)
    metadata_files.forget_decoded()  # as a new reader process
    return rel


@pytest.mark.parametrize("case", ["dotdot", "absolute", "dotdot-in-base", "long-name"])
def test_an_unsafe_metadata_table_record_is_skipped_and_compacted_away(trips_table, table_path, cleaners, caplog,
                                                                        tmp_path, case):
    """Issue 56, 5: a metadata-table record naming an unsafe partition (``../x``, an absolute
    path), or a 5,000-character file name in a committed metadata-table entry, no longer fails
    every read and write (an untyped ``OSError`` for the long name) nor rides along in every
    compaction: readers skip it with the path rule's warning naming the metadata-table file,
    writes go on, and the job reports it and compacts it out; both readers see every row."""
    for k in range(3):
        _write(table_path, range(3 * k, 3 * k + 3))
    expected = _both(trips_table)[0]
    beside = sorted(os.listdir(tmp_path))
    t = trips_table.timeline().completed()[-1].requested_time
    part, name = {
        "dotdot": ("../x", f"abc-0_0-0-0_{t}.parquet"),
        "absolute": (str(tmp_path / "x"), f"abc-0_0-0-0_{t}.parquet"),
        "dotdot-in-base": ("../x", f"abc-0_0-0-0_{t}.parquet"),
        "long-name": ("2024-01-01", "a" * 5000 + f"-0_0-0-0_{t}.parquet"),
    }[case]
    if case.endswith("in-base"):  # a base with a record in it: the files partition compacted first
        metadata_files.compact_open_slice(trips_table.storage, trips_table.config, _next_time(trips_table))
    planted = _plant_metadata_record(trips_table, part, name, in_base=case.endswith("in-base"))
    with caplog.at_level("WARNING"):
        assert rows(trips_table.read(), COLS) == expected
    assert planted in caplog.text and "UnsafePathError" not in caplog.text
    _write(table_path, [100])  # writes go on past it
    expected = sorted([*expected, ("100", 1.0)], key=repr)
    assert rows(trips_table.read(), COLS) == expected
    report = _cleaner(cleaners, table_path).run_once(raise_errors=False)
    assert any(planted in line for line in report.metadata_ignored), report
    assert "unsafe metadata-table records" in str(report)
    assert report.errors == [], report
    metadata_files.forget_decoded()
    assert metadata_files.MetadataTable(trips_table.storage, trips_table.config).ignored() == []
    assert _both(trips_table) == (expected, expected)
    _write(table_path, [101])  # and after it
    assert _cleaner(cleaners, table_path).run_once(raise_errors=False).metadata_ignored == []
    assert sorted(os.listdir(tmp_path)) == beside  # nothing made outside the table


def test_a_write_stat_naming_a_file_longer_than_a_file_system_takes_is_an_unsafe_path(trips_table, table_path,
                                                                                       caplog):
    """The same 5,000-character name in a data commit's write statistics: the path rule refuses
    it (an ``UnsafePathError`` naming the commit file, not an ``OSError`` at the first stat), and
    the metadata table never records it."""
    from multiwriter.errors import UnsafePathError
    from multiwriter.format import paths
    from multiwriter.table.metadata import CommitMetadata, WriteStat

    long = "2024-01-01/" + "a" * 5000 + "-0_0-0-0_20240101000000000.parquet"
    with pytest.raises(UnsafePathError, match=r"20240101000000000\.commit: data file path .* longer than 255"):
        paths.data_file(long, source="20240101000000000.commit")
    assert not paths.is_data_file_name(long.rsplit("/", 1)[-1])
    meta = CommitMetadata({"2024-01-01": [WriteStat(file_id="f", path=long, partition_path="2024-01-01")]})
    recs = metadata_files.records_of(inst.COMMIT, meta.to_bytes(), source="20240101000000000.commit")
    assert recs == {metadata_files.ALL_PARTITIONS: {}}
    assert "20240101000000000.commit" in caplog.text
