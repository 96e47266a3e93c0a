"""A chaos writer process: commits its batches in order, records each acknowledged batch in a
ledger (append + fsync), and resumes after a crash from the last acknowledged batch.

Every row carries ``tag = "<writer>:<batch>"`` so the final check can tell which batch wrote it.
"""
from __future__ import annotations

import json
import os
import sys
import time

import pyarrow as pa

HOT_KEYS = 60


def batch_rows(writer: str, mode: str, b: int) -> pa.Table:
    """The rows of batch ``b``: deterministic, so the final check can rebuild every version.
    Ordering values are unique per writer and batch (``b * 10 + writer's digit``): which version
    wins never depends on a tie."""
    ts = b * 10 + sum(map(ord, writer)) % 10
    if mode == "hot":  # two writers on overlapping keys: updates to a shared key range
        ids = [f"hot-{(b * 7 + i) % HOT_KEYS}" for i in range(15)] + [f"{writer}-new-{b}-{i}" for i in range(3)]
        date = "hot"
    else:  # own partition: inserts and updates of its own keys
        ids = [f"{writer}-{(b * 5 + i) % 40}" for i in range(12)]
        date = f"own-{writer}"
    return pa.table({
        "id": ids, "date": [date] * len(ids), "ts": pa.array([ts] * len(ids), pa.int64()),
        "tag": [f"{writer}:{b}"] * len(ids),
    })


def acked(ledger: str) -> int:
    if not os.path.exists(ledger):
        return -1
    with open(ledger) as f:
        lines = [json.loads(x) for x in f if x.strip()]
    return max((x["batch"] for x in lines), default=-1)


def simulate_task_retries(rate: float, seed: int) -> None:
    """Make some file-group merges behave like a Spark task that failed after writing its file
    and was retried: the first attempt's file stays on storage (with its marker) and the second
    attempt's stat is the one committed. Marker reconciliation must delete the first. The
    second attempt marks its own file, as a retried Spark task does (the driver path lists the
    markers of the first attempts' names before any file is written)."""
    import dataclasses
    import random

    from multiwriter.format import layout
    from multiwriter.write import log_append

    rng = random.Random(seed)
    real = log_append.merge_file_group  # what the write path's one dispatch (write_group) calls
    real_log = log_append.append_log

    def merge(storage, ctx, task, rows, token, **kw):
        if rng.random() < rate:
            real(storage, ctx, task, rows, layout.write_token(task.task_index, 0, 0), **{**kw, "on_footer": None})
            token, ctx = layout.write_token(task.task_index, 0, 1), dataclasses.replace(ctx, markers_listed=False)
        return real(storage, ctx, task, rows, token, **kw)

    def append(storage, ctx, task, rows, token, **kw):  # Merge-on-Read: a retried log append
        if rng.random() < rate:
            real_log(storage, ctx, task, rows, layout.write_token(task.task_index, 0, 0), **kw)
            token, ctx = layout.write_token(task.task_index, 0, 1), dataclasses.replace(ctx, markers_listed=False)
        return real_log(storage, ctx, task, rows, token, **kw)

    log_append.merge_file_group = merge
    log_append.append_log = append


def make_lock(spec: dict):
    """The round's lock provider: ZooKeeper (``zk``, ``base``) or the storage lock (its lease)."""
    import multiwriter as mw

    if spec["kind"] == "storage":
        return mw.StorageLock(validity_s=spec["validity_s"], renew_interval_s=spec["renew_interval_s"],
                              acquire_timeout_s=spec["acquire_timeout_s"])
    return mw.ZooKeeperLock(connect=spec["zk"], base_path=spec["base"], session_timeout_s=4.0, connection_timeout_s=5.0,
                            acquire_timeout_s=20.0)


def main() -> None:
    import multiwriter as mw
    from multiwriter.errors import CommitStateUnknownError, MultiWriterError
    from multiwriter.faults import InjectedFault

    a = json.loads(sys.argv[1])
    cfg = mw.WriterConfig(
        writer_id=a["writer"], lock=make_lock(a["lock"]),
        heartbeat_interval_s=1.0, heartbeat_tolerable_misses=2, max_conflict_retries=20, retry_backoff_s=0.05,
        lock_timeout_s=20.0, executor="driver",
        # hot-b and own-d leave small-file handling off: their inserts keep making small groups
        # for clustering to race, while hot-a and own-c put new keys into the groups they rewrite
        small_file_limit_bytes=0 if a["writer"] in ("hot-b", "own-d") else 100 << 20,
    )
    simulate_task_retries(a.get("task_retry_rate", 0.2), hash(a["writer"]) ^ os.getpid())
    b = acked(a["ledger"]) + 1
    while b < a["batches"]:
        try:
            r = mw.write(batch_rows(a["writer"], a["mode"], b), a["path"], cfg, batch_id=b)
        except CommitStateUnknownError:
            raise
        except (MultiWriterError, OSError, InjectedFault) as e:  # not acknowledged: retry the same batch id
            print(f"{a['writer']} batch {b}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
            time.sleep(0.3)
            continue
        with open(a["ledger"], "a") as f:
            f.write(json.dumps({"batch": b, "instant": r.instant.requested_time if r.instant else None,
                                "skipped": r.skipped}) + "\n")
            f.flush()
            os.fsync(f.fileno())
        b += 1


if __name__ == "__main__":
    main()
