"""``LocalZooKeeper``: a real ZooKeeper server started from the jars the installed pyspark ships;
``LocalZooKeeperEnsemble``: several of them forming one quorum.

Why: tests, the demo and the notebooks need a real ensemble (mocks hide exactly the session and
ordering behaviour the table lock depends on), and every machine that runs multiwriter already
has pyspark's ``zookeeper-*.jar`` and a Java runtime.

The server binds 127.0.0.1 only: ``ZooKeeperServerMain <port> <dir>`` would listen on every
interface, so a small ``zoo.cfg`` with ``clientPortAddress=127.0.0.1`` is written instead. The
process is stopped through the ``Popen`` handle this object created, never by name::

    with LocalZooKeeper(port=0) as zk:
        client = KazooClient(hosts=zk.connect)   # "127.0.0.1:<port>"

An ensemble (quorum peers on loopback, leader elections, failover) for failure tests::

    with LocalZooKeeperEnsemble(size=3) as ens:
        client = KazooClient(hosts=ens.connect)  # "127.0.0.1:<p1>,127.0.0.1:<p2>,127.0.0.1:<p3>"
        n = ens.leader()                          # 1..3, the server that leads now
        ens.kill(n)                               # SIGKILL; the other two elect a new leader
        ens.start(n)                              # it rejoins as a follower
"""
from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

from .errors import ZooKeeperStartError

if TYPE_CHECKING:  # pragma: no cover
    from typing_extensions import Self

log = logging.getLogger(__name__)

MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
QUORUM_MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
#: how often ``start`` picks another port when an automatically chosen one was taken meanwhile
PORT_ATTEMPTS = 3
STOP_GRACE_S = 10.0
LOG_TAIL_CHARS = 3000

#: standalone server on loopback; ``4lw``/admin settings repeat the -D flags for older releases
ZOO_CFG = """\
tickTime={tick}
dataDir={data}
clientPort={port}
clientPortAddress=127.0.0.1
maxSessionTimeout={max_session}
maxClientCnxns=200
4lw.commands.whitelist=*
admin.enableServer=false
"""

#: INFO to stdout, which goes to the log file (without a config log4j2 prints only errors)
LOG4J2_PROPERTIES = """\
rootLogger.level = info
rootLogger.appenderRef.stdout.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{ISO8601} %-5p [%t] %c{1}: %m%n
"""


def pyspark_jars() -> Path:
    """The ``jars`` directory of the installed pyspark, found without importing pyspark (slow)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise ZooKeeperStartError("pyspark is not installed in this environment; run `make install`")
    jars = Path(next(iter(spec.submodule_search_locations))) / "jars"
    if not any(jars.glob("zookeeper-*.jar")):
        raise ZooKeeperStartError(f"no zookeeper-*.jar in {jars}; reinstall pyspark (`make install`)")
    return jars


def find_java() -> str:
    """``$JAVA_HOME/bin/java`` if set, else ``java`` on the PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(Path(home) / "bin" / "java", os.X_OK):
        return str(Path(home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise ZooKeeperStartError(
            "java was not found (neither $JAVA_HOME/bin/java nor `java` on the PATH); "
            "install a Java 17+ runtime to run a local ZooKeeper"
        )
    return java


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (another process may still take it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_ports(n: int) -> list[int]:
    """``n`` distinct free loopback ports (each free a moment ago)."""
    ports: list[int] = []
    while len(ports) < n:
        p = free_port()
        if p not in ports:
            ports.append(p)
    return ports


def four_letter_word(port: int, word: bytes, timeout_s: float = 1.0) -> bytes:
    """Send a ZooKeeper four-letter command to 127.0.0.1:port; b"" when nothing answers."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
            s.sendall(word)
            chunks = []
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                chunks.append(chunk)
            return b"".join(chunks)
    except OSError:
        return b""


@dataclass
class _Runtime:
    """What must be cleaned up even when the owner forgets ``close()`` (see ``weakref.finalize``)."""

    proc: subprocess.Popen[bytes] | None = None
    log_file: IO[bytes] | None = None
    owned_dirs: list[Path] = field(default_factory=list)


def _terminate(rt: _Runtime) -> None:
    """Stop the process this runtime started: SIGTERM, then SIGKILL after a grace period."""
    proc, rt.proc = rt.proc, None
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            log.warning("ZooKeeper pid %s ignored SIGTERM for %.0fs; killing it", proc.pid, STOP_GRACE_S)
            proc.kill()
            proc.wait()
    if rt.log_file is not None:
        rt.log_file.close()
        rt.log_file = None


def _kill(rt: _Runtime) -> None:
    """SIGKILL the process this runtime started (a crash: no clean shutdown) and reap it."""
    proc = rt.proc
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait()
    _terminate(rt)


def _finalize(rt: _Runtime) -> None:
    """Last resort at garbage collection or interpreter exit: no JVM or temp dir outlives us."""
    _terminate(rt)
    for d in rt.owned_dirs:
        shutil.rmtree(d, ignore_errors=True)


class LocalZooKeeper:
    """A standalone ZooKeeper on 127.0.0.1 for tests, the demo and notebooks.

    ``port=0`` picks a free loopback port (fixed for the object's life, so :meth:`restart` comes
    back on the same address). ``data_dir=None`` uses a temporary directory that :meth:`close`
    removes; a given ``data_dir`` is kept. The config and the server log (:attr:`log_path`) live
    in a temporary work directory.
    """

    def __init__(
        self,
        port: int = 0,
        data_dir: str | os.PathLike[str] | None = None,
        startup_timeout_s: float = 30.0,
        *,
        heap: str = "256m",
        tick_time_ms: int = 2000,
        max_session_timeout_ms: int = 60000,
    ) -> None:
        if not 0 <= int(port) <= 65535:
            raise ZooKeeperStartError(f"port {port} is not a TCP port (0 picks a free one)")
        self._auto_port = int(port) == 0
        self.port = int(port) or free_port()
        self.startup_timeout_s = float(startup_timeout_s)
        self.heap = heap
        self.tick_time_ms = int(tick_time_ms)
        self.max_session_timeout_ms = int(max_session_timeout_ms)
        self._rt = _Runtime()
        self.work_dir = Path(tempfile.mkdtemp(prefix="mw-zk-"))
        self._rt.owned_dirs.append(self.work_dir)
        if data_dir is None:
            self.data_dir = self.work_dir / "data"
        else:
            self.data_dir = Path(data_dir).resolve()
        self._finalizer = weakref.finalize(self, _finalize, self._rt)
        self._mu = threading.Lock()

    #: the JVM entry point; a quorum member (``LocalZooKeeperEnsemble``) runs QuorumPeerMain
    main_class = MAIN_CLASS

    # -- addresses and state -----------------------------------------------------------------
    @property
    def connect(self) -> str:
        """The kazoo/ZooKeeper connect string, ``"127.0.0.1:<port>"``."""
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        """The PID of the running server process, None when stopped."""
        proc = self._rt.proc
        return proc.pid if proc is not None and proc.poll() is None else None

    @property
    def running(self) -> bool:
        return self.pid is not None

    @property
    def log_path(self) -> Path:
        return self.work_dir / "zookeeper.log"

    def log_tail(self, chars: int = LOG_TAIL_CHARS) -> str:
        """The end of the server log, for error messages and failing tests."""
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no server log)"

    def __repr__(self) -> str:
        return f"LocalZooKeeper(connect={self.connect!r}, pid={self.pid}, data_dir={str(self.data_dir)!r})"

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> Self:
        """Start the server and wait until it serves requests; a running server is left alone."""
        with self._mu:
            if not self._finalizer.alive:
                raise ZooKeeperStartError(f"{self!r} was closed (its directories are gone); create a new one")
            if self.running:
                return self
            java, jars = find_java(), pyspark_jars()
            for attempt in range(1, PORT_ATTEMPTS + 1):
                if self._launch_and_wait(java, jars):
                    log.info("ZooKeeper serving at %s (pid %s, data %s)", self.connect, self.pid, self.data_dir)
                    return self
                tail = self.log_tail()
                _terminate(self._rt)
                if self._auto_port and "Address already in use" in tail and attempt < PORT_ATTEMPTS:
                    log.info("port %d was taken meanwhile; trying another", self.port)
                    self.port = free_port()
                    continue
                raise ZooKeeperStartError(
                    f"ZooKeeper did not come up at {self.connect} within {self.startup_timeout_s:.0f}s "
                    f"(log: {self.log_path}); last lines of its log:\n{tail}"
                )
            raise AssertionError("unreachable")  # pragma: no cover

    def stop(self) -> None:
        """Stop the server this object started (its own process handle); idempotent.

        The data directory stays, so :meth:`start` brings back the same sessions and nodes.
        """
        with self._mu:
            pid = self.pid
            _terminate(self._rt)
            if pid is not None:
                log.info("ZooKeeper at %s (pid %s) stopped", self.connect, pid)

    def kill(self) -> None:
        """SIGKILL the server this object started (a crash, for failure tests); idempotent.

        Like :meth:`stop`, the data directory stays for :meth:`start`."""
        with self._mu:
            pid = self.pid
            _kill(self._rt)
            if pid is not None:
                log.info("ZooKeeper at %s (pid %s) killed", self.connect, pid)

    def restart(self) -> Self:
        """Stop and start again on the same port and data directory (chaos tests)."""
        self.stop()
        return self.start()

    def close(self) -> None:
        """Stop the server and remove the temporary directories this object created."""
        self._finalizer()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ----------------------------------------------------------------------------
    def _launch_and_wait(self, java: str, jars: Path) -> bool:
        """Start the JVM and poll until it serves; False if it exited or timed out."""
        cfg = self._write_config()
        cmd = [
            java,
            f"-Xmx{self.heap}",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",  # C1 only: halves start-up on a busy machine; plenty for a test server
            "-Dzookeeper.4lw.commands.whitelist=*",
            "-Dzookeeper.admin.enableServer=false",
            f"-Dlog4j2.configurationFile={self._write_log_config()}",
            "-cp",
            f"{jars}{os.sep}*",
            self.main_class,
            str(cfg),
        ]
        self._rt.log_file = open(self.log_path, "ab")  # noqa: SIM115 - open while the server runs; closed by _terminate
        self._rt.proc = subprocess.Popen(
            cmd, stdout=self._rt.log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.work_dir
        )
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._rt.proc.poll() is not None:
                return False
            if self._serves_our_data_dir():
                return True
            time.sleep(0.1)
        return False

    def _serves_our_data_dir(self) -> bool:
        """True once *our* server answers: another server that grabbed the port has another dataDir."""
        conf = four_letter_word(self.port, b"conf").decode(errors="replace")
        return f"dataDir={self.data_dir}{os.sep}" in conf

    def _config_text(self) -> str:
        return ZOO_CFG.format(tick=self.tick_time_ms, data=self.data_dir, port=self.port,
                              max_session=self.max_session_timeout_ms)

    def _write_config(self) -> Path:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cfg = self.work_dir / "zoo.cfg"
        cfg.write_text(self._config_text())
        return cfg

    def _write_log_config(self) -> Path:
        """Log INFO to stdout (redirected to :attr:`log_path`); without it log4j2 prints only errors."""
        path = self.work_dir / "log4j2.properties"
        path.write_text(LOG4J2_PROPERTIES)
        return path


#: the quorum part of a member's zoo.cfg: time limits in ticks (initial sync; follower lag)
QUORUM_CFG = """\
initLimit={init_limit}
syncLimit={sync_limit}
"""


class _QuorumMember(LocalZooKeeper):
    """One server of a :class:`LocalZooKeeperEnsemble`: a ``LocalZooKeeper`` run by
    ``QuorumPeerMain`` with the ensemble's ``server.N`` lines and its own ``myid``."""

    main_class = QUORUM_MAIN_CLASS

    def __init__(self, myid: int, servers: list[str], *, init_limit: int, sync_limit: int, startup_timeout_s: float,
                 heap: str, tick_time_ms: int, max_session_timeout_ms: int) -> None:
        super().__init__(port=0, startup_timeout_s=startup_timeout_s, heap=heap, tick_time_ms=tick_time_ms,
                         max_session_timeout_ms=max_session_timeout_ms)
        self.myid = myid
        self._servers = servers
        self._quorum_cfg = QUORUM_CFG.format(init_limit=init_limit, sync_limit=sync_limit)

    def __repr__(self) -> str:
        return f"ZooKeeper server {self.myid} (connect={self.connect!r}, pid={self.pid})"

    def _config_text(self) -> str:
        (self.data_dir / "myid").write_text(f"{self.myid}\n")
        return super()._config_text() + self._quorum_cfg + "".join(f"{line}\n" for line in self._servers)

    def mode(self) -> str | None:
        """Its role by ``srvr``: "leader" or "follower" while it serves in a quorum, else None."""
        if not self.running:
            return None
        out = four_letter_word(self.port, b"srvr").decode(errors="replace")
        for line in out.splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return None


class LocalZooKeeperEnsemble:
    """``size`` ZooKeeper servers on 127.0.0.1 forming one quorum, for failover tests.

    Every port (client, quorum, election) is a free loopback port; each server has its own
    temporary work and data directory with its ``myid``, and its own ``zoo.cfg`` listing
    ``server.N=127.0.0.1:<quorum port>:<election port>`` for all. Servers are numbered 1..size
    (their ``myid``). Processes are stopped or killed through the handles this object created.

    A short ``tick_time_ms`` makes failover quick: followers give up on a silent leader after
    ``sync_limit`` ticks. The servers grant session timeouts between two ticks and
    ``max_session_timeout_ms``.
    """

    def __init__(
        self,
        size: int = 3,
        startup_timeout_s: float = 60.0,
        *,
        heap: str = "192m",
        tick_time_ms: int = 500,
        init_limit: int = 20,
        sync_limit: int = 4,
        max_session_timeout_ms: int = 60000,
    ) -> None:
        if int(size) < 2:
            raise ZooKeeperStartError(f"an ensemble needs at least 2 servers, not {size}; use LocalZooKeeper for one")
        self.size = int(size)
        ports = free_ports(2 * self.size)
        self.servers = [f"server.{n}=127.0.0.1:{ports[2 * n - 2]}:{ports[2 * n - 1]}" for n in range(1, self.size + 1)]
        self.members: dict[int, _QuorumMember] = {
            n: _QuorumMember(n, self.servers, init_limit=init_limit, sync_limit=sync_limit,
                             startup_timeout_s=startup_timeout_s, heap=heap, tick_time_ms=tick_time_ms,
                             max_session_timeout_ms=max_session_timeout_ms)
            for n in range(1, self.size + 1)
        }

    # -- addresses and state -----------------------------------------------------------------
    @property
    def connect(self) -> str:
        """The connect string naming every server: ``"127.0.0.1:<p1>,127.0.0.1:<p2>,..."``."""
        return ",".join(m.connect for m in self.members.values())

    def member(self, n: int) -> LocalZooKeeper:
        """Server ``n`` (1..size): its ``port``, ``pid``, ``log_path``, ``log_tail()``."""
        if n not in self.members:
            raise KeyError(f"no server {n} in this ensemble (servers are 1..{self.size})")
        return self.members[n]

    @property
    def pids(self) -> dict[int, int | None]:
        return {n: m.pid for n, m in self.members.items()}

    def modes(self) -> dict[int, str | None]:
        """Each server's role now ("leader", "follower"; None when down or electing), by ``srvr``."""
        return {n: m.mode() for n, m in self.members.items()}

    def leader(self, timeout_s: float = 0.0) -> int | None:
        """The number of the server that leads, asked with ``srvr``; polls up to ``timeout_s``
        for one (an election in progress); None if no server leads by then."""
        deadline = time.monotonic() + float(timeout_s)
        while True:
            for n, mode in self.modes().items():
                if mode == "leader":
                    return n
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.05)

    def __repr__(self) -> str:
        return f"LocalZooKeeperEnsemble(connect={self.connect!r}, pids={self.pids})"

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self, n: int | None = None) -> Self:
        """Start server ``n`` (a restart after :meth:`kill` or :meth:`stop`), or with no ``n``
        every server not running, together (none serves before a quorum is up). Returns once
        the started servers serve clients, i.e. have joined a quorum."""
        if n is not None:
            self.member(n).start()
            return self
        todo = [m for m in self.members.values() if not m.running]
        errors: list[str] = []

        def run(m: _QuorumMember) -> None:
            try:
                m.start()
            except ZooKeeperStartError as e:
                errors.append(f"server {m.myid}: {e}")

        threads = [threading.Thread(target=run, args=(m,), daemon=True, name=f"mw-zk-start-{m.myid}") for m in todo]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            self.stop()
            raise ZooKeeperStartError("the ZooKeeper ensemble did not come up:\n" + "\n".join(errors))
        log.info("ZooKeeper ensemble serving at %s (leader: server %s)", self.connect, self.leader(timeout_s=5.0))
        return self

    def kill(self, n: int) -> None:
        """SIGKILL server ``n`` (its own process handle): a crash, its data directory kept."""
        self.member(n).kill()

    def stop(self, n: int | None = None) -> None:
        """Stop server ``n``, or every server this object started; idempotent. Data is kept."""
        for m in [self.member(n)] if n is not None else list(self.members.values()):
            m.stop()

    def close(self) -> None:
        """Stop every server and remove their temporary directories."""
        for m in self.members.values():
            m.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- command line: `multiwriter zookeeper --port N` ------------------------------------------
def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="multiwriter zookeeper", description="Run a local ZooKeeper in the foreground.")
    p.add_argument("--port", type=int, default=2181, help="client port on 127.0.0.1 (0 picks a free one)")
    p.add_argument("--data-dir", default=None, help="keep data here (default: a temporary directory)")
    return p


def main(argv: Sequence[str] | None = None, *, port: int | None = None) -> int:
    """Serve until Ctrl-C (or SIGTERM); returns the exit code (1 if the server died by itself).

    ``main(["--port", "2181"])`` for a command line; ``main(port=2181)`` from Python.
    """
    args = _parser().parse_args(list(argv) if argv is not None else [])
    if port is not None:
        args.port = port
    in_main = threading.current_thread() is threading.main_thread()
    # SIGTERM -> KeyboardInterrupt, so the JVM is stopped instead of orphaned.
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler) if in_main else None
    try:
        with LocalZooKeeper(port=args.port, data_dir=args.data_dir) as zk:
            print(f"ZooKeeper serving at {zk.connect} (pid {zk.pid}, log {zk.log_path}); Ctrl-C to stop", flush=True)
            try:
                while zk.running:
                    time.sleep(0.5)
            except KeyboardInterrupt:
                print("stopping ZooKeeper", flush=True)
                return 0
            print(f"ZooKeeper exited on its own; last lines of its log:\n{zk.log_tail()}", file=sys.stderr, flush=True)
            return 1
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)


__all__ = [
    "LocalZooKeeper", "LocalZooKeeperEnsemble", "ZooKeeperStartError", "find_java", "four_letter_word", "free_port",
    "free_ports", "main", "pyspark_jars",
]

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
