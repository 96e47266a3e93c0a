"""Table lock providers: ZooKeeper (across machines), a lock object in the table's storage (S3, no
ZooKeeper), a lock file (one machine), in-process (threads).

Every provider hands out :class:`TableLock` objects with the same contract, including the commit
fence :meth:`TableLock.check`.
"""
from __future__ import annotations

from .base import HolderInfo, LockProvider, TableLock, validate_table_id, validate_writer_id
from .filesystem import FileSystemLock
from .in_process import InProcessLock
from .storage import StorageLock
from .zookeeper import WriterRegistration, ZooKeeperLock

__all__ = [
    "FileSystemLock",
    "HolderInfo",
    "InProcessLock",
    "LockProvider",
    "StorageLock",
    "TableLock",
    "WriterRegistration",
    "ZooKeeperLock",
    "validate_table_id",
    "validate_writer_id",
]
