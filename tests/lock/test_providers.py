"""Lock providers against a real ZooKeeper and real files."""
from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

import multiwriter as mw
from multiwriter.errors import ConfigError, LockAcquireTimeout, LockError, LockLostError
from multiwriter.lock.base import HolderInfo
from multiwriter.storage import Storage

HOLDER = HolderInfo("w1", "host", 1, "20240101000000000")


def test_local_zookeeper_answers_on_loopback_and_stops(zk_server):
    c = KazooClient(hosts=zk_server.connect)
    c.start(timeout=10)
    assert c.server_version()[0] >= 3
    c.stop()
    assert zk_server.connect.startswith("127.0.0.1:")
    other = mw.LocalZooKeeper(port=0).start()
    pid = other.pid
    other.close()
    assert subprocess.run(["kill", "-0", str(pid)], capture_output=True).returncode != 0, "server process is gone"


def test_mutual_exclusion_and_timeout_names_holder(zk_server, zk_base):
    a, b = (mw.ZooKeeperLock(connect=zk_server.connect, base_path=zk_base) for _ in range(2))
    la, lb = a.for_table("t1", None), b.for_table("t1", None)
    la.acquire(timeout_s=5, holder=HOLDER)
    assert la.is_held()
    la.check()
    with pytest.raises(LockAcquireTimeout, match="w1"):
        lb.acquire(timeout_s=0.3)
    la.release()
    lb.acquire(timeout_s=5)
    lb.release()
    a.close(), b.close()


def test_one_connection_per_process(zk_server, zk_base):
    a = mw.ZooKeeperLock(connect=zk_server.connect, base_path=zk_base)
    b = mw.ZooKeeperLock(connect=zk_server.connect, base_path=zk_base)
    assert a.client() is b.client()
    for t in ("x", "y"):
        lk = a.for_table(t, None)
        lk.acquire(timeout_s=5)
        lk.release()
    assert a.client() is b.client()
    a.close(), b.close()


def test_session_loss_marks_lock_lost():
    with mw.LocalZooKeeper(port=0) as zk:
        p = mw.ZooKeeperLock(connect=zk.connect, session_timeout_s=4.0)
        lk = p.for_table("t", None)
        lk.acquire(timeout_s=5)
        zk.stop()
        time.sleep(1.5)
        with pytest.raises(LockLostError):
            lk.check()
        assert not lk.is_held()
        zk.start()
        lk.release()
        p.close()


def test_unreachable_zookeeper_is_a_lock_error_quickly():
    from multiwriter.zookeeper_local import free_port

    p = mw.ZooKeeperLock(connect=f"127.0.0.1:{free_port()}", connection_timeout_s=1.0)
    t0 = time.monotonic()
    with pytest.raises(LockError, match="unreachable"):
        p.for_table("t", None).acquire(timeout_s=1)
    assert time.monotonic() - t0 < 10


def test_digest_acl_protects_lock_nodes(zk_server, zk_base):
    p = mw.ZooKeeperLock(connect=zk_server.connect, base_path=zk_base, auth=("mw", "secret"))
    lk = p.for_table("secured", None)
    lk.acquire(timeout_s=5)
    intruder = KazooClient(hosts=zk_server.connect)
    intruder.start(timeout=10)
    try:
        node = intruder.get_children(f"{zk_base}/secured/lock") if intruder.exists(f"{zk_base}/secured/lock") else []
        assert node, "the lock node exists"
        with pytest.raises(NoAuthError):
            intruder.delete(f"{zk_base}/secured/lock/{node[0]}")
        lk.check()
    except NoAuthError:
        pass  # not even listable without auth: protected as well
    finally:
        intruder.stop()
        lk.release()
        p.close()


def test_writer_registration_is_exclusive(zk_server, zk_base):
    p = mw.ZooKeeperLock(connect=zk_server.connect, base_path=zk_base)
    h = p.register_writer("t", "ingest")
    with pytest.raises(ConfigError, match="already in use"):
        p.register_writer("t", "ingest")
    h.close()
    p.register_writer("t", "ingest").close()
    with pytest.raises(ConfigError):
        p.register_writer("t", "bad/id")
    p.close()


def test_in_process_lock_threads():
    p = mw.InProcessLock()
    order = []

    def worker(i):
        lk = p.for_table("shared", None)
        lk.acquire(timeout_s=5)
        order.append(("in", i))
        time.sleep(0.05)
        order.append(("out", i))
        lk.release()

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert all(order[k][0] == "in" and order[k + 1] == ("out", order[k][1]) for k in range(0, 8, 2))


FS_CHILD = """
import sys, time
from multiwriter.lock.filesystem import FileSystemLock
from multiwriter.storage import Storage
lk = FileSystemLock(lease_s=float(sys.argv[2])).for_table("t", Storage(sys.argv[1]))
lk.acquire(timeout_s=10)
print("held", flush=True)
time.sleep(float(sys.argv[3]))
if sys.argv[4] == "release":
    lk.release()
print("done", flush=True)
"""


def test_filesystem_lock_across_processes_and_expired_lease(tmp_path):
    st = Storage(str(tmp_path))
    child = subprocess.Popen([sys.executable, "-c", FS_CHILD, str(tmp_path), "30", "1.0", "release"],
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "held"
    lk = mw.FileSystemLock(lease_s=30).for_table("t", st)
    with pytest.raises(LockAcquireTimeout):
        lk.acquire(timeout_s=0.2)
    lk.acquire(timeout_s=10)  # after the child releases
    lk.release()
    child.wait()
    # a holder that dies without releasing: its lease expires and the lock is broken
    dead = subprocess.Popen([sys.executable, "-c", FS_CHILD, str(tmp_path), "1.0", "0", "keep"], stdout=subprocess.PIPE, text=True)
    dead.wait()
    lk2 = mw.FileSystemLock(lease_s=5).for_table("t", st)
    lk2.acquire(timeout_s=5)
    lk2.check()
    # a stolen lock file is detected by the fence
    (tmp_path / ".hoodie" / ".locks" / "table.lock").write_text('{"token": "someone-else", "expires_at": 0}')
    with pytest.raises(LockLostError):
        lk2.check()
    lk2.release()
