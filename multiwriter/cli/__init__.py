"""``multiwriter`` command line: demo | zookeeper | timeline | heartbeats | clean | cluster | compact |
status | bootstrap | writers retire."""
from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from typing import Any

from ..errors import ConfigError, MultiWriterError
from ..redact import redact

#: our flags that Hudi's heartbeat keys also set: (argparse dest, WriterConfig field, default)
HEARTBEAT_FLAGS = (("heartbeat_interval", "heartbeat_interval_s", 10.0), ("heartbeat_misses", "heartbeat_tolerable_misses", 2))


def add_hudi_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``--hoodie-conf KEY=VALUE`` (repeatable) and ``--props FILE``: the keys a JVM writer of
    the table is given, read by :func:`apply_hudi_options`."""
    p.add_argument("--hoodie-conf", action="append", default=[], metavar="KEY=VALUE",
                   help="a Hudi key (hoodie.write.lock.*, hoodie.client.heartbeat.*, ...); repeatable, wins over --props")
    p.add_argument("--props", metavar="FILE", help="a Hudi properties file (key=value lines) with the same keys")
    p.set_defaults(heartbeat_interval=None, heartbeat_misses=None)  # unset: Hudi's keys or the usual defaults
    return p


def hudi_options(args: argparse.Namespace) -> dict[str, str]:
    """The Hudi keys of ``--props`` then ``--hoodie-conf`` (later ones win, as in Hudi Streamer)."""
    from ..table.properties import parse

    out: dict[str, str] = {}
    if getattr(args, "props", None):
        try:
            with open(args.props, encoding="utf-8") as f:
                out.update(parse(f.read(), source=args.props))
        except OSError as e:
            raise ConfigError(f"--props {args.props}: cannot read it ({e})") from e
    for item in getattr(args, "hoodie_conf", None) or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--hoodie-conf {item!r}: expected KEY=VALUE")
        out[key.strip()] = value.strip()
    from ..config import ZK_AUTH_KEY

    foreign = [k for k in out if not k.startswith("hoodie.") and k != ZK_AUTH_KEY]
    if foreign:
        raise ConfigError(f"unknown option {foreign[0]!r}: --hoodie-conf and --props take Hudi keys (hoodie.*) "
                          f"and {ZK_AUTH_KEY}")
    return out


def apply_hudi_options(args: argparse.Namespace) -> None:
    """Resolve the lock and heartbeat settings of ``args`` from Hudi's keys, through the code
    :meth:`~multiwriter.WriterConfig.from_options` uses; a key that is unknown, or that says
    otherwise than a flag or the table, is a ``ConfigError`` naming both."""
    from .cleaner import cli_zk_auth
    from ..config import ZK_AUTH_KEY, lock_from_options, settings_from_options

    options = hudi_options(args)
    auth = cli_zk_auth(args)  # --zk-auth or $MULTIWRITER_ZK_AUTH: also for a lock the Hudi keys describe
    if auth is not None and "hoodie.write.lock.provider" in options:
        options.setdefault(ZK_AUTH_KEY, ":".join(auth))
    settings = settings_from_options(options) if options else {}
    for dest, field, default in HEARTBEAT_FLAGS:
        flag, key = getattr(args, dest, None), settings.get(field)
        if flag is not None and key is not None and flag != key:
            raise ConfigError(f"--{dest.replace('_', '-')} {flag} and the Hudi key for {field} ({key} here) disagree: "
                              "give one of them")
        if hasattr(args, dest):
            setattr(args, dest, next(v for v in (flag, key, default) if v is not None))
    _check_table_name(args, options)
    args.lock = _hudi_lock(args, options, lock_from_options)
    if settings.get("lock_timeout_s") is not None:  # hoodie.write.lock.wait_time_ms: how long a service waits for the lock
        args.lock_timeout_s = settings["lock_timeout_s"]


def _check_table_name(args: argparse.Namespace, options: dict[str, str]) -> None:
    from ..table.table import Table

    name = options.get("hoodie.table.name")
    actual = Table.open(args.path).name if name else None
    if name and name != actual:
        raise ConfigError(f"hoodie.table.name={name!r}, but the table at {redact(args.path)} is named {actual!r}: "
                          "these keys are another table's")


def _hudi_lock(args: argparse.Namespace, options: dict[str, str], build: Callable[[dict[str, Any]], Any]) -> Any:
    lock = build(options)
    if lock is None:
        return None
    flags = [f for f, on in (("--zk", args.zk), ("--zk-base-path", args.zk_base_path), ("--file-lock", args.file_lock),
                                  ("--storage-lock", getattr(args, "storage_lock", False))) if on]
    if flags:
        lock.close()
        raise ConfigError(f"hoodie.write.lock.provider and {', '.join(flags)} both name the lock: give one of them")
    return lock


def _with_hudi_options(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        apply_hudi_options(args)
        return fn(args)

    return run


def _timeline(args: argparse.Namespace) -> int:
    from ..table.table import Table

    t = Table.open(args.path)
    tl = t.timeline()
    print(f"table {t.name} (version {t.config.version}) at {redact(t.path)}")
    print(f"{'requested':<18} {'completed':<18} {'action':<14} {'state':<10} writer / detail")
    for i in tl.latest_states():
        detail = ""
        if i.is_completed and i.action in ("commit", "replacecommit"):
            meta = tl.commit_metadata(i)
            detail = f"{meta.extra_metadata.get('multiwriter.writer_id', '-')}: {meta.operation_type}, {len(meta.all_stats())} files"
        print(f"{i.requested_time:<18} {i.completion_time or '':<18} {i.action:<14} {i.state:<10} {detail}")
    return 0


def _heartbeats(args: argparse.Namespace) -> int:
    from ..heartbeat.client import heartbeat_age_s
    from ..heartbeat.judge import HeartbeatJudge, skew_beyond
    from ..format import layout
    from ..table.table import Table

    t = Table.open(args.path)
    entries = t.storage.list_dir(layout.HEARTBEAT_DIR, files_only=True)
    times = [e.path.rsplit("/", 1)[-1] for e in entries]
    times = [i for i in times if len(i) == 17 and i.isdigit()]  # not temporary files of interrupted writes
    if not times:
        print("no heartbeats (no writer in flight)")
        return 0
    judge = HeartbeatJudge(t.storage, interval_s=args.interval, tolerable_misses=args.misses,
                           max_observe_s=args.observe, skew_warn_s=args.skew_warn, name="multiwriter heartbeats")
    obs = judge.decide(times)
    for inst in times:
        o = obs[inst]
        body = _heartbeat_body(t.storage, layout.heartbeat_path(inst))
        age = heartbeat_age_s(t.storage, inst)
        age_text = "gone" if age is None else f"{age:.1f}s"
        skew = "" if o.skew_s is None else f" skew={o.skew_s:+.1f}s"
        print(f"{inst}  writer={body.get('writer_id', '?')} host={body.get('host', '?')} pid={body.get('pid', '?')} "
              f"age={age_text} unchanged={o.unchanged_s:.1f}s bound={o.bound_s:g}s ({o.bound_from}){skew} "
              f"{'LAPSED' if o.lapsed else o.verdict}")
        if skew_beyond(o.skew_s, args.skew_warn, judge.poll_s):
            print(f"WARNING: clock skew {o.skew_s:+.1f}s between writer {body.get('writer_id', '?')} and this host")
    return 0


def _heartbeat_body(storage, rel: str) -> dict:
    import json

    try:
        body = json.loads(storage.read_bytes(rel))
    except (ValueError, RecursionError, OSError):
        return {}
    return body if isinstance(body, dict) else {}


def _status(args: argparse.Namespace) -> int:
    from ..status import collect, render
    from ..table.table import Table

    t = Table.open(args.path)
    live = None
    if args.zk or args.lock is not None:
        from .cleaner import cli_lock

        from ..lock import ZooKeeperLock

        lock = cli_lock(args, "status")
        try:
            live = lock.live_writers(t.table_id) if isinstance(lock, ZooKeeperLock) else None
        finally:
            lock.close()
    s = collect(t, live_writers=live, heartbeat_interval_s=args.heartbeat_interval,
                heartbeat_tolerable_misses=args.heartbeat_misses, small_file_bytes=args.small_file_bytes,
                observe_s=args.observe, skew_warn_s=args.skew_warn)
    print(s.to_json() if args.json else render(s))
    return 0


def _retire(args: argparse.Namespace) -> int:
    from ..checkpoint import retire
    from .cleaner import cli_lock
    from ..table.table import Table

    lock = cli_lock(args, "writers retire")
    try:
        rec = retire(Table.open(args.path), args.writer_id, lock=lock)
    finally:
        lock.close()
    print(f"retired writer {rec.writer_id!r} (last batch {rec.last_batch}) at {rec.retired_at}: "
          "later commits no longer carry its checkpoint")
    return 0


def _zookeeper(args: argparse.Namespace) -> int:
    from ..zookeeper_local import main as serve

    serve(port=args.port)
    return 0


def _demo(args: argparse.Namespace) -> int:
    from ..demo import main as demo_main

    return demo_main([])


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="multiwriter", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="run the main demo job (two writers, a doomed writer, the cleaner)")
    d.set_defaults(fn=_demo)
    z = sub.add_parser("zookeeper", help="run a local ZooKeeper server in the foreground")
    z.add_argument("--port", type=int, default=2181)
    z.set_defaults(fn=_zookeeper)
    t = sub.add_parser("timeline", help="print a table's timeline")
    t.add_argument("path")
    t.set_defaults(fn=_timeline)
    h = sub.add_parser("heartbeats", help="print the heartbeats of in-flight writers")
    h.add_argument("path")
    h.add_argument("--interval", type=float, default=10.0,
                   help="judges heartbeats that record no interval of their own (Hudi's JVM writers), seconds")
    h.add_argument("--misses", type=int, default=2, help="tolerable misses for such heartbeats")
    h.add_argument("--observe", type=float, default=10.0, help="seconds to watch the heartbeats at most "
                   "(alive once a new beat appears, lapsed once none did for the writer's bound)")
    h.add_argument("--skew-warn", type=float, default=5.0, help="warn when a writer's clock is further than this "
                   "from this host's (seconds)")
    h.set_defaults(fn=_heartbeats)
    from .cleaner import (
        add_arguments,
        add_cluster_arguments,
        add_compact_arguments,
        add_lock_arguments,
        clean_command,
        cluster_command,
        compact_command,
    )

    c = sub.add_parser("clean", help="roll back failed writers, cluster small files, compact log files, clean old "
                       "versions, archive")
    add_arguments(c)
    add_hudi_arguments(c)
    c.set_defaults(fn=_with_hudi_options(clean_command))
    k = sub.add_parser("cluster", help="stitch small file groups into target-size ones (clustering only)")
    add_cluster_arguments(k)
    add_hudi_arguments(k)
    k.set_defaults(fn=_with_hudi_options(cluster_command))
    m = sub.add_parser("compact", help="merge the log files of Merge-on-Read file slices into base files (compaction only)")
    add_compact_arguments(m)
    add_hudi_arguments(m)
    m.set_defaults(fn=_with_hudi_options(compact_command))
    s = sub.add_parser("status", help="writers, in-flight instants, pending services, file health, on one screen")
    s.add_argument("path")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    add_lock_arguments(s)  # --zk lists the live (registered) writers
    s.add_argument("--heartbeat-interval", type=float, default=10.0,
                   help="judges heartbeats that record no interval of their own (Hudi's JVM writers), seconds")
    s.add_argument("--heartbeat-misses", type=int, default=2, help="tolerable misses for such heartbeats")
    s.add_argument("--observe", type=float, default=10.0, help="seconds to watch in-flight heartbeats at most "
                   "(alive once a new beat appears, lapsed once none did for the writer's bound)")
    s.add_argument("--skew-warn", type=float, default=5.0, help="warn when a writer's clock is further than this "
                   "from this host's (seconds)")
    s.add_argument("--small-file-bytes", type=int, default=None, help="what counts as a small file (default: clustering's)")
    add_hudi_arguments(s)
    s.set_defaults(fn=_with_hudi_options(_status))
    from .bootstrap import add_arguments as add_bootstrap_arguments, bootstrap_command

    b = sub.add_parser("bootstrap", help="make a new table of a Parquet dataset (Hudi's FULL_RECORD bootstrap) "
                       "before starting writers")
    add_bootstrap_arguments(b)
    b.set_defaults(fn=bootstrap_command)
    w = sub.add_parser("writers", help="manage writer ids")
    wsub = w.add_subparsers(dest="writers_cmd", required=True)
    r = wsub.add_parser("retire", help="forget a stopped writer id's checkpoint (refused while it is live)")
    r.add_argument("path")
    r.add_argument("writer_id")
    add_lock_arguments(r)
    r.set_defaults(fn=_retire)
    return p


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["demo"]:  # the demo has its own options
        from ..demo import main as demo_main

        return demo_main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return int(args.fn(args) or 0)
    except MultiWriterError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
