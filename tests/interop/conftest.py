"""Fixtures of the interop tests: a real Curator ``InterProcessMutex`` (the lock Hudi's JVM
writers take) in a child JVM, built from the jars pyspark ships and compiled once per session."""
from __future__ import annotations

import os
import queue
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def _classpath() -> str:
    import pyspark

    jars = Path(pyspark.__file__).resolve().parent / "jars"
    if not any(jars.glob("curator-recipes-*.jar")):
        pytest.skip(f"no Curator jars in {jars}")
    return f"{jars}/*"


@pytest.fixture(scope="session")
def curator_classes(tmp_path_factory) -> str:
    """The classpath of the compiled helper plus pyspark's jars."""
    if shutil.which("javac") is None or shutil.which("java") is None:
        pytest.skip("needs a JDK (javac and java)")
    out = tmp_path_factory.mktemp("curator-helper")
    cp = _classpath()
    subprocess.run(["javac", "-cp", cp, "-d", str(out), str(HERE / "CuratorMutex.java")], check=True,
                   capture_output=True, timeout=120)
    return f"{out}{os.pathsep}{cp}"


class CuratorProcess:
    """One JVM contending for a Curator mutex; read its lines with :meth:`expect`."""

    def __init__(self, classpath: str, connect: str, path: str, timeout_ms: int, log: Path) -> None:
        self._stderr = log.open("wb")
        self.proc = subprocess.Popen(
            ["java", "-cp", classpath, "CuratorMutex", connect, path, str(timeout_ms)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.strip())

    def expect(self, want: str, timeout_s: float = 30.0) -> None:
        got = self.lines.get(timeout=timeout_s)
        assert got == want, f"Curator helper said {got!r}, expected {want!r}"

    def nothing_yet(self) -> bool:
        return self.lines.empty()

    def release(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        self.expect("RELEASED")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        self._stderr.close()


@pytest.fixture()
def curator(curator_classes, zk_server, tmp_path) -> Iterator:
    """``curator(path, timeout_ms)`` starts a Curator contender on ``path``; all are killed at teardown."""
    started: list[CuratorProcess] = []

    def start(path: str, timeout_ms: int = 30_000) -> CuratorProcess:
        p = CuratorProcess(curator_classes, zk_server.connect, path, timeout_ms, tmp_path / f"curator{len(started)}.log")
        started.append(p)
        p.expect("CONNECTED", timeout_s=60)
        return p

    yield start
    for p in started:
        p.stop()
