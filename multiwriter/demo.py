"""The main job (``make demo``): two streaming writers on one table, a doomed writer, the cleaner;
and beside it the same pair of writers on a Merge-on-Read table.

- **ingest** streams new events into today's partitions and corrects a few recent ones;
- **backfill** streams rewrites of historical partitions plus a slice of recent keys, so that
  it sometimes touches the same file groups as ingest: those conflicts are retried;
- **ingest-mor** and **backfill-mor** feed the same streams into a Merge-on-Read table with a
  bucket index: non-blocking writers, which never conflict; its companion job compacts;
- **doomed** is a separate process that starts a batch and is killed with SIGKILL half-way;
- **cleaner** is the companion streaming job that rolls the doomed writer back once its
  heartbeat lapses.
At the end a summary shows commits, conflicts, retries, rollbacks and rows, and checks that
hudi-rs reads exactly the rows our reader reads. Exit code 0 only if every check passes.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa

from . import markers
from .storage import Storage

SCHEMA = pa.schema(
    [
        pa.field("event_id", pa.string()),
        pa.field("date", pa.string()),
        pa.field("ts", pa.int64()),
        pa.field("user", pa.string()),
        pa.field("amount", pa.float64()),
        pa.field("source", pa.string()),
    ]
)
HEARTBEAT_S = 1.0
MISSES = 2
log = logging.getLogger("multiwriter.demo")


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="multiwriter demo")
    p.add_argument("--seconds", type=float, default=75.0, help="how long the writers run")
    p.add_argument("--output", default="demo-output", help="directory for the table and checkpoints")
    p.add_argument("--metrics-port", type=int, default=0, help="Prometheus port on 127.0.0.1 (0: any free)")
    p.add_argument("--rate", type=int, default=40, help="ingest rows per second")
    p.add_argument("role", nargs="?", default="main", choices=["main", "doomed"], help=argparse.SUPPRESS)
    p.add_argument("--path", help=argparse.SUPPRESS)
    p.add_argument("--zk", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def _spark():
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    s = (
        SparkSession.builder.master("local[2]")
        .appName("multiwriter-demo")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.stopTimeout", "30000")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    s.sparkContext.setLogLevel("ERROR")
    return s


def _days(n: int) -> list[str]:
    today = dt.datetime.now(dt.timezone.utc).date()
    return [(today - dt.timedelta(days=i)).isoformat() for i in range(n)]


def _ingest_df(spark, rate: int):
    from pyspark.sql import functions as F

    today, yesterday = _days(2)
    src = spark.readStream.format("rate").option("rowsPerSecond", rate).load()
    # New events, plus every 5th row correcting one of the first 200 events (backfill revisits
    # those too, so the two writers sometimes rewrite the same file groups at once).
    key = F.when(F.col("value") % 5 == 0, F.col("value") * 3 % 200).otherwise(F.col("value"))
    return src.select(
        F.concat(F.lit("e"), key.cast("string")).alias("event_id"),
        F.when(key % 2 == 0, F.lit(today)).otherwise(F.lit(yesterday)).alias("date"),
        (F.col("timestamp").cast("double") * 1000).cast("long").alias("ts"),
        F.concat(F.lit("u"), (key % 97).cast("string")).alias("user"),
        (key % 1000).cast("double").alias("amount"),
        F.lit("ingest").alias("source"),
    )


def _backfill_df(spark):
    from pyspark.sql import functions as F

    days = _days(8)
    today, yesterday = days[0], days[1]
    src = spark.readStream.format("rate").option("rowsPerSecond", 10).load()
    # Historical partitions get rewritten; one row in three revisits a recent ingest key.
    recent = F.col("value") % 3 == 0
    key = F.when(recent, F.col("value") * 7 % 200).otherwise(F.col("value") + 1_000_000)
    hist_date = F.element_at(F.array(*[F.lit(d) for d in days[2:]]), (F.col("value") % 6 + 1).cast("int"))
    return src.select(
        F.concat(F.when(recent, F.lit("e")).otherwise(F.lit("h")), key.cast("string")).alias("event_id"),
        F.when(recent, F.when(key % 2 == 0, F.lit(today)).otherwise(F.lit(yesterday))).otherwise(hist_date).alias("date"),
        (F.col("timestamp").cast("double") * 1000).cast("long").alias("ts"),
        F.concat(F.lit("u"), (key % 97).cast("string")).alias("user"),
        (key % 1000).cast("double").alias("amount"),
        F.lit("backfill").alias("source"),
    )


def _writer_config(writer_id: str, zk: str):
    import multiwriter as mw

    return mw.WriterConfig(
        writer_id=writer_id,
        lock=mw.ZooKeeperLock(connect=zk, base_path="/multiwriter-demo"),
        heartbeat_interval_s=HEARTBEAT_S,
        heartbeat_tolerable_misses=MISSES,
        max_conflict_retries=8,
        retry_backoff_s=0.1,
    )


def _doomed(args: argparse.Namespace) -> int:
    """Child process: write one batch and hang after the data files (the parent kills us)."""
    import multiwriter as mw

    ids = [f"d{i}" for i in range(500)]
    batch = pa.table(
        {
            "event_id": ids,
            "date": [_days(1)[0]] * len(ids),
            "ts": [0] * len(ids),
            "user": ["doomed"] * len(ids),
            "amount": [0.0] * len(ids),
            "source": ["doomed"] * len(ids),
        },
        schema=SCHEMA,
    )
    mw.write(batch, args.path, _writer_config("doomed", args.zk))
    return 0


def _start_doomed(path: str, zk: str) -> subprocess.Popen:
    env = dict(os.environ, MULTIWRITER_FAULTS="after-data-files=hang", MULTIWRITER_FAULT_HANG_S="600")
    return subprocess.Popen(
        [sys.executable, "-m", "multiwriter.demo", "doomed", "--path", path, "--zk", zk],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


def _kill_if_half_way(proc: subprocess.Popen, table: Path) -> str | None:
    """SIGKILL the doomed writer once it has written data files (markers) but not committed;
    return its instant time, or None if it is not that far yet."""
    for hb in (table / ".hoodie" / ".heartbeat").glob("*"):
        try:
            body = json.loads(hb.read_text())
        except (ValueError, OSError):
            continue
        if body.get("writer_id") == "doomed" and markers.started_writing(Storage(str(table)), hb.name):
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            return hb.name
    return None


def _stats(sinks: dict) -> dict[str, dict[str, int]]:
    out = {}
    for name, sink in sinks.items():
        rs = list(sink.results)
        out[name] = {
            "commits": sum(1 for r in rs if r.instant is not None),
            "conflicts": sum(r.conflicts for r in rs),
            "retried_batches": sum(1 for r in rs if r.attempts > 1),
            "rows": sum(r.num_inserts + r.num_updates for r in rs),
        }
    return out


def _hudi_rs_rows(path: str) -> tuple[int, set[str]]:
    from hudi import HudiTableBuilder

    batches = HudiTableBuilder.from_base_uri(path).build().read()
    keys: set[str] = set()
    n = 0
    for b in batches:
        n += b.num_rows
        keys.update(b.column(b.schema.get_field_index("_hoodie_record_key")).to_pylist())
    return n, keys


def _files_of(path: Path, instant: str) -> list[Path]:
    """Any file left anywhere in the table by one instant (data, marker, heartbeat, instant)."""
    return [p for p in path.rglob("*") if p.is_file() and instant in p.name or (p.is_dir() and p.name == instant)]


def _rollbacks(table) -> int:
    from prometheus_client import REGISTRY

    return int(REGISTRY.get_sample_value("multiwriter_rollbacks_total", {"table": table.name}) or 0)


def _progress(t0: float, sinks: dict, table) -> str:
    st = _stats(sinks)
    tl = table.timeline()
    rollbacks = _rollbacks(table)
    parts = [f"{name}: {s['commits']} commits, {s['conflicts']} conflicts" for name, s in st.items()]
    return f"[{time.monotonic() - t0:5.0f}s] " + "; ".join(parts) + f"; pending {len(tl.pending())}; rollbacks {rollbacks}"


def run_demo(args: argparse.Namespace) -> int:
    import multiwriter as mw

    out = Path(args.output).resolve()
    path = out / "events"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    print(f"multiwriter demo: table at {path}", flush=True)
    with mw.LocalZooKeeper(port=0) as zk:
        server = mw.metrics.start_http_server(port=args.metrics_port, addr="127.0.0.1")
        print(f"ZooKeeper at {zk.connect}; metrics at http://127.0.0.1:{server.port}/metrics", flush=True)
        try:
            return _run_writers(args, path, out, zk.connect)
        finally:
            server.stop()


def _run_writers(args: argparse.Namespace, path: Path, out: Path, zk: str) -> int:
    import multiwriter as mw

    cleaner_lock = mw.ZooKeeperLock(connect=zk, base_path="/multiwriter-demo")
    table = mw.Table.create(str(path), name="events", schema=SCHEMA, record_key="event_id",
                            partition_by=["date"], ordering_field="ts", lock=cleaner_lock)
    mor_path = out / "events_mor"
    mor = mw.Table.create(str(mor_path), name="events_mor", schema=SCHEMA, record_key="event_id",
                          partition_by=["date"], ordering_field="ts", lock=cleaner_lock,
                          table_type="MERGE_ON_READ", num_buckets=4)
    spark = _spark()
    sinks = {
        "ingest": mw.MultiWriterSink(str(path), _writer_config("ingest", zk)),
        "backfill": mw.MultiWriterSink(str(path), _writer_config("backfill", zk)),
    }
    mor_sinks = {
        "ingest-mor": mw.MultiWriterSink(str(mor_path), _writer_config("ingest-mor", zk)),
        "backfill-mor": mw.MultiWriterSink(str(mor_path), _writer_config("backfill-mor", zk)),
    }
    cleaner = mw.Cleaner(str(path), lock=cleaner_lock, heartbeat_interval_s=HEARTBEAT_S,
                         heartbeat_tolerable_misses=MISSES, retain_commits=20)
    mor_cleaner = mw.Cleaner(str(mor_path), lock=cleaner_lock, heartbeat_interval_s=HEARTBEAT_S,
                             heartbeat_tolerable_misses=MISSES, retain_commits=20,
                             compaction=mw.CompactionConfig(delta_commits=5))
    queries = []
    doomed_instant = None
    t0 = time.monotonic()
    try:
        queries.append(_ingest_df(spark, args.rate).writeStream.foreachBatch(sinks["ingest"])
                       .option("checkpointLocation", str(out / "ck-ingest")).trigger(processingTime="2 seconds").start())
        queries.append(_backfill_df(spark).writeStream.foreachBatch(sinks["backfill"])
                       .option("checkpointLocation", str(out / "ck-backfill")).trigger(processingTime="2 seconds").start())
        queries.append(cleaner.start(spark, interval="2 seconds", checkpoint_location=str(out / "ck-cleaner")))
        queries.append(_ingest_df(spark, args.rate).writeStream.foreachBatch(mor_sinks["ingest-mor"])
                       .option("checkpointLocation", str(out / "ck-ingest-mor")).trigger(processingTime="2 seconds").start())
        queries.append(_backfill_df(spark).writeStream.foreachBatch(mor_sinks["backfill-mor"])
                       .option("checkpointLocation", str(out / "ck-backfill-mor")).trigger(processingTime="2 seconds").start())
        queries.append(mor_cleaner.start(spark, interval="4 seconds", checkpoint_location=str(out / "ck-cleaner-mor")))
        doomed: subprocess.Popen | None = None
        next_print = time.monotonic() + 5
        while time.monotonic() - t0 < args.seconds:
            if doomed is None and time.monotonic() - t0 > min(10.0, args.seconds / 4):
                doomed = _start_doomed(str(path), zk)
            if doomed is not None and doomed_instant is None and doomed.poll() is None:
                doomed_instant = _kill_if_half_way(doomed, path)
                if doomed_instant:
                    print(f"[{time.monotonic() - t0:5.0f}s] doomed writer killed with SIGKILL mid-batch (instant {doomed_instant})", flush=True)
            for q in queries:
                if q.exception() is not None:
                    raise RuntimeError(f"query {q.name or q.id} failed: {q.exception()}")
            if time.monotonic() >= next_print:
                print(_progress(t0, sinks | mor_sinks, table), flush=True)
                next_print += 5
            time.sleep(0.25)
    finally:
        _stop_gracefully(queries, sinks | mor_sinks)
        if doomed is not None and doomed.poll() is None:
            doomed.kill()
            doomed.wait()
    time.sleep(HEARTBEAT_S * (MISSES + 1))  # let a writer killed late be judged dead
    final = cleaner.run_once()
    cleaner.close()
    mor_final = mor_cleaner.run_once()
    mor_cleaner.close()
    mor_checks = _mor_summary(mor_path, mor, mor_sinks, mor_final)
    return _summary(path, table, sinks, doomed_instant, final, spark, cleaner_lock, mor_checks)


def _stop_gracefully(queries: list, sinks: dict) -> None:
    """Stop each query between two batches, so no commit is interrupted half-way."""
    for q in queries:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(s._mu.locked() for s in sinks.values()):
            time.sleep(0.02)
        q.stop()
    for s in sinks.values():
        s.close()


def _mor_summary(path: Path, table, sinks: dict, final) -> dict[str, bool]:
    """The Merge-on-Read pair: its figures, and the checks the main summary adds."""
    from .format import instant as inst

    st = _stats(sinks)
    tl = table.timeline()
    ours = table.read(columns=["_hoodie_record_key"])
    keys = set(ours.column(0).to_pylist())
    n_rs, rs_keys = _hudi_rs_rows(str(path))
    compactions = [i for i in tl.completed(frozenset({inst.COMMIT})) if tl.commit_metadata(i).compacted]
    print()
    print("Merge-on-Read table (bucket index, non-blocking writers, the same two streams):")
    print(f"{'writer':<13} {'commits':>8} {'conflicts':>10} {'retried batches':>16} {'rows written':>13}")
    for name, s in st.items():
        print(f"{name:<13} {s['commits']:>8} {s['conflicts']:>10} {s['retried_batches']:>16} {s['rows']:>13}")
    print(f"compactions by the companion job: {len(compactions) + len(final.compaction_instants)} on the active timeline "
          f"and this last run; rows in table: ours {ours.num_rows}, hudi-rs {n_rs}")
    return {
        "merge-on-read: both writers committed": all(s["commits"] > 0 for s in st.values()),
        "merge-on-read: zero conflicts, zero retries": all(s["conflicts"] == 0 and s["retried_batches"] == 0 for s in st.values()),
        "merge-on-read: compaction ran": bool(compactions or final.compaction_instants),
        "merge-on-read: hudi-rs reads the same rows": n_rs == ours.num_rows and rs_keys == keys,
        "merge-on-read: no duplicate keys": len(keys) == ours.num_rows,
    }


def _summary(path: Path, table, sinks: dict, doomed_instant: str | None, final, spark, lock,
             more_checks: dict[str, bool] | None = None) -> int:
    from prometheus_client import REGISTRY

    st = _stats(sinks)
    tl = table.timeline()
    rollbacks = int(REGISTRY.get_sample_value("multiwriter_rollbacks_total", {"table": table.name}) or 0)
    ours = table.read(columns=["_hoodie_record_key"])
    our_keys = set(ours.column(0).to_pylist())
    n_rs, rs_keys = _hudi_rs_rows(str(path))
    doomed_left = doomed_instant is not None and any(i.requested_time == doomed_instant for i in tl.pending())
    written, live, clusterings = _file_groups(table, tl)
    checks = {
        "ingest committed": st["ingest"]["commits"] > 0,
        "backfill committed": st["backfill"]["commits"] > 0,
        "a conflict was retried": st["ingest"]["conflicts"] + st["backfill"]["conflicts"] > 0,
        "doomed writer killed mid-batch": doomed_instant is not None,
        "cleaner rolled it back": doomed_instant is not None and rollbacks > 0 and not doomed_left
        and not _files_of(path, doomed_instant),
        "no doomed rows visible": not any(k.startswith("d") for k in our_keys),
        "hudi-rs reads the same rows": n_rs == ours.num_rows and rs_keys == our_keys,
        "no duplicate keys": len(our_keys) == ours.num_rows,
        "clustering stitched small file groups": clusterings > 0 and live < written,
        **(more_checks or {}),
    }
    print()
    print("=" * 72)
    print(f"{'writer':<10} {'commits':>8} {'conflicts':>10} {'retried batches':>16} {'rows written':>13}")
    for name, s in st.items():
        print(f"{name:<10} {s['commits']:>8} {s['conflicts']:>10} {s['retried_batches']:>16} {s['rows']:>13}")
    print(f"rollbacks by the cleaner: {rollbacks}  (doomed instant {doomed_instant})")
    print(f"rows in table: ours {ours.num_rows}, hudi-rs {n_rs}; active timeline: {len(tl.completed_writes())} commits "
          f"(older ones archived by the cleaner)")
    print(f"file groups: {written} created by the writers' commits, {live} live after {clusterings} "
          "clustering(s) by the companion job")
    print("-" * 72)
    for name, ok in checks.items():
        print(f"  [{'ok' if ok else 'FAIL'}] {name}")
    print("=" * 72, flush=True)
    lock.close()
    spark.stop()
    return 0 if all(checks.values()) else 1


def _file_groups(table, tl) -> tuple[int, int, int]:
    """(file groups the writers' commits created, live file groups now, completed clusterings),
    over the active timeline and the archived history."""
    from .cleaner.archive import load_history
    from .format import instant as inst

    history = [a for a in load_history(table) if a.completion_time]
    metas = [tl.commit_metadata(i) for i in tl.completed(frozenset({inst.COMMIT}))]
    metas += [a.commit_metadata() for a in history if a.action == inst.COMMIT]
    created = {(st.partition_path, st.file_id) for m in metas if m is not None for st in m.all_stats() if st.creates_file_group}
    clusterings = len(tl.completed(frozenset({inst.REPLACE_COMMIT}))) + sum(a.action == inst.REPLACE_COMMIT for a in history)
    return len(created), len(table.snapshot(timeline=tl).files()), clusterings


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("multiwriter", "kazoo", "py4j"):  # the summary reports conflicts and retries
        logging.getLogger(noisy).setLevel(logging.CRITICAL)
    if args.role == "doomed":
        return _doomed(args)
    return run_demo(args)


if __name__ == "__main__":
    sys.exit(main())
