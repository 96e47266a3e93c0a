"""Shifting one child process's wall clock with Debian's libfaketime, for clock-skew runs.

``NO_FAKE_STAT=1`` keeps file times on the real clock, as on a shared store. Used by
``tests/test_clock_skew.py`` and the chaos run.
"""
from __future__ import annotations

import glob
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# libfaketime 0.9.10 and Python's timed waits: with CLOCK_MONOTONIC shifted too, Event.wait and
# Lock.acquire(timeout) block for the offset; with it left alone (FAKETIME_DONT_FAKE_MONOTONIC=1),
# time.sleep's clock_nanosleep fails with EINVAL. So only the wall clock is shifted (what the
# judge assumes: monotonic clocks progress alike) and a skewed child sleeps with Event.wait.
SHIM = """
import os, threading, time
if os.environ.get("FAKETIME"):
    def _sleep(s, _wait=threading.Event().wait):
        if s < 0:
            raise ValueError("sleep length must be non-negative")
        _wait(s)
    time.sleep = _sleep
"""


def faketime_lib() -> str | None:
    for pattern in ("/usr/lib/*/faketime/libfaketime.so.1", "/usr/lib/faketime/libfaketime.so.1",
                    "/usr/local/lib/faketime/libfaketime.so.1", "/usr/lib64/faketime/libfaketime.so.1"):
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    return None


def env(skew_s: float | None, base: dict[str, str] | None = None, **extra: str) -> dict[str, str]:
    """A child's environment: ``base`` (default ours) without fault settings, the project on
    ``PYTHONPATH``, and with ``skew_s`` its wall clock shifted by that many seconds."""
    e = {k: v for k, v in (os.environ if base is None else base).items()
         if not k.startswith("MULTIWRITER_FAULT") and k != "FAKETIME"}
    e["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    if skew_s:
        lib = faketime_lib()
        assert lib is not None, "libfaketime is not installed"
        shim_dir = Path(os.environ.get("TMPDIR", "/tmp"), f"mw-faketime-shim-{os.getpid()}")
        shim_dir.mkdir(exist_ok=True)
        (shim_dir / "sitecustomize.py").write_text(SHIM)
        e.update(LD_PRELOAD=lib, FAKETIME=f"{skew_s:+.0f}s", NO_FAKE_STAT="1", FAKETIME_DONT_FAKE_MONOTONIC="1",
                 PYTHONPATH=os.pathsep.join([str(shim_dir), e["PYTHONPATH"]]))
    e.update(extra)
    return e


def works() -> str | None:
    """Why a skewed child cannot be started here, or None when libfaketime shifts Python's clock."""
    lib = faketime_lib()
    if lib is None:
        return "libfaketime not found (apt-get install -y faketime): cannot skew one process's clock"
    probe = subprocess.run([sys.executable, "-c", "import time; time.sleep(0.01); print(time.time())"],
                           env=env(3600.0), capture_output=True, text=True, timeout=30)
    if probe.returncode != 0 or abs(float(probe.stdout or 0) - time.time() - 3600) > 60:
        return f"libfaketime at {lib} does not shift Python's clock here: {probe.stdout!r} {probe.stderr[-300:]!r}"
    return None


PY_SHIM = """
import os, time
_skew = float(os.environ.get("MW_TEST_WALL_CLOCK_SKEW_S") or 0)
if _skew:
    _time, _time_ns = time.time, time.time_ns
    time.time = lambda: _time() + _skew
    time.time_ns = lambda: _time_ns() + int(_skew * 1e9)
"""


def python_clock_env(skew_s: float, **extra: str) -> dict[str, str]:
    """A child's environment whose Python ``time.time`` runs ``skew_s`` seconds off (a
    ``sitecustomize`` shim; no libfaketime needed): enough for what the project reads from the
    wall clock (instant times, heartbeats), not for file times or other programs."""
    e = env(None, **extra)
    shim_dir = Path(os.environ.get("TMPDIR", "/tmp"), f"mw-pyclock-shim-{os.getpid()}")
    shim_dir.mkdir(exist_ok=True)
    (shim_dir / "sitecustomize.py").write_text(PY_SHIM)
    e["PYTHONPATH"] = os.pathsep.join([str(shim_dir), e["PYTHONPATH"]])
    e["MW_TEST_WALL_CLOCK_SKEW_S"] = str(skew_s)
    return e
