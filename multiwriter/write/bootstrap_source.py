"""The source of a bootstrap: a Parquet dataset, listed and checked before anything is written.

Hudi lists a bootstrap source as leaf folders holding data files
(``BootstrapUtils.getAllLeafFoldersWithFiles``) and keeps each folder's path as the table's
partition path (``IdentityBootstrapPartitionPathTranslator``). Here a folder is one partition:
``date=2024-01-01/`` (hive style) or ``2024-01-01/`` (plain), one level per partition column.
A partition column the files lack is taken from the folder name, as a string. The source is only
ever read: on the driver (:meth:`Source.read`) or by Spark on executors (:func:`spark_frame`,
which drives a session handed in and imports no Spark module).
"""
from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import BootstrapSourceError
from ..redact import redact
from ..storage import Storage


@dataclass(frozen=True)
class SourceFile:
    """One Parquet file of the source and the partition values its folder names."""

    path: str  # relative to the source root
    values: tuple[str, ...]  # one per partition column, from the folder names


@dataclass(frozen=True)
class Source:
    """A checked source: its files, the folder style, and the schema rows get once the
    partition columns the files lack are added."""

    root: str
    files: tuple[SourceFile, ...]
    hive_style: bool
    schema: pa.Schema
    added: tuple[str, ...]  # partition columns taken from folder names
    partition_by: tuple[str, ...]

    def read(self, storage: Storage, f: SourceFile) -> pa.Table:
        """The rows of one file, with the partition columns from its folder added."""
        t = pq.read_table(storage.abs(f.path), filesystem=storage.fs)
        for name in self.added:
            value = f.values[self.partition_by.index(name)]
            t = t.append_column(pa.field(name, pa.string()), pa.array([value] * t.num_rows, pa.string()))
        return t.select(self.schema.names).cast(self.schema)


def scan(storage: Storage, partition_by: tuple[str, ...], required: tuple[str, ...], hive_style: bool | None) -> Source:
    """List and check the source: every data file's folder matches the partition columns in one
    style, every file has the same schema, and ``required`` columns (keys, ordering field) exist."""
    where = redact(storage.uri)
    if not storage.is_dir(""):
        raise BootstrapSourceError(f"bootstrap source {where} does not exist or is not a folder", path=storage.uri)
    names = sorted(e.path for e in storage.walk_files("") if _is_data_file(e.path))
    if not names:
        raise BootstrapSourceError(f"bootstrap source {where} holds no Parquet files", path=storage.uri)
    parsed = [_partition_of(rel, partition_by, where) for rel in names]
    styles = {hive for _, hive in parsed if hive is not None}
    if len(styles) > 1:
        raise BootstrapSourceError(f"bootstrap source {where} mixes hive-style (col=value) and plain partition "
                                   "folders: give one layout", path=storage.uri)
    detected = styles.pop() if styles else False
    if hive_style is not None and partition_by and hive_style != detected:
        raise BootstrapSourceError(
            f"bootstrap source {where}: hive_style={hive_style} but its folders are "
            f"{'hive-style (col=value)' if detected else 'plain values'}; give hive_style={detected} or leave it out",
            path=storage.uri)
    files = tuple(SourceFile(rel, values) for rel, (values, _) in zip(names, parsed, strict=True))
    schema, added = _common_schema(storage, files, partition_by, where)
    missing = [c for c in required if c not in schema.names]
    if missing:
        raise BootstrapSourceError(f"bootstrap source {where}: column {missing[0]!r} (a record key or ordering field) "
                                   f"is in none of its files (columns: {schema.names})", path=storage.uri)
    return Source(storage.uri, files, detected, schema, added, partition_by)


def _is_data_file(rel: str) -> bool:
    """Parquet files, not hidden ones nor Spark's markers (``_SUCCESS``, ``.crc``)."""
    parts = rel.split("/")
    return rel.endswith(".parquet") and not any(p.startswith((".", "_")) for p in parts)


def _partition_of(rel: str, partition_by: tuple[str, ...], where: str) -> tuple[tuple[str, ...], bool | None]:
    """The partition values a file's folders name, and whether they are hive style (None: no
    partition columns)."""
    folders = [p for p in posixpath.dirname(rel).split("/") if p]
    if len(folders) != len(partition_by):
        raise BootstrapSourceError(
            f"bootstrap source {where}: {rel} lies {len(folders)} folder(s) deep, but the table is partitioned by "
            f"{list(partition_by)}: one folder level per partition column", path=rel)
    if not partition_by:
        return (), None
    hive = [f.partition("=")[0] == col and "=" in f for f, col in zip(folders, partition_by, strict=True)]
    if any(hive) and not all(hive):
        raise BootstrapSourceError(f"bootstrap source {where}: {rel} mixes hive-style and plain folders", path=rel)
    values = tuple(f.partition("=")[2] if all(hive) else f for f in folders)
    if any(not v for v in values):
        raise BootstrapSourceError(f"bootstrap source {where}: {rel} has an empty partition folder value", path=rel)
    return values, all(hive)


def _common_schema(storage: Storage, files: tuple[SourceFile, ...], partition_by: tuple[str, ...],
                   where: str) -> tuple[pa.Schema, tuple[str, ...]]:
    """The one schema of every file (footers only), plus the partition columns they lack."""
    first: pa.Schema | None = None
    for f in files:
        schema = pq.read_schema(storage.abs(f.path), filesystem=storage.fs).remove_metadata()
        if first is None:
            first, first_path = schema, f.path
        elif not schema.equals(first):
            raise BootstrapSourceError(
                f"bootstrap source {where}: {f.path} has another schema than {first_path} ({_diff(first, schema)}); "
                "a bootstrap takes files of one schema: rewrite the odd files, or bootstrap them separately", path=f.path)
    assert first is not None
    added = tuple(c for c in partition_by if c not in first.names)
    for name in added:
        first = first.append(pa.field(name, pa.string()))
    return first, added


def _diff(a: pa.Schema, b: pa.Schema) -> str:
    only_a = [n for n in a.names if n not in b.names]
    only_b = [n for n in b.names if n not in a.names]
    retyped = [n for n in a.names if n in b.names and a.field(n).type != b.field(n).type]
    return f"only in the first: {only_a}, only in this one: {only_b}, retyped: {retyped}"


# -- the source on Spark ------------------------------------------------------------------------
def spark_frame(src: Source, storage: Storage, spark: Any) -> Any:
    """The source's rows as a Spark DataFrame read on executors from exactly the listed files
    (Spark plans the input splits), the partition columns the files lack added as strings from
    each row's file name (``input_file_name()``, decoded), so no row reaches the driver and
    Spark still sizes the batch from the files. The columns are ``src.schema``'s, in its order."""
    df = spark.read.parquet(*(storage.uri_of(f.path) for f in src.files))
    _check_spark_columns(df, src)
    _check_spark_files(df.inputFiles(), src)
    if src.added:
        df = df.selectExpr("*", *(f"{_folder_value(src, c)} AS {_quote(c)}" for c in src.added))
    return df.select(*(_quote(n) for n in src.schema.names))


#: a row's file path, decoded: Spark names files by percent-encoded URI, where a space is
#: ``%20`` and ``+`` is itself, so ``+`` is escaped before ``url_decode`` (which reads it as a space)
DECODED_FILE = "url_decode(replace(input_file_name(), '+', '%2B'))"


def _folder_value(src: Source, column: str) -> str:
    """The Spark SQL of ``column``'s value from a row's file path: its folder, one level per
    partition column above the file, without the ``column=`` of a hive-style folder (the scan's rule)."""
    level = len(src.partition_by) - src.partition_by.index(column) + 1
    folder = f"element_at(split({DECODED_FILE}, '/'), -{level})"
    return f"substring({folder}, {len(column) + 2})" if src.hive_style else folder


def _check_spark_columns(df: Any, src: Source) -> None:
    """Spark reads the columns the footers name (no partition discovery from explicit files);
    anything else would write other rows than the driver path."""
    want = [n for n in src.schema.names if n not in src.added]
    if list(df.columns) != want:
        raise BootstrapSourceError(f"bootstrap source {redact(src.root)}: Spark reads columns {list(df.columns)}, "
                                   f"the files' footers name {want}", path=src.root)


def _check_spark_files(listed: list[str], src: Source) -> None:
    """Spark lists exactly the scanned files, and their paths decode to the scanned ones (so
    the folder values Spark takes are the scan's): a file name Spark takes for a glob pattern
    would list others. Every file sits one folder level per partition column deep, so its last
    levels name it."""
    depth = len(src.partition_by) + 1
    got = ["/".join(unquote(uri).split("/")[-depth:]) for uri in listed]
    want = {f.path for f in src.files}
    if set(got) != want or len(got) != len(want):
        odd = sorted(want.symmetric_difference(got))[:3]
        raise BootstrapSourceError(f"bootstrap source {redact(src.root)}: Spark lists other files than the scan found "
                                   f"({odd}); rename files whose names hold glob characters (*?[]{{}})",
                                   path=odd[0] if odd else src.root)


def _quote(name: str) -> str:
    """A column name as Spark SQL takes it whatever it holds (dots, spaces, backticks)."""
    return "`" + name.replace("`", "``") + "`"
