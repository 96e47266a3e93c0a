"""Prometheus metrics of writers and the cleaner (prometheus_client).

The registry is injectable: tests build their own ``CollectorRegistry``; the default is the
global one. ``start_http_server`` binds to 127.0.0.1 unless told otherwise.
"""
from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import prometheus_client as pc
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from .threads import free_in_child

OUTCOMES = ("committed", "conflict", "failed", "skipped")
PHASES = ("index", "write", "commit", "total")
OPS = ("insert", "update", "delete")
KINDS = ("failed_write", "old_version", "orphan")
CLUSTERING_OUTCOMES = ("replaced", "aborted")
#: what a lock acquire waited for (lock.base.WAIT_CAUSES; repeated here: metrics imports no layer)
LOCK_WAIT_CAUSES = ("reconnect", "stale_own_node", "holder", "retry_backoff", "calls")
STORAGE_LOCK_ACQUIRES = ("acquired", "timeout")
STORAGE_LOCK_RENEWALS = ("renewed", "failed", "lost")
#: lost: our lease ran out or was taken over while we held it; taken_over: we took a lease that ran out
STORAGE_LOCK_EXPIRIES = ("lost", "taken_over")

BATCH_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
LOCK_HOLD_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10)
COMPACTION_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)
LOCK_WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


def _check(value: str, allowed: tuple[str, ...], what: str) -> str:
    if value not in allowed:
        raise ValueError(f"{what} {value!r} is not one of {allowed}")
    return value


class Metrics:
    """Every multiwriter metric family, registered on one registry."""

    _instances: dict[int, Metrics] = {}
    _mu = free_in_child(threading.Lock())

    def __new__(cls, registry: CollectorRegistry | None = None) -> Metrics:
        reg = registry if registry is not None else pc.REGISTRY
        with cls._mu:
            inst = cls._instances.get(id(reg))
            if inst is None:
                inst = super().__new__(cls)
                inst._init(reg)
                cls._instances[id(reg)] = inst
            return inst

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        pass  # initialised once per registry in __new__

    @classmethod
    def for_registry(cls, registry: CollectorRegistry | None = None) -> Metrics:
        return cls(registry)

    def _init(self, reg: CollectorRegistry) -> None:
        self.registry = reg
        tw = ["table", "writer"]
        self.commits = Counter("multiwriter_commits_total", "Commit outcomes per writer", tw + ["outcome"], registry=reg)
        self.retries = Counter("multiwriter_commit_retries_total", "Batches retried after a conflict or lock timeout", tw, registry=reg)
        self.batch = Histogram("multiwriter_batch_duration_seconds", "Time per batch phase", tw + ["phase"], buckets=BATCH_BUCKETS, registry=reg)
        self.lock_wait_h = Histogram("multiwriter_lock_wait_seconds", "Time waiting for the table lock", tw, buckets=LOCK_WAIT_BUCKETS, registry=reg)
        self.lock_wait_cause = Counter(
            "multiwriter_lock_wait_cause_seconds_total",
            "Seconds lock acquires waited, by cause: reconnect (no connection to the lock service), stale_own_node "
            "(a lock node this process left behind), holder (another writer ahead), retry_backoff, calls",
            tw + ["cause"], registry=reg)
        self.lock_hold_h = Histogram("multiwriter_lock_hold_seconds", "Time the table lock was held", tw, buckets=LOCK_HOLD_BUCKETS, registry=reg)
        self.records_c = Counter("multiwriter_records_written_total", "Records written by operation", tw + ["op"], registry=reg)
        self.hb_age = Gauge("multiwriter_heartbeat_age_seconds", "Age of the previous beat when a new one is written", tw, registry=reg)
        self.hb_skew = Gauge(
            "multiwriter_heartbeat_clock_skew_seconds",
            "A beat's recorded time minus the judge's wall clock when it first saw that beat (writer clock ahead: > 0)",
            tw, registry=reg)
        self.hb_fail = Counter("multiwriter_heartbeat_failures_total", "Failed heartbeat writes", tw, registry=reg)
        self.rollbacks = Counter("multiwriter_rollbacks_total", "Failed writes rolled back by the cleaner", ["table"], registry=reg)
        self.deleted = Counter("multiwriter_cleaner_files_deleted_total", "Files the cleaner deleted", ["table", "kind"], registry=reg)
        self.pending = Gauge("multiwriter_pending_instants", "Requested or inflight instants on the timeline", ["table"], registry=reg)
        self.last = Gauge("multiwriter_last_commit_timestamp_seconds", "Unix time of the writer's last commit", tw, registry=reg)
        self.clustering_groups = Counter(
            "multiwriter_clustering_file_groups_total",
            "Input file groups of clusterings: replaced (committed) or aborted (lost to a writer, or failed)",
            ["table", "outcome"], registry=reg)
        self.clustering_bytes = Counter(
            "multiwriter_clustering_bytes_rewritten_total", "Input bytes rewritten by committed clusterings", ["table"], registry=reg)
        self.live_files_g = Gauge("multiwriter_live_files", "Live file groups (latest snapshot), set by the cleaner", ["table"], registry=reg)
        self.small_files_g = Gauge(
            "multiwriter_small_files", "Live file groups below the clustering small-file size, set by the cleaner", ["table"], registry=reg)
        # Merge-on-Read
        self.delta_commits = Counter("multiwriter_delta_commits_total", "Deltacommits (Merge-on-Read writes) per writer", tw, registry=reg)
        self.log_bytes = Counter("multiwriter_log_bytes_written_total", "Bytes of log files appended per writer", tw, registry=reg)
        self.compaction_s = Histogram("multiwriter_compaction_duration_seconds", "Time from a compaction's plan to its commit",
                                      ["table"], buckets=COMPACTION_BUCKETS, registry=reg)
        self.compaction_groups = Counter("multiwriter_compaction_file_groups_total", "File slices compacted", ["table"], registry=reg)
        self.uncompacted_g = Gauge("multiwriter_uncompacted_delta_commits",
                                   "Most log files over one base file (latest snapshot), set by the cleaner", ["table"], registry=reg)
        # the storage lock (a lock object in the table's storage)
        self.storage_lock_acquire_h = Histogram(
            "multiwriter_storage_lock_acquire_seconds", "Time to acquire (or give up on) the storage lock",
            ["table", "outcome"], buckets=LOCK_WAIT_BUCKETS, registry=reg)
        self.storage_lock_renewals = Counter(
            "multiwriter_storage_lock_renewals_total", "Storage lock renewals: renewed, failed (retried), lost",
            ["table", "outcome"], registry=reg)
        self.storage_lock_expiries = Counter(
            "multiwriter_storage_lock_expiries_total",
            "Storage lock leases that ran out: lost by this holder, or taken over from a holder that stopped renewing",
            ["table", "kind"], registry=reg)
        self.oldest_log_g = Gauge("multiwriter_oldest_uncompacted_log_age_seconds",
                                  "Age of the oldest log file not yet compacted, set by the cleaner", ["table"], registry=reg)

    # -- recording --------------------------------------------------------------------
    def commit(self, table: str, writer: str, outcome: str) -> None:
        self.commits.labels(table, writer, _check(outcome, OUTCOMES, "outcome")).inc()

    def retry(self, table: str, writer: str) -> None:
        self.retries.labels(table, writer).inc()

    def phase(self, table: str, writer: str, phase: str, seconds: float) -> None:
        self.batch.labels(table, writer, _check(phase, PHASES, "phase")).observe(seconds)

    @contextmanager
    def time_phase(self, table: str, writer: str, phase: str) -> Iterator[None]:
        import time

        t0 = time.monotonic()
        try:
            yield
        finally:
            self.phase(table, writer, phase, time.monotonic() - t0)

    def lock_wait(self, table: str, writer: str, seconds: float) -> None:
        self.lock_wait_h.labels(table, writer).observe(seconds)

    def lock_wait_causes(self, table: str, writer: str, seconds: dict[str, float]) -> None:
        """Add one acquire's wait, split by cause (see ``lock.base.WaitClock``)."""
        for cause, s in seconds.items():
            if s > 0:
                self.lock_wait_cause.labels(table, writer, _check(cause, LOCK_WAIT_CAUSES, "lock wait cause")).inc(s)

    def lock_hold(self, table: str, writer: str, seconds: float) -> None:
        self.lock_hold_h.labels(table, writer).observe(seconds)

    def records(self, table: str, writer: str, op: str, n: int) -> None:
        self.records_c.labels(table, writer, _check(op, OPS, "op")).inc(n)

    def heartbeat_age(self, table: str, writer: str, seconds: float) -> None:
        self.hb_age.labels(table, writer).set(seconds)

    def heartbeat_skew(self, table: str, writer: str, seconds: float) -> None:
        self.hb_skew.labels(table, writer).set(seconds)

    def heartbeat_failure(self, table: str, writer: str) -> None:
        self.hb_fail.labels(table, writer).inc()

    def rollback(self, table: str) -> None:
        self.rollbacks.labels(table).inc()

    def files_deleted(self, table: str, kind: str, n: int) -> None:
        self.deleted.labels(table, _check(kind, KINDS, "kind")).inc(n)

    def pending_instants(self, table: str, n: int) -> None:
        self.pending.labels(table).set(n)

    def last_commit(self, table: str, writer: str, ts: float) -> None:
        self.last.labels(table, writer).set(ts)

    def clustering(self, table: str, *, replaced: int = 0, aborted: int = 0, bytes_rewritten: int = 0) -> None:
        for outcome, n in (("replaced", replaced), ("aborted", aborted)):
            self.clustering_groups.labels(table, _check(outcome, CLUSTERING_OUTCOMES, "outcome")).inc(n)
        self.clustering_bytes.labels(table).inc(bytes_rewritten)

    def delta_commit(self, table: str, writer: str, log_bytes: int) -> None:
        self.delta_commits.labels(table, writer).inc()
        self.log_bytes.labels(table, writer).inc(log_bytes)

    def compaction(self, table: str, seconds: float, file_groups: int) -> None:
        self.compaction_s.labels(table).observe(seconds)
        self.compaction_groups.labels(table).inc(file_groups)

    def compaction_lag(self, table: str, *, delta_commits: int, oldest_log_age_s: float) -> None:
        self.uncompacted_g.labels(table).set(delta_commits)
        self.oldest_log_g.labels(table).set(oldest_log_age_s)

    def storage_lock_acquire(self, table: str, outcome: str, seconds: float) -> None:
        self.storage_lock_acquire_h.labels(table, _check(outcome, STORAGE_LOCK_ACQUIRES, "outcome")).observe(seconds)

    def storage_lock_renewal(self, table: str, outcome: str) -> None:
        self.storage_lock_renewals.labels(table, _check(outcome, STORAGE_LOCK_RENEWALS, "outcome")).inc()

    def storage_lock_expiry(self, table: str, kind: str) -> None:
        self.storage_lock_expiries.labels(table, _check(kind, STORAGE_LOCK_EXPIRIES, "kind")).inc()

    def table_files(self, table: str, *, live: int, small: int) -> None:
        self.live_files_g.labels(table).set(live)
        self.small_files_g.labels(table).set(small)


def default() -> Metrics:
    """The metrics on prometheus_client's global registry."""
    return Metrics()


@dataclass
class MetricsServer:
    server: Any
    thread: Any
    port: int

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    close = stop


def start_http_server(port: int = 9464, addr: str = "127.0.0.1", registry: CollectorRegistry | None = None) -> MetricsServer:
    """Serve ``/metrics``; ``port=0`` picks a free port (see ``.port``)."""
    server, thread = pc.start_http_server(port, addr=addr, registry=registry if registry is not None else pc.REGISTRY)
    return MetricsServer(server, thread, server.server_port)


def push_to_gateway(gateway: str, job: str, registry: CollectorRegistry | None = None, grouping_key: dict[str, str] | None = None) -> None:
    pc.push_to_gateway(gateway, job=job, registry=registry if registry is not None else pc.REGISTRY, grouping_key=grouping_key)
