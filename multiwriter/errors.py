"""Typed errors of multiwriter.

Two kinds of commit failure are never confused: ``WriteConflictError`` (and the other
"did not land" errors) means the commit provably did not happen, so its files may be deleted
and the batch retried; ``CommitStateUnknownError`` means it may have landed, so nothing of it
may be deleted until the timeline has been read again.
"""
from __future__ import annotations

from .redact import redact_log


class MultiWriterError(Exception):
    """Base class of every error multiwriter raises on purpose. Its text arguments are
    redacted (:func:`multiwriter.redact.redact_log`): a table URI's credentials never reach an
    error message, whoever built it."""

    def __init__(self, *args: object) -> None:
        super().__init__(*(redact_log(a) if isinstance(a, str) else a for a in args))


class ConfigError(MultiWriterError, ValueError):
    """A setting is missing, out of range or contradicts another one."""


class TableNotFoundError(MultiWriterError):
    """The path holds no Hudi table (no ``.hoodie/hoodie.properties``)."""


class TableFormatError(MultiWriterError):
    """A table file is unreadable, corrupt or of an unsupported version."""


class MergeSettingError(TableFormatError):
    """A table setting that changes how versions of a record merge (a merge mode, payload class,
    record merger, partial-update mode or merge property) asks for a merge multiwriter does not
    do; the message names the setting. Nothing was read, compacted or written by it: use Hudi
    for this table (``docs/merge-settings.md`` lists every setting)."""


class CommandBlockError(TableFormatError):
    """A log file holds a command block Hudi's reader would not apply either (a command other
    than a rollback, or a rollback naming no target instant): the slice is refused, nothing read
    from it. ``path`` names the log file, ``offset`` the block; read the slice with Hudi, or
    compact or roll back its instants with Hudi's tools."""

    def __init__(self, message: str, *, path: str = "", offset: int = 0) -> None:
        super().__init__(message)
        self.path = path
        self.offset = offset


class UnsafePathError(TableFormatError):
    """A path named by a table's own files (a plan, a manifest, ``hoodie.properties``, write
    statistics, a listing) would leave the table: ``..``, an absolute path, a name that is not
    an instant time or a data file's, or a symbolic link pointing outside. Nothing was read,
    written or deleted through it. ``path`` is the offending value, ``source`` the file it came
    from (None when it came from the caller)."""

    def __init__(self, message: str, *, path: str = "", source: str | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.source = source


class InstantExistsError(TableFormatError):
    """An instant file that must be new already exists (instant times must be unique)."""


class VirtualKeysError(MultiWriterError):
    """What Hudi does not offer on a table with virtual keys (``hoodie.populate.meta.fields=false``:
    rows carry no commit time nor record key) was asked of one: an incremental or CDC read, a
    Merge-on-Read table. Read the whole table instead, or create the table with meta fields."""


class SchemaMismatchError(MultiWriterError):
    """A batch's columns do not fit the table schema (missing or retyped columns)."""


class InvalidRecordError(MultiWriterError):
    """A record cannot be written: null/empty key, unsafe partition value, ..."""


class WriteConflictError(MultiWriterError):
    """Another writer committed to the same file groups first; this commit did not land."""

    def __init__(
        self,
        message: str,
        *,
        instant: str | None = None,
        winner: str | None = None,
        file_groups: list[tuple[str, str]] | None = None,
    ) -> None:
        super().__init__(message)
        self.instant = instant
        self.winner = winner
        self.file_groups = file_groups or []


class LockError(MultiWriterError):
    """The table lock could not be used."""


class LockAcquireTimeout(LockError):
    """The table lock was not acquired within the timeout; nothing was committed."""


class LockLostError(LockError):
    """The lock (or the session holding it) was lost before the commit finished."""


class CommitDecisionLostError(LockLostError):
    """Another completer decided the next step of the timeline first (this one's lock had
    lapsed): the completion was not decided and nothing of it is visible."""

    def __init__(self, message: str, *, instant: str | None = None) -> None:
        super().__init__(message)
        self.instant = instant


class HeartbeatExpiredError(MultiWriterError):
    """This writer's own heartbeat lapsed, so others may judge it dead: it must not commit."""


class CommitStateUnknownError(MultiWriterError):
    """The commit may or may not have landed; never delete its files before re-reading."""

    def __init__(self, message: str, *, instant: str | None = None) -> None:
        super().__init__(message)
        self.instant = instant


class BootstrapPendingError(MultiWriterError):
    """A bootstrap of the table (``mw.bootstrap``) began and has not completed: writers are
    refused until it does. ``instant`` is the pending bootstrap instant's time (Hudi's
    ``METADATA_BOOTSTRAP_INSTANT_TS`` or ``FULL_BOOTSTRAP_INSTANT_TS``), or None when none is
    pending (not begun yet, or a FULL_RECORD part still to run). Wait for it, or,
    if its process died, let the companion job roll it back and run the bootstrap again."""

    def __init__(self, message: str, *, instant: str | None = None) -> None:
        super().__init__(message)
        self.instant = instant


class BootstrapSourceError(ConfigError):
    """A bootstrap's source cannot be taken as it is: missing, empty, files of different schemas,
    a key or partition column missing, a folder layout that does not match the partition
    columns. Nothing was written to the table; ``path`` names the offending source file or folder."""

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class BootstrapModeError(ConfigError):
    """A bootstrap mode the table cannot take: ``METADATA_ONLY`` (one skeleton file group per
    source file) on a bucket-indexed table, whose file groups are buckets of keys. Nothing was
    written. Use ``mode="FULL_RECORD"`` for those partitions, or leave the bucket index out."""


class InstantRolledBackError(MultiWriterError):
    """Our pending instant vanished or a rollback targets it: the cleaner judged us dead."""


class InstantCompletedError(MultiWriterError):
    """A task attempt outlived its instant's commit (a late or rerun attempt): what it was about
    to write would be a second copy of rows already committed, so it writes nothing."""


class DuplicateBatchError(MultiWriterError):
    """A commit with this writer's checkpoint at or past our batch id landed meanwhile."""


class CheckpointResetError(MultiWriterError):
    """A streaming batch id at or below the writer's checkpoint came from another query (a new
    checkpoint location under the same writer id): it is not a replay, and skipping it would
    drop its rows. Nothing of the batch was written."""

    def __init__(self, message: str, *, writer_id: str, batch_id: int, last_batch_id: int,
                 query_id: str, last_query_id: str) -> None:
        super().__init__(message)
        self.writer_id = writer_id
        self.batch_id = batch_id
        self.last_batch_id = last_batch_id
        self.query_id = query_id
        self.last_query_id = last_query_id


class CommitNotLandedError(MultiWriterError):
    """A commit whose outcome was unknown provably did not land (the timeline was re-read); its
    files were deleted and the batch may be retried with a new instant."""


class FileExists(MultiWriterError, FileExistsError):
    """A create-if-absent found the file already there (instant files, lock files, markers)."""


class StorageBatchError(MultiWriterError, OSError):
    """Some files of one operation over many files failed; ``paths`` names them (relative to the
    table root). An ``OSError``, as the single-file failure it stands for."""

    def __init__(self, message: str, *, paths: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.paths = tuple(paths)


class UploadError(StorageBatchError):
    """Data files of a write were not uploaded under their final names: the write fails, so its
    commit is never completed; the files it did upload are its attempt's, removed as any failed
    attempt's are."""


class DeleteError(StorageBatchError):
    """Files a batch delete (``Storage.delete_many``) named were not deleted; the others were."""


class ZooKeeperStartError(MultiWriterError):
    """The local ZooKeeper server could not be started (no Java, no jar, or it did not come up)."""


class InjectedFault(RuntimeError):
    """Raised by a fault point's ``error`` action (reliability tests). Deliberately not a
    MultiWriterError: it stands for any unexpected exception."""


class InstantNotRetainedError(MultiWriterError):
    """A time-travel or incremental read needs file slices or instants that the cleaner has
    removed (old versions deleted, instants archived), so no exact answer exists any more.

    ``earliest`` is the earliest as-of time (time travel) or incremental start (completion time)
    that is still answered exactly; ``None`` when no such bound is known.
    """

    def __init__(self, message: str, *, requested: str | None = None, earliest: str | None = None) -> None:
        super().__init__(message)
        self.requested = requested
        self.earliest = earliest


class CleanerError(MultiWriterError):
    """One or more cleaner steps failed; ``report`` (a CleanerReport) says what the run did anyway."""

    def __init__(self, message: str, report: object) -> None:
        super().__init__(message)
        self.report = report


class PlanRefusedError(TableFormatError):
    """A plan, a pending instant or a history manifest on the table contradicts the table itself:
    a clean naming files a retained snapshot still reads, a compaction whose inputs are not the
    file slice the timeline has, a pending action at a time that belongs to a completed one or
    below the archived timeline, a manifest that drops archived instants. Nothing was deleted or
    rewritten through it. ``source`` is the file, ``path`` the first offending value;
    ``forged``: no writer could have made it (it leaves out what its own time had committed), so
    it is set aside rather than left pending for another engine."""

    def __init__(self, message: str, *, source: str, path: str = "", forged: bool = True) -> None:
        super().__init__(message)
        self.source = source
        self.path = path
        self.forged = forged
