"""Heartbeats: files while in flight, the shared expiry rule, and the writer's self-check."""
from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

import multiwriter as mw
from multiwriter.errors import HeartbeatExpiredError
from multiwriter.heartbeat.client import HeartbeatClient, heartbeat_age_s, is_lapsed
from multiwriter.instant_time import format_time
from multiwriter.storage import Storage
from tests.conftest import trips
from tests.test_concurrency import result, spawn


@pytest.fixture()
def storage(tmp_path) -> Storage:
    return Storage(str(tmp_path))


def hb_file(tmp_path, t) -> Path:
    return tmp_path / ".hoodie" / ".heartbeat" / t


def test_start_writes_at_once_then_beats_and_stop_deletes(storage, tmp_path):
    t = format_time(time.time())
    c = HeartbeatClient(storage, writer_id="w", interval_s=1.0, tolerable_misses=1)
    c.start(t)
    body = json.loads(hb_file(tmp_path, t).read_text())
    assert body["writer_id"] == "w" and body["pid"] == os.getpid() and body["instant"] == t
    time.sleep(1.3)
    assert json.loads(hb_file(tmp_path, t).read_text())["ts_ms"] > body["ts_ms"]
    t2 = format_time(time.time() + 1)
    c.start(t2)
    beating = [th for th in threading.enumerate() if th.name.startswith("heartbeat-w")]
    assert len(beating) == 1, "one thread serves every instant of a client"
    c.check(t)
    c.stop(t)
    assert not hb_file(tmp_path, t).exists() and hb_file(tmp_path, t2).exists()
    c.close()
    assert not hb_file(tmp_path, t2).exists()


def test_expiry_rule(storage, tmp_path):
    now = time.time()
    young = format_time(now - 1)
    old = format_time(now - 60)
    assert not is_lapsed(storage, young, 1.0, 2, now=now), "missing heartbeat of a young instant is not lapsed"
    assert is_lapsed(storage, old, 1.0, 2, now=now), "missing heartbeat of an old instant is lapsed"
    c = HeartbeatClient(storage, interval_s=1.0, tolerable_misses=2)
    c.start(old)
    assert not is_lapsed(storage, old, 1.0, 2)
    c.pause()
    time.sleep(0.1)
    f = hb_file(tmp_path, old)
    f.write_text(json.dumps({"ts_ms": int((now - 10) * 1000)}))
    os.utime(f, (now - 10, now - 10))
    assert heartbeat_age_s(storage, old, now=now) == pytest.approx(10, abs=0.01)
    assert is_lapsed(storage, old, 1.0, 2, now=now)
    f.write_text("not json")
    os.utime(f, (now - 1, now - 1))
    assert not is_lapsed(storage, old, 1.0, 2, now=now), "a corrupt file falls back to its mtime"
    c.close()


def test_self_check_after_a_pause_raises(storage):
    t = format_time(time.time())
    c = HeartbeatClient(storage, interval_s=1.0, tolerable_misses=1)
    c.start(t)
    c.pause()
    time.sleep(2.4)
    c.resume()
    time.sleep(1.2)  # beats again, but the gap already exceeded the bound
    with pytest.raises(HeartbeatExpiredError, match=t):
        c.check(t)
    c.close()


def test_beat_failures_are_retried_counted_and_abort_if_they_last(storage):
    t = format_time(time.time())
    failures = []
    c = HeartbeatClient(storage, interval_s=1.0, tolerable_misses=2, max_consecutive_failures=3,
                        on_failure=failures.append)
    c.start(t)
    real = storage.write_bytes
    broken = {"on": True}

    def flaky(rel, data):
        if broken["on"]:
            raise PermissionError(13, "Permission denied", rel)
        return real(rel, data)

    storage.write_bytes = flaky  # type: ignore[method-assign]
    time.sleep(1.4)
    assert c.failures >= 1 and failures, "a failed beat is counted and reported"
    c.check(t)  # one failure, retried soon: not fatal yet
    broken["on"] = False
    time.sleep(1.2)
    c.check(t)  # recovered before the bound
    broken["on"] = True
    time.sleep(2.6)
    with pytest.raises(HeartbeatExpiredError):
        c.check(t)
    storage.write_bytes = real  # type: ignore[method-assign]
    c.close()


def test_frozen_writer_process_does_not_commit(zk_server, zk_base, trips_table, table_path):
    """SIGSTOP a writer between its data files and its commit, past the bound: it must abort."""
    mw.write(trips(range(5)), table_path, mw.WriterConfig(writer_id="seed"))
    p = spawn("write", dict(zk=zk_server.connect, base=zk_base, path=table_path, writer="frozen", ids=[1, 2, 3], value=9),
              {"MULTIWRITER_FAULTS": "after-data-files=hang", "MULTIWRITER_FAULT_HANG_S": "2"})
    temp = Path(table_path) / ".hoodie" / ".temp"
    deadline = time.time() + 60
    while time.time() < deadline and not list(temp.rglob("*.marker.CREATE")):
        time.sleep(0.05)
    hb = list((Path(table_path) / ".hoodie" / ".heartbeat").iterdir())
    assert hb, "a heartbeat file exists while the batch is in flight"
    os.kill(p.pid, signal.SIGSTOP)
    time.sleep(4.5)  # bound = 1 s x (2 + 1)
    assert is_lapsed(mw.Table.open(table_path).storage, hb[0].name, 1.0, 2)
    os.kill(p.pid, signal.SIGCONT)
    r = result(p)
    assert not r["ok"] and r["error"] == "HeartbeatExpiredError", r
    t = mw.Table.open(table_path)
    assert len(t.timeline().completed_writes()) == 1 and not t.timeline().pending()
    assert {v for v in t.read().column("value").to_pylist()} == {1.0}
    assert not list((Path(table_path) / ".hoodie" / ".heartbeat").iterdir()), "no heartbeat left after abort"


def test_heartbeat_gone_after_commit(trips_table, table_path):
    mw.write(trips(range(3)), table_path, mw.WriterConfig(writer_id="w", heartbeat_interval_s=1.0))
    hb_dir = Path(table_path) / ".hoodie" / ".heartbeat"
    assert not hb_dir.exists() or not list(hb_dir.iterdir())
