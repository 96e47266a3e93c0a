"""Liveness of a writing instant: a data file becomes visible under its final name only while
its instant is alive. A writer that was paused (GC, SIGSTOP, a hung VM, a frozen Spark executor)
past its heartbeat bound may have been rolled back meanwhile, and the active timeline may have
moved past its instant; Hudi's readers take every file older than the active timeline for an
archived commit's file. A task attempt that outlives its instant's commit (Spark reran the task
and the batch committed) would add a second copy of rows already committed. The commit fence
stops neither: such files never need a commit to become visible. So a paused writer must stop
*writing*, not only stop committing.

Every data file goes through :func:`write_checked`: it is written under a staged name in the
instant's marker directory (``.hoodie/.temp/<T>/staged/``, which no reader lists and which an
abort or a rollback deletes with the markers), then checked, then published under its final
name in one step (a rename on local disks; a server-side copy on object stores, whose upload of
the staged object has completed by then). A writer that fails the check deletes what it wrote.
The check (:func:`check_alive`, also made before a marker, so a dead writer wastes no work):

* is the heartbeat fresh? In the writer's own process the :class:`HeartbeatClient` answers
  (it also catches a pause that has healed, whose beat thread made the file look fresh again);
  elsewhere (Spark executors) the age of ``.hoodie/.heartbeat/<T>`` against the bound shipped
  in the :class:`MergeContext`;
* is the instant still pending and not completed? ``<T>.<action>.requested`` or its inflight
  file still exists (a rollback deletes them; archival never touches a pending instant), and no
  completed ``<T>_<C>.<action>`` is on the timeline (the requested and inflight files stay after
  completion).

What remains is a pause between the last check and the rename (a few system calls; the copy on
object stores); docs/cleaner.md says how the cleaner's sweep of failed writes closes it.
"""
from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import TypeVar

from ..errors import HeartbeatExpiredError, InstantCompletedError
from ..heartbeat.client import beating_client, heartbeat_age_s
from ..storage import Storage
from ..format import instant as inst
from ..format import layout
from ..format.instant import Instant
from ..table.properties import TableConfig
from ..transaction import InstantRolledBackError

log = logging.getLogger(__name__)
T = TypeVar("T")
#: the directory, under an instant's marker directory, of data files not yet published
STAGED_DIR = "staged"


def pending_files(config: TableConfig, instant_time: str, action: str | None = None) -> tuple[str, ...]:
    """The timeline files whose existence means ``instant_time`` is still pending (``action``:
    the table type's write by default)."""
    action = action or (inst.DELTA_COMMIT if config.merge_on_read else inst.COMMIT)
    return tuple(
        f"{config.timeline_dir}/{Instant(instant_time, action, state).file_name(config.version)}"
        for state in (inst.REQUESTED, inst.INFLIGHT)
    )


def check_alive(storage: Storage, instant_time: str, bound_s: float | None, pending: tuple[str, ...], what: str) -> None:
    """Raise unless ``instant_time`` may still write ``what``; nothing is written on failure.
    The timeline is looked at once (its files of ``instant_time``: one listing request on an
    object store), for both questions: completed already, still pending. In the writer's own
    process it is looked at once per instant: after that the heartbeat client's check suffices,
    since a rollback must wait for a lapse and a lapse fails every later check (and the process
    completes its instant only after its last file), so a write of N files makes one listing,
    not N."""
    client = beating_client(instant_time)
    if client is not None and pending and client.pending_confirmed(instant_time):
        client.check(instant_time)  # no lapse since the timeline showed it pending: nobody rolled it back
        return
    names = _instant_names(storage, instant_time, pending) if pending else []
    if pending:  # first: a late attempt's heartbeat is gone too, but this says why
        _check_not_completed(names, instant_time, what)
    if client is not None:
        client.check(instant_time)
    elif bound_s is not None:
        _check_heartbeat_file(storage, instant_time, bound_s, what)
    if pending and not {rel.rsplit("/", 1)[-1] for rel in pending} & set(names):
        raise InstantRolledBackError(
            f"instant {instant_time} is no longer pending (no {pending[0].rsplit('/', 1)[-1]} on the timeline): "
            f"the cleaner rolled it back, so {what} is not written; the batch will be retried with a new instant"
        )
    if client is not None and pending:
        client.confirm_pending(instant_time)


def _instant_names(storage: Storage, instant_time: str, pending: tuple[str, ...]) -> list[str]:
    """The names of the files of ``instant_time`` on the timeline holding ``pending``."""
    return storage.list_names(pending[0].rpartition("/")[0], instant_time)


def _check_heartbeat_file(storage: Storage, instant_time: str, bound_s: float, what: str) -> None:
    age = heartbeat_age_s(storage, instant_time)
    if age is not None and age <= bound_s:
        return
    seen = "is gone" if age is None else f"is {age:.1f}s old"
    raise HeartbeatExpiredError(
        f"heartbeat of instant {instant_time} {seen} (bound {bound_s:.1f}s): the cleaner may judge this "
        f"writer dead and roll the instant back, so {what} is not written; the batch will be retried"
    )


def _check_not_completed(names: list[str], instant_time: str, what: str) -> None:
    """Raise when ``names`` (timeline files) hold a completed instant ``instant_time``."""
    for name in names:
        i = inst.decode_file_name(name)
        if i is not None and i.requested_time == instant_time and i.is_completed:
            raise InstantCompletedError(
                f"instant {instant_time} already completed ({name}): this is a late or rerun task attempt, so "
                f"{what} is not written (the commit holds another attempt's copy of its rows)"
            )


def staged_path(instant_time: str, rel: str) -> str:
    """Where the data file ``rel`` of ``instant_time`` is written before it is published: in the
    instant's marker directory, under a name of this attempt's own that ends like ``rel``'s."""
    return f"{layout.marker_dir(instant_time)}/{STAGED_DIR}/{uuid.uuid4().hex}_{rel.rsplit('/', 1)[-1]}"


def write_checked(
    storage: Storage, instant_time: str, bound_s: float | None, pending: tuple[str, ...], rel: str,
    write: Callable[[str], T],
) -> T:
    """Write the data file ``rel`` with ``write(path)`` under a staged path, check the instant is
    alive (:func:`check_alive`), then publish it as ``rel``; on any failure (the check's
    included) the staged file is deleted and nothing appears at ``rel``. Returns what ``write``
    returned."""
    staged = staged_path(instant_time, rel)
    storage.staging_dir(staged.rpartition("/")[0])
    try:
        try:
            out = write(staged)
        except OSError:
            # a rollback meanwhile deletes the marker directory, staged files included: say so
            check_alive(storage, instant_time, bound_s, pending, rel)
            raise
        check_alive(storage, instant_time, bound_s, pending, rel)
        storage.publish(staged, rel)
    except BaseException:
        if storage.delete(staged):
            log.info("instant %s: deleted the staged copy of %s, which was not published", instant_time, rel)
        raise
    return out
