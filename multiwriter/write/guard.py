"""The pre-write check: right before a task creates a marker and right before it writes a data
file, it makes sure its instant is still alive. A writer that was paused (GC, SIGSTOP, a hung
VM) past its heartbeat bound may have been rolled back meanwhile, and the active timeline may
have moved past its instant; every file it wrote after that would count as an archived commit's
file for Hudi readers. The commit fence alone cannot stop that: such files never need a commit
to become visible. So a paused writer must stop *writing*, not only stop committing.

Two questions, both cheap (one stat and one small read per data file):

* is the heartbeat fresh? In the writer's own process the :class:`HeartbeatClient` answers
  (it also catches a pause that has healed, whose beat thread made the file look fresh again);
  elsewhere (Spark executors) the age of ``.hoodie/.heartbeat/<T>`` against the bound shipped
  in the :class:`MergeContext`;
* is the instant still pending? ``<T>.<action>.requested`` or its inflight file still exists
  (a rollback deletes them; archival never touches a pending instant).

What remains is a pause *between* the check and the write; docs/cleaner.md says how the
cleaner's sweep of failed writes closes it.
"""
from __future__ import annotations

from ..errors import HeartbeatExpiredError
from ..heartbeat.client import beating_client, heartbeat_age_s
from ..storage import Storage
from ..table import instant as inst
from ..table.instant import Instant
from ..table.properties import TableConfig
from ..transaction import InstantRolledBackError


def pending_files(config: TableConfig, instant_time: str, action: str | None = None) -> tuple[str, ...]:
    """The timeline files whose existence means ``instant_time`` is still pending (``action``:
    the table type's write by default)."""
    action = action or (inst.DELTA_COMMIT if config.merge_on_read else inst.COMMIT)
    return tuple(
        f"{config.timeline_dir}/{Instant(instant_time, action, state).file_name(config.version)}"
        for state in (inst.REQUESTED, inst.INFLIGHT)
    )


def check_alive(storage: Storage, instant_time: str, bound_s: float | None, pending: tuple[str, ...], what: str) -> None:
    """Raise unless ``instant_time`` may still write ``what``; nothing is written on failure."""
    client = beating_client(instant_time)
    if client is not None:
        client.check(instant_time)
    elif bound_s is not None:
        _check_heartbeat_file(storage, instant_time, bound_s, what)
    if pending and not any(storage.exists(rel) for rel in pending):
        raise InstantRolledBackError(
            f"instant {instant_time} is no longer pending (no {pending[0].rsplit('/', 1)[-1]} on the timeline): "
            f"the cleaner rolled it back, so {what} is not written; the batch will be retried with a new instant"
        )


def _check_heartbeat_file(storage: Storage, instant_time: str, bound_s: float, what: str) -> None:
    age = heartbeat_age_s(storage, instant_time)
    if age is not None and age <= bound_s:
        return
    seen = "is gone" if age is None else f"is {age:.1f}s old"
    raise HeartbeatExpiredError(
        f"heartbeat of instant {instant_time} {seen} (bound {bound_s:.1f}s): the cleaner may judge this "
        f"writer dead and roll the instant back, so {what} is not written; the batch will be retried"
    )
