"""Deterministic benchmark data: events over date partitions."""
from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa

SCHEMA = pa.schema([("id", pa.string()), ("date", pa.string()), ("ts", pa.int64()), ("user", pa.string()), ("amount", pa.float64())])
DAYS = [(dt.date(2024, 1, 1) + dt.timedelta(days=i)).isoformat() for i in range(30)]


def rows(ids: np.ndarray, dates: np.ndarray, ts: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({
        "id": pa.array([f"k{i:09d}" for i in ids]),
        "date": pa.array(dates),
        "ts": pa.array(np.full(len(ids), ts, dtype=np.int64)),
        "user": pa.array([f"u{u}" for u in rng.integers(0, 10_000, len(ids))]),
        "amount": pa.array(rng.random(len(ids)) * 100),
    }, schema=SCHEMA)


def initial(n: int) -> pa.Table:
    ids = np.arange(n)
    return rows(ids, np.array(DAYS)[ids % len(DAYS)], 0, seed=1)


def upsert_batch(n_table: int, size: int, b: int, update_share: float = 0.1) -> pa.Table:
    """``update_share`` of the rows update keys of the newest partitions, the rest are new keys."""
    rng = np.random.default_rng(100 + b)
    n_upd = int(size * update_share)
    newest = np.array([i for i in range(len(DAYS) - 3, len(DAYS))])
    upd_ids = rng.choice(n_table // len(DAYS), n_upd, replace=False) * len(DAYS) + rng.choice(newest, n_upd)
    new_ids = n_table + b * size + np.arange(size - n_upd)
    ids = np.concatenate([upd_ids, new_ids])
    dates = np.array(DAYS)[ids % len(DAYS)]
    return rows(ids, dates, ts=b + 1, seed=200 + b)


def append_batch(size: int, b: int) -> pa.Table:
    ids = 50_000_000 + b * size + np.arange(size)
    return rows(ids, np.array(DAYS)[ids % len(DAYS)], ts=1, seed=300 + b)


def wide_upsert_batch(n_table: int, size: int, b: int, update_share: float = 0.1) -> pa.Table:
    """Like :func:`upsert_batch`, but the updates hit random keys of every partition (a batch as
    large as the table has more updates than the newest partitions hold)."""
    rng = np.random.default_rng(500 + b)
    n_upd = int(size * update_share)
    upd_ids = rng.choice(n_table, n_upd, replace=False)
    ids = np.concatenate([upd_ids, n_table + b * size + np.arange(size - n_upd)])
    return rows(ids, np.array(DAYS)[ids % len(DAYS)], ts=b + 1, seed=600 + b)


# -- the event workload (issue 35): int64 auto-increment keys, new rows in the newest days ------

EVENT_SCHEMA = pa.schema([("id", pa.int64()), ("date", pa.string()), ("ts", pa.int64()), ("user", pa.string()),
                          ("amount", pa.float64())])
#: the newest days, where an event batch's new keys and updates land
EVENT_RECENT_DAYS = 5


def event_rows(ids: np.ndarray, dates: np.ndarray, ts: int, seed: int) -> pa.Table:
    """Like :func:`rows`, with the record key as the int64 id itself (no string form)."""
    rng = np.random.default_rng(seed)
    return pa.table({
        "id": pa.array(ids.astype(np.int64)),
        "date": pa.array(dates),
        "ts": pa.array(np.full(len(ids), ts, dtype=np.int64)),
        "user": pa.array([f"u{u}" for u in rng.integers(0, 10_000, len(ids))]),
        "amount": pa.array(rng.random(len(ids)) * 100),
    }, schema=EVENT_SCHEMA)


def event_block(n_table: int) -> int:
    """Ids per day of the initial table: day d holds ids [d * block, (d + 1) * block)."""
    return max(1, -(-n_table // len(DAYS)))


def event_days(ids: np.ndarray, n_table: int) -> np.ndarray:
    """Each id's day, a function of the id alone (so updates find their row's partition): an id
    of the initial table lies in its day's block; a later id (an event arriving after the table
    was built) lies in one of the newest days, picked by a hash of the id, so a batch's new
    ids are interleaved over those days as auto-increment ids of late events are."""
    ids = ids.astype(np.int64)
    day = np.minimum(ids // event_block(n_table), len(DAYS) - 1)
    spread = ((ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(40)) % np.uint64(EVENT_RECENT_DAYS)
    late = len(DAYS) - EVENT_RECENT_DAYS + spread.astype(np.int64)
    return np.array(DAYS)[np.where(ids >= n_table, late, day)]


def event_initial(n: int) -> pa.Table:
    """``n`` rows over the 30 days, ids in contiguous blocks per day."""
    ids = np.arange(n, dtype=np.int64)
    return event_rows(ids, event_days(ids, n), 0, seed=11)


def event_new_ids(n_table: int, size: int, b: int, update_share: float = 0.1) -> np.ndarray:
    """Batch ``b``'s new ids: they continue where the table's and earlier batches' ids end."""
    n_new = size - int(size * update_share)
    return n_table + b * n_new + np.arange(n_new, dtype=np.int64)


def event_upsert_batch(n_table: int, size: int, b: int, update_share: float = 0.1) -> pa.Table:
    """``update_share`` of the rows update existing keys of the newest days (the initial blocks
    of those days and earlier batches' new ids, all of which live there); the rest are new
    keys landing in those days."""
    rng = np.random.default_rng(700 + b)
    n_upd = int(size * update_share)
    first = (len(DAYS) - EVENT_RECENT_DAYS) * event_block(n_table)
    new = event_new_ids(n_table, size, b, update_share)
    upd = first + rng.choice(int(new[0]) - first, n_upd, replace=False).astype(np.int64)
    ids = np.concatenate([upd, new])
    return event_rows(ids, event_days(ids, n_table), ts=b + 1, seed=800 + b)


def event_stream_batch(b: int, size: int, first_id: int = 70_000_000) -> pa.Table:
    """Micro-batch ``b`` of a long-lived stream into an empty table: ``size`` new increasing
    ids from ``first_id``, interleaved over the newest days."""
    ids = first_id + b * size + np.arange(size, dtype=np.int64)
    return event_rows(ids, event_days(ids, 0), ts=1, seed=900 + b)
