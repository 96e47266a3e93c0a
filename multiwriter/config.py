"""``WriterConfig``: how one writer writes; validated at construction (``ConfigError``)."""
from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Any

from .errors import ConfigError
from .lock.base import LockProvider

OPERATIONS = ("upsert", "insert", "delete")
EXECUTORS = ("auto", "driver", "spark")
WRITER_ID_RE = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")

#: Hudi option keys accepted by :meth:`WriterConfig.from_options`
HUDI_KEYS = {
    "hoodie.datasource.write.operation": "operation",
    "hoodie.write.lock.wait_time_ms": "lock_timeout_s",
    "hoodie.client.heartbeat.interval_in_ms": "heartbeat_interval_s",
    "hoodie.client.heartbeat.tolerable.misses": "heartbeat_tolerable_misses",
    "hoodie.write.lock.num_retries": "max_conflict_retries",
    "hoodie.parquet.max.file.size": "target_file_size_bytes",
    "hoodie.datasource.write.streaming.checkpoint.identifier": "writer_id",
}


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
    executor: str = "auto"
    driver_max_rows: int = 200_000
    register_writer: bool = True
    #: a batch may omit nullable table columns (written as null); False: every column is required
    allow_missing_columns: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.writer_id, str) or not WRITER_ID_RE.match(self.writer_id):
            raise ConfigError(
                f"writer_id {self.writer_id!r} must match {WRITER_ID_RE.pattern} "
                "(it names ZooKeeper nodes and checkpoint keys)"
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
        if not isinstance(self.allow_missing_columns, bool):
            raise ConfigError(f"allow_missing_columns={self.allow_missing_columns!r} must be True or False")
        _range("heartbeat_interval_s", self.heartbeat_interval_s, 1.0, 3600.0)
        _range("heartbeat_tolerable_misses", self.heartbeat_tolerable_misses, 0, 100)
        _range("max_conflict_retries", self.max_conflict_retries, 0, 100)
        _range("retry_backoff_s", self.retry_backoff_s, 0.0, 600.0)
        _range("retry_backoff_max_s", self.retry_backoff_max_s, self.retry_backoff_s, 3600.0)
        _range("lock_timeout_s", self.lock_timeout_s, 0.01, 3600.0)
        _range("target_file_size_bytes", self.target_file_size_bytes, 1024, 1 << 40)
        _range("driver_max_rows", self.driver_max_rows, 0, 1 << 40)

    @property
    def heartbeat_bound_s(self) -> float:
        return self.heartbeat_interval_s * (self.heartbeat_tolerable_misses + 1)

    @classmethod
    def from_options(cls, options: dict[str, Any], **overrides: Any) -> WriterConfig:
        """Build from Hudi-style option keys (``hoodie.*``) plus keyword overrides."""
        kw: dict[str, Any] = {}
        names = {f.name for f in fields(cls)}
        for k, v in options.items():
            target = HUDI_KEYS.get(k, k)
            if target not in names:
                raise ConfigError(f"unknown option {k!r}")
            if k in ("hoodie.write.lock.wait_time_ms", "hoodie.client.heartbeat.interval_in_ms"):
                v = float(v) / 1000.0
            kw[target] = type(getattr(cls, target, v))(v) if target != "lock" else v
        kw.update(overrides)
        return cls(**kw)


def _range(name: str, value: Any, lo: float, hi: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
        raise ConfigError(f"{name}={value!r} is out of range [{lo}, {hi}]")
