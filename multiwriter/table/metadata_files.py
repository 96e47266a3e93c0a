"""Hudi's metadata table, its ``files`` partition: the list of a table's files that Hudi 1.x
readers (hudi-rs among them) trust instead of listing storage.

The metadata table is a Merge-on-Read table under ``.hoodie/metadata`` whose one file group
``files-0000-0`` holds HFile records keyed by partition (``.`` for a non-partitioned table):
file name -> size, or a tombstone. ``__all_partitions__`` lists the partitions. Every completed
action of the data table is first written there as a deltacommit of the same instant time (a log
file with an HFile data block), then completed on the data timeline: a reader trusting the
metadata table never misses a committed file, and ignores entries of data instants that did not
complete. Every ``MAX_DELTA_COMMITS`` deltacommits the group is compacted into a new base HFile,
and slices no reader of the newest ``RETAIN_COMMITS`` commits needs are deleted (Hudi's metadata
cleaner), so the table's size and its read time stay flat; both only once the completion that
finds them due is decided (:func:`after_decided`), never by one that may still lose.

What goes in: the files of every write stat (commits, deltacommits, replace commits,
compactions; with no file, the partition-list record alone), tombstones for what a clean
deleted. A data rollback writes no deltacommit: it rolls its target's deltacommit back at its
own time, as Hudi does. Replaced file groups are not tombstoned (readers drop them through the
replace commit), as in Hudi.
"""
from __future__ import annotations

import concurrent.futures
import datetime as _dt
import functools
import io
import json
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import fastavro

from .. import faults
from ..cache import BoundedCache
from ..errors import TableFormatError, UnsafePathError
from ..s3_store import REQUESTS
from ..storage import FileExists, Storage
from ..format import avro, hfile, paths
from ..format import instant as inst
from . import metadata_record_index, metadata_stats
from . import properties as props
from .files import FileSlice, LogFile
from ..format.layout import parse_data_file
from .compaction_plan import CompactionOperation, CompactionPlan, encode_plan
from ..format.cdc_log import parse_cdc_log_file
from ..format.log_file import BlockType, HeaderKey, encode_block, parse_log_file, read_log_blocks
from .metadata import CommitMetadata, WriteStat, decode_commit_metadata, decode_records, encode, rollback_target
from ..threads import free_in_child

log = logging.getLogger(__name__)

MDT_DIR = ".hoodie/metadata"
PARTITION = "files"
GROUP = "files-0000-0"
ALL_PARTITIONS = "__all_partitions__"
NON_PARTITIONED = "."
PARTITIONS_KEY = "hoodie.table.metadata.partitions"
INFLIGHT_PARTITIONS_KEY = "hoodie.table.metadata.partitions.inflight"
ENABLE_KEY = "hoodie.metadata.enable"
#: the time of the deltacommit that writes a bootstrap listing (Hudi's first initialization time)
BOOTSTRAP_TIME = "00000000000000000"
#: where the companion job moves planted pending instants (:mod:`multiwriter.cleaner.plan_checks`)
QUARANTINE_HINT = ".hoodie/.quarantine"
#: its completion time on the metadata timeline when the table is new (any time after it will do)
BOOTSTRAP_COMPLETION = "00000000000000001"
#: compact the files partition after this many deltacommits (Hudi's
#: ``hoodie.metadata.compact.max.delta.commits``)
MAX_DELTA_COMMITS = 10
#: keep every slice of the files partition that one of the newest this many completed commits
#: of the metadata timeline reads (Hudi's metadata cleaner: ``KEEP_LATEST_COMMITS`` with
#: ``DEFAULT_METADATA_CLEANER_COMMITS_RETAINED``), for readers that loaded the timeline earlier
RETAIN_COMMITS = 20
TYPE_ALL_PARTITIONS, TYPE_FILES = 1, 2
_WRITE_TOKEN = "0-0-0"
#: the empty log file Hudi writes beside the bootstrap base (its ``DEFAULT_WRITE_TOKEN``)
BOOTSTRAP_LOG = f".{GROUP}_{BOOTSTRAP_TIME}.log.1_{_WRITE_TOKEN}"


def bootstrap_log() -> bytes:
    """The bytes of :data:`BOOTSTRAP_LOG`: one delete block of no key at the bootstrap time."""
    return metadata_stats.opening_log(BOOTSTRAP_TIME)

_FILE_INFO = {
    "type": "record", "name": "HoodieMetadataFileInfo", "fields": [
        {"name": "size", "type": "long", "doc": "Size of the file"},
        {"name": "isDeleted", "type": "boolean", "doc": "True if this file has been deleted"},
    ],
}
#: ``HoodieMetadataRecord`` as far as the files partition fills it; the other indexes' fields keep
#: their place (always null), so the bytes are those of Hudi's full schema
RECORD_SCHEMA = {
    "type": "record", "name": "HoodieMetadataRecord", "namespace": "org.apache.hudi.avro.model",
    "fields": [
        *({"name": n, "type": ["null", "string"], "default": None} for n in (
            "_hoodie_commit_time", "_hoodie_commit_seqno", "_hoodie_record_key", "_hoodie_partition_path",
            "_hoodie_file_name")),
        {"name": "key", "type": "string"},
        {"name": "type", "type": "int"},
        {"name": "filesystemMetadata", "type": ["null", {"type": "map", "values": _FILE_INFO}], "default": None},
        *({"name": n, "type": ["null"], "default": None} for n in (
            "BloomFilterMetadata", "ColumnStatsMetadata", "recordIndexMetadata", "SecondaryIndexMetadata")),
    ],
}
_SCHEMA_JSON = json.dumps(RECORD_SCHEMA, separators=(",", ":"))
_PARSED = fastavro.parse_schema(RECORD_SCHEMA)

#: per record key: file (or partition) name -> (size, deleted)
Records = dict[str, dict[str, tuple[int, bool]]]


# -- the data table's side ----------------------------------------------------------------------
def enabled(config: props.TableConfig) -> bool:
    """Do readers of this table list its files from the ``files`` partition?"""
    return PARTITION in _listed(config.raw.get(PARTITIONS_KEY, ""))


def _listed(value: str) -> list[str]:
    return [p.strip() for p in value.split(",") if p.strip()]


def mdt_properties(data: props.TableConfig) -> dict[str, str]:
    """The metadata table's ``hoodie.properties``, as Hudi writes them for its table version."""
    name = f"{data.name}_metadata"
    return {
        "hoodie.compaction.payload.class": "org.apache.hudi.metadata.HoodieMetadataPayload",
        "hoodie.table.initial.version": str(data.version),
        "hoodie.table.keygenerator.type": "HOODIE_TABLE_METADATA",
        "hoodie.table.type": props.MERGE_ON_READ,
        "hoodie.archivelog.folder": "history",
        "hoodie.timeline.layout.version": "2",
        "hoodie.timeline.history.path": "history",
        "hoodie.table.checksum": str(props.checksum(data.database, name)),
        "hoodie.datasource.write.drop.partition.columns": "false",
        "hoodie.record.merge.strategy.id": "00000000-0000-0000-0000-000000000000",
        "hoodie.table.recordkey.fields": "key",
        "hoodie.table.name": name,
        "hoodie.timeline.path": "timeline",
        "hoodie.populate.meta.fields": "false",
        "hoodie.table.base.file.format": "HFILE",
        "hoodie.record.merge.mode": "CUSTOM",
        "hoodie.database.name": data.database,
        "hoodie.table.version": str(data.version),
    }


@dataclass
class MetadataTable:
    """The ``files`` partition of one data table's metadata table, on the data table's storage."""

    storage: Storage
    data_config: props.TableConfig
    config: props.TableConfig = field(init=False)

    def __post_init__(self) -> None:
        raw = mdt_properties(self.data_config)
        self.config = props.TableConfig.from_properties(raw, source=f"{MDT_DIR}/{props.PROPERTIES_FILE}")
        self._schema: str | None = None
        self._slice: tuple[str | None, str, list[str]] | None = None  # as listed once by this object
        self._names: list[str] | None = None  # the timeline's file names, as listed once and kept up to date
        self._changes = 0  # how often _names changed: the completed instants are worked out again after one
        self._done: tuple[int, dict[str, tuple[str, str]]] | None = None
        self._sizes: dict[str, int] = {}  # file name -> size, from the partition's listing
        self._listed_ahead = False  # the timeline and the index partitions listed by read_ahead
        kept = metadata_stats.kept(_listed(self.data_config.raw.get(PARTITIONS_KEY, "")))
        #: the data-skipping partitions kept beside the files partition, None when there are none
        self.stats = metadata_stats.StatsPartitions(self.storage, MDT_DIR, kept, self.data_config.version,
                                                    RECORD_SCHEMA) if kept else None
        #: the record index kept beside the files partition, None when there is none
        self.record_index = metadata_record_index.RecordIndexPartition(self.storage, MDT_DIR, RECORD_SCHEMA) \
            if metadata_record_index.PARTITION in _listed(self.data_config.raw.get(PARTITIONS_KEY, "")) else None

    @property
    def indexes(self) -> list[metadata_stats.StatsPartitions | metadata_record_index.RecordIndexPartition]:
        """The index partitions kept beside the files partition (they share its lifecycle)."""
        return [x for x in (self.stats, self.record_index) if x is not None]

    def _index_of(self, partition: str) -> metadata_stats.StatsPartitions | metadata_record_index.RecordIndexPartition:
        for x in self.indexes:
            if partition in x.partitions:
                return x
        raise KeyError(partition)

    @property
    def schema_json(self) -> str:
        """The record schema to write: the one of the group's newest base file when there is one
        (a metadata table Hudi started carries Hudi's whole ``HoodieMetadataRecord``, and readers
        reconcile log blocks with the base), else ours."""
        if self._schema is None:
            # the newest compaction's time names the base: its schema is known once per process
            # (no listing of the partition for it on every deltacommit)
            key = (self.storage.uri, self.latest_compaction() or BOOTSTRAP_TIME)
            known = _SCHEMA_OF_BASE.get(key)
            if known is None:
                base, _, _ = self.latest_slice()
                known = (self._base_schema(self._rel(f"{PARTITION}/{base}")) if base is not None else None) or _SCHEMA_JSON
                _SCHEMA_OF_BASE.put(key, known)
            self._schema = known
        return self._schema

    def _base_schema(self, rel: str) -> str | None:
        """The record schema a base HFile declares. Base files never change: read once per
        process (reading one parses the whole file, ~10 ms at 30,000 listed files, which every
        deltacommit would otherwise pay)."""
        key = (self.storage.uri, rel)
        with _CACHE_LOCK:
            if key in _BASE_SCHEMAS:
                return _BASE_SCHEMAS[key]
        found = hfile.read(self.storage.read_bytes(rel), source=rel).file_info.get(b"schema")
        schema = found.decode() if found else None
        with _CACHE_LOCK:
            _BASE_SCHEMAS[key] = schema
            while len(_BASE_SCHEMAS) > _CACHE_FILES:
                _BASE_SCHEMAS.popitem(last=False)
        return schema

    # paths
    def _rel(self, rel: str) -> str:
        return f"{MDT_DIR}/{rel}"

    @property
    def timeline_dir(self) -> str:
        return self._rel(self.config.timeline_dir)

    # -- timeline ---------------------------------------------------------------------------
    def _instant_files(self) -> list[str]:
        """The metadata timeline's file names: listed once by this object, then kept up to date
        with what it writes and deletes (all of it under the data table's lock, or for an
        instant of its own)."""
        if self._names is None:
            self._names = self.storage.list_names(self.timeline_dir)  # names only: no file is stat'ed
            self._changes += 1
        return list(self._names)

    def _delete_instant_file(self, name: str) -> None:
        self.storage.delete(f"{self.timeline_dir}/{name}")
        if self._names is not None and name in self._names:
            self._names.remove(name)
            self._changes += 1

    def _completed(self) -> dict[str, tuple[str, str]]:
        """requested time -> (action, completion time) of completed instants (worked out once
        per change of the timeline this object knows: a commit asks several times)."""
        names = self._instant_files()
        if self._done is not None and self._done[0] == self._changes:
            return dict(self._done[1])
        out: dict[str, tuple[str, str]] = {}
        for name in names:
            i = _parse(name)
            if i is not None and i.is_completed:
                if i.action == inst.ROLLBACK and i.requested_time in out:
                    continue  # a rollback timed like a deltacommit never hides it
                out[i.requested_time] = (i.action, i.completion_time or i.requested_time)
        self._done = (self._changes, out)
        return dict(out)

    def _put_instant(self, t: str, action: str, state: str, data: bytes = b"", completion: str | None = None) -> None:
        """Pending files are not synced (a crash loses only an instant that never completed,
        whose data instant did not either); a completed one is, before the data instant's."""
        i = inst.Instant(t, action, state, completion)
        name = i.file_name(self.config.version)
        self.storage.put_if_absent(f"{self.timeline_dir}/{name}", data, durable=state == inst.COMPLETED)
        if self._names is not None:
            self._names.append(name)
            self._changes += 1

    # -- writing ----------------------------------------------------------------------------
    def exists(self) -> bool:
        return self.storage.exists(self._rel(props.PROPERTIES_FILE))

    def bootstrap(self, listing: Mapping[str, Mapping[str, int]], completion: str) -> None:
        """Create the metadata table from a listing of the committed files (partition -> file
        name -> size), as one base HFile at :data:`BOOTSTRAP_TIME`."""
        # a metadata table started again (after a drop) may differ from the one seen before
        _SCHEMA_OF_BASE.drop(lambda k: k[0] == self.storage.uri)
        if not self.exists():
            self.storage.put_if_absent(self._rel(props.PROPERTIES_FILE), props.render(mdt_properties(self.data_config)).encode())
        self.storage.makedirs(self.timeline_dir)
        self.storage.makedirs(self.timeline_dir + "/history")
        self._partition_metadata()
        recs: Records = {ALL_PARTITIONS: {_key(p): (0, False) for p in listing}}
        for p, files in listing.items():
            recs[_key(p)] = {n: (s, False) for n, s in files.items()}
        name = f"{GROUP}_{_WRITE_TOKEN}_{BOOTSTRAP_TIME}.hfile"
        data = _hfile(recs, base=True)
        self.storage.write_bytes(self._rel(f"{PARTITION}/{name}"), data)
        # Hudi's initializeFileGroups opens the file group with an empty delete block in a log
        # file at the bootstrap time (readers and compaction find nothing in it)
        self.storage.write_bytes(self._rel(f"{PARTITION}/{BOOTSTRAP_LOG}"), bootstrap_log())
        stat = WriteStat(file_id=GROUP, path=f"{PARTITION}/{name}", partition_path=PARTITION, num_writes=len(recs),
                         num_inserts=len(recs), total_write_bytes=len(data), file_size=len(data))
        meta = CommitMetadata({PARTITION: [stat]}, {"schema": _SCHEMA_JSON}, "BULK_INSERT_PREPPED")
        done = self._completed()
        if BOOTSTRAP_TIME not in done:
            for state in (inst.REQUESTED, inst.INFLIGHT):
                _put_quietly(self, BOOTSTRAP_TIME, inst.DELTA_COMMIT, state)
            self._put_instant(BOOTSTRAP_TIME, inst.DELTA_COMMIT, inst.COMPLETED, meta.to_bytes(), completion)

    def start_stats(self, partitions: tuple[str, ...], records: list[metadata_stats.cs.StatsRecord]) -> None:
        """Start the data-skipping ``partitions`` with ``records`` (the stats of the table's
        files, none for a new table) as one deltacommit at a time of the metadata table's own.
        The caller names them in ``hoodie.properties`` after this (under the table lock)."""
        t = self._fresh_time()
        for state in (inst.REQUESTED, inst.INFLIGHT):
            _put_quietly(self, t, inst.DELTA_COMMIT, state)
        written: dict[str, list[WriteStat]] = {}
        for st in metadata_stats.initialize(self.storage, MDT_DIR, partitions, self.data_config.version,
                                            RECORD_SCHEMA, t, records):
            written.setdefault(st.partition_path, []).append(st)
        meta = CommitMetadata(written, {"schema": _SCHEMA_JSON}, "BULK_INSERT_PREPPED")
        self._put_instant(t, inst.DELTA_COMMIT, inst.COMPLETED, meta.to_bytes(), max(now_time(), _after(t)))

    def start_record_index(self, entries: Mapping[str, metadata_record_index.ri.Location],
                           min_groups: int = metadata_record_index.MIN_FILE_GROUPS) -> None:
        """Start the record index with ``entries`` (every key of the table, none for a new
        table) as one deltacommit at a time of the metadata table's own. The caller names it in
        ``hoodie.properties`` after this (under the table lock)."""
        t = self._fresh_time()
        for state in (inst.REQUESTED, inst.INFLIGHT):
            _put_quietly(self, t, inst.DELTA_COMMIT, state)
        stats = metadata_record_index.initialize(self.storage, MDT_DIR, RECORD_SCHEMA, t, entries, min_groups)
        meta = CommitMetadata({metadata_record_index.PARTITION: stats} if stats else {}, {"schema": _SCHEMA_JSON},
                              "BULK_INSERT_PREPPED")
        self._put_instant(t, inst.DELTA_COMMIT, inst.COMPLETED, meta.to_bytes(), max(now_time(), _after(t)))

    def _partition_metadata(self) -> None:
        rel = self._rel(f"{PARTITION}/.hoodie_partition_metadata")
        if not self.storage.exists(rel):
            text = f"#partition metadata\ncommitTime={BOOTSTRAP_TIME}\npartitionDepth=1\n"
            self.storage.put_if_absent(rel, text.encode())

    def append(self, t: str, completion: str, recs: Records, *, token: str = _WRITE_TOKEN,
               stats_records: list[metadata_stats.cs.StatsRecord] | None = None,
               index_changes: metadata_record_index.IndexChanges | None = None) -> None:
        """One deltacommit at ``t``: a log file with ``recs`` in an HFile data block. ``token``:
        the write token in its name (another one for each attempt after a rollback, as Hudi's
        differ: a log file's name never stands for two contents). With no record (a clean that
        deleted nothing) the deltacommit is written all the same, with no log file, as Hudi's
        empty upsert of the metadata table writes it. ``stats_records``: the action's records of
        the data-skipping partitions (:mod:`.metadata_stats`), in log files of their groups;
        ``index_changes``: the action's changes of the record index (:mod:`.metadata_record_index`)."""
        rindex = self.record_index if index_changes else None
        if not recs and not stats_records and rindex is None:
            for state in (inst.REQUESTED, inst.INFLIGHT):
                _put_quietly(self, t, inst.DELTA_COMMIT, state)
            faults.point("mid-metadata-deltacommit")
            empty = CommitMetadata({}, {"schema": self.schema_json}, "UPSERT_PREPPED")
            self._put_instant(t, inst.DELTA_COMMIT, inst.COMPLETED, empty.to_bytes(), completion)
            return
        name = f".{GROUP}_{t}.log.1_{token}"
        schema = self.schema_json
        block = encode_block(BlockType.HFILE_DATA, {HeaderKey.INSTANT_TIME: t, HeaderKey.SCHEMA: schema},
                             _hfile(recs, schema))
        done = self._completed() if (self.stats is not None and stats_records) or rindex is not None else {}

        def pending() -> None:
            for state in (inst.REQUESTED, inst.INFLIGHT):
                _put_quietly(self, t, inst.DELTA_COMMIT, state)

        # On an object store every write of the deltacommit goes out side by side: its pending
        # instant files, the files partition's log and each index group's log (a request's
        # latency under the lock, not one per file). No reader takes a log before its completed
        # instant, and a rollback finds the logs whatever instant files made it (:meth:`_logs_of`).
        stats = self.stats
        sent: list[concurrent.futures.Future] | None = [] if self.storage.is_s3 else None
        rel = self._rel(f"{PARTITION}/{name}")
        written: dict[str, list[WriteStat]] = {}
        try:
            if sent is not None:
                sent += [REQUESTS.get().submit(pending), REQUESTS.get().submit(self.storage.write_bytes, rel, block)]
            else:
                pending()
            if rindex is not None:
                assert index_changes is not None
                for st in rindex.append(t, index_changes, done, token, sent=sent):
                    written.setdefault(st.partition_path, []).append(st)
            if sent is None:
                self.storage.write_bytes(rel, block)
            if stats is not None and stats_records:
                for st in stats.append(t, stats_records, done, token, sent=sent):
                    written.setdefault(st.partition_path, []).append(st)
        finally:
            concurrent.futures.wait(sent or [])  # nothing of it goes on being written after it fails
        for f in sent or []:
            f.result()
        _wrote(self.storage, rel, block)
        faults.point("mid-metadata-deltacommit")
        stat = WriteStat(file_id=GROUP, path=f"{PARTITION}/{name}", partition_path=PARTITION, prev_commit=t,
                         num_writes=len(recs), num_update_writes=len(recs), total_write_bytes=len(block),
                         file_size=len(block), log_version=1, log_files=(name,))
        meta = CommitMetadata({PARTITION: [stat], **written}, {"schema": schema}, "UPSERT_PREPPED")
        self._put_instant(t, inst.DELTA_COMMIT, inst.COMPLETED, meta.to_bytes(), completion)

    # -- rolling back a deltacommit ----------------------------------------------------------
    def deltacommit_states(self, t: str) -> set[str]:
        """The states of the deltacommit at ``t`` on the metadata timeline (empty: none)."""
        out = set()
        for name in self._instant_files():
            i = _parse(name)
            if i is not None and i.requested_time == t and i.action == inst.DELTA_COMMIT:
                out.add(i.state)
        return out

    def _pending_rollback_of(self, t: str) -> tuple[str, list[tuple[str, str]]] | None:
        """(time, planned (partition, log file name) pairs) of a rollback on the metadata
        timeline that targets ``t`` and never completed (its plan names ``t``), None when there
        is none."""
        states: dict[str, set[str]] = {}
        for name in self._instant_files():
            i = _parse(name)
            if i is not None and i.action == inst.ROLLBACK:
                states.setdefault(i.requested_time, set()).add(i.state)
        for r, seen in sorted(states.items()):
            if inst.COMPLETED in seen or inst.REQUESTED not in seen:
                continue
            rel = f"{self.timeline_dir}/{inst.Instant(r, inst.ROLLBACK, inst.REQUESTED).file_name(self.config.version)}"
            try:
                recs = decode_records(self.storage.read_bytes(rel), source=rel)
            except (FileNotFoundError, TableFormatError):
                continue
            if recs and rollback_target(recs[0]) == t:
                planned = [tuple(str(f).rsplit("/", 2)[-2:]) for req in recs[0].get("RollbackRequests") or ()
                           for f in req.get("filesToBeDeleted") or ()]
                return r, [(part, n) for part, n in planned
                           if (p := parse_log_file(n)) and p.instant_time == t and self._ours(part, p.file_id)]
        return None

    def _ours(self, partition: str, file_id: str) -> bool:
        """Is ``file_id`` a file group of a partition kept here?"""
        if partition == PARTITION:
            return file_id == GROUP
        if self.record_index is not None and partition == metadata_record_index.PARTITION:
            return metadata_record_index.ri.file_group_of(file_id) is not None
        return self.stats is not None and partition in self.stats.partitions and \
            file_id.startswith(metadata_stats.cs.FILE_ID_PREFIX[partition])

    def _logs_of(self, t: str) -> list[tuple[str, str]]:
        """(partition, name) of the log files written by the deltacommit at ``t`` (any write
        token: Hudi's writers name them with theirs)."""
        out = []
        for e in self.storage.list_dir(self._rel(PARTITION), files_only=True):
            n = e.path.rsplit("/", 1)[-1]
            parsed = parse_log_file(n)
            if parsed is not None and parsed.file_id == GROUP and parsed.instant_time == t:
                out.append((PARTITION, n))
        for x in self.indexes:
            out += x.logs_of(t)
        return sorted(out)

    def _fresh_time(self) -> str:
        """A time above every time on the metadata timeline and not before now."""
        newest = max((i.completion_time or i.requested_time for n in self._instant_files()
                      if (i := _parse(n)) is not None), default=BOOTSTRAP_COMPLETION)
        now = now_time()
        return now if newest <= BOOTSTRAP_COMPLETION or now > newest else _after(newest)

    def rollback(self, t: str, rollback_time: str | None = None) -> str | None:
        """Roll back the deltacommit at ``t`` as Hudi's writer rolls back a metadata-table
        deltacommit: ``<R>.rollback.requested`` (a ``HoodieRollbackPlan`` naming its log
        files), ``.inflight``, then its completed instant file (readers stop taking its log),
        its log files, its pending instant files, and last ``<R>_<C>.rollback``. Returns R, or
        None when there was nothing of ``t`` here. A rollback of ``t`` that died part way is
        finished at its own time; once it completed, calling again does nothing."""
        resumed = self._pending_rollback_of(t)
        states = self.deltacommit_states(t)
        logs = self._logs_of(t)
        if resumed is None and not states and not logs:
            return None
        if resumed is not None:
            r, planned = resumed
            logs = sorted(set(logs) | set(planned))
        else:
            r = rollback_time or self._fresh_time()
            if r in self._completed() or any(n.startswith(f"{r}.") or n.startswith(f"{r}_")
                                              for n in self._instant_files()):
                r = self._fresh_time()  # the time is taken here: a time of this table's own
            plan = {
                "instantToRollback": {"commitTime": t, "action": inst.DELTA_COMMIT},
                "RollbackRequests": [{
                    "partitionPath": part, "fileId": "", "latestBaseInstant": "",
                    "filesToBeDeleted": [self.storage.uri_of(self._rel(f"{part}/{n}")) for q, n in logs if q == part],
                    "logBlocksToBeDeleted": None,
                } for part in sorted({q for q, _ in logs})],
                "version": 1,
            }
            self._put_instant(r, inst.ROLLBACK, inst.REQUESTED, encode("rollback_plan", plan))
        if inst.INFLIGHT not in {i.state for n in self._instant_files() if (i := _parse(n)) is not None
                                 and i.requested_time == r and i.action == inst.ROLLBACK}:
            _put_quietly(self, r, inst.ROLLBACK, inst.INFLIGHT)
        started = _dt.datetime.now(_dt.timezone.utc)
        for name in self._instant_files():  # first its completed file: no reader takes its log after this
            i = _parse(name)
            if i is not None and i.requested_time == t and i.action == inst.DELTA_COMMIT and i.is_completed:
                self._delete_instant_file(name)
        faults.point("mid-metadata-rollback")
        for part, n in logs:
            if part != PARTITION and self.indexes:
                self._index_of(part).delete(part, n)
                continue
            self.storage.delete(self._rel(f"{part}/{n}"))
            with _CACHE_LOCK:
                _DECODED.pop((self.storage.uri, self._rel(f"{part}/{n}")), None)
                _RAW.pop((self.storage.uri, self._rel(f"{part}/{n}")), None)
        for state in (inst.INFLIGHT, inst.REQUESTED):
            self._delete_instant_file(inst.Instant(t, inst.DELTA_COMMIT, state).file_name(self.config.version))
        self._slice = None
        deleted = [self.storage.uri_of(self._rel(f"{part}/{n}")) for part, n in logs]
        meta = {
            "startRollbackTime": r,
            "timeTakenInMillis": int((_dt.datetime.now(_dt.timezone.utc) - started).total_seconds() * 1000),
            "totalFilesDeleted": len(deleted),
            "commitsRollback": [t],
            "partitionMetadata": {part: {
                "partitionPath": part, "failedDeleteFiles": [], "rollbackLogFiles": None, "writtenLogFiles": None,
                "successDeleteFiles": [self.storage.uri_of(self._rel(f"{part}/{n}")) for q, n in logs if q == part],
            } for part in sorted({PARTITION} | {q for q, _ in logs})},
            "version": 1,
            "instantsRollback": [{"commitTime": t, "action": inst.DELTA_COMMIT}],
        }
        self._put_instant(r, inst.ROLLBACK, inst.COMPLETED, encode("rollback", meta), max(now_time(), _after(r)))
        log.info("%s: rolled back the deltacommit %s of the files partition at %s (%d log files)", MDT_DIR, t, r,
                 len(deleted))
        faults.point("after-metadata-rollback")
        return r

    def open_deltacommits(self) -> int:
        """How many deltacommits completed since the newest compaction (the logs of the open
        slice, the bootstrap's aside), from the timeline alone: whether a compaction is due is
        known without listing the partition. A deltacommit that wrote no log (an empty clean)
        counts too, so a compaction may be tried one early; :meth:`maybe_compact` counts logs."""
        done = self._completed()
        base_t = self.latest_compaction() or BOOTSTRAP_TIME
        return sum(1 for t, (a, c) in done.items() if a == inst.DELTA_COMMIT and t != BOOTSTRAP_TIME and c >= base_t)

    def latest_compaction(self) -> str | None:
        """The requested time of the newest completed compaction of the files partition (Hudi's
        ``getLatestCompactionTime``: the last completed commit on the metadata timeline), None
        before the first one."""
        done = [t for t, (action, _) in self._completed().items() if action in (inst.COMMIT, inst.REPLACE_COMMIT)]
        return max(done, default=None)

    # -- reading ----------------------------------------------------------------------------
    def latest_slice(self) -> tuple[str | None, str, list[str]]:
        if self._slice is None:
            self._slice = self._latest_slice()
        return self._slice

    def _latest_slice(self) -> tuple[str | None, str, list[str]]:
        """(base file name or None, its instant, log file names in completion order) of the
        group's latest slice: logs whose deltacommit completed at or after the base's instant
        (Hudi's slicing rule, as hudi-rs applies it)."""
        timeline = self._send_listings([])  # beside the partition's: either may come first, see below
        names = []
        for e in self.storage.list_dir(self._rel(PARTITION), files_only=True):
            names.append(e.path.rsplit("/", 1)[-1])
            self._sizes[names[-1]] = e.size
        _waited(timeline)
        return metadata_stats.latest_slice_of(names, GROUP, self._completed())

    def list_indexes_beside(self, indexes: Iterable[metadata_stats.StatsPartitions
                                                   | metadata_record_index.RecordIndexPartition] | None = None) -> None:
        """On an object store, the metadata timeline and the partitions of ``indexes`` (every
        kept index by default) listed side by side: one request's latency where one after
        another each partition added its own. Either may come first. Under the table lock nothing
        else changes them meanwhile. Outside it (a record-index lookup before the lock), a
        deltacommit completing between two of the listings may have some of its logs listed and
        not others: each key's entry lives in one group, so each key is read as before that
        deltacommit or after it, and that deltacommit's data commit, completing after both
        listings, is in no base the writer planned on. Not where this thread keeps listings."""
        todo = list(self.indexes if indexes is None else indexes)
        if todo and not self._listed_ahead:
            _waited(self._send_listings(todo, least=2))

    def _send_listings(self, indexes: list[metadata_stats.StatsPartitions | metadata_record_index.RecordIndexPartition],
                       least: int = 1) -> list[concurrent.futures.Future]:
        """On an object store, the metadata timeline's first listing and the partitions of
        ``indexes``, sent to wait side by side (none when fewer than ``least`` are due, or where
        this thread keeps listings: there each is read once, on this thread). Beside the files
        partition's listing either may come first: a log whose deltacommit completes between them
        is read or not as when the partition goes first; for the index partitions see
        :meth:`list_indexes_beside`."""
        if not self.storage.is_s3 or self.storage.keeps_listings() or self.storage.is_kept(self.timeline_dir):
            return []
        jobs = [] if self._names is not None else [self._instant_files]
        jobs += [functools.partial(x.names, p) for x in indexes for p in x.partitions]
        if len(jobs) < least:
            return []
        return [REQUESTS.get().submit(job) for job in jobs]

    def read(self) -> Records:
        """Every record of the latest slice, merged (a tombstone drops a file; sizes take the
        larger value, as Hudi's payload merges them)."""
        base, _, logs = self.latest_slice()
        names = ([base] if base is not None else []) + logs
        merged: Records = {}
        with self.storage.read_ahead(self._unread(names)):  # side by side on S3, as a snapshot read's files
            for n in names:
                for recs in self._decoded(n):
                    _merge(merged, recs)
        return merged

    def _unread(self, names: list[str]) -> list[tuple[str, int]]:
        """(path, size) of the files of ``names`` this process has neither decoded nor kept."""
        with _CACHE_LOCK:
            out = [(rel, self._sizes.get(n, 0)) for n in names
                   if (key := (self.storage.uri, rel := self._rel(f"{PARTITION}/{n}"))) not in _DECODED and key not in _RAW]
        return out if len(out) > 1 else []

    def _decoded(self, name: str) -> list[Records]:
        """The records of one file of the group (a base HFile, or the HFile blocks of a log
        file), without the unsafe ones (:func:`_sanitize`). Files never change once written:
        decoded once per process."""
        return self._decoded_and_ignored(name)[0]

    def _decoded_and_ignored(self, name: str) -> tuple[list[Records], list[str]]:
        rel = self._rel(f"{PARTITION}/{name}")
        key = (self.storage.uri, rel)
        with _CACHE_LOCK:
            hit = _DECODED.get(key)
            if hit is not None:
                _DECODED.move_to_end(key)
                return hit
            data = _RAW.pop(key, None)
        if data is None:
            data = self.storage.read_bytes(rel)
        if name.endswith(".hfile"):
            out = [_decode_hfile(data, rel)]
        else:
            out = [_decode_hfile(b.content, rel) for b in read_log_blocks(data, source=rel)
                   if b.block_type == BlockType.HFILE_DATA and b.content is not None]
        ignored = [why for recs in out for why in _sanitize(recs, rel)]
        for why in ignored[:_WARN_MAX]:
            log.warning("%s; ignored by readers and dropped by the next compaction of the files partition", why)
        if len(ignored) > _WARN_MAX:
            log.warning("%s: %d more unsafe records ignored", rel, len(ignored) - _WARN_MAX)
        with _CACHE_LOCK:
            _DECODED[key] = (out, ignored)
            while len(_DECODED) > _CACHE_FILES:
                _DECODED.popitem(last=False)
        return out, ignored

    def ignored(self) -> list[str]:
        """Why each unsafe record of the latest slice is ignored (a partition or a file name that
        would lead out of the table or that no file system takes), each naming its file: readers
        skip them, and the next compaction of the files partition leaves them out."""
        base, _, logs = self.latest_slice()
        names = ([base] if base is not None else []) + logs
        with self.storage.read_ahead(self._unread(names)):
            return [why for n in names for why in self._decoded_and_ignored(n)[1]]

    def listing(self) -> dict[str, dict[str, int]]:
        """Partition -> live file name -> size, as a reader trusting the metadata table sees it."""
        recs = self.read()
        parts = [p for p, (_, deleted) in recs.get(ALL_PARTITIONS, {}).items() if not deleted]
        return {_partition(p): {n: s for n, (s, d) in recs.get(p, {}).items() if not d} for p in parts}

    # -- compaction -------------------------------------------------------------------------
    def log_completions(self) -> dict[str, str]:
        """Log file name -> completion time of its deltacommit, for the latest slice's logs."""
        done = self._completed()
        _, _, logs = self.latest_slice()
        return {n: done[p.instant_time][1] for n in logs if (p := parse_log_file(n)) is not None}

    def compaction_time(self, pending_data: Iterable[str], fresh: str) -> str:
        """When to time a compaction of the files partition, as Hudi's ``compactIfNecessary``
        does: one millisecond before the earliest data instant that is pending on the data
        timeline while its deltacommit completed here (its log must stay out of the base, so
        that rolling it back is a rollback of the open slice), else ``fresh``."""
        done = self._completed()
        blocking = [p for p in pending_data if done.get(p, ("", ""))[0] == inst.DELTA_COMMIT]
        return _before(min(blocking)) if blocking else fresh

    def maybe_compact(self, t: str, completion: str, *, min_logs: int | None = None) -> bool:
        """Merge the latest slice's logs whose deltacommit completed before ``t`` into a new base
        HFile at ``t``, once the slice holds ``min_logs`` log files (:data:`MAX_DELTA_COMMITS`);
        then delete the slices before the previous one. The logs completed at or after ``t``
        stay, on top of the new base (a log belongs to the newest base at or before its
        completion, as hudi-rs slices). Skipped (False) when none completed before ``t``, when
        a compaction at ``t`` completed already (Hudi skips it too), or when one at ``t`` is
        pending (under way, or dead: the next compaction's time differs)."""
        base, base_t, logs = self.latest_slice()
        if _deltacommit_logs(logs) < (MAX_DELTA_COMMITS if min_logs is None else min_logs) or not logs:
            return False
        done = self._completed()
        if t in done or (base is not None and t <= base_t) or t in self._pending_compactions():
            return False
        completions = self.log_completions()
        merged = [n for n in logs if completions.get(n, t) < t]
        if not merged:
            return False
        recs: Records = {}
        dropped = 0
        for n in ([base] if base is not None else []) + merged:
            decoded, ignored = self._decoded_and_ignored(n)
            dropped += len(ignored)
            for r in decoded:
                _merge(recs, r)
        if dropped:
            log.warning("%s: the compaction %s of the files partition leaves out %d unsafe records of the slice it "
                        "merges (see the warnings naming their files)", MDT_DIR, t, dropped)
        for p in list(recs):
            recs[p] = {n: v for n, v in recs[p].items() if not v[1]}
        name = f"{GROUP}_{_WRITE_TOKEN}_{t}.hfile"
        # the sizes the listing gave (a request each on an object store otherwise)
        sizes = {n: self._sizes[n] if n in self._sizes else _size(self.storage, self._rel(f"{PARTITION}/{n}"))
                 for n in merged}
        op = CompactionOperation.for_slice(PARTITION, GROUP, base_t, (base, 0) if base else None,
                                           [(n, sizes[n]) for n in merged])
        # every group of the data-skipping partitions at the same time, in the same plan
        extra = [e for x in self.indexes for e in x.compact(t, done)]
        self._put_instant(t, inst.COMPACTION, inst.REQUESTED, encode_plan(CompactionPlan((op, *(e[0] for e in extra)))))
        self._put_instant(t, inst.COMPACTION, inst.INFLIGHT)
        schema = self.schema_json
        data = _hfile(recs, schema, base=True, file_name=name)
        self.storage.write_bytes(self._rel(f"{PARTITION}/{name}"), data)
        _wrote(self.storage, self._rel(f"{PARTITION}/{name}"), data)
        written: dict[str, list[WriteStat]] = {}
        for _, st, rel, body in extra:
            self.storage.write_bytes(rel, body)
            self._index_of(st.partition_path).wrote(st.partition_path, rel.rsplit("/", 1)[-1], len(body))
            written.setdefault(st.partition_path, []).append(st)
        faults.point("mid-metadata-compaction")
        self._slice = (name, t, [n for n in logs if n not in merged])
        stat = WriteStat(file_id=GROUP, path=f"{PARTITION}/{name}", partition_path=PARTITION, prev_commit=base_t,
                         num_writes=sum(len(v) for v in recs.values()), total_write_bytes=len(data), file_size=len(data),
                         compacted_log_files=len(merged), compacted_log_bytes=sum(sizes.values()))
        meta = CommitMetadata({PARTITION: [stat], **written}, {"schema": schema}, "COMPACT", compacted=True)
        self._put_instant(t, inst.COMMIT, inst.COMPLETED, meta.to_bytes(), completion)
        self._undo_pending_compactions(below=t)
        self.clean_slices()
        return True

    def retained_from(self) -> str:
        """The base time of the oldest slice to keep: the slice one of the newest
        :data:`RETAIN_COMMITS` completed commits of the metadata timeline reads (the newest base
        at or before the earliest of them), as Hudi's metadata cleaner keeps slices
        (``KEEP_LATEST_COMMITS``); :data:`BOOTSTRAP_TIME` while there are fewer commits."""
        done = self._completed()
        commits = sorted(t for t, (a, _) in done.items() if a in (inst.DELTA_COMMIT, inst.COMMIT))
        if len(commits) <= RETAIN_COMMITS:
            return BOOTSTRAP_TIME
        earliest = commits[-RETAIN_COMMITS]
        bases = [t for t, (a, _) in done.items() if a == inst.COMMIT and t <= earliest]
        return max(bases, default=BOOTSTRAP_TIME)

    def clean_slices(self) -> bool:
        """Delete the slices older than :meth:`retained_from` (and their instant files), when
        there are any: the timeline tells, so the files partition is listed only then. Runs
        after every deltacommit and compaction, as Hudi's metadata cleaner does."""
        keep_from = self.retained_from()
        done = self._completed()
        oldest = min((t for t, (a, _) in done.items() if a == inst.COMMIT or t == BOOTSTRAP_TIME), default=keep_from)
        if oldest >= keep_from:
            return False
        faults.point("mid-metadata-clean")
        self._delete_before(keep_from)
        return True

    def _pending_compactions(self) -> set[str]:
        """The times of compactions of the files partition planned and never completed."""
        states: dict[str, set[str]] = {}
        for name in self._instant_files():
            i = _parse(name)
            if i is not None and i.action in (inst.COMPACTION, inst.COMMIT):
                states.setdefault(i.requested_time, set()).add(i.state)
        return {t for t, seen in states.items() if inst.COMPLETED not in seen}

    def _undo_pending_compactions(self, below: str) -> None:
        """Once the compaction at ``below`` completed: a compaction of the files partition
        older than it that never completed loses its base file (no reader takes it: its instant
        never completed) and its pending instant files. A newer one stays: its writer, decided
        and paused inside it (past its lease), may still complete it, and would then complete
        the newest base, which must be there; completed later, an older one is never the newest
        (tests/model/metadata_read_ahead.py)."""
        done = self._completed()
        for t in sorted(self._pending_compactions()):
            if t >= below:
                continue
            if t in done or t <= BOOTSTRAP_TIME:  # its time is a completed instant's: a planted plan
                log.error("%s: a pending compaction at %s, the time of a completed %s: refused, nothing deleted; the "
                          "companion job moves it to %s", self.timeline_dir, t, done.get(t, ("bootstrap",))[0],
                          QUARANTINE_HINT)
                continue
            self.storage.delete(self._rel(f"{PARTITION}/{GROUP}_{_WRITE_TOKEN}_{t}.hfile"))
            for x in self.indexes:
                x.undo_compaction(t)
            for state in (inst.INFLIGHT, inst.REQUESTED):
                self._delete_instant_file(inst.Instant(t, inst.COMPACTION, state).file_name(self.config.version))
            log.info("%s: undid the files partition's compaction %s, which never completed", MDT_DIR, t)

    def _delete_before(self, keep_from: str) -> None:
        """Delete the slices (and their instant files) older than the slice based at
        ``keep_from``, which a reader that listed a moment ago may still be reading. A log that
        completed at the very time of that base is the first of its slice (a log belongs to the
        newest base at or before its completion), so it stays with it."""
        done = self._completed()
        old = {t for t, (_, c) in done.items() if c < keep_from and t < keep_from}
        for e in self.storage.list_dir(self._rel(PARTITION), files_only=True):
            n = e.path.rsplit("/", 1)[-1]
            t = n[:-len(".hfile")].rsplit("_", 1)[-1] if n.endswith(".hfile") else (
                p.instant_time if (p := parse_log_file(n)) else None)
            if t is not None and t in old:
                self.storage.delete(e.path)
        for x in self.indexes:
            x.delete_before(old)
        for name in self._instant_files():
            i = _parse(name)
            if i is not None and i.requested_time in old:
                self._delete_instant_file(name)


#: decoded files of files partitions, by (table URI, path); a slice is at most one base and
#: MAX_DELTA_COMMITS logs, so a few tables' worth fit
_CACHE_FILES = 256
_DECODED: OrderedDict[tuple[str, str], tuple[list[Records], list[str]]] = OrderedDict()
#: unsafe records of one file warned about one by one, the rest counted
_WARN_MAX = 10
#: the record schema of the base of the files partition's newest slice, by (table URI, its compaction time)
_SCHEMA_OF_BASE: BoundedCache[tuple[str, str], str] = BoundedCache(_CACHE_FILES)
#: the record schema of each base file read, by (table URI, path)
_BASE_SCHEMAS: OrderedDict[tuple[str, str], str | None] = OrderedDict()
_CACHE_LOCK = free_in_child(threading.Lock())
#: the bytes of files of the files partition this process wrote, until decoded once (a request
#: each otherwise on an object store, an open and a read on a disk: a writer's next listing
#: takes the log its last commit wrote, the companion job's compaction merges the log its clean
#: just wrote, its gauges read the base that compaction wrote)
_RAW: OrderedDict[tuple[str, str], bytes] = OrderedDict()
_RAW_FILES = 16


def _wrote(storage: Storage, rel: str, data: bytes) -> None:
    """Keep the bytes of a files-partition file this process just wrote: the next listing of
    the metadata table decodes them without reading them back (a file never changes once
    written)."""
    with _CACHE_LOCK:
        _RAW[(storage.uri, rel)] = data
        while len(_RAW) > _RAW_FILES:
            _RAW.popitem(last=False)


def forget_decoded() -> None:
    """Drop the decoded files kept for this process (a cold read, as a new reader process does)."""
    with _CACHE_LOCK:
        _DECODED.clear()
        _RAW.clear()
        _BASE_SCHEMAS.clear()
    _SCHEMA_OF_BASE.clear()
    metadata_stats.forget_decoded()
    metadata_record_index.forget_decoded()


def _deltacommit_logs(logs: list[str]) -> int:
    """How many of a slice's log files deltacommits wrote (the bootstrap's empty log aside)."""
    return sum(1 for n in logs if n != BOOTSTRAP_LOG)


def _put_quietly(mt: MetadataTable, t: str, action: str, state: str) -> None:
    try:
        mt._put_instant(t, action, state)
    except FileExists:
        pass


def _size(storage: Storage, rel: str) -> int:
    e = storage.info(rel)
    return e.size if e is not None else 0


def _parse(name: str) -> inst.Instant | None:
    try:
        return inst.decode_file_name(name)
    except (ValueError, TableFormatError):
        return None


def _key(partition: str) -> str:
    return partition if partition else NON_PARTITIONED


def _partition(key: str) -> str:
    return "" if key == NON_PARTITIONED else key


def _merge(into: Records, recs: Records) -> None:
    for key, files in recs.items():
        cur = into.setdefault(key, {})
        for n, (size, deleted) in files.items():
            if deleted:
                cur.pop(n, None)
                cur[n] = (0, True)
            else:
                old = cur.get(n)
                cur[n] = (max(size, old[0]) if old and not old[1] else size, False)


_PARSED_BY_JSON: dict[str, Any] = {_SCHEMA_JSON: _PARSED}


def _parsed(schema_json: str) -> Any:
    parsed = _PARSED_BY_JSON.get(schema_json)
    if parsed is None:
        try:
            parsed = _PARSED_BY_JSON[schema_json] = fastavro.parse_schema(json.loads(schema_json))
        except (ValueError, TypeError, KeyError) as e:
            raise TableFormatError(f"{MDT_DIR}: the files partition's record schema does not parse ({e})") from e
    return parsed


def _hfile(recs: Records, schema_json: str = _SCHEMA_JSON, *, base: bool = False, file_name: str | None = None) -> bytes:
    """An HFile of ``recs``: a log block's, or with ``base`` a base file's (with the keys' bloom
    filter). ``file_name``: a compacted base's own name, which Hudi's compaction writes into
    every record's ``_hoodie_file_name`` (the bootstrap base leaves it null)."""
    parsed = _parsed(schema_json)
    names = [f["name"] for f in parsed["fields"]]  # the parsed schema's, not the JSON parsed again
    cells = []
    for key, files in recs.items():
        rtype = TYPE_ALL_PARTITIONS if key == ALL_PARTITIONS else TYPE_FILES
        value: dict[str, Any] = dict.fromkeys(names)
        if file_name is not None and "_hoodie_file_name" in value:
            value["_hoodie_file_name"] = file_name
        value.update({"key": "", "type": rtype,
                      "filesystemMetadata": {n: {"size": s, "isDeleted": d} for n, (s, d) in files.items()}})
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, value)
        cells.append((key, buf.getvalue()))
    keys = sorted(recs)
    info = {b"schema": schema_json.encode()}
    if keys:
        info[b"minRecordKey"], info[b"maxRecordKey"] = keys[0].encode(), keys[-1].encode()
    meta = None
    if base:  # a base file carries the keys' bloom filter, as Hudi's HFile writer adds it
        info[hfile.BLOOM_TYPE_KEY] = hfile.BLOOM_TYPE
        meta = {hfile.BLOOM_META_BLOCK: hfile.bloom_filter(keys)}
    now = int(_dt.datetime.now(_dt.timezone.utc).timestamp() * 1000)
    return hfile.write(cells, meta=meta, file_info=info, created_ms=now)


def _sanitize(recs: Records, source: str) -> list[str]:
    """Drop from ``recs`` (one file's records) every record or entry a reader must not follow:
    a partition key, or a partition in the partition list, that is no run of plain directory
    names (``../x``, an absolute path), and a file name that is no plain name or longer than a
    file system takes (:func:`.paths.file_name`). Returns why each was dropped (the path
    rule's text, naming ``source``). Hudi's writers never write them: someone planted them."""
    out: list[str] = []
    for key in list(recs):
        files = recs[key]
        if key != ALL_PARTITIONS:
            try:
                paths.partition(_partition(key), source=source)
            except UnsafePathError as e:
                out.append(f"{e} (a record of {len(files)} files)")
                del recs[key]
                continue
        suspect = list(files) if key == ALL_PARTITIONS else [
            n for n in files if len(n) > paths.MAX_NAME_BYTES // 4 or not _PLAIN.match(n)]
        for n in suspect:
            try:
                if key == ALL_PARTITIONS:
                    paths.partition(_partition(n), source=source)
                else:
                    paths.file_name(n, source=source, what=f"file name in partition {key!r}")
            except UnsafePathError as e:
                out.append(str(e))
                del files[n]
    return out


#: a name the path rule surely takes (checked in full only when it does not match)
_PLAIN = re.compile(r"(?!\.{1,2}\Z)[A-Za-z0-9_.=-]{1,63}\Z")


def _decode_hfile(data: bytes, source: str) -> Records:
    h = hfile.read(data, source=source)
    try:
        schema = fastavro.parse_schema(json.loads(h.file_info[b"schema"]))
        avro.check_schema(schema)  # no array of zero-width items: a cell could declare 2^40 of them
    except (KeyError, ValueError) as e:
        raise TableFormatError(f"{source}: metadata HFile without a readable Avro schema ({e})") from e
    out: Records = {}
    for k, v in h.cells:
        try:
            rec = fastavro.schemaless_reader(io.BytesIO(v), schema) if v else {}
        except Exception as e:  # fastavro raises many types for bytes that do not fit the schema
            raise TableFormatError(f"{source}: metadata record {k!r} does not decode ({e})") from e
        fsm = rec.get("filesystemMetadata") or {}
        out[k.decode("utf-8", "replace")] = {
            n: (int(i.get("size") or 0), bool(i.get("isDeleted"))) for n, i in fsm.items()
        }
    return out


# -- what each action adds ----------------------------------------------------------------------
def records_of(action: str, data: bytes, *, source: str, metadata: CommitMetadata | None = None) -> Records:
    """The metadata records of one completed data action (its instant file's content).
    ``metadata``: a write's commit metadata that ``data`` encodes, so it is not decoded again."""
    if inst.instant_action(action) in (inst.CLEAN, inst.ROLLBACK):
        return _deletions(data, source)
    if metadata is None and not data:
        return {}
    meta = metadata if metadata is not None else decode_commit_metadata(action, data, source=source)
    recs: Records = {}
    for s in meta.all_stats():
        if not s.path:
            continue
        try:
            part, _, name = paths.data_file(s.path, source=source).rpartition("/")
        except UnsafePathError as e:
            log.warning("%s; not recorded in the metadata table", e)
            continue
        recs.setdefault(_key(part), {})[name] = (int(s.file_size or 0), False)
        for cdc_path, size in s.cdc_stats.items():  # CDC log files too, as HoodieTableMetadataUtil lists them
            recs[_key(part)][cdc_path.rpartition("/")[2]] = (int(size), False)
    # the partition-list record Hudi writes for every commit, empty when it wrote no file
    recs[ALL_PARTITIONS] = {p: (0, False) for p in recs}
    return recs


def _deletions(data: bytes, source: str) -> Records:
    if not data:
        return {}
    recs: Records = {}
    for rec in decode_records(data, source=source):
        for part, pm in (rec.get("partitionMetadata") or {}).items():
            for f in pm.get("successDeleteFiles") or ():
                name = str(f).rsplit("/", 1)[-1]
                if paths.is_data_file_name(name) and _safe_partition(part, source):
                    recs.setdefault(_key(part), {})[name] = (0, True)
    return recs


def _safe_partition(part: object, source: str) -> bool:
    try:
        paths.partition(part, source=source)
        return True
    except UnsafePathError as e:
        log.warning("%s; not recorded in the metadata table", e)
        return False


def _waited(sent: list[concurrent.futures.Future]) -> None:
    concurrent.futures.wait(sent)
    for f in sent:
        f.result()


@dataclass
class ReadAhead:
    """The metadata table's listings a commit sent as it took the table lock (:func:`read_ahead`)."""

    table: MetadataTable
    sent: list[concurrent.futures.Future]

    def taken(self, config: props.TableConfig) -> MetadataTable | None:
        """The listed metadata table, once its listings are in; None (after they are) when the
        settings changed since they were sent (a partition dropped under the lock, say)."""
        _waited(self.sent)
        if self.table.data_config.raw != config.raw:
            return None
        self.table._listed_ahead = True
        return self.table


def read_ahead(storage: Storage, config: props.TableConfig) -> ReadAhead | None:
    """Under the table lock, on an object store: the metadata table's timeline and its index
    partitions listed beside the data timeline, for :func:`on_completed` (a round of requests
    less under the lock). Sent only once the decision log's listing is in: a writer past its
    fence whose lease lapsed may still write its deltacommit and decide, and a listing sent
    before the log's could miss the deltacommit of the very decision the log then shows (which
    this commit builds on). Sent after it, the listing holds the deltacommit of every commit
    decided so far; one decided later takes the next decision's slot, and this commit loses
    (tests/model/metadata_read_ahead.py). A decision rolled forward in the hold writes only its
    completed file; what may still change without the lock is the deltacommit of an instant
    never decided (an abort, the companion job's rollback), which no compaction merges while
    its data instant is pending (:meth:`MetadataTable.compaction_time`). The settings, which may
    drop a partition under the lock, are compared when the listings are taken."""
    if not enabled(config):
        return None
    mt = MetadataTable(storage, config)
    sent = mt._send_listings(mt.indexes)
    return ReadAhead(mt, sent) if sent else None


@dataclass
class Upkeep:
    """What a completion leaves to the metadata table until it is decided (:func:`after_decided`)."""

    table: MetadataTable
    compact: bool  # the files partition was due for a compaction when the deltacommit was written
    completion: str


def on_completed(storage: Storage, config: props.TableConfig, t: str, completion: str, action: str,
                 data: bytes, metadata: CommitMetadata | None = None, ahead: ReadAhead | None = None
                 ) -> Upkeep | None:
    """Before the completion of ``t`` is decided (then ``<t>_<completion>.<action>`` written on
    the data timeline): its files go into the metadata table (when the table keeps one). Every
    action but a rollback writes its deltacommit, with or without files, as Hudi's does; a
    rollback rolls its target's deltacommit back at its own time instead (:func:`_on_rollback`).
    Returns what :func:`after_decided` does once the completion is decided. ``metadata``: the
    commit metadata ``data`` encodes, when the caller has it; ``ahead``: the listings the caller
    sent under the lock (:func:`read_ahead`)."""
    listed = ahead.taken(config) if ahead is not None else None
    if not enabled(config):
        return None
    mt = listed or MetadataTable(storage, config)
    if inst.instant_action(action) == inst.ROLLBACK:
        _on_rollback(mt, t, completion, data)
        faults.point("after-metadata-table")
        return None
    mt.list_indexes_beside()
    source = f"{t}.{action}"
    if metadata is None and data and inst.instant_action(action) != inst.CLEAN:
        metadata = decode_commit_metadata(action, data, source=source)
    recs = records_of(action, data, source=source, metadata=metadata)
    stats_records = _stats_records(mt, action, metadata, recs) if mt.stats is not None else None
    index_changes = _index_changes(mt, t, action, metadata) if mt.record_index is not None else None
    token = _WRITE_TOKEN
    if mt.deltacommit_states(t):
        # a resumed action (a compaction, a clean) whose earlier attempt wrote its deltacommit:
        # rolled back before it is applied again, as Hudi's commitInternal does
        r = mt.rollback(t)
        token = f"0-{int(r[-9:]) if r else 1}-0"
    faults.point("before-metadata-table")
    due = mt.open_deltacommits() >= MAX_DELTA_COMMITS
    mt.append(t, completion, recs, token=token, stats_records=stats_records, index_changes=index_changes)
    faults.point("after-metadata-table")
    return Upkeep(mt, due, completion)


def after_decided(storage: Storage, config: props.TableConfig, upkeep: Upkeep | None) -> None:
    """Once the completion is decided, and only then: the files partition compacted when it was
    due, and slices no reader needs deleted. Hudi's writer compacts before its deltacommit; here
    a writer frozen past its fence may thaw and compact from its listing of before the freeze,
    at a completion time issued after a commit decided meanwhile, whose log the new base then
    leaves in no slice a reader takes, and losing its decision would not take that compaction
    back. A decided completion's listing holds every commit decided before it (read_ahead), and
    every commit decided after it completes later than its compaction's time, so on top of the
    new base (tests/model/metadata_read_ahead.py). The compaction is timed at the completion:
    every log so far completed before it, and the completion's own log, completing at that very
    time, opens the new slice; else just before the earliest pending data instant whose
    deltacommit is here, whose log stays on top of the new base."""
    if upkeep is None:
        return
    mt = upkeep.table
    if upkeep.compact:
        mt.maybe_compact(mt.compaction_time(pending_data_instants(storage, config), upkeep.completion),
                         _after(upkeep.completion))
    mt.clean_slices()


def _stats_records(mt: MetadataTable, action: str, metadata: CommitMetadata | None,
                   recs: Records) -> list[metadata_stats.cs.StatsRecord]:
    """The records an action adds to the data-skipping partitions: a write's new base files
    (and their partitions' stats), a clean's tombstones for the files it deleted."""
    st = mt.stats
    if st is None:
        return []
    cs = metadata_stats.cs
    if inst.instant_action(action) == inst.CLEAN:
        current = st.read(cs.COLUMN_STATS, mt._completed()) if cs.COLUMN_STATS in st.partitions else {}
        deleted = {_partition(k): [n for n, (_, gone) in files.items() if gone]
                   for k, files in recs.items() if k != ALL_PARTITIONS}
        return metadata_stats.tombstones(deleted, current, st.partitions, cs.index_version(mt.data_config.version))
    if metadata is None:
        return []
    new = metadata_stats.new_base_files(metadata)
    if not new:
        return []
    columns = metadata_stats.indexed_columns(mt.storage, mt.data_config.raw, metadata.extra_metadata.get("schema"))
    current = st.read(cs.PARTITION_STATS, mt._completed()) if cs.PARTITION_STATS in st.partitions else None
    return metadata_stats.records_of_write(mt.storage, metadata, st.partitions, mt.data_config.version, columns,
                                           current)


def _index_changes(mt: MetadataTable, t: str, action: str, metadata: CommitMetadata | None
                   ) -> metadata_record_index.IndexChanges | None:
    """What a write changes in the record index (a clean changes nothing: it deletes only
    files no live slice holds)."""
    rindex = mt.record_index
    if rindex is None or metadata is None or inst.instant_action(action) == inst.CLEAN:
        return None
    done = mt._completed()
    return metadata_record_index.changes_of_write(mt.storage, mt.data_config, t, metadata,
                                                  lambda keys: rindex.lookup(keys, done))


def record_index_of(storage: Storage, config: props.TableConfig) -> dict[str, metadata_record_index.ri.Location] | None:
    """Every entry of the record index, None when the table keeps none."""
    if not enabled(config):
        return None
    mt = MetadataTable(storage, config)
    return mt.record_index.read(mt._completed()) if mt.record_index is not None else None


def lookup_record_index(storage: Storage, config: props.TableConfig, keys: Iterable[str]
                        ) -> dict[str, metadata_record_index.ri.Location] | None:
    """Where the record index puts ``keys`` (those it holds), None when the table keeps none."""
    if not enabled(config):
        return None
    mt = MetadataTable(storage, config)
    if mt.record_index is None:
        return None
    mt.list_indexes_beside([mt.record_index])
    return mt.record_index.lookup(keys, mt._completed())


def column_stats_of(storage: Storage, config: props.TableConfig, partitions: list[str] | None = None
                    ) -> dict[tuple[str, str], dict[str, metadata_stats.cs.ColumnStats]] | None:
    """(partition, data file name) -> column -> its stats, for the live files the metadata
    table lists that the ``column_stats`` partition holds; None when the table keeps no column
    stats (or they do not read: then nothing may be skipped, and a warning says why)."""
    mt = _stats_table(storage, config, metadata_stats.cs.COLUMN_STATS)
    if mt is None:
        return None
    try:
        values = mt.stats.read(metadata_stats.cs.COLUMN_STATS, mt._completed())  # type: ignore[union-attr]
        listing = mt.listing()
    except (TableFormatError, FileNotFoundError) as e:
        log.warning("%s: the column_stats partition does not read (%s); no file is skipped", MDT_DIR, e)
        return None
    by_file: dict[str, dict[str, metadata_stats.cs.ColumnStats]] = {}
    for s in values.values():
        if not s.is_deleted:
            by_file.setdefault(s.file_name, {})[s.column] = s
    wanted = None if partitions is None else set(partitions)
    return {(part, n): by_file[n] for part, files in listing.items() if wanted is None or part in wanted
            for n in files if n in by_file}


def partition_stats_of(storage: Storage, config: props.TableConfig, partitions: list[str] | None = None
                       ) -> dict[str, dict[str, metadata_stats.cs.ColumnStats]] | None:
    """Partition -> column -> its stats over the partition's files, from ``partition_stats``;
    None when the table keeps none (or they do not read)."""
    cs = metadata_stats.cs
    mt = _stats_table(storage, config, cs.PARTITION_STATS)
    if mt is None:
        return None
    try:
        values = mt.stats.read(cs.PARTITION_STATS, mt._completed())  # type: ignore[union-attr]
    except (TableFormatError, FileNotFoundError) as e:
        log.warning("%s: the partition_stats partition does not read (%s); no partition is skipped", MDT_DIR, e)
        return None
    wanted = None if partitions is None else set(partitions)
    out: dict[str, dict[str, cs.ColumnStats]] = {}
    for s in values.values():
        part = _partition(s.file_name)
        if not s.is_deleted and (wanted is None or part in wanted):
            out.setdefault(part, {})[s.column] = s
    return out


def _stats_table(storage: Storage, config: props.TableConfig, partition: str) -> MetadataTable | None:
    if not enabled(config):
        return None
    mt = MetadataTable(storage, config)
    return mt if mt.stats is not None and partition in mt.stats.partitions else None


def _on_rollback(mt: MetadataTable, r: str, completion: str, data: bytes) -> None:
    """A data rollback at ``r``, as Hudi's ``update(HoodieRollbackMetadata, r)``: the target's
    deltacommit is rolled back at ``r`` (the cleaner did so already, before deleting the
    target's pending instant; this finishes one that died part way, and does nothing after
    one that completed), and no deltacommit is written. Only files the listing still names
    (a deltacommit compacted into a base before its data instant was rolled back, by a release
    that timed compactions at the data completion) get tombstones, at ``r``."""
    source = f"{r}.{inst.ROLLBACK}"
    recs = decode_records(data, source=source) if data else []
    target = rollback_target(recs[0]) if recs else None
    if target:
        mt.rollback(target, r)
    deleted = _deletions(data, source)
    if not deleted:
        return
    listed = mt.read()
    stale: Records = {}
    for key, files in deleted.items():
        live = listed.get(key, {})
        for n, v in files.items():
            if n in live and not live[n][1]:
                stale.setdefault(key, {})[n] = v
    if stale:
        log.warning("%s: rollback %s of %s: %d files are still listed (its deltacommit was compacted before it was "
                    "rolled back); tombstoned", MDT_DIR, r, target, sum(len(v) for v in stale.values()))
        mt.append(r, completion, stale)


def rollback_deltacommit(storage: Storage, config: props.TableConfig, instant_time: str,
                         rollback_time: str | None = None) -> str | None:
    """Roll back, in the metadata table, the deltacommit of data instant ``instant_time``, which
    will not complete (an aborted write, clustering or compaction), as Hudi does
    (:meth:`MetadataTable.rollback`): its log and instant files go, and a rollback instant says
    so. ``rollback_time``: the time of the data table's rollback of that instant, when there is
    one (Hudi gives both the same time), else one of the metadata table's own. Returns the
    rollback's time, None when there was nothing to roll back (no metadata table, or no
    deltacommit of that instant: safe to call whatever happened before). Idempotent: a
    rollback that died part way is finished; one that completed is not repeated.

    Call it while the data instant's pending instant files are still on the data timeline
    (before deleting them), or under the table lock: a pending data instant keeps the files
    partition's compactions below it, so its deltacommit is still a log of the open slice."""
    if not enabled(config):
        return None
    mt = MetadataTable(storage, config)
    if not mt.exists():
        return None
    try:
        return mt.rollback(instant_time, rollback_time)
    except FileNotFoundError:
        if not mt.exists():  # the metadata table was dropped meanwhile
            return None
        raise


def pending_data_instants(storage: Storage, config: props.TableConfig) -> set[str]:
    """Requested times of the instants pending on the data timeline (requested or inflight,
    not completed), from one listing of it."""
    states: dict[str, set[bool]] = {}
    for e in storage.list_dir(config.timeline_dir, files_only=True):
        i = _parse(e.path.rsplit("/", 1)[-1])
        if i is not None:
            states.setdefault(i.requested_time, set()).add(i.is_completed)
    return {t for t, done in states.items() if True not in done}


def latest_compaction_time(storage: Storage, config: props.TableConfig) -> str | None:
    """The files partition's newest compaction (see :meth:`MetadataTable.latest_compaction`)."""
    return MetadataTable(storage, config).latest_compaction()


def compact_open_slice(storage: Storage, config: props.TableConfig, newest_completion: str,
                       pending: set[str] | None = None) -> bool:
    """Compact the files partition now, however few log files its open slice holds (the cleaner
    does, under the table lock, when archival waits for it). The base is timed right after
    ``newest_completion``, the greatest completion time on the data timeline: every log so far
    completed by then, and every later data action completes above it (its completion is issued
    above every time on the timeline, where that instant stays), so its log opens the new slice.
    A data instant pending with its deltacommit here times it just before that instant instead
    (:meth:`MetadataTable.compaction_time`), and its log stays in the open slice. False when
    there was nothing to compact. ``pending``: the requested times pending on a data timeline
    loaded under this lock hold, when the caller has one (no listing again: a data instant
    gets its deltacommit here only under the lock, so none pending since matters)."""
    if not enabled(config):
        return False
    mt = MetadataTable(storage, config)
    pending = pending_data_instants(storage, config) if pending is None else pending
    t = mt.compaction_time(pending, _after(newest_completion))
    return mt.maybe_compact(t, max(_after(t), _after(max((c for _, c in mt._completed().values()), default=t))),
                            min_logs=1)


def uncompacted_instants(storage: Storage, config: props.TableConfig) -> set[str]:
    """The data instants whose records are in log files of the files partition's open slice
    (no base holds them yet): the deltacommits since its newest compaction."""
    _, _, logs = MetadataTable(storage, config).latest_slice()
    return {p.instant_time for n in logs if (p := parse_log_file(n)) is not None}


def now_time() -> str:
    """The wall clock as an instant time (a completion time on the metadata timeline)."""
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d%H%M%S%f")[:-3]


def _before(t: str) -> str:
    """The millisecond before instant time ``t`` (Hudi's ``instantTimeMinusMillis(t, 1)``)."""
    d = _dt.datetime.strptime(t[:17], "%Y%m%d%H%M%S%f")
    return (d - _dt.timedelta(milliseconds=1)).strftime("%Y%m%d%H%M%S%f")[:-3]


def _after(t: str) -> str:
    """The next millisecond after instant time ``t`` (a completion time on the metadata timeline)."""
    d = _dt.datetime.strptime(t, "%Y%m%d%H%M%S%f")
    return (d + _dt.timedelta(milliseconds=1)).strftime("%Y%m%d%H%M%S%f")[:-3]


def listing_of(partitions: Iterable[tuple[str, str, int]]) -> dict[str, dict[str, int]]:
    """(partition, name, size) triples as a bootstrap listing."""
    out: dict[str, dict[str, int]] = {}
    for p, n, s in partitions:
        out.setdefault(p, {})[n] = s
    return out


def list_files(storage: Storage, config: props.TableConfig, partitions: list[str] | None = None, *,
               logs: bool = True) -> tuple[list[FileSlice], list[LogFile]] | None:
    """The data files the metadata table lists, as :func:`.files.list_files` gives storage's;
    None when the table keeps no metadata table (then storage is listed). A compaction of the
    files partition may delete the slice being read: the listing is then read again."""
    if not enabled(config):
        return None
    mt = MetadataTable(storage, config)
    for attempt in range(3):
        try:
            listing = mt.listing()
            break
        except FileNotFoundError:
            if not mt.exists():
                return None
            if attempt == 2:
                raise
            storage.forget_listings()  # a listing kept by the caller named the slice deleted since
    wanted = None if partitions is None else set(partitions)
    bases: list[FileSlice] = []
    found: list[LogFile] = []
    for part, files in listing.items():
        if wanted is not None and part not in wanted:
            continue
        try:  # the records were sanitized as decoded: this is the last line
            paths.partition(part, source=f"{MDT_DIR}/{PARTITION}")
        except UnsafePathError as e:
            log.warning("%s; ignored", e)
            continue
        for name, size in files.items():
            if not paths.is_data_file_name(name):
                if parse_cdc_log_file(name) is None:  # CDC log files are listed too (records_of), not data
                    log.warning("%s/%s: %r in partition %r is no data file name; ignored", MDT_DIR, PARTITION, name, part)
                continue
            if name.startswith("."):
                parsed_log = parse_log_file(name) if logs else None
                if parsed_log:
                    found.append(LogFile(part, parsed_log.file_id, parsed_log.instant_time, parsed_log.version, name, size))
                continue
            parsed = parse_data_file(name)
            if parsed:
                bases.append(FileSlice(part, parsed.file_id, parsed.instant_time, name, size))
    return bases, found
