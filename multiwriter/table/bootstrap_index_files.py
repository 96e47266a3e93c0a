"""A table's bootstrap index on storage: written by a METADATA_ONLY bootstrap, dropped by its
rollback, looked up by every reader of a skeleton base file.

Hudi decides that a base file is a skeleton by its instant time alone
(``AbstractTableFileSystemView.addBootstrapBaseFileIfPresent``: a slice whose base instant is
``METADATA_BOOTSTRAP_INSTANT_TS``) and then asks the index for the file group's source file; a
rollback of that instant drops the index (``BaseRollbackActionExecutor.dropBootstrapIndexIfNeeded``).
The bytes are :mod:`multiwriter.format.bootstrap_index`'s. A process keeps each table's file-group
index once read: an entry never changes (a rerun of a rolled-back bootstrap writes new file ids),
so a file group it does not name makes it read the index again, once.

The source is located through the table's ``hoodie.bootstrap.base.path``: a source file the
index names outside that folder is refused, and nothing here writes or deletes under it.
"""
from __future__ import annotations

import logging
import posixpath
import threading
from dataclasses import dataclass

from ..errors import TableFormatError
from ..format import bootstrap_index as bi
from ..format.instant import METADATA_BOOTSTRAP_TIME
from ..redact import redact
from ..storage import Storage
from . import properties as props
from .properties import TableConfig
from ..threads import free_in_child

log = logging.getLogger(__name__)

#: ``hoodie.properties`` keys of a table with a bootstrap index (``HoodieTableConfig``)
INDEX_CLASS_KEY = "hoodie.bootstrap.index.class"
INDEX_TYPE_KEY = "hoodie.bootstrap.index.type"


def table_properties(version: int) -> dict[str, str]:
    """What a table bootstrapped METADATA_ONLY records beside ``hoodie.bootstrap.base.path``: the
    index type, as Hudi 1.1 creates a version 9 table (``HoodieTableMetaClient.TableBuilder``:
    ``BOOTSTRAP_INDEX_TYPE``), and on version 8 the class name too, as Hudi 1.0's upgrade to
    version 8 records both (``upgradeBootstrapIndexType``); Hudi reads the class name first and
    the type otherwise (``BootstrapIndexType.getBootstrapIndexClassName``). Neither records
    ``hoodie.bootstrap.index.enable``, which is true by default."""
    out = {INDEX_TYPE_KEY: bi.INDEX_TYPE}
    if version < 9:
        out[INDEX_CLASS_KEY] = bi.INDEX_CLASS
    return out


@dataclass(frozen=True)
class SourceFile:
    """Where the rows of one skeleton base file live."""

    root: Storage  # the source root (``hoodie.bootstrap.base.path``)
    rel: str  # the file, relative to it
    length: int


def write(storage: Storage, base_path: str, mappings: list[bi.SourceFileMapping], created_ms: int) -> None:
    """Write both index files (replacing what a rolled-back attempt may have left)."""
    partitions, file_ids = bi.encode(base_path, mappings, created_ms)
    storage.write_bytes(bi.PARTITIONS_FILE, partitions)
    storage.write_bytes(bi.FILE_IDS_FILE, file_ids)
    _forget(storage)


def drop(storage: Storage) -> bool:
    """Delete both index files (``HFileBootstrapIndex.dropIndex``); True when one was there."""
    dropped = [storage.delete(rel) for rel in (bi.PARTITIONS_FILE, bi.FILE_IDS_FILE)]
    _forget(storage)
    if any(dropped):
        log.info("dropped the bootstrap index of %s", redact(storage.uri))
    return any(dropped)


def exists(storage: Storage) -> bool:
    return storage.exists(bi.FILE_IDS_FILE)


def read_mappings(storage: Storage) -> list[bi.SourceFileMapping]:
    """Every file group the index maps, read from storage now."""
    return bi.decode_file_ids(storage.read_bytes(bi.FILE_IDS_FILE), source=bi.FILE_IDS_FILE)[1]


# -- lookups, cached per process -----------------------------------------------------------------
@dataclass(frozen=True)
class _Loaded:
    config: TableConfig
    root: Storage  # the source root
    mappings: dict[tuple[str, str], bi.SourceFileMapping]


_CACHE: dict[str, _Loaded] = {}
_LOCK = free_in_child(threading.Lock())


def config_of(storage: Storage) -> TableConfig:
    """The table's config as the index was last loaded with (partition fields and style)."""
    return _loaded(storage).config


def source_of(storage: Storage, partition: str, file_id: str) -> SourceFile:
    """The source file of file group (``partition``, ``file_id``), whose base file is a skeleton;
    TableFormatError when the index does not name it."""
    key = (partition, file_id)
    loaded = _loaded(storage)
    m = loaded.mappings.get(key)
    if m is None:  # a newer index (a rerun): read it once more
        _forget(storage)
        loaded = _loaded(storage)
        m = loaded.mappings.get(key)
    if m is None:
        raise TableFormatError(
            f"{redact(storage.uri)}: file group {file_id} of partition {partition!r} has a skeleton base file (instant "
            f"{METADATA_BOOTSTRAP_TIME}) but the bootstrap index ({bi.FILE_IDS_FILE}) names no source file for it; "
            "the index was lost or belongs to another attempt: restore it, or bootstrap the source into a new table")
    return SourceFile(loaded.root, relative_source(loaded.root, m.status.uri), m.status.length)


def _loaded(storage: Storage) -> _Loaded:
    with _LOCK:
        got = _CACHE.get(storage.uri)
        if got is None:
            got = _load(storage)
            _CACHE[storage.uri] = got
        return got


def _forget(storage: Storage) -> None:
    with _LOCK:
        _CACHE.pop(storage.uri, None)


def _load(storage: Storage) -> _Loaded:
    config = TableConfig.from_properties(props.parse(props.read_text(storage)))
    try:
        data = storage.read_bytes(bi.FILE_IDS_FILE)
    except FileNotFoundError:
        raise TableFormatError(
            f"{redact(storage.uri)}: a skeleton base file (instant {METADATA_BOOTSTRAP_TIME}) is listed but there is no "
            f"bootstrap index ({bi.FILE_IDS_FILE}): restore it, or bootstrap the source into a new table") from None
    info, mappings = bi.decode_file_ids(data, source=bi.FILE_IDS_FILE)
    base = config.raw.get(props.BOOTSTRAP_BASE_PATH_KEY) or info.base_path
    if not base:
        raise TableFormatError(f"{redact(storage.uri)}: a bootstrap index without a bootstrap base path "
                               f"({props.BOOTSTRAP_BASE_PATH_KEY} in {props.PROPERTIES_FILE})")
    return _Loaded(config, Storage(base), {(m.partition_path, m.file_id): m for m in mappings})


# -- source paths ----------------------------------------------------------------------------------
def source_uri(source: Storage, rel: str) -> str:
    """A source file's full path as Hudi records it (Hadoop's ``Path.toString``: ``file:/...``
    on a local disk, the URI elsewhere)."""
    return f"file:{source.abs(rel)}" if source.is_local else source.uri_of(rel)


def relative_source(root: Storage | str, uri: str) -> str:
    """``uri`` (a source file the index names) relative to the source root ``root``;
    TableFormatError when it lies elsewhere, so no index can make a reader open another file."""
    root = Storage(root) if isinstance(root, str) else root
    prefixes = [source_uri(root, "").rstrip("/") + "/", root.uri_of("").rstrip("/") + "/"]
    if root.is_local:
        prefixes.append("file://" + root.abs("").rstrip("/") + "/")
    for prefix in prefixes:
        if uri.startswith(prefix):
            rel = uri[len(prefix):]
            if rel and ".." not in rel.split("/") and posixpath.normpath(rel) == rel:
                return rel
    raise TableFormatError(f"the bootstrap index names source file {redact(uri)!r:.300}, which is not under the "
                           f"bootstrap base path {redact(root.uri)}: refusing to read it")
