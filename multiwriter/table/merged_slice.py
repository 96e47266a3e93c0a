"""Reading a Merge-on-Read file slice: its base file with its log files merged over it by the
table's merge rule (:mod:`.merge_rule`). Snapshot reads, incremental reads and compaction all
read slices through here, so they cannot disagree on which version of a record is current.
"""
from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..storage import Storage
from .files import FileSlice, LogFile
from .log_file import read_log_blocks
from .merge_rule import Versions, merge


def read_base(storage: Storage, fs: FileSlice, schema: pa.Schema) -> pa.Table:
    """The base file's rows in ``schema`` (columns added since it was written read as null)."""
    with storage.fs.open_input_file(storage.abs(fs.path)) as f:
        t = pq.ParquetFile(f).read()
    return _aligned(t, schema)


def read_log(storage: Storage, lf: LogFile, rank: int, schema: pa.Schema) -> Versions:
    """One log file's record and delete blocks as one source of versions. Corrupt blocks (a torn
    append) are skipped, as Hudi's reader does; command blocks are not written by table
    version 8 writers (a failed deltacommit's log files are deleted instead)."""
    blocks = read_log_blocks(storage.read_bytes(lf.path), source=lf.path)
    records = [_aligned(b.records, schema) for b in blocks if b.kind == "data" and b.records is not None]
    deletes = [_plain_zero(b.records) for b in blocks if b.kind == "delete" and b.records is not None and b.records.num_rows]
    return Versions(
        rank=rank,
        records=pa.concat_tables(records) if records else None,
        deletes=pa.concat_tables(deletes, promote_options="permissive") if deletes else None,
    )


def read_slice(storage: Storage, fs: FileSlice, schema: pa.Schema, ordering_field: str | None,
               logs: Sequence[LogFile] | None = None) -> pa.Table:
    """The current rows of one file slice in ``schema``: the base file when it has no logs,
    else base and logs merged (``logs``: a subset of the slice's, in completion order; all of
    them by default)."""
    use = fs.logs if logs is None else tuple(logs)
    base = read_base(storage, fs, schema)
    if not use:
        return base
    sources = [Versions(rank=-1, records=base)]
    sources += [read_log(storage, lf, rank, schema) for rank, lf in enumerate(use)]
    return merge(sources, ordering_field=ordering_field, schema=schema)


def _plain_zero(deletes: pa.Table) -> pa.Table:
    """Hudi writes a delete without an ordering value as the integer 0 (its default): such a
    delete removes every older version whatever its ordering value, as Hudi's readers apply it."""
    i = deletes.schema.get_field_index("ordering_value")
    if i < 0:
        return deletes
    col = deletes.column(i)
    if not pa.types.is_integer(col.type):
        return deletes
    zero = pc.equal(col, pa.scalar(0, col.type))
    return deletes.set_column(i, "ordering_value", pc.if_else(zero, pa.scalar(None, col.type), col))


def _aligned(t: pa.Table, schema: pa.Schema) -> pa.Table:
    """``t`` in ``schema``'s column order and types; missing columns as nulls."""
    if t.schema.equals(schema, check_metadata=False):
        return t
    cols = []
    for f in schema:
        i = t.schema.get_field_index(f.name)
        cols.append(t.column(i).cast(f.type) if i >= 0 else pa.nulls(t.num_rows, f.type))
    return pa.Table.from_arrays(cols, schema=schema)
