"""The lock interface: one small contract that every provider keeps."""
from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from ..errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from ..storage import Storage

TABLE_ID_RE = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")


@dataclass(frozen=True)
class HolderInfo:
    """Who holds the lock; stored with the lock as JSON so an operator can see it."""

    writer_id: str
    host: str
    pid: int
    instant: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


class TableLock(ABC):
    """One lock on one table, as used by one writer."""

    @abstractmethod
    def acquire(self, timeout_s: float | None = None, holder: HolderInfo | None = None) -> None: ...

    @abstractmethod
    def release(self) -> None: ...

    @abstractmethod
    def is_held(self) -> bool: ...

    @abstractmethod
    def check(self) -> None:
        """Raise LockLostError if we believed we held the lock but lost it."""

    def close(self) -> None:
        self.release()

    def __enter__(self) -> TableLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class LockProvider(ABC):
    """The user-facing lock configuration (``mw.ZooKeeperLock(...)`` and friends)."""

    @abstractmethod
    def for_table(self, table_id: str, storage: Storage) -> TableLock: ...

    def close(self) -> None:
        """Release connections this provider holds."""


def validate_table_id(table_id: str) -> str:
    if not isinstance(table_id, str) or not TABLE_ID_RE.match(table_id):
        raise ConfigError(f"table id {table_id!r} must match {TABLE_ID_RE.pattern}")
    return table_id
