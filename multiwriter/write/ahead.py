"""The next instant a writer began in its last commit's lock hold (``WriterConfig.begin_ahead_s``).

A writer fed back to back pays two lock rounds per batch: one to begin its instant, one to
commit it. Beginning the next instant inside the commit's hold (:meth:`Transaction.commit` with
``ahead=True``) leaves one. Until the next batch takes it, that instant is an ordinary pending
instant with a beating heartbeat, as if its batch were slow to write; an idle writer gives it back
(aborts it: its requested file and heartbeat go) after ``idle_s``, so it does not hold back the
companion job's archival and planning, and at ``close``.
"""
from __future__ import annotations

import logging
import threading
import time

from ..errors import MultiWriterError
from ..transaction import Transaction

log = logging.getLogger(__name__)


class AheadInstant:
    """At most one begun transaction, kept for the writer's next batch."""

    def __init__(self, idle_s: float) -> None:
        self.idle_s = idle_s
        self._mu = threading.Lock()
        self._txn: Transaction | None = None
        self._since = 0.0
        self._timer: threading.Timer | None = None

    def keep(self, txn: Transaction | None) -> None:
        """Keep ``txn`` (begun ahead) for the next batch; one kept before is given back."""
        if txn is None:
            return
        with self._mu:
            old, self._txn, self._since = self._detach(), txn, time.monotonic()
            timer = threading.Timer(self.idle_s, self._expire, args=(txn,))
            timer.daemon = True
            timer.name = f"multiwriter-ahead-{txn.instant.requested_time if txn.instant else ''}"
            self._timer = timer
            timer.start()
        give_back(old, "replaced by a newer one")

    def take(self) -> Transaction | None:
        """The kept transaction for this batch, or None: none kept, idle too long, or its
        heartbeat no longer trusted (the process paused past its bound while idle: the
        companion job may be rolling it back, and a batch begun on it would fail)."""
        with self._mu:
            since, txn = self._since, self._detach()
        if txn is None:
            return None
        if time.monotonic() - since > self.idle_s:
            give_back(txn, f"idle for more than {self.idle_s:.1f}s")
            return None
        if txn.heartbeat is not None and txn.instant is not None:
            try:
                txn.heartbeat.check(txn.instant.requested_time)
            except MultiWriterError as e:
                give_back(txn, f"its heartbeat cannot be trusted ({e})")
                return None
        return txn

    def drop(self, why: str = "the writer closes") -> None:
        """Give back the kept transaction."""
        with self._mu:
            txn = self._detach()
        give_back(txn, why)

    def _detach(self) -> Transaction | None:
        txn, self._txn = self._txn, None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        return txn

    def _expire(self, txn: Transaction) -> None:
        with self._mu:
            if self._txn is not txn:
                return  # taken or replaced meanwhile
            self._detach()
        give_back(txn, f"idle for {self.idle_s:.1f}s")


def give_back(txn: Transaction | None, why: str) -> None:
    """Abort an unused instant begun ahead (it wrote nothing but its requested file)."""
    if txn is None:
        return
    t = txn.instant.requested_time if txn.instant else None
    try:
        txn.abort()
        log.info("gave back instant %s begun ahead: %s", t, why)
    except Exception as e:  # noqa: BLE001 -- the companion job rolls back what is left once its heartbeat stops
        log.warning("could not give back instant %s begun ahead (%s): %s; the companion job rolls it back", t, why, e)
    finally:
        txn.stop_heartbeat()
