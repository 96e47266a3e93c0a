"""Markers: ``.hoodie/.temp/<T>/<partition>/<file>.marker.CREATE``, one per data file an instant
starts to write, created *before* the file.

Why: the marker directory of an instant is the list of every file it may have left on storage,
whatever happened to the process (killed, retried Spark task, speculative duplicate). So an abort
or a rollback deletes exactly those files without listing the table, and a commit can delete
the files its write statistics do not name (:func:`reconcile`) before it makes any file visible.
Markers of a finished instant are garbage, never state: losing them costs at most a table listing.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable

from .storage import FileExists, Storage
from .table import layout
from .table.instant import TIME_RE

log = logging.getLogger(__name__)

__all__ = ["create", "data_paths", "delete_dir", "delete_files", "instants_with_markers", "list_markers", "reconcile"]


def create(storage: Storage, instant_time: str, partition: str, file_name: str) -> str:
    """Create the marker of one data file (idempotent: a retried task re-creates the same one)."""
    rel = layout.marker_path(instant_time, partition, file_name)
    try:
        storage.put_if_absent(rel, b"", durable=False)
    except FileExists:
        pass
    return rel


def list_markers(storage: Storage, instant_time: str) -> list[str]:
    """Every marker file of one instant (relative paths; empty when there is no marker dir)."""
    return sorted(e.path for e in storage.walk_files(layout.marker_dir(instant_time)))


def data_paths(storage: Storage, instant_time: str) -> list[str]:
    """The data files the markers of ``instant_time`` name (only files of that instant, so a
    stray marker can never point a deletion at another instant's file)."""
    out = set()
    for m in list_markers(storage, instant_time):
        rel = layout.marker_to_data_path(instant_time, m)
        if rel and _is_data_file_of(rel, instant_time):
            out.add(rel)
    return sorted(out)


def delete_files(storage: Storage, instant_time: str) -> list[str]:
    """Delete every data file the markers name; returns those that existed."""
    return [rel for rel in data_paths(storage, instant_time) if storage.delete(rel)]


def delete_dir(storage: Storage, instant_time: str) -> None:
    """Delete the marker directory of one instant (after its files are dealt with)."""
    storage.delete_dir(layout.marker_dir(instant_time))


def instants_with_markers(storage: Storage) -> list[str]:
    """Instant times that have a marker directory."""
    out = []
    for d in storage.list_subdirs(layout.TEMP_DIR):
        t = d.rsplit("/", 1)[-1]
        if TIME_RE.match(t):
            out.append(t)
    return sorted(out)


def reconcile(storage: Storage, instant_time: str, written: Iterable[str]) -> list[str]:
    """Before completing ``instant_time``: delete every file its markers name that is not one of
    the ``written`` paths (the write statistics). A Spark task that failed after writing its file,
    or a speculative duplicate, leaves a second base file for the same file group and instant;
    readers would pick one of the two by listing order. Returns the deleted paths."""
    keep = set(written)
    extra = [rel for rel in data_paths(storage, instant_time) if rel not in keep]
    deleted = [rel for rel in extra if storage.delete(rel)]
    if deleted:
        log.info("instant %s: deleted %d data files its commit does not name (first: %s)", instant_time, len(deleted), deleted[0])
    return deleted


def _is_data_file_of(rel: str, instant_time: str) -> bool:
    parsed = layout.parse_data_file(rel.rsplit("/", 1)[-1])
    return parsed is not None and parsed.instant_time == instant_time
