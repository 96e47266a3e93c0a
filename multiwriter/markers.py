"""Markers: ``.hoodie/.temp/<T>/<partition>/<file>.marker.CREATE``, one per data file an instant
starts to write, created *before* the file.

Two of Hudi's layouts are written and read. Tasks that run on their own (Spark executors, where
several tasks or attempts write one instant) create one marker file each (Hudi's ``DIRECT``
markers). A writer that writes every file of its instant itself and knows their names up front
(the driver path) lists them all in one ``MARKERS0`` file beside ``MARKERS.type`` =
``TIMELINE_SERVER_BASED``: the layout Hudi's timeline server writes, which Hudi's rollback reads
straight from storage. One file instead of one per data file (and one directory per partition)
is what makes a small write's markers cheap. An instant uses one layout, never both.

Why: the marker directory of an instant is the list of every file it may have left on storage,
whatever happened to the process (killed, retried Spark task, speculative duplicate). So an abort
or a rollback deletes exactly those files without listing the table, and a commit can delete
the files its write statistics do not name (:func:`reconcile`) before it makes any file visible.
Markers of a finished instant are garbage, never state: losing them costs at most a table listing.

Log files (Merge-on-Read) are marked like base files (``.marker.CREATE``, which Hudi's table
version 8 rollback also reads as "delete this log file"); ``.marker.APPEND``, which Hudi's append
handle writes for a log file, is read too, so our cleaner finds a JVM writer's failed logs. A
log file's name starts with a dot: that is the one hidden name a marker may point at.
"""
from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Iterable

from .errors import InvalidRecordError
from .s3_store import REQUESTS
from .storage import FileExists, Storage
from .format import layout
from .format.cdc_log import parse_cdc_log_file
from .format.log_file import parse_log_file
from .threads import free_in_child

log = logging.getLogger(__name__)

__all__ = ["create", "create_all", "data_paths", "delete_committed", "delete_dir", "delete_files", "instants_with_markers", "list_markers",
           "owned_markers", "reconcile", "started_writing"]

MARKER_TYPE_FILE = "MARKERS.type"
LISTED_TYPE = b"TIMELINE_SERVER_BASED"
_LISTS_PREFIX = "MARKERS"
_MARKER_SUFFIX = ".marker.CREATE"
_APPEND_SUFFIX = ".marker.APPEND"  # Hudi's marker of a log file its append handle writes


def create(storage: Storage, instant_time: str, partition: str, file_name: str) -> str:
    """Create the marker of one data file (idempotent: a retried task re-creates the same one)."""
    _disown(storage, instant_time)  # the directory now holds a marker no list of ours names
    rel = layout.marker_path(instant_time, partition, file_name)
    try:
        storage.put_if_absent(rel, b"", durable=False)
    except FileExists:
        pass
    return rel


def create_all(storage: Storage, instant_time: str, files: Iterable[tuple[str, str]]) -> str:
    """Mark every ``(partition, file name)`` the instant will write, in one list file (Hudi's
    timeline-server layout), before any of them is written. Returns the list file's path.

    On an object store the type file and the list go out side by side: a reader that finds the
    lists without the type file finds no data file beside them either, since none is written
    before both are in place. When this call created the type file, the directory is this
    process's alone (:func:`owned_markers`)."""
    d = layout.marker_dir(instant_time)
    key = (storage.uri, instant_time)
    with _WRITTEN_MU:
        mine = _OWNED.get(key)
    body = "\n".join(f"{layout.data_file_path(p, name)}{_MARKER_SUFFIX}" for p, name in files).encode()
    type_rel = f"{d}/{MARKER_TYPE_FILE}"
    beside = None
    if mine is None and storage.is_s3:
        beside = REQUESTS.get().submit(_create_type, storage, type_rel)
    fresh_type = _create_type(storage, type_rel) if mine is None and beside is None else False
    try:
        rel = _create_list(storage, d, body)
    finally:
        if beside is not None:
            fresh_type = beside.result()
    _remember(storage, rel, body)
    with _WRITTEN_MU:
        if mine is not None and _OWNED.get(key) is mine:
            mine.append(rel)
        elif fresh_type:
            _OWNED[key] = [type_rel, rel]
            while len(_OWNED) > _WRITTEN_MAX:
                _OWNED.popitem(last=False)
    return rel


def _create_type(storage: Storage, rel: str) -> bool:
    """Create the type file; False when it was there already."""
    try:
        storage.put_if_absent(rel, LISTED_TYPE, durable=False)
        return True
    except FileExists:
        return False


def _create_list(storage: Storage, d: str, body: bytes) -> str:
    for i in range(1_000):  # a list file is never rewritten: a second list takes the next number
        rel = f"{d}/{_LISTS_PREFIX}{i}"
        try:
            storage.put_if_absent(rel, body, durable=False)
            return rel
        except FileExists:
            continue
    raise FileExists(f"{d} already holds 1000 marker lists")


def owned_markers(storage: Storage, instant_time: str) -> list[str] | None:
    """The marker objects of ``instant_time`` when this process alone wrote its marker
    directory (it created the type file, and only marker lists of its own followed): a driver
    write, which writes every file of its instant itself. Then the directory holds these and
    nothing else but staged copies of data files, so the commit reads its markers from memory
    and deletes them by name (on an object store, the two listings of the directory a write
    would make). None otherwise: list the directory."""
    with _WRITTEN_MU:
        mine = _OWNED.get((storage.uri, instant_time))
        return None if mine is None else list(mine)


def _disown(storage: Storage, instant_time: str) -> None:
    with _WRITTEN_MU:
        _OWNED.pop((storage.uri, instant_time), None)


def list_markers(storage: Storage, instant_time: str) -> list[str]:
    """Every marker of one instant, as the relative path its direct marker file has (empty when
    there is no marker dir): the marker files, and the entries of the ``MARKERS<n>`` lists."""
    d = layout.marker_dir(instant_time)
    mine = owned_markers(storage, instant_time)
    if mine is not None:
        return sorted({f"{d}/{m}" for rel in mine if rel != f"{d}/{MARKER_TYPE_FILE}" for m in _listed(storage, rel)})
    out = set()
    for e in storage.walk_files(d):
        name = e.path.rsplit("/", 1)[-1]
        if e.path.endswith(_MARKER_SUFFIX):
            out.add(e.path)
        elif e.path.endswith(_APPEND_SUFFIX):
            out.add(e.path.removesuffix(_APPEND_SUFFIX) + _MARKER_SUFFIX)
        elif name.startswith(_LISTS_PREFIX) and name[len(_LISTS_PREFIX):].isdigit() and e.path == f"{d}/{name}":
            out.update(f"{d}/{m}" for m in _listed(storage, e.path))
    return sorted(out)


def started_writing(storage: Storage, instant_time: str) -> bool:
    """Whether the instant has marked a data file yet (in either layout): from then on its
    writer may have left files behind."""
    return bool(list_markers(storage, instant_time))


def _listed(storage: Storage, rel: str) -> list[str]:
    """The markers one list file names; an entry that would leave the table (``..``, hidden
    directories, hidden names other than log files) is skipped, so no deletion is ever pointed
    outside it."""
    out = []
    with _WRITTEN_MU:
        body = _WRITTEN.get((storage.uri, rel))
    if body is None:
        body = storage.read_bytes(rel)
    for line in body.decode("utf-8", errors="replace").splitlines():
        m = line.strip()
        if not m:
            continue
        safe = _safe_marker(m)
        if safe is None:
            log.warning("marker list %s: skipped unsafe entry %r", rel, m[:200])
        else:
            out.append(safe)
    return out


#: the marker lists this process wrote, by (table, path): a list is never rewritten, so the
#: commit's reconciliation reads its own list from memory (one request fewer on object stores)
_WRITTEN: OrderedDict[tuple[str, str], bytes] = OrderedDict()
_WRITTEN_MAX = 64
_WRITTEN_MU = free_in_child(threading.Lock())
#: the marker directories this process alone wrote (:func:`owned_markers`), by (table, instant):
#: the objects it created there, newest instants last
_OWNED: OrderedDict[tuple[str, str], list[str]] = OrderedDict()


def _remember(storage: Storage, rel: str, body: bytes) -> None:
    with _WRITTEN_MU:
        _WRITTEN[(storage.uri, rel)] = body
        while len(_WRITTEN) > _WRITTEN_MAX:
            _WRITTEN.popitem(last=False)


def _safe_marker(entry: str) -> str | None:
    """``entry`` (``<partition>/<file><suffix>``) when its directories are safe and its file
    name is a plain name or a log file's (``.<fileId>_<T>.log.<v>_<token>``, ``.cdc`` after it for a
    CDC log); else None."""
    suffix = _APPEND_SUFFIX if entry.endswith(_APPEND_SUFFIX) else _MARKER_SUFFIX
    part, _, name = entry.rpartition("/")
    if not entry.endswith(suffix) or not name:
        return None
    try:
        if part:
            layout.check_relative(part)
        if name.startswith("."):
            bare = name.removesuffix(suffix)
            if parse_log_file(bare) is None and parse_cdc_log_file(bare) is None:
                return None
        else:
            layout.check_relative(name)
    except InvalidRecordError:
        return None
    return entry.removesuffix(suffix) + _MARKER_SUFFIX


def data_paths(storage: Storage, instant_time: str) -> list[str]:
    """The data files the markers of ``instant_time`` name (only files of that instant, so a
    stray marker can never point a deletion at another instant's file)."""
    out = set()
    for m in list_markers(storage, instant_time):
        rel = layout.marker_to_data_path(instant_time, m)
        if rel and _is_data_file_of(rel, instant_time):
            out.add(rel)
    return sorted(out)


def instant_files(storage: Storage, instant_time: str) -> list[str]:
    """The data files of ``instant_time``: those its markers name, and any other file named with
    that instant in the partitions they name. Every attempt marks its file before writing it, but
    a file that was not (a writer's bug) must not outlive an abort or a rollback: once archival
    passes its instant, readers would take it for an archived commit's file."""
    named = data_paths(storage, instant_time)
    parts = sorted({rel.rpartition("/")[0] for rel in named})
    listed = {e.path for p in parts for e in storage.list_dir(p, files_only=True) if _is_data_file_of(e.path, instant_time)}
    return sorted(set(named) | listed)


def delete_files(storage: Storage, instant_time: str) -> list[str]:
    """Delete every data file of the instant (:func:`instant_files`); returns those that existed."""
    return [rel for rel in instant_files(storage, instant_time) if storage.delete(rel)]


def delete_dir(storage: Storage, instant_time: str) -> None:
    """Delete the marker directory of one instant (after its files are dealt with)."""
    _disown(storage, instant_time)
    storage.delete_dir(layout.marker_dir(instant_time))


def delete_committed(storage: Storage, instant_time: str) -> None:
    """Delete the marker directory of an instant this process has just completed: by the names
    it wrote when the directory is its own (:func:`owned_markers`; its staged copies were all
    published by then), else as :func:`delete_dir`. A leftover of either way is garbage the
    companion job removes with the directories of completed instants."""
    mine = owned_markers(storage, instant_time)
    _disown(storage, instant_time)
    storage.delete_dir(layout.marker_dir(instant_time), files=mine)


def instants_with_markers(storage: Storage) -> list[str]:
    """Instant times that have a marker directory."""
    out = []
    for d in storage.list_subdirs(layout.TEMP_DIR):
        t = d.rsplit("/", 1)[-1]
        if layout.INSTANT_TIME_RE.match(t):  # Hudi's reserved 14-digit times too (a bootstrap's)
            out.append(t)
    return sorted(out)


def reconcile(storage: Storage, instant_time: str, written: Iterable[str]) -> list[str]:
    """Before completing ``instant_time``: delete every file its markers name that is not one of
    the ``written`` paths (the write statistics). A Spark task that failed after writing its file,
    or a speculative duplicate, leaves a second base file (or log file, with another write token)
    for the same file group and instant; Hudi's readers would read both. Returns the deleted
    paths."""
    keep = set(written)
    extra = [rel for rel in data_paths(storage, instant_time) if rel not in keep]
    deleted = [rel for rel in extra if storage.delete(rel)]
    if deleted:
        log.info("instant %s: deleted %d data files its commit does not name (first: %s)", instant_time, len(deleted), deleted[0])
    return deleted


def _is_data_file_of(rel: str, instant_time: str) -> bool:
    """A base or log file named with ``instant_time`` (a table version 8 log file carries the
    requested time of the deltacommit that wrote it)."""
    name = rel.rsplit("/", 1)[-1]
    parsed = layout.parse_data_file(name) or parse_log_file(name) or parse_cdc_log_file(name)
    return parsed is not None and parsed.instant_time == instant_time
