"""Fixtures of the lock tests: one real ZooKeeper per session, fresh base paths, child processes.

Self-contained on purpose (it may move to ``tests/conftest.py``): nothing here is mocked.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

ROOT = Path(__file__).resolve().parents[2]

#: A child process that uses one lock; driven through argv (JSON) and its stdin/stdout lines.
CHILD = r'''
import json, os, sys, time
from multiwriter.lock import FileSystemLock, HolderInfo, ZooKeeperLock
from multiwriter.storage import Storage

a = json.loads(sys.argv[1])
if a["kind"] == "zk":
    provider = ZooKeeperLock(connect=a["connect"], base_path=a["base"], session_timeout_s=a.get("session_timeout_s", 10.0))
    storage = None
else:
    provider = FileSystemLock(lease_s=a.get("lease_s", 30.0), poll_s=0.01)
    storage = Storage(a["path"])

def say(*words):
    print(*words, flush=True)

if a["mode"] == "register":
    reg = provider.register_writer(a["table"], a["writer"])
    say("registered")
    sys.stdin.readline()
    reg.close()
    provider.close()
    sys.exit(0)

lock = provider.for_table(a["table"], storage)
holder = HolderInfo.current(a.get("writer", "child"))
if a["mode"] == "count":
    # Read-modify-write a counter with a pause in between, and log entries and exits: any
    # overlap of two holders shows up as a lost increment or an interleaved log.
    for _ in range(a["n"]):
        lock.acquire(timeout_s=60, holder=holder)
        with open(a["log"], "a") as f:
            f.write(f"enter {os.getpid()}\n")
        n = int(open(a["counter"]).read() or 0)
        time.sleep(a.get("hold_s", 0.002))
        open(a["counter"], "w").write(str(n + 1))
        with open(a["log"], "a") as f:
            f.write(f"exit {os.getpid()}\n")
        lock.check()
        lock.release()
    say("done")
elif a["mode"] == "hold":
    lock.acquire(timeout_s=30, holder=holder)
    say("held")
    if sys.stdin.readline().strip() == "release":
        lock.release()
        say("released")
        sys.stdin.readline()
elif a["mode"] == "die":
    lock.acquire(timeout_s=30, holder=holder)
    say("held")
    os._exit(0)  # no release, no atexit: like a crash
'''


@pytest.fixture(scope="session")
def zk_server() -> Iterator:
    """One real ZooKeeper on 127.0.0.1 for the whole session; its log is printed if it died."""
    from multiwriter.zookeeper_local import LocalZooKeeper

    zk = LocalZooKeeper(port=0)
    zk.start()
    try:
        yield zk
    finally:
        if not zk.running:
            print(f"ZooKeeper at {zk.connect} had died; end of its log:\n{zk.log_tail()}", file=sys.stderr)
        zk.close()


@pytest.fixture()
def zk_base() -> str:
    """A fresh ZooKeeper base path per test (a chroot-like namespace)."""
    return f"/mwtest-{uuid.uuid4().hex[:10]}"


@pytest.fixture()
def kazoo(zk_server) -> Iterator[Callable[..., KazooClient]]:
    """Independent kazoo clients (their own sessions), stopped at teardown."""
    made: list[KazooClient] = []

    def make(**kw) -> KazooClient:
        c = KazooClient(hosts=zk_server.connect, **kw)
        c.start(timeout=10)
        made.append(c)
        return c

    yield make
    for c in made:
        c.stop()
        c.close()


def expire_session(client: KazooClient, connect: str) -> None:
    """Make the server expire ``client``'s session now: attach a second client to the same
    session id and password, then close that session (kazoo's test-harness trick)."""
    session_id, password = client.client_id
    twin = KazooClient(hosts=connect, client_id=(session_id, password))
    twin.start(timeout=10)
    twin.stop()
    twin.close()


def wait_until(predicate: Callable[[], bool], timeout_s: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"{what} not reached within {timeout_s}s"
        time.sleep(0.05)


def assert_no_overlap(log: Path) -> None:
    """Every ``enter <pid>`` line is followed by the same pid's ``exit``: no two holders at once."""
    lines = log.read_text().split("\n")[:-1]
    assert lines and len(lines) % 2 == 0
    for enter, leave in zip(lines[::2], lines[1::2], strict=False):
        assert enter.startswith("enter ") and leave == "exit " + enter.split()[1], (enter, leave)


class Child:
    """A lock-using child process (see ``CHILD``), talked to line by line."""

    def __init__(self, args: dict) -> None:
        env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, json.dumps(args)], cwd=str(ROOT), env=env, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )

    def expect(self, line: str, timeout_s: float = 30.0) -> None:
        got = self.proc.stdout.readline().strip()  # the child prints promptly or dies
        if got != line:
            self.proc.kill()
            _, err = self.proc.communicate(timeout=timeout_s)
            raise AssertionError(f"child said {got!r}, expected {line!r}; stderr:\n{err}")

    def send(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def finish(self, timeout_s: float = 60.0) -> int:
        out, err = self.proc.communicate(timeout=timeout_s)
        assert self.proc.returncode == 0, f"child failed ({self.proc.returncode}):\n{out}\n{err}"
        return self.proc.returncode


@pytest.fixture()
def child() -> Iterator[Callable[[dict], Child]]:
    """Start lock-using child processes; any still running at teardown is killed (by its own handle)."""
    made: list[Child] = []

    def start(args: dict) -> Child:
        made.append(Child(args))
        return made[-1]

    yield start
    for c in made:
        if c.proc.poll() is None:
            c.proc.kill()
            c.proc.communicate()
