"""``FileSystemLock``: an atomically created lock file under ``.hoodie/.locks/``.

For one machine and a local disk only: it relies on atomic create (``link``) and on clocks
agreeing about lease expiry. A holder renews its lease while it holds the lock; a waiter may
break a lock whose lease expired (its holder died), re-checking the token right before.
"""
from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from typing import TYPE_CHECKING

from ..errors import LockAcquireTimeout, LockLostError
from ..storage import FileExists
from .base import HolderInfo, LockProvider, TableLock, validate_table_id

if TYPE_CHECKING:  # pragma: no cover
    from ..storage import Storage

log = logging.getLogger(__name__)
LOCK_FILE = ".hoodie/.locks/table.lock"


class FileSystemLock(LockProvider):
    def __init__(self, acquire_timeout_s: float = 30.0, lease_s: float = 30.0, poll_s: float = 0.05) -> None:
        self.acquire_timeout_s = acquire_timeout_s
        self.lease_s = lease_s
        self.poll_s = poll_s

    def for_table(self, table_id: str, storage: Storage) -> TableLock:
        return _FileTableLock(self, validate_table_id(table_id), storage)


class _FileTableLock(TableLock):
    def __init__(self, provider: FileSystemLock, table_id: str, storage: Storage) -> None:
        self.p = provider
        self.table_id = table_id
        self.storage = storage
        self._token: str | None = None
        self._holder: dict = {}
        self._renewer: threading.Thread | None = None
        self._stop = threading.Event()
        self._lost: str | None = None

    def _body(self) -> bytes:
        return json.dumps({**self._holder, "token": self._token, "expires_at": time.time() + self.p.lease_s}).encode()

    def _read(self) -> dict | None:
        try:
            return json.loads(self.storage.read_bytes(LOCK_FILE))
        except FileNotFoundError:
            return None
        except ValueError:
            return {"token": None, "expires_at": 0}  # torn or corrupt: treat as expired

    def acquire(self, timeout_s: float | None = None, holder: HolderInfo | None = None) -> None:
        timeout = self.p.acquire_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout
        self._token = uuid.uuid4().hex
        self._holder = holder.to_dict() if holder else {}
        while True:
            try:
                self.storage.put_if_absent(LOCK_FILE, self._body())
                break
            except FileExists:
                cur = self._read()
                if cur is not None and cur.get("expires_at", 0) < time.time():
                    self._break(cur)
                    continue
                if time.monotonic() >= deadline:
                    raise LockAcquireTimeout(
                        f"table lock {self.table_id} ({LOCK_FILE}) not acquired within {timeout:.1f}s; held by {cur}"
                    ) from None
                time.sleep(self.p.poll_s)
        self._lost = None
        self._stop.clear()
        self._renewer = threading.Thread(target=self._renew, daemon=True, name=f"fslock-{self.table_id}")
        self._renewer.start()

    def _break(self, stale: dict) -> None:
        again = self._read()
        if again is not None and again.get("token") == stale.get("token") and again.get("expires_at", 0) < time.time():
            log.warning("breaking expired lock of %s held by %s", self.table_id, stale)
            self.storage.delete(LOCK_FILE)

    def _renew(self) -> None:
        while not self._stop.wait(self.p.lease_s / 3):
            cur = self._read()
            if cur is None or cur.get("token") != self._token:
                self._lost = "taken by another holder"
                return
            self.storage.write_bytes(LOCK_FILE, self._body())

    def release(self) -> None:
        if self._token is None:
            return
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join(timeout=5)
        cur = self._read()
        if cur is not None and cur.get("token") == self._token:
            self.storage.delete(LOCK_FILE)
        self._token = None

    def is_held(self) -> bool:
        return self._token is not None and self._lost is None

    def check(self) -> None:
        if self._token is None:
            raise LockLostError(f"the lock of {self.table_id} is not held")
        cur = self._read()
        if cur is None or cur.get("token") != self._token:
            self._lost = "taken by another holder"
        if self._lost:
            raise LockLostError(f"the file lock of {self.table_id} was lost ({self._lost}); not committing")
