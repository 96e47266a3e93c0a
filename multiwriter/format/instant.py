"""Instants: the value object and the timeline file-name codec (table versions 6 and 8).

Version 8 (timeline layout 2) names a completed instant ``<T>_<C>.<action>``: C, the completion
time, orders commits by when they finished. Version 6 has no completion time in the name.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass

REQUESTED = "requested"
INFLIGHT = "inflight"
COMPLETED = "completed"

COMMIT = "commit"
DELTA_COMMIT = "deltacommit"
REPLACE_COMMIT = "replacecommit"
ROLLBACK = "rollback"
CLEAN = "clean"
COMPACTION = "compaction"
CLUSTERING = "clustering"
RESTORE = "restore"
SAVEPOINT = "savepoint"
INDEXING = "indexing"

#: actions that write data files (their completion makes files visible)
WRITE_ACTIONS = frozenset({COMMIT, DELTA_COMMIT, REPLACE_COMMIT})
KNOWN_ACTIONS = frozenset(
    {COMMIT, DELTA_COMMIT, REPLACE_COMMIT, ROLLBACK, CLEAN, COMPACTION, CLUSTERING, RESTORE, SAVEPOINT, INDEXING}
)

#: version 8 completes a clustering instant (``<T>.clustering.requested`` / ``.inflight``) as
#: ``<T>_<C>.replacecommit`` and a compaction (``<T>.compaction.requested`` / ``.inflight``) as
#: ``<T>_<C>.commit``: the two actions name one instant
_SAME_INSTANT = {CLUSTERING: REPLACE_COMMIT, COMPACTION: COMMIT}


def instant_action(action: str) -> str:
    """The action that identifies an instant across its states (clustering -> replacecommit,
    compaction -> commit)."""
    return _SAME_INSTANT.get(action, action)


#: Hudi's fixed instant times of a bootstrap (``HoodieTimeline.METADATA_BOOTSTRAP_INSTANT_TS``,
#: ``FULL_BOOTSTRAP_INSTANT_TS``): below every real time, so the bootstrap is the table's first write
METADATA_BOOTSTRAP_TIME = "00000000000001"
FULL_BOOTSTRAP_TIME = "00000000000002"
BOOTSTRAP_TIMES = frozenset({METADATA_BOOTSTRAP_TIME, FULL_BOOTSTRAP_TIME})

_TIME = r"\d{17}|\d{14}"
_V8 = re.compile(rf"^(?P<t>{_TIME})(?:_(?P<c>{_TIME}))?\.(?P<rest>[a-z.]+)$")
TIME_RE = re.compile(r"^\d{17}\Z")


@dataclass(frozen=True, order=False)
class Instant:
    """One instant of the timeline."""

    requested_time: str
    action: str
    state: str
    completion_time: str | None = None

    @property
    def is_completed(self) -> bool:
        return self.state == COMPLETED

    @property
    def is_pending(self) -> bool:
        return self.state in (REQUESTED, INFLIGHT)

    def file_name(self, table_version: int = 8) -> str:
        return encode_file_name(self, table_version)

    def with_state(self, state: str, completion_time: str | None = None) -> Instant:
        return Instant(self.requested_time, self.action, state, completion_time)

    def __str__(self) -> str:
        ct = f"_{self.completion_time}" if self.completion_time else ""
        return f"{self.requested_time}{ct}.{self.action}[{self.state}]"


def encode_file_name(instant: Instant, table_version: int = 8) -> str:
    t, a = instant.requested_time, instant.action
    if instant.state == REQUESTED:
        return f"{t}.{a}.{REQUESTED}"
    if instant.state == INFLIGHT:
        return f"{t}.{INFLIGHT}" if a == COMMIT else f"{t}.{a}.{INFLIGHT}"
    if table_version >= 8:
        if not instant.completion_time:
            raise ValueError(f"completed instant {t} needs a completion time")
        return f"{t}_{instant.completion_time}.{a}"
    return f"{t}.{a}"


@functools.lru_cache(maxsize=8192)
def decode_file_name(name: str) -> Instant | None:
    """Parse a timeline file name; ``None`` for files that are not instants. Remembered: every
    load lists the same names again, and an ``Instant`` is immutable."""
    m = _V8.match(name)
    if not m:
        return None
    t, c, rest = m.group("t"), m.group("c"), m.group("rest")
    parts = rest.split(".")
    if parts == [INFLIGHT]:
        return Instant(t, COMMIT, INFLIGHT)
    if len(parts) == 1 and parts[0] in KNOWN_ACTIONS:
        return Instant(t, parts[0], COMPLETED, c)
    if len(parts) == 2 and parts[0] in KNOWN_ACTIONS and parts[1] in (REQUESTED, INFLIGHT) and c is None:
        return Instant(t, parts[0], parts[1])
    return None
