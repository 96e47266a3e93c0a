"""``InProcessLock``: the table lock for threads of one process (tests, single-process pipelines).

Never use it when two processes write one table: each process has its own locks, so nothing
would be excluded. Use :class:`~multiwriter.lock.FileSystemLock` (one machine) or
:class:`~multiwriter.lock.ZooKeeperLock` (any number of machines) there.
"""
from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from ..errors import ConfigError, LockAcquireTimeout, LockError, LockLostError
from .base import HolderInfo, LockProvider, TableLock, resolve_timeout, validate_table_id
from ..threads import free_in_child, renew_in_child

if TYPE_CHECKING:  # pragma: no cover
    from ..storage import Storage

log = logging.getLogger(__name__)


class _Slot:
    """The process-wide lock of one table id and who holds it (for timeout messages)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        renew_in_child(self)
        self.holder: HolderInfo | None = None


_slots: dict[str, _Slot] = {}
_slots_mu = free_in_child(threading.Lock())


def _slot(table_id: str) -> _Slot:
    with _slots_mu:
        return _slots.setdefault(table_id, _Slot())


class InProcessLock(LockProvider):
    """A lock shared by the threads of this process, one per table id."""

    kind = "in-process"

    def __init__(self, acquire_timeout_s: float = 30.0) -> None:
        if acquire_timeout_s < 0:
            raise ConfigError(f"acquire_timeout_s must be >= 0, got {acquire_timeout_s}")
        self.acquire_timeout_s = float(acquire_timeout_s)

    def for_table(self, table_id: str, storage: Storage | None = None) -> TableLock:
        return _InProcessTableLock(validate_table_id(table_id), self.acquire_timeout_s)

    def __repr__(self) -> str:
        return f"InProcessLock(acquire_timeout_s={self.acquire_timeout_s})"


class _InProcessTableLock(TableLock):
    def __init__(self, table_id: str, default_timeout_s: float) -> None:
        self.table_id = table_id
        self._slot = _slot(table_id)
        self._default_timeout_s = default_timeout_s
        self._held = False

    def acquire(self, timeout_s: float | None = None, holder: HolderInfo | None = None, *,
                fenced: bool = False) -> None:
        if self._held:
            raise LockError(f"the in-process lock of table {self.table_id} is already held by this writer")
        timeout = resolve_timeout(timeout_s, self._default_timeout_s)
        if not self._slot.lock.acquire(timeout=timeout):
            current = self._slot.holder
            raise LockAcquireTimeout(
                f"in-process lock of table {self.table_id} not acquired within {timeout:.1f}s; held by "
                f"{current.describe() if current else 'an unnamed holder'}; another thread is committing or hangs"
            )
        self._held = True
        self._slot.holder = holder

    def release(self) -> None:
        if not self._held:
            return
        self._held = False
        self._slot.holder = None
        self._slot.lock.release()

    def is_held(self) -> bool:
        return self._held

    def check(self) -> None:
        # Nothing can take a threading.Lock away from its holder: only "not held" is possible.
        if not self._held:
            raise LockLostError(f"the in-process lock of table {self.table_id} is not held; not committing")
