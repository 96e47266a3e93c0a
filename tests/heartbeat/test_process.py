"""A real frozen process: SIGSTOP a writer past the bound; on SIGCONT its own check must refuse.

This is the case the self-check exists for: while the writer was frozen the judges (cleaner,
other writers) saw its heartbeat lapse, so it must not commit when it wakes up, even though its
beat thread makes the file look fresh again a moment later.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from multiwriter.heartbeat import heartbeat_age_s, is_lapsed
from multiwriter.instant_time import format_time
from multiwriter.storage import Storage

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs POSIX signals")

REPO = Path(__file__).resolve().parents[2]
INTERVAL, MISSES = 1.0, 1  # bound 2 s

# The child: beat an instant, say so, wait for the parent's "go", then run the commit fence.
CHILD = f"""
import sys
from multiwriter.errors import HeartbeatExpiredError
from multiwriter.heartbeat import HeartbeatClient
from multiwriter.storage import Storage

root, t = sys.argv[1], sys.argv[2]
hb = HeartbeatClient(Storage(root), writer_id="child", interval_s={INTERVAL}, tolerable_misses={MISSES})
hb.start(t)
hb.check(t)
print("started", flush=True)
sys.stdin.readline()
try:
    hb.check(t)
    print("commit")
except HeartbeatExpiredError as e:
    print("expired:", e)
hb.close()
"""


def spawn(root: Path, t: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen([sys.executable, "-c", CHILD, str(root), t], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def started(p: subprocess.Popen[str]) -> None:
    assert p.stdout is not None
    line = p.stdout.readline()
    if line.strip() != "started":
        p.kill()
        raise AssertionError(f"child did not start: {line!r} {p.communicate()[1]}")


def finish(p: subprocess.Popen[str]) -> str:
    out, err = p.communicate("go\n", timeout=30)
    assert p.returncode == 0, err
    return out.strip()


def test_a_frozen_writer_refuses_to_commit_and_the_judges_saw_it_die(tmp_path):
    storage = Storage(str(tmp_path))
    t_frozen, t_live = format_time(time.time()), format_time(time.time() + 1)
    frozen, live = spawn(tmp_path, t_frozen), spawn(tmp_path, t_live)  # the live one is the control
    try:
        started(frozen)
        started(live)
        os.kill(frozen.pid, signal.SIGSTOP)
        time.sleep(INTERVAL * (MISSES + 1) + 0.4)
        age = heartbeat_age_s(storage, t_frozen)
        assert age is not None and age > INTERVAL * (MISSES + 1)
        assert is_lapsed(storage, t_frozen, INTERVAL, MISSES), "a judge sees the frozen writer as dead"
        assert not is_lapsed(storage, t_live, INTERVAL, MISSES)
    except BaseException:
        for p in (frozen, live):
            p.kill()
        raise
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
    frozen_says, live_says = finish(frozen), finish(live)
    assert frozen_says.startswith("expired:") and t_frozen in frozen_says, frozen_says
    assert "may already consider this writer dead" in frozen_says
    assert live_says == "commit"
    assert not list((tmp_path / ".hoodie" / ".heartbeat").iterdir()), "both children cleaned up on close"
