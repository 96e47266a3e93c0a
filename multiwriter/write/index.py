"""Index: tag each incoming record with the file group that already holds its key.

Reads only the ``_hoodie_record_key`` column of the latest file slices of the partitions the
batch touches (the live groups of the base snapshot, as :mod:`multiwriter.table.view` decides:
a group a replace commit retired holds no key, so such a key is inserted anew), and skips files whose footer key range (``hoodie_min/max_record_key``) cannot
hold any incoming key.
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..storage import Storage
from ..table.snapshot import FileSlice, Snapshot
from .records import KEY, PARTITION

FILE_ID = "_mw_file_id"
MIN_KEY = b"hoodie_min_record_key"
MAX_KEY = b"hoodie_max_record_key"


def key_range(storage: Storage, fs: FileSlice) -> tuple[str, str] | None:
    with storage.fs.open_input_file(storage.abs(fs.path)) as f:
        md = pq.read_metadata(f).metadata or {}
    lo, hi = md.get(MIN_KEY), md.get(MAX_KEY)
    return (lo.decode(), hi.decode()) if lo is not None and hi is not None else None


def read_keys(storage: Storage, fs: FileSlice) -> pa.Array:
    with storage.fs.open_input_file(storage.abs(fs.path)) as f:
        t = pq.read_table(f, columns=["_hoodie_record_key"])
    return t.column(0).combine_chunks().cast(pa.string())


def existing_keys(storage: Storage, files: list[FileSlice], lo: str, hi: str) -> tuple[pa.Array, pa.Array]:
    """(keys, file_ids) of the given slices whose key range overlaps [lo, hi]."""
    keys, ids = [], []
    for fs in files:
        rng = key_range(storage, fs)
        if rng is not None and (rng[1] < lo or rng[0] > hi):
            continue
        k = read_keys(storage, fs)
        keys.append(k)
        ids.append(pa.array([fs.file_id] * len(k), pa.string()))
    if not keys:
        return pa.array([], pa.string()), pa.array([], pa.string())
    return pa.concat_arrays(keys), pa.concat_arrays(ids)


def tag(storage: Storage, snapshot: Snapshot, prepared: pa.Table) -> pa.Table:
    """Add ``_mw_file_id``: the existing file group of each record's key, null for new keys."""
    out = pa.nulls(prepared.num_rows, pa.string()).to_pylist()
    parts = prepared.column(PARTITION).combine_chunks()
    keys = prepared.column(KEY).combine_chunks()
    for p in pc.unique(parts).to_pylist():
        files = snapshot.in_partition(p)
        if not files:
            continue
        mask = pc.equal(parts, p)
        pk = keys.filter(mask)
        lo, hi = pc.min(pk).as_py(), pc.max(pk).as_py()
        ek, eid = existing_keys(storage, files, lo, hi)
        if len(ek) == 0:
            continue
        pos = pc.index_in(pk, value_set=ek)
        found = eid.take(pos).to_pylist()
        rows = pc.indices_nonzero(mask).to_pylist()
        for r, fid in zip(rows, found):
            out[r] = fid
    return prepared.append_column(FILE_ID, pa.array(out, pa.string()))
