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
