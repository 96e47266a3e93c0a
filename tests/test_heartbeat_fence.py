"""The heartbeat fence end to end: a writer process frozen past the bound must not commit."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import multiwriter as mw
from multiwriter import markers
from multiwriter.heartbeat.client import is_lapsed
from tests.conftest import trips
from tests.test_concurrency import result, spawn


def test_frozen_writer_process_does_not_commit(zk_server, zk_base, trips_table, table_path):
    """SIGSTOP a writer between its data files and its commit, past the bound: it must abort."""
    mw.write(trips(range(5)), table_path, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="seed"))
    p = spawn("write", dict(zk=zk_server.connect, base=zk_base, path=table_path, writer="frozen", ids=[1, 2, 3], value=9),
              {"MULTIWRITER_FAULTS": "after-data-files=hang", "MULTIWRITER_FAULT_HANG_S": "2"})
    storage = mw.Table.open(table_path).storage
    deadline = time.time() + 60
    while time.time() < deadline and not any(markers.started_writing(storage, t) for t in markers.instants_with_markers(storage)):
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
    mw.write(trips(range(3)), table_path, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="w", heartbeat_interval_s=1.0))
    hb_dir = Path(table_path) / ".hoodie" / ".heartbeat"
    assert not hb_dir.exists() or not list(hb_dir.iterdir())
