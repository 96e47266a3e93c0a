"""A zombie writer: frozen (SIGSTOP) after its first data file, rolled back by the cleaner, the
active timeline moved past its instant by later commits and archival, then thawed.

Hudi readers take a file older than the earliest active instant for an archived commit's file,
so every file the zombie writes after waking up would be visible. It must make no more files
visible: the second one, whose bytes it had written under a staged name when it froze, is not
published (the check before publishing fails) and no third one is started. hudi-rs and our
reader must end up without any of its rows, with nothing left for the sweep.

The child runs ``python -m tests.test_zombie_writer '<json>'``: it freezes itself right after
writing its second data file's bytes (before the check that would publish it) and SIGKILLs
itself after a third one, which only a writer without the checks gets to write.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HB, MISSES = 1.0, 1
DATES = ["2024-02-01", "2024-02-02", "2024-02-03", "2024-02-04"]

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs POSIX signals")


# -- the child ------------------------------------------------------------------------------------
def _child(a: dict) -> None:
    import pyarrow as pa

    import multiwriter as mw
    from multiwriter.write import merge

    original = merge._write_parquet
    calls = [0]

    def hooked(storage, rel, out, *rest, **options):  # writes each data file's bytes under its staged name
        calls[0] += 1
        size = original(storage, rel, out, *rest, **options)
        if calls[0] == 2:
            print(json.dumps({"frozen": rel}), flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)
        if calls[0] == 3:
            os.kill(os.getpid(), signal.SIGKILL)  # the crash that leaves the files behind
        return size

    merge._write_parquet = hooked
    # one merge at a time, so "the second data file" is well defined (with parallel merges each
    # running merge has its own window of one file)
    from multiwriter.write import executor

    executor.MAX_PARALLEL_MERGES = 1
    lock = mw.ZooKeeperLock(connect=a["zk"], base_path=a["base"])
    cfg = mw.WriterConfig(writer_id="zombie", lock=lock, executor="driver", heartbeat_interval_s=HB,
                          heartbeat_tolerable_misses=MISSES, max_conflict_retries=0)
    n = len(DATES) * 3
    batch = pa.table({"id": [f"z{i}" for i in range(n)], "date": [DATES[i % len(DATES)] for i in range(n)],
                      "ts": pa.array([1] * n, pa.int64()), "value": [666.0] * n})
    try:
        mw.write(batch, a["path"], cfg)
        res = {"ok": True}
    except mw.errors.MultiWriterError as e:
        res = {"ok": False, "error": type(e).__name__, "message": str(e)}
    finally:
        lock.close()
    print(json.dumps(res), flush=True)


# -- the test -------------------------------------------------------------------------------------
def _spawn(args: dict) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    env.pop("MULTIWRITER_FAULTS", None)
    return subprocess.Popen([sys.executable, "-m", "tests.test_zombie_writer", json.dumps(args)], cwd=str(ROOT),
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_stopped(pid: int, timeout: float = 10.0) -> None:
    deadline = time.time() + timeout
    while Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "T":
        assert time.time() < deadline, "the child did not stop"
        time.sleep(0.02)


def _files_of(root: str, t: str) -> list[str]:
    """Data files named with instant ``t``, by a plain directory walk (no multiwriter code)."""
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if not x.startswith(".")]
        out += [os.path.relpath(os.path.join(d, f), root) for f in files if f.endswith(f"_{t}.parquet")]
    return sorted(out)


def test_a_thawed_zombie_writes_no_more_files_and_its_leftover_is_swept(
    zk_server, zk_base, trips_table, table_path
):
    import multiwriter as mw
    from tests.cleaner.conftest import wait_lapsed
    from tests.conftest import trips
    from tests.oracle import hudi_read, rows

    lock = mw.ZooKeeperLock(connect=zk_server.connect, base_path=zk_base)
    cfg = mw.WriterConfig(writer_id="live", lock=lock, executor="driver", heartbeat_interval_s=HB,
                          heartbeat_tolerable_misses=MISSES)

    cleaner_lock = mw.ZooKeeperLock(connect=zk_server.connect, base_path=zk_base)

    def cleaner(**kw):
        return mw.Cleaner(table_path, lock=cleaner_lock, heartbeat_interval_s=HB, heartbeat_tolerable_misses=MISSES, **kw)

    expected: dict[str, float] = {}
    mw.write(trips([0], date=DATES[0], value=0), table_path, cfg)
    expected["0"] = 0.0
    p = _spawn({"zk": zk_server.connect, "base": zk_base, "path": table_path})
    try:
        line = p.stdout.readline()
        assert line.startswith("{"), f"child: {line!r} {p.stderr.read() if p.poll() is not None else ''}"
        frozen = json.loads(line)["frozen"]
        t = frozen.rsplit("_", 1)[1].removesuffix(".parquet")
        _wait_stopped(p.pid)
        [first] = _files_of(table_path, t)  # its first data file is written, the second is not

        wait_lapsed(trips_table, t)
        with cleaner() as c:
            assert c.run_once().rolled_back == [t]
        assert _files_of(table_path, t) == []
        for k in range(1, 12):
            mw.write(trips([k], date=DATES[k % len(DATES)], value=k), table_path, cfg)
            expected[str(k)] = float(k)
        with cleaner(retain_commits=2, archive_keep_min=2, archive_keep_max=3) as c:
            assert c.run_once().archived > 0
        assert trips_table.timeline().earliest_time() > t, "the active timeline moved past the zombie"
    finally:
        os.kill(p.pid, signal.SIGCONT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, f"the zombie went on writing until it was killed ({p.returncode}): {err[-2000:]}"
    res = json.loads(out.strip().splitlines()[-1])
    assert not res["ok"] and res["error"] in ("HeartbeatExpiredError", "InstantRolledBackError"), res
    assert t in res["message"]
    # the file it froze with, written but not published, never lands, nor does a staged copy stay
    assert frozen.startswith(f".hoodie/.temp/{t}/staged/"), frozen
    assert _files_of(table_path, t) == []
    assert not [f for _, _, fs in os.walk(table_path) for f in fs if f.endswith(f"_{t}.parquet")], "nothing staged stays"

    with cleaner(failed_write_min_age_bounds=1) as c:
        report = c.run_once()
    assert report.failed_writes_swept == []
    want = sorted(expected.items(), key=repr)
    assert rows(hudi_read(table_path), ["id", "value"]) == want
    assert rows(mw.Table.open(table_path).read(), ["id", "value"]) == want
    lock.close()
    cleaner_lock.close()


if __name__ == "__main__":
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    _child(json.loads(sys.argv[1]))
