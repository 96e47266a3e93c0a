"""Bounded decoding: what a table file may make a reader allocate, judged before it is decoded.

Anyone who can write inside a table's folder can plant a file whose headers declare far more
than it holds: a gzip block that inflates a thousandfold, an Avro count of 2^40, a Parquet row
group of billions of run-length-encoded nulls. Each reader checks the sizes a file declares
against the file's own size and a budget *before* allocating, from metadata it reads anyway (a
Parquet footer, an HFile block header): a file over budget is a :class:`TableFormatError`
naming it, never a ``MemoryError`` or an exhausted machine.

The budgets (environment variables, read at each check, so executors inherit them):

- ``MULTIWRITER_MAX_ROW_GROUP_BYTES`` (2 GiB): the most one Parquet row group may decode to,
  estimated from its footer (per column chunk, the larger of its uncompressed size and its value
  count times the value width);
- ``MULTIWRITER_MAX_EXPANSION`` (1000): a file may decode to at most this many times its size on
  disk, and at least ``MULTIWRITER_MIN_FILE_BUDGET`` (1 GiB) whatever its size: memory in
  proportion to size, as for the timeline's Avro files;
- ``MULTIWRITER_MAX_HFILE_BLOCK_BYTES`` (512 MiB): the most one HFile block may inflate to.
"""
from __future__ import annotations

import os
from collections.abc import Collection
from typing import Any

from ..errors import TableFormatError

ROW_GROUP_ENV = "MULTIWRITER_MAX_ROW_GROUP_BYTES"
EXPANSION_ENV = "MULTIWRITER_MAX_EXPANSION"
MIN_FILE_ENV = "MULTIWRITER_MIN_FILE_BUDGET"
HFILE_BLOCK_ENV = "MULTIWRITER_MAX_HFILE_BLOCK_BYTES"

DEFAULT_ROW_GROUP_BYTES = 2 << 30
DEFAULT_EXPANSION = 1000
DEFAULT_MIN_FILE_BUDGET = 1 << 30
DEFAULT_HFILE_BLOCK_BYTES = 512 << 20
#: deflate (gzip, zlib) cannot inflate past about 1032 bytes per input byte
DEFLATE_MAX_RATIO = 1032


def _env(name: str, default: int) -> int:
    text = os.environ.get(name)
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        return default
    return value if value > 0 else default


def max_row_group_bytes() -> int:
    return _env(ROW_GROUP_ENV, DEFAULT_ROW_GROUP_BYTES)


def max_hfile_block_bytes() -> int:
    return _env(HFILE_BLOCK_ENV, DEFAULT_HFILE_BLOCK_BYTES)


def file_budget(size: int) -> int:
    """The most a file of ``size`` bytes on disk may decode to."""
    return max(_env(MIN_FILE_ENV, DEFAULT_MIN_FILE_BUDGET), _env(EXPANSION_ENV, DEFAULT_EXPANSION) * max(size, 0))


def deflate_bound(compressed: int) -> int:
    """The most ``compressed`` bytes of deflate data can inflate to (header slack included)."""
    return DEFLATE_MAX_RATIO * compressed + 1024


# -- Parquet -----------------------------------------------------------------------------------

#: bytes per decoded value by physical type (a variable-length value: its offset and a little)
_WIDTH = {"BOOLEAN": 1, "INT32": 4, "INT64": 8, "INT96": 12, "FLOAT": 4, "DOUBLE": 8, "BYTE_ARRAY": 8}


def check_parquet(meta: Any, source: str, *, size: int | None = None, columns: Collection[str] | None = None) -> None:
    """Refuse a Parquet file whose footer ``meta`` (``pyarrow.parquet.FileMetaData``) declares
    more than the budgets allow (:mod:`.bounds`): per row group, the columns to be read
    (``columns``: top-level names, all by default); the whole file against ``size`` (its bytes
    on disk; the column chunks' compressed sizes plus the footer when not given)."""
    wanted = None if columns is None else set(columns)
    per_group = max_row_group_bytes()
    schema = meta.schema
    widths: list[int] | None = None
    total = on_disk = 0
    for g in range(meta.num_row_groups):
        rg = meta.row_group(g)
        group = 0
        for c in range(rg.num_columns):
            col = rg.column(c)
            on_disk += max(col.total_compressed_size, 0)
            if wanted is not None and col.path_in_schema.split(".", 1)[0] not in wanted:
                continue
            if widths is None:
                widths = [_width(schema.column(i)) for i in range(len(schema))]
            n = max(col.num_values, 0)
            group += max(col.total_uncompressed_size, n * widths[c]) + n // 8
        if group > per_group:
            raise TableFormatError(
                f"{source}: Parquet row group {g} ({rg.num_rows} rows) would decode to about {group} bytes, "
                f"over the {per_group} a row group may take ({ROW_GROUP_ENV}); refusing a decompression bomb")
        total += group
    if size is None:
        size = on_disk + meta.serialized_size
    budget = file_budget(size)
    if total > budget:
        raise TableFormatError(
            f"{source}: Parquet file of {size} bytes would decode to about {total} bytes, over its budget of "
            f"{budget} ({EXPANSION_ENV} times its size, at least {MIN_FILE_ENV}); refusing a decompression bomb")


def _width(column: Any) -> int:
    if column.physical_type == "FIXED_LEN_BYTE_ARRAY":
        return max(int(column.length or 0), 1)
    return _WIDTH.get(column.physical_type, 8)


def open_parquet(f: Any, source: str, *, columns: Collection[str] | None = None, **kwargs: Any) -> Any:
    """``pyarrow.parquet.ParquetFile`` of the open file ``f``, its footer checked
    (:func:`check_parquet`) for ``columns``; ``kwargs`` go to ``ParquetFile``."""
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(f, **kwargs)
    check_parquet(pf.metadata, source, size=_size_of(f), columns=columns)
    return pf


def read_parquet(f: Any, source: str, *, columns: list[str] | None = None, use_threads: bool = True,
                 **kwargs: Any) -> Any:
    """The rows (``columns``, all by default) of the Parquet file open as ``f``, its footer checked
    first and read row group by row group; running out of memory anyway is a
    :class:`TableFormatError` naming the file."""
    import pyarrow as pa

    pf = open_parquet(f, source, columns=columns, **kwargs)
    try:
        if pf.metadata.num_row_groups <= 1:
            return pf.read(columns=columns, use_threads=use_threads)
        return pa.concat_tables([pf.read_row_group(i, columns=columns, use_threads=use_threads)
                                 for i in range(pf.metadata.num_row_groups)])
    except (MemoryError, pa.ArrowMemoryError) as e:
        raise out_of_memory(source, e) from e


def out_of_memory(source: str, e: BaseException) -> TableFormatError:
    """The typed error of a file whose decoding ran out of memory within its budget."""
    return TableFormatError(f"{source}: decoding it ran out of memory ({type(e).__name__}: {e}); "
                            "a file this large needs more memory or a smaller budget (see multiwriter.format.bounds)")


def _size_of(f: Any) -> int | None:
    try:
        return int(f.size())
    except (AttributeError, OSError, TypeError, ValueError):
        try:
            return int(f.getbuffer().nbytes)
        except (AttributeError, TypeError, ValueError):
            return None
