"""``multiwriter clean``, ``cluster`` and ``compact``: the companion job's commands (one run or a
loop), with the writers' lock taken from the flags, the environment or Hudi's keys."""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from ..cleaner.clustering import ClusteringConfig
from ..cleaner.compaction import CompactionConfig
from ..cleaner.job import DEFAULT_CLUSTERING, DEFAULT_COMPACTION, DEFAULT_LOCK_TIMEOUT_S, Cleaner, CleanerReport
from ..errors import ConfigError, MultiWriterError
from ..heartbeat.judge import DEFAULT_MAX_OBSERVE_S
from ..lock.base import LOCK_KIND_KEY, LockProvider
from ..redact import redact
from ..table.table import Table

log = logging.getLogger(__name__)

def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options of ``multiwriter clean`` (the CLI module adds them to its subparser)."""
    p.add_argument("path", help="table root")
    add_lock_arguments(p)
    p.add_argument("--once", action="store_true", help="one run, then exit (exit code 1 if a step failed)")
    p.add_argument("--interval", type=float, default=30.0, help="seconds between runs")
    p.add_argument("--heartbeat-interval", type=float, default=10.0, help="the cleaner's heartbeat interval (s); "
                   "also judges heartbeats that record no settings (Hudi's JVM writers)")
    p.add_argument("--heartbeat-misses", type=int, default=2, help="the cleaner's tolerable heartbeat misses (as above)")
    p.add_argument("--observe-max", type=float, default=DEFAULT_MAX_OBSERVE_S, help="seconds the first run observes "
                   "pending instants' heartbeats at most to tell dead writers from live ones")
    p.add_argument("--retain-commits", type=int, default=10)
    p.add_argument("--archive-keep-min", type=int, default=20)
    p.add_argument("--archive-keep-max", type=int, default=30)
    p.add_argument("--orphan-min-age", type=float, default=6 * 3600.0, help="seconds before an orphan is reported")
    p.add_argument("--delete-orphans", action="store_true")
    p.add_argument("--no-clustering", action="store_true", help="do not cluster small file groups "
                   "(run `multiwriter cluster` separately, or not at all)")
    p.add_argument("--no-compaction", action="store_true", help="do not compact Merge-on-Read file slices "
                   "(run `multiwriter compact` separately, or not at all)")
    p.add_argument("--pushgateway", help="Prometheus Pushgateway HOST:PORT to push metrics to after each run")
    return p


def cli_lock(args: argparse.Namespace, command: str = "clean") -> LockProvider:
    """The lock named on the command line; never a silent default, since a cleaner on another
    lock than the writers' excludes nothing (the table's recorded lock is checked by Cleaner)."""
    from ..lock import FileSystemLock, StorageLock, ZooKeeperLock

    given = getattr(args, "lock", None)  # built from Hudi's lock keys by the command line
    if given is not None:
        return given
    storage_lock = getattr(args, "storage_lock", False)
    if sum(map(bool, (args.zk, args.file_lock, storage_lock))) > 1:
        raise ConfigError("pass one of --zk, --file-lock and --storage-lock")
    if args.zk:
        base = args.zk_base_path
        if base is None:
            recorded = Table.open(args.path).config.raw.get("multiwriter.lock.zookeeper.base_path")
            base = recorded or "/multiwriter"
        return ZooKeeperLock(connect=args.zk, base_path=base, auth=cli_zk_auth(args))
    if args.file_lock:
        return FileSystemLock()
    if storage_lock:
        return StorageLock()
    kind = Table.open(args.path).config.raw.get(LOCK_KIND_KEY)
    hint = f"the table records a {kind} lock" if kind else "the table records no lock"
    raise ConfigError(f"multiwriter {command} needs the writers' lock ({hint}): pass --zk HOST:PORT or --file-lock "
                      "(or --storage-lock: the lock object in the table's storage)")


def cli_zk_auth(args: argparse.Namespace) -> tuple[str, str] | None:
    """The ZooKeeper digest credentials of ``--zk-auth``, else of ``$MULTIWRITER_ZK_AUTH``."""
    from ..config import ZK_AUTH_ENV, zk_auth

    flag = getattr(args, "zk_auth", None)
    if flag:
        return zk_auth(flag, "--zk-auth")
    env = os.environ.get(ZK_AUTH_ENV)
    return zk_auth(env, f"${ZK_AUTH_ENV}") if env else None


def _add_zk_auth(p: argparse.ArgumentParser) -> None:
    p.add_argument("--zk-auth", metavar="USER:PASSWORD", default=None,
                   help="ZooKeeper digest credentials of the writers' lock (every node we create then carries a "
                        "digest ACL); better set $MULTIWRITER_ZK_AUTH: a command line is visible to other users")


def add_lock_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``--zk``, ``--zk-base-path``, ``--zk-auth``, ``--file-lock``, ``--storage-lock``: the writers' lock, for
    :func:`cli_lock`."""
    p.add_argument("--zk", help="ZooKeeper HOST:PORT of the writers' table lock")
    p.add_argument("--zk-base-path", default=None, help="ZooKeeper base path of the writers' locks "
                   "(default: the one the table records, else /multiwriter)")
    _add_zk_auth(p)
    p.add_argument("--file-lock", action="store_true", help="use a lock file in the table (writers on one machine)")
    p.add_argument("--storage-lock", action="store_true", help="use the lock object in the table's storage "
                   "(Hudi's StorageBasedLockProvider: S3 without ZooKeeper); with Hudi's validity and renew keys "
                   "pass --hoodie-conf instead")
    return p


def add_service_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options every table-service command shares (``cluster``, ``compact``)."""
    p.add_argument("path", help="table root")
    add_lock_arguments(p)
    p.add_argument("--once", action="store_true", help="one run, then exit (exit code 1 if it failed)")
    p.add_argument("--interval", type=float, default=60.0, help="seconds between runs")
    p.add_argument("--heartbeat-interval", type=float, default=10.0, help="the writers' heartbeat interval (s)")
    p.add_argument("--heartbeat-misses", type=int, default=2, help="the writers' tolerable heartbeat misses")
    return p


def add_cluster_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options of ``multiwriter cluster``."""
    d = DEFAULT_CLUSTERING
    add_service_arguments(p)
    p.add_argument("--small-file-bytes", type=int, default=d.small_file_bytes)
    p.add_argument("--target-file-bytes", type=int, default=d.target_file_bytes)
    p.add_argument("--max-bytes-per-run", type=int, default=d.max_bytes_per_run)
    p.add_argument("--min-file-groups", type=int, default=d.min_file_groups)
    p.add_argument("--pushgateway", help="Prometheus Pushgateway HOST:PORT to push metrics to after each run")
    return p


def cluster_command(args: argparse.Namespace) -> int:
    """Run ``multiwriter cluster``: only the clustering step, once or every ``--interval``."""
    lock = cli_lock(args, "cluster")
    cfg = ClusteringConfig(
        small_file_bytes=args.small_file_bytes,
        target_file_bytes=args.target_file_bytes,
        max_bytes_per_run=args.max_bytes_per_run,
        min_file_groups=args.min_file_groups,
    )
    cleaner = _service_cleaner(args, lock, clustering=cfg)
    return _loop(lambda: cleaner.cluster_once(raise_errors=False), args, [cleaner.close, lock.close])


def add_compact_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options of ``multiwriter compact``."""
    d = DEFAULT_COMPACTION
    add_service_arguments(p)
    p.add_argument("--delta-commits", type=int, default=d.delta_commits,
                   help="compact once this many deltacommits completed since the last compaction was planned")
    p.add_argument("--max-file-groups", type=int, default=d.max_file_groups, help="file slices per compaction at most")
    p.add_argument("--pushgateway", help="Prometheus Pushgateway HOST:PORT to push metrics to after each run")
    return p


def compact_command(args: argparse.Namespace) -> int:
    """Run ``multiwriter compact``: only the compaction step, once or every ``--interval``."""
    lock = cli_lock(args, "compact")
    try:
        cfg = CompactionConfig(delta_commits=args.delta_commits, max_file_groups=args.max_file_groups)
        cleaner = _service_cleaner(args, lock, compaction=cfg)
    except BaseException:
        lock.close()
        raise
    if not cleaner.table.config.merge_on_read:
        cleaner.close()
        lock.close()
        raise ConfigError(f"{redact(args.path)} is a Copy-on-Write table: it has no log files to compact")
    return _loop(lambda: cleaner.compact_once(raise_errors=False), args, [cleaner.close, lock.close])


def _service_cleaner(args: argparse.Namespace, lock: LockProvider, **services: Any) -> Cleaner:
    """The cleaner of a one-service command (``cluster``, ``compact``): the other services off."""
    services.setdefault("clustering", None)
    services.setdefault("compaction", None)
    return Cleaner(
        args.path,
        lock=lock,
        heartbeat_interval_s=args.heartbeat_interval,
        heartbeat_tolerable_misses=args.heartbeat_misses,
        pushgateway=args.pushgateway,
        lock_timeout_s=getattr(args, "lock_timeout_s", None) or DEFAULT_LOCK_TIMEOUT_S,
        **services,
    )


def _loop(run: Callable[[], CleanerReport], args: argparse.Namespace, closers: list[Callable[[], None]]) -> int:
    """Run until SIGTERM / Ctrl-C, or once with ``--once`` (exit code 1 when the run failed)."""
    stop = threading.Event()
    previous = (
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        if threading.current_thread() is threading.main_thread()
        else None
    )
    try:
        while True:
            report = run()
            print(report, flush=True)
            if args.once:
                return 0 if report.ok else 1
            if stop.wait(args.interval):
                return 0
    except KeyboardInterrupt:
        return 0
    finally:
        for close in closers:
            close()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def clean_command(args: argparse.Namespace) -> int:
    """Run ``multiwriter clean`` with arguments parsed by :func:`add_arguments`; exit code."""
    lock = cli_lock(args)
    cleaner = Cleaner(
        args.path,
        lock=lock,
        heartbeat_interval_s=args.heartbeat_interval,
        heartbeat_tolerable_misses=args.heartbeat_misses,
        retain_commits=args.retain_commits,
        archive_keep_min=args.archive_keep_min,
        archive_keep_max=args.archive_keep_max,
        orphan_min_age_s=args.orphan_min_age,
        delete_orphans=args.delete_orphans,
        pushgateway=args.pushgateway,
        clustering=None if getattr(args, "no_clustering", False) else DEFAULT_CLUSTERING,
        compaction=None if getattr(args, "no_compaction", False) else DEFAULT_COMPACTION,
        observe_max_s=getattr(args, "observe_max", DEFAULT_MAX_OBSERVE_S),
        lock_timeout_s=getattr(args, "lock_timeout_s", None) or DEFAULT_LOCK_TIMEOUT_S,
    )
    return _loop(lambda: cleaner.run_once(raise_errors=False), args, [cleaner.close, lock.close])


def main(argv: list[str] | None = None) -> int:
    """``python -m multiwriter.cli.cleaner PATH --zk HOST:PORT [--once] [--interval 30]``."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = add_arguments(
        argparse.ArgumentParser(prog="multiwriter clean", description="multiwriter's companion job: roll back failed writers, keep the table healthy")
    ).parse_args(argv)
    try:
        return clean_command(args)
    except MultiWriterError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
