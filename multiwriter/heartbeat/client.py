"""Heartbeats: ``.hoodie/.heartbeat/<T>`` rewritten every interval while instant T is in flight.

Defaults are 10 s x 2 tolerable misses (Hudi uses 60 s): streaming micro-batches last seconds,
the cleaner should reclaim a dead writer's garbage within ~30 s, and a tighter bound makes the
writer's own fence tighter. The cost is one tiny file write per interval.

Everyone judges expiry the same way (:func:`is_lapsed`); a writer also judges itself
(:meth:`HeartbeatClient.check`) right before committing, so a GC pause or hang long enough for a
cleaner to call it dead never ends in a commit.
"""
from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import ConfigError, HeartbeatExpiredError
from ..instant_time import parse_time
from ..storage import Storage
from ..table.layout import heartbeat_path

log = logging.getLogger(__name__)


def expiry_bound_s(interval_s: float, tolerable_misses: int) -> float:
    return interval_s * (tolerable_misses + 1)


def heartbeat_age_s(storage: Storage, instant_time: str, now: float | None = None) -> float | None:
    """Seconds since the newest of (file mtime, time inside); None if there is no file."""
    rel = heartbeat_path(instant_time)
    info = storage.info(rel)
    if info is None:
        return None
    newest = info.mtime_s
    try:
        body = json.loads(storage.read_bytes(rel))
        newest = max(newest, float(body["ts_ms"]) / 1000.0)
    except (ValueError, KeyError, TypeError, OSError):
        pass  # corrupt or vanished: the mtime still tells
    return (time.time() if now is None else now) - newest


def is_lapsed(storage: Storage, instant_time: str, interval_s: float, tolerable_misses: int, now: float | None = None) -> bool:
    """True when the writer of ``instant_time`` must be considered dead.

    A missing heartbeat for an instant younger than the bound is NOT lapsed: its writer may not
    have written the first beat yet (Hudi's HUDI-5675 rolled back a live commit that way).
    """
    bound = expiry_bound_s(interval_s, tolerable_misses)
    now = time.time() if now is None else now
    age = heartbeat_age_s(storage, instant_time, now)
    if age is None:
        return now - parse_time(instant_time) > bound
    return age > bound


@dataclass
class _Beat:
    last_ok: float  # by the writer's own clock
    consecutive_failures: int = 0
    worst_gap: float = 0.0  # the longest time between two successful beats


class HeartbeatClient:
    """One daemon thread beating every in-flight instant of one writer."""

    def __init__(
        self,
        storage: Storage,
        *,
        writer_id: str = "",
        interval_s: float = 10.0,
        tolerable_misses: int = 2,
        clock: Callable[[], float] = time.time,
        max_consecutive_failures: int = 3,
        on_beat: Callable[[float], None] | None = None,
        on_failure: Callable[[BaseException], None] | None = None,
    ) -> None:
        if interval_s < 1.0:
            raise ConfigError(f"heartbeat interval_s={interval_s} must be >= 1.0")
        if tolerable_misses < 0:
            raise ConfigError(f"heartbeat tolerable_misses={tolerable_misses} must be >= 0")
        self.storage = storage
        self.writer_id = writer_id
        self.interval_s = interval_s
        self.tolerable_misses = tolerable_misses
        self.clock = clock
        self.max_consecutive_failures = max_consecutive_failures
        self.on_beat = on_beat
        self.on_failure = on_failure
        self.failures = 0
        self._beats: dict[str, _Beat] = {}
        self._mu = threading.Lock()
        self._wake = threading.Event()
        self._stop = False
        self._paused = False
        self._thread: threading.Thread | None = None
        self._host = socket.gethostname()

    @property
    def bound_s(self) -> float:
        return expiry_bound_s(self.interval_s, self.tolerable_misses)

    # -- lifecycle ------------------------------------------------------------------
    def start(self, instant_time: str) -> None:
        """Write the first beat synchronously (raises on failure), then keep beating."""
        self._write(instant_time)
        with self._mu:
            self._beats[instant_time] = _Beat(self.clock())
            self._ensure_thread()
        if self.on_beat:
            self.on_beat(0.0)

    def stop(self, instant_time: str) -> None:
        with self._mu:
            self._beats.pop(instant_time, None)
        try:
            self.storage.delete(heartbeat_path(instant_time))
        except OSError as e:
            log.warning("could not delete heartbeat of %s: %s", instant_time, e)

    def close(self) -> None:
        with self._mu:
            instants = list(self._beats)
        for t in instants:
            self.stop(t)
        self._stop = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 5)
            self._thread = None

    # -- test hooks (simulate a GC pause or a hung writer) ----------------------------------
    def pause(self) -> None:
        self._paused = True

    def resume(self) -> None:
        self._paused = False

    # -- self-check ---------------------------------------------------------------------
    def last_beat_age_s(self, instant_time: str) -> float | None:
        with self._mu:
            b = self._beats.get(instant_time)
        return None if b is None else self.clock() - b.last_ok

    def check(self, instant_time: str) -> None:
        """The commit fence: raise HeartbeatExpiredError unless our own beats are fresh."""
        with self._mu:
            b = self._beats.get(instant_time)
        problem = None
        if b is None:
            problem = "is not being beaten by this writer"
        elif self._thread is None or not self._thread.is_alive():
            problem = "has no live heartbeat thread"
        elif b.consecutive_failures >= self.max_consecutive_failures:
            problem = f"failed to write its heartbeat {b.consecutive_failures} times in a row"
        elif b.worst_gap > self.bound_s:
            problem = f"went {b.worst_gap:.1f}s without a beat (a pause or hang), over the bound of {self.bound_s:.1f}s"
        elif self.clock() - b.last_ok > self.bound_s:
            problem = f"last beat {self.clock() - b.last_ok:.1f}s ago, over the bound of {self.bound_s:.1f}s"
        if problem:
            raise HeartbeatExpiredError(
                f"instant {instant_time} {problem}; another writer or the cleaner may already consider "
                "this writer dead, so it must not commit: the batch will be retried or aborted"
            )

    # -- beating --------------------------------------------------------------------------
    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._stop = False
            self._thread = threading.Thread(target=self._run, name=f"heartbeat-{self.writer_id}", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        retry_soon = False  # start() already wrote the first beat
        while not self._stop:
            self._wake.wait(self.interval_s / 4 if retry_soon else self.interval_s)
            self._wake.clear()
            if not self._stop:
                retry_soon = self._beat_all()

    def _beat_all(self) -> bool:
        if self._paused:
            return False
        with self._mu:
            instants = list(self._beats)
        failed = False
        for t in instants:
            try:
                self._write(t)
            except OSError as e:
                failed = True
                self.failures += 1
                with self._mu:
                    if t in self._beats:
                        self._beats[t].consecutive_failures += 1
                log.warning("heartbeat write for %s failed (%d in a row): %s", t, self._beats.get(t, _Beat(0)).consecutive_failures, e)
                if self.on_failure:
                    self.on_failure(e)
                continue
            with self._mu:
                b = self._beats.get(t)
                if b is None:  # stopped meanwhile: do not resurrect its file
                    self.storage.delete(heartbeat_path(t))
                    continue
                age = self.clock() - b.last_ok
                b.worst_gap = max(b.worst_gap, age)
                b.last_ok, b.consecutive_failures = self.clock(), 0
            if self.on_beat:
                self.on_beat(age)
        return failed

    def _write(self, instant_time: str) -> None:
        body = {"ts_ms": int(time.time() * 1000), "writer_id": self.writer_id, "host": self._host,
                "pid": os.getpid(), "instant": instant_time}
        self.storage.write_bytes(heartbeat_path(instant_time), json.dumps(body).encode())
