"""Hudi's record keys computed from a row's key fields, and the keys stored rows have.

A table with virtual keys (``hoodie.populate.meta.fields=false``) stores no
``_hoodie_record_key`` values: Hudi's readers and index compute the key from the key fields with
the table's key generator (``HoodieKeyLocationFetchHandle`` via ``BaseFileUtils``), and so do
we, here, with the same strings a writer gives the key when it populates the column.
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import InvalidRecordError, SchemaMismatchError
from .key_strings import java_key_strings
from .properties import TableConfig
from ..format.schema import META_COLUMNS

RECORD_KEY = META_COLUMNS[2]


def stored_keys(rows: pa.Table, config: TableConfig) -> pa.Array:
    """The record keys of rows read from a base file: the ``_hoodie_record_key`` column, or
    computed from the key fields when the table has virtual keys."""
    if config.populate_meta_fields:
        return one_array(rows.column(RECORD_KEY)).cast(pa.string())
    return record_keys(rows, config)


def key_columns(config: TableConfig) -> list[str]:
    """The columns of a base file its record keys come from."""
    return [RECORD_KEY] if config.populate_meta_fields else list(config.record_key)


def read_stored_keys(pf: pq.ParquetFile, config: TableConfig) -> pa.Array:
    """The record keys of one open base file, reading only the columns they come from."""
    return stored_keys(pf.read(columns=key_columns(config)), config)


def record_keys(batch: pa.Table, config: TableConfig) -> pa.Array:
    """Hudi's record key: the value for one field; ``f1:v1,f2:v2`` for several (complex keygen),
    and ``f1:v1`` for one field under the complex key generator of a version 9 table (Hudi 1.1).

    A key of several fields takes a null part as ``__null__`` and an empty one as ``__empty__``
    and is refused only when every part is (``KeyGenUtils.getRecordKey``); a one-field key is
    refused when null or empty."""
    fields = config.record_key
    cols = []
    for f in fields:
        if batch.schema.get_field_index(f) < 0:
            raise SchemaMismatchError(f"record key column {f!r} is missing from the batch")
        cols.append(key_string(batch.column(f), java=config.java_key_strings))
    if len(fields) == 1:
        n_bad = null_or_empty(cols[0])
        if n_bad:
            raise InvalidRecordError(
                f"{n_bad} record(s) have a null or empty record key {fields[0]!r}; every record needs a key "
                "(nothing was written)"
            )
        if not config.field_named_keys:  # the column itself (no copy): the plan then gathers it once
            return pc.cast(one_array(cols[0]), pa.string())
    else:
        cols = _with_placeholders(fields, cols)
    parts = []
    for f, c in zip(fields, cols, strict=True):
        parts.append(pc.binary_join_element_wise(pa.scalar(f), c, ":"))
    out = pc.binary_join_element_wise(*parts, ",")
    return out.combine_chunks() if isinstance(out, pa.ChunkedArray) else out


#: what Hudi writes for a null or empty part of a multi-field key (``KeyGenUtils``)
NULL_PLACEHOLDER = "__null__"
EMPTY_PLACEHOLDER = "__empty__"


def _with_placeholders(fields: tuple[str, ...], cols: list) -> list:
    """The parts of a multi-field key with Hudi's placeholders for null and empty values;
    :class:`InvalidRecordError` when some record's parts are all null or empty."""
    bad = [_null_or_empty_mask(c) if null_or_empty(c) else None for c in cols]
    if all(b is None for b in bad):
        return cols
    if all(b is not None for b in bad):
        every = bad[0]
        for b in bad[1:]:
            every = pc.and_(every, b)
        n = pc.sum(pc.cast(every, pa.int64())).as_py() or 0
        if n:
            raise InvalidRecordError(
                f"{n} record(s) have record key fields {list(fields)} entirely null or empty; Hudi refuses such a key "
                "(KeyGenUtils.getRecordKey): give at least one of them a value (nothing was written)")
    out = []
    for c, b in zip(cols, bad, strict=True):
        if b is None:
            out.append(c)
            continue
        filled = pc.if_else(pc.is_null(c), pa.scalar(NULL_PLACEHOLDER), c)
        out.append(pc.if_else(pc.equal(pc.binary_length(filled), 0), pa.scalar(EMPTY_PLACEHOLDER), filled))
    return out


def _null_or_empty_mask(col) -> pa.Array | pa.ChunkedArray:
    return pc.fill_null(pc.or_(pc.is_null(col), pc.equal(pc.binary_length(col), 0)), True)


def null_or_empty(col: pa.ChunkedArray | pa.Array) -> int:
    """How many values are null or empty (two cheap passes when there are none, the usual case)."""
    if col.null_count == 0 and (len(col) == 0 or (pc.min(pc.binary_length(col)).as_py() or 0) > 0):
        return 0
    bad = pc.or_(pc.is_null(col), pc.equal(pc.binary_length(col), 0))
    return pc.sum(pc.cast(pc.fill_null(bad, True), pa.int64())).as_py() or 0


def one_array(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    """``col`` as one array; a single chunk is used as it is (its buffers shared, not copied),
    so a key or partition path that is a column's own value can be recognized as such."""
    if not isinstance(col, pa.ChunkedArray):
        return col
    return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()


def key_string(col: pa.ChunkedArray | pa.Array, *, java: bool = True) -> pa.ChunkedArray | pa.Array:
    """A key column's values as Hudi's JVM key generators print them (:mod:`.key_strings`), or
    (``java=False``: a table created before we did) as Arrow casts them. A dictionary column (a
    file's column read as stored) gives the keys of its values."""
    if pa.types.is_dictionary(col.type):
        col = pc.cast(col, col.type.value_type)
    printed = java_key_strings(col) if java and not pa.types.is_string(col.type) else None
    return printed if printed is not None else as_string(col)


def as_string(col: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    t = col.type
    if pa.types.is_string(t):
        return col
    if pa.types.is_large_string(t):
        return pc.cast(col, pa.string())
    if pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_integer(t) or pa.types.is_boolean(t) or pa.types.is_decimal(t) or pa.types.is_floating(t):
        return pc.cast(col, pa.string())
    raise SchemaMismatchError(f"column of type {t} cannot be a record key or partition field")


