"""The log-append branch of the write path (Merge-on-Read): a file group that has a base file
gets this instant's changes as one new log file beside it, without reading or rewriting the
base. What the batch costs is then what the batch holds, not what the group holds.

Which version of a record wins is not decided here: readers and compaction merge the slice by
the table's merge rule (:mod:`multiwriter.table.merge_rule`). A group with only log files (a
bucket a Hudi JVM writer started with a log file) gets a log file too: a base file would become
its latest slice and hide those logs. A new group (its bucket's first data) gets a base file
from :func:`~.merge.merge_file_group` instead, so every Hudi reader (hudi-rs too, which reads no
log-only group) sees it; its deletes (a bucket index
routes a delete to its bucket's group whether or not a base file has started it) go to a log
file of the group beside it, see :func:`write_group`.
"""
from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from concurrent.futures import Future

import pyarrow as pa

from .. import faults, markers
from ..storage import Storage
from ..format import layout
from ..format import bounds
from ..format.log_file import LogFileName, encode_log_file, parse_log_file
from ..table.merge_rule import DELETE_ORDERINGS, array_ordering
from ..table import metadata_record_index
from ..table.metadata import WriteStat
from ..format.schema import arrow_to_avro_json, data_schema
from . import guard
from .index import FooterKeys
from .merge import (
    MergeContext,
    check_alive,
    ensure_partition_metadata,
    merge_file_group,
    new_rows,
    split_deletes,
    write_checked,
)
from .plan import FileGroupTask
from .records import KEY

#: a deltacommit writes one log file per file group: its version within (group, instant)
LOG_VERSION = 1
#: the version of the delete block a group's first write leaves beside its base file (version 1
#: is what that base file becomes when another writer created the group first)
FIRST_DELETES_VERSION = 2


def is_log_append(ctx: MergeContext, task: FileGroupTask) -> bool:
    """Does this task append a log file (Merge-on-Read, the group exists: a base file or logs)?"""
    return ctx.log_append and not task.is_new


def log_file_name(ctx: MergeContext, task: FileGroupTask, write_token: str, version: int = LOG_VERSION) -> str:
    return LogFileName(task.file_id, ctx.instant_time, version, write_token).name


def write_group(storage: Storage, ctx: MergeContext, task: FileGroupTask, rows: pa.Table, write_token: str,
                *, may_delete: bool = True, on_footer: Callable[[str, FooterKeys], None] | None = None,
                on_inserted: Callable[[str, pa.Array], None] | None = None,
                old_read: Future | None = None) -> list[WriteStat]:
    """Write one task's file group, the one dispatch of both executors: a log append
    (Merge-on-Read, the group has a base), else a new base file (Copy-on-Write merge, or a
    group's first data). On Merge-on-Read a new group's deletes go to a delete block beside its
    base (no base file when it has only deletes): with non-blocking writers another writer may
    be creating the same bucket's group with older versions of those keys, and its base file's
    slice then takes the delete block in, so the newer delete wins as the merge rule says."""
    if is_log_append(ctx, task):
        return [append_log(storage, ctx, task, rows, write_token, may_delete=may_delete)]
    upserts, deletes = split_deletes(rows) if may_delete and ctx.log_append else (rows, None)
    out = []
    if deletes is None or upserts.num_rows:
        out.append(merge_file_group(storage, ctx, task, upserts, write_token, deduped=True, on_footer=on_footer,
                                    may_delete=may_delete and not ctx.log_append, on_inserted=on_inserted,
                                    old_read=old_read))
    if deletes is not None and deletes.num_rows:
        # its own marker: the instant's marker list names the base file only
        out.append(append_log(storage, dataclasses.replace(ctx, markers_listed=False), task, deletes, write_token,
                              version=FIRST_DELETES_VERSION))
    return out


def append_log(storage: Storage, ctx: MergeContext, task: FileGroupTask, incoming: pa.Table, write_token: str,
               *, may_delete: bool = True, version: int = LOG_VERSION) -> WriteStat:
    """Write one log file holding ``incoming`` (deduplicated rows of one group): a data block of
    its upserts and a delete block of its deletes, whose ordering values let a delete lose to a
    newer version written by a writer that completed earlier. A partial update
    (``ctx.keep_columns``, the columns the batch omitted) writes a data block without those
    columns, marked partial: the merge rule keeps their earlier values (an insert reads null)."""
    started = time.monotonic()
    t = ctx.instant_time
    name = log_file_name(ctx, task, write_token, version)
    rel = layout.data_file_path(task.partition, name)
    if not ctx.markers_listed:
        check_alive(storage, ctx, f"the marker of {rel}")
        markers.create(storage, t, task.partition, name)
    ensure_partition_metadata(storage, task.partition, t, ctx.partition_depth)
    upserts, deletes = split_deletes(incoming) if may_delete else (incoming, None)
    records = _records(ctx, task, upserts) if upserts.num_rows else None
    dels = _deletes(ctx, task, deletes) if deletes is not None and deletes.num_rows else None
    keep = ctx.keep_columns
    if records is not None and keep:  # a partial update: the omitted columns keep earlier values
        records = records.drop_columns([c for c in keep if c in records.column_names])
    schema = _avro_schema(ctx, keep)
    data = encode_log_file(instant_time=t, schema=schema, records=records, deletes=dels, partial=bool(keep))
    if not ctx.markers_listed:  # listed: the check before the instant's markers was moments ago
        check_alive(storage, ctx, rel)
    write_checked(storage, ctx, rel, lambda path: write_log(storage, path, data))
    if ctx.record_index:
        metadata_record_index.remember_keys(storage, rel, upserts.column(KEY).combine_chunks(),
                                            deletes.column(KEY).combine_chunks() if dels is not None else None)
    faults.point("mid-log-append")
    n_up, n_del = upserts.num_rows, (dels.num_rows if dels is not None else 0)
    prev, base, logs = slice_fields(ctx, task)
    return WriteStat(
        file_id=task.file_id,
        path=rel,
        partition_path=task.partition,
        prev_commit=prev,
        num_writes=n_up,
        num_update_writes=n_up,  # without reading the base, inserts and updates are not told apart
        num_deletes=n_del,
        total_write_bytes=len(data),
        file_size=len(data),
        create_time_ms=int((time.monotonic() - started) * 1000),
        log_version=version,
        log_files=(*logs, name),
        base_file=base,
    )


def slice_fields(ctx: MergeContext, task: FileGroupTask) -> tuple[str, str, tuple[str, ...]]:
    """``prevCommit``, ``baseFile`` and the earlier ``logFiles`` of a log append's write stat,
    as Hudi's append handle sets them on table versions 8 and 9
    (``HoodieAppendHandle.populateWriteStatAndFetchFileSlice``): the deltacommit itself, no base
    file and no earlier log, unless the table logs changes (``hoodie.table.cdc.enabled``); then
    the group's latest slice as the writer planned it (base instant, base file name, log files
    newest first as Hudi's ``FileSlice`` orders them), or the deltacommit itself and nothing for
    a group without one. Only Hudi's CDC query reads them (``HoodieCDCExtractor``: the slice
    before a ``LOG_FILE``); every other reader takes a stat's ``path`` as the file it wrote."""
    t = ctx.instant_time
    if ctx.cdc_mode is None or task.old_file is None:
        return t, "", ()
    return task.prev_commit or t, task.old_file, tuple(sorted(task.old_logs, key=_newest_first, reverse=True))


def _newest_first(name: str) -> tuple[str, int, str]:
    """Hudi's log file order (``HoodieLogFile.getLogFileComparator``: instant, version, write
    token), reversed by the caller as ``FileSlice`` keeps its logs."""
    parsed = parse_log_file(name)
    return (parsed.instant_time, parsed.version, parsed.write_token) if parsed else ("", 0, name)


def rebase_as_log(storage: Storage, stat: WriteStat, instant_time: str, keep_columns: tuple[str, ...] = ()) -> WriteStat:
    """Turn a bucket's first base file into a log file of the same group: another writer
    created the bucket's base file meanwhile, and two base files of one group would hide each
    other's rows. The log completes after that base was requested, so it joins its slice; the
    merge rule then decides between their versions. The base file is deleted once the log is
    written (its marker stays; the log gets its own). ``keep_columns``: a partial update's
    omitted columns (null in the base file): left out of the log block, which is marked
    partial, so they keep the other writer's values."""
    partition, _, base_name = stat.path.rpartition("/")
    parsed = layout.parse_data_file(base_name)
    assert parsed is not None and parsed.instant_time == instant_time
    with storage.fs.open_input_file(storage.abs(stat.path)) as f:
        rows = bounds.read_parquet(f, stat.path)
    rows = rows.set_column(rows.schema.get_field_index("_hoodie_file_name"), "_hoodie_file_name",
                           pa.repeat(pa.scalar(stat.file_id, pa.string()), rows.num_rows))
    rows = rows.drop_columns([c for c in keep_columns if c in rows.column_names])
    name = LogFileName(stat.file_id, instant_time, LOG_VERSION, parsed.write_token).name
    rel = layout.data_file_path(partition, name)
    markers.create(storage, instant_time, partition, name)
    schema = json.loads(arrow_to_avro_json(data_schema(rows.schema), "record"))
    data = encode_log_file(instant_time=instant_time, schema=schema, records=rows, partial=bool(keep_columns))
    # the writer's own process: its heartbeat client answers the check (no pending files to read)
    guard.write_checked(storage, instant_time, None, (), rel, lambda path: write_log(storage, path, data))
    storage.delete(stat.path)
    return dataclasses.replace(stat, path=rel, prev_commit=instant_time, num_update_writes=stat.num_writes, num_inserts=0,
                               total_write_bytes=len(data), file_size=len(data), log_version=LOG_VERSION,
                               log_files=(name,))


def write_log(storage: Storage, rel: str, data: bytes) -> None:
    """Write a log file's bytes in one stream, no fsync (called with a staged path by
    :func:`.guard.write_checked`, which publishes it)."""
    with storage.open_output(rel) as f:
        f.write(data)


def _records(ctx: MergeContext, task: FileGroupTask, upserts: pa.Table) -> pa.Table:
    """The rows with their meta columns as a log record holds them (its file name is the
    group's id)."""
    rows, constants = new_rows(upserts, ctx.file_schema, ctx.instant_time, task, task.file_id)
    for column, value in constants.items():
        i = rows.schema.get_field_index(column)
        rows = rows.set_column(i, column, pa.repeat(pa.scalar(value, pa.string()), rows.num_rows))
    return rows


def _deletes(ctx: MergeContext, task: FileGroupTask, deletes: pa.Table) -> pa.Table:
    """Record key, partition path and (when the batch carries it) the ordering value of each
    delete; without one a delete is Hudi's plain delete (it removes every older version). A row
    flagged by a delete marker is written so, with its ordering value, as Hudi's append handle
    writes it (a delete block's ``DeleteRecord`` carrying the record's ordering value): every
    reader, hudi-rs too, then sees a delete, and no compaction can carry the row into a base
    file. A null value is written as none (plain), as Hudi's default ordering value is.
    Several ordering fields: the values of all of them, as Hudi 1.1 writes a delete's
    ``ArrayComparable`` (an ``ArrayWrapper``: ``HoodieAvroUtils.wrapValueIntoAvro``), when the
    batch carries every field; a row with a null field is written plain
    (:func:`~multiwriter.table.merge_rule.array_ordering`)."""
    cols = {"record_key": deletes.column(KEY).cast(pa.string()),
            "partition_path": pa.repeat(pa.scalar(task.partition, pa.string()), deletes.num_rows)}
    fields = ctx.ordering
    if not fields or any(deletes.schema.get_field_index(f) < 0 for f in fields):
        return pa.table(cols)
    if len(fields) > 1:
        arrays = array_ordering([deletes.column(f) for f in fields])
        if arrays.null_count < len(arrays):
            cols[DELETE_ORDERINGS] = arrays
    elif deletes.column(fields[0]).null_count < deletes.num_rows:
        cols["ordering_value"] = deletes.column(fields[0])
    return pa.table(cols)


def _avro_schema(ctx: MergeContext, omit: tuple[str, ...] = ()) -> dict:
    schema = ctx.data_schema
    if omit:
        schema = pa.schema([f for f in schema if f.name not in omit], metadata=schema.metadata)
    return json.loads(arrow_to_avro_json(schema, "record"))
