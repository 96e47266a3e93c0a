"""The command line: timeline, heartbeats, clean --once (real processes, real files)."""
from __future__ import annotations

import subprocess
import sys

import multiwriter as mw
from tests.conftest import trips


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "multiwriter.cli", *args], capture_output=True, text=True, timeout=120)


def test_timeline_heartbeats_and_clean(zk_server, zk_base, trips_table, table_path):
    r = mw.write(trips(range(3)), table_path, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="cli-writer"))
    out = cli("timeline", table_path)
    assert out.returncode == 0 and r.instant.requested_time in out.stdout and "cli-writer" in out.stdout
    hb = cli("heartbeats", table_path)
    assert hb.returncode == 0 and "no heartbeats" in hb.stdout
    cl = cli("clean", table_path, "--zk", zk_server.connect, "--once")
    assert cl.returncode == 0, cl.stderr
    bad = cli("timeline", table_path + "-missing")
    assert bad.returncode == 2 and "no Hudi table" in bad.stderr
