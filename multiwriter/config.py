"""``WriterConfig``: how one writer writes; validated at construction (``ConfigError``)."""
from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Any

from .errors import ConfigError
from .lock.base import LockProvider

OPERATIONS = ("upsert", "insert", "delete", "insert_overwrite_table")
EXECUTORS = ("auto", "driver", "spark")
#: what a writer does with a batch id at or below its checkpoint that another query sent
ON_CHECKPOINT_RESET = ("fail", "continue")
#: optimistic: the first committer on a file group wins; non_blocking: log appends never
#: conflict (Merge-on-Read with a bucket index; the merge rule orders versions)
CONCURRENCY = ("optimistic", "non_blocking")
WRITER_ID_RE = re.compile(r"^[A-Za-z0-9_.-]{1,128}\Z")
#: ids the pattern admits but paths and ZooKeeper nodes read as relative steps
RESERVED_WRITER_IDS = frozenset({".", ".."})

#: Hudi option keys accepted by :meth:`WriterConfig.from_options` that set a WriterConfig field
HUDI_KEYS = {
    "hoodie.datasource.write.operation": "operation",
    "hoodie.write.lock.wait_time_ms": "lock_timeout_s",
    "hoodie.client.heartbeat.interval_in_ms": "heartbeat_interval_s",
    "hoodie.client.heartbeat.tolerable.misses": "heartbeat_tolerable_misses",
    "hoodie.parquet.max.file.size": "target_file_size_bytes",
    "hoodie.parquet.small.file.limit": "small_file_limit_bytes",
    "hoodie.datasource.write.streaming.checkpoint.identifier": "writer_id",
    "multiwriter.on.checkpoint.reset": "on_checkpoint_reset",  # ours: Hudi has no such setting
    "multiwriter.begin.ahead.ms": "begin_ahead_s",  # ours
    "hoodie.write.set.null.for.missing.columns": "allow_missing_columns",
    "hoodie.record.index.update.partition.path": "update_partition_path",
}
#: Hudi judges a writer dead after ``interval * misses``, we after ``interval * (misses + 1)``
MISSES_KEY = "hoodie.client.heartbeat.tolerable.misses"
#: given in milliseconds by Hudi, in seconds here
MILLIS_KEYS = {"hoodie.write.lock.wait_time_ms", "hoodie.client.heartbeat.interval_in_ms", "multiwriter.begin.ahead.ms"}

#: Hudi's ZooKeeper lock provider; selecting it selects :class:`ZooKeeperLock`
ZK_PROVIDER = "org.apache.hudi.client.transaction.lock.ZookeeperBasedLockProvider"
LOCK_PROVIDER_KEY = "hoodie.write.lock.provider"
ZK_PREFIX = "hoodie.write.lock.zookeeper."
ZK_KEYS = {"url", "port", "base_path", "lock_key", "session_timeout_ms", "connection_timeout_ms"}
LOCK_RETRIES_KEY = "hoodie.write.lock.num_retries"
#: Digest credentials ``USER:PASSWORD`` of the ZooKeeper lock; with them every node multiwriter
#: creates carries a digest ACL. Ours: Hudi has no such key (its ZooKeeper client reads JAAS).
ZK_AUTH_KEY = "multiwriter.lock.zookeeper.auth"
#: the same credentials for the command line, read from the environment (a command line is
#: visible to every user of the host)
ZK_AUTH_ENV = "MULTIWRITER_ZK_AUTH"
#: Hudi's storage-based lock provider (a lock object in the table); selecting it selects :class:`StorageLock`
STORAGE_PROVIDER = "org.apache.hudi.client.transaction.lock.StorageBasedLockProvider"
STORAGE_PREFIX = "hoodie.write.lock.storage."
#: its keys (seconds) and the StorageLock arguments they set; heartbeat.poll.secs is Hudi's older name
STORAGE_KEYS = {"validity.timeout.secs": "validity_s", "renew.interval.secs": "renew_interval_s",
                "heartbeat.poll.secs": "renew_interval_s"}

#: Hudi's concurrency modes, as ``WriterConfig.concurrency`` names them
CONCURRENCY_KEY = "hoodie.write.concurrency.mode"
CONCURRENCY_MODES = {"optimistic_concurrency_control": "optimistic", "non_blocking_concurrency_control": "non_blocking"}

#: keys whose only accepted value is what this sink does (compared case-insensitively)
REQUIRED_VALUES = {
    "hoodie.cleaner.policy.failed.writes": "lazy",
}

#: Hudi's table keys, mapped onto ``Table.create`` settings (see :func:`table_settings_from_options`)
TABLE_KEYS = {
    "hoodie.table.name": "name",
    "hoodie.datasource.write.recordkey.field": "record_key",
    "hoodie.datasource.write.partitionpath.field": "partition_by",
    "hoodie.datasource.write.precombine.field": "ordering_field",
    "hoodie.table.type": "table_type",
    "hoodie.datasource.write.table.type": "table_type",
    "hoodie.bucket.index.num.buckets": "num_buckets",
    "hoodie.bucket.index.hash.field": "bucket_hash_fields",
    "hoodie.table.ordering.fields": "ordering_field",
    "hoodie.metadata.enable": "metadata",
    "hoodie.metadata.index.column.stats.enable": "column_stats",
    "hoodie.metadata.record.index.enable": "record_index",
    "hoodie.metadata.record.index.min.filegroup.count": "record_index_file_groups",
    "hoodie.write.table.version": "table_version",
}
#: the index a table's writers use: the bloom index, or Hudi's simple bucket index
INDEX_TYPE_KEY = "hoodie.index.type"
INDEX_TYPES = ("BLOOM", "BUCKET")


@dataclass
class WriterConfig:
    """Settings of one writer. ``writer_id`` must be unique among concurrent writers."""

    writer_id: str = "default"
    lock: LockProvider | None = None
    operation: str = "upsert"
    heartbeat_interval_s: float = 10.0
    heartbeat_tolerable_misses: int = 2
    max_conflict_retries: int = 3
    retry_backoff_s: float = 0.2
    retry_backoff_max_s: float = 5.0
    lock_timeout_s: float = 60.0
    target_file_size_bytes: int = 128 * 1024 * 1024
    #: Copy-on-Write upserts: a file group the batch rewrites anyway (it updates keys there)
    #: and smaller than this takes the batch's new keys of its partition, up to the target
    #: size, instead of a new small file beside it (Hudi's small-file handling, limited to
    #: groups already rewritten so inserts add no file group to conflict on); 0: never
    small_file_limit_bytes: int = 100 * 1024 * 1024
    executor: str = "auto"
    driver_max_rows: int = 200_000
    register_writer: bool = True
    #: Hudi's ``hoodie.write.set.null.for.missing.columns``: False (Hudi's default) refuses a batch
    #: lacking table columns (SchemaMismatchError naming them), so a writer on an older schema
    #: cannot blank a column another writer added; True writes omitted nullable columns as null
    allow_missing_columns: bool = False
    #: partial updates (Hudi's ``hoodie.table.partial.update.mode=KEEP_VALUES``): a batch may omit
    #: nullable columns, and an update keeps the stored value of each column it omits (an insert
    #: writes null). Copy-on-Write tables only: a Merge-on-Read table refuses it (ConfigError)
    partial_update: bool = False
    #: a table keeping the record index (global: a key lives in one partition), Hudi's
    #: ``hoodie.record.index.update.partition.path``: a record whose key is stored in another
    #: partition updates it there (False, Hudi's default), or moves it to its own (True: the
    #: stored one is deleted; driver writes only, a Spark DataFrame is refused)
    update_partition_path: bool = False
    #: identifies the streaming query feeding this writer where Spark's own query id is not
    #: available (pyarrow batches, ``mw.write``); a checkpoint reset is told apart from a replay by it
    query_id: str | None = None
    #: a batch id at or below the checkpoint from another query: "fail" (CheckpointResetError)
    #: or "continue" (accept the new query and write its batches)
    on_checkpoint_reset: str = "fail"
    #: None: non_blocking on Merge-on-Read tables with a bucket index, optimistic elsewhere
    concurrency: str | None = None
    #: > 0: each commit that rewrote no file group (appends; Merge-on-Read log writes) also
    #: begins this writer's next instant in its lock hold (one lock round per batch instead of
    #: two); that instant stays pending, its heartbeat beating, until the next batch takes it,
    #: and is given back (deleted) after this many idle seconds or at ``close``. For writers fed
    #: back to back (a streaming backlog); 0: off
    begin_ahead_s: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.writer_id, str) or not WRITER_ID_RE.match(self.writer_id):
            raise ConfigError(
                f"writer_id {self.writer_id!r} must match {WRITER_ID_RE.pattern} "
                "(it names ZooKeeper nodes and checkpoint keys)"
            )
        if self.writer_id in RESERVED_WRITER_IDS:
            raise ConfigError(
                f"writer_id {self.writer_id!r} is reserved ({', '.join(sorted(RESERVED_WRITER_IDS))}): it names a "
                "directory under .hoodie/.temp/streaming/ and ZooKeeper nodes, where it would mean another one"
            )
        if self.lock is None:
            raise ConfigError(
                "WriterConfig needs a lock: mw.ZooKeeperLock(connect=...) when writers run in several processes "
                "or machines (the usual case), mw.FileSystemLock() for processes on one machine and a local disk, "
                "mw.InProcessLock() only when every writer is a thread of this one process"
            )
        if not isinstance(self.lock, LockProvider):
            raise ConfigError(f"lock must be a LockProvider (mw.ZooKeeperLock, mw.FileSystemLock, mw.InProcessLock), got {type(self.lock).__name__}")
        if self.operation not in OPERATIONS:
            raise ConfigError(f"operation {self.operation!r} must be one of {OPERATIONS}")
        if self.executor not in EXECUTORS:
            raise ConfigError(f"executor {self.executor!r} must be one of {EXECUTORS}")
        if self.concurrency is not None and self.concurrency not in CONCURRENCY:
            raise ConfigError(f"concurrency {self.concurrency!r} must be one of {CONCURRENCY} (or None: by table type)")
        if self.on_checkpoint_reset not in ON_CHECKPOINT_RESET:
            raise ConfigError(f"on_checkpoint_reset {self.on_checkpoint_reset!r} must be one of {ON_CHECKPOINT_RESET}")
        if self.query_id is not None and (not isinstance(self.query_id, str) or not self.query_id.strip()):
            raise ConfigError(f"query_id {self.query_id!r} must be a non-empty string or None")
        if not isinstance(self.allow_missing_columns, bool):
            raise ConfigError(f"allow_missing_columns={self.allow_missing_columns!r} must be True or False")
        if not isinstance(self.update_partition_path, bool):
            raise ConfigError(f"update_partition_path={self.update_partition_path!r} must be True or False")
        if not isinstance(self.partial_update, bool):
            raise ConfigError(f"partial_update={self.partial_update!r} must be True or False")
        _range("heartbeat_interval_s", self.heartbeat_interval_s, 1.0, 3600.0)
        _range("heartbeat_tolerable_misses", self.heartbeat_tolerable_misses, 0, 100)
        _range("max_conflict_retries", self.max_conflict_retries, 0, 100)
        _range("retry_backoff_s", self.retry_backoff_s, 0.0, 600.0)
        _range("retry_backoff_max_s", self.retry_backoff_max_s, self.retry_backoff_s, 3600.0)
        _range("lock_timeout_s", self.lock_timeout_s, 0.01, 3600.0)
        _range("target_file_size_bytes", self.target_file_size_bytes, 1024, 1 << 40)
        _range("small_file_limit_bytes", self.small_file_limit_bytes, 0, 1 << 40)
        _range("driver_max_rows", self.driver_max_rows, 0, 1 << 40)
        _range("begin_ahead_s", self.begin_ahead_s, 0.0, 3600.0)

    @property
    def heartbeat_bound_s(self) -> float:
        return self.heartbeat_interval_s * (self.heartbeat_tolerable_misses + 1)

    def concurrency_for(self, table: Any) -> str:
        """The concurrency this writer runs on ``table`` (a TableConfig); ConfigError where
        non-blocking writes cannot be honoured."""
        nbcc_ok = table.merge_on_read and table.bucket_index
        if self.concurrency is None:
            return "non_blocking" if nbcc_ok else "optimistic"
        if self.concurrency == "non_blocking" and not nbcc_ok:
            why = "a Copy-on-Write table rewrites file groups" if not table.merge_on_read else "it has no bucket index"
            raise ConfigError(
                f"concurrency='non_blocking' needs a MERGE_ON_READ table with a bucket index (num_buckets), and table "
                f"{table.name!r} is not one: {why}, so two writers of one key could not both land; use "
                "concurrency='optimistic' or create the table with table_type='MERGE_ON_READ', num_buckets=N")
        return self.concurrency

    @classmethod
    def from_options(cls, options: dict[str, Any], **overrides: Any) -> WriterConfig:
        """Build from Hudi's option keys (``hoodie.*``, the same ones a JVM writer of the table is
        given) plus keyword overrides; field names are accepted as keys too.

        ``hoodie.write.lock.provider`` set to Hudi's ZooKeeper provider builds a
        :class:`~multiwriter.lock.ZooKeeperLock` from the ``hoodie.write.lock.zookeeper.*`` keys;
        set to Hudi's ``StorageBasedLockProvider``, a :class:`~multiwriter.lock.StorageLock` from
        the ``hoodie.write.lock.storage.*`` keys.
        Table keys (``hoodie.table.name``, ...) are checked here and returned by
        :func:`table_settings_from_options`. An unknown key, or one that asks for something this
        sink does not do, is a ``ConfigError`` naming it.
        """
        kw = settings_from_options(options)
        lock = lock_from_options(options)
        if lock is not None:
            if overrides.get("lock") is not None:
                raise ConfigError(
                    f"{LOCK_PROVIDER_KEY} builds the lock, and lock= was passed too: give one of them"
                )
            kw["lock"] = lock
        kw.update(overrides)
        return cls(**kw)


def settings_from_options(options: dict[str, Any]) -> dict[str, Any]:
    """The :class:`WriterConfig` fields that ``options`` set (Hudi keys converted to our units;
    lock and table keys are checked, not returned). Shared by :meth:`WriterConfig.from_options`
    and the command line (``--hoodie-conf``, ``--props``): an unknown key, or one that asks for
    something this sink does not do, is a ``ConfigError`` naming it."""
    kw: dict[str, Any] = {}
    names = {f.name for f in fields(WriterConfig)}
    for k, v in options.items():
        if k in TABLE_KEYS or k in REQUIRED_VALUES or k == LOCK_PROVIDER_KEY or k == LOCK_RETRIES_KEY:
            _check_required(k, v)
            continue
        if k == INDEX_TYPE_KEY:
            _index_type(v)
            continue
        if k == CONCURRENCY_KEY:
            mode = CONCURRENCY_MODES.get(str(v).strip().lower())
            if mode is None:
                raise ConfigError(f"{k}={v!r} is not supported: use one of {sorted(CONCURRENCY_MODES)}")
            kw["concurrency"] = mode
            continue
        if (k.startswith(ZK_PREFIX) and k[len(ZK_PREFIX):] in ZK_KEYS) or k == ZK_AUTH_KEY:
            continue
        if k.startswith(STORAGE_PREFIX):  # checked by storage_lock_from_options
            continue
        target = HUDI_KEYS.get(k, k)
        if target not in names or target == "lock":
            raise ConfigError(f"unknown option {k!r}: not a Hudi key this sink maps, nor a WriterConfig field")
        if k in MILLIS_KEYS:
            v = _number(k, v) / 1000.0
        if k == MISSES_KEY:
            v = _hudi_misses(v)
        if target == "operation" and str(v).strip().lower() not in OPERATIONS:
            raise ConfigError(f"option {k}={v!r} is not supported: use one of {OPERATIONS}")
        if target == "operation":
            v = str(v).strip().lower()
        kw[target] = _convert(k, v, getattr(WriterConfig, target))
    return kw


def table_settings_from_options(options: dict[str, Any]) -> dict[str, Any]:
    """``Table.create`` settings from Hudi's table keys (``name``, ``record_key``, ``partition_by``,
    ``ordering_field``); comma-separated field lists as Hudi writes them."""
    out: dict[str, Any] = {}
    for k, target in TABLE_KEYS.items():
        v = options.get(k)
        if v is None or str(v).strip() == "":
            continue
        v = str(v).strip()
        if target in ("record_key", "partition_by", "bucket_hash_fields"):
            parts = [p.strip() for p in v.split(",") if p.strip()]
            out[target] = parts[0] if target == "record_key" and len(parts) == 1 else parts
        elif target in ("num_buckets", "table_version", "record_index_file_groups"):
            out[target] = int(_number(k, v))
        elif target in ("metadata", "column_stats", "record_index"):
            out[target] = _convert(k, v, False)
        elif target == "table_type":
            out[target] = v.upper()
            if out[target] not in ("COPY_ON_WRITE", "MERGE_ON_READ"):
                raise ConfigError(f"{k}={v!r} is not a table type: use COPY_ON_WRITE or MERGE_ON_READ")
        else:
            out[target] = v
    if "num_buckets" in out and _index_type(options.get(INDEX_TYPE_KEY, "BUCKET")) != "BUCKET":
        raise ConfigError(f"hoodie.bucket.index.num.buckets is given with {INDEX_TYPE_KEY}={options[INDEX_TYPE_KEY]!r}: "
                          "buckets are the BUCKET index's")
    if _index_type(options.get(INDEX_TYPE_KEY, "BLOOM")) == "BUCKET" and "num_buckets" not in out:
        raise ConfigError(f"{INDEX_TYPE_KEY}=BUCKET needs hoodie.bucket.index.num.buckets")
    return out


def _index_type(value: Any) -> str:
    v = str(value).strip().upper()
    if v not in INDEX_TYPES:
        raise ConfigError(f"{INDEX_TYPE_KEY}={value!r} is not supported: use one of {INDEX_TYPES}")
    return v


def lock_from_options(options: dict[str, Any]) -> Any:
    """The lock that Hudi's lock keys describe (ZooKeeper or storage-based), or None when no
    provider is set."""
    if str(options.get(LOCK_PROVIDER_KEY, "")).strip() == STORAGE_PROVIDER:
        return storage_lock_from_options(options)
    storage = sorted(k for k in options if k.startswith(STORAGE_PREFIX))
    if storage:
        raise ConfigError(f"{storage[0]!r} is given without {LOCK_PROVIDER_KEY}={STORAGE_PROVIDER}: set the provider too")
    return zookeeper_lock_from_options(options)


def storage_lock_from_options(options: dict[str, Any]) -> Any:
    """The :class:`StorageLock` of Hudi's ``StorageBasedLockProvider`` keys (seconds, as Hudi's)."""
    from .lock.storage import DEFAULT_RENEW_INTERVAL_S, DEFAULT_VALIDITY_S, StorageLock

    zk = sorted(k for k in options if k.startswith(ZK_PREFIX))
    if zk:
        raise ConfigError(f"{zk[0]!r} is a ZooKeeper key, but {LOCK_PROVIDER_KEY}={STORAGE_PROVIDER}: give one lock")
    kw: dict[str, Any] = {}
    for k, v in options.items():
        if not k.startswith(STORAGE_PREFIX):
            continue
        target = STORAGE_KEYS.get(k[len(STORAGE_PREFIX):])
        if target is None:
            raise ConfigError(f"{k} is not supported: the storage lock lives in the table's .hoodie/.locks/, and "
                              f"its keys are {sorted(STORAGE_PREFIX + n for n in STORAGE_KEYS)}")
        if target in kw:
            raise ConfigError(f"{k} and another name of the renew interval are both given: set one "
                              f"({STORAGE_PREFIX}renew.interval.secs)")
        kw[target] = _number(k, v)
    if "hoodie.write.lock.wait_time_ms" in options:
        kw["acquire_timeout_s"] = _number("hoodie.write.lock.wait_time_ms", options["hoodie.write.lock.wait_time_ms"]) / 1000.0
    _check_hudi_lease(kw.get("validity_s", DEFAULT_VALIDITY_S), kw.get("renew_interval_s", DEFAULT_RENEW_INTERVAL_S))
    return StorageLock(**kw)


#: Hudi's bounds for ``StorageBasedLockProvider``'s lease (seconds): a JVM writer refuses a
#: validity below 10, a renew interval below 1, and a validity below 10 renew intervals; the same
#: keys are refused here, so a table's writers never disagree on them
HUDI_MIN_VALIDITY_S, HUDI_MIN_RENEW_S, HUDI_RENEWALS_PER_VALIDITY = 10.0, 1.0, 10


def _check_hudi_lease(validity: float, renew: float) -> None:
    v, r = f"{STORAGE_PREFIX}validity.timeout.secs", f"{STORAGE_PREFIX}renew.interval.secs"
    if validity < HUDI_MIN_VALIDITY_S:
        raise ConfigError(f"{v}={validity:g} is below Hudi's minimum of {HUDI_MIN_VALIDITY_S:g}s (its JVM writers refuse it)")
    if renew < HUDI_MIN_RENEW_S:
        raise ConfigError(f"{r}={renew:g} is below Hudi's minimum of {HUDI_MIN_RENEW_S:g}s (its JVM writers refuse it)")
    if validity < HUDI_RENEWALS_PER_VALIDITY * renew:
        raise ConfigError(f"{v}={validity:g} must be at least {HUDI_RENEWALS_PER_VALIDITY} times {r}={renew:g}, as "
                          "Hudi requires: a holder gets many renewals in before its lease runs out")


def zookeeper_lock_from_options(options: dict[str, Any]) -> Any:
    """The :class:`ZooKeeperLock` that Hudi's lock keys describe, or None when no provider is set."""
    zk = {k[len(ZK_PREFIX):]: v for k, v in options.items() if k.startswith(ZK_PREFIX)}
    provider = options.get(LOCK_PROVIDER_KEY)
    if provider is None:
        if zk or LOCK_RETRIES_KEY in options or ZK_AUTH_KEY in options:
            first = next(iter(sorted(k for k in options if k.startswith(ZK_PREFIX) or k in (LOCK_RETRIES_KEY, ZK_AUTH_KEY))))
            raise ConfigError(f"{first!r} is given without {LOCK_PROVIDER_KEY}={ZK_PROVIDER}: set the provider too")
        return None
    if str(provider).strip() != ZK_PROVIDER:
        raise ConfigError(
            f"{LOCK_PROVIDER_KEY}={provider!r} is not supported: this sink shares a table with Hudi's JVM writers "
            f"only through {ZK_PROVIDER} or {STORAGE_PROVIDER} (or pass lock= yourself for tables only multiwriter "
            "writes)"
        )
    for key in ("url", "base_path"):
        if not str(zk.get(key, "")).strip():
            raise ConfigError(f"{ZK_PREFIX}{key} is required with {ZK_PROVIDER}")
    from .lock.zookeeper import ZooKeeperLock  # the lock layer pulls in kazoo: only when asked for

    kw: dict[str, Any] = {"base_path": str(zk["base_path"]).strip()}
    key = zk.get("lock_key") or options.get("hoodie.table.name")
    if key:
        kw["lock_key"] = str(key).strip()
    for name, target in (("session_timeout_ms", "session_timeout_s"), ("connection_timeout_ms", "connection_timeout_s")):
        if name in zk:
            kw[target] = _number(ZK_PREFIX + name, zk[name]) / 1000.0
    if "hoodie.write.lock.wait_time_ms" in options:
        kw["acquire_timeout_s"] = _number("hoodie.write.lock.wait_time_ms", options["hoodie.write.lock.wait_time_ms"]) / 1000.0
    if LOCK_RETRIES_KEY in options:
        kw["max_retries"] = max(1, int(_number(LOCK_RETRIES_KEY, options[LOCK_RETRIES_KEY])))
    if options.get(ZK_AUTH_KEY):
        kw["auth"] = zk_auth(options[ZK_AUTH_KEY], ZK_AUTH_KEY)
    return ZooKeeperLock(_connect_string(str(zk["url"]), zk.get("port")), **kw)


def zk_auth(value: Any, source: str) -> tuple[str, str]:
    """``(user, password)`` of digest credentials given as ``USER:PASSWORD`` (ZooKeeper's own
    notation); the ConfigError never repeats the value, which holds a password."""
    user, sep, password = str(value).partition(":")
    if not sep or not user.strip() or not password:
        raise ConfigError(f"{source} must be USER:PASSWORD (ZooKeeper digest credentials, both parts non-empty)")
    return user.strip(), password


def _connect_string(url: str, port: Any) -> str:
    """Hudi gives hosts and a port apart; a host without its own port gets ``port``."""
    hosts = [h.strip() for h in url.split(",") if h.strip()]
    if port is None or str(port).strip() == "":
        return ",".join(hosts)
    p = int(_number(ZK_PREFIX + "port", port))
    out = []
    for h in hosts:
        if ":" in h and h.rsplit(":", 1)[1] != str(p):
            raise ConfigError(f"{ZK_PREFIX}url host {h!r} names a port other than {ZK_PREFIX}port={p}")
        out.append(h if ":" in h else f"{h}:{p}")
    return ",".join(out)


def _hudi_misses(value: Any) -> int:
    """Hudi's tolerable misses as ours: the same expiry bound on both sides, so a JVM cleaner
    never judges one of our writers dead while that writer's own fence still lets it commit."""
    n = _number(MISSES_KEY, value)
    if n != int(n) or n < 1:
        raise ConfigError(f"option {MISSES_KEY}={value!r} must be a whole number >= 1 (Hudi's expiry bound is "
                          "interval x misses)")
    return int(n) - 1


def _check_required(key: str, value: Any) -> None:
    want = REQUIRED_VALUES.get(key)
    if want is not None and str(value).strip().lower() != want:
        raise ConfigError(
            f"{key}={value!r} is not supported: writers sharing a table need {key}={want.upper()} "
            "(optimistic concurrency with lazily cleaned failed writes is the protocol this sink follows)"
        )


def _number(key: str, value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"option {key}={value!r} must be a number") from None


def _convert(key: str, value: Any, default: Any) -> Any:
    """``value`` as the type of the field's default; "true"/"false" are parsed, not cast."""
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("true", "1", "yes"):
            return True
        if text in ("false", "0", "no"):
            return False
        raise ConfigError(f"option {key}={value!r} must be true or false")
    if isinstance(default, (int, float)):
        n = _number(key, value)
        if isinstance(default, int) and n != int(n):
            raise ConfigError(f"option {key}={value!r} must be a whole number")
        return int(n) if isinstance(default, int) else n
    return str(value) if isinstance(default, str) else value


def _range(name: str, value: Any, lo: float, hi: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
        raise ConfigError(f"{name}={value!r} is out of range [{lo}, {hi}]")
