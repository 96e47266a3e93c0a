"""The lock contract every provider keeps, and the holder record stored with a lock.

A commit holds the table lock only around short critical sections (issue an instant time; check
conflicts and complete the instant). :meth:`TableLock.check` is the commit *fence*: called right
before the completed instant is written, it refuses to go on if the lock may have passed to
someone else meanwhile (ZooKeeper session suspended or expired, lock file broken), which is the
failure a plain "acquire, then write" protocol silently gets wrong.
"""
from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..threads import renew_in_child

if TYPE_CHECKING:  # pragma: no cover
    from typing_extensions import Self

    from ..storage import Storage

#: hoodie.properties keys recording the table's lock (written by ``Table.create(lock=...)``)
LOCK_KIND_KEY = "multiwriter.lock.kind"
LOCK_PROPERTY_PREFIX = "multiwriter.lock."
#: the ZooKeeper lock key, recorded when it is not the table name (Hudi's default lock key)
LOCK_KEY_PROPERTY = "multiwriter.lock.zookeeper.lock_key"
TABLE_NAME_PROPERTY = "hoodie.table.name"
#: ``table_id_for`` appends this to the table name: a dash and 12 hex digits of the location
TABLE_ID_SUFFIX_RE = re.compile(r"-[0-9a-f]{12}$")

#: ids end up as ZooKeeper node names and file names: keep them boring
TABLE_ID_RE = re.compile(r"^[A-Za-z0-9_.-]{1,255}\Z")
WRITER_ID_RE = re.compile(r"^[A-Za-z0-9_.-]{1,128}\Z")


@dataclass(frozen=True)
class HolderInfo:
    """Who holds (or asks for) a lock; stored with the lock as JSON so operators and the
    timeout message of the next waiter can name it."""

    writer_id: str
    host: str
    pid: int
    instant: str | None = None

    @classmethod
    def current(cls, writer_id: str, instant: str | None = None) -> HolderInfo:
        """This process as a holder."""
        return cls(writer_id, socket.gethostname(), os.getpid(), instant)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HolderInfo:
        """Parse a stored holder; tolerant of extra keys (providers add their own)."""
        return cls(str(d.get("writer_id", "?")), str(d.get("host", "?")), int(d.get("pid", -1)), d.get("instant"))

    def describe(self) -> str:
        """``writer 'w1' (pid 12 on host-a, instant 2024...)`` for messages."""
        at = f", instant {self.instant}" if self.instant else ""
        return f"writer {self.writer_id!r} (pid {self.pid} on {self.host}{at})"


def describe_holder(raw: str | bytes | dict[str, Any] | None) -> str:
    """Human-readable holder from whatever a lock stored; never raises (used in error paths)."""
    if raw is None:
        return "nobody (it was released meanwhile)"
    try:
        d = raw if isinstance(raw, dict) else json.loads(raw)
        if not isinstance(d, dict) or "writer_id" not in d:
            return f"an unknown holder ({repr(d)[:200]})"
        return HolderInfo.from_dict(d).describe()
    except (ValueError, TypeError, OverflowError, RecursionError):
        text = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
        return f"an unknown holder ({text[:200]!r})"


class FirstSightings:
    """When this process first saw each state of a lock object, on its monotonic clock.

    A lease stored in a file or object names its own end (``validUntil``, ``expires_at``), and
    anyone who can write the table's folder can forge one ten years ahead, or ``Infinity``. So
    a waiter never lets a lease count for longer than its own configured validity from the
    moment it first saw that exact state (the object's version, or the lock's token and expiry):
    a live holder renews well within the validity, which writes a new state and starts a new
    sighting, so only a state left unchanged for a whole validity (a crashed holder's, or a
    forged one) is judged over by this bound. Holders of one table must configure the same
    validity (as Hudi asks of its writers); a longer one is judged by the waiter's own. The
    record lives as long as the process (up to ``limit`` states; the oldest half is forgotten
    beyond that), so a forged lease blocks a writer once, for one validity, however many
    acquire attempts it makes."""

    def __init__(self, limit: int = 4096) -> None:
        self.limit = limit
        self._seen: dict[Any, float] = {}
        self._mu = threading.Lock()
        renew_in_child(self)

    def age(self, key: Any) -> float:
        """Seconds since ``key`` was first seen (0.0 the first time)."""
        now = time.monotonic()
        with self._mu:
            first = self._seen.get(key)
            if first is None:
                if len(self._seen) >= self.limit:
                    for old in list(self._seen)[: self.limit // 2]:
                        del self._seen[old]
                first = self._seen[key] = now
        return now - first


#: this process's sightings of lock states (file and storage locks)
SIGHTINGS = FirstSightings()


#: what an acquire can wait for (the ``cause`` label of ``multiwriter_lock_wait_cause_seconds_total``)
WAIT_RECONNECT = "reconnect"  # no connection to the lock service: it is down, electing, or unreachable
WAIT_STALE_OWN_NODE = "stale_own_node"  # a lock node this process left behind (e.g. released while disconnected)
WAIT_HOLDER = "holder"  # another writer holds the lock or is ahead in the queue: the normal wait
WAIT_RETRY = "retry_backoff"  # a call failed on a dropped connection; the pause before it is tried again
WAIT_CALLS = "calls"  # round trips to the lock service
WAIT_CAUSES = (WAIT_RECONNECT, WAIT_STALE_OWN_NODE, WAIT_HOLDER, WAIT_RETRY, WAIT_CALLS)
WAIT_LABELS = {
    WAIT_RECONNECT: "waiting for reconnection",
    WAIT_STALE_OWN_NODE: "waiting for a stale own lock node to go",
    WAIT_HOLDER: "behind another holder",
    WAIT_RETRY: "in retry backoff",
    WAIT_CALLS: "in round trips",
}


class WaitClock:
    """Splits the wall time of one acquire into what it waited for.

    The acquire (and the lock service's callbacks, from their own thread) call :meth:`switch`
    whenever the reason changes; :meth:`stop` closes the last span. A stall then has a name in
    the logs and the metrics instead of being "the lock was slow".
    """

    def __init__(self, cause: str = WAIT_CALLS, now: Callable[[], float] = time.monotonic) -> None:
        self._now = now
        self._mu = threading.Lock()
        self._cause: str | None = _check_cause(cause)
        self._since = now()
        self.totals: dict[str, float] = {}

    @property
    def cause(self) -> str | None:
        return self._cause

    def switch(self, cause: str | None) -> bool:
        """Close the current span and start one for ``cause`` (None: stopped); True if it changed."""
        if cause is not None:
            _check_cause(cause)
        with self._mu:
            t = self._now()
            if self._cause is not None:
                self.totals[self._cause] = self.totals.get(self._cause, 0.0) + max(0.0, t - self._since)
            changed = cause != self._cause
            self._cause, self._since = cause, t
            return changed

    def stop(self) -> dict[str, float]:
        """Stop the clock; the seconds spent per cause."""
        self.switch(None)
        return dict(self.totals)

    def describe(self, min_s: float = 0.05) -> str:
        """``2.3s waiting for reconnection, 0.4s behind another holder`` (largest first)."""
        parts = sorted(((s, c) for c, s in self.totals.items() if s >= min_s), reverse=True)
        return ", ".join(f"{s:.1f}s {WAIT_LABELS[c]}" for s, c in parts) or "no wait"


def _check_cause(cause: str) -> str:
    if cause not in WAIT_CAUSES:
        raise ValueError(f"wait cause {cause!r} is not one of {WAIT_CAUSES}")
    return cause


class TableLock(ABC):
    """One lock on one table, as used by one writer (not re-entrant; not shared between threads)."""

    @abstractmethod
    def acquire(self, timeout_s: float | None = None, holder: HolderInfo | None = None, *,
                fenced: bool = False) -> None:
        """Block until held. ``LockAcquireTimeout`` after ``timeout_s`` (None: the provider's
        default); ``LockError`` if the backend cannot be reached or the lock is already held by
        this object. ``fenced``: the caller calls :meth:`check` before anything it does under
        the lock can matter (a commit's fence), so the lock need not be confirmed on its server
        right after it was taken (ZooKeeper: a round trip less in every handoff)."""

    @abstractmethod
    def release(self) -> None:
        """Give the lock up; idempotent, and safe to call after the lock was lost."""

    @abstractmethod
    def is_held(self) -> bool:
        """Whether we hold it as far as we know locally (no round trip)."""

    @abstractmethod
    def check(self) -> None:
        """The commit fence: raise ``LockLostError`` unless the lock is held and provably still ours."""

    def close(self) -> None:
        """Release, and free what this table lock holds (not the provider's shared connection)."""
        self.release()

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class LockProvider(ABC):
    """The user-facing lock configuration (``mw.ZooKeeperLock(...)`` and friends)."""

    @abstractmethod
    def for_table(self, table_id: str, storage: Storage) -> TableLock:
        """A lock on one table; ``storage`` is the table's storage (only file locks use it)."""

    def close(self) -> None:  # noqa: B027 -- optional hook: most providers hold no connection
        """Release connections this provider holds."""

    def table_properties(self) -> dict[str, str]:
        """What ``hoodie.properties`` records about the lock every writer of the table must use
        (kind, and where the lock lives); see :func:`check_table_lock`."""
        return {LOCK_KIND_KEY: self.kind}

    #: the lock kind recorded in hoodie.properties
    kind: str = "unknown"

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def validate_table_id(table_id: str) -> str:
    """Table ids become ZooKeeper node names and lock keys: ``[A-Za-z0-9_.-]{1,255}``."""
    if not isinstance(table_id, str) or not TABLE_ID_RE.match(table_id) or table_id in (".", ".."):
        raise ConfigError(
            f"table id {table_id!r} is not usable as a lock name: it must match {TABLE_ID_RE.pattern} "
            "and not be '.' or '..'"
        )
    return table_id


def validate_writer_id(writer_id: str) -> str:
    """Writer ids become ZooKeeper node names: ``[A-Za-z0-9_.-]{1,128}``."""
    if not isinstance(writer_id, str) or not WRITER_ID_RE.match(writer_id) or writer_id in (".", ".."):
        raise ConfigError(
            f"writer id {writer_id!r} must match {WRITER_ID_RE.pattern} (and not be '.' or '..'); "
            "pick a short name such as 'ingest' or 'backfill-2024'"
        )
    return writer_id


def table_name_of(table_id: str) -> str:
    """The table name inside a table id (``<name>-<12 hex digits>``, see ``table_id_for``); an id
    without that suffix is taken as the name itself."""
    validate_table_id(table_id)
    name = TABLE_ID_SUFFIX_RE.sub("", table_id)
    return name or table_id


def resolve_timeout(timeout_s: float | None, default_s: float) -> float:
    """The timeout of one acquire: the call's, else the provider's; never negative."""
    timeout = default_s if timeout_s is None else float(timeout_s)
    if timeout < 0:
        raise ConfigError(f"lock timeout must be >= 0 seconds, got {timeout}")
    return timeout


def check_table_lock(recorded: dict[str, str], provider: LockProvider, *, table: str) -> None:
    """Refuse a lock other than the one the table records: writers (or a cleaner) on different
    locks exclude nothing, so their commits could interleave. Tables that record none (created by
    other tools, or before the lock was recorded) accept any lock."""
    want = {k: v for k, v in recorded.items() if k.startswith(LOCK_PROPERTY_PREFIX)}
    if not want:
        return
    have = provider.table_properties()
    diff = {k: (v, have.get(k)) for k, v in want.items() if have.get(k) != v and k != LOCK_KEY_PROPERTY}
    name = recorded.get(TABLE_NAME_PROPERTY)
    if LOCK_KEY_PROPERTY in want or LOCK_KEY_PROPERTY in have:
        # the lock key defaults to the table name on both sides, so compare the effective keys
        key_want, key_have = want.get(LOCK_KEY_PROPERTY, name), have.get(LOCK_KEY_PROPERTY, name)
        if key_want != key_have:
            diff[LOCK_KEY_PROPERTY] = (key_want, key_have)
    if diff:
        detail = ", ".join(f"{k}: table has {v!r}, this lock has {h!r}" for k, (v, h) in sorted(diff.items()))
        raise ConfigError(
            f"table {table} is written under a {want.get(LOCK_KIND_KEY, '?')} lock and this writer or cleaner was "
            f"given {provider!r} ({detail}): every writer and cleaner of one table must use the same lock, or they "
            "exclude nothing; pass the table's lock (the multiwriter CLI: --zk CONNECT [--zk-base PATH])"
        )
