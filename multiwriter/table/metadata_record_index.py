"""The metadata table's record index (``record_index``), kept beside its ``files`` partition by
every action: each record key's data partition and file group.

Hudi's writers use it as their index (``hoodie.index.type=RECORD_INDEX``) and trust it whole: a
key it does not name is taken for a new one, so a key our writers add and the index misses
would be written twice by the next Hudi writer. So every deltacommit that changes which keys a
file group holds writes, in a log file of each record-index file group the keys hash to, the
keys it placed (a new group, keys inserted into a group, keys moved by clustering) and the keys
it deleted; keys updated where they are get no entry (Hudi's ``getRecordIndexUpdates`` skips
them too), and a compaction of data changes no location.

What a write changed is known to the writer: it hands over the keys it inserted into and
deleted from each file it wrote (:func:`remember_keys`). A file written elsewhere (a Spark
executor, another process) is read back instead: its keys against those of the base it
replaced, or, for a log file, its data and delete blocks against what the index holds.

The file groups follow the ``files`` partition's life (:mod:`.metadata_files`): the same
deltacommit, compaction (every group at once, in one plan; keys a compaction did not change are
carried over cell by cell, as Hudi's HFile merge would write them again), rollback and cleaning
of old slices. The bytes are :mod:`multiwriter.format.record_index`'s.
"""
from __future__ import annotations

import datetime as _dt
import functools
import json
import math
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..cache import BoundedCache
from ..errors import TableFormatError
from ..format import hfile, layout, paths
from ..format import record_index as ri
from ..format.bounds import open_parquet
from ..format.log_file import BlockType, parse_log_file, read_log_blocks
from ..s3_store import REQUESTS
from ..storage import Storage
from .compaction_plan import CompactionOperation
from .metadata import CommitMetadata, ReplaceCommitMetadata, WriteStat
from .metadata_stats import Slice, _base_time, _group_of, latest_slice_of, start_partition, write_base_file
from .properties import TableConfig
from .record_keys import key_columns, stored_keys

PARTITION = ri.PARTITION
_WRITE_TOKEN = "0-0-0"
#: Hudi's sizing of a new index (``HoodieMetadataConfig``): at least this many file groups ...
MIN_FILE_GROUPS = ri.MIN_FILE_GROUPS
#: ... and no group above this many entries when it starts (``record.index.max.filegroup.size``
#: 1 GB at ~48 bytes an entry, with Hudi's growth factor 2 ahead of the table's growth)
_ENTRIES_PER_GROUP = 10_000_000


#: an entry as written: its Avro bytes and the schema (JSON) they are in
Cell = tuple[bytes, str | None]


@dataclass(frozen=True)
class RawChanges:
    """What one block of a record-index log file says: keys placed (their cells, undecoded, in
    ``schema``), and keys deleted."""

    updates: dict[str, bytes]
    schema: str | None
    deletes: tuple[str, ...] = ()

    @functools.cached_property
    def deleted(self) -> frozenset[str]:
        return frozenset(self.deletes)


def _schema_text(schema: Mapping[str, Any]) -> str:
    return json.dumps(ri.with_record_index(schema), separators=(",", ":"))


def _raw_changes(data: bytes, source: str) -> list[RawChanges]:
    """The blocks of a record-index log file, in order: an HFile data block's cells, a delete
    block's keys (a torn block skipped, as Hudi's reader skips it)."""
    out = []
    for b in read_log_blocks(data, source=source):
        where = f"{source}: block at offset {b.offset}"
        if b.block_type == BlockType.HFILE_DATA and b.content is not None:
            h = hfile.read(b.content, source=where)
            schema = h.file_info.get(b"schema")
            out.append(RawChanges({k.decode("utf-8"): v for k, v in h.cells if v},
                                  schema.decode("utf-8", "replace") if schema is not None else None))
        elif b.block_type == BlockType.DELETE:
            keys = b.records.column("record_key").to_pylist() if b.records is not None else []
            out.append(RawChanges({}, None, tuple(k for k in keys if k is not None)))
    return out


@dataclass(frozen=True)
class Overlay:
    """What a slice's logs say on top of its base: their blocks, the newest first (a lookup
    asks the newest block that names a key; nothing is merged for it)."""

    layers: tuple[RawChanges, ...]

    def get(self, key: str) -> tuple[bool, Cell | None]:
        """(whether a log names ``key``, its cell then: None when deleted)."""
        for ch in self.layers:
            v = ch.updates.get(key)
            if v is not None:
                return True, (v, ch.schema)
            if ch.deletes and key in ch.deleted:
                return True, None
        return False, None

    def merged(self) -> dict[str, Cell | None]:
        """Every key the logs name, with its newest cell (None: deleted)."""
        out: dict[str, Cell | None] = {}
        for ch in reversed(self.layers):
            out.update({k: (v, ch.schema) for k, v in ch.updates.items()})
            out.update(dict.fromkeys(ch.deletes))
        return out


@dataclass
class IndexChanges:
    """What one action changes in the record index: keys placed, and keys deleted."""

    upserts: dict[str, ri.Location] = field(default_factory=dict)
    deletes: set[str] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.upserts or self.deletes)


@dataclass
class RecordIndexPartition:
    """The file groups of one metadata table's ``record_index`` partition.

    ``done``: requested time -> (action, completion time) of the metadata timeline's completed
    instants (a log counts only once its deltacommit completed). ``base_schema``: the files
    partition's record schema, given the record-index branch when a group has no base file
    whose schema to reuse."""

    storage: Storage
    mdt_dir: str
    base_schema: Mapping[str, Any]
    partitions: tuple[str, ...] = (PARTITION,)
    _names: dict[str, int] | None = None
    _by_group: dict[str, list[str]] | None = None  # the names by file group, as listed

    # -- listing -------------------------------------------------------------------------
    def _rel(self, name: str = "") -> str:
        return f"{self.mdt_dir}/{PARTITION}" + (f"/{name}" if name else "")

    def names(self, partition: str = PARTITION) -> dict[str, int]:
        """The partition's file names and sizes, listed once by this object."""
        if self._names is None:
            self._names = {e.path.rsplit("/", 1)[-1]: e.size
                           for e in self.storage.list_dir(self._rel(), files_only=True)}
        return self._names

    def forget(self) -> None:
        self._names = self._by_group = None

    def groups(self) -> list[str]:
        """The file group ids, in index order (readers take the number of groups listed)."""
        ids = {g for n in self.names() if (g := _group_of(n)) is not None and ri.file_group_of(g) is not None}
        return sorted(ids, key=lambda g: ri.file_group_of(g) or 0)

    def slice(self, file_id: str, done: Mapping[str, tuple[str, str]]) -> Slice:
        if self._by_group is None:
            by: dict[str, list[str]] = {}
            for n in self.names():
                if (g := _group_of(n)) is not None:
                    by.setdefault(g, []).append(n)
            self._by_group = by
        return latest_slice_of(self._by_group.get(file_id, ()), file_id, done)

    # -- reading -------------------------------------------------------------------------
    def _base_cells(self, name: str) -> tuple[dict[str, bytes], str]:
        """A base HFile's cells (key -> encoded entry) and its schema, read once per process:
        a lookup decodes only the entries it needs."""
        rel = self._rel(name)
        key = (self.storage.uri, rel)
        hit = _BASES.get(key)
        if hit is None:
            h = hfile.read(self.storage.read_bytes(rel), source=rel)
            schema = h.file_info.get(b"schema")
            if schema is None:
                raise TableFormatError(f"{rel}: record index HFile without a schema")
            hit = ({k.decode("utf-8"): v for k, v in h.cells if v}, schema.decode("utf-8", "replace"))
            _BASES.put(key, hit)
        return hit

    def _log_changes(self, name: str, data: bytes | None = None) -> list[RawChanges]:
        """What a log file's blocks say, as raw cells (decoded only when looked up; a
        compaction carries them as they are). ``data``: its bytes, when the caller has them."""
        rel = self._rel(name)
        key = (self.storage.uri, rel)
        hit = _LOGS.get(key) if data is None else None
        if hit is None:
            hit = _raw_changes(self.storage.read_bytes(rel) if data is None else data, rel)
            _LOGS.put(key, hit)
        return hit

    def _overlay(self, file_id: str, logs: tuple[str, ...]) -> Overlay:
        """What a slice's logs say on top of its base (the newest layer first)."""
        return Overlay(tuple(ch for n in reversed(logs) for ch in reversed(self._log_changes(n))))

    def _group_view(self, file_id: str, done: Mapping[str, tuple[str, str]]
                    ) -> tuple[dict[str, bytes], str | None, Overlay]:
        base, _, logs = self.slice(file_id, done)
        cells, schema = self._base_cells(base) if base else ({}, None)
        return cells, schema, self._overlay(file_id, tuple(logs))

    def lookup(self, keys: Iterable[str], done: Mapping[str, tuple[str, str]]) -> dict[str, ri.Location]:
        """Where the index puts each of ``keys`` (keys it does not hold are left out)."""
        wanted = pa.array(sorted(set(keys)), pa.string())
        groups = self.groups()
        if not len(wanted) or not groups:
            return {}
        ix = ri.file_group_indexes(wanted, len(groups))
        out: dict[str, ri.Location] = {}
        values = wanted.to_pylist()
        for g in np.unique(ix):
            cells, schema, overlay = self._group_view(groups[int(g)], done)
            found: dict[str | None, list[tuple[bytes, bytes]]] = {}
            for k in (values[i] for i in np.flatnonzero(ix == g)):
                said, cell = overlay.get(k)
                if said:
                    if cell is not None:
                        found.setdefault(cell[1], []).append((k.encode(), cell[0]))
                elif k in cells:
                    found.setdefault(schema, []).append((k.encode(), cells[k]))
            out.update(self._decode(found))
        return out

    def _decode(self, by_schema: Mapping[str | None, list[tuple[bytes, bytes]]]) -> dict[str, ri.Location]:
        out: dict[str, ri.Location] = {}
        for schema, pairs in by_schema.items():
            if pairs:
                if schema is None:
                    raise TableFormatError(f"{self._rel()}: record index entries without a schema")
                out.update(ri.decode_cells(pairs, schema, source=self._rel()))
        return out

    def read(self, done: Mapping[str, tuple[str, str]]) -> dict[str, ri.Location]:
        """Every entry of the latest slices (a model's check; lookups read only what they need)."""
        out: dict[str, ri.Location] = {}
        for fid in self.groups():
            cells, schema, layers = self._group_view(fid, done)
            overlay = layers.merged()
            found: dict[str | None, list[tuple[bytes, bytes]]] = {
                schema: [(k.encode(), v) for k, v in cells.items() if k not in overlay]}
            for k, cell in overlay.items():
                if cell is not None:
                    found.setdefault(cell[1], []).append((k.encode(), cell[0]))
            out.update(self._decode(found))
        return out

    def _schema(self, file_id: str, done: Mapping[str, tuple[str, str]]) -> str:
        """The record schema a new file of the group declares: its base file's (Hudi's whole
        ``HoodieMetadataRecord``, when Hudi wrote it), else ours with the record-index branch."""
        base, _, _ = self.slice(file_id, done)
        key = (self.storage.uri, self._rel(base) if base is not None else "")
        known = _SCHEMAS.get(key)
        if known is None:
            known = _schema_text(self.base_schema)
            if base is not None:
                try:
                    known = _schema_text(json.loads(self._base_cells(base)[1]))
                except (ValueError, TypeError):
                    pass
            _SCHEMAS.put(key, known)
        return known

    # -- writing -------------------------------------------------------------------------
    def append(self, t: str, changes: IndexChanges, done: Mapping[str, tuple[str, str]],
               token: str = _WRITE_TOKEN, sent: list[Future] | None = None) -> list[WriteStat]:
        """Write ``changes`` (one deltacommit's, at ``t``) into a log file of each group they
        map to; returns the log files' write stats for the deltacommit. ``sent``: the writes go
        out side by side on the request threads (an object store), their futures added there
        for the caller to wait for."""
        groups = self.groups()
        if not changes or not groups:
            return []
        deletes = changes.deletes - changes.upserts.keys()
        keys = sorted(changes.upserts.keys() | deletes)
        ix = ri.file_group_indexes(pa.array(keys, pa.string()), len(groups))
        now = int(_dt.datetime.now(_dt.timezone.utc).timestamp() * 1000)
        stats = []
        for g in np.unique(ix):
            fid = groups[int(g)]
            mine = [keys[i] for i in np.flatnonzero(ix == g)]
            placed = {k: changes.upserts[k] for k in mine if k in changes.upserts}
            gone = [k for k in mine if k in deletes]
            name = f".{fid}_{t}.log.1_{token}"
            schema = self._schema(fid, done)
            cells = ri.encode_cells(placed, schema)
            data = ri.cells_log_file(t, cells, gone, schema, created_ms=now)
            if sent is None:
                self.storage.write_bytes(self._rel(name), data)
            else:
                sent.append(REQUESTS.get().submit(self.storage.write_bytes, self._rel(name), data))
            self.wrote(PARTITION, name, len(data))
            # what the next read takes from it: known already
            _LOGS.put((self.storage.uri, self._rel(name)),
                      [c for c in (RawChanges(dict(cells), schema) if cells else None,
                                   RawChanges({}, None, tuple(sorted(gone))) if gone else None) if c is not None])
            stats.append(WriteStat(file_id=fid, path=f"{PARTITION}/{name}", partition_path=PARTITION, prev_commit=t,
                                   num_writes=len(mine), num_inserts=len(placed), num_deletes=len(gone),
                                   total_write_bytes=len(data), file_size=len(data), log_version=1, log_files=(name,)))
        return stats

    def logs_of(self, t: str) -> list[tuple[str, str]]:
        """(partition, log file name) of every log the deltacommit at ``t`` wrote (listed anew)."""
        self.forget()
        groups = set(self.groups())
        return sorted((PARTITION, n) for n in self.names()
                      if (x := parse_log_file(n)) is not None and x.instant_time == t and x.file_id in groups)

    def delete(self, partition: str, name: str) -> None:
        self.storage.delete(self._rel(name))
        self.names().pop(name, None)
        self._by_group = None
        _LOGS.pop((self.storage.uri, self._rel(name)))
        _BASES.pop((self.storage.uri, self._rel(name)))

    def compact(self, t: str, done: Mapping[str, tuple[str, str]]
                ) -> list[tuple[CompactionOperation, WriteStat, str, bytes]]:
        """The new base of every group whose slice holds logs completed before ``t``: (plan
        operation, write stat, path, bytes), written by the caller's compaction at ``t``. A
        deleted key leaves the base; the cells of keys no log touched are carried as they are."""
        out = []
        for fid in self.groups():
            base, base_t, logs = self.slice(fid, done)
            merged = [n for n in logs if (p := parse_log_file(n)) is not None and done[p.instant_time][1] < t]
            if not merged:
                continue
            schema = self._schema(fid, done)
            name = f"{fid}_{_WRITE_TOKEN}_{t}.hfile"
            cells = self._compacted_cells(fid, base, tuple(merged), schema, name)
            now = int(_dt.datetime.now(_dt.timezone.utc).timestamp() * 1000)
            data = ri.cells_hfile(cells, schema, base_file_name=name, created_ms=now)
            # what the next lookup and append take from it, known already: decoding a new base of
            # every key of its group cost the next commit more than its own work
            _BASES.put((self.storage.uri, self._rel(name)), ({k: v for k, v in cells if v}, schema))
            sizes = [(n, self.names().get(n, 0)) for n in merged]
            op = CompactionOperation.for_slice(PARTITION, fid, base_t, (base, 0) if base else None, sizes)
            stat = WriteStat(file_id=fid, path=f"{PARTITION}/{name}", partition_path=PARTITION, prev_commit=base_t,
                             num_writes=len(cells), total_write_bytes=len(data), file_size=len(data),
                             compacted_log_files=len(merged), compacted_log_bytes=sum(s for _, s in sizes))
            out.append((op, stat, self._rel(name), data))
        return out

    def _compacted_cells(self, file_id: str, base: str | None, logs: tuple[str, ...], schema: str,
                         name: str) -> list[tuple[str, bytes]]:
        """The cells of a group's new base: the old base's and the logs' as they are (an entry
        written in the base's schema needs no encoding again), a deleted key left out; only
        entries of another schema are decoded and encoded anew. (A carried cell keeps the
        ``_hoodie_file_name`` it was written with; the metadata table populates no meta fields,
        so no reader looks at it.)"""
        cells = dict(self._base_cells(base)[0]) if base else {}
        overlay = self._overlay(file_id, logs).merged()
        other: dict[str | None, list[tuple[bytes, bytes]]] = {}
        for k, cell in overlay.items():
            cells.pop(k, None)
            if cell is None:
                continue
            if cell[1] == schema:
                cells[k] = cell[0]
            else:
                other.setdefault(cell[1], []).append((k.encode(), cell[0]))
        if other:
            cells.update(ri.encode_cells(self._decode(other), schema, file_name=name))
        return sorted(cells.items())

    def wrote(self, partition: str, name: str, size: int) -> None:
        self.names()[name] = size
        self._by_group = None

    def undo_compaction(self, t: str) -> None:
        """Delete the bases a compaction at ``t`` that never completed wrote."""
        for n in list(self.names()):
            if n.endswith(".hfile") and _base_time(n) == t:
                self.delete(PARTITION, n)

    def delete_before(self, old: set[str]) -> None:
        """Delete the files of the instants ``old`` (slices no reader needs any more)."""
        for n in list(self.names()):
            tn = _base_time(n) if n.endswith(".hfile") else (p.instant_time if (p := parse_log_file(n)) else None)
            if tn is not None and tn in old:
                self.delete(PARTITION, n)


def kept_by(config: TableConfig) -> bool:
    """Does the table keep the record index (``hoodie.table.metadata.partitions`` names it)?"""
    return PARTITION in {n.strip() for n in config.raw.get("hoodie.table.metadata.partitions", "").split(",")}


def file_group_count(entries: int, min_groups: int = MIN_FILE_GROUPS) -> int:
    """How many file groups a new index gets for ``entries`` keys (Hudi's estimate, at least
    ``min_groups``: ``hoodie.metadata.record.index.min.filegroup.count``)."""
    return max(min_groups, math.ceil(entries / _ENTRIES_PER_GROUP))


def initialize(storage: Storage, mdt_dir: str, base_schema: Mapping[str, Any], t: str,
               entries: Mapping[str, ri.Location], min_groups: int = MIN_FILE_GROUPS) -> list[WriteStat]:
    """Create the partition's file groups at ``t``, each opened with an empty delete block (as
    Hudi's ``initializeFileGroups``) and, when ``entries`` map to it, a base HFile of them (a
    table that has rows: their keys, as Hudi's initialization bulk-inserts them). Returns the
    base files' write stats for the initializing deltacommit."""
    schema = _schema_text(base_schema)
    n = file_group_count(len(entries), min_groups)
    start_partition(storage, mdt_dir, PARTITION, t, (ri.file_group_id(i) for i in range(n)))
    keys = sorted(entries)
    ix = ri.file_group_indexes(pa.array(keys, pa.string()), n) if keys else np.zeros(0, np.int64)
    now = int(_dt.datetime.now(_dt.timezone.utc).timestamp() * 1000)
    out = []
    for i in range(n):
        fid = ri.file_group_id(i)
        mine = {keys[j]: entries[keys[j]] for j in np.flatnonzero(ix == i)}
        if not mine:
            continue
        name = ri.base_file_name(fid, _WRITE_TOKEN, t)
        data = ri.encode_hfile(mine, schema, base_file_name=name, created_ms=now)
        out.append(write_base_file(storage, mdt_dir, PARTITION, fid, name, data, len(mine)))
    return out


def entries_of(storage: Storage, config: TableConfig, snapshot: Any) -> dict[str, ri.Location]:
    """Every live key of a table's latest slices (``snapshot``: its :class:`.snapshot.Snapshot`)
    and where it is: the base file's keys, then each log's data and deletes in order. A key's
    instant is its slice's base time, or the log's that wrote it."""
    out: dict[str, ri.Location] = {}
    for fs in snapshot.files():
        live: dict[str, str] = {}
        if fs.has_base:
            live.update(dict.fromkeys(_keys_of_base(storage, config, fs.path).to_pylist(), fs.instant_time))
        for lg in fs.logs:
            placed, gone = _log_keys(storage, config, lg.path)
            for k in gone.to_pylist():
                live.pop(k, None)
            live.update(dict.fromkeys(placed.to_pylist(), lg.instant_time))
        out.update({k: ri.Location(fs.partition, fs.file_id, t) for k, t in live.items()})
    return out


# -- what an action changes -----------------------------------------------------------------------
def remember_keys(storage: Storage, rel: str, inserted: pa.Array, deleted: pa.Array | None = None) -> None:
    """A writer that wrote the data file ``rel`` hands over the keys it inserted into that
    file's group and the keys it deleted from it: the metadata update of its commit (under the
    table lock) then reads nothing back (in the same process)."""
    _HANDED.put((storage.uri, rel), (inserted, deleted if deleted is not None else pa.array([], pa.string())))


def changes_of_write(storage: Storage, config: TableConfig, t: str, meta: CommitMetadata,
                     lookup: Any) -> IndexChanges:
    """The record-index changes of a write at ``t`` (commit, deltacommit, replace commit).
    ``lookup(keys)``: where the index puts keys now (for a log file's keys, which a writer
    appends without knowing whether the group held them)."""
    out = IndexChanges()
    check: list[tuple[str, str, str, bool]] = []  # (key, partition, file id, placed?) to check against the index
    if meta.compacted or meta.operation_type.upper() in ("COMPACT", "LOG_COMPACT"):
        # a compaction keeps every key in its group; but a log's delete that lost to a stored
        # row newer by its ordering value took the key out of the index (as Hudi's append
        # handle does), and the key is still there: the compacted base puts it back
        for s in meta.all_stats():
            if s.path and s.file_id and not s.is_log:
                rel = paths.data_file(s.path, source=f"{t}: commit metadata")
                check += [(k, s.partition_path, s.file_id, True)
                          for k in _keys_of_base(storage, config, rel).to_pylist()]
        return _checked(out, check, lookup, t)
    for s in meta.all_stats():
        if not s.path or not s.file_id:
            continue
        rel = paths.data_file(s.path, source=f"{t}: commit metadata")
        location = ri.Location(s.partition_path, s.file_id, t)
        handed = _HANDED.get((storage.uri, rel))
        if s.is_log or ".log." in rel.rsplit("/", 1)[-1]:
            placed, gone = handed if handed is not None else _log_keys(storage, config, rel)
            check += [(k, s.partition_path, s.file_id, True) for k in placed.to_pylist()]
            check += [(k, s.partition_path, s.file_id, False) for k in gone.to_pylist()]
            continue
        if handed is not None:
            placed, gone = handed
        else:
            placed, gone = _base_changes(storage, config, s, rel)
        out.upserts.update(dict.fromkeys(placed.to_pylist(), location))
        out.deletes.update(gone.to_pylist())
    if isinstance(meta, ReplaceCommitMetadata) and meta.operation_type.upper() != "CLUSTER":
        # an overwrite retires whole groups, or (a bucket's group) starts a new slice of one:
        # their keys go unless the commit placed them anew
        retired = {(p, f) for p, ids in meta.partition_to_replace_file_ids.items() for f in ids if f}
        retired |= {(s.partition_path, s.file_id) for s in meta.all_stats() if s.file_id}
        for part, fid in sorted(retired):
            check += [(k, part, fid, False) for k in _group_keys(storage, config, part, fid)]
    return _checked(out, check, lookup, t)


def _checked(out: IndexChanges, check: list[tuple[str, str, str, bool]], lookup: Any, t: str) -> IndexChanges:
    """``out`` with the keys to ``check`` against the index: a key placed in a group the index
    does not put it in is placed there; a key deleted from the group the index puts it in is
    deleted (from any other group: it lives on there)."""
    if check:
        found = lookup([k for k, _, _, _ in check])
        for k, part, fid, placed in check:
            loc = found.get(k)
            here = loc is not None and (loc.partition, loc.file_id) == (part, fid)
            if placed and not here:
                out.upserts[k] = ri.Location(part, fid, t)
            elif not placed and here:
                out.deletes.add(k)
    out.deletes -= out.upserts.keys()
    return out


def _keys_of_base(storage: Storage, config: TableConfig, rel: str) -> pa.Array:
    with storage.fs.open_input_file(storage.abs(rel)) as f:
        pf = open_parquet(f, rel)
        if config.populate_meta_fields and "_hoodie_record_key" in pf.schema_arrow.names:
            keys = pf.read(columns=["_hoodie_record_key"]).column(0)
        else:
            keys = stored_keys(pf.read(columns=list(config.record_key)), config)
    keys = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
    return keys.cast(pa.string())


def _base_changes(storage: Storage, config: TableConfig, s: WriteStat, rel: str) -> tuple[pa.Array, pa.Array]:
    """(inserted, deleted) keys of a base file written elsewhere: its keys against those of
    the base it replaced."""
    new = _keys_of_base(storage, config, rel)
    if s.creates_file_group or not s.prev_base_file:
        return new, pa.array([], pa.string())
    old_rel = paths.data_file(f"{s.partition_path}/{s.prev_base_file}" if s.partition_path else s.prev_base_file,
                              source="commit metadata")
    old = _keys_of_base(storage, config, old_rel)
    inserted = new.filter(pc.invert(pc.is_in(new, value_set=old)))
    deleted = old.filter(pc.invert(pc.is_in(old, value_set=new))) if s.num_deletes else pa.array([], pa.string())
    return inserted, deleted


def _log_keys(storage: Storage, config: TableConfig, rel: str) -> tuple[pa.Array, pa.Array]:
    """(keys written, keys deleted) by a log file's data and delete blocks."""
    placed: list[pa.Array] = []
    gone: list[pa.Array] = []
    for b in read_log_blocks(storage.read_bytes(rel), source=rel, columns=key_columns(config)):
        if b.records is None:
            continue
        if b.block_type == BlockType.DELETE:
            gone.append(b.records.column("record_key").combine_chunks().cast(pa.string()))
        elif b.block_type in (BlockType.AVRO_DATA, BlockType.PARQUET_DATA, BlockType.HFILE_DATA):
            placed.append(stored_keys(b.records, config))
    return (pa.concat_arrays(placed) if placed else pa.array([], pa.string()),
            pa.concat_arrays(gone) if gone else pa.array([], pa.string()))


def _group_keys(storage: Storage, config: TableConfig, partition: str, file_id: str) -> list[str]:
    """Every key a data file group's files name, from a listing of its partition (a superset of
    its live keys: the caller checks each against the index)."""
    out: set[str] = set()
    partition = paths.partition(partition, source="commit metadata: partitionToReplaceFileIds")
    for e in storage.list_dir(partition, files_only=True):
        name = e.path.rsplit("/", 1)[-1]
        rel = layout.data_file_path(partition, name)
        if (d := layout.parse_data_file(name)) is not None and d.file_id == file_id:
            out.update(_keys_of_base(storage, config, rel).to_pylist())
        elif (lg := parse_log_file(name)) is not None and lg.file_id == file_id:
            placed, gone = _log_keys(storage, config, rel)
            out.update(placed.to_pylist())
            out.update(gone.to_pylist())
    return sorted(out)


#: decoded record-index files, by (table URI, path)
_BASES: BoundedCache[tuple[str, str], tuple[dict[str, bytes], str]] = BoundedCache(64)
_LOGS: BoundedCache[tuple[str, str], list[RawChanges]] = BoundedCache(1024)
#: the record schema new files of a group declare, by (table URI, the group's base file or "")
_SCHEMAS: BoundedCache[tuple[str, str], str] = BoundedCache(256)
#: keys handed over by writers, by (table URI, data file path)
_HANDED: BoundedCache[tuple[str, str], tuple[pa.Array, pa.Array]] = BoundedCache(4096)


def forget_decoded() -> None:
    for cache in (_BASES, _LOGS, _HANDED, _SCHEMAS):
        cache.clear()
