"""InProcessLock: threads of one process."""
from __future__ import annotations

import threading
import time

import pytest

from multiwriter.errors import ConfigError, LockAcquireTimeout, LockError, LockLostError
from multiwriter.lock import HolderInfo, InProcessLock


def test_threads_take_turns():
    p = InProcessLock()
    inside: list[int] = []
    overlaps: list[int] = []
    counter = [0]

    def worker() -> None:
        lk = p.for_table("shared", None)
        for _ in range(50):
            lk.acquire(timeout_s=5)
            inside.append(1)
            if len(inside) > 1:
                overlaps.append(1)
            n = counter[0]
            time.sleep(0)
            counter[0] = n + 1
            inside.pop()
            lk.check()
            lk.release()

    ts = [threading.Thread(target=worker) for _ in range(4)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert not overlaps and counter[0] == 200


def test_timeout_names_holder_and_tables_are_independent():
    p = InProcessLock(acquire_timeout_s=0.2)
    a = p.for_table("t1", None)
    a.acquire(holder=HolderInfo("ingest", "h", 7))
    with pytest.raises(LockAcquireTimeout, match="t1 not acquired within 0.2s; held by writer 'ingest'"):
        p.for_table("t1", None).acquire()
    other = InProcessLock().for_table("t2", None)  # another provider, another table: free
    other.acquire(timeout_s=0)
    other.release()
    with pytest.raises(LockError, match="already held"):
        a.acquire()
    a.release()
    a.release()
    with pytest.raises(LockLostError):
        a.check()
    with a:
        assert a.is_held()
    assert not a.is_held()


def test_configuration_errors():
    with pytest.raises(ConfigError):
        InProcessLock(acquire_timeout_s=-1)
    with pytest.raises(ConfigError):
        InProcessLock().for_table("no/slash", None)
