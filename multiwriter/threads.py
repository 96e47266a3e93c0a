"""What the process's threads share, made safe across a fork: thread pools that live as long as
the process (started on first use, started again in a forked child, which has none of its
parent's threads), and locks made free again in the child (:func:`free_in_child`,
:func:`renew_in_child`)."""
from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

log = logging.getLogger(__name__)

L = TypeVar("L")
O = TypeVar("O")
_LOCK_TYPES = (type(threading.Lock()), type(threading.RLock()))


def free_in_child(lock: L) -> L:
    """``lock``, made free again in every forked child. A fork copies a lock that another
    thread holds as held, and that thread does not exist in the child to release it: the
    child's first acquire would wait forever. The standard library renews its own locks the same
    way (``_at_fork_reinit``, as ``logging`` does for its handlers)."""
    os.register_at_fork(after_in_child=lock._at_fork_reinit)  # type: ignore[attr-defined]
    return lock


#: objects whose locks are made free again in a forked child (see renew_in_child)
_RENEWED: weakref.WeakSet[Any] = weakref.WeakSet()


def renew_in_child(owner: O) -> O:
    """``owner`` (an object the whole process shares: a cache, a clock), its locks and
    conditions made free again in every forked child, as :func:`free_in_child` does for a lock
    alone. Called from ``__init__``; the object is held weakly."""
    _RENEWED.add(owner)
    return owner


def _renew_owned() -> None:
    for owner in list(_RENEWED):
        for value in vars(owner).values():
            if isinstance(value, (_LOCK_TYPES, threading.Condition)):
                value._at_fork_reinit()


os.register_at_fork(after_in_child=_renew_owned)


class ProcessPool:
    """One lazily started :class:`ThreadPoolExecutor` per process, ``workers`` threads
    (default: one per core)."""

    def __init__(self, name: str, workers: int | None = None) -> None:
        self.name = name
        self.workers = workers
        self._pool: ThreadPoolExecutor | None = None
        self._mu = threading.Lock()
        os.register_at_fork(after_in_child=self._forget)

    def get(self) -> ThreadPoolExecutor:
        with self._mu:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.workers or max(os.cpu_count() or 1, 1),
                                                thread_name_prefix=self.name)
            return self._pool

    def _forget(self) -> None:
        self._pool, self._mu = None, threading.Lock()


class Deadlines:
    """Calls due after a delay, made by one thread per process: a bound on a wait that is
    usually cancelled long before (each lock acquire's overall timeout), for which a timer
    thread apiece cost a thread start and a stop per acquire. The calls must return at once."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._forget()
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        self._cv = threading.Condition(threading.Lock())
        self._due: list[list[Any]] = []  # [when, seq, call or None once cancelled], a heap
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    def call_after(self, delay_s: float, call: Callable[[], None]) -> Callable[[], None]:
        """Run ``call`` in ``delay_s`` seconds unless the returned function cancels it first."""
        entry: list[Any] = [time.monotonic() + delay_s, next(self._seq), call]
        with self._cv:
            heapq.heappush(self._due, entry)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            elif self._due[0] is entry:  # sooner than what the thread waits for
                self._cv.notify()

        def cancel() -> None:
            entry[2] = None

        return cancel

    def _run(self) -> None:
        while True:
            with self._cv:
                while self._due and self._due[0][2] is None:
                    heapq.heappop(self._due)
                wait = self._due[0][0] - time.monotonic() if self._due else None
                if wait is None or wait > 0:
                    self._cv.wait(wait)
                    continue
                call = heapq.heappop(self._due)[2]
            try:
                call()
            except Exception:  # noqa: BLE001 -- one failing call must not end the others
                log.exception("%s: a deadline's call failed", self.name)
