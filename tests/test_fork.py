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
from collections.abc import Callable

import pytest

import multiwriter

LOCK_TYPES = (_thread.LockType, type(threading.RLock()))


Resolve = Callable[[], object]  # the lock used there now (None: given up, made anew on use)


def _ours(value: object) -> bool:
    return type(value).__module__.startswith("multiwriter.") and hasattr(value, "__dict__")


def _attrs(value: object) -> dict[str, object]:
    """The attributes of one of the package's objects, or of one of its classes."""
    if isinstance(value, type):
        return dict(vars(value)) if value.__module__.startswith("multiwriter.") else {}
    return dict(vars(value)) if _ours(value) else {}


def module_locks() -> dict[str, Resolve]:
    """Every lock the package keeps for the whole process: at module level, in a module-level
    dict (one per key), as an attribute of a module-level object or class, or of the objects
    such a dict holds. Each with how to find the lock in use there now."""
    found: dict[str, Resolve] = {}
    seen: list[object] = []

    def add(path: str, lock: object, resolve: Resolve) -> None:
        if isinstance(lock, LOCK_TYPES) and all(lock is not v for v in seen):
            seen.append(lock)
            found[path] = resolve

    for info in pkgutil.walk_packages(multiwriter.__path__, "multiwriter."):
        if info.name.endswith(".__main__"):  # running it is the command line
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            path = f"{info.name}.{name}"
            add(path, value, lambda m=module, n=name: vars(m).get(n))
            for attr, lock in _attrs(value).items():
                add(f"{path}.{attr}", lock, lambda m=module, n=name, a=attr: getattr(vars(m).get(n), a, None))
            if not isinstance(value, dict):
                continue
            for key, item in list(value.items()):
                add(f"{path}[{key!r}]", item, lambda m=module, n=name, k=key: vars(m)[n].get(k))
                for attr, lock in _attrs(item).items():
                    add(f"{path}[{key!r}].{attr}", lock,
                        lambda m=module, n=name, k=key, a=attr: getattr(vars(m)[n].get(k), a, None))
    return found


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_child_forked_while_threads_hold_the_packages_locks_can_take_them():
    from multiwriter.lock import zookeeper

    from multiwriter.lock import in_process, storage

    connecting = ("127.0.0.1:1", None, 10.0)
    zookeeper._start_lock(connecting)  # a connect under way holds this lock
    in_process._slot("fork-test")  # a table's in-process lock
    storage._turns("fork-test")  # a table's storage-lock turns
    from kazoo.client import KazooClient

    shared = ("fork-test", None, 10.0)  # a process's shared ZooKeeper client (never started here)
    zookeeper._clients[shared] = zookeeper._SharedClient(KazooClient(hosts="127.0.0.1:1"), "127.0.0.1:1", 1.0)
    try:
        check_a_fork_while_held()
    finally:
        zookeeper._clients.pop(shared, None)
        zookeeper._start_mus.pop(connecting, None)
        in_process._slots.pop("fork-test", None)
        storage._TURNS.pop("fork-test", None)


def check_a_fork_while_held() -> None:
    locks = module_locks()
    planted = ("_start_mus[", "_slots['fork-test'].lock", "_TURNS['fork-test'].mu", "S3Handler._mu", "_CACHE._mu",
               "_clients[('fork-test', None, 10.0)]._reconnect_mu")
    for name in planted:
        assert any(name in found for found in locks), (name, sorted(locks))
    assert len(locks) >= 10, sorted(locks)  # the walk found the package's locks
    held, release = threading.Event(), threading.Event()
    taken: dict[str, object] = {}

    def hold() -> None:  # a parent's thread inside each guarded section at the fork
        for name, resolve in locks.items():  # a lock another thread of this process holds is left out
            lock = resolve()
            if lock is not None and lock.acquire(timeout=2):
                taken[name] = lock
        held.set()
        release.wait()
        for lock in taken.values():
            lock.release()

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert held.wait(timeout=120)
    assert all(any(name in t for t in taken) for name in planted), sorted(taken)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report the locks it cannot take, never return into pytest
        code = 1
        try:
            os.close(read)
            now = {name: locks[name]() for name in taken}
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
