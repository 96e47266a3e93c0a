"""Our ZooKeeper lock against a real Curator ``InterProcessMutex``, the lock Hudi's JVM writers
take through its ZooKeeper lock provider: both sides exclude each other and queue in one order."""
from __future__ import annotations

import re
import threading
import time

import pytest
from kazoo.client import KazooClient

import multiwriter as mw
from multiwriter.errors import LockAcquireTimeout
from multiwriter.lock import HolderInfo
from multiwriter.lock.zookeeper import ZooKeeperTableLock
from tests.conftest import trips

#: a contender as both Curator and kazoo order them: anything, then lock-<10 digits>
CONTENDER = re.compile(r"^.*lock-\d{10}$")


@pytest.fixture()
def zk(zk_server):
    c = KazooClient(hosts=zk_server.connect)
    c.start(timeout=10)
    yield c
    c.stop()
    c.close()


def wait_children(zk, path: str, n: int, timeout_s: float = 30.0) -> list[str]:
    """Block until ``path`` has ``n`` children (a watch wakes us; no fixed sleeps)."""
    changed = threading.Event()
    deadline = time.monotonic() + timeout_s
    while True:
        changed.clear()
        kids = zk.get_children(path, watch=lambda _e: changed.set()) if zk.exists(path) else []
        if len(kids) == n:
            return kids
        left = deadline - time.monotonic()
        assert left > 0, f"{path} has children {kids}, expected {n}"
        changed.wait(min(left, 0.5))


def test_curator_holder_blocks_us_and_is_named(curator, zk_server, zk_base, zk):
    lock = mw.ZooKeeperLock(connect=zk_server.connect, base_path=zk_base)
    jvm = curator(f"{zk_base}/trips")
    jvm.expect("ACQUIRED")
    ours = lock.for_table("trips-0123456789ab", None)  # a table id: the lock key is its name
    with pytest.raises(LockAcquireTimeout) as e:
        ours.acquire(timeout_s=0.5)
    assert "Curator" in str(e.value) and "_c_" in str(e.value) and f"{zk_base}/trips" in str(e.value)
    jvm.release()
    ours.acquire(timeout_s=10)
    assert all(CONTENDER.match(c) for c in zk.get_children(f"{zk_base}/trips"))
    ours.release()
    lock.close()


class PausingLock(mw.ZooKeeperLock):
    """A ZooKeeper lock whose commit fence pauses until told, so a test can act mid-commit."""

    at_fence: threading.Event
    go_on: threading.Event

    def for_table(self, table_id, storage=None):
        lock = super().for_table(table_id, storage)
        lock.__class__ = PausingTableLock
        lock.pausing = self
        return lock


class PausingTableLock(ZooKeeperTableLock):
    pausing: PausingLock

    def check(self) -> None:
        super().check()
        self.pausing.at_fence.set()
        assert self.pausing.go_on.wait(60)


def test_our_committing_writer_blocks_a_curator_contender(curator, zk_server, zk_base, zk, table_path):
    lock = PausingLock(connect=zk_server.connect, base_path=zk_base)
    lock.at_fence, lock.go_on = threading.Event(), threading.Event()
    table = mw.Table.create(table_path, name="trips", schema=trips([1]).schema, record_key="id",
                            partition_by=["date"], ordering_field="ts", lock=lock)
    writer = mw.Writer(table, mw.WriterConfig(writer_id="py", lock=lock, register_writer=False))
    done: list = []
    t = threading.Thread(target=lambda: done.append(writer.write(trips([1, 2]), 0)))
    t.start()
    try:
        assert lock.at_fence.wait(60), "the writer never reached its commit fence"
        # Hudi's lock node for this table is <base_path>/<hoodie.table.name>, ours too
        kids = zk.get_children(f"{zk_base}/trips")
        assert len(kids) == 1 and CONTENDER.match(kids[0]) and not kids[0].startswith("_c_")
        jvm = curator(f"{zk_base}/trips", timeout_ms=1000)
        jvm.expect("TIMEOUT")
    finally:
        lock.go_on.set()
        t.join(60)
    assert done and done[0].instant is not None and done[0].instant.is_completed
    after = curator(f"{zk_base}/trips", timeout_ms=10_000)
    after.expect("ACQUIRED")
    after.release()
    writer.close()
    lock.close()


def test_mixed_contenders_queue_in_sequence_order(curator, zk_server, zk_base, zk):
    lock = mw.ZooKeeperLock(connect=zk_server.connect, base_path=zk_base, lock_key="shared")
    path = f"{zk_base}/shared"
    first = lock.for_table("t", None)
    first.acquire(timeout_s=10, holder=HolderInfo("first", "h", 1))
    jvm = curator(path)  # second in line
    wait_children(zk, path, 2)
    third = lock.for_table("t", None)
    got = threading.Event()

    def wait_third() -> None:
        third.acquire(timeout_s=60, holder=HolderInfo("third", "h", 3))
        got.set()

    t = threading.Thread(target=wait_third)
    t.start()
    kids = wait_children(zk, path, 3)
    assert all(CONTENDER.match(k) for k in kids), kids  # nothing but contenders under the lock node
    by_seq = sorted(kids, key=lambda k: k.rsplit("lock-", 1)[1])
    assert [k.startswith("_c_") for k in by_seq] == [False, True, False]
    first.release()
    jvm.expect("ACQUIRED")
    assert not got.is_set() and not third.is_held()  # the JVM came first, so it holds
    jvm.release()
    assert got.wait(30)
    t.join(10)
    third.release()
    lock.close()


def test_registrations_stay_out_of_the_lock_node(zk_server, zk_base, zk, curator):
    lock = mw.ZooKeeperLock(connect=zk_server.connect, base_path=zk_base)
    reg = lock.register_writer("trips-0123456789ab", "ingest")
    held = lock.for_table("trips-0123456789ab", None)
    held.acquire(timeout_s=10)
    jvm = curator(f"{zk_base}/trips", timeout_ms=30_000)
    kids = wait_children(zk, f"{zk_base}/trips", 2)
    assert all(CONTENDER.match(k) for k in kids), kids
    assert not reg.path.startswith(f"{zk_base}/trips/")
    held.release()
    jvm.expect("ACQUIRED")
    jvm.release()
    reg.close()
    lock.close()
