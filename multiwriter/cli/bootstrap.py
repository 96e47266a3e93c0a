"""``multiwriter bootstrap SOURCE TABLE``: make a Hudi table of a Parquet dataset before writers start."""
from __future__ import annotations

import argparse
import contextlib
from typing import Any

from ..errors import ConfigError
from ..storage import Storage
from ..table.properties import PROPERTIES_FILE


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    from .cleaner import add_lock_arguments

    p.add_argument("source", help="the Parquet dataset (partition folders date=.../ or plain values); only read")
    p.add_argument("path", metavar="TABLE", help="the new table's root")
    p.add_argument("--name", help="the table name (default: the table folder's name)")
    p.add_argument("--record-key", required=True, help="record key column(s), comma-separated")
    p.add_argument("--partition-by", default="", help="partition column(s), comma-separated, one folder level each")
    p.add_argument("--ordering-field", help="the ordering (precombine) column")
    p.add_argument("--table-type", default="COPY_ON_WRITE", choices=("COPY_ON_WRITE", "MERGE_ON_READ"))
    p.add_argument("--num-buckets", type=int, help="the bucket index's bucket count (Merge-on-Read)")
    p.add_argument("--mode", default="FULL_RECORD", type=str.upper, choices=("FULL_RECORD", "METADATA_ONLY"),
                   help="FULL_RECORD (rows rewritten into the table) or METADATA_ONLY (skeleton files pointing at the "
                        "source files, which stay); --hoodie-conf's selector keys choose per partition")
    style = p.add_mutually_exclusive_group()
    style.add_argument("--hive-style", dest="hive_style", action="store_true", default=None,
                       help="the source's folders are col=value (default: detected)")
    style.add_argument("--plain-folders", dest="hive_style", action="store_false", help="the folders are plain values")
    p.add_argument("--spark", action="store_true",
                   help="read the source and write the table on Spark executors (a source larger than this process)")
    p.add_argument("--spark-master", metavar="URL",
                   help="with --spark: the Spark master (default local[*]; spark://..., yarn, k8s://...)")
    p.add_argument("--hoodie-conf", action="append", default=[], metavar="KEY=VALUE",
                   help="Hudi's bootstrap keys (hoodie.bootstrap.mode.selector, ...selector.regex, ...regex.mode)")
    add_lock_arguments(p)
    return p


def bootstrap_command(args: argparse.Namespace) -> int:
    from . import hudi_options
    from .cleaner import cli_lock
    from ..write.bootstrap import bootstrap

    if args.zk and args.zk_base_path is None and not Storage(args.path).exists(PROPERTIES_FILE):
        args.zk_base_path = "/multiwriter"  # a new table records no base path yet
    lock = cli_lock(args, "bootstrap")
    try:
        with _spark(args) as spark:
            r = bootstrap(args.source, args.path, name=args.name or args.path.rstrip("/").rsplit("/", 1)[-1],
                          record_key=_columns(args.record_key), partition_by=_columns(args.partition_by),
                          ordering_field=args.ordering_field, mode=args.mode, table_type=args.table_type,
                          num_buckets=args.num_buckets, lock=lock, hive_style=args.hive_style,
                          options=hudi_options(args), spark=spark)
    finally:
        lock.close()
    assert r.instant is not None
    where = f"instant {r.instants[0]}" if len(r.instants) == 1 else f"instants {', '.join(r.instants)}"
    print(f"bootstrapped {r.num_inserts} rows into {r.files_written} files at {where}")
    return 0


def _spark(args: argparse.Namespace) -> Any:
    """A SparkSession with ``--spark`` (pyspark is loaded only then), else none."""
    if args.spark_master and not args.spark:
        raise ConfigError("--spark-master needs --spark")
    if not args.spark:
        return contextlib.nullcontext()
    from ..spark.session import session

    return session("multiwriter-bootstrap", args.spark_master)


def _columns(text: str) -> list[str]:
    return [c.strip() for c in text.split(",") if c.strip()]
