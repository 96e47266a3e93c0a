"""``LocalZooKeeper``: a real ZooKeeper server from the jars the installed pyspark ships.

Bound to 127.0.0.1 only (a ``zoo.cfg`` with ``clientPortAddress``), data in a temporary
directory, stopped by the PID of the process it started. For tests, the demo and notebooks.
"""
from __future__ import annotations

import importlib.util
import logging
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from .errors import MultiWriterError

log = logging.getLogger(__name__)


class ZooKeeperStartError(MultiWriterError):
    """The local ZooKeeper server could not be started."""


def pyspark_jars() -> Path:
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise ZooKeeperStartError("pyspark is not installed; run `make install`")
    jars = Path(list(spec.submodule_search_locations)[0]) / "jars"
    if not any(jars.glob("zookeeper-*.jar")):
        raise ZooKeeperStartError(f"no zookeeper jar in {jars}")
    return jars


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ruok(port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(b"ruok")
            return s.recv(4) == b"imok"
    except OSError:
        return False


class LocalZooKeeper:
    """``with LocalZooKeeper(port=0) as zk: zk.connect  # "127.0.0.1:<port>"``."""

    def __init__(self, port: int = 0, data_dir: str | None = None, startup_timeout_s: float = 30.0) -> None:
        self.port = port or free_port()
        self._own_dir = data_dir is None
        self.dir = Path(data_dir or tempfile.mkdtemp(prefix="mw-zk-"))
        self.startup_timeout_s = startup_timeout_s
        self._proc: subprocess.Popen | None = None
        self._log = None

    @property
    def connect(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def log_path(self) -> Path:
        return self.dir / "zookeeper.log"

    def _config(self) -> Path:
        (self.dir / "data").mkdir(parents=True, exist_ok=True)
        cfg = self.dir / "zoo.cfg"
        cfg.write_text(
            f"tickTime=500\ninitLimit=10\nsyncLimit=5\ndataDir={self.dir / 'data'}\n"
            f"clientPort={self.port}\nclientPortAddress=127.0.0.1\nmaxClientCnxns=200\n"
            "minSessionTimeout=1000\nmaxSessionTimeout=60000\n4lw.commands.whitelist=*\n"
            "admin.enableServer=false\n"
        )
        return cfg

    def start(self) -> LocalZooKeeper:
        if self._proc is not None and self._proc.poll() is None:
            return self
        java = shutil.which("java")
        if java is None:
            raise ZooKeeperStartError("java not found on PATH; install Java 17 to run a local ZooKeeper")
        cmd = [java, "-Xmx256m", "-Dzookeeper.4lw.commands.whitelist=*", "-Dzookeeper.admin.enableServer=false",
               "-cp", f"{pyspark_jars()}/*", "org.apache.zookeeper.server.ZooKeeperServerMain", str(self._config())]
        self._log = open(self.log_path, "ab")
        self._proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                break
            if _ruok(self.port):
                log.info("ZooKeeper up at %s (pid %s)", self.connect, self._proc.pid)
                return self
            time.sleep(0.1)
        tail = self.log_path.read_text(errors="replace")[-2000:] if self.log_path.exists() else ""
        self.stop()
        raise ZooKeeperStartError(f"ZooKeeper did not come up at {self.connect} within {self.startup_timeout_s}s:\n{tail}")

    def stop(self) -> None:
        """Stop the server this object started (by its own process handle)."""
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.terminate()
                try:
                    self._proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait()
            self._proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def restart(self) -> None:
        """Stop and start again on the same port and data directory (sessions may survive)."""
        self.stop()
        self.start()

    def close(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> LocalZooKeeper:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def main(port: int = 2181) -> None:
    with LocalZooKeeper(port=port) as zk:
        print(f"ZooKeeper serving at {zk.connect} (pid {zk.pid}); Ctrl-C to stop", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


__all__ = ["LocalZooKeeper", "ZooKeeperStartError", "free_port", "pyspark_jars"]
