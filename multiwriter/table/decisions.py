"""The decision log: every completion on the timeline is decided by one atomic storage operation.

Why: the table lock is a lease (a ZooKeeper session, the storage lock's validity). A holder
frozen past it (GC, SIGSTOP, a stalled VM) wakes up believing it still holds the lock while
another holder has moved on; any check it made before the pause is stale. Checking again right
before the completed file only narrows that window, and taking a visible completed file back
afterwards loses data others already built on. So a completion is decided, once, by creating
the next object of a sequence that every completer reads under the lock first:

* ``.hoodie/.decisions/<seq>.json`` (``seq`` 20 digits) is created only with
  :meth:`Storage.create_exclusive` (a link on local disks, ``If-None-Match: *`` on S3).
* A completer (a writer, the companion job) takes the lock, reads the newest decision ``N``,
  **rolls it forward** when its completed file is missing (the decider died or froze after
  deciding), then loads the timeline, checks what it must (conflicts, fences), writes the
  metadata-table deltacommit and creates ``N+1`` naming its instant and completion time. Only
  then does it write ``<T>_<C>.<action>``. The creator of ``N+1`` is the one decider after
  ``N``: a holder that lapsed after reading ``N`` finds ``N+1`` taken and never writes its
  completed file; what it wrote is undone as any attempt that did not land.
* A rollback of a pending write is decided the same way (``kind: rollback``) after its plan is
  written and before any file is deleted, so a frozen writer and the companion job can never
  both win: either the writer's commit is decided first (the job then rolls it forward and drops
  its plan) or the rollback is (the writer's create fails).
* Once decided, a completion is never undone: whoever reads the decision next writes the
  completed file from the bytes it holds; the decider writing it later finds it there.
* Old decisions are deleted (:data:`KEEP` newest stay, the newest always). A holder frozen for
  so long that ``N+1`` was already deleted can still create it; so right after a create the
  decider lists the log. A newer decision is no loss by itself: a decider frozen right after its
  create finds ``N+2`` made by someone who rolled ``N+1`` forward first, so its completed file
  exists and it won. A newer decision *and* no completed file means its slot had been freed:
  it deletes its stray object (no one rolls forward anything but the newest decision) and does
  not complete.

The completion time in a decision is issued above every time on the timeline and in the newest
decision, so a completion is never below one a reader may have seen: no other completion can
land between the decider's look and its decision.

Hudi's JVM writers do not read this log; they complete under the same lock with Hudi's own
checks (which have the windows described above).
"""
from __future__ import annotations

import base64
import json
import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .. import faults
from ..errors import CommitDecisionLostError, MultiWriterError, TableFormatError
from ..storage import FileExists, Storage
from ..format import instant as inst
from . import metadata_files, timeline
from ..format.instant import Instant
from .metadata import CommitMetadata
from .properties import TableConfig

if TYPE_CHECKING:  # pragma: no cover
    from .timeline import Timeline

log = logging.getLogger(__name__)

DIR = ".hoodie/.decisions"
#: decisions kept when old ones are deleted (the newest is never deleted)
KEEP = 64
#: old decisions are deleted by the decider of every PRUNE_EVERY-th sequence number
PRUNE_EVERY = 32
COMPLETE = "complete"
ROLLBACK = "rollback"
_NAME = re.compile(r"^(\d{20})\.json$")
_MAX_BYTES = 64 << 20
#: per table (its URI), the newest decision this process made: (seq, its bytes). Decisions are
#: never rewritten, so while the newest listed one has that seq it holds those bytes (another
#: file at that seq would need ours deleted first: a stray of ours is dropped here before it is
#: deleted, pruning never reaches the newest); reading it back costs a request on an object
#: store and a stat, an open and a read on a disk, in every commit's lock hold.
_MINE: dict[str, tuple[int, bytes]] = {}


def forget_mine() -> None:
    """Drop the decisions this process made (it then reads the newest one, as a new process does)."""
    _MINE.clear()


@dataclass(frozen=True)
class Decision:
    """One decided step: ``complete`` (instant ``instant`` of ``action`` completes at
    ``completion`` with the completed file's bytes ``data``) or ``rollback`` (pending instant
    ``target`` of ``action`` is rolled back by rollback instant ``instant``)."""

    kind: str
    instant: str
    action: str
    actor: str
    completion: str | None = None
    target: str | None = None
    data: bytes = b""
    seq: int = 0
    nonce: str = field(default_factory=lambda: os.urandom(8).hex())

    @property
    def completed(self) -> Instant:
        assert self.kind == COMPLETE and self.completion is not None
        return Instant(self.instant, self.action, inst.COMPLETED, self.completion)

    def to_bytes(self) -> bytes:
        rec = {"seq": self.seq, "kind": self.kind, "instant": self.instant, "action": self.action,
               "actor": self.actor, "nonce": self.nonce}
        if self.kind == COMPLETE:
            rec["completion"] = self.completion
            rec["data"] = base64.b64encode(self.data).decode("ascii")
        else:
            rec["target"] = self.target
        return json.dumps(rec, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, seq: int, raw: bytes, *, source: str) -> Decision:
        try:
            rec = json.loads(raw)
            kind, t, action = rec["kind"], rec["instant"], rec["action"]
            if kind not in (COMPLETE, ROLLBACK) or not _is_time(t) or not isinstance(action, str) \
                    or action not in inst.KNOWN_ACTIONS or int(rec["seq"]) != seq:
                raise ValueError("not a decision of this format")
            if kind == COMPLETE:
                completion = rec["completion"]
                if not _is_time(completion) or completion <= t:
                    raise ValueError(f"bad completion time {completion!r}")
                data = base64.b64decode(rec["data"], validate=True)
                return cls(kind, t, action, str(rec.get("actor", "")), completion=completion, data=data, seq=seq,
                           nonce=str(rec.get("nonce", "")))
            target = rec["target"]
            if not _is_time(target):
                raise ValueError(f"bad rollback target {target!r}")
            return cls(kind, t, action, str(rec.get("actor", "")), target=target, seq=seq, nonce=str(rec.get("nonce", "")))
        except (ValueError, KeyError, TypeError, RecursionError) as e:
            raise TableFormatError(f"{source}: not a readable commit decision ({e}); every completion of the table "
                                   "waits on it: move it aside only after checking its instant by hand") from e


def _is_time(v: object) -> bool:
    return isinstance(v, str) and v.isdigit() and 8 <= len(v) <= 20


def path_of(seq: int) -> str:
    return f"{DIR}/{seq:020d}.json"


class DecisionLog:
    """The decision log of one table (see the module's docstring)."""

    def __init__(self, storage: Storage, config: TableConfig) -> None:
        self.storage = storage
        self.config = config

    def _seqs(self) -> list[int]:
        try:
            names = self.storage.list_names(DIR)
        except FileNotFoundError:
            return []
        return sorted(int(m.group(1)) for n in names if (m := _NAME.match(n.rsplit("/", 1)[-1])))

    def newest(self, listed: Callable[[], None] | None = None) -> Decision | None:
        """The newest decision (None for a table that has none yet). ``listed``: called as soon
        as the log's listing is in, before its newest decision is read."""
        seqs = self._seqs()
        if listed is not None:
            listed()
        if not seqs:
            return None
        mine = _MINE.get(self.storage.uri)
        if mine is not None and mine[0] == seqs[-1]:
            return Decision.from_bytes(mine[0], mine[1], source=path_of(mine[0]))
        return self.read(seqs[-1])

    def read(self, seq: int) -> Decision:
        rel = path_of(seq)
        got = self.storage.read_head(rel, _MAX_BYTES)
        if got is None:
            raise FileNotFoundError(rel)
        info, data = got
        if info.size > _MAX_BYTES:
            raise TableFormatError(f"{rel}: {info.size} bytes is no commit decision")
        return Decision.from_bytes(seq, data, source=rel)

    def roll_forward(self, d: Decision | None, completed: Callable[[Instant], bool]) -> bool:
        """Write the completed file of ``d`` when ``completed`` says the timeline lacks it; True
        when it wrote it. A rollback decision needs nothing here: its plan is on the timeline and
        the companion job finishes it."""
        if d is None or d.kind != COMPLETE or completed(d.completed):
            return False
        rel = f"{self.config.timeline_dir}/{d.completed.file_name(self.config.version)}"
        try:
            self.storage.put_if_absent(rel, d.data)
        except FileExists:
            return False
        log.warning("instant %s (%s) of %s was decided (decision %d) but its completed file was missing: rolled "
                    "forward to %s", d.instant, d.action, d.actor or "?", d.seq, rel)
        return True

    def decide(self, after: Decision | None, d: Decision, *, prune: bool = True) -> Decision:
        """Create the decision after ``after`` (the newest one read under the lock); raises
        :class:`CommitDecisionLostError` when another completer decided first (nothing of ``d``
        is then decided). ``prune=False``: the caller deletes old decisions itself, after
        releasing the lock (:meth:`prune_due`)."""
        seq = (after.seq if after is not None else 0) + 1
        d = Decision(d.kind, d.instant, d.action, d.actor, d.completion, d.target, d.data, seq, d.nonce)
        rel = path_of(seq)
        raw = d.to_bytes()
        if not self.storage.create_exclusive(rel, raw):
            raise _lost(d, f"decision {seq} was taken by another completer")
        newer = [s for s in self._seqs() if s > seq]
        if newer and not self._rolled_forward(d):
            # ours filled a gap left by deleting old decisions: stray, never rolled forward
            self.storage.delete(rel)
            raise _lost(d, f"decisions up to {newer[-1]} exist already")
        if not newer:
            _MINE[self.storage.uri] = (seq, raw)
        if prune:
            self.prune_due(seq)
        return d

    def prune_due(self, seq: int) -> None:
        """Delete old decisions when ``seq`` (a decision just made) is a PRUNE_EVERY-th one. Safe
        without the lock: only decisions at least KEEP below ``seq`` go, never the newest, and a
        create into a freed slot is caught by its creator (:meth:`decide`)."""
        if seq % PRUNE_EVERY == 0:
            self._prune(seq)

    def _rolled_forward(self, d: Decision) -> bool:
        """Was ``d`` the newest decision when the next one was made? Then its completed file
        exists: the maker of the next decision wrote it first (:func:`settle`). A decision
        created into a slot freed by deleting old ones never was, and nobody writes its file. A
        rollback decision is never rolled forward: one followed by a newer decision counts as
        lost (its plan is dropped; the writer it targeted decides nothing either, being behind)."""
        if d.kind != COMPLETE:
            return False
        return self.storage.exists(f"{self.config.timeline_dir}/{d.completed.file_name(self.config.version)}")

    def _prune(self, newest: int) -> None:
        for s in self._seqs():
            if s > newest - KEEP:
                break
            try:
                self.storage.delete(path_of(s))
            except OSError as e:  # old decisions are garbage: the next prune retries
                log.info("could not delete old decision %d: %s", s, e)
                return


def _lost(d: Decision, why: str) -> CommitDecisionLostError:
    what = f"completion of instant {d.instant} ({d.action})" if d.kind == COMPLETE else \
        f"rollback {d.instant} of instant {d.target}"
    return CommitDecisionLostError(
        f"the {what} by {d.actor or 'this process'} was not decided: {why} while it believed it held the table lock "
        "(a pause longer than the lock's session or lease); nothing of it is visible, and a write must be retried",
        instant=d.instant)


def settle(log_: DecisionLog, load: Callable[[], Timeline],
           listed: Callable[[], None] | None = None) -> tuple[Decision | None, Timeline]:
    """Under the lock, before any check: the newest decision, rolled forward if it must be, and
    the timeline loaded after it (``load``), so the timeline holds every decided completion.
    ``listed``: called once the decision log's listing is in (what is read from then on holds
    every decided commit's deltacommit, see ``metadata_files.read_ahead``)."""
    d = log_.newest(listed)
    tl = load()
    if log_.roll_forward(d, lambda i: _is_completed(tl, i)):
        tl = load()
    return d, tl


def is_decided(storage: Storage, config: TableConfig, instant_time: str, tl: Timeline | None = None) -> bool:
    """Is ``instant_time`` committed, or decided and about to be? Every undo of an attempt asks
    this before deleting anything: completed on the timeline, or named by the newest decision
    (only the newest can lack its completed file)."""
    if tl is not None:
        own = tl.find(instant_time)
        if own is not None and own.is_completed:
            return True
    d = DecisionLog(storage, config).newest()
    return d is not None and d.kind == COMPLETE and d.instant == instant_time


def _is_completed(tl: Timeline, i: Instant) -> bool:
    own = tl.find(i.requested_time, i.action)
    return own is not None and own.is_completed


def complete(storage: Storage, config: TableConfig, after: Decision | None, instant_time: str, completion: str,
             action: str, data: bytes, *, actor: str, metadata: CommitMetadata | None = None) -> Instant:
    """The one completion step every completer runs under the lock, after its checks: the
    metadata table's deltacommit, the decision, the completed file. Raises
    :class:`CommitDecisionLostError` when the decision went to another completer; once decided,
    a failure to write the completed file is only logged (the next completer rolls it forward)."""
    if completion <= instant_time:
        raise ValueError(f"completion time {completion} must be greater than requested time {instant_time}")
    upkeep = metadata_files.on_completed(storage, config, instant_time, completion, action, data, metadata)
    DecisionLog(storage, config).decide(after, Decision(COMPLETE, instant_time, action, actor, completion=completion, data=data))
    done = write_completed(storage, config, instant_time, completion, action, data)
    after_decided(storage, config, upkeep, instant_time)
    return done


def after_decided(storage: Storage, config: TableConfig, upkeep: metadata_files.Upkeep | None,
                  instant_time: str) -> None:
    """The metadata table's upkeep once a completion is decided (:func:`metadata_files.after_decided`).
    The completion stands whatever happens here: a failure is only logged, and the next
    completer compacts (undoing a compaction that died part way) and cleans."""
    try:
        metadata_files.after_decided(storage, config, upkeep)
    except Exception as e:  # noqa: BLE001 - decided: nothing here may make the completion look failed
        log.warning("the metadata table's compaction or clean after %s failed (%s); the next completion does it",
                    instant_time, e)


def write_completed(storage: Storage, config: TableConfig, instant_time: str, completion: str, action: str,
                    data: bytes) -> Instant:
    """``<T>_<C>.<action>`` of a decided completion; already there (rolled forward) is fine."""
    i = Instant(instant_time, action, inst.COMPLETED, completion)
    rel = f"{config.timeline_dir}/{i.file_name(config.version)}"
    try:
        storage.put_if_absent(rel, data)
        timeline.wrote_completed(storage, rel, data)
    except FileExists:
        log.info("%s was already written (rolled forward by another completer)", rel)
    except (OSError, MultiWriterError) as e:
        log.warning("%s is decided but could not be written (%s); the next completer rolls it forward", rel, e)
        return i
    faults.point("after-completed-file")
    return i
