"""Checks of pending instants against the timeline they sit on, shared by the data table's
companion job and the metadata table: an instant time is issued above everything on the
timeline, so a pending action can never legitimately sit at the time of a completed instant
(its requested or its completion time) nor below the archived timeline. A file that says
otherwise was planted or damaged, and nothing may be deleted or rewritten on its word."""
from __future__ import annotations

from collections.abc import Iterable

from ..format.instant import Instant, instant_action


def forged_time(pending: Instant, completed: Iterable[Instant], floor: str | None = None) -> str | None:
    """Why ``pending`` cannot be a real pending instant, or None when its time is plausible.

    ``completed``: the completed instants of its timeline; ``floor``: the newest archived
    requested time (archival never passes a pending instant, so a real one is above it)."""
    t = pending.requested_time
    for c in completed:
        if c.requested_time == t and instant_action(c.action) == instant_action(pending.action):
            continue  # a leftover plan file of that very instant
        if c.requested_time == t:
            return f"its time {t} is the requested time of the completed {c.action} {c.requested_time}"
        if c.completion_time == t:
            return f"its time {t} is the completion time of the completed {c.action} {c.requested_time}"
    if floor is not None and t <= floor:
        return f"its time {t} is at or below the archived timeline (up to {floor})"
    return None


__all__ = ["forged_time"]
