"""The storage lock beside the ZooKeeper lock: four writer processes take one table's lock in
turns on an S3 endpoint (moto's server on 127.0.0.1), each time incrementing a counter object
under it, on the same work for both locks.

Each holder records ``(asked, acquired, released)`` on the machine's monotonic clock (shared by
its processes): overlapping hold intervals and lost counter increments are counted, acquisitions
per second and the p50/p99 acquire latency reported.

Then the storage lock's two failure cases, a few trials each: a holder SIGKILLed with the lock
(how long until another writer has it, against the lease plus one renew interval), and a
writer frozen (SIGSTOP) inside its commit's lock hold past its lease while another writer
commits (its commit must be refused, none of its rows visible to hudi-rs).

    python -m benchmarks.locks worker ARGS_JSON   (one writer process; used by the section)
    python -m benchmarks.locks hold ARGS_JSON     (a holder that waits to be killed)
    python -m benchmarks.locks write ARGS_JSON    (a writer that commits one batch)
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROCESSES = 4


def storage_vs_zookeeper(size: dict, work: Path, spark=None) -> dict:
    import multiwriter as mw
    from testbed.moto_s3 import MotoS3

    per = int(size["lock_acquisitions"]) // PROCESSES
    out: dict = {"processes": PROCESSES, "acquisitions": per * PROCESSES}
    with MotoS3(prefix="bench") as s3, mw.LocalZooKeeper(port=0) as zk:
        client = s3.client
        for kind in ("storage", "zookeeper"):
            bucket = s3.bucket()[len("s3://"):]
            client.put_object(Bucket=bucket, Key="counter", Body=b"0")
            args = {"kind": kind, "uri": f"s3://{bucket}/tbl", "bucket": bucket, "n": per, "zk": zk.connect,
                    "base": f"/bench-{uuid.uuid4().hex[:8]}"}
            out[kind] = _run(args, client)
        out["takeover"] = _takeovers(s3, int(size["lock_failure_trials"]))
        out["frozen"] = _frozen_writers(s3, work, int(size["lock_failure_trials"]))
    return out


def _run(args: dict, client) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = [subprocess.Popen([sys.executable, "-m", "benchmarks.locks", "worker", json.dumps({**args, "writer": f"w{i}"})],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(PROCESSES)]
    spans: list[tuple[float, float, float]] = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=3600)
        if p.returncode != 0:
            raise RuntimeError(f"lock benchmark worker failed:\n{stderr[-3000:]}")
        spans += [tuple(x) for x in json.loads(stdout.strip().splitlines()[-1])]
    spans.sort(key=lambda x: x[1])
    overlaps = sum(1 for a, b in zip(spans, spans[1:], strict=False) if b[1] < a[2])
    counter = int(client.get_object(Bucket=args["bucket"], Key="counter")["Body"].read())
    waits = sorted(acq - asked for asked, acq, _ in spans)
    wall = max(x[2] for x in spans) - min(x[0] for x in spans)
    return {"acquisitions": len(spans), "overlaps": overlaps, "lost_increments": len(spans) - counter,
            "acquisitions_per_s": len(spans) / wall, "acquire_p50_ms": 1000 * _pct(waits, 0.50),
            "acquire_p99_ms": 1000 * _pct(waits, 0.99), "wall_s": wall}


def _pct(xs: list[float], q: float) -> float:
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def worker(a: dict) -> list[tuple[float, float, float]]:
    """One writer: ``n`` times take the lock, read-modify-write the counter object, fence, release."""
    from multiwriter.lock import HolderInfo, StorageLock, ZooKeeperLock
    from multiwriter.lock.storage import s3_client
    from multiwriter.storage import Storage

    if a["kind"] == "storage":
        provider = StorageLock(validity_s=30, renew_interval_s=5, poll_s=0.01)
    else:
        provider = ZooKeeperLock(connect=a["zk"], base_path=a["base"])
    lock = provider.for_table("tbl", Storage(a["uri"]))
    s3 = s3_client(5.0)
    holder = HolderInfo.current(a["writer"])
    spans = []
    for _ in range(a["n"]):
        asked = time.monotonic()
        lock.acquire(timeout_s=300, holder=holder)
        acquired = time.monotonic()
        n = int(s3.get_object(Bucket=a["bucket"], Key="counter")["Body"].read())
        s3.put_object(Bucket=a["bucket"], Key="counter", Body=str(n + 1).encode())
        lock.check()
        released = time.monotonic()
        lock.release()
        spans.append((asked, acquired, released))
    provider.close()
    return spans


#: the lease of the failure trials: short enough to wait out a few times, Hudi's ratio of renewals
TRIAL_VALIDITY_S, TRIAL_RENEW_S = 6.0, 1.0


def _child(mode: str, args: dict, **env: str) -> subprocess.Popen:
    e = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), **env)
    return subprocess.Popen([sys.executable, "-m", "benchmarks.locks", mode, json.dumps(args)], cwd=ROOT, env=e,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _takeovers(s3, trials: int) -> dict:
    """A holder SIGKILLed at a random moment of its renewal cycle: seconds until a waiter has
    the lock (the waiter polls from the moment of the kill)."""
    import random
    import signal

    from multiwriter.lock import StorageLock
    from multiwriter.storage import Storage

    took = []
    for _ in range(trials):
        uri = f"{s3.bucket()}/tbl"
        proc = _child("hold", {"uri": uri})
        if proc.stdout.readline().strip() != "held":
            raise RuntimeError(f"holder did not take the lock: {proc.communicate(timeout=30)[1][-2000:]}")
        time.sleep(TRIAL_RENEW_S * (2 + random.random()))  # renewals landed; killed anywhere in a cycle
        os.kill(proc.pid, signal.SIGKILL)
        killed = time.monotonic()
        proc.communicate(timeout=30)
        lock = StorageLock(validity_s=TRIAL_VALIDITY_S, renew_interval_s=TRIAL_RENEW_S, poll_s=0.02).for_table(
            "tbl", Storage(uri))
        lock.acquire(timeout_s=60)
        took.append(time.monotonic() - killed)
        lock.release()
    return {"validity_s": TRIAL_VALIDITY_S, "renew_interval_s": TRIAL_RENEW_S, "took_s": took, "max_s": max(took),
            "bound_s": TRIAL_VALIDITY_S + TRIAL_RENEW_S}


def _frozen_writers(s3, work: Path, trials: int) -> dict:
    """A writer frozen past its lease inside its commit's lock hold while another commits:
    refused commits, and rows of the frozen writer that hudi-rs shows."""
    import signal

    import pyarrow as pa

    import multiwriter as mw
    from multiwriter.lock import StorageLock

    refused, visible, live_rows = 0, 0, 0
    for t in range(trials):
        uri = f"{s3.bucket()}/trips"
        schema = pa.schema([("id", pa.string()), ("ts", pa.int64()), ("who", pa.string())])
        mw.Table.create(uri, name="trips", schema=schema, record_key="id", ordering_field="ts", lock=StorageLock())
        faults = work / f"frozen-{t}"
        faults.mkdir(parents=True, exist_ok=True)
        proc = _child("write", {"uri": uri, "who": "frozen", "ids": ["1", "2", "3"]},
                      MULTIWRITER_FAULTS="after-lock-acquired=hang", MULTIWRITER_FAULT_DIR=str(faults),
                      MULTIWRITER_FAULT_HANG_S="600")
        deadline = time.monotonic() + 120
        while not (faults / "after-lock-acquired.hanging").exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"frozen writer never reached its lock hold: {proc.communicate(timeout=30)[1][-2000:]}")
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            cfg = mw.WriterConfig(writer_id="live", executor="driver",
                                  lock=StorageLock(validity_s=TRIAL_VALIDITY_S, renew_interval_s=TRIAL_RENEW_S))
            mw.write(pa.table({"id": ["3", "4"], "ts": pa.array([1, 1], pa.int64()), "who": ["live", "live"]}), uri, cfg)
            (faults / "after-lock-acquired.release").touch()
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        out, err = proc.communicate(timeout=120)
        refused += out.startswith("refused")
        seen = _hudi_rs(uri)
        visible += sum(1 for w in seen.column("who").to_pylist() if w == "frozen")
        live_rows += seen.num_rows
    return {"trials": trials, "refused": refused, "frozen_rows_visible": visible, "live_rows": live_rows,
            "expected_live_rows": 2 * trials}


def _hudi_rs(uri: str):
    import pyarrow as pa
    from hudi import HudiTableBuilder

    ep = os.environ["AWS_ENDPOINT_URL"]
    ht = HudiTableBuilder.from_base_uri(uri).with_storage_options({
        "aws_endpoint_url": ep, "aws_access_key_id": os.environ["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": os.environ["AWS_SECRET_ACCESS_KEY"], "aws_region": "us-east-1",
        "aws_allow_http": "true"}).build()
    batches = ht.read()
    return pa.Table.from_batches(batches) if batches else pa.table({"who": pa.array([], pa.string())})


def hold(a: dict) -> None:
    """Take the lock, say so, then wait (renewing) until killed."""
    from multiwriter.lock import StorageLock
    from multiwriter.storage import Storage

    lock = StorageLock(validity_s=TRIAL_VALIDITY_S, renew_interval_s=TRIAL_RENEW_S).for_table("tbl", Storage(a["uri"]))
    lock.acquire(timeout_s=60)
    print("held", flush=True)
    time.sleep(3600)


def write(a: dict) -> None:
    """Commit one batch under the storage lock, no retry (a refused attempt would otherwise be
    retried as a new commit, legitimately); say whether the commit was refused."""
    import pyarrow as pa

    import multiwriter as mw
    from multiwriter.errors import MultiWriterError
    from multiwriter.lock import StorageLock

    cfg = mw.WriterConfig(writer_id=a["who"], executor="driver", max_conflict_retries=0,
                          lock=StorageLock(validity_s=TRIAL_VALIDITY_S, renew_interval_s=TRIAL_RENEW_S))
    rows = pa.table({"id": a["ids"], "ts": pa.array([2] * len(a["ids"]), pa.int64()), "who": [a["who"]] * len(a["ids"])})
    try:
        mw.write(rows, a["uri"], cfg)
    except MultiWriterError as e:
        print(f"refused {type(e).__name__}: {e}", flush=True)
    else:
        print("committed", flush=True)


def render(r: dict) -> list[str]:
    lines = [f"## Storage lock beside ZooKeeper ({r['processes']} writer processes, {r['acquisitions']:,} acquisitions "
             "in all, one S3 counter incremented under the lock; moto's S3 server on 127.0.0.1)", "",
             "The storage lock keeps no queue: waiters poll (every 10 ms here) and writers take turns (a writer "
             "that releases while others wait leaves the lock free for their next look), so its p99 shows the "
             "waiters that still lost several rounds in a row; ZooKeeper's waiters queue in order.", "",
             "| lock | acquisitions/s | acquire p50 ms | acquire p99 ms | overlapping holders | lost increments |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for kind in ("storage", "zookeeper"):
        v = r[kind]
        lines.append(f"| {kind} | {v['acquisitions_per_s']:.1f} | {v['acquire_p50_ms']:.1f} | {v['acquire_p99_ms']:.1f} | "
                     f"{v['overlaps']} | {v['lost_increments']} |")
    if "takeover" in r:
        k = r["takeover"]
        lines += ["", f"A holder SIGKILLed with the lock ({len(k['took_s'])} trials, lease {k['validity_s']:.0f} s renewed "
                  f"every {k['renew_interval_s']:.0f} s): another writer had it after "
                  + ", ".join(f"{x:.2f}" for x in k["took_s"]) + f" s (max {k['max_s']:.2f} s; bound: lease + one renew "
                  f"interval = {k['bound_s']:.0f} s)."]
    if "frozen" in r:
        f = r["frozen"]
        lines += ["", f"A writer frozen (SIGSTOP) in its commit's lock hold past its lease while another commits "
                  f"({f['trials']} trials): {f['refused']} of {f['trials']} resumed commits refused, "
                  f"{f['frozen_rows_visible']} of its rows visible to hudi-rs, {f['live_rows']} of "
                  f"{f['expected_live_rows']} rows of the live writer visible."]
    return lines + [""]


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] in ("worker", "hold", "write"):
        mode, arg = sys.argv[1], json.loads(sys.argv[2])
        if mode == "worker":
            print(json.dumps(worker(arg)), flush=True)
        else:
            {"hold": hold, "write": write}[mode](arg)
        sys.exit(0)
    sys.exit(__doc__)
