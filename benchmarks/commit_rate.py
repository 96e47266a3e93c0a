"""Commit rate of one table under many writers (issue 58), and where a commit's lock hold goes.

W writer processes (``commit_rate_writers``), each appending 100-row batches of new keys to its
own partition for ``commit_rate_seconds``, all at once: multiwriter (ZooKeeper lock, metadata
table on; with its defaults, and with ``begin_ahead_s``) and deltalake's ``write_deltalake(mode="append")`` on the same batches (its own
optimistic commit, retried up to 15 times), the three interleaved per W. Two variants
(:data:`VARIANTS`): a Copy-on-Write table with string keys (the defaults), and a Merge-on-Read
table with a bucket index (its writers non-blocking, Hudi's default there) with int64 keys. Each landed commit reports its lock hold by step
(:data:`multiwriter.transaction.STEPS`); the rows of both tables are counted, ours also by hudi-rs.

Worker processes run ``python -m benchmarks.commit_rate <system> '<json>'`` and print one JSON line.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BATCH = 100
DELTA_RETRIES = 15
#: the table type and key shape of each variant measured
VARIANTS = {"Copy-on-Write, string keys": {"mor": False, "int_keys": False},
            "Merge-on-Read (bucket index, non-blocking), int64 keys": {"mor": True, "int_keys": True}}


def _batch(writer: int, n: int, int_keys: bool = False):
    from . import data

    ids = writer * 10**7 + n * BATCH + np.arange(BATCH)
    make = data.event_rows if int_keys else data.rows
    return make(ids, np.array([data.DAYS[writer % len(data.DAYS)]] * BATCH), 1, n)


def _wait_go(ctl: Path, index: int) -> float:
    (ctl / f"ready-{index}").touch()
    while not (ctl / "go").exists():
        time.sleep(0.005)
    return float((ctl / "go").read_text())


def mw_worker(a: dict) -> dict:
    import multiwriter as mw

    lock = mw.ZooKeeperLock(connect=a["zk"], base_path="/bench-rate")
    w = mw.Writer(mw.Table.open(a["path"]), mw.WriterConfig(writer_id=f"r{a['index']}", lock=lock,
                                                           begin_ahead_s=a.get("begin_ahead_s", 0.0)))
    out = []
    try:
        w.write(_batch(a["index"], 10**6, a["int_keys"]))  # warm up (imports, the first listing): not counted
        deadline = _wait_go(Path(a["ctl"]), a["index"])
        n = 0
        while time.time() < deadline:
            t0, c0 = time.perf_counter(), time.process_time()
            r = w.write(_batch(a["index"], n, a["int_keys"]))
            out.append({"seconds": time.perf_counter() - t0, "cpu": time.process_time() - c0, "end": time.time(),
                        **r.protocol})
            n += 1
    finally:
        w.close()
        lock.close()
    return {"commits": out, "failed": 0}


def shared_worker(a: dict) -> dict:
    """One of two writers upserting every key of one file group (:func:`shared_group`): numbered
    batches, each sent again until it lands, as a streaming query does."""
    import multiwriter as mw
    from multiwriter.errors import MultiWriterError

    lock = mw.ZooKeeperLock(connect=a["zk"], base_path="/bench-rate")
    w = mw.Writer(mw.Table.open(a["path"]), mw.WriterConfig(
        writer_id=f"s{a['index']}", lock=lock, max_conflict_retries=100, retry_backoff_max_s=0.4))
    ids = np.arange(SHARED_KEYS)
    acks, errors, b = [], 0, 0
    try:
        deadline = _wait_go(Path(a["ctl"]), a["index"])
        while time.time() < deadline:
            batch = _shared_batch(ids, a["index"], b)
            while True:
                try:
                    r = w.write(batch, batch_id=b)
                    break
                except MultiWriterError:
                    errors += 1
            acks.append({"at": time.time(), "conflicts": r.conflicts, "claim_wait": r.protocol.get("claim_wait", 0.0)})
            b += 1
    finally:
        w.close()
        lock.close()
    return {"acks": acks, "errors": errors}


def _shared_batch(ids: np.ndarray, writer: int, b: int):
    from . import data

    return data.rows(ids, np.array([data.DAYS[0]] * len(ids)), 1 + b, writer * 1000 + b)


def delta_worker(a: dict) -> dict:
    from deltalake import write_deltalake
    from deltalake.exceptions import CommitFailedError

    for _ in range(DELTA_RETRIES + 1):  # warm up: not counted
        try:
            write_deltalake(a["path"], _batch(a["index"], 10**6, a["int_keys"]), partition_by=["date"], mode="append")
            break
        except CommitFailedError:
            pass
    deadline = _wait_go(Path(a["ctl"]), a["index"])
    out, failed, n = [], 0, 0
    while time.time() < deadline:
        t0 = time.perf_counter()
        for _ in range(DELTA_RETRIES + 1):
            try:
                write_deltalake(a["path"], _batch(a["index"], n, a["int_keys"]), partition_by=["date"], mode="append")
                break
            except CommitFailedError:  # after deltalake's own retries
                failed += 1
        else:
            n += 1
            continue
        out.append({"seconds": time.perf_counter() - t0, "end": time.time()})
        n += 1
    return {"commits": out, "failed": failed}


WORKERS = {"multiwriter": mw_worker, "multiwriter-ahead": mw_worker, "deltalake": delta_worker,
           "shared": shared_worker}
#: keys of the one file group two writers upsert in :func:`shared_group`
SHARED_KEYS = 40
#: ours with its defaults, ours beginning each next instant in the commit's hold, deltalake
SYSTEMS = ("multiwriter", "multiwriter-ahead", "deltalake")
#: ``WriterConfig.begin_ahead_s`` of the begin-ahead runs
AHEAD_S = 5.0


def _cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of every core since boot, from ``/proc/stat`` (Linux): the machine's
    busy share over a run says whether the cores or something else set the pace."""
    with open("/proc/stat") as f:
        vals = [int(v) for v in f.readline().split()[1:]]
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)  # idle + iowait
    return sum(vals) - idle, sum(vals)


def _p(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * q))] if xs else float("nan")


def _workers(label: str, system: str, ctl: Path, seconds: float, args: list[dict]) -> tuple[float, list[dict], float]:
    """A worker process per ``args`` (``python -m benchmarks.commit_rate <system>``), all let go
    at once when every one is ready, for ``seconds``: (the start, what each printed, the share of
    the machine's CPU busy over the run)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    ps = [subprocess.Popen([sys.executable, "-m", "benchmarks.commit_rate", system, json.dumps(a)], cwd=ROOT, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for a in args]
    while not all((ctl / f"ready-{i}").exists() for i in range(len(args))):
        if any(p.poll() is not None for p in ps):
            break
        time.sleep(0.02)
    t0 = time.time()
    (ctl / "go.tmp").write_text(repr(t0 + seconds))
    busy0 = _cpu_ticks()
    os.replace(ctl / "go.tmp", ctl / "go")
    time.sleep(max(0.0, t0 + seconds - time.time()))
    busy1 = _cpu_ticks()
    res = []
    for p in ps:
        o, e = p.communicate(timeout=600)
        if p.returncode != 0:
            raise RuntimeError(f"{label}: a writer failed ({p.returncode}): {e[-3000:]}")
        res.append(json.loads(o.strip().splitlines()[-1]))
    return t0, res, (busy1[0] - busy0[0]) / max(1, busy1[1] - busy0[1])


def _run(system: str, work: Path, k: int, seconds: float, zk, variant: dict) -> dict:
    import multiwriter as mw

    from .data import EVENT_SCHEMA, SCHEMA
    from .peers import reset

    reset(work)
    ctl = work / "ctl"
    ctl.mkdir(parents=True)
    path = str(work / "table")
    ours = system.startswith("multiwriter")
    if ours:
        layout = {"table_type": "MERGE_ON_READ", "num_buckets": 2} if variant["mor"] else {}
        mw.Table.create(path, name="bench_rate", schema=EVENT_SCHEMA if variant["int_keys"] else SCHEMA,
                        record_key="id", partition_by=["date"], ordering_field="ts", **layout)
    else:  # created before the writers start, as ours is
        from deltalake import write_deltalake

        write_deltalake(path, _batch(29, 10**6, variant["int_keys"])[:0], partition_by=["date"], mode="append")
    t0, res, cpu_busy = _workers(f"{system} x{k}", system, ctl, seconds, [
        {"path": path, "zk": zk.connect, "ctl": str(ctl), "index": i, "int_keys": variant["int_keys"],
         "begin_ahead_s": AHEAD_S if system == "multiwriter-ahead" else 0.0} for i in range(k)])
    commits = [c for r in res for c in r["commits"]]
    wall = max([c["end"] for c in commits], default=t0) - t0
    expected = (len(commits) + k) * BATCH  # the warm-up batches too
    out = {"writers": k, "commits": len(commits), "seconds": wall, "commits_per_s": len(commits) / wall,
           "commit_p50_ms": 1000 * _p([c["seconds"] for c in commits], 0.5),
           "commit_p99_ms": 1000 * _p([c["seconds"] for c in commits], 0.99),
           "failed": sum(r["failed"] for r in res),
           "cpu_busy": cpu_busy}
    if ours:
        rows = mw.Table.open(path).read(columns=["id"]).num_rows
        from hudi import HudiTableBuilder

        hudi_rows = sum(b.num_rows for b in HudiTableBuilder.from_base_uri(path).build().read())
        if rows != expected or hudi_rows != expected:
            raise AssertionError(f"multiwriter x{k}: {rows} rows (hudi-rs {hudi_rows}), expected {expected}")
        holds = [c["commit_hold"] for c in commits]
        # the share of the run some writer held the lock (begin's hold and the commit's): what a
        # group commit could give back at most
        out["lock_busy"] = sum(c["lock_hold"] for c in commits) / wall if wall > 0 else float("nan")
        out["cpu_ms_per_commit"] = 1000 * statistics.mean([c["cpu"] for c in commits]) if commits else float("nan")
        out.update({"lock_hold_p50_ms": 1000 * _p(holds, 0.5), "lock_hold_p99_ms": 1000 * _p(holds, 0.99),
                    "lock_wait_p50_ms": 1000 * _p([c["lock_wait"] for c in commits], 0.5),
                    "begin_hold_p50_ms": 1000 * _p([c["lock_hold"] - c["commit_hold"] for c in commits], 0.5),
                    "steps_p50_ms": {}, "steps_mean_ms": {}})
        from multiwriter.transaction import STEPS

        for s in STEPS:
            xs = [c.get(f"hold_{s}", 0.0) for c in commits]
            out["steps_p50_ms"][s] = 1000 * _p(xs, 0.5)
            out["steps_mean_ms"][s] = 1000 * statistics.mean(xs) if xs else float("nan")
    else:
        from deltalake import DeltaTable

        rows = DeltaTable(path).to_pyarrow_table(columns=["id"]).num_rows
        if rows != expected:
            raise AssertionError(f"deltalake x{k}: {rows} rows, expected {expected}")
    out["rows"] = rows
    return out


def shared_group(work: Path, seconds: float, zk) -> dict:
    """Two writer processes upserting every key of one file group (Copy-on-Write, string keys)
    for ``seconds``: how the commits split between them, the longest time one sat between two of
    its commits, the conflicts; the rows are checked against the last commit (ours and hudi-rs)."""
    import multiwriter as mw

    from .data import SCHEMA
    from .peers import reset

    reset(work)
    ctl = work / "ctl"
    ctl.mkdir(parents=True)
    path = str(work / "table")
    mw.Table.create(path, name="bench_shared", schema=SCHEMA, record_key="id", partition_by=["date"],
                    ordering_field="ts")
    t0, res, _ = _workers("shared file group", "shared", ctl, seconds,
                          [{"path": path, "zk": zk.connect, "ctl": str(ctl), "index": i} for i in range(2)])
    t = mw.Table.open(path)
    from hudi import HudiTableBuilder

    ours = t.read(columns=["id", "ts"])
    hudi_rows = sum(b.num_rows for b in HudiTableBuilder.from_base_uri(path).build().read())
    if ours.num_rows != SHARED_KEYS or hudi_rows != SHARED_KEYS or len({f for f in _groups(t)}) != 1:
        raise AssertionError(f"shared file group: {ours.num_rows} rows (hudi-rs {hudi_rows}), expected {SHARED_KEYS}")
    out = {"seconds": seconds, "writers": []}
    for r in res:
        times = [t0] + [a["at"] for a in r["acks"]]
        out["writers"].append({"commits": len(r["acks"]), "conflicts": sum(a["conflicts"] for a in r["acks"]),
                               "longest_gap_s": max((b - a for a, b in zip(times, times[1:], strict=False)), default=0.0),
                               "claim_wait_s": sum(a["claim_wait"] for a in r["acks"]), "errors": r["errors"]})
    counts = sorted(w["commits"] for w in out["writers"])
    out["ratio"] = counts[-1] / max(1, counts[0])
    return out


def _groups(t) -> set[tuple[str, str]]:
    tl = t.timeline()
    return {(s.partition_path, s.file_id) for i in tl.completed_writes() for s in tl.commit_metadata(i).all_stats()}


def commit_rate(size: dict, work: Path, spark) -> dict:
    import multiwriter as mw

    out: dict = {"seconds": size["commit_rate_seconds"], "batch_rows": BATCH, "variants": {}}
    with mw.LocalZooKeeper(port=0) as zk:
        for name, variant in VARIANTS.items():
            got: dict = {system: {} for system in SYSTEMS}
            for j, k in enumerate(size["commit_rate_writers"]):
                systems = list(SYSTEMS[j % len(SYSTEMS):] + SYSTEMS[:j % len(SYSTEMS)])
                for system in systems:
                    r = _run(system, work / f"{system}-{k}", k, size["commit_rate_seconds"], zk, variant)
                    got[system][str(k)] = r
                    print(f"   {name}: {system} x{k}: {r['commits_per_s']:.1f} commits/s, p50 {r['commit_p50_ms']:.0f} ms"
                          + (f", lock hold p50 {r['lock_hold_p50_ms']:.1f} p99 {r['lock_hold_p99_ms']:.1f} ms"
                             if "lock_hold_p50_ms" in r else ""), flush=True)
            out["variants"][name] = got
        out["shared_group"] = shared_group(work / "shared", size["commit_rate_seconds"], zk)
        s = out["shared_group"]
        print(f"   shared file group: {[w['commits'] for w in s['writers']]} commits, longest gaps "
              f"{[round(w['longest_gap_s'], 2) for w in s['writers']]} s", flush=True)
    return out


def render(r: dict) -> list[str]:
    """The section of RESULTS.md: each variant's table (a run before the variants: one, Copy-on-Write)."""
    variants = r.get("variants") or {"Copy-on-Write, string keys": r}
    out = [f"## Commit rate of one table under many writers ({r['batch_rows']}-row appends, each writer its own "
           f"partition, {r['seconds']} s; ZooKeeper lock, metadata table on)", ""]
    for name, v in variants.items():
        out += _render_variant(name, v)
    if r.get("shared_group"):
        out += _render_shared(r["shared_group"])
    return out


def _render_shared(s: dict) -> list[str]:
    out = [f"### Two writers upserting one file group ({SHARED_KEYS} keys, Copy-on-Write, {s['seconds']} s)", "",
           "| writer | commits | conflicts | longest time between two of its commits s | waited for the other's claims s |",
           "| --- | ---: | ---: | ---: | ---: |"]
    for i, w in enumerate(s["writers"]):
        out.append(f"| {i + 1} | {w['commits']} | {w['conflicts']} | {w['longest_gap_s']:.2f} | {w['claim_wait_s']:.2f} |")
    return out + ["", f"The busier writer committed {s['ratio']:.2f}x the other's batches.", ""]


def _render_variant(name: str, r: dict) -> list[str]:
    from multiwriter.transaction import STEPS

    dl = r["deltalake"]
    ours = [(label, r[system]) for system, label in (("multiwriter", "defaults"), ("multiwriter-ahead", "begin ahead"))
            if r.get(system)]
    out = [f"### {name}", "",
           "| writers | multiwriter | commits/s | p50 per commit ms | lock hold p50 ms | p99 ms | begin hold p50 ms "
           "| lock busy | writer CPU ms per commit | cores busy | deltalake commits/s | p50 ms | cores busy "
           "| deltalake failures |",
           "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for k in ours[0][1]:
        d = dl.get(k, {})
        for label, got in ours:
            m = got[k]
            out.append(f"| {k} | {label} | {m['commits_per_s']:.1f} | {m['commit_p50_ms']:.0f} | "
                       f"{m['lock_hold_p50_ms']:.1f} | {m['lock_hold_p99_ms']:.1f} | {m['begin_hold_p50_ms']:.1f} | "
                       f"{_pct(m.get('lock_busy'))} | {m.get('cpu_ms_per_commit', float('nan')):.1f} | "
                       f"{_pct(m.get('cpu_busy'))} | {d.get('commits_per_s', float('nan')):.1f} | "
                       f"{d.get('commit_p50_ms', float('nan')):.0f} | {_pct(d.get('cpu_busy'))} | {d.get('failed', '')} |")
    for label, got in ours:
        out += ["", f"The commit's lock hold by step, {label} (mean ms per commit; p50 in parentheses):", "",
                "| step | " + " | ".join(f"x{k}" for k in got) + " |", "| --- |" + " ---: |" * len(got)]
        for s in STEPS:
            out.append(f"| {s} | " + " | ".join(
                f"{got[k]['steps_mean_ms'].get(s, 0.0):.2f} ({got[k]['steps_p50_ms'].get(s, 0.0):.2f})"
                for k in got) + " |")
    return out + ["", "defaults: `WriterConfig()`; begin ahead: `begin_ahead_s` set, each commit begins the writer's "
                  "next instant in its own lock hold (one lock round per batch); begin hold: the begin's own lock "
                  "hold (none when begun ahead); lock busy: the share of the run some writer held the lock (what "
                  "grouping commits under one hold could give back at most); cores busy: the machine's CPU over the "
                  "run, every process (the writers, ZooKeeper, the file system).", ""]


def _pct(x: float | None) -> str:
    return "" if x is None else f"{100 * x:.0f} %"


def main(argv: list[str]) -> int:
    print(json.dumps(WORKERS[argv[0]](json.loads(argv[1]))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
