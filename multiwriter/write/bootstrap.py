"""``bootstrap``: make a Hudi table of an existing Parquet dataset, before any writer starts.

Hudi's bootstrap (``SparkBootstrapCommitActionExecutor.execute``) gives each source partition a
mode (``BootstrapModeSelector``) and runs the METADATA_ONLY partitions first, then the
FULL_RECORD ones, each as one commit of the table type's write action (``commit``,
``deltacommit`` on Merge-on-Read) after checking that no commit completed yet, and records the
source as ``hoodie.bootstrap.base.path`` in ``hoodie.properties``:

* METADATA_ONLY (``metadataBootstrap``) at ``METADATA_BOOTSTRAP_INSTANT_TS`` (``00000000000001``):
  the source files stay where they are; a skeleton base file of Hudi's meta columns stands for
  each, and the bootstrap index maps each file group to its source file
  (:mod:`.metadata_bootstrap`); readers stitch the two (:mod:`~multiwriter.table.bootstrap_slice`).
* FULL_RECORD (``fullBootstrap``) at ``FULL_BOOTSTRAP_INSTANT_TS`` (``00000000000002``): the rows
  are bulk-inserted. Here they go through the writers' own path (heartbeat, markers, lock,
  decision log, metadata table). Given a SparkSession, Spark reads the source on executors and
  the writer's executor path writes it, the driver holding the file list, counts and write
  stats (:func:`bootstrap_source.spark_frame`); else the driver reads and writes every row.

Either commit that dies is an ordinary failed write that the companion job rolls back; the
bootstrap then runs again (a bootstrap whose METADATA_ONLY commit completed goes on with its
FULL_RECORD one). The source files are only read.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import threading
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from .. import faults
from ..config import WriterConfig
from ..errors import BootstrapModeError, BootstrapPendingError, ConfigError
from ..format import instant as inst
from ..lock.base import LockProvider
from ..redact import redact
from ..result import CommitResult
from ..storage import Storage
from ..table import bootstrap_index_files, bootstrap_state
from ..table import properties as props
from ..table.table import Table
from . import metadata_bootstrap
from .bootstrap_source import Source, SourceFile, scan, spark_frame
from .writer import Writer

log = logging.getLogger(__name__)

FULL_RECORD = "FULL_RECORD"
METADATA_ONLY = "METADATA_ONLY"
MODES = (FULL_RECORD, METADATA_ONLY)
#: Hudi's keys choosing the mode per partition (``HoodieBootstrapConfig``)
SELECTOR_KEY = "hoodie.bootstrap.mode.selector"
REGEX_KEY = "hoodie.bootstrap.mode.selector.regex"
REGEX_MODE_KEY = "hoodie.bootstrap.mode.selector.regex.mode"
BASE_PATH_KEY = "hoodie.bootstrap.base.path"
#: Hudi's selector classes (``org.apache.hudi.client.bootstrap.selector``) by simple name
SELECTORS = {"FullRecordBootstrapModeSelector": FULL_RECORD, "MetadataOnlyBootstrapModeSelector": METADATA_ONLY,
             "BootstrapRegexModeSelector": None}
#: the ``hoodie.properties`` entries a bootstrap's modes decide (a rerun with other modes sets them again)
PLAN_KEYS = (bootstrap_index_files.INDEX_CLASS_KEY, bootstrap_index_files.INDEX_TYPE_KEY, bootstrap_state.BOTH_MODES_KEY)
#: the Spark job group of a bootstrap of table ``name`` (the Spark UI lists its jobs under it)
JOB_GROUP = "multiwriter-bootstrap-{name}"
#: seconds between two progress lines of a bootstrap's Spark jobs
PROGRESS_INTERVAL_S = 10.0


@dataclasses.dataclass(frozen=True)
class BootstrapResult(CommitResult):
    """What a bootstrap did: its last commit (``instant``), with the rows and files of all its
    commits counted together; ``instants``: the requested time of each commit it made, in order
    (``00000000000001`` for METADATA_ONLY partitions, then ``00000000000002`` for FULL_RECORD ones)."""

    instants: tuple[str, ...] = ()


def bootstrap(source: str, table_path: str, *, name: str, record_key: str | list[str] | tuple[str, ...],
              partition_by: list[str] | tuple[str, ...] | None = None, ordering_field: str | None = None,
              mode: str = FULL_RECORD, table_type: str = props.COPY_ON_WRITE, lock: LockProvider,
              hive_style: bool | None = None, num_buckets: int | None = None, table_version: int = props.WRITE_VERSION,
              metadata: bool = True, options: Mapping[str, str] | None = None, writer_id: str = "bootstrap",
              heartbeat_interval_s: float = 10.0, heartbeat_tolerable_misses: int = 2,
              target_file_size_bytes: int = 128 * 1024 * 1024, spark: Any = None,
              executor: str = "spark") -> BootstrapResult:
    """Bootstrap the Parquet dataset at ``source`` into a new Hudi table at ``table_path``.

    ``mode``: ``"FULL_RECORD"`` (the rows rewritten into the table) or ``"METADATA_ONLY"`` (the
    source files stay and skeleton files point at them) for every partition; ``options``: Hudi's
    bootstrap keys (``hoodie.bootstrap.mode.selector`` and its regex keys, which choose per
    partition; ``hoodie.bootstrap.base.path``, which must then name ``source``).

    Every check (the modes, the source's layout and schemas, the table being new or a failed
    bootstrap's) runs before anything is written; the table's partition folders keep the
    source's style (``hive_style``: detected, or given and checked). Writers are refused until
    it completes; if it dies, the companion job rolls it back and it can be run again.

    ``spark``: a SparkSession reads the FULL_RECORD partitions on executors and writes them
    through the writer's executor path (``executor``, as :class:`WriterConfig`'s: ``"spark"`` never
    collects a row on the driver, ``"auto"`` lets a source of at most ``driver_max_rows`` rows
    through the driver); its Spark jobs run in job group :data:`JOB_GROUP` and are logged as they
    go. METADATA_ONLY partitions are done by this process, which reads only their key columns."""
    options = dict(options or {})
    source = _absolute(str(source))
    _check_base_path(source, options)
    keys = (record_key,) if isinstance(record_key, str) else tuple(record_key)
    parts = tuple(partition_by or ())
    src_storage = Storage(source)
    _check_apart(src_storage, Storage(table_path))
    src = scan(src_storage, parts, keys + ((ordering_field,) if ordering_field else ()), hive_style)
    files = _by_partition(src)
    modes = _check_modes(options, mode, set(files))
    meta = sorted(p for p, m in modes.items() if m == METADATA_ONLY)
    full = sorted(p for p, m in modes.items() if m == FULL_RECORD)
    if meta:
        _check_metadata_only(table_type, num_buckets)
    meta_done = _check_target(table_path, meta, full)
    cfg = WriterConfig(writer_id=writer_id, lock=lock, operation="insert", heartbeat_interval_s=heartbeat_interval_s,
                       heartbeat_tolerable_misses=heartbeat_tolerable_misses, register_writer=False,
                       target_file_size_bytes=target_file_size_bytes, max_conflict_retries=0,
                       executor=executor if spark is not None else "auto")
    recorded = _properties(src_storage.uri, bool(meta), bool(full), table_version)
    results: list[CommitResult] = []
    with _progress(spark, name, f"multiwriter: bootstrap {redact(table_path)} from {redact(source)}"):
        table = Table.create(table_path, name=name, schema=src.schema, record_key=keys, partition_by=parts,
                             ordering_field=ordering_field, hive_style_partitioning=src.hive_style, lock=lock,
                             table_type=table_type, num_buckets=num_buckets, table_version=table_version,
                             metadata=metadata, properties=recorded)
        _check_same_source(table, src_storage.uri)
        table = _record_plan(table, recorded)
        faults.point("bootstrap-after-table")
        if meta and not meta_done:
            parts_ = [metadata_bootstrap.Partition(p, tuple(files[p])) for p in meta]
            results.append(metadata_bootstrap.run(table, src, src_storage, parts_, cfg))
            faults.point("bootstrap-after-metadata-only")
        if full:
            full_src = dataclasses.replace(src, files=tuple(f for p in full for f in files[p]))
            rows = spark_frame(full_src, src_storage, spark) if spark is not None else _read_on_driver(full_src, src_storage)
            results.append(_write(table, rows, src_storage.uri, cfg))
    faults.point("bootstrap-after-commit")
    result = _combined(results, meta_done)
    log.info("bootstrapped %s from %s: %d rows in %d files at instant(s) %s%s", redact(table_path), redact(source),
             result.num_inserts, result.files_written, ", ".join(result.instants),
             " on Spark" if spark is not None and full else "")
    return result


def _by_partition(src: Source) -> dict[str, list[SourceFile]]:
    out: dict[str, list[SourceFile]] = {}
    for f in src.files:
        out.setdefault(_partition_path(src, f.values), []).append(f)
    return out


def _combined(results: list[CommitResult], meta_done: bool) -> BootstrapResult:
    """The last commit's result, counting every commit's rows and files."""
    last = results[-1]
    instants = tuple(r.instant.requested_time for r in results if r.instant is not None)
    if meta_done:
        instants = (inst.METADATA_BOOTSTRAP_TIME, *instants)
    fields = {f.name: getattr(last, f.name) for f in dataclasses.fields(CommitResult)}
    fields.update(num_inserts=sum(r.num_inserts for r in results), files_written=sum(r.files_written for r in results),
                  duration_s=sum(r.duration_s for r in results), attempts=sum(r.attempts for r in results))
    return BootstrapResult(**fields, instants=instants)


def _properties(source_uri: str, meta: bool, full: bool, version: int) -> dict[str, str]:
    """What the table records: the source (``HoodieTableConfig.BOOTSTRAP_BASE_PATH``), the
    index Hudi's readers look up when some partition is METADATA_ONLY, and whether a FULL_RECORD
    commit follows the METADATA_ONLY one."""
    out = {props.BOOTSTRAP_BASE_PATH_KEY: source_uri}
    if meta:
        out.update(bootstrap_index_files.table_properties(version))
    if meta and full:
        out[bootstrap_state.BOTH_MODES_KEY] = "true"
    return out


def _record_plan(table: Table, recorded: dict[str, str]) -> Table:
    """A table reused from an earlier attempt with other modes records this attempt's plan."""
    current = table.config.raw
    if all(current.get(k) == recorded.get(k) for k in PLAN_KEYS):
        return table

    def change(p: dict[str, str]) -> dict[str, str]:
        for k in PLAN_KEYS:
            p.pop(k, None)
        p.update({k: v for k, v in recorded.items() if k in PLAN_KEYS})
        return p

    props.modify(table.storage, change)
    return Table.open(table.path)


def _write(table: Table, rows: Any, source_uri: str, cfg: WriterConfig) -> CommitResult:
    """The rows as the table's FULL_RECORD commit, at Hudi's bootstrap time, naming the source."""
    writer = Writer(table, cfg)
    try:
        return writer.write(rows, instant_time=inst.FULL_BOOTSTRAP_TIME, extra_metadata={BASE_PATH_KEY: source_uri})
    finally:
        writer.close()


def _read_on_driver(src: Source, storage: Storage) -> pa.Table:
    """Every row in the driver's memory: the way for a source that fits it, without Spark."""
    return pa.concat_tables([src.read(storage, f) for f in src.files])


def _progress(spark: Any, name: str, description: str) -> Any:
    """Names and logs the bootstrap's Spark jobs; nothing without Spark."""
    return SparkProgress(spark, JOB_GROUP.format(name=name), description) if spark is not None \
        else contextlib.nullcontext()


class SparkProgress:
    """Runs the block's Spark jobs in job group ``group`` (the Spark UI names the bootstrap in
    each job's description) and logs each job as it advances and when it ends (tasks done of
    all, its stages), from Spark's status tracker every :data:`PROGRESS_INTERVAL_S`: a long
    bootstrap says how far it got without a look at the UI."""

    PROPERTIES = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")

    def __init__(self, spark: Any, group: str, description: str, interval_s: float | None = None) -> None:
        self.sc = spark.sparkContext
        self.group, self.description = group, description
        self.interval_s = PROGRESS_INTERVAL_S if interval_s is None else interval_s
        self.seen: dict[int, tuple[str, int]] = {}  # job id -> (status, tasks done) last logged
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="mw-bootstrap-progress", daemon=True)

    def __enter__(self) -> SparkProgress:
        self.saved = {k: self.sc.getLocalProperty(k) for k in self.PROPERTIES}
        self.earlier = set(self.sc.statusTracker().getJobIdsForGroup(self.group))  # an earlier bootstrap's
        self.sc.setJobGroup(self.group, self.description)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        self._poll_quietly()  # every job's last state, however short it ran
        for k, v in self.saved.items():
            self.sc.setLocalProperty(k, v)

    def _run(self) -> None:
        while not self.stop.wait(self.interval_s):
            self._poll_quietly()

    def _poll_quietly(self) -> None:
        """Progress is best effort: it never fails the bootstrap nor hides its error."""
        try:
            self.poll()
        except Exception as e:  # noqa: BLE001 -- a dead context, a status the tracker lost
            log.debug("bootstrap progress: %s", e)

    def poll(self) -> None:
        """Log each job of the group whose state or task count changed since its last line."""
        tracker = self.sc.statusTracker()
        for job_id in sorted(set(tracker.getJobIdsForGroup(self.group)) - self.earlier):
            job = tracker.getJobInfo(job_id)
            if job is None:
                continue
            stages = [s for s in (tracker.getStageInfo(i) for i in job.stageIds) if s is not None]
            done, total = sum(s.numCompletedTasks for s in stages), sum(s.numTasks for s in stages)
            state = (str(job.status), done)
            if self.seen.get(job_id) != state:
                self.seen[job_id] = state
                log.info("%s: Spark job %d %s, %d of %d tasks done (stages %s)", self.description, job_id,
                         job.status, done, total, list(job.stageIds))


def _absolute(source: str) -> str:
    """A local source as an absolute path: the table records it, and its readers (a skeleton's
    source is read through it) run in other working directories."""
    return source if "://" in source else os.path.abspath(os.path.expanduser(source))


def _check_base_path(source: str, options: dict[str, str]) -> None:
    given = options.get(BASE_PATH_KEY)
    if given is not None and _absolute(given).rstrip("/") != source.rstrip("/"):
        raise ConfigError(f"{BASE_PATH_KEY}={redact(given)} but the source is {redact(source)}: give one of them")


def _partition_path(src: Source, values: tuple[str, ...]) -> str:
    if src.hive_style:
        return "/".join(f"{c}={v}" for c, v in zip(src.partition_by, values, strict=True))
    return "/".join(values)


def _check_modes(options: dict[str, str], mode: str, partitions: set[str]) -> dict[str, str]:
    """Each partition's mode, Hudi's way (``BootstrapModeSelector``): the selector class names one
    mode for all, or the regex selector gives partitions matching ``hoodie.bootstrap.mode.selector.regex``
    its ``.regex.mode`` and the others the other mode; without a selector, ``mode`` for all."""
    mode = mode.upper()
    if mode not in MODES:
        raise ConfigError(f"bootstrap mode {mode!r}: Hudi's modes are {list(MODES)}")
    selector = options.get(SELECTOR_KEY)
    if selector is None:
        return dict.fromkeys(partitions, mode)
    simple = selector.rsplit(".", 1)[-1]
    if simple not in SELECTORS:
        raise ConfigError(f"{SELECTOR_KEY}={selector}: multiwriter knows Hudi's selectors {sorted(SELECTORS)}")
    chosen = SELECTORS[simple]
    return dict.fromkeys(partitions, chosen) if chosen is not None else _regex_modes(options, partitions)


def _check_metadata_only(table_type: str, num_buckets: int | None) -> None:
    """METADATA_ONLY keeps one file group per source file, whatever its keys: a bucket index,
    which places each key in the file group its hash names, cannot hold such groups."""
    if num_buckets is not None:
        raise BootstrapModeError(
            f"bootstrap mode METADATA_ONLY with num_buckets={num_buckets}: a skeleton file group holds the keys of one "
            f"source file, not those of a bucket, so a bucket-indexed {table_type} table cannot take it; nothing was "
            "written. Bootstrap FULL_RECORD, or leave num_buckets out")


def _check_apart(source: Storage, table: Storage) -> None:
    """The table outside its source and the source outside the table: a listing of either must
    never find the other's files (the source is never touched, whatever cleans the table)."""
    a, b = source.uri_of("").rstrip("/") + "/", table.uri_of("").rstrip("/") + "/"
    if a.startswith(b) or b.startswith(a):
        raise ConfigError(f"bootstrap source {redact(source.uri)} and table {redact(table.uri)} overlap: the table "
                          "must lie outside its source, and the source outside the table; choose another table path")


def _regex_modes(options: dict[str, str], partitions: set[str]) -> dict[str, str]:
    regex_mode = options.get(REGEX_MODE_KEY, METADATA_ONLY).upper()
    if regex_mode not in MODES:
        raise ConfigError(f"{REGEX_MODE_KEY}={regex_mode}: Hudi's modes are {list(MODES)}")
    other = FULL_RECORD if regex_mode == METADATA_ONLY else METADATA_ONLY
    try:
        pattern = re.compile(options.get(REGEX_KEY, ".*"))
    except re.error as e:
        raise ConfigError(f"{REGEX_KEY}: not a regular expression ({e})") from e
    return {p: regex_mode if pattern.fullmatch(p) else other for p in partitions}


def _check_target(table_path: str, meta: list[str], full: list[str]) -> bool:
    """The table is new, or holds only a bootstrap that was rolled back (or never began its
    instant), or only the METADATA_ONLY commit of a bootstrap whose FULL_RECORD part is still to
    do (True: that part is what runs now); a pending bootstrap or any other completed write
    refuses."""
    storage = Storage(table_path)
    if not storage.exists(props.PROPERTIES_FILE):
        return False
    table = Table.open(table_path)
    tl = table.timeline()
    pending = bootstrap_state.pending_bootstrap(tl)
    if pending is not None:
        raise BootstrapPendingError(
            f"table {redact(table_path)}: bootstrap instant {pending} is still pending: wait for it, or, if its process "
            "died, let the companion job roll it back once its heartbeat lapsed, then run the bootstrap again",
            instant=pending)
    done = tl.last_completed_write()
    if done is None:
        return False
    if full and bootstrap_state.full_record_follows(tl, table.config):
        covered = sorted(tl.commit_metadata(done).partition_to_write_stats)
        if covered == meta:
            return True
        raise ConfigError(f"table {redact(table_path)}: its completed METADATA_ONLY bootstrap commit covers partitions "
                          f"{covered[:5]}, this run selects {meta[:5]} for METADATA_ONLY: run the bootstrap again with "
                          "the same mode options")
    raise ConfigError(f"table {redact(table_path)} already has completed write {done.requested_time}: a bootstrap "
                      "makes a new table; bootstrap into a new path")


def _check_same_source(table: Table, source_uri: str) -> None:
    recorded = table.config.raw.get(props.BOOTSTRAP_BASE_PATH_KEY)
    if recorded != source_uri:
        raise ConfigError(f"table {redact(table.path)} was created for bootstrap source {redact(recorded or '(none)')}, "
                          f"not {redact(source_uri)}: bootstrap into a new path")
