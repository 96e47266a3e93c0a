"""Shifting one child process's wall clock, for clock-skew runs.

A ``sitecustomize`` shim on the child's ``PYTHONPATH`` wraps ``time.time`` and ``time.time_ns``
with an offset: everything the project reads from the wall clock (instant times, heartbeats,
lock leases) is skewed, while file times stay on the store's (real) clock and monotonic clocks
progress alike, as between hosts. libfaketime is not used: under its LD_PRELOAD a thread's
timed wait does not return on time (a heartbeat thread stops beating while the main thread
sleeps, even at an offset of zero). Used by ``tests/test_clock_skew.py``,
``tests/test_completion_fence.py`` and the chaos run.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SKEW_VAR = "MW_TEST_WALL_CLOCK_SKEW_S"

SHIM = f"""
import os, time
_skew = float(os.environ.get("{SKEW_VAR}") or 0)
if _skew:
    _time, _time_ns = time.time, time.time_ns
    time.time = lambda: _time() + _skew
    time.time_ns = lambda: _time_ns() + int(_skew * 1e9)
"""


def _shim_dir() -> Path:
    d = Path(os.environ.get("TMPDIR", "/tmp"), f"mw-pyclock-shim-{os.getpid()}")
    d.mkdir(exist_ok=True)
    (d / "sitecustomize.py").write_text(SHIM)
    return d


def env(skew_s: float | None, base: dict[str, str] | None = None, **extra: str) -> dict[str, str]:
    """A child's environment: ``base`` (default ours) without fault settings, the project on
    ``PYTHONPATH``, and with ``skew_s`` its wall clock shifted by that many seconds."""
    e = {k: v for k, v in (os.environ if base is None else base).items()
         if not k.startswith("MULTIWRITER_FAULT") and k != SKEW_VAR}
    e["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    if skew_s:
        e["PYTHONPATH"] = os.pathsep.join([str(_shim_dir()), e["PYTHONPATH"]])
        e[SKEW_VAR] = repr(float(skew_s))
    e.update(extra)
    return e


def python_clock_env(skew_s: float, **extra: str) -> dict[str, str]:
    """:func:`env` with the wall clock shifted by ``skew_s`` seconds (kept as a name for callers)."""
    return env(skew_s, **extra)


def works() -> str | None:
    """Why a skewed child cannot be started here, or None when the shim shifts its clock."""
    probe = subprocess.run([sys.executable, "-c", "import time; time.sleep(0.01); print(time.time())"],
                           env=env(3600.0), capture_output=True, text=True, timeout=30)
    try:
        off = float(probe.stdout) - time.time() - 3600
    except ValueError:
        off = float("inf")
    if probe.returncode != 0 or abs(off) > 60:
        return f"the clock shim does not shift Python's clock here: {probe.stdout!r} {probe.stderr[-300:]!r}"
    return None
