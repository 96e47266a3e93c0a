"""A run's sections as Markdown blocks of RESULTS.md: tables with ratios, matplotlib plots."""
from __future__ import annotations

from pathlib import Path

from .plots import median as _median
from .plots import plot as _plot


def _ratio_table(res: dict, ours: list[str]) -> list[str]:
    peers = {k: v for k, v in res.items() if k not in ours}
    fastest = min(peers, key=lambda k: peers[k]["median_s"]) if peers else None
    lines = ["| writer | median s / batch | vs fastest peer |", "| --- | ---: | ---: |"]
    for k, v in res.items():
        ratio = v["median_s"] / peers[fastest]["median_s"] if fastest else float("nan")
        note = f" ({v['note']})" if v.get("note") else ""
        lines.append(f"| {k}{note} | {v['median_s']:.3f} | {ratio:.2f}x |")
    if fastest:
        lines.append(f"\nFastest peer: {fastest}.")
    return lines


def _per_batch(res: dict, title: str, ours: str) -> list[str]:
    peers = [k for k in res if k != ours and isinstance(res[k], dict) and "median_s" in res[k]]
    lines = [title, "", "| system | median s / micro-batch | first micro-batch s | Spark trigger median s | vs ours |",
             "| --- | ---: | ---: | ---: | ---: |"]
    base = res[ours]["median_s"]
    for k in [ours, *peers]:
        v = res[k]
        trig = f"{v['trigger_median_s']:.3f}" if "trigger_median_s" in v else ""
        lines.append(f"| {k} | {v['median_s']:.3f} | {v['all_s'][0]:.3f} | {trig} | {v['median_s'] / base:.2f}x |")
    return lines + [""]


def _flatness(lr: dict) -> list[str]:
    """The 25th percentile per 100 batches (the batch after each companion run left out) and
    the line fitted through them (:func:`benchmarks.streaming.flatness`)."""
    fl = lr.get("flatness")
    if not fl:
        return []
    names = list(fl)
    out = ["| 25th percentile s | " + " | ".join(names) + " |", "| --- |" + " ---: |" * len(names)]

    def row(label: str, get) -> None:
        vals = [get(fl[n]) for n in names]
        out.append(f"| {label} | " + " | ".join("" if v is None else f"{v:.4f}" for v in vals) + " |")

    row("batches 10-49", lambda f: f.get("early_p25_s"))
    row("batches 351-399", lambda f: f.get("near_400_p25_s"))
    row("351-399 / 10-49", lambda f: f.get("near_400_over_early"))
    for i, w in enumerate(fl[names[0]]["windows"]):
        row(f"batches {w['from']}-{w['to'] - 1}", lambda f, i=i: f["windows"][i]["p25_s"])
    row("fitted line, last window / batches 100-199", lambda f: f.get("trend_last_over_first"))
    return out + [""]


def _long_run(lr: dict, plots_dir: Path, title: str = "Long run", plot_prefix: str = "long_run") -> list[str]:
    lat = lr["latency_s"]
    out = [f"## {title} ({lr['batches']} micro-batches of {lr['rows_per_batch']} new rows into {lr['partitions']} "
           f"partitions, companion cleaner every {lr['clean_every']})", "",
           f"One long-lived `MultiWriterSink` in the foreachBatch of one streaming query; the cleaner "
           f"(`mw.Cleaner`, clustering on by default) and deltalake's `optimize.compact()` run from the same function "
           f"every {lr['clean_every']} batches, outside the timed calls. Wall time {lr['wall_s']:.0f} s.", "",
           "| | multiwriter sink | deltalake append |", "| --- | ---: | ---: |",
           f"| median s, batches 20-70 | {lr['start_median_s']:.3f} | {lr['deltalake_start_median_s']:.3f} |",
           f"| median s, last 50 batches | {lr['end_median_s']:.3f} | {lr['deltalake_end_median_s']:.3f} |",
           f"| end / start | {lr['end_median_s'] / lr['start_median_s']:.2f}x | "
           f"{lr['deltalake_end_median_s'] / lr['deltalake_start_median_s']:.2f}x |"]
    m = lr["maintenance"]
    if m:
        out.append(f"| maintenance median s (cleaner run / compact) | {_median([x['cleaner_s'] for x in m]):.3f} | "
                   f"{_median([x['deltalake_compact_s'] for x in m]):.3f} |")
    last = lr["files"][-1] if lr["files"] else None
    if last:
        out.append(f"| live files per partition at the end (max) | {last['multiwriter_max']} | {last['deltalake_max']} |")
    if lr.get("files_per_partition_before_last_cleaner") is not None:
        out.append(f"| live files per partition just before the last maintenance (max) | "
                   f"{lr['files_per_partition_before_last_cleaner']} | |")
    out.append("")
    out += _flatness(lr)
    out += ["| snapshot read (id, ts, amount) | median s |", "| --- | ---: |"]
    out += [f"| {k} | {v['median_s']:.3f} |" for k, v in lr["reads"].items()] + [""]
    xs = list(range(1, lr["batches"] + 1))
    out += _plot(plots_dir, f"{plot_prefix}_latency.png", {k: (xs, v) for k, v in lat.items()}, "micro-batch",
                 "seconds per micro-batch", log=True, smooth=25)
    f = lr["files"]
    out += _plot(plots_dir, f"{plot_prefix}_files.png",
                 {"multiwriter": ([x["batch"] for x in f], [x["multiwriter_max"] for x in f]),
                  "deltalake": ([x["batch"] for x in f], [x["deltalake_max"] for x in f])},
                 "micro-batch", "live data files per partition (max)")
    return out


def _goal_upserts(r: dict, sizes: dict) -> list[str]:
    """The goal upsert sections side by side: string keys and the event workload."""
    shapes = {k: r[k] for k in ("goal_upsert", "goal_upsert_event") if k in r}
    names = list(dict.fromkeys(n for res in shapes.values() for n in res))
    heads = {"goal_upsert": "string keys, new keys over 30 days", "goal_upsert_event": "event: int64 keys, 5 newest days"}
    which = f", {heads[next(iter(shapes))]}" if len(shapes) == 1 else ""
    out = [f"## Upsert goal{which} ({sizes['batch_rows']:,}-row batches into {sizes['table_rows']:,} rows, 10 % updates; "
           "median s per batch)", "",
           "| system | " + " | ".join(heads[k] for k in shapes) + " |", "| --- |" + " ---: |" * len(shapes)]
    for n in names:
        cells = [f"{res[n]['median_s']:.3f}" if n in res else "" for res in shapes.values()]
        out.append(f"| {n} | " + " | ".join(cells) + " |")
    return out + ["", "The event workload's deltalake merge runs with `streamed_exec=False` (predicate on the date "
                  "and the key in both); the string-key one with deltalake's default, as it always ran.", ""]


def _module_sections(r: dict) -> list[str]:
    """The sections whose own module renders them, in this order."""
    from . import bootstrap, commit_rate, executors, indexes, locks, metadata_table, s3_cost

    renderers = {"commit_rate": commit_rate.render, "locks": locks.render, "metadata_table": metadata_table.render,
                 "metadata_table_listing": metadata_table.render_listing,
                 "metadata_table_long_run": metadata_table.render_long_run, "executors": executors.render,
                 "bootstrap": bootstrap.render, "s3_cost": s3_cost.render,
                 "index_stats_cost": indexes.render_stats_cost, "index_filtered_read": indexes.render_filtered_read,
                 "index_record": indexes.render_record_index}
    return [line for name, fn in renderers.items() if name in r for line in fn(r[name])]

def taken(run: dict, section: str) -> str:
    """When, on what machine and at what sizes a section's figures were taken."""
    from .workloads import SIZES

    m, when = run["machine"], run.get("section_when", {}).get(section, run["when"])
    default = SIZES.get(run["size"], {})
    changed = {k: v for k, v in run["sizes"].items() if default.get(k) != v}
    line = (f"Taken {when[:16].replace('T', ' ')} UTC" + (f" ({run['note']})" if run.get("note") else "")
            + f": {m['platform']}, {m['cpus']} CPUs, Python {m['python']}; `--size {run['size']}`"
            + ("".join(f", `{k}={v}`" for k, v in changed.items()) if changed else "") + ".  ")
    line += "\nVersions: " + ", ".join(f"{k} {v}" for k, v in run["versions"].items()) + "."
    return line + (f"  \nRaw results: `results/{run['raw']}`." if run.get("raw") else "")


def render_section(name: str, run: dict, plots_dir: Path) -> str:
    """One section's block of RESULTS.md: its heading, when it was taken, its tables and plots."""
    lines = sections({name: run["results"][name]}, run["sizes"], plots_dir)
    if not lines:
        lines = [f"## {name}", ""]
    rest = lines[2:] if len(lines) > 1 and lines[1] == "" else lines[1:]
    return "\n".join([lines[0], "", taken(run, name), "", *rest]).rstrip() + "\n"


def sections(r: dict, sizes: dict, plots_dir: Path) -> list[str]:
    """The tables and plots of the sections in ``r`` (a section's heading first)."""
    out: list[str] = []
    if "stream" in r:
        out += _per_batch(r["stream"], "## foreachBatch streaming upsert (parquet source, availableNow, one file per "
                                       "micro-batch, both queries take turns on each file)", "multiwriter sink")
    if "stream_event" in r:
        out += _per_batch(r["stream_event"], "## foreachBatch streaming upsert, event workload (int64 keys, the 5 "
                                             "newest days; deltalake merge with `streamed_exec=False`)", "multiwriter sink")
    if "stream_write" in r:
        out += ["## writeStream.format(multiwriter) beside the foreachBatch sink (the same parquet source, upserts; "
                "Spark's trigger duration per micro-batch)", "",
                "| sink | median s / micro-batch |", "| --- | ---: |"]
        out += [f"| {k} | {v['median_s']:.3f} |" for k, v in r["stream_write"].items()] + [""]
    if "goal_import" in r:
        g = r["goal_import"]
        out += ["## Import time (`import multiwriter` in a fresh process, 5 runs)", "",
                f"Median {g['median_s'] * 1000:.1f} ms (runs: " + ", ".join(f"{x * 1000:.1f}" for x in g["all_s"]) + " ms).",
                ""]
    if "goal_upsert" in r or "goal_upsert_event" in r:
        out += _goal_upserts(r, sizes)
    if "goal_insert" in r:
        out += [f"## Insert goal ({sizes['batch_rows']:,} new rows per batch over 30 days)", ""]
        out += _ratio_table(r["goal_insert"], ["multiwriter insert", "multiwriter insert, virtual keys"]) + [""]
    if "long_run" in r:
        out += _long_run(r["long_run"], plots_dir)
    if "long_run_event" in r:
        out += _long_run(r["long_run_event"], plots_dir, "Long run on the event workload, increasing int64 keys",
                         "long_run_event")
    if "memory_stream" in r:
        m = r["memory_stream"]
        s = m["samples"]
        out += [f"## Driver memory over a running streaming query ({m['batches']} micro-batches of 200 rows)", "",
                f"Driver (Python) RSS: {m['rss_mib_at_100']:.0f} MiB at batches 100-150, {m['rss_mib_at_end']:.0f} MiB "
                f"over the last 50 batches ({100 * m['growth']:+.1f} %, {m['rss_mib_at_end'] - m['rss_mib_at_100']:+.0f} MiB). "
                f"The companion cleaner runs every 50 batches in the same driver. Wall time {m['wall_s']:.0f} s."
                + (" The driver is a fresh process started with " + ", ".join(f"`{k}={v}`" for k, v in m["driver_env"].items())
                   + " (docs/reliability.md, \"Long-running drivers\")." if m.get("driver_env") else ""), ""]
        series = {"driver (Python)": ([x["batch"] for x in s], [x["python_mib"] for x in s])}
        if s and s[0]["jvm_mib"] is not None:
            series["Spark JVM"] = ([x["batch"] for x in s], [x["jvm_mib"] for x in s])
        out += _plot(plots_dir, "memory_stream.png", series, "micro-batch", "RSS (MiB)")
    if "peak_rss" in r:
        p = r["peak_rss"]
        out += ["## Peak RSS of one 1M-row upsert into 1M rows (a fresh process each, batch read from parquet)", "",
                "| system | peak RSS MiB | RSS before the upsert MiB | seconds |", "| --- | ---: | ---: | ---: |"]
        out += [f"| {k} | {v['peak_mib']:.0f} | {v['before_mib']:.0f} | {v['seconds']:.2f} |" for k, v in p.items()] + [""]
    if "source_read" in r:
        d = r["source_read"]
        out += [f"## Spark reads of the {d['rows']:,}-row table ({d['files']} live files; count, sum(ts), sum(amount))", "",
                "| reader | median s |", "| --- | ---: |"]
        out += [f"| {k} | {v['median_s']:.3f} |" for k, v in d.items() if isinstance(v, dict)] + [""]
    from .report_mor import render as render_mor

    out += render_mor(r, plots_dir)
    out += _module_sections(r)
    if "upsert" in r:
        out += ["## Upsert (10% updates of the newest partitions, 90% inserts)", ""]
        out += _ratio_table(r["upsert"], ["multiwriter (driver)", "multiwriter (executors)"]) + [""]
    if "append" in r:
        out += ["## Append (multiwriter (driver) upserts the new keys, looking each up; the insert row does not)", ""]
        out += _ratio_table(r["append"], ["multiwriter (driver)", "multiwriter insert (driver)"]) + [""]
    if "protocol" in r:
        p = r["protocol"]
        out += ["## Protocol overhead (ZooKeeper lock, 100k-row upserts)", "",
                f"- median batch: {p['median_batch_s']:.3f} s; lock wait + hold + conflict check + timeline I/O: "
                f"{100 * p['median_protocol_share']:.1f} % of the batch",
                f"- lock hold p50 {p['lock_hold_p50_ms']:.1f} ms, p99 {p['lock_hold_p99_ms']:.1f} ms", ""]
    if "timeline" in r:
        out += ["## Commit latency as the timeline grows (100-row upserts into one partition)", "",
                "| timeline | median batch s | median commit phase s |", "| --- | ---: | ---: |"]
        out += [f"| {k} | {v['batch_s']:.3f} | {v['commit_phase_s']:.4f} |" for k, v in r["timeline"].items()] + [""]
    if "concurrent" in r:
        out += ["## Concurrent writers on disjoint partitions (100-row batches)", "",
                "| writers | commits/s | conflicts or retries | mean lock wait s |", "| --- | ---: | ---: | ---: |"]
        for k, v in r["concurrent"].items():
            out.append(f"| {k} | {v['commits_per_s']:.1f} | {v.get('conflicts', v.get('retries', 0))} | "
                       f"{v.get('mean_lock_wait_s', float('nan')):.3f} |")
        out.append("")
    if "failure" in r:
        f = r["failure"]
        out += ["## Failure detection (heartbeat 1 s x 2 misses, cleaner every 1 s)", "",
                f"SIGKILL to completed rollback: median {f['median_s']:.1f} s over {len(f['all_s'])} kills "
                f"(bound {f['bound_s']:.0f} s + up to one cleaner interval).", ""]
    if "memory" in r:
        m = r["memory"]
        out += ["## Driver memory across micro-batches (the sink called per batch)", "",
                f"RSS first half {m['rss_mib_first_half']:.0f} MiB, second half {m['rss_mib_second_half']:.0f} MiB.", ""]
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt

            plt.figure(figsize=(6, 3))
            plt.plot([10 * i for i in range(len(m["samples"]))], m["samples"])
            plt.xlabel("micro-batch")
            plt.ylabel("driver RSS (MiB)")
            plt.tight_layout()
            plt.savefig(plots_dir / "memory.png")
            plt.close()
            out += ["![driver RSS](results/memory.png)", ""]
        except ImportError:
            pass
    return out
