"""``InProcessLock``: threads of one process (tests, single-process pipelines)."""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from ..errors import LockAcquireTimeout, LockLostError
from .base import HolderInfo, LockProvider, TableLock, validate_table_id

if TYPE_CHECKING:  # pragma: no cover
    from ..storage import Storage

_locks: dict[str, threading.Lock] = {}
_holders: dict[str, HolderInfo | None] = {}
_registry_mu = threading.Lock()


def _lock_for(table_id: str) -> threading.Lock:
    with _registry_mu:
        return _locks.setdefault(table_id, threading.Lock())


class _InProcessTableLock(TableLock):
    def __init__(self, table_id: str, default_timeout_s: float) -> None:
        self.table_id = table_id
        self._lock = _lock_for(table_id)
        self._default_timeout_s = default_timeout_s
        self._held = False

    def acquire(self, timeout_s: float | None = None, holder: HolderInfo | None = None) -> None:
        timeout = self._default_timeout_s if timeout_s is None else timeout_s
        if not self._lock.acquire(timeout=timeout):
            raise LockAcquireTimeout(
                f"table lock {self.table_id} not acquired within {timeout:.1f}s; held by {_holders.get(self.table_id)}"
            )
        self._held = True
        _holders[self.table_id] = holder

    def release(self) -> None:
        if self._held:
            self._held = False
            _holders[self.table_id] = None
            self._lock.release()

    def is_held(self) -> bool:
        return self._held

    def check(self) -> None:
        if not self._held:
            raise LockLostError(f"table lock {self.table_id} is not held")


class InProcessLock(LockProvider):
    """A lock shared by the threads of one process; never use it across processes."""

    def __init__(self, acquire_timeout_s: float = 30.0) -> None:
        self.acquire_timeout_s = acquire_timeout_s

    def for_table(self, table_id: str, storage: Storage) -> TableLock:
        return _InProcessTableLock(validate_table_id(table_id), self.acquire_timeout_s)
