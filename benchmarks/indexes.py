"""Hudi's indexes in the metadata table (issue 59).

``stats_cost`` (goal 3): what keeping the ``column_stats`` and ``partition_stats`` partitions
adds to an upsert: the same batches into a table whose metadata table keeps only ``files`` and
one that keeps the column stats too, batch by batch in turn (who goes first rotates), rows
checksummed at the end; both key shapes (string keys spread over every day, int64 keys with new
rows in the newest days), on local disk and on moto's S3 server with a latency added to each
request (:class:`testbed.moto_s3.CountingLatency`, which also counts the requests), in a process
of its own as the S3 cost section runs it.

``filtered_read`` (goal 2): a read filtered on a non-partition column only a few files can hold:
``skip_batches`` appends of ``skip_batch_rows`` new keys over ``skip_partitions`` days, each batch
with its own ``ts``, into a table keeping column stats and into deltalake; then the rows of one
batch (``ts = k``) and of two (``k <= ts < k + 2``), against a full scan. Files read: ours, the
file slices the stats keep (:meth:`multiwriter.Table.prune`); deltalake's, the files whose add
actions' stats overlap the filter (what its scan opens). Rows checked in both.
"""
from __future__ import annotations

import statistics
import time
from pathlib import Path

import numpy as np
import pyarrow.compute as pc


import multiwriter as mw

from . import data, goals, s3_cost
from .peers import Multiwriter, reset

FILES_ONLY, WITH_STATS = "files only", "with column stats"
#: the record index with the column and partition stats: every index the metadata table keeps
WITH_ALL = "with every index"
TARGET = goals.INDEX_STATS_TARGET
_KEPT = {WITH_STATS: {"column_stats": True}, WITH_ALL: {"column_stats": True, "record_index": True}}


def _local_pair(work: Path, schema, kept: str = WITH_STATS) -> dict:
    return {FILES_ONLY: Multiwriter(work / "files", "driver", schema=schema, metadata=True),
            kept: Multiwriter(work / "stats", "driver", schema=schema, metadata=True, **_KEPT[kept])}


def _checked(systems: dict, want) -> None:
    for name, peer in systems.items():
        got = goals.checksum(peer.read())
        if got != want:
            raise AssertionError(f"{name}: rows/checksum {got} != expected {want}")


def _local(work: Path, schema, init, batches: list, kept: str = WITH_STATS) -> dict:
    reset(work)
    systems = _local_pair(work, schema, kept)
    for peer in systems.values():
        peer.load(init)
    times = goals._interleave(systems, batches, "upsert")
    _checked(systems, goals.expected_upserts(init, batches))
    out = {name: {"median_s": statistics.median(v), "all_s": v} for name, v in times.items()}
    out["ratio"] = out[kept]["median_s"] / out[FILES_ONLY]["median_s"]
    return out


def _s3(s3, counter, b: s3_cost.Batches, kept: str = WITH_STATS) -> dict:
    base = s3.bucket()
    systems = {FILES_ONLY: s3_cost.Multiwriter(f"{base}/files", b.schema),
               kept: s3_cost.Multiwriter(f"{base}/stats", b.schema, **_KEPT[kept])}
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
    out["ratio"] = out[kept]["median_s"] / out[FILES_ONLY]["median_s"]
    return out


def stats_cost(size: dict, work: Path, spark=None, kept: str = WITH_STATS) -> dict:
    from testbed.moto_s3 import MotoS3

    n, rows, k = size["stats_rows"], size["stats_batch"], size["stats_batches"]
    out: dict = {"rows": n, "batch_rows": rows, "batches": k, "local": {}, "s3": {},
                 "latency_ms": size["s3_cost_latency_ms"], "s3_rows": size["s3_cost_rows"]}
    out["local"]["string keys"] = _local(work, data.SCHEMA, data.initial(n),
                                         [data.upsert_batch(n, rows, i) for i in range(k)], kept)
    out["local"]["integer keys"] = _local(work, data.EVENT_SCHEMA, data.event_initial(n),
                                          [data.event_upsert_batch(n, rows, i) for i in range(k)], kept)
    # moto in a process of its own, as the S3 cost section runs it (:mod:`.s3_cost`): in this
    # one its work would take turns at the interpreter lock with the writer's, a cost per
    # request no real store puts on its clients
    with MotoS3(prefix="bench", counted=(size["s3_cost_latency_ms"] / 1000, False)) as s3:
        for keys in ("string keys", "integer keys"):
            b = s3_cost.Batches(keys == "integer keys", size["s3_cost_rows"], size["s3_cost_partitions"],
                                size["s3_cost_batch"], size["stats_s3_batches"])
            out["s3"][keys] = _s3(s3, s3.counter, b, kept)
    return out


def _cost_rows(r: dict, kept: str) -> list[str]:
    """The table of what keeping ``kept`` adds to an upsert, per store and key shape."""
    out = [f"| store | keys | files only s | {kept} s | ratio | requests (files only / {kept}) | met |",
           "| --- | --- | ---: | ---: | ---: | --- | :---: |"]
    for store in ("local", "s3"):
        for keys, d in r[store].items():
            req = f"{d[FILES_ONLY]['requests']:.0f} / {d[kept]['requests']:.0f}" if "requests" in d[FILES_ONLY] else ""
            out.append(f"| {store} | {keys} | {d[FILES_ONLY]['median_s']:.3f} | {d[kept]['median_s']:.3f} | "
                       f"{d['ratio']:.2f} | {req} | {'yes' if d['ratio'] <= TARGET else 'no'} |")
    return out


def _cost_setup(r: dict) -> str:
    return (f"Local disk: {r['rows']:,} rows, {r['batches']} upserts of {r['batch_rows']:,} rows. S3 (moto, "
            f"{r['latency_ms']} ms per request): {r['s3_rows']:,} rows, upserts of half updates. Median seconds per "
            "upsert; rows checksummed in both tables.")


def render_stats_cost(r: dict) -> list[str]:
    return [f"## Column and partition stats in the metadata table: what keeping them adds to an upsert (issue 59 "
            f"goal 3: <= {TARGET:.2f}x the files partition alone)", "", _cost_setup(r), "",
            *_cost_rows(r, WITH_STATS), ""]


GOAL2_TARGET = 0.05
COLUMNS = ["id", "ts", "amount"]


def _built(work: Path, int_keys: bool, size: dict):
    from .peers import DeltaLake

    reset(work)
    schema, make = (data.EVENT_SCHEMA, data.event_rows) if int_keys else (data.SCHEMA, data.rows)
    ours = Multiwriter(work / "mw", "driver", schema=schema, operation="insert", metadata=True, column_stats=True)
    delta = DeltaLake(work)
    days = np.array(data.DAYS[:size["skip_partitions"]])
    n = size["skip_batch_rows"]
    for b in range(size["skip_batches"]):
        ids = b * n + np.arange(n)
        batch = make(ids, days[ids % len(days)], b + 1, 500 + b)
        ours.load(batch)
        delta.load(batch)
    return ours, delta


def _delta_files(path: str, lo: int, hi: int) -> tuple[int, int]:
    """(files whose ts range meets [lo, hi), all files) of deltalake's table, by its add actions."""
    from deltalake import DeltaTable

    adds = DeltaTable(path).get_add_actions(flatten=True)
    mins, maxs = adds.column("min.ts").to_pylist(), adds.column("max.ts").to_pylist()
    hit = sum(1 for a, b in zip(mins, maxs, strict=True) if a is None or b is None or (a < hi and b >= lo))
    return hit, adds.num_rows


def _ours_files(path: str, filters) -> tuple[int, int]:
    from multiwriter.table import skipping

    t = mw.Table.open(path)
    tl = t.timeline()
    snap = t.snapshot(timeline=tl)
    files = snap.files()
    pruned = t.prune(files, skipping.from_dnf(filters), t.read_schema(tl, snap), timeline=tl, latest=True)
    return len(pruned.kept), len(files)


def _filtered(ours, delta, filters, reps: int) -> dict:
    from deltalake import DeltaTable

    runs = {
        "multiwriter full scan": lambda: mw.Table.open(ours.path).read(columns=COLUMNS),
        "multiwriter filtered": lambda: mw.Table.open(ours.path).read(columns=COLUMNS, filters=filters),
        "deltalake full scan": lambda: DeltaTable(delta.path).to_pyarrow_table(columns=COLUMNS),
        "deltalake filtered": lambda: DeltaTable(delta.path).to_pyarrow_table(columns=COLUMNS, filters=filters),
    }
    times: dict = {k: [] for k in runs}
    got: dict = {}
    names = list(runs)
    for r in range(reps):
        for name in names[r % len(names):] + names[:r % len(names)]:
            t0 = time.perf_counter()
            got[name] = runs[name]()
            times[name].append(time.perf_counter() - t0)
    lo, hi = filters[0][2], (filters[1][2] if len(filters) > 1 else filters[0][2] + 1)
    want = got["deltalake full scan"].filter(pc.and_(pc.greater_equal(got["deltalake full scan"]["ts"], lo),
                                                     pc.less(got["deltalake full scan"]["ts"], hi)))
    for name in ("multiwriter filtered", "deltalake filtered"):
        if goals.checksum(got[name]) != goals.checksum(want):
            raise AssertionError(f"{name}: {goals.checksum(got[name])} != expected {goals.checksum(want)}")
    if goals.checksum(got["multiwriter full scan"]) != goals.checksum(got["deltalake full scan"]):
        raise AssertionError("the full scans differ")
    ours_read, ours_all = _ours_files(ours.path, filters)
    delta_read, delta_all = _delta_files(delta.path, lo, hi)
    return {"rows": want.num_rows, **{k: statistics.median(v) for k, v in times.items()},
            "files read": ours_read, "files": ours_all, "deltalake files read": delta_read,
            "deltalake files": delta_all, "share read": ours_read / ours_all}


def filtered_read(size: dict, work: Path, spark=None) -> dict:
    out: dict = {"batches": size["skip_batches"], "batch_rows": size["skip_batch_rows"],
                 "partitions": size["skip_partitions"], "keys": {}}
    k = size["skip_batches"] // 2
    for keys in ("string keys", "integer keys"):
        ours, delta = _built(work, keys == "integer keys", size)
        out["keys"][keys] = {
            f"ts = {k}": _filtered(ours, delta, [("ts", "=", k)], size["skip_reps"]),
            f"{k} <= ts < {k + 2}": _filtered(ours, delta, [("ts", ">=", k), ("ts", "<", k + 2)], size["skip_reps"]),
        }
    return out


def render_filtered_read(r: dict) -> list[str]:
    out = [f"## A read filtered on a non-partition column (issue 59 goal 2: files read <= {GOAL2_TARGET:.0%} of the "
           "table's)", "",
           f"{r['batches']} appends of {r['batch_rows']:,} new keys over {r['partitions']} days, each batch its own "
           "`ts`; the table keeps column stats. Median seconds; rows checked against the full scan.", "",
           "| keys | filter | rows | files read (ours / all) | share | s filtered | s full scan | deltalake files "
           "read / all | deltalake s filtered | deltalake s full scan | met |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | :---: |"]
    for keys, cases in r["keys"].items():
        for name, d in cases.items():
            out.append(f"| {keys} | `{name}` | {d['rows']:,} | {d['files read']} / {d['files']} | "
                       f"{d['share read']:.1%} | {d['multiwriter filtered']:.3f} | {d['multiwriter full scan']:.3f} | "
                       f"{d['deltalake files read']} / {d['deltalake files']} | {d['deltalake filtered']:.3f} | "
                       f"{d['deltalake full scan']:.3f} | {'yes' if d['share read'] <= GOAL2_TARGET else 'no'} |")
    return out + [""]


# -- the record index (goals 1 and 3) -------------------------------------------------------------
RI_SCALE_TARGET, RI_DELTA_TARGET = goals.RECORD_INDEX_SCALE_TARGET, goals.RECORD_INDEX_DELTA_TARGET
RI_TABLE, BLOOM_TABLE, DELTA = "record index", "bloom index", "deltalake merge"


def record_index(size: dict, work: Path, spark=None) -> dict:
    """Goal 3: what keeping every index (record index, column and partition stats) adds to an
    upsert, as :func:`stats_cost` measures it. Goal 1: a Copy-on-Write upsert of
    ``ri_batch`` random existing keys into tables of each size in ``ri_table_rows`` (8 date
    partitions), with the record index as the writer's index, beside the same table with the
    bloom index and deltalake's merge of the same batches, interleaved; rows checked in all."""
    out: dict = {"cost": stats_cost(size, work, spark, kept=WITH_ALL), "scaling": _ri_scaling(size, work)}
    reset(work)
    return out


def _ri_scaling(size: dict, work: Path) -> dict:
    from . import mor
    from .peers import DeltaLake

    sizes, batch, k = size["ri_table_rows"], size["ri_batch"], size["ri_batches"]
    out: dict = {"table_rows": sizes, "batch_rows": batch, "batches": k, "shapes": {}}
    for shape, keys in mor.SHAPES.items():
        per: dict = {}
        for n in sizes:
            reset(work)
            model = mor.Model(n)
            init = model.initial(keys)
            schema = mor.schema(keys)
            systems = {RI_TABLE: Multiwriter(work / "ri", "driver", schema=schema, metadata=True, record_index=True),
                       BLOOM_TABLE: Multiwriter(work / "bloom", "driver", schema=schema, metadata=True),
                       DELTA: DeltaLake(work)}
            for peer in systems.values():
                peer.load(init)
            del init
            todo = [model.batch(b, batch, keys) for b in range(k)]
            times = goals._interleave(systems, todo, "upsert")
            want = model.checksum()
            for name, peer in systems.items():
                mor.check(f"{name} {shape} {n}", mor.checksum(peer.read()), want)
            per[str(n)] = {name: {"median_s": statistics.median(v), "all_s": v} for name, v in times.items()}
            print(f"   {shape} {n:,} rows: " + ", ".join(f"{name} {d['median_s']:.3f} s"
                                                      for name, d in per[str(n)].items()), flush=True)
        out["shapes"][shape] = per
    return out


def render_record_index(r: dict) -> list[str]:
    c, s = r["cost"], r["scaling"]
    out = ["## The record index (issue 59 goals 1 and 3)", "",
           "Goal 3: what keeping every index (`record_index`, `column_stats`, `partition_stats`) adds to an upsert "
           f"(<= {TARGET:.2f}x the files partition alone). " + _cost_setup(c), "", *_cost_rows(c, WITH_ALL)]
    out += ["", f"Goal 1: Copy-on-Write upsert of {s['batch_rows']:,} random existing keys ({s['batches']} batches, "
            "median seconds), the record index as the writer's index, beside the bloom index and deltalake's merge "
            f"(targets: <= {RI_SCALE_TARGET:.1f}x from the smallest table to the largest, <= {RI_DELTA_TARGET:.1f}x "
            "deltalake's merge at the largest).", "",
            "| keys | table rows | record index s | bloom index s | deltalake merge s | record index / deltalake |",
            "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for shape, per in s["shapes"].items():
        for n, d in per.items():
            ri_s, bl_s, de_s = (d[x]["median_s"] for x in (RI_TABLE, BLOOM_TABLE, DELTA))
            out.append(f"| {shape} | {int(n):,} | {ri_s:.3f} | {bl_s:.3f} | {de_s:.3f} | {ri_s / de_s:.2f} |")
    return out + [""]
