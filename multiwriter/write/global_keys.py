"""Hudi's global semantics on a table that keeps the record index: a key lives in one partition.

Hudi's record index is global (``HoodieTableMetadataUtil``'s ``record_index`` maps a key to one
location, whatever partition a record names), and Hudi's writers using it route an incoming
record whose key the index places in another partition by
``hoodie.record.index.update.partition.path`` (``HoodieIndexConfig``, false by default):

* false: the record updates the stored one where it is (its partition path becomes the stored
  one's; ``HoodieIndexUtils.tagGlobalLocationBackToRecords``);
* true: the stored record is deleted where it is and the incoming one goes to its own partition.

Our writers' index is per partition, so a batch is routed here first: rows whose key the index
places in another partition are moved there (false), or given a delete of the stored record in
that partition (true); then each key's file group is the one the index names (Hudi's
``RECORD_INDEX`` index type), with no bloom filter probed and no file's keys read. Without this, a key moving partitions would be stored twice, and the
index could name only one of the copies. A location the index names counts only when its file
group is committed in the writer's base (an index entry of a write that never completed names a
group no reader sees).
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..format import record_index as ri
from ..storage import Storage
from ..table import metadata_files, metadata_table
from ..table.snapshot import FileSlice, Snapshot
from ..table.timeline import Timeline
from .index import FILE_ID
from .records import KEY, OP, OP_DELETE, PARTITION


def keeps_record_index(storage: Storage, base: Timeline) -> bool:
    """Does the table keep a record index our writers use (listed, and global)?"""
    return metadata_table.global_record_index(storage, base.config.raw)


def lookup(storage: Storage, base: Timeline, prepared: pa.Table) -> dict[str, ri.Location] | None:
    """Where the record index puts the batch's keys, None when the table keeps no record index."""
    if not keeps_record_index(storage, base):
        return None
    if not prepared.num_rows:
        return {}
    return metadata_files.lookup_record_index(storage, base.config, prepared.column(KEY).to_pylist()) or {}


def route(storage: Storage, base: Timeline, prepared: pa.Table, *, update_partition_path: bool,
          found: dict[str, ri.Location] | None = None) -> pa.Table:
    """``prepared`` routed by the record index (see the module notes); unchanged when the table
    keeps none or no key lives in another partition. ``found``: :func:`lookup`'s answer, when
    the caller has it."""
    if found is None:
        found = lookup(storage, base, prepared)
    if not found:
        return prepared
    keys = prepared.column(KEY).to_pylist()
    parts = prepared.column(PARTITION).to_pylist()
    moved = [(i, loc) for i, k in enumerate(keys) if (loc := found.get(k)) is not None and loc.partition != parts[i]]
    if not moved:
        return prepared
    live = _committed_groups(storage, base, sorted({loc.partition for _, loc in moved}))
    moved = [(i, loc) for i, loc in moved if (loc.partition, loc.file_id) in live]
    if not moved:
        return prepared
    rows = np.array([i for i, _ in moved], dtype=np.int64)
    stored = pa.array([loc.partition for _, loc in moved], pa.string())
    if not update_partition_path:
        return _with_partitions(prepared, rows, stored)
    is_delete = pc.equal(prepared.column(OP).take(pa.array(rows)), OP_DELETE).to_numpy(zero_copy_only=False)
    # deletes go where the key is; an upsert stays in its partition, with a delete of the stored
    # record where that is
    out = _with_partitions(prepared, rows[is_delete], stored.filter(pa.array(is_delete)))
    ups = rows[~is_delete]
    if not len(ups):
        return out
    gone = prepared.take(pa.array(ups))
    gone = gone.set_column(gone.schema.get_field_index(PARTITION), PARTITION, stored.filter(pa.array(~is_delete)))
    gone = gone.set_column(gone.schema.get_field_index(OP), OP,
                           pa.array(np.full(len(ups), OP_DELETE), gone.schema.field(OP).type))
    return pa.concat_tables([out, gone])


def tag(snapshot: Snapshot, prepared: pa.Table, found: dict[str, ri.Location],
        on_found: Callable[[FileSlice], None] | None = None) -> pa.Table:
    """Add ``_mw_file_id`` from the record index: the group it puts each key in, when that is
    in the record's partition and committed in the writer's base (the index's entries of a
    write that completed after the base name groups the base lacks: such keys are new to this
    writer, as to the bloom index); null for new keys. ``on_found`` hears each slice found to
    hold batch keys (see :meth:`~.index.KeyIndex.tag`)."""
    keys = prepared.column(KEY).to_pylist()
    parts = prepared.column(PARTITION).to_pylist()
    fids: list[str | None] = []
    heard: set[tuple[str, str]] = set()
    for k, p in zip(keys, parts, strict=True):
        loc = found.get(k)
        fs = snapshot.slices.get((p, loc.file_id)) if loc is not None and loc.partition == p else None
        fids.append(fs.file_id if fs is not None else None)
        if fs is not None and on_found is not None and fs.group not in heard:
            heard.add(fs.group)
            on_found(fs)
    return prepared.append_column(FILE_ID, pa.array(fids, pa.string()))


def _with_partitions(t: pa.Table, rows: np.ndarray, partitions: pa.Array) -> pa.Table:
    if not len(rows):
        return t
    col = np.array(t.column(PARTITION).to_pylist(), dtype=object)
    col[rows] = partitions.to_pylist()
    return t.set_column(t.schema.get_field_index(PARTITION), PARTITION, pa.array(col, t.schema.field(PARTITION).type))


def _committed_groups(storage: Storage, base: Timeline, partitions: list[str]) -> set[tuple[str, str]]:
    snap = Snapshot.build(storage, base, partitions=partitions)
    return {(f.partition, f.file_id) for f in snap.files()}
