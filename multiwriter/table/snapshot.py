"""Snapshots: per file group, the newest base file whose instant is completed (as readers decide).

Files of pending, rolled-back or unknown instants are never visible. A file older than the
earliest instant on the active timeline counts as committed (its instant was archived), exactly
as Hudi readers treat it; rollback therefore deletes files before their instant files.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..storage import Storage
from .layout import HOODIE, PARTITION_METADATA, data_file_path, parse_data_file
from .timeline import Timeline


@dataclass(frozen=True)
class FileSlice:
    """One base file of a file group."""

    partition: str
    file_id: str
    instant_time: str
    name: str
    size: int = 0

    @property
    def path(self) -> str:
        return data_file_path(self.partition, self.name)


def list_partitions(storage: Storage) -> list[str]:
    """Every partition directory (leaf holding a partition metadata file or data files)."""
    out: set[str] = set()
    for e in storage.walk_files(""):
        rel = e.path
        if rel.startswith(HOODIE + "/") or _hidden(rel):
            continue
        name = rel.rsplit("/", 1)[-1]
        if name == PARTITION_METADATA or parse_data_file(name):
            out.add(rel.rsplit("/", 1)[0] if "/" in rel else "")
    return sorted(out)


def _hidden(rel: str) -> bool:
    return any(seg.startswith(".") and seg != PARTITION_METADATA or seg == "__MACOSX" for seg in rel.split("/"))


def list_data_files(storage: Storage, partitions: list[str] | None = None) -> list[FileSlice]:
    """All data files (committed or not) in the given partitions (all when None)."""
    out: list[FileSlice] = []
    if partitions is None:
        entries = [e for e in storage.walk_files("") if not e.path.startswith(HOODIE + "/") and not _hidden(e.path)]
    else:
        entries = [e for p in partitions for e in storage.list_dir(p, files_only=True)]
    for e in entries:
        part, _, name = e.path.rpartition("/")
        parsed = parse_data_file(name)
        if parsed:
            out.append(FileSlice(part, parsed.file_id, parsed.instant_time, name, e.size))
    return out


class Snapshot:
    """The visible file slices of a table at one point of its timeline."""

    def __init__(self, slices: dict[tuple[str, str], FileSlice], timeline: Timeline, as_of: str | None) -> None:
        self.slices = slices
        self.timeline = timeline
        self.as_of = as_of

    @classmethod
    def build(
        cls,
        storage: Storage,
        timeline: Timeline,
        *,
        as_of: str | None = None,
        partitions: list[str] | None = None,
    ) -> Snapshot:
        visible = visibility(timeline, as_of)
        latest: dict[tuple[str, str], FileSlice] = {}
        for fs in list_data_files(storage, partitions):
            if not visible(fs.instant_time):
                continue
            key = (fs.partition, fs.file_id)
            if key not in latest or fs.instant_time > latest[key].instant_time:
                latest[key] = fs
        return cls(latest, timeline, as_of)

    def files(self) -> list[FileSlice]:
        return sorted(self.slices.values(), key=lambda f: (f.partition, f.file_id))

    def in_partition(self, partition: str) -> list[FileSlice]:
        return [f for f in self.files() if f.partition == partition]

    def partitions(self) -> list[str]:
        return sorted({f.partition for f in self.slices.values()})


def visibility(timeline: Timeline, as_of: str | None):
    """A predicate: is a file written at requested time T visible (as of ``as_of``)?

    ``as_of`` is an instant time: commits whose requested time is at or before it are visible
    (as Hudi's time travel and hudi-rs decide it; the completion time orders incremental reads).
    """
    done = timeline.completed_write_times()
    pending = {i.requested_time for i in timeline.pending()}
    earliest = timeline.earliest_time()

    def ok(t: str) -> bool:
        i = done.get(t)
        if i is not None:
            return as_of is None or t <= as_of
        if t in pending or earliest is None:
            return False
        return t < earliest and (as_of is None or t <= as_of)

    return ok
