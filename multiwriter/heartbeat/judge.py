"""Judging heartbeats by observed change, on the judge's own monotonic clock.

A writer is dead when *no new beat has appeared for its bound*, as measured by the judge's
monotonic clock from the moment the judge first saw the current beat (or first saw the file
missing). Nothing compares a time written by one host with a time read on another, so wall
clocks (writer, judge, store) may disagree by any amount; what must hold is that monotonic
clocks progress at about the same rate. Store mtimes are not needed either: a beat is told apart
from the previous one by its sequence number (``seq`` and ``beater`` in the JSON body), or, for
files without one (Hudi's JVM writers, files of earlier releases), by mtime, size and ``ts_ms``.

Each beat says how to judge it: ``interval_ms`` and ``tolerable_misses`` in the body give the
writer's bound ``interval * (misses + 1)``. The judge's own settings apply only to beats that
carry none, and to a file never seen present.

Two kinds of judges use one :class:`HeartbeatJudge`:

* a long-running judge (the companion cleaner: one :class:`~multiwriter.cleaner.job.Cleaner`
  across ``run_once`` calls) calls :meth:`HeartbeatJudge.observe` / :meth:`is_lapsed` on each run;
  the judge remembers, per instant, the last beat it saw and when it first saw it;
* a one-shot judge (``multiwriter clean --once``, a fresh cleaner's first run, ``multiwriter
  status``) calls :meth:`HeartbeatJudge.decide`, which polls the undecided instants together
  until each beat changes (alive) or stays unchanged for its bound (lapsed), at most
  ``max_observe_s``; what is still undecided then is left alive, to a later run.

Clock skew is made visible, not relied on: when the judge sees a new beat of an instant whose
previous beat it had seen, ``ts_ms`` minus the judge's wall clock is the skew estimate (the beat
was written between the two observations, so the true skew lies in ``[skew, skew + gap]``);
``on_skew(writer_id, skew_s)`` reports it (the cleaner sets a gauge) and a warning is logged
when it is beyond ``skew_warn_s`` for sure.
"""
from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..storage import Storage
from ..format.layout import heartbeat_path
from .client import MAX_INTERVAL_S, MAX_TOLERABLE_MISSES, expiry_bound_s

log = logging.getLogger(__name__)

__all__ = [
    "ALIVE",
    "DEFAULT_MAX_OBSERVE_S",
    "DEFAULT_SKEW_WARN_S",
    "LAPSED",
    "UNDECIDED",
    "Beat",
    "HeartbeatJudge",
    "Observation",
    "read_beat",
]

ALIVE, LAPSED, UNDECIDED = "alive", "lapsed", "undecided"
DEFAULT_SKEW_WARN_S = 5.0
#: a one-shot judge waits at most this long for the undecided instants (a 10 s x 2 writer needs
#: 30 s to be judged dead; one beating every 60 s is seen alive within a minute)
DEFAULT_MAX_OBSERVE_S = 60.0
DEFAULT_POLL_S = 0.2
FORGET_AFTER_S = 3600.0  # memory of an instant not observed for this long is dropped
_MISSING = ("missing",)


@dataclass(frozen=True)
class Beat:
    """What one read of ``.hoodie/.heartbeat/<T>`` showed."""

    instant: str
    present: bool
    key: tuple  # equal keys = the same beat; a new beat has a new key
    ts_s: float | None = None  # the writer's wall-clock time recorded in the beat
    interval_s: float | None = None  # the writer's settings, when the beat records them
    tolerable_misses: int | None = None
    writer_id: str | None = None
    seq: int | None = None
    mtime_s: float | None = None
    refused: str | None = None  # settings the beat recorded beyond a writer's limits (ignored)

    @property
    def bound_s(self) -> float | None:
        """The writer's own bound, when the beat records its settings."""
        if self.interval_s is None or self.tolerable_misses is None:
            return None
        return expiry_bound_s(self.interval_s, self.tolerable_misses)


#: a beat is a small JSON document; a larger file is judged by its size and time alone
MAX_BEAT_BYTES = 1 << 20


def read_beat(storage: Storage, instant_time: str) -> Beat:
    """Read the heartbeat of ``instant_time``. A file that vanishes between listing and reading
    counts as missing; an unparseable one is told apart by mtime and size. Other storage errors
    propagate: a judge that cannot see must not declare anyone dead."""
    rel = heartbeat_path(instant_time)
    got = storage.read_head(rel, MAX_BEAT_BYTES)  # one GET on S3: the entry and the bytes
    if got is None:
        return Beat(instant_time, False, _MISSING)
    info, data = got
    try:
        body = json.loads(data)
    except (ValueError, RecursionError):  # not JSON, or nested too deep
        body = None
    if not isinstance(body, dict):
        body = {}
    ts = _finite(body.get("ts_ms"))
    interval_s, misses, refused = _settings(body)
    seq = body.get("seq")
    seq = seq if isinstance(seq, int) and not isinstance(seq, bool) else None
    if seq is not None:
        key: tuple = ("seq", str(body.get("beater", "")), seq)
    else:  # Hudi's JVM writers, earlier releases: what the file looks like
        key = ("stat", info.mtime_s, info.size, ts)
    writer = body.get("writer_id")
    return Beat(
        instant_time,
        True,
        key,
        ts_s=None if ts is None else ts / 1000.0,
        interval_s=interval_s,
        tolerable_misses=misses,
        writer_id=writer if isinstance(writer, str) else None,
        seq=seq,
        mtime_s=info.mtime_s,
        refused=refused,
    )


def _settings(body: dict) -> tuple[float | None, int | None, str | None]:
    """The writer's (interval_s, tolerable_misses) recorded in a beat, and a description of
    settings refused: both None when either is absent, or outside what a writer may be
    configured with (the judge's settings then apply)."""
    raw_interval, misses = body.get("interval_ms"), body.get("tolerable_misses")
    if raw_interval is None or misses is None:
        return None, None, None
    interval_ms = _finite(raw_interval)
    interval_ok = interval_ms is not None and 0 < interval_ms <= MAX_INTERVAL_S * 1000.0
    misses_ok = isinstance(misses, int) and not isinstance(misses, bool) and 0 <= misses <= MAX_TOLERABLE_MISSES
    if not (interval_ok and misses_ok):
        return None, None, f"interval_ms={str(raw_interval)[:40]}, tolerable_misses={str(misses)[:40]}"
    assert interval_ms is not None and isinstance(misses, int)
    return interval_ms / 1000.0, misses, None


def _finite(x: object) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    try:
        f = float(x)
    except OverflowError:  # an int beyond any float (10**400)
        return None
    return f if math.isfinite(f) else None


@dataclass(frozen=True)
class Observation:
    """The judge's view of one instant after an observation."""

    instant: str
    beat: Beat
    verdict: str  # alive | lapsed | undecided
    unchanged_s: float  # how long (judge's monotonic clock) the current beat, or absence, has been seen
    bound_s: float
    bound_from: str  # "writer" (recorded in the beat) or "judge" (the judge's defaults)
    skew_s: float | None  # the writer's clock minus the judge's, seen at the newest beat; None: not yet

    @property
    def lapsed(self) -> bool:
        return self.verdict == LAPSED


@dataclass
class _Memory:
    key: tuple
    since: float  # monotonic: when the judge first saw this beat (or this absence)
    last_seen: float  # monotonic: the latest observation
    changed: bool  # the judge saw a new beat (or the file go) at least once
    writer_bound_s: float | None  # the bound the newest beat carrying one recorded
    skew_s: float | None = None


class HeartbeatJudge:
    """Tells dead writers from live ones by watching their heartbeats change; see the module
    docstring. ``interval_s`` / ``tolerable_misses`` judge beats that carry no settings.
    Thread-safe; one per long-running judge, kept for its life (its memory is the point)."""

    def __init__(
        self,
        storage: Storage,
        *,
        interval_s: float = 10.0,
        tolerable_misses: int = 2,
        max_observe_s: float = DEFAULT_MAX_OBSERVE_S,
        poll_s: float = DEFAULT_POLL_S,
        skew_warn_s: float = DEFAULT_SKEW_WARN_S,
        on_skew: Callable[[str, float], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        name: str = "",
    ) -> None:
        self.storage = storage
        self.interval_s = float(interval_s)
        self.tolerable_misses = int(tolerable_misses)
        self.max_observe_s = float(max_observe_s)
        self.poll_s = float(poll_s)
        self.skew_warn_s = float(skew_warn_s)
        self.on_skew = on_skew
        self.monotonic = monotonic
        self.wall = wall
        self.sleep = sleep
        self.name = name
        self._memory: dict[str, _Memory] = {}
        self._skews: dict[str, float] = {}  # writer -> newest skew estimate
        self._warned: dict[str, float] = {}  # writer -> monotonic time of the last skew warning
        self._mu = threading.Lock()
        self._pruned = monotonic()

    @property
    def default_bound_s(self) -> float:
        return expiry_bound_s(self.interval_s, self.tolerable_misses)

    @property
    def skews(self) -> dict[str, float]:
        """Writer id -> the newest skew estimate (writer's clock minus the judge's, seconds)."""
        with self._mu:
            return dict(self._skews)

    def max_bound_s(self) -> float:
        """The largest bound in use: the judge's default and every remembered writer's."""
        with self._mu:
            bounds = [m.writer_bound_s for m in self._memory.values() if m.writer_bound_s is not None]
        return max([self.default_bound_s, *bounds])

    def seen(self, instant_time: str) -> bool:
        with self._mu:
            return instant_time in self._memory

    # -- observing -----------------------------------------------------------------------------
    def observe(self, instant_time: str) -> Observation:
        """Read the heartbeat of ``instant_time`` once and update the memory."""
        beat = read_beat(self.storage, instant_time)
        now = self.monotonic()
        skew_seen: tuple[str, float, float] | None = None
        with self._mu:
            m = self._memory.get(instant_time)
            if m is None:
                m = _Memory(beat.key, now, now, False, None)
                self._memory[instant_time] = m
            elif m.key != beat.key:
                gap = now - m.last_seen
                m.key, m.since, m.changed = beat.key, now, True
                if beat.present and beat.ts_s is not None:
                    m.skew_s = beat.ts_s - self.wall()
                    writer = beat.writer_id or "?"
                    self._skews[writer] = m.skew_s
                    skew_seen = (writer, m.skew_s, gap)
            if beat.refused and (m.since == now):  # once per beat: a new beat or a first sighting
                log.warning("%s records %s, beyond 0 < interval <= %g s and 0 <= misses <= %d: judged by the judge's "
                            "own settings", heartbeat_path(instant_time), beat.refused, MAX_INTERVAL_S,
                            MAX_TOLERABLE_MISSES)
            m.last_seen = now
            if beat.bound_s is not None:
                m.writer_bound_s = beat.bound_s
            bound_from = "writer" if m.writer_bound_s is not None else "judge"
            bound = m.writer_bound_s if m.writer_bound_s is not None else self.default_bound_s
            unchanged = now - m.since
            verdict = LAPSED if unchanged > bound else (ALIVE if m.changed else UNDECIDED)
            obs = Observation(instant_time, beat, verdict, unchanged, bound, bound_from, m.skew_s)
            self._prune(now)
        if skew_seen is not None:
            self._report_skew(*skew_seen, now=now)
        return obs

    def is_lapsed(self, instant_time: str) -> bool:
        """Observe once; True when no new beat appeared for the writer's bound on this judge's
        clock. A first sighting is never lapsed: without a :meth:`decide` it is left to a later
        observation."""
        return self.observe(instant_time).lapsed

    def decide(self, instants: Iterable[str], *, max_wait_s: float | None = None) -> dict[str, Observation]:
        """Observe ``instants`` together until each one's beat changes or stays unchanged for its
        bound, for at most ``max_wait_s`` (default ``max_observe_s``). Instants the memory has
        already decided cost one read. Returns the last observation of each."""
        cap = self.max_observe_s if max_wait_s is None else float(max_wait_s)
        start = self.monotonic()
        obs = {t: self.observe(t) for t in dict.fromkeys(instants)}
        while True:
            open_ = [o for o in obs.values() if o.verdict == UNDECIDED]
            if not open_:
                return obs
            left = start + cap - self.monotonic()
            if left <= 0:
                return obs
            due = min(o.bound_s - o.unchanged_s for o in open_)  # the first that may lapse
            self.sleep(max(0.005, min(self.poll_s, due + 0.01, left)))
            for o in open_:
                obs[o.instant] = self.observe(o.instant)

    def forget(self, instant_time: str) -> None:
        with self._mu:
            self._memory.pop(instant_time, None)

    # -- internals -------------------------------------------------------------------------------
    def _prune(self, now: float) -> None:
        """Drop the memory of instants not observed for ``FORGET_AFTER_S`` (caller holds _mu)."""
        if now - self._pruned < 60.0:
            return
        self._pruned = now
        for t in [t for t, m in self._memory.items() if now - m.last_seen > FORGET_AFTER_S]:
            del self._memory[t]

    def _report_skew(self, writer: str, skew: float, gap: float, *, now: float) -> None:
        if self.on_skew is not None:
            try:
                self.on_skew(writer, skew)
            except Exception:  # a metrics bug must not stop judging
                log.exception("heartbeat skew hook failed")
        # the beat was written between the two observations: the true skew is in [skew, skew+gap]
        if not (skew > self.skew_warn_s or skew + gap < -self.skew_warn_s):
            return
        with self._mu:
            last = self._warned.get(writer)
            if last is not None and now - last < 600.0:
                return
            self._warned[writer] = now
        log.warning(
            "clock skew: writer %r's heartbeat clock is %+.1fs from this judge's%s (warning above %.1fs); "
            "liveness does not depend on it, but instant times and logs from these hosts disagree",
            writer, skew, f" ({self.name})" if self.name else "", self.skew_warn_s,
        )


def skew_beyond(skew_s: float | None, threshold_s: float, interval_s: float = 0.0) -> bool:
    """Is a skew estimate surely beyond ``threshold_s``? An estimate taken up to ``interval_s``
    after the beat was written reads up to that much low."""
    if skew_s is None:
        return False
    return skew_s > threshold_s or skew_s + interval_s < -threshold_s
