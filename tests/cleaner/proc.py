"""Child processes for the cleaner tests: a writer or a cleaner that a fault point may kill.

``python -m tests.cleaner.proc write '<json>'`` writes ``batches`` upserts, one per line of
output; ``python -m tests.cleaner.proc clean '<json>'`` runs one cleaner pass. Faults come from
``MULTIWRITER_FAULTS`` (e.g. ``after-data-files=kill@2``: SIGKILL during the second batch).
"""

from __future__ import annotations

import json
import os
import sys

import pyarrow as pa

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def _lock(a: dict):
    import multiwriter as mw

    return mw.ZooKeeperLock(connect=a["zk"], base_path=a["base"])


def _batch(ids: list, date: str, ts: int, value: float) -> pa.Table:
    return pa.table(
        {
            "id": [str(i) for i in ids],
            "date": [date] * len(ids),
            "ts": pa.array([ts] * len(ids), pa.int64()),
            "value": [float(value)] * len(ids),
        }
    )


def write(a: dict) -> None:
    import multiwriter as mw

    cfg = mw.WriterConfig(
        writer_id=a["writer"],
        lock=_lock(a),
        executor="driver",
        heartbeat_interval_s=a.get("hb", 1.0),
        heartbeat_tolerable_misses=a.get("misses", 1),
    )
    for n in range(a.get("batches", 1)):
        ids = a["ids"]
        r = mw.write(_batch(ids, a.get("date", "2024-01-01"), n + 1, float(n + 1)), a["path"], cfg)
        print(json.dumps({"instant": r.instant.requested_time if r.instant else None}), flush=True)


def clean(a: dict) -> None:
    from multiwriter.cleaner.job import Cleaner

    c = Cleaner(
        a["path"], lock=_lock(a), heartbeat_interval_s=a.get("hb", 1.0), heartbeat_tolerable_misses=a.get("misses", 1)
    )
    try:
        r = c.run_once()
        print(json.dumps({"rolled_back": r.rolled_back}), flush=True)
    finally:
        c.close()


if __name__ == "__main__":
    globals()[sys.argv[1]](json.loads(sys.argv[2]))
