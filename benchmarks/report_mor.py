"""RESULTS.md sections of the Merge-on-Read (``benchmarks.mor``) and non-blocking writer
(``benchmarks.nbcc``) benchmarks."""
from __future__ import annotations

from pathlib import Path

from .plots import median as _median
from .plots import plot as _plot


def _s(x: float) -> str:
    return f"{x:.3f}"


def _upsert_scaling(u: dict) -> list[str]:
    sizes = [str(n) for n in u["table_rows"]]
    out = [f"## Merge-on-Read upsert as the table grows ({u['batch_rows']:,}-row upserts of random existing keys, "
           f"{u['partitions']} partitions x {u['buckets']} buckets, {u['batches']} batches per size)", "",
           "Our Merge-on-Read writer (one long-lived `mw.Writer`, log files) and deltalake's merge take turns on every "
           "batch; each table checked against the model after the batches (rows, distinct keys, sum of ts and amount). "
           f"Table sizes: {', '.join(f'{int(n):,}' for n in sizes)} rows"
           + (" (the full size runs 250k, 2M and 8M)." if sizes[0] != "250000" else "."), ""]
    for shape, per in u["shapes"].items():
        base = per[sizes[0]]["mor_median_s"]
        out += [f"{shape}:", "", "| table rows | MOR median s | deltalake merge median s | MOR / deltalake | "
                "MOR / MOR at the smallest |", "| ---: | ---: | ---: | ---: | ---: |"]
        for n in sizes:
            v = per[n]
            out.append(f"| {int(n):,} | {_s(v['mor_median_s'])} | {_s(v['deltalake_median_s'])} | "
                       f"{v['mor_median_s'] / v['deltalake_median_s']:.2f}x | {v['mor_median_s'] / base:.2f}x |")
        out.append("")
    return out


def _foreach_batch(f: dict) -> list[str]:
    out = [f"## Merge-on-Read foreachBatch on a CDC stream ({f['batches']} micro-batches of {f['batch_rows']:,} random "
           f"existing keys into {f['table_rows']:,} rows, {f['buckets']} buckets per partition)", "",
           "A parquet directory source, one file per micro-batch, both queries taking turns on each file; the function "
           "body timed (our sink's call; deltalake's toArrow + merge). Both tables checked against the model.", "",
           "| system | median s / micro-batch | first micro-batch s | Spark trigger median s | vs ours |",
           "| --- | ---: | ---: | ---: | ---: |"]
    s = f["systems"]
    base = s["multiwriter sink (MOR)"]["median_s"]
    for k, v in s.items():
        trig = _s(v["trigger_median_s"]) if "trigger_median_s" in v else ""
        out.append(f"| {k} | {_s(v['median_s'])} | {_s(v['all_s'][0])} | {trig} | {v['median_s'] / base:.2f}x |")
    r = sorted(f["ratios_per_micro_batch"])
    if r:
        out += ["", f"Per micro-batch ratio ours / deltalake: median {r[len(r) // 2]:.2f}, worst {r[-1]:.2f}."]
    return out + [""]


def _read(r: dict) -> list[str]:
    b = r["delta_commits_per_group_before"]
    out = [f"## Merge-on-Read snapshot read: {r['delta_commits']} uncompacted delta commits vs compacted "
           f"({r['table_rows']:,} rows, {r['batch_rows']:,}-row upserts, {r['buckets']} buckets per partition)", "",
           f"Two tables written alike; the second compacted by the companion cleaner "
           f"(`{r['compacted_by']}`: {r['compacted_file_groups']} file groups, {r['compacted_log_files']} log files, "
           f"{r['compaction_s']:.2f} s; before it up to {b['max']} delta commits per file group). `Table.read()` of "
           f"all columns and of ({', '.join(r.get('few_columns', ['id', 'ts', 'amount']))}), and hudi-rs's read of "
           "the same tables, interleaved, every read checked against the model.", ""]
    for shape, v in (r["shapes"].items() if "shapes" in r else [("string keys", r)]):
        out += [f"| read, {shape} | median s | fastest s |", "| --- | ---: | ---: |"]
        out += [f"| {k} | {_s(x['median_s'])} | {_s(x['min_s']) if 'min_s' in x else ''} |"
                for k, x in v["readers"].items()]
        out.append("")
    return out


def _long_run(lr: dict, plots_dir: Path) -> list[str]:

    m = lr["maintenance"]
    out = [f"## Merge-on-Read long run ({lr['batches']} micro-batches of {lr['batch_rows']:,} random-key upserts into "
           f"{lr['table_rows']:,} rows, cleaner with `CompactionConfig(delta_commits={lr['delta_commits']})` every "
           f"{lr['compact_every']} batches)", "",
           "One streaming query, one long-lived `MultiWriterSink`; the cleaner runs in the same foreachBatch function, "
           f"outside the timed sink call. Wall time {lr['wall_s']:.0f} s; {lr['compactions']} compactions. The table "
           "checked against the model at the end.", "",
           "| | |", "| --- | ---: |",
           f"| median s, batches 20-70 | {_s(lr['start_median_s'])} |",
           f"| median s, last 50 batches | {_s(lr['end_median_s'])} |",
           f"| end / start | {lr['end_median_s'] / lr['start_median_s']:.2f}x |",
           f"| uncompacted delta commits per file group, max over the run | {lr['delta_commits_per_group_max']} |"]
    if m:
        out.append(f"| cleaner run median s | {_s(_median([x['cleaner_s'] for x in m]))} |")
    out.append("")
    xs = list(range(1, lr["batches"] + 1))
    out += _plot(plots_dir, "mor_long_run_latency.png", {"multiwriter sink (MOR)": (xs, lr["latency_s"])},
                 "micro-batch", "seconds per micro-batch", log=True, smooth=25)
    s = lr["samples"]
    out += _plot(plots_dir, "mor_long_run_delta_commits.png",
                 {"max over file groups": ([x["batch"] for x in s], [x["max"] for x in s])},
                 "micro-batch", "uncompacted delta commits per file group")
    return out


def _backfill(b: dict) -> list[str]:
    out = ["## A backfill beside a stream, two OS processes under ZooKeeper", "",
           "A stream of upserts of random keys in 4 partitions (alone first, then while the backfill runs, then after) "
           "and one backfill upserting every key (the same file groups; each row's ts older or newer than the stream's). "
           "Latency: one write's wall time in the stream process. Rows: the table against the event-time model of the "
           "acknowledged commits (per key the highest ts, ties to the later completion), row by row."
           + (f" The backfill holds {b['backfill_hold_s']} s between its files and its commit."
              if b.get("backfill_hold_s") else ""), "",
           "| | " + " | ".join(k for k in b if isinstance(b[k], dict)) + " |",
           "| --- |" + " ---: |" * sum(isinstance(v, dict) for v in b.values())]
    runs = [v for v in b.values() if isinstance(v, dict)]

    def row(label: str, f) -> None:
        out.append(f"| {label} | " + " | ".join(f(v) for v in runs) + " |")

    row("backfill rows / stream rows per commit", lambda v: f"{v['backfill_rows']:,} / {v['stream_rows']:,}")
    row("backfill landed", lambda v: "yes" if v["backfill"]["ok"] else "no")
    row("backfill attempts", lambda v: f"{v['backfill']['attempts']} (max {v['max_conflict_retries'] + 1})")
    row("backfill write s", lambda v: f"{v['backfill']['seconds']:.2f}")
    row("stream commits (landed / gave up)", lambda v: f"{v['stream_landed']} / {v['stream_gave_up']}")
    row("stream retries", lambda v: str(v["stream_retries"]))
    row("stream commits during the backfill", lambda v: str(v["stream_during_backfill"]))
    row("stream commit p99 s alone / during", lambda v: f"{_s(v['p99_alone_s'])} / {_s(v['p99_during_s'])}")
    row("stream commit median s alone / during", lambda v: f"{_s(v['median_alone_s'])} / {_s(v['median_during_s'])}")
    row("rows differing from the model", lambda v: " ; ".join(
        f"{when}: " + ", ".join(f"{who} {c['rows_differing']}" for who, c in checks.items())
        for when, checks in v["checks"].items()))
    return out + [""]


def _scaling(sc: dict) -> list[str]:
    out = [f"## 2 to 8 writer processes on one table ({sc['batch_rows']:,}-row upserts of random keys of "
           f"{sc['table_rows']:,} rows, {sc['seconds']} s each, {sc['partitions']} partitions)", "",
           "Every writer a process under one ZooKeeper; lock wait and hold per commit (the hold summed over the commit's "
           f"holds). Copy-on-Write writers retry a conflict up to {sc['cow_max_conflict_retries']} times, then give the "
           "batch up. Each table checked row by row against the event-time model of the acknowledged commits.", "",
           "| table, writers | commits/s | conflicts | gave up | lock wait p50 / p99 ms | lock hold p50 / p99 ms | "
           "median write s |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name in ("Merge-on-Read, non-blocking", "Copy-on-Write, optimistic"):
        for k, v in sc[name].items():
            out.append(f"| {name}, {k} | {v['commits_per_s']:.1f} | {v['conflicts']} | {v['gave_up']} | "
                       f"{v['lock_wait_p50_ms']:.1f} / {v['lock_wait_p99_ms']:.1f} | "
                       f"{v['lock_hold_p50_ms']:.1f} / {v['lock_hold_p99_ms']:.1f} | {_s(v['commit_median_s'])} |")
    return out + [""]


def render(r: dict, plots_dir: Path) -> list[str]:
    out: list[str] = []
    if "mor_upsert_scaling" in r:
        out += _upsert_scaling(r["mor_upsert_scaling"])
    if "mor_foreach_batch" in r:
        out += _foreach_batch(r["mor_foreach_batch"])
    if "mor_read" in r:
        out += _read(r["mor_read"])
    if "mor_long_run" in r:
        out += _long_run(r["mor_long_run"], plots_dir)
    if "nbcc_backfill" in r:
        out += _backfill(r["nbcc_backfill"])
    if "nbcc_scaling" in r:
        out += _scaling(r["nbcc_scaling"])
    return out
