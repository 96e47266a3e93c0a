"""The metadata table's data-skipping partitions, ``column_stats`` and ``partition_stats``, kept
beside its ``files`` partition by every action.

Hudi's readers skip files and partitions with them, and a Hudi writer sharing the table trusts
them: a partition listed in ``hoodie.table.metadata.partitions`` must hold an entry for every
base file our writers add, or readers that use it skip a file holding matching rows. So every
deltacommit that records new base files (:mod:`.metadata_files`) also writes, in a log file of
the file group each key maps to, the files' column stats (from their Parquet footers, as
``HoodieTableMetadataUtil`` reads them) and the stats of the partitions they went to (the merge
of the partition's latest base files, ``isTightBound``, as Hudi computes them when the
column_stats partition exists); a clean writes tombstones for the files it deleted. Log files
get no entry: Hudi's readers keep every file the index does not name, so a slice with a log is
never skipped wrongly.

The file groups follow the ``files`` partition's life: the same deltacommit, compaction (every
group at the same time, as Hudi's metadata compaction plan covers all of them), rollback and
cleaning of old slices. The byte formats are :mod:`multiwriter.format.column_stats`; this module
holds what the records mean and where they go.
"""
from __future__ import annotations

import datetime as _dt
import json
import logging
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow.parquet as pq

from ..cache import BoundedCache
from ..errors import TableFormatError
from ..format import column_stats as cs
from ..format import hfile, paths
from ..format.layout import parse_data_file
from ..format.log_file import BlockType, HeaderKey, encode_block, parse_log_file
from ..s3_store import REQUESTS
from ..storage import Storage, safe_relative
from .compaction_plan import CompactionOperation
from .metadata import CommitMetadata, WriteStat

log = logging.getLogger(__name__)

KEPT = (cs.COLUMN_STATS, cs.PARTITION_STATS)
INDEX_DEFS_KEY = "hoodie.table.index.defs.path"
INDEX_PARTITIONS_KEY = "hoodie.table.metadata.partitions"
_WRITE_TOKEN = "0-0-0"
#: the time before every instant (a group's slice before its first base)
_FIRST_TIME = "00000000000000000"
_BASE_EXTENSIONS = (".parquet",)
#: Hudi's footer entries of a base file's key range (``HoodieAvroWriteSupport``)
_MIN_KEY, _MAX_KEY = b"hoodie_min_record_key", b"hoodie_max_record_key"

#: a slice: (base file name or None, its instant time, log file names in completion order)
Slice = tuple[str | None, str, list[str]]


def kept(listed: Iterable[str]) -> tuple[str, ...]:
    """The data-skipping partitions among the metadata partitions ``listed``."""
    names = set(listed)
    return tuple(p for p in KEPT if p in names)


@dataclass
class StatsPartitions:
    """The file groups of the kept data-skipping partitions of one metadata table.

    ``done``: requested time -> (action, completion time) of the metadata timeline's completed
    instants, as :class:`.metadata_files.MetadataTable` reads them (a log counts only once its
    deltacommit completed). ``base_schema``: the files partition's record schema, widened here to
    carry column stats when a group has no base file yet whose schema to reuse."""

    storage: Storage
    mdt_dir: str
    partitions: tuple[str, ...]
    table_version: int
    base_schema: Mapping[str, Any]
    _names: dict[str, dict[str, int]] = field(default_factory=dict)  # partition -> file name -> size

    # -- listing -------------------------------------------------------------------------
    def _rel(self, partition: str, name: str = "") -> str:
        return f"{self.mdt_dir}/{partition}" + (f"/{name}" if name else "")

    def names(self, partition: str) -> dict[str, int]:
        """The partition's file names and sizes, listed once by this object."""
        if partition not in self._names:
            self._names[partition] = {e.path.rsplit("/", 1)[-1]: e.size
                                      for e in self.storage.list_dir(self._rel(partition), files_only=True)}
        return self._names[partition]

    def forget(self) -> None:
        self._names.clear()

    def groups(self, partition: str) -> list[str]:
        """The partition's file group ids (Hudi's readers take the groups listed)."""
        ids = {_group_of(n) for n in self.names(partition)}
        return sorted(i for i in ids if i is not None and i.startswith(cs.FILE_ID_PREFIX[partition]))

    def slice(self, partition: str, file_id: str, done: Mapping[str, tuple[str, str]]) -> Slice:
        return latest_slice_of(self.names(partition), file_id, done)

    # -- reading -------------------------------------------------------------------------
    def _decoded(self, partition: str, name: str) -> list[cs.StatsRecord]:
        rel = self._rel(partition, name)
        key = (self.storage.uri, rel)
        hit = _DECODED.get(key)
        if hit is not None:
            return hit
        data = self.storage.read_bytes(rel)
        if name.endswith(".hfile"):
            recs = cs.decode_hfile(data, source=rel)
        else:
            recs = [r for _, block in cs.decode_log_file(data, source=rel) for r in block]
        _DECODED.put(key, recs)
        return recs

    def read(self, partition: str, done: Mapping[str, tuple[str, str]]) -> dict[str, cs.ColumnStats]:
        """Key -> merged stats of the partition's latest slices (tombstones kept, marked)."""
        out: dict[str, cs.ColumnStats] = {}
        for fid in self.groups(partition):
            base, _, logs = self.slice(partition, fid, done)
            out.update(self._merged(partition, fid, tuple(([base] if base else []) + logs)))
        return out

    def _merged(self, partition: str, file_id: str, files: tuple[str, ...]) -> dict[str, cs.ColumnStats]:
        """The merge of a slice's files, kept per group: the next read of a slice that only
        grew by a log merges that log alone (every deltacommit reads the index)."""
        key = (self.storage.uri, partition, file_id)
        hit = _MERGED.get(key)
        if hit is not None and files[:len(hit[0])] == hit[0]:
            out = dict(hit[1])
            new = files[len(hit[0]):]
        else:
            out, new = {}, files
        for n in new:
            for r in self._decoded(partition, n):
                out[r.key] = cs.merge_records(out[r.key], r.stats) if r.key in out else r.stats
        _MERGED.put(key, (files, out))
        return out

    def _schema(self, partition: str, file_id: str, done: Mapping[str, tuple[str, str]]) -> dict[str, Any]:
        """The record schema a new file of the group declares: its base file's (Hudi's whole
        ``HoodieMetadataRecord``, when Hudi wrote it), else ours with the column stats field."""
        base, _, _ = self.slice(partition, file_id, done)
        if base is None:
            return cs.record_schema(self.base_schema, self.table_version)
        key = (self.storage.uri, self._rel(partition, base))
        known = _SCHEMAS.get(key)
        if known is None:  # a base never changes: its schema is read once per process
            known = cs.record_schema(self.base_schema, self.table_version)
            found = hfile.read(self.storage.read_bytes(key[1]), source=base).file_info.get(b"schema")
            if found:
                try:
                    schema = json.loads(found)
                    cs.record_schema(schema, self.table_version)  # it must carry the stats field
                    known = schema
                except (ValueError, TypeError):
                    pass
            _SCHEMAS.put(key, known)
        return known

    # -- writing -------------------------------------------------------------------------
    def append(self, t: str, records: list[cs.StatsRecord], done: Mapping[str, tuple[str, str]],
               token: str = _WRITE_TOKEN, sent: list[Future] | None = None) -> list[WriteStat]:
        """Write ``records`` (the stats of one deltacommit at ``t``) into a log file of each
        group they map to; returns the log files' write stats for the deltacommit. ``sent``: the
        writes go out side by side on the request threads (an object store), their futures
        added there for the caller to wait for."""
        stats = []
        for partition in self.partitions:
            mine = [r for r in records if r.partition == partition]
            groups = self.groups(partition)
            if not mine or not groups:
                continue
            by_group: dict[str, list[cs.StatsRecord]] = {}
            for r in mine:
                by_group.setdefault(groups[cs.file_group_index(r.key, len(groups))], []).append(r)
            for fid, recs in sorted(by_group.items()):
                name = f".{fid}_{t}.log.1_{token}"
                kept = _deduped(recs)
                block = cs.encode_log_block(kept, self._schema(partition, fid, done), t)
                if sent is None:
                    self.storage.write_bytes(self._rel(partition, name), block)
                else:
                    sent.append(REQUESTS.get().submit(self.storage.write_bytes, self._rel(partition, name), block))
                self.names(partition)[name] = len(block)
                # what the next read decodes from it: known already
                _DECODED.put((self.storage.uri, self._rel(partition, name)), kept)
                stats.append(WriteStat(file_id=fid, path=f"{partition}/{name}", partition_path=partition, prev_commit=t,
                                       num_writes=len(recs), num_update_writes=len(recs), total_write_bytes=len(block),
                                       file_size=len(block), log_version=1, log_files=(name,)))
        return stats

    def logs_of(self, t: str) -> list[tuple[str, str]]:
        """(partition, log file name) of every log the deltacommit at ``t`` wrote (listed anew)."""
        self.forget()
        return sorted((p, n) for p in self.partitions for n in self.names(p)
                      if (x := parse_log_file(n)) is not None and x.instant_time == t and _group_of(n) in self.groups(p))

    def delete(self, partition: str, name: str) -> None:
        self.storage.delete(self._rel(partition, name))
        self.names(partition).pop(name, None)
        _DECODED.pop((self.storage.uri, self._rel(partition, name)))

    def compact(self, t: str, done: Mapping[str, tuple[str, str]]
                ) -> list[tuple[CompactionOperation, WriteStat, str, bytes]]:
        """The new base of every group whose slice holds logs completed before ``t``: (plan
        operation, write stat, path, bytes), written by the caller's compaction at ``t``.
        Tombstones are left out of a base, as Hudi's compaction drops deleted records."""
        out = []
        for partition in self.partitions:
            for fid in self.groups(partition):
                base, base_t, logs = self.slice(partition, fid, done)
                merged = [n for n in logs if (p := parse_log_file(n)) is not None and done[p.instant_time][1] < t]
                if not merged:
                    continue
                schema = self._schema(partition, fid, done)
                name = f"{fid}_{_WRITE_TOKEN}_{t}.hfile"
                cells = self._compacted_cells(partition, base, merged, schema, name)
                now = int(_dt.datetime.now(_dt.timezone.utc).timestamp() * 1000)
                data = cs.cells_hfile(cells, schema, base=True, created_ms=now)
                recs = cells
                sizes = [(n, self.names(partition).get(n, 0)) for n in merged]
                op = CompactionOperation.for_slice(partition, fid, base_t, (base, 0) if base else None, sizes)
                stat = WriteStat(file_id=fid, path=f"{partition}/{name}", partition_path=partition, prev_commit=base_t,
                                 num_writes=len(recs), total_write_bytes=len(data), file_size=len(data),
                                 compacted_log_files=len(merged), compacted_log_bytes=sum(s for _, s in sizes))
                out.append((op, stat, self._rel(partition, name), data))
        return out

    def _compacted_cells(self, partition: str, base: str | None, logs: list[str], schema: dict[str, Any],
                         name: str) -> list[tuple[str, bytes]]:
        """The cells of a group's new base: each key the logs wrote, merged and encoded anew (a
        tombstone drops it, as Hudi's compaction drops deleted records); every other key of the
        old base carried over as it is, bytes and all: re-encoding an index that mostly did not
        change is most of a compaction's time. (A carried cell keeps the ``_hoodie_file_name``
        of the base it was compacted into before; the metadata table populates no meta fields,
        so no reader looks at it.)"""
        old = {r.key: r.stats for r in self._decoded(partition, base)} if base else {}
        changed: dict[str, cs.ColumnStats] = {}
        for n in logs:  # in order, from the base's value: the merge rule is not associative
            for r in self._decoded(partition, n):
                prev = changed[r.key] if r.key in changed else old.get(r.key)
                changed[r.key] = cs.merge_records(prev, r.stats) if prev is not None else r.stats
        rtype = cs.RECORD_TYPE[partition]
        # tombstones go (Hudi's compaction drops deleted records), but a partition's: it says the
        # partition has a column without a range, which later widenings must not narrow
        keep_deleted = partition == cs.PARTITION_STATS
        fresh = [cs.StatsRecord(k, rtype, v) for k, v in changed.items() if keep_deleted or not v.is_deleted]
        cells = cs.encode_cells(fresh, schema, file_name=name)
        if base:
            raw = hfile.read(self.storage.read_bytes(self._rel(partition, base)), source=base)
            cells += [(k.decode(), v) for k, v in raw.cells if v and k.decode() not in changed]
        return cells

    def wrote(self, partition: str, name: str, size: int) -> None:
        self.names(partition)[name] = size

    def undo_compaction(self, t: str) -> None:
        """Delete the bases a compaction at ``t`` that never completed wrote."""
        for partition in self.partitions:
            for n in list(self.names(partition)):
                if n.endswith(".hfile") and _base_time(n) == t:
                    self.delete(partition, n)

    def delete_before(self, old: set[str]) -> None:
        """Delete the files of the instants ``old`` (slices no reader needs any more)."""
        for partition in self.partitions:
            for n in list(self.names(partition)):
                tn = _base_time(n) if n.endswith(".hfile") else (p.instant_time if (p := parse_log_file(n)) else None)
                if tn is not None and tn in old:
                    self.delete(partition, n)


def latest_slice_of(names: Iterable[str], file_id: str, done: Mapping[str, tuple[str, str]]) -> Slice:
    """The latest slice of a metadata file group among the file ``names`` of its partition:
    the newest base whose instant completed, and the logs whose deltacommit completed at or
    after that base's time, in completion order (Hudi's slicing rule, as hudi-rs applies it).
    ``done``: requested time -> (action, completion time) of the completed instants."""
    bases, logs = [], []
    for n in names:
        if _group_of(n) != file_id:
            continue
        if n.endswith(".hfile"):
            t = _base_time(n)
            if t in done:
                bases.append((t, n))
        elif (p := parse_log_file(n)) is not None and p.instant_time in done:
            logs.append((done[p.instant_time][1], p.instant_time, p.version, n))
    base_t, base = max(bases) if bases else (_FIRST_TIME, None)
    return base, base_t, [x[3] for x in sorted(x for x in logs if base is None or x[0] >= base_t)]


# -- starting the partitions ------------------------------------------------------------------
#: a delete block's content with no key: its version (3), then the length (1) of an Avro
#: ``HoodieDeleteRecordList`` of no record (one zero byte)
_EMPTY_DELETE = b"\x00\x00\x00\x03\x00\x00\x00\x01\x00"


def opening_log(t: str) -> bytes:
    """The log file Hudi's ``initializeFileGroups`` opens each metadata file group with: one
    delete block of no key at the initialization time (readers and compaction find nothing)."""
    return encode_block(BlockType.DELETE, {HeaderKey.INSTANT_TIME: t}, _EMPTY_DELETE)


def start_partition(storage: Storage, mdt_dir: str, partition: str, t: str, file_ids: Iterable[str]) -> None:
    """A metadata partition started at ``t``: what an initialization that died part way left
    goes, then its partition metadata and each group's :func:`opening_log`."""
    storage.delete_dir(f"{mdt_dir}/{partition}")
    storage.write_bytes(f"{mdt_dir}/{partition}/.hoodie_partition_metadata",
                        f"#partition metadata\ncommitTime={t}\npartitionDepth=1\n".encode())
    for fid in file_ids:
        storage.write_bytes(f"{mdt_dir}/{partition}/.{fid}_{t}.log.1_{_WRITE_TOKEN}", opening_log(t))


def initialize(storage: Storage, mdt_dir: str, partitions: tuple[str, ...], table_version: int,
               base_schema: Mapping[str, Any], t: str, records: list[cs.StatsRecord]) -> list[WriteStat]:
    """Create the file groups of ``partitions`` at ``t`` (Hudi's default counts), each opened
    with :func:`opening_log` and, when ``records`` map to it, a base HFile holding them (a
    table that has files: their stats, as Hudi's initialization bulk-inserts them). Returns the
    files' write stats for the initializing deltacommit."""
    schema = cs.record_schema(base_schema, table_version)
    now = int(_dt.datetime.now(_dt.timezone.utc).timestamp() * 1000)
    out = []
    for partition in partitions:
        n = cs.DEFAULT_FILE_GROUPS[partition]
        start_partition(storage, mdt_dir, partition, t, (cs.file_group_id(partition, i) for i in range(n)))
        by_group: dict[int, list[cs.StatsRecord]] = {}
        for r in records:
            if r.partition == partition:
                by_group.setdefault(cs.file_group_index(r.key, n), []).append(r)
        for i in range(n):
            fid = cs.file_group_id(partition, i)
            recs = _deduped(by_group.get(i, []))
            if not recs:
                continue
            name = f"{fid}_{_WRITE_TOKEN}_{t}.hfile"
            data = cs.encode_hfile(recs, schema, base=True, created_ms=now)
            out.append(write_base_file(storage, mdt_dir, partition, fid, name, data, len(recs)))
    return out


def write_base_file(storage: Storage, mdt_dir: str, partition: str, file_id: str, name: str, data: bytes,
                    records: int) -> WriteStat:
    """Write one base HFile of a metadata partition's file group and return its write stat
    (the commit of the partition's initialization or compaction names it)."""
    storage.write_bytes(f"{mdt_dir}/{partition}/{name}", data)
    return WriteStat(file_id=file_id, path=f"{partition}/{name}", partition_path=partition, num_writes=records,
                     num_inserts=records, total_write_bytes=len(data), file_size=len(data))


def records_of_files(storage: Storage, files: Iterable[tuple[str, str]], partitions: tuple[str, ...],
                     table_version: int, columns: list[str] | None) -> list[cs.StatsRecord]:
    """The records of an index started on a table that has files: the stats of each
    (partition, base file path) given (the latest slices' base files) and of their partitions."""
    version = cs.index_version(table_version)
    by_partition: dict[str, list[cs.ColumnStats]] = {}
    for part, rel in files:
        by_partition.setdefault(part, []).extend(file_stats(storage, rel, rel.rsplit("/", 1)[-1], columns, version))
    out: list[cs.StatsRecord] = []
    if cs.COLUMN_STATS in partitions:
        out += [cs.column_stats_record(p, st) for p, sts in by_partition.items() for st in sts]
    if cs.PARTITION_STATS in partitions:
        tight = cs.COLUMN_STATS in partitions
        out += [cs.partition_stats_record(st) for p, sts in by_partition.items()
                for st in cs.partition_stats(p, sts, tight=tight)]
    return out


# -- what an action adds ------------------------------------------------------------------------
def records_of_write(storage: Storage, meta: CommitMetadata, partitions: tuple[str, ...], table_version: int,
                     columns: list[str] | None, current: Mapping[str, cs.ColumnStats] | None = None
                     ) -> list[cs.StatsRecord]:
    """The stats records of a write (commit, deltacommit, replace commit, compaction): the
    column stats of each new base file, from its footer, and with ``partition_stats`` the
    stats of the partitions it wrote over its new files, as a widening (``isTightBound``
    false: readers merge it into what the partition had, Hudi's rule for stats that are not
    recomputed over the whole partition). Recomputing each written partition's stats over all
    its latest files, as Hudi does when it keeps column stats, costs a merge of every file's
    stats on every commit, under the lock; a widened range only ever keeps more. ``current``:
    the partition stats the index holds (by key); a partition's column whose range the commit
    does not widen, and that gains no nulls it lacked, gets no record (its counts then stay
    below the truth: readers skip by ranges and by whether nulls or values exist at all, which
    stay exact)."""
    version = cs.index_version(table_version)
    new: dict[str, list[cs.ColumnStats]] = {}
    for s in meta.all_stats():
        if not s.path or not s.path.endswith(_BASE_EXTENSIONS):
            continue
        part, _, name = paths.data_file(s.path, source="commit metadata").rpartition("/")
        new.setdefault(part, []).extend(file_stats(storage, s.path, name, columns, version))
    out: list[cs.StatsRecord] = []
    if cs.COLUMN_STATS in partitions:
        out += [cs.column_stats_record(p, st) for p, sts in new.items() for st in sts]
    if cs.PARTITION_STATS in partitions:
        for p, sts in new.items():
            open_ended = {st.column for st in sts if st.is_deleted}
            # a partition with a file of no range in a column has none either: a tombstone,
            # which later commits keep (:func:`changes`)
            out += [rec for c in sorted(open_ended) for rec in cs.deleted_partition(p, [c], version=version)]
            for st in cs.partition_stats(p, sts, tight=False):
                rec = cs.partition_stats_record(st)
                if st.column not in open_ended and (current is None or changes(current.get(rec.key), st)):
                    out.append(rec)
    return out


def changes(cur: cs.ColumnStats | None, new: cs.ColumnStats) -> bool:
    """Does merging ``new`` into ``cur`` change what a reader skips by: the range, whether the
    column has nulls, whether it has values?"""
    if cur is None:
        return True
    if cur.is_deleted:  # the partition has a file with no range in this column: it keeps none
        return False
    if new.min is not None and (cur.min is None or cs._order_key(new.min) < cs._order_key(cur.min)):
        return True
    if new.max is not None and (cur.max is None or cs._order_key(new.max) > cs._order_key(cur.max)):
        return True
    return bool(new.null_count) and not cur.null_count


def file_stats(storage: Storage, rel: str, name: str, columns: list[str] | None, version: int) -> list[cs.ColumnStats]:
    """A base file's column stats, from its footer (one ranged read; cached per file)."""
    key = (storage.uri, rel)
    hit = _FOOTER_STATS.get(key)
    if hit is None:
        with storage.fs.open_input_file(storage.abs(rel)) as f:
            meta = pq.read_metadata(f)
        hit = footer_stats(meta, rel, version)
        _FOOTER_STATS.put(key, hit)
    return hit if columns is None else [s for s in hit if s.column in set(columns)]


def remember_footer(storage: Storage, rel: str, metadata: Any, version: int) -> None:
    """A writer holding a new file's footer hands its stats over: the metadata update of its
    commit, under the table lock, then reads no footer (in the same process)."""
    stats = footer_stats(metadata, rel, version)
    _FOOTER_STATS.put((storage.uri, rel), stats)


def index_version_of(config: Any) -> int | None:
    """The column-stats index version a table's files are indexed with, None when the table
    keeps no column stats (``config``: its :class:`~.properties.TableConfig`)."""
    listed = config.raw.get("hoodie.table.metadata.partitions", "").split(",")
    return cs.index_version(config.version) if cs.COLUMN_STATS in kept(n.strip() for n in listed) else None


def footer_stats(meta: Any, rel: str, version: int) -> list[cs.ColumnStats]:
    """A base file's column stats from its footer (``meta``, pyarrow's ``FileMetaData``).

    Our writers keep no Parquet statistics for the meta columns whose range is known otherwise
    (the record key's is in Hudi's own footer entries, the partition path is the file's
    partition): their stats are filled in from those, so that they do not read as all null.

    A column some of whose row groups hold values without a min and max (Parquet leaves them
    out for values over 4 KB) has no range a reader could trust: Hudi's merge of row groups
    would take the others' range, too narrow, and a reader would skip a file holding the
    value. Such a column gets a tombstone instead (no range: every reader keeps the file)."""
    name = rel.rsplit("/", 1)[-1]
    known = _known_ranges(meta, rel)
    open_ended = _unbounded(meta)
    out = []
    for s in cs.parquet_stats(meta, name, None, version=version):
        rng = known.get(s.column)
        if rng is not None and s.min is None and s.value_count:
            s = replace(s, min=rng[0], max=rng[1], null_count=0,
                        wrapper=s.wrapper or ("StringWrapper" if s.value_type is None else None))
        elif s.column in open_ended:
            s = replace(s, min=None, max=None, is_deleted=True)
        out.append(s)
    return out


def _unbounded(meta: Any) -> set[str]:
    """The columns with a row group that holds values but no min and max."""
    out = set()
    for g in range(meta.num_row_groups):
        rg = meta.row_group(g)
        for i in range(meta.num_columns):
            chunk = rg.column(i)
            st = chunk.statistics
            if st is not None and st.has_min_max:
                continue
            if st is None or not st.has_null_count or st.null_count < chunk.num_values:
                out.add(chunk.path_in_schema)
    return out


def _known_ranges(meta: Any, rel: str) -> dict[str, tuple[str, str]]:
    md = meta.metadata or {}
    out = {}
    lo, hi = md.get(_MIN_KEY), md.get(_MAX_KEY)
    if lo is not None and hi is not None:  # a file with meta values (virtual keys: none, and no entries)
        out["_hoodie_record_key"] = (lo.decode(), hi.decode())
        partition = rel.rpartition("/")[0]
        out["_hoodie_partition_path"] = (partition, partition)
    return out


def tombstones(deleted: Mapping[str, Iterable[str]], current: Mapping[str, cs.ColumnStats],
               partitions: tuple[str, ...], version: int) -> list[cs.StatsRecord]:
    """Column-stats tombstones for the base files ``deleted`` (partition -> file names) that
    the index holds, one per column it holds for them (``getColumnStatsRecords`` with
    ``isDeleted``)."""
    if cs.COLUMN_STATS not in partitions:
        return []
    columns: dict[str, set[str]] = {}
    for st in current.values():
        if not st.is_deleted:
            columns.setdefault(st.file_name, set()).add(st.column)
    out = []
    for part, names in deleted.items():
        for n in names:
            if n in columns:
                out += cs.deleted_file(part, n, sorted(columns[n]), version=version)
    return out


def indexed_columns(storage: Storage, raw: Mapping[str, str], schema_json: str | None) -> list[str] | None:
    """The columns the index keeps: its definition's ``sourceFields`` (table version 9), else
    Hudi's default over the table's Avro schema, else None (every column of the footer)."""
    rel = raw.get(INDEX_DEFS_KEY)
    if rel and rel.startswith(".hoodie/"):
        try:
            doc = json.loads(storage.read_bytes(safe_relative(rel, source="hoodie.properties")))
            fields = doc["indexDefinitions"][cs.COLUMN_STATS]["sourceFields"]
            if isinstance(fields, list) and all(isinstance(f, str) for f in fields):
                meta = [c for c in cs.ALWAYS_INDEXED if c not in fields and raw.get("hoodie.populate.meta.fields",
                                                                                    "true") != "false"]
                return [*meta, *fields]
        except (FileNotFoundError, KeyError, TypeError, ValueError):
            pass
    if schema_json:
        try:
            return cs.columns_to_index(json.loads(schema_json),
                                       meta_fields=raw.get("hoodie.populate.meta.fields", "true") != "false")
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise TableFormatError(f"the table schema in the commit metadata does not parse ({e})") from e
    return None


def new_base_files(meta: CommitMetadata) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for s in meta.all_stats():
        if s.path and s.path.endswith(_BASE_EXTENSIONS):
            part, _, name = s.path.rpartition("/")
            out.setdefault(part, []).append(name)
    return out


# -- helpers ------------------------------------------------------------------------------------
def _deduped(recs: list[cs.StatsRecord]) -> list[cs.StatsRecord]:
    """One record per key (an HFile's keys are unique and sorted), the later winning."""
    return [r for _, r in sorted({r.key: r for r in recs}.items())]


def _group_of(name: str) -> str | None:
    """The file group id of a metadata partition file's name."""
    if name.endswith(".hfile"):
        return name.split("_", 1)[0]
    p = parse_log_file(name)
    return p.file_id if p is not None else None


def _base_time(name: str) -> str:
    return name[:-len(".hfile")].rsplit("_", 1)[-1]


def _data_file_id_and_time(name: str) -> tuple[str, str]:
    """(file id, instant time) of a base file name, empty when it is none."""
    parsed = parse_data_file(name)
    return (parsed.file_id, parsed.instant_time) if parsed else ("", "")


_CACHE_FILES = 256
_DECODED: BoundedCache[tuple[str, str], list[cs.StatsRecord]] = BoundedCache(_CACHE_FILES)
_FOOTER_STATS: BoundedCache[tuple[str, str], list[cs.ColumnStats]] = BoundedCache(_CACHE_FILES * 4)
#: the record schema of each base file, by (table URI, path)
_SCHEMAS: BoundedCache[tuple[str, str], dict[str, Any]] = BoundedCache(_CACHE_FILES)
#: per (table URI, partition, file group): the files of the slice last merged, and the merge
_MERGED: BoundedCache[tuple[str, str, str], tuple[tuple[str, ...], dict[str, cs.ColumnStats]]] = \
    BoundedCache(_CACHE_FILES)


def forget_decoded() -> None:
    for cache in (_DECODED, _FOOTER_STATS, _SCHEMAS, _MERGED):
        cache.clear()
