"""``bootstrap``: make a Hudi table of an existing Parquet dataset, before any writer starts.

Hudi's full-record bootstrap (``SparkBootstrapCommitActionExecutor.fullBootstrap``) bulk-inserts
the source's rows at the fixed instant ``HoodieTimeline.FULL_BOOTSTRAP_INSTANT_TS``
(``00000000000002``) as the table type's write action (``commit``, ``deltacommit`` on
Merge-on-Read), after checking that no commit completed yet, and records the source as
``hoodie.bootstrap.base.path`` in ``hoodie.properties``. Here the rows go through the writers'
own path (heartbeat, markers, lock, decision log, metadata table), so a bootstrap that dies is
an ordinary failed write that the companion job rolls back; the source files are only read.
Hudi's ``METADATA_ONLY`` mode (skeleton files pointing at the source, a bootstrap index) is not
built: it is refused by name.
"""
from __future__ import annotations

import logging
import re
from collections.abc import Mapping

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
from .bootstrap_source import Source, scan
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


def bootstrap(source: str, table_path: str, *, name: str, record_key: str | list[str] | tuple[str, ...],
              partition_by: list[str] | tuple[str, ...] | None = None, ordering_field: str | None = None,
              mode: str = FULL_RECORD, table_type: str = props.COPY_ON_WRITE, lock: LockProvider,
              hive_style: bool | None = None, num_buckets: int | None = None, table_version: int = props.WRITE_VERSION,
              metadata: bool = True, options: Mapping[str, str] | None = None, writer_id: str = "bootstrap",
              heartbeat_interval_s: float = 10.0, heartbeat_tolerable_misses: int = 2,
              target_file_size_bytes: int = 128 * 1024 * 1024) -> CommitResult:
    """Bootstrap the Parquet dataset at ``source`` into a new Hudi table at ``table_path``.

    Every check (the mode, the source's layout and schemas, the table being new or a failed
    bootstrap's) runs before anything is written; the table's partition folders keep the
    source's style (``hive_style``: detected, or given and checked). ``options``: Hudi's
    bootstrap keys (``hoodie.bootstrap.mode.selector`` and its regex keys,
    ``hoodie.bootstrap.base.path``, which must then name ``source``). Writers are refused until
    it completes; if it dies, the companion job rolls it back and it can be run again."""
    options = dict(options or {})
    _check_base_path(source, options)
    keys = (record_key,) if isinstance(record_key, str) else tuple(record_key)
    parts = tuple(partition_by or ())
    src_storage = Storage(source)
    src = scan(src_storage, parts, keys + ((ordering_field,) if ordering_field else ()), hive_style)
    _check_modes(options, mode, {_partition_path(src, f.values) for f in src.files})
    _check_target(table_path)
    rows = pa.concat_tables([src.read(src_storage, f) for f in src.files])
    table = Table.create(table_path, name=name, schema=src.schema, record_key=keys, partition_by=parts,
                         ordering_field=ordering_field, hive_style_partitioning=src.hive_style, lock=lock,
                         table_type=table_type, num_buckets=num_buckets, table_version=table_version,
                         metadata=metadata, properties={props.BOOTSTRAP_BASE_PATH_KEY: src_storage.uri})
    _check_same_source(table, src_storage.uri)
    faults.point("bootstrap-after-table")
    cfg = WriterConfig(writer_id=writer_id, lock=lock, operation="insert", heartbeat_interval_s=heartbeat_interval_s,
                       heartbeat_tolerable_misses=heartbeat_tolerable_misses, register_writer=False,
                       target_file_size_bytes=target_file_size_bytes, max_conflict_retries=0)
    writer = Writer(table, cfg)
    try:
        result = writer.write(rows, instant_time=inst.FULL_BOOTSTRAP_TIME,
                              extra_metadata={BASE_PATH_KEY: src_storage.uri})
    finally:
        writer.close()
    faults.point("bootstrap-after-commit")
    log.info("bootstrapped %s from %s: %d rows in %d files at instant %s", redact(table_path), redact(source),
             rows.num_rows, result.files_written, inst.FULL_BOOTSTRAP_TIME)
    return result


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
