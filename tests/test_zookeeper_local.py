"""LocalZooKeeper: a real server from pyspark's jars, on loopback only, stopped by its own PID."""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from multiwriter import zookeeper_local as zl
from multiwriter.zookeeper_local import LocalZooKeeper, ZooKeeperStartError, four_letter_word

ROOT = Path(__file__).resolve().parents[1]
#: /proc/net/tcp{,6} spellings of 127.0.0.1 and ::1 (IPv4, IPv4-mapped IPv6, IPv6 loopback)
LOOPBACK_HEX = {"0100007F", "0000000000000000FFFF00000100007F", "00000000000000000000000001000000"}


def listening_addresses(port: int) -> set[str]:
    """Local addresses (hex, as in /proc/net) that listen on ``port``."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            addr, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.add(addr)
    return found


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_serves_kazoo_on_loopback_only(zk_server):
    assert re.fullmatch(r"127\.0\.0\.1:\d+", zk_server.connect)
    c = KazooClient(hosts=zk_server.connect)
    c.start(timeout=10)
    try:
        assert c.server_version()[0] >= 3
    finally:
        c.stop()
        c.close()
    assert four_letter_word(zk_server.port, b"ruok") == b"imok"
    if not Path("/proc/net/tcp").exists():
        pytest.skip("no /proc/net/tcp to inspect listening sockets")
    addrs = listening_addresses(zk_server.port)
    assert addrs and addrs <= LOOPBACK_HEX, f"ZooKeeper listens on {addrs}, not only on loopback"


def test_stop_restart_and_close(tmp_path):
    zk = LocalZooKeeper(port=0, data_dir=str(tmp_path / "data"))
    with zk:
        first_pid, port = zk.pid, zk.port
        assert first_pid and pid_alive(first_pid)
        c = KazooClient(hosts=zk.connect)
        c.start(timeout=10)
        c.create("/kept", b"v")
        c.stop()
        c.close()
        zk.restart()
        assert zk.port == port and zk.pid != first_pid and not pid_alive(first_pid)
        c = KazooClient(hosts=zk.connect)
        c.start(timeout=10)
        assert c.get("/kept")[0] == b"v", "same data dir after restart"
        c.stop()
        c.close()
        second_pid = zk.pid
        zk.stop()
        zk.stop()  # idempotent
        assert zk.pid is None and not zk.running and not pid_alive(second_pid)
        assert "ZooKeeperServer" in zk.log_path.read_text()
        work_dir = zk.work_dir
    assert not work_dir.exists(), "close() removes the temporary work dir"
    assert (tmp_path / "data").exists(), "a data dir we were given is kept"
    with pytest.raises(ZooKeeperStartError, match="closed"):
        zk.start()


def test_taken_port_fails_with_the_server_log(monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        zk = LocalZooKeeper(port=port, startup_timeout_s=20)
        with pytest.raises(ZooKeeperStartError, match=f"did not come up at 127.0.0.1:{port}") as e:
            zk.start()
        assert "Address already in use" in str(e.value)
        assert zk.pid is None
        zk.close()
        # With port=0, a port taken between choosing and binding is replaced by another.
        picks = iter([port])
        real = zl.free_port
        monkeypatch.setattr(zl, "free_port", lambda: next(picks, None) or real())
        with LocalZooKeeper(port=0) as zk2:
            assert zk2.port != port and four_letter_word(zk2.port, b"ruok") == b"imok"


def test_missing_java_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    zk = LocalZooKeeper(port=0)
    with pytest.raises(ZooKeeperStartError, match="java was not found"):
        zk.start()
    zk.close()


def test_main_serves_in_the_foreground_until_interrupted():
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    port = zl.free_port()
    p = subprocess.Popen([sys.executable, "-m", "multiwriter.zookeeper_local", "--port", str(port)], cwd=str(ROOT),
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        m = re.search(r"serving at 127\.0\.0\.1:(\d+) \(pid (\d+)", line)
        assert m, line + p.stderr.read()
        assert int(m.group(1)) == port and four_letter_word(port, b"ruok") == b"imok"
        java_pid = int(m.group(2))
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=20) == 0
        deadline = time.monotonic() + 5
        while pid_alive(java_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not pid_alive(java_pid), "the server process is stopped with its parent"
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
