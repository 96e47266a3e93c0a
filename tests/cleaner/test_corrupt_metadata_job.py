"""The companion job meets corrupt metadata: it reports a TableFormatError naming the file, skips
that item, and still runs its other steps (retention, archival, the sweep) on every run;
``multiwriter clean`` says what is wrong without a traceback."""
from __future__ import annotations

import io
import json
import subprocess
import sys
import time

import fastavro
import pytest

import multiwriter as mw
from multiwriter.errors import TableFormatError
from multiwriter.instant_time import format_time
from multiwriter.format import lsm_timeline as lsm
from multiwriter.format.layout import heartbeat_path
from tests.cleaner.conftest import writer_config
from tests.conftest import trips

RETAIN = 2


def _commits(table_path: str, n: int) -> list[str]:
    cfg = writer_config(mw.FileSystemLock(), "ingest")
    return [mw.write(trips(range(3), value=k), table_path, cfg).instant.requested_time for k in range(n)]


def _wrong_shape_rollback_plan() -> bytes:
    """A rollback plan whose instantToRollback is a string, not a record (an AttributeError before)."""
    schema = {"type": "record", "name": "P", "fields": [{"name": "instantToRollback", "type": "string"}]}
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(schema), [{"instantToRollback": "20240101000000000"}])
    return buf.getvalue()


def _plant_pending_rollback(table: mw.Table, t: str) -> str:
    rel = f"{table.config.timeline_dir}/{t}.rollback.requested"
    table.storage.write_bytes(rel, _wrong_shape_rollback_plan())
    # its "cleaner" beats with settings no writer may have: 10^400 misses (an OverflowError before)
    body = '{"ts_ms": 1, "seq": 1, "beater": "x", "interval_ms": 1000, "tolerable_misses": 1' + "0" * 400 + "}"
    table.storage.write_bytes(heartbeat_path(t), body.encode())
    return rel


def test_a_corrupt_rollback_plan_is_reported_and_retention_and_archival_still_run(trips_table, table_path, cleaners):
    _commits(table_path, 12)
    rel = _plant_pending_rollback(trips_table, format_time(time.time() + 1))
    cleaner = cleaners(table_path, mw.FileSystemLock(), retain_commits=RETAIN, archive_keep_min=3, archive_keep_max=5,
                       clustering=None, observe_max_s=10.0)
    report = cleaner.run_once(raise_errors=False)
    bad = [e for e in report.errors if rel in e]
    assert bad and all("rollback" in e for e in report.errors), report.errors
    assert len(report.errors) == 1 and report.quarantined == bad, report
    assert report.old_versions_deleted > 0 and report.archived > 0, report
    # moved to the quarantine for an operator to inspect, and listed by every later run; the rest
    # of the table moved on
    quarantined = rel.replace(".hoodie/timeline/", ".hoodie/.quarantine/")
    again = cleaner.run_once(raise_errors=False)
    assert again.errors == [] and again.in_quarantine == [quarantined], again
    assert trips_table.storage.exists(quarantined) and not trips_table.storage.exists(rel)
    assert len(trips_table.timeline().completed_writes()) <= 5
    assert sorted(r["id"] for r in trips_table.read().to_pylist()) == ["0", "1", "2"]


def test_a_foreign_name_in_the_history_manifest_stops_archival_only(trips_table, table_path, cleaners):
    _commits(table_path, 8)
    cleaner = cleaners(table_path, mw.FileSystemLock(), retain_commits=RETAIN, archive_keep_min=3, archive_keep_max=5,
                       clustering=None)
    assert cleaner.run_once().archived > 0
    hist = trips_table.config.history_dir
    version = lsm.latest_version(trips_table.storage, hist)
    manifest = f"{hist}/{lsm.MANIFEST_PREFIX}{version}"
    doc = json.loads(trips_table.storage.read_bytes(manifest))
    doc["files"].append({"fileName": "evil.parquet", "fileLen": 1})
    trips_table.storage.write_bytes(manifest, json.dumps(doc).encode())
    _commits(table_path, 4)
    report = cleaner.run_once(raise_errors=False)
    assert report.old_versions_deleted > 0, report
    assert report.errors and all(manifest in e and "evil.parquet" in e for e in report.errors), report.errors
    # the steps that need the archived timeline (archival; the sweep, which tells archived commits
    # from garbage by it) refuse to act on it, each with the typed error
    steps = {e.split(": TableFormatError: ")[0] for e in report.errors}
    assert steps <= {"archival", "failed writes", "orphans"} and "archival" in steps, report.errors


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "multiwriter.cli", *args], capture_output=True, text=True, timeout=120)


def test_multiwriter_clean_reports_corrupt_files_without_a_traceback(trips_table, table_path):
    _commits(table_path, 3)
    rel = _plant_pending_rollback(trips_table, format_time(time.time() + 1))
    out = _cli("clean", table_path, "--file-lock", "--once", "--observe-max", "5", "--heartbeat-interval", "1",
               "--heartbeat-misses", "1")
    assert out.returncode == 1, out.stderr[-3000:]
    assert rel in out.stdout + out.stderr and "Traceback" not in out.stderr, out.stderr[-3000:]

    props = f"{table_path}/.hoodie/hoodie.properties"
    with open(props, "a", encoding="utf-8") as f:
        f.write("hoodie.bad=\\uZZZZ\n")
    out = _cli("clean", table_path, "--file-lock", "--once")
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-3000:]
    assert out.stderr.startswith("error: ") and "hoodie.properties" in out.stderr and "\\uZZZZ" in out.stderr


@pytest.mark.parametrize("text", ["\\ud800", "\\uZZZZ"])
def test_opening_a_table_with_a_bad_properties_escape_is_a_table_format_error(trips_table, table_path, text):
    with open(f"{table_path}/.hoodie/hoodie.properties", "a", encoding="utf-8") as f:
        f.write(f"hoodie.bad=x{text}\n")
    with pytest.raises(TableFormatError, match="hoodie.properties"):
        mw.Table.open(table_path)
