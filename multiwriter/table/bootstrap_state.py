"""Whether a table's bootstrap is unfinished, so writers can be refused until it completes.

A bootstrapped table records its source under ``hoodie.bootstrap.base.path`` (Hudi's
``HoodieTableConfig.BOOTSTRAP_BASE_PATH``) when it is created, and the bootstrap is its first
write, at Hudi's fixed time (``HoodieTimeline.FULL_BOOTSTRAP_INSTANT_TS``). Until a write
completes, a writer would either race the bootstrap or write a table the bootstrap still means
to fill: both are refused (:class:`~multiwriter.errors.BootstrapPendingError`).
"""
from __future__ import annotations

from ..errors import BootstrapPendingError
from ..format import instant as inst
from ..redact import redact
from .properties import BOOTSTRAP_BASE_PATH_KEY, TableConfig
from .timeline import Timeline


def pending_bootstrap(tl: Timeline) -> str | None:
    """The requested time of a pending bootstrap instant on ``tl``, or None."""
    for i in tl.pending(inst.WRITE_ACTIONS):
        if i.requested_time in inst.BOOTSTRAP_TIMES:
            return i.requested_time
    return None


def check_writable(tl: Timeline, config: TableConfig, *, table: str, ours: str | None = None) -> None:
    """Raise BootstrapPendingError when a bootstrap other than ``ours`` is pending, or when the
    table was created for a bootstrap that has not completed (no write completed yet)."""
    pending = pending_bootstrap(tl)
    if pending is not None and pending != ours:
        raise BootstrapPendingError(
            f"table {redact(table)}: bootstrap instant {pending} is pending; writers are refused until it completes. "
            "Wait for the bootstrap to finish, or, if its process died, let the companion job (mw.Cleaner) roll it "
            "back once its heartbeat lapsed, then run mw.bootstrap again", instant=pending)
    source = config.raw.get(BOOTSTRAP_BASE_PATH_KEY)
    if ours is None and source and pending is None and tl.last_completed_write() is None:
        raise BootstrapPendingError(
            f"table {redact(table)} was created to be bootstrapped from {redact(source)}, and no bootstrap has "
            "completed: run mw.bootstrap (again) before starting writers", instant=None)
