"""Prepare a batch for writing: validate it against the table, compute each record's key and
partition path, and keep one row per key (greatest ordering value, then the last).

Pure pyarrow; used on the driver and inside Spark executors alike, so both paths agree.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InvalidRecordError, SchemaMismatchError
from ..format import layout
from ..table.delete_markers import DeleteMarkers
from ..table.merge_rule import ordering_scores
from ..table.properties import TableConfig
from ..table.record_keys import as_string as _as_string
from ..table.record_keys import one_array as _one_array
from ..table.record_keys import record_keys
from ..format.schema import META_COLUMNS, cast_column, data_schema
from . import bloom

KEY = "_mw_key"
PARTITION = "_mw_partition"
OP = "_mw_op"  # 0 = upsert/insert, 1 = delete
ROW = "_mw_row"
SCORE = "_mw_ordering"  # several ordering fields' values as one comparable integer (dedupe only)
OP_UPSERT = 0
OP_DELETE = 1


def partition_paths(batch: pa.Table, config: TableConfig) -> pa.Array:
    """Each record's partition path, validated so no file can land outside the table root.

    Vectorized: only the distinct values of each partition column are validated in Python.
    """
    if not config.partition_by:
        return pa.array([""] * batch.num_rows, pa.string())
    segments = []
    for f in config.partition_by:
        if batch.schema.get_field_index(f) < 0:
            raise SchemaMismatchError(f"partition column {f!r} is missing from the batch")
        col = _one_array(_as_string(batch.column(f)))
        values = pc.unique(col).to_pylist()
        for v in values:
            if v:
                layout.validate_partition_value(f, v)
        if "" in values or None in values:  # null and empty values go to Hudi's default partition
            col = pc.fill_null(pc.if_else(pc.equal(col, ""), layout.DEFAULT_PARTITION, col), layout.DEFAULT_PARTITION)
        if config.hive_style_partitioning:
            col = pc.binary_join_element_wise(pa.scalar(f), col, "=")
        segments.append(col)
    out = segments[0] if len(segments) == 1 else pc.binary_join_element_wise(*segments, "/")
    return pc.cast(out, pa.string())


def prepare(batch: pa.Table, config: TableConfig, table_schema: pa.Schema, *, operation: str, hashes: bool = False,
            on_keys: Callable[[pa.Array], None] | None = None, keys: pa.Array | None = None) -> pa.Table:
    """Validated, cast, de-duplicated batch with ``_mw_key``, ``_mw_partition``, ``_mw_op`` columns
    (and, with ``hashes``, the keys' bloom hashes: computed once, they also tell in one sort
    that no key repeats).

    ``table_schema`` is the (possibly evolved) data schema. Table columns the batch omits are
    written as null (full-record upsert, as Hudi's default payload does): the writer has
    already checked which columns may be omitted; delete batches may carry only the key and
    partition columns. ``on_keys`` hears the record keys of every row of ``batch``, in its order,
    as soon as they are known (a caller starts hashing them while the rest is validated).
    ``keys``: :func:`record_keys` of ``batch``, when the caller computed them already.
    """
    batch = batch.select([n for n in batch.schema.names if n not in META_COLUMNS and not n.startswith("_mw_")])
    keys = record_keys(batch, config) if keys is None else keys
    if on_keys is not None:
        on_keys(keys)
    parts = partition_paths(batch, config)
    ordering = config.ordering_fields if operation != "delete" else ()
    missing = [f for f in ordering if batch.schema.get_field_index(f) < 0]
    if missing:
        raise SchemaMismatchError(f"ordering field {missing[0]!r} is missing from the batch")
    data = _null_fill(batch, table_schema)
    data = data.append_column(KEY, keys).append_column(PARTITION, parts)
    data = data.append_column(OP, operations(batch, config, operation))
    if hashes:
        data = bloom.with_hashes(data, KEY)
    return dedupe(data, ordering)


def operations(batch: pa.Table, config: TableConfig, operation: str) -> pa.Array:
    """Each row's ``_mw_op``: a delete batch deletes every key; any other batch deletes the keys
    of its rows that carry one of the table's delete markers (:mod:`~..table.delete_markers`),
    as Hudi's writers do, and upserts the rest."""
    if operation == "delete":
        return pa.repeat(pa.scalar(OP_DELETE, pa.int8()), batch.num_rows)
    flagged = DeleteMarkers.of(config).deleted(batch)
    if flagged is None or flagged.true_count == 0:
        return pa.repeat(pa.scalar(OP_UPSERT, pa.int8()), batch.num_rows)
    return pc.if_else(flagged, pa.scalar(OP_DELETE, pa.int8()), pa.scalar(OP_UPSERT, pa.int8()))


def _null_fill(batch: pa.Table, schema: pa.Schema) -> pa.Table:
    """The batch in ``schema``'s column order and types; columns it lacks are all null. A value
    that does not fit its column's type, or a null in a non-nullable column, is an
    :class:`InvalidRecordError` naming the column (nothing is written)."""
    cols = []
    for f in data_schema(schema):
        if batch.schema.get_field_index(f.name) >= 0:
            cols.append(_cast(batch.column(f.name), f))
        else:
            cols.append(pa.nulls(batch.num_rows, f.type))
        if not f.nullable and cols[-1].null_count:
            raise InvalidRecordError(
                f"{cols[-1].null_count} record(s) have a null in non-nullable column {f.name!r} (nothing was written)")
    return pa.Table.from_arrays(cols, schema=data_schema(schema))


def _cast(col: pa.ChunkedArray, f: pa.Field) -> pa.ChunkedArray:
    try:
        return cast_column(col, f.type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        raise InvalidRecordError(
            f"column {f.name!r}: a value of the batch's {col.type} does not fit the table's {f.type} ({e}); "
            "nothing was written: send values in range, or widen the column (send it with the wider type)"
        ) from e


def dedupe(data: pa.Table, ordering: str | Sequence[str] | None) -> pa.Table:
    """One row per (partition, key): greatest ordering value wins, ties go to the later row.
    ``ordering``: the ordering field, or several, compared field by field as the merge rule
    compares them (Hudi's ``ArrayComparable``, :func:`~multiwriter.table.merge_rule.ordering_scores`).

    Batches rarely repeat a key, and one hash pass tells: only then is the batch sorted."""
    if data.num_rows <= 1 or not has_duplicates(data):
        return data
    fields = (ordering,) if isinstance(ordering, str) else tuple(ordering or ())
    data = data.append_column(ROW, pa.array(range(data.num_rows), pa.int64()))
    sort = [(PARTITION, "ascending"), (KEY, "ascending")]
    if len(fields) == 1:
        sort.append((fields[0], "descending"))
    elif fields:
        data = data.append_column(SCORE, pa.array(ordering_scores([data.column(f) for f in fields])))
        sort.append((SCORE, "descending"))
    sort.append((ROW, "descending"))
    idx = pc.sort_indices(data, sort_keys=sort)  # nulls sort last: a null ordering value loses
    data = data.take(idx)
    k = data.column(KEY).combine_chunks()
    p = data.column(PARTITION).combine_chunks()
    if len(k) > 1:
        same = pc.and_(pc.equal(k[1:], k[:-1]), pc.equal(p[1:], p[:-1]))
        keep = pa.concat_arrays([pa.array([True]), pc.invert(same)])
        data = data.filter(keep)
    return data.drop_columns([c for c in (ROW, SCORE) if c in data.column_names])


def has_duplicates(data: pa.Table) -> bool:
    """Whether some (partition, key) occurs twice (a key unique in the batch is unique per
    partition, so the partition is only consulted when keys repeat). Each key gets a 64-bit
    value, equal for equal keys: when no value repeats (a sort of integers) no key does;
    otherwise the keys themselves are compared. The value is two of the keys' bloom hashes when
    the batch has them, else :func:`_fingerprints`."""
    if data.num_rows <= 1:
        return False
    if _strictly_increasing(data.column(KEY)):
        return False
    h = bloom.hashes_of(data)
    if h is not None:
        values = (h[:, 0].astype(np.uint64) << np.uint64(32)) | h[:, 1]
    else:
        values = _fingerprints(data.column(KEY))
    values = np.sort(values)
    if not (values[1:] == values[:-1]).any():
        return False
    keys = data.column(KEY).combine_chunks()
    if len(keys.dictionary_encode().dictionary) == data.num_rows:  # faster than count_distinct
        return False
    pairs = data.select([PARTITION, KEY]).group_by([PARTITION, KEY]).aggregate([])
    return pairs.num_rows != data.num_rows


#: leading keys compared before all of them: a batch whose keys are not in order is told at once
_ORDER_SAMPLE = 256


def _strictly_increasing(keys: pa.ChunkedArray | pa.Array) -> bool:
    """Whether every key sorts after the one before (then none repeats): the keys of an ordered
    stream (auto-increment or time-ordered ids) are told unique in one comparison pass instead of
    a hash and a sort. A batch out of order costs a comparison of its first keys."""
    arr = _one_array(keys)
    if arr.null_count:
        return False
    for n in (min(len(arr), _ORDER_SAMPLE), len(arr)):
        if not pc.all(pc.less(arr.slice(0, n - 1), arr.slice(1, n - 1))).as_py():
            return False
    return True


_FOLD = np.uint64(0x9E3779B97F4A7C15)


def _fingerprints(keys: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A 64-bit value per key, equal for equal keys, without hashing every byte: keys of one
    byte length (formatted ids, UUIDs: the usual case) are read as little-endian 8-byte words,
    folded by multiply-xor (up to 8 bytes the word is the key itself). Keys of mixed lengths
    take the first two of their chained murmur hashes."""
    arr = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
    data = None if arr.null_count else bloom.equal_length_bytes(arr)
    if data is None or data.shape[1] == 0:
        h = bloom.key_hashes(arr, 2)
        return (h[:, 0].astype(np.uint64) << np.uint64(32)) | h[:, 1]
    n, width = data.shape
    padded = np.zeros((n, -(-width // 8) * 8), dtype=np.uint8)
    padded[:, :width] = data
    words = padded.view("<u8")
    out = words[:, 0].copy()
    with np.errstate(over="ignore"):
        for j in range(1, words.shape[1]):
            out *= _FOLD
            out ^= words[:, j]
    return out
