"""Lock objects planted by someone who can write inside the table (issue 56, 6): a lease forged
far ahead blocks writers for one configured validity at most; a value that does not parse is a
typed error naming the lock object, or counts as an unreadable lock broken after one lease; a
token that would name files elsewhere is never used as a path."""
from __future__ import annotations

import json
import os
import time

import pytest

import multiwriter as mw
from multiwriter.errors import LockAcquireTimeout, LockError
from multiwriter.lock import FileSystemLock, StorageLock
from multiwriter.lock import filesystem as fslock
from multiwriter.lock.storage import LOCK_FILE, read_lock
from multiwriter.status import collect, render
from multiwriter.storage import Storage
from tests.conftest import TRIPS_SCHEMA

TEN_YEARS_MS = 10 * 365 * 86400 * 1000
DEEP = "[" * 200_000 + "]" * 200_000


def _plant_storage_lock(path, valid_until: str) -> None:
    lock = path / LOCK_FILE
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text(f'{{"expired": false, "validUntil": {valid_until}, "owner": "forged"}}')


def test_a_storage_lease_forged_ten_years_ahead_blocks_for_one_validity(tmp_path, caplog):
    storage = Storage(str(tmp_path / "t"))
    _plant_storage_lock(tmp_path / "t", str(int(time.time() * 1000) + TEN_YEARS_MS))
    p = StorageLock(validity_s=1.5, renew_interval_s=0.3, poll_s=0.02)
    t0 = time.monotonic()
    with pytest.raises(LockAcquireTimeout, match="forged"):
        p.for_table("t", storage).acquire(timeout_s=0.5)  # an attempt that gives up early ...
    lock = p.for_table("t", storage)
    lock.acquire(timeout_s=10)  # ... counts towards the bound: the next attempt does not start over
    took = time.monotonic() - t0
    try:
        assert 1.5 <= took < 4.0, took
        lock.check()
        assert json.loads((tmp_path / "t" / LOCK_FILE).read_bytes())["owner"] != "forged"
    finally:
        lock.release()
    assert "validUntil is not believed" in caplog.text


@pytest.mark.parametrize("valid_until", ["1" + "0" * 400, "Infinity", "-Infinity", "NaN", "1e400", "-5",
                                         '"soon"', DEEP])
def test_a_storage_lock_whose_valid_until_is_no_time_is_a_typed_error(tmp_path, valid_until):
    table = mw.Table.create(str(tmp_path / "t"), name="trips", schema=TRIPS_SCHEMA, record_key="id",
                            ordering_field="ts")
    _plant_storage_lock(tmp_path / "t", valid_until)
    with pytest.raises(LockError, match="table_lock.json") as e:
        StorageLock(validity_s=1.5, renew_interval_s=0.3).for_table("t", table.storage).acquire(timeout_s=1)
    assert len(str(e.value)) < 1000
    with pytest.raises(LockError, match="table_lock.json"):
        read_lock(table.storage)
    shown = render(collect(table, observe_s=0))  # `multiwriter status`: a line, no traceback
    assert "storage lock: the storage lock object .hoodie/.locks/table_lock.json is not a Hudi lock" in shown


def test_status_command_reports_a_deeply_nested_lock_object(tmp_path):
    import subprocess
    import sys

    mw.Table.create(str(tmp_path / "t"), name="trips", schema=TRIPS_SCHEMA, record_key="id", ordering_field="ts")
    _plant_storage_lock(tmp_path / "t", DEEP)
    out = subprocess.run([sys.executable, "-m", "multiwriter.cli", "status", str(tmp_path / "t"), "--observe", "0"],
                         capture_output=True, text=True, timeout=120)
    assert "Traceback" not in out.stderr, out.stderr[-2000:]
    assert "table_lock.json is not a Hudi lock" in out.stdout


def _plant_file_lock(root, body: str) -> None:
    lock = root / fslock.LOCK_FILE
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text(body)


@pytest.mark.parametrize("expires_at", ["Infinity", "NaN", "1e400", "1" + "0" * 400, "ten-years"])
def test_a_file_lock_expiry_forged_ahead_blocks_for_one_lease(tmp_path, expires_at):
    storage = Storage(str(tmp_path / "t"))
    if expires_at == "ten-years":
        expires_at = str(time.time() + 10 * 365 * 86400)
    _plant_file_lock(tmp_path / "t", f'{{"token": "forged", "expires_at": {expires_at}}}')
    lock = FileSystemLock(lease_s=1.0, poll_s=0.02).for_table("t", storage)
    t0 = time.monotonic()
    lock.acquire(timeout_s=10)
    try:
        assert time.monotonic() - t0 < 4.0
        lock.check()
    finally:
        lock.release()


@pytest.mark.parametrize("token", ["../../../outside", "/../../outside", "..", "a/b", '["x"]', "{}", DEEP])
def test_a_file_lock_token_naming_files_elsewhere_is_broken_after_one_lease(tmp_path, token, caplog):
    root = tmp_path / "t"
    Storage(str(root)).makedirs(".hoodie/.locks")
    (tmp_path / "outside").write_text("sentinel")
    value = token if token[:1] in "[{" else json.dumps(token)
    _plant_file_lock(root, f'{{"token": {value}, "expires_at": {time.time() + 3600}}}')
    before = sorted(os.listdir(tmp_path))
    lock = FileSystemLock(lease_s=1.0, poll_s=0.02).for_table("t", Storage(str(root)))
    t0 = time.monotonic()
    lock.acquire(timeout_s=10)
    try:
        assert time.monotonic() - t0 < 4.0
    finally:
        lock.release()
    assert sorted(os.listdir(tmp_path)) == before and (tmp_path / "outside").read_text() == "sentinel"
    assert "is not one of ours" in caplog.text and fslock.LOCK_FILE in caplog.text


def test_a_forged_file_lock_still_excludes_while_it_is_believed(tmp_path):
    storage = Storage(str(tmp_path / "t"))
    _plant_file_lock(tmp_path / "t", '{"token": "forged", "expires_at": Infinity}')
    with pytest.raises(LockAcquireTimeout):
        FileSystemLock(lease_s=5.0, poll_s=0.02).for_table("t", storage).acquire(timeout_s=0.5)
