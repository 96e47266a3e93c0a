"""What Hudi's metadata table costs a write (issue 41, goal 1): the same upserts into a table
without it and one that keeps its ``files`` partition, fed batch by batch in turn (who goes
first rotates), rows checksummed at the end. Two shapes on Copy-on-Write (string keys spread
over every day; int64 keys with new rows in the newest days) and a 2,000-row Merge-on-Read
upsert into a bucket-indexed table."""
from __future__ import annotations

import statistics
from pathlib import Path

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
