"""The active timeline: load instants, order completed ones by completion time, write instant
files atomically (create fails if the file exists, never overwrites).
"""
from __future__ import annotations

import logging
from functools import cached_property

from ..errors import TableFormatError
from ..storage import FileExists, Storage
from . import instant as inst
from .instant import Instant
from .metadata import CommitMetadata
from .properties import TableConfig

log = logging.getLogger(__name__)


class InstantExistsError(TableFormatError):
    """An instant file that must be new already exists."""


class Timeline:
    """An immutable view of the timeline at load time; load again for a fresh view."""

    def __init__(self, storage: Storage, config: TableConfig, instants: list[Instant]) -> None:
        self.storage = storage
        self.config = config
        self._instants = instants
        self._meta_cache: dict[str, CommitMetadata] = {}

    @classmethod
    def load(cls, storage: Storage, config: TableConfig) -> Timeline:
        return cls(storage, config, _scan(storage, config))

    # -- views ---------------------------------------------------------------
    @property
    def instants(self) -> list[Instant]:
        return list(self._instants)

    @cached_property
    def _state_by_time(self) -> dict[tuple[str, str], Instant]:
        """Per (time, action), the most advanced state seen."""
        rank = {inst.REQUESTED: 0, inst.INFLIGHT: 1, inst.COMPLETED: 2}
        out: dict[tuple[str, str], Instant] = {}
        for i in self._instants:
            k = (i.requested_time, i.action)
            if k not in out or rank[i.state] > rank[out[k].state]:
                out[k] = i
        return out

    def latest_states(self) -> list[Instant]:
        return sorted(self._state_by_time.values(), key=lambda i: i.requested_time)

    def completed(self, actions: frozenset[str] | None = None) -> list[Instant]:
        """Completed instants ordered by completion time (requested time for version 6)."""
        done = [i for i in self._state_by_time.values() if i.is_completed and (actions is None or i.action in actions)]
        return sorted(done, key=lambda i: (i.completion_time or i.requested_time, i.requested_time))

    def completed_writes(self) -> list[Instant]:
        return self.completed(inst.WRITE_ACTIONS)

    def pending(self, actions: frozenset[str] | None = None) -> list[Instant]:
        return [
            i
            for i in self.latest_states()
            if i.is_pending and (actions is None or i.action in actions)
        ]

    def last_completed_write(self) -> Instant | None:
        done = self.completed_writes()
        return done[-1] if done else None

    def completed_write_times(self) -> dict[str, Instant]:
        return {i.requested_time: i for i in self.completed_writes()}

    def find(self, requested_time: str, action: str | None = None) -> Instant | None:
        cands = [i for (t, a), i in self._state_by_time.items() if t == requested_time and (action is None or a == action)]
        return cands[0] if cands else None

    def max_time(self) -> str:
        """The greatest requested or completion time on the timeline ('' if empty)."""
        times = [i.requested_time for i in self._instants] + [i.completion_time or "" for i in self._instants]
        return max(times, default="")

    def earliest_time(self) -> str | None:
        return min((i.requested_time for i in self._instants), default=None)

    def completed_after(self, completion_time: str | None) -> list[Instant]:
        """Completed instants that finished strictly after ``completion_time``."""
        return [i for i in self.completed() if completion_time is None or (i.completion_time or i.requested_time) > completion_time]

    # -- files ---------------------------------------------------------------
    def path_of(self, i: Instant) -> str:
        return f"{self.config.timeline_dir}/{i.file_name(self.config.version)}"

    def read_bytes(self, i: Instant) -> bytes:
        return self.storage.read_bytes(self.path_of(i))

    def commit_metadata(self, i: Instant) -> CommitMetadata:
        key = self.path_of(i)
        if key not in self._meta_cache:
            try:
                data = self.storage.read_bytes(key)
            except FileNotFoundError as e:
                raise TableFormatError(f"{key}: instant file vanished while reading the timeline") from e
            self._meta_cache[key] = CommitMetadata.from_bytes(data, source=key)
        return self._meta_cache[key]


def _scan(storage: Storage, config: TableConfig) -> list[Instant]:
    out = []
    for e in storage.list_dir(config.timeline_dir, files_only=True):
        name = e.path.rsplit("/", 1)[-1]
        i = inst.decode_file_name(name)
        if i is None:
            continue
        if config.version < 8 and i.is_completed:
            i = Instant(i.requested_time, i.action, i.state, None)
        out.append(i)
    out.sort(key=lambda i: (i.requested_time, i.state))
    return out


# -- writing instant files -------------------------------------------------------


def _create(storage: Storage, config: TableConfig, i: Instant, data: bytes) -> str:
    if config.version < 8:
        raise TableFormatError("multiwriter writes version 8 tables only; upgrade this version 6 table with Hudi first")
    rel = f"{config.timeline_dir}/{i.file_name(config.version)}"
    try:
        storage.put_if_absent(rel, data)
    except FileExists as e:
        raise InstantExistsError(f"{rel} already exists; instant times must be unique") from e
    return rel


def create_requested(storage: Storage, config: TableConfig, t: str, action: str = inst.COMMIT, data: bytes = b"") -> Instant:
    i = Instant(t, action, inst.REQUESTED)
    _create(storage, config, i, data)
    return i


def create_inflight(storage: Storage, config: TableConfig, t: str, action: str = inst.COMMIT, data: bytes = b"") -> Instant:
    i = Instant(t, action, inst.INFLIGHT)
    _create(storage, config, i, data)
    return i


def create_completed(
    storage: Storage, config: TableConfig, t: str, completion_time: str, action: str = inst.COMMIT, data: bytes = b""
) -> Instant:
    if completion_time <= t:
        raise ValueError(f"completion time {completion_time} must be greater than requested time {t}")
    i = Instant(t, action, inst.COMPLETED, completion_time)
    _create(storage, config, i, data)
    return i


def delete_pending(storage: Storage, config: TableConfig, t: str, action: str = inst.COMMIT) -> list[str]:
    """Delete the requested and inflight files of an instant (rollback's last step)."""
    deleted = []
    for state in (inst.INFLIGHT, inst.REQUESTED):
        rel = f"{config.timeline_dir}/{Instant(t, action, state).file_name(config.version)}"
        if storage.delete(rel):
            deleted.append(rel)
    return deleted
