"""The CDC records of one Copy-on-Write merge of a file group, as Hudi's merge handle logs them.

With ``hoodie.table.cdc.enabled`` Hudi's merge handle hands every record it writes or drops to
its ``HoodieCDCLogger``: an incoming record that replaces a stored one is an update (``u``,
before: the stored row, after: the merged one), a stored record a delete removes is a delete
(``d``, before only), an incoming record of a key the group did not hold is an insert (``i``,
after only); stored rows the commit leaves alone are not logged. What a record carries depends
on the supplemental logging mode (:func:`multiwriter.format.cdc_log.cdc_columns`); images hold
the data columns only (``HoodieCDCLogger.removeCommitMetadata``). A new file group (Hudi's
create handle) gets no CDC log: readers infer its inserts from the base file
(``HoodieCDCExtractor``: ``BASE_FILE_INSERT``).

An incoming row the stored one outranks (ordering value) is dropped before the merge and is no
change, as the reader's inference from the data files also decides.
"""
from __future__ import annotations

import pyarrow as pa

from ..format import cdc_log as cl


def _plain(col: pa.ChunkedArray) -> pa.Array:
    col = col.combine_chunks()
    return col.dictionary_decode() if pa.types.is_dictionary(col.type) else col


def _images(rows: pa.Table | None, image: pa.StructType, n: int) -> pa.Array:
    if rows is None:
        return pa.nulls(n, image)
    arrays = [_plain(rows.column(f.name)).cast(f.type) for f in image]
    return pa.StructArray.from_arrays(arrays, fields=list(image))


def _part(op: str, keys: pa.Array, before: pa.Table | None, after: pa.Table | None, image: pa.StructType,
          commit_time: str) -> dict[str, pa.Array]:
    n = len(keys)
    return {cl.OP: pa.array([op] * n, pa.string()), cl.TS: pa.array([commit_time] * n, pa.string()),
            cl.RECORD_KEY: _plain(pa.chunked_array([keys])).cast(pa.string()),
            cl.BEFORE: _images(before, image, n), cl.AFTER: _images(after, image, n)}


def merge_changes(mode: str, commit_time: str, data: pa.Schema, *, updated: tuple[pa.Array, pa.Table, pa.Table],
                  deleted: tuple[pa.Array, pa.Table], inserted: tuple[pa.Array, pa.Table]) -> pa.Table:
    """The CDC records (columns of ``mode``) of a merge by ``commit_time`` of a group whose data
    columns are ``data``: ``updated`` (keys, stored rows, merged rows), ``deleted`` (keys, stored
    rows), ``inserted`` (keys, incoming rows); rows hold at least the data columns. Deletes
    first, then updates, then inserts, as the reader's inference lists them."""
    image = pa.struct(list(data))
    parts = [_part(cl.DELETE_OP, deleted[0], deleted[1], None, image, commit_time),
             _part(cl.UPDATE_OP, updated[0], updated[1], updated[2], image, commit_time),
             _part(cl.INSERT_OP, inserted[0], None, inserted[1], image, commit_time)]
    columns = cl.cdc_columns(mode)
    tables = [pa.table({c: p[c] for c in columns}) for p in parts]
    return pa.concat_tables(tables)
