"""Orphan files, stale bookkeeping, the file formats we write, configuration, CLI and the
companion streaming query."""

from __future__ import annotations

import io
import json
import os
import shutil
import time
from pathlib import Path

import fastavro
import pytest

import multiwriter as mw
from multiwriter.cleaner import rollback
from multiwriter.cleaner.job import Cleaner, CleanerReport
from multiwriter.cli.cleaner import main
from multiwriter.format import layout
from tests.cleaner.conftest import NO_GARBAGE, fake_failed_write, garbage_of, rollbacks, writer_config
from tests.conftest import trips
from tests.oracle import SHARED, hudi_read, rows

COLS = ["id", "value"]
AVRO = SHARED / "format" / "avro"


def _plant(table: mw.Table, instant_time: str, age_s: float) -> str:
    """Copy a committed file under a name with ``instant_time``, aged ``age_s`` seconds."""
    src = table.snapshot().files()[0]
    name = layout.DataFileName(layout.new_file_id(), layout.write_token(), instant_time).name
    rel = layout.data_file_path(src.partition, name)
    shutil.copyfile(table.storage.abs(src.path), table.storage.abs(rel))
    then = time.time() - age_s
    os.utime(table.storage.abs(rel), (then, then))
    return rel


def test_orphans_older_than_the_safety_age_are_reported_and_deleted_young_ones_untouched(
    trips_table, table_path, zk_lock, cleaners
):
    cfg = writer_config(zk_lock())
    for k in range(3):
        mw.write(trips([k]), table_path, cfg)
    tl = trips_table.timeline()
    newest = tl.max_time()
    old_orphan = _plant(trips_table, str(int(newest) + 1), age_s=7 * 3600)
    young_orphan = _plant(trips_table, str(int(newest) + 2), age_s=60)
    archived_era = _plant(trips_table, "20000101000000000", age_s=7 * 3600)  # before the earliest instant: committed
    off = {"sweep_failed_writes": False}  # this test is about orphans; the sweep would take archived_era

    report = cleaners(table_path, zk_lock(), **off).run_once()
    assert report.orphans == [old_orphan] and report.orphans_deleted == 0
    assert trips_table.storage.exists(old_orphan)

    report = cleaners(table_path, zk_lock(), delete_orphans=True, **off).run_once()
    assert report.orphans == [old_orphan] and report.orphans_deleted == 1
    assert not trips_table.storage.exists(old_orphan)
    assert trips_table.storage.exists(young_orphan) and trips_table.storage.exists(archived_era)
    report = cleaners(table_path, zk_lock(), delete_orphans=True, orphan_min_age_s=0, **off).run_once()
    assert report.orphans == [young_orphan] and report.orphans_deleted == 1
    assert trips_table.storage.exists(archived_era)


def test_stale_markers_and_heartbeats_of_completed_instants_are_removed(trips_table, table_path, zk_lock, cleaners):
    r = mw.write(trips([1]), table_path, writer_config(zk_lock()))
    t = r.instant.requested_time
    trips_table.storage.write_bytes(layout.heartbeat_path(t), b"left by a writer killed after its commit")
    trips_table.storage.put_if_absent(layout.marker_path(t, "2024-01-01", "x_0-0-0_" + t + ".parquet"), b"")
    report = cleaners(table_path, zk_lock()).run_once()
    assert report.stale_files_deleted == 2
    assert not trips_table.storage.exists(layout.heartbeat_path(t))
    assert not trips_table.storage.exists(layout.marker_dir(t))


def _official(name: str) -> dict:
    """An Avro schema from shared/format/avro with the named types it references inlined."""
    defs = {p.stem: json.loads(p.read_text()) for p in AVRO.glob("*.avsc")}

    def inline(x, seen):
        if isinstance(x, str) and x.rsplit(".", 1)[-1] in defs and x.rsplit(".", 1)[-1] not in seen:
            seen.add(x.rsplit(".", 1)[-1])
            return inline(defs[x.rsplit(".", 1)[-1]], seen)
        if isinstance(x, list):
            return [inline(y, seen) for y in x]
        if isinstance(x, dict):
            if x.get("type") == "record":
                seen.add(x["name"])
            return {k: inline(v, seen) if k in ("type", "items", "values", "fields") else v for k, v in x.items()}
        return x

    return inline(defs[name], set())


@pytest.mark.skipif(not AVRO.exists(), reason=f"Hudi's Avro schemas not found at {AVRO}")
def test_rollback_and_clean_files_read_with_hudis_own_schemas(trips_table, table_path, zk_lock, cleaners):
    cfg = writer_config(zk_lock())
    for k in range(3):
        mw.write(trips([1], ts=k, value=k), table_path, cfg)
    t, _ = fake_failed_write(trips_table, zk_lock())
    report = cleaners(table_path, zk_lock(), retain_commits=1).run_once()
    assert report.rolled_back == [t] and report.old_versions_deleted == 2
    kinds = {
        ".rollback.requested": "HoodieRollbackPlan",
        ".rollback": "HoodieRollbackMetadata",
        ".clean.requested": "HoodieCleanerPlan",
        ".clean": "HoodieCleanMetadata",
    }
    read = set()
    for f in Path(trips_table.storage.abs(trips_table.config.timeline_dir)).iterdir():
        kind = next((k for suffix, k in kinds.items() if f.name.endswith(suffix)), None)
        if kind:
            [rec] = list(fastavro.reader(io.BytesIO(f.read_bytes()), reader_schema=_official(kind)))
            read.add(kind)
            if kind == "HoodieRollbackMetadata":
                assert rec["commitsRollback"] == [t]
            if kind == "HoodieCleanMetadata":
                assert rec["totalFilesDeleted"] == 2 and rec["policy"] == ""
    assert read == set(kinds.values())
    assert rows(hudi_read(table_path), COLS) == rows(trips_table.read(), COLS) == [("1", 2.0)]


def test_a_plan_cannot_make_the_cleaner_delete_outside_its_instant(tmp_path):
    from multiwriter.table.metadata import encode

    t = "20240101000000000"
    good = f"p/abc-0_0-0-0_{t}.parquet"
    rec = {
        "instantToRollback": {"commitTime": t, "action": "commit"},
        "RollbackRequests": [
            {
                "partitionPath": "p",
                "fileId": "abc-0",
                "latestBaseInstant": t,
                "filesToBeDeleted": [f"/elsewhere/{good}", "/etc/passwd", "p/abc-0_0-0-0_20990101000000000.parquet"],
                "logBlocksToBeDeleted": None,
            },
            {
                "partitionPath": "../..",
                "fileId": None,
                "latestBaseInstant": t,
                "filesToBeDeleted": [f"x_0-0-0_{t}.parquet"],
                "logBlocksToBeDeleted": None,
            },
        ],
        "version": 1,
    }
    plan = rollback.RollbackPlan.from_bytes("20240101000000001", encode("rollback_plan", rec), source="test")
    assert plan.files == (good,)


@pytest.mark.parametrize(
    "bad",
    [
        {"retain_commits": 0},
        {"archive_keep_min": 40, "archive_keep_max": 30},
        {"heartbeat_interval_s": 0},
        {"heartbeat_tolerable_misses": -1},
        {"orphan_min_age_s": -1},
    ],
)
def test_bad_settings_fail_fast_with_a_clear_error(trips_table, table_path, bad):
    with pytest.raises(mw.errors.ConfigError, match=next(iter(bad)).split("_")[0]):
        Cleaner(table_path, lock=mw.InProcessLock(), **bad)


def test_report_is_a_readable_summary():
    r = CleanerReport(rolled_back=["1"], files_deleted=2, errors=["archival: boom"])
    assert "rolled back 1 failed writes (2 files)" in str(r) and "archival: boom" in str(r) and not r.ok


def test_command_line_once(trips_table, table_path, zk_server, zk_base, zk_lock, capsys):
    mw.write(trips([1, 2]), table_path, writer_config(zk_lock()))
    t, _ = fake_failed_write(trips_table, zk_lock())
    code = main(
        [
            table_path,
            "--zk",
            zk_server.connect,
            "--zk-base-path",
            zk_base,
            "--once",
            "--heartbeat-interval",
            "1",
            "--heartbeat-misses",
            "1",
        ]
    )
    assert code == 0
    assert "rolled back 1 failed writes" in capsys.readouterr().out
    assert garbage_of(trips_table, t) == NO_GARBAGE


def test_companion_streaming_query_rolls_back_then_stops(spark, trips_table, table_path, zk_lock, cleaners, tmp_path):
    mw.write(trips([1, 2]), table_path, writer_config(zk_lock()))
    t, _ = fake_failed_write(trips_table, zk_lock())
    cleaner = cleaners(table_path, zk_lock())
    query = cleaner.start(spark, interval="1 second", checkpoint_location=str(tmp_path / "ck"))
    try:
        deadline = time.time() + 60
        while t not in rollbacks(trips_table):
            assert query.isActive and time.time() < deadline, query.exception() or "no rollback within 60 s"
            time.sleep(0.2)
    finally:
        query.stop()
    assert not query.isActive and query.exception() is None
    assert cleaner.runs >= 1 and garbage_of(trips_table, t) == NO_GARBAGE
    assert rows(trips_table.read(), COLS) == [("1", 1.0), ("2", 1.0)]


@pytest.mark.needs_fixtures
def test_spark_written_tables_version_8_cleaned_version_6_refused(tmp_path, zk_lock, cleaners):
    from tests.oracle import unzip_fixture

    v8 = str(unzip_fixture("v8_simplekeygen_nonhivestyle", tmp_path / "a"))
    before = rows(hudi_read(v8), ["id", "name", "isActive"])
    report = cleaners(v8, zk_lock(), retain_commits=1, orphan_min_age_s=0).run_once()
    assert report.errors == [] and report.rolled_back == [] and report.orphans == []
    assert report.old_versions_deleted >= 1, "the upserted file groups had an older slice"
    assert rows(hudi_read(v8), ["id", "name", "isActive"]) == before
    assert rows(mw.Table.open(v8).read(), ["id", "name", "isActive"]) == before
    v6 = str(unzip_fixture("v6_nonpartitioned", tmp_path / "b"))
    with pytest.raises(mw.errors.TableFormatError, match="version 6"):
        cleaners(v6, zk_lock())


def test_metrics_are_recorded_and_pushed_after_each_run(trips_table, table_path, zk_lock, cleaners):
    import http.server
    import threading

    from prometheus_client import CollectorRegistry

    pushed: list[tuple[str, bytes]] = []

    class Gateway(http.server.BaseHTTPRequestHandler):
        def do_PUT(self):
            pushed.append((self.path, self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        do_POST = do_PUT

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Gateway)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        mw.write(trips([1, 2]), table_path, writer_config(zk_lock()))
        t, files = fake_failed_write(trips_table, zk_lock(), n_files=3)
        reg = CollectorRegistry()
        cleaner = cleaners(
            table_path, zk_lock(), metrics=mw.metrics.Metrics(reg), pushgateway=f"127.0.0.1:{server.server_port}"
        )
        assert cleaner.run_once().rolled_back == [t]
    finally:
        server.shutdown()
        server.server_close()
    assert reg.get_sample_value("multiwriter_rollbacks_total", {"table": "trips"}) == 1
    assert (
        reg.get_sample_value("multiwriter_cleaner_files_deleted_total", {"table": "trips", "kind": "failed_write"}) == 3
    )
    assert reg.get_sample_value("multiwriter_pending_instants", {"table": "trips"}) == 0
    [(path, body)] = pushed
    assert path.startswith("/metrics/job/multiwriter-cleaner") and b"multiwriter_rollbacks_total" in body
