"""Thread pools that live as long as the process: started on first use, started again in a
forked child (a child has none of its parent's threads)."""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor


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
