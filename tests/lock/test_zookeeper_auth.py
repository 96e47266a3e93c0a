"""ZooKeeper digest credentials through the API, Hudi-style options and the command line: every
node multiwriter creates carries a digest ACL, so a client without them can neither delete a
holder's lock node nor a writer's registration; the password is never printed (real ZooKeeper)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from kazoo.exceptions import NoAuthError
from kazoo.security import make_digest_acl_credential

import multiwriter as mw
from multiwriter.config import ZK_AUTH_KEY, ZK_PROVIDER
from multiwriter.errors import ConfigError
from multiwriter.lock import HolderInfo
from tests.conftest import trips

USER, PASSWORD = "mw", "pa55-w0rd-XYZZY"
HOLDER = HolderInfo("w1", "host-a", 4242, "20240101000000000")


def _zk_options(zk_server, zk_base: str, **extra: str) -> dict[str, str]:
    host, port = zk_server.connect.rsplit(":", 1)
    return {"hoodie.write.lock.provider": ZK_PROVIDER, "hoodie.write.lock.zookeeper.url": host,
            "hoodie.write.lock.zookeeper.port": port, "hoodie.write.lock.zookeeper.base_path": zk_base, **extra}


def _tree(client, path: str) -> list[str]:
    out = [path]
    for c in client.get_children(path):
        out += _tree(client, f"{path}/{c}")
    return out


def test_every_node_we_create_carries_our_digest_acl(zk_server, zk_base, kazoo):
    lock = mw.ZooKeeperLock(connect=zk_server.connect, base_path=zk_base, auth=(USER, PASSWORD))
    try:
        held = lock.for_table("secured", None)
        held.acquire(timeout_s=5, holder=HOLDER)
        reg = lock.register_writer("secured", "ingest")
        intruder = kazoo()
        with pytest.raises(NoAuthError):
            intruder.delete(held.node_path)
        with pytest.raises(NoAuthError):
            intruder.delete(reg.path)
        with pytest.raises(NoAuthError):  # nor register a second writer of the same id beside it
            intruder.create(f"{lock.writers_path('secured')}/other", b"x")
        assert reg.is_registered()
        held.check()

        ours = make_digest_acl_credential(USER, PASSWORD)
        admin = kazoo(auth_data=[("digest", f"{USER}:{PASSWORD}")])
        nodes = _tree(admin, zk_base)
        assert held.node_path in nodes and reg.path in nodes
        for node in nodes:
            acls = admin.get_acls(node)[0]
            assert [(a.id.scheme, a.id.id) for a in acls] == [("digest", ours)], node
        # the same credentials in another process may take the lock once it is free (a cleaner elsewhere)
        held.release()
        reg.close()
    finally:
        lock.close()


def test_credentials_through_hudi_style_options(zk_server, zk_base):
    cfg = mw.WriterConfig.from_options({**_zk_options(zk_server, zk_base), ZK_AUTH_KEY: f"{USER}:{PASSWORD}"},
                                       writer_id="w")
    try:
        assert cfg.lock.auth == (USER, PASSWORD)
        assert PASSWORD not in repr(cfg.lock) and PASSWORD not in repr(cfg)
    finally:
        cfg.lock.close()
    with pytest.raises(ConfigError) as bad:
        mw.WriterConfig.from_options({**_zk_options(zk_server, zk_base), ZK_AUTH_KEY: "no-colon-" + PASSWORD})
    assert PASSWORD not in str(bad.value) and ZK_AUTH_KEY in str(bad.value)
    with pytest.raises(ConfigError, match="without hoodie.write.lock.provider"):
        mw.WriterConfig.from_options({ZK_AUTH_KEY: f"{USER}:{PASSWORD}"})


def test_the_spark_options_take_the_credentials_too(zk_server, zk_base):
    from multiwriter.spark.options import _lock

    lock = _lock({**_zk_options(zk_server, zk_base), ZK_AUTH_KEY: f"{USER}:{PASSWORD}", "path": "/x"}, ZK_PROVIDER,
                 None)
    try:
        assert lock.auth == (USER, PASSWORD)
    finally:
        lock.close()


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if k != "MULTIWRITER_ZK_AUTH"}
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "multiwriter.cli", *args], capture_output=True, text=True,
                          timeout=180, env=e)


def test_multiwriter_clean_with_credentials_takes_the_protected_lock(zk_server, zk_base, trips_table, table_path):
    lock = mw.ZooKeeperLock(connect=zk_server.connect, base_path=zk_base, auth=(USER, PASSWORD))
    try:
        mw.write(trips(range(3)), table_path, mw.WriterConfig(lock=lock, writer_id="ingest"))
    finally:
        lock.close()
    common = ("clean", table_path, "--zk", zk_server.connect, "--zk-base-path", zk_base, "--once",
              "--observe-max", "1", "--no-clustering")
    outs = []
    # without the credentials: refused with a clear message, no traceback
    out = _cli(*common)
    outs.append(out)
    assert out.returncode != 0 and "Traceback" not in out.stderr, out.stderr[-3000:]
    assert "NoAuthError" in out.stdout and "--zk-auth USER:PASSWORD or $MULTIWRITER_ZK_AUTH" in out.stdout, out.stdout
    # with them: from the environment, the flag, or the Hudi-style key
    for args, env in (((), {"MULTIWRITER_ZK_AUTH": f"{USER}:{PASSWORD}"}),
                      (("--zk-auth", f"{USER}:{PASSWORD}"), None)):
        out = _cli(*common, *args, env=env)
        outs.append(out)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    host, port = zk_server.connect.rsplit(":", 1)
    hudi = ("clean", table_path, "--once", "--observe-max", "1", "--no-clustering",
            "--hoodie-conf", f"hoodie.write.lock.provider={ZK_PROVIDER}",
            "--hoodie-conf", f"hoodie.write.lock.zookeeper.url={host}",
            "--hoodie-conf", f"hoodie.write.lock.zookeeper.port={port}",
            "--hoodie-conf", f"hoodie.write.lock.zookeeper.base_path={zk_base}")
    out = _cli(*hudi, "--hoodie-conf", f"{ZK_AUTH_KEY}={USER}:{PASSWORD}")
    outs.append(out)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    out = _cli(*hudi, env={"MULTIWRITER_ZK_AUTH": f"{USER}:{PASSWORD}"})
    outs.append(out)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    out = _cli("status", table_path, "--zk", zk_server.connect, "--zk-base-path", zk_base, "--json", "--observe", "0",
               env={"MULTIWRITER_ZK_AUTH": f"{USER}:{PASSWORD}"})
    outs.append(out)
    assert out.returncode == 0, out.stderr[-3000:]
    assert not [o for o in outs if PASSWORD in o.stdout + o.stderr]
