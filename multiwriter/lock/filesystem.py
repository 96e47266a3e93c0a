"""``FileSystemLock``: an atomically created lock file under ``.hoodie/.locks/``.

For ONE MACHINE and a LOCAL DISK only. It relies on an atomic create-if-absent (``link`` on a
local filesystem; object stores have no such primitive) and on every process reading the same
clock to judge lease expiry. Several machines must use :class:`ZooKeeperLock`.

Files, all under ``.hoodie/.locks/``:

* ``table.lock`` — created with ``put_if_absent``; holds the holder, a unique token, the lease
  length and the first expiry. Never rewritten, so nobody can overwrite someone else's lock.
* ``lease-<token>`` — the holder's current expiry; only that holder writes it, every
  ``lease_s / 3`` from a daemon thread. A holder whose lease already ran out stops renewing and
  counts the lock as lost (a waiter may be breaking it right now).
* ``break-<token>`` — created with ``put_if_absent`` by whoever deletes the lock file holding
  ``<token>`` (a waiter breaking an expired lease, or the holder releasing). Being the only one
  allowed to delete *that* lock file, it re-reads the token right before deleting, so it can never
  delete a newer holder's file.

A lease never counts for longer than the waiter's own ``lease_s`` from the moment this process
first saw that state of the lock (its token and expiry; :class:`~.base.FirstSightings`), so an
``expires_at`` forged far ahead, ``Infinity`` or ``NaN``, or a lock file with an mtime in the
future, blocks a waiter for one lease. A lock file whose token is not a plain name (``..``,
``/``: it would name files elsewhere), or whose fields do not parse, counts as an unreadable lock
held since its mtime: broken after one lease, with a warning naming it.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import threading
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..redact import redact
from ..errors import ConfigError, LockAcquireTimeout, LockError, LockLostError
from ..storage import FileExists
from .base import SIGHTINGS, HolderInfo, LockProvider, TableLock, describe_holder, resolve_timeout, validate_table_id

if TYPE_CHECKING:  # pragma: no cover
    from ..storage import Storage

log = logging.getLogger(__name__)

LOCK_DIR = ".hoodie/.locks"
LOCK_FILE = f"{LOCK_DIR}/table.lock"
#: a token names files (``lease-<token>``, ``break-<token>``): ours are hex uuids
_TOKEN_RE = re.compile(r"^[A-Za-z0-9_-]{1,128}\Z")


def lease_path(token: str) -> str:
    return f"{LOCK_DIR}/lease-{token}"


def break_path(token: str) -> str:
    return f"{LOCK_DIR}/break-{token}"


@dataclass(frozen=True)
class LockFileState:
    """What one read of ``table.lock`` (plus its lease file) says."""

    token: str  # the holder's token; a digest of the bytes for an unreadable file
    expires_at: float  # wall-clock seconds
    holder: dict[str, Any]
    #: the reader's own lease: no state counts for longer since this process first saw it
    bound_s: float = math.inf
    #: where the lock file is (a sighting is of one table's lock)
    location: str = ""

    def expired(self, now: float) -> bool:
        if now >= self.expires_at:
            return True
        return SIGHTINGS.age((self.location, self.token, repr(self.expires_at))) > self.bound_s


class FileSystemLock(LockProvider):
    """A lock file for writers on one machine (local disk only; see the module docstring).

    ``lease_s`` bounds how long a crashed holder blocks others; ``poll_s`` is how often a waiter
    looks again.
    """

    kind = "filesystem"

    def __init__(self, acquire_timeout_s: float = 30.0, lease_s: float = 30.0, poll_s: float = 0.05) -> None:
        if acquire_timeout_s < 0 or lease_s <= 0 or poll_s <= 0:
            raise ConfigError(
                f"FileSystemLock needs acquire_timeout_s >= 0, lease_s > 0 and poll_s > 0; "
                f"got {acquire_timeout_s}, {lease_s}, {poll_s}"
            )
        self.acquire_timeout_s = float(acquire_timeout_s)
        self.lease_s = float(lease_s)
        self.poll_s = float(poll_s)

    def for_table(self, table_id: str, storage: Storage) -> TableLock:
        if storage is None:
            raise ConfigError("FileSystemLock needs the table's storage: the lock file lives in the table")
        if not storage.is_local:
            raise ConfigError(
                f"FileSystemLock needs a local filesystem (atomic create); {redact(storage.uri)} is not local: "
                "use ZooKeeperLock for tables on object stores or HDFS"
            )
        return _FileTableLock(self, validate_table_id(table_id), storage)

    def __repr__(self) -> str:
        return f"FileSystemLock(acquire_timeout_s={self.acquire_timeout_s}, lease_s={self.lease_s}, poll_s={self.poll_s})"


def read_lock_file(storage: Storage, default_lease_s: float) -> LockFileState | None:
    """The current lock, or None if there is none. An unreadable file counts as held since its
    mtime for ``default_lease_s`` (so a corrupt file blocks for one lease, then gets broken)."""
    try:
        raw = storage.read_bytes(LOCK_FILE)
    except FileNotFoundError:
        return None
    try:
        body = json.loads(raw)
        token = body["token"]
        expires_at = float(body["expires_at"])
        if not isinstance(token, str) or not _TOKEN_RE.match(token):
            raise ValueError(f"the token {str(token)[:100]!r} is no plain name")
    except (ValueError, KeyError, TypeError, OverflowError, RecursionError) as e:
        info = storage.info(LOCK_FILE)
        if info is None:
            return None
        digest = hashlib.sha1(raw).hexdigest()[:20]
        text = raw[:200].decode(errors="replace")
        log.warning("the lock file %s is not one of ours (%s): it counts as held for one lease from its mtime, "
                    "then is broken", LOCK_FILE, str(e)[:200])
        return LockFileState(f"unreadable-{digest}", info.mtime_s + default_lease_s, {"raw": text}, default_lease_s,
                             storage.abs(LOCK_FILE))
    try:
        renewed = float(json.loads(storage.read_bytes(lease_path(token)))["expires_at"])
        expires_at = max(expires_at, renewed)
    except (FileNotFoundError, ValueError, KeyError, TypeError, OverflowError, RecursionError):
        pass  # not renewed yet, or renewal torn: the lock file's own expiry stands
    return LockFileState(token, expires_at, body, default_lease_s, storage.abs(LOCK_FILE))


class _FileTableLock(TableLock):
    def __init__(self, provider: FileSystemLock, table_id: str, storage: Storage) -> None:
        self.p = provider
        self.table_id = table_id
        self.storage = storage
        self._token: str | None = None
        self._expires_at = 0.0  # our last expiry that reached the disk
        self._lost: str | None = None
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    # -- acquire -------------------------------------------------------------------------------
    def acquire(self, timeout_s: float | None = None, holder: HolderInfo | None = None, *,
                fenced: bool = False) -> None:
        if self._token is not None:
            raise LockError(f"the file lock of table {self.table_id} is already held by this writer; release it first")
        timeout = resolve_timeout(timeout_s, self.p.acquire_timeout_s)
        deadline = time.monotonic() + timeout
        token = uuid.uuid4().hex
        while True:
            now = time.time()
            body = {**(holder.to_dict() if holder else {}), "token": token, "table_id": self.table_id,
                    "acquired_at": now, "lease_s": self.p.lease_s, "expires_at": now + self.p.lease_s}
            try:
                self.storage.put_if_absent(LOCK_FILE, json.dumps(body).encode(), durable=False)
                break
            except FileExists:
                pass
            current = read_lock_file(self.storage, self.p.lease_s)
            if current is None:
                continue  # released between our create and our read: try again at once
            if current.expired(time.time()) and self._break(current):
                continue
            if time.monotonic() >= deadline:
                raise LockAcquireTimeout(
                    f"file lock of table {self.table_id} ({self.storage.uri_of(LOCK_FILE)}) not acquired within "
                    f"{timeout:.1f}s; held by {describe_holder(current.holder)}; another writer is committing or "
                    "hangs (a crashed holder's lease runs out after lease_s): retry later"
                )
            time.sleep(max(0.001, min(self.p.poll_s, deadline - time.monotonic())))
        self._token, self._expires_at, self._lost = token, body["expires_at"], None
        self._start_renewer()
        log.debug("file lock of %s acquired (token %s)", self.table_id, token)

    def _break(self, stale: LockFileState) -> bool:
        """Delete a lock whose lease ran out; True if we deleted it. Only the creator of
        ``break-<token>`` may delete, and only after re-reading the same token, still expired."""
        if not self._claim_delete(stale.token):
            return False
        try:
            again = read_lock_file(self.storage, self.p.lease_s)
            if again is None or again.token != stale.token or not again.expired(time.time()):
                return False
            ago = time.time() - again.expires_at
            log.warning(
                "breaking the file lock of table %s: the lease of %s %s (holder crashed or paused)",
                self.table_id, describe_holder(stale.holder),
                f"ran out {ago:.1f}s ago" if ago >= 0 else
                f"did not change for longer than {self.p.lease_s:.0f}s (its expiry {again.expires_at} is not believed)",
            )
            self.storage.delete(LOCK_FILE)
            self.storage.delete(lease_path(stale.token))
            return True
        finally:
            self.storage.delete(break_path(stale.token))

    def _claim_delete(self, token: str) -> bool:
        """Become the one process allowed to delete the lock file holding ``token``."""
        guard = break_path(token)
        try:
            self.storage.put_if_absent(guard, b"", durable=False)
            return True
        except FileExists:
            pass
        info = self.storage.info(guard)
        if info is not None and time.time() - info.mtime_s > self.p.lease_s:
            # Its creator died between claiming and deleting; clear the way for the next round.
            log.warning("removing the stale guard %s of table %s", guard, self.table_id)
            self.storage.delete(guard)
        return False

    # -- renewal ---------------------------------------------------------------------------------
    def _start_renewer(self) -> None:
        self._stop = threading.Event()
        self._renewer = threading.Thread(
            target=self._renew_loop, args=(self._token, self._stop), daemon=True, name=f"mw-filelock-{self.table_id}"
        )
        self._renewer.start()

    def _renew_loop(self, token: str, stop: threading.Event) -> None:
        while not stop.wait(self.p.lease_s / 3):
            try:
                if not self._renew_once(token):
                    return
            except OSError as e:  # keep trying: the lease only counts as lost once it expires
                log.warning("renewing the file lock of table %s failed: %s", self.table_id, e)

    def _renew_once(self, token: str) -> bool:
        """Extend our lease; False (and the lock counts as lost) if that is no longer safe."""
        now = time.time()
        if now >= self._expires_at:
            self._mark_lost(f"its lease expired {now - self._expires_at:.1f}s before it could be renewed "
                            "(process paused or disk slow)")
            return False
        current = read_lock_file(self.storage, self.p.lease_s)
        if current is None or current.token != token:
            self._mark_lost("the lock file was removed or replaced by another holder")
            return False
        expires_at = now + self.p.lease_s
        self.storage.write_bytes(lease_path(token), json.dumps({"token": token, "expires_at": expires_at}).encode())
        self._expires_at = expires_at
        return True

    def _mark_lost(self, why: str) -> None:
        if self._lost is None:
            self._lost = why
            log.warning("file lock of table %s lost: %s", self.table_id, why)

    # -- release / state -------------------------------------------------------------------------
    def release(self) -> None:
        token, self._token = self._token, None
        if token is None:
            return
        self._stop.set()
        if self._renewer is not None and self._renewer is not threading.current_thread():
            self._renewer.join(timeout=5)
        self._renewer = None
        if not self._claim_delete(token):
            return  # a waiter is breaking our (expired) lock right now: it will delete it
        try:
            current = read_lock_file(self.storage, self.p.lease_s)
            if current is not None and current.token == token:
                self.storage.delete(LOCK_FILE)
            self.storage.delete(lease_path(token))
        finally:
            self.storage.delete(break_path(token))

    def is_held(self) -> bool:
        return self._token is not None and self._lost is None and time.time() < self._expires_at

    def check(self) -> None:
        if self._token is None:
            raise LockLostError(f"the file lock of table {self.table_id} is not held; not committing")
        if self._lost is None:
            current = read_lock_file(self.storage, self.p.lease_s)
            if current is None or current.token != self._token:
                self._mark_lost("the lock file was removed or replaced by another holder")
            elif time.time() >= self._expires_at:
                self._mark_lost("its lease expired (process paused or renewals failing)")
        if self._lost is not None:
            raise LockLostError(
                f"the file lock of table {self.table_id} was lost ({self._lost}); another writer may hold it, "
                "so this commit is refused and will be retried"
            )
