"""Archived instants as readers see them: Hudi's LSM history (:mod:`.lsm_timeline`) and the
JSON batches ``<first>_<last>.archive.json`` that earlier releases wrote into the same directory
(the cleaner moves those into the LSM layout; until it runs, they are read here).

Readers need archived instants for time travel and incremental reads before the active
timeline; the cleaner needs them to finish an interrupted archival and to tell archived commits
from garbage. One loader serves all of them.
"""
from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field

from ..errors import TableFormatError
from ..storage import Storage
from ..format import instant as inst
from ..format import lsm_timeline as lsm
from ..format import paths
from ..format.instant import Instant
from .metadata import CommitMetadata, decode_commit_metadata

LEGACY_FORMAT = "multiwriter-archive"
LEGACY_SUFFIX = ".archive.json"


@dataclass(frozen=True)
class ArchivedInstant:
    """One archived instant: its identity and its timeline files' bytes (by file name)."""

    requested_time: str
    action: str
    completion_time: str | None
    files: dict[str, bytes] = field(default_factory=dict, compare=False)

    @property
    def instant(self) -> Instant:
        """The instant as it stood on the active timeline before archival."""
        if self.completion_time:
            return Instant(self.requested_time, self.action, inst.COMPLETED, self.completion_time)
        return Instant(self.requested_time, self.action, inst.REQUESTED)

    def completed_bytes(self) -> bytes | None:
        """The completed file's content (None when the instant was archived unfinished)."""
        if not self.completion_time:
            return None
        return self.files.get(self.instant.file_name())

    def commit_metadata(self) -> CommitMetadata | None:
        """The commit (or replace commit) metadata of an archived write (None otherwise)."""
        if self.action not in inst.WRITE_ACTIONS:
            return None
        data = self.completed_bytes()
        if data is None:
            return None
        return decode_commit_metadata(self.action, data, source=f"history:{self.instant.file_name()}")


def from_lsm(r: lsm.LsmInstant) -> ArchivedInstant:
    files: dict[str, bytes] = {}
    if r.metadata is not None and r.completion_time:
        files[Instant(r.instant_time, r.action, inst.COMPLETED, r.completion_time).file_name()] = r.metadata
    if r.plan is not None:
        files[Instant(r.instant_time, r.action, inst.REQUESTED).file_name()] = r.plan
    return ArchivedInstant(r.instant_time, r.action, r.completion_time, files)


def decode_legacy_batch(data: bytes, *, source: str) -> list[ArchivedInstant]:
    """The instants of one JSON batch of earlier releases."""
    try:
        doc = json.loads(data)
        if doc.get("format") != LEGACY_FORMAT:
            raise ValueError(f"format is {str(doc.get('format'))[:100]!r}, expected {LEGACY_FORMAT!r}")
        if not isinstance(doc["instants"], list):
            raise TypeError("instants is not a list")
        return [_legacy_instant(r, source) for r in doc["instants"]]
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
        raise TableFormatError(
            f"{source}: not a readable multiwriter archive batch ({str(e)[:200]}); restore it from backup: "
            "the instants it holds are no longer on the active timeline"
        ) from e


def _legacy_instant(r: dict, source: str) -> ArchivedInstant:
    """One instant of a JSON batch: its times are instant times (``../..`` would name files
    elsewhere when its files are restored or listed; :class:`UnsafePathError` naming ``source``),
    its action a known one, its files names and base64 strings."""
    action, completion, files = r["action"], r.get("completion_time"), r.get("files") or {}
    requested = paths.instant_time(r["requested_time"], source=source)
    if completion is not None:
        paths.instant_time(completion, source=source)
    if not isinstance(action, str) or action not in inst.KNOWN_ACTIONS:
        raise ValueError(f"action {str(action)[:100]!r} is not a Hudi action")
    if not isinstance(files, dict) or not all(isinstance(n, str) and isinstance(b, str) for n, b in files.items()):
        raise TypeError("files is not a map of file names to base64 strings")
    return ArchivedInstant(requested, action, completion, {n: base64.b64decode(b) for n, b in files.items()})


def legacy_batches(storage: Storage, history_dir: str) -> list[str]:
    """The JSON batches of earlier releases under ``history_dir``, oldest first."""
    return sorted(e.path for e in storage.list_dir(history_dir, files_only=True) if e.path.endswith(LEGACY_SUFFIX))


def load(storage: Storage, history_dir: str) -> list[ArchivedInstant]:
    """Every archived instant, by requested time; an instant recorded twice (in the LSM history
    and a JSON batch, or in two LSM files) is read once."""
    seen: dict[tuple[str, str], ArchivedInstant] = {}
    with storage.listings_kept():  # the snapshot number, the manifests and the batches: one listing
        for r in lsm.read_instants(storage, history_dir):
            seen.setdefault((r.instant_time, r.action), from_lsm(r))
        for rel in legacy_batches(storage, history_dir):
            for a in decode_legacy_batch(storage.read_bytes(rel), source=rel):
                seen.setdefault((a.requested_time, a.action), a)
    return sorted(seen.values(), key=lambda a: (a.requested_time, a.action))


#: where table version 6 (and Hudi before 1.0) archives: log files this package cannot read
V6_ARCHIVE_DIR = ".hoodie/archived"
#: actions whose completed instants wrote data files (a compaction or clustering completes as a
#: commit or replace commit, but either name may be recorded)
DATA_ACTIONS = inst.WRITE_ACTIONS | {inst.COMPACTION, inst.CLUSTERING}


def unreadable_files(storage: Storage, history_dir: str) -> list[str]:
    """Files of the archive that are neither LSM history nor JSON batches (a version 6 archive):
    when there are any, archived commits cannot be told from failed writes by reading it."""
    return [
        e.path
        for d in (history_dir, V6_ARCHIVE_DIR)
        for e in storage.list_dir(d)
        if not e.path.endswith(".tmp") and not e.path.endswith(LEGACY_SUFFIX)
        and not (d == history_dir and lsm.is_lsm_file(e.path.rsplit("/", 1)[-1]))
    ]


def completed_writes(storage: Storage, history_dir: str) -> dict[str, str]:
    """Requested time -> completion time of every archived instant that completed a data write
    (read without commit metadata: readers need only this to take a file older than the active
    timeline as committed)."""
    out: dict[str, str] = {}
    for r in lsm.read_instants(storage, history_dir, states_only=True):
        if r.completion_time and r.action in DATA_ACTIONS:
            out.setdefault(r.instant_time, r.completion_time)
    for rel in legacy_batches(storage, history_dir):
        for a in decode_legacy_batch(storage.read_bytes(rel), source=rel):
            if a.completion_time and a.action in DATA_ACTIONS:
                out.setdefault(a.requested_time, a.completion_time)
    return out


__all__ = ["ArchivedInstant", "DATA_ACTIONS", "V6_ARCHIVE_DIR", "completed_writes", "decode_legacy_batch",
           "legacy_batches", "load", "unreadable_files"]
