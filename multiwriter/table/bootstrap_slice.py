"""Reading a skeleton base file: its rows stitched with its source file's, by position.

A METADATA_ONLY bootstrap writes, per source file, a skeleton base file holding only Hudi's
meta columns, one row per source row in the source's order. Hudi's readers put the two side by
side (``HoodieBootstrapRelation``; the file group reader's bootstrap base file,
``HoodieFileGroupReader.makeBootstrapBaseFileIterator``): row i of the skeleton and row i of the
source are one record; a partition column the source files lack is taken from the partition
path. Every reader of base files here (snapshot and incremental reads, Merge-on-Read merges,
compaction, clustering, a copy-on-write merge's old rows, the Spark scan) comes through
:func:`read_file`, so they see the same rows. The source file is only read.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Collection

import pyarrow as pa

from ..errors import TableFormatError
from ..format import bounds
from ..format.instant import METADATA_BOOTSTRAP_TIME
from ..format.layout import parse_data_file
from ..format.schema import META_COLUMNS, cast_column
from ..redact import redact
from ..storage import Storage
from . import bootstrap_index_files as index
from .files import FileSlice
from .properties import TableConfig


def is_skeleton(fs: FileSlice) -> bool:
    """Whether the slice's base file is a skeleton: written at ``METADATA_BOOTSTRAP_INSTANT_TS``,
    Hudi's test (``AbstractTableFileSystemView.addBootstrapBaseFileIfPresent``)."""
    return fs.has_base and fs.instant_time == METADATA_BOOTSTRAP_TIME


def is_skeleton_file(rel: str) -> bool:
    """:func:`is_skeleton` of a base file given by its path."""
    parsed = parse_data_file(rel.rsplit("/", 1)[-1])
    return parsed is not None and parsed.instant_time == METADATA_BOOTSTRAP_TIME


def source_path(storage: Storage, rel: str) -> str:
    """The full path of the source file of the skeleton base file ``rel``, as Hudi's plans name
    it (a compaction operation's or a clustering slice's ``bootstrapFilePath``); "" for any
    other base file."""
    partition, _, name = rel.rpartition("/")
    parsed = parse_data_file(name)
    if parsed is None or parsed.instant_time != METADATA_BOOTSTRAP_TIME:
        return ""
    src = index.source_of(storage, partition, parsed.file_id)
    return index.source_uri(src.root, src.rel)


def weighed(storage: Storage, fs: FileSlice) -> FileSlice:
    """The slice with the bytes of its skeleton's source file counted in its size: what a table
    service reads and writes for it (a skeleton alone is a few kilobytes whatever it stands for)."""
    if not is_skeleton(fs):
        return fs
    return dataclasses.replace(fs, size=fs.size + index.source_of(storage, fs.partition, fs.file_id).length)


def read_rows(storage: Storage, fs: FileSlice, schema: pa.Schema, threads: bool = True) -> pa.Table:
    """A skeleton slice's base rows in ``schema`` (its columns only, in its order; a column
    neither file holds reads as null)."""
    t, _ = read_file(storage, fs.path, schema.names, threads=threads)
    return _aligned(t, schema)


def read_file(storage: Storage, rel: str, columns: Collection[str] | None = None, *,
              threads: bool = True) -> tuple[pa.Table, dict[bytes, bytes]]:
    """The stitched rows of the skeleton base file ``rel`` (``columns`` of them, all by
    default: its meta columns, then the source's columns, then the partition columns the source
    lacks) and the skeleton's footer metadata (its key range and bloom filter, which are the
    file group's). TableFormatError when the two files disagree on their number of rows: the
    source changed after the bootstrap."""
    partition, _, name = rel.rpartition("/")
    parsed = parse_data_file(name)
    if parsed is None or parsed.instant_time != METADATA_BOOTSTRAP_TIME:
        raise TableFormatError(f"{rel} is not a skeleton base file (instant {METADATA_BOOTSTRAP_TIME})")
    want = None if columns is None else set(columns)
    src = index.source_of(storage, partition, parsed.file_id)
    meta_cols = [c for c in META_COLUMNS if want is None or c in want]
    skeleton, footer = _read(storage, rel, meta_cols, threads)
    source_storage = src.root
    data, n = _read_source(source_storage, src.rel, want, threads)
    if n != skeleton.num_rows:
        raise TableFormatError(
            f"skeleton base file {rel} has {skeleton.num_rows} rows but its source file "
            f"{redact(source_storage.uri_of(src.rel))} has {n}: the source was changed after the "
            "bootstrap (a bootstrap's source must stay as it was); restore it, or bootstrap it into a new table")
    columns_ = [*skeleton.columns, *data.columns]
    names = [*skeleton.column_names, *data.column_names]
    for name_, col in _partition_columns(names, n, partition, index.config_of(storage), want):
        names.append(name_)
        columns_.append(col)
    return pa.Table.from_arrays(columns_, names=names), footer


def _read(storage: Storage, rel: str, columns: list[str], threads: bool) -> tuple[pa.Table, dict[bytes, bytes]]:
    with storage.fs.open_input_file(storage.abs(rel)) as f:
        pf = bounds.open_parquet(f, rel, columns=columns)
        footer = dict(pf.metadata.metadata or {})
        return pf.read(columns=columns, use_threads=threads), footer


def _read_source(source: Storage, rel: str, want: set[str] | None, threads: bool) -> tuple[pa.Table, int]:
    """The source file's wanted columns (meta columns, should it have any, are the skeleton's)
    and its number of rows."""
    where = redact(source.uri_of(rel))
    try:
        with source.fs.open_input_file(source.abs(rel)) as f:
            pf = bounds.open_parquet(f, where)
            names = [n for n in pf.schema_arrow.names if (want is None or n in want) and n not in META_COLUMNS]
            return pf.read(columns=names, use_threads=threads), pf.metadata.num_rows
    except FileNotFoundError:
        raise TableFormatError(f"the source file {where} of a skeleton base file is gone: a bootstrap's source "
                               "must stay where it was; restore it") from None


def _partition_columns(have: list[str], n: int, partition: str, config: TableConfig,
                       want: set[str] | None) -> list[tuple[str, pa.Array]]:
    """The partition columns the source files lack, from the partition path's folders (one per
    column, ``col=value`` when hive style), as strings: what the bootstrap took for them."""
    missing = [c for c in config.partition_by if c not in have and (want is None or c in want)]
    if not missing:
        return []
    folders = partition.split("/") if partition else []
    if len(folders) != len(config.partition_by):
        raise TableFormatError(f"partition {partition!r} has {len(folders)} folder(s), the table is partitioned by "
                               f"{list(config.partition_by)}")
    out = []
    for c in missing:
        folder = folders[config.partition_by.index(c)]
        value = folder.partition("=")[2] if config.hive_style_partitioning else folder
        out.append((c, pa.array([value] * n, pa.string())))
    return out


def _aligned(t: pa.Table, schema: pa.Schema) -> pa.Table:
    cols = []
    for f in schema:
        i = t.schema.get_field_index(f.name)
        cols.append(cast_column(t.column(i), f.type) if i >= 0 else pa.nulls(t.num_rows, f.type))
    return pa.Table.from_arrays(cols, schema=schema)

