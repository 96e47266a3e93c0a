"""``StorageLock``: the table lock as one object in the table's own storage, in Hudi's format.

Hudi 1.1's ``StorageBasedLockProvider`` (RFC-91) keeps a table's lock as one JSON object,
``<table>/.hoodie/.locks/table_lock.json``, written only with conditional writes. This module
reads and writes that object the same way, so Python writers and Hudi's JVM writers of one
table exclude each other without ZooKeeper:

* The object holds ``{"expired": bool, "validUntil": <epoch ms>, "owner": "<uuid>"}`` (Hudi's
  reader ignores other fields; we add ``holder``, who we are, for operators and messages,
  ``by``, which tells our objects from a JVM writer's, and ``waitedMs``, how long the holder
  waited: the signs by which writers take turns, :class:`_Turns`).
* Acquire: create it if absent (S3 ``If-None-Match: *``, GCS ``ifGenerationMatch=0``), or replace it if it is free (released:
  ``expired`` set; or its lease ran out: now past ``validUntil`` plus half a second for clock
  drift) conditionally on the ETag just read (``If-Match``). HTTP 412 means another writer won.
  A lease never counts for longer than the waiter's own ``validity_s`` (plus the drift) from the
  moment this process first saw that version of the object (:class:`~.base.FirstSightings`): a
  ``validUntil`` forged ten years ahead blocks writers for one validity, not ten years. A
  ``validUntil`` that is no Java ``long`` of epoch milliseconds (``Infinity``, ``1e400``, a
  string, deep nesting) makes the object unreadable: a ``LockError`` naming it.
* Renew: a daemon thread rewrites our object (``If-Match`` our ETag) with a later ``validUntil``
  every ``renew_interval_s``.
* Release: one conditional write of our object with ``expired: true``.

The commit fence (:meth:`TableLock.check`) refuses a commit unless the object still names our
owner id and at least half of the validity is left on our own monotonic clock since the last
renewal that landed: a holder that was paused (GC, SIGSTOP, a slow network) stops committing
long before anyone else may take the lock over. Like every lease, it assumes the hosts' clocks
agree to well within the validity and the drift allowance, and that nothing pauses a holder
between the fence and its (single, small) commit write for longer than half the validity.

Three stores: S3 (and S3-compatible servers) through boto3's conditional ``put_object``; Google
Cloud Storage through uploads with a generation precondition (:mod:`multiwriter.gcs`); and a
local disk (an atomic create-if-absent; replace under an ``flock`` after comparing the content
read: for tests and writers on one machine).
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import logging
import os
import random
import threading
import time
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import urlsplit

from .. import gcs, s3
from ..errors import ConfigError, LockAcquireTimeout, LockError, LockLostError
from .base import SIGHTINGS, HolderInfo, LockProvider, TableLock, describe_holder, resolve_timeout, validate_table_id
from ..threads import free_in_child, renew_in_child

if TYPE_CHECKING:  # pragma: no cover
    from ..storage import Storage

log = logging.getLogger(__name__)

#: Hudi's lock folder and file name (``StorageBasedLockProvider.DEFAULT_TABLE_LOCK_FILE_NAME``)
LOCK_DIR = ".hoodie/.locks"
LOCK_FILE_NAME = "table_lock.json"
LOCK_FILE = f"{LOCK_DIR}/{LOCK_FILE_NAME}"
#: a lease counts as run out only this long after its ``validUntil`` (Hudi allows the same drift)
CLOCK_DRIFT_S = 0.5
#: Hudi's defaults (``hoodie.write.lock.storage.validity.timeout.secs`` / ``renew.interval.secs``)
DEFAULT_VALIDITY_S = 300.0
DEFAULT_RENEW_INTERVAL_S = 30.0
#: ``validUntil`` is a Java ``long``
_MAX_MS = 2**63 - 1
#: the ``by`` field of our lock objects (Hudi's reader ignores fields it does not know)
WRITTEN_BY = "multiwriter"
#: how long a sign that writers wait for the lock (a holder that had waited, a Hudi JVM holder)
#: keeps this process taking turns (:class:`_Turns`)
CONTENTION_MEMORY_S = 10.0
#: how often Hudi's JVM writers look at a held lock again (their retry wait), with some margin
JVM_RETRY_S = 1.2
#: a JVM writer seen holding the lock within this long is taken to want it again
JVM_MEMORY_S = 2.5 * JVM_RETRY_S


class StoreUnavailable(LockError):
    """The store did not answer clearly (timeout, throttling, a 409 of a concurrent conditional
    write, a 5xx): the state of the lock object is unknown, try again."""


# -- the lock object ------------------------------------------------------------------------------
@dataclass(frozen=True)
class LockObject:
    """One read of ``table_lock.json``: Hudi's three fields, its version and our holder record."""

    owner: str
    valid_until_ms: int
    expired: bool
    version: str  # the ETag (S3), a digest of the bytes (local disk)
    holder: dict[str, Any] = field(default_factory=dict)
    #: written by one of our writers (Hudi's JVM writers write the three fields alone)
    ours: bool = False
    #: how long its holder had waited for the lock (our writers record it: a sign of contention)
    waited_ms: int = 0

    def is_free(self, now_s: float) -> bool:
        """Released, or its lease ran out (with the drift allowance) by the wall clock ``now_s``."""
        return self.expired or now_s * 1000.0 > self.valid_until_ms + CLOCK_DRIFT_S * 1000.0

    def describe(self) -> str:
        who = f"{describe_holder(self.holder)}, owner {self.owner}" if self.holder else f"a Hudi writer (owner {self.owner})"
        state = "released" if self.expired else f"lease until {self.valid_until_ms / 1000.0:.3f} (epoch s)"
        return f"{who}, {state}"


def encode(owner: str, valid_until_ms: int, expired: bool, holder: HolderInfo | None, waited_ms: int = 0) -> bytes:
    body: dict[str, Any] = {"expired": expired, "validUntil": int(valid_until_ms), "owner": owner, "by": WRITTEN_BY}
    if holder is not None:
        body["holder"] = holder.to_dict()
    if waited_ms > 0:
        body["waitedMs"] = int(waited_ms)
    return json.dumps(body, separators=(",", ":")).encode()


def decode(raw: bytes, version: str) -> LockObject:
    """Parse a lock object; an unreadable one is a ``LockError`` naming what is wrong (it is
    never overwritten blindly: an operator must look at it)."""
    try:
        body = json.loads(raw)
        owner, valid_until, expired = body["owner"], body["validUntil"], body["expired"]
        if not isinstance(owner, str) or not isinstance(expired, bool) or isinstance(valid_until, bool):
            raise TypeError("owner must be a string, expired a boolean")
        if not isinstance(valid_until, (int, float)) or not 0 <= valid_until <= _MAX_MS:
            raise ValueError(f"validUntil {str(valid_until)[:40]} is no time in epoch milliseconds")
        holder = body.get("holder") if isinstance(body.get("holder"), dict) else {}
        waited = body.get("waitedMs")
        waited_ms = waited if isinstance(waited, int) and not isinstance(waited, bool) and 0 <= waited < 2**31 else 0
        return LockObject(owner, int(valid_until), expired, version, holder, body.get("by") == WRITTEN_BY, waited_ms)
    except (ValueError, KeyError, TypeError, RecursionError) as e:
        raise LockError(
            f"the storage lock object {LOCK_FILE} is not a Hudi lock ({str(e)[:200]}): {raw[:200]!r}; "
            "check which tool wrote it, and delete it only when no writer runs"
        ) from e


# -- stores ------------------------------------------------------------------------------------------
class LockStore(ABC):
    """Conditional reads and writes of one lock object."""

    location: str

    @abstractmethod
    def read(self) -> LockObject | None:
        """The object, or None if there is none; ``StoreUnavailable`` when unknown."""

    @abstractmethod
    def write(self, data: bytes, expected: str | None) -> str | None:
        """Create (``expected`` None: only if absent) or replace (only if the version is still
        ``expected``); the new version, or None when the precondition failed (someone else won);
        ``StoreUnavailable`` when the outcome is unknown."""


class S3LockStore(LockStore):
    """``put_object`` with ``IfNoneMatch='*'`` / ``IfMatch=<ETag>``, as Hudi's S3 lock client."""

    def __init__(self, bucket: str, key: str, call_timeout_s: float) -> None:
        self.bucket, self.key = bucket, key
        self.location = f"s3://{bucket}/{key}"
        self.call_timeout_s = call_timeout_s

    def client(self) -> Any:
        return s3.s3_client(self.call_timeout_s)

    def read(self) -> LockObject | None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            got = self.client().get_object(Bucket=self.bucket, Key=self.key)
            raw = got["Body"].read()
        except ClientError as e:
            if _status(e) == 404 or _code(e) in ("NoSuchKey", "404"):
                return None
            raise StoreUnavailable(f"reading {self.location}: {e}") from e
        except BotoCoreError as e:
            raise StoreUnavailable(f"reading {self.location}: {e}") from e
        return decode(raw, got["ETag"])

    def write(self, data: bytes, expected: str | None) -> str | None:
        from botocore.exceptions import BotoCoreError, ClientError

        cond = {"IfNoneMatch": "*"} if expected is None else {"IfMatch": expected}
        try:
            got = self.client().put_object(Bucket=self.bucket, Key=self.key, Body=data,
                                           ContentType="application/json", **cond)
        except ClientError as e:
            status = _status(e)
            if status == 412 or _code(e) == "PreconditionFailed":
                return None
            if expected is not None and status == 404:
                return None  # replacing an object that is gone: not ours any more
            raise StoreUnavailable(f"writing {self.location} (HTTP {status}): {e}") from e
        except BotoCoreError as e:
            raise StoreUnavailable(f"writing {self.location}: {e}") from e
        return str(got["ETag"])


class GcsLockStore(LockStore):
    """Uploads with ``ifGenerationMatch=0`` / ``ifGenerationMatch=<generation>``, as Hudi's GCS
    lock client (``org.apache.hudi.gcp.transaction.lock.GCSStorageLockClient``): the object's
    generation is its version."""

    def __init__(self, bucket: str, key: str, call_timeout_s: float) -> None:
        self.bucket, self.key = bucket, key
        self.location = f"gs://{bucket}/{key}"
        self.call_timeout_s = call_timeout_s

    def read(self) -> LockObject | None:
        try:
            got = gcs.client(self.call_timeout_s).get(self.bucket, self.key)
        except gcs.GcsError as e:
            raise StoreUnavailable(f"reading {self.location}: {e}") from e
        return None if got is None else decode(got[0], got[1])

    def write(self, data: bytes, expected: str | None) -> str | None:
        try:
            return gcs.client(self.call_timeout_s).create(self.bucket, self.key, data, expected or "0",
                                                          content_type="application/json")
        except gcs.PreconditionFailed:
            return None
        except gcs.GcsError as e:
            if expected is not None and e.status == 404:
                return None  # replacing an object that is gone: not ours any more
            raise StoreUnavailable(f"writing {self.location} (HTTP {e.status}): {e}") from e


s3_client = s3.s3_client  # where benchmarks and tools found it before it moved down a floor


def _status(e: Any) -> int:
    return s3.status(e)


def _code(e: Any) -> str:
    return s3.code(e)


class LocalLockStore(LockStore):
    """The same object on a local disk: created by ``link`` of a complete temporary file (fails
    if the name exists); replaced (``rename`` of a temporary file over it) only after the content
    read under an ``flock`` still has the expected digest. Readers see whole files only. The
    ``flock`` dies with its process, so a killed writer blocks nobody."""

    def __init__(self, path: str, refuse_links: Callable[[str], None] | None = None) -> None:
        self.path = path
        self.location = path
        self._guard = f"{path}.guard"
        #: the table storage's check that no folder on the way is a symbolic link (writes only)
        self._refuse_links = refuse_links

    def read(self) -> LockObject | None:
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return None
        return decode(raw, _digest(raw))

    def write(self, data: bytes, expected: str | None) -> str | None:
        if self._refuse_links is not None:
            self._refuse_links(self.path)
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        try:
            fd = os.open(self._guard, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as e:
            if e.errno != errno.ELOOP:
                raise
            raise LockError(f"{self._guard} is a symbolic link: a lock is never written through one; delete it "
                            "(it is planted: this table's writers create a plain file there)") from e
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError as e:
                raise StoreUnavailable(f"{self.path} is being written by another process") from e
            if expected is not None:
                try:
                    with open(self.path, "rb") as f:
                        if _digest(f.read()) != expected:
                            return None
                except FileNotFoundError:
                    return None
            tmp = f"{self.path}.{uuid.uuid4().hex}.tmp"
            with open(tmp, "wb") as f:
                f.write(data)
            try:
                if expected is None:
                    os.link(tmp, self.path)  # create-if-absent of a complete file: readers never see a partial one
                else:
                    os.replace(tmp, self.path)
            except FileExistsError:
                return None
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
            return _digest(data)
        finally:
            os.close(fd)  # also drops the flock


def _digest(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


# -- the provider ----------------------------------------------------------------------------------
class StorageLock(LockProvider):
    """Table locks kept in the table's storage (``s3://``, ``gs://`` or a local disk), shared with Hudi's
    ``StorageBasedLockProvider``; no ZooKeeper needed.

    ``validity_s``: how long a lease lasts without renewal (a crashed holder blocks others this
    long at most); ``renew_interval_s``: how often the holder renews (at most a third of the
    validity); ``poll_s``: how often a waiter looks again.
    """

    kind = "storage"

    def __init__(
        self,
        *,
        validity_s: float = DEFAULT_VALIDITY_S,
        renew_interval_s: float = DEFAULT_RENEW_INTERVAL_S,
        acquire_timeout_s: float = 60.0,
        poll_s: float = 0.05,
    ) -> None:
        for name, v in (("validity_s", validity_s), ("renew_interval_s", renew_interval_s), ("poll_s", poll_s)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
                raise ConfigError(f"StorageLock needs {name} > 0 seconds, got {v!r}")
        if isinstance(acquire_timeout_s, bool) or not isinstance(acquire_timeout_s, (int, float)) or acquire_timeout_s < 0:
            raise ConfigError(f"StorageLock needs acquire_timeout_s >= 0 seconds, got {acquire_timeout_s!r}")
        if renew_interval_s * 3 > validity_s * (1 + 1e-9):  # a third exactly is allowed (0.1 * 3 is 0.30000000000000004)
            raise ConfigError(
                f"StorageLock renew_interval_s={renew_interval_s} must be at most a third of validity_s={validity_s}: "
                "a holder must get several renewals in before its lease runs out (Hudi: "
                "hoodie.write.lock.storage.renew.interval.secs well below validity.timeout.secs)"
            )
        self.validity_s = float(validity_s)
        self.renew_interval_s = float(renew_interval_s)
        self.acquire_timeout_s = float(acquire_timeout_s)
        self.poll_s = float(poll_s)

    def for_table(self, table_id: str, storage: Storage) -> TableLock:
        if storage is None:
            raise ConfigError("StorageLock needs the table's storage: the lock object lives in the table")
        return StorageTableLock(self, validate_table_id(table_id), store_for(storage, self.validity_s / 5))

    def __repr__(self) -> str:
        return (f"StorageLock(validity_s={self.validity_s}, renew_interval_s={self.renew_interval_s}, "
                f"acquire_timeout_s={self.acquire_timeout_s})")


def store_for(storage: Storage, call_timeout_s: float) -> LockStore:
    """The lock object of the table at ``storage``: S3 for ``s3://``/``s3a://``, GCS for
    ``gs://``, a file for local tables."""
    if storage.is_local:
        return LocalLockStore(storage.abs(LOCK_FILE), storage.refuse_links)
    scheme = urlsplit(storage.uri).scheme
    bucket, _, key = storage.abs(LOCK_FILE).partition("/")
    if storage.is_gcs:
        return GcsLockStore(bucket, key, call_timeout_s)
    if scheme not in ("s3", "s3a"):
        raise ConfigError(
            f"StorageLock supports tables on s3:// (and S3-compatible servers), gs:// and local disks; "
            f"{storage.uri} is {scheme}://: use ZooKeeperLock there"
        )
    return S3LockStore(bucket, key, call_timeout_s)


def read_lock(storage: Storage) -> LockObject | None:
    """The table's storage lock object as it is now (``status``); None when there is none."""
    return store_for(storage, 5.0).read()


class StorageTableLock(TableLock):
    """One writer's use of one table's storage lock (see the module docstring)."""

    def __init__(self, provider: StorageLock, table_id: str, store: LockStore) -> None:
        self.p = provider
        self.table_id = table_id
        self.store = store
        self._mu = threading.Lock()  # our object's version and deadline: shared with the renewer
        self._owner: str | None = None
        self._holder: HolderInfo | None = None
        self._version: str | None = None
        self._valid_until_ms = 0
        self._deadline = 0.0  # monotonic: when our last landed lease runs out
        self._lost: str | None = None
        self._waited_ms = 0  # how long our current hold waited for the lock (recorded in the object)
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        #: tests only: when set, the renewer skips its renewals (a holder that cannot renew)
        self.pause_renewals = threading.Event()

    # -- acquire ------------------------------------------------------------------------------
    def acquire(self, timeout_s: float | None = None, holder: HolderInfo | None = None, *,
                fenced: bool = False) -> None:
        if self._owner is not None:
            raise LockError(f"the storage lock of table {self.table_id} is already held by this writer; release it first")
        timeout = resolve_timeout(timeout_s, self.p.acquire_timeout_s)
        t0 = time.monotonic()
        deadline = t0 + timeout
        turns = _turns(self.store.location)
        turns.wait_for_others(deadline)
        owner = str(uuid.uuid4())
        current: LockObject | None = None
        trouble: str | None = None
        waited = False
        sent = t0  # when our latest write was sent (a lost reply's lease counts from then)
        while True:
            try:
                current = self.store.read()
                took_over = current is not None and not current.expired
                if current is not None and current.owner == owner and not current.expired:
                    # our own write landed though its reply was lost: the lease is ours
                    self._won(owner, holder, current.version, current.valid_until_ms, sent)
                    break
                if current is not None:
                    turns.saw(current, waited)
                if current is None or current.is_free(time.time()) or self._outlived(current) or _orphaned(self.store, current):
                    sent = time.monotonic()
                    valid_until = int(time.time() * 1000 + self.p.validity_s * 1000)
                    waited_ms = int((sent - t0) * 1000) if waited else 0
                    version = self.store.write(encode(owner, valid_until, False, holder, waited_ms),
                                               None if current is None else current.version)
                    if version is not None:
                        self._won(owner, holder, version, valid_until, sent)
                        self._waited_ms = waited_ms
                        with _ORPHANED_MU:
                            _ORPHANED.pop(self.store.location, None)
                        if took_over:
                            assert current is not None
                            log.warning("storage lock of table %s taken over: the lease of %s ran out", self.table_id,
                                        current.describe())
                            _metrics().storage_lock_expiry(self.table_id, "taken_over")
                        break
                trouble = None
            except StoreUnavailable as e:
                trouble = str(e)
            if time.monotonic() >= deadline:
                _metrics().storage_lock_acquire(self.table_id, "timeout", time.monotonic() - t0)
                held = current.describe() if current is not None else "nobody"
                raise LockAcquireTimeout(
                    f"storage lock of table {self.table_id} ({self.store.location}) not acquired within {timeout:.1f}s; "
                    f"held by {held}{f'; last store error: {trouble}' if trouble else ''}; another writer is "
                    f"committing or hangs (a crashed holder's lease runs out after {self.p.validity_s:.0f}s): retry later"
                )
            waited = True
            time.sleep(max(0.001, min(self.p.poll_s * random.uniform(0.5, 1.5), deadline - time.monotonic())))
        _metrics().storage_lock_acquire(self.table_id, "acquired", time.monotonic() - t0)
        self._start_renewer()
        log.debug("storage lock of %s acquired (owner %s)", self.table_id, owner)

    def _outlived(self, current: LockObject) -> bool:
        """Whether ``current`` (not released, ``validUntil`` not passed) has stayed unchanged for
        longer than our validity since this process first saw it: its holder stopped renewing,
        and a ``validUntil`` beyond that is not believed (see the module docstring)."""
        age = SIGHTINGS.age((self.store.location, current.version))
        if age <= self.p.validity_s + CLOCK_DRIFT_S:
            return False
        log.warning("storage lock of table %s: %s has not changed for %.1fs, longer than the validity of %.0fs: "
                    "its validUntil is not believed, the lease counts as run out", self.table_id, current.describe(),
                    age, self.p.validity_s)
        return True

    def _won(self, owner: str, holder: HolderInfo | None, version: str, valid_until_ms: int, sent: float) -> None:
        with self._mu:
            self._owner, self._holder, self._version = owner, holder, version
            self._valid_until_ms, self._deadline, self._lost = valid_until_ms, sent + self.p.validity_s, None

    # -- renewal ------------------------------------------------------------------------------
    def _start_renewer(self) -> None:
        self._stop = threading.Event()
        self._renewer = threading.Thread(target=self._renew_loop, args=(self._owner, self._stop), daemon=True,
                                         name=f"mw-storagelock-{self.table_id}")
        self._renewer.start()

    def _renew_loop(self, owner: str, stop: threading.Event) -> None:
        while not stop.wait(self.p.renew_interval_s):
            if self.pause_renewals.is_set():
                continue
            try:
                if not self._renew_once(owner, stop):
                    return
            except (StoreUnavailable, LockError) as e:  # keep trying: the lease only counts as lost once it runs out
                _metrics().storage_lock_renewal(self.table_id, "failed")
                log.warning("renewing the storage lock of table %s failed: %s", self.table_id, e)

    def _renew_once(self, owner: str, stop: threading.Event) -> bool:
        """Extend our lease; False (the lock counts as lost) when that is no longer safe."""
        with self._mu:
            if stop.is_set() or self._owner != owner or self._lost is not None:
                return False
            if time.monotonic() >= self._deadline:
                self._mark_lost(f"its lease ran out {time.monotonic() - self._deadline:.1f}s before it could be "
                                "renewed (process paused, or the store unreachable)")
                return False
            sent = time.monotonic()
            valid_until = int(time.time() * 1000 + self.p.validity_s * 1000)
            version = self.store.write(encode(owner, valid_until, False, self._holder, self._waited_ms), self._version)
            if version is not None:
                self._version, self._valid_until_ms, self._deadline = version, valid_until, sent + self.p.validity_s
                _metrics().storage_lock_renewal(self.table_id, "renewed")
                return True
            current = self.store.read()
            if current is not None and current.owner == owner and not current.expired:
                # an earlier renewal landed though its reply was lost: adopt its version; the
                # deadline stays that of the last renewal we know the send time of
                self._version = current.version
                return True
            self._mark_lost("the lock object was replaced by another holder "
                            f"({current.describe() if current is not None else 'it is gone'})")
            return False

    def _mark_lost(self, why: str) -> None:
        if self._lost is None:
            self._lost = why
            _metrics().storage_lock_renewal(self.table_id, "lost")
            _metrics().storage_lock_expiry(self.table_id, "lost")
            log.warning("storage lock of table %s lost: %s", self.table_id, why)

    # -- release / state ------------------------------------------------------------------------
    def release(self) -> None:
        owner = self._owner
        if owner is None:
            return
        self._stop.set()
        if self._renewer is not None and self._renewer is not threading.current_thread():
            self._renewer.join(timeout=self.p.validity_s / 5 + 1)
        self._renewer = None
        with self._mu:
            version, valid_until, lost = self._version, self._valid_until_ms, self._lost
            self._owner, self._version = None, None
        if lost is not None or version is None:
            return  # not ours any more: writing would clobber the next holder (the write is conditional anyway)
        self._release(owner, version, valid_until)
        _turns(self.store.location).released(self.p.poll_s, self._waited_ms > 0)

    def _release(self, owner: str, version: str, valid_until: int) -> None:
        """Write our object released, sent again while the store fails, for at most
        :data:`RELEASE_RETRY_S` (and a fifth of the validity, Hudi's bound on one call): a
        release lost to a short outage would otherwise block every writer for the whole
        validity. A write that meets a changed version reads the object back: ours and
        released means an earlier try landed though its reply was lost. When every try fails,
        the object is remembered as this process's own (:data:`_ORPHANED`), which its next
        acquire takes back at once."""
        stop = time.monotonic() + min(RELEASE_RETRY_S, self.p.validity_s / 5)
        pause = 0.05
        error: StoreUnavailable | None = None
        while True:
            try:
                if self.store.write(encode(owner, valid_until, True, self._holder, self._waited_ms), version) is not None:
                    return
                current = self.store.read()
                if current is None or current.owner != owner:
                    log.warning("releasing the storage lock of table %s: the object changed meanwhile (taken over)",
                                self.table_id)
                    return
                if current.expired:
                    return  # an earlier try landed
                version = current.version  # still our lease, at a version we did not see: release that one
            except StoreUnavailable as e:
                error = e
            if time.monotonic() + pause > stop:
                break
            time.sleep(pause)
            pause = min(pause * 2, 0.5)
        with _ORPHANED_MU:
            _ORPHANED[self.store.location] = owner
        log.warning("releasing the storage lock of table %s failed (%s); this process takes its lease back on its next "
                    "acquire, others once it runs out in at most %.0fs", self.table_id, error, self.p.validity_s)

    def is_held(self) -> bool:
        with self._mu:
            return self._owner is not None and self._lost is None and self._remaining() > self.p.validity_s / 2

    def _remaining(self) -> float:
        return self._deadline - time.monotonic()

    def check(self) -> None:
        owner = self._owner
        if owner is None:
            raise LockLostError(f"the storage lock of table {self.table_id} is not held; not committing")
        if self._lost is None:
            try:
                current = self.store.read()
            except StoreUnavailable as e:
                current, why = None, f"the lock object could not be read ({e})"
            else:
                why = "the lock object is gone" if current is None else (
                    "the lock object was released or replaced by "
                    f"{current.describe()}" if current.owner != owner or current.expired else None)
            with self._mu:
                if why is None and self._remaining() <= self.p.validity_s / 2:
                    why = (f"only {max(0.0, self._remaining()):.1f}s of its {self.p.validity_s:.0f}s lease are left: "
                           "renewals did not land (process paused, or the store unreachable)")
                if why is not None:
                    self._mark_lost(why)
        if self._lost is not None:
            raise LockLostError(
                f"the storage lock of table {self.table_id} was lost ({self._lost}); another writer may hold it, "
                "so this commit is refused and will be retried"
            )


class _Turns:
    """Taking turns at one lock object, in this process. The object has no queue, and a writer
    that releases and acquires again at once wins against waiters that poll every ``poll_s``
    (one of six processes took 1,682 acquisitions in 20 s, two took one each), let alone Hudi's
    JVM writers, which look again every second. So while there are signs that others wait (a
    holder that had waited for it records so in the object: ``waitedMs``; a holder without our
    ``by`` field is a JVM writer), a writer of this process that releases leaves the lock free
    for a moment before any writer here tries again: two poll intervals, during which every
    waiter looks once, or the JVM's retry wait while a JVM writer was seen."""

    def __init__(self) -> None:
        self.mu = threading.Lock()
        renew_in_child(self)
        self.waiters_seen = -CONTENTION_MEMORY_S
        self.jvm_seen = -JVM_MEMORY_S
        self.free_until = 0.0  # monotonic: writers of this process do not try before

    def saw(self, current: LockObject, we_waited: bool) -> None:
        now = time.monotonic()
        with self.mu:
            if not current.ours:
                self.jvm_seen = now
            if current.waited_ms > 0 or we_waited:
                self.waiters_seen = now

    def released(self, poll_s: float, we_waited: bool) -> None:
        now = time.monotonic()
        with self.mu:
            if we_waited:
                self.waiters_seen = now
            if now - self.jvm_seen < JVM_MEMORY_S:
                self.free_until = now + JVM_RETRY_S
            elif now - self.waiters_seen < CONTENTION_MEMORY_S:
                self.free_until = now + 2 * poll_s

    def wait_for_others(self, deadline: float) -> None:
        with self.mu:
            until = self.free_until
        pause = min(until, deadline) - time.monotonic()
        if pause > 0:
            time.sleep(pause)


_TURNS: dict[str, _Turns] = {}
_TURNS_MU = free_in_child(threading.Lock())


def _turns(location: str) -> _Turns:
    with _TURNS_MU:
        t = _TURNS.get(location)
        if t is None:
            t = _TURNS[location] = _Turns()
        return t


#: a release is sent again for at most this long while the store fails
RELEASE_RETRY_S = 2.0
#: per lock object (its location), the owner id whose release never landed in this process: the
#: lease is this process's own, which nobody else holds, so its next acquire takes it over
_ORPHANED: dict[str, str] = {}
_ORPHANED_MU = free_in_child(threading.Lock())


def _orphaned(store: LockStore, current: LockObject) -> bool:
    """Is ``current`` a lease this process left behind when its release failed? Only then may
    it be taken over before it runs out (conditionally on its version, as a free lock is)."""
    with _ORPHANED_MU:
        mine = _ORPHANED.get(store.location)
    return mine is not None and current.owner == mine and not current.expired


def _metrics() -> Any:
    from .. import metrics

    return metrics.default()


__all__ = ["LockObject", "StorageLock", "StorageTableLock", "read_lock"]
