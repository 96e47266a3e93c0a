"""FileSystemLock on a real local disk, with real child processes."""
from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from multiwriter.errors import ConfigError, LockAcquireTimeout, LockError, LockLostError
from multiwriter.lock import FileSystemLock, HolderInfo
from multiwriter.lock.filesystem import LOCK_DIR, LOCK_FILE, break_path, read_lock_file
from multiwriter.storage import Storage
from tests.lock.conftest import assert_no_overlap

HOLDER = HolderInfo("w1", "host-a", 4242, "20240101000000000")


@pytest.fixture()
def storage(tmp_path) -> Storage:
    return Storage(str(tmp_path / "table"))


def lock_file(storage: Storage) -> Path:
    return Path(storage.abs(LOCK_FILE))


def stale_lock(storage: Storage, token: str = "dead-holder") -> None:
    """What a crashed holder leaves: a lock file whose lease ran out."""
    storage.write_bytes(LOCK_FILE, json.dumps({"writer_id": "ghost", "host": "h", "pid": 1, "token": token,
                                               "expires_at": time.time() - 1}).encode())


def test_exclusion_timeout_and_release(storage):
    p = FileSystemLock(lease_s=30)
    a, b = p.for_table("t", storage), p.for_table("t", storage)
    a.acquire(timeout_s=1, holder=HOLDER)
    assert a.is_held()
    a.check()
    t0 = time.monotonic()
    with pytest.raises(LockAcquireTimeout) as e:
        b.acquire(timeout_s=0.3)
    assert 0.3 <= time.monotonic() - t0 < 2
    assert "'w1'" in str(e.value) and "0.3s" in str(e.value) and "t" in str(e.value)
    with pytest.raises(LockError, match="already held"):
        a.acquire(timeout_s=0)
    a.release()
    a.release()  # idempotent
    assert not lock_file(storage).exists()
    b.acquire(timeout_s=1)
    b.release()
    assert sorted(p.name for p in Path(storage.abs(LOCK_DIR)).iterdir()) == [], "no lease or guard files left"


def test_exclusion_across_processes_including_a_stale_lock(storage, child, tmp_path):
    """Three processes start against an expired lock of a dead holder: one breaks it, then they
    take turns; a read-modify-write counter loses no update."""
    stale_lock(storage)
    counter, log = tmp_path / "counter", tmp_path / "log"
    counter.write_text("0")
    args = {"kind": "fs", "path": storage.uri, "table": "t", "mode": "count", "n": 20, "lease_s": 2.0,
            "counter": str(counter), "log": str(log)}
    kids = [child(args) for _ in range(3)]
    for k in kids:
        k.expect("done", timeout_s=60)
        k.finish()
    assert counter.read_text() == "60"
    assert_no_overlap(log)
    assert not lock_file(storage).exists()


def test_crashed_holder_blocks_for_one_lease_then_its_lock_is_broken(storage, child):
    k = child({"kind": "fs", "path": storage.uri, "table": "t", "mode": "die", "lease_s": 1.0, "writer": "doomed"})
    k.expect("held")
    k.finish()
    lk = FileSystemLock(lease_s=5).for_table("t", storage)
    with pytest.raises(LockAcquireTimeout, match="'doomed'"):
        lk.acquire(timeout_s=0.1)
    t0 = time.monotonic()
    lk.acquire(timeout_s=5)
    assert time.monotonic() - t0 < 2.5
    lk.check()
    body = json.loads(lock_file(storage).read_text())
    assert body["lease_s"] == 5
    lk.release()


def test_lease_is_renewed_while_held(storage):
    lk = FileSystemLock(lease_s=0.6).for_table("t", storage)
    lk.acquire(timeout_s=1)
    time.sleep(1.5)  # well past the first expiry: only renewals keep it
    lk.check()
    assert lk.is_held()
    state = read_lock_file(storage, 0.6)
    assert state is not None and not state.expired(time.time())
    with pytest.raises(LockAcquireTimeout):
        FileSystemLock(lease_s=0.6).for_table("t", storage).acquire(timeout_s=0.3)
    lk.release()


def test_stolen_or_deleted_lock_file_fails_the_fence(storage):
    lk = FileSystemLock(lease_s=30).for_table("t", storage)
    lk.acquire(timeout_s=1)
    lock_file(storage).write_text(json.dumps({"token": "someone-else", "expires_at": time.time() + 30}))
    with pytest.raises(LockLostError, match="removed or replaced"):
        lk.check()
    assert not lk.is_held()
    lk.release()  # must not delete the other holder's file
    assert json.loads(lock_file(storage).read_text())["token"] == "someone-else"
    lock_file(storage).unlink()
    lk.acquire(timeout_s=1)
    lock_file(storage).unlink()
    with pytest.raises(LockLostError):
        lk.check()
    lk.release()


def test_paused_holder_whose_lease_expired_refuses_to_commit(storage):
    """A holder that could not renew in time (paused) must not trust the lock any more, even
    before anybody broke it."""
    lk = FileSystemLock(lease_s=0.3).for_table("t", storage)
    lk.acquire(timeout_s=1)
    lk._stop.set()  # freeze the renewer, as a long pause would
    time.sleep(0.5)
    assert not lk.is_held()
    with pytest.raises(LockLostError, match="lease expired"):
        lk.check()
    other = FileSystemLock(lease_s=5).for_table("t", storage)
    other.acquire(timeout_s=2)  # breaks the expired lease
    lk.release()  # must leave the new holder alone
    other.check()
    other.release()


def test_release_does_not_delete_a_lock_being_broken(storage):
    """Whoever created break-<token> is the only one allowed to delete that lock file."""
    lk = FileSystemLock(lease_s=30).for_table("t", storage)
    lk.acquire(timeout_s=1)
    token = json.loads(lock_file(storage).read_text())["token"]
    storage.put_if_absent(break_path(token), b"")  # a breaker is mid-way
    lk.release()
    assert lock_file(storage).exists(), "left to the breaker"


def test_a_stale_guard_of_a_crashed_breaker_is_cleared(storage):
    stale_lock(storage, "t0k")
    storage.put_if_absent(break_path("t0k"), b"")
    old = time.time() - 60
    os.utime(storage.abs(break_path("t0k")), (old, old))
    lk = FileSystemLock(lease_s=1).for_table("t", storage)
    lk.acquire(timeout_s=3)
    lk.release()


def test_corrupt_lock_file_is_broken_after_one_lease(storage):
    storage.write_bytes(LOCK_FILE, b"\x00garbage")
    lk = FileSystemLock(lease_s=0.5, poll_s=0.02).for_table("t", storage)
    lk.acquire(timeout_s=3)
    lk.check()
    lk.release()


def test_threads_of_one_process_are_excluded(storage):
    p = FileSystemLock(lease_s=5, poll_s=0.005)
    inside, overlaps = [], []

    def worker() -> None:
        lk = p.for_table("t", storage)
        for _ in range(10):
            lk.acquire(timeout_s=10)
            inside.append(1)
            if len(inside) > 1:
                overlaps.append(1)
            time.sleep(0.001)
            inside.pop()
            lk.release()

    ts = [threading.Thread(target=worker) for _ in range(4)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert not overlaps


def test_configuration_errors(storage):
    for kw in ({"lease_s": 0}, {"poll_s": 0}, {"acquire_timeout_s": -1}):
        with pytest.raises(ConfigError):
            FileSystemLock(**kw)
    with pytest.raises(ConfigError):
        FileSystemLock().for_table("a/b", storage)
    with pytest.raises(ConfigError):
        FileSystemLock().for_table("t", None)


def test_refuses_storage_without_atomic_create():
    """Object stores have no atomic create-if-absent: a file lock there would not exclude anyone."""
    with pytest.raises(ConfigError, match="not local"):
        FileSystemLock().for_table("t", Storage("mock:///bucket/t"))
