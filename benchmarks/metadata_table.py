"""Hudi's metadata table (issue 41).

``cost`` (goal 1): what keeping its ``files`` partition costs a write: the same upserts into a
table without it and one that keeps it, fed batch by batch in turn (who goes first rotates), rows
checksummed at the end. Two shapes on Copy-on-Write (string keys spread over every day; int64
keys with new rows in the newest days) and a 2,000-row Merge-on-Read upsert into a bucket-indexed
table.

``listing`` (goal 2): S3 requests of a snapshot read and of a 2,000-row upsert (into 20 of the
partitions) on tables of 100 and 1,000 partitions, with and without the metadata table, on moto's
S3 server (127.0.0.1). Requests are counted by the server itself (a WSGI wrapper around moto's
application): every request pyarrow's S3 client sends, by kind (LIST = ListObjects(V2) on the
bucket, HEAD, GET, PUT (objects, upload parts and copies), MULTIPART (a multipart upload's start
and completion), DELETE, other).

``long_run`` (goal 3): micro-batches into a table that keeps the metadata table, the cleaner every
N batches; per batch the metadata table's file count and the time of a cold load of its files
partition (no decoded file kept), compared between the last 50 batches and batches 20-70.
"""
from __future__ import annotations

import statistics
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa

import multiwriter as mw
from multiwriter.storage import Storage
from multiwriter.table import metadata_files as mf
from testbed.moto_s3 import request_kind

from . import data, goals
from .peers import Multiwriter, reset


def _pair(work: Path, schema, **table) -> dict:
    return {"without": Multiwriter(work / "plain", "driver", schema=schema, **table),
            "with metadata table": Multiwriter(work / "mdt", "driver", schema=schema, metadata=True, **table)}


def _run(systems: dict, init, batches: list) -> dict:
    for peer in systems.values():
        peer.load(init)
    times = goals._interleave(systems, batches, "upsert")
    want = goals.expected_upserts(init, batches)
    for name, peer in systems.items():
        got = goals.checksum(peer.read())
        if got != want:
            raise AssertionError(f"{name}: rows/checksum {got} != expected {want}")
    out = {name: {"median_s": statistics.median(v), "all_s": v} for name, v in times.items()}
    out["ratio"] = out["with metadata table"]["median_s"] / out["without"]["median_s"]
    return out


def cost(size: dict, work: Path, spark=None) -> dict:
    n, rows, k = size["mdt_cow_rows"], size["mdt_cow_batch"], size["mdt_batches"]
    out = {}
    reset(work)
    out["Copy-on-Write, string keys spread"] = _run(_pair(work, data.SCHEMA), data.initial(n),
                                                    [data.upsert_batch(n, rows, b) for b in range(k)])
    reset(work)
    out["Copy-on-Write, int64 keys recent"] = _run(_pair(work, data.EVENT_SCHEMA), data.event_initial(n),
                                                   [data.event_upsert_batch(n, rows, b) for b in range(k)])
    m, mrows, mk = size["mdt_mor_rows"], size["mdt_mor_batch"], size["mdt_mor_batches"]
    reset(work)
    mor = {"table_type": "MERGE_ON_READ", "num_buckets": 8}
    out["Merge-on-Read, 2,000-row upserts, string keys"] = _run(
        _pair(work, data.SCHEMA, **mor), data.initial(m), [data.upsert_batch(m, mrows, b) for b in range(mk)])
    return out


def render(r: dict) -> list[str]:
    out = ["## Hudi's metadata table: what keeping its files partition costs a write (goal: <= 1.15x)", "",
           "| workload | without s | with s | ratio |", "| --- | ---: | ---: | ---: |"]
    for name, d in r.items():
        out.append(f"| {name} | {d['without']['median_s']:.3f} | {d['with metadata table']['median_s']:.3f} | "
                   f"{d['ratio']:.2f} |")
    return out + [""]


# -- goal 2: S3 requests against the number of partitions ---------------------------------------

KINDS = ("LIST", "HEAD", "GET", "PUT", "MULTIPART", "DELETE", "other")
#: partitions an upsert touches, whatever the table's number of partitions
TOUCHED = 20


class RequestCounter:
    """A WSGI wrapper counting every request the S3 server answers, by kind."""

    def __init__(self, app) -> None:
        self.app = app
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def __call__(self, environ, start_response):
        kind = request_kind(environ.get("REQUEST_METHOD", ""), environ.get("PATH_INFO", ""),
                            environ.get("QUERY_STRING", ""))
        with self._lock:
            self.counts[kind] += 1
        return self.app(environ, start_response)

    def take(self) -> dict[str, int]:
        with self._lock:
            out = {k: self.counts.get(k, 0) for k in KINDS}
            self.counts.clear()
        return out


class CountingS3:
    """moto's S3 server on 127.0.0.1 with a :class:`RequestCounter` (:class:`testbed.moto_s3.MotoS3`,
    which sets the AWS variables meanwhile)."""

    def __enter__(self) -> CountingS3:
        from testbed.moto_s3 import MotoS3

        self.s3 = MotoS3(prefix="bench", wrap=RequestCounter).__enter__()
        self.counter, self.client = self.s3.app, self.s3.client
        return self

    def bucket(self) -> str:
        return self.s3.bucket()

    def __exit__(self, *exc) -> None:
        self.s3.__exit__(*exc)


def _days(n: int) -> np.ndarray:
    return np.array([str(d) for d in np.datetime64("2020-01-01") + np.arange(n)])


def partitioned_initial(partitions: int, per: int) -> pa.Table:
    ids = np.arange(partitions * per)
    return data.rows(ids, _days(partitions)[ids % partitions], 0, seed=1)


def partitioned_upsert(partitions: int, per: int, rows: int, b: int) -> pa.Table:
    """``rows`` rows into the newest :data:`TOUCHED` partitions (all of them in a smaller table):
    10 % update keys there, the rest are new keys."""
    rng = np.random.default_rng(1000 + b)
    days = _days(partitions)
    touched = min(TOUCHED, partitions)
    newest = np.arange(partitions - touched, partitions)
    n_upd = rows // 10
    upd = rng.choice(per, n_upd) * partitions + rng.choice(newest, n_upd)
    upd = np.unique(upd)
    new = partitions * per + b * rows + np.arange(rows - len(upd))
    ids = np.concatenate([upd, new])
    dates = np.where(ids < partitions * per, days[ids % partitions], days[newest[ids % touched]])
    return data.rows(ids, dates, ts=b + 1, seed=2000 + b)


def _measure(s3: CountingS3, fn) -> tuple[dict[str, int], float, object]:
    s3.counter.take()
    t0 = time.perf_counter()
    got = fn()
    return s3.counter.take(), time.perf_counter() - t0, got


def _one_table(s3: CountingS3, partitions: int, metadata: bool, size: dict) -> dict:
    uri = s3.bucket() + "/t"
    per, rows, reps = size["mdt_list_rows_per_partition"], size["mdt_list_upsert_rows"], size["mdt_list_reps"]
    mw.Table.create(uri, name="bench", schema=data.SCHEMA, record_key="id", partition_by=["date"],
                    ordering_field="ts", metadata=metadata)
    cfg = mw.WriterConfig(writer_id="bench", executor="driver", lock=mw.InProcessLock())
    init = partitioned_initial(partitions, per)
    mw.write(init, uri, cfg)
    batches = [partitioned_upsert(partitions, per, rows, b) for b in range(reps)]
    upserts, reads = [], []
    for b in batches:
        counts, secs, _ = _measure(s3, lambda b=b: mw.write(b, uri, cfg))
        upserts.append({"requests": counts, "s": secs})
        mf.forget_decoded()  # a reader in a new process decodes the files partition afresh
        counts, secs, got = _measure(s3, lambda: mw.Table.open(uri).read(columns=["id", "ts", "amount"]))
        reads.append({"requests": counts, "s": secs})
    want = goals.expected_upserts(init, batches)
    if goals.checksum(got) != want:
        raise AssertionError(f"{partitions} partitions, metadata={metadata}: {goals.checksum(got)} != {want}")
    return {"upsert": _median(upserts), "read": _median(reads)}


def _median(runs: list[dict]) -> dict:
    return {"s": statistics.median(r["s"] for r in runs),
            "requests": {k: statistics.median(r["requests"][k] for r in runs) for k in KINDS},
            "all": runs}


def listing(size: dict, work: Path, spark=None) -> dict:
    out: dict = {"touched_partitions": TOUCHED, "upsert_rows": size["mdt_list_upsert_rows"]}
    with CountingS3() as s3:
        for partitions in size["mdt_list_partitions"]:
            for metadata in (False, True):
                label = f"{partitions} partitions, {'with' if metadata else 'without'} metadata table"
                out[label] = _one_table(s3, partitions, metadata, size)
    return out


def render_listing(r: dict) -> list[str]:
    out = [f"## Hudi's metadata table: S3 requests against partitions (goal: list requests flat with it; "
           f"moto on 127.0.0.1, {r['upsert_rows']:,}-row upserts into {r['touched_partitions']} partitions, "
           "median of the runs)", "",
           "| table | operation | LIST | HEAD | GET | PUT | MULTIPART | DELETE | s |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for label, d in r.items():
        if not isinstance(d, dict):
            continue
        for op in ("read", "upsert"):
            q = d[op]["requests"]
            out.append(f"| {label} | {'snapshot read' if op == 'read' else 'upsert'} | {q['LIST']:.0f} | "
                       f"{q['HEAD']:.0f} | {q['GET']:.0f} | {q['PUT']:.0f} | {q['MULTIPART']:.0f} | {q['DELETE']:.0f} | "
                       f"{d[op]['s']:.2f} |")
    return out + [""]


# -- goal 3: the metadata table over a long run --------------------------------------------------


def _mdt_files(path: str) -> tuple[int, int, int]:
    """(files of the files partition, their bytes, instant files on the metadata timeline)."""
    root = Path(path) / mf.MDT_DIR
    files = [p for p in (root / mf.PARTITION).iterdir() if p.is_file()]
    timeline = sum(1 for p in (root / ".hoodie" / "timeline").iterdir() if p.is_file())
    return len(files), sum(p.stat().st_size for p in files), timeline


def _cold_load_s(storage: Storage, table: mw.Table, reps: int = 3) -> tuple[float, int]:
    """The best of ``reps`` cold loads of the files partition (the machine's noise only adds),
    and the number of files it lists."""
    best, listed = float("inf"), 0
    for _ in range(reps):
        mf.forget_decoded()
        t0 = time.perf_counter()
        listing = mf.MetadataTable(storage, table.config).listing()
        best = min(best, time.perf_counter() - t0)
        listed = sum(len(v) for v in listing.values())
    return best, listed


def long_run(size: dict, work: Path, spark=None) -> dict:
    n, every, rows, parts = (size["mdt_long_run_batches"], size["mdt_long_run_clean_every"], size["mdt_long_run_rows"],
                             size["mdt_long_run_partitions"])
    reset(work)
    path = str(work / "mdt")
    mw.Table.create(path, name="bench", schema=data.SCHEMA, record_key="id", partition_by=["date"], ordering_field="ts",
                    metadata=True)
    lock = mw.InProcessLock()
    cfg = mw.WriterConfig(writer_id="bench", executor="driver", lock=lock)
    table = mw.Table.open(path)
    storage = table.storage
    samples: list[dict] = []
    cleaner = mw.Cleaner(path, lock=lock)
    t_all = time.perf_counter()
    try:
        for b in range(n):
            ids = 70_000_000 + b * rows + np.arange(rows)
            t0 = time.perf_counter()
            mw.write(data.rows(ids, np.array(data.DAYS[:parts])[ids % parts], ts=1, seed=400 + b), path, cfg)
            write_s = time.perf_counter() - t0
            if (b + 1) % every == 0:
                report = cleaner.run_once()
                if report.errors:
                    raise AssertionError(f"cleaner errors: {report.errors}")
            files, size, timeline = _mdt_files(path)
            load_s, listed = _cold_load_s(storage, table)
            samples.append({"batch": b + 1, "write_s": write_s, "mdt_files": files, "mdt_bytes": size,
                            "mdt_timeline": timeline, "mdt_load_s": load_s, "mdt_listed": listed,
                            "data_timeline": len(mw.Table.open(path).timeline().instants)})
    finally:
        cleaner.close()
    got = mw.Table.open(path).read(columns=["id"]).num_rows
    if got != n * rows:
        raise AssertionError(f"rows {got} != {n * rows}")
    out = {"batches": n, "clean_every": every, "rows": rows, "partitions": parts,
           "wall_s": time.perf_counter() - t_all, "samples": samples}
    for key in ("mdt_files", "mdt_bytes", "mdt_timeline", "mdt_load_s", "mdt_listed", "write_s", "data_timeline"):
        early = [s[key] for s in samples[19:70]]
        late = [s[key] for s in samples[-50:]]
        out[key] = {"batches_20_70": statistics.median(early), "last_50": statistics.median(late),
                    "max": max(s[key] for s in samples),
                    "ratio": statistics.median(late) / statistics.median(early) if statistics.median(early) else None}
    return out


def render_long_run(r: dict) -> list[str]:
    out = [f"## Hudi's metadata table over {r['batches']:,} micro-batches ({r['rows']}-row inserts over "
           f"{r['partitions']} partitions, the cleaner every {r['clean_every']}; goal: last 50 / batches 20-70 <= 1.3)",
           "", "| per batch | batches 20-70 (median) | last 50 (median) | max | ratio |", "| --- | ---: | ---: | ---: | ---: |"]
    names = {"mdt_files": "files of the files partition", "mdt_bytes": "their bytes",
             "mdt_timeline": "metadata timeline files", "mdt_load_s": "cold load of the files partition (best of 3), s",
             "mdt_listed": "data files it lists", "write_s": "write, s", "data_timeline": "data timeline instant files"}
    for key, name in names.items():
        d = r[key]
        ratio = f"{d['ratio']:.2f}" if d["ratio"] is not None else "-"
        fmt = ".4f" if key.endswith("_s") else ".0f"
        out.append(f"| {name} | {d['batches_20_70']:{fmt}} | {d['last_50']:{fmt}} | {d['max']:{fmt}} | {ratio} |")
    return out + [""]
