"""``CommitResult``: what one write did."""
from __future__ import annotations

from dataclasses import dataclass, field

from .format.instant import Instant


@dataclass(frozen=True)
class CommitResult:
    instant: Instant | None
    skipped: bool = False
    attempts: int = 0
    num_inserts: int = 0
    num_updates: int = 0
    num_deletes: int = 0
    files_written: int = 0
    batch_id: int | None = None
    duration_s: float = 0.0
    conflicts: int = 0
    log_bytes: int = 0  # bytes of log files appended (Merge-on-Read)
    phases: dict[str, float] = field(default_factory=dict)
    #: protocol costs of the successful attempt: lock_wait, lock_hold, conflict_check, timeline_io,
    #: commit_hold (the commit's own lock hold) and hold_<step> per step of it (transaction.STEPS)
    protocol: dict[str, float] = field(default_factory=dict)
