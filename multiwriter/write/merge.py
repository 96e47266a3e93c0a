"""Copy-on-write merge of one file group (pure pyarrow; the driver and Spark executors both
call :func:`merge_file_group`, so both paths write the same rows).

A marker is created before the data file, so a failed attempt's files can always be found and
deleted. Right before the marker and right before the data file, the task checks that its instant
is still alive (:mod:`.guard`): a writer paused past its heartbeat bound writes nothing more.
Untouched rows keep their commit time and sequence number.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .. import markers
from ..heartbeat.client import beating_client
from ..storage import FileExists, Storage
from ..table import layout
from ..table.properties import TableConfig
from ..table.metadata import WriteStat
from ..table.schema import META_COLUMNS, data_schema, with_meta
from . import guard
from .plan import FileGroupTask
from .records import KEY, OP, OP_DELETE, dedupe

MIN_KEY = "hoodie_min_record_key"
MAX_KEY = "hoodie_max_record_key"


@dataclass(frozen=True)
class MergeContext:
    """What every task of one instant needs; small and plain so it ships to executors."""

    table_uri: str
    instant_time: str
    schema_ipc: bytes  # the (evolved) data schema, Arrow IPC-serialized
    ordering_field: str | None
    partition_depth: int
    heartbeat_bound_s: float | None = None  # the writer's heartbeat expiry bound (pre-write check)
    pending_files: tuple[str, ...] = ()  # requested/inflight files of the instant (pre-write check)

    @property
    def data_schema(self) -> pa.Schema:
        return pa.ipc.read_schema(pa.py_buffer(self.schema_ipc))


def context(table_uri: str, instant_time: str, schema: pa.Schema, ordering_field: str | None, depth: int) -> MergeContext:
    return MergeContext(table_uri, instant_time, data_schema(schema).serialize().to_pybytes(), ordering_field, depth)


def armed(ctx: MergeContext, config: TableConfig) -> MergeContext:
    """``ctx`` with what the pre-write check needs where no heartbeat client is at hand (Spark
    executors): the bound of the client beating the instant in this process, and the instant's
    pending timeline files."""
    client = beating_client(ctx.instant_time)
    bound = client.bound_s if client is not None else ctx.heartbeat_bound_s
    return dataclasses.replace(
        ctx, heartbeat_bound_s=bound, pending_files=guard.pending_files(config, ctx.instant_time)
    )


def check_alive(storage: Storage, ctx: MergeContext, what: str) -> None:
    """The pre-write check of :mod:`.guard` for one file of this instant."""
    guard.check_alive(storage, ctx.instant_time, ctx.heartbeat_bound_s, ctx.pending_files, what)


def align(t: pa.Table, schema: pa.Schema) -> pa.Table:
    """Reorder/cast columns to ``schema``; columns the file lacks (schema evolution) are null."""
    cols = []
    for f in schema:
        if t.schema.get_field_index(f.name) >= 0:
            cols.append(t.column(f.name).cast(f.type))
        else:
            cols.append(pa.nulls(t.num_rows, f.type))
    return pa.Table.from_arrays(cols, schema=schema)


def merge_file_group(
    storage: Storage, ctx: MergeContext, task: FileGroupTask, incoming: pa.Table, write_token: str
) -> WriteStat:
    started = time.monotonic()
    t = ctx.instant_time
    full = with_meta(ctx.data_schema)
    name = layout.DataFileName(task.file_id, write_token, t).name
    rel = layout.data_file_path(task.partition, name)
    check_alive(storage, ctx, f"the marker of {rel}")
    markers.create(storage, t, task.partition, name)
    _ensure_partition_metadata(storage, task.partition, t, ctx.partition_depth)

    incoming = dedupe(incoming, ctx.ordering_field) if incoming.num_rows > 1 else incoming
    deletes = incoming.filter(pc.equal(incoming.column(OP), OP_DELETE))
    upserts = incoming.filter(pc.not_equal(incoming.column(OP), OP_DELETE))

    old = _read_old(storage, task, full)
    n_update = n_delete = 0
    if old is not None and old.num_rows:
        old_keys = old.column("_hoodie_record_key").combine_chunks()
        upserts = _drop_stale(upserts, old, ctx.ordering_field)
        upd_keys = upserts.column(KEY).combine_chunks()
        del_keys = deletes.column(KEY).combine_chunks()
        replaced = pc.is_in(old_keys, value_set=upd_keys)
        removed = pc.is_in(old_keys, value_set=del_keys)
        n_update = pc.sum(pc.cast(replaced, pa.int64())).as_py() or 0
        n_delete = pc.sum(pc.cast(pc.and_(removed, pc.invert(replaced)), pa.int64())).as_py() or 0
        kept = old.filter(pc.invert(pc.or_(replaced, removed)))
        kept = kept.set_column(full.get_field_index("_hoodie_file_name"), "_hoodie_file_name", pa.array([name] * kept.num_rows, pa.string()))
    else:
        kept = full.empty_table()
    fresh = _new_rows(upserts, full, t, task, name)
    n_insert = fresh.num_rows - n_update
    out = pa.concat_tables([kept, fresh]).combine_chunks()
    if out.num_rows > 1:
        out = out.take(pc.sort_indices(out, sort_keys=[("_hoodie_record_key", "ascending")]))
    check_alive(storage, ctx, rel)
    size = _write_parquet(storage, rel, out)
    return WriteStat(
        file_id=task.file_id,
        path=rel,
        partition_path=task.partition,
        prev_commit=task.prev_commit or "null",
        num_writes=out.num_rows,
        num_inserts=n_insert,
        num_update_writes=n_update,
        num_deletes=n_delete,
        total_write_bytes=size,
        file_size=size,
        prev_base_file=task.old_file,
        create_time_ms=int((time.monotonic() - started) * 1000),
    )


def _read_old(storage: Storage, task: FileGroupTask, full: pa.Schema) -> pa.Table | None:
    if task.old_file is None:
        return None
    rel = layout.data_file_path(task.partition, task.old_file)
    with storage.fs.open_input_file(storage.abs(rel)) as f:
        return align(pq.read_table(f), full)


def _drop_stale(upserts: pa.Table, old: pa.Table, ordering: str | None) -> pa.Table:
    """Event-time ordering: an incoming row older than the stored one does not replace it."""
    if not ordering or upserts.num_rows == 0:
        return upserts
    pos = pc.index_in(upserts.column(KEY), value_set=old.column("_hoodie_record_key").combine_chunks())
    stored = old.column(ordering).combine_chunks().take(pos)
    newer = pc.fill_null(pc.greater_equal(upserts.column(ordering), stored), True)
    return upserts.filter(newer)


def _new_rows(upserts: pa.Table, full: pa.Schema, t: str, task: FileGroupTask, name: str) -> pa.Table:
    n = upserts.num_rows
    if n == 0:
        return full.empty_table()
    if n > 1:
        upserts = upserts.take(pc.sort_indices(upserts, sort_keys=[(KEY, "ascending")]))
    meta = {
        "_hoodie_commit_time": pa.array([t] * n, pa.string()),
        "_hoodie_commit_seqno": pc.binary_join_element_wise(
            pa.scalar(f"{t}_{task.task_index}"), pc.cast(pa.array(range(n), pa.int64()), pa.string()), "_"),
        "_hoodie_record_key": upserts.column(KEY).cast(pa.string()),
        "_hoodie_partition_path": pa.array([task.partition] * n, pa.string()),
        "_hoodie_file_name": pa.array([name] * n, pa.string()),
    }
    cols = [meta[c] for c in META_COLUMNS] + [upserts.column(f.name) for f in full if f.name not in META_COLUMNS]
    return pa.Table.from_arrays(cols, schema=full)


def _write_parquet(storage: Storage, rel: str, out: pa.Table) -> int:
    keys = out.column("_hoodie_record_key")
    md = dict(out.schema.metadata or {})
    if out.num_rows:
        md[MIN_KEY.encode()] = pc.min(keys).as_py().encode()
        md[MAX_KEY.encode()] = pc.max(keys).as_py().encode()
    out = out.replace_schema_metadata(md)
    with storage.fs.open_output_stream(storage.abs(rel)) as f:
        pq.write_table(out, f, compression="snappy")
    info = storage.info(rel)
    return info.size if info else 0


def _ensure_partition_metadata(storage: Storage, partition: str, t: str, depth: int) -> None:
    rel = layout.data_file_path(partition, layout.PARTITION_METADATA)
    if storage.exists(rel):
        return
    try:
        storage.put_if_absent(rel, layout.partition_metadata_bytes(t, depth))
    except FileExists:
        pass


def write_moved_rows(
    storage: Storage, ctx: MergeContext, partition: str, file_id: str, write_token: str, rows: pa.Table
) -> WriteStat:
    """Write rows that a table service moves into a new file group (clustering): marker first,
    the pre-write check, rows sorted by record key. Meta columns are kept as they are (commit
    time and sequence number stay the rows' own, so incremental readers do not see them as new)
    except ``_hoodie_file_name``, which names the new file."""
    started = time.monotonic()
    name = layout.DataFileName(file_id, write_token, ctx.instant_time).name
    rel = layout.data_file_path(partition, name)
    check_alive(storage, ctx, f"the marker of {rel}")
    markers.create(storage, ctx.instant_time, partition, name)
    _ensure_partition_metadata(storage, partition, ctx.instant_time, ctx.partition_depth)
    full = with_meta(ctx.data_schema)
    out = align(rows, full)
    out = out.set_column(full.get_field_index("_hoodie_file_name"), "_hoodie_file_name", pa.array([name] * out.num_rows, pa.string()))
    if out.num_rows > 1:
        out = out.take(pc.sort_indices(out, sort_keys=[("_hoodie_record_key", "ascending")]))
    check_alive(storage, ctx, rel)
    size = _write_parquet(storage, rel, out.combine_chunks())
    return WriteStat(
        file_id=file_id,
        path=rel,
        partition_path=partition,
        num_writes=out.num_rows,
        num_inserts=out.num_rows,
        total_write_bytes=size,
        file_size=size,
        create_time_ms=int((time.monotonic() - started) * 1000),
    )
