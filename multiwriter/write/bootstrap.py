"""``bootstrap``: make a Hudi table of an existing Parquet dataset, before any writer starts.

Hudi's full-record bootstrap (``SparkBootstrapCommitActionExecutor.fullBootstrap``) bulk-inserts
the source's rows at the fixed instant ``HoodieTimeline.FULL_BOOTSTRAP_INSTANT_TS``
(``00000000000002``) as the table type's write action (``commit``, ``deltacommit`` on
Merge-on-Read), after checking that no commit completed yet, and records the source as
``hoodie.bootstrap.base.path`` in ``hoodie.properties``. Here the rows go through the writers'
own path (heartbeat, markers, lock, decision log, metadata table), so a bootstrap that dies is
an ordinary failed write that the companion job rolls back; the source files are only read.
Given a SparkSession, Spark reads the source on executors and the writer's executor path writes
it, the driver holding the file list, counts and write stats (:func:`bootstrap_source.spark_frame`);
else the driver reads and writes every row. Hudi's ``METADATA_ONLY`` mode (skeleton files pointing at the source, a bootstrap index) is not
built: it is refused by name.
"""
from __future__ import annotations

import contextlib
import logging
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
from ..table import bootstrap_state
from ..table import properties as props
from ..table.table import Table
from .bootstrap_source import Source, scan, spark_frame
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
#: the Spark job group of a bootstrap of table ``name`` (the Spark UI lists its jobs under it)
JOB_GROUP = "multiwriter-bootstrap-{name}"
#: seconds between two progress lines of a bootstrap's Spark jobs
PROGRESS_INTERVAL_S = 10.0


def bootstrap(source: str, table_path: str, *, name: str, record_key: str | list[str] | tuple[str, ...],
              partition_by: list[str] | tuple[str, ...] | None = None, ordering_field: str | None = None,
              mode: str = FULL_RECORD, table_type: str = props.COPY_ON_WRITE, lock: LockProvider,
              hive_style: bool | None = None, num_buckets: int | None = None, table_version: int = props.WRITE_VERSION,
              metadata: bool = True, options: Mapping[str, str] | None = None, writer_id: str = "bootstrap",
              heartbeat_interval_s: float = 10.0, heartbeat_tolerable_misses: int = 2,
              target_file_size_bytes: int = 128 * 1024 * 1024, spark: Any = None,
              executor: str = "spark") -> CommitResult:
    """Bootstrap the Parquet dataset at ``source`` into a new Hudi table at ``table_path``.

    Every check (the mode, the source's layout and schemas, the table being new or a failed
    bootstrap's) runs before anything is written; the table's partition folders keep the
    source's style (``hive_style``: detected, or given and checked). ``options``: Hudi's
    bootstrap keys (``hoodie.bootstrap.mode.selector`` and its regex keys,
    ``hoodie.bootstrap.base.path``, which must then name ``source``). Writers are refused until
    it completes; if it dies, the companion job rolls it back and it can be run again.

    ``spark``: a SparkSession reads the source on executors and writes it through the writer's
    executor path (``executor``, as :class:`WriterConfig`'s: ``"spark"`` never collects a row on
    the driver, ``"auto"`` lets a source of at most ``driver_max_rows`` rows through the driver);
    its Spark jobs run in job group :data:`JOB_GROUP` and are logged as they go."""
    options = dict(options or {})
    _check_base_path(source, options)
    keys = (record_key,) if isinstance(record_key, str) else tuple(record_key)
    parts = tuple(partition_by or ())
    src_storage = Storage(source)
    src = scan(src_storage, parts, keys + ((ordering_field,) if ordering_field else ()), hive_style)
    _check_modes(options, mode, {_partition_path(src, f.values) for f in src.files})
    _check_target(table_path)
    cfg = WriterConfig(writer_id=writer_id, lock=lock, operation="insert", heartbeat_interval_s=heartbeat_interval_s,
                       heartbeat_tolerable_misses=heartbeat_tolerable_misses, register_writer=False,
                       target_file_size_bytes=target_file_size_bytes, max_conflict_retries=0,
                       executor=executor if spark is not None else "auto")
    with _progress(spark, name, f"multiwriter: bootstrap {redact(table_path)} from {redact(source)}"):
        rows = spark_frame(src, src_storage, spark) if spark is not None else _read_on_driver(src, src_storage)
        table = Table.create(table_path, name=name, schema=src.schema, record_key=keys, partition_by=parts,
                             ordering_field=ordering_field, hive_style_partitioning=src.hive_style, lock=lock,
                             table_type=table_type, num_buckets=num_buckets, table_version=table_version,
                             metadata=metadata, properties={props.BOOTSTRAP_BASE_PATH_KEY: src_storage.uri})
        _check_same_source(table, src_storage.uri)
        faults.point("bootstrap-after-table")
        result = _write(table, rows, src_storage.uri, cfg)
    faults.point("bootstrap-after-commit")
    log.info("bootstrapped %s from %s: %d rows in %d files at instant %s%s", redact(table_path), redact(source),
             result.num_inserts, result.files_written, inst.FULL_BOOTSTRAP_TIME, " on Spark" if spark is not None else "")
    return result


def _write(table: Table, rows: Any, source_uri: str, cfg: WriterConfig) -> CommitResult:
    """The rows as the table's first write, at Hudi's bootstrap time, naming the source."""
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


def _check_base_path(source: str, options: dict[str, str]) -> None:
    given = options.get(BASE_PATH_KEY)
    if given is not None and given.rstrip("/") != str(source).rstrip("/"):
        raise ConfigError(f"{BASE_PATH_KEY}={redact(given)} but the source is {redact(source)}: give one of them")


def _partition_path(src: Source, values: tuple[str, ...]) -> str:
    if src.hive_style:
        return "/".join(f"{c}={v}" for c, v in zip(src.partition_by, values, strict=True))
    return "/".join(values)


def _check_modes(options: dict[str, str], mode: str, partitions: set[str]) -> None:
    """Each partition's mode, Hudi's way (``BootstrapModeSelector``): the selector class names one
    mode for all, or the regex selector gives partitions matching ``hoodie.bootstrap.mode.selector.regex``
    its ``.regex.mode`` and the others the other mode. Only FULL_RECORD is built."""
    mode = mode.upper()
    if mode not in MODES:
        raise ConfigError(f"bootstrap mode {mode!r}: Hudi's modes are {list(MODES)}")
    selector = options.get(SELECTOR_KEY)
    chosen: dict[str, str] = dict.fromkeys(partitions, mode)
    if selector is not None:
        simple = selector.rsplit(".", 1)[-1]
        if simple not in SELECTORS:
            raise ConfigError(f"{SELECTOR_KEY}={selector}: multiwriter knows Hudi's selectors {sorted(SELECTORS)}")
        if SELECTORS[simple] is not None:
            chosen = dict.fromkeys(partitions, SELECTORS[simple])
        else:
            chosen = _regex_modes(options, partitions)
    refused = sorted(p for p, m in chosen.items() if m == METADATA_ONLY)
    if refused:
        raise BootstrapModeError(
            f"bootstrap mode METADATA_ONLY (partitions {refused[:5]}{' ...' if len(refused) > 5 else ''}) is not built "
            "in multiwriter yet: nothing was written. Use mode FULL_RECORD (hoodie.bootstrap.mode.selector="
            "org.apache.hudi.client.bootstrap.selector.FullRecordBootstrapModeSelector), or bootstrap with Hudi")


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


def _check_target(table_path: str) -> None:
    """The table is new, or holds only a bootstrap that was rolled back (or never began its
    instant); a pending bootstrap or any completed write refuses."""
    storage = Storage(table_path)
    if not storage.exists(props.PROPERTIES_FILE):
        return
    table = Table.open(table_path)
    tl = table.timeline()
    pending = bootstrap_state.pending_bootstrap(tl)
    if pending is not None:
        raise BootstrapPendingError(
            f"table {redact(table_path)}: bootstrap instant {pending} is still pending: wait for it, or, if its process "
            "died, let the companion job roll it back once its heartbeat lapsed, then run the bootstrap again",
            instant=pending)
    done = tl.last_completed_write()
    if done is not None:
        raise ConfigError(f"table {redact(table_path)} already has completed write {done.requested_time}: a bootstrap "
                          "makes a new table; bootstrap into a new path")


def _check_same_source(table: Table, source_uri: str) -> None:
    recorded = table.config.raw.get(props.BOOTSTRAP_BASE_PATH_KEY)
    if recorded != source_uri:
        raise ConfigError(f"table {redact(table.path)} was created for bootstrap source {redact(recorded or '(none)')}, "
                          f"not {redact(source_uri)}: bootstrap into a new path")
