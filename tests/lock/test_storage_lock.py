"""StorageLock: the lock object in the table's storage, on moto's S3 server (127.0.0.1) and on a
local disk, with real threads and child processes. The object is read back with boto3 (not our
store) to check it is Hudi's format."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import multiwriter as mw
from multiwriter.config import WriterConfig
from multiwriter.errors import ConfigError, LockAcquireTimeout, LockError, LockLostError
from multiwriter.lock import HolderInfo, StorageLock
from multiwriter.lock.storage import CLOCK_DRIFT_S, LOCK_FILE, read_lock
from multiwriter.metrics import default as default_metrics
from multiwriter.storage import Storage

ROOT = Path(__file__).resolve().parents[2]
HOLDER = HolderInfo("w1", "host-a", 4242, "20240101000000000")
STORAGE_PROVIDER = "org.apache.hudi.client.transaction.lock.StorageBasedLockProvider"

#: a lock-using child process, driven by argv (JSON) and stdin/stdout lines
CHILD = r'''
import json, sys, time
from multiwriter.lock import HolderInfo, StorageLock
from multiwriter.storage import Storage

a = json.loads(sys.argv[1])
lock = StorageLock(validity_s=a["validity_s"], renew_interval_s=a["renew_s"], poll_s=0.01).for_table(
    "t", Storage(a["uri"]))
holder = HolderInfo.current(a["writer"])

def say(*words):
    print(*words, flush=True)

if a["mode"] == "intervals":
    spans = []
    for _ in range(a["n"]):
        lock.acquire(timeout_s=120, holder=holder)
        t0 = time.monotonic()
        time.sleep(a["hold_s"])
        lock.check()
        t1 = time.monotonic()
        lock.release()
        spans.append([t0, t1])
    say(json.dumps(spans))
elif a["mode"] == "hold":
    lock.acquire(timeout_s=30, holder=holder)
    say("held")
    sys.stdin.readline()
    try:
        lock.check()
    except Exception as e:
        say("refused", type(e).__name__)
    else:
        import boto3, os
        bucket, _, key = a["marker"].partition("/")
        boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"]).put_object(Bucket=bucket, Key=key, Body=b"x")
        say("committed")
'''


def start_child(args: dict) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(args)], cwd=str(ROOT), env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def expect(proc: subprocess.Popen, want: str) -> None:
    got = proc.stdout.readline().strip()
    if got != want:
        proc.kill()
        _, err = proc.communicate(timeout=30)
        raise AssertionError(f"child said {got!r}, expected {want!r}; stderr:\n{err}")


@pytest.fixture()
def children():
    made: list[subprocess.Popen] = []
    yield made
    for p in made:
        if p.poll() is None:
            p.kill()
        p.communicate()


@pytest.fixture()
def s3_table(s3_server) -> tuple[Storage, str, str]:
    """A fresh table location in a fresh bucket: (storage, uri, bucket)."""
    uri = s3_server() + "/tbl"
    return Storage(uri), uri, uri[5:].split("/")[0]


def s3_object(s3_server, bucket: str, key: str = "tbl/" + LOCK_FILE) -> dict | None:
    """The lock object as boto3 reads it (independent of the code under test)."""
    try:
        return json.loads(s3_server.client.get_object(Bucket=bucket, Key=key)["Body"].read())
    except s3_server.client.exceptions.NoSuchKey:
        return None


def counter(name: str, **labels: str) -> float:
    return default_metrics().registry.get_sample_value(name, labels) or 0.0


def test_acquire_exclude_release_in_hudis_format(s3_server, s3_table):
    storage, _, bucket = s3_table
    p = StorageLock(validity_s=30, renew_interval_s=5)
    a, b = p.for_table("tbl", storage), p.for_table("tbl", storage)
    before = time.time() * 1000
    a.acquire(timeout_s=5, holder=HOLDER)
    body = s3_object(s3_server, bucket)
    # Hudi's three fields, then ours: who holds it, and that one of our writers wrote it
    assert set(body) == {"expired", "validUntil", "owner", "holder", "by"} and body["expired"] is False
    assert before + 29_000 <= body["validUntil"] <= time.time() * 1000 + 30_000
    assert body["holder"]["writer_id"] == "w1" and len(body["owner"]) == 36  # a uuid, as Hudi's owner ids
    a.check()
    assert a.is_held()
    t0 = time.monotonic()
    with pytest.raises(LockAcquireTimeout) as e:
        b.acquire(timeout_s=0.3)
    assert 0.3 <= time.monotonic() - t0 < 3
    assert "'w1'" in str(e.value) and "table_lock.json" in str(e.value)
    with pytest.raises(LockError, match="already held"):
        a.acquire(timeout_s=0)
    a.release()
    a.release()  # idempotent
    released = s3_object(s3_server, bucket)
    assert released["expired"] is True and released["owner"] == body["owner"]
    with pytest.raises(LockLostError, match="not held"):
        a.check()
    b.acquire(timeout_s=2)
    after = s3_object(s3_server, bucket)
    assert after["expired"] is False and after["owner"] != body["owner"]
    b.release()


def test_a_lock_object_written_by_hudi_is_honoured(s3_server, s3_table):
    """Hudi's JVM writer writes only its three fields; a live one excludes us, a released one does not."""
    storage, _, bucket = s3_table
    key = "tbl/" + LOCK_FILE
    live = {"expired": False, "validUntil": int(time.time() * 1000 + 60_000), "owner": "jvm-owner-1"}
    s3_server.client.put_object(Bucket=bucket, Key=key, Body=json.dumps(live).encode())
    lock = StorageLock(validity_s=30, renew_interval_s=5).for_table("tbl", storage)
    with pytest.raises(LockAcquireTimeout, match="a Hudi writer \\(owner jvm-owner-1\\)"):
        lock.acquire(timeout_s=0.2)
    assert read_lock(storage).owner == "jvm-owner-1"
    s3_server.client.put_object(Bucket=bucket, Key=key, Body=json.dumps({**live, "expired": True}).encode())
    lock.acquire(timeout_s=2)
    assert s3_object(s3_server, bucket)["owner"] != "jvm-owner-1"
    lock.release()


def test_corrupt_lock_object_is_a_clear_error(s3_server, s3_table):
    storage, _, bucket = s3_table
    s3_server.client.put_object(Bucket=bucket, Key="tbl/" + LOCK_FILE, Body=b"not json")
    with pytest.raises(LockError, match="is not a Hudi lock"):
        StorageLock(validity_s=30, renew_interval_s=5).for_table("tbl", storage).acquire(timeout_s=1)


@pytest.mark.slow
def test_processes_never_hold_it_together(s3_server, s3_table, children):
    """Three processes take the lock 70 times each; their hold intervals, on the machine's shared
    monotonic clock, never overlap."""
    _, uri, _ = s3_table
    for n in range(3):
        children.append(start_child({"mode": "intervals", "uri": uri, "writer": f"w{n}", "n": 70, "hold_s": 0.001,
                                     "validity_s": 10, "renew_s": 2}))
    spans = []
    for p in children:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        spans += [tuple(s) for s in json.loads(out.strip().splitlines()[-1])]
    assert len(spans) == 210
    spans.sort()
    for (s0, e0), (s1, e1) in zip(spans, spans[1:], strict=False):
        assert e0 <= s1, f"two holders at once: [{s0}, {e0}] and [{s1}, {e1}]"


def test_renewal_keeps_it_past_the_validity(s3_server, s3_table):
    storage, _, bucket = s3_table
    p = StorageLock(validity_s=1.5, renew_interval_s=0.3)
    a, b = p.for_table("tbl", storage), p.for_table("tbl", storage)
    renewed = counter("multiwriter_storage_lock_renewals_total", table="tbl", outcome="renewed")
    a.acquire(timeout_s=5)
    first = s3_object(s3_server, bucket)["validUntil"]
    with pytest.raises(LockAcquireTimeout):
        b.acquire(timeout_s=3.5)  # more than twice the validity
    a.check()
    assert a.is_held()
    assert s3_object(s3_server, bucket)["validUntil"] >= first + 2000
    assert counter("multiwriter_storage_lock_renewals_total", table="tbl", outcome="renewed") >= renewed + 5
    a.release()


def test_a_holder_that_stops_renewing_is_taken_over_and_fenced(s3_server, s3_table):
    storage, _, bucket = s3_table
    p = StorageLock(validity_s=1.5, renew_interval_s=0.3)
    a, b = p.for_table("tbl", storage), p.for_table("tbl", storage)
    taken = counter("multiwriter_storage_lock_expiries_total", table="tbl", kind="taken_over")
    a.acquire(timeout_s=5, holder=HOLDER)
    a.pause_renewals.set()  # the fault: a holder whose renewals never land
    t0 = time.monotonic()
    b.acquire(timeout_s=10)
    took = time.monotonic() - t0
    assert 1.5 - 0.3 <= took <= 1.5 + CLOCK_DRIFT_S + 1.0, took
    assert counter("multiwriter_storage_lock_expiries_total", table="tbl", kind="taken_over") == taken + 1
    new_owner = s3_object(s3_server, bucket)["owner"]
    with pytest.raises(LockLostError, match="was lost"):
        a.check()
    assert not a.is_held()
    a.release()  # must not clobber the new holder's object
    now = s3_object(s3_server, bucket)
    assert now["owner"] == new_owner and now["expired"] is False
    b.check()
    b.release()


def test_fence_refuses_once_renewals_stop_landing_even_if_nobody_took_over(s3_server, s3_table):
    storage, _, _ = s3_table
    a = StorageLock(validity_s=1.5, renew_interval_s=0.3).for_table("tbl", storage)
    a.acquire(timeout_s=5)
    a.pause_renewals.set()
    time.sleep(0.9)  # more than half the validity since the last renewal
    assert not a.is_held()
    with pytest.raises(LockLostError, match="lease are left"):
        a.check()
    a.release()


def test_frozen_holder_commit_is_refused(s3_server, s3_table, children):
    """A holder SIGSTOPped past its lease is taken over; resumed, its commit is refused and the
    object it would have written never appears."""
    storage, uri, bucket = s3_table
    marker = f"{bucket}/tbl/committed-by-frozen-holder"
    proc = start_child({"mode": "hold", "uri": uri, "writer": "frozen", "validity_s": 1.5, "renew_s": 0.3,
                        "marker": marker})
    children.append(proc)
    expect(proc, "held")
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        lock = StorageLock(validity_s=1.5, renew_interval_s=0.3).for_table("t", storage)
        lock.acquire(timeout_s=10)
        owner = s3_object(s3_server, bucket)["owner"]
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    proc.stdin.write("commit\n")
    proc.stdin.flush()
    expect(proc, "refused LockLostError")
    assert s3_object(s3_server, bucket, "tbl/committed-by-frozen-holder") is None
    lock.check()  # the frozen holder's release wrote nothing over ours
    assert s3_object(s3_server, bucket)["owner"] == owner
    lock.release()


def test_killed_holder_is_taken_over_within_expiry_and_one_renew_interval(s3_server, s3_table, children):
    storage, uri, _ = s3_table
    validity, renew = 2.0, 0.5
    proc = start_child({"mode": "hold", "uri": uri, "writer": "doomed", "validity_s": validity, "renew_s": renew,
                        "marker": "unused/x"})
    children.append(proc)
    expect(proc, "held")
    time.sleep(1.0)  # a renewal or two landed
    os.kill(proc.pid, signal.SIGKILL)
    killed = time.monotonic()
    proc.wait(timeout=10)
    lock = StorageLock(validity_s=validity, renew_interval_s=renew, poll_s=0.02).for_table("t", storage)
    lock.acquire(timeout_s=20)
    took = time.monotonic() - killed
    assert took <= validity + renew + 0.5, took  # + poll and request latency on a loaded machine
    assert took >= validity - renew - 0.2, took  # and not before the dead holder's lease ran out
    lock.release()


def test_local_disk_variant(tmp_path):
    storage = Storage(str(tmp_path / "table"))
    p = StorageLock(validity_s=1.5, renew_interval_s=0.3, poll_s=0.005)
    a, b = p.for_table("t", storage), p.for_table("t", storage)
    a.acquire(timeout_s=1, holder=HOLDER)
    body = json.loads((tmp_path / "table" / LOCK_FILE).read_bytes())
    assert body["expired"] is False and body["holder"]["writer_id"] == "w1"
    with pytest.raises(LockAcquireTimeout):
        b.acquire(timeout_s=2)  # renewed past the validity
    a.pause_renewals.set()
    b.acquire(timeout_s=5)
    with pytest.raises(LockLostError):
        a.check()
    a.release()
    b.release()
    assert json.loads((tmp_path / "table" / LOCK_FILE).read_bytes())["expired"] is True

    # threads hammering it: hold intervals never overlap
    spans: list[tuple[float, float]] = []
    mu = threading.Lock()

    def work() -> None:
        lock = p.for_table("t", storage)
        for _ in range(60):
            lock.acquire(timeout_s=30)
            s = time.monotonic()
            lock.check()
            e = time.monotonic()
            lock.release()
            with mu:
                spans.append((s, e))

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(spans) == 180
    spans.sort()
    assert all(e0 <= s1 for (_, e0), (s1, _) in zip(spans, spans[1:], strict=False))


def test_hudi_keys_build_it_and_bad_settings_are_refused():
    cfg = WriterConfig.from_options({
        "hoodie.write.lock.provider": STORAGE_PROVIDER,
        "hoodie.write.lock.storage.validity.timeout.secs": "120",
        "hoodie.write.lock.storage.renew.interval.secs": "10",
        "hoodie.write.lock.wait_time_ms": "30000",
    }, writer_id="w")
    assert isinstance(cfg.lock, StorageLock)
    assert (cfg.lock.validity_s, cfg.lock.renew_interval_s, cfg.lock.acquire_timeout_s) == (120.0, 10.0, 30.0)
    old = WriterConfig.from_options({"hoodie.write.lock.provider": STORAGE_PROVIDER,
                                     "hoodie.write.lock.storage.heartbeat.poll.secs": "20"}).lock
    assert (old.validity_s, old.renew_interval_s) == (300.0, 20.0)  # Hudi's default validity
    with pytest.raises(ConfigError, match="without hoodie.write.lock.provider"):
        WriterConfig.from_options({"hoodie.write.lock.storage.validity.timeout.secs": "60"})
    with pytest.raises(ConfigError, match="locks_location is not supported"):
        WriterConfig.from_options({"hoodie.write.lock.provider": STORAGE_PROVIDER,
                                   "hoodie.write.lock.storage.locks_location": "s3://elsewhere"})
    for validity, renew, why in (("60", "30", "at least 10 times"), ("6", "0.5", "below Hudi's minimum of 10s"),
                                 ("20", "0.5", "below Hudi's minimum of 1s")):  # Hudi's JVM writers refuse these
        with pytest.raises(ConfigError, match=why):
            WriterConfig.from_options({"hoodie.write.lock.provider": STORAGE_PROVIDER,
                                       "hoodie.write.lock.storage.validity.timeout.secs": validity,
                                       "hoodie.write.lock.storage.renew.interval.secs": renew})
    with pytest.raises(ConfigError, match="at most a third"):
        StorageLock(validity_s=60, renew_interval_s=30)
    assert StorageLock(validity_s=0.3, renew_interval_s=0.1).renew_interval_s == 0.1  # a third exactly
    with pytest.raises(ConfigError, match="ZooKeeper key"):
        WriterConfig.from_options({"hoodie.write.lock.provider": STORAGE_PROVIDER,
                                   "hoodie.write.lock.zookeeper.url": "127.0.0.1"})
    with pytest.raises(ConfigError, match="validity_s > 0"):
        StorageLock(validity_s=0)
    with pytest.raises(ConfigError, match="s3://"):
        StorageLock().for_table("t", _FakeRemote())


class _FakeRemote:
    """Just enough of a Storage to name a scheme the storage lock does not support (pure check)."""

    is_local = False
    is_gcs = False
    uri = "abfs://container@account.dfs.core.windows.net/table"

    def abs(self, rel: str) -> str:
        return "bucket/table/" + rel


def two_writers_with_the_storage_lock(uri: str, table_version: int = 8) -> list[tuple]:
    """Create a trips table at ``uri`` (the metadata table on) and let two threads commit three
    batches each through mw.write under the storage lock, at once; checks every commit landed
    and returns the rows (id, value) the table must hold."""
    from tests.conftest import TRIPS_SCHEMA, trips

    mw.Table.create(uri, name="trips", schema=TRIPS_SCHEMA, record_key="id", partition_by=["date"],
                    ordering_field="ts", lock=StorageLock(validity_s=10, renew_interval_s=2),
                    table_version=table_version)
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        cfg = WriterConfig(writer_id=f"w{n}", lock=StorageLock(validity_s=10, renew_interval_s=2), executor="driver",
                           max_conflict_retries=10)
        try:
            for k in range(3):
                ids = range(n * 100 + k * 10, n * 100 + k * 10 + 10)
                mw.write(trips(ids, ts=k, value=float(n)), uri, cfg)
        except BaseException as e:  # noqa: BLE001 -- reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    tl = mw.Table.open(uri).timeline()
    assert len(tl.completed_writes()) == 6 and tl.pending() == []
    assert mw.Table.open(uri).config.raw.get("multiwriter.lock.kind") == "storage"
    return sorted(((str(n * 100 + i), float(n)) for n in range(2) for i in range(30)), key=repr)


def test_two_writers_on_s3_with_the_storage_lock(s3_server):
    """Two writers commit concurrently through mw.write on an S3 table under the storage lock:
    every commit lands and hudi-rs reads every row."""
    from tests.oracle import rows
    from tests.test_object_storage import hudi_read_s3

    uri = s3_server() + "/trips"
    want = two_writers_with_the_storage_lock(uri)
    assert rows(hudi_read_s3(uri, s3_server.endpoint), ["id", "value"]) == want


def test_status_and_command_line_name_the_holder(s3_server, capsys):
    import argparse

    from multiwriter.cli.cleaner import add_lock_arguments, cli_lock
    from multiwriter.cli import main
    from multiwriter.status import collect, render
    from tests.conftest import TRIPS_SCHEMA

    uri = s3_server() + "/trips"
    table = mw.Table.create(uri, name="trips", schema=TRIPS_SCHEMA, record_key="id", ordering_field="ts",
                            lock=StorageLock())
    assert collect(table, observe_s=0).storage_lock is None  # no lock object yet
    lock = StorageLock(validity_s=30, renew_interval_s=5).for_table(table.table_id, table.storage)
    lock.acquire(timeout_s=5, holder=HOLDER)
    try:
        s = collect(table, observe_s=0)
        assert s.storage_lock["state"] == "held" and s.storage_lock["holder"]["writer_id"] == "w1"
        assert 25 < s.storage_lock["seconds_left"] <= 30
        assert "storage lock: held (writer 'w1' (pid 4242 on host-a" in render(s)
    finally:
        lock.release()
    assert main(["status", uri, "--observe", "0", "--hoodie-conf",
                 f"hoodie.write.lock.provider={STORAGE_PROVIDER}"]) == 0
    assert "storage lock: released" in capsys.readouterr().out
    args = add_lock_arguments(argparse.ArgumentParser()).parse_args(["--storage-lock"])
    args.path = uri
    assert isinstance(cli_lock(args), StorageLock)
    with pytest.raises(ConfigError, match="one of --zk, --file-lock and --storage-lock"):
        cli_lock(add_lock_arguments(argparse.ArgumentParser()).parse_args(["--storage-lock", "--file-lock"]))


#: a writer that commits one batch under the storage lock; its faults come from the environment
WRITER_CHILD = r'''
import json, sys
import multiwriter as mw
from multiwriter.errors import LockLostError
from tests.conftest import trips

a = json.loads(sys.argv[1])
cfg = mw.WriterConfig(writer_id=a["writer"], executor="driver", max_conflict_retries=0,
                      lock=mw.StorageLock(validity_s=a["validity_s"], renew_interval_s=a["renew_s"]))
try:
    mw.write(trips(a["ids"], ts=5, value=9.0), a["uri"], cfg)
except LockLostError as e:
    print("refused", str(e)[:200], flush=True)
else:
    print("committed", flush=True)
'''


def test_frozen_writer_past_its_lease_commits_nothing(s3_server, tmp_path, children):
    """A writer frozen (SIGSTOP) inside its commit's lock hold, past its lease, while another
    writer takes the lock and commits: resumed, its commit is refused and hudi-rs sees none of
    its rows."""
    from tests.conftest import TRIPS_SCHEMA, trips
    from tests.oracle import rows
    from tests.test_object_storage import hudi_read_s3

    uri = s3_server() + "/trips"
    mw.Table.create(uri, name="trips", schema=TRIPS_SCHEMA, record_key="id", partition_by=["date"],
                    ordering_field="ts", lock=StorageLock())
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               MULTIWRITER_FAULTS="after-lock-acquired=hang", MULTIWRITER_FAULT_DIR=str(tmp_path))
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER_CHILD, json.dumps({"uri": uri, "writer": "frozen", "ids": [1, 2, 3],
                                                         "validity_s": 1.5, "renew_s": 0.3})],
        cwd=str(ROOT), env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    children.append(proc)
    hanging = tmp_path / "after-lock-acquired.hanging"
    deadline = time.monotonic() + 120
    while not hanging.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        cfg = WriterConfig(writer_id="live", executor="driver",
                           lock=StorageLock(validity_s=1.5, renew_interval_s=0.3))
        mw.write(trips([4, 5], ts=6, value=1.0), uri, cfg)  # waits out the frozen writer's lease
        (tmp_path / "after-lock-acquired.release").touch()
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    out, err = proc.communicate(timeout=120)
    assert out.startswith("refused") and "storage lock" in out, (out, err[-3000:])
    tl = mw.Table.open(uri).timeline()
    assert len(tl.completed_writes()) == 1  # the live writer's; the frozen writer's instant never completed
    assert rows(hudi_read_s3(uri, s3_server.endpoint), ["id", "value"]) == [("4", 1.0), ("5", 1.0)]


class _FlakyStore:
    """An in-memory lock object for the pure logic of lost replies and failing renewals: a write
    can land and still raise (its reply lost), or fail before landing."""

    location = "memory://lock"

    def __init__(self) -> None:
        from multiwriter.lock.storage import decode

        self._decode = decode
        self.raw: bytes | None = None
        self.version = 0
        self.lose_reply = 0  # the next n writes land but raise
        self.fail = 0  # the next n writes raise without landing

    def read(self):
        return None if self.raw is None else self._decode(self.raw, str(self.version))

    def write(self, data: bytes, expected: str | None):
        from multiwriter.lock.storage import StoreUnavailable

        if self.fail:
            self.fail -= 1
            raise StoreUnavailable("injected: no answer")
        if (expected is None) != (self.raw is None) or (expected is not None and expected != str(self.version)):
            return None
        self.raw, self.version = data, self.version + 1
        if self.lose_reply:
            self.lose_reply -= 1
            raise StoreUnavailable("injected: reply lost")
        return str(self.version)


def _logic_lock(store: _FlakyStore, validity_s: float = 1.5, renew_s: float = 0.3):
    from multiwriter.lock.storage import StorageTableLock

    return StorageTableLock(StorageLock(validity_s=validity_s, renew_interval_s=renew_s, poll_s=0.01), "t", store)


def test_a_write_that_landed_though_its_reply_was_lost_is_recognised():
    store = _FlakyStore()
    lock = _logic_lock(store)
    store.lose_reply = 1
    lock.acquire(timeout_s=1)  # the create landed, its reply did not: the next read shows our owner
    lock.check()
    store.lose_reply = 1  # a renewal lands without its reply; the next one meets 412 and adopts the version
    time.sleep(1.2)
    lock.check()
    assert json.loads(store.raw)["expired"] is False
    lock.release()
    assert json.loads(store.raw)["expired"] is True


def test_failing_renewals_keep_the_lock_only_until_the_fence_margin():
    store = _FlakyStore()
    lock = _logic_lock(store)
    lock.acquire(timeout_s=1)
    store.fail = 1  # one renewal fails: the next lands, the lock stays ours
    time.sleep(0.8)
    lock.check()
    store.fail = 1000  # the store stops answering
    time.sleep(1.0)
    with pytest.raises(LockLostError, match="lease are left|ran out"):
        lock.check()
    store.fail = 0
    other = _logic_lock(store)
    other.acquire(timeout_s=5)  # the lease runs out in the store too and is taken over
    lock.release()  # refused by the version check: the new holder keeps it
    other.check()
    other.release()


def test_local_readers_never_see_a_half_created_lock_object(tmp_path):
    """Creating the object while others read it: every read is absent or a whole object (a create
    that opened the name first and wrote after would show readers an empty file)."""
    from multiwriter.lock.storage import LocalLockStore, encode

    store = LocalLockStore(str(tmp_path / LOCK_FILE))
    data = encode("owner", 1, False, HOLDER)
    stop = threading.Event()
    bad: list[BaseException] = []

    def reader() -> None:
        while not stop.is_set():
            try:
                store.read()
            except LockError as e:
                bad.append(e)
                return

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline and not bad:
        assert store.write(data, None) is not None
        assert store.write(data, None) is None  # exists now
        os.unlink(store.path)
    stop.set()
    for t in threads:
        t.join()
    assert not bad, bad[0]


def test_a_release_that_meets_a_failing_store_is_retried():
    """A release whose writes fail for a while (503s) is sent again until it lands, within a
    bound: the next writer finds the lock free at once instead of after the whole validity."""
    store = _FlakyStore()
    lock = _logic_lock(store, validity_s=30, renew_s=5)
    lock.acquire(timeout_s=1)
    store.fail = 3
    lock.release()
    assert json.loads(store.raw)["expired"] is True
    other = _logic_lock(store, validity_s=30, renew_s=5)
    t0 = time.monotonic()
    other.acquire(timeout_s=2)
    assert time.monotonic() - t0 < 1.0
    other.release()


def test_a_release_whose_reply_was_lost_is_recognised_not_repeated():
    """A release that landed though its reply was lost meets 412 when sent again: the object read
    back is ours and released, so the release is done (nothing overwritten)."""
    store = _FlakyStore()
    lock = _logic_lock(store, validity_s=30, renew_s=5)
    lock.acquire(timeout_s=1)
    store.lose_reply = 1
    lock.release()
    body = json.loads(store.raw)
    assert body["expired"] is True
    assert store.version == 2  # the create and the one release: no further write


def test_a_process_takes_back_its_own_lease_left_by_a_failed_release():
    """When every try of a release fails (the store unreachable for longer than the release's
    bound), the object still names this process's old owner id: the process's next acquire takes
    it over at once, since nobody else holds it; another process waits for the lease to run out."""
    store = _FlakyStore()
    lock = _logic_lock(store, validity_s=30, renew_s=5)
    lock.acquire(timeout_s=1)
    store.fail = 10_000
    lock.release()
    store.fail = 0
    assert json.loads(store.raw)["expired"] is False  # the old lease stands in the store
    again = _logic_lock(store, validity_s=30, renew_s=5)
    t0 = time.monotonic()
    again.acquire(timeout_s=2)
    assert time.monotonic() - t0 < 1.0
    again.release()
    assert json.loads(store.raw)["expired"] is True


def test_a_lock_call_to_a_silent_store_ends_within_a_fifth_of_the_validity(monkeypatch):
    """A store that accepts the connection and never answers: one lock call (read, write) gives
    up within its bound, a fifth of the validity as Hudi's, retries and all; the lock's own loops
    try again."""
    import socket
    import threading

    from multiwriter.lock.storage import S3LockStore, StoreUnavailable

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])  # kept open, never answered
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{srv.getsockname()[1]}")
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
        validity = 10.0
        store = S3LockStore("bucket", "t/.hoodie/.locks/table_lock.json", validity / 5)
        for call in (store.read, lambda: store.write(b"{}", None)):
            t0 = time.monotonic()
            with pytest.raises(StoreUnavailable):
                call()
            assert time.monotonic() - t0 <= validity / 5 + 0.5
    finally:
        stop.set()
        t.join()
        for c in held:
            c.close()
        srv.close()


def _contend(storage, seconds: float, writers: int, jvm: bool = False) -> tuple[dict, float]:
    """``writers`` of ours, each acquiring, holding 5 ms and releasing in a loop, and with
    ``jvm`` a Hudi JVM writer as it behaves (Hudi's three fields alone, a look every second while
    the lock is held, 200 ms of work between its commits): acquisitions by each, and the longest
    wait of ours."""
    import collections
    import threading
    import uuid as _uuid

    from multiwriter.lock.storage import LOCK_FILE, LocalLockStore, StoreUnavailable

    provider = StorageLock(validity_s=30, renew_interval_s=5, poll_s=0.05)
    counts: collections.Counter = collections.Counter()
    longest = [0.0]
    stop = time.monotonic() + seconds

    def ours(i: int) -> None:
        lock = provider.for_table("t", storage)
        while time.monotonic() < stop:
            t0 = time.monotonic()
            lock.acquire(timeout_s=30)
            longest[0] = max(longest[0], time.monotonic() - t0)
            time.sleep(0.005)
            lock.release()
            counts[f"ours{i}"] += 1

    def hudi_jvm() -> None:
        store = LocalLockStore(storage.abs(LOCK_FILE))
        while time.monotonic() < stop:
            try:
                cur = store.read()
                if cur is None or cur.is_free(time.time()):
                    owner = str(_uuid.uuid4())
                    body = {"expired": False, "validUntil": int(time.time() * 1000 + 30_000), "owner": owner}
                    v = store.write(json.dumps(body).encode(), None if cur is None else cur.version)
                    if v is not None:
                        time.sleep(0.005)
                        store.write(json.dumps({**body, "expired": True}).encode(), v)
                        counts["jvm"] += 1
                        time.sleep(0.2)
                        continue
            except StoreUnavailable:
                pass
            time.sleep(1.0)

    threads = [threading.Thread(target=ours, args=(i,)) for i in range(writers)]
    threads += [threading.Thread(target=hudi_jvm)] if jvm else []
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return dict(counts), longest[0]


def test_waiters_take_turns(tmp_path):
    """Four writers contending: a writer that releases leaves the lock free for its waiters'
    next look, so each gets a fair share and none waits long (without it one writer took most
    acquisitions and another waited the whole run)."""
    counts, longest = _contend(Storage(str(tmp_path)), 3.0, 4)
    assert min(counts.values()) >= max(counts.values()) / 2, counts
    assert longest < 1.5, (counts, longest)


def test_a_hudi_jvm_writer_gets_its_turns(tmp_path):
    """Beside a Hudi JVM writer, which looks again only every second, our writers leave the lock
    free long enough after each release for it to get in: it gets about their share (without it,
    one acquisition in eight seconds against more than a thousand of ours)."""
    counts, _ = _contend(Storage(str(tmp_path)), 6.0, 2, jvm=True)
    ours = [v for k, v in counts.items() if k.startswith("ours")]
    assert counts.get("jvm", 0) >= 3 and counts["jvm"] >= min(ours) / 3, counts
