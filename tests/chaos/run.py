"""The chaos run: >= 4 writer processes (two on overlapping keys, two on their own partitions)
and a cleaner process, with random crashes at random fault points, SIGSTOP pauses past the
heartbeat bound, and ZooKeeper restarts. Invariants are checked at the end, after a final clean.

``python -m tests.chaos.run --minutes 30`` (``make chaos``) runs rounds with fresh seeds until
time is up and prints the seed of any failure; the test suite runs one small seeded round.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from tests import faketime

ROOT = Path(__file__).resolve().parents[2]
WRITER_POINTS = ["after-requested", "after-inflight", "after-data-files", "after-lock-acquired", "before-complete",
                 "before-completed-file", "after-decision", "after-completed-file", "after-complete"]
#: the commit's steps under the lock, where a writer is frozen (SIGSTOP) in some runs: before its
#: decision it must not land, after it it lands once (rolled forward by the others)
FREEZE_POINTS = ["after-lock-acquired", "before-complete", "before-completed-file", "after-decision",
                 "after-completed-file"]
CLEANER_POINTS = ["mid-rollback", "mid-clean", "mid-clustering"]
#: Merge-on-Read rounds: compaction races the (non-blocking) writers instead of clustering
MOR_CLEANER_POINTS = ["mid-rollback", "mid-clean", "compaction-after-files", "compaction-before-complete"]
TABLE_TYPES = ("COPY_ON_WRITE", "MERGE_ON_READ")
ZOOKEEPERS = ("single", "ensemble")
#: the table lock of a round: ZooKeeper, or Hudi's storage lock object on S3 (moto's server)
LOCKS = ("zookeeper", "storage")
#: the storage lock's lease in a round: short, so pauses (3.5-14 s) outlast the fence's half of
#: it and the long ones the whole of it (another writer takes the lock over from the frozen one)
STORAGE_LOCK = {"validity_s": 6.0, "renew_interval_s": 1.0, "acquire_timeout_s": 20.0}
#: wall-clock offsets a skewed round gives its processes (the store keeps the real clock)
SKEWS_S = (-60.0, -30.0, 0.0, 30.0, 60.0)
SCHEMA = pa.schema([("id", pa.string()), ("date", pa.string()), ("ts", pa.int64()), ("tag", pa.string())])
WRITERS = {"hot-a": "hot", "hot-b": "hot", "own-c": "own", "own-d": "own"}


@dataclass
class Summary:
    seed: int
    batches: int = 0
    crashes: int = 0
    pauses: int = 0
    zk_restarts: int = 0
    rollbacks: int = 0
    clusterings: int = 0
    compactions: int = 0
    leader_kills: int = 0
    quorum_losses: int = 0
    table_type: str = "COPY_ON_WRITE"
    zookeeper: str = "single"  # "s3" when the round's lock is the storage lock
    kills: int = 0  # writers SIGKILLed at a random moment (storage-lock rounds)
    metadata: bool = False  # the table keeps Hudi's metadata table (files partition)
    skews: dict[str, float] = field(default_factory=dict)
    rounds_by: dict[str, int] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def line(self) -> str:
        skews = ",".join(f"{k}{v:+.0f}" for k, v in self.skews.items() if v) or "none"
        return (f"seed={self.seed} {self.table_type}{'+mdt' if self.metadata else ''} zk={self.zookeeper} skew={skews} "
                f"batches={self.batches} "
                f"crashes={self.crashes} kills={self.kills} pauses={self.pauses} zk_restarts={self.zk_restarts} "
                f"leader_kills={self.leader_kills} quorum_losses={self.quorum_losses} rollbacks={self.rollbacks} clusterings={self.clusterings} "
                f"compactions={self.compactions} violations={len(self.violations)} "
                f"({self.seconds:.0f}s)")


def _spawn(module: str, args: dict, faults: str | None, log, skew_s: float = 0.0,
           fault_dir: Path | None = None) -> subprocess.Popen:
    env = faketime.env(skew_s or None)
    if faults:
        env["MULTIWRITER_FAULTS"] = faults
        env["MULTIWRITER_FAULT_HANG_S"] = "5"
    if fault_dir is not None:
        fault_dir.mkdir(parents=True, exist_ok=True)
        for f in fault_dir.iterdir():
            f.unlink()
        env["MULTIWRITER_FAULT_DIR"] = str(fault_dir)
    return subprocess.Popen([sys.executable, "-m", module, json.dumps(args)], cwd=ROOT, env=env,
                            stdout=log, stderr=log)


def _fault(rng: random.Random, points: list[str], p: float) -> str | None:
    """A random rule: mostly crashes, some in-process errors (the writer carries on with the
    same batch), some hangs."""
    if rng.random() > p:
        return None
    r = rng.random()
    action = "crash" if r < 0.6 else "error" if r < 0.9 else "hang"
    return f"{rng.choice(points)}={action}@{rng.randint(1, 3)}"


def _writer_faults(rng: random.Random, p: float) -> str | None:
    """A random fault rule, and in a third of the runs a freeze at one of the commit's steps
    (a ``hang`` the round turns into a SIGSTOP pause, :func:`_freeze_hanging`)."""
    rules = [r for r in (_fault(rng, WRITER_POINTS, p),) if r]
    if rng.random() < 0.33:
        point = rng.choice(FREEZE_POINTS)
        rules = [r for r in rules if not r.startswith(point + "=")] + [f"{point}=hang@{rng.randint(1, 3)}"]
    return ",".join(rules) or None


def _freeze_hanging(procs: dict, dirs: dict, rng: random.Random, s: Summary) -> None:
    """A writer hanging at a commit step is frozen past its lock session or lease and its
    heartbeat bound, then thawed and released: the others must go on without it meanwhile."""
    for name, d in dirs.items():
        p = procs.get(name)
        hanging = sorted(d.glob("*.hanging")) if d.exists() else []
        if p is None or p.poll() is not None or not hanging:
            continue
        os.kill(p.pid, signal.SIGSTOP)
        time.sleep(_pause_s(rng))
        os.kill(p.pid, signal.SIGCONT)
        for h in hanging:
            h.with_suffix(".release").touch()
            h.unlink()
        s.pauses += 1


def _pause_s(rng: random.Random) -> float:
    """A GC-like pause past the heartbeat bound (3 s); every third one long enough for the cleaner
    to roll the frozen instant back and archive past it while it sleeps."""
    return 3.5 if rng.random() < 0.67 else rng.uniform(8.0, 14.0)


def _fail_over(ensemble, rng: random.Random, s: Summary) -> None:
    """Kill the leader (one time in four a follower too: the quorum is lost), wait, restart."""
    leader = ensemble.leader(timeout_s=10.0)
    if leader is None:
        return
    down = [leader]
    if rng.random() < 0.25:
        down.append(rng.choice([n for n in range(1, ensemble.size + 1) if n != leader]))
        s.quorum_losses += 1
    for n in down:
        ensemble.kill(n)
    s.leader_kills += 1
    time.sleep(rng.uniform(0.5, 4.0))
    for n in down:
        ensemble.start(n)


def run_round(seed: int, workdir: Path, batches: int = 8, max_seconds: float = 240.0,
              table_type: str | None = None, zookeeper: str | None = None, skew: bool | None = None,
              metadata: bool | None = None, lock: str | None = None) -> Summary:
    """One round; ``table_type`` None picks Copy-on-Write or Merge-on-Read (4 buckets,
    non-blocking writers, compaction in the cleaner) from the seed; ``lock`` None picks
    ZooKeeper or, one round in three, the storage lock on a table in S3 (moto's server: writers
    SIGKILLed at random moments instead of server restarts); ``zookeeper`` None picks one
    server (restarted) or, one round in three, a three-server ensemble (its leader killed, at
    times with a follower so the quorum is lost); ``skew`` (default on) shifts each process's
    wall clock by up to 60 s either way, on ZooKeeper rounds only: a lease in storage assumes
    clocks that agree to within its drift allowance, as Hudi's does."""
    import multiwriter as mw

    rng = random.Random(seed)
    table_type = table_type or rng.choice(TABLE_TYPES)
    mor = table_type == "MERGE_ON_READ"
    setup = random.Random(seed ^ 0x5EED)  # its own stream: the seeded rounds above stay as they were
    zookeeper = zookeeper or ("ensemble" if setup.random() < 1 / 3 else "single")
    lock = lock or ("storage" if random.Random(seed ^ 0x10C4).random() < 1 / 3 else "zookeeper")
    on_s3 = lock == "storage"
    if skew is None:
        skew = not on_s3
    skews = {name: setup.choice(SKEWS_S) if skew else 0.0 for name in [*WRITERS, "cleaner"]}
    if metadata is None:  # its own stream too: half the rounds keep Hudi's metadata table
        metadata = random.Random(seed ^ 0x3D7).random() < 0.5
    s = Summary(seed, table_type=table_type, zookeeper="s3" if on_s3 else zookeeper, skews=skews, metadata=metadata)
    t0 = time.monotonic()
    with contextlib.ExitStack() as stack:
        path = stack.enter_context(_s3_table(workdir)) if on_s3 else str(workdir / "table")
        _round(mw, s, rng, setup, path, workdir, batches, max_seconds, mor, metadata, on_s3, zookeeper, stack)
        check(path, workdir, batches, s)
    s.seconds = time.monotonic() - t0
    return s


@contextlib.contextmanager
def _s3_table(workdir: Path):
    """A fresh bucket on moto's S3 server (:class:`testbed.moto_s3.MotoS3`: the AWS variables point
    this process and its children at it while the round runs): the round's table URI."""
    from testbed.moto_s3 import MotoS3

    with MotoS3(prefix="chaos") as s3:
        yield f"{s3.bucket()}/table"


def _round(mw, s: Summary, rng: random.Random, setup: random.Random, path: str, workdir: Path, batches: int,
           max_seconds: float, mor: bool, metadata: bool, on_s3: bool, zookeeper: str,
           stack: contextlib.ExitStack) -> None:
    """Run the writers and the cleaner until every writer is done (or time is up), then one final clean."""
    from tests.chaos.writer import make_lock

    t0 = time.monotonic()
    skews = s.skews
    mw.Table.create(path, name="chaos", schema=SCHEMA, record_key="id", partition_by=["date"], ordering_field="ts",
                    table_type=s.table_type, num_buckets=4 if mor else None, metadata=metadata)
    cleaner_points = MOR_CLEANER_POINTS if mor else CLEANER_POINTS
    log = stack.enter_context(open(workdir / "processes.log", "a"))
    zk = None if on_s3 else stack.enter_context(
        mw.LocalZooKeeperEnsemble(3) if zookeeper == "ensemble" else mw.LocalZooKeeper(port=0))
    lock_spec = {"kind": "storage", **STORAGE_LOCK} if on_s3 else {"kind": "zookeeper", "zk": zk.connect, "base": "/chaos"}
    procs: dict[str, subprocess.Popen] = {}
    args = {w: dict(writer=w, mode=m, lock=lock_spec, path=path, batches=batches,
                    ledger=str(workdir / f"ledger-{w}.jsonl")) for w, m in WRITERS.items()}
    stop = workdir / "stop-cleaner"
    cl_args = dict(lock=lock_spec, path=path, stop=str(stop), compaction=mor)
    fault_dirs = {w: workdir / "faults" / w for w in WRITERS}
    for w in WRITERS:
        procs[w] = _spawn("tests.chaos.writer", args[w], _writer_faults(rng, 0.6), log, skews[w], fault_dirs[w])
    procs["cleaner"] = _spawn("tests.chaos.cleaner", cl_args, _fault(rng, cleaner_points, 0.5), log, skews["cleaner"])
    while time.monotonic() - t0 < max_seconds:
        time.sleep(0.5)
        done = True
        for name in list(procs):
            p = procs[name]
            rc = p.poll()
            if name == "cleaner":
                if rc is not None:
                    s.crashes += 1
                    procs[name] = _spawn("tests.chaos.cleaner", cl_args, _fault(rng, cleaner_points, 0.3), log,
                                         skews[name])
                continue
            if rc is None:
                done = False
                continue
            from tests.chaos.writer import acked

            if acked(args[name]["ledger"]) + 1 < batches:  # died before finishing: restart it
                s.crashes += 1
                done = False
                procs[name] = _spawn("tests.chaos.writer", args[name], _writer_faults(rng, 0.4), log,
                                     skews[name], fault_dirs[name])
        if done:
            break
        _freeze_hanging(procs, fault_dirs, rng, s)
        r = rng.random()
        if r < 0.02 and on_s3:  # a holder (or a waiter) killed outright: its lease must run out
            victim = procs[rng.choice(list(WRITERS))]
            if victim.poll() is None:
                victim.kill()
                s.kills += 1
        elif r < 0.02:
            if zookeeper == "ensemble":
                _fail_over(zk, setup, s)
            else:
                zk.restart()
                s.zk_restarts += 1
        elif r < 0.04:
            victim = procs[rng.choice(list(WRITERS))]
            if victim.poll() is None:  # a GC pause longer than the heartbeat bound
                os.kill(victim.pid, signal.SIGSTOP)
                time.sleep(_pause_s(rng))
                os.kill(victim.pid, signal.SIGCONT)
                s.pauses += 1
    stop.touch()
    for name, p in procs.items():
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            if name != "cleaner":
                s.violations.append(f"writer {name} did not finish its {batches} batches in time")
    time.sleep(3.5)  # let every dead writer's heartbeat lapse, then one final clean
    lock = make_lock(lock_spec)
    # the companion job's own retention (tests/chaos/cleaner.py): a clean it left half done
    # (a fault mid-clean) is resumed; a cleaner keeping more commits refuses that plan
    # (retention.check_plan) and the final run ends in an error
    final = mw.Cleaner(path, lock=lock, heartbeat_interval_s=1.0, heartbeat_tolerable_misses=2, retain_commits=3,
                       failed_write_min_age_bounds=1.0)
    final.run_once()
    lock.close()


def check(path: str, workdir: Path, batches: int, s: Summary) -> None:
    """The invariants of the RFC's promise."""
    import multiwriter as mw
    from multiwriter.cleaner.archive import load_history
    from multiwriter.schema_resolution import history_violations
    from multiwriter.table import metadata_files
    from multiwriter.table.files import list_files
    from multiwriter.format.layout import parse_data_file
    from multiwriter.format.log_file import parse_log_file
    from multiwriter.table.view import TimelineView
    from multiwriter.transaction import CHECKPOINT_KEY, WRITER_KEY
    from tests.oracle import hudi_read, rows, s3_storage_options

    t = mw.Table.open(path)
    tl = t.timeline()
    metas = [tl.commit_metadata(i) for i in tl.completed_writes()]
    metas += [m for m in (a.commit_metadata() for a in load_history(t)) if m is not None]  # archived
    committed: dict[str, int] = {}
    for meta in metas:
        cp, w = meta.extra_metadata.get(CHECKPOINT_KEY), meta.extra_metadata.get(WRITER_KEY)
        if cp and w in WRITERS:  # every commit carries all checkpoints forward; its own is its writer's
            key = f"{w}:{json.loads(cp)[w]}"
            committed[key] = committed.get(key, 0) + 1
    s.batches = sum(committed.values())
    s.clusterings = len(tl.completed(frozenset({"replacecommit"}))) + sum(
        1 for a in load_history(t) if a.action == "replacecommit" and a.completion_time)
    s.rollbacks = len(tl.completed(frozenset({"rollback"}))) + sum(
        1 for a in load_history(t) if a.action == "rollback" and a.completion_time)
    s.compactions = sum(1 for m in metas if m.compacted)
    for key, n in committed.items():
        if n != 1:
            s.violations.append(f"batch {key} committed {n} times")
    for w in WRITERS:
        ledger = workdir / f"ledger-{w}.jsonl"
        for line in ledger.read_text().splitlines() if ledger.exists() else []:
            b = json.loads(line)["batch"]
            if f"{w}:{b}" not in committed:
                s.violations.append(f"acknowledged batch {w}:{b} is not on the timeline")
    ours = t.read()
    done = {i.requested_time for i in tl.completed_writes()} | {
        a.requested_time for a in load_history(t) if a.completion_time}
    for ct in set(ours.column("_hoodie_commit_time").to_pylist()) - done:
        s.violations.append(f"rows written by instant {ct}, which never completed, are visible")
    for tag in set(ours.column("tag").to_pylist()):
        if tag not in committed:
            s.violations.append(f"rows of uncommitted batch {tag} are visible")
    if ours.num_rows != len(set(ours.column("_hoodie_record_key").to_pylist())):
        s.violations.append(f"duplicate record keys in the snapshot: {duplicates(ours)}")
    # after the final clean (heartbeats lapsed, failed writes swept) every data file on storage
    # belongs to a completed commit, active or archived: zombies and retried attempts left nothing
    listed = {st.path for meta in metas for st in meta.all_stats()}
    for e in t.storage.walk_files(""):
        if e.path.startswith(".hoodie/"):  # the metadata table's own files are not the table's data
            continue
        name = e.path.rsplit("/", 1)[-1]
        if (parse_data_file(name) or parse_log_file(name)) and e.path not in listed:
            s.violations.append(f"data file {e.path} is referenced by no completed instant")
    if t.config.merge_on_read:
        s.violations += event_time_violations(ours, metas, tl, load_history(t))
    s.violations += [f"schema: {v}" for v in history_violations(tl)]
    for p in tl.pending():
        s.violations.append(f"pending instant {p} left behind by a dead writer")
    if rows(ours, ["id", "tag"]) != rows(hudi_read(path, storage_options=s3_storage_options(path)), ["id", "tag"]):
        s.violations.append("hudi-rs and our reader disagree")
    if metadata_files.enabled(t.config):
        view = TimelineView(tl).with_history()
        bases, logs = list_files(t.storage)
        committed = {(f.partition, f.name) for f in [*bases, *logs] if view.committed(f.instant_time)}
        listed_mdt = {(p, n) for p, names in metadata_files.MetadataTable(t.storage, t.config).listing().items()
                      for n in names}
        for p, n in sorted(committed ^ listed_mdt)[:20]:
            where = "on storage, not in" if (p, n) in committed else "in, not on storage but in"
            s.violations.append(f"metadata table: {p}/{n} is {where} the metadata table's listing")


def duplicates(t: pa.Table, most: int = 5) -> list[dict]:
    """Rows of keys the snapshot shows more than once: which commit and file wrote each, and
    which batch (its tag), for the record of a violation."""
    import collections

    import pyarrow.compute as pc

    counts = collections.Counter(t.column("_hoodie_record_key").to_pylist())
    keys = [k for k, n in counts.items() if n > 1][:most]
    dup = t.filter(pc.is_in(t.column("_hoodie_record_key"), value_set=pa.array(keys, pa.string())))
    return dup.select(["_hoodie_record_key", "_hoodie_commit_time", "_hoodie_file_name", "tag"]).to_pylist()


def event_time_violations(ours: pa.Table, metas: list, tl, history: list) -> list[str]:
    """Non-blocking writers: per key, the committed version with the highest ordering value
    (ties to the later completion) is the one visible; a key no committed batch wrote is absent."""
    from multiwriter.transaction import CHECKPOINT_KEY, WRITER_KEY
    from tests.chaos.writer import batch_rows

    commits = [(i.completion_time or i.requested_time, tl.commit_metadata(i)) for i in tl.completed_writes()]
    active = {i.requested_time for i in tl.completed_writes()}
    commits += [(a.completion_time, a.commit_metadata()) for a in history
                if a.completion_time and a.requested_time not in active and a.action in ("commit", "deltacommit")]
    best: dict[str, tuple[int, str, str]] = {}
    for done, meta in commits:
        if meta is None:
            continue
        cp, w = meta.extra_metadata.get(CHECKPOINT_KEY), meta.extra_metadata.get(WRITER_KEY)
        if not cp or w not in WRITERS:
            continue
        b = int(json.loads(cp)[w])
        rows_ = batch_rows(w, WRITERS[w], b)
        for key, ts in zip(rows_.column("id").to_pylist(), rows_.column("ts").to_pylist(), strict=True):
            cand = (ts, done, f"{w}:{b}")
            if key not in best or cand[:2] > best[key][:2]:
                best[key] = cand
    got = dict(zip(ours.column("id").to_pylist(), ours.column("tag").to_pylist(), strict=True))
    out = [f"key {k}: visible {got.get(k)!r}, the event-time model says {v[2]!r}" for k, v in best.items() if got.get(k) != v[2]]
    out += [f"key {k} is visible but no committed batch wrote it" for k in got if k not in best and metas]
    return out[:20]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="make chaos")
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--batches", type=int, default=25)
    p.add_argument("--table-type", choices=TABLE_TYPES, default=None, help="default: chosen per round from its seed")
    p.add_argument("--zookeeper", choices=ZOOKEEPERS, default=None,
                   help="default: chosen per round from its seed (a three-server ensemble one round in three)")
    p.add_argument("--no-skew", action="store_true", help="leave every process on the real clock")
    p.add_argument("--lock", choices=LOCKS, default=None,
                   help="default: chosen per round from its seed (the storage lock on S3 one round in three)")
    a = p.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    deadline = time.monotonic() + a.minutes * 60
    seed = a.seed if a.seed is not None else random.randrange(1 << 30)
    totals = Summary(seed=-1)
    rounds = 0
    while True:
        d = tempfile.mkdtemp(prefix="mw-chaos-")
        try:
            s = run_round(seed, Path(d), batches=a.batches, max_seconds=600, table_type=a.table_type,
                          zookeeper=a.zookeeper, skew=False if a.no_skew else None, lock=a.lock)
        except BaseException:  # the round itself broke: say which, and keep what it left
            print(f"  round of seed {seed} raised; kept for a look: {d}", flush=True)
            raise
        rounds += 1
        print(s.line(), flush=True)
        for v in s.violations:
            print(f"  VIOLATION (seed {seed}): {v}", flush=True)
        if s.violations:  # the table, the ledgers and the processes' log stay for a look
            print(f"  kept for a look: {d}", flush=True)
        else:
            shutil.rmtree(d, ignore_errors=True)
        totals.rounds_by[s.zookeeper] = totals.rounds_by.get(s.zookeeper, 0) + 1
        if any(s.skews.values()):
            totals.rounds_by["skewed"] = totals.rounds_by.get("skewed", 0) + 1
        for f in ("batches", "crashes", "kills", "pauses", "zk_restarts", "leader_kills", "quorum_losses", "rollbacks",
                  "clusterings", "compactions"):
            setattr(totals, f, getattr(totals, f) + getattr(s, f))
        totals.violations += s.violations
        if a.seed is not None or time.monotonic() > deadline:
            break
        seed = random.randrange(1 << 30)
    kinds = ", ".join(f"{k}={v}" for k, v in sorted(totals.rounds_by.items()))
    print(f"chaos: {rounds} rounds ({kinds}), batches={totals.batches} crashes={totals.crashes} kills={totals.kills} pauses={totals.pauses} "
          f"zk_restarts={totals.zk_restarts} leader_kills={totals.leader_kills} quorum_losses={totals.quorum_losses} "
          f"rollbacks={totals.rollbacks} clusterings={totals.clusterings} "
          f"compactions={totals.compactions} violations={len(totals.violations)}")
    return 1 if totals.violations else 0


if __name__ == "__main__":
    sys.exit(main())
