"""Hudi's bootstrap index: the bytes of ``.hoodie/.aux/.bootstrap/``, written and read.

A METADATA_ONLY bootstrap leaves the source's Parquet files where they are and maps each file
group of the table to the source file holding its rows. The layout, as Hudi 1.x defines it
(``org.apache.hudi.common.bootstrap.index.hfile.HFileBootstrapIndex``,
``HFileBootstrapIndexWriter``, ``HFileBootstrapIndexReader``):

* **Two HFiles**, one per lookup, named like data files of file id
  ``00000000-0000-0000-0000-000000000000-0`` at ``METADATA_BOOTSTRAP_INSTANT_TS``
  (``FSUtils.makeBootstrapIndexFileName``: ``<fileId>_<instant>.hfile``):
  ``.partitions/`` (by table partition) and ``.fileids/`` (by file group).
* **Keys** (``HFileBootstrapIndex.getPartitionKey``, ``getFileGroupKey``): ``part=<partition>``
  and ``part=<partition>;fileid=<fileId>``. The writer appends partitions in sorted order and
  file groups sorted by (partition, file id); an HFile's cells are sorted by key bytes, which is
  the order used here (the two differ only for partitions of which one is a prefix of another).
* **Values** are Avro container files of one record, no codec
  (``TimelineMetadataUtils.serializeAvroMetadata``): a ``HoodieBootstrapPartitionMetadata``
  (``bootstrapPartitionPath``, ``partitionPath``, ``fileIdToBootstrapFile``: file id ->
  ``HoodieFileStatus``) per partition, a ``HoodieBootstrapFilePartitionInfo``
  (``bootstrapPartitionPath``, ``bootstrapFileStatus``, ``partitionPath``) per file group.
* **File info** ``INDEX_INFO`` of each HFile: a ``HoodieBootstrapIndexInfo`` (``bootstrapBasePath``,
  ``createdTimestamp``, ``numKeys``: the cells of that file), the same container encoding.
* **A source file's status** (``FSUtils.fromPathInfo``): ``path.uri`` (the full path, as Hadoop
  prints it: ``file:/...`` on a local disk), ``length``, ``isDir``, ``blockReplication``,
  ``blockSize``, ``modificationTime`` and ``accessTime`` (set to the modification time); the
  permission, owner, group and symlink fields stay null.
* The HFiles carry no compression (``HFileContext``'s default codec, ``NONE``).

Only bytes and values live here; which files are skeletons and how rows are stitched is the
table layer's (:mod:`multiwriter.table.bootstrap_slice`).
"""
from __future__ import annotations

import io
from collections.abc import Iterable
from dataclasses import dataclass

import fastavro

from ..errors import TableFormatError
from . import avro, hfile
from .instant import METADATA_BOOTSTRAP_TIME

#: where the index lives (``HoodieTableMetaClient.getBootstrapIndexByPartitionFolderPath`` ...)
INDEX_DIR = ".hoodie/.aux/.bootstrap"
PARTITIONS_DIR = f"{INDEX_DIR}/.partitions"
FILE_IDS_DIR = f"{INDEX_DIR}/.fileids"
#: ``HFileBootstrapIndex.BOOTSTRAP_INDEX_FILE_ID``
INDEX_FILE_ID = "00000000-0000-0000-0000-000000000000-0"
INDEX_FILE_NAME = f"{INDEX_FILE_ID}_{METADATA_BOOTSTRAP_TIME}.hfile"
PARTITIONS_FILE = f"{PARTITIONS_DIR}/{INDEX_FILE_NAME}"
FILE_IDS_FILE = f"{FILE_IDS_DIR}/{INDEX_FILE_NAME}"
#: the HFile file-info key of :class:`IndexInfo` (``HFileBootstrapIndex.INDEX_INFO_KEY_STRING``)
INDEX_INFO_KEY = b"INDEX_INFO"
#: the class Hudi's table config names for this index (``BootstrapIndexType.HFILE``)
INDEX_CLASS = "org.apache.hudi.common.bootstrap.index.hfile.HFileBootstrapIndex"
INDEX_TYPE = "HFILE"
#: what Hadoop's local and S3A file systems report for a file by default (``fs.local.block.size``,
#: ``fs.s3a.block.size``: 32 MB, one replica)
DEFAULT_BLOCK_SIZE = 32 * 1024 * 1024
DEFAULT_REPLICATION = 1

_PARTITION_PREFIX = "part"
_FILE_ID_PREFIX = "fileid"

NS = "org.apache.hudi.avro.model"


def _opt(name: str, typ: object) -> dict:
    return {"name": name, "type": ["null", typ], "default": None}


_VERSION = {"name": "version", "type": ["int", "null"], "default": 1}
#: ``HoodiePath.avsc``
PATH_SCHEMA = {"type": "record", "name": "HoodiePath", "namespace": NS, "fields": [_VERSION, _opt("uri", "string")]}
#: ``HoodieFSPermission.avsc`` (Hudi declares its defaults as the string "null", which a strict
#: parser refuses for a union led by null; a default never reaches a value's bytes)
PERMISSION_SCHEMA = {
    "type": "record", "name": "HoodieFSPermission", "namespace": NS,
    "fields": [_VERSION, _opt("userAction", "string"), _opt("groupAction", "string"), _opt("otherAction", "string"),
               _opt("stickyBit", "boolean")],
}
#: ``HoodieFileStatus.avsc``
FILE_STATUS_SCHEMA = {
    "type": "record", "name": "HoodieFileStatus", "namespace": NS,
    "fields": [_VERSION, _opt("path", PATH_SCHEMA), _opt("length", "long"), _opt("isDir", "boolean"),
               _opt("blockReplication", "int"), _opt("blockSize", "long"), _opt("modificationTime", "long"),
               _opt("accessTime", "long"), _opt("permission", PERMISSION_SCHEMA), _opt("owner", "string"),
               _opt("group", "string"), _opt("symlink", f"{NS}.HoodiePath")],
}
#: ``HoodieBootstrapPartitionMetadata.avsc``
PARTITION_METADATA_SCHEMA = {
    "type": "record", "name": "HoodieBootstrapPartitionMetadata", "namespace": NS,
    "fields": [_VERSION, _opt("bootstrapPartitionPath", "string"), _opt("partitionPath", "string"),
               _opt("fileIdToBootstrapFile", {"type": "map", "values": FILE_STATUS_SCHEMA})],
}
#: ``HoodieBootstrapFilePartitionInfo.avsc``
FILE_PARTITION_INFO_SCHEMA = {
    "type": "record", "name": "HoodieBootstrapFilePartitionInfo", "namespace": NS,
    "fields": [_VERSION, _opt("bootstrapPartitionPath", "string"), _opt("bootstrapFileStatus", FILE_STATUS_SCHEMA),
               _opt("partitionPath", "string")],
}
#: ``HoodieBootstrapIndexInfo.avsc``
INDEX_INFO_SCHEMA = {
    "type": "record", "name": "HoodieBootstrapIndexInfo", "namespace": NS,
    "fields": [_VERSION, _opt("bootstrapBasePath", "string"), _opt("createdTimestamp", "long"), _opt("numKeys", "int")],
}

_PARSED = {name: fastavro.parse_schema(s, named_schemas={}) for name, s in (
    ("partition", PARTITION_METADATA_SCHEMA), ("file", FILE_PARTITION_INFO_SCHEMA), ("info", INDEX_INFO_SCHEMA))}


@dataclass(frozen=True)
class FileStatus:
    """A source file as the index records it (``HoodieFileStatus``)."""

    uri: str  # the full path, as Hadoop prints it
    length: int
    modification_time_ms: int
    block_size: int = DEFAULT_BLOCK_SIZE
    block_replication: int = DEFAULT_REPLICATION


@dataclass(frozen=True)
class SourceFileMapping:
    """One file group of the table and the source file its skeleton base file stands for
    (``BootstrapFileMapping``)."""

    partition_path: str  # the table's partition
    file_id: str
    bootstrap_partition_path: str  # the source folder, relative to the source root
    status: FileStatus

    @property
    def key(self) -> str:
        return file_group_key(self.partition_path, self.file_id)


@dataclass(frozen=True)
class IndexInfo:
    """An index file's ``INDEX_INFO`` (``HoodieBootstrapIndexInfo``)."""

    base_path: str
    created_ms: int
    num_keys: int


@dataclass(frozen=True)
class PartitionEntry:
    """One cell of the partition index: a table partition, its source folder and files."""

    partition_path: str
    bootstrap_partition_path: str
    files: dict[str, FileStatus]  # file id -> source file


def partition_key(partition: str) -> str:
    return f"{_PARTITION_PREFIX}={partition}"


def file_group_key(partition: str, file_id: str) -> str:
    return f"{partition_key(partition)};{_FILE_ID_PREFIX}={file_id}"


def parse_file_group_key(key: str) -> tuple[str, str]:
    """(partition, file id) of a file-group key; ValueError for anything else. The partition
    part ends at the last ``;fileid=``: a partition path may hold ``;`` but not ``/`` in a file id."""
    head, sep, file_id = key.rpartition(f";{_FILE_ID_PREFIX}=")
    prefix = f"{_PARTITION_PREFIX}="
    if not sep or not head.startswith(prefix) or not file_id:
        raise ValueError(f"not a bootstrap index file-group key: {key[:200]!r}")
    return head[len(prefix):], file_id


# -- writing -------------------------------------------------------------------------------------
def encode(base_path: str, mappings: Iterable[SourceFileMapping], created_ms: int) -> tuple[bytes, bytes]:
    """The bytes of the partition index and of the file-group index of ``mappings``, for a
    bootstrap of the source at ``base_path``. Every file group of one partition lies in one
    source folder (Hudi takes each partition's from its first mapping)."""
    by_partition: dict[str, list[SourceFileMapping]] = {}
    for m in mappings:
        by_partition.setdefault(m.partition_path, []).append(m)
    partition_cells = [(partition_key(p), _container("partition", _partition_record(p, ms)))
                       for p, ms in by_partition.items()]
    file_cells = [(m.key, _container("file", _file_record(m))) for ms in by_partition.values() for m in ms]
    return (_hfile(partition_cells, base_path, created_ms), _hfile(file_cells, base_path, created_ms))


def _hfile(cells: list[tuple[str, bytes]], base_path: str, created_ms: int) -> bytes:
    info = _container("info", {"version": 1, "bootstrapBasePath": base_path, "createdTimestamp": created_ms,
                               "numKeys": len(cells)})
    return hfile.write(cells, file_info={INDEX_INFO_KEY: info}, compress=False, created_ms=created_ms)


def _partition_record(partition: str, mappings: list[SourceFileMapping]) -> dict:
    return {"version": 1, "bootstrapPartitionPath": mappings[0].bootstrap_partition_path, "partitionPath": partition,
            "fileIdToBootstrapFile": {m.file_id: _status_record(m.status) for m in mappings}}


def _file_record(m: SourceFileMapping) -> dict:
    return {"version": 1, "bootstrapPartitionPath": m.bootstrap_partition_path,
            "bootstrapFileStatus": _status_record(m.status), "partitionPath": m.partition_path}


def _status_record(s: FileStatus) -> dict:
    return {"version": 1, "path": {"version": 1, "uri": s.uri}, "length": s.length, "isDir": False,
            "blockReplication": s.block_replication, "blockSize": s.block_size,
            "modificationTime": s.modification_time_ms, "accessTime": s.modification_time_ms,
            "permission": None, "owner": None, "group": None, "symlink": None}


def _container(kind: str, record: dict) -> bytes:
    buf = io.BytesIO()
    fastavro.writer(buf, _PARSED[kind], [record])
    return buf.getvalue()


# -- reading -------------------------------------------------------------------------------------
def decode_file_ids(data: bytes, *, source: str) -> tuple[IndexInfo, list[SourceFileMapping]]:
    """The file-group index: its info and every mapping, in key order."""
    f = hfile.read(data, source=source)
    out = []
    for key, value in f.cells:
        try:
            partition, file_id = parse_file_group_key(key.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise TableFormatError(f"{source}: {e}") from e
        rec = _record(value, source)
        status = _status(rec.get("bootstrapFileStatus"), source)
        if rec.get("partitionPath") not in (None, partition):
            raise TableFormatError(f"{source}: key {key[:200]!r} names partition {partition!r}, its value "
                                   f"{rec.get('partitionPath')!r:.200}")
        out.append(SourceFileMapping(partition, file_id, _text(rec.get("bootstrapPartitionPath"), source), status))
    return _info(f, source), out


def decode_partitions(data: bytes, *, source: str) -> tuple[IndexInfo, list[PartitionEntry]]:
    """The partition index: its info and one entry per partition, in key order."""
    f = hfile.read(data, source=source)
    out = []
    prefix = f"{_PARTITION_PREFIX}="
    for key, value in f.cells:
        text = key.decode("utf-8", "replace")
        if not text.startswith(prefix):
            raise TableFormatError(f"{source}: not a bootstrap index partition key: {text[:200]!r}")
        rec = _record(value, source)
        files = rec.get("fileIdToBootstrapFile") or {}
        if not isinstance(files, dict):
            raise TableFormatError(f"{source}: fileIdToBootstrapFile of {text[:200]!r} is not a map")
        out.append(PartitionEntry(text[len(prefix):], _text(rec.get("bootstrapPartitionPath"), source),
                                  {fid: _status(st, source) for fid, st in files.items()}))
    return _info(f, source), out


def _info(f: hfile.HFile, source: str) -> IndexInfo:
    raw = f.file_info.get(INDEX_INFO_KEY)
    if raw is None:
        raise TableFormatError(f"{source}: no {INDEX_INFO_KEY.decode()} in the HFile's file info")
    rec = _record(raw, source)
    return IndexInfo(_text(rec.get("bootstrapBasePath"), source), int(rec.get("createdTimestamp") or 0),
                     int(rec.get("numKeys") or 0))


def _record(data: bytes, source: str) -> dict:
    try:
        recs = list(avro.bounded_reader(data))
    except Exception as e:  # noqa: BLE001 -- fastavro raises many types for corrupt input
        raise TableFormatError(f"{source}: a value is not a readable Avro container ({type(e).__name__}: {e})") from e
    if len(recs) != 1 or not isinstance(recs[0], dict):
        raise TableFormatError(f"{source}: a value holds {len(recs)} records, not one")
    return recs[0]


def _status(rec: object, source: str) -> FileStatus:
    if not isinstance(rec, dict) or not isinstance(rec.get("path"), dict) or not rec["path"].get("uri"):
        raise TableFormatError(f"{source}: a bootstrap file status without a path")
    try:
        return FileStatus(str(rec["path"]["uri"]), int(rec.get("length") or 0), int(rec.get("modificationTime") or 0),
                          int(rec.get("blockSize") or DEFAULT_BLOCK_SIZE),
                          int(rec.get("blockReplication") or DEFAULT_REPLICATION))
    except (TypeError, ValueError) as e:
        raise TableFormatError(f"{source}: a bootstrap file status of another shape ({e})") from e


def _text(v: object, source: str) -> str:
    if v is None:
        return ""
    if not isinstance(v, str):
        raise TableFormatError(f"{source}: a path field holds {type(v).__name__}, not a string")
    return v
