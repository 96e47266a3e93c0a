"""cProfile of one event-workload upsert (issue 35): where a ``mw.write`` upsert of a
100k-row batch into a 1M-row event table spends its time.

    python -m benchmarks.profile_event [--table-rows 1000000] [--batch-rows 100000]
        [--warm 1] [--top 40] [--sort cumulative] [--out event_upsert.prof] [--work DIR]

Builds the table as the ``goal_upsert_event`` section does (driver executor), runs ``--warm``
unprofiled upserts first (imports, caches, the first commit's one-off work), then profiles the
next batch and prints the top functions: of the calling thread, and of every thread-pool task it
started, summed (cProfile sees one thread; see :class:`PoolTasks`). Proportions hold on a busy machine, absolute times do
not. ``--out`` keeps the raw profile for ``snakeviz`` or ``python -m pstats``. To profile the
library as committed while it is being changed, run from an export of it (the current
directory comes first on ``sys.path``)::

    mkdir /tmp/mw-head && git archive HEAD multiwriter benchmarks | tar -x -C /tmp/mw-head
    cd /tmp/mw-head && /work/main/.venv/bin/python -m benchmarks.profile_event

The first line printed names the ``multiwriter`` that was profiled.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import multiwriter as mw

from . import data
from .goals import checksum, expected_upserts
from .peers import Multiwriter, reset


class PoolTasks:
    """While entered, every task submitted to any ``ThreadPoolExecutor`` runs under its own
    profiler: cProfile sees only the thread that enabled it, and the writer merges file groups,
    reads footers and hashes keys on thread pools, so the main thread's profile shows that
    work as time waiting on futures."""

    def __init__(self) -> None:
        self.profiles: list[cProfile.Profile] = []
        self._mu = threading.Lock()
        self._submit = ThreadPoolExecutor.submit

    def __enter__(self) -> PoolTasks:
        submit, wrap = self._submit, self._wrap
        ThreadPoolExecutor.submit = lambda pool, fn, /, *a, **kw: submit(pool, wrap(fn), *a, **kw)  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        ThreadPoolExecutor.submit = self._submit  # type: ignore[method-assign]

    def _wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*a: Any, **kw: Any) -> Any:
            prof = cProfile.Profile()
            prof.enable()
            try:
                return fn(*a, **kw)
            finally:
                prof.disable()
                with self._mu:
                    self.profiles.append(prof)
        return run


def profile(table_rows: int, batch_rows: int, warm: int, work: Path) -> tuple[cProfile.Profile, list[cProfile.Profile], float]:
    """The main thread's profile of upsert number ``warm`` (counting from 0), the profiles of
    the pool tasks it started, and its wall seconds; checks the table against the model
    afterwards, as every benchmark does."""
    reset(work)
    ours = Multiwriter(work, "driver", schema=data.EVENT_SCHEMA)
    init = data.event_initial(table_rows)
    ours.load(init)
    batches = [data.event_upsert_batch(table_rows, batch_rows, b) for b in range(warm + 1)]
    for b in batches[:-1]:
        ours.upsert(b)
    prof = cProfile.Profile()
    with PoolTasks() as tasks:
        t0 = time.perf_counter()
        prof.enable()
        ours.upsert(batches[-1])
        prof.disable()
        wall = time.perf_counter() - t0
    got, want = checksum(ours.read()), expected_upserts(init, batches)
    if got != want:
        raise AssertionError(f"rows/checksum {got} != expected {want}")
    return prof, tasks.profiles, wall


def report(profs: list[cProfile.Profile], sort: str, top: int) -> str:
    """The top ``top`` functions by ``sort`` over ``profs`` summed, file paths shortened."""
    buf = io.StringIO()
    stats = pstats.Stats(profs[0], stream=buf)
    for p in profs[1:]:
        stats.add(p)
    stats.strip_dirs().sort_stats(sort).print_stats(top)
    return buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="benchmarks.profile_event")
    p.add_argument("--table-rows", type=int, default=1_000_000)
    p.add_argument("--batch-rows", type=int, default=100_000)
    p.add_argument("--warm", type=int, default=1, help="unprofiled upserts before the profiled one")
    p.add_argument("--top", type=int, default=40)
    p.add_argument("--sort", default="cumulative", help="pstats sort key: cumulative, tottime, ...")
    p.add_argument("--out", type=Path, default=None, help="dump the raw profile here")
    p.add_argument("--work", type=Path, default=None, help="table directory (default: a temporary one)")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mw-profile-") as d:
        prof, tasks, wall = profile(a.table_rows, a.batch_rows, a.warm, a.work or Path(d))
    if a.out:
        prof.dump_stats(a.out)
        if tasks:
            pstats.Stats(*tasks).dump_stats(a.out.with_suffix(".pool.prof"))
    print(f"multiwriter {mw.__file__}: one {a.batch_rows:,}-row event upsert into {a.table_rows:,} rows "
          f"took {wall:.3f} s under the profiler")
    print("== the calling thread (time in pool tasks shows as waiting)")
    print(report([prof], a.sort, a.top))
    if tasks:
        print(f"== {len(tasks)} thread-pool tasks, summed (they overlap: the sum exceeds the wall time)")
        print(report(tasks, a.sort, a.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
