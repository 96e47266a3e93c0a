"""The demo's watcher of its doomed writer: it kills the writer once the writer has started
writing data files, whatever marker layout the write path uses."""
from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import multiwriter as mw
from multiwriter import demo, faults
from tests.conftest import trips, wait_hanging


def test_the_doomed_writer_is_killed_once_it_has_written_data_files(trips_table, table_path, tmp_path, monkeypatch):
    monkeypatch.setenv("MULTIWRITER_FAULT_DIR", str(tmp_path))
    faults.configure("after-data-files=hang@1")
    doomed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    cfg = mw.WriterConfig(writer_id="doomed", lock=mw.InProcessLock(), heartbeat_interval_s=1.0)
    th = threading.Thread(target=lambda: mw.write(trips(range(10)), table_path, cfg))
    try:
        assert demo._kill_if_half_way(doomed, Path(table_path)) is None, "nothing written yet: not killed"
        th.start()
        assert wait_hanging(tmp_path, th), "the writer did not reach its data files"
        instant = demo._kill_if_half_way(doomed, Path(table_path))
        # the writer in this process holds the data files of that instant, as the doomed one would
        data = [p for p in Path(table_path).rglob(f"*_{instant}.parquet") if ".hoodie" not in p.parts]
        assert instant is not None and data, "the watcher saw the instant that wrote data files"
        assert doomed.wait(10) == -9, "and killed the writer with SIGKILL"
    finally:
        (tmp_path / "after-data-files.release").write_text("")
        th.join(60)
        faults.configure(None)
        if doomed.poll() is None:
            doomed.kill()
