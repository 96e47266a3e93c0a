"""``multiwriter clean | cluster | status`` take the keys a JVM writer of the table is given
(``--props FILE``, ``--hoodie-conf KEY=VALUE``): they lock the znode Hudi's ZooKeeper lock
provider locks (checked against a real Curator mutex), and refuse keys they do not know or that
contradict a flag or the table."""
from __future__ import annotations

import json
import time
import subprocess
import sys
from pathlib import Path

import pytest

import multiwriter as mw
from multiwriter.cli import main
from multiwriter.config import ZK_PROVIDER
from tests.conftest import trips


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "multiwriter.cli", *args], capture_output=True, text=True, timeout=120)


def _jvm_keys(zk_server, zk_base) -> dict[str, str]:
    host, port = zk_server.connect.rsplit(":", 1)
    return {
        "hoodie.table.name": "trips",
        "hoodie.write.concurrency.mode": "optimistic_concurrency_control",
        "hoodie.cleaner.policy.failed.writes": "LAZY",
        "hoodie.write.lock.provider": ZK_PROVIDER,
        "hoodie.write.lock.zookeeper.url": host,
        "hoodie.write.lock.zookeeper.port": port,
        "hoodie.write.lock.zookeeper.base_path": zk_base,
        "hoodie.client.heartbeat.interval_in_ms": "1000",
        "hoodie.client.heartbeat.tolerable.misses": "2",
    }


def _props(path: Path, keys: dict[str, str]) -> str:
    path.write_text("# what the JVM writers of the table are given\n" + "".join(f"{k}={v}\n" for k, v in keys.items()))
    return str(path)


def test_commands_take_the_jvm_writers_lock_keys(curator, zk_server, zk_base, trips_table, table_path, tmp_path):
    keys = _jvm_keys(zk_server, zk_base)
    cfg = mw.WriterConfig.from_options(keys, writer_id="py")
    for k in range(3):
        mw.write(trips(range(k * 10, k * 10 + 10)), table_path, cfg)
    props = _props(tmp_path / "hudi.properties", keys)

    jvm = curator(f"{zk_base}/trips")  # what Hudi's ZookeeperBasedLockProvider locks for this table
    jvm.expect("ACQUIRED")
    started = time.monotonic()
    held = cli("cluster", table_path, "--once", "--props", props, "--hoodie-conf", "hoodie.write.lock.wait_time_ms=1000",
               "--min-file-groups", "2")
    assert held.returncode == 1, held.stderr
    assert time.monotonic() - started < 30, "the key's 1 s wait for the lock, not the default 60 s"
    assert "Curator" in held.stdout + held.stderr and f"{zk_base}/trips" in held.stdout + held.stderr
    jvm.release()
    done = cli("cluster", table_path, "--once", "--props", props, "--min-file-groups", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "clustered 3 file groups" in done.stdout
    cleaned = cli("clean", table_path, "--once", "--props", props)
    assert cleaned.returncode == 0, cleaned.stdout + cleaned.stderr

    reg = cfg.lock.register_writer(mw.Table.open(table_path).table_id, "py")
    try:
        status = cli("status", table_path, "--json", "--props", props)
    finally:
        reg.close()
        cfg.lock.close()
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["live_writers"] == ["py"]


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--hoodie-conf", "hoodie.no.such.key=1"], "unknown option 'hoodie.no.such.key'"),
        (["--hoodie-conf", "hoodie.cleaner.policy.failed.writes=EAGER"], "hoodie.cleaner.policy.failed.writes='EAGER'"),
        (["--hoodie-conf", "hoodie.table.name=rides"], "hoodie.table.name='rides'"),
        (["--hoodie-conf", "hoodie.client.heartbeat.interval_in_ms=5000", "--heartbeat-interval", "7"],
         "--heartbeat-interval 7.0 and the Hudi key"),
        (["--hoodie-conf", "writer_id=x"], "unknown option 'writer_id'"),
        (["--hoodie-conf", "hoodie.write.lock.zookeeper.url=127.0.0.1"], "without hoodie.write.lock.provider"),
    ],
)
def test_unknown_or_contradictory_keys_are_named(trips_table, table_path, capsys, args, named):
    assert main(["clean", table_path, "--once", *args]) == 2
    assert named in capsys.readouterr().err


def test_a_lock_given_by_keys_and_flags_is_refused(zk_server, zk_base, trips_table, table_path, tmp_path, capsys):
    props = _props(tmp_path / "hudi.properties", _jvm_keys(zk_server, zk_base))
    assert main(["status", table_path, "--props", props, "--zk", zk_server.connect]) == 2
    assert "hoodie.write.lock.provider and --zk both name the lock" in capsys.readouterr().err
