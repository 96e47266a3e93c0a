"""A process that forks (``multiprocessing``'s default on Linux, a worker pool, a daemon) while
its threads write must leave the child usable: a lock some thread of the parent held at the
fork is copied held, and that thread does not exist in the child to release it."""
from __future__ import annotations

import _thread
import importlib
import os
import pkgutil
import signal
import threading
import time

import pytest

import multiwriter

LOCK_TYPES = (_thread.LockType, type(threading.RLock()))


Where = tuple[object, str, object]  # (module, global's name, key of a dict's lock or NO_KEY)
NO_KEY = object()


def module_locks() -> dict[str, Where]:
    """Every lock a module of the package keeps at module level, alone or in a dict (one per
    key): shared by all the process's threads."""
    found: dict[str, Where] = {}
    seen: list[object] = []
    for info in pkgutil.walk_packages(multiwriter.__path__, "multiwriter."):
        if info.name.endswith(".__main__"):  # running it is the command line
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            kept = list(value.items()) if isinstance(value, dict) else [(NO_KEY, value)]
            for key, lock in kept:
                if isinstance(lock, LOCK_TYPES) and all(lock is not v for v in seen):
                    seen.append(lock)
                    found[f"{info.name}.{name}" + ("" if key is NO_KEY else f"[{key!r}]")] = (module, name, key)
    return found


def current(where: Where) -> object | None:
    """The lock a module uses there now (None: a dict's lock given up, made anew on use)."""
    module, name, key = where
    value = vars(module)[name]
    return value if key is NO_KEY else value.get(key)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_child_forked_while_threads_hold_the_packages_locks_can_take_them():
    from multiwriter.lock import zookeeper

    connecting = ("127.0.0.1:1", None, 10.0)
    zookeeper._start_lock(connecting)  # a connect under way holds this lock
    try:
        check_a_fork_while_held()
    finally:
        zookeeper._start_mus.pop(connecting, None)


def check_a_fork_while_held() -> None:
    locks = module_locks()
    assert any("_start_mus[" in name for name in locks), sorted(locks)
    assert len(locks) >= 10, sorted(locks)  # the walk found the package's locks
    held, release = threading.Event(), threading.Event()

    def hold() -> None:  # a parent's thread inside each guarded section at the fork
        taken = [current(where) for where in locks.values()]
        for lock in taken:
            lock.acquire()
        held.set()
        release.wait()
        for lock in taken:
            lock.release()

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert held.wait(timeout=10)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report the locks it cannot take, never return into pytest
        code = 1
        try:
            os.close(read)
            now = {name: current(where) for name, where in locks.items()}
            stuck = [name for name, lock in now.items() if lock is not None and not lock.acquire(timeout=0.2)]
            os.write(write, "\n".join(stuck).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    try:
        deadline = time.monotonic() + 60
        while (done := os.waitpid(pid, os.WNOHANG))[0] == 0:
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                pytest.fail("the forked child did not finish within 60s (killed)")
            time.sleep(0.05)
        assert os.waitstatus_to_exitcode(done[1]) == 0
        with os.fdopen(read, "rb") as f:
            stuck = [name for name in f.read().decode().split("\n") if name]
    finally:
        release.set()
        holder.join(timeout=10)
    assert stuck == [], f"held forever in a forked child: {stuck}"
