"""A METADATA_ONLY bootstrap's skeleton base files: one per source file, Hudi's meta columns only.

Hudi writes them with a create handle whose schema is the five meta fields, nullable strings
(``HoodieBootstrapHandle.METADATA_BOOTSTRAP_RECORD_SCHEMA``), fed with one record per source row
in the source file's order and never rolled over to a second file (``canWrite`` is always
true), so row i of the skeleton is row i of the source (``BaseBootstrapMetadataHandler``,
``ParquetBootstrapMetadataHandler``). Each skeleton is a new file group, named like any base file
(``<fileId>_<writeToken>_00000000000001.parquet``), with the create handle's footer: the key
range and the bloom filter of its keys. Its commit time is ``METADATA_BOOTSTRAP_INSTANT_TS``, its
sequence numbers ``<instant>_<task>_<row>``, its partition path the source folder's
(``IdentityBootstrapPartitionPathTranslator``).

Written as every data file is: the instant checked alive, a marker first, then a staged file
published only while the instant is alive (:mod:`.guard`, through :mod:`.merge`). The source
is only read: its key columns (and its partition columns, which must name the file's folder).
"""
from __future__ import annotations

import logging
import posixpath
import time
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .. import markers
from ..errors import BootstrapSourceError, MultiWriterError
from ..format import bootstrap_index as bi
from ..format import layout
from ..format.schema import META_COLUMNS
from ..redact import redact
from ..storage import Storage
from ..table.bootstrap_index_files import source_uri
from ..table.metadata import WriteStat
from ..table.properties import TableConfig
from ..table.record_keys import record_keys
from . import bloom
from .bootstrap_source import Source, SourceFile
from .merge import MergeContext, _write_parquet, check_alive, ensure_partition_metadata, sequence_numbers, write_checked
from .records import partition_paths

log = logging.getLogger(__name__)

#: the skeleton's columns: the five meta fields, nullable strings
SKELETON_SCHEMA = pa.schema([pa.field(c, pa.string()) for c in META_COLUMNS])


@dataclass(frozen=True)
class Job:
    """One source file and the file group its skeleton starts."""

    file: SourceFile
    partition: str  # the table's partition path: the source folder's
    file_id: str
    task: int  # the write token's task number and the sequence numbers' middle part


@dataclass(frozen=True)
class Skeleton:
    """A written skeleton: its write stat and the index entry naming its source file."""

    stat: WriteStat
    mapping: bi.SourceFileMapping


@dataclass(frozen=True)
class Keys:
    """The record keys of one source file, in its row order."""

    job: Job
    keys: pa.Array


def read_keys(src: Source, source: Storage, config: TableConfig, job: Job) -> Keys:
    """The file's record keys; BootstrapSourceError naming the file when a key is missing or a
    row's partition columns name another folder than the file's."""
    f = job.file
    wanted = {*config.record_key, *config.partition_by}
    names = [n for n in pq.read_schema(source.abs(f.path), filesystem=source.fs).names if n in wanted]
    t = pq.read_table(source.abs(f.path), columns=names, filesystem=source.fs)
    for name in src.added:  # a partition column the files lack: its folder's value, as the full bootstrap takes it
        if name in wanted:
            value = f.values[src.partition_by.index(name)]
            t = t.append_column(pa.field(name, pa.string()), pa.array([value] * t.num_rows, pa.string()))
    try:
        keys = record_keys(t, config)
        parts = partition_paths(t, config) if config.partition_by and t.num_rows else None
    except MultiWriterError as e:
        raise BootstrapSourceError(f"bootstrap source {redact(src.root)}: {f.path}: {e}", path=f.path) from e
    if parts is not None:
        odd = pc.unique(pc.filter(parts, pc.not_equal(parts, job.partition))).to_pylist()
        if odd:
            raise BootstrapSourceError(
                f"bootstrap source {redact(src.root)}: {f.path} lies in folder {job.partition!r} but holds rows of "
                f"partition {odd[0]!r}: a METADATA_ONLY bootstrap keeps each file where it is, so its rows must "
                "belong to its folder; move the rows, or bootstrap it FULL_RECORD", path=f.path)
    return Keys(job, keys)


def check_unique(src: Source, partition: str, files: list[Keys]) -> None:
    """Keys are unique within a partition (Hudi's keys, and what our merges assume): a source
    repeating one is refused, naming the key; a full-record bootstrap keeps one row per key."""
    keys = pa.chunked_array([k.keys for k in files], pa.string()) if files else pa.chunked_array([], pa.string())
    n_distinct = pc.count_distinct(keys).as_py()
    if n_distinct == len(keys):
        return
    counts = pc.value_counts(keys)
    dup = pc.filter(counts, pc.greater(counts.field("counts"), 1))[0]["values"].as_py()
    raise BootstrapSourceError(
        f"bootstrap source {redact(src.root)}: record key {dup!r} appears more than once in partition {partition!r} "
        "(its skeleton rows would stand for several records of one key); remove the repeats, or bootstrap it "
        "FULL_RECORD, which keeps one row per key", path=partition)


def write(storage: Storage, source: Storage, ctx: MergeContext, k: Keys) -> Skeleton:
    """Write the skeleton of one source file (marker, staged file, publish) and say what it is."""
    started = time.monotonic()
    job, t = k.job, ctx.instant_time
    name = layout.DataFileName(job.file_id, layout.write_token(job.task), t).name
    rel = layout.data_file_path(job.partition, name)
    check_alive(storage, ctx, f"the marker of {rel}")
    markers.create(storage, t, job.partition, name)
    ensure_partition_metadata(storage, job.partition, t, ctx.partition_depth)
    n = len(k.keys)
    rows = pa.Table.from_arrays([pa.nulls(n, pa.string()), sequence_numbers(f"{t}_{job.task}", n), k.keys,
                                 pa.nulls(n, pa.string()), pa.nulls(n, pa.string())], schema=SKELETON_SCHEMA)
    keys_filter = bloom.DynamicBloomFilter.for_keys(n)
    if n:
        keys_filter.add(k.keys)
    constants = {META_COLUMNS[0]: t, META_COLUMNS[3]: job.partition, META_COLUMNS[4]: name}
    size, _ = write_checked(storage, ctx, rel, lambda path: _write_parquet(storage, path, rows, keys_filter,
                                                                         constants=constants))
    info = source.info(job.file.path)
    if info is None:
        raise BootstrapSourceError(f"bootstrap source {redact(source.uri)}: {job.file.path} vanished while it was "
                                   "bootstrapped", path=job.file.path)
    status = bi.FileStatus(source_uri(source, job.file.path), info.size, int(info.mtime_s * 1000))
    mapping = bi.SourceFileMapping(job.partition, job.file_id, posixpath.dirname(job.file.path), status)
    stat = WriteStat(file_id=job.file_id, path=rel, partition_path=job.partition, num_writes=n, num_inserts=n,
                     total_write_bytes=size, file_size=size, create_time_ms=int((time.monotonic() - started) * 1000))
    return Skeleton(stat, mapping)
