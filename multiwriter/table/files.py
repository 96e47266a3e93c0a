"""Data files as storage lists them: base files, log files, partitions. Which of them are
committed, and which log files belong to which base file's slice, is decided by :mod:`.view`,
never here."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..storage import FileEntry, Storage
from ..format.layout import HOODIE, PARTITION_METADATA, data_file_path, parse_data_file
from ..format.log_file import parse_log_file

#: (partition path, fileId): the unit of versioning, conflict and replacement
FileGroup = tuple[str, str]


class _GroupFile:
    """A file of one file group in one partition (base or log): where it is, whose it is."""

    partition: str
    file_id: str
    name: str

    @property
    def path(self) -> str:
        return data_file_path(self.partition, self.name)

    @property
    def group(self) -> FileGroup:
        return (self.partition, self.file_id)


@dataclass(frozen=True)
class LogFile(_GroupFile):
    """One log file of a file group (Merge-on-Read): the changes of one deltacommit, named by its
    requested time; which slice it belongs to depends on when that commit completed."""

    partition: str
    file_id: str
    instant_time: str
    version: int
    name: str
    size: int = 0
    mtime_s: float | None = field(default=None, compare=False)  # the store's clock, as listed


@dataclass(frozen=True)
class FileSlice(_GroupFile):
    """One base file of a file group, with the log files merged over it (Merge-on-Read; empty
    on Copy-on-Write and as storage lists files: :mod:`.view` attaches them).

    A *log-only* slice has no base file (``name`` is empty, :attr:`has_base` False): Hudi's
    non-blocking writers start a bucket with a log file, and its group has only logs until a
    compaction writes its first base. ``instant_time`` is then its first log's deltacommit,
    as Hudi keys such a slice (``HoodieFileGroup.getBaseInstantTime``)."""

    partition: str
    file_id: str
    instant_time: str
    name: str
    size: int = 0
    logs: tuple[LogFile, ...] = ()
    mtime_s: float | None = field(default=None, compare=False)  # the store's clock, as listed

    @property
    def has_base(self) -> bool:
        """False for a log-only slice."""
        return bool(self.name)


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
    """All base files (committed or not) in the given partitions (all when None)."""
    return list_files(storage, partitions, logs=False)[0]


def list_files(storage: Storage, partitions: list[str] | None = None, *, logs: bool = True,
               walked: list[FileEntry] | None = None) -> tuple[list[FileSlice], list[LogFile]]:
    """All base files and (``logs``) log files, committed or not, in one listing (``walked``:
    a walk of the whole table already taken, instead of a new one)."""
    bases: list[FileSlice] = []
    found: list[LogFile] = []
    if partitions is None:
        every = storage.walk_files("") if walked is None else walked
        entries = [e for e in every if not e.path.startswith(HOODIE + "/") and not _hidden(e.path.rpartition("/")[0])]
    else:
        entries = [e for p in partitions for e in storage.list_dir(p, files_only=True)]
    for e in entries:
        part, _, name = e.path.rpartition("/")
        if name.startswith("."):
            parsed_log = parse_log_file(name) if logs else None
            if parsed_log:
                found.append(LogFile(part, parsed_log.file_id, parsed_log.instant_time, parsed_log.version, name, e.size,
                                     mtime_s=e.mtime_s))
            continue
        parsed = parse_data_file(name)
        if parsed:
            bases.append(FileSlice(part, parsed.file_id, parsed.instant_time, name, e.size, mtime_s=e.mtime_s))
    return bases, found
