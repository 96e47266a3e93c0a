"""Streaming checkpoints: which batch id each writer committed last.

Each commit stores ``{writer_id: batch_id}`` under Hudi's ``_hudi_streaming_sink_checkpoint`` key
of ``extraMetadata``. Every commit carries the whole map forward (the newest commit's map plus its
own writer's entry), so the newest commit alone knows every writer's checkpoint: a writer that
stopped for good neither pins archival at its last commit nor loses its checkpoint when that
commit is archived.

Beside it, ``multiwriter.streaming_query_ids`` maps each writer to the id of the streaming
query that sent its last batch (Spark's persistent query id, or one the user gives), carried
forward the same way. A batch id at or below the checkpoint is a replay only when it comes
from that same query; from another one it is a checkpoint reset (a query redeployed with a
fresh checkpoint numbers its batches from 0 again), which must never be skipped silently.

A writer id that stopped for good is *retired* (:func:`retire`, ``multiwriter writers retire``):
a small JSON record, ``.hoodie/multiwriter.retired_writers.json``, names it with the latest
timeline time R at retirement. From then on every reader of the maps here ignores the writer's
entries, except those in its own commits requested after R (the id came back to life). New
commits build their map from these readers, so they stop carrying it; a commit that raced with
the retirement may still carry it once, and is ignored like the rest. No commit is written: the
record lives outside the timeline, so archival never loses it.
"""
from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import ConfigError, TableFormatError
from .redact import redact

if TYPE_CHECKING:  # pragma: no cover
    from .lock.base import LockProvider
    from .storage import Storage
    from .format.instant import Instant
    from .table.metadata import CommitMetadata
    from .table.table import Table
    from .table.timeline import Timeline

log = logging.getLogger(__name__)

CHECKPOINT_KEY = "_hudi_streaming_sink_checkpoint"
QUERIES_KEY = "multiwriter.streaming_query_ids"
WRITER_KEY = "multiwriter.writer_id"
RETIRED_PATH = ".hoodie/multiwriter.retired_writers.json"
RETIRED_FORMAT = "multiwriter-retired-writers"


def parse(meta: CommitMetadata) -> dict[str, int]:
    """The checkpoint map of one commit; unreadable entries are skipped (other tools write this
    key too, with their own values). A batch id is an integer or a string of at most 19 digits
    (a Java ``long``, as Hudi stores it); anything else -- a float such as ``1e999``, nesting
    too deep to parse, 5,000 digits -- is skipped with one warning per distinct value: read as
    a huge id it would make every later batch of that writer look like a replay, and raising
    would let one planted commit stop every writer."""
    raw = meta.extra_metadata.get(CHECKPOINT_KEY)
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        _skipped(raw, "it is not a JSON map")
        return {}
    if not isinstance(value, dict):
        return {}
    out: dict[str, int] = {}
    for writer, batch in value.items():
        if isinstance(batch, str) and _BATCH_ID_RE.match(batch):
            out[str(writer)] = int(batch)
        elif isinstance(batch, int) and not isinstance(batch, bool) and -_MAX_ID <= batch <= _MAX_ID:
            out[str(writer)] = batch
        elif isinstance(batch, (float, int)) or (isinstance(batch, str) and batch.strip("-").isdigit()):
            _skipped(raw, f"the batch id of writer {str(writer)[:100]!r} is no long")
    return out


#: a batch id as Hudi stores it: a Java long
_MAX_ID = 2**63 - 1
_BATCH_ID_RE = re.compile(r"^-?[0-9]{1,19}\Z")
_warned: set[int] = set()


def _skipped(raw: str, why: str) -> None:
    key = hash(raw)
    if key not in _warned and len(_warned) < 10_000:
        _warned.add(key)
        log.warning("a commit's checkpoint map %s: %s; skipped (written by another tool, or planted)",
                    raw[:200], why)


def queries(meta: CommitMetadata) -> dict[str, str]:
    """The query-id map of one commit (writers whose last batch came with a known query)."""
    raw = meta.extra_metadata.get(QUERIES_KEY)
    try:
        value = json.loads(raw) if raw else {}
    except (ValueError, RecursionError):
        return {}
    if not isinstance(value, dict):
        return {}
    return {str(w): str(q) for w, q in value.items() if isinstance(q, str) and q}


@dataclass(frozen=True)
class Checkpoint:
    """A writer's last committed batch id and the query that sent it (None: not recorded)."""

    batch_id: int
    query_id: str | None = None

    def covers(self, batch_id: int) -> bool:
        return batch_id <= self.batch_id

    def reset_by(self, batch_id: int, query_id: str | None) -> bool:
        """A batch this checkpoint covers, sent by another query: a reset, not a replay. Unknown
        on either side (older commits, pyarrow batches without an id) counts as the same query."""
        return self.covers(batch_id) and query_id is not None and self.query_id is not None and query_id != self.query_id


def entries(meta: CommitMetadata) -> dict[str, Checkpoint]:
    """Both maps of one commit, joined per writer."""
    qs = queries(meta)
    return {w: Checkpoint(b, qs.get(w)) for w, b in parse(meta).items()}


def of(meta: CommitMetadata, writer_id: str) -> int | None:
    """This writer's batch id in one commit, if it has one."""
    return parse(meta).get(writer_id)


def last(timeline: Timeline, writer_id: str) -> int | None:
    """The newest batch id this writer committed (see :func:`last_entry`)."""
    got = last_entry(timeline, writer_id)
    return None if got is None else got.batch_id


def last_entry(timeline: Timeline, writer_id: str) -> Checkpoint | None:
    """The newest checkpoint of this writer: scans back from the newest commit (the first map
    that names the writer wins, which is the newest commit once every commit carries the map
    forward). None for a retired writer (unless it committed again since)."""
    gone = retired(timeline.storage)
    for i in reversed(timeline.completed_writes()):
        meta = timeline.commit_metadata(i)
        got = entries(meta).get(writer_id)
        if got is not None and _counts(writer_id, i, meta, gone):
            return got
    return None


def carried_forward(timeline: Timeline) -> dict[str, int]:
    """Every writer's newest checkpoint batch id (see :func:`carried_entries`)."""
    return {w: c.batch_id for w, c in carried_entries(timeline).items()}


def carried_entries(timeline: Timeline) -> dict[str, Checkpoint]:
    """Every writer's newest checkpoint as far as the active timeline knows it: the union of the
    maps, newest commit first (older tables carry only each commit's own writer). Retired
    writers are left out."""
    gone = retired(timeline.storage)
    out: dict[str, Checkpoint] = {}
    for i in reversed(timeline.completed_writes()):
        meta = timeline.commit_metadata(i)
        for writer, entry in entries(meta).items():
            if writer not in out and _counts(writer, i, meta, gone):
                out[writer] = entry
    return out


def last_commits(timeline: Timeline) -> dict[str, Instant]:
    """Per writer with a (non-retired) checkpoint, its newest own commit on the active timeline
    (absent when only carried maps name it: its own commits were archived)."""
    gone = retired(timeline.storage)
    names = carried_forward(timeline)
    out: dict[str, Instant] = {}
    for i in reversed(timeline.completed_writes()):
        w = timeline.commit_metadata(i).extra_metadata.get(WRITER_KEY)
        if w in names and w not in out and (w not in gone or i.requested_time > gone[w]):
            out[w] = i
    return out


def _counts(writer: str, i: Instant, meta: CommitMetadata, gone: dict[str, str]) -> bool:
    """Does this commit's entry for ``writer`` count: not retired, or its own commit since."""
    at = gone.get(writer)
    return at is None or (meta.extra_metadata.get(WRITER_KEY) == writer and i.requested_time > at)


# -- retired writers -----------------------------------------------------------------------


@dataclass(frozen=True)
class RetiredWriter:
    writer_id: str
    retired_at: str  # the latest timeline time at retirement
    last_batch: int | None


def retired(storage: Storage) -> dict[str, str]:
    """Retired writer ids and the timeline time each was retired at (empty when none)."""
    try:
        data = storage.read_bytes(RETIRED_PATH)
    except FileNotFoundError:
        return {}
    return {w: str(rec["retired_at"]) for w, rec in _retired_records(data).items()}


def _retired_records(data: bytes) -> dict[str, dict]:
    try:
        doc = json.loads(data)
        if doc.get("format") != RETIRED_FORMAT or not isinstance(doc.get("writers"), dict):
            raise ValueError("not a retired-writers record")
        return {str(w): dict(rec) for w, rec in doc["writers"].items() if rec.get("retired_at")}
    except (ValueError, AttributeError, TypeError, RecursionError) as e:
        raise TableFormatError(
            f"{RETIRED_PATH} is unreadable ({str(e)[:200]}); fix or delete it (deleting it un-retires every writer id)"
        ) from e


def retire(table: Table, writer_id: str, *, lock: LockProvider, lock_timeout_s: float = 60.0) -> RetiredWriter:
    """Forget a stopped writer's checkpoint: later commits stop carrying it, status stops
    listing it. Refuses while the id is registered live (ZooKeeper registration, held for the
    duration so it cannot start meanwhile) or has an instant in flight. A writer that starts
    again under the id afterwards starts without a checkpoint."""
    from .lock.base import HolderInfo

    registration = _claim_id(table, writer_id, lock)
    tlock = lock.for_table(table.table_id, table.storage)
    try:
        tlock.acquire(timeout_s=lock_timeout_s, holder=HolderInfo.current(f"retire-{writer_id}"))
        try:
            tl = table.timeline()
            _refuse_in_flight(table, tl, writer_id)
            batch = last(tl, writer_id)
            if batch is None:
                raise ConfigError(f"writer id {writer_id!r} has no checkpoint on {redact(table.path)}; nothing to retire")
            rec = RetiredWriter(writer_id, tl.max_time(), batch)
            _write_retired(table.storage, rec)
        finally:
            tlock.release()
    finally:
        tlock.close()
        if registration is not None:
            registration.close()
    return rec


def _claim_id(table: Table, writer_id: str, lock: LockProvider):
    """Register the id like a starting query would: fails (ConfigError) while it is live."""
    if not hasattr(lock, "register_writer"):
        return None
    try:
        return lock.register_writer(table.table_id, writer_id)
    except ConfigError as e:
        raise ConfigError(f"cannot retire writer id {writer_id!r}: it is registered live ({e}); stop its query first") from e


def _refuse_in_flight(table: Table, tl: Timeline, writer_id: str) -> None:
    from .format import layout

    for i in tl.pending():
        try:
            body = json.loads(table.storage.read_bytes(layout.heartbeat_path(i.requested_time)))
        except (FileNotFoundError, ValueError, RecursionError):
            continue
        if isinstance(body, dict) and body.get("writer_id") == writer_id:
            raise ConfigError(
                f"cannot retire writer id {writer_id!r}: its instant {i.requested_time} is in flight; "
                "stop the writer and let the cleaner roll the instant back first"
            )


def _write_retired(storage: Storage, rec: RetiredWriter) -> None:
    """Add one writer to the record (under the table lock: read, modify, replace)."""
    try:
        current = _retired_records(storage.read_bytes(RETIRED_PATH))
    except FileNotFoundError:
        current = {}
    current[rec.writer_id] = {"retired_at": rec.retired_at, "last_batch": rec.last_batch}
    doc = {"format": RETIRED_FORMAT, "version": 1, "writers": current}
    storage.write_bytes(RETIRED_PATH, json.dumps(doc, indent=1, sort_keys=True).encode())


def encode(checkpoints: dict[str, Checkpoint]) -> dict[str, str]:
    """The extraMetadata entries of a checkpoint map: batch ids as strings under
    :data:`CHECKPOINT_KEY` (as Hudi stores them), known query ids under :data:`QUERIES_KEY`."""
    items = sorted(checkpoints.items())
    return {
        CHECKPOINT_KEY: json.dumps({w: str(c.batch_id) for w, c in items}),
        QUERIES_KEY: json.dumps({w: c.query_id for w, c in items if c.query_id is not None}),
    }
