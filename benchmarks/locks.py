"""The storage lock beside the ZooKeeper lock (issue 47, goal 1): four writer processes take one
table's lock in turns on an S3 endpoint (moto's server on 127.0.0.1), each time incrementing a
counter object under it, on the same work for both locks.

Each holder records ``(asked, acquired, released)`` on the machine's monotonic clock (shared by
its processes): overlapping hold intervals and lost counter increments are counted, acquisitions
per second and the p50/p99 acquire latency reported.

    python -m benchmarks.locks worker ARGS_JSON   (one writer process; used by the section)
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROCESSES = 4


def storage_vs_zookeeper(size: dict, work: Path, spark=None) -> dict:
    import boto3
    from moto.server import ThreadedMotoServer

    import multiwriter as mw

    per = int(size["lock_acquisitions"]) // PROCESSES
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "bench",
           "AWS_SECRET_ACCESS_KEY": "bench", "AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    out: dict = {"processes": PROCESSES, "acquisitions": per * PROCESSES}
    try:
        client = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name="us-east-1")
        with mw.LocalZooKeeper(port=0) as zk:
            for kind in ("storage", "zookeeper"):
                bucket = f"bench-{uuid.uuid4().hex[:12]}"
                client.create_bucket(Bucket=bucket)
                client.put_object(Bucket=bucket, Key="counter", Body=b"0")
                args = {"kind": kind, "uri": f"s3://{bucket}/tbl", "bucket": bucket, "n": per, "zk": zk.connect,
                        "base": f"/bench-{uuid.uuid4().hex[:8]}"}
                out[kind] = _run(args, client)
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
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


def render(r: dict) -> list[str]:
    lines = [f"## Storage lock beside ZooKeeper ({r['processes']} writer processes, {r['acquisitions']:,} acquisitions "
             "in all, one S3 counter incremented under the lock; moto's S3 server on 127.0.0.1)", "",
             "The storage lock keeps no queue: waiters poll (every 10 ms here), so its p99 shows the waiters that "
             "lost several rounds in a row; ZooKeeper's waiters queue in order.", "",
             "| lock | acquisitions/s | acquire p50 ms | acquire p99 ms | overlapping holders | lost increments |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for kind in ("storage", "zookeeper"):
        v = r[kind]
        lines.append(f"| {kind} | {v['acquisitions_per_s']:.1f} | {v['acquire_p50_ms']:.1f} | {v['acquire_p99_ms']:.1f} | "
                     f"{v['overlaps']} | {v['lost_increments']} |")
    return lines + [""]


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "worker":
        print(json.dumps(worker(json.loads(sys.argv[2]))), flush=True)
        sys.exit(0)
    sys.exit(__doc__)
