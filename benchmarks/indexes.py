"""Hudi's indexes in the metadata table (issue 59).

``stats_cost`` (goal 3): what keeping the ``column_stats`` and ``partition_stats`` partitions
adds to an upsert: the same batches into a table whose metadata table keeps only ``files`` and
one that keeps the column stats too, batch by batch in turn (who goes first rotates), rows
checksummed at the end; both key shapes (string keys spread over every day, int64 keys with new
rows in the newest days), on local disk and on moto's S3 server with a latency added to each
request (:class:`testbed.moto_s3.CountingLatency`, which also counts the requests).
"""
from __future__ import annotations

import statistics
import time
from pathlib import Path


from . import data, goals, s3_cost
from .peers import Multiwriter, reset

FILES_ONLY, WITH_STATS = "files only", "with column stats"
TARGET = goals.INDEX_STATS_TARGET


def _local_pair(work: Path, schema) -> dict:
    return {FILES_ONLY: Multiwriter(work / "files", "driver", schema=schema, metadata=True),
            WITH_STATS: Multiwriter(work / "stats", "driver", schema=schema, metadata=True, column_stats=True)}


def _checked(systems: dict, want) -> None:
    for name, peer in systems.items():
        got = goals.checksum(peer.read())
        if got != want:
            raise AssertionError(f"{name}: rows/checksum {got} != expected {want}")


def _local(work: Path, schema, init, batches: list) -> dict:
    reset(work)
    systems = _local_pair(work, schema)
    for peer in systems.values():
        peer.load(init)
    times = goals._interleave(systems, batches, "upsert")
    _checked(systems, goals.expected_upserts(init, batches))
    out = {name: {"median_s": statistics.median(v), "all_s": v} for name, v in times.items()}
    out["ratio"] = out[WITH_STATS]["median_s"] / out[FILES_ONLY]["median_s"]
    return out


def _s3(s3, counter, b: s3_cost.Batches) -> dict:
    base = s3.bucket()
    systems = {FILES_ONLY: s3_cost.Multiwriter(f"{base}/files", b.schema),
               WITH_STATS: s3_cost.Multiwriter(f"{base}/stats", b.schema, column_stats=True)}
    for peer in systems.values():
        peer.load(b.initial)
    runs: dict = {name: [] for name in systems}
    names = list(systems)
    for i, batch in enumerate(b.upserts):
        for name in names[i % 2:] + names[:i % 2]:
            counter.take()
            t0 = time.perf_counter()
            systems[name].upsert(batch)
            runs[name].append({"s": time.perf_counter() - t0, "requests": sum(counter.take().values())})
    want = goals.expected_upserts(b.initial, b.upserts)
    for name, peer in systems.items():
        got = goals.checksum(peer.read())
        if got != want:
            raise AssertionError(f"{name} on S3: rows/checksum {got} != expected {want}")
    out = {name: {"median_s": statistics.median(r["s"] for r in v),
                  "requests": statistics.median(r["requests"] for r in v)} for name, v in runs.items()}
    out["ratio"] = out[WITH_STATS]["median_s"] / out[FILES_ONLY]["median_s"]
    return out


def stats_cost(size: dict, work: Path, spark=None) -> dict:
    from testbed.moto_s3 import CountingLatency, MotoS3

    n, rows, k = size["stats_rows"], size["stats_batch"], size["stats_batches"]
    out: dict = {"rows": n, "batch_rows": rows, "batches": k, "local": {}, "s3": {},
                 "latency_ms": size["s3_cost_latency_ms"], "s3_rows": size["s3_cost_rows"]}
    out["local"]["string keys"] = _local(work, data.SCHEMA, data.initial(n),
                                         [data.upsert_batch(n, rows, i) for i in range(k)])
    out["local"]["integer keys"] = _local(work, data.EVENT_SCHEMA, data.event_initial(n),
                                          [data.event_upsert_batch(n, rows, i) for i in range(k)])
    holder: dict = {}

    def wrap(app):
        holder["c"] = CountingLatency(app, size["s3_cost_latency_ms"] / 1000)
        return holder["c"]

    with MotoS3(prefix="bench", wrap=wrap) as s3:
        for keys in ("string keys", "integer keys"):
            b = s3_cost.Batches(keys == "integer keys", size["s3_cost_rows"], size["s3_cost_partitions"],
                                size["s3_cost_batch"], size["stats_s3_batches"])
            out["s3"][keys] = _s3(s3, holder["c"], b)
    return out


def render_stats_cost(r: dict) -> list[str]:
    out = [f"## Column and partition stats in the metadata table: what keeping them adds to an upsert (issue 59 "
           f"goal 3: <= {TARGET:.2f}x the files partition alone)", "",
           f"Local disk: {r['rows']:,} rows, {r['batches']} upserts of {r['batch_rows']:,} rows. S3 (moto, "
           f"{r['latency_ms']} ms per request): {r['s3_rows']:,} rows, upserts of half updates. Median seconds per "
           "upsert; rows checksummed in both tables.", "",
           "| store | keys | files only s | with column stats s | ratio | requests (files only / with stats) | met |",
           "| --- | --- | ---: | ---: | ---: | --- | :---: |"]
    for store in ("local", "s3"):
        for keys, d in r[store].items():
            req = (f"{d[FILES_ONLY]['requests']:.0f} / {d[WITH_STATS]['requests']:.0f}"
                   if "requests" in d[FILES_ONLY] else "")
            out.append(f"| {store} | {keys} | {d[FILES_ONLY]['median_s']:.3f} | {d[WITH_STATS]['median_s']:.3f} | "
                       f"{d['ratio']:.2f} | {req} | {'yes' if d['ratio'] <= TARGET else 'no'} |")
    return out + [""]

