"""The writer's side: files while in flight, one thread per client, and the self-check fence."""
from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from multiwriter.errors import ConfigError, HeartbeatExpiredError
from multiwriter.heartbeat import HeartbeatClient, is_lapsed
from multiwriter.heartbeat import client as client_module
from multiwriter.heartbeat.client import beating_client
from multiwriter.instant_time import format_time
from multiwriter.storage import Storage

FENCE_TEXT = "another writer or the cleaner may already consider this writer dead; the batch will be retried/aborted"


@pytest.fixture()
def storage(tmp_path: Path) -> Storage:
    return Storage(str(tmp_path))


@pytest.fixture()
def clients():
    """Clients made through this fixture are closed even when a test fails."""
    made: list[HeartbeatClient] = []

    def make(storage: Storage, **kw) -> HeartbeatClient:
        kw.setdefault("writer_id", f"w-{uuid.uuid4().hex[:8]}")
        kw.setdefault("interval_s", 1.0)
        c = HeartbeatClient(storage, **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def instant(offset_s: float = 0.0) -> str:
    return format_time(time.time() + offset_s)


def hb_file(root: Path, t: str) -> Path:
    return root / ".hoodie" / ".heartbeat" / t


def read_beat(root: Path, t: str) -> dict:
    return json.loads(hb_file(root, t).read_text())


def beat_threads(c: HeartbeatClient) -> list[threading.Thread]:
    return [th for th in threading.enumerate() if th.name == f"heartbeat-{c.writer_id}"]


def wait_until(cond: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


class BrokenBeats:
    """Makes heartbeat writes fail with an OSError, as a full or read-only disk would.

    Where ``chmod 0o500`` on ``.hoodie/.heartbeat`` blocks writes, use it; as root (which ignores
    the mode) wrap ``storage.write_bytes`` instead.
    """

    def __init__(self, storage: Storage, root: Path) -> None:
        self.storage, self.dir = storage, root / ".hoodie" / ".heartbeat"
        self._real = storage.write_bytes
        self.by_chmod = False

    def on(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.dir.chmod(0o500)
        if self._chmod_blocks_writes():
            self.by_chmod = True
            return
        self.dir.chmod(0o755)

        def failing(rel: str, data: bytes) -> None:
            raise OSError(28, "No space left on device (injected)", rel)

        self.storage.write_bytes = failing  # type: ignore[method-assign]

    def off(self) -> None:
        self.dir.chmod(0o755)
        self.storage.write_bytes = self._real  # type: ignore[method-assign]

    def _chmod_blocks_writes(self) -> bool:
        probe = self.dir / ".probe"
        try:
            probe.write_bytes(b"")
        except PermissionError:
            return True
        probe.unlink()
        return False


@pytest.fixture()
def broken(storage, tmp_path):
    b = BrokenBeats(storage, tmp_path)
    yield b
    b.off()


# -- configuration -------------------------------------------------------------------------------
@pytest.mark.parametrize("kw", [{"interval_s": 0.5}, {"interval_s": float("nan")}, {"tolerable_misses": -1},
                                {"tolerable_misses": 1.5}, {"max_consecutive_failures": 0}])
def test_bad_settings_are_config_errors(storage, kw):
    with pytest.raises(ConfigError):
        HeartbeatClient(storage, **kw)


def test_defaults_are_ten_seconds_and_two_misses(storage):
    c = HeartbeatClient(storage)
    assert (c.interval_s, c.tolerable_misses, c.bound_s) == (10.0, 2, 30.0)


# -- files and the thread ----------------------------------------------------------------------------
def test_start_writes_at_once_beats_while_in_flight_and_stop_deletes(storage, tmp_path, clients):
    ages: list[float] = []

    def flaky_metrics(age: float) -> None:
        ages.append(age)
        raise RuntimeError("metrics down")  # a broken hook must not stop the beats

    c = clients(storage, tolerable_misses=1, on_beat=flaky_metrics)
    t1 = instant()
    c.start(t1)
    first = read_beat(tmp_path, t1)
    assert first["writer_id"] == c.writer_id and first["instant"] == t1
    assert first["pid"] == os.getpid() and first["host"]
    assert abs(first["ts_ms"] / 1000 - time.time()) < 1.0
    assert ages == [0.0], "the first beat is reported at once"

    t2 = instant(1)
    c.start(t2)
    assert len(beat_threads(c)) == 1, "one thread serves every instant of a client"
    t2_first = read_beat(tmp_path, t2)["ts_ms"]
    wait_until(lambda: read_beat(tmp_path, t1)["ts_ms"] > first["ts_ms"]
               and read_beat(tmp_path, t2)["ts_ms"] > t2_first, timeout=3, what="both files rewritten")
    assert len(beat_threads(c)) == 1
    assert ages[-1] == pytest.approx(1.0, abs=0.5), "on_beat gets the time since the previous beat"
    c.check(t1)
    c.check(t2)

    c.stop(t1)
    assert not hb_file(tmp_path, t1).exists() and hb_file(tmp_path, t2).exists()
    assert c.instants == [t2]
    c.stop(t1)  # idempotent
    c.stop(t2)
    assert not hb_file(tmp_path, t2).exists()
    wait_until(lambda: not beat_threads(c), timeout=2, what="the beat loop to end with nothing in flight")

    t3 = instant(2)
    c.start(t3)  # a new batch gets a beat loop again
    assert len(beat_threads(c)) == 1 and hb_file(tmp_path, t3).exists()
    c.close()
    assert not hb_file(tmp_path, t3).exists()
    wait_until(lambda: not beat_threads(c), timeout=2, what="the beat loop to end on close")


def test_a_beat_thread_waits_for_the_next_client_then_ends(storage, tmp_path, clients, monkeypatch):
    """Batches one after the other (``mw.write`` makes a client per call) reuse one beat thread
    instead of starting one each; the next client's heartbeat is as live as ever; a thread
    nobody takes ends after the linger."""
    monkeypatch.setattr(client_module, "LINGER_S", 0.5)
    first, second = clients(storage), clients(storage)
    t1 = instant()
    first.start(t1)
    [served] = beat_threads(first)
    first.stop(t1)
    first.close()
    wait_until(lambda: served.name == client_module.IDLE_NAME, timeout=2, what="the thread to wait for a client")

    t2 = instant(1)
    second.start(t2)
    assert beat_threads(second) == [served], "the waiting thread runs the next client's beats"
    before = read_beat(tmp_path, t2)["ts_ms"]
    wait_until(lambda: read_beat(tmp_path, t2)["ts_ms"] > before, timeout=3, what="a beat from the reused thread")
    second.check(t2)
    second.pause()  # a hang of the next batch still fails its fence
    wait_until(lambda: second.last_beat_age_s(t2) > second.bound_s, timeout=5, what="the bound to pass")
    with pytest.raises(HeartbeatExpiredError, match="older than the bound"):
        second.check(t2)
    second.resume()
    second.stop(t2)
    wait_until(lambda: not served.is_alive(), timeout=3, what="the idle thread to end after the linger")


def test_stop_of_an_unknown_instant_deletes_a_leftover_file(storage, tmp_path, clients):
    c = clients(storage)
    t = instant()
    hb_file(tmp_path, t).parent.mkdir(parents=True)
    hb_file(tmp_path, t).write_text("{}")
    c.stop(t)
    assert not hb_file(tmp_path, t).exists()


def test_start_rejects_a_bad_instant_time(storage, clients):
    with pytest.raises(ValueError):
        clients(storage).start("../../escape")


# -- the self-check ------------------------------------------------------------------------------------
def test_check_passes_while_beating_and_fails_for_an_unknown_instant(storage, clients):
    c = clients(storage)
    t = instant()
    c.start(t)
    c.check(t)
    assert c.last_beat_age_s(t) < 1.0
    other = instant(5)
    assert c.last_beat_age_s(other) is None
    with pytest.raises(HeartbeatExpiredError) as e:
        c.check(other)
    assert other in str(e.value) and "not being beaten" in str(e.value) and FENCE_TEXT in str(e.value)
    c.stop(t)
    with pytest.raises(HeartbeatExpiredError):
        c.check(t)


def test_self_check_follows_the_injected_clock(storage, tmp_path, clients):
    now = [1_700_000_000.0]
    c = clients(storage, tolerable_misses=1, clock=lambda: now[0])
    t = format_time(now[0])
    c.start(t)
    assert read_beat(tmp_path, t)["ts_ms"] == 1_700_000_000_000, "files carry the writer's clock"
    now[0] += 2.0
    assert c.last_beat_age_s(t) == 2.0
    c.check(t)  # exactly at the bound: not yet past it
    now[0] += 0.5
    with pytest.raises(HeartbeatExpiredError) as e:
        c.check(t)
    msg = str(e.value)
    assert t in msg and "2.5s ago" in msg and "bound 2.0s" in msg and FENCE_TEXT in msg


@pytest.mark.parametrize("hung_write_s", [0.0, 0.3], ids=["fast-store", "slow-store"])
def test_a_pause_past_the_bound_fails_the_check_even_after_beats_resume(storage, tmp_path, clients, hung_write_s):
    """A slow store (or a loaded machine) makes the hung writer's file a little younger than its
    own last beat, which is stamped before the write: the file's judges agree a moment later."""
    hung = clients(storage, tolerable_misses=1)  # bound 2 s
    healthy = clients(storage, tolerable_misses=1)
    short = clients(storage, tolerable_misses=1)
    t_hung, t_healthy, t_short = instant(), instant(1), instant(2)
    real_write = storage.write_bytes

    def write(rel: str, data: bytes) -> None:
        if t_hung in rel:
            time.sleep(hung_write_s)
        real_write(rel, data)

    storage.write_bytes = write  # type: ignore[method-assign]
    for c, t in ((hung, t_hung), (healthy, t_healthy), (short, t_short)):
        c.start(t)
    hung.pause()
    short.pause()
    wait_until(lambda: short.last_beat_age_s(t_short) >= 1.0, what="a pause of half the bound")
    short.resume()  # a hiccup shorter than the bound is harmless: the overdue beat comes at once
    wait_until(lambda: short.last_beat_age_s(t_short) < 0.9, what="the overdue beat after resume")
    wait_until(lambda: hung.last_beat_age_s(t_hung) > hung.bound_s, what="the hung client past its bound")

    with pytest.raises(HeartbeatExpiredError, match=t_hung):
        hung.check(t_hung)
    # the judges agree: this writer looks dead (the file's age trails by at most one write)
    wait_until(lambda: is_lapsed(storage, t_hung, 1.0, 1), timeout=1.0, what="the file's rule to agree")
    healthy.check(t_healthy)
    short.check(t_short)
    assert not is_lapsed(storage, t_healthy, 1.0, 1) and not is_lapsed(storage, t_short, 1.0, 1)

    hung.resume()
    wait_until(lambda: hung.last_beat_age_s(t_hung) < 0.5, timeout=2, what="beats to resume")
    assert not is_lapsed(storage, t_hung, 1.0, 1), "the file looks fresh again..."
    with pytest.raises(HeartbeatExpiredError, match="a pause, hang"):
        hung.check(t_hung)  # ...but a cleaner may have started rolling it back meanwhile


def test_a_dead_beat_thread_fails_the_check(tmp_path, clients):
    class Fatal(BaseException):
        """Not an Exception: escapes the failure handling, as a bug would."""

    storage = Storage(str(tmp_path))
    c = clients(storage, tolerable_misses=5)
    t = instant()
    c.start(t)

    def explode(rel: str, data: bytes) -> None:
        raise Fatal("boom")

    storage.write_bytes = explode  # type: ignore[method-assign]
    wait_until(lambda: not beat_threads(c), timeout=3, what="the beat thread to die")
    with pytest.raises(HeartbeatExpiredError, match="thread is not running.*boom"):
        c.check(t)


# -- failing writes ----------------------------------------------------------------------------------------
def test_start_raises_when_the_first_beat_cannot_be_written(storage, broken, clients):
    seen: list[BaseException] = []
    c = clients(storage, on_failure=seen.append)
    broken.on()
    t = instant()
    with pytest.raises(OSError):
        c.start(t)
    assert c.failures == 1 and len(seen) == 1
    assert c.instants == [] and not beat_threads(c)
    with pytest.raises(HeartbeatExpiredError):
        c.check(t)


def test_failures_are_retried_counted_logged_and_can_recover(storage, tmp_path, broken, clients, caplog):
    seen: list[BaseException] = []
    c = clients(storage, tolerable_misses=2, max_consecutive_failures=3, on_failure=seen.append)
    t = instant()
    c.start(t)
    caplog.set_level(logging.WARNING, logger="multiwriter.heartbeat.client")
    broken.on()
    wait_until(lambda: c.failures >= 2, timeout=3, what="the tick and its quick retry to fail")
    took = c.last_beat_age_s(t)
    assert took < 1.6, f"the retry comes about a quarter interval after the failed tick, not a full one ({took:.2f}s)"
    assert len(seen) == c.failures and all(isinstance(e, OSError) for e in seen)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and t in r.getMessage()]
    assert len(warnings) >= 2 and "in a row" in warnings[0].getMessage()
    c.check(t)  # two misses, well inside the bound: not fatal yet

    broken.off()
    wait_until(lambda: c.last_beat_age_s(t) < 0.5, timeout=2, what="a successful beat")
    c.check(t)  # recovered before the bound
    assert c.failures == 2 and hb_file(tmp_path, t).exists()


def test_failures_that_persist_fail_the_check(tmp_path, clients):
    """Two ways a failing disk ends the batch: the streak reaches its maximum, or the bound passes."""
    streaky_storage, aging_storage = Storage(str(tmp_path / "a")), Storage(str(tmp_path / "b"))
    streaky = clients(streaky_storage, tolerable_misses=2, max_consecutive_failures=3)  # bound 3 s
    aging = clients(aging_storage, tolerable_misses=1, max_consecutive_failures=100)  # bound 2 s
    t = instant()
    breakers = [BrokenBeats(streaky_storage, tmp_path / "a"), BrokenBeats(aging_storage, tmp_path / "b")]
    try:
        for c in (streaky, aging):
            c.start(t)
        for b in breakers:
            b.on()
        aging.check(t)
        wait_until(lambda: aging.last_beat_age_s(t) > aging.bound_s, timeout=4, what="the bound to pass")
        with pytest.raises(HeartbeatExpiredError, match="older than the bound"):
            aging.check(t)
        wait_until(lambda: streaky.failures >= 3, timeout=4, what="three failures in a row")
        assert streaky.last_beat_age_s(t) < streaky.bound_s, "the streak, not the age, fails this one"
        with pytest.raises(HeartbeatExpiredError, match="failed 3 times in a row"):
            streaky.check(t)
    finally:
        for b in breakers:
            b.off()


def test_hand_over_keeps_the_file_and_stops_beating(storage, tmp_path, clients):
    """Another process beats on (a streaming write's tasks and committer): the file stays and
    ages, this client neither rewrites nor deletes it."""
    c = clients(storage)
    t = instant()
    c.start(t)
    before = read_beat(tmp_path, t)["ts_ms"]
    c.hand_over(t)
    assert hb_file(tmp_path, t).exists() and beating_client(t) is None and c.instants == []
    wait_until(lambda: not beat_threads(c), timeout=3, what="the thread to end with nothing in flight")
    time.sleep(1.2)  # longer than one interval: nobody rewrote the file
    assert read_beat(tmp_path, t)["ts_ms"] == before
    c.close()  # closing deletes only what the client still beats
    assert hb_file(tmp_path, t).exists()


def _wait_for_child(pid: int, timeout_s: float = 20.0) -> int:
    """The child's exit code; a child still running after ``timeout_s`` is killed (it hangs, as
    on a lock a parent's thread held at the fork) and the test fails instead of waiting on."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail(f"the forked child did not finish within {timeout_s}s (killed)")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.parametrize("fork_mid_beat", [False, True], ids=["between-beats", "mid-beat"])
def test_a_forked_child_beats_with_its_own_thread(storage, tmp_path, clients, fork_mid_beat):
    """A child forked while its parent beats has none of the parent's threads: the inherited
    client's instants are not the child's (they fail the fence there, the child never beats nor
    deletes their files), closing does not wait for a loop that is not there, and a new instant
    gets a beat loop of the child's own, under a beater id of its own. A fork while the parent's
    beat thread is inside a write (so holds the client's locks) must not leave the child's
    client locked."""
    c = clients(storage)
    t1 = instant()
    writing, forked = threading.Event(), threading.Event()
    real_write = storage.write_bytes

    def write(rel: str, data: bytes) -> None:
        if t1 in rel and threading.current_thread().name.startswith("heartbeat-") and not forked.is_set():
            writing.set()
            forked.wait(timeout=10)  # a slow store: the fork below lands inside this write
        real_write(rel, data)

    if fork_mid_beat:
        storage.write_bytes = write  # type: ignore[method-assign]
    c.start(t1)
    if fork_mid_beat:
        assert writing.wait(timeout=5), "the beat thread never wrote"
    pid = os.fork()
    if pid != 0:
        forked.set()
    if pid == 0:  # the child: report by exit code, never return into pytest
        code = 1
        try:
            try:
                c.check(t1)
            except HeartbeatExpiredError:
                code = 3
                if beating_client(t1) is None and c.instants == []:  # the parent's instant is not the child's
                    t2 = instant(1)
                    c.start(t2)
                    first = read_beat(tmp_path, t2)
                    for _ in range(2):  # two of the child's rounds: it beats its own instant alone
                        seq = read_beat(tmp_path, t2)["seq"]
                        wait_until(lambda seq=seq: read_beat(tmp_path, t2)["seq"] > seq, timeout=3,
                                   what="a beat in the child")
                    c.check(t2)
                    code = 4
                    if first["beater"] != read_beat(tmp_path, t1)["beater"] and read_beat(tmp_path, t1)["pid"] != os.getpid():
                        c.stop(t2)
                        took = time.monotonic()
                        c.close()  # deletes what the child beats, never the parent's file
                        code = 0 if hb_file(tmp_path, t1).exists() and time.monotonic() - took < 1.0 else 2
        finally:
            os._exit(code)
    assert _wait_for_child(pid) == 0
    assert hb_file(tmp_path, t1).exists()
    c.check(t1)  # the parent's own beats go on
