"""Whether a table's bootstrap is unfinished, so writers can be refused until it completes.

A bootstrapped table records its source under ``hoodie.bootstrap.base.path`` (Hudi's
``HoodieTableConfig.BOOTSTRAP_BASE_PATH``) when it is created, and the bootstrap is its first
write, at Hudi's fixed times: ``METADATA_BOOTSTRAP_INSTANT_TS`` for the partitions bootstrapped
METADATA_ONLY, then ``FULL_BOOTSTRAP_INSTANT_TS`` for the FULL_RECORD ones, as Hudi runs the two
(``SparkBootstrapCommitActionExecutor.execute``). When both modes are used, ``hoodie.properties``
says so (:data:`BOTH_MODES_KEY`), so the table is not taken for bootstrapped once the first
commit completed. Until the last of them completes, a writer would either race the bootstrap or
write a table the bootstrap still means to fill: both are refused
(:class:`~multiwriter.errors.BootstrapPendingError`), and the companion job plans no clustering
or compaction of it (its rollbacks go on).
"""
from __future__ import annotations

from ..errors import BootstrapPendingError
from ..format import instant as inst
from ..redact import redact
from .properties import BOOTSTRAP_BASE_PATH_KEY, TableConfig
from .timeline import Timeline

#: ``hoodie.properties`` of a table bootstrapped in both modes: a FULL_RECORD commit follows the
#: METADATA_ONLY one
BOTH_MODES_KEY = "multiwriter.bootstrap.both.modes"


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
    if ours is not None or pending is not None or not unfinished(tl, config):
        return
    if tl.last_completed_write() is None:
        raise BootstrapPendingError(
            f"table {redact(table)} was created to be bootstrapped from {redact(source)}, and no bootstrap has "
            "completed: run mw.bootstrap (again) before starting writers", instant=None)
    raise BootstrapPendingError(
        f"table {redact(table)}: the METADATA_ONLY part of its bootstrap from {redact(source)} completed, the "
        f"FULL_RECORD part (instant {inst.FULL_BOOTSTRAP_TIME}) has not: run mw.bootstrap again with the same "
        "arguments before starting writers", instant=None)


def unfinished(tl: Timeline, config: TableConfig) -> bool:
    """Whether the table was created to be bootstrapped and its bootstrap has not completed: no
    write completed, or only the METADATA_ONLY commit of a bootstrap in both modes (nothing but
    the bootstrap completes before the bootstrap does, so any later write means it did)."""
    if not config.raw.get(BOOTSTRAP_BASE_PATH_KEY):
        return False
    done = tl.completed_writes()
    if not done:
        return True
    both = config.raw.get(BOTH_MODES_KEY, "").strip().lower() == "true"
    return both and all(i.requested_time == inst.METADATA_BOOTSTRAP_TIME for i in done)


def full_record_follows(tl: Timeline, config: TableConfig) -> bool:
    """Whether the FULL_RECORD commit of a bootstrap in both modes may begin: its METADATA_ONLY
    commit is the only completed write."""
    done = tl.completed_writes()
    return (config.raw.get(BOTH_MODES_KEY, "").strip().lower() == "true" and len(done) == 1
            and done[0].requested_time == inst.METADATA_BOOTSTRAP_TIME)
