"""The write path starts and stops heartbeats around every batch (public API only)."""
from __future__ import annotations

from pathlib import Path

import multiwriter as mw
from tests.conftest import trips


def test_no_heartbeat_left_after_a_commit(trips_table, table_path):
    r = mw.write(trips(range(3)), table_path, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="w", heartbeat_interval_s=1.0))
    hb_dir = Path(table_path) / ".hoodie" / ".heartbeat"
    assert not (hb_dir / r.instant.requested_time).exists()
    assert not hb_dir.exists() or not list(hb_dir.iterdir())
