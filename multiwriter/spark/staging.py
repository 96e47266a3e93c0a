"""Staging of a streaming micro-batch: each task also keeps its input rows as an Arrow IPC file
inside the table's ``.hoodie/.temp`` area, so the driver can commit the micro-batch through the
driver path when the tasks' own data files cannot be committed as they are
(:mod:`.stream_write`), then deletes them.

One directory per (writer id, batch id): ``.hoodie/.temp/streaming/<writer>/<batch>/``. The
driver reads only the files the tasks' commit messages name (a failed or speculative attempt's
file is never committed) and deletes the whole directory afterwards, after a failure too, so
leftovers of earlier attempts of the same batch go with it. Nothing under ``.hoodie`` is read as
table data, and marker handling only looks at instant-time directories, so staged files are
invisible to readers and the cleaner alike.

Kept free of Spark imports so the path rules are testable on their own.
"""
from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa

from ..errors import ConfigError
from ..storage import Storage
from ..format import layout

STAGING_ROOT = f"{layout.TEMP_DIR}/streaming"
_SEGMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}\Z")


@dataclass(frozen=True)
class StagedFile:
    """One task's staged rows: a path relative to the table root."""

    path: str
    rows: int


def writer_segment(writer_id: str) -> str:
    """A directory name for ``writer_id``: the id itself when it is a safe name, else a digest
    (ids are free text; a path segment must not be)."""
    if _SEGMENT.match(writer_id) and ".." not in writer_id:
        return writer_id
    return "id-" + hashlib.sha1(writer_id.encode()).hexdigest()[:16]


def batch_dir(writer_id: str, batch_id: int) -> str:
    if not isinstance(batch_id, int) or isinstance(batch_id, bool) or batch_id < 0:
        raise ConfigError(f"streaming batch id {batch_id!r} must be an integer >= 0")
    return f"{STAGING_ROOT}/{writer_segment(writer_id)}/{batch_id}"


def stage(storage: Storage, writer_id: str, batch_id: int, batches: Iterable[pa.RecordBatch]) -> StagedFile | None:
    """Write one task's batches to a new file of the batch's directory (None when no rows)."""
    it = iter(batches)
    first = next(it, None)
    if first is None:
        return None
    d = batch_dir(writer_id, batch_id)
    rel = f"{d}/{uuid.uuid4().hex}.arrow"
    if storage.is_local:
        storage.makedirs(d)
    rows = 0
    with storage.open_output(rel) as out, pa.ipc.new_stream(out, first.schema) as w:
        for b in _chain(first, it):
            w.write_batch(b)
            rows += b.num_rows
    return StagedFile(rel, rows)


def _chain(first: pa.RecordBatch, rest: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
    yield first
    yield from rest


def read(storage: Storage, writer_id: str, batch_id: int, files: Iterable[StagedFile], schema: pa.Schema) -> pa.Table:
    """The rows of the named staged files (each must lie in this batch's directory)."""
    d = batch_dir(writer_id, batch_id) + "/"
    tables = []
    for f in files:
        name = f.path[len(d):] if f.path.startswith(d) else ""
        if not name or "/" in name or not name.endswith(".arrow"):
            raise ConfigError(f"staged file {f.path!r} is not in the staging directory {d} of batch {batch_id}")
        with storage.fs.open_input_stream(storage.abs(f.path)) as src:
            tables.append(pa.ipc.open_stream(src).read_all())
    if not tables:
        return schema.empty_table()
    return pa.concat_tables(tables, promote_options="permissive")


def discard(storage: Storage, writer_id: str, batch_id: int) -> None:
    """Delete the batch's staging directory (absent is fine)."""
    storage.delete_dir(batch_dir(writer_id, batch_id))
