"""Liveness under clock skew, with real processes.

Writers, the companion cleaner and the store disagree about the time by 60 s or more (a shim
shifts one process's Python wall clock, see tests/faketime.py; file times stay on the real
clock, as on a shared store). The cleaner must roll back no live instant (one writer holds every batch in
flight longer than its heartbeat bound) and still roll back a SIGKILLed writer within its bound
plus the cleaner's interval plus one observation interval.

Short runs (about 15 s each) in ``make test``; ``MW_SKEW_RUN_S=600`` makes the same run last ten
minutes (the issue's long run, recorded in docs/cleaner.md); the chaos run skews its processes too.

The second half: a cleaner given no heartbeat settings judges each writer by the settings its
beats record: a dead writer beating every second is reclaimed in about 3 s, a live one beating
every 60 s (whose last beat looks 50 s old by every wall clock) is left alone.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import multiwriter as mw
from multiwriter.cleaner.archive import load_history
from multiwriter.heartbeat.client import is_lapsed
from multiwriter.heartbeat.judge import read_beat
from multiwriter.format import instant as inst
from multiwriter.format import layout
from multiwriter.transaction import Transaction
from tests.cleaner.conftest import rollbacks
from tests.conftest import trips
from tests.faketime import env, works

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX signals")

ROOT = Path(__file__).resolve().parents[1]
HB, MISSES = 1.0, 1  # the writers' heartbeats in the skew runs: bound 2 s
BOUND = HB * (MISSES + 1)
CLEAN_EVERY = 0.5  # the companion's interval between runs
RUN_S = float(os.environ.get("MW_SKEW_RUN_S", "11"))  # how long the two live writers run

# A writer: upserts into its own partition for ``seconds``; with ``hold_s`` every batch stays in
# flight that long after writing its data files (its heartbeat beating meanwhile); with
# ``MULTIWRITER_FAULTS`` set it hangs once (the victim, SIGKILLed by the test).
WRITER = r"""
import json, os, sys, time
import pyarrow as pa
import multiwriter as mw
from multiwriter import faults

a = json.loads(sys.argv[1])
cfg = mw.WriterConfig(writer_id=a["writer"], lock=mw.ZooKeeperLock(connect=a["zk"], base_path=a["base"]),
                      executor="driver", heartbeat_interval_s=a["hb"], heartbeat_tolerable_misses=a["misses"])
end = time.monotonic() + a["seconds"]
n = 0
while n == 0 or time.monotonic() < end:
    n += 1
    if a.get("hold_s"):
        os.environ["MULTIWRITER_FAULT_HANG_S"] = str(a["hold_s"])
        faults.configure("after-data-files=hang")
    batch = pa.table({"id": [f"{a['writer']}-{i}" for i in range(5)], "date": [a["date"]] * 5,
                      "ts": pa.array([n] * 5, pa.int64()), "value": [float(n)] * 5})
    r = mw.write(batch, a["path"], cfg)
    print(json.dumps({"instant": r.instant.requested_time}), flush=True)
"""


@pytest.fixture(scope="module")
def faketime() -> None:
    why = works()
    if why is not None:
        pytest.skip(why)


class Drained(subprocess.Popen):
    """A child whose output is read as it comes (a ten-minute run prints more than a pipe holds)."""

    def __init__(self, cmd: list[str], **kw) -> None:
        super().__init__(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
        self._got: dict[str, list[str]] = {"out": [], "err": []}
        self._readers = [threading.Thread(target=self._drain, args=(f, self._got[k]), daemon=True)
                         for k, f in (("out", self.stdout), ("err", self.stderr))]
        for t in self._readers:
            t.start()

    @staticmethod
    def _drain(f, into: list[str]) -> None:
        for line in f:
            into.append(line)

    def err_so_far(self) -> str:
        return "".join(self._got["err"])

    def communicate(self, input=None, timeout=None) -> tuple[str, str]:  # noqa: A002 - Popen's signature
        self.wait(timeout)
        for t in self._readers:
            t.join(10)
        return "".join(self._got["out"]), "".join(self._got["err"])


def spawn_writer(args: dict, skew_s: float, **extra: str) -> Drained:
    return Drained([sys.executable, "-c", WRITER, json.dumps(args)], env=env(skew_s, **extra), cwd=str(ROOT))


def spawn_cleaner(table_path: str, zk_server, zk_base: str, skew_s: float) -> Drained:
    """The companion: one Cleaner object running every CLEAN_EVERY seconds, no heartbeat settings."""
    cmd = [sys.executable, "-m", "multiwriter.cli.cleaner", table_path, "--zk", zk_server.connect, "--zk-base-path",
           zk_base, "--interval", str(CLEAN_EVERY), "--no-clustering", "--no-compaction"]
    return Drained(cmd, env=env(skew_s), cwd=str(ROOT))


def wait_for(cond, timeout: float, what: str, step: float = 0.02):
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(step)


def pending_of(table: mw.Table, writer: str) -> str | None:
    for i in table.timeline().pending():
        if read_beat(table.storage, i.requested_time).writer_id == writer:
            return i.requested_time
    return None


def rolled_back(table: mw.Table) -> set[str]:
    """Every instant a completed rollback targeted, on the active timeline or archived (a
    ten-minute run archives as it goes)."""
    from multiwriter.table.metadata import decode_records

    out = set(rollbacks(table))
    for a in load_history(table):
        data = a.completed_bytes() if a.action == inst.ROLLBACK else None
        if data:
            out.update(decode_records(data, source=a.instant.file_name())[0]["commitsRollback"])
    return out


def is_pending(table: mw.Table, t: str) -> bool:
    return any(i.requested_time == t and i.is_pending for i in table.timeline().instants)


def kill(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.kill()
    p.wait(30)


def args_for(table_path: str, zk_server, zk_base: str, writer: str, date: str, **kw) -> dict:
    return dict(path=table_path, zk=zk_server.connect, base=zk_base, writer=writer, date=date, hb=HB, misses=MISSES, **kw)


#: ``make test`` runs the companion job ahead of every writer; ``MW_FULL_MATRIX=1`` (``make
#: test-full``) also behind them
SKEWS = [pytest.param(60.0, (-60.0, 0.0), id="cleaner-ahead-by-60-and-120s")] + \
    ([pytest.param(-60.0, (60.0, 0.0), id="cleaner-behind-by-60-and-120s")] if os.environ.get("MW_FULL_MATRIX") == "1"
     else [])


@pytest.mark.parametrize("cleaner_skew,writer_skews", SKEWS)
def test_skewed_clocks_roll_back_no_live_writer_and_still_reclaim_a_killed_one(
    faketime, zk_server, zk_base, trips_table, table_path, tmp_path, cleaner_skew, writer_skews
):
    fast_skew, slow_skew = writer_skews  # the store's clock is the real one
    mw.write(trips(range(3), date="2024-01-09"), table_path, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="seed"))
    table = mw.Table.open(table_path)
    cleaner = spawn_cleaner(table_path, zk_server, zk_base, cleaner_skew)
    fast = spawn_writer(args_for(table_path, zk_server, zk_base, "fast", "2024-01-01", seconds=RUN_S), fast_skew)
    slow = spawn_writer(args_for(table_path, zk_server, zk_base, "slow", "2024-01-02", seconds=RUN_S,
                                 hold_s=2.5 * BOUND), slow_skew)  # every batch in flight for 5 s, bound 2 s
    procs = [cleaner, fast, slow]
    try:
        time.sleep(4.0)
        faults_dir = tmp_path / "faults"
        faults_dir.mkdir()
        victim = spawn_writer(args_for(table_path, zk_server, zk_base, "victim", "2024-01-03", seconds=0.0), fast_skew,
                              MULTIWRITER_FAULTS="after-data-files=hang", MULTIWRITER_FAULT_DIR=str(faults_dir))
        procs.append(victim)
        wait_for(lambda: (faults_dir / "after-data-files.hanging").exists(), 60, "the victim to hold its batch")
        try:
            t_victim = wait_for(lambda: pending_of(table, "victim"), 10, "the victim's pending instant")
        except AssertionError:
            cleaner.send_signal(signal.SIGTERM)
            print("CLEANER", cleaner.communicate(timeout=30))
            print("ROLLBACKS", rollbacks(table))
            raise
        time.sleep(1.5)  # the companion has seen it beat
        assert is_pending(table, t_victim), (
            f"a live writer's instant was rolled back: {rollbacks(table)} {victim.poll()} {victim.err_so_far()[-3000:]}"
            f"{[str(i) for i in table.timeline().instants if i.requested_time == t_victim]}")
        victim.kill()
        killed = time.monotonic()
        try:
            wait_for(lambda: not is_pending(table, t_victim), 30, "the killed writer's rollback", step=0.01)
        except AssertionError:
            cleaner.send_signal(signal.SIGTERM)
            o, e = cleaner.communicate(timeout=30)
            print("CLEANER", o[-3000:], e[-5000:])
            raise
        reclaimed_s = time.monotonic() - killed
        outs = {}
        for name, p in (("fast", fast), ("slow", slow)):
            out, err = p.communicate(timeout=RUN_S + 90)
            assert p.returncode == 0, f"{name} failed: {err[-3000:]}"
            outs[name] = [json.loads(line)["instant"] for line in out.splitlines() if line.startswith("{")]
        cleaner.send_signal(signal.SIGTERM)
        c_out, c_err = cleaner.communicate(timeout=60)
    finally:
        for p in procs:
            kill(p)
    assert cleaner.returncode == 0, c_err[-3000:]
    assert len(outs["slow"]) >= 2 and len(outs["fast"]) >= 5, outs
    table = mw.Table.open(table_path)
    done = {i.requested_time for i in table.timeline().completed_writes()} | {
        a.requested_time for a in load_history(table)}  # the companion archives as it goes
    assert set(outs["fast"]) | set(outs["slow"]) <= done, "every batch of the live writers committed"
    assert rolled_back(table) == {t_victim}, "no live instant rolled back, the killed one was"
    # bound + the cleaner's interval + one observation interval, where an interval is the wait
    # between runs plus the run itself (the report's "in X.XXs")
    runs = [float(m) for m in re.findall(r" in ([0-9.]+)s$", c_out, re.M)][1:]  # the first one observed
    period = CLEAN_EVERY + max(runs)
    limit = BOUND + 2 * period
    print(f"[{cleaner_skew:+.0f}s] killed writer reclaimed in {reclaimed_s:.2f}s (bound {BOUND}s, {len(runs)} cleaner "
          f"runs, longest {max(runs):.2f}s, limit {limit:.2f}s); {len(outs['fast'])} + {len(outs['slow'])} batches committed")
    assert reclaimed_s <= limit + 0.2, f"reclaimed after {reclaimed_s:.2f}s"
    assert "clock skew" in c_err, "the companion warns about the skewed writers"


# -- a cleaner with no heartbeat settings ---------------------------------------------------------

BEATER = r"""
import sys, time
from multiwriter.heartbeat import HeartbeatClient
from multiwriter.storage import Storage

root, t, interval, behind = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
hb = HeartbeatClient(Storage(root), writer_id="slow-beater", interval_s=interval, tolerable_misses=2,
                     clock=lambda: time.time() - behind)
hb.start(t)
print("started", flush=True)
sys.stdin.readline()
hb.close()
"""


def test_a_cleaner_without_heartbeat_settings_judges_each_writer_by_its_own(zk_server, zk_base, zk_lock, trips_table,
                                                                              table_path, tmp_path):
    mw.write(trips(range(3)), table_path, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="seed"))
    table = mw.Table.open(table_path)

    def victim(name: str) -> tuple[Drained, str]:
        d = tmp_path / name
        d.mkdir()
        a = dict(path=table_path, zk=zk_server.connect, base=zk_base, writer=name, date="2024-01-05", hb=1.0, misses=2,
                 seconds=0.0)  # beats every second, bound 3 s
        p = spawn_writer(a, 0.0, MULTIWRITER_FAULTS="after-data-files=hang", MULTIWRITER_FAULT_DIR=str(d))
        wait_for(lambda: (d / "after-data-files.hanging").exists(), 60, f"{name} to hold its batch")
        return p, wait_for(lambda: pending_of(table, name), 10, f"{name}'s pending instant")

    # a companion (one cleaner across runs) that knew the writer alive
    with mw.Cleaner(table_path, lock=zk_lock(), clustering=None, compaction=None) as companion:
        p, t = victim("dead-1")
        try:
            assert companion.run_once().rolled_back == [], "seen beating: alive"
            p.kill()
            killed = time.monotonic()
            while t not in companion.run_once().rolled_back:
                assert time.monotonic() - killed < 15, "not reclaimed"
                time.sleep(CLEAN_EVERY)
            companion_s = time.monotonic() - killed
        finally:
            kill(p)
    # a one-shot cleaner (`multiwriter clean --once`): its first run watches until it can decide
    p, t2 = victim("dead-2")
    p.kill()
    p.wait(30)
    killed = time.monotonic()
    with mw.Cleaner(table_path, lock=zk_lock(), clustering=None, compaction=None) as one_shot:
        assert one_shot.run_once().rolled_back == [t2]
    one_shot_s = time.monotonic() - killed
    print(f"dead 1 s writer reclaimed by the companion in {companion_s:.2f}s, by a one-shot cleaner in {one_shot_s:.2f}s")
    assert companion_s <= 3.0 + CLEAN_EVERY + CLEAN_EVERY + 0.5
    assert one_shot_s <= 3.0 + 1.0

    # a live writer beating every 60 s: its last beat 50 s old by its own clock and the store's
    lock = zk_lock()
    try:
        t3 = Transaction(table, lock.for_table(table.table_id, table.storage), writer_id="slow-beater").begin().requested_time
    finally:
        lock.close()
    beater = subprocess.Popen([sys.executable, "-c", BEATER, table_path, t3, "60", "50"], env=env(None), cwd=str(ROOT),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert beater.stdout is not None and beater.stdout.readline().strip() == "started", beater.stderr
        hb_file = table.storage.abs(layout.heartbeat_path(t3))
        os.utime(hb_file, (time.time() - 50, time.time() - 50))  # a store clock 50 s behind
        assert is_lapsed(table.storage, t3, 10.0, 2), "by the wall-clock rule at default settings it is dead"
        with mw.Cleaner(table_path, lock=zk_lock(), clustering=None, compaction=None, observe_max_s=2.0) as c:
            started = time.monotonic()
            while time.monotonic() - started < 3.0:
                assert t3 not in c.run_once().rolled_back
                time.sleep(CLEAN_EVERY)
            o = c.judge.observe(t3)
        assert o.verdict == "undecided" and o.bound_s == 180.0 and o.bound_from == "writer"
        assert is_pending(table, t3) and t3 not in rollbacks(table)
    finally:
        beater.communicate("stop\n", timeout=30)
    assert any(i.requested_time == t3 and i.action == inst.COMMIT for i in table.timeline().pending())
