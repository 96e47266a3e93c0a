"""Worker processes for multi-process tests: ``python -m tests.workers <command> '<json>'``.

Each prints one JSON line with its result, so tests assert on what really happened.
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback

import pyarrow as pa

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def _lock(a: dict):
    """The table lock a worker takes: ZooKeeper by default, the storage lock with ``lock: storage``
    (``validity_s`` plays the part of the ZooKeeper session)."""
    import multiwriter as mw

    if a.get("lock") == "storage":
        validity = a.get("validity_s", 2.0)
        return mw.StorageLock(validity_s=validity, renew_interval_s=validity / 4, poll_s=0.02)
    return mw.ZooKeeperLock(connect=a["zk"], base_path=a.get("base", "/multiwriter"),
                            session_timeout_s=a.get("session_timeout_s", 10.0),
                            acquire_timeout_s=a.get("lock_timeout_s", 60.0))


def _config(a: dict):
    import multiwriter as mw

    lock = _lock(a)
    return mw.WriterConfig(
        writer_id=a["writer"], lock=lock, max_conflict_retries=a.get("retries", 0),
        heartbeat_interval_s=a.get("hb", 1.0), heartbeat_tolerable_misses=a.get("misses", 2),
        lock_timeout_s=a.get("lock_timeout_s", 60.0), executor="driver", retry_backoff_s=0.05,
        begin_ahead_s=a.get("begin_ahead_s", 0.0),
        **({"allow_missing_columns": a["allow_missing_columns"]} if "allow_missing_columns" in a else {}),
    )


def _batch(ids: list, date: str, ts: int, value: float) -> pa.Table:
    return pa.table({
        "id": [str(i) for i in ids], "date": [date] * len(ids),
        "ts": pa.array([ts] * len(ids), pa.int64()), "value": [float(value)] * len(ids),
    })


def write(a: dict) -> dict:
    import multiwriter as mw

    r = mw.write(_batch(a["ids"], a.get("date", "2024-01-01"), a.get("ts", 1), a.get("value", 1.0)),
                 a["path"], _config(a), batch_id=a.get("batch_id"))
    return {"instant": r.instant.requested_time if r.instant else None,
            "completion": r.instant.completion_time if r.instant else None,
            "attempts": r.attempts, "skipped": r.skipped}


def write_columns(a: dict) -> dict:
    """Write ``rows`` with an explicit ``schema`` ([[name, type], ...]); with ``gate`` (a
    directory), stop at fault point ``hold_at``: create ``gate/reached`` and wait for
    ``gate/release``, so a test orders this writer against another one deterministically."""
    import multiwriter as mw

    schema = pa.schema([(n, pa.type_for_alias(t)) for n, t in a["schema"]])
    if a.get("gate"):
        _hold_at(a.get("hold_at", "after-data-files"), a["gate"])
    r = mw.write(pa.Table.from_pylist(a["rows"], schema=schema), a["path"], _config(a), batch_id=a.get("batch_id"))
    return {"instant": r.instant.requested_time if r.instant else None,
            "completion": r.instant.completion_time if r.instant else None, "attempts": r.attempts}


def _hold_at(point: str, gate: str) -> None:
    from multiwriter import faults

    def hold(name: str) -> None:
        if name != point:
            return
        open(os.path.join(gate, "reached"), "w").close()
        deadline = time.monotonic() + 120
        while not os.path.exists(os.path.join(gate, "release")):
            if time.monotonic() > deadline:
                raise TimeoutError(f"gate {gate} was never released")
            time.sleep(0.01)

    faults.point = hold


def instants(a: dict) -> dict:
    """Issue and complete ``n`` empty commits; record what each saw at issue time."""
    from multiwriter.table.metadata import CommitMetadata
    from multiwriter.table.table import Table
    from multiwriter.transaction import Transaction

    cfg = _config(a)
    table = Table.open(a["path"])
    lock = cfg.lock.for_table(table.table_id, table.storage)
    out = []
    for _ in range(a["n"]):
        txn = Transaction(table, lock, writer_id=cfg.writer_id)
        i = txn.begin()
        seen = txn.base_timeline.max_time()
        done = txn.commit(CommitMetadata())
        out.append([i.requested_time, seen, done.completion_time])
    lock.close()
    return {"instants": out}




def upserts(a: dict) -> dict:
    """``batches`` upserts of the given rows ([[id, ts, value], ...] per batch) by one writer,
    each one commit; what each committed (its completion time, attempts, conflicts, rows), so
    the test can build the event-time model. With ``hold_s``, each batch waits that long between
    writing its files and committing (a long-running backfill)."""
    import multiwriter as mw

    cfg = _config(a)
    if a.get("hold_s"):
        from multiwriter import faults

        real_point = faults.point

        def hold(name: str) -> None:
            if name == "after-data-files":
                time.sleep(a["hold_s"])
            real_point(name)

        faults.point = hold
    out = []
    from multiwriter.write.writer import Writer

    w = Writer(mw.Table.open(a["path"]), cfg)
    try:
        for batch in a["batches"]:
            ids = [r[0] for r in batch]
            t = pa.table({"id": [str(i) for i in ids], "date": [a.get("date", "2024-01-01")] * len(ids),
                          "ts": pa.array([r[1] for r in batch], pa.int64()), "value": [float(r[2]) for r in batch]})
            r = w.write(t)
            out.append({"instant": r.instant.requested_time, "completion": r.instant.completion_time,
                        "attempts": r.attempts, "conflicts": r.conflicts, "rows": batch,
                        "lock_hold": r.protocol.get("lock_hold"), "lock_wait": r.protocol.get("lock_wait"),
                        "duration": r.duration_s})
            if a.get("pause_s"):
                time.sleep(a["pause_s"])
    finally:
        w.close()
    return {"commits": out}


def acked_upserts(a: dict) -> dict:
    """Numbered batches by one writer, as a streaming query sends them, until the file ``stop``
    exists (or ``max_batches``): batch ``b`` sets ``value_base + b`` on a random subset of
    ``keys`` (ts 1 for all, so the later commit wins). A batch that raised is sent again with
    the same batch id until acknowledged (a replay of one that landed is skipped, and counts as
    acknowledged). Each acknowledgement is appended to ``ledger`` when it happens, with its
    wall-clock time, so the test can follow the run; errors are recorded, not raised."""
    import dataclasses
    import random

    import multiwriter as mw
    from multiwriter.errors import MultiWriterError
    from multiwriter.write.writer import Writer

    rng = random.Random(f"{a['writer']}:{a.get('seed', 0)}")
    # a capped backoff: a writer that lost several conflicts in a row must not sit out for seconds
    cfg = dataclasses.replace(_config(a), retry_backoff_max_s=a.get("backoff_max_s", 5.0))
    w = Writer(mw.Table.open(a["path"]), cfg)
    acks: list[dict] = []
    errors: list[dict] = []
    b = 0
    try:
        while b < a.get("max_batches", 10_000) and not os.path.exists(a["stop"]):
            keys = sorted(rng.sample(a["keys"], a.get("per_batch", len(a["keys"]))))
            rows = [[k, 1, float(a.get("value_base", 0) + b)] for k in keys]
            t = pa.table({"id": [str(k) for k in keys], "date": [a.get("date", "2024-01-01")] * len(keys),
                          "ts": pa.array([1] * len(keys), pa.int64()), "value": [r[2] for r in rows]})
            while True:
                try:
                    r = w.write(t, batch_id=b)
                    break
                except MultiWriterError as e:  # not acknowledged: send the same batch again
                    errors.append({"batch": b, "at": time.time(), "error": type(e).__name__, "message": str(e)[:300]})
                    time.sleep(a.get("error_pause_s", 0.1))
            ack = {"batch": b, "acked_at": time.time(), "skipped": r.skipped, "attempts": r.attempts,
                   "conflicts": r.conflicts, "rows": rows,
                   "instant": r.instant.requested_time if r.instant else None,
                   "completion": r.instant.completion_time if r.instant else None}
            acks.append(ack)
            with open(a["ledger"], "a") as f:
                f.write(json.dumps({k: v for k, v in ack.items() if k != "rows"}) + "\n")
            b += 1
            if a.get("pause_s"):
                time.sleep(a["pause_s"])
    finally:
        w.close()
    return {"acks": acks, "errors": errors, "lock_wait_causes": _lock_wait_causes()}


def _lock_wait_causes() -> dict[str, float]:
    """Seconds this process's lock acquires waited, by cause (the lock's own metric)."""
    from prometheus_client import REGISTRY

    out: dict[str, float] = {}
    for fam in REGISTRY.collect():
        for s in fam.samples:
            if s.name == "multiwriter_lock_wait_cause_seconds_total":
                out[s.labels["cause"]] = round(out.get(s.labels["cause"], 0.0) + s.value, 3)
    return out


def clean(a: dict) -> dict:
    """One cleaner run (a separate process, so a fault point can crash it)."""
    import multiwriter as mw

    c = mw.Cleaner(a["path"], lock=_lock(a), heartbeat_interval_s=1.0, heartbeat_tolerable_misses=2,
                   retain_commits=a.get("retain", 10))
    runs = [c.run_once() for _ in range(a.get("runs", 1))]
    return {"rolled_back": [t for r in runs for t in r.rolled_back],
            "old_versions_deleted": sum(r.old_versions_deleted for r in runs)}


def main() -> None:
    cmd, args = sys.argv[1], json.loads(sys.argv[2])
    if args.get("start_at"):
        time.sleep(max(0.0, args["start_at"] - time.time()))
    try:
        res = globals()[cmd](args)
        res["ok"] = True
    except Exception as e:  # noqa: BLE001 -- the child reports any error type to the test
        res = {"ok": False, "error": type(e).__name__, "message": str(e), "trace": traceback.format_exc()}
    print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
