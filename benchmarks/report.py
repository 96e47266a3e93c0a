"""Render a run as Markdown tables with ratios (and matplotlib plots)."""
from __future__ import annotations

from pathlib import Path


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


def render(run: dict, plots_dir: Path) -> str:
    r = run["results"]
    out = [f"# Benchmark results ({run['size']} size, {run['when'][:19]} UTC)", "",
           f"Machine: {run['machine']['platform']}, {run['machine']['cpus']} CPUs, Python {run['machine']['python']}.  ",
           "Versions: " + ", ".join(f"{k} {v}" for k, v in run["versions"].items()) + ".", "",
           "Sizes: " + ", ".join(f"{k}={v}" for k, v in run["sizes"].items()) + ".", ""]
    from .goals import ratio_table

    if any(k.startswith("goal_") for k in r):
        out += ["## Goals (systems interleaved batch by batch in one process; results checksummed)", "",
                ratio_table(r), ""]
    if "upsert" in r:
        out += ["## Upsert (10% updates of the newest partitions, 90% inserts)", ""]
        out += _ratio_table(r["upsert"], ["multiwriter (driver)", "multiwriter (executors)"]) + [""]
    if "append" in r:
        out += ["## Append", ""] + _ratio_table(r["append"], ["multiwriter (driver)"]) + [""]
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
    return "\n".join(out) + "\n"
