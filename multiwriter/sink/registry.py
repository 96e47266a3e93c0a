"""One live query per writer id: registration so a second query with the same id fails fast.

With a ZooKeeper lock the registration is an ephemeral node (it vanishes with the process's
session, so a crashed query never blocks its own restart for long). Other lock providers only
see one machine or process, so they register in a process-local set.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..config import WriterConfig
from ..errors import ConfigError
from ..storage import Storage
from ..table.table import Table, table_id_for
from ..threads import free_in_child

_local: set[tuple[str, str]] = set()
_local_mu = free_in_child(threading.Lock())


@dataclass
class WriterRegistration:
    table_id: str
    writer_id: str
    _release: Callable[[], None]

    def close(self) -> None:
        self._release()
        self._release = lambda: None


def register_writer(path: str, table: Table | None, settings: dict[str, Any] | None, config: WriterConfig) -> WriterRegistration:
    name = table.name if table is not None else (settings or {}).get("name", "")
    tid = table_id_for(Storage(path), name)
    lock = config.lock
    if hasattr(lock, "register_writer"):
        handle = lock.register_writer(tid, config.writer_id)
        return WriterRegistration(tid, config.writer_id, handle.close)
    key = (tid, config.writer_id)
    with _local_mu:
        if key in _local:
            raise ConfigError(
                f"writer id {config.writer_id!r} is already in use on table {tid} in this process; "
                "two queries must not share a writer id: give each query its own"
            )
        _local.add(key)

    def release() -> None:
        with _local_mu:
            _local.discard(key)

    return WriterRegistration(tid, config.writer_id, release)
