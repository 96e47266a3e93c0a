"""A local server in a process of its own: started with ``python -m <module> <port file> ...``,
it says its port by writing it to the port file once it listens (:func:`announce`).

Servers the measured or tested code talks to run apart from it when sharing its interpreter lock
would distort what is measured (moto's S3 for request costs) or stall it (a server that pyarrow's
GCS calls wait on while holding that lock).
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def announce(port_file: str, port: int) -> None:
    """Written whole or not at all: the starter never reads half a number."""
    with open(port_file + ".tmp", "w") as f:
        f.write(str(port))
    os.replace(port_file + ".tmp", port_file)


class ServerProcess:
    """``ServerProcess("testbed.moto_s3", "0.015", "1")``: the module's server started, its
    :attr:`port` known; :meth:`stop` ends it (this process started it: it stops only that one)."""

    def __init__(self, module: str, *args: str, start_timeout_s: float = 60.0) -> None:
        self.dir = tempfile.mkdtemp(prefix="server-")
        port_file = os.path.join(self.dir, "port")
        log = os.path.join(self.dir, "log")
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        with open(log, "wb") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", module, port_file, *args], cwd=ROOT, env=env,
                                         stdout=subprocess.DEVNULL, stderr=err)
        deadline = time.monotonic() + start_timeout_s
        while not os.path.exists(port_file):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                with open(log, errors="replace") as f:
                    raise RuntimeError(f"{module} did not start: {f.read()[-2000:]}")
            time.sleep(0.05)
        with open(port_file) as f:
            self.port = int(f.read())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
