"""ZooKeeperLock against a real ZooKeeper: exclusion, timeouts, the session fence, ACLs, writer ids."""
from __future__ import annotations

import json
import logging
import pickle
import re
import threading
import time
import uuid

import pytest
from kazoo.exceptions import ConnectionLoss, NoAuthError
from prometheus_client import REGISTRY

from multiwriter.errors import ConfigError, LockAcquireTimeout, LockError, LockLostError
from multiwriter.lock import HolderInfo, ZooKeeperLock
from multiwriter.zookeeper_local import LocalZooKeeper, free_port
from tests.lock.conftest import assert_no_overlap, expire_session, wait_until

HOLDER = HolderInfo("w1", "host-a", 4242, "20240101000000000")


@pytest.fixture()
def providers(zk_server, zk_base):
    """ZooKeeperLock factory on the session server and a fresh base path; all closed at teardown."""
    made: list[ZooKeeperLock] = []

    def make(**kw) -> ZooKeeperLock:
        kw.setdefault("base_path", zk_base)
        made.append(ZooKeeperLock(connect=zk_server.connect, **kw))
        return made[-1]

    yield make
    for p in made:
        p.close()


def test_exclusion_and_timeout_names_table_timeout_and_holder(providers):
    p = providers()
    a, b = p.for_table("t1", None), p.for_table("t1", None)
    a.acquire(timeout_s=5, holder=HOLDER)
    assert a.is_held()
    a.check()
    t0 = time.monotonic()
    with pytest.raises(LockAcquireTimeout) as e:
        b.acquire(timeout_s=0.5)
    assert time.monotonic() - t0 < 3
    msg = str(e.value)
    assert "t1" in msg and "0.5s" in msg and "'w1'" in msg and "4242" in msg and "host-a" in msg
    assert not b.is_held()
    a.release()
    a.release()  # idempotent
    b.acquire(timeout_s=5)
    with pytest.raises(LockError, match="already held"):
        b.acquire(timeout_s=1)
    b.release()


def test_lock_node_carries_the_holder(providers):
    p = providers()
    lk = p.for_table("t", None)
    lk.acquire(timeout_s=5, holder=HOLDER)
    data, _ = p.client().get(lk.node_path)
    body = json.loads(data)
    assert body["writer_id"] == "w1" and body["instant"] == HOLDER.instant and body["table_id"] == "t"
    parent, name = lk.node_path.rsplit("/", 1)
    assert parent == f"{p.base_path}/t" and re.fullmatch(r"[0-9a-f]{32}-lock-\d{10}", name)
    node = lk.node_path
    lk.release()
    assert lk.node_path is None and p.client().exists(node) is None


def test_exclusion_across_processes(zk_server, zk_base, child, tmp_path):
    """Three processes (own sessions) read-modify-write one counter under the lock: no lost update."""
    counter, log = tmp_path / "counter", tmp_path / "log"
    counter.write_text("0")
    args = {"kind": "zk", "connect": zk_server.connect, "base": zk_base, "table": "t", "mode": "count", "n": 15,
            "counter": str(counter), "log": str(log)}
    kids = [child({**args, "writer": f"c{i}"}) for i in range(3)]
    for k in kids:
        k.expect("done", timeout_s=60)
        k.finish()
    assert counter.read_text() == "45"
    assert_no_overlap(log)


def test_timeout_names_holder_in_another_process(providers, zk_server, zk_base, child):
    k = child({"kind": "zk", "connect": zk_server.connect, "base": zk_base, "table": "t", "mode": "hold",
               "writer": "other-proc"})
    k.expect("held")
    lk = providers().for_table("t", None)
    with pytest.raises(LockAcquireTimeout, match=f"'other-proc' \\(pid {k.proc.pid} "):
        lk.acquire(timeout_s=0.3)
    k.send("release")
    k.expect("released")
    lk.acquire(timeout_s=5)
    lk.release()
    k.send("exit")
    k.finish()


def test_expired_session_fails_the_fence(providers, zk_server):
    p = providers()
    lk = p.for_table("t", None)
    lk.acquire(timeout_s=5, holder=HOLDER)
    node = lk.node_path
    expire_session(p.client(), zk_server.connect)
    wait_until(lambda: not lk.is_held(), what="the holder noticing its session expired")
    with pytest.raises(LockLostError, match="t"):
        lk.check()
    # The client reconnects with a new session; the old node died with the old session.
    wait_until(lambda: p.client().connected, what="reconnect")
    assert p.client().exists(node) is None
    lk.release()
    other = p.for_table("t", None)
    other.acquire(timeout_s=5)
    other.check()
    other.release()


def test_deleted_lock_node_fails_the_fence(providers, kazoo):
    """Without auth anyone may delete the node; the fence notices even though the session is fine."""
    lk = providers().for_table("t", None)
    lk.acquire(timeout_s=5)
    kazoo().delete(lk.node_path)
    assert lk.is_held()  # only a round trip can tell
    with pytest.raises(LockLostError, match="gone"):
        lk.check()
    assert not lk.is_held()
    lk.release()


def test_suspended_connection_loses_the_lock_and_release_is_finished_on_reconnect(tmp_path):
    """Stop the server under a held lock: SUSPENDED marks it lost. Acquiring while disconnected is
    a quick LockError. Releasing while disconnected must not leave the node behind once the
    server is back (it would block every writer for as long as our session lives)."""
    with LocalZooKeeper(port=0, data_dir=str(tmp_path / "zk")) as zk:
        port = zk.port
        p = ZooKeeperLock(connect=zk.connect, base_path="/suspend", session_timeout_s=12.0, connection_timeout_s=0.5)
        q = ZooKeeperLock(connect=zk.connect, base_path="/suspend", session_timeout_s=4.0)  # another client
        try:
            lk = p.for_table("t", None)
            lk.acquire(timeout_s=5, holder=HOLDER)
            node = lk.node_path
            q.client()
            zk.stop()
            wait_until(lambda: not lk.is_held(), what="SUSPENDED noticed")
            with pytest.raises(LockLostError, match="suspended"):
                lk.check()
            t0 = time.monotonic()
            lk.release()  # disconnected: must return at once and leave the delete for later
            assert time.monotonic() - t0 < 1
            with pytest.raises(LockError, match=f"not connected to ZooKeeper at {zk.connect}"):
                p.for_table("u", None).acquire(timeout_s=10)
            assert time.monotonic() - t0 < 3
            zk.start()
            assert zk.port == port
            # The session normally survives the restart: then only our deferred delete frees the lock.
            # (A connect attempt that hits the server while it starts waits out a read timeout, so be patient.)
            wait_until(lambda: p.client().connected and p.client().exists(node) is None, 30, "orphan deleted")
            other = q.for_table("t", None)
            other.acquire(timeout_s=5)
            other.release()
        finally:
            p.close()
            q.close()


def wait_seconds(table: str, writer: str, cause: str) -> float:
    """``multiwriter_lock_wait_cause_seconds_total`` of the lock's process (the default registry)."""
    got = REGISTRY.get_sample_value("multiwriter_lock_wait_cause_seconds_total",
                                    {"table": table, "writer": writer, "cause": cause})
    return got or 0.0


def test_the_recipe_retries_a_dropped_call_within_a_second(providers):
    """kazoo's lock recipe backs off up to 60 s between retries of a call that failed on a
    dropped connection: eight drops in one acquire (connections coming and going during an
    election) park the writer for ~25 s, long after the quorum is back. Ours pauses at most
    RECIPE_MAX_DELAY_S (plus kazoo's 40 % jitter) between tries."""
    from multiwriter.lock.zookeeper import RECIPE_MAX_DELAY_S, SharedLock

    retry = SharedLock(providers().client(), "/retry-policy")._retry.copy()
    sleeps: list[float] = []
    retry.sleep_func = sleeps.append
    drops = iter(range(8))

    def call() -> str:
        if next(drops, None) is not None:
            raise ConnectionLoss()
        return "done"

    assert retry(call) == "done"
    assert len(sleeps) == 8
    assert max(sleeps) <= RECIPE_MAX_DELAY_S * 1.4 and sum(sleeps) < 4.0, sleeps


def test_an_acquire_waiting_for_reconnection_says_so_and_counts_it(tmp_path, caplog):
    """The server is down when the acquire starts and back a moment later: the acquire succeeds,
    its log names the wait ('waiting for reconnection'), and the metric counts it by cause."""
    with LocalZooKeeper(port=0, data_dir=str(tmp_path / "zk")) as zk:
        p = ZooKeeperLock(connect=zk.connect, base_path="/reconnect", session_timeout_s=4.0, connection_timeout_s=30.0)
        try:
            client = p.client()
            zk.stop()
            wait_until(lambda: not client.connected, what="the disconnect noticed")
            restart = threading.Timer(1.0, zk.start)
            restart.start()
            lk = p.for_table("recon-t", None)
            before = wait_seconds("recon-t", "w-rec", "reconnect")
            t0 = time.monotonic()
            with caplog.at_level(logging.INFO, logger="multiwriter.lock.zookeeper"):
                lk.acquire(timeout_s=10, holder=HolderInfo.current("w-rec"))
            took = time.monotonic() - t0
            restart.join()
            lk.check()
            lk.release()
        finally:
            p.close()
    assert took >= 0.9
    assert "lock of recon-t: waiting for reconnection to ZooKeeper at" in caplog.text
    m = re.search(r"lock of recon-t acquired after ([\d.]+)s: ([\d.]+)s waiting for reconnection", caplog.text)
    assert m is not None, caplog.text
    counted = wait_seconds("recon-t", "w-rec", "reconnect") - before
    assert 0.9 <= counted <= took + 0.01, (counted, took)


def test_an_own_stale_node_in_the_queue_is_deleted_not_waited_for(providers, kazoo):
    """A lock node this process released while disconnected stays until the server answers again;
    the next acquire must delete it rather than queue behind it (our session keeps it alive), and
    count the time as a stale own node."""
    p = providers()
    lk = p.for_table("stale-t", None)
    shared = p._shared_client()
    node = shared.client.create(f"{lk.path}/{uuid.uuid4().hex}-lock-", b"{}", ephemeral=True, sequence=True,
                                makepath=True)
    shared._orphans.add(node)  # as a release that could not reach the server leaves it, before the reconnect
    before = wait_seconds("stale-t", "w-stale", "stale_own_node")
    t0 = time.monotonic()
    lk.acquire(timeout_s=5, holder=HolderInfo.current("w-stale"))
    assert time.monotonic() - t0 < 2
    assert kazoo().exists(node) is None
    assert lk.node_path != node
    lk.release()
    assert wait_seconds("stale-t", "w-stale", "stale_own_node") > before


def test_an_abandoned_contender_is_deleted_by_its_prefix(providers, kazoo):
    """An acquire that failed before it learnt its node's name (the create's reply was lost)
    hands the recipe's name prefix to the clean-up: every node with that prefix goes, no other."""
    p = providers()
    lk = p.for_table("prefix-t", None)
    shared = p._shared_client()
    prefix = f"{lk.path}/{uuid.uuid4().hex}-lock-"
    ours = shared.client.create(prefix, b"{}", ephemeral=True, sequence=True, makepath=True)
    other = shared.client.create(f"{lk.path}/{uuid.uuid4().hex}-lock-", b"{}", ephemeral=True, sequence=True)
    assert not shared.is_orphan(ours)
    shared.add_orphan(prefix)
    assert shared.is_orphan(ours) and not shared.is_orphan(other)
    watcher = kazoo()
    wait_until(lambda: watcher.exists(ours) is None, what="the abandoned contender deleted")
    assert watcher.exists(other) is not None
    wait_until(lambda: not shared.has_orphans(), what="the orphan list emptied")


def test_unreachable_zookeeper_is_a_lock_error_quickly():
    connect = f"127.0.0.1:{free_port()}"  # nothing listens there
    p = ZooKeeperLock(connect=connect, connection_timeout_s=0.5)
    t0 = time.monotonic()
    with pytest.raises(LockError, match=f"ZooKeeper at {connect} is unreachable"):
        p.for_table("t", None).acquire(timeout_s=30)
    assert time.monotonic() - t0 < 3
    with pytest.raises(LockError):
        p.register_writer("t", "w")
    p.close()


def test_one_client_per_process_shared_across_tables_and_providers(providers):
    a, b = providers(), providers()
    for table in ("x", "y"):
        for provider in (a, b):
            lk = provider.for_table(table, None)
            lk.acquire(timeout_s=5)
            lk.release()
    assert a.client() is b.client()
    session = a.client().client_id
    a.close()  # b still uses it
    assert b.client().connected and b.client().client_id == session
    other_timeout = providers(session_timeout_s=7.0)
    assert other_timeout.client() is not b.client()  # a different session timeout needs its own session


def test_last_close_ends_the_session_and_a_later_use_reconnects(zk_server, zk_base):
    p = ZooKeeperLock(connect=zk_server.connect, base_path=zk_base, session_timeout_s=9.0)
    first = p.client()
    p.close()
    assert not first.connected
    lk = p.for_table("t", None)
    lk.acquire(timeout_s=5)
    assert p.client() is not first and p.client().connected
    lk.release()
    p.close()


def test_digest_acl_protects_lock_nodes(providers, kazoo, zk_base):
    p = providers(auth=("mw", "s3cret"))
    lk = p.for_table("secured", None)
    lk.acquire(timeout_s=5, holder=HOLDER)
    intruder = kazoo()
    with pytest.raises(NoAuthError):
        intruder.delete(lk.node_path)
    with pytest.raises(NoAuthError):
        intruder.get_children(f"{zk_base}/secured")
    wrong = kazoo(auth_data=[("digest", "mw:wrong")])
    with pytest.raises(NoAuthError):
        wrong.delete(lk.node_path)
    lk.check()
    # The same credentials in another session may (it is us, e.g. a cleaner on another host).
    p2 = providers(auth=("mw", "s3cret"), session_timeout_s=11.0)
    lk2 = p2.for_table("secured", None)
    with pytest.raises(LockAcquireTimeout, match="'w1'"):
        lk2.acquire(timeout_s=0.3)
    lk.release()
    lk2.acquire(timeout_s=5)
    lk2.release()
    assert "s3cret" not in repr(p)


def test_writer_registration_is_exclusive(providers, zk_server, zk_base, child):
    p = providers()
    h = p.register_writer("t", "ingest")
    assert h.is_registered()
    with pytest.raises(ConfigError, match="writer id 'ingest' is already in use .* two queries must not share"):
        p.register_writer("t", "ingest")
    h.close()
    h.close()  # idempotent
    p.register_writer("t", "ingest").close()
    p.register_writer("other-table", "ingest").close()
    for bad in ("bad/id", "", "x" * 129, "..", "sp ace"):
        with pytest.raises(ConfigError):
            p.register_writer("t", bad)
    # across processes, the message names the other process
    k = child({"kind": "zk", "connect": zk_server.connect, "base": zk_base, "table": "t", "mode": "register",
               "writer": "dup"})
    k.expect("registered")
    with pytest.raises(ConfigError, match=f"pid {k.proc.pid} "):
        p.register_writer("t", "dup")
    k.send("bye")
    k.finish()
    p.register_writer("t", "dup").close()


def test_registration_comes_back_after_session_expiry(providers, zk_server):
    p = providers()
    h = p.register_writer("t", "survivor")
    expire_session(p.client(), zk_server.connect)
    wait_until(lambda: p.client().connected and h.is_registered(), 15, "re-registration")
    h.close()
    assert not h.is_registered()


def test_configuration_errors(zk_server):
    for bad in ("", "nope", "/a/", "/a//b", "/a/../b", "/zookeeper/x", "/a b"):
        with pytest.raises(ConfigError):
            ZooKeeperLock(connect=zk_server.connect, base_path=bad)
    with pytest.raises(ConfigError):
        ZooKeeperLock(connect="")
    with pytest.raises(ConfigError):
        ZooKeeperLock(connect=zk_server.connect, session_timeout_s=0)
    with pytest.raises(ConfigError):
        ZooKeeperLock(connect=zk_server.connect, auth=("user:x", "pw"))
    p = ZooKeeperLock(connect=zk_server.connect)
    for bad in ("a/b", "", "..", "a b"):
        with pytest.raises(ConfigError):
            p.for_table(bad, None)
    with pytest.raises(ConfigError):
        p.for_table("t", None).acquire(timeout_s=-1)
    p.close()


def test_provider_pickles_as_configuration(providers):
    p = providers()
    p.client()
    clone = pickle.loads(pickle.dumps(p))
    assert clone.connect == p.connect and clone.base_path == p.base_path
    assert clone.client() is p.client()  # same process, same key: the shared client
    clone.close()


def test_a_writer_of_the_old_layout_is_refused_not_ignored(providers, kazoo):
    """Releases before the shared layout locked <base>/<table id>/lock: a live contender there
    would not exclude us, so acquiring refuses to run beside it."""
    p = providers()
    old = kazoo()
    node = old.create(f"{p.base_path}/trips-0123456789ab/lock/abc__lock__", b"{}", ephemeral=True, sequence=True,
                      makepath=True)
    with pytest.raises(LockError, match="older than the shared lock layout"):
        p.for_table("trips-0123456789ab", None).acquire(timeout_s=1)
    old.delete(node)
    lk = p.for_table("trips-0123456789ab", None)
    lk.acquire(timeout_s=5)
    assert lk.node_path.startswith(f"{p.base_path}/trips/")
    lk.release()


def test_the_table_records_and_checks_the_lock_key(providers):
    from multiwriter.lock.base import check_table_lock

    keyed = providers(lock_key="trips_lock")
    recorded = {"hoodie.table.name": "trips", **keyed.table_properties()}
    assert recorded["multiwriter.lock.zookeeper.lock_key"] == "trips_lock"
    check_table_lock(recorded, keyed, table="t")
    with pytest.raises(ConfigError, match="lock_key"):
        check_table_lock(recorded, providers(), table="t")  # default key: the name 'trips'
    plain = {"hoodie.table.name": "trips", **providers().table_properties()}
    check_table_lock(plain, providers(lock_key="trips"), table="t")  # the same effective key
    with pytest.raises(ConfigError, match="lock_key"):
        check_table_lock(plain, providers(lock_key="other"), table="t")


def test_the_lock_folder_is_ensured_once_per_session_and_again_when_it_went(providers, kazoo, monkeypatch):
    """An acquire takes the lock's folder as there once an acquire of the same session made a
    node in it (no ensure_path round trip each time); a folder removed since (ZooKeeper deletes
    an empty container node, Curator's kind) is created again by the acquire that finds it gone,
    which leaves nothing behind to clean up and gets the lock."""
    from kazoo.client import KazooClient

    ensured: list[str] = []
    original = KazooClient.ensure_path
    monkeypatch.setattr(KazooClient, "ensure_path", lambda self, path, acl=None: ensured.append(path) or original(self, path, acl))
    p = providers()
    lk = p.for_table("folder-t", None)
    for _ in range(3):
        lk.acquire(timeout_s=5, holder=HOLDER)
        lk.release()
    assert ensured.count(lk.path) == 1
    kazoo().delete(lk.path)  # empty now: as the server removes a container node
    lk.acquire(timeout_s=5, holder=HOLDER)
    assert lk.is_held() and lk.node_path.startswith(f"{lk.path}/") and ensured.count(lk.path) == 2
    lk.check()
    lk.release()
    assert not p._shared_client().has_orphans()
    expire_session(p.client(), p.connect)  # a new session looks at the folder again
    wait_until(lambda: p.client().connected and p.client().client_id is not None, what="a new session")
    lk.acquire(timeout_s=5, holder=HOLDER)
    lk.release()
    assert ensured.count(lk.path) == 3


def test_a_fenced_acquire_skips_the_confirmation_and_its_fence_still_catches_a_lost_node(providers, kazoo,
                                                                                       monkeypatch):
    """A commit's acquire (``fenced=True``) makes one round trip less (no probe right after the
    lock is taken: the commit's fence probes before anything it does can matter); a lock node
    lost in that window still fails the fence."""
    from kazoo.client import KazooClient

    probes: list[str] = []
    original = KazooClient.exists_async
    monkeypatch.setattr(KazooClient, "exists_async",
                        lambda self, path, watch=None: ("-lock-" in path and probes.append(path))
                        or original(self, path, watch))
    lk = providers().for_table("fenced-t", None)
    lk.acquire(timeout_s=5, holder=HOLDER)
    assert len(probes) == 1  # the confirmation
    lk.release()
    lk.acquire(timeout_s=5, holder=HOLDER, fenced=True)
    assert len(probes) == 1 and lk.is_held()
    kazoo().delete(lk.node_path)  # lost before the fence
    with pytest.raises(LockLostError, match="gone"):
        lk.check()
    assert len(probes) == 2
    lk.release()
